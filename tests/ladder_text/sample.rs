//! The hand-built ladders of tests/ladder_text.rs: one with every kind of row, and a
//! long one for the timing.

use roce_emu::ladder::model::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fn pkt(frame: usize, t_us: i128, from: Side, name: &'static str, psn: u32) -> Packet {
    Packet {
        frame,
        t_ns: t_us * 1_000,
        from,
        fate: Fate::Delivered,
        opcode: 0,
        name,
        psn,
        ack_req: false,
        solicited: false,
        payload_len: 0,
        ecn: 0,
        becn: false,
        aeth: None,
        reth: None,
        imm: None,
        retransmit: None,
        duplicate: false,
        covers: None,
        cm: None,
        icrc_ok: Some(true),
        label: String::new(),
        fields: Vec::new(),
    }
}

/// A builder-style label: `NAME psn=N [A] [len=N]`.
fn labelled(mut p: Packet) -> Packet {
    let mut s = format!("{} psn={}", p.name, p.psn);
    if p.ack_req {
        s.push_str(" A");
    }
    if p.payload_len > 0 {
        s.push_str(&format!(" len={}", p.payload_len));
    }
    p.label = s;
    p
}

fn req(frame: usize, t_us: i128, name: &'static str, psn: u32, a: bool, len: usize) -> Packet {
    let mut p = pkt(frame, t_us, Side::Requester, name, psn);
    p.ack_req = a;
    p.payload_len = len;
    p
}

fn ack(frame: usize, t_us: i128, psn: u32, aeth: Aeth) -> Packet {
    let mut p = pkt(frame, t_us, Side::Responder, "ACKNOWLEDGE", psn);
    p.aeth = Some(aeth);
    p
}

fn covers(first_psn: u32, last_psn: u32, request_frame: Option<usize>) -> Option<Covers> {
    Some(Covers {
        first_psn,
        last_psn,
        request_frame,
    })
}

fn v4(last: u8, qpn: Option<u32>) -> Endpoint {
    Endpoint {
        ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)),
        qpn,
    }
}

