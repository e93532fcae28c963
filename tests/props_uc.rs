//! UC delivery as properties (the sibling of tests/props_rc.rs): random sequences of
//! SEND, SEND with immediate, WRITE and WRITE with immediate (0 to 3 path MTUs, random
//! MTU, PSNs near the 24-bit wrap) from A to B over a link that loses up to 30% of
//! packets and reorders them.
//!
//! 1. Loss and reordering: every send WR completes once, in order, successfully (UC's
//!    requester completes on transmit and cannot know); every receive completion is a
//!    whole message, byte for byte the one sent (its length, immediate and data), and no
//!    message is delivered twice; nothing partial ever completes; the QPs stay in RTS;
//!    with no fault at all, every message arrives, in order.
//! 2. With duplication as well: still only whole messages. (UC has no duplicate
//!    detection: a duplicated ONLY packet starts a new message wherever its PSN is, as in
//!    rxe's `check_psn`, so a message may arrive twice; that is UC, not a fault.)
//!
//! 3. Error paths over a clean link: some WRITEs carry a bad R_Key. Each is dropped alone
//!    (no NAK, no completion, counted in `uc_drop_invalid`), every other message arrives
//!    in order, the QPs stay in RTS.
//!
//! `PROPTEST_CASES` sets the number of cases (default 64 per property).

mod common;

use common::rc::{pattern, Opts, Pair};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use roce_emu::engine::*;
use roce_emu::mem::Access;
use roce_emu::sim::rule::Random;

const A: usize = 0;
const B: usize = 1;
const MAX_OPS: usize = 40;
/// One slot per operation: 3 x 4096 bytes, the largest message.
const SLOT: u64 = 12 * 1024;
/// A: operation i's source at SLOT * i. B: WRITE i's target at SLOT * i, receive k's
/// buffer at RECV + SLOT * k.
const RECV: u64 = 512 * 1024;
/// Immediates: SEND i carries i, WRITE i carries WRITE_IMM | i.
const WRITE_IMM: u32 = 0x8000_0000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
}

#[derive(Debug, Clone)]
struct Case {
    mtu: Mtu,
    psn_a: u32,
    psn_b: u32,
    ops: Vec<(Kind, u32)>,
    /// Which WRITEs carry a bad R_Key (property 3).
    bad: Vec<bool>,
    seed: u64,
    loss: f64,
    reorder: f64,
    duplicate: f64,
}

/// Faults: `duplicate` adds duplication; `bad_keys` makes a clean link and some WRITEs
/// with a bad R_Key.
fn case(duplicate: bool, bad_keys: bool) -> impl Strategy<Value = Case> {
    let kind = prop_oneof![
        Just(Kind::Send),
        Just(Kind::SendImm),
        Just(Kind::Write),
        Just(Kind::WriteImm)
    ];
    prop_oneof![
        Just(Mtu::M256),
        Just(Mtu::M512),
        Just(Mtu::M1024),
        Just(Mtu::M4096)
    ]
    .prop_flat_map(move |mtu| {
        let op = (kind.clone(), 0..=3 * mtu.bytes());
        let dup = if duplicate { 0.0..=0.1 } else { 0.0..=0.0 };
        let (loss, reorder) = if bad_keys {
            (Just(0.0).boxed(), Just(0.0).boxed())
        } else {
            (
                prop_oneof![Just(0.0), 0.0..=0.3f64].boxed(),
                prop_oneof![Just(0.0), 0.0..=0.2f64].boxed(),
            )
        };
        (
            Just(mtu),
            prop_oneof![0xff_fff0u32..=0xff_ffff, 0u32..=0xff_ffff],
            0u32..=0xff_ffff,
            prop::collection::vec((op, any::<bool>()), 1..=MAX_OPS),
            any::<u64>(),
            loss,
            reorder,
            dup,
        )
    })
    .prop_map(
        move |(mtu, psn_a, psn_b, ops, seed, loss, reorder, duplicate)| Case {
            mtu,
            psn_a,
            psn_b,
            bad: ops
                .iter()
                .map(|&((k, _), b)| bad_keys && b && k != Kind::Send && k != Kind::SendImm)
                .collect(),
            ops: ops.into_iter().map(|(o, _)| o).collect(),
            seed,
            loss,
            reorder,
            duplicate,
        },
    )
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/props_uc.txt",
        ))),
        ..ProptestConfig::default()
    }
}

