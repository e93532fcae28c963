//! The link layer of a NIC that owns its frames (TAP, AF_PACKET), sans-IO: after
//! smoltcp's `iface`, but carrying only what a RoCEv2 NIC needs.
//!
//! It answers ARP (RFC 826) and IPv6 Neighbor Discovery (RFC 4861) for its addresses,
//! answers ICMP and ICMPv6 echo (RFC 792, RFC 4443) so `ping` and `ping -6` work, keeps a
//! neighbour cache with RFC 4861's reachability states (REACHABLE, STALE, DELAY, PROBE;
//! see `neighbor`), holds datagrams while their neighbour resolves, and
//! wraps RoCE packets in Ethernet/IP/UDP (choosing the IPv4 ID and rebasing the ICRC for
//! it) and unwraps them. It never touches a socket, thread or clock: time comes in as
//! `now` (a `Duration` since any fixed epoch, never decreasing), frames in as byte
//! slices, frames out into the caller's buffers.
//!
//! # Call order
//!
//! - Every received frame: [`Iface::receive`]. `Rx::Roce` gives the RoCE packet's range
//!   within the frame for the engine (which checks the ICRC, with the IPv4 ID given).
//! - Every datagram the engine makes: [`Iface::send`]. `Ok(Some(len))` is a frame to send
//!   now; `Ok(None)` means it is held until its neighbour answers.
//! - After either, and after [`Iface::handle_timeout`]: drain [`Iface::poll_transmit`]
//!   until `None` (ARP/ND requests and replies, echo replies, released datagrams).
//! - Sleep no later than [`Iface::poll_timeout`], then call `handle_timeout`.
//!
//! Output buffers must hold [`Iface::frame_capacity`] bytes; a frame that does not fit is
//! dropped and counted, never cut.
//!
//! # Scope
//!
//! Routing is on-link only: a destination inside one of our prefixes (or IPv6
//! link-local) is resolved directly; anything else is `TxError::NoRoute`. There is no
//! gateway, no IPv6 router discovery or SLAAC, no DAD for our own addresses (they are
//! configured, as on a NIC given fixed addresses), no fragment reassembly, no ICMP errors
//! sent. The UDP checksum is sent as 0 (as rxe does; IBA A17.4.2), and on receive it is
//! checked only when non-zero: a sender that filled it in meant it to be checked (RFC
//! 768), and the ICRC covers the rest.

mod arp;
mod eth;
mod icmp;
mod ip;
mod nd;
mod neighbor;
#[cfg(test)]
mod props;
mod rx;
mod stats;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_ecn;
#[cfg(test)]
mod tests_neigh;

pub use eth::Mac;
pub use neighbor::{NeighborState, DELAY_FIRST_PROBE, PROBES, RETRY, TRIES};
pub use stats::{DropReason, IfaceStats, TxError};

use crate::wire::icrc::Ipv4IdRebase;
use crate::wire::Ecn;
use neighbor::{Held, HoldError, Lookup};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;
use std::time::Duration;

/// The interface's identity and limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfaceConfig {
    pub mac: Mac,
    /// IPv4 address and prefix length.
    pub ipv4: Option<(Ipv4Addr, u8)>,
    /// Global (or unique-local) IPv6 addresses with their prefix lengths; the link-local
    /// fe80::/64 address derived from `mac` is always added.
    pub ipv6: Vec<(Ipv6Addr, u8)>,
    /// 802.1Q VLAN ID on every frame sent; received frames must carry it.
    pub vlan: Option<u16>,
    /// IP MTU: the largest IP datagram sent (or answered).
    pub mtu: usize,
    /// How long an ARP or ND confirmation is trusted (REACHABLE); then the entry is
    /// STALE: still used, and re-validated by unicast probes once it is (Linux's
    /// base_reachable_time, RFC 4861's ReachableTime).
    pub neighbor_ttl: Duration,
    /// Datagrams held per unresolved neighbour.
    pub pending_max: usize,
    /// Datagrams held for all unresolved neighbours together.
    pub pending_total_max: usize,
    /// Neighbour cache entries, resolved and pending.
    pub neighbor_max: usize,
}

impl IfaceConfig {
    pub fn new(mac: Mac) -> IfaceConfig {
        IfaceConfig {
            mac,
            ipv4: None,
            ipv6: Vec::new(),
            vlan: None,
            mtu: 1500,
            neighbor_ttl: Duration::from_secs(60),
            pending_max: 16,
            pending_total_max: 256,
            neighbor_max: 1024,
        }
    }
}

