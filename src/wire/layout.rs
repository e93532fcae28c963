//! Header lengths of the RoCEv2 transport headers (IBA 9.2 and 9.3; each header's module
//! cites its figure).
//!
//! A leaf: it imports nothing of `wire`. The opcode table computes header offsets from
//! these lengths and every header module checks its field layout against them at compile
//! time. The BTH view needs the `Opcode` type and the opcode table needs the BTH's length;
//! with the lengths here, `opcode` does not import `bth` and the two form no cycle.

/// Base Transport Header ([`bth`](super::bth)).
pub const BTH_LEN: usize = 12;
/// Datagram Extended Transport Header ([`deth`](super::deth)).
pub const DETH_LEN: usize = 8;
/// RDMA Extended Transport Header ([`reth`](super::reth)).
pub const RETH_LEN: usize = 16;
/// Atomic Extended Transport Header ([`atomic`](super::atomic)).
pub const ATOMIC_ETH_LEN: usize = 28;
/// ACK Extended Transport Header ([`aeth`](super::aeth)).
pub const AETH_LEN: usize = 4;
/// Atomic Acknowledge Extended Transport Header ([`atomic::ack`](super::atomic::ack)).
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// Immediate Data Extended Transport Header ([`immdt`](super::immdt)).
pub const IMMDT_LEN: usize = 4;
/// Invalidate Extended Transport Header ([`ieth`](super::ieth)).
pub const IETH_LEN: usize = 4;
/// The reserved bytes after the BTH of a CNP ([`cnp`](super::cnp)).
pub const CNP_LEN: usize = 16;