/// One RC flow with every row kind, a CM exchange, a UD flow between IPv6 addresses and
/// a UC flow.
pub fn sample() -> Ladder {
    use Row::Packet as P;
    let b = Box::new;
    let mut rows = Vec::new();
    let mut w = req(1, 0, "RDMA_WRITE_FIRST", 100, false, 1024);
    w.reth = Some((0x7f00_dead_0000, 0x1234, 4096));
    rows.push(P(b(labelled(w))));
    rows.push(P(b(labelled(req(
        2,
        5,
        "RDMA_WRITE_MIDDLE",
        101,
        false,
        1024,
    )))));
    let mut lost = labelled(req(3, 10, "RDMA_WRITE_MIDDLE", 102, false, 1024));
    lost.fate = Fate::Dropped;
    rows.push(P(b(lost)));
    rows.push(P(b(labelled(req(
        4,
        15,
        "RDMA_WRITE_LAST",
        103,
        true,
        1024,
    )))));
    // The builder's label style for this one (h-build's `build::packet::label`).
    let mut nak = ack(5, 20, 102, Aeth::Nak { code: 0, msn: 0 });
    nak.label = "NAK psn=102 PSN-sequence-error msn=0".into();
    rows.push(P(b(nak)));
    for (f, t, name, psn) in [
        (6, 30, "RDMA_WRITE_MIDDLE", 102),
        (7, 35, "RDMA_WRITE_LAST", 103),
    ] {
        let mut p = labelled(req(f, t, name, psn, psn == 103, 1024));
        p.retransmit = Some(Retransmit::AfterNak { nak_frame: 5 });
        rows.push(P(b(p)));
    }
    let mut a = ack(
        8,
        40,
        103,
        Aeth::Ack {
            credits: 31,
            msn: 1,
        },
    );
    a.covers = covers(100, 103, None);
    rows.push(P(b(a)));
    // READ: three responses answer the request of frame 9, the last one long.
    let mut r = req(9, 50, "RDMA_READ_REQUEST", 104, true, 0);
    r.reth = Some((0x7f00_beef_0000, 0x5678, 3000));
    rows.push(P(b(r)));
    let mut r1 = pkt(10, 60, Side::Responder, "RDMA_READ_RESPONSE_FIRST", 104);
    r1.payload_len = 1024;
    r1.aeth = Some(Aeth::Ack {
        credits: 31,
        msn: 1,
    });
    r1.covers = covers(104, 104, Some(9));
    r1.label = "RDMA_READ_RESPONSE_FIRST psn=104 len=1024 msn=1 credits=31".into();
    rows.push(P(b(r1)));
    let mut r2 = labelled(pkt(
        11,
        61,
        Side::Responder,
        "RDMA_READ_RESPONSE_MIDDLE",
        105,
    ));
    r2.payload_len = 1024;
    r2.ecn = 3;
    r2.covers = covers(105, 105, Some(9));
    rows.push(P(b(r2)));
    let mut r3 = pkt(
        12,
        62,
        Side::Responder,
        "RDMA_READ_RESPONSE_LAST",
        16_777_215,
    );
    r3.payload_len = 952;
    r3.aeth = Some(Aeth::Ack {
        credits: 31,
        msn: 2,
    });
    r3.covers = covers(104, 16_777_215, Some(9));
    r3.retransmit = Some(Retransmit::AfterNak { nak_frame: 123_456 });
    rows.push(P(b(r3)));
    // RNR: the NAK, the wait, the SEND again.
    rows.push(P(b(labelled(req(13, 70, "SEND_ONLY", 107, true, 64)))));
    rows.push(P(b(ack(
        14,
        75,
        107,
        Aeth::Rnr {
            timer: 14,
            ms: 1.28,
            msn: 2,
        },
    ))));
    rows.push(Row::Wait {
        side: Side::Requester,
        kind: WaitKind::Rnr {
            timer: 14,
            ms: 1.28,
        },
        start_ns: 75_000,
        end_ns: 1_375_500,
    });
    let mut s = labelled(req(15, 1375, "SEND_ONLY", 107, true, 64));
    s.retransmit = Some(Retransmit::AfterRnr { rnr_frame: 14 });
    rows.push(P(b(s)));
    // The ACK is lost; the requester's timer runs out; the responder answers the
    // duplicate from its replay state.
    let mut lost_ack = ack(
        16,
        1380,
        107,
        Aeth::Ack {
            credits: 31,
            msn: 3,
        },
    );
    lost_ack.fate = Fate::Dropped;
    rows.push(P(b(lost_ack)));
    rows.push(Row::Wait {
        side: Side::Requester,
        kind: WaitKind::AckTimeout,
        start_ns: 1_380_000,
        end_ns: 34_900_000,
    });
    let mut d = labelled(req(17, 34_900, "SEND_ONLY", 107, true, 64));
    d.retransmit = Some(Retransmit::AfterTimeout);
    d.duplicate = true;
    rows.push(P(b(d)));
    rows.push(P(b(ack(
        18,
        34_910,
        107,
        Aeth::Ack {
            credits: 31,
            msn: 3,
        },
    ))));
    rows.push(Row::Gap {
        from: Side::Requester,
        first_psn: 108,
        count: 3,
        t_ns: 35_000_000,
    });
    let mut imm = req(19, 35_010, "SEND_ONLY_WITH_IMMEDIATE", 111, true, 8);
    imm.imm = Some(0xdead_beef);
    imm.icrc_ok = Some(false);
    rows.push(P(b(imm)));
    rows.push(Row::Gap {
        from: Side::Responder,
        first_psn: 111,
        count: 1,
        t_ns: 35_020_000,
    });
    let mut cnp = pkt(20, 35_030, Side::Responder, "CNP", 0);
    cnp.becn = true;
    rows.push(P(b(cnp)));
    rows.push(P(b(ack(21, 35_040, 111, Aeth::Nak { code: 2, msn: 3 }))));
    rows.push(P(b(labelled(req(
        22,
        35_050,
        "COMPARE_SWAP",
        112,
        true,
        0,
    )))));
    let mut aa = pkt(23, 35_060, Side::Responder, "ATOMIC_ACKNOWLEDGE", 112);
    aa.aeth = Some(Aeth::Ack {
        credits: 31,
        msn: 4,
    });
    aa.covers = covers(112, 112, Some(22));
    rows.push(P(b(aa)));
    rows.push(Row::Gap {
        from: Side::Requester,
        first_psn: 16_777_214,
        count: 4,
        t_ns: 35_070_000,
    });
    let rc = Flow {
        kind: FlowKind::Rc,
        requester: v4(1, Some(0x11)),
        responder: v4(2, Some(0x12)),
        rows,
    };

    let cm_rows = [
        (24, 36_000, Side::Requester, "REQ lcid=0x47d0da68 sid=0x0000000001061c06 (TCP port 7174) qpn=0x11 psn=0x297dc6 mtu=3 cma_hdr 10.0.0.1:33028 -> 10.0.0.2 tid=0x268dad047"),
        (25, 36_100, Side::Responder, "REP lcid=0x9a1b2c3d rcid=0x47d0da68 qpn=0x12 psn=0x4455aa tid=0x268dad047"),
        (26, 36_200, Side::Requester, "RTU lcid=0x47d0da68 rcid=0x9a1b2c3d tid=0x268dad047"),
        (27, 90_000, Side::Requester, "DREQ lcid=0x47d0da68 rcid=0x9a1b2c3d qpn=0x12"),
        (28, 90_100, Side::Responder, "DREP lcid=0x9a1b2c3d rcid=0x47d0da68"),
    ]
    .into_iter()
    .map(|(f, t, from, cm)| {
        let mut p = pkt(f, t, from, "SEND_ONLY", 0);
        p.payload_len = 256;
        p.cm = Some(format!("CM {cm}"));
        P(b(p))
    })
    .collect();
    let cm = Flow {
        kind: FlowKind::Cm,
        requester: v4(1, Some(1)),
        responder: v4(2, Some(1)),
        rows: cm_rows,
    };

    let a6: Ipv6Addr = "fd00:1234:5678:9abc:def0:1234:5678:9abc".parse().unwrap();
    let b6: Ipv6Addr = "fd00:1234:5678:9abc:def0:1234:5678:9abd".parse().unwrap();
    let mut u1 = pkt(29, 100_000, Side::Requester, "SEND_ONLY", 5);
    u1.payload_len = 512;
    u1.label = "SEND_ONLY psn=5 len=512 qp 0x11 -> 0x12".into();
    let mut u2 = pkt(30, 100_050, Side::Responder, "SEND_ONLY", 9);
    u2.payload_len = 512;
    u2.label = "SEND_ONLY psn=9 len=512 qp 0x12 -> 0x11".into();
    let ud = Flow {
        kind: FlowKind::Ud,
        requester: Endpoint {
            ip: IpAddr::V6(a6),
            qpn: Some(0x11),
        },
        responder: Endpoint {
            ip: IpAddr::V6(b6),
            qpn: None,
        },
        rows: vec![P(b(u1)), P(b(u2))],
    };

    let uc = Flow {
        kind: FlowKind::Uc,
        requester: v4(3, None),
        responder: v4(4, Some(0x2a)),
        rows: vec![
            P(b(labelled(req(
                31,
                120_000,
                "RDMA_WRITE_ONLY",
                7,
                false,
                2048,
            )))),
            Row::Gap {
                from: Side::Requester,
                first_psn: 8,
                count: 2,
                t_ns: 120_010_000,
            },
            P(b(labelled(req(
                32,
                120_010,
                "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
                10,
                false,
                2048,
            )))),
        ],
    };
    Ladder {
        flows: vec![rc, cm, ud, uc],
        stats: Stats {
            packets: 32,
            malformed: 0,
            bad_icrc: 1,
        },
    }
}