/// What became of a received frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rx {
    /// A RoCEv2 datagram for us (UDP to port 4791 at one of our addresses): `payload` is
    /// its range in the frame, BTH through ICRC, for the engine.
    Roce {
        src: SocketAddr,
        dst: SocketAddr,
        ipv4_id: Option<u16>,
        /// The IP header's ECN codepoint.
        ecn: Ecn,
        payload: Range<usize>,
    },
    /// Handled here (ARP, ND, echo); replies, if any, wait in `poll_transmit`.
    Consumed,
    /// Not for us or malformed: counted by reason in `stats`.
    Dropped(DropReason),
}

/// Control frames (replies and requests) waiting for `poll_transmit`: a caller that stops
/// draining loses replies, not memory.
const CONTROL_MAX: usize = 64;

/// One interface: addresses, neighbour cache, queues, counters.
#[derive(Debug)]
pub struct Iface {
    cfg: IfaceConfig,
    link_local: Ipv6Addr,
    stats: IfaceStats,
    neighbors: neighbor::Cache,
    /// Finished control frames.
    control: VecDeque<Vec<u8>>,
    /// Datagrams whose neighbour answered, with its MAC.
    released: VecDeque<(Mac, Held)>,
    next_ipv4_id: u16,
    rebase: Ipv4IdRebase,
}

impl Iface {
    pub fn new(cfg: IfaceConfig) -> Iface {
        let neighbors = neighbor::Cache::new(
            cfg.neighbor_ttl,
            cfg.pending_max,
            cfg.pending_total_max,
            cfg.neighbor_max,
        );
        Iface {
            link_local: eth::link_local(&cfg.mac),
            cfg,
            stats: IfaceStats::default(),
            neighbors,
            control: VecDeque::new(),
            released: VecDeque::new(),
            next_ipv4_id: 0,
            rebase: Ipv4IdRebase::new(),
        }
    }

    pub fn config(&self) -> &IfaceConfig {
        &self.cfg
    }

    /// The link-local address (fe80:: with the EUI-64 of the MAC).
    pub fn link_local(&self) -> Ipv6Addr {
        self.link_local
    }

    /// The largest frame this interface emits: headers plus the MTU (at least the
    /// Ethernet minimum). Output buffers should be this long.
    pub fn frame_capacity(&self) -> usize {
        (eth::header_len(self.cfg.vlan) + self.cfg.mtu).max(eth::ETH_MIN_FRAME)
    }

    pub fn stats(&self) -> &IfaceStats {
        &self.stats
    }

