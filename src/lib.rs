//! roce-emu: a user-space RoCEv2 software NIC.
//!
//! The 16 modules, in layers (a module imports only modules on its row or below, and only
//! those `tests/layering.rs` allows it):
//!
//! ```text
//!   cli                        the tools
//!   learn                      lessons: simulated exchanges drawn as ladders
//!   conform  ladder            scripts played against a target NIC; ladder diagrams
//!   verbs                      owning a NIC
//!   daemon   ring   driver     the port service, its rings, the I/O loop
//!   backend  iface  sim        ports, L2, the simulated network
//!   engine                     the sans-IO transport
//!   mem      wire   rng        registered memory, bytes, randomness
//! ```
//!
//! - [`wire`]: bytes: every RoCEv2 header (view + `Repr`, smoltcp's contract), the opcode
//!   table, the ICRC, Ethernet/IP/UDP framing; imports nothing of ours.
//! - [`rng`]: the crate's one seeded random source (key bytes, fault rules, the simulator).
//! - [`mem`]: registered memory: PDs, MRs, L_Key/R_Key and range checks, SGE copies, the
//!   program's own memory (`mem::backing`); of ours only `rng`, nothing about packets.
//! - [`engine`]: the sans-IO RC transport, one `Engine` per NIC: datagrams and time in,
//!   datagrams, deadlines, events and completions out; no sockets, threads or clock.
//! - [`sim`]: a deterministic network of engines with a virtual clock and seeded fault
//!   rules, for tests, fuzzing and the demo's `--loss`.
//! - [`iface`]: the sans-IO L2 of a NIC that owns its frames (ARP, IPv6 ND, ICMP echo,
//!   framing with the IPv4 ID and ICRC rebased).
//! - [`backend`]: ports: the `Backend` trait, UDP (batched, GSO/GRO), TAP and AF_PACKET
//!   links, fault and capture wrappers.
//! - [`driver`]: the real clock and the I/O loop that feeds an engine from a backend.
//! - [`ring`]: shared-memory packet rings between the daemon and one attached process.
//! - [`daemon`]: `roce-emu daemon`: one port shared by a machine's programs (leases,
//!   routing, control, counters, faults) and the process side that attaches to it.
//! - [`verbs`]: the one way to own a NIC from Rust (contexts, PDs, MRs, CQs, QPs,
//!   completion channels, the progress thread, device discovery); the drop-in
//!   `libibverbs.so.1` (the `abi/` crate) is a skin over it.
//! - [`conform`]: protocol conformance: `spec/` scripts played packet by packet against a
//!   target NIC through an agent, and the result matrix.
//! - [`ladder`]: ladder diagrams of RoCE exchanges: packets (a capture's, the
//!   simulator's) in, per-QP-pair rows and their drawings (terminal text, an HTML page) out.
//! - [`learn`]: `roce-emu learn`: scripted exchanges in the simulator (a lost packet, an
//!   RNR NAK, a lost ACK, ...) drawn as ladders and explained, the same on every run.
//! - [`cli`]: the `roce-emu` tools (demo, pingpong, perf, pcap, daemon, counters, fault,
//!   conform, learn, run/env/devinfo); of ours only `verbs`, `wire`, `daemon`, `conform`,
//!   `ladder`, `learn`.
//!
//! `README.md` and `docs/` (tools, drop-in, daemon, internals, interop, tests) say more.
// No unsafe code, except three fenced modules where each block carries a SAFETY comment:
// `backend::sys` (socket options no well-kept crate wraps), `mem::backing` (raw copies
// and atomics on registered memory, including the program's own, foreign, memory) and
// `ring::shm` (the shared mapping of the daemon's packet rings).
#![deny(unsafe_code)]

pub mod backend;
pub mod cli;
pub mod cm;
pub mod conform;
pub mod daemon;
pub mod driver;
pub mod engine;
pub mod iface;
pub mod ladder;
pub mod learn;
pub mod mem;
pub mod ring;
pub mod rng;
pub mod sim;
pub mod verbs;
pub mod wire;
