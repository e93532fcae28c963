//! The daemon's one thread: the port, the control socket, and the rings of every attached
//! process, in one `poll` loop.
//!
//! Each turn: packets from the port are routed by BTH DestQP to the process leasing its
//! QPN block (one ring push each, one flush per process per batch: the doorbell only
//! when that process sleeps); packets the processes queued are sent in batches; packets
//! a process addresses to the port's own address go straight to their owner (a frame
//! port cannot send to itself); control messages are served. A process whose socket
//! ends is detached: its block goes into quarantine, its rings are unmapped, its counters
//! are kept. Bad input from a process (a malformed message, a corrupt ring, a packet with
//! another source address) is a counted drop and at worst the end of that process's
//! attachment, never of the daemon.

use super::control::{self, ControlError, PortInfo, ToDaemon, ToProcess};
use super::fault::Command as FaultCommand;
use super::lease::{self, Leases};
pub use super::open::default_socket;
use super::open::{listen, open_port};
use super::port::PortSpec;
use crate::backend::fault::{FaultHandle, Faults, Faulty, Rule};
use crate::backend::pcapng::CaptureStats;
use crate::backend::udp::{RX_BATCH, RX_SLOT, TX_BATCH};
use crate::backend::{Backend, BackendError, Outgoing, Received};
use crate::driver::{Spin, DEFAULT_SPIN_US};
use crate::ring::{Link, Meta};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
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
    /// How long a neighbour (ARP, ND) entry lives on a frame port (TAP, AF_PACKET);
    /// `iface::IfaceConfig::neighbor_ttl` (60 s) unless given.
    pub neigh_timeout: Option<Duration>,
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
            neigh_timeout: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Port(#[from] BackendError),
    #[error("control socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
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

struct Client {
    id: u64,
    sock: Socket,
    /// None until its `Hello` was served.
    link: Option<crate::ring::DaemonEnd>,
    counters: ProcessCounters,
    /// Its rx ring has entries not yet published.
    dirty: bool,
}

/// What a stopped daemon reports.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub port: PortCounters,
    pub processes: Vec<ProcessCounters>,
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
    popped: Vec<crate::ring::Popped>,
    /// Poll or sleep when idle (`turn`).
    spin: Spin,
    /// The popped packets of a batch that go to the wire (reused: no allocation per batch).
    wire_slots: Vec<usize>,
    /// Refused connections, kept until the other side has read why (`accept`).
    refused: Vec<(Socket, Instant)>,
    /// The last turn moved packets.
    busy: bool,
    /// The last sleep saw a control socket or the listener readable.
    control_ready: bool,
    /// Turns so far (control sockets are looked at every `CONTROL_EVERY` while spinning).
    turns: u64,
    /// The port's fault rules (the port applies them; `roce-emu fault` changes them).
    faults: FaultHandle,
    /// The `--pcap` capture's counters.
    capture: Option<Arc<CaptureStats>>,
}

