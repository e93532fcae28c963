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
//! `wire` follows smoltcp's view/Repr contract, documented in [`wire`].
#![forbid(unsafe_code)]

pub mod cli;
pub mod wire;
