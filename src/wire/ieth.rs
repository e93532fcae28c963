//! Invalidate Extended Transport Header (IBA 9.3.7, IETH): the R_Key a SEND with
//! invalidate asks the responder to invalidate.

use super::field::*;
use super::{Header, Result};
use core::fmt;

pub const HEADER_LEN: usize = super::layout::IETH_LEN;

super::view::fixed_view!(Header::Ieth, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    #[inline]
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0..4)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 0..4, v)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub rkey: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr { rkey: p.rkey() })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_rkey(self.rkey)
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IETH rkey={:#x}", self.rkey)
    }
}
