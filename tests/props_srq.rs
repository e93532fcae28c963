//! Exactly-once delivery through a shared receive queue, as a property (the sibling of
//! tests/props_rc.rs's first property): 2 to 4 RC QP pairs, the receivers all on one SRQ,
//! random SENDs and WRITEs with immediate (0 to 3 path MTUs, random MTU) on random QPs over
//! a link that loses up to 30% of packets, duplicates and reorders them, both ways. The
//! SRQ starts with only some of the WQEs the messages need and is refilled in random
//! batches only when it runs empty, so senders meet RNR NAKs.
//!
//! Checked: every send WR completes exactly once, successfully; every message is received
//! exactly once, on the QP it was sent to, in its QP's order, into a WQE no other message
//! used; every WQE posted is consumed exactly once (none twice, none lost: the SRQ is empty
//! at the end); each receive buffer holds its message's bytes.
//!
//! `PROPTEST_CASES` sets the number of cases (default 32).

mod common;

use common::rc::pattern;
use common::srq::{SrqNet, SrqOpts, A, B};
use common::srq_case::{case, rule, Case, MAX_MSGS, RECV, SLOT};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use roce_emu::engine::*;
use std::collections::{BTreeMap, BTreeSet};

fn check(c: Case) -> Result<usize, TestCaseError> {
    let n = c.msgs.len();
    let mut s = SrqNet::new(SrqOpts {
        qps: c.qps,
        srq_depth: MAX_MSGS,
        mtu: c.mtu,
        retry7_forever: true,
        ..SrqOpts::default()
    });
    // WQE k: slot k, wr_id 1000 + k.
    let mut posted = 0usize;
    let post = |s: &mut SrqNet, k: usize, posted: &mut usize| {
        for _ in 0..k.min(n - *posted) {
            let i = *posted as u64;
            s.post_srq_recv(1000 + i, RECV + SLOT * i, SLOT as u32)
                .unwrap();
            *posted += 1;
        }
    };
    post(&mut s, c.first, &mut posted);
    let target = s.b.mr.iova() + 512 * 1024;
    for (i, m) in c.msgs.iter().enumerate() {
        let src = SLOT * i as u64;
        s.write_mem(A, src, &pattern(i as u8 ^ 0x5a, m.len as usize));
        let sge = [s.sge(A, src, m.len)];
        let imm = i as u32;
        let op = if m.write {
            SendOp::WriteWithImm {
                remote: Remote {
                    va: target,
                    rkey: s.b.mr.rkey().0,
                },
                imm,
            }
        } else {
            SendOp::SendWithImm { imm }
        };
        let wr = SendWr {
            wr_id: i as u64,
            op,
            local: Local::Sges(&sge),
            flags: SendFlags {
                signaled: true,
                ..Default::default()
            },
        };
        let (qpn, now) = (s.a.qps[m.qp], s.net.now);
        s.engine(A).post_send(now, qpn, &wr).unwrap();
    }
    s.net.add_rule(A, B, rule(c.fwd, c.seed));
    s.net.add_rule(B, A, rule(c.back, c.seed ^ 0xdead_beef));

    let (mut ca, mut cb) = (Vec::new(), Vec::new());
    let mut done = false;
    for _ in 0..2_000_000 {
        if s.srq_len() == 0 {
            post(&mut s, c.refill, &mut posted);
        }
        ca.extend(s.completions(A));
        cb.extend(s.completions(B));
        if ca.len() >= n && cb.len() >= n {
            done = true;
            break;
        }
        if !s.net.step() {
            break;
        }
    }
    prop_assert!(
        done,
        "stalled: {} of {n} sends and {} receives",
        ca.len(),
        cb.len()
    );
    // Duplicates and late packets drain: nothing may change after completion.
    s.net
        .run_idle(1_000_000)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    ca.extend(s.completions(A));
    cb.extend(s.completions(B));

    // Every send WR once, successfully.
    prop_assert_eq!(ca.len(), n);
    let ids: BTreeSet<u64> = ca.iter().map(|c| c.wr_id).collect();
    prop_assert_eq!(ids.len(), n);
    prop_assert!(ca.iter().all(|c| c.status == WcStatus::Success), "{:?}", ca);
    // Every message once, on its QP, in its QP's order, each into a WQE of its own.
    prop_assert_eq!(cb.len(), n, "receives: {:?}", cb);
    let mut wqes = BTreeSet::new();
    let mut msgs = BTreeSet::new();
    let mut last: BTreeMap<u32, u32> = BTreeMap::new();
    for r in &cb {
        prop_assert_eq!(r.status, WcStatus::Success);
        let i = r.imm.expect("every message carries its number") as usize;
        prop_assert!(msgs.insert(i), "message {} received twice", i);
        prop_assert!(wqes.insert(r.wr_id), "WQE {} used twice", r.wr_id);
        let m = &c.msgs[i];
        prop_assert_eq!(r.qpn, s.b.qps[m.qp]);
        prop_assert_eq!(r.byte_len, m.len);
        if let Some(&prev) = last.get(&r.qpn) {
            prop_assert!(prev < i as u32, "QP {:#x}: {} after {}", r.qpn, i, prev);
        }
        last.insert(r.qpn, i as u32);
        if !m.write {
            let slot = RECV + SLOT * (r.wr_id - 1000);
            prop_assert_eq!(
                s.read_mem(B, slot, m.len as usize),
                pattern(i as u8 ^ 0x5a, m.len as usize)
            );
        }
    }
    // Every WQE posted was consumed: none left, none lost.
    prop_assert_eq!(posted, n);
    prop_assert_eq!(s.srq_len(), 0);
    prop_assert_eq!(wqes.len(), n);
    Ok(n)
}

#[test]
fn every_message_once_and_every_srq_wqe_once_under_loss() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let config = ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/props_srq.txt",
        ))),
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let total = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&case(), |c| {
        let n = check(c)?;
        total.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    });
    eprintln!(
        "props_srq: {cases} cases, {} messages",
        total.load(std::sync::atomic::Ordering::Relaxed)
    );
    if let Err(e) = result {
        panic!("props_srq: {e}");
    }
}
