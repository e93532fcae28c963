//! The terminal ladder (`ladder::text`) and `roce-emu ladder`.
//!
//! Golden outputs: a hand-built ladder with every kind of row (packets both ways, a lost
//! one each way, a coalesced ACK, a sequence NAK and the go-back-N after it, READ responses
//! covering their request, an RNR NAK, its wait and the retransmission, an ACK timeout,
//! a duplicate, PSN gaps, one wrapping past 2^24, CE, BECN, a bad ICRC, a CM exchange, a
//! UD flow between IPv6 addresses, a UC flow with an unknown QPN) drawn at 80 and 120
//! columns, Unicode and ASCII, and in colour, against the files in tests/data/ladder/.
//! After a deliberate change to the drawing, regenerate them with
//!
//!     LADDER_GOLDEN=write cargo test --test ladder_text
//!
//! and read the diff (`git diff tests/data/ladder`) before committing it.
//!
//! Also: every line fits the width at every width from 60 to 130 columns; ASCII output is
//! ASCII; colour output is the plain output plus escapes; 10,000 packets draw well under
//! a second; the tool's argument errors are clear; the tool end to end on real rxe
//! captures.

use roce_emu::ladder::model::*;
use roce_emu::ladder::text::{self, TextOpts};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_roce-emu");

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
fn sample() -> Ladder {
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

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ladder")
}

/// Compares `got` with the golden file `name`, or writes it with LADDER_GOLDEN=write.
fn golden(name: &str, got: &str) {
    let path = golden_dir().join(name);
    if std::env::var("LADDER_GOLDEN").as_deref() == Ok("write") {
        std::fs::create_dir_all(golden_dir()).unwrap();
        std::fs::write(&path, got).unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; write it with LADDER_GOLDEN=write cargo test --test ladder_text",
            path.display()
        )
    });
    if want != got {
        let first = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(got.lines().count()));
        panic!(
            "{} differs from the drawing, first at line {}:\nwant: {:?}\ngot:  {:?}\n\
             whole drawing:\n{got}\n(if the change is meant: LADDER_GOLDEN=write cargo test \
             --test ladder_text, then read git diff tests/data/ladder)",
            path.display(),
            first + 1,
            want.lines().nth(first),
            got.lines().nth(first)
        );
    }
}

