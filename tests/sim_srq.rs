//! Shared receive queues over the simulator: several RC QPs take their receives from one
//! SRQ; the limit event is one-shot; an empty SRQ makes the responder RNR-NAK; a QP on
//! an SRQ going to ERR raises Last WQE Reached and leaves the SRQ's WQEs alone; an SRQ in
//! use cannot be destroyed; the verbs' argument checks (rxe's).

mod common;

use common::rc::pattern;
use common::srq::{SrqNet, SrqOpts, A, B};
use roce_emu::engine::*;
use roce_emu::sim::rule::DropNth;
use std::collections::BTreeSet;

const RECV: u64 = 512 * 1024;

#[test]
fn several_qps_share_one_srq_and_each_wqe_is_used_once() {
    let mut s = SrqNet::new(SrqOpts {
        qps: 4,
        srq_depth: 64,
        ..SrqOpts::default()
    });
    for i in 0..48u64 {
        s.post_srq_recv(1000 + i, RECV + i * 4096, 4096).unwrap();
    }
    // 12 messages per QP, of different lengths (1 to 3 packets at MTU 1024).
    let mut sent = Vec::new();
    for i in 0..48u64 {
        let qp = (i % 4) as usize;
        let len = 1 + (i as u32 * 97) % 3000;
        s.write_mem(A, i * 4096, &pattern(i as u8, len as usize));
        s.send(qp, i, i * 4096, len, Some(i as u32));
        sent.push((i, len));
    }
    s.settle();
    let ca = s.completions(A);
    assert_eq!(ca.len(), 48);
    assert!(ca.iter().all(|c| c.status == WcStatus::Success));
    let cb = s.completions(B);
    assert_eq!(cb.len(), 48, "one receive per message");
    let wr_ids: BTreeSet<u64> = cb.iter().map(|c| c.wr_id).collect();
    assert_eq!(wr_ids.len(), 48, "no WQE used twice");
    let qpns: BTreeSet<u32> = cb.iter().map(|c| c.qpn).collect();
    assert_eq!(qpns.len(), 4, "every QP received through the SRQ");
    for c in &cb {
        assert_eq!(c.status, WcStatus::Success);
        // The immediate names the message; the WQE's buffer holds its bytes.
        let msg = u64::from(c.imm.expect("SEND with immediate"));
        let (_, len) = sent[msg as usize];
        assert_eq!(c.byte_len, len);
        let slot = RECV + (c.wr_id - 1000) * 4096;
        assert_eq!(
            s.read_mem(B, slot, len as usize),
            pattern(msg as u8, len as usize)
        );
        let qp = s.b.qps[(msg % 4) as usize];
        assert_eq!(c.qpn, qp, "completed on the QP that received it");
    }
    assert_eq!(s.srq_len(), 0);
}

#[test]
fn limit_event_fires_once_and_again_only_after_rearm() {
    let mut s = SrqNet::new(SrqOpts {
        qps: 2,
        srq_depth: 16,
        ..SrqOpts::default()
    });
    for i in 0..10u64 {
        s.post_srq_recv(i, RECV + i * 4096, 4096).unwrap();
    }
    let srq = s.srq;
    s.engine(B).modify_srq(srq, None, Some(4)).unwrap();
    assert_eq!(s.engine(B).query_srq(srq).unwrap().limit, 4);
    // 10 -> 4 left: not below the limit yet.
    for i in 0..6 {
        s.send(i % 2, i as u64, 0, 64, None);
    }
    s.settle();
    assert_eq!(s.srq_len(), 4);
    assert_eq!(s.events(B), []);
    // 4 -> 3: below 4, the event, once; the limit reads 0 (disarmed).
    s.send(0, 6, 0, 64, None);
    s.settle();
    assert_eq!(s.events(B), [AsyncEvent::SrqLimitReached { srq }]);
    assert_eq!(s.engine(B).query_srq(srq).unwrap().limit, 0);
    // 3 -> 1: no second event while disarmed.
    s.send(1, 7, 0, 64, None);
    s.send(0, 8, 0, 64, None);
    s.settle();
    assert_eq!(s.events(B), []);
    // Posting never raises it, even armed above the count.
    s.engine(B).modify_srq(srq, None, Some(3)).unwrap();
    s.post_srq_recv(20, RECV, 4096).unwrap();
    assert_eq!(s.events(B), []);
    // Re-armed at 3 with 2 left: the next WQE taken fires it again, once.
    s.send(1, 9, 0, 64, None);
    s.settle();
    assert_eq!(s.events(B), [AsyncEvent::SrqLimitReached { srq }]);
    s.send(0, 10, 0, 64, None);
    s.settle();
    assert_eq!(s.events(B), []);
    assert_eq!(s.completions(B).len(), 11);
    // Limit 0 disarms.
    s.engine(B).modify_srq(srq, None, Some(0)).unwrap();
    assert_eq!(s.engine(B).query_srq(srq).unwrap().limit, 0);
}

