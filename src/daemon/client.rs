//! The process side of the daemon: a [`Backend`] whose port is a daemon's (design
//! real-programs.md §1.3, §3).
//!
//! [`DaemonBackend::connect`] attaches: it connects to the daemon's control socket
//! (`SOCK_SEQPACKET`), says `Hello`, receives `Welcome` (the QPN block, the port, the UDP
//! source port) and then the descriptors of the two shared-memory rings, and maps them.
//! Every wait is bounded ([`ATTACH_TIMEOUT`]): a daemon that does not answer is an error
//! naming its socket.
//!
//! Data: received packets are popped from the rx ring straight into the driver's pool (no
//! system call while packets are there); packets to send are pushed on the tx ring and
//! published once per batch. The driver sends no more than the tx ring has room for
//! ([`Backend::send_room`]): the rest waits in the engine, unsent, as a NIC stops taking
//! work while its queue is full, so a daemon that falls behind costs no packet (UC and UD
//! would never send it again). A send that finds the ring full anyway is a counted drop,
//! never a block. An empty receive arms the ring (`Consumer::arm`) so the daemon rings the rx
//! doorbell, the socket end the driver sleeps on ([`Backend::rx_fd`]).
//!
//! Control after the attach: a small thread (all signals blocked, as the progress
//! thread) reads the control socket. A `PortDown` from the daemon, or the socket closing
//! (the daemon died), marks the port down and rings the rx doorbell, so a sleeping driver
//! wakes; every later call then fails with a [`BackendError`] naming the daemon and the
//! reason, which the verbs layer reports as its port error. Leaving is closing the socket
//! (dropping the backend).

use super::control::{self, ControlError, PortInfo, ToDaemon, ToProcess};
use super::lease;
use crate::backend::{Backend, BackendError, Outgoing, PortStats, Received};
use crate::ring::{
    Consumer, ConsumerStats, Link, LinkFds, Meta, Popped, Producer, ProducerStats, PushError,
};
use crate::wire::Ecn;
use socket2::{Domain, SockAddr, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Longest wait for each answer of the daemon while attaching (and for `info`).
pub const ATTACH_TIMEOUT: Duration = Duration::from_secs(5);

/// Most packets one receive takes (the driver's batch is smaller).
const RX_MAX: usize = 64;

/// Why attaching to a daemon (or asking it for its port) failed; names the socket.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("cannot reach the roce-emu daemon at {path}: {source}")]
    Connect { path: PathBuf, source: io::Error },
    #[error("the roce-emu daemon at {path} did not answer within {secs} s")]
    Silent { path: PathBuf, secs: u64 },
    #[error("the roce-emu daemon at {path} refused to attach this process: {why}")]
    Refused { path: PathBuf, why: String },
    #[error("not attaching to the roce-emu daemon at {path}: {why}")]
    Untrusted { path: PathBuf, why: String },
    #[error("the roce-emu daemon at {path}: {why}")]
    Protocol { path: PathBuf, why: String },
}

/// What the daemon gave this process when it attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attached {
    /// The QPN block leased: the engine numbers its QPs in [`lease::range`] of it.
    pub block: u8,
    pub port: PortInfo,
    /// The UDP source port every packet must carry (a UDP port), or `None` (a port that
    /// owns its frames: each QP its own).
    pub src_port: Option<u16>,
    /// The daemon's congestion-control settings (`ToProcess::Welcome::cc`).
    pub cc: Option<String>,
}

impl Attached {
    /// The engine's QPN range.
    pub fn qpn_range(&self) -> (u32, u32) {
        lease::range(self.block)
    }

    /// The port's address for the engine: its first.
    pub fn local_ip(&self) -> Option<IpAddr> {
        self.port.addrs.first().copied()
    }
}

/// Connects to the daemon's socket with bounded waits.
fn connect_socket(path: &Path, timeout: Duration) -> Result<Socket, AttachError> {
    let err = |source: io::Error| AttachError::Connect {
        path: path.to_path_buf(),
        source,
    };
    let sock = Socket::new(Domain::UNIX, Type::SEQPACKET, None).map_err(err)?;
    // On a Unix socket the send timeout bounds `connect` too (a full backlog).
    sock.set_read_timeout(Some(timeout)).map_err(err)?;
    sock.set_write_timeout(Some(timeout)).map_err(err)?;
    let addr = SockAddr::unix(path).map_err(err)?;
    sock.connect(&addr).map_err(err)?;
    check_daemon_user(path, &sock)?;
    Ok(sock)
}

