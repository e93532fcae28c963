//! roce-emu: a user-space RoCEv2 software NIC.
//!
//! Layers (each may import only those below it; `tests/layering.rs` checks this):
//!
//! ```text
//!        cli
//!         |
//!       engine ---> mem      (engine is sans-IO: packets and time in, packets, deadlines,
//!         |                   completions out)
//!       wire                 (bytes: headers, opcode table, ICRC, frames; imports nothing of ours)
//! ```
//!
//! `mem` is registered memory (PDs, MRs, L_Key/R_Key checks, SGE copies); of ours it imports
//! only the seeded [`rng`] (for key bytes) and it knows nothing about packets.
//!
//! `wire` follows smoltcp's view/Repr contract, documented in [`wire`].
// No unsafe code, except three fenced modules where each block carries a SAFETY comment:
// `backend::sys` (socket options no well-kept crate wraps), `mem::backing` (raw copies
// and atomics on registered memory, including the program's own, foreign, memory) and
// `ring::shm` (the shared mapping of the daemon's packet rings).
#![deny(unsafe_code)]

pub mod backend;
pub mod cli;
pub mod conform;
pub mod daemon;
pub mod driver;
pub mod engine;
pub mod iface;
pub mod mem;
pub mod ring;
pub mod rng;
pub mod sim;
pub mod verbs;
pub mod wire;
