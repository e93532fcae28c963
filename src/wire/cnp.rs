//! Congestion Notification Packet (RoCEv2, IBA Annex A17.9.3): a BTH with opcode 0x81,
//! 16 reserved bytes and the ICRC. The destination QP is the QP whose traffic was marked.

use super::{Header, Result};

/// The 16 reserved bytes after the BTH.
pub const HEADER_LEN: usize = super::layout::CNP_LEN;

super::view::fixed_view!(Header::Cnp, HEADER_LEN);

/// A CNP carries nothing beyond its BTH; the reserved bytes are ignored on parse and
/// written as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr;

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr)
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.buffer.as_mut()[..HEADER_LEN].fill(0);
    }
}
