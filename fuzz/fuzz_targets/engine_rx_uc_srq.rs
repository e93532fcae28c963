//! Arbitrary datagrams into UC QPs and into RC, UC and UD QPs on one shared receive queue.
//! Engine B has an SRQ (limit armed) feeding an RC, a UC and a UD QP, plus a UC QP with a
//! receive queue of its own; every receive WQE points into a region no remote key opens.
//! A second region with every remote right is what WRITE, READ and atomics may name.
//! Engine A holds the peers of B's QPs and sends honest traffic on each (multi-packet
//! SENDs at MTU 256, WRITE and WRITE with immediate on RC and UC, a READ, a datagram).
//!
//! `ctl` (see common/mod.rs): bit 0 the receiver; bits 1-3 the BTH's destination QP (as
//! sent, B's RC, UC, UD, second UC, A's RC, A's UC); bits 4-5 the remote key (as sent;
//! the open region's with its address; the receive region's, which allows nothing remote,
//! with its address; the open region's alone); bit 6 the DETH's Q_Key set to B's; bit 7
//! the PSN moved next to the one A's QPs started at (`set_psn_near`).
//!
//! Invariants: no panic; the guard regions keep their fill; no byte of the receive region
//! outside a posted SGE changes; every WR completes at most once, so every SRQ WQE is
//! consumed at most once, and by a QP on the SRQ; the SRQ holds no WQE lost (taken but
//! neither completed nor held by a QP for the message in progress); the limit event
//! fires at most once, exactly when fewer than the limit are left, and disarms the limit.
#![no_main]

mod common;

use common::*;
use libfuzzer_sys::fuzz_target;
use roce_emu::engine::*;
use roce_emu::mem::{Access, MrTable, Sge};
use roce_emu::sim::direct::{connect, uc_connect, ud_ready, Direct, RcParams};
use roce_emu::wire::Psn;
use std::sync::Arc;

/// The PSN A's QPs start at (B's expect it), just below the 24-bit wrap.
const A_PSN: u32 = 0xff_fff0;
const IOVA: u64 = 0x10_0000;
const LEN: u64 = 64 * 1024;
/// The open region, past the receive region's upper guard and its own lower one.
const S_IOVA: u64 = IOVA + LEN + 2 * PAGE;
const QKEY: u32 = 0x1ee7_a330;
const SRQ_WQES: u64 = 24;
const LIMIT: u32 = 8;
/// The second UC QP's own receive WQEs: IDs 100.., after the SRQ's buffers.
const UC2_WQES: u64 = 4;
const STRIDE: u64 = 1024;

