//! Several NICs on one IP address (several processes, or several contexts in one): RoCEv2
//! sends every packet to UDP port 4791, so only one socket can receive them. With no
//! set-up and no daemon, the NICs of an address elect one of themselves to receive for all:
//!
//! - **election**: the first NIC to bind `ip`:4791 is the *hub*; it also listens on a
//!   Unix `SOCK_SEQPACKET` socket in the abstract namespace named from the address
//!   ([`listener_name`]; abstract names belong to the network namespace, as the UDP port
//!   does). A later NIC finds the port taken, connects there and is a *member*.
//! - **leases**: the hub keeps a block of 2^16 QPNs (the first hub block 0, so a lone NIC
//!   numbers its QPs as today) and leases each member another (`proto`). A NIC's engine
//!   hands out QPNs only from its block (`EngineConfig::qpn_lo..=qpn_hi`), so a packet's BTH
//!   DestQP names the NIC it is for.
//! - **forwarding**: the hub routes each received packet by the top byte of its DestQP; a
//!   member's packets go to it over its connection in batches, with the source and
//!   destination addresses its engine needs (`hub`, `proto`). Packets for blocks nobody
//!   holds stay with the hub's engine, which drops them as for an unknown QP.
//! - **sending**: every NIC sends directly, from its own UDP socket on a port the kernel
//!   picks (so NICs never contend for source ports); its engine puts that port in every
//!   packet (`EngineConfig::udp_src_port`; the ICRC covers it, and rxe accepts any source
//!   port).
//! - **the hub going away** (its process exits, or its context is dropped): members see
//!   their connection end. Each tries to become the hub (bind 4791), keeping its own block;
//!   the others join the new hub claiming theirs. No member loses a QP; packets in flight
//!   meanwhile are lost and retransmitted. Every wait is bounded (`TAKEOVER_WAIT`).
//!
//! - **one user**: the hub serves only NICs of its own user, and a NIC joins only a hub of
//!   its own user (`SO_PEERCRED` both ways: an abstract name has no permissions); a block
//!   a member left is quarantined before it is granted again (`proto::QUARANTINE`).
//!
//! `roce-emu daemon` does the same job as a process of its own, which outlives the
//! programs (design wave3.md §1 has the daemon replace this election).
//!
//! `rx_fd` is an epoll set holding whichever socket receives now (the UDP port as hub, the
//! connection as member), so a progress thread that took it once keeps sleeping on the
//! right socket across a change of role.

mod hub;
mod member;
pub mod proto;
#[cfg(test)]
mod tests;

use super::udp::UdpBackend;
use super::{Backend, BackendError, Outgoing, PortStats, Received};
use crate::wire::ROCE_UDP_PORT;
use hub::Hub;
use member::Member;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

/// Longest a NIC tries to find or become the hub: when it opens, and after the hub went
/// away. The address is then held by something that does not share it (rxe, or a NIC
/// opened with sharing off), or the hub does not answer.
pub const TAKEOVER_WAIT: Duration = Duration::from_secs(3);
/// Pause between two tries of the election (a hub is binding, or on its way out).
const RETRY: Duration = Duration::from_millis(5);

/// The abstract Unix socket name a hub of `ip` listens on (leading NUL: abstract).
pub fn listener_name(ip: IpAddr) -> String {
    format!("\0roce-emu/share/v{}/{ip}", proto::VERSION)
}

/// An I/O error of the sharing machinery, reported as a failure to open the port.
fn sys_error(ip: IpAddr, source: std::io::Error) -> BackendError {
    BackendError::Bind {
        addr: SocketAddr::new(ip, ROCE_UDP_PORT),
        source,
        hint: " (sharing the address with other NICs)",
    }
}

enum Role {
    // Boxed: the two differ much in size, and a NIC changes role rarely.
    Hub(Box<Hub>),
    Member(Box<Member>),
}

impl Role {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Role::Hub(h) => h.rx_fd(),
            Role::Member(m) => m.rx_fd(),
        }
    }

    fn stats(&self) -> PortStats {
        match self {
            Role::Hub(h) => h.stats(),
            Role::Member(m) => m.stats(),
        }
    }
}

/// A NIC on an address it may share with others (see the module docs).
pub struct SharedBackend {
    local: SocketAddr,
    /// Sends everything, from a port the kernel picked (`src_port`).
    tx: UdpBackend,
    role: Role,
    /// This NIC's QPN block: kept across changes of hub.
    block: u8,
    /// Holds the receiving socket of the current role (`rx_fd`).
    epoll: Epoll,
    /// What roles this NIC no longer has counted, and its own counts (takeovers, rejoins).
    retired: PortStats,
    /// It made a QP (`Backend::mark_used`): said to every hub it is a member of.
    used: bool,
}

