//! A member: a NIC on a shared address that does not hold port 4791. It leased a QPN block
//! from the hub over a Unix `SOCK_SEQPACKET` connection, and the same connection brings it
//! the packets for that block (`proto`'s forward messages) and, by its end (EOF), the news
//! that the hub went away.

use super::proto::{self, Control, Refusal};
use super::{listener_name, sys_error};
use crate::backend::sys::{RecvMeta, RecvMmsg};
use crate::backend::udp::RX_SLOT;
use crate::backend::{BackendError, PortStats, Received};
use socket2::{Domain, SockAddr, Socket, Type};
use std::io::{ErrorKind, Read};
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// Most forward messages one `recvmmsg` takes (each fills a receive slot).
const MEMBER_BATCH: usize = 4;
/// Longest wait for the hub's answer to a `Join`.
const LEASE_WAIT: Duration = Duration::from_millis(1000);

pub(super) struct Member {
    sock: Socket,
    pub(super) block: u8,
    rx: RecvMmsg,
    meta: [RecvMeta; MEMBER_BATCH],
    /// Messages the next `recvmmsg` asks for: one after a call that found nothing (as
    /// `UdpBackend::recv_batch`, whose notes say why).
    want: usize,
    /// The hub closed the connection (it went away).
    pub(super) hub_gone: bool,
    stats: PortStats,
}

/// Why `Member::join` did not make a member.
pub(super) enum JoinError {
    /// Nobody listens (yet, or any more), or the hub went before it answered: try again.
    NoHub,
    /// The hub refused (a claimed block is someone else's, all blocks leased, another
    /// version): trying again will not help.
    Refused(BackendError),
}

