//! The daemon's one thread: the port, the control socket, and the rings of every attached
//! process, in one `poll` loop.
//!
//! Each turn: packets from the port are routed by BTH DestQP to the process leasing its
//! QPN block (one ring push each, one flush per process per batch: the doorbell only
//! when that process sleeps); packets the processes queued are sent in batches; packets
//! a process addresses to the port's own address go straight to their owner (a frame
//! port cannot send to itself), copied from the sender's ring into the owner's
//! (`route`); control messages are served. Idle, the loop polls the rings (no
//! system call), the port every few turns, and yields the CPU each turn; after its spin
//! budget it sleeps on the port, the sockets and the doorbells. A process whose socket
//! ends is detached: its block goes into quarantine, its rings are unmapped, its counters
//! are kept. Bad input from a process (a malformed message, a corrupt ring, a packet with
//! another source address) is a counted drop and at worst the end of that process's
//! attachment, never of the daemon.

mod clients;
mod cm;
mod open;
mod route;

use super::cm_host::CmHost;
use super::control::{self, ControlError, PortInfo, ToDaemon, ToProcess};
use super::fault::Command as FaultCommand;
use super::lease::{self, Leases};
use super::port::PortSpec;
use crate::backend::fault::{FaultHandle, Faults, Faulty, Rule};
use crate::backend::pcapng::CaptureStats;
use crate::backend::queue::port::QueueState;
use crate::backend::queue::{QueueConfig, QueueHandle, Queued};
use crate::backend::udp::{RX_BATCH, RX_SLOT, TX_BATCH};
use crate::backend::{Backend, BackendError, Outgoing, Received};
use crate::driver::{Spin, DEFAULT_SPIN_US};
use crate::ring::{DaemonEnd, Link, Meta};
use crate::wire::Ecn;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
pub use open::default_socket;
use open::{listen, open_port};
use route::{deliver, flush_all, hairpin, hold_for_room};
use serde::Serialize;
use socket2::Socket;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Ring capacity per direction and process, by default.
pub const DEFAULT_RING_BYTES: usize = 4 << 20;
/// Longest sleep of the loop (it re-checks `stop` after it).
const MAX_SLEEP: Duration = Duration::from_millis(100);
/// Transmit slot: a packet as the engine makes it (MTU 4096 plus headers).
const TX_SLOT: usize = 4096 + 256;
/// While the loop spins, the control sockets are looked at every this many turns.
const CONTROL_EVERY: u64 = 256;
/// Receive batches taken from the port per turn before the processes' rings are served.
const RX_TURNS: usize = 8;
/// Control messages served per process per turn: one that keeps sending (counter reports,
/// or a flood) cannot hold the loop; the rest wait for the next turn.
const CONTROL_MSGS: usize = 16;
/// While the port is quiet, it is looked at every this many turns (see `turn`).
const PORT_EVERY: u64 = 4;
/// Transmit batches taken from one process per turn: a process that keeps its ring full
/// gets its share and the next process its turn (nothing a client does may starve the
/// others or hold the loop).
const TX_BATCHES_PER_TURN: usize = 4;
/// New connections accepted per turn, and at most attached or waiting at once.
const ACCEPT_PER_TURN: usize = 16;
const MAX_CLIENTS: usize = 1024;
/// A connection that has not attached this long after it came (a process that said
/// nothing, or a tool that asked and then kept the socket) is closed.
const UNATTACHED_TTL: Duration = Duration::from_secs(10);
/// The send buffer of each process's control socket: room for a `counters` answer of
/// several messages. Every send is non-blocking; a process whose socket stays full is
/// detached, never waited for.
const CONTROL_SNDBUF: usize = 1 << 20;
/// Answers queued for a process that does not read them as fast as they come (a
/// `counters` answer larger than its socket's buffer is queued here and sent as the
/// socket drains); a process with more than this waiting is detached.
const MAX_OUTBOX: usize = 8 << 20;
/// How long a process's packet to another process of the daemon (a hairpin) waits for room
/// in the receiver's ring before it is dropped (`ring_full`), as a switch's PFC watchdog
/// (100-200 ms at the vendors') ends a pause that never lifts: a receiver that is only
/// descheduled for a while loses nothing, one that stopped reading cannot hold its
/// senders forever. Past it, that sender's packets to full rings drop at once until one
/// passes again.
pub const HAIRPIN_HOLD: Duration = Duration::from_millis(100);
/// How soon the loop looks again at a sender held for room (a receiver frees it without
/// a doorbell).
const HOLD_RETRY: Duration = Duration::from_micros(100);

