//! RDMA Extended Transport Header (IBA 9.3.3, Figure 116): the remote address, R_Key and
//! DMA length of an RDMA WRITE (first/only) or READ request.

use super::field::*;
use super::Header;
use core::fmt;

mod field {
    use super::Field;
    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const DMA_LEN: Field = 12..16;
}

pub const HEADER_LEN: usize = field::DMA_LEN.end;
// The fields end where the opcode table (via `layout`) says this header ends.
const _: () = assert!(HEADER_LEN == super::layout::RETH_LEN);

super::view::fixed_view!(Header::Reth, HEADER_LEN);

super::view::plain_fields! {
    len: HEADER_LEN;
    /// Remote virtual address.
    va / set_va: u64 = field::VA,
    rkey / set_rkey: u32 = field::RKEY,
    /// Length of the whole message in bytes (not of this packet).
    dma_len / set_dma_len: u32 = field::DMA_LEN,
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RETH va={:#x} rkey={:#x} dma_len={}",
            self.va, self.rkey, self.dma_len
        )
    }
}