/// Operation i's bytes.
fn data(c: &Case, i: usize) -> Vec<u8> {
    pattern((c.seed as u8).wrapping_add(i as u8), c.ops[i].1 as usize)
}

/// A message B delivered: which operation it was, from what the completion says.
fn identify(c: &Case, p: &Pair, k: u64, r: &Completion) -> Result<usize, TestCaseError> {
    prop_assert_eq!(r.status, WcStatus::Success, "receive {}: {:?}", k, r);
    let i = match (r.opcode, r.imm) {
        (WcOpcode::RecvRdmaWithImm, Some(imm)) => {
            prop_assert!(imm & WRITE_IMM != 0, "a WRITE's immediate: {:?}", r);
            let i = (imm & !WRITE_IMM) as usize;
            prop_assert!(i < c.ops.len() && c.ops[i].0 == Kind::WriteImm, "{:?}", r);
            // The whole message is in place (each WRITE has its own target).
            let want = data(c, i);
            prop_assert!(
                p.read_mem(B, SLOT * i as u64, want.len()) == want,
                "WRITE {} completed but its data is not whole",
                i
            );
            i
        }
        (WcOpcode::Recv, Some(imm)) => {
            let i = imm as usize;
            prop_assert!(i < c.ops.len() && c.ops[i].0 == Kind::SendImm, "{:?}", r);
            i
        }
        (WcOpcode::Recv, None) => {
            // A SEND without immediate: known by its bytes (each operation's pattern
            // differs from every other's in every byte) or, empty, by its length.
            let got = p.read_mem(B, RECV + SLOT * k, r.byte_len as usize);
            let found = (0..c.ops.len())
                .find(|&i| c.ops[i] == (Kind::Send, r.byte_len) && data(c, i) == got);
            match found {
                Some(i) => i,
                None => {
                    return Err(TestCaseError::fail(format!(
                        "receive {k}: no SEND sent {r:?}"
                    )))
                }
            }
        }
        _ => return Err(TestCaseError::fail(format!("receive {k}: {r:?}"))),
    };
    prop_assert_eq!(r.byte_len, c.ops[i].1, "receive {} is op {}", k, i);
    if r.opcode == WcOpcode::Recv {
        let got = p.read_mem(B, RECV + SLOT * k, r.byte_len as usize);
        prop_assert!(got == data(c, i), "receive {} (op {}) is not whole", k, i);
    }
    Ok(i)
}

/// Runs the case; returns the operations B delivered, in order of delivery.
fn run(c: &Case) -> Result<(Pair, Vec<usize>), TestCaseError> {
    let mut p = Pair::new(Opts {
        qp_type: QpType::Uc,
        mtu: c.mtu,
        psn_a: c.psn_a,
        psn_b: c.psn_b,
        access: Access::LOCAL_WRITE.union(Access::REMOTE_WRITE),
        ..Opts::default()
    });
    if std::env::var_os("RC_TRACE").is_none() {
        p.net.trace = None;
    }
    let mut rule = Random::new(c.seed);
    (rule.drop, rule.reorder, rule.duplicate) = (c.loss, c.reorder, c.duplicate);
    p.net.add_rule(A, B, rule);
    let consumers = c.ops.iter().filter(|o| o.0 != Kind::Write).count() as u64;
    // One extra receive per message for the duplicates of property 2.
    let nrecv = if c.duplicate > 0.0 {
        2 * consumers
    } else {
        consumers
    };
    // As many as fit the buffer (42): a duplicate finding none is dropped, counted.
    let room = (common::rc::BUF - RECV) / SLOT;
    for k in 0..nrecv.min(room) {
        p.post_recv(B, k, RECV + SLOT * k, SLOT as u32);
    }
    for (i, &(kind, len)) in c.ops.iter().enumerate() {
        p.write_mem(A, SLOT * i as u64, &data(c, i));
        let mut remote = p.end(B).remote(SLOT * i as u64);
        if c.bad[i] {
            remote.rkey ^= 0x100;
        }
        let op = match kind {
            Kind::Send => SendOp::Send,
            Kind::SendImm => SendOp::SendWithImm { imm: i as u32 },
            Kind::Write => SendOp::Write { remote },
            Kind::WriteImm => SendOp::WriteWithImm {
                remote,
                imm: WRITE_IMM | i as u32,
            },
        };
        p.send(A, i as u64, op, SLOT * i as u64, len);
    }
    p.net
        .run_idle(1_000_000)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    // The sender: every WR once, in order, successfully.
    let sent = p.completions(A);
    prop_assert_eq!(sent.len(), c.ops.len(), "{:?}", sent);
    for (i, s) in sent.iter().enumerate() {
        prop_assert_eq!((s.wr_id, s.status), (i as u64, WcStatus::Success));
    }
    // The receiver: only whole messages.
    let recvs = p.completions(B);
    let mut got = Vec::new();
    for (k, r) in recvs.iter().enumerate() {
        prop_assert_eq!(r.wr_id, k as u64, "receive WQEs are used in order");
        got.push(identify(c, &p, k as u64, r)?);
    }
    prop_assert_eq!(p.state(A), QpState::Rts);
    prop_assert_eq!(p.state(B), QpState::Rts);
    let b = p.net.nodes[B].engine.counters();
    prop_assert_eq!(b.get(Counter::AcksSent) + b.get(Counter::NaksSent), 0);
    Ok((p, got))
}