    /// Resolved neighbours: address, MAC, reachability state.
    pub fn neighbors(&self) -> impl Iterator<Item = (IpAddr, Mac, NeighborState)> + '_ {
        self.neighbors.resolved()
    }

    /// Takes one received frame.
    pub fn receive(&mut self, now: Duration, frame: &[u8]) -> Rx {
        self.stats.rx_frames += 1;
        let rx = self.dispatch(now, frame);
        match &rx {
            Rx::Dropped(r) => self.stats.count_drop(*r),
            Rx::Roce { .. } => self.stats.rx_roce += 1,
            Rx::Consumed => {}
        }
        rx
    }

    /// Frames a RoCE datagram (BTH through ICRC, the ICRC computed for IPv4 ID 0, as the
    /// engine makes it) from `src` to `dst` into `out`. `Ok(Some(len))`: a frame to send.
    /// `Ok(None)`: held until the neighbour answers (its request is in `poll_transmit`),
    /// or queued behind datagrams to the same neighbour that `poll_transmit` has not
    /// handed out yet (so nothing is reordered); it comes out of `poll_transmit`.
    /// `Err`: dropped and counted. IPv4-mapped IPv6 addresses are taken as IPv4.
    pub fn send(
        &mut self,
        now: Duration,
        src: SocketAddr,
        dst: SocketAddr,
        ecn: Ecn,
        payload: &[u8],
        out: &mut [u8],
    ) -> Result<Option<usize>, TxError> {
        let r = self.send_inner(now, unmap(src), unmap(dst), ecn, payload, out);
        if let Err(e) = r {
            self.stats.count_tx_error(e);
        }
        r
    }

    fn send_inner(
        &mut self,
        now: Duration,
        src: SocketAddr,
        dst: SocketAddr,
        ecn: Ecn,
        payload: &[u8],
        out: &mut [u8],
    ) -> Result<Option<usize>, TxError> {
        let ip_len = match (src.ip(), dst.ip()) {
            (IpAddr::V4(_), IpAddr::V4(_)) => ip::IPV4_LEN,
            (IpAddr::V6(_), IpAddr::V6(_)) => ip::IPV6_LEN,
            _ => return Err(TxError::NoRoute),
        };
        if !self.is_ours(&src.ip()) {
            return Err(TxError::BadSource);
        }
        if !self.on_link(&dst.ip()) {
            return Err(TxError::NoRoute);
        }
        if ip_len + ip::UDP_LEN + payload.len() > self.cfg.mtu {
            return Err(TxError::TooBig);
        }
        if out.len() < self.roce_frame_len(ip_len, payload.len()) {
            return Err(TxError::BufferTooSmall);
        }
        let (found, expired) = self.neighbors.lookup(dst.ip(), now);
        if expired {
            self.stats.neighbor_expired += 1;
        }
        let held = || Held {
            src,
            dst,
            ecn,
            payload: payload.to_vec(),
        };
        match found {
            Lookup::Found { mac, stale } => {
                // A STALE MAC is used at once; `handle_timeout` probes it after DELAY.
                if stale {
                    self.stats.neighbor_stale_used += 1;
                }
                // Datagrams released for this neighbour and not yet polled go first:
                // overtaking them would look like a PSN gap to an RC responder, which
                // answers with a sequence NAK and a go-back-N retransmission.
                if self.released.iter().any(|(_, h)| h.dst.ip() == dst.ip()) {
                    if !self.neighbors.reserve() {
                        return Err(TxError::QueueFull);
                    }
                    self.released.push_back((mac, held()));
                    return Ok(None);
                }
                Ok(Some(self.frame_roce(mac, src, dst, ecn, payload, out)))
            }
            Lookup::Pending => match self.neighbors.hold(dst.ip(), held()) {
                Ok(()) => Ok(None),
                Err(_) => Err(TxError::QueueFull),
            },
            Lookup::Missing => match self.neighbors.start(dst.ip(), now, held()) {
                Ok(()) => {
                    self.solicit(dst.ip(), None);
                    Ok(None)
                }
                Err(HoldError::QueueFull | HoldError::CacheFull) => Err(TxError::QueueFull),
            },
        }
    }

    /// The next frame that is not a fresh datagram: ARP and ND requests and replies, echo
    /// replies, then datagrams whose neighbour answered. `None` when nothing waits.
    pub fn poll_transmit(&mut self, _now: Duration, out: &mut [u8]) -> Option<usize> {
        while let Some(f) = self.control.pop_front() {
            if f.len() > out.len() {
                self.stats.buffer_too_small += 1;
                continue;
            }
            out[..f.len()].copy_from_slice(&f);
            self.stats.tx_frames += 1;
            return Some(f.len());
        }
        while let Some((mac, h)) = self.released.pop_front() {
            self.neighbors.release_done();
            let ip_len = if h.dst.is_ipv4() {
                ip::IPV4_LEN
            } else {
                ip::IPV6_LEN
            };
            if out.len() < self.roce_frame_len(ip_len, h.payload.len()) {
                self.stats.buffer_too_small += 1;
                continue;
            }
            return Some(self.frame_roce(mac, h.src, h.dst, h.ecn, &h.payload, out));
        }
        None
    }

    /// When `handle_timeout` must run next: a request to retry, a neighbour to give up
    /// on, an entry to become STALE, a probe to send.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.neighbors.poll_at()
    }

    /// Runs the timers due at `now`: retries requests and sends unicast probes (they
    /// wait in `poll_transmit`), drops the datagrams of neighbours that never answered,
    /// turns REACHABLE entries STALE, removes those whose probes went unanswered.
    pub fn handle_timeout(&mut self, now: Duration) {
        let e = self.neighbors.handle_timeout(now);
        self.stats.neighbor_expired += e.expired;
        self.stats.neighbor_probe_failed += e.probe_failed;
        self.stats.resolve_failed += e.failed;
        self.stats.pending_dropped += e.dropped;
        for ip in e.retry {
            self.solicit(ip, None);
        }
        for (ip, mac) in e.probe {
            self.stats.neighbor_probes += 1;
            self.solicit(ip, Some(mac));
        }
    }

    /// Datagrams held for resolution or released and not yet sent.
    pub fn pending(&self) -> usize {
        self.neighbors.held_total()
    }

    fn roce_frame_len(&self, ip_len: usize, payload: usize) -> usize {
        (eth::header_len(self.cfg.vlan) + ip_len + ip::UDP_LEN + payload).max(eth::ETH_MIN_FRAME)
    }

    /// Writes the whole frame of a RoCE datagram; `out` holds `roce_frame_len` bytes.
    fn frame_roce(
        &mut self,
        mac: Mac,
        src: SocketAddr,
        dst: SocketAddr,
        ecn: Ecn,
        payload: &[u8],
        out: &mut [u8],
    ) -> usize {
        let n = payload.len();
        let udp_len = ip::UDP_LEN + n;
        let mut off;
        let mut ipv4_id = None;
        match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                off = eth::emit(out, mac, self.cfg.mac, self.cfg.vlan, eth::ETHERTYPE_IPV4);
                let id = self.take_ipv4_id();
                ip::emit_v4(&mut out[off..], s, d, ip::PROTO_UDP, id, ecn, udp_len);
                ipv4_id = Some(id);
                off += ip::IPV4_LEN;
            }
            (s, d) => {
                off = eth::emit(out, mac, self.cfg.mac, self.cfg.vlan, eth::ETHERTYPE_IPV6);
                let (s, d) = (v6(s), v6(d));
                ip::emit_v6(
                    &mut out[off..],
                    &s,
                    &d,
                    ip::PROTO_UDP,
                    ip::DEFAULT_TTL,
                    ecn,
                    udp_len,
                );
                off += ip::IPV6_LEN;
            }
        }
        ip::emit_udp(&mut out[off..], src.port(), dst.port(), n);
        off += ip::UDP_LEN;
        let roce = &mut out[off..off + n];
        roce.copy_from_slice(payload);
        if let Some(id) = ipv4_id {
            // The ICRC covers the IPv4 ID (IBA A17.4.1); the engine computed it for 0.
            self.rebase.rebase(roce, 0, id);
        }
        self.stats.tx_frames += 1;
        self.stats.tx_roce += 1;
        eth::pad(out, off + n)
    }

    /// The next IPv4 identification: a per-interface counter (RFC 6864 §4.1 lets atomic
    /// datagrams use any value; a counter keeps captures readable, as rxe's does).
    fn take_ipv4_id(&mut self) -> u16 {
        let id = self.next_ipv4_id;
        self.next_ipv4_id = id.wrapping_add(1);
        id
    }

    /// Sends an ARP request or a Neighbor Solicitation for `target`: broadcast/multicast
    /// to resolve, or unicast to `probe`'s MAC to confirm a cached entry.
    fn solicit(&mut self, target: IpAddr, probe: Option<Mac>) {
        match target {
            IpAddr::V4(t) => self.arp_request(t, probe),
            IpAddr::V6(t) => self.neighbor_solicit(t, probe),
        }
    }

    /// Queues a finished control frame (bounded: see `CONTROL_MAX`).
    fn queue_control(&mut self, frame: Vec<u8>) {
        if self.control.len() >= CONTROL_MAX {
            self.stats.control_dropped += 1;
            return;
        }
        self.control.push_back(frame);
    }

    /// A control frame: link-layer header to `dst`, `body_len` bytes that `fill` writes,
    /// padded to the Ethernet minimum.
    fn control_frame(
        &self,
        dst: Mac,
        ethertype: u16,
        body_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Vec<u8> {
        let hl = eth::header_len(self.cfg.vlan);
        let mut f = vec![0u8; (hl + body_len).max(eth::ETH_MIN_FRAME)];
        eth::emit(&mut f, dst, self.cfg.mac, self.cfg.vlan, ethertype);
        fill(&mut f[hl..hl + body_len]);
        f
    }

    /// An IPv4 control datagram (echo reply) to `dst_mac`, or `None` (counted) if it
    /// exceeds the MTU.
    fn ipv4_control(
        &mut self,
        dst_mac: Mac,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        proto: u8,
        body: impl FnOnce(&mut [u8]),
        body_len: usize,
    ) {
        if ip::IPV4_LEN + body_len > self.cfg.mtu {
            self.stats.control_dropped += 1;
            return;
        }
        let id = self.take_ipv4_id();
        let f = self.control_frame(dst_mac, eth::ETHERTYPE_IPV4, ip::IPV4_LEN + body_len, |b| {
            ip::emit_v4(b, src, dst, proto, id, Ecn::NotEct, body_len);
            body(&mut b[ip::IPV4_LEN..]);
        });
        self.queue_control(f);
    }

    /// An ICMPv6 control datagram (ND, echo reply): `body` writes the message with a zero
    /// checksum; the checksum is filled in here (RFC 4443 §2.3).
    fn icmpv6_control(
        &mut self,
        dst_mac: Mac,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop: u8,
        body_len: usize,
        body: impl FnOnce(&mut [u8]),
    ) {
        if ip::IPV6_LEN + body_len > self.cfg.mtu {
            self.stats.control_dropped += 1;
            return;
        }
        let f = self.control_frame(dst_mac, eth::ETHERTYPE_IPV6, ip::IPV6_LEN + body_len, |b| {
            ip::emit_v6(b, &src, &dst, ip::PROTO_ICMPV6, hop, Ecn::NotEct, body_len);
            let m = &mut b[ip::IPV6_LEN..];
            body(m);
            m[2..4].fill(0);
            let acc = ip::pseudo_v6(&src, &dst, ip::PROTO_ICMPV6, body_len);
            let c = ip::finish(ip::sum(m, acc));
            m[2..4].copy_from_slice(&c.to_be_bytes());
        });
        self.queue_control(f);
    }

    /// Whether `a` is one of our unicast addresses.
    fn is_ours(&self, a: &IpAddr) -> bool {
        match a {
            IpAddr::V4(a) => self.cfg.ipv4.is_some_and(|(o, _)| o == *a),
            IpAddr::V6(a) => self.is_ours_v6(a),
        }
    }

    fn is_ours_v6(&self, a: &Ipv6Addr) -> bool {
        *a == self.link_local || self.cfg.ipv6.iter().any(|(o, _)| o == a)
    }

    /// Our IPv6 addresses, link-local first.
    fn ipv6_addrs(&self) -> impl Iterator<Item = Ipv6Addr> + '_ {
        std::iter::once(self.link_local).chain(self.cfg.ipv6.iter().map(|(a, _)| *a))
    }

    /// Whether `dst` can be reached directly: a unicast address in one of our prefixes
    /// (IPv6 link-local always), not our own.
    fn on_link(&self, dst: &IpAddr) -> bool {
        if self.is_ours(dst) {
            return false;
        }
        match dst {
            IpAddr::V4(d) => {
                let Some((ours, prefix)) = self.cfg.ipv4 else {
                    return false;
                };
                ip::v4_source_ok(*d)
                    && !self.is_subnet_broadcast(*d)
                    && ip::v4_in_prefix(*d, ours, prefix)
            }
            IpAddr::V6(d) => {
                ip::v6_source_ok(d)
                    && (is_link_local(d)
                        || self
                            .cfg
                            .ipv6
                            .iter()
                            .any(|(o, p)| ip::v6_in_prefix(d, o, *p)))
            }
        }
    }

    /// Whether `a` is our subnet's broadcast address (prefixes up to /30; a /31 has none,
    /// RFC 3021): not a neighbour, and never a source (RFC 1122 §3.2.1.3).
    fn is_subnet_broadcast(&self, a: Ipv4Addr) -> bool {
        let Some((ours, prefix)) = self.cfg.ipv4 else {
            return false;
        };
        let host_bits = 32 - u32::from(prefix.min(32));
        let host_mask = u32::MAX.checked_shr(32 - host_bits).unwrap_or(0);
        host_bits >= 2 && ip::v4_in_prefix(a, ours, prefix) && u32::from(a) & host_mask == host_mask
    }

    /// The source address for a solicitation to `target`: link-local for a link-local
    /// target, else the global address whose prefix holds it (RFC 6724's longest match,
    /// reduced to "the one that is on-link").
    fn ipv6_source_for(&self, target: &Ipv6Addr) -> Ipv6Addr {
        if is_link_local(target) {
            return self.link_local;
        }
        self.cfg
            .ipv6
            .iter()
            .find(|(o, p)| ip::v6_in_prefix(target, o, *p))
            .map_or(self.link_local, |(o, _)| *o)
    }
}

/// fe80::/10 (RFC 4291 §2.5.6).
fn is_link_local(a: &Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, the GIDs of RoCEv2 over IPv4) as IPv4.
fn unmap(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(s) => match s.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), s.port()),
            None => a,
        },
        SocketAddr::V4(_) => a,
    }
}

fn v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}
