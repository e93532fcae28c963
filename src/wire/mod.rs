//! Bytes on the wire: every RoCEv2 header, the opcode table, the ICRC and the
//! Ethernet/IP/UDP framing around them.
//!
//! # The contract (after smoltcp's `wire`)
//!
//! Every header has two levels:
//!
//! - a **view**, `Packet<T: AsRef<[u8]>>`, which wraps a buffer without copying it.
//!   `Packet::new_unchecked` wraps any buffer; `check_len` proves that no accessor will
//!   panic; `Packet::new_checked` does both and is the only constructor to use on
//!   untrusted input. Getters need `T: AsRef<[u8]>`, setters `T: AsMut<[u8]>`.
//! - a **Repr**, a small owned `Copy` struct of the meaningful fields, with
//!   `parse(&Packet) -> Result<Repr>` (never panics once `check_len` passed) and
//!   `emit(&self, &mut Packet)` (never panics if the buffer holds at least
//!   `Repr::buffer_len()` bytes). Reserved fields are dropped on parse and written as zero.
//!
//! `new_checked` is for input only: a reused output buffer may hold stale bytes, so emit
//! always goes through `new_unchecked` and writes every byte of the header.
//!
//! Parsing never allocates. Errors are [`WireError`]: small, `Copy`, and they say which
//! header failed, how many bytes it needed and how many there were.
//!
//! Layout of a RoCEv2 packet (IBA Annex A17.4): Ethernet, IPv4 or IPv6, UDP to port 4791,
//! then BTH, the extension headers the opcode calls for (in the order DETH, RETH,
//! AtomicETH, AETH, AtomicAckETH, ImmDt, IETH), payload, 0-3 pad bytes, and the 4-byte
//! invariant CRC.
//!
//! Management datagrams ride on that as the payload of a UD SEND ONLY to QP1: the 256-byte
//! MAD, its common header in [`mad`], the communication manager's messages and rdma_cm's
//! private-data header in [`cm`].

pub mod aeth;
pub mod atomic;
pub mod bth;
pub mod cm;
pub mod cnp;
pub mod deth;
pub mod ecn;
pub mod error;
pub mod field;
pub mod frame;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod layout;
pub mod mad;
pub mod opcode;
pub mod pretty;
pub mod psn;
pub mod reth;
pub mod roce;
mod view;

pub use aeth::{NakCode, Repr as AethRepr, Syndrome};
pub use atomic::{AckRepr as AtomicAckEthRepr, Repr as AtomicEthRepr};
pub use bth::Repr as BthRepr;
pub use cm::CmMad;
pub use deth::Repr as DethRepr;
pub use ecn::Ecn;
pub use error::{Header, WireError};
pub use frame::{FrameRepr, IpRepr, RoceFrame, ROCE_UDP_PORT};
pub use icrc::ICRC_LEN;
pub use ieth::Repr as IethRepr;
pub use immdt::Repr as ImmDtRepr;
pub use mad::Repr as MadRepr;
pub use opcode::{Opcode, OpcodeInfo, Transport};
pub use psn::Psn;
pub use reth::Repr as RethRepr;
pub use roce::{Packet as RocePacket, Repr as RoceRepr};

/// Result of a wire operation.
pub type Result<T> = core::result::Result<T, WireError>;
