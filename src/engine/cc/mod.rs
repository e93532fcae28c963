//! Congestion control (issue 25): the notification point (a CE-marked packet -> a CNP,
//! IBA Annex A17.9, `np.rs`) and the reaction point (DCQCN in mlx5's fixed-point form,
//! `rp.rs`) with its pacer. All sans-IO: time comes in as `now`, deadlines go out through
//! the QP's entry in the engine's timer heap.
//!
//! What is paced: while `rp_enable`, a QP's *request* packets leave at most at its rate:
//! RC under DCQCN, `line_rate` otherwise (a NIC's requests never leave faster than its
//! wire; a user-space NIC has no wire of its own, so without this one QP's window would
//! leave in one burst, far over any bottleneck, and be marked however fair the rates).
//! A packet of `len` bytes (the UDP payload, BTH..ICRC) takes `len*8/rate` of the QP's
//! link time; the QP may run ahead of its link time by [`PACER_BURST`] at most, the
//! credit that covers a user-space wake-up (a strict per-packet gap would lose every
//! late wake-up's share: 111 Mbit/s of 1 Gbit/s in a debug build). Responses (ACKs, READ
//! responses, atomic ACKs) and CNPs are not paced: mlx5 paces the send queue. Requests
//! carry ECT(0) while `rp_enable` (so a switch may mark them); everything else Not-ECT.

mod config;
pub(crate) mod np;
pub(crate) mod rp;

pub use config::{CcConfig, CcConfigError};

use super::stats::{Counter, Counters};
use super::{Engine, Instant, Slot, Transmit};
use crate::wire::icrc::{self, PseudoHeaders};
use crate::wire::{Ecn, ROCE_UDP_PORT};
use core::time::Duration;
use std::net::{IpAddr, SocketAddr};

/// A QP's congestion-control gauges ([`Engine::qp_cc`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcState {
    /// RC, bits/s.
    pub current_rate: u64,
    /// RT, bits/s.
    pub target_rate: u64,
    /// Alpha in 1/1024 (0..=1023), as of the last event (its decay is applied lazily).
    pub alpha: u32,
    /// Timer-driven increase events since the last cut (T).
    pub time_stage: u32,
    /// Byte-counter increase events since the last cut (BC).
    pub byte_stage: u32,
    /// The pacer holds the QP's requests until then.
    pub paced_until: Option<Instant>,
}

/// How far a QP's requests may run ahead of its link time (see the module comment): a
/// burst of this long at the QP's rate (25 KB at 1 Gbit/s) leaves back to back after a
/// pause, and a late wake-up catches up this much.
pub const PACER_BURST: Duration = Duration::from_micros(200);

/// One QP's congestion-control state, kept beside it in its slot.
#[derive(Debug, Default)]
pub(crate) struct QpCc {
    pub np: np::Np,
    /// DCQCN, from the first handled CNP until the rate is back at `max_rate`.
    pub rp: Option<rp::Rp>,
    /// The pacer: no request before this.
    pub pace_until: Option<Instant>,
    /// When the QP's link time runs out: its requests so far at its rate, each from no
    /// earlier than when it was sent.
    pub link_free: Instant,
}

impl QpCc {
    /// Whether the pacer holds the QP's requests (cleared by `on_timeout`).
    pub fn held(&self) -> bool {
        self.pace_until.is_some()
    }

    /// The earliest of the pacer's release and DCQCN's increase timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        let timer = self.rp.as_ref().map(|r| r.timer_at);
        match (self.pace_until, timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs what is due by `now`: the pacer's release, DCQCN's increase timer.
    pub fn on_timeout(&mut self, now: Instant, cfg: &CcConfig, stats: &mut Counters) {
        if self.pace_until.is_some_and(|t| t <= now) {
            self.pace_until = None;
        }
        if let Some(r) = self.rp.as_mut().filter(|r| r.timer_at <= now) {
            r.on_timer(now, cfg);
            stats.inc(Counter::RpRateIncreases);
            if r.recovered(cfg) {
                // Back at max_rate with no CNP: DCQCN lets go (no pacer, no timer).
                self.rp = None;
            }
        }
    }

    /// A request packet of `len` bytes left at `now`: the byte counter and the pacer.
    pub fn on_request_sent(
        &mut self,
        now: Instant,
        len: usize,
        cfg: &CcConfig,
        stats: &mut Counters,
    ) {
        if !cfg.rp_enable {
            return;
        }
        if let Some(r) = self.rp.as_mut() {
            let n = r.on_sent(now, len, cfg);
            stats.add(Counter::RpRateIncreases, u64::from(n));
            if r.recovered(cfg) {
                self.rp = None;
            }
        }
        // A token bucket PACER_BURST deep: the link time used runs from now at the
        // earliest, and the QP is held while it is more than PACER_BURST ahead of now.
        let rate = self.rp.as_ref().map_or(cfg.line_rate, |r| r.rc);
        let gap = Duration::from_nanos(rp::gap_ns(len, rate));
        self.link_free = self.link_free.max(now).saturating_add(gap);
        let release = Instant::from_nanos(
            self.link_free
                .as_nanos()
                .saturating_sub(PACER_BURST.as_nanos() as u64),
        );
        self.pace_until = (release > now).then_some(release);
    }

    fn gauges(&self) -> Option<CcState> {
        let r = self.rp.as_ref()?;
        Some(CcState {
            current_rate: r.rc,
            target_rate: r.rt,
            alpha: r.alpha,
            time_stage: r.time_stage,
            byte_stage: r.byte_stage,
            paced_until: self.pace_until,
        })
    }
}

impl Engine {
    /// A QP's DCQCN gauges; `None` when the QP does not exist or is not under DCQCN (it
    /// sends at line rate: no CNP yet, or recovered).
    pub fn qp_cc(&self, qpn: u32) -> Option<CcState> {
        self.qps.get(&qpn)?.cc.gauges()
    }