#[derive(Debug, Clone)]
pub struct Config {
    pub port: PortSpec,
    /// The control socket's path (created 0660; removed on exit).
    pub socket: PathBuf,
    pub quarantine: Duration,
    pub ring_bytes: usize,
    /// Capture every frame of the port, in and out, to this pcapng file.
    pub pcap: Option<PathBuf>,
    /// Fault rules in force from the start (`roce-emu fault` changes them later).
    pub faults: Vec<Rule>,
    /// The congestion point on the port's transmit side from the start (`--queue`;
    /// `roce-emu queue` changes it later): `backend::queue`.
    pub queue: Option<QueueConfig>,
    /// How long a neighbour (ARP, ND) entry lives on a frame port (TAP, AF_PACKET);
    /// `iface::IfaceConfig::neighbor_ttl` (60 s) unless given.
    pub neigh_timeout: Option<Duration>,
    /// Longest idle poll before a sleep (`driver::Spin`; `--spin-us`).
    pub spin: Duration,
    /// Exit once no process has been connected, and no QPN block leased or in
    /// quarantine, for this long (`--idle-exit`; the daemon started on demand,
    /// `super::demand`). `None`: run until signalled.
    pub idle_exit: Option<Duration>,
    /// Congestion-control settings handed to every attached process (`--cc`: the
    /// `engine::CcConfig` key=value syntax, checked when set).
    pub cc: Option<String>,
    /// How long a packet between two of its processes waits for room in the receiver's
    /// ring before it is dropped ([`HAIRPIN_HOLD`] unless set).
    pub hairpin_hold: Duration,
}

impl Config {
    pub fn new(port: PortSpec, socket: PathBuf) -> Config {
        Config {
            port,
            socket,
            quarantine: lease::DEFAULT_QUARANTINE,
            ring_bytes: DEFAULT_RING_BYTES,
            pcap: None,
            faults: Vec::new(),
            queue: None,
            neigh_timeout: None,
            spin: Duration::from_micros(DEFAULT_SPIN_US),
            idle_exit: None,
            cc: None,
            hairpin_hold: HAIRPIN_HOLD,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Port(#[from] BackendError),
    #[error("control socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Capture(#[from] crate::backend::capture::CaptureError),
    #[error(
        "a neighbour timeout is for tap: and afpacket: ports (a UDP port's neighbours are the \
         kernel's)"
    )]
    NeighTimeoutOnUdp,
    #[error(
        "afpacket:{iface}: the interface has no IPv4 address; give one (afpacket:{iface},ADDR)"
    )]
    NoAddress { iface: String },
}

/// The port's counters.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct PortCounters {
    pub rcvd_pkts: u64,
    pub sent_pkts: u64,
    /// Received for a QPN block nobody leases (or in quarantine).
    pub no_owner: u64,
    /// Received packets too short to carry a BTH.
    pub malformed: u64,
    /// Packets of processes to the port's own address, delivered without the wire.
    pub hairpin_pkts: u64,
    /// Packets a process gave with a source address other than the port's (dropped).
    pub bad_source: u64,
    /// Packets a process gave longer than any an engine makes (dropped).
    pub too_long: u64,
    /// Packets dropped because their owner's receive ring was full (RC retransmits).
    pub ring_full: u64,
    pub attached: u64,
    pub detached: u64,
    pub refused: u64,
    pub control_errors: u64,
}

/// One process's counters; kept after it leaves.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ProcessCounters {
    pub pid: u32,
    pub uid: u32,
    pub block: u8,
    pub rcvd_pkts: u64,
    pub rcvd_bytes: u64,
    pub sent_pkts: u64,
    pub sent_bytes: u64,
    pub ring_full: u64,
    pub bad_source: u64,
    /// Why it left (None while attached).
    pub left: Option<String>,
    /// What the process reported of its engine: the NIC's and every QP's counters.
    #[serde(flatten)]
    pub engine: super::report::ProcessReport,
}

