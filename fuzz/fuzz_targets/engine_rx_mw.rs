//! Arbitrary datagrams against memory windows. Engine B has a region M that allows no
//! remote access of its own (LOCAL_WRITE | MW_BIND) and three windows over parts of it: W1
//! of type 1 (bound by the verb), W2 of type 2 bound by a BIND_MW work request on B's RC
//! QP (zero-based), W3 of type 2 bound on B's UC QP. A second region S with every remote
//! right takes B's receives. Engine A is connected to both QPs and sends honest WRITEs,
//! a READ and an atomic through the windows. The fuzzer names window R_Keys, region
//! R_Keys, a stale window key or whatever it likes in RETH, AtomicETH and IETH (so
//! remote WRITE, READ, atomics and SEND with Invalidate).
//!
//! `ctl` (see common/mod.rs): bit 0 the receiver; bits 1-3 the key (as sent; W1, W2, W3,
//! M's own, S's own, W2 with a stale key byte, W1 again) with, unless bit 6 is set, the
//! address set to the start of what the key names plus the packet's low 16 address bits;
//! bits 4-5 the BTH's destination QP (as sent, B's RC, B's UC, A's RC); bit 7 the PSN
//! moved next to the one A's QPs started at (`set_psn_near`).
//!
//! Invariants: no panic; the guard regions keep their fill; no byte of M outside the
//! windows changes (M's own key opens nothing, so a byte outside every window can only
//! change through a window that let the peer out of its range); once W2 or W3 is no
//! longer bound, the bytes it covered never change again (nothing binds it again); W1, of
//! type 1, is never invalidated by a peer; a receive completion reports an invalidated
//! R_Key only for W2 and only on the QP W2 is bound to (SEND with Invalidate invalidates
//! neither regions nor type 1 windows, and UC has no SEND with Invalidate); every WR
//! completes at most once.
#![no_main]

mod common;

use common::*;
use libfuzzer_sys::fuzz_target;
use roce_emu::engine::*;
use roce_emu::mem::{Access, MemoryRegion, MrTable, MwBind, MwState, MwType, Rkey, Sge};
use roce_emu::sim::direct::{connect, uc_connect, Direct, RcParams};
use roce_emu::wire::Psn;
use std::sync::Arc;

/// The PSN A's QPs start at (B's expect it), just below the 24-bit wrap.
const A_PSN: u32 = 0xff_fff0;
const IOVA: u64 = 0x10_0000;
const LEN: u64 = 64 * 1024;
const S_IOVA: u64 = IOVA + LEN + 2 * PAGE;
/// The windows over M: (offset, length).
const W1: (u64, u64) = (16 * 1024, 8 * 1024);
const W2: (u64, u64) = (32 * 1024, 8 * 1024);
const W3: (u64, u64) = (48 * 1024, 4 * 1024);

