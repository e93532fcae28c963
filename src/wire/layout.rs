//! Header lengths of the RoCEv2 transport headers (IBA 9.2 to 9.3, Annex A17.9.3).
//!
//! A leaf: it imports nothing of `wire`. The opcode table computes header offsets from
//! these lengths and every header module checks its field layout against them, so no
//! header module needs another one for a length (the BTH view names the `Opcode` type,
//! and the opcode table needs the BTH length: both now come here instead).

/// Base Transport Header (IBA 9.2, Figure 112).
pub const BTH_LEN: usize = 12;
/// Datagram Extended Transport Header (IBA 9.3.2).
pub const DETH_LEN: usize = 8;
/// RDMA Extended Transport Header (IBA 9.3.3).
pub const RETH_LEN: usize = 16;
/// Atomic Extended Transport Header (IBA 9.3.4).
pub const ATOMIC_ETH_LEN: usize = 28;
/// ACK Extended Transport Header (IBA 9.3.5).
pub const AETH_LEN: usize = 4;
/// Atomic Acknowledge Extended Transport Header (IBA 9.3.6).
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// Immediate Data Extended Transport Header (IBA 9.3.7).
pub const IMMDT_LEN: usize = 4;
/// Invalidate Extended Transport Header (IBA 9.3.8).
pub const IETH_LEN: usize = 4;
/// The reserved bytes after the BTH of a CNP (Annex A17.9.3).
pub const CNP_LEN: usize = 16;