/// The daemon must run as this program's user (or root): a daemon of another user would
/// receive every packet this program sends and hand it any packet it likes. A socket path
/// is only as safe as its folder; the peer's credentials (`SO_PEERCRED`: who listens) are
/// what the kernel vouches for.
fn check_daemon_user(path: &Path, sock: &Socket) -> Result<(), AttachError> {
    let own = nix::unistd::geteuid().as_raw();
    let theirs =
        control::peer_uid(std::os::fd::AsFd::as_fd(sock)).map_err(|e| AttachError::Connect {
            path: path.to_path_buf(),
            source: io::Error::other(e.to_string()),
        })?;
    if theirs != own && theirs != 0 {
        return Err(AttachError::Untrusted {
            path: path.to_path_buf(),
            why: format!(
                "it runs as user {theirs} and this program as user {own}: a daemon of \
                 another user would see this program's traffic (start one of your own)"
            ),
        });
    }
    Ok(())
}

/// Maps a control error while attaching to what it means for the user.
fn control_err(path: &Path, timeout: Duration, e: ControlError) -> AttachError {
    let path = path.to_path_buf();
    match e {
        ControlError::Io(io)
            if matches!(
                io.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            AttachError::Silent {
                path,
                secs: timeout.as_secs().max(1),
            }
        }
        ControlError::Io(source) => AttachError::Connect { path, source },
        ControlError::Closed => AttachError::Protocol {
            path,
            why: "it closed the connection without an answer".into(),
        },
        e => AttachError::Protocol {
            path,
            why: e.to_string(),
        },
    }
}

fn version_check(path: &Path, version: u32) -> Result<(), AttachError> {
    if version != control::VERSION {
        return Err(AttachError::Protocol {
            path: path.to_path_buf(),
            why: format!(
                "it speaks protocol version {version}, this program {}",
                control::VERSION
            ),
        });
    }
    Ok(())
}

fn unexpected(path: &Path, m: &ToProcess) -> AttachError {
    AttachError::Protocol {
        path: path.to_path_buf(),
        why: format!("unexpected answer {m:?}"),
    }
}

/// The daemon's port, without attaching (for a device list).
pub fn info(path: impl AsRef<Path>) -> Result<PortInfo, AttachError> {
    info_within(path.as_ref(), ATTACH_TIMEOUT)
}

/// [`info`] with its own bound on each wait.
pub fn info_within(path: &Path, timeout: Duration) -> Result<PortInfo, AttachError> {
    let sock = connect_socket(path, timeout)?;
    // A daemon that refuses us says why and closes at once: the send may then fail while
    // its answer waits to be read, so the answer decides.
    let sent = control::send(sock.as_fd(), &ToDaemon::Info, &[]);
    let (m, _fds) = control::recv::<ToProcess>(sock.as_fd())
        .map_err(|e| control_err(path, timeout, sent.err().unwrap_or(e)))?;
    match m {
        ToProcess::Info { version, port } => {
            version_check(path, version)?;
            Ok(port)
        }
        ToProcess::Refused { why } => Err(AttachError::Refused {
            path: path.to_path_buf(),
            why,
        }),
        m => Err(unexpected(path, &m)),
    }
}

/// The process id of the daemon listening at `path` (`SO_PEERCRED`), without asking it
/// anything; `None` if none answers.
pub fn daemon_pid(path: &Path, timeout: Duration) -> Option<u32> {
    let sock = connect_socket(path, timeout).ok()?;
    control::peer(sock.as_fd()).ok().map(|(_, pid)| pid)
}

/// Whether the port went down, and why: set by the control thread, read on every call.
#[derive(Default)]
struct Down {
    flag: AtomicBool,
    why: Mutex<Option<String>>,
}

impl Down {
    fn set(&self, why: String) {
        let mut w = self.why.lock().unwrap_or_else(|p| p.into_inner());
        if w.is_none() {
            *w = Some(why);
        }
        self.flag.store(true, Ordering::Release);
    }

