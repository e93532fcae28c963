//! Invalidate Extended Transport Header (IBA 9.3.7, IETH): the R_Key a SEND with
//! invalidate asks the responder to invalidate.

use super::Header;
use core::fmt;

pub const HEADER_LEN: usize = super::layout::IETH_LEN;

super::view::fixed_view!(Header::Ieth, HEADER_LEN);

super::view::plain_fields! {
    len: HEADER_LEN;
    rkey / set_rkey: u32 = 0..4,
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IETH rkey={:#x}", self.rkey)
    }
}
