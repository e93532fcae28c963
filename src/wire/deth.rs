//! Datagram Extended Transport Header (IBA 9.3.2, Figure 115): Q_Key and source QP of a
//! UD packet.

use super::field::*;
use super::{Header, Result};
use core::fmt;

mod field {
    use super::Field;
    pub const QKEY: Field = 0..4;
    /// Byte 4 is reserved.
    pub const SRC_QPN: Field = 5..8;
}

pub const HEADER_LEN: usize = field::SRC_QPN.end;
// The fields end where the opcode table (via `layout`) says this header ends.
const _: () = assert!(HEADER_LEN == super::layout::DETH_LEN);

super::view::fixed_view!(Header::Deth, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    #[inline]
    pub fn qkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::QKEY)
    }
    #[inline]
    pub fn src_qpn(&self) -> u32 {
        u24_at(self.buffer.as_ref(), field::SRC_QPN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn set_qkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::QKEY, v)
    }
    /// Writes the source QPN and zeroes the reserved byte before it.
    #[inline]
    pub fn set_src_qpn(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 4..8, v & super::bth::QPN_MASK)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub qkey: u32,
    /// Source QP, 24 bits.
    pub src_qpn: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            qkey: p.qkey(),
            src_qpn: p.src_qpn(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_qkey(self.qkey);
        p.set_src_qpn(self.src_qpn);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DETH qkey={:#x} srcQP={:#x}", self.qkey, self.src_qpn)
    }
}