    fn why(&self) -> Option<String> {
        if !self.flag.load(Ordering::Acquire) {
            return None;
        }
        self.why.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A NIC's port that is a daemon's: packets through shared-memory rings.
pub struct DaemonBackend {
    path: PathBuf,
    local: SocketAddr,
    sock: Arc<OwnedFd>,
    rx: Consumer,
    tx: Producer,
    down: Arc<Down>,
    leaving: Arc<AtomicBool>,
    control: Option<std::thread::JoinHandle<()>>,
    popped: Vec<Popped>,
    /// Packets to send dropped because the tx ring was full (a caller that did not ask
    /// `send_room`; the driver always does).
    tx_full: u64,
    /// `Using` was said (`Backend::mark_used`).
    used: bool,
}

impl DaemonBackend {
    /// Attaches to the daemon at `path`.
    pub fn connect(path: impl AsRef<Path>) -> Result<(DaemonBackend, Attached), AttachError> {
        DaemonBackend::connect_within(path.as_ref(), ATTACH_TIMEOUT)
    }

    /// [`DaemonBackend::connect`] with its own bound on each wait.
    pub fn connect_within(
        path: &Path,
        timeout: Duration,
    ) -> Result<(DaemonBackend, Attached), AttachError> {
        let sock = connect_socket(path, timeout)?;
        let cerr = |e| control_err(path, timeout, e);
        let hello = ToDaemon::Hello {
            version: control::VERSION,
            pid: std::process::id(),
        };
        // As in `info_within`: a refusal's answer is read even if our send failed.
        let sent = control::send(sock.as_fd(), &hello, &[]);
        let (m, _fds) =
            control::recv::<ToProcess>(sock.as_fd()).map_err(|e| cerr(sent.err().unwrap_or(e)))?;
        let attached = match m {
            ToProcess::Welcome {
                version,
                block,
                port,
                src_port,
                cc,
            } => {
                version_check(path, version)?;
                Attached {
                    block,
                    port,
                    src_port,
                    cc,
                }
            }
            ToProcess::Refused { why } => {
                return Err(AttachError::Refused {
                    path: path.to_path_buf(),
                    why,
                })
            }
            m => return Err(unexpected(path, &m)),
        };
        let Some(ip) = attached.local_ip() else {
            return Err(AttachError::Protocol {
                path: path.to_path_buf(),
                why: "its port has no address".into(),
            });
        };
        let proto = |why: String| AttachError::Protocol {
            path: path.to_path_buf(),
            why,
        };
        let fds = LinkFds::recv(sock.as_fd()).map_err(|e| match e {
            crate::ring::LinkError::Io(io) => cerr(ControlError::Io(io)),
            e => proto(format!("the rings it sent: {e}")),
        })?;
        let end = Link::attach(fds).map_err(|e| proto(format!("the rings it sent: {e}")))?;
        // From here the control thread blocks on the socket until a message or the end.
        sock.set_read_timeout(None)
            .map_err(|e| proto(e.to_string()))?;
        let sock: Arc<OwnedFd> = Arc::new(sock.into());
        // A child forked from this process (no exec) keeping the control socket would
        // keep this process attached (its block leased) after it exits.
        crate::backend::close_in_forked_children(std::os::fd::AsRawFd::as_raw_fd(&*sock));
        let down = Arc::new(Down::default());
        let leaving = Arc::new(AtomicBool::new(false));
        let bell = end
            .rx
            .bell_fd()
            .try_clone_to_owned()
            .map_err(|e| proto(format!("cannot duplicate its doorbell: {e}")))?;
        let control = spawn_control(
            path.to_path_buf(),
            Arc::clone(&sock),
            bell,
            Arc::clone(&down),
            Arc::clone(&leaving),
        )
        .map_err(|e| proto(format!("cannot start the control thread: {e}")))?;
        tracing::debug!(
            "attached to the daemon at {}: block {}, port {} {} ({ip})",
            path.display(),
            attached.block,
            attached.port.kind,
            attached.port.name
        );
        let backend = DaemonBackend {
            path: path.to_path_buf(),
            local: SocketAddr::new(ip, crate::wire::ROCE_UDP_PORT),
            sock,
            rx: end.rx,
            tx: end.tx,
            down,
            leaving,
            control: Some(control),
            popped: vec![
                Popped {
                    meta: Meta::new(
                        SocketAddr::new(ip, 0),
                        SocketAddr::new(ip, crate::wire::ROCE_UDP_PORT)
                    ),
                    offset: 0,
                    len: 0,
                };
                RX_MAX
            ],
            tx_full: 0,
            used: false,
        };
        Ok((backend, attached))
    }

    /// What publishes this NIC's counters to the daemon (`daemon::report`), on the
    /// control socket.
    pub fn reporter(&self) -> super::report::Reporter {
        super::report::Reporter::new(Arc::clone(&self.sock))
    }

    /// The daemon's socket.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The rings' own counters: received (rx) and sent (tx).
    pub fn ring_stats(&self) -> (ConsumerStats, ProducerStats) {
        (self.rx.stats(), self.tx.stats())
    }

    fn down_error(&self, why: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!(
                "the roce-emu daemon at {} took the port down: {why}",
                self.path.display()
            ),
        )
    }

    fn recv_error(&self, source: io::Error) -> BackendError {
        BackendError::Recv {
            addr: self.local,
            source,
        }
    }

    fn broken(&self, what: &str, e: impl std::fmt::Display) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the {what} ring shared with the daemon at {} is broken: {e}",
                self.path.display()
            ),
        )
    }

    /// Pops up to `out.len()` packets into `pool`.
    fn pop(&mut self, pool: &mut [u8], out: &mut [Received]) -> Result<usize, BackendError> {
        let want = out.len().min(self.popped.len());
        if want == 0 {
            return Ok(0);
        }
        let slot = pool.len() / want;
        let n = self
            .rx
            .pop_batch(pool, slot, &mut self.popped[..want])
            .map_err(|c| self.recv_error(self.broken("receive", c)))?;
        for (o, p) in out.iter_mut().zip(&self.popped[..n]) {
            *o = Received {
                src: p.meta.src,
                dst: p.meta.dst,
                offset: p.offset,
                len: p.len,
                segment: p.meta.segment.map(usize::from),
                ipv4_id: p.meta.ipv4_id,
                ecn: Ecn::from_tos(p.meta.ecn),
            };
        }
        Ok(n)
    }
}

