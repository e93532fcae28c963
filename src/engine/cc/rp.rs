//! The reaction point: DCQCN (Zhu et al., SIGCOMM 2015) in the fixed-point form of mlx5
//! firmware, as its knobs describe it (`rp_*` in Linux `drivers/infiniband/hw/mlx5/cong.c`)
//! and as Google isekai's `rdma_roce_cc_dcqcn` models it. One [`Rp`] per QP, created on
//! the first CNP it handles and dropped when its rate is back at `max_rate`.
//!
//! Integer arithmetic throughout (rates in bits/s, alpha in 1/1024), so runs are exact
//! and reproducible. Choices where the public descriptions leave room, stated once here:
//! - A CNP within `rate_reduce_monitor_period` of the last cut is ignored (mlx5 checks
//!   for a CNP once per period; we cut at the first and ignore the rest of the period).
//! - Alpha's per-`dce_tcp_rtt` update is applied lazily, in one bounded loop when the
//!   state is next touched (a CNP, a timer or byte event), never with a 1 µs timer: every
//!   period without a handled CNP is `alpha <- g*alpha/1024`; the period of a handled
//!   CNP is `alpha <- g*alpha/1024 + (1024 - g)`, applied after the cut it causes (the
//!   cut uses the alpha the CNP found).
//! - An increase event looks at the stage counters before counting itself, so the first
//!   event after a cut is a fast recovery (RT unchanged) and additive increase starts
//!   when one counter reached `rpg_threshold`, hyper increase when both passed it.
//! - RC <- (RC + RT + 1)/2 rounds up, so RC reaches RT (and `max_rate`) exactly.

use super::CcConfig;
use crate::engine::Instant;

const NS_PER_US: u64 = 1_000;

/// One QP's DCQCN state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rp {
    /// RC: the current rate, bits/s.
    pub rc: u64,
    /// RT: the target rate, bits/s.
    pub rt: u64,
    /// Alpha in 1/1024 (0..=1023), as of `alpha_at`.
    pub alpha: u32,
    alpha_at: Instant,
    /// When the last cut happened.
    last_cut: Instant,
    /// Timer-driven increase events since the last cut (T).
    pub time_stage: u32,
    /// Byte-counter increase events since the last cut (BC).
    pub byte_stage: u32,
    /// Request bytes sent since the last byte event.
    bytes: u64,
    /// When the rate-increase timer fires next.
    pub timer_at: Instant,
}

/// What a CNP did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CnpOutcome {
    /// RC was cut.
    Cut,
    /// Within `rate_reduce_monitor_period` of the last cut: nothing changed.
    Ignored,
}

fn us(n: u32) -> u64 {
    u64::from(n) * NS_PER_US
}

impl Rp {
    /// A QP's first CNP: the state at line rate with `initial_alpha_value`, then the cut.
    pub fn first_cnp(now: Instant, cfg: &CcConfig) -> Rp {
        let start = if cfg.rate_to_set_on_first_cnp != 0 {
            cfg.rate_to_set_on_first_cnp.min(cfg.line_rate)
        } else {
            cfg.max_rate()
        };
        let mut rp = Rp {
            rc: start,
            rt: start,
            alpha: cfg.initial_alpha_value.min(1023),
            alpha_at: now,
            last_cut: now,
            time_stage: 0,
            byte_stage: 0,
            bytes: 0,
            timer_at: now,
        };
        rp.cut(now, cfg, true);
        rp
    }

    /// A later CNP.
    pub fn on_cnp(&mut self, now: Instant, cfg: &CcConfig) -> CnpOutcome {
        if now.since(self.last_cut).as_nanos() < u128::from(us(cfg.rate_reduce_monitor_period)) {
            return CnpOutcome::Ignored;
        }
        self.decay_alpha(now, cfg);
        self.cut(now, cfg, false);
        CnpOutcome::Cut
    }