    /// NP: a CE-marked packet that passed the ingress checks of QP `qpn`, sent by
    /// `peer_qpn` at `peer_ip`. Counted; a CNP is queued unless one went to that peer QP
    /// less than `min_time_between_cnps` ago, or the NP is off.
    pub(super) fn np_on_ce(&mut self, now: Instant, qpn: u32, peer_ip: IpAddr, peer_qpn: u32) {
        let Some(s) = self.qps.get_mut(&qpn) else {
            return;
        };
        s.stats.inc(Counter::NpEcnMarkedRocePackets);
        let cfg = &self.cfg.cc;
        if !cfg.np_enable || !s.cc.np.may_send(now, (peer_ip, peer_qpn), cfg) {
            return;
        }
        if self.cnps.len() < np::MAX_PENDING {
            self.cnps.push_back(np::PendingCnp {
                qpn,
                peer_ip,
                peer_qpn,
            });
        }
    }

    /// RP: a CNP for QP `qpn` that passed the header checks. Handled by an RC/UC/UD QP
    /// able to send (`sending`, the caller's judgement) with `rp_enable`; ignored
    /// otherwise or within `rate_reduce_monitor_period` of the last cut.
    pub(super) fn rp_on_cnp(&mut self, now: Instant, qpn: u32, sending: bool) {
        let Some(Slot { stats, cc, .. }) = self.qps.get_mut(&qpn) else {
            return;
        };
        let cfg = &self.cfg.cc;
        if !cfg.rp_enable || !sending {
            stats.inc(Counter::RpCnpIgnored);
            return;
        }
        let outcome = match cc.rp.as_mut() {
            None => {
                cc.rp = Some(rp::Rp::first_cnp(now, cfg));
                rp::CnpOutcome::Cut
            }
            Some(r) => r.on_cnp(now, cfg),
        };
        match outcome {
            rp::CnpOutcome::Cut => {
                stats.inc(Counter::RpCnpHandled);
                stats.inc(Counter::RpRateDecreases);
            }
            rp::CnpOutcome::Ignored => stats.inc(Counter::RpCnpIgnored),
        }
        self.touch(qpn);
    }

    /// The next queued CNP, written to `buf` with its ICRC: from our QP's UDP port to the
    /// peer, Not-ECT (a CNP is never marked ECT, so no switch marks it CE). CNPs of QPs
    /// destroyed since are dropped.
    pub(super) fn next_cnp(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(c) = self.cnps.pop_front() {
            let Some(s) = self.qps.get_mut(&c.qpn) else {
                continue;
            };
            let Ok(len) = np::cnp_repr(s.qp.attrs.pkey(), c.peer_qpn).emit(buf, &[]) else {
                continue;
            };
            let src = SocketAddr::new(self.cfg.local_ip, s.qp.src_port);
            let dst = SocketAddr::new(c.peer_ip, ROCE_UDP_PORT);
            let ph = PseudoHeaders::new(src, dst, self.cfg.tx_ipv4_id, len);
            if icrc::fill(ph.ip(), ph.udp(), &mut buf[..len]).is_err() {
                continue;
            }
            s.stats.inc(Counter::SentPkts);
            s.stats.add(Counter::SentBytes, len as u64);
            s.stats.inc(Counter::NpCnpSent);
            return Some(Transmit {
                src,
                dst,
                len,
                ecn: Ecn::NotEct,
            });
        }
        None
    }
}