#[test]
fn an_empty_srq_is_an_rnr_nak_and_the_message_arrives_once_one_is_posted() {
    let mut s = SrqNet::new(SrqOpts {
        qps: 2,
        ..SrqOpts::default()
    });
    s.write_mem(A, 0, &pattern(9, 2000));
    s.send(1, 1, 0, 2000, None);
    // Until the RNR NAK has gone out.
    s.net
        .run_until(10_000, |n| {
            n.nodes[B].engine.counters().get(Counter::SendRnrErr) > 0
        })
        .unwrap();
    assert!(s.completions(B).is_empty());
    s.post_srq_recv(5, RECV, 4096).unwrap();
    s.settle();
    assert!(s.counter(A, Counter::RcvdRnrErr) >= 1);
    let cb = s.completions(B);
    assert_eq!(cb.len(), 1);
    assert_eq!(
        (cb[0].wr_id, cb[0].status, cb[0].byte_len, cb[0].qpn),
        (5, WcStatus::Success, 2000, s.b.qps[1])
    );
    assert_eq!(s.read_mem(B, RECV, 2000), pattern(9, 2000));
    assert_eq!(s.completions(A)[0].status, WcStatus::Success);
}

#[test]
fn a_qp_on_an_srq_going_to_err_raises_last_wqe_reached_and_leaves_the_srq_alone() {
    let mut s = SrqNet::new(SrqOpts {
        qps: 2,
        ..SrqOpts::default()
    });
    for i in 0..5u64 {
        s.post_srq_recv(i, RECV + i * 4096, 4096).unwrap();
    }
    // A 3-packet SEND on QP 0 whose LAST is lost: the QP holds the WQE it took at FIRST.
    s.net.add_rule(A, B, DropNth::new(&[3]));
    s.send(0, 1, 0, 3000, None);
    s.net
        .run_until(10_000, |n| n.nodes[B].engine.srq(1).unwrap().len() == 4)
        .unwrap();
    assert!(s.completions(B).is_empty());
    let (q0, q1) = (s.b.qps[0], s.b.qps[1]);
    let now = s.net.now;
    s.engine(B)
        .modify_qp(
            now,
            q0,
            &QpAttr {
                state: Some(QpState::Err),
                ..QpAttr::default()
            },
        )
        .unwrap();
    assert_eq!(s.events(B), [AsyncEvent::QpLastWqeReached { qpn: q0 }]);
    // The WQE taken for the message in progress completes in error; the SRQ's stay.
    let cb = s.completions(B);
    assert_eq!(cb.len(), 1);
    assert_eq!(
        (cb[0].wr_id, cb[0].status, cb[0].qpn),
        (0, WcStatus::WrFlushErr, q0)
    );
    assert_eq!(s.srq_len(), 4);
    // Posting to the QP in ERR flushes nothing of the SRQ and raises nothing more.
    s.net.clear_rules();
    s.send(1, 2, 0, 100, None);
    s.settle();
    assert_eq!(s.events(B), []);
    let cb = s.completions(B);
    assert_eq!(cb.len(), 1);
    assert_eq!(
        (cb[0].wr_id, cb[0].status, cb[0].qpn),
        (1, WcStatus::Success, q1)
    );
    assert_eq!(s.srq_len(), 3);
}