pub(super) struct Client {
    pub(super) id: u64,
    pub(super) sock: Socket,
    /// When it connected (an unattached connection is closed after `UNATTACHED_TTL`).
    pub(super) since: Instant,
    /// None until its `Hello` was served.
    pub(super) link: Option<DaemonEnd>,
    pub(super) counters: ProcessCounters,
    /// Its rx ring has entries not yet published.
    pub(super) dirty: bool,
    /// Answers not sent yet (its socket was full), oldest first, and their bytes.
    pub(super) outbox: std::collections::VecDeque<Vec<u8>>,
    pub(super) outbox_bytes: usize,
    /// A CM client (its `CmHello` was served): its messages are `cm::ucma::Request`s.
    pub(super) cm: bool,
    /// Since when its next packet waits for room in another process's receive ring (a
    /// hairpin, see `send_batch_of`); kept, once past `HAIRPIN_HOLD`, until a packet of
    /// it passes again.
    pub(super) held_since: Option<Instant>,
}

/// What a stopped daemon reports.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub port: PortCounters,
    pub processes: Vec<ProcessCounters>,
    /// It stopped because it was idle (`Config::idle_exit`), not signalled.
    pub idle: bool,
}

pub struct Daemon {
    cfg: Config,
    port: Box<dyn Backend>,
    info: PortInfo,
    src_port: Option<u16>,
    listener: Socket,
    leases: Leases,
    epoch: Instant,
    clients: Vec<Client>,
    next_id: u64,
    departed: Vec<ProcessCounters>,
    counters: PortCounters,
    uid: u32,
    rx_pool: Vec<u8>,
    rx_meta: Vec<Received>,
    tx_pool: Vec<u8>,
    tx_meta: Vec<Outgoing>,
    /// Poll or sleep when idle (`turn`).
    spin: Spin,
    /// Refused connections, kept until the other side has read why (`accept`).
    refused: Vec<(Socket, Instant)>,
    /// The last turn moved packets.
    busy: bool,
    /// The port's last look found packets.
    port_busy: bool,
    /// The last sleep saw a control socket or the listener readable.
    control_ready: bool,
    /// Turns so far (control sockets are looked at every `CONTROL_EVERY` while spinning).
    turns: u64,
    /// The port's fault rules (the port applies them; `roce-emu fault` changes them).
    faults: FaultHandle,
    /// The port's egress queue (the port applies it; `roce-emu queue` changes it).
    queue: QueueHandle,
    /// The `--pcap` capture's counters.
    capture: Option<Arc<CaptureStats>>,
    /// The client whose ring is drained first next turn (round robin).
    first_tx: usize,
    /// A hairpinned packet's bytes, for the capture (only with `--pcap`).
    scratch: Vec<u8>,
    /// Since when the daemon has had nothing to keep it (`Config::idle_exit`).
    idle_since: Option<Instant>,
    /// The port's connection manager and QP1 (`server::cm`).
    cm: CmHost,
}

impl Daemon {
    /// Opens the port and the control socket.
    pub fn open(cfg: Config) -> Result<Daemon, ServerError> {
        let ((port, info, src_port), capture) =
            open_port(&cfg.port, cfg.pcap.as_deref(), cfg.neigh_timeout)?;
        // Always wrapped, so rules can be set at run time; with none it passes through.
        let faults: FaultHandle = Arc::new(Mutex::new(Faults::new(cfg.faults.clone())));
        let port = Faulty::new(port, Arc::clone(&faults))?;
        // Above the fault rules and the capture: the capture shows the CE marks, and a
        // packet the queue dropped never reaches the wire. Always wrapped, so a queue can
        // be set at run time; with none it passes through.
        let queue: QueueHandle = Arc::new(Mutex::new(QueueState::new(cfg.queue.clone())));
        let port: Box<dyn Backend> = Box::new(Queued::new(port, Arc::clone(&queue))?);
        let listener = listen(&cfg.socket)?;
        let spin = cfg.spin;
        Ok(Daemon {
            faults,
            queue,
            capture,
            leases: Leases::new(cfg.quarantine),
            cm: CmHost::new(&cfg.port, &info),
            cfg,
            port,
            info,
            src_port,
            listener,
            epoch: Instant::now(),
            clients: Vec::new(),
            next_id: 1,
            departed: Vec::new(),
            counters: PortCounters::default(),
            uid: nix::unistd::geteuid().as_raw(),
            rx_pool: vec![0; RX_SLOT * RX_BATCH],
            rx_meta: vec![
                Received {
                    src: unspecified(),
                    dst: unspecified(),
                    offset: 0,
                    len: 0,
                    segment: None,
                    ipv4_id: None,
                    ecn: Ecn::NotEct,
                };
                RX_BATCH
            ],
            tx_pool: vec![0; TX_SLOT * TX_BATCH],
            tx_meta: Vec::with_capacity(TX_BATCH),
            spin: Spin::new(spin),
            refused: Vec::new(),
            busy: false,
            port_busy: true,
            control_ready: true,
            turns: 0,
            first_tx: 0,
            scratch: Vec::new(),
            idle_since: None,
        })
    }

