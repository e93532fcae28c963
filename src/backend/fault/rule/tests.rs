use super::*;
use proptest::prelude::*;

/// A packet with BTH opcode `op` and DestQP `qpn`, 64 bytes, numbered by `n`.
fn pkt(op: u8, qpn: u32, n: u32) -> Vec<u8> {
    let mut p = vec![0u8; 64];
    p[0] = op;
    p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    p[12..16].copy_from_slice(&n.to_be_bytes());
    p
}

fn rule(action: Action, percent: f64, seed: u64) -> Rule {
    Rule {
        percent,
        seed,
        ..Rule::new(action)
    }
}

/// The fates of `n` packets (and the packets after the rules ran).
fn run(f: &mut Faults, dir: Dir, n: u32) -> Vec<(Fate, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let mut p = pkt(0x04, 0x11, i);
            (f.decide(dir, &mut p), p)
        })
        .collect()
}

#[test]
fn filters_take_direction_opcode_and_qpn() {
    let r = Rule {
        dir: Some(Dir::In),
        opcode: Some(0x11),
        qpn: Some(0x42),
        ..Rule::new(Action::Drop)
    };
    assert!(r.matches(Dir::In, &pkt(0x11, 0x42, 0)));
    assert!(!r.matches(Dir::Out, &pkt(0x11, 0x42, 0)));
    assert!(!r.matches(Dir::In, &pkt(0x04, 0x42, 0)));
    assert!(!r.matches(Dir::In, &pkt(0x11, 0x43, 0)));
    assert!(!r.matches(Dir::In, &[0x11; 8]), "too short for a BTH");
    assert!(
        Rule::new(Action::Drop).matches(Dir::Out, &[]),
        "no filter: every packet"
    );
}

/// Each action's share is near its rate, and the counters say so.
#[test]
fn each_action_acts_on_its_share() {
    const N: u32 = 20_000;
    for action in [
        Action::Drop,
        Action::Duplicate,
        Action::Reorder { depth: 4 },
        Action::Delay(Duration::from_millis(1)),
        Action::Corrupt,
    ] {
        let mut f = Faults::new([rule(action, 10.0, 77)]);
        let fates = run(&mut f, Dir::Out, N);
        let hit = fates
            .iter()
            .filter(|(x, _)| x.drop || x.extra > 0 || x.held() || x.corrupted)
            .count();
        assert!(
            (1800..2200).contains(&hit),
            "{action:?}: {hit} of {N} at 10%"
        );
        let rep = &f.report()[0];
        assert_eq!(
            (rep.matched, rep.applied),
            (N as u64, hit as u64),
            "{action:?}"
        );
    }
}

/// A seed gives the same choices for the same packets; another seed other choices; 0%
/// never acts, 100% always.
#[test]
fn a_seed_repeats_its_choices() {
    let once = |seed| {
        let mut f = Faults::new([
            rule(Action::Drop, 20.0, seed),
            rule(Action::Corrupt, 20.0, seed + 1),
            rule(Action::Duplicate, 20.0, seed + 2),
        ]);
        run(&mut f, Dir::In, 2000)
    };
    assert_eq!(once(5), once(5));
    assert_ne!(once(5), once(6));
    let mut none = Faults::new([rule(Action::Drop, 0.0, 1)]);
    assert!(run(&mut none, Dir::In, 1000).iter().all(|(x, _)| !x.drop));
    let mut all = Faults::new([rule(Action::Drop, 100.0, 1)]);
    assert!(run(&mut all, Dir::In, 1000).iter().all(|(x, _)| x.drop));
}

/// A drop ends the list: later rules neither see nor count the packet.
#[test]
fn a_drop_ends_the_list() {
    let mut f = Faults::new([
        rule(Action::Drop, 100.0, 1),
        rule(Action::Corrupt, 100.0, 1),
    ]);
    let fates = run(&mut f, Dir::Out, 10);
    assert!(fates.iter().all(|(x, _)| x.drop && !x.corrupted));
    assert_eq!(f.report()[1].matched, 0);
    f.clear();
    assert!(f.is_empty());
    assert_eq!(f.cleared().len(), 2);
    assert_eq!(f.cleared()[0].applied, 10);
}

proptest! {
    /// Corruption changes exactly one byte, never the BTH byte the ICRC masks, and so the
    /// ICRC no longer verifies.
    #[test]
    fn corruption_changes_one_covered_byte(len in 16usize..300, seed in any::<u64>()) {
        use crate::wire::icrc::{fill, verify, PseudoHeaders};
        let src = "10.0.0.1:4791".parse().unwrap();
        let dst = "10.0.0.2:4791".parse().unwrap();
        let ph = PseudoHeaders::new(src, dst, 7, len);
        let mut p = vec![0u8; len];
        p[0] = 0x04;
        fill(ph.ip(), ph.udp(), &mut p).unwrap();
        let orig = p.clone();
        let mut f = Faults::new([rule(Action::Corrupt, 100.0, seed)]);
        prop_assert!(f.decide(Dir::Out, &mut p).corrupted);
        let diff: Vec<usize> = (0..len).filter(|&i| p[i] != orig[i]).collect();
        prop_assert_eq!(diff.len(), 1);
        prop_assert_ne!(diff[0], bth::field::FECN_BECN);
        prop_assert!(verify(ph.ip(), ph.udp(), &p).is_err());
    }
}