/// A capture of 10,000 packets: a WRITE stream with an ACK every fourth packet and a
/// go-back-N every 500.
pub fn big(n: usize) -> Ladder {
    let mut rows = Vec::with_capacity(n + n / 500);
    let mut frame = 0;
    while frame < n {
        frame += 1;
        let t = frame as i128 * 3;
        let psn = (frame as u32) & 0xff_ffff;
        let row = if frame % 4 == 0 {
            let mut a = ack(
                frame,
                t,
                psn - 1,
                Aeth::Ack {
                    credits: 31,
                    msn: psn / 4,
                },
            );
            a.covers = covers(psn - 4, psn - 1, None);
            a
        } else {
            let mut p = labelled(req(
                frame,
                t,
                "RDMA_WRITE_MIDDLE",
                psn,
                frame % 4 == 3,
                4096,
            ));
            if frame % 500 == 1 {
                p.retransmit = Some(Retransmit::AfterNak {
                    nak_frame: frame - 1,
                });
            }
            p
        };
        rows.push(Row::Packet(Box::new(row)));
        if frame % 1000 == 0 {
            rows.push(Row::Gap {
                from: Side::Requester,
                first_psn: psn + 1,
                count: 2,
                t_ns: t * 1000,
            });
        }
    }
    Ladder {
        flows: vec![Flow {
            kind: FlowKind::Rc,
            requester: v4(1, Some(0x11)),
            responder: v4(2, Some(0x12)),
            rows,
        }],
        stats: Stats {
            packets: n,
            ..Stats::default()
        },
    }
}
