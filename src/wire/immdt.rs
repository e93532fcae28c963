//! Immediate Extended Transport Header (IBA 9.3.2, ImmDt): 4 bytes of immediate data
//! delivered in the receiver's completion.

use super::field::*;
use super::{Header, Result};
use core::fmt;

pub const HEADER_LEN: usize = super::layout::IMMDT_LEN;

super::view::fixed_view!(Header::ImmDt, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The immediate value as the wire carries it (big-endian).
    #[inline]
    pub fn imm(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0..4)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn set_imm(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 0..4, v)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub imm: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr { imm: p.imm() })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_imm(self.imm)
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ImmDt {:#010x}", self.imm)
    }
}