fn check_loss(c: Case) -> Result<usize, TestCaseError> {
    let (p, got) = run(&c)?;
    let mut seen = vec![false; c.ops.len()];
    for &i in &got {
        prop_assert!(!seen[i], "op {} delivered twice: {:?}", i, got);
        seen[i] = true;
    }
    if c.loss == 0.0 && c.reorder == 0.0 {
        let all: Vec<usize> = (0..c.ops.len())
            .filter(|&i| c.ops[i].0 != Kind::Write)
            .collect();
        prop_assert_eq!(&got, &all, "nothing lost: every message, in order");
        for (i, &(kind, len)) in c.ops.iter().enumerate() {
            if kind == Kind::Write {
                let want = data(&c, i);
                prop_assert!(p.read_mem(B, SLOT * i as u64, len as usize) == want);
            }
        }
    }
    Ok(c.ops.len())
}

/// Property 3: over a clean link, exactly the messages without a fault arrive, in order;
/// each WRITE with a bad R_Key (and data: C9-88 lets an empty one through) is dropped
/// and counted, the QPs stay in RTS.
fn check_bad_keys(c: Case) -> Result<usize, TestCaseError> {
    let (p, got) = run(&c)?;
    let refused = |i: usize| c.bad[i] && c.ops[i].1 > 0;
    let want: Vec<usize> = (0..c.ops.len())
        .filter(|&i| c.ops[i].0 != Kind::Write && !refused(i))
        .collect();
    prop_assert_eq!(&got, &want);
    let n = (0..c.ops.len()).filter(|&i| refused(i)).count() as u64;
    let b = p.net.nodes[B].engine.counters();
    prop_assert_eq!(b.get(Counter::UcDropInvalid), n);
    Ok(c.ops.len())
}

fn check_duplication(c: Case) -> Result<usize, TestCaseError> {
    run(&c)?;
    Ok(c.ops.len())
}

fn run_property<S: Strategy>(
    name: &str,
    s: S,
    check: impl Fn(S::Value) -> Result<usize, TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (ops, cases) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let mut runner = proptest::test_runner::TestRunner::new(config());
    let result = runner.run(&s, |v| {
        ops.fetch_add(check(v)?, Ordering::Relaxed);
        cases.fetch_add(1, Ordering::Relaxed);
        Ok(())
    });
    eprintln!(
        "{name}: {} cases, {} operations",
        cases.load(Ordering::Relaxed),
        ops.load(Ordering::Relaxed)
    );
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

#[test]
fn under_loss_and_reordering_uc_delivers_whole_messages_at_most_once() {
    run_property("uc loss", case(false, false), check_loss);
}

#[test]
fn under_duplication_uc_still_delivers_only_whole_messages() {
    run_property("uc duplication", case(true, false), check_duplication);
}

#[test]
fn a_write_with_a_bad_rkey_is_dropped_alone_and_the_rest_arrives() {
    run_property("uc bad keys", case(false, true), check_bad_keys);
}
