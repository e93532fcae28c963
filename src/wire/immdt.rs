//! Immediate Extended Transport Header (IBA 9.3.2, ImmDt): 4 bytes of immediate data
//! delivered in the receiver's completion.

use super::Header;
use core::fmt;

pub const HEADER_LEN: usize = super::layout::IMMDT_LEN;

super::view::fixed_view!(Header::ImmDt, HEADER_LEN);

super::view::plain_fields! {
    len: HEADER_LEN;
    /// The immediate value as the wire carries it (big-endian).
    imm / set_imm: u32 = 0..4,
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ImmDt {:#010x}", self.imm)
    }
}
