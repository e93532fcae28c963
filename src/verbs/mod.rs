//! The verbs layer: the one way to own a NIC from Rust. The tools are thin clients of it;
//! the drop-in C ABI (`abi/`, `libibverbs.so.1`) is a thin skin over it.
//!
//! A [`Device`] says which port to open (address, GSO, capture, faults); [`Device::open`]
//! gives a [`Context`]: one engine on one port, with a progress thread. Through the
//! context a program allocates PDs, registers memory, creates CQs (optionally on a
//! [`CompChannel`]) and QPs, moves QPs through their states, posts work requests and polls
//! completions, as with `ibv_*`.
//!
//! Who runs the NIC. The engine is sans-IO; something must feed it datagrams and timeouts
//! and send what it produces, including while the program makes no call (the responder
//! side of a WRITE, READ or atomic, ACKs, retransmissions). Two parties do, under one lock:
//!
//! - **the program's own calls**: `poll_cq` sends what was posted, receives what waits and
//!   runs due timers before it reaps completions. A program that busy-polls its CQ
//!   (rc_pingpong, perftest) thus drives the NIC itself, with no thread hand-off on the
//!   data path: a hand-off costs a wake-up, 100-300 µs on an idle virtual machine against
//!   30 µs for a polled round trip (see `driver::Spin`).
//! - **the progress thread**: while the program has not polled for `HANDOFF`, it sleeps on
//!   the port's fd and the next deadline and drives the NIC. A program blocked on a
//!   completion channel, a TCP exchange or its own work is served this way.
//!
//! Completion events: `req_notify_cq` arms a CQ in the engine (one-shot,
//! solicited-only honoured); whoever drives the NIC moves fired events to the CQ's
//! channel, whose eventfd then becomes readable. Async events (QP fatal, access errors,
//! CQ overrun, SRQ limit, Last WQE Reached, port errors) go to [`Context::async_fd`]'s
//! queue the same way.

mod channel;
pub mod cm;
pub mod discover;
pub mod gids;
mod mw;
mod progress;
mod srq;

pub use crate::backend::udp::{link_mtu, wait_readable};
pub use crate::backend::BackendError;
pub use crate::driver::{Spin, DEFAULT_SPIN_US};
pub use channel::CompChannel;
// The types of the verbs calls, so a program (the tools, the C ABI) needs nothing else.
pub use crate::engine::qp::attr::{AddressVector, Attrs};
pub use crate::engine::VerbsError;
pub use crate::engine::{
    AsyncEvent, Completion, Counter, Counters, Local, Mtu, QpAttr, QpCap, QpInit, QpState, QpType,
    RecvWr, Remote, SendFlags, SendOp, SendWr, SrqAttr, SrqInit, WcOpcode, WcStatus,
    DEFAULT_MIN_RNR_TIMER, DEFAULT_TIMEOUT, MAX_MSG, MAX_RETRY_CNT, RNR_RETRY_INFINITE,
};
pub use crate::engine::{CcConfig, CcConfigError};
pub use crate::engine::{NetworkHdr, UdDest, GRH_LEN, GSI_QKEY, GSI_QPN};
pub use crate::mem::{Access, Pd};
pub use crate::mem::{Backing, Lkey, MemError, MemoryRegion, Sge};
pub use crate::mem::{MemoryWindow, MwBind, MwState, MwType, Rereg, Rkey};
pub use crate::wire::Psn;

use crate::backend::capture::{Capture, CaptureError};
use crate::backend::fault::Lossy;
use crate::backend::udp::UdpBackend;
use crate::backend::{Backend, PortStats};
use crate::daemon::client::{AttachError, DaemonBackend};
use crate::daemon::demand;
use crate::driver::{Clock, Driver, IoStats};
use crate::engine::{Engine, EngineConfig};
use crate::mem::MrTable;
use progress::{Nic, Shared};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where a line for the user goes (`Device::pcap_report`).
pub type Report = fn(&str);

