//! Arbitrary datagrams into a connected RC engine (the fuzz build skips the ICRC check so
//! the input reaches the transport), interleaved with the engine's own traffic to its peer.
//! B also has a UD QP (QPN 0x12) and the GSI QP (QPN 1), receives posted, in the same PD.
//! Invariants: no panic; nothing outside the registered buffer of either NIC changes (the
//! guard regions registered around it, with every right, keep their fill); every WR the
//! honest side posted completes at most once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_emu::engine::*;
use roce_emu::mem::{Access, MrTable, Sge};
use roce_emu::sim::direct::{connect, rc_end, Direct, RcParams};
use roce_emu::wire::Psn;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

const IOVA: u64 = 0x10_0000;
const LEN: u64 = 64 * 1024;
const GUARD: u8 = 0xa5;

fuzz_target!(|data: &[u8]| {
    let ip = |x| IpAddr::V4(Ipv4Addr::new(198, 18, 0, x));
    let mk = |x| {
        let mem = Arc::new(MrTable::new());
        Engine::new(EngineConfig::new(ip(x)), mem)
    };
    let (mut a, mut b) = (mk(1), mk(2));
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        ..QpCap::default()
    };
    let ea = rc_end(&mut a, IOVA, LEN, cap).unwrap();
    let eb = rc_end(&mut b, IOVA, LEN, cap).unwrap();
    // Guard regions just below and above B's buffer, in the same PD, with every right.
    let lo = b
        .mem()
        .reg_mr(eb.pd, IOVA - 4096, 4096, Access::ALL)
        .unwrap();
    let hi = b
        .mem()
        .reg_mr(eb.pd, IOVA + LEN, 4096, Access::ALL)
        .unwrap();
    lo.fill(GUARD);
    hi.fill(GUARD);
    let p = RcParams {
        mtu: Mtu::M256,
        timeout: 8,
        ..RcParams::default()
    };
    let (pa, pb) = (Psn::new(0xfffff0), Psn::new(0x10));
    connect(&mut a, ea.qpn, ip(2), eb.qpn, pa, pb, &p).unwrap();
    connect(&mut b, eb.qpn, ip(1), ea.qpn, pb, pa, &p).unwrap();
    for i in 0..4 {
        let sge = Sge {
            addr: IOVA + 512 * i,
            length: 512,
            lkey: eb.mr.lkey(),
        };
        let _ = b.post_recv(
            Instant::ZERO,
            eb.qpn,
            &RecvWr {
                wr_id: i,
                sges: &[sge],
            },
        );
    }
    // A UD QP and QP1 on B, in RTS, with receives in B's buffer: datagrams for QPNs 0x12
    // and 1 reach the UD receive path (Q_Key, header slot, lengths).
    let ud_init = QpInit {
        qp_type: QpType::Ud,
        ..QpInit::rc(eb.pd, eb.cq, cap)
    };
    let uds = [
        b.create_qp(&ud_init).unwrap(),
        b.create_gsi_qp(&ud_init).unwrap(),
    ];
    for (k, &q) in uds.iter().enumerate() {
        for st in [
            QpAttr {
                state: Some(QpState::Init),
                pkey_index: Some(0),
                port: Some(1),
                qkey: Some(0x1ee7_a330),
                ..Default::default()
            },
            QpAttr {
                state: Some(QpState::Rtr),
                ..Default::default()
            },
            QpAttr {
                state: Some(QpState::Rts),
                sq_psn: Some(Psn::new(1)),
                ..Default::default()
            },
        ] {
            b.modify_qp(Instant::ZERO, q, &st).unwrap();
        }
        for i in 0..4u64 {
            let sge = Sge {
                addr: IOVA + 8192 + 4096 * k as u64 + 600 * i,
                length: 40 + 512 + 8 * i as u32,
                lkey: eb.mr.lkey(),
            };
            let _ = b.post_recv(
                Instant::ZERO,
                q,
                &RecvWr {
                    wr_id: 100 + i,
                    sges: &[sge],
                },
            );
        }
    }
    let mut d = Direct::new(a, b);
    // Honest traffic from A, so the fuzzed packets meet a QP with state in every role.
    let sge = Sge {
        addr: IOVA,
        length: 700,
        lkey: ea.mr.lkey(),
    };
    let remote = Remote {
        va: IOVA + 4096,
        rkey: eb.mr.rkey().0,
    };
    for (i, op) in [
        SendOp::Send,
        SendOp::Write { remote },
        SendOp::Read { remote },
    ]
    .into_iter()
    .enumerate()
    {
        let _ = d.a.post_send(
            Instant::ZERO,
            ea.qpn,
            &SendWr {
                wr_id: i as u64,
                op,
                local: Local::Sges(&[sge]),
                flags: SendFlags {
                    signaled: true,
                    ..Default::default()
                },
            },
        );
    }
    let from_a = SocketAddr::new(ip(1), 49441);
    let to_b = SocketAddr::new(ip(2), 4791);
    let from_b = SocketAddr::new(ip(2), 49441);
    let to_a = SocketAddr::new(ip(1), 4791);
    let mut t = 0u64;
    // Input: records of [len u16 LE][dir u8][bytes], delivered between pumps.
    let mut rest = data;
    while rest.len() >= 3 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 3);
        let to_b_side = rest[2] & 1 == 0;
        let pkt = &rest[3..3 + len];
        rest = &rest[3 + len..];
        t += 50_000;
        let now = Instant::from_nanos(t);
        if to_b_side {
            d.b.handle_datagram(
                now,
                Datagram {
                    src: from_a,
                    dst: to_b,
                    ipv4_id: Some(0),
                    ecn: roce_emu::wire::Ecn::NotEct,
                    data: pkt,
                },
            );
        } else {
            d.a.handle_datagram(
                now,
                Datagram {
                    src: from_b,
                    dst: to_a,
                    ipv4_id: Some(0),
                    ecn: roce_emu::wire::Ecn::NotEct,
                    data: pkt,
                },
            );
        }
        d.a.handle_timeout(now);
        d.b.handle_timeout(now);
        d.pump(now);
    }
    d.pump(Instant::from_nanos(t + 1));
    // Nothing outside B's buffer moved.
    lo.with_bytes(|b| assert!(b.iter().all(|x| *x == GUARD), "write below the region"));
    hi.with_bytes(|b| assert!(b.iter().all(|x| *x == GUARD), "write above the region"));
    // Each honest WR completes at most once.
    let mut seen = [0u8; 3];
    let mut wc = [Completion::default(); 16];
    let n = d.a.poll_cq(ea.cq, &mut wc).unwrap();
    for c in &wc[..n] {
        seen[c.wr_id as usize] += 1;
    }
    assert!(
        seen.iter().all(|s| *s <= 1),
        "a WR completed twice: {seen:?}"
    );
});
