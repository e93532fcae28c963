//! A port that owns its frames: a [`FrameLink`] (TAP, AF_PACKET) with the sans-IO L2 of
//! [`crate::iface`] (ARP, IPv6 ND, ICMP echo, framing) in front of it, as a [`Backend`].
//!
//! What the engine sees does not change: datagrams in (with the IPv4 ID, which the
//! frames carry, so every IPv4 ICRC is checked in full; no ID solving), datagrams out. The
//! frames carry the IPv4 ID the interface chooses; it rebases the engine's ICRC for it.
//!
//! Received frames land in the driver's pool, one per slot, and the engine reads the
//! datagram where it lies in the frame (`Received::offset`): no copy on receive. On send a
//! datagram is copied once, behind its headers, into a frame buffer.
//!
//! Time: the interface's timers (ARP and ND retries, cache expiry) run whenever the port
//! is used, at each receive and send, which the driver does at every wake-up, the
//! engine's retransmission timers included: a datagram held for an address that does not
//! answer keeps the engine's timer, and so these, running.

use super::link::{FrameLink, FrameRx, LinkStats};
use super::{Backend, BackendError, Outgoing, PortStats, Received};
use crate::iface::{Iface, IfaceConfig, IfaceStats, Rx, TxError};
use crate::wire::{Ecn, ROCE_UDP_PORT};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// Frames taken from the link per receive call.
const RX_FRAMES: usize = 64;
/// Frames given to the link per send call.
const MAX_TX: usize = 64;

/// Sends frame `k` of `tx` (`frame` bytes apart, `lens[k]` long) for each k, in one call.
fn send<L: FrameLink>(
    link: &mut L,
    tx: &[u8],
    frame: usize,
    lens: &[usize],
) -> Result<(), BackendError> {
    let mut refs: [&[u8]; MAX_TX] = [&[]; MAX_TX];
    for (k, &l) in lens.iter().enumerate() {
        refs[k] = &tx[k * frame..k * frame + l];
    }
    link.send_frames(&refs[..lens.len()])?;
    Ok(())
}

pub struct L2Backend<L: FrameLink> {
    link: L,
    iface: Iface,
    epoch: Instant,
    local: SocketAddr,
    /// Outgoing frames of one call, each `frame` bytes.
    tx: Vec<u8>,
    frame: usize,
    rx_meta: Vec<FrameRx>,
    /// Datagrams the interface refused to send (no route, too big, queue full).
    tx_refused: u64,
    /// When the last warning about datagrams over the MTU was logged, and how many were
    /// dropped since (see `over_mtu`).
    over_mtu_warned: Option<Instant>,
    over_mtu_unwarned: u64,
}

/// At most one warning per this long about datagrams over the link's MTU: a QP whose path
/// MTU is too large has every full-sized packet dropped, and a line per packet would
/// drown the log.
const OVER_MTU_WARN_EVERY: Duration = Duration::from_secs(10);

/// The interface's addresses for `link`: IPv4 and IPv6 with their prefix lengths.
pub fn iface_config(
    link: &impl FrameLink,
    v4: Option<(std::net::Ipv4Addr, u8)>,
    v6: Option<(std::net::Ipv6Addr, u8)>,
) -> IfaceConfig {
    let mut cfg = IfaceConfig::new(link.mac());
    cfg.ipv4 = v4;
    cfg.ipv6 = v6.into_iter().collect();
    cfg.mtu = link.mtu();
    cfg
}

impl<L: FrameLink> L2Backend<L> {
    /// The port on `link` with the addresses of `cfg`; its address for the engine is the
    /// IPv4 one if there is one, else the first IPv6 one.
    pub fn new(link: L, cfg: IfaceConfig) -> Result<L2Backend<L>, BackendError> {
        let ip = cfg
            .ipv4
            .map(|(a, _)| IpAddr::V4(a))
            .or_else(|| cfg.ipv6.first().map(|(a, _)| IpAddr::V6(*a)))
            .ok_or_else(|| BackendError::Link {
                op: "configure",
                link: "frame port".into(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the port needs an IPv4 or an IPv6 address",
                ),
            })?;
        let iface = Iface::new(cfg);
        let frame = iface.frame_capacity();
        Ok(L2Backend {
            link,
            iface,
            epoch: Instant::now(),
            local: SocketAddr::new(ip, ROCE_UDP_PORT),
            tx: vec![0; frame * (super::udp::TX_BATCH + 8)],
            frame,
            rx_meta: vec![FrameRx::default(); RX_FRAMES],
            tx_refused: 0,
            over_mtu_warned: None,
            over_mtu_unwarned: 0,
        })
    }

