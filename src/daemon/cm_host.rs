//! The daemon's side of the connection manager (contract §2): it hosts the port's
//! `crate::cm::Cm` (sans-IO) and gives it what it cannot have itself: QP1 on the port
//! ([`super::qp1`]: packets in, MADs out), time, address resolution ([`resolve`]) and the
//! CM clients (the programs' librdmacm, one control connection each: an [`Owner`]).
//!
//! The glue to the server loop is `server::cm`; this module holds the state that is not
//! the loop's: the `Cm`, QP1's send sequence and counters, the resolver, the clients'
//! counters. Nothing here blocks: the port is the server's (non-blocking) backend, and a
//! client's answers go through its outbox.

pub(super) mod resolve;

use super::control::{ControlError, PortInfo, ToProcess};
use super::port::PortSpec;
use super::qp1::{self, Net, Qp1Counters, Sender, PACKET_LEN};
use crate::backend::{Backend, BackendError, Outgoing};
use crate::cm::ucma::{self, Reply, Request, ToLibrary};
use crate::cm::{Cm, CmConfig, MadPeer, Owner};
use crate::engine::Instant;
use crate::wire::icrc::Ipv4IdSolver;
use crate::wire::Ecn;
use resolve::Resolver;
use serde::Serialize;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// MADs sent (or hairpinned) per turn at most: a storm of MADs to ourselves (each answer
/// making another) cannot hold the loop; the rest go next turn.
pub(super) const MADS_PER_TURN: usize = 256;
/// Events handed to the clients per turn at most.
pub(super) const EVENTS_PER_TURN: usize = 1024;
/// Address resolutions answered per turn at most.
const RESOLVES_PER_TURN: usize = 64;

/// The CM clients' counters (`roce-emu counters`: `cm_clients`).
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct CmClientCounters {
    /// CM connections open now.
    pub connected: u64,
    /// `CmHello`s taken, and refused (another protocol version).
    pub hellos: u64,
    pub refused: u64,
    /// Requests answered, and among them those that did not parse (`EINVAL`).
    pub requests: u64,
    pub bad_requests: u64,
    /// Events sent, and events for an owner no longer connected (dropped).
    pub events: u64,
    pub events_unowned: u64,
    /// Connections that ended (EOF, error, or detached): `Cm::owner_gone` for each.
    pub gone: u64,
    /// rdma_cm ids the CM holds now, of every client (`Cm::id_count`).
    pub ids: u64,
}

/// The port's connection manager and QP1.
pub(super) struct CmHost {
    pub(super) cm: Cm,
    sender: Sender,
    solver: Ipv4IdSolver,
    resolver: Resolver,
    node_guid: u64,
    /// The port's IB MTU in bytes (`CmConfig::mtu`).
    ib_mtu: u32,
    pub(super) qp1: Qp1Counters,
    pub(super) clients: CmClientCounters,
    buf: Vec<u8>,
    /// The CM was called since its last turn (a command, a MAD, an owner gone), or that
    /// turn stopped at a bound: it may have MADs, events or resolutions waiting.
    pub(super) dirty: bool,
    /// `Cm::poll_timeout` as of the CM's last turn (it changes only through calls into
    /// the CM), so an idle turn of the loop costs no walk over the CM's ids.
    pub(super) deadline: Option<Instant>,
}