impl Backend for DaemonBackend {
    fn local(&self) -> SocketAddr {
        self.local
    }

    fn recv_batch(&mut self, pool: &mut [u8], out: &mut [Received]) -> Result<usize, BackendError> {
        if let Some(why) = self.down.why() {
            return Err(self.recv_error(self.down_error(&why)));
        }
        let n = self.pop(pool, out)?;
        if n == 0 {
            // Nothing yet, and what we wait for needs the daemon (or the peer process the
            // daemon hands our packets to) to run: on a machine with fewer cores than
            // spinning threads (two programs and the daemon on two cores) the one with work
            // is often queued behind us, and polling on only delays it until our time
            // slice ends (measured: 90-190 us per 64-byte round trip instead of 25-30).
            // An in-process port pays a receive system call per empty poll instead.
            std::thread::yield_now();
        }
        Ok(n)
    }

    fn mark_used(&mut self) {
        if self.used {
            return;
        }
        self.used = true;
        // Waits for room (it must arrive); the daemon reads its control sockets each turn.
        if let Err(e) = control::send(self.sock.as_fd(), &ToDaemon::Using, &[]) {
            tracing::warn!("cannot tell the daemon this process uses its QPN block: {e}");
        }
    }

    fn prepare_sleep(&mut self) -> bool {
        // Drain what the doorbell counted (a ring for packets already taken, or a ring
        // that raced with the last drain) and ask the daemon to ring for the next packet.
        // Only here, before a sleep: a polling process is never rung (no system call per
        // packet on either side). After a sleep, `waiting` may stay set while we poll; the
        // daemon then rings once, for nothing, and clears it.
        self.rx.disarm();
        match self.rx.arm() {
            Ok(false) => false,
            // Packets landed since the last receive (`arm` cleared `waiting` again), or the
            // ring broke: the next receive takes them or reports it.
            Ok(true) | Err(_) => true,
        }
    }

