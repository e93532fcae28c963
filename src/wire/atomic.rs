//! Atomic Extended Transport Header (IBA 9.3.4, Figure 117) and Atomic Acknowledge
//! Extended Transport Header (IBA 9.3.6, Figure 119).

use super::field::*;
use super::{Header, Result};
use core::fmt;

mod field {
    use super::Field;
    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const SWAP_ADD: Field = 12..20;
    pub const COMPARE: Field = 20..28;
    pub const ORIG: Field = 0..8;
}

/// Length of the AtomicETH.
pub const HEADER_LEN: usize = field::COMPARE.end;
// The fields end where the opcode table (via `layout`) says this header ends.
const _: () = assert!(HEADER_LEN == super::layout::ATOMIC_ETH_LEN);
/// Length of the AtomicAckETH.
pub const ACK_HEADER_LEN: usize = field::ORIG.end;
// Likewise for the AtomicAckETH.
const _: () = assert!(ACK_HEADER_LEN == super::layout::ATOMIC_ACK_ETH_LEN);

super::view::fixed_view!(Header::AtomicEth, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    #[inline]
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::VA)
    }
    #[inline]
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::RKEY)
    }
    #[inline]
    pub fn swap_add(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::SWAP_ADD)
    }
    #[inline]
    pub fn compare(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn set_va(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::VA, v)
    }
    #[inline]
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::RKEY, v)
    }
    #[inline]
    pub fn set_swap_add(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::SWAP_ADD, v)
    }
    #[inline]
    pub fn set_compare(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::COMPARE, v)
    }
}

/// AtomicETH: where and what a COMPARE_SWAP or FETCH_ADD does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Remote address; must be 8-byte aligned (the responder checks it, not the wire layer).
    pub va: u64,
    pub rkey: u32,
    /// Swap value (COMPARE_SWAP) or addend (FETCH_ADD).
    pub swap_add: u64,
    /// Compare value (COMPARE_SWAP only).
    pub compare: u64,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            va: p.va(),
            rkey: p.rkey(),
            swap_add: p.swap_add(),
            compare: p.compare(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_va(self.va);
        p.set_rkey(self.rkey);
        p.set_swap_add(self.swap_add);
        p.set_compare(self.compare);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "AtomicETH va={:#x} rkey={:#x} swap/add={:#x} compare={:#x}",
            self.va, self.rkey, self.swap_add, self.compare
        )
    }
}

/// The AtomicAckETH view.
pub mod ack {
    use super::super::field::*;
    use super::super::Header;
    use super::{field, ACK_HEADER_LEN};

    super::super::view::fixed_view!(Header::AtomicAckEth, ACK_HEADER_LEN);

    impl<T: AsRef<[u8]>> Packet<T> {
        /// The remote data as it was before the operation.
        #[inline]
        pub fn orig(&self) -> u64 {
            u64_at(self.buffer.as_ref(), field::ORIG)
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
        #[inline]
        pub fn set_orig(&mut self, v: u64) {
            set_u64(self.buffer.as_mut(), field::ORIG, v)
        }
    }
}

/// AtomicAckETH: the original remote value an atomic operation found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AckRepr {
    pub orig: u64,
}

impl AckRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &ack::Packet<T>) -> Result<AckRepr> {
        p.check_len()?;
        Ok(AckRepr { orig: p.orig() })
    }
    pub const fn buffer_len(&self) -> usize {
        ACK_HEADER_LEN
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ack::Packet<T>) {
        p.set_orig(self.orig);
    }
}

impl fmt::Display for AckRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AtomicAckETH orig={:#x}", self.orig)
    }
}