impl Daemon {
    /// Opens the port and the control socket.
    pub fn open(cfg: Config) -> Result<Daemon, DaemonError> {
        let ((port, info, src_port), capture) =
            open_port(&cfg.port, cfg.pcap.as_deref(), cfg.neigh_timeout)?;
        // Always wrapped, so rules can be set at run time; with none it passes through.
        let faults: FaultHandle = Arc::new(Mutex::new(Faults::new(cfg.faults.clone())));
        let port: Box<dyn Backend> = Box::new(Faulty::new(port, Arc::clone(&faults))?);
        let listener = listen(&cfg.socket)?;
        Ok(Daemon {
            faults,
            capture,
            leases: Leases::new(cfg.quarantine),
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
                };
                RX_BATCH
            ],
            tx_pool: vec![0; TX_SLOT * TX_BATCH],
            tx_meta: Vec::with_capacity(TX_BATCH),
            spin: Spin::new(Duration::from_micros(DEFAULT_SPIN_US)),
            refused: Vec::new(),
            wire_slots: Vec::with_capacity(TX_BATCH),
            busy: false,
            control_ready: true,
            turns: 0,
            popped: vec![
                crate::ring::Popped {
                    meta: Meta::new(unspecified(), unspecified()),
                    offset: 0,
                    len: 0,
                };
                TX_BATCH
            ],
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
    pub fn run(mut self, stop: &AtomicBool) -> Result<Summary, DaemonError> {
        tracing::info!(port = %self.cfg.port, socket = %self.cfg.socket.display(), "daemon up");
        let mut result = Ok(());
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = self.turn() {
                tracing::error!("port failed: {e}");
                result = Err(e);
                break;
            }
        }
        let why = match &result {
            Ok(()) => "the daemon stopped".to_string(),
            Err(e) => format!("the port failed: {e}"),
        };
        for c in &self.clients {
            let _ = control::send(
                c.sock.as_fd(),
                &ToProcess::PortDown { why: why.clone() },
                &[],
            );
        }
        let _ = std::fs::remove_file(&self.cfg.socket);
        let summary = self.summary();
        tracing::info!("daemon down: {}", why);
        result.map(|()| summary)
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
        }
    }

    /// One turn: sleep until something is ready (unless packets moved just now, or the
    /// spin budget says to keep polling), then serve. Spinning matters for latency: each
    /// sleep is a wake-up (an eventfd or the port's socket) on the way of a packet, and a
    /// ping-pong through the daemon pays two per hop (measured: 228 us per round trip
    /// with none, against 60 us for the same tool in-process); the budget adapts as the
    /// tools' does (`driver::Spin`), so an idle daemon sleeps.
    fn turn(&mut self) -> Result<(), DaemonError> {
        if !self.busy && !self.spin.keep_polling() {
            self.sleep();
            self.spin.slept();
        }
        let moved = self.route_received()? + self.send_queued()?;
        self.busy = moved > 0;
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
        self.turns = self.turns.wrapping_add(1);
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
        let mut work = false;
        for c in &mut self.clients {
            if let Some(l) = &mut c.link {
                // Packets already queued: no sleep. Otherwise ask to be rung.
                match l.tx.arm() {
                    Ok(true) => work = true,
                    Ok(false) => {}
                    Err(_) => work = true, // served (and detached) below
                }
            }
        }
        let timeout = if work { Duration::ZERO } else { MAX_SLEEP };
        {
            let mut fds = vec![
                PollFd::new(self.listener.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.port.rx_fd(), PollFlags::POLLIN),
            ];
            for c in &self.clients {
                fds.push(PollFd::new(c.sock.as_fd(), PollFlags::POLLIN));
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
    fn route_received(&mut self) -> Result<usize, DaemonError> {
        let mut moved = 0;
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
                    };
                    deliver(
                        &mut self.clients,
                        &self.leases,
                        &mut self.counters,
                        &meta,
                        &self.rx_pool[start..start + len],
                    );
                    at += len;
                }
            }
        }
        flush_all(&mut self.clients);
        Ok(moved)
    }

    /// Sends what the processes queued (or hands it to a local owner); how many packets.
    fn send_queued(&mut self) -> Result<usize, DaemonError> {
        let addrs = &self.info.addrs;
        let mut moved = 0;
        for k in 0..self.clients.len() {
            while let Some(link) = self.clients[k].link.as_mut() {
                let n = match link
                    .tx
                    .pop_batch(&mut self.tx_pool, TX_SLOT, &mut self.popped)
                {
                    Ok(n) => n,
                    Err(e) => {
                        let c = &mut self.clients[k];
                        c.counters.left = Some(format!("corrupt ring: {e:?}"));
                        // Detached in `control` (its socket is shut down here).
                        let _ = c.sock.shutdown(std::net::Shutdown::Both);
                        break;
                    }
                };
                if n == 0 {
                    break;
                }
                moved += n;
                self.tx_meta.clear();
                self.wire_slots.clear();
                for (i, p) in self.popped[..n].iter().enumerate() {
                    let ok_src = addrs.contains(&p.meta.src.ip())
                        && self.src_port.is_none_or(|sp| sp == p.meta.src.port());
                    if !ok_src {
                        self.counters.bad_source += 1;
                        self.clients[k].counters.bad_source += 1;
                        continue;
                    }
                    self.clients[k].counters.sent_pkts += 1;
                    self.clients[k].counters.sent_bytes += p.len as u64;
                    if addrs.contains(&p.meta.dst.ip()) {
                        // To ourselves: the owner gets it as the wire would have given it.
                        self.counters.hairpin_pkts += 1;
                        let meta = Meta {
                            ipv4_id: p.meta.src.is_ipv4().then_some(0),
                            ..p.meta
                        };
                        deliver(
                            &mut self.clients,
                            &self.leases,
                            &mut self.counters,
                            &meta,
                            &self.tx_pool[p.offset..p.offset + p.len],
                        );
                        continue;
                    }
                    self.wire_slots.push(i);
                    self.tx_meta.push(Outgoing {
                        src: p.meta.src,
                        dst: p.meta.dst,
                        len: p.len,
                    });
                }
                if !self.tx_meta.is_empty() {
                    // send_batch reads datagram j from slot j: move the kept ones down.
                    for (j, &i) in self.wire_slots.iter().enumerate() {
                        if i != j {
                            self.tx_pool.copy_within(
                                i * TX_SLOT..i * TX_SLOT + self.popped[i].len,
                                j * TX_SLOT,
                            );
                        }
                    }
                    self.port
                        .send_batch(&mut self.tx_pool, TX_SLOT, &self.tx_meta)?;
                    self.counters.sent_pkts += self.tx_meta.len() as u64;
                }
            }
        }
        flush_all(&mut self.clients);
        Ok(moved)
    }

    /// Serves every control message waiting; detaches processes whose socket ended.
    fn control(&mut self) {
        let mut k = 0;
        while k < self.clients.len() {
            let mut gone: Option<String> = None;
            for _ in 0..CONTROL_MSGS {
                let sock = self.clients[k].sock.as_fd();
                let mut pfd = [PollFd::new(sock, PollFlags::POLLIN)];
                if poll(&mut pfd, PollTimeout::ZERO).unwrap_or(0) == 0 {
                    break;
                }
                match control::recv::<ToDaemon>(sock) {
                    Ok((msg, _fds)) => {
                        if let Err(why) = self.serve(k, msg) {
                            gone = Some(why);
                            break;
                        }
                    }
                    Err(ControlError::Closed) => {
                        gone = Some("it closed its socket".into());
                        break;
                    }
                    Err(ControlError::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        self.counters.control_errors += 1;
                        gone = Some(format!("bad control message: {e}"));
                        break;
                    }
                }
            }
            match gone {
                Some(why) => self.detach(k, why),
                None => k += 1,
            }
        }
    }

    /// One control message of client `k`; `Err` ends its attachment.
    fn serve(&mut self, k: usize, msg: ToDaemon) -> Result<(), String> {
        let sock = self.clients[k].sock.as_fd();
        match msg {
            ToDaemon::Info => {
                let m = ToProcess::Info {
                    version: control::VERSION,
                    port: self.info.clone(),
                };
                control::send(sock, &m, &[]).map_err(|e| e.to_string())
            }
            ToDaemon::QpCounters { report } => {
                let c = &mut self.clients[k];
                let block = c.link.as_ref().map(|_| c.counters.block);
                c.counters.engine.apply(&report, block);
                Ok(())
            }
            ToDaemon::Counters => {
                let processes = self.summary().processes;
                let processes = processes
                    .iter()
                    .filter_map(|p| serde_json::to_value(p).ok());
                let json = serde_json::json!({
                    "port": self.info,
                    "counters": self.counters,
                    "leases": self.leases.counts(self.now()),
                    "port_stats": self.port.stats(),
                    "l2": self.port.l2_stats(),
                    "faults": self.fault_report(),
                    "capture": self.capture.as_ref().map(|c| serde_json::json!({
                        "file": self.cfg.pcap,
                        "frames": c.frames.load(Ordering::Relaxed),
                        "errors": c.errors.load(Ordering::Relaxed),
                    })),
                });
                super::report::counters_answer(json, processes.collect())
                    .iter()
                    .try_for_each(|m| control::send(sock, m, &[]))
                    .map_err(|e| e.to_string())
            }
            ToDaemon::Fault { rule } => {
                let error = match super::fault::parse(&rule) {
                    Ok(cmd) => {
                        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
                        match cmd {
                            FaultCommand::Add(r) => {
                                tracing::info!(rule = %r, "fault rule added");
                                f.add(r);
                            }
                            FaultCommand::Clear => {
                                tracing::info!("fault rules cleared");
                                f.clear();
                            }
                            // The rules are in the counters: nothing changes.
                            FaultCommand::List => {}
                        }
                        None
                    }
                    Err(e) => Some(e),
                };
                let m = ToProcess::FaultSet { error };
                control::send(sock, &m, &[]).map_err(|e| e.to_string())
            }
            ToDaemon::Hello { version, pid } => {
                let refuse = |why: String| {
                    let _ = control::send(sock, &ToProcess::Refused { why: why.clone() }, &[]);
                    Err(why)
                };
                if self.clients[k].link.is_some() {
                    return refuse("already attached".into());
                }
                if version != control::VERSION {
                    self.counters.refused += 1;
                    return refuse(format!(
                        "protocol version {version}; this daemon speaks {}",
                        control::VERSION
                    ));
                }
                let now = self.now();
                let id = self.clients[k].id;
                let Some(block) = self.leases.lease(now, id) else {
                    self.counters.refused += 1;
                    return refuse(
                        "no free QPN block (255 processes attached or in quarantine)".into(),
                    );
                };
                let (end, fds) = match Link::create(self.cfg.ring_bytes) {
                    Ok(x) => x,
                    Err(e) => {
                        self.leases.release(now, id);
                        return refuse(format!("cannot create the rings: {e:?}"));
                    }
                };
                let welcome = ToProcess::Welcome {
                    version: control::VERSION,
                    block,
                    port: self.info.clone(),
                    src_port: self.src_port,
                };
                control::send(sock, &welcome, &[]).map_err(|e| e.to_string())?;
                fds.send(sock).map_err(|e| format!("{e:?}"))?;
                let c = &mut self.clients[k];
                c.counters.pid = pid;
                c.counters.block = block;
                c.link = Some(end);
                self.counters.attached += 1;
                tracing::info!(pid, block, "process attached");
                Ok(())
            }
        }
    }

    /// The fault rules in force and those cleared, with their counters.
    fn fault_report(&self) -> serde_json::Value {
        let f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        serde_json::json!({ "rules": f.report(), "cleared": f.cleared() })
    }

    fn detach(&mut self, k: usize, why: String) {
        // What it queued before it went (the ACK of its last message, as a NIC closing
        // sends) leaves first: it may have come after this turn's `send_queued`. A port
        // error here shows again on the next turn.
        let _ = self.send_queued();
        let mut c = self.clients.swap_remove(k);
        if c.link.is_some() {
            let n = self.leases.release(self.now(), c.id);
            self.counters.detached += 1;
            tracing::info!(pid = c.counters.pid, blocks = n, "process detached: {why}");
            c.counters.left.get_or_insert(why);
            if self.departed.len() >= super::report::MAX_DEPARTED {
                self.departed.remove(0);
            }
            self.departed.push(c.counters.clone());
        }
        // Dropping `c` unmaps its rings and closes its socket.
    }

    /// Takes new connections: only the daemon's own user (and root) may attach.
    fn accept(&mut self) {
        // Refused ones: discard what they send; drop them at their EOF or after a second.
        self.refused.retain(|(s, since)| {
            use std::io::Read;
            let mut buf = [0u8; 256];
            let gone = matches!((&*s).read(&mut buf), Ok(0));
            !gone && since.elapsed() < Duration::from_secs(1)
        });
        while let Ok((sock, _)) = self.listener.accept() {
            let uid = control::peer_uid(sock.as_fd()).unwrap_or(u32::MAX);
            if uid != self.uid && uid != 0 {
                self.counters.refused += 1;
                let why = format!(
                    "user {uid} may not use this daemon (it runs as user {})",
                    self.uid
                );
                let _ = control::send(sock.as_fd(), &ToProcess::Refused { why }, &[]);
                // Closed only once the other side has read the refusal (its EOF) or after
                // a moment: closing on an unread request of theirs would reset their
                // socket (ECONNRESET) before they read why.
                let _ = sock.shutdown(std::net::Shutdown::Write);
                let _ = sock.set_nonblocking(true);
                self.refused.push((sock, Instant::now()));
                continue;
            }
            let id = self.next_id;
            self.next_id += 1;
            self.clients.push(Client {
                id,
                sock,
                link: None,
                counters: ProcessCounters {
                    uid,
                    ..ProcessCounters::default()
                },
                dirty: false,
            });
        }
    }
}