    pub fn info(&self) -> &PortInfo {
        &self.info
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// Runs until `stop` is set (SIGTERM, SIGINT), then tells every process the port is
    /// down and removes the socket (and a TAP it created, as the port drops).
    pub fn run(mut self, stop: &AtomicBool) -> Result<Summary, ServerError> {
        tracing::info!(port = %self.cfg.port, socket = %self.cfg.socket.display(), "daemon up");
        let mut result = Ok(());
        let mut idle = false;
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = self.turn() {
                tracing::error!("port failed: {e}");
                result = Err(e);
                break;
            }
            if self.idle_expired() {
                idle = true;
                break;
            }
        }
        let why = match &result {
            Ok(()) if idle => "the daemon stopped: idle".to_string(),
            Ok(()) => "the daemon stopped".to_string(),
            Err(e) => format!("the port failed: {e}"),
        };
        // A CM client speaks `ucma::ToLibrary` only: it sees its socket's end.
        for c in self.clients.iter().filter(|c| !c.cm) {
            let _ = control::send(
                c.sock.as_fd(),
                &ToProcess::PortDown { why: why.clone() },
                &[],
            );
        }
        let _ = std::fs::remove_file(&self.cfg.socket);
        let mut summary = self.summary();
        summary.idle = idle;
        tracing::info!("daemon down: {}", why);
        result.map(|()| summary)
    }

    /// Whether an on-demand daemon has had no connection and no leased or quarantined
    /// QPN block for `Config::idle_exit` (a block in quarantine keeps it: a daemon
    /// started afresh would lease that block again at once, and a late packet for one of
    /// its old QPs could reach the new owner's QP of the same number).
    fn idle_expired(&mut self) -> bool {
        let Some(limit) = self.cfg.idle_exit else {
            return false;
        };
        // The CM's ids too: a departed program's DREQ retries and timewait run their course.
        if !self.clients.is_empty() || self.cm.cm.id_count() > 0 || {
            let c = self.leases.counts(self.now());
            c.leased > 0 || c.quarantined > 0
        } {
            self.idle_since = None;
            return false;
        }
        let since = *self.idle_since.get_or_insert_with(Instant::now);
        since.elapsed() >= limit
    }

    fn summary(&self) -> Summary {
        let mut processes = self.departed.clone();
        processes.extend(
            self.clients
                .iter()
                .filter(|c| c.link.is_some())
                .map(|c| c.counters.clone()),
        );
        Summary {
            port: self.counters,
            processes,
            idle: false,
        }
    }

    /// One turn: sleep until something is ready (unless packets moved just now, or the
    /// spin budget says to keep polling), then serve. Spinning matters for latency: each
    /// sleep is a wake-up (an eventfd or the port's socket) on the way of a packet, and a
    /// ping-pong through the daemon pays two per hop (measured: 228 us per round trip
    /// with none, against 60 us for the same tool in-process); the budget adapts as the
    /// tools' does (`driver::Spin`), so an idle daemon sleeps.
    fn turn(&mut self) -> Result<(), ServerError> {
        let mut slept = false;
        if !self.busy && !self.spin.keep_polling() {
            self.sleep();
            self.spin.slept();
            slept = true;
        }
        // The port costs a system call per look and the rings none: a quiet port is looked
        // at every `PORT_EVERY` turns (a few microseconds late at worst), so the turns of a
        // hairpin between two processes are not mostly a receive that finds nothing.
        self.turns = self.turns.wrapping_add(1);
        let mut moved = 0;
        if slept || self.port_busy || self.turns % PORT_EVERY == 0 {
            let n = self.route_received()?;
            self.port_busy = n > 0;
            moved += n;
        }
        moved += self.send_queued()?;
        // The CM's timers, MADs and events (bounded; `server::cm`).
        self.busy = moved > 0 || self.cm_turn()?;
        if self.busy {
            self.spin.active();
        } else {
            // Spinning with nothing to do: let a process that shares our CPU run first (on
            // a small machine the programs at both ends of a ping-pong and the daemon are
            // more spinners than cores).
            std::thread::yield_now();
        }
        // Control sockets need a look when the sleep saw one readable; while the loop
        // spins (no sleep), every `CONTROL_EVERY` turns: a poll per process and an accept
        // on every spinning turn were system calls on the data path.
        if self.control_ready || self.turns % CONTROL_EVERY == 0 {
            self.control_ready = false;
            self.control();
            self.accept();
        }
        Ok(())
    }

