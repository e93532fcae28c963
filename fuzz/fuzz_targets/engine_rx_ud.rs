//! Arbitrary datagrams into UD QPs: engine B has a UD QP (Q_Key `QKEY`) and QP1, the GSI
//! QP (`Engine::create_gsi_qp`, Q_Key `GSI_QKEY`), both with receive WQEs in a region no
//! remote key opens, port MTU 1024; engine A has a UD QP that sends B honest datagrams
//! (right and wrong Q_Keys, one longer than the port MTU, one with immediate) and has
//! receives of its own for what the fuzzer sends it.
//!
//! `ctl` (see common/mod.rs): bit 0 the receiver; bits 1-2 the BTH's destination QP
//! (as sent, B's UD QP, QP1, A's QP); bits 3-4 the DETH's Q_Key (as sent, `QKEY`,
//! `GSI_QKEY`, `QKEY` with the top bit set).
//!
//! Invariants: no panic; B's guard regions keep their fill; no byte of B's receive region
//! outside a posted SGE changes (UD writes only into receive WQEs); every receive and send
//! WR completes at most once; a successful UD receive completion is at least the 40-byte
//! slot, fits its WQE, carries no more than the port MTU, and its slot holds 20 zero bytes
//! and an IPv4 header with a valid checksum naming B's address as the destination.
#![no_main]

mod common;

use common::*;
use libfuzzer_sys::fuzz_target;
use roce_emu::engine::*;
use roce_emu::mem::{Access, MrTable, Sge};
use roce_emu::sim::direct::{ud_ready, Direct};
use roce_emu::wire::Psn;
use std::sync::Arc;

const IOVA: u64 = 0x10_0000;
const LEN: u64 = 64 * 1024;
const QKEY: u32 = 0x1ee7_a330;
const MTU: u32 = 1024;
/// B's receive WQEs: (wr_id, offset, lengths of its SGEs). Stride 2 KiB, so gaps lie
/// between buffers; one WQE splits the 40-byte slot over two SGEs, one is too short for
/// a full-MTU datagram, one is shorter than the slot, one has room for twice the port
/// MTU (so that only the port-MTU rule stops a longer datagram).
const RECVS: [(u64, u64, &[u32]); 8] = [
    (0, 0, &[40 + MTU]),
    (1, 2048, &[40 + 300]),
    (2, 4096, &[24, 40 + 600]),
    (3, 6144, &[40 + 99]),
    (4, 8192, &[32]),
    (5, 10240, &[40 + MTU]),
    (6, 12288, &[40 + 512, 512]),
    (7, 14336, &[40 + 2 * MTU]),
];

/// Where WQE `off` of RECVS lies for the QP whose WR IDs start at `base` (QP1's in the
/// upper half of the region).
fn slot(base: u64, off: u64) -> u64 {
    off + if base == 0 { 0 } else { LEN / 2 }
}