/// The text without ANSI SGR escapes.
fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\x1b' && it.peek() == Some(&'[') {
            for d in it.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn opts(width: usize, ascii: bool, color: bool) -> TextOpts {
    TextOpts {
        width,
        color,
        ascii,
    }
}

#[test]
fn golden_plain_80_and_120_unicode_and_ascii() {
    let l = sample();
    for width in [80, 120] {
        for ascii in [false, true] {
            let got = text::render(&l, &opts(width, ascii, false));
            assert!(!got.contains('\x1b'), "plain output has escapes");
            let kind = if ascii { "ascii" } else { "unicode" };
            golden(&format!("sample_{width}_{kind}.txt"), &got);
        }
    }
}

#[test]
fn golden_color_is_plain_plus_escapes() {
    let l = sample();
    for width in [80, 120] {
        for ascii in [false, true] {
            let plain = text::render(&l, &opts(width, ascii, false));
            let color = text::render(&l, &opts(width, ascii, true));
            assert!(color.contains("\x1b[") && color.contains("\x1b[0m"));
            assert_eq!(strip_ansi(&color), plain, "width {width} ascii {ascii}");
        }
    }
    golden(
        "sample_120_unicode_color.txt",
        &text::render(&l, &opts(120, false, true)),
    );
}

#[test]
fn every_line_fits_every_width() {
    let l = sample();
    for width in 60..=130 {
        for ascii in [false, true] {
            for color in [false, true] {
                let s = text::render(&l, &opts(width, ascii, color));
                for (i, line) in strip_ansi(&s).lines().enumerate() {
                    let n = line.chars().count();
                    assert!(
                        n <= width,
                        "width {width} ascii {ascii}: line {} has {n} columns: {line:?}",
                        i + 1
                    );
                }
            }
        }
    }
    // Narrower than the least is drawn at the least.
    let s = text::render(&l, &opts(20, false, false));
    assert!(s.lines().all(|l| l.chars().count() <= text::MIN_WIDTH));
}

#[test]
fn ascii_is_ascii_and_unicode_is_not() {
    let l = sample();
    for width in [60, 80, 120] {
        let s = text::render(&l, &opts(width, true, false));
        assert!(s.is_ascii(), "{s}");
        let u = text::render(&l, &opts(width, false, false));
        assert!(!u.is_ascii());
    }
}

/// Each row kind says what it is, in full at 120 columns.
#[test]
fn rows_say_what_happened() {
    let s = text::render(&sample(), &opts(120, false, false));
    for want in [
        "10.0.0.1 QP 0x11",
        "10.0.0.2 QP 0x12",
        "┌ requester",
        "responder ┐",
        "NAK psn=102 PSN-sequence-error msn=0",
        "↻ after NAK #5",
        "covers 100-103",
        "RNR NAK 1.28ms",
        "┃ RNR wait 1.28 ms",
        "┃ waited 1.300 ms",
        "┃ ACK timeout",
        "↻ after RNR #14",
        "↻ timeout dup",
        "… PSN 108-110 never seen",
        "… PSN 16777214-1 never seen",
        "… PSN 111 never seen",
        "covers 112 of #22",
        "RDMA_READ_RESPONSE_FIRST psn=104 len=1024 msn=1 credits=31 covers 104 of #9",
        "NAK rem-access",
        "imm=0xdeadbeef",
        "bad ICRC",
        "CE",
        "BECN",
        "CM REQ lcid=0x47d0da68",
        "CM DREP",
        "fd00:1234:5678:9abc:def0:1234:5678:9abc QP 0x11",
        "QP ?",
        "══ CM",
    ] {
        assert!(s.contains(want), "no {want:?} in\n{s}");
    }
    // Arrows point the way their packet went; lost ones end in a cross.
    let line = |frame: &str| {
        s.lines()
            .find(|l| l.contains(&format!(" {frame} ")))
            .unwrap_or_else(|| panic!("no frame {frame}"))
    };
    assert!(
        line("#1").contains("├─ RDMA_WRITE_FIRST psn=100 len=1024") && line("#1").ends_with(">│")
    );
    assert!(line("#5").ends_with("─┤") && line("#5").contains("│<"));
    assert!(line("#3").contains("✗") && !line("#3").contains(">"));
    assert!(line("#16").contains("✗") && !line("#16").contains("<"));
    assert!(line("#6").contains("╌"), "a retransmission is dashed");
}

/// At 80 columns long labels are shortened, keeping the PSN and the notes.
#[test]
fn narrow_lines_shorten_labels() {
    let s = text::render(&sample(), &opts(80, false, false));
    let l12 = s.lines().find(|l| l.contains(" #12 ")).unwrap();
    assert!(l12.contains("READ_RESP_LAST"), "{l12}");
    assert!(l12.contains("↻NAK#123456"), "{l12}");
    let l10 = s.lines().find(|l| l.contains(" #10 ")).unwrap();
    assert!(
        l10.contains("READ_RESP_FIRST psn=104 len=1024 msn=1 cov 104 "),
        "{l10}"
    );
    let req = s.lines().find(|l| l.contains(" #24 ")).unwrap();
    assert!(req.contains("CM REQ") && req.contains('…'), "{req}");
}

/// `row` and `flow_header` (live drawing) give what `render` gives, row by row.
#[test]
fn live_pieces_make_the_whole() {
    let l = sample();
    let o = opts(100, false, true);
    let mut pieces = String::new();
    for (i, f) in l.flows.iter().enumerate() {
        if i > 0 {
            pieces.push('\n');
        }
        pieces.push_str(&text::flow_header(f, &o));
        for r in &f.rows {
            let one = text::row(f, r, &o);
            assert!(one.ends_with('\n'));
            pieces.push_str(&one);
        }
    }
    assert_eq!(pieces, text::render(&l, &o));
    assert_eq!(text::render(&Ladder::default(), &o), "");
}

/// A capture of 10,000 packets: a WRITE stream with an ACK every fourth packet and a
/// go-back-N every 500.
fn big(n: usize) -> Ladder {
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

#[test]
fn ten_thousand_packets_draw_well_under_a_second() {
    let l = big(10_000);
    for o in [opts(120, false, true), opts(80, true, false)] {
        // The best of three: the machine is shared (other tests, other builds).
        let mut took = Duration::MAX;
        let mut s = String::new();
        for _ in 0..3 {
            let t0 = Instant::now();
            s = text::render(&l, &o);
            took = took.min(t0.elapsed());
        }
        let lines = s.lines().count();
        println!(
            "10000 packets at {} columns (ascii {}, colour {}): {lines} lines, {} bytes in {:.1} ms (best of 3)",
            o.width,
            o.ascii,
            o.color,
            s.len(),
            took.as_secs_f64() * 1e3
        );
        assert!(lines > 10_000);
        assert!(took < Duration::from_secs(1), "took {took:?}");
    }
}

// The tool.

/// `roce-emu ladder ARGS`, waited for at most 60 s.
fn tool(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("ladder")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("NO_COLOR")
        .env_remove("COLUMNS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run roce-emu ladder");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("roce-emu ladder {args:?} still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn data(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
        .display()
        .to_string()
}

fn err_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn tool_argument_errors_are_clear() {
    let cap = data("rc_pingpong_s64.pcap");
    let cap = cap.as_str();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--width", "30"],
            "\"30\" is not a width: a number of columns from 60 to 1000",
        ),
        (&["--width", "wide"], "is not a width"),
        (
            &["--qp", "0x1000000"],
            "\"0x1000000\" is not a QPN: a number below 16777216",
        ),
        (&["--qp", "seven"], "is not a QPN"),
        (&["--psn", "5-x"], "\"5-x\" is not a PSN range: A-B or A"),
        (&["--psn", "16777216"], "is not a PSN range"),
        (&["--from=-1"], "\"-1\" is not a time"),
        (&["--to", "soon"], "is not a time"),
        (&["--color", "sometimes"], "sometimes"),
        (
            &["--from", "2", "--to", "1.5"],
            "--from 2s is after --to 1.5s",
        ),
    ];
    for (args, want) in cases {
        let mut a: Vec<&str> = args.to_vec();
        a.push(cap);
        let o = tool(&a, &[]);
        let e = err_of(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(want), "{args:?}: want {want:?} in {e}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    let o = tool(&["/nonexistent/x.pcap"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err_of(&o).contains("cannot read /nonexistent/x.pcap"),
        "{}",
        err_of(&o)
    );
    let empty = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ladder_empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let o = tool(&[empty.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err_of(&o).contains("is empty: no pcap header"),
        "{}",
        err_of(&o)
    );
    // Good values parse: units, hex, one PSN.
    let o = tool(
        &[
            "--from", "250ms", "--to", "3s", "--qp", "0x11", "--psn", "7", "--width", "60", cap,
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", err_of(&o));
}

/// The builder and the sources are h-build's; until they are in this tree the tool
/// draws nothing, and this test says so.
fn source_is_stub() -> bool {
    include_str!("../src/ladder/source.rs").contains("STUB")
}

#[test]
fn tool_on_real_captures() {
    for (cap, wants) in [
        ("rc_pingpong_loss_seqnak.pcap", &["NAK", "after NAK"][..]),
        ("send_bw_rnr.pcap", &["RNR", "RNR wait", "after RNR"][..]),
        ("read_bw_s2048.pcap", &["READ_RE", "covers"][..]),
        ("rping_cm_s64.pcap", &["REQ", "REP", "RTU"][..]),
    ] {
        let file = data(cap);
        for width in ["80", "120"] {
            for ascii in [false, true] {
                let mut args = vec!["--width", width, file.as_str()];
                if ascii {
                    args.push("--ascii");
                }
                let o = tool(&args, &[]);
                let out = String::from_utf8_lossy(&o.stdout);
                assert_eq!(o.status.code(), Some(0), "{cap}: {}", err_of(&o));
                assert!(err_of(&o).contains(" frames, "), "{}", err_of(&o));
                if !source_is_stub() {
                    assert!(!err_of(&o).contains(" 1 flows"), "{}", err_of(&o));
                }
                assert!(!out.contains('\x1b'), "piped output has no escapes");
                let w: usize = width.parse().unwrap();
                for line in out.lines() {
                    assert!(line.chars().count() <= w, "{cap} at {w}: {line:?}");
                }
                if ascii {
                    assert!(out.is_ascii());
                }
                // In full at 120 columns (at 80 the notes may be compact).
                if source_is_stub() || width != "120" {
                    continue;
                }
                for want in wants {
                    assert!(out.contains(want), "{cap}: no {want:?} in\n{out}");
                }
            }
        }
    }
    if source_is_stub() {
        eprintln!(
            "SKIPPED (in part): src/ladder/source.rs is still the stub, so the captures' \
             ladders are empty; their contents are checked once h-build's source is merged"
        );
    }
}

/// The filters and standard input, end to end (the filtering itself is the builder's,
/// `Ladder::filtered`, tested in tests/ladder_build.rs).
#[test]
fn tool_filters_and_stdin() {
    if source_is_stub() {
        eprintln!("SKIPPED: src/ladder/source.rs is still the stub (no packets to filter)");
        return;
    }
    let cap = data("rc_pingpong_loss_seqnak.pcap");
    let cap = cap.as_str();
    let all = tool(&[cap], &[]);
    let all_out = String::from_utf8_lossy(&all.stdout).into_owned();
    assert!(all_out.contains("psn=1142948") && all_out.contains("psn=4796633"));
    let o = tool(&["--psn", "4796632-4796636", cap], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", err_of(&o));
    assert!(
        out.contains("psn=4796633") && !out.contains("psn=1142948"),
        "{out}"
    );
    assert!(
        err_of(&o).contains("drawn after the filters"),
        "{}",
        err_of(&o)
    );
    let o = tool(&["--qp", "0x99", cap], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty());
    assert!(
        err_of(&o).contains(", 0 drawn after the filters"),
        "{}",
        err_of(&o)
    );
    let o = tool(&["--from", "50ms", "--to", "0.06", cap], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(" #17 ") && !out.contains(" #11 ") && !out.contains(" #21 "),
        "{out}"
    );
    // `-`: the same drawing from standard input.
    let mut child = Command::new(BIN)
        .args(["ladder", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("NO_COLOR")
        .env_remove("COLUMNS")
        .spawn()
        .unwrap();
    let bytes = std::fs::read(cap).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(&bytes);
    });
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), all_out);
    assert!(err_of(&o).starts_with("standard input: "), "{}", err_of(&o));
}

#[test]
fn tool_color_only_when_asked() {
    let cap = data("rc_pingpong_s64.pcap");
    let cap = cap.as_str();
    // Piped: none, whatever NO_COLOR says; `always` colours even with NO_COLOR set.
    let o = tool(&[cap], &[]);
    assert!(!o.stdout.contains(&0x1b));
    let o = tool(&["--color", "never", cap], &[]);
    assert!(!o.stdout.contains(&0x1b));
    if !source_is_stub() {
        let o = tool(&["--color", "always", cap], &[("NO_COLOR", "1")]);
        assert!(o.stdout.contains(&0x1b), "--color always has escapes");
    }
    use roce_emu::cli::ladder::{default_width, use_color, ColorWhen};
    use std::ffi::OsStr;
    assert!(use_color(ColorWhen::Auto, true, None));
    assert!(use_color(ColorWhen::Auto, true, Some(OsStr::new(""))));
    assert!(!use_color(ColorWhen::Auto, true, Some(OsStr::new("1"))));
    assert!(!use_color(ColorWhen::Auto, false, None));
    assert!(use_color(ColorWhen::Always, false, Some(OsStr::new("1"))));
    assert!(!use_color(ColorWhen::Never, true, None));
    assert_eq!(default_width(false, Some("80"), || Some(90)), 100);
    assert_eq!(default_width(true, Some("132"), || Some(90)), 132);
    assert_eq!(default_width(true, Some("x"), || Some(90)), 90);
    assert_eq!(default_width(true, None, || None), 100);
    assert_eq!(default_width(true, Some("20"), || None), 60);
}

#[test]
fn tool_writes_the_page() {
    let cap = data("rc_pingpong_s64.pcap");
    let cap = cap.as_str();
    let page = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ladder_page.html");
    let _ = std::fs::remove_file(&page);
    let o = tool(&["--html", page.to_str().unwrap(), cap], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", err_of(&o));
    let html = std::fs::read_to_string(&page).expect("the page is written");
    assert!(html.contains("<"), "{html}");
    let o = tool(&["--html", "/nonexistent/dir/p.html", cap], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err_of(&o).contains("cannot write /nonexistent/dir/p.html"),
        "{}",
        err_of(&o)
    );
}

/// On a terminal (a pseudo-terminal from util-linux's `script`): colour by default, the
/// width from COLUMNS, none with NO_COLOR.
#[test]
fn tool_on_a_terminal() {
    let have_script = Command::new("script")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have_script {
        eprintln!("SKIPPED: no `script` (util-linux) to give the tool a terminal");
        return;
    }
    if source_is_stub() {
        eprintln!("SKIPPED: src/ladder/source.rs is still the stub (nothing to draw)");
        return;
    }
    let cap = data("rc_pingpong_loss_seqnak.pcap");
    let run = |no_color: bool| {
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &format!("{BIN} ladder {cap}"), "/dev/null"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("COLUMNS", "90")
            .env_remove("NO_COLOR");
        if no_color {
            cmd.env("NO_COLOR", "1");
        }
        let o = cmd.output().expect("script");
        assert!(o.status.success(), "{}", err_of(&o));
        String::from_utf8_lossy(&o.stdout).replace("\r\n", "\n")
    };
    let colour = run(false);
    assert!(colour.contains("\x1b["), "{colour}");
    let drawing: Vec<String> = strip_ansi(&colour)
        .lines()
        .filter(|l| !l.starts_with(&cap))
        .map(str::to_string)
        .collect();
    assert!(drawing.len() > 40, "{colour}");
    assert!(
        drawing.iter().any(|l| l.chars().count() == 90),
        "{drawing:#?}"
    );
    assert!(
        drawing.iter().all(|l| l.chars().count() <= 90),
        "{drawing:#?}"
    );
    let plain = run(true);
    assert!(!plain.contains("\x1b["), "NO_COLOR: {plain}");
}