    /// The cut (mlx5): clamp RT, RC -= min(RC*alpha >> rpg_gd, RC*(100-min_dec_fac)/100),
    /// floor at `rpg_min_rate`; then alpha's CNP update; stages, bytes and timer restart.
    fn cut(&mut self, now: Instant, cfg: &CcConfig, first: bool) {
        let clamp = first
            || cfg.clamp_tgt_rate
            || self.byte_stage > 0
            || (cfg.clamp_tgt_rate_after_time_inc && self.time_stage > 0);
        if clamp {
            self.rt = self.rc;
        }
        let rc = u128::from(self.rc);
        let by_alpha = (rc * u128::from(self.alpha)) >> cfg.rpg_gd.min(127);
        let most = rc * u128::from(100 - cfg.rpg_min_dec_fac.min(100)) / 100;
        let dec = by_alpha.min(most) as u64;
        self.rc = self.rc.saturating_sub(dec).max(cfg.rpg_min_rate);
        // This period saw a CNP: alpha <- g*alpha/1024 + (1024 - g), at most 1023.
        let g = cfg.dce_tcp_g.min(1024);
        self.alpha = (g * self.alpha / 1024 + (1024 - g)).min(1023);
        self.alpha_at = now;
        self.last_cut = now;
        self.time_stage = 0;
        self.byte_stage = 0;
        self.bytes = 0;
        self.timer_at = now.saturating_add(core::time::Duration::from_nanos(us(cfg
            .rpg_time_reset
            .max(1))));
    }

    /// Alpha's decay over the whole `dce_tcp_rtt` periods since `alpha_at` with no CNP:
    /// alpha <- g*alpha/1024 each (strictly smaller while alpha > 0 and g < 1024, so the
    /// loop runs at most 1024 times).
    fn decay_alpha(&mut self, now: Instant, cfg: &CcConfig) {
        let period = us(cfg.dce_tcp_rtt.max(1));
        let periods = now.since(self.alpha_at).as_nanos() as u64 / period;
        let g = cfg.dce_tcp_g.min(1024);
        let mut n = 0;
        while n < periods && self.alpha > 0 && g < 1024 {
            self.alpha = g * self.alpha / 1024;
            n += 1;
        }
        // Advance by whole periods only: the partial one is still running.
        self.alpha_at = Instant::from_nanos(self.alpha_at.as_nanos() + periods * period);
    }

    /// One increase event (timer or byte counter): hyper increase once both stage
    /// counters passed `rpg_threshold`, additive once one reached it, else fast recovery;
    /// then RT <= max_rate and RC <- (RC + RT)/2 rounded up.
    fn increase(&mut self, cfg: &CcConfig) {
        let (t, b) = (self.time_stage, self.byte_stage);
        if t.min(b) > cfg.rpg_threshold {
            self.rt = self.rt.saturating_add(cfg.rpg_hai_rate);
        } else if t.max(b) >= cfg.rpg_threshold {
            self.rt = self.rt.saturating_add(cfg.rpg_ai_rate);
        }
        self.rt = self.rt.min(cfg.max_rate());
        self.rc = (u128::from(self.rc) + u128::from(self.rt)).div_ceil(2) as u64;
    }

    /// The rate-increase timer (`rpg_time_reset`) fired: one increase event, T += 1.
    pub fn on_timer(&mut self, now: Instant, cfg: &CcConfig) {
        self.decay_alpha(now, cfg);
        self.increase(cfg);
        self.time_stage = self.time_stage.saturating_add(1);
        self.timer_at = now.saturating_add(core::time::Duration::from_nanos(us(cfg
            .rpg_time_reset
            .max(1))));
    }

    /// `len` request bytes sent: an increase event per `rpg_byte_reset`*64 bytes, BC += 1.
    /// Returns how many increase events happened.
    pub fn on_sent(&mut self, now: Instant, len: usize, cfg: &CcConfig) -> u32 {
        let every = u64::from(cfg.rpg_byte_reset.max(1)) * 64;
        self.bytes += len as u64;
        let mut n = 0;
        while self.bytes >= every {
            self.bytes -= every;
            self.decay_alpha(now, cfg);
            self.increase(cfg);
            self.byte_stage = self.byte_stage.saturating_add(1);
            n += 1;
        }
        n
    }

    /// Whether the QP is back at `max_rate`: DCQCN lets go of it.
    pub fn recovered(&self, cfg: &CcConfig) -> bool {
        self.rc >= cfg.max_rate()
    }