fuzz_target!(|data: &[u8]| {
    let mk = |x| {
        let mut c = EngineConfig::new(ip(x));
        c.port_mtu = MTU;
        Engine::new(c, Arc::new(MrTable::new()))
    };
    let (mut a, mut b) = (mk(1), mk(2));
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 0,
    };

    // B: a UD QP and QP1 on one CQ, receiving into a patterned, guarded region.
    let mem = b.mem().clone();
    let pd = mem.alloc_pd();
    let rx = region(&mem, pd, IOVA, LEN, Access::LOCAL_WRITE, None);
    let g = guards(&mem, pd, IOVA, LEN);
    let bcq = b.create_cq(64).unwrap();
    let init = QpInit {
        qp_type: QpType::Ud,
        ..QpInit::rc(pd, bcq, cap)
    };
    let ud = b.create_qp(&init).unwrap();
    let gsi = b.create_gsi_qp(&init).unwrap();
    ud_ready(&mut b, ud, QKEY, Psn::new(0x200)).unwrap();
    ud_ready(&mut b, gsi, 0, Psn::new(0x300)).unwrap();
    let mut posted = Vec::new();
    for (qp, base) in [(ud, 0), (gsi, 100)] {
        for (id, off, lens) in RECVS {
            let mut at = IOVA + slot(base, off);
            let sges: Vec<Sge> = lens
                .iter()
                .map(|l| {
                    let s = Sge {
                        addr: at,
                        length: *l,
                        lkey: rx.lkey(),
                    };
                    posted.push((at, u64::from(*l)));
                    at += u64::from(*l) + 8;
                    s
                })
                .collect();
            let wr = RecvWr {
                wr_id: base + id,
                sges: &sges,
            };
            b.post_recv(Instant::ZERO, qp, &wr).unwrap();
        }
    }

    // A: a UD QP with receives of its own.
    let amem = a.mem().clone();
    let apd = amem.alloc_pd();
    let abuf = amem.reg_mr(apd, IOVA, LEN, Access::ALL).unwrap();
    let acq = a.create_cq(64).unwrap();
    let aud = a
        .create_qp(&QpInit {
            qp_type: QpType::Ud,
            ..QpInit::rc(apd, acq, cap)
        })
        .unwrap();
    ud_ready(&mut a, aud, QKEY, Psn::new(0x100)).unwrap();
    for i in 0..4u64 {
        let sge = Sge {
            addr: IOVA + 32 * 1024 + 2048 * i,
            length: 40 + MTU,
            lkey: abuf.lkey(),
        };
        a.post_recv(
            Instant::ZERO,
            aud,
            &RecvWr {
                wr_id: 200 + i,
                sges: &[sge],
            },
        )
        .unwrap();
    }
    let to = |qpn, qkey| UdDest {
        dest_ip: ip(2),
        remote_qpn: qpn,
        remote_qkey: qkey,
    };
    let honest = [
        (SendOp::Send, 300, to(ud, QKEY)),
        (SendOp::SendWithImm { imm: 7 }, 64, to(gsi, GSI_QKEY)),
        (SendOp::Send, 16, to(ud, QKEY ^ 1)),
        (SendOp::Send, MTU + 1, to(ud, QKEY)),
        (SendOp::Send, MTU, to(gsi, GSI_QKEY)),
    ];
    for (i, (op, len, dest)) in honest.into_iter().enumerate() {
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
        a.post_send_ud(Instant::ZERO, aud, &wr, &dest).unwrap();
    }

    let mut d = Direct::new(a, b);
    let mut t = 0u64;
    let mut buf = Vec::new();
    for r in records(data) {
        buf.clear();
        buf.extend_from_slice(r.pkt);
        match (r.ctl >> 1) & 3 {
            1 => set_dqpn(&mut buf, ud),
            2 => set_dqpn(&mut buf, gsi),
            3 => set_dqpn(&mut buf, aud),
            _ => {}
        }
        match (r.ctl >> 3) & 3 {
            1 => set_qkey(&mut buf, QKEY),
            2 => set_qkey(&mut buf, GSI_QKEY),
            3 => set_qkey(&mut buf, QKEY | 0x8000_0000),
            _ => {}
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
    }
    d.pump(Instant::from_nanos(t + 1));

    debug_counters(&d.a, &d.b);
    check_guards(&g);
    check_pattern_outside(&rx, &posted, "B's receive region");
    let mut rc = Vec::new();
    drain(&mut d.b, bcq, &mut rc);
    at_most_once(&rc, "B");
    for c in rc.iter().filter(|c| c.status == WcStatus::Success) {
        let base = if c.qpn == gsi { 100 } else { 0 };
        let (_, off, lens) = RECVS[(c.wr_id - base) as usize];
        let room: u32 = lens.iter().sum();
        assert!(
            c.byte_len >= 40 && c.byte_len <= room && c.byte_len - 40 <= MTU,
            "receive length {c:?}"
        );
        assert_eq!(c.network_hdr, Some(NetworkHdr::Ipv4), "{c:?}");
        if lens[0] >= 40 {
            let at = slot(base, off) as usize;
            rx.with_bytes_in(at..at + 40, |s| {
                assert!(
                    s[..20].iter().all(|x| *x == 0),
                    "slot's first 20 bytes {s:?}"
                );
                assert_eq!(s[20], 0x45, "slot's IPv4 header {s:?}");
                assert_eq!(&s[36..40], &[198, 18, 0, 2], "slot's destination {s:?}");
                let mut sum: u32 = s[20..40]
                    .chunks(2)
                    .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                    .sum();
                while sum > 0xffff {
                    sum = (sum & 0xffff) + (sum >> 16);
                }
                assert_eq!(sum, 0xffff, "slot's IPv4 checksum {s:?}");
            });
        }
    }
    let mut ac = Vec::new();
    drain(&mut d.a, acq, &mut ac);
    at_most_once(&ac, "A");
    if data.is_empty() {
        // The set-up itself works: every honest datagram left or was faked as sent, and
        // B received the good ones.
        assert!(
            ac.len() == 5 && ac.iter().all(|c| c.status == WcStatus::Success),
            "{ac:?}"
        );
        let ok = rc.iter().filter(|c| c.status == WcStatus::Success).count();
        assert_eq!(ok, 2, "{rc:?}");
    }
});
