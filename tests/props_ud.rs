//! The exactly-once property of tests/props_rc.rs, for UD: what UD promises instead.
//! Random datagrams (sizes 0 to the port MTU and beyond, random port MTU, some with a
//! wrong Q_Key, SEND and SEND with immediate), a random number of receive WQEs, over a
//! link that loses up to 30% of packets and reorders them (and, in the second property,
//! duplicates them too). Checked:
//! - every send WR completes exactly once, in order, successfully (no ACK: a datagram
//!   completes when it leaves; one longer than the port MTU without leaving, C10-93.1.1);
//! - every datagram delivered is one that was sent, byte for byte, with its source QP;
//!   none is delivered twice unless the network duplicated it (UD has no duplicate
//!   detection, IBA 9.8.2), and then at most as often as it arrived;
//! - every packet that reached the receiver is accounted for: a completion, a Q_Key
//!   violation or a drop for want of a receive WQE, each counted.
//!
//! `PROPTEST_CASES` sets the number of cases (default 64 per property).

mod common;

use common::ud::{Ud, QKEY};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use roce_emu::engine::*;
use roce_emu::sim::rule::{Random, Verdict};
use std::time::Duration;

const A: usize = 0;
const B: usize = 1;
/// A: one 8 KiB source slot per datagram; B: one receive slot per WQE.
const SLOT: u64 = 8 * 1024;
const RECV: u64 = 512 * 1024;
const MAX_OPS: usize = 40;

#[derive(Debug, Clone)]
struct Dgram {
    len: u32,
    imm: bool,
    good_qkey: bool,
}

#[derive(Debug, Clone)]
struct Case {
    mtu: Mtu,
    ops: Vec<Dgram>,
    recvs: usize,
    loss: f64,
    reorder: f64,
    dup: f64,
    seed: u64,
}

fn case(dup: bool) -> impl Strategy<Value = Case> {
    let mtu = prop_oneof![Just(Mtu::M256), Just(Mtu::M1024), Just(Mtu::M4096)];
    let dups = if dup {
        (0.0..0.2f64).boxed()
    } else {
        Just(0.0).boxed()
    };
    (mtu, dups).prop_flat_map(move |(mtu, dups)| {
        let m = mtu.bytes();
        let op = (0..=m + 64, any::<bool>(), prop::bool::weighted(0.9)).prop_map(
            |(len, imm, good_qkey)| Dgram {
                // A SEND without immediate names itself in its first 8 bytes.
                len: if imm { len } else { len.max(8) },
                imm,
                good_qkey,
            },
        );
        (
            Just(mtu),
            prop::collection::vec(op, 1..MAX_OPS),
            0..MAX_OPS + 5,
            0.0..0.3f64,
            0.0..0.3f64,
            Just(dups),
            any::<u64>(),
        )
            .prop_map(|(mtu, ops, recvs, loss, reorder, dup, seed)| Case {
                mtu,
                ops,
                recvs,
                loss,
                reorder,
                dup,
                seed,
            })
    })
}

/// The bytes of datagram `i`: its index first, then a pattern of its own.
fn payload(i: usize, len: u32) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len as usize)
        .map(|k| (i as u8).wrapping_mul(31).wrapping_add(k as u8))
        .collect();
    if len >= 8 {
        v[..8].copy_from_slice(&(i as u64).to_le_bytes());
    }
    v
}

