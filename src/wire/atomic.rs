//! Atomic Extended Transport Header (IBA 9.3.4, Figure 117) and Atomic Acknowledge
//! Extended Transport Header (IBA 9.3.6, Figure 119).

use super::field::*;
use super::Header;
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

super::view::plain_fields! {
    /// AtomicETH: where and what a COMPARE_SWAP or FETCH_ADD does.
    len: HEADER_LEN;
    /// Remote address; must be 8-byte aligned (the responder checks it, not the wire layer).
    va / set_va: u64 = field::VA,
    rkey / set_rkey: u32 = field::RKEY,
    /// Swap value (COMPARE_SWAP) or addend (FETCH_ADD).
    swap_add / set_swap_add: u64 = field::SWAP_ADD,
    /// Compare value (COMPARE_SWAP only).
    compare / set_compare: u64 = field::COMPARE,
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
    use super::super::Header;
    use super::{field, ACK_HEADER_LEN};

    super::super::view::fixed_view!(Header::AtomicAckEth, ACK_HEADER_LEN);

    super::super::view::plain_fields! {
        /// AtomicAckETH: the original remote value an atomic operation found.
        len: ACK_HEADER_LEN;
        /// The remote data as it was before the operation.
        orig / set_orig: u64 = field::ORIG,
    }
}

pub use ack::Repr as AckRepr;

impl fmt::Display for AckRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AtomicAckETH orig={:#x}", self.orig)
    }
}
