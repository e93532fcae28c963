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
use std::os::fd::AsFd;
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

/// The lease table, shared by the receive path and the lease thread.
struct Leases {
    own: u8,
    members: Vec<(u8, Arc<Socket>)>,
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
            }),
            generation: AtomicU64::new(0),
            joined: AtomicU64::new(0),
            left: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let thread = {
            let ctl = Arc::clone(&ctl);
            std::thread::Builder::new()
                .name("roce-emu-hub".into())
                .spawn(move || {
                    // Signals are for the program's own threads (as the progress thread).
                    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
                    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), None);
                    serve(&listener, &ctl);
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
        self.ctl.lock().members.iter().map(|m| m.0).collect()
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
        for (block, sock) in &leases.members {
            self.routes[usize::from(*block)] = self.links.len() as u16;
            self.links.push(Link {
                sock: Arc::clone(sock),
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
    }
}

/// The lease thread: accepts joins, grants blocks, notices members that go.
fn serve(listener: &Socket, ctl: &Ctl) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let tick = PollTimeout::try_from(SERVE_TICK.as_millis() as i32).unwrap_or(PollTimeout::MAX);
    while !ctl.stop.load(Ordering::Relaxed) {
        let members: Vec<Arc<Socket>> = ctl
            .lock()
            .members
            .iter()
            .map(|m| Arc::clone(&m.1))
            .collect();
        let mut fds = vec![PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        fds.extend(
            members
                .iter()
                .map(|s| PollFd::new(s.as_fd(), PollFlags::POLLIN)),
        );
        if poll(&mut fds, tick).is_err() {
            continue;
        }
        let ready: Vec<bool> = fds.iter().map(|f| f.any().unwrap_or(true)).collect();
        drop(fds);
        for (s, _) in members.iter().zip(&ready[1..]).filter(|(_, r)| **r) {
            // A member sends nothing after its join: readable means gone (EOF, reset).
            let mut b = [0u8; proto::CONTROL_LEN];
            let gone = match (&**s).read(&mut b) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => e.kind() != ErrorKind::WouldBlock && e.kind() != ErrorKind::Interrupted,
            };
            if gone {
                let mut l = ctl.lock();
                l.members.retain(|m| !Arc::ptr_eq(&m.1, s));
                ctl.generation.fetch_add(1, Ordering::Release);
                ctl.left.fetch_add(1, Ordering::Relaxed);
            }
        }
        if ready[0] {
            while let Ok((sock, _)) = listener.accept() {
                join(sock, ctl);
            }
        }
    }
}

/// Serves one joining NIC: reads its `Join`, grants a block or refuses.
fn join(sock: Socket, ctl: &Ctl) {
    let mut b = [0u8; proto::CONTROL_LEN + 1];
    let _ = sock.set_nonblocking(false);
    let _ = sock.set_read_timeout(Some(JOIN_READ));
    let msg = match (&sock).read(&mut b) {
        Ok(n) => Control::decode(&b[..n]),
        Err(_) => return,
    };
    let answer = match msg {
        Ok(Control::Join { claim }) => {
            let mut l = ctl.lock();
            match grant(&l, claim) {
                Ok(block) => {
                    let _ = sock.set_nonblocking(true);
                    let _ = sock.set_send_buffer_size(MEMBER_SNDBUF);
                    let sock = Arc::new(sock);
                    // Routed before the member hears of its lease: whoever learns one of
                    // its QPNs from it finds the route in place.
                    l.members.push((block, Arc::clone(&sock)));
                    ctl.generation.fetch_add(1, Ordering::Release);
                    let reply = Control::Lease { block }.encode();
                    if sock.send_with_flags(&reply, libc::MSG_NOSIGNAL).is_ok() {
                        ctl.joined.fetch_add(1, Ordering::Relaxed);
                    } else {
                        l.members.retain(|m| !Arc::ptr_eq(&m.1, &sock));
                        ctl.generation.fetch_add(1, Ordering::Release);
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
    let _ = sock.send_with_flags(&answer.encode(), libc::MSG_NOSIGNAL);
}

/// The block for a joining NIC: the one it claims if free, else the lowest free one from
/// 1 (block 0 last: the first hub's, whose QPNs remote peers may still send to).
fn grant(l: &Leases, claim: Option<u8>) -> Result<u8, Refusal> {
    let taken = |b: u8| b == l.own || l.members.iter().any(|m| m.0 == b);
    match claim {
        Some(b) if taken(b) => Err(Refusal::Taken),
        Some(b) => Ok(b),
        None => (1..=255u8)
            .chain([0])
            .find(|&b| !taken(b))
            .ok_or(Refusal::Full),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_granted_once_and_claims_are_honoured() {
        let (a, _) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let s = Arc::new(Socket::from(std::os::fd::OwnedFd::from(a)));
        let mut l = Leases {
            own: 3,
            members: vec![(1, Arc::clone(&s))],
        };
        assert_eq!(grant(&l, None), Ok(2));
        assert_eq!(grant(&l, Some(1)), Err(Refusal::Taken));
        assert_eq!(grant(&l, Some(3)), Err(Refusal::Taken), "the hub's own");
        assert_eq!(grant(&l, Some(0)), Ok(0));
        l.members = (0..=255u8)
            .filter(|&b| b != 3)
            .map(|b| (b, Arc::clone(&s)))
            .collect();
        assert_eq!(grant(&l, None), Err(Refusal::Full));
    }
}
