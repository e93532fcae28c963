//! The connection manager: the IB CM (IBA chapter 12) with rdma_cm's service IDs and
//! private-data header on top, for one device, sans-IO like the engine (MADs, commands and
//! time in; MADs, events and deadlines out). It runs in the daemon, which owns the
//! device's QP1 (design wave3.md §3).
//!
//! - [`ucma`]: the commands and events between a program's librdmacm and the manager.

pub mod ucma;