    /// A datagram of `len` bytes to `dst` was larger than the link's MTU: the interface
    /// dropped it (counted, `tx_over_mtu`). Says so at warn, at most once per
    /// `OVER_MTU_WARN_EVERY`, with how many went since the last warning.
    fn over_mtu(&mut self, len: usize, dst: SocketAddr) {
        self.over_mtu_unwarned += 1;
        if self
            .over_mtu_warned
            .is_some_and(|t| t.elapsed() < OVER_MTU_WARN_EVERY)
        {
            return;
        }
        self.over_mtu_warned = Some(Instant::now());
        let n = std::mem::take(&mut self.over_mtu_unwarned);
        tracing::warn!(
            "{n} datagram(s) larger than the link's MTU ({} bytes of IP) dropped, the last \
             {len} bytes of RoCE to {dst}: the QP's path MTU does not fit this link (give \
             the programs a smaller one, e.g. -m 1024 on a 1500-byte link, or raise the \
             link's MTU); counted as tx_over_mtu",
            self.iface.config().mtu
        );
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    pub fn iface(&self) -> &Iface {
        &self.iface
    }

    pub fn iface_stats(&self) -> &IfaceStats {
        self.iface.stats()
    }

    pub fn link_stats(&self) -> LinkStats {
        self.link.stats()
    }

    /// Sends the control frames (ARP, ND, echo replies) and the datagrams the interface
    /// released, in batches.
    fn drain_control(&mut self) -> Result<(), BackendError> {
        let now = self.now();
        loop {
            let mut n = 0;
            let cap = self.tx.len() / self.frame;
            let mut lens = [0usize; MAX_TX];
            while n < cap.min(lens.len()) {
                let at = n * self.frame;
                match self
                    .iface
                    .poll_transmit(now, &mut self.tx[at..at + self.frame])
                {
                    Some(len) => {
                        lens[n] = len;
                        n += 1;
                    }
                    None => break,
                }
            }
            if n == 0 {
                return Ok(());
            }
            send(&mut self.link, &self.tx, self.frame, &lens[..n])?;
        }
    }
}

impl<L: FrameLink> Backend for L2Backend<L> {
    fn local(&self) -> SocketAddr {
        self.local
    }

    fn prepare_sleep(&mut self) -> bool {
        self.link.prepare_sleep();
        false
    }

    fn observe_hairpin(&mut self, src: SocketAddr, dst: SocketAddr, ecn: Ecn, packet: &[u8]) {
        // The frame the port would have carried had it looped back (IPv4 ID 0, which the
        // receiver is handed with it; synthesised MACs, as a UDP port's capture has).
        let mut f = Vec::with_capacity(packet.len() + 64);
        super::capture::frame(&mut f, src, dst, 0, ecn, packet);
        self.link.observe(&f);
    }

    fn recv_batch(&mut self, pool: &mut [u8], out: &mut [Received]) -> Result<usize, BackendError> {
        let now = self.now();
        self.iface.handle_timeout(now);
        let slots = out.len().min(RX_FRAMES);
        if slots == 0 {
            return Ok(0);
        }
        let slot = pool.len() / slots;
        let got = self
            .link
            .recv_frames(pool, slot, &mut self.rx_meta[..slots])?;
        let mut n = 0;
        for f in &self.rx_meta[..got] {
            let frame = &pool[f.offset..f.offset + f.len];
            if let Rx::Roce {
                src,
                dst,
                ipv4_id,
                ecn,
                payload,
            } = self.iface.receive(now, frame)
            {
                out[n] = Received {
                    src,
                    dst,
                    offset: f.offset + payload.start,
                    len: payload.len(),
                    segment: None,
                    ipv4_id,
                    ecn,
                };
                n += 1;
            }
        }
        // Replies to what came in (ARP, ND, echo), and datagrams an answer released.
        self.drain_control()?;
        Ok(n)
    }

    fn send_batch(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &[Outgoing],
    ) -> Result<(), BackendError> {
        let now = self.now();
        self.iface.handle_timeout(now);
        let cap = self.tx.len() / self.frame;
        let mut lens = [0usize; MAX_TX];
        let mut n = 0;
        for (i, o) in out.iter().enumerate() {
            if n == cap.min(MAX_TX) {
                send(&mut self.link, &self.tx, self.frame, &lens[..n])?;
                n = 0;
            }
            let payload = &pool[i * slot..i * slot + o.len];
            let at = n * self.frame;
            match self.iface.send(
                now,
                o.src,
                o.dst,
                o.ecn,
                payload,
                &mut self.tx[at..at + self.frame],
            ) {
                Ok(Some(len)) => {
                    lens[n] = len;
                    n += 1;
                }
                // Held until the neighbour answers; the request is in the control queue.
                Ok(None) => {}
                // Counted by the interface by reason; RC retransmits (or the peer is
                // unreachable, which its retry counter reports).
                Err(e) => {
                    self.tx_refused += 1;
                    if e == TxError::TooBig {
                        self.over_mtu(o.len, o.dst);
                    }
                }
            }
        }
        if n > 0 {
            send(&mut self.link, &self.tx, self.frame, &lens[..n])?;
        }
        self.drain_control()
    }

    fn rx_fd(&self) -> BorrowedFd<'_> {
        self.link.fd()
    }

    fn stats(&self) -> PortStats {
        let l = self.link.stats();
        PortStats {
            truncated: l.rx_truncated,
            tx_over_mtu: self.iface.stats().too_big,
            ..PortStats::default()
        }
    }

    fn l2_stats(&self) -> Option<IfaceStats> {
        Some(self.iface.stats().clone())
    }
}