/// The node GUID of a port with this MAC: its modified EUI-64 (`addrconf_addr_eui48`, as
/// rxe; the same as `verbs::PortConfig::node_guid`, so librdmacm matches the device).
pub fn node_guid(mac: [u8; 6]) -> u64 {
    let m = mac;
    u64::from_be_bytes([m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
}

/// The IB MTU of a link of `mtu` bytes, as rxe's port (`rxe_net.c`, `eth_mtu_int_to_enum`
/// less RXE_MAX_HDR_LENGTH 80): the largest of 256..4096 that fits.
pub fn ib_mtu(link_mtu: u32) -> u32 {
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|&m| m + 80 <= link_mtu)
        .unwrap_or(256)
}

/// The daemon's clock (time since it started) as the engine's and the CM's `Instant`.
pub(super) fn instant(since_start: Duration) -> Instant {
    Instant::from_nanos(u64::try_from(since_start.as_nanos()).unwrap_or(u64::MAX))
}

impl CmHost {
    pub(super) fn new(spec: &PortSpec, info: &PortInfo) -> CmHost {
        let node_guid = node_guid(info.mac);
        let ib_mtu = ib_mtu(info.mtu);
        // PSNs, comm IDs and TIDs differ from one daemon to the next (a restarted daemon's
        // comm IDs must not match its predecessor's in a peer's timewait).
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ (u64::from(std::process::id()) << 32);
        CmHost {
            cm: Cm::new(CmConfig {
                node_guid,
                addrs: info.addrs.clone(),
                mtu: ib_mtu,
                seed,
            }),
            sender: Sender::new(),
            solver: Ipv4IdSolver::new(),
            resolver: Resolver::new(spec, &info.addrs),
            node_guid,
            ib_mtu,
            qp1: Qp1Counters::default(),
            clients: CmClientCounters::default(),
            buf: vec![0; PACKET_LEN],
            dirty: false,
            deadline: None,
        }
    }

    /// The answer to a `CmHello` of protocol `version`; `None` for another version.
    pub(super) fn hello(&mut self, version: u32, addrs: &[IpAddr]) -> Option<ToProcess> {
        if version != ucma::VERSION {
            self.clients.refused += 1;
            return None;
        }
        self.clients.hellos += 1;
        self.clients.connected += 1;
        Some(ToProcess::CmWelcome {
            version: ucma::VERSION,
            node_guid: self.node_guid,
            addrs: addrs.to_vec(),
            mtu: self.ib_mtu,
        })
    }

    /// The clients' counters, with the ids held now.
    pub(super) fn client_counters(&self) -> CmClientCounters {
        CmClientCounters {
            ids: self.cm.id_count() as u64,
            ..self.clients
        }
    }

    /// A packet for QP1 from the port: its MAD to the CM, or a counted drop.
    pub(super) fn receive(&mut self, now: Instant, net: &Net, pkt: &[u8]) {
        match qp1::parse(net, pkt, &mut self.solver) {
            Ok(mad) => {
                self.qp1.rcvd_pkts += 1;
                let peer = MadPeer {
                    remote: net.src.ip(),
                    local: net.dst.ip(),
                };
                self.dirty = true;
                self.cm.handle_mad(now, peer, mad);
            }
            Err(d) => {
                tracing::debug!(src = %net.src, why = ?d, "QP1 packet dropped");
                self.qp1.count(d);
            }
        }
    }

    /// One message of a CM client: its reply. A message that does not parse as a
    /// `Request` is answered `EINVAL` (with its `seq` if it has one) and counted.
    pub(super) fn request(
        &mut self,
        now: Instant,
        owner: Owner,
        msg: Result<serde_json::Value, ControlError>,
    ) -> ToLibrary {
        self.clients.requests += 1;
        let (seq, parsed) = match msg {
            Ok(v) => {
                let seq = v.get("seq").and_then(|s| s.as_u64()).unwrap_or(0);
                (
                    seq,
                    serde_json::from_value::<Request>(v).map_err(|e| e.to_string()),
                )
            }
            Err(e) => (0, Err(e.to_string())),
        };
        let reply = match parsed {
            Ok(req) => {
                self.dirty = true;
                self.cm.command(now, owner, req.command)
            }
            Err(why) => {
                self.clients.bad_requests += 1;
                tracing::debug!(owner, "bad CM request: {why}");
                Reply::Errno {
                    errno: nix::errno::Errno::EINVAL as i32,
                    what: format!("a request that does not parse: {why}"),
                }
            }
        };
        ToLibrary::Reply { seq, reply }
    }

    /// A CM client's connection ended.
    pub(super) fn gone(&mut self, now: Instant, owner: Owner) {
        self.clients.gone += 1;
        self.clients.connected = self.clients.connected.saturating_sub(1);
        self.dirty = true;
        self.cm.owner_gone(now, owner);
    }

    /// Whether the CM has anything to do at `now`: it was called since its last turn, or
    /// its deadline has come.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.dirty || self.deadline.is_some_and(|at| at <= now)
    }

    /// Runs the CM's timers if due.
    pub(super) fn timers(&mut self, now: Instant) {
        if self.cm.poll_timeout().is_some_and(|at| at <= now) {
            self.cm.handle_timeout(now);
        }
    }

    /// The end of the CM's turn: `more` if it stopped at a bound with work left.
    pub(super) fn turn_done(&mut self, more: bool) {
        self.dirty = more;
        self.deadline = self.cm.poll_timeout();
    }

    /// How long until the CM's next deadline (for the loop's sleep).
    pub(super) fn wait(&self, now: Instant) -> Option<Duration> {
        if self.dirty {
            return Some(Duration::ZERO);
        }
        self.deadline.map(|at| at.since(now))
    }

    /// Answers the address resolutions the CM asks for; how many.
    pub(super) fn resolve(&mut self, now: Instant) -> usize {
        let mut n = 0;
        while n < RESOLVES_PER_TURN {
            let Some((id, src, dst)) = self.cm.poll_resolve() else {
                break;
            };
            n += 1;
            let r = self.resolver.resolve(src, dst);
            tracing::debug!(id, ?src, %dst, ok = r.is_ok(), "CM address resolution");
            self.cm.resolved(now, id, r);
        }
        n
    }

    /// Sends the MADs the CM has queued, from QP1 to QP1 at their peer: on the port, or
    /// straight back into the CM when the peer is one of the port's own addresses (the
    /// hairpin: a frame port cannot send to itself, and the wire would only bring it
    /// back). `src_port`: the UDP port every packet of a UDP port leaves from; a frame
    /// port uses rxe's for QP 1. Returns the packets sent on the port.
    pub(super) fn transmit(
        &mut self,
        now: Instant,
        port: &mut dyn Backend,
        addrs: &[IpAddr],
        src_port: Option<u16>,
        capture: bool,
    ) -> Result<usize, BackendError> {
        let sport = src_port.unwrap_or_else(|| crate::engine::qp::ud::ud_sport(qp1::GSI_QPN));
        let mut sent = 0;
        for _ in 0..MADS_PER_TURN {
            let Some((peer, mad)) = self.cm.poll_transmit() else {
                break;
            };
            // From the address the CM names, if it is the port's; else the port's first
            // of the peer's family.
            let local = if addrs.contains(&peer.local) {
                Some(peer.local)
            } else {
                addrs
                    .iter()
                    .copied()
                    .find(|a| a.is_ipv4() == peer.remote.is_ipv4())
            };
            let Some(local) = local else {
                self.qp1.bad_source += 1;
                continue;
            };
            let src = SocketAddr::new(local, sport);
            let dst = SocketAddr::new(peer.remote, crate::wire::ROCE_UDP_PORT);
            let n = self.sender.build(src, dst, &mad, &mut self.buf);
            if addrs.contains(&peer.remote) {
                self.qp1.hairpin_pkts += 1;
                if capture {
                    port.observe_hairpin(src, dst, Ecn::NotEct, &self.buf[..n]);
                }
                let back = MadPeer {
                    remote: local,
                    local: peer.remote,
                };
                self.cm.handle_mad(now, back, &mad);
                continue;
            }
            let out = [Outgoing {
                src,
                dst,
                len: n,
                ecn: Ecn::NotEct,
            }];
            port.send_batch(&mut self.buf, PACKET_LEN, &out)?;
            self.qp1.sent_pkts += 1;
            sent += 1;
        }
        Ok(sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::ucma::{Event, EventKind};

    /// Every message the daemon sends a CM client parses back as the library reads it
    /// (an event's own `kind` once clashed with the message's tag).
    #[test]
    fn replies_and_events_round_trip_as_json() {
        let msgs = [
            ToLibrary::Reply {
                seq: 3,
                reply: Reply::Id { id: 7 },
            },
            ToLibrary::Event(Event {
                id: 7,
                listen_id: Some(1),
                kind: EventKind::ConnectRequest,
                status: 0,
                param: None,
                ah: None,
            }),
        ];
        for m in msgs {
            let bytes = serde_json::to_vec(&m).unwrap();
            let back: ToLibrary = serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(&bytes)));
            assert_eq!(back, m);
        }
    }

    #[test]
    fn ib_mtu_and_node_guid_are_rxes() {
        assert_eq!(ib_mtu(1500), 1024);
        assert_eq!(ib_mtu(9000), 4096);
        assert_eq!(ib_mtu(65536), 4096);
        assert_eq!(ib_mtu(2200), 2048);
        assert_eq!(
            node_guid([0x52, 0x54, 0, 0x12, 0x34, 0x56]),
            0x5054_00ff_fe12_3456
        );
    }
}