/// Which port to open and how.
#[derive(Debug, Clone)]
pub struct Device {
    /// The port's address (its GID): UDP port 4791 on it receives.
    pub ip: IpAddr,
    /// Share the address with other NICs, in this process or others (default): attach to
    /// the daemon of `udp:ip`, started on demand if none runs (`daemon::demand`); each
    /// NIC's QPNs come from the block the daemon leases it. Off: this NIC binds 4791
    /// alone (a second one on the address fails) and sends from rxe's per-QP source
    /// ports.
    pub share: bool,
    /// The engine's settings (`EngineConfig::new(ip)` unless changed).
    pub engine: EngineConfig,
    /// Congestion-control knobs laid over `engine.cc` after the daemon's (`--cc` of the
    /// daemon attached to), in `engine::CcConfig`'s key=value syntax: the program's own
    /// choice (`ROCE_EMU_CC` for the drop-in, `--cc` for the tools) wins.
    pub cc: Option<String>,
    /// Equal-length packets to one peer leave as one UDP GSO send (default). Off: one
    /// datagram per packet (`--no-gso`). A private port's (`share` off): a daemon's port
    /// sends as its daemon does.
    pub gso: bool,
    /// Write every packet sent and received to this pcap file (`--pcap`).
    pub pcap: Option<PathBuf>,
    /// Called, when the NIC closes or its program exits, with the line saying how many
    /// packets the capture holds ([`Context::capture_summary`]): for the drop-in, whose
    /// programs know nothing of the capture. The tools print the summary themselves.
    pub pcap_report: Option<Report>,
    /// Drop this share of transmitted datagrams, seeded (`--loss`, `--seed`).
    pub loss: Option<(f64, u64)>,
    /// Start the progress thread (default). Without it only the program's own calls
    /// drive the NIC: for single-threaded tests and benchmarks.
    pub progress_thread: bool,
    /// Attach to the `roce-emu daemon` listening on this socket instead of opening a
    /// port: the daemon's port it is (its first address replaces `ip`), the engine numbers
    /// its QPs in the block the daemon leases and sends from the daemon's UDP source port
    /// (`daemon::client`). `share` and `gso` then mean nothing; capture and faults wrap
    /// the daemon's link as any port.
    pub daemon: Option<PathBuf>,
    /// The device's GID table, when it follows an interface's addresses: the progress
    /// thread reads them again every `gids::WATCH_INTERVAL` and a change is an
    /// [`Event::GidChange`] (IBV_EVENT_GID_CHANGE), as the kernel's GID cache raises it.
    pub gids: Option<Arc<gids::GidTable>>,
}

impl Device {
    pub fn new(ip: IpAddr) -> Device {
        Device {
            ip,
            engine: EngineConfig::new(ip),
            cc: None,
            share: true,
            gso: true,
            pcap: None,
            pcap_report: None,
            loss: None,
            progress_thread: true,
            daemon: None,
            gids: None,
        }
    }

    /// Binds the port and starts the NIC.
    pub fn open(&self) -> Result<Context, Error> {
        Context::open(self)
    }

    /// Starts the NIC on a port opened elsewhere (`backend::l2::L2Backend` on a TAP or
    /// AF_PACKET link); `ip` should be the port's address.
    pub fn open_on(&self, backend: Box<dyn Backend>) -> Result<Context, Error> {
        Context::open_on(self, self.engine.clone(), backend, None)
    }
}