impl Member {
    /// Connects to the hub of `ip` and leases a block: any, or `claim` (the one it had).
    pub(super) fn join(
        ip: IpAddr,
        claim: Option<u8>,
        deadline: Instant,
    ) -> Result<Member, JoinError> {
        let sock = Socket::new(Domain::UNIX, Type::SEQPACKET.cloexec(), None)
            .map_err(|e| JoinError::Refused(sys_error(ip, e)))?;
        let addr =
            SockAddr::unix(listener_name(ip)).map_err(|e| JoinError::Refused(sys_error(ip, e)))?;
        if sock.connect(&addr).is_err() {
            return Err(JoinError::NoHub);
        }
        // The listening name is abstract (no permissions): anyone can hold it. Our packets
        // go only to a hub of our own user (`SO_PEERCRED`: who bound and listens).
        let own = nix::unistd::geteuid().as_raw();
        let hub_uid =
            nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::PeerCredentials)
                .map(|c| c.uid())
                .map_err(|e| JoinError::Refused(sys_error(ip, e.into())))?;
        if hub_uid != own {
            let e = std::io::Error::new(
                ErrorKind::AddrInUse,
                format!(
                    "the address is shared by a NIC of another user (uid {hub_uid}; this program \
                     runs as {own}): use another address, or a roce-emu daemon of your own"
                ),
            );
            return Err(JoinError::Refused(sys_error(ip, e)));
        }
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(10), LEASE_WAIT);
        let _ = sock.set_read_timeout(Some(wait));
        let join = Control::Join { claim }.encode();
        if sock.send_with_flags(&join, libc::MSG_NOSIGNAL).is_err() {
            return Err(JoinError::NoHub);
        }
        let mut b = [0u8; proto::CONTROL_LEN + 1];
        let answer = match (&sock).read(&mut b) {
            Ok(n) => Control::decode(&b[..n]),
            Err(_) => return Err(JoinError::NoHub),
        };
        let block = match answer {
            Ok(Control::Lease { block }) => block,
            Ok(Control::Refused { why }) => {
                let why = match why {
                    Refusal::Taken => "the QPN block this NIC had is leased to another",
                    Refusal::Full => "all 256 QPN blocks are leased",
                    Refusal::Version => "the hub speaks another protocol version",
                    Refusal::User => "the NIC holding the address runs as another user",
                };
                let e = std::io::Error::new(ErrorKind::AddrInUse, why);
                return Err(JoinError::Refused(sys_error(ip, e)));
            }
            // EOF (a hub on its way out) or nonsense.
            _ => return Err(JoinError::NoHub),
        };
        sock.set_nonblocking(true)
            .map_err(|e| JoinError::Refused(sys_error(ip, e)))?;
        // A forked child keeping this connection would keep the lease after we go.
        crate::backend::sys::close_in_forked_children(std::os::fd::AsRawFd::as_raw_fd(&sock));
        Ok(Member {
            sock,
            block,
            rx: RecvMmsg::new(MEMBER_BATCH),
            meta: [RecvMeta::default(); MEMBER_BATCH],
            want: MEMBER_BATCH,
            hub_gone: false,
            stats: PortStats::default(),
        })
    }

    /// Tells the hub this NIC made a QP (`Control::Using`). The socket is empty but for
    /// this 8-byte message, so it never waits; a hub gone meanwhile is noticed by the
    /// receive path.
    pub(super) fn say_using(&self) {
        let m = Control::Using.encode();
        let _ = self
            .sock
            .send_with_flags(&m, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT);
    }

    pub(super) fn rx_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.sock.as_fd()
    }

    pub(super) fn stats(&self) -> PortStats {
        self.stats
    }

    /// Receives forward messages, message `i` into slot `i` of `pool` (`RX_SLOT` bytes,
    /// what a message may hold), and gives each entry (a packet or a run of equal-length
    /// packets) as one `Received` pointing into the message: no copy. It asks for as many
    /// messages as `out` has room for their entries. An EOF sets `hub_gone`.
    pub(super) fn recv_batch(
        &mut self,
        pool: &mut [u8],
        out: &mut [Received],
    ) -> Result<usize, BackendError> {
        let n = (out.len() / proto::MAX_ENTRIES)
            .clamp(1, MEMBER_BATCH)
            .min(self.want);
        self.want = MEMBER_BATCH;
        let got = match self
            .rx
            .recv(self.sock.as_fd(), pool, RX_SLOT, &mut self.meta[..n])
        {
            Ok(g) => g,
            Err(e) if e.kind() == ErrorKind::Interrupted => 0,
            // The hub's end closed with our data unread, or the connection is gone.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::NotConnected | ErrorKind::BrokenPipe
                ) =>
            {
                self.hub_gone = true;
                0
            }
            Err(source) => {
                return Err(BackendError::Recv {
                    addr: std::net::SocketAddr::new(
                        std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                        0,
                    ),
                    source,
                })
            }
        };
        if got == 0 {
            self.want = 1;
            return Ok(0);
        }
        let mut k = 0;
        for (i, m) in self.meta[..got].iter().enumerate() {
            // The hub never sends an empty message: this is its end (EOF).
            if m.len == 0 {
                self.hub_gone = true;
                break;
            }
            if m.truncated {
                self.stats.share_malformed += 1;
                continue;
            }
            let base = i * RX_SLOT;
            let stats = &mut self.stats;
            let parsed = proto::parse(&pool[base..base + m.len], |meta, r, seg| {
                let packets = r.len().div_ceil(seg).max(1) as u64;
                let Some(slot) = out.get_mut(k) else {
                    // Only a caller with fewer than MAX_ENTRIES slots gets here.
                    stats.truncated += packets;
                    return;
                };
                *slot = Received {
                    src: meta.src,
                    dst: meta.dst,
                    offset: base + r.start,
                    len: r.len(),
                    segment: (r.len() > seg).then_some(seg),
                    ipv4_id: meta.ipv4_id,
                };
                k += 1;
                stats.share_received += packets;
            });
            if parsed.is_err() {
                self.stats.share_malformed += 1;
            }
        }
        Ok(k)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        crate::backend::sys::keep_in_forked_children(std::os::fd::AsRawFd::as_raw_fd(&self.sock));
    }
}