fn check(c: Case) -> Result<usize, TestCaseError> {
    let mut u = Ud::with_mtu(2, c.mtu);
    let mtu = c.mtu.bytes();
    for k in 0..c.recvs {
        u.post_recv(B, k as u64, RECV + k as u64 * SLOT, 40 + mtu);
    }
    u.net.add_rule(
        A,
        B,
        Random {
            drop: c.loss,
            reorder: c.reorder,
            reorder_by: Duration::from_micros(40),
            duplicate: c.dup,
            ..Random::new(c.seed)
        },
    );
    for (i, d) in c.ops.iter().enumerate() {
        let off = i as u64 * SLOT;
        u.write_mem(A, off, &payload(i, d.len));
        let qkey = if d.good_qkey { QKEY } else { QKEY ^ 0x10 };
        let dest = u.dest(B, qkey);
        let op = if d.imm {
            SendOp::SendWithImm { imm: i as u32 }
        } else {
            SendOp::Send
        };
        u.send_to(A, i as u64, op, off, d.len, &dest).unwrap();
    }
    u.net
        .run_idle(1_000_000)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;

    // Sender: every WR once, in order, successful; only datagrams that fit left.
    let ca = u.completions(A);
    let ids: Vec<u64> = ca.iter().map(|c| c.wr_id).collect();
    prop_assert_eq!(ids, (0..c.ops.len() as u64).collect::<Vec<_>>());
    prop_assert!(ca.iter().all(|c| c.status == WcStatus::Success));
    let fits = c.ops.iter().filter(|d| d.len <= mtu).count();
    prop_assert_eq!(u.sent(A), fits);
    prop_assert_eq!(
        u.counter(A, Counter::UdSendTooLong) as usize,
        c.ops.len() - fits
    );

    // What reached B, by datagram (a duplicate arrives twice).
    let trace = u.net.trace.clone().unwrap();
    let mut arrived = vec![0usize; c.ops.len()];
    let mut fits_idx = (0..c.ops.len()).filter(|&i| c.ops[i].len <= mtu);
    for t in trace.iter().filter(|t| t.from == A) {
        let i = fits_idx.next().expect("one packet per datagram that fits");
        arrived[i] = match t.verdict {
            Verdict::Drop => 0,
            Verdict::Duplicate => 2,
            _ => 1,
        };
    }
    let total_arrived: usize = arrived.iter().sum();

    // Receiver: each completion is a datagram that was sent, byte for byte.
    let cb = u.completions(B);
    let mut delivered = vec![0usize; c.ops.len()];
    for (k, r) in cb.iter().enumerate() {
        prop_assert_eq!(r.wr_id, k as u64, "WQEs are taken in order");
        prop_assert_eq!(r.status, WcStatus::Success);
        prop_assert_eq!(r.src_qp, u.ends[A].qpn);
        prop_assert_eq!(r.network_hdr, Some(NetworkHdr::Ipv4));
        let len = r.byte_len - 40;
        let body = u.read_mem(B, RECV + k as u64 * SLOT + 40, len as usize);
        let i = match r.imm {
            Some(i) => i as usize,
            None => u64::from_le_bytes(body[..8].try_into().unwrap()) as usize,
        };
        prop_assert!(i < c.ops.len(), "datagram {} was never sent", i);
        let d = &c.ops[i];
        prop_assert!(d.good_qkey, "datagram {} had a wrong Q_Key", i);
        prop_assert_eq!(d.imm, r.imm.is_some());
        prop_assert_eq!(len, d.len);
        prop_assert_eq!(&body, &payload(i, d.len), "datagram {} corrupted", i);
        delivered[i] += 1;
    }
    for i in 0..c.ops.len() {
        prop_assert!(
            delivered[i] <= arrived[i],
            "datagram {} delivered {} times, arrived {}",
            i,
            delivered[i],
            arrived[i]
        );
        if c.dup == 0.0 {
            prop_assert!(delivered[i] <= 1, "datagram {} delivered twice", i);
        }
    }
    // Every arrival accounted for: delivered, or a counted drop.
    let qkey_drops = u.counter(B, Counter::QkeyViolation) as usize;
    let no_wqe = u.counter(B, Counter::UdDropNoRecvWqe) as usize;
    prop_assert_eq!(u.counter(B, Counter::RcvdPkts) as usize, total_arrived);
    prop_assert_eq!(cb.len() + qkey_drops + no_wqe, total_arrived);
    let bad_arrivals: usize = (0..c.ops.len())
        .filter(|&i| !c.ops[i].good_qkey)
        .map(|i| arrived[i])
        .sum();
    prop_assert_eq!(qkey_drops, bad_arrivals);
    // WQEs are used while they last.
    prop_assert_eq!(cb.len(), (total_arrived - bad_arrivals).min(c.recvs));
    Ok(c.ops.len())
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/props_ud.txt",
        ))),
        ..ProptestConfig::default()
    }
}

fn run(name: &str, dup: bool) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ops = AtomicUsize::new(0);
    let cases = AtomicUsize::new(0);
    let mut runner = proptest::test_runner::TestRunner::new(config());
    let r = runner.run(&case(dup), |c| {
        ops.fetch_add(check(c)?, Ordering::Relaxed);
        cases.fetch_add(1, Ordering::Relaxed);
        Ok(())
    });
    eprintln!(
        "{name}: {} cases, {} datagrams",
        cases.load(Ordering::Relaxed),
        ops.load(Ordering::Relaxed)
    );
    if let Err(e) = r {
        panic!("{name}: {e}");
    }
}

#[test]
fn every_datagram_is_delivered_at_most_once_and_every_drop_is_counted() {
    run("ud, loss and reordering", false);
}

#[test]
fn with_duplication_nothing_is_delivered_more_often_than_it_arrived() {
    run("ud, loss, reordering and duplication", true);
}
