//! The hub: the NIC on a shared address that holds UDP port 4791. It receives every RoCE
//! packet for the address, keeps those whose DestQP is in its own block (or in no leased
//! block: its engine counts them as for an unknown QP) and forwards the rest to the
//! member that leased their block.
//!
//! Leases are served by a small thread that sleeps in `poll` on the listening socket and
//! the members' sockets: a joining NIC must get its answer, and a dead member's block must
//! come free, even while the hub's own NIC is idle and its program makes no call. The
//! thread does no data path work; the receive path sees its changes through a generation
//! counter (one atomic load per batch) and copies the table when it moved.

use super::proto::{self, Control, FwdMeta, FwdWriter, Refusal};
use super::{listener_name, sys_error};
use crate::backend::sys::SendMmsg;
use crate::backend::udp::UdpBackend;
use crate::backend::{BackendError, PortStats, Received};
use socket2::{Domain, SockAddr, Socket, Type};
use std::io::{ErrorKind, Read};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How often the lease thread looks at its stop flag: bounds how long dropping a hub
/// waits for it.
const SERVE_TICK: Duration = Duration::from_millis(20);
/// Longest a joining NIC may take to send its `Join` after connecting.
const JOIN_READ: Duration = Duration::from_millis(500);
/// Send buffer asked for each member's socket (the kernel caps it at wmem_max): the
/// forward queue a member may fall behind by before the hub drops.
const MEMBER_SNDBUF: usize = 4 << 20;
/// Messages one `sendmmsg` to a member carries.
const FWD_BATCH: usize = 64;

/// Routes: the link index, or one of these.
const ROUTE_SELF: u16 = u16::MAX;
const ROUTE_NONE: u16 = u16::MAX - 1;

/// A member NIC: its block and the connection its packets go over.
struct Member {
    block: u8,
    sock: Arc<Socket>,
    /// It made a QP (`Control::Using`): its block is quarantined when it leaves; else
    /// the block comes back as it was before (`before`).
    used: bool,
    before: Option<std::time::Instant>,
}

/// The lease table, shared by the receive path and the lease thread.
struct Leases {
    own: u8,
    members: Vec<Member>,
    /// When each block's last member left (`grant`'s quarantine).
    freed: [Option<std::time::Instant>; 256],
}

struct Ctl {
    leases: Mutex<Leases>,
    /// Bumped on every change of `leases`.
    generation: AtomicU64,
    joined: AtomicU64,
    left: AtomicU64,
    stop: AtomicBool,
}