    /// Sleeps until the port, a control socket or a process's ring has something (at most
    /// `MAX_SLEEP`); not at all if a ring already has.
    fn sleep(&mut self) {
        // The port's own preparation (its capture's buffered frames reach the file, for a
        // reader following it: `roce-emu ladder --live`).
        let mut work = self.port.prepare_sleep();
        let mut held = false;
        for c in &mut self.clients {
            if let Some(l) = &mut c.link {
                if c.held_since
                    .is_some_and(|t| t.elapsed() < self.cfg.hairpin_hold)
                {
                    // Its packets wait for room that frees without a doorbell.
                    held = true;
                    continue;
                }
                // Packets already queued: no sleep. Otherwise ask to be rung.
                match l.tx.arm() {
                    Ok(true) => work = true,
                    Ok(false) => {}
                    Err(_) => work = true, // served (and detached) below
                }
            }
        }
        let timeout = if work {
            Duration::ZERO
        } else if held {
            HOLD_RETRY.min(self.cm_wait())
        } else {
            MAX_SLEEP.min(self.cm_wait())
        };
        {
            let mut fds = vec![
                PollFd::new(self.listener.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.port.rx_fd(), PollFlags::POLLIN),
            ];
            for c in &self.clients {
                let mut ev = PollFlags::POLLIN;
                if !c.outbox.is_empty() {
                    ev |= PollFlags::POLLOUT;
                }
                fds.push(PollFd::new(c.sock.as_fd(), ev));
                if let Some(l) = &c.link {
                    fds.push(PollFd::new(l.tx.bell_fd(), PollFlags::POLLIN));
                }
            }
            let ms = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
            let _ = poll(&mut fds, ms);
            // Anything but the port woke us (the listener, a control socket, or a bell,
            // which costs one needless look at the control sockets at most).
            self.control_ready = fds
                .iter()
                .enumerate()
                .any(|(i, f)| i != 1 && f.revents().is_some_and(|r| !r.is_empty()));
        }
        for c in &mut self.clients {
            if let Some(l) = &mut c.link {
                l.tx.disarm();
            }
        }
    }

    /// Routes what the port received; how many packets.
    fn route_received(&mut self) -> Result<usize, ServerError> {
        let mut moved = 0;
        let now = self.cm_now();
        for _ in 0..RX_TURNS {
            let n = self.port.recv_batch(&mut self.rx_pool, &mut self.rx_meta)?;
            if n == 0 {
                break;
            }
            moved += n;
            for i in 0..n {
                let r = self.rx_meta[i];
                let seg = r.segment.unwrap_or(r.len).max(1);
                let mut at = 0;
                while at < r.len {
                    let len = seg.min(r.len - at);
                    let start = r.offset + at;
                    let meta = Meta {
                        src: r.src,
                        dst: r.dst,
                        ipv4_id: r.ipv4_id,
                        segment: None,
                        flags: 0,
                        ecn: r.ecn.bits(),
                    };
                    let pkt = &self.rx_pool[start..start + len];
                    if super::qp1::is_for_qp1(pkt) {
                        // QP1 is the daemon's own (the connection manager's).
                        let pkt = pkt.to_vec();
                        self.qp1_received(now, &r, &pkt);
                    } else {
                        deliver(
                            &mut self.clients,
                            &self.leases,
                            &mut self.counters,
                            &meta,
                            pkt,
                        );
                    }
                    at += len;
                }
            }
        }
        flush_all(&mut self.clients);
        Ok(moved)
    }

    /// Sends what the processes queued (or hands it to a local owner); how many packets.
    /// At most `TX_BATCHES_PER_TURN` batches of each process, starting with a different
    /// process each turn: what one process keeps queueing waits for the next turn.
    fn send_queued(&mut self) -> Result<usize, ServerError> {
        let mut moved = 0;
        let n = self.clients.len();
        if n > 0 {
            self.first_tx = (self.first_tx + 1) % n;
        }
        for i in 0..n {
            let k = (self.first_tx + i) % n;
            for _ in 0..TX_BATCHES_PER_TURN {
                let sent = self.send_batch_of(k)?;
                moved += sent;
                if sent < TX_BATCH {
                    break;
                }
            }
        }
        flush_all(&mut self.clients);
        Ok(moved)
    }

