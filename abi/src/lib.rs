//! A drop-in `libibverbs.so.1`: unmodified RDMA programs (ibv_* tools, perftest, pyverbs,
//! anything linked against rdma-core's libibverbs) on roce-emu, with no kernel module, no
//! root and no RDMA hardware. `LD_LIBRARY_PATH=<dir of our libibverbs.so.1>` is all it
//! takes (`roce-emu run -- PROGRAM` sets it).
//!
//! The C ABI is rdma-core 44's, byte for byte: the structs are bindgen's, generated from
//! Debian 12's headers (`ffi`, `tools/dropin/bindgen.sh`); the symbols and their versions
//! are `libibverbs.map`'s. Programs call `ibv_post_send`, `ibv_poll_cq` and the `ibv_wr_*`
//! family inline through function pointers in our objects (`ibv_context::ops`,
//! `verbs_context`, `ibv_qp_ex`, `ibv_cq_ex`), so every object a program sees is a
//! rdma-core struct at the front of one of ours (`#[repr(C)]`, the C part first), and a
//! pointer the program hands back is turned into ours by the offset of that part.
//!
//! Under the skin is roce-emu's verbs layer: each `ibv_open_device` is a
//! `verbs::Context` (an engine, a port, a progress thread); memory regions are the
//! program's own memory (`Backing::foreign`).
//!
//! The environment: `ROCE_EMU_DEVICES` (the devices, `verbs::discover`), `ROCE_EMU_LOG`
//! (the library's log on stderr, e.g. `debug`: why a request was refused, a GID index the
//! device lacks, ...; colours only on a terminal), `ROCE_EMU_PCAP=FILE` (every device
//! a program opens writes a capture of its own, module `pcap`) and `ROCE_EMU_CC` /
//! `ROCE_EMU_CC_<device>` (congestion-control knobs, `engine::CcConfig`'s key=value
//! syntax, over those of the daemon the device attaches to).
//!
//! A program's exit: most programs exit without `ibv_close_device`; an `atexit` handler
//! hands on what each NIC still holds (a NAK, the last ACK, capture buffers: module `exit`).
//!
//! Unsafe: this crate is the C ABI, so raw pointers from the program are its job. Each
//! `unsafe` block says why it is sound, given what the verbs API promises about the
//! pointers a program passes (ibv_* man pages); a pointer we did not hand out is the
//! program's bug, as with rdma-core.

#![allow(clippy::missing_safety_doc)]
// The C names are the ABI.
#![allow(non_snake_case)]

mod ah;
mod clock;
mod context;
mod cq;
mod ctx;
mod dev;
mod device;
mod errno;
mod exit;
mod ffi;
mod fork;
mod guard;
mod mr;
mod mw;
mod pcap;
mod qp;
mod sge;
mod srq;
mod strings;
mod stubs;
mod sysfs;

pub use errno::set_errno;

/// Logging for the library: `ROCE_EMU_LOG` (an `EnvFilter` such as `debug` or
/// `roce_emu=trace`), to stderr; off by default so a program's output is its own.
fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(filter) = std::env::var("ROCE_EMU_LOG") {
            // Colours only for a terminal: a log redirected to a file gets no escape codes.
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .with_ansi(ansi)
                .try_init();
        }
    });
}
