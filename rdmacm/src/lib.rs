//! A drop-in `librdmacm.so.1`: unmodified rdma_cm programs (rping, ucmatose, rdma_server
//! and rdma_client, perftest's `-R`, qperf, UCX, libfabric...) on roce-emu, beside the
//! drop-in `libibverbs.so.1` (`abi/`). `roce-emu run -- PROGRAM` puts both on the
//! library path.
//!
//! The C ABI is rdma-core 44's: the structs are bindgen's from Debian 12's librdmacm-dev
//! headers (`ffi`, `tools/dropin/bindgen.sh`), the symbols and versions
//! `librdmacm.map`'s. Like Debian's librdmacm it calls libibverbs through its C symbols
//! (`ibv`), so `id->verbs` is the program's own `ibv_context` (one per device, one PD per
//! device, shared).
//!
//! Under the skin: `roce_emu::verbs::cm` (event channels with a pollable fd, one
//! connection per daemon, a dispatcher thread) talking to the connection manager in the
//! device's daemon (`ROCE_EMU_DEVICES=NAME=daemon:SOCKET`). What librdmacm does itself
//! around the kernel's commands (the device of an id, the new id of a connect request,
//! the QP moves on accept and on CONNECT_RESPONSE, waiting for acks on destroy and
//! migrate, the synchronous mode of a NULL channel) this crate does the same way
//! (`cma.c`, rdma-core 44).
//!
//! Unsafe: this crate is a C ABI; each `unsafe` block says why it is sound given what
//! rdma_cma.h promises about the pointers a program passes.

#![allow(clippy::missing_safety_doc)]
#![allow(non_snake_case)]

mod addr;
mod addrinfo;
mod channel;
mod conn;
mod errno;
mod event;
mod evt;
mod ffi;
mod guard;
mod ibv;
mod id;
mod lifecycle;
mod qp;
mod qpstate;
mod stubs;
mod teardown;

/// Logging: `ROCE_EMU_LOG` (an `EnvFilter`), to stderr; off by default.
fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(filter) = std::env::var("ROCE_EMU_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .try_init();
        }
    });
}