impl SharedBackend {
    /// Opens a NIC on `ip`: the hub if nobody holds `ip`:4791, else a member of its hub.
    pub fn open(ip: IpAddr) -> Result<SharedBackend, BackendError> {
        let tx = UdpBackend::bind_port(SocketAddr::new(ip, 0))?;
        let role = elect(ip, None, Instant::now() + TAKEOVER_WAIT)?;
        let block = match &role {
            Role::Hub(_) => proto::FIRST_HUB_BLOCK,
            Role::Member(m) => m.block,
        };
        let epoll =
            Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|e| sys_error(ip, e.into()))?;
        epoll
            .add(role.fd(), EpollEvent::new(EpollFlags::EPOLLIN, 0))
            .map_err(|e| sys_error(ip, e.into()))?;
        Ok(SharedBackend {
            local: SocketAddr::new(ip, ROCE_UDP_PORT),
            tx,
            role,
            block,
            epoll,
            retired: PortStats::default(),
            used: false,
        })
    }

    /// One datagram per packet from now on (`--no-gso`).
    pub fn set_gso(&mut self, on: bool) {
        self.tx.set_gso(on);
    }

    /// The QPNs this NIC's engine may hand out (its block).
    pub fn qpn_range(&self) -> (u32, u32) {
        proto::block_range(self.block)
    }

    /// The UDP source port of everything this NIC sends.
    pub fn src_port(&self) -> u16 {
        self.tx.local().port()
    }

    /// Whether this NIC receives for the address (holds port 4791) now.
    pub fn is_hub(&self) -> bool {
        matches!(self.role, Role::Hub(_))
    }

    /// The blocks the hub has leased (empty for a member).
    pub fn leased_blocks(&self) -> Vec<u8> {
        match &self.role {
            Role::Hub(h) => h.leased(),
            Role::Member(_) => Vec::new(),
        }
    }

    /// The hub went away: become the hub or join the new one, keeping the block.
    fn take_over(&mut self) -> Result<(), BackendError> {
        let ip = self.local.ip();
        let _ = self.epoll.delete(self.role.fd());
        let role = elect(ip, Some(self.block), Instant::now() + TAKEOVER_WAIT)?;
        self.retired.add(&self.role.stats());
        match role {
            Role::Hub(_) => self.retired.share_takeovers += 1,
            Role::Member(_) => self.retired.share_rejoins += 1,
        }
        // The old role (its socket) goes first, then the new one is watched.
        self.role = role;
        if let (Role::Member(m), true) = (&self.role, self.used) {
            m.say_using();
        }
        self.epoll
            .add(self.role.fd(), EpollEvent::new(EpollFlags::EPOLLIN, 0))
            .map_err(|e| sys_error(ip, e.into()))?;
        tracing::info!(
            "{ip}: the hub went away; this NIC is now {} (QPN block {})",
            if self.is_hub() { "the hub" } else { "a member" },
            self.block
        );
        Ok(())
    }
}

/// Becomes the hub of `ip` or joins it, keeping block `claim` if given, until `deadline`.
fn elect(ip: IpAddr, claim: Option<u8>, deadline: Instant) -> Result<Role, BackendError> {
    loop {
        match Hub::bind(ip, claim.unwrap_or(proto::FIRST_HUB_BLOCK)) {
            Ok(h) => return Ok(Role::Hub(Box::new(h))),
            Err(hub::BindError::Other(e)) => return Err(e),
            Err(hub::BindError::Taken) => {}
        }
        match Member::join(ip, claim, deadline) {
            Ok(m) => return Ok(Role::Member(Box::new(m))),
            Err(member::JoinError::Refused(e)) => return Err(e),
            Err(member::JoinError::NoHub) => {}
        }
        if Instant::now() >= deadline {
            // A daemon's port: say how to attach to it.
            let (source, hint) = match crate::backend::daemon_path::held_by_daemon(ip) {
                Some(e) => (e, ""),
                None => (
                    ErrorKind::AddrInUse.into(),
                    " (held by a NIC that does not share the address (rxe, or a NIC \
                     opened with sharing off), or its hub does not answer)",
                ),
            };
            return Err(BackendError::Bind {
                addr: SocketAddr::new(ip, ROCE_UDP_PORT),
                source,
                hint,
            });
        }
        std::thread::sleep(RETRY);
    }
}

impl Backend for SharedBackend {
    fn local(&self) -> SocketAddr {
        self.local
    }

    fn recv_batch(&mut self, pool: &mut [u8], out: &mut [Received]) -> Result<usize, BackendError> {
        match &mut self.role {
            Role::Hub(h) => h.recv_batch(pool, out),
            Role::Member(m) => {
                let n = m.recv_batch(pool, out)?;
                if m.hub_gone {
                    // What arrived before the end is in `pool` and `out`: take-over leaves
                    // both alone.
                    self.take_over()?;
                }
                Ok(n)
            }
        }
    }

    fn send_batch(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &[Outgoing],
    ) -> Result<(), BackendError> {
        self.tx.send_batch(pool, slot, out)
    }

    fn mark_used(&mut self) {
        if self.used {
            return;
        }
        self.used = true;
        if let Role::Member(m) = &self.role {
            m.say_using();
        }
    }

    fn rx_fd(&self) -> BorrowedFd<'_> {
        self.epoll.0.as_fd()
    }

    fn stats(&self) -> PortStats {
        let mut s = self.retired;
        s.add(&self.tx.stats);
        s.add(&self.role.stats());
        s
    }
}
