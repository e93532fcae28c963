//! `roce-emu daemon`: one port (UDP, TAP, AF_PACKET) shared by the programs of a machine.
//!
//! The engines stay in the programs' processes, next to their memory (design
//! real-programs.md §1.3): the daemon owns the port and moves packets. Each attached
//! process leases a block of QPNs ([`lease`]; quarantined after it leaves if it made a
//! QP); the daemon routes every received packet by its BTH DestQP to the block's owner
//! (`route`) and sends what the processes hand it, through shared-memory rings
//! (`crate::ring`: a socket-pair doorbell rung only for a sleeper, so no system call per
//! packet under load), with a Unix `SOCK_SEQPACKET` socket for control and fd passing
//! ([`control`]: JSON messages). Packets between two processes of the daemon go ring to
//! ring (the hairpin). A TAP or AF_PACKET port has its own L2 (`crate::iface` over
//! `crate::backend::l2`): ARP, ND, ICMP echo.
//!
//! - [`server`]: the daemon's one thread (port, control sockets, rings in one poll loop).
//!   Nothing a client does may block or starve it: every socket call is non-blocking,
//!   answers are queued per client, work per client per turn is bounded, and only its own
//!   user (and root) may attach (`SO_PEERCRED`).
//! - [`client`]: the process side, a `Backend` over the rings; it attaches only to a
//!   daemon of its own user (or root).
//! - [`report`]: each process's engine counters, published to the daemon and checked
//!   there field by field; `roce-emu counters` shows them.
//! - [`fault`]: fault rules set at run time (`roce-emu fault`); [`port`]: the port specs;
//!   `server::open`: opening the port, its capture and the control socket.

pub mod client;
pub mod cm_host;
pub mod control;
pub mod demand;
pub mod fault;
pub mod lease;
pub mod port;
pub mod qp1;
pub mod report;
pub mod server;
