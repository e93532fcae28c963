//! `roce-emu daemon`: one port (UDP, TAP, AF_PACKET) shared by the programs of a machine.
//!
//! The engines stay in the programs' processes, next to their memory (design
//! real-programs.md §1.3): the daemon owns the port and moves packets. Each attached
//! process gets a block of QPNs ([`lease`]); the daemon routes every received packet by its
//! BTH DestQP to the block's owner and sends what the processes hand it, through
//! shared-memory rings with an eventfd doorbell (no system call per packet under load),
//! with a Unix socket for control and fd passing.
//!
//! Built so far: the lease table with its quarantine. The rings, the L2 of TAP and
//! AF_PACKET ports, the control protocol and the process side come next (issue 15).

pub mod client;
pub mod control;
pub mod fault;
pub mod lease;
mod open;
pub mod port;
pub mod report;
pub mod server;