fuzz_target!(|data: &[u8]| {
    let mk = |x| Engine::new(EngineConfig::new(ip(x)), Arc::new(MrTable::new()));
    let (mut a, mut b) = (mk(1), mk(2));
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 0,
    };
    let access = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;

    // B's memory: [guard][receive region][guard][guard][open region][guard].
    let mem = b.mem().clone();
    let pd = mem.alloc_pd();
    let rx = region(&mem, pd, IOVA, LEN, Access::LOCAL_WRITE, None);
    let open = region(&mem, pd, S_IOVA, LEN, Access::ALL, None);
    let mut g = guards(&mem, pd, IOVA, LEN).to_vec();
    g.extend(guards(&mem, pd, S_IOVA, LEN));

    // B's SRQ, its QPs, and a UC QP with its own receive queue.
    let srq = b
        .create_srq(&SrqInit {
            pd,
            max_wr: 32,
            max_sge: 2,
            limit: LIMIT,
        })
        .unwrap();
    let (bcq, bscq) = (b.create_cq(128).unwrap(), b.create_cq(64).unwrap());
    let qp = |b: &mut Engine, qp_type, srq| {
        b.create_qp(&QpInit {
            qp_type,
            send_cq: bscq,
            srq,
            ..QpInit::rc(pd, bcq, cap)
        })
        .unwrap()
    };
    let brc = qp(&mut b, QpType::Rc, Some(srq));
    let buc = qp(&mut b, QpType::Uc, Some(srq));
    let bud = qp(&mut b, QpType::Ud, Some(srq));
    let buc2 = qp(&mut b, QpType::Uc, None);
    let on_srq = [brc, buc, bud];
    // A: the peers.
    let amem = a.mem().clone();
    let apd = amem.alloc_pd();
    let abuf = amem.reg_mr(apd, IOVA, LEN, Access::ALL).unwrap();
    let acq = a.create_cq(128).unwrap();
    let aqp = |a: &mut Engine, qp_type| {
        a.create_qp(&QpInit {
            qp_type,
            ..QpInit::rc(apd, acq, cap)
        })
        .unwrap()
    };
    let (arc, auc, aud, auc2) = (
        aqp(&mut a, QpType::Rc),
        aqp(&mut a, QpType::Uc),
        aqp(&mut a, QpType::Ud),
        aqp(&mut a, QpType::Uc),
    );
    let p = RcParams {
        mtu: Mtu::M256,
        timeout: 8,
        ..RcParams::default()
    };
    let (pa, pb) = (Psn::new(A_PSN), Psn::new(0x10));
    connect(&mut a, arc, ip(2), brc, pa, pb, &p).unwrap();
    connect(&mut b, brc, ip(1), arc, pb, pa, &p).unwrap();
    for (x, y) in [(auc, buc), (auc2, buc2)] {
        uc_connect(&mut a, x, ip(2), y, (pa, pb), Mtu::M256, access).unwrap();
        uc_connect(&mut b, y, ip(1), x, (pb, pa), Mtu::M256, access).unwrap();
    }
    ud_ready(&mut a, aud, QKEY, Psn::new(0x100)).unwrap();
    ud_ready(&mut b, bud, QKEY, Psn::new(0x200)).unwrap();
    // B's receive WQEs (the second UC QP's once it is past RESET).
    let mut posted = Vec::new();
    for id in 0..SRQ_WQES + UC2_WQES {
        let at = IOVA + STRIDE * id;
        // Every fifth WQE has two SGEs with a gap between them.
        let sges: Vec<Sge> = if id % 5 == 2 {
            vec![
                Sge {
                    addr: at,
                    length: 100,
                    lkey: rx.lkey(),
                },
                Sge {
                    addr: at + 128,
                    length: 600,
                    lkey: rx.lkey(),
                },
            ]
        } else {
            vec![Sge {
                addr: at,
                length: 40 + 700,
                lkey: rx.lkey(),
            }]
        };
        posted.extend(sges.iter().map(|s| (s.addr, u64::from(s.length))));
        if id < SRQ_WQES {
            b.post_srq_recv(
                srq,
                &RecvWr {
                    wr_id: id,
                    sges: &sges,
                },
            )
            .unwrap();
        } else {
            let wr = RecvWr {
                wr_id: 100 + id - SRQ_WQES,
                sges: &sges,
            };
            b.post_recv(Instant::ZERO, buc2, &wr).unwrap();
        }
    }

    for i in 0..2 {
        let sge = Sge {
            addr: IOVA + 32 * 1024 + 1024 * i,
            length: 1024,
            lkey: abuf.lkey(),
        };
        for q in [arc, auc, aud] {
            let _ = a.post_recv(
                Instant::ZERO,
                q,
                &RecvWr {
                    wr_id: 400 + u64::from(q) * 4 + i,
                    sges: &[sge],
                },
            );
        }
    }

    // Honest traffic from A on every QP.
    let remote = |off| Remote {
        va: S_IOVA + off,
        rkey: open.rkey().0,
    };
    let honest = [
        (arc, SendOp::Send, 700),
        (
            arc,
            SendOp::WriteWithImm {
                remote: remote(0),
                imm: 1,
            },
            300,
        ),
        (
            arc,
            SendOp::Read {
                remote: remote(4096),
            },
            600,
        ),
        (auc, SendOp::Send, 700),
        (
            auc,
            SendOp::Write {
                remote: remote(8192),
            },
            500,
        ),
        (
            auc,
            SendOp::WriteWithImm {
                remote: remote(12288),
                imm: 2,
            },
            100,
        ),
        (auc2, SendOp::Send, 100),
    ];
    for (i, (q, op, len)) in honest.into_iter().enumerate() {
        let sge = Sge {
            addr: IOVA,
            length: len,
            lkey: abuf.lkey(),
        };
        let wr = SendWr {
            wr_id: 300 + i as u64,
            op,
            local: Local::Sges(&[sge]),
            flags: SendFlags {
                signaled: true,
                ..Default::default()
            },
        };
        a.post_send(Instant::ZERO, q, &wr).unwrap();
    }
    let sge = Sge {
        addr: IOVA,
        length: 200,
        lkey: abuf.lkey(),
    };
    let wr = SendWr {
        wr_id: 310,
        op: SendOp::Send,
        local: Local::Sges(&[sge]),
        flags: SendFlags {
            signaled: true,
            ..Default::default()
        },
    };
    let dest = UdDest {
        dest_ip: ip(2),
        remote_qpn: bud,
        remote_qkey: QKEY,
    };
    a.post_send_ud(Instant::ZERO, aud, &wr, &dest).unwrap();

    let mut d = Direct::new(a, b);
    let mut t = 0u64;
    let mut buf = Vec::new();
    let mut limit_events = 0;
    for r in records(data) {
        buf.clear();
        buf.extend_from_slice(r.pkt);
        let qpns = [0, brc, buc, bud, buc2, arc, auc, 0];
        let q = qpns[usize::from((r.ctl >> 1) & 7)];
        if q != 0 {
            set_dqpn(&mut buf, q);
        }
        match (r.ctl >> 4) & 3 {
            1 => set_rkey(&mut buf, open.rkey().0, Some(S_IOVA)),
            2 => set_rkey(&mut buf, rx.rkey().0, Some(IOVA)),
            3 => set_rkey(&mut buf, open.rkey().0, None),
            _ => {}
        }
        if r.ctl & 0x40 != 0 {
            set_qkey(&mut buf, QKEY);
        }
        if r.ctl & 0x80 != 0 {
            set_psn_near(&mut buf, A_PSN);
        }
        t += 50_000;
        let now = Instant::from_nanos(t);
        if r.to_b {
            deliver(&mut d.b, ip(1), now, &buf);
        } else {
            deliver(&mut d.a, ip(2), now, &buf);
        }
        d.a.handle_timeout(now);
        d.b.handle_timeout(now);
        d.pump(now);
        while let Some(e) = d.b.poll_event() {
            if let AsyncEvent::SrqLimitReached { srq: s } = e {
                assert_eq!(s, srq);
                limit_events += 1;
            }
        }
    }
    d.pump(Instant::from_nanos(t + 1));
    while let Some(e) = d.b.poll_event() {
        if let AsyncEvent::SrqLimitReached { .. } = e {
            limit_events += 1;
        }
    }

    debug_counters(&d.a, &d.b);
    check_guards(&g);
    check_pattern_outside(&rx, &posted, "B's receive region");
    let mut rc = Vec::new();
    drain(&mut d.b, bcq, &mut rc);
    at_most_once(&rc, "B's receives");
    let mut from_srq = 0;
    for c in &rc {
        if c.wr_id < SRQ_WQES {
            assert!(
                on_srq.contains(&c.qpn),
                "SRQ WQE completed on QP {:#x}: {c:?}",
                c.qpn
            );
            from_srq += 1;
        } else {
            assert_eq!(c.qpn, buc2, "{c:?}");
        }
    }
    let left = d.b.srq(srq).unwrap().len() as u64;
    let taken = SRQ_WQES - left;
    assert!(
        from_srq <= taken && taken <= from_srq + on_srq.len() as u64,
        "SRQ: {taken} WQEs taken, {from_srq} completed: {rc:?}"
    );
    assert!(
        limit_events <= 1,
        "the limit event fired {limit_events} times"
    );
    let fired = limit_events == 1;
    assert_eq!(
        fired,
        left < u64::from(LIMIT),
        "limit event {fired} with {left} WQEs left"
    );
    assert_eq!(
        d.b.query_srq(srq).unwrap().limit == 0,
        fired,
        "limit disarmed iff fired"
    );
    let mut ac = Vec::new();
    drain(&mut d.a, acq, &mut ac);
    at_most_once(&ac, "A");
    let mut bs = Vec::new();
    drain(&mut d.b, bscq, &mut bs);
    at_most_once(&bs, "B's sends");
    if data.is_empty() {
        // The set-up itself works: every honest WR succeeded, and B received the SENDs,
        // the WRITEs with immediate and the datagram.
        assert!(
            ac.len() == 8 && ac.iter().all(|c| c.status == WcStatus::Success),
            "{ac:?}"
        );
        assert!(
            rc.len() == 6 && rc.iter().all(|c| c.status == WcStatus::Success),
            "{rc:?}"
        );
    }
});