fn signaled(wr_id: u64, op: SendOp, local: Local<'_>) -> SendWr<'_> {
    SendWr {
        wr_id,
        op,
        local,
        flags: SendFlags {
            signaled: true,
            ..Default::default()
        },
    }
}

/// M's bytes in `[off, off + len)`.
fn bytes(m: &MemoryRegion, (off, len): (u64, u64)) -> Vec<u8> {
    m.with_bytes_in(off as usize..(off + len) as usize, |b| b.to_vec())
}

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

    // B's memory: [guard][M][guard][guard][S][guard].
    let mem = b.mem().clone();
    let pd = mem.alloc_pd();
    let m = region(
        &mem,
        pd,
        IOVA,
        LEN,
        Access::LOCAL_WRITE | Access::MW_BIND,
        None,
    );
    let s = region(&mem, pd, S_IOVA, LEN, Access::ALL, None);
    let mut g = guards(&mem, pd, IOVA, LEN).to_vec();
    g.extend(guards(&mem, pd, S_IOVA, LEN));
    let bcq = b.create_cq(128).unwrap();
    let qp = |b: &mut Engine, qp_type| {
        b.create_qp(&QpInit {
            qp_type,
            ..QpInit::rc(pd, bcq, cap)
        })
        .unwrap()
    };
    let (brc, buc) = (qp(&mut b, QpType::Rc), qp(&mut b, QpType::Uc));

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
    let (arc, auc) = (aqp(&mut a, QpType::Rc), aqp(&mut a, QpType::Uc));
    let p = RcParams {
        mtu: Mtu::M256,
        timeout: 8,
        ..RcParams::default()
    };
    let (pa, pb) = (Psn::new(A_PSN), Psn::new(0x10));
    connect(&mut a, arc, ip(2), brc, pa, pb, &p).unwrap();
    connect(&mut b, brc, ip(1), arc, pb, pa, &p).unwrap();
    uc_connect(&mut a, auc, ip(2), buc, (pa, pb), Mtu::M256, access).unwrap();
    uc_connect(&mut b, buc, ip(1), auc, (pb, pa), Mtu::M256, access).unwrap();

    // B's receives, in S.
    for (q, base) in [(brc, 0), (buc, 10)] {
        for i in 0..4 {
            let sge = Sge {
                addr: S_IOVA + 1024 * (base + i),
                length: 1024,
                lkey: s.lkey(),
            };
            let wr = RecvWr {
                wr_id: base + i,
                sges: &[sge],
            };
            b.post_recv(Instant::ZERO, q, &wr).unwrap();
        }
    }

    // The windows: W1 by the verb, W2 and W3 by BIND_MW work requests.
    let bind = |(off, len): (u64, u64), zero_based| MwBind {
        mr_lkey: m.lkey(),
        va: IOVA + off,
        length: len,
        access,
        zero_based,
    };
    let w1 = mem.alloc_mw(pd, MwType::Type1).unwrap();
    mem.bind_mw(pd.into(), w1.rkey(), 0x11, &bind(W1, false))
        .unwrap();
    let w2 = mem.alloc_mw(pd, MwType::Type2).unwrap();
    let w3 = mem.alloc_mw(pd, MwType::Type2).unwrap();
    for (id, w, q, range, zb) in [(20, &w2, brc, W2, true), (21, &w3, buc, W3, false)] {
        let op = SendOp::BindMw {
            mw_rkey: w.rkey().0,
            new_rkey: Rkey::new(w.rkey().index(), 0x22).0,
            bind: bind(range, zb),
        };
        b.post_send(Instant::ZERO, q, &signaled(id, op, Local::Sges(&[])))
            .unwrap();
    }
    let mut d = Direct::new(a, b);
    d.pump(Instant::ZERO);
    let mut bc = Vec::new();
    drain(&mut d.b, bcq, &mut bc);
    assert!(
        bc.len() == 2 && bc.iter().all(|c| c.status == WcStatus::Success),
        "binds: {bc:?}"
    );
    bc.clear();
    let (k1, k2, k3) = (w1.rkey().0, w2.rkey().0, w3.rkey().0);
    assert!(w2.state() == MwState::Valid && w3.state() == MwState::Valid);

    // Honest traffic through the windows.
    let sge = |len| Sge {
        addr: IOVA,
        length: len,
        lkey: abuf.lkey(),
    };
    let r = |va, rkey| Remote { va, rkey };
    let honest = [
        (
            arc,
            SendOp::Write {
                remote: r(IOVA + W1.0 + 8, k1),
            },
            300,
        ),
        (
            arc,
            SendOp::Read {
                remote: r(IOVA + W1.0 + 1024, k1),
            },
            200,
        ),
        (arc, SendOp::Write { remote: r(8, k2) }, 100),
        (
            arc,
            SendOp::FetchAdd {
                remote: r(16, k2),
                add: 3,
            },
            8,
        ),
        (arc, SendOp::Send, 100),
        (
            auc,
            SendOp::Write {
                remote: r(IOVA + W3.0, k3),
            },
            200,
        ),
        (
            auc,
            SendOp::Write {
                remote: r(IOVA + W1.0 + 4096, k1),
            },
            64,
        ),
    ];
    for (i, (q, op, len)) in honest.into_iter().enumerate() {
        let sges = [sge(len)];
        let wr = signaled(300 + i as u64, op, Local::Sges(&sges));
        d.a.post_send(Instant::ZERO, q, &wr).unwrap();
    }

    let stale = Rkey::new(w2.rkey().index(), 0x23).0;
    let targets = [
        (0, 0),
        (k1, IOVA + W1.0),
        (k2, 0),
        (k3, IOVA + W3.0),
        (m.rkey().0, IOVA + W1.0),
        (s.rkey().0, S_IOVA),
        (stale, 0),
        (k1, IOVA),
    ];
    let mut frozen: [Option<Vec<u8>>; 2] = [None, None];
    let mut t = 0u64;
    let mut buf = Vec::new();
    for rec in records(data) {
        buf.clear();
        buf.extend_from_slice(rec.pkt);
        let (key, va) = targets[usize::from((rec.ctl >> 1) & 7)];
        if key != 0 {
            set_rkey(&mut buf, key, (rec.ctl & 0x40 == 0).then_some(va));
        }
        match (rec.ctl >> 4) & 3 {
            1 => set_dqpn(&mut buf, brc),
            2 => set_dqpn(&mut buf, buc),
            3 => set_dqpn(&mut buf, arc),
            _ => {}
        }
        if rec.ctl & 0x80 != 0 {
            set_psn_near(&mut buf, A_PSN);
        }
        t += 50_000;
        let now = Instant::from_nanos(t);
        if rec.to_b {
            deliver(&mut d.b, ip(1), now, &buf);
        } else {
            deliver(&mut d.a, ip(2), now, &buf);
        }
        d.a.handle_timeout(now);
        d.b.handle_timeout(now);
        d.pump(now);
        // A type 2 window no longer bound: what it covered is frozen from now on.
        for (i, (w, range)) in [(&w2, W2), (&w3, W3)].into_iter().enumerate() {
            if frozen[i].is_none() && w.state() != MwState::Valid {
                frozen[i] = Some(bytes(&m, range));
            }
        }
    }
    d.pump(Instant::from_nanos(t + 1));

    debug_counters(&d.a, &d.b);
    check_guards(&g);
    let windows: Vec<(u64, u64)> = [W1, W2, W3].iter().map(|(o, l)| (IOVA + o, *l)).collect();
    check_pattern_outside(&m, &windows, "M (outside every window)");
    for (f, range) in frozen.iter().zip([W2, W3]) {
        if let Some(f) = f {
            assert!(
                *f == bytes(&m, range),
                "a window's bytes changed after it was invalidated"
            );
        }
    }
    assert_eq!(
        (w1.state(), w1.rkey().0),
        (MwState::Valid, k1),
        "W1 (type 1)"
    );
    drain(&mut d.b, bcq, &mut bc);
    at_most_once(&bc, "B");
    for c in &bc {
        if let Some(k) = c.invalidated_rkey {
            assert!(
                k == k2 && c.qpn == brc,
                "invalidated {k:#x} on QP {:#x}: {c:?}",
                c.qpn
            );
            assert_eq!(
                w2.state(),
                MwState::Free,
                "W2 invalidated but {:?}",
                w2.state()
            );
        }
    }
    let mut ac = Vec::new();
    drain(&mut d.a, acq, &mut ac);
    at_most_once(&ac, "A");
    if data.is_empty() {
        // The set-up itself works: every honest access through a window succeeded.
        assert!(
            ac.len() == 7 && ac.iter().all(|c| c.status == WcStatus::Success),
            "{ac:?}"
        );
        let w = bytes(&m, (W1.0 + 8, 300));
        let was = (0..300).map(|i| pattern((W1.0 + 8) as usize + i));
        assert!(
            !w.iter().copied().eq(was),
            "the WRITE through W1 did not land"
        );
    }
});
