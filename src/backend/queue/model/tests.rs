use super::*;
use proptest::prelude::*;

fn cfg(text: &str) -> QueueConfig {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn settings_parse_print_back_and_refuse_by_name() {
    let c = cfg("rate=1gbit buffer=2MB kmin=40KB kmax=200KB pmax=0.2 seed=1");
    assert_eq!(c.rate, 1_000_000_000);
    assert_eq!(c.buffer, 2_000_000);
    assert_eq!((c.kmin, c.kmax), (40_000, 200_000));
    assert_eq!(c.pmax, 0.2);
    assert_eq!(c.to_string().parse::<QueueConfig>().unwrap(), c);
    assert_eq!(cfg("rate=100mbit,kmin=1KiB").kmin, 1024);
    assert_eq!(cfg("rate=2500000").rate, 2_500_000);
    for (t, want) in [
        ("rate=fast", "rate=fast"),
        ("rate=0", "rate=0"),
        ("size=1", "no setting `size`"),
        ("kmin", "write key=value"),
        ("pmax=1.5", "pmax=1.5"),
        ("buffer=0", "buffer=0"),
        ("kmin=300KB kmax=200KB", "kmin (300000) is above kmax"),
        ("buffer=lots", "buffer=lots"),
    ] {
        let e = t.parse::<QueueConfig>().unwrap_err().to_string();
        assert!(e.contains(want), "{t}: {e}");
    }
}

#[test]
fn red_probability_follows_kmin_kmax_pmax() {
    let c = cfg("kmin=100 kmax=300 pmax=0.5");
    assert_eq!(c.mark_probability(0), 0.0);
    assert_eq!(c.mark_probability(100), 0.0);
    assert_eq!(c.mark_probability(200), 0.25);
    assert_eq!(c.mark_probability(300), 0.5);
    assert_eq!(c.mark_probability(301), 1.0);
    // kmin == kmax: a step.
    let s = cfg("kmin=100 kmax=100 pmax=0.5");
    assert_eq!(s.mark_probability(100), 0.0);
    assert_eq!(s.mark_probability(101), 1.0);
}

/// A burst at one instant leaves spaced by len*8/rate; the depth drains linearly.
#[test]
fn departures_are_spaced_at_the_line_rate() {
    let t0 = Instant::now();
    let mut q = QueueModel::new(cfg("rate=1gbit buffer=1MB"));
    for i in 0..10u32 {
        assert!(matches!(
            q.enqueue(t0, i, 1000, Ecn::NotEct),
            Admit::Queued { .. }
        ));
    }
    // 1000 bytes at 1 Gbit/s: 8 µs each.
    assert_eq!(q.depth(t0), 10_000);
    assert_eq!(q.depth(t0 + Duration::from_micros(40)), 5_000);
    assert_eq!(q.pop(t0 + Duration::from_micros(7)), None);
    let mut times = Vec::new();
    let mut t = t0;
    while let Some(d) = q.next_departure() {
        t = t.max(d);
        let (i, _) = q.pop(t).unwrap();
        times.push(((t - t0).as_micros(), i));
    }
    let want: Vec<(u128, u32)> = (0..10).map(|i| (8 * (i as u128 + 1), i)).collect();
    assert_eq!(times, want);
    let s = q.stats(t);
    assert_eq!(
        (s.cp_tx_pkts, s.cp_tx_bytes, s.cp_queue_bytes),
        (10, 10_000, 0)
    );
    assert_eq!(s.cp_max_queue_bytes, 10_000);
    // An idle link starts the next packet at once.
    let later = t + Duration::from_millis(1);
    assert_eq!(
        q.enqueue(later, 99, 125, Ecn::NotEct),
        Admit::Queued {
            ecn: Ecn::NotEct,
            departs: later + Duration::from_micros(1)
        }
    );
}

#[test]
fn full_buffer_tail_drops_and_counts() {
    let t0 = Instant::now();
    let mut q = QueueModel::new(cfg("rate=1mbit buffer=3000 kmin=10MB kmax=10MB"));
    let v: Vec<Admit> = (0..5).map(|i| q.enqueue(t0, i, 1000, Ecn::Ect0)).collect();
    assert!(v[..3].iter().all(|a| matches!(a, Admit::Queued { .. })));
    assert_eq!(&v[3..], &[Admit::Dropped, Admit::Dropped]);
    let s = q.stats(t0);
    assert_eq!((s.cp_enqueued, s.cp_dropped, s.cp_ecn_marked), (3, 2, 0));
    assert_eq!(s.cp_max_queue_bytes, 3000);
}

#[test]
fn above_kmax_every_capable_packet_is_marked_and_not_ect_never() {
    let t0 = Instant::now();
    let mut q = QueueModel::new(cfg("rate=1mbit buffer=1MB kmin=1000 kmax=2000 pmax=0.1"));
    let mut got = Vec::new();
    for i in 0..6 {
        for e in [Ecn::Ect0, Ecn::NotEct, Ecn::Ect1] {
            if let Admit::Queued { ecn, .. } = q.enqueue(t0, i, 1000, e) {
                got.push((i, e, ecn));
            }
        }
    }
    for (i, sent, ecn) in got {
        // Packet group i sees a depth of at least 3000*i bytes.
        if sent == Ecn::NotEct {
            assert_eq!(ecn, Ecn::NotEct);
        } else if i >= 1 {
            assert_eq!(ecn, Ecn::Ce, "group {i} {sent:?}");
        }
    }
}

/// Offers `n` ECT packets of `len` bytes at an arrival gap; returns the admits.
#[allow(clippy::type_complexity)]
fn run(
    c: &QueueConfig,
    n: usize,
    len: usize,
    gap: Duration,
) -> (Vec<(Option<Ecn>, Duration)>, QueueStats) {
    let t0 = Instant::now();
    let mut q = QueueModel::new(c.clone());
    let mut out = Vec::new();
    let mut t = t0;
    for i in 0..n {
        while q.pop(t).is_some() {}
        out.push(q.enqueue(t, i, len, Ecn::Ect0));
        t += gap;
    }
    let s = q.stats(t);
    // Admits carry instants: made relative to the start so two runs compare.
    let rel = out
        .into_iter()
        .map(|a| match a {
            Admit::Queued { ecn, departs } => (Some(ecn), departs - t0),
            Admit::Dropped => (None, Duration::ZERO),
        })
        .collect();
    (rel, s)
}

/// At a depth held inside the RED band the marked share is near the RED probability.
#[test]
fn marks_follow_red_statistically() {
    // Arrivals exactly at the line rate after a prefill keep the depth constant.
    let c = cfg("rate=1gbit buffer=10MB kmin=0 kmax=100000 pmax=0.4 seed=9");
    let t0 = Instant::now();
    let mut q = QueueModel::new(c.clone());
    // Prefill to 50 KB (marks during it not counted below).
    for i in 0..50 {
        q.enqueue(t0, i, 1000, Ecn::NotEct);
    }
    let mut t = t0;
    let mut marked = 0;
    let n = 20_000;
    for i in 0..n {
        t += Duration::from_micros(8);
        while q.pop(t).is_some() {}
        if let Admit::Queued { ecn: Ecn::Ce, .. } = q.enqueue(t, i, 1000, Ecn::Ect0) {
            marked += 1;
        }
    }
    // The depth each arrival sees is 49 000 bytes: p = 0.4 * 0.49 = 0.196.
    let share = marked as f64 / n as f64;
    assert!((share - 0.196).abs() < 0.015, "marked share {share}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the traffic: the depth never exceeds the buffer, departures are in order
    /// and at least len*8/rate apart, enqueued + dropped = offered, tx = enqueued once
    /// drained, only capable packets are marked, and a seed repeats its run.
    #[test]
    fn queue_invariants(
        rate_mbit in 1u64..10_000,
        buffer in 1_000u64..200_000,
        kmin in 0u64..100_000,
        span in 0u64..100_000,
        pmax in 0.0f64..=1.0,
        seed in any::<u64>(),
        pkts in proptest::collection::vec((64usize..4200, 0u64..20_000, 0u8..4), 1..300),
    ) {
        let c = QueueConfig { rate: rate_mbit * 1_000_000, buffer, kmin, kmax: kmin + span, pmax, seed };
        let go = || {
            let t0 = Instant::now();
            let mut q = QueueModel::new(c.clone());
            let mut t = t0;
            let mut last_dep: Option<Instant> = None;
            let mut log = Vec::new();
            for (i, &(len, gap_ns, e)) in pkts.iter().enumerate() {
                t += Duration::from_nanos(gap_ns);
                while let Some((j, ecn)) = q.pop(t) {
                    log.push((j, ecn));
                }
                let sent = Ecn::from_tos(e);
                let a = q.enqueue(t, i, len, sent);
                prop_assert!(q.depth(t) <= c.buffer);
                prop_assert!(q.stats(t).cp_max_queue_bytes <= c.buffer);
                if let Admit::Queued { ecn, departs } = a {
                    if !sent.capable() { prop_assert_eq!(ecn, Ecn::NotEct); }
                    if let Some(l) = last_dep {
                        prop_assert!(departs >= l + c.serialise(len));
                    }
                    prop_assert!(departs >= t + c.serialise(len));
                    last_dep = Some(departs);
                }
            }
            while let Some(d) = q.next_departure() {
                let (j, ecn) = q.pop(d).unwrap();
                log.push((j, ecn));
            }
            let s = q.stats(t);
            prop_assert_eq!(s.cp_enqueued + s.cp_dropped, pkts.len() as u64);
            prop_assert_eq!(s.cp_tx_pkts, s.cp_enqueued);
            prop_assert!(log.windows(2).all(|w| w[0].0 < w[1].0));
            Ok((log, s))
        };
        let a = go()?;
        let b = go()?;
        prop_assert_eq!(a, b);
    }
}

#[test]
fn seeded_runs_repeat_and_seeds_differ() {
    // The depth grows to 500 KB, inside the RED band: marks are random draws.
    let c = cfg("rate=1gbit buffer=20MB kmin=0 kmax=1MB pmax=0.5 seed=3");
    let gap = Duration::from_micros(6);
    let a = run(&c, 2000, 1000, gap);
    assert_eq!(a, run(&c, 2000, 1000, gap));
    let other = QueueConfig { seed: 4, ..c };
    assert_ne!(a.0, run(&other, 2000, 1000, gap).0);
    assert!(a.1.cp_ecn_marked > 0 && a.1.cp_ecn_marked < 2000);
}