    fn send_batch(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &[Outgoing],
    ) -> Result<(), BackendError> {
        let Some(first) = out.first() else {
            return Ok(());
        };
        let send_err = |o: &Outgoing, source| BackendError::Send {
            src: o.src,
            dst: o.dst,
            source,
        };
        if let Some(why) = self.down.why() {
            return Err(send_err(first, self.down_error(&why)));
        }
        for (i, o) in out.iter().enumerate() {
            let meta = Meta {
                ecn: o.ecn.bits(),
                ..Meta::new(o.src, o.dst)
            };
            match self.tx.try_push(&meta, &pool[i * slot..i * slot + o.len]) {
                // Too large is counted by the ring; the engine never makes one.
                Ok(()) | Err(PushError::TooLarge) => {}
                Err(PushError::Full) => {
                    // The rest would not fit either: dropped (the driver asks `send_room`
                    // first, so it never gets here).
                    self.tx_full += (out.len() - i) as u64;
                    break;
                }
                Err(e @ PushError::Broken(_)) => {
                    return Err(send_err(o, self.broken("send", e)));
                }
            }
        }
        self.tx
            .flush()
            .map_err(|e| send_err(first, self.broken("send", e)))?;
        Ok(())
    }

    fn send_room(&mut self, largest: usize) -> usize {
        // A port that went down or a broken ring: no waiting for room that never comes,
        // the next send says why.
        if self.down.flag.load(Ordering::Acquire) || self.tx.broken().is_some() {
            return usize::MAX;
        }
        // The daemon drains the ring; while it is full, the engine keeps what it has.
        self.tx.room(largest)
    }

    fn rx_fd(&self) -> BorrowedFd<'_> {
        // The rx doorbell: the daemon rings it for packets after an arm, and the control
        // thread rings it when the port goes down.
        self.rx.bell_fd()
    }

    fn stats(&self) -> PortStats {
        let (rx, tx) = self.ring_stats();
        PortStats {
            truncated: rx.too_long,
            tx_stalled: self.tx_full + tx.too_large,
            share_received: rx.popped,
            share_malformed: rx.malformed,
            ..PortStats::default()
        }
    }
}

impl Drop for DaemonBackend {
    fn drop(&mut self) {
        // Leaving: the socket's end tells the daemon, and wakes the control thread.
        self.leaving.store(true, Ordering::Release);
        let _ = nix::sys::socket::shutdown(
            std::os::fd::AsRawFd::as_raw_fd(&*self.sock),
            nix::sys::socket::Shutdown::Both,
        );
        if let Some(t) = self.control.take() {
            let _ = t.join();
        }
        crate::backend::keep_in_forked_children(std::os::fd::AsRawFd::as_raw_fd(&*self.sock));
    }
}

/// The control thread: waits for the daemon's announcements. `PortDown`, or the socket's
/// end while we are not leaving, marks the port down and rings the rx doorbell.
fn spawn_control(
    path: PathBuf,
    sock: Arc<OwnedFd>,
    bell: OwnedFd,
    down: Arc<Down>,
    leaving: Arc<AtomicBool>,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("roce-emu-daemon".into())
        .spawn(move || {
            use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
            let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), None);
            // Wakes a driver asleep on the rx doorbell: our end of it is a socket (the
            // daemon holds the other end), and shutting down its reading side makes it
            // readable (EOF) for good, as the daemon's going does.
            let ring = || {
                let _ = nix::sys::socket::shutdown(
                    std::os::fd::AsRawFd::as_raw_fd(&bell),
                    nix::sys::socket::Shutdown::Read,
                );
            };
            loop {
                let r = control::recv::<ToProcess>(sock.as_fd());
                if leaving.load(Ordering::Acquire) {
                    return;
                }
                match r {
                    Ok((ToProcess::PortDown { why }, _)) => {
                        tracing::warn!(
                            "the daemon at {} took the port down: {why}",
                            path.display()
                        );
                        down.set(why);
                        ring();
                        return;
                    }
                    Ok((m, _)) => {
                        tracing::debug!("daemon at {}: ignored {m:?}", path.display());
                    }
                    // A message that does not parse is not the end: count it, go on.
                    Err(ControlError::Malformed(e)) => {
                        tracing::debug!("daemon at {}: malformed message ({e})", path.display());
                    }
                    Err(ControlError::TooLarge) => {
                        tracing::debug!("daemon at {}: a message too large", path.display());
                    }
                    Err(ControlError::Io(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        let why = match e {
                            ControlError::Closed => {
                                "the daemon closed its socket (it stopped or died)".to_string()
                            }
                            // A reset: it went with messages of ours unread (counter
                            // reports, `daemon::report`).
                            ControlError::Io(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                                "the daemon closed its socket (it stopped or died)".to_string()
                            }
                            e => e.to_string(),
                        };
                        tracing::warn!("daemon at {}: {why}", path.display());
                        down.set(why);
                        ring();
                        return;
                    }
                }
            }
        })
}