impl Ctl {
    fn lock(&self) -> std::sync::MutexGuard<'_, Leases> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A member as the receive path sees it.
struct Link {
    sock: Arc<Socket>,
    out: FwdWriter,
}

pub(super) struct Hub {
    /// Declared first so it is closed first: members that see the hub go (EOF) can bind
    /// the port at once.
    rx: UdpBackend,
    ctl: Arc<Ctl>,
    thread: Option<std::thread::JoinHandle<()>>,
    seen: u64,
    routes: [u16; 256],
    links: Vec<Link>,
    send: SendMmsg,
    stats: PortStats,
}

/// Why `Hub::bind` did not make a hub.
pub(super) enum BindError {
    /// Port 4791 or the listening name is held: someone else is (becoming) the hub.
    Taken,
    Other(BackendError),
}

impl Hub {
    /// Binds `ip`:4791 and the listening name and starts serving leases; `own` is the
    /// block this NIC keeps.
    pub(super) fn bind(ip: IpAddr, own: u8) -> Result<Hub, BindError> {
        let rx = match UdpBackend::bind(ip) {
            Ok(rx) => rx,
            Err(BackendError::Bind { source, .. }) if source.kind() == ErrorKind::AddrInUse => {
                return Err(BindError::Taken)
            }
            Err(e) => return Err(BindError::Other(e)),
        };
        let name = listener_name(ip);
        let listener = Socket::new(Domain::UNIX, Type::SEQPACKET.cloexec(), None).and_then(|s| {
            s.bind(&SockAddr::unix(&name)?)?;
            s.listen(64)?;
            s.set_nonblocking(true)?;
            Ok(s)
        });
        let listener = match listener {
            Ok(l) => l,
            // A hub on its way out still holds the name: try again shortly.
            Err(e) if e.kind() == ErrorKind::AddrInUse => return Err(BindError::Taken),
            Err(e) => return Err(BindError::Other(sys_error(ip, e))),
        };
        let ctl = Arc::new(Ctl {
            leases: Mutex::new(Leases {
                own,
                members: Vec::new(),
                freed: [None; 256],
            }),
            generation: AtomicU64::new(0),
            joined: AtomicU64::new(0),
            left: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        // A child forked from this process must not keep the port or its sockets: the
        // other NICs would never see the hub go (`sys::close_in_forked_children`).
        let fork_fds = [rx.rx_fd().as_raw_fd(), listener.as_raw_fd()];
        for fd in fork_fds {
            crate::backend::sys::close_in_forked_children(fd);
        }
        let thread = {
            let ctl = Arc::clone(&ctl);
            std::thread::Builder::new()
                .name("roce-emu-hub".into())
                .spawn(move || {
                    // Signals are for the program's own threads (as the progress thread).
                    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
                    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), None);
                    serve(&listener, &ctl);
                    crate::backend::sys::keep_in_forked_children(listener.as_raw_fd());
                })
                .map_err(|e| BindError::Other(sys_error(ip, e)))?
        };
        let mut routes = [ROUTE_NONE; 256];
        routes[usize::from(own)] = ROUTE_SELF;
        Ok(Hub {
            rx,
            ctl,
            thread: Some(thread),
            seen: 0,
            routes,
            links: Vec::new(),
            send: SendMmsg::new(FWD_BATCH, FWD_BATCH),
            stats: PortStats::default(),
        })
    }

    pub(super) fn rx_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.rx.rx_fd()
    }

    pub(super) fn stats(&self) -> PortStats {
        let mut s = self.stats;
        s.add(&self.rx.stats);
        s.share_joined = self.ctl.joined.load(Ordering::Relaxed);
        s.share_left = self.ctl.left.load(Ordering::Relaxed);
        s
    }

    /// Blocks leased now (for tests and the lead's diagnostics).
    pub(super) fn leased(&self) -> Vec<u8> {
        self.ctl.lock().members.iter().map(|m| m.block).collect()
    }

    /// Takes the lease table again if the lease thread changed it.
    fn refresh(&mut self) {
        let g = self.ctl.generation.load(Ordering::Acquire);
        if g == self.seen {
            return;
        }
        self.seen = g;
        let leases = self.ctl.lock();
        self.routes = [ROUTE_NONE; 256];
        self.routes[usize::from(leases.own)] = ROUTE_SELF;
        self.links.clear();
        for m in &leases.members {
            self.routes[usize::from(m.block)] = self.links.len() as u16;
            self.links.push(Link {
                sock: Arc::clone(&m.sock),
                out: FwdWriter::default(),
            });
        }
    }

    /// Receives a batch on 4791, forwards what is for members, and leaves in `out` what
    /// is for this NIC. A coalesced (GRO) datagram is split per packet; the packets this NIC
    /// keeps are moved together in place (in order, so the last, possibly short, packet
    /// stays last) and stay one entry: no copy unless a datagram is mixed.
    pub(super) fn recv_batch(
        &mut self,
        pool: &mut [u8],
        out: &mut [Received],
    ) -> Result<usize, BackendError> {
        self.refresh();
        let n = self.rx.recv_batch(pool, out)?;
        let mut k = 0;
        for i in 0..n {
            let r = out[i];
            let seg = r.segment.unwrap_or(r.len).max(1);
            let meta = FwdMeta {
                src: r.src,
                dst: r.dst,
                ipv4_id: r.ipv4_id,
            };
            let end = r.offset + r.len;
            let (mut at, mut w, mut kept) = (r.offset, r.offset, 0usize);
            loop {
                let e = (at + seg).min(end);
                let route = proto::dest_block(&pool[at..e])
                    .map_or(ROUTE_SELF, |b| self.routes[usize::from(b)]);
                if let Some(link) = self.links.get_mut(usize::from(route)) {
                    if !link.out.push(meta, &pool[at..e]) {
                        self.stats.share_forward_dropped += 1;
                    }
                } else {
                    if route == ROUTE_NONE {
                        self.stats.share_unleased += 1;
                    }
                    if w != at {
                        pool.copy_within(at..e, w);
                    }
                    w += e - at;
                    kept += 1;
                }
                at = e;
                if at >= end {
                    break;
                }
            }
            if kept > 0 {
                out[k] = Received {
                    len: w - r.offset,
                    segment: (kept > 1).then_some(seg),
                    ..r
                };
                k += 1;
            }
        }
        self.flush();
        Ok(k)
    }