    /// Up to `TX_BATCH` packets of client `k`'s ring: those to the port's own addresses
    /// are copied straight into their owner's receive ring (one copy: nothing else of the
    /// daemon holds them), the others into the send pool, which goes out in one batch.
    /// The ring's space is handed back once, after the batch. How many packets it took.
    fn send_batch_of(&mut self, k: usize) -> Result<usize, ServerError> {
        let addrs = &self.info.addrs;
        let mut n = 0;
        self.tx_meta.clear();
        while n < TX_BATCH {
            let Some(link) = self.clients[k].link.as_mut() else {
                break;
            };
            let mark = link.tx.mark();
            let e = match link.tx.take() {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(e) => {
                    let c = &mut self.clients[k];
                    c.counters.left = Some(format!("corrupt ring: {e:?}"));
                    // Detached in `control` (its socket is shut down here).
                    let _ = c.sock.shutdown(std::net::Shutdown::Both);
                    break;
                }
            };
            let meta = *e.meta();
            if addrs.contains(&meta.dst.ip())
                && hold_for_room(
                    &mut self.clients,
                    &self.leases,
                    self.cfg.hairpin_hold,
                    k,
                    mark,
                    &e,
                )
            {
                break;
            }
            n += 1;
            let ok_src = addrs.contains(&meta.src.ip())
                && self.src_port.is_none_or(|sp| sp == meta.src.port());
            if !ok_src {
                self.counters.bad_source += 1;
                self.clients[k].counters.bad_source += 1;
                continue;
            }
            if e.len() > TX_SLOT {
                // Longer than any packet an engine makes for a port.
                self.counters.too_long += 1;
                continue;
            }
            self.clients[k].counters.sent_pkts += 1;
            self.clients[k].counters.sent_bytes += e.len() as u64;
            if addrs.contains(&meta.dst.ip()) {
                // To ourselves: the owner gets it as the wire would have given it.
                self.counters.hairpin_pkts += 1;
                let meta = Meta {
                    ipv4_id: meta.src.is_ipv4().then_some(0),
                    ..meta
                };
                if self.capture.is_some() {
                    // Never on the wire, so the port's capture would miss it.
                    let mut buf = std::mem::take(&mut self.scratch);
                    buf.resize(e.len(), 0);
                    if self.clients[k]
                        .link
                        .as_ref()
                        .is_some_and(|l| l.tx.read(&e, 0, &mut buf))
                    {
                        self.port.observe_hairpin(
                            meta.src,
                            meta.dst,
                            Ecn::from_tos(meta.ecn),
                            &buf,
                        );
                    }
                    self.scratch = buf;
                }
                hairpin(
                    &mut self.clients,
                    &self.leases,
                    &mut self.counters,
                    k,
                    &meta,
                    &e,
                );
                continue;
            }
            let j = self.tx_meta.len();
            let slot = &mut self.tx_pool[j * TX_SLOT..j * TX_SLOT + e.len()];
            if self.clients[k]
                .link
                .as_ref()
                .is_some_and(|l| l.tx.read(&e, 0, slot))
            {
                self.tx_meta.push(Outgoing {
                    src: meta.src,
                    dst: meta.dst,
                    len: e.len(),
                    ecn: Ecn::from_tos(meta.ecn),
                });
            }
        }
        if let Some(l) = self.clients[k].link.as_mut() {
            // A broken ring says so at its next `take`.
            let _ = l.tx.commit();
        }
        if !self.tx_meta.is_empty() {
            // A frame port drops what its link's MTU cannot carry (`tx_over_mtu`): not sent.
            let over = |d: &Self| d.src_port.is_none().then(|| d.port.stats().tx_over_mtu);
            let before = over(self);
            self.port
                .send_batch(&mut self.tx_pool, TX_SLOT, &self.tx_meta)?;
            let dropped = before.zip(over(self)).map_or(0, |(b, a)| a - b);
            self.counters.sent_pkts += (self.tx_meta.len() as u64).saturating_sub(dropped);
        }
        Ok(n)
    }
}

fn unspecified() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([0, 0, 0, 0], 0))
}