fn unspecified() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([0, 0, 0, 0], 0))
}

/// Hands one packet to the owner of its DestQP's block.
fn deliver(
    clients: &mut [Client],
    leases: &Leases,
    counters: &mut PortCounters,
    meta: &Meta,
    bytes: &[u8],
) {
    counters.rcvd_pkts += 1;
    // BTH DestQP: bytes 5..8 of the packet (IBA 9.2).
    if bytes.len() < 12 {
        counters.malformed += 1;
        return;
    }
    let qpn = u32::from_be_bytes([0, bytes[5], bytes[6], bytes[7]]);
    let Some(owner) = leases.owner(qpn) else {
        counters.no_owner += 1;
        return;
    };
    let Some(c) = clients.iter_mut().find(|c| c.id == owner) else {
        counters.no_owner += 1;
        return;
    };
    let Some(link) = c.link.as_mut() else {
        counters.no_owner += 1;
        return;
    };
    match link.rx.try_push(meta, bytes) {
        Ok(()) => {
            c.counters.rcvd_pkts += 1;
            c.counters.rcvd_bytes += bytes.len() as u64;
            c.dirty = true;
        }
        Err(_) => {
            counters.ring_full += 1;
            c.counters.ring_full += 1;
        }
    }
}

fn flush_all(clients: &mut [Client]) {
    for c in clients.iter_mut().filter(|c| c.dirty) {
        c.dirty = false;
        if let Some(l) = c.link.as_mut() {
            let _ = l.rx.flush();
        }
    }
}