    /// Sends each member its messages: one `sendmmsg` per member per batch (more only
    /// past `FWD_BATCH` messages). Never waits: a member whose socket is full loses the
    /// rest of the batch (counted), as a NIC whose queue is full drops.
    fn flush(&mut self) {
        for link in &mut self.links {
            if link.out.is_empty() {
                continue;
            }
            let total = link.out.messages().len();
            let fd = link.sock.as_fd();
            let mut done = 0;
            while done < total {
                let mut batch = self.send.batch();
                for m in link.out.messages().skip(done).take(FWD_BATCH) {
                    batch.push_connected(std::iter::once(m));
                }
                match batch.send(fd, 0) {
                    Ok(r) => {
                        self.stats.share_forward_msgs += r as u64;
                        done += r.max(1);
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    // Full (EAGAIN) or gone (EPIPE, ECONNRESET: the lease thread removes
                    // it): what is left is dropped.
                    Err(_) => break,
                }
            }
            let dropped = link.out.packets_from(done);
            self.stats.share_forward_dropped += dropped;
            self.stats.share_forwarded += link.out.packets - dropped;
            link.out.clear();
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.ctl.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        crate::backend::sys::keep_in_forked_children(self.rx.rx_fd().as_raw_fd());
        for m in &self.ctl.lock().members {
            crate::backend::sys::keep_in_forked_children(m.sock.as_raw_fd());
        }
    }
}

/// Most connections waiting for their `Join` at once: a flood of silent connections (of
/// this user's: others are refused at accept) displaces the oldest, never a new one.
const MAX_PENDING: usize = 32;

/// A connection accepted and not yet joined, dropped after `JOIN_READ`.
struct Pending {
    sock: Socket,
    since: std::time::Instant,
}

/// The lease thread: accepts joins, grants blocks, notices members that go. Everything
/// here is non-blocking: a connection that says nothing waits in `pending` beside the
/// others (it cannot hold up a join behind it), and is dropped after `JOIN_READ`.
fn serve(listener: &Socket, ctl: &Ctl) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let tick = PollTimeout::try_from(SERVE_TICK.as_millis() as i32).unwrap_or(PollTimeout::MAX);
    let uid = nix::unistd::geteuid().as_raw();
    let mut pending: Vec<Pending> = Vec::new();
    while !ctl.stop.load(Ordering::Relaxed) {
        let members: Vec<Arc<Socket>> = ctl
            .lock()
            .members
            .iter()
            .map(|m| Arc::clone(&m.sock))
            .collect();
        let mut fds = vec![PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        fds.extend(
            members
                .iter()
                .map(|s| PollFd::new(s.as_fd(), PollFlags::POLLIN)),
        );
        fds.extend(
            pending
                .iter()
                .map(|p| PollFd::new(p.sock.as_fd(), PollFlags::POLLIN)),
        );
        if poll(&mut fds, tick).is_err() {
            continue;
        }
        let ready: Vec<bool> = fds.iter().map(|f| f.any().unwrap_or(true)).collect();
        drop(fds);
        let (ready_members, ready_pending) = ready[1..].split_at(members.len());
        for (s, _) in members.iter().zip(ready_members).filter(|(_, r)| **r) {
            // After its join a member says only `Using`; readable otherwise means gone
            // (EOF, reset).
            let mut b = [0u8; proto::CONTROL_LEN];
            let gone = match (&**s).read(&mut b) {
                Ok(0) => true,
                Ok(n) => {
                    if Control::decode(&b[..n]) == Ok(Control::Using) {
                        let mut l = ctl.lock();
                        if let Some(m) = l.members.iter_mut().find(|m| Arc::ptr_eq(&m.sock, s)) {
                            m.used = true;
                        }
                    }
                    false
                }
                Err(e) => e.kind() != ErrorKind::WouldBlock && e.kind() != ErrorKind::Interrupted,
            };
            if gone {
                let mut l = ctl.lock();
                let now = std::time::Instant::now();
                let Leases { members, freed, .. } = &mut *l;
                members.retain(|m| {
                    let keep = !Arc::ptr_eq(&m.sock, s);
                    if !keep {
                        freed[usize::from(m.block)] = if m.used { Some(now) } else { m.before };
                        crate::backend::sys::keep_in_forked_children(m.sock.as_raw_fd());
                    }
                    keep
                });
                ctl.generation.fetch_add(1, Ordering::Release);
                ctl.left.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Joins that arrived, in order; the rest wait (or time out).
        let mut k = 0;
        pending.retain(|p| {
            let r = ready_pending.get(k).copied().unwrap_or(false);
            k += 1;
            if r {
                join(&p.sock, ctl);
                return false;
            }
            p.since.elapsed() < JOIN_READ
        });
        if ready[0] {
            while let Ok((sock, _)) = listener.accept() {
                if let Some(p) = admit(sock, uid) {
                    if pending.len() >= MAX_PENDING {
                        pending.remove(0);
                    }
                    pending.push(p);
                }
            }
        }
    }
}

/// A new connection: only this user's NICs may join (`SO_PEERCRED`; the abstract socket
/// itself has no permissions, so anyone on the machine can connect to it).
fn admit(sock: Socket, uid: u32) -> Option<Pending> {
    let peer = nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::PeerCredentials)
        .map(|c| c.uid())
        .ok();
    if peer != Some(uid) {
        let answer = Control::Refused { why: Refusal::User }.encode();
        let _ = sock.send_with_flags(&answer, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT);
        return None;
    }
    sock.set_nonblocking(true).ok()?;
    Some(Pending {
        sock,
        since: std::time::Instant::now(),
    })
}

/// Serves one joining NIC whose `Join` waits: grants a block or refuses.
fn join(sock: &Socket, ctl: &Ctl) {
    let mut b = [0u8; proto::CONTROL_LEN + 1];
    let msg = match (&*sock).read(&mut b) {
        Ok(n) => Control::decode(&b[..n]),
        Err(_) => return,
    };
    let answer = match msg {
        Ok(Control::Join { claim }) => {
            let mut l = ctl.lock();
            match grant(&l, claim, std::time::Instant::now()) {
                Ok(block) => {
                    let Ok(sock) = sock.try_clone() else { return };
                    let _ = sock.set_send_buffer_size(MEMBER_SNDBUF);
                    crate::backend::sys::close_in_forked_children(sock.as_raw_fd());
                    let sock = Arc::new(sock);
                    // Routed before the member hears of its lease: whoever learns one of
                    // its QPNs from it finds the route in place.
                    let before = l.freed[usize::from(block)];
                    l.members.push(Member {
                        block,
                        sock: Arc::clone(&sock),
                        // A take-over's claim: the block was in use under the old hub.
                        used: claim.is_some(),
                        before,
                    });
                    l.freed[usize::from(block)] = None;
                    ctl.generation.fetch_add(1, Ordering::Release);
                    let reply = Control::Lease { block }.encode();
                    if sock
                        .send_with_flags(&reply, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
                        .is_ok()
                    {
                        ctl.joined.fetch_add(1, Ordering::Relaxed);
                    } else {
                        l.members.retain(|m| !Arc::ptr_eq(&m.sock, &sock));
                        ctl.generation.fetch_add(1, Ordering::Release);
                        crate::backend::sys::keep_in_forked_children(sock.as_raw_fd());
                    }
                    return;
                }
                Err(why) => Control::Refused { why },
            }
        }
        Err(Some(why)) => Control::Refused { why },
        // Not one of ours: close it.
        _ => return,
    };
    let _ = sock.send_with_flags(&answer.encode(), libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT);
}

/// The block for a joining NIC: the one it claims if nobody holds it (a take-over: it
/// had that block under a hub that went away), else a free one out of quarantine: never
/// used ones first, lowest first from 1 (block 0 last: the first hub's, whose QPNs remote
/// peers may still send to), then the one free the longest.
fn grant(l: &Leases, claim: Option<u8>, now: std::time::Instant) -> Result<u8, Refusal> {
    let taken = |b: u8| b == l.own || l.members.iter().any(|m| m.block == b);
    if let Some(b) = claim {
        return if taken(b) { Err(Refusal::Taken) } else { Ok(b) };
    }
    let free = (1..=255u8).chain([0]).filter(|&b| !taken(b));
    let mut best: Option<(u8, Option<std::time::Instant>)> = None;
    for b in free {
        match l.freed[usize::from(b)] {
            None => return Ok(b),
            Some(t) if now.saturating_duration_since(t) >= proto::QUARANTINE => {
                if best.is_none_or(|(_, t0)| t0.is_some_and(|t0| t < t0)) {
                    best = Some((b, Some(t)));
                }
            }
            Some(_) => {}
        }
    }
    best.map(|(b, _)| b).ok_or(Refusal::Full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn sock() -> Arc<Socket> {
        let (a, _) = std::os::unix::net::UnixDatagram::pair().unwrap();
        Arc::new(Socket::from(std::os::fd::OwnedFd::from(a)))
    }

    #[test]
    fn blocks_are_granted_once_and_claims_are_honoured() {
        let s = sock();
        let now = Instant::now();
        let mut l = Leases {
            own: 3,
            members: vec![Member {
                block: 1,
                sock: Arc::clone(&s),
                used: true,
                before: None,
            }],
            freed: [None; 256],
        };
        assert_eq!(grant(&l, None, now), Ok(2));
        assert_eq!(grant(&l, Some(1), now), Err(Refusal::Taken));
        assert_eq!(
            grant(&l, Some(3), now),
            Err(Refusal::Taken),
            "the hub's own"
        );
        assert_eq!(grant(&l, Some(0), now), Ok(0));
        l.members = (0..=255u8)
            .filter(|&b| b != 3)
            .map(|b| Member {
                block: b,
                sock: Arc::clone(&s),
                used: true,
                before: None,
            })
            .collect();
        assert_eq!(grant(&l, None, now), Err(Refusal::Full));
    }

    #[test]
    fn a_block_a_member_left_is_quarantined_but_its_holder_may_claim_it_back() {
        let s = sock();
        let t0 = Instant::now();
        let mut l = Leases {
            own: 0,
            members: (2..=255u8)
                .map(|b| Member {
                    block: b,
                    sock: Arc::clone(&s),
                    used: true,
                    before: None,
                })
                .collect(),
            freed: [None; 256],
        };
        // Block 1's member just left: nobody new gets it until the quarantine passed.
        l.freed[1] = Some(t0);
        assert_eq!(grant(&l, None, t0), Err(Refusal::Full));
        assert_eq!(
            grant(&l, None, t0 + proto::QUARANTINE / 2),
            Err(Refusal::Full)
        );
        assert_eq!(grant(&l, None, t0 + proto::QUARANTINE), Ok(1));
        // Its old holder, rejoining after a hub went away, claims it at once.
        assert_eq!(grant(&l, Some(1), t0), Ok(1));
        // Of two free blocks out of quarantine, the one free the longest goes first.
        l.members.retain(|m| m.block != 7);
        l.freed[7] = Some(t0 + Duration::from_secs(1));
        l.freed[1] = Some(t0 + Duration::from_secs(2));
        let later = t0 + proto::QUARANTINE + Duration::from_secs(3);
        assert_eq!(grant(&l, None, later), Ok(7));
    }
}