#[test]
fn an_idle_qp_to_err_raises_last_wqe_reached_without_completions() {
    let mut s = SrqNet::new(SrqOpts {
        qps: 1,
        ..SrqOpts::default()
    });
    s.post_srq_recv(1, RECV, 4096).unwrap();
    let q = s.b.qps[0];
    let now = s.net.now;
    s.engine(B)
        .modify_qp(
            now,
            q,
            &QpAttr {
                state: Some(QpState::Err),
                ..QpAttr::default()
            },
        )
        .unwrap();
    assert_eq!(s.events(B), [AsyncEvent::QpLastWqeReached { qpn: q }]);
    assert!(s.completions(B).is_empty());
    assert_eq!(s.srq_len(), 1);
}

#[test]
fn destroy_of_an_srq_in_use_is_refused() {
    let mut s = SrqNet::new(SrqOpts {
        qps: 2,
        ..SrqOpts::default()
    });
    let (srq, q0, q1) = (s.srq, s.b.qps[0], s.b.qps[1]);
    let e = s.engine(B);
    assert_eq!(
        e.destroy_srq(srq),
        Err(VerbsError::SrqInUse { srq, qpn: q0 })
    );
    e.destroy_qp(q0).unwrap();
    assert_eq!(
        e.destroy_srq(srq),
        Err(VerbsError::SrqInUse { srq, qpn: q1 })
    );
    e.destroy_qp(q1).unwrap();
    assert_eq!(e.destroy_srq(srq), Ok(()));
    assert_eq!(e.destroy_srq(srq), Err(VerbsError::NoSuchSrq(srq)));
}

#[test]
fn srq_verbs_check_their_arguments_as_rxe() {
    let mut s = SrqNet::new(SrqOpts {
        qps: 1,
        srq_depth: 4,
        ..SrqOpts::default()
    });
    let (srq, q, pd) = (s.srq, s.b.qps[0], s.b.pd);
    let sge = s.sge(B, RECV, 64);
    let e = s.engine(B);
    // A QP on an SRQ has no RQ of its own (rxe: EINVAL).
    let wr = RecvWr {
        wr_id: 1,
        sges: &[sge],
    };
    assert_eq!(
        e.post_recv(Instant::ZERO, q, &wr),
        Err(VerbsError::QpOnSrq { qpn: q, srq })
    );
    // More SGEs than max_sge (2).
    let three = [sge; 3];
    let wr3 = RecvWr {
        wr_id: 2,
        sges: &three,
    };
    assert!(matches!(
        e.post_srq_recv(srq, &wr3),
        Err(VerbsError::TooManySge { n: 3, max: 2 })
    ));
    // Full: ENOMEM in the drop-in.
    for _ in 0..4 {
        e.post_srq_recv(srq, &wr).unwrap();
    }
    assert_eq!(
        e.post_srq_recv(srq, &wr),
        Err(VerbsError::SrqFull { srq, depth: 4 })
    );
    // A limit above max_wr, a resize below what is posted or below the armed limit.
    assert!(e.modify_srq(srq, None, Some(5)).is_err());
    assert!(e.modify_srq(srq, Some(3), None).is_err());
    e.modify_srq(srq, Some(8), Some(6)).unwrap();
    assert!(e.modify_srq(srq, Some(5), None).is_err());
    assert_eq!(
        e.query_srq(srq).unwrap(),
        SrqAttr {
            max_wr: 8,
            max_sge: 2,
            limit: 6
        }
    );
    e.post_srq_recv(srq, &wr).unwrap();
    // A QP on an SRQ that does not exist.
    assert!(matches!(
        e.create_qp(&QpInit {
            srq: Some(99),
            ..QpInit::rc(pd, 1, QpCap::default())
        }),
        Err(VerbsError::NoSuchSrq(99))
    ));
    assert!(e
        .create_srq(&SrqInit {
            pd,
            max_wr: 4,
            max_sge: 1,
            limit: 5
        })
        .is_err());
}