    /// How long a packet of `len` bytes holds the QP at RC: len*8/RC.
    pub fn gap_ns(&self, len: usize) -> u64 {
        let ns = (len as u128 * 8 * 1_000_000_000).div_ceil(u128::from(self.rc.max(1)));
        ns.min(u128::from(u64::MAX)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(us_: u64) -> Instant {
        Instant::from_nanos(us_ * 1000)
    }

    #[test]
    fn first_cnp_halves_with_alpha_1023() {
        let cfg = CcConfig::default();
        let rp = Rp::first_cnp(t(0), &cfg);
        let line = cfg.line_rate;
        assert_eq!(rp.rc, line - ((line * 1023) >> 11));
        assert_eq!(rp.rt, line);
        // 1019*1023/1024 + 5 = 1023.
        assert_eq!(rp.alpha, 1023);
    }

    #[test]
    fn cnps_within_the_monitor_period_are_ignored_and_alpha_decays() {
        let cfg = CcConfig::default();
        let mut rp = Rp::first_cnp(t(0), &cfg);
        let rc1 = rp.rc;
        assert_eq!(rp.on_cnp(t(3), &cfg), CnpOutcome::Ignored);
        assert_eq!(rp.rc, rc1);
        // 100 µs without CNP: alpha decayed 100 times by 1019/1024 before the cut.
        let mut a = 1023u32;
        for _ in 0..100 {
            a = 1019 * a / 1024;
        }
        assert_eq!(rp.on_cnp(t(100), &cfg), CnpOutcome::Cut);
        assert_eq!(rp.rc, rc1 - ((rc1 * u64::from(a)) >> 11));
        assert_eq!(rp.alpha, 1019 * a / 1024 + 5);
    }

    #[test]
    fn increases_fast_recovery_then_additive_then_hyper_back_to_line_rate() {
        let cfg: CcConfig = "line_rate=1gbit".parse().unwrap();
        let mut rp = Rp::first_cnp(t(0), &cfg);
        assert_eq!(
            (rp.rc, rp.rt),
            (
                1_000_000_000 - ((1_000_000_000u64 * 1023) >> 11),
                1_000_000_000
            )
        );
        // Fast recovery: RT unchanged, RC halfway.
        let rc0 = rp.rc;
        rp.on_timer(t(300), &cfg);
        assert_eq!(rp.rt, 1_000_000_000);
        assert_eq!(rp.rc, (rc0 + 1_000_000_000).div_ceil(2));
        let mut n = 1;
        while !rp.recovered(&cfg) {
            rp.on_timer(t(300 * (n + 1)), &cfg);
            n += 1;
            assert!(n < 64, "recovers");
        }
        assert_eq!(rp.rc, cfg.max_rate());
    }

    #[test]
    fn byte_counter_events_and_hyper_increase() {
        let cfg: CcConfig = "line_rate=100gbit rpg_byte_reset=16".parse().unwrap();
        let mut rp = Rp::first_cnp(t(0), &cfg);
        rp.rt = 10_000_000_000;
        rp.rc = 5_000_000_000;
        // Two timer events then byte events: T=2, B counts up; with T,B > 1: HAI.
        rp.on_timer(t(300), &cfg);
        rp.on_timer(t(600), &cfg);
        assert_eq!(rp.time_stage, 2);
        let rt = rp.rt;
        assert_eq!(rp.on_sent(t(601), 1024, &cfg), 1); // B: 0 -> 1, AI (T >= 1)
        assert_eq!(rp.rt, rt + cfg.rpg_ai_rate);
        assert_eq!(rp.on_sent(t(602), 2048, &cfg), 2); // B 1 -> 2 (AI), 2 -> 3 (HAI)
        assert_eq!(rp.rt, rt + 2 * cfg.rpg_ai_rate + cfg.rpg_hai_rate);
        assert_eq!(rp.byte_stage, 3);
    }

    #[test]
    fn floor_and_min_dec_fac_bound_the_cut() {
        let cfg: CcConfig = "line_rate=10mbit rpg_min_rate=4mbit rpg_min_dec_fac=90 \
                             rate_reduce_monitor_period=0"
            .parse()
            .unwrap();
        let mut rp = Rp::first_cnp(t(0), &cfg);
        // At most 10% per cut.
        assert_eq!(rp.rc, 9_000_000);
        for i in 1..40 {
            rp.on_cnp(t(i), &cfg);
        }
        assert_eq!(rp.rc, 4_000_000);
    }

    #[test]
    fn gap_is_len_times_8_over_rc() {
        let cfg: CcConfig = "line_rate=1gbit".parse().unwrap();
        let mut rp = Rp::first_cnp(t(0), &cfg);
        rp.rc = 1_000_000_000;
        assert_eq!(rp.gap_ns(1000), 8000);
    }
}