/// What went wrong in a verbs call: the engine's or the memory table's refusal, or the
/// port's failure. Each names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error(transparent)]
    Mem(#[from] MemError),
    #[error(transparent)]
    Port(#[from] BackendError),
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// The port failed earlier (in the progress thread): the NIC is down.
    #[error("the port is down: {0}")]
    PortDown(String),
    #[error("cannot create an event fd: {0}")]
    EventFd(std::io::Error),
    /// `dealloc_pd` on a PD that QPs still use.
    #[error("{pd} is still used by QP {qpn:#x}: destroy its QPs first")]
    PdInUse { pd: Pd, qpn: u32 },
    #[error("no loss rate {0}: give a share from 0.0 to 1.0")]
    BadLoss(f64),
    /// Attaching to the daemon failed (`Device::daemon`, or the one found on demand).
    #[error(transparent)]
    Attach(#[from] AttachError),
    /// No daemon could be found or started for the address (`Device::share`).
    #[error(transparent)]
    Daemon(#[from] demand::DaemonError),
    /// Congestion-control settings that do not parse (`Device::cc`, or the daemon's).
    #[error("congestion control ({from}): {error}")]
    Cc {
        from: &'static str,
        error: crate::engine::CcConfigError,
    },
}

/// What `Context::query_qp` reports.
#[derive(Debug, Clone, Copy)]
pub struct QpInfo {
    pub state: QpState,
    pub attrs: Attrs,
    pub cap: QpCap,
    /// The next PSN the requester sends.
    pub sq_psn: u32,
    /// The next PSN the responder expects.
    pub rq_psn: u32,
    pub sq_sig_all: bool,
}

/// An asynchronous event (`ibv_get_async_event`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// From the engine: QP fatal, request or access error, CQ overrun, SQ drained.
    Engine(AsyncEvent),
    /// The port failed (a socket error): every later call fails with `PortDown`.
    PortError(String),
    /// The GID table changed: an address of the interface went or came (`Device::gids`).
    GidChange,
}

/// Attaches to the daemon at `path`: the engine numbers its QPs in the leased block,
/// sends from the daemon's UDP source port and has the daemon's port's address.
fn attach(
    path: &std::path::Path,
    cfg: &mut EngineConfig,
) -> Result<(DaemonBackend, crate::daemon::report::Reporter), AttachError> {
    let (daemon, at) = DaemonBackend::connect(path)?;
    (cfg.qpn_lo, cfg.qpn_hi) = at.qpn_range();
    if at.src_port.is_some() {
        cfg.udp_src_port = at.src_port;
    }
    // `connect` refuses a port without an address.
    cfg.local_ip = daemon.local().ip();
    if let Some(spec) = &at.cc {
        // The daemon checked its settings when it was given them; only a daemon of
        // another build could send knobs this one does not know: then none are used.
        if let Err(e) = cfg.cc.apply(spec) {
            tracing::warn!("the daemon's congestion-control settings {spec:?}: {e}");
        }
    }
    let reporter = daemon.reporter();
    Ok((daemon, reporter))
}

/// Attaches to the daemon of `udp:ip`, started if none runs (`daemon::demand`). An idle
/// daemon may exit between being found and the attach: then once more, which starts
/// another.
fn attach_on_demand(
    ip: IpAddr,
    cfg: &mut EngineConfig,
) -> Result<(DaemonBackend, crate::daemon::report::Reporter), Error> {
    let path = demand::ensure_udp(ip)?;
    match attach(&path, cfg) {
        Err(AttachError::Connect { .. } | AttachError::Protocol { .. }) => {
            let path = demand::ensure_udp(ip)?;
            Ok(attach(&path, cfg)?)
        }
        r => Ok(r?),
    }
}

/// An open NIC: one engine on one port, and the thread that keeps it running. Cheap to
/// share between threads (`&Context` is `Sync`); dropping it stops the thread.
pub struct Context {
    shared: Arc<Shared>,
    /// The engine's memory table (shared with it; its own locks): registering needs no NIC
    /// lock.
    mem: Arc<MrTable>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The capture to report on at close, and to whom (`Device::pcap_report`).
    report: Option<(PathBuf, Report)>,
}

impl Context {
    fn open(dev: &Device) -> Result<Context, Error> {
        let mut cfg = dev.engine.clone();
        let mut reporter = None;
        let backend: Box<dyn Backend> = if let Some(path) = &dev.daemon {
            let (daemon, r) = attach(path, &mut cfg)?;
            reporter = Some(r);
            Box::new(daemon)
        } else if dev.share {
            let (daemon, r) = attach_on_demand(dev.ip, &mut cfg)?;
            reporter = Some(r);
            Box::new(daemon)
        } else {
            let mut udp = UdpBackend::bind(dev.ip)?;
            udp.set_gso(dev.gso);
            Box::new(udp)
        };
        Context::open_on(dev, cfg, backend, reporter)
    }

    /// A NIC on `backend` (a TAP or AF_PACKET port, say), with `dev`'s capture, faults and
    /// thread, and the engine settings `cfg`.
    fn open_on(
        dev: &Device,
        mut cfg: EngineConfig,
        mut backend: Box<dyn Backend>,
        reporter: Option<crate::daemon::report::Reporter>,
    ) -> Result<Context, Error> {
        if let Some(spec) = &dev.cc {
            cfg.cc.apply(spec).map_err(|error| Error::Cc {
                from: "this program's settings",
                error,
            })?;
        }
        if let Some(path) = &dev.pcap {
            // Inside the fault rule: the capture shows what really went on the wire.
            backend = Box::new(Capture::create(backend, path)?);
        }
        if let Some((p, seed)) = dev.loss {
            if !(0.0..=1.0).contains(&p) {
                return Err(Error::BadLoss(p));
            }
            if p > 0.0 {
                backend = Box::new(Lossy::new(backend, p, seed));
            }
        }
        // Key bytes seeded per NIC from the OS: with one constant seed, every program's
        // first region had the same rkey, run after run (an R_Key is the one secret a
        // peer needs to reach a region, IBA 10.6.3.2). The table stays deterministic for
        // a given seed (the simulator and tests pick theirs).
        let seed = {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(std::process::id())
        };
        let mem = Arc::new(MrTable::with_config(crate::mem::MrTableConfig {
            seed,
            ..Default::default()
        }));
        let engine = Engine::new(cfg, Arc::clone(&mem));
        let clock = Clock::default();
        let mut nic = Nic::new(Driver::new(engine, backend, clock));
        nic.reporter = reporter;
        let mut shared = Shared::new(nic, clock).map_err(Error::EventFd)?;
        shared.gids = dev
            .gids
            .as_ref()
            .filter(|t| t.watched())
            .map(|t| gids::Watch::new(Arc::clone(t)));
        let shared = Arc::new(shared);
        let thread = if dev.progress_thread {
            Some(progress::spawn(Arc::clone(&shared)).map_err(Error::EventFd)?)
        } else {
            None
        };
        Ok(Context {
            shared,
            mem,
            thread,
            report: dev.pcap.clone().zip(dev.pcap_report),
        })
    }

    /// The port's address (the GID in RoCEv2).
    pub fn local_ip(&self) -> IpAddr {
        self.shared.local_ip
    }

    /// The registered-memory table (regions' bytes, for the application side).
    pub fn mem(&self) -> &Arc<MrTable> {
        &self.mem
    }

    // ---- protection domains and memory ----------------------------------------------

    pub fn alloc_pd(&self) -> Pd {
        self.mem.alloc_pd()
    }

    /// `ibv_dealloc_pd`: refused while a QP or a region still uses the PD.
    pub fn dealloc_pd(&self, pd: Pd) -> Result<(), Error> {
        let nic = self.shared.lock();
        if let Some(qpn) = nic.driver.engine.qp_of_pd(pd) {
            return Err(Error::PdInUse { pd, qpn });
        }
        Ok(nic.driver.engine.mem().dealloc_pd(pd)?)
    }

    /// `ibv_reg_mr` over a buffer the region owns, at the address `iova`.
    pub fn reg_mr(
        &self,
        pd: Pd,
        iova: u64,
        length: u64,
        access: Access,
    ) -> Result<Arc<MemoryRegion>, Error> {
        Ok(self.mem.reg_mr(pd, iova, length, access)?)
    }

    /// `ibv_reg_mr` over memory described by `backing` (owned, or the caller's own
    /// memory through the unsafe `Backing::foreign`), at the address `iova`.
    pub fn reg_mr_backing(
        &self,
        pd: Pd,
        iova: u64,
        backing: Backing,
        access: Access,
    ) -> Result<Arc<MemoryRegion>, Error> {
        Ok(self.mem.reg_mr_backing(pd, iova, backing, access)?)
    }

    /// `ibv_dereg_mr`. Under the NIC's lock: no engine operation is using the region when
    /// this returns (the engine keeps no region between calls), so foreign memory is the
    /// caller's again once its own handles are dropped.
    pub fn dereg_mr(&self, lkey: Lkey) -> Result<(), Error> {
        let nic = self.shared.lock();
        Ok(nic.driver.engine.mem().dereg_mr(lkey)?)
    }

    // ---- completion queues ----------------------------------------------------------

    pub fn create_comp_channel(&self) -> Result<CompChannel, Error> {
        CompChannel::new().map_err(Error::EventFd)
    }

    /// `ibv_create_cq`: a CQ of `depth` entries, reporting its events on `channel`.
    pub fn create_cq(&self, depth: usize, channel: Option<&CompChannel>) -> Result<u32, Error> {
        let mut nic = self.shared.lock();
        let cq = nic.driver.engine.create_cq(depth)?;
        if let Some(ch) = channel {
            nic.channels.insert(cq, Arc::clone(&ch.q));
        }
        Ok(cq)
    }

    pub fn destroy_cq(&self, cq: u32) -> Result<(), Error> {
        let mut nic = self.shared.lock();
        nic.driver.engine.destroy_cq(cq)?;
        nic.channels.remove(&cq);
        Ok(())
    }

    /// `ibv_poll_cq`: sends what was posted, receives what waits, runs due timers, then
    /// takes up to `out.len()` completions.
    pub fn poll_cq(&self, cq: u32, out: &mut [Completion]) -> Result<usize, Error> {
        let mut nic = self.shared.lock_polling();
        // Completions already in the CQ are the caller's even if the port just failed:
        // the failure is reported once they are all taken.
        let driven = nic.drive(&self.shared);
        let n = nic.driver.engine.poll_cq(cq, out)?;
        if n == 0 {
            driven?;
            // Nothing for the caller to react to: what the receive produced (ACKs,
            // responses) leaves now rather than with the next call.
            nic.flush(&self.shared)?;
        } else if driven.is_ok() && out[..n].iter().any(|c| c.status != WcStatus::Success) {
            // A failed work request is often a program's last: rc_pingpong returns from
            // main on one, without ibv_close_device. What this step produced (the NAK
            // that failed the peer's request, with the error of our receive it flushed)
            // leaves before the program sees the error; a NAK left queued was lost and
            // the peer reported a retry timeout instead of the NAK's error.
            //
            // A success keeps the batching: its ACK leaves with the program's next post
            // or poll, in one system call, or when the NIC closes or the program exits
            // (`close_out`, the drop-in's exit hook), or by the progress thread once the
            // program stops polling. Sending it before every success, too, doubled the
            // sendmmsg calls of a polling ping-pong and cost `perf --lat` 25% (send) and
            // 65% (write) of its typical latency (debug build, issue 21); only a program
            // killed or leaving by _exit(2) right after its last receive now loses its ACK.
            let _ = nic.flush(&self.shared);
        }
        nic.dispatch(&self.shared);
        Ok(n)
    }

    /// Drives the NIC once without reaping completions (sends what is queued, receives
    /// what waits, runs due timers, sends what that produced); whether anything moved. For
    /// a program that polls the NIC while it waits for something else (a TCP exchange).
    pub fn progress(&self) -> Result<bool, Error> {
        let mut nic = self.shared.lock_polling();
        let did = nic.drive(&self.shared)?;
        let tx = nic.flush(&self.shared)?;
        nic.dispatch(&self.shared);
        Ok(did || tx)
    }

    /// `wait`, also waking when one of `others` (a TCP socket, say) becomes readable.
    pub fn wait_with(
        &self,
        others: &[std::os::fd::BorrowedFd<'_>],
        max: Duration,
    ) -> Result<(), Error> {
        let w = self.shared.prepare_wait(max)?;
        if !w.is_zero() {
            let mut fds = others.to_vec();
            fds.push(self.shared.rx_fd());
            crate::backend::udp::wait_readable(&fds, w);
        }
        Ok(())
    }

    /// `ibv_req_notify_cq`: the next completion (`solicited_only`: the next solicited
    /// or failed one) raises one event on the CQ's channel.
    pub fn req_notify_cq(&self, cq: u32, solicited_only: bool) -> Result<(), Error> {
        let mut nic = self.shared.lock();
        nic.driver.engine.req_notify_cq(cq, solicited_only)?;
        // A program arms its CQ and then waits on the channel: what it posted leaves now,
        // and the progress thread takes over at once.
        self.shared.stop_polling();
        nic.flush(&self.shared)?;
        self.shared.rearm(&mut nic);
        Ok(())
    }

    /// The program is about to sleep on a completion channel (`ibv_get_cq_event` with no
    /// event waiting): what it posted leaves now and the progress thread drives the NIC at
    /// once.
    pub fn release(&self) -> Result<(), Error> {
        self.shared.release()
    }

    // ---- queue pairs ----------------------------------------------------------------

    pub fn create_qp(&self, init: &QpInit) -> Result<u32, Error> {
        let mut nic = self.shared.lock();
        let qpn = nic.driver.engine.create_qp(init)?;
        // Before the QPN can leave this process: the daemon quarantines the block then.
        nic.driver.backend.mark_used();
        Ok(qpn)
    }

    /// Creates QP1, the GSI QP (a UD QP numbered 1, Q_Key [`GSI_QKEY`]), for management
    /// datagrams. Not reachable from the C ABI: user space cannot create one on Linux.
    pub fn create_gsi_qp(&self, init: &QpInit) -> Result<u32, Error> {
        let mut nic = self.shared.lock();
        let qpn = nic.driver.engine.create_gsi_qp(init)?;
        nic.driver.backend.mark_used();
        Ok(qpn)
    }

    /// `ibv_destroy_qp`. What the QP still owes its peer (the ACK of the last message it
    /// received, held back while the program polled) leaves first.
    pub fn destroy_qp(&self, qpn: u32) -> Result<(), Error> {
        let mut nic = self.shared.lock();
        let _ = nic.flush(&self.shared);
        // A daemon keeps the QP's last counters.
        nic.report_now();
        Ok(nic.driver.engine.destroy_qp(qpn)?)
    }

    pub fn modify_qp(&self, qpn: u32, attr: &QpAttr) -> Result<(), Error> {
        let mut nic = self.shared.lock();
        let now = nic.driver.clock.now();
        nic.driver.engine.modify_qp(now, qpn, attr)?;
        nic.after_post(&self.shared)
    }

    pub fn qp_state(&self, qpn: u32) -> Result<QpState, Error> {
        Ok(self.shared.lock().driver.engine.qp(qpn)?.state)
    }

    /// `ibv_query_qp`: the QP's state, the attributes in force and its capacities.
    pub fn query_qp(&self, qpn: u32) -> Result<QpInfo, Error> {
        let nic = self.shared.lock();
        let qp = nic.driver.engine.qp(qpn)?;
        Ok(QpInfo {
            state: qp.state,
            attrs: qp.attrs,
            cap: qp.cap,
            sq_psn: qp.sq_psn().value(),
            rq_psn: qp.rq_psn().value(),
            sq_sig_all: qp.sq_sig_all,
        })
    }

    /// `ibv_post_send`. What is posted leaves at once, unless the program is polling
    /// (then its next `poll_cq` sends the whole batch in one system call).
    pub fn post_send(&self, qpn: u32, wr: &SendWr<'_>) -> Result<(), Error> {
        let mut nic = self.shared.lock();
        let now = nic.driver.recent_now();
        nic.driver.engine.post_send(now, qpn, wr)?;
        nic.after_post(&self.shared)
    }

    /// `ibv_post_send` on a UD QP: the datagram goes to `dest` (the address handle's
    /// address, the remote QPN and Q_Key of `ibv_send_wr.wr.ud`).
    pub fn post_send_ud(&self, qpn: u32, wr: &SendWr<'_>, dest: &UdDest) -> Result<(), Error> {
        let mut nic = self.shared.lock();
        let now = nic.driver.recent_now();
        nic.driver.engine.post_send_ud(now, qpn, wr, dest)?;
        nic.after_post(&self.shared)
    }

    pub fn post_recv(&self, qpn: u32, wr: &RecvWr<'_>) -> Result<(), Error> {
        let mut nic = self.shared.lock();
        let now = nic.driver.recent_now();
        nic.driver.engine.post_recv(now, qpn, wr)?;
        nic.after_post(&self.shared)
    }

    // ---- events, waiting, counters ---------------------------------------------------

    /// The next asynchronous event, if one waits (`ibv_get_async_event`, non-blocking).
    pub fn poll_async_event(&self) -> Option<Event> {
        // Whoever ran the engine last moved its events here (every call that runs it
        // dispatches them before it returns): no lock of the NIC on this path, which a
        // polling program takes after every poll.
        self.shared.events.try_pop()
    }

    /// The next asynchronous event, waiting at most `timeout`.
    pub fn get_async_event(&self, timeout: Duration) -> Option<Event> {
        self.shared.events.pop(timeout)
    }

    /// `ibv_get_async_event` as the kernel's: waits for the next event in a `read(2)` of
    /// [`Context::async_fd`], so signals and `O_NONBLOCK` act on it as on rdma-core's
    /// (`EINTR` unless the handler has `SA_RESTART`, `EAGAIN`).
    pub fn wait_async_event(&self) -> std::io::Result<Event> {
        self.shared.events.wait_pop()
    }

    /// Readable while an asynchronous event waits (`ibv_context::async_fd`).
    pub fn async_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.shared.events.fd()
    }

    /// For a program that polls and has found nothing for a while: sleeps until a
    /// datagram arrives or the NIC's next deadline, at most `max`, driving the NIC itself
    /// (no thread hand-off when it wakes). The progress thread keeps away until `max`
    /// after the call: the caller promises to poll this context's CQ again when it wakes.
    pub fn wait(&self, max: Duration) -> Result<(), Error> {
        self.shared.wait(max)
    }

    /// Keeps the NIC answering until it has been quiet for `quiet` (at most `max`): a
    /// user-space NIC answers nothing once its process exits, and the peer may still need
    /// the ACK of its last message.
    pub fn linger(&self, quiet: Duration, max: Duration) {
        self.shared.linger(quiet, max)
    }

    /// For a program's exit, where no destructor runs (the drop-in calls this from its
    /// `atexit` handler): what the NIC holds for the network leaves now, as when it closes
    /// (the NAK of the request that failed, the ACK of the last message, a capture's
    /// buffered frames). Waits at most `max` for the NIC, which a thread of the program may
    /// hold; false if it could not have it. The NIC stays usable.
    /// A capture ends here: frames recorded after it could be cut short by the exit.
    pub fn flush_at_exit(&self, max: Duration) -> bool {
        match self.shared.lock_within(max) {
            Some(mut nic) => {
                nic.close_out(&self.shared);
                self.report_capture(&nic);
                true
            }
            None => false,
        }
    }

    /// What the NIC holds back while its program polls (the ACK of the last message
    /// received, batched with the program's next post or poll) leaves now: the program
    /// is about to do something else (`rdma_connect`, `rdma_listen`, a wait for a CM
    /// event), and the peer may be waiting for that ACK to go on (perftest `-R`'s server
    /// waits for its last exchange SEND to complete before it listens again). A real NIC
    /// sends it at once; the progress thread only takes over after `HANDOFF` or more.
    pub fn send_held(&self) -> Result<(), Error> {
        let mut nic = self.shared.lock();
        nic.flush(&self.shared)?;
        nic.dispatch(&self.shared);
        Ok(())
    }

    /// The capture summary to whoever asked for it (`Device::pcap_report`).
    fn report_capture(&self, nic: &progress::Nic) {
        if let Some((path, report)) = &self.report {
            report(&summary_line(
                path,
                &nic.driver.backend.stats(),
                &nic.driver.io,
            ));
        }
    }

    /// The engine's protocol counters.
    pub fn counters(&self) -> Counters {
        self.shared.lock().driver.engine.counters()
    }

    /// Datagrams moved by the driver.
    pub fn io_stats(&self) -> IoStats {
        self.shared.lock().driver.io
    }

    /// For `--pcap`: a line saying how many packets the capture holds and how many the
    /// NIC sent and received, which should be equal (every packet, one frame each).
    pub fn capture_summary(&self, path: &std::path::Path) -> String {
        summary_line(path, &self.port_stats(), &self.io_stats())
    }

    /// The port's counters (GSO/GRO, drops, capture, faults).
    pub fn port_stats(&self) -> PortStats {
        self.shared.lock().driver.backend.stats()
    }
}

/// [`Context::capture_summary`]'s line.
fn summary_line(path: &std::path::Path, p: &PortStats, io: &IoStats) -> String {
    let sent = io.tx_datagrams - p.fault_dropped;
    let mut line = format!(
        "{}: {} packets captured ({} sent + {} received)",
        path.display(),
        p.captured,
        sent,
        io.rx_datagrams
    );
    if p.capture_errors > 0 {
        line.push_str(": the capture failed (disk full?) and stopped early");
    }
    line
}

impl Drop for Context {
    fn drop(&mut self) {
        self.shared.shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // What the engine still has (a NAK, the ACK of the last message) leaves now.
        let mut nic = self.shared.lock();
        nic.close_out(&self.shared);
        self.report_capture(&nic);
    }
}

/// [`Context::wait`] for several NICs one thread polls (the demo's two): sleeps until a
/// datagram arrives for any of them or the earliest deadline, at most `max`.
pub fn wait_any(ctxs: &[&Context], max: Duration) -> Result<(), Error> {
    let mut w = max;
    for c in ctxs {
        w = w.min(c.shared.prepare_wait(max)?);
    }
    if !w.is_zero() {
        let fds: Vec<_> = ctxs.iter().map(|c| c.shared.rx_fd()).collect();
        crate::backend::udp::wait_readable(&fds, w);
    }
    Ok(())
}

/// A bring-up that every tool and test repeats: RESET -> INIT -> RTR -> RTS toward a peer.
pub fn connect_rc(
    ctx: &Context,
    qpn: u32,
    access: Access,
    rtr: &QpAttr,
    rts: &QpAttr,
) -> Result<(), Error> {
    ctx.modify_qp(qpn, &QpAttr::init(access))?;
    ctx.modify_qp(qpn, rtr)?;
    ctx.modify_qp(qpn, rts)
}