#[test]
fn a_wqe_taken_for_an_unfinished_message_goes_back_on_reset_and_destroy() {
    // RESET (and destroy) owe no completion (IBA 10.3.1): the WQE a QP took for a message
    // it will never finish returns to the SRQ, first in line, rather than being lost.
    let mut s = SrqNet::new(SrqOpts {
        qps: 2,
        ..SrqOpts::default()
    });
    for i in 0..3u64 {
        s.post_srq_recv(i, RECV + i * 4096, 4096).unwrap();
    }
    // QP 0 takes WQE 0 for a 3-packet SEND whose LAST is lost, then is reset.
    s.net.add_rule(A, B, DropNth::new(&[3]));
    s.send(0, 1, 0, 3000, None);
    s.net
        .run_until(10_000, |n| n.nodes[B].engine.srq(1).unwrap().len() == 2)
        .unwrap();
    let (q0, q1) = (s.b.qps[0], s.b.qps[1]);
    let now = s.net.now;
    s.engine(B)
        .modify_qp(
            now,
            q0,
            &QpAttr {
                state: Some(QpState::Reset),
                ..QpAttr::default()
            },
        )
        .unwrap();
    assert_eq!(s.srq_len(), 3);
    assert!(s.completions(B).is_empty());
    assert_eq!(s.events(B), []);
    // QP 1 takes the same WQE 0 next, for its own message, and is destroyed mid-message.
    s.net.clear_rules();
    s.net.add_rule(A, B, DropNth::new(&[3]));
    s.send(1, 2, 0, 3000, None);
    s.net
        .run_until(10_000, |n| n.nodes[B].engine.srq(1).unwrap().len() == 2)
        .unwrap();
    s.engine(B).destroy_qp(q1).unwrap();
    assert_eq!(s.srq_len(), 3);
    // Nothing was lost: the three WQEs are still there, WQE 0 first. A fresh QP pair on
    // the SRQ receives into it.
    s.net.clear_rules();
    let (pa, ca, pb, cb, srq) = (s.a.pd, s.a.cq, s.b.pd, s.b.cq, s.srq);
    let cap = QpCap {
        max_recv_wr: 0,
        max_recv_sge: 0,
        ..QpCap::default()
    };
    let x = s.engine(A).create_qp(&QpInit::rc(pa, ca, cap)).unwrap();
    let y = s
        .engine(B)
        .create_qp(&QpInit {
            srq: Some(srq),
            ..QpInit::rc(pb, cb, cap)
        })
        .unwrap();
    let (ia, ib) = (s.net.nodes[A].ip, s.net.nodes[B].ip);
    let p = roce_emu::sim::direct::RcParams {
        mtu: Mtu::M1024,
        ..Default::default()
    };
    let psn = roce_emu::wire::Psn::new(7);
    roce_emu::sim::direct::connect(s.engine(A), x, ib, y, psn, psn, &p).unwrap();
    roce_emu::sim::direct::connect(s.engine(B), y, ia, x, psn, psn, &p).unwrap();
    s.a.qps.push(x);
    s.send(2, 3, 0, 100, None);
    s.settle();
    let cb = s.completions(B);
    assert_eq!(cb.len(), 1);
    assert_eq!((cb[0].wr_id, cb[0].qpn), (0, y));
    assert_eq!(s.srq_len(), 2);
}
