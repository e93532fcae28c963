//! `roce-emu learn`: each lesson's trace holds the events it teaches (read from the
//! simulator's trace itself, dropped packets included), and every lesson prints the same
//! bytes on every run, in the library and through the tool.

use roce_emu::engine::time::{ack_timeout, rnr_timer};
use roce_emu::learn::{self, draw, Outcome};
use roce_emu::sim::rule::Verdict;
use roce_emu::wire::opcode::op;
use roce_emu::wire::{NakCode, Opcode, RocePacket, RoceRepr, Syndrome};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_roce-emu");

/// One packet of a trace, parsed.
#[derive(Debug, Clone)]
struct Pkt {
    at_ns: u64,
    from: usize,
    dropped: bool,
    r: RoceRepr,
}

impl Pkt {
    fn op(&self) -> Opcode {
        self.r.bth.opcode
    }
    fn psn(&self) -> u32 {
        self.r.bth.psn.value()
    }
    fn syndrome(&self) -> Option<Syndrome> {
        self.r.aeth.map(|a| a.syndrome)
    }
    fn msn(&self) -> Option<u32> {
        self.r.aeth.map(|a| a.msn)
    }
}

fn run(name: &str) -> (Outcome, Vec<Pkt>) {
    let l = learn::find(name).unwrap_or_else(|| panic!("no lesson {name}"));
    let o = l.run().unwrap_or_else(|e| panic!("lesson {name}: {e}"));
    let pkts = o
        .trace
        .iter()
        .map(|t| Pkt {
            at_ns: t.at.as_nanos(),
            from: t.from,
            dropped: t.verdict == Verdict::Drop,
            r: RoceRepr::parse(&RocePacket::new_checked(&t.bytes[..]).unwrap()).unwrap(),
        })
        .collect::<Vec<_>>();
    for p in &pkts {
        eprintln!(
            "{:>10} {}->{} {} psn={} {:?} {}",
            p.at_ns,
            p.from,
            1 - p.from,
            p.op(),
            p.psn(),
            p.r.aeth,
            if p.dropped { "[dropped]" } else { "" }
        );
    }
    (o, pkts)
}

fn psns<'a>(it: impl IntoIterator<Item = &'a Pkt>) -> Vec<u32> {
    it.into_iter().map(Pkt::psn).collect()
}

fn from_a(p: &[Pkt]) -> Vec<&Pkt> {
    p.iter().filter(|p| p.from == 0).collect()
}

fn from_b(p: &[Pkt]) -> Vec<&Pkt> {
    p.iter().filter(|p| p.from == 1).collect()
}

#[test]
fn the_lessons_are_the_seven_of_the_issue() {
    let names: Vec<&str> = learn::lessons().iter().map(|l| l.name).collect();
    assert_eq!(
        names,
        ["write", "coalesce", "gobackn", "rnr", "timeout", "read", "atomic"]
    );
    for l in learn::lessons() {
        assert!(l.cites.starts_with("IBA 9."), "{}: {}", l.name, l.cites);
        assert!(!l.look.is_empty(), "{}", l.name);
    }
}

#[test]
fn write_is_four_packets_in_psn_order_and_one_ack() {
    let (_, p) = run("write");
    assert!(p.iter().all(|p| !p.dropped));
    let a = from_a(&p);
    let ops: Vec<Opcode> = a.iter().map(|p| p.op()).collect();
    assert_eq!(
        ops,
        [
            op::RC_RDMA_WRITE_FIRST,
            op::RC_RDMA_WRITE_MIDDLE,
            op::RC_RDMA_WRITE_MIDDLE,
            op::RC_RDMA_WRITE_LAST
        ]
    );
    assert_eq!(psns(a.iter().copied()), [100, 101, 102, 103]);
    // AckReq on the last only; the RETH on the first only.
    let ack_req: Vec<bool> = a.iter().map(|p| p.r.bth.ack_req).collect();
    assert_eq!(ack_req, [false, false, false, true]);
    assert!(a[0].r.reth.is_some() && a[1..].iter().all(|p| p.r.reth.is_none()));
    let b = from_b(&p);
    assert_eq!(b.len(), 1, "one ACK");
    assert_eq!(b[0].op(), op::RC_ACKNOWLEDGE);
    assert!(matches!(b[0].syndrome(), Some(Syndrome::Ack { .. })));
    assert_eq!((b[0].psn(), b[0].msn()), (103, Some(1)));
}

#[test]
fn coalesce_answers_four_ackreqs_with_one_ack() {
    let (o, p) = run("coalesce");
    let a = from_a(&p);
    assert_eq!(a.len(), 4);
    assert!(a
        .iter()
        .all(|p| p.op() == op::RC_RDMA_WRITE_ONLY && p.r.bth.ack_req));
    assert_eq!(psns(a.iter().copied()), [100, 101, 102, 103]);
    let b = from_b(&p);
    assert_eq!(b.len(), 1, "one ACK for four requests");
    assert_eq!((b[0].psn(), b[0].msn()), (103, Some(4)));
    assert_eq!(o.figure("acks_coalesced"), Some(3));
    assert_eq!(o.figure("acks_sent"), Some(1));
}

#[test]
fn gobackn_drops_one_naks_once_and_resends_exactly_the_psns_after_the_drop() {
    let (o, p) = run("gobackn");
    let dropped: Vec<&Pkt> = p.iter().filter(|p| p.dropped).collect();
    assert_eq!(dropped.len(), 1);
    assert_eq!((dropped[0].from, dropped[0].psn()), (0, 101), "a request");
    let naks: Vec<(usize, &Pkt)> = p
        .iter()
        .enumerate()
        .filter(|(_, p)| matches!(p.syndrome(), Some(Syndrome::Nak(_))))
        .collect();
    assert_eq!(naks.len(), 1, "one NAK per gap");
    let (at, nak) = naks[0];
    assert_eq!(
        nak.syndrome(),
        Some(Syndrome::Nak(NakCode::PsnSequenceError)),
        "code 0"
    );
    assert_eq!(nak.psn(), 101, "the PSN B expected");
    let before: Vec<u32> = psns(p[..at].iter().filter(|p| p.from == 0));
    let after: Vec<u32> = psns(p[at..].iter().filter(|p| p.from == 0));
    assert_eq!(before, [100, 101, 102, 103, 104]);
    assert_eq!(
        after,
        [101, 102, 103, 104],
        "go back to N, from the drop on"
    );
    let last = p.last().unwrap();
    assert_eq!((last.from, last.psn()), (1, 104));
    assert!(matches!(last.syndrome(), Some(Syndrome::Ack { .. })));
    assert_eq!(o.figure("out_of_seq_request"), Some(3));
    assert_eq!(o.figure("naks_sent"), Some(1));
}

#[test]
fn rnr_retransmits_only_after_the_timer() {
    let (o, p) = run("rnr");
    assert!(p.iter().all(|p| !p.dropped));
    let i = p
        .iter()
        .position(|p| matches!(p.syndrome(), Some(Syndrome::RnrNak { .. })))
        .expect("an RNR NAK");
    let nak = &p[i];
    assert_eq!(nak.syndrome(), Some(Syndrome::RnrNak { timer: 14 }));
    assert_eq!((nak.from, nak.psn()), (1, 100), "the PSN it refused");
    let again = p[i + 1..]
        .iter()
        .find(|p| p.from == 0)
        .expect("a retransmission");
    assert_eq!((again.op(), again.psn()), (op::RC_SEND_ONLY, 100));
    let wait = again.at_ns - nak.at_ns;
    let timer = rnr_timer(14).as_nanos() as u64;
    assert!(
        wait >= timer,
        "resent {wait} ns after the NAK, timer {timer}"
    );
    // Not much later either: the RNR timer, not the ACK timeout (about 1.05 ms too).
    assert!(wait < timer + 100_000, "resent {wait} ns after the NAK");
    let last = p.last().unwrap();
    assert!(matches!(last.syndrome(), Some(Syndrome::Ack { .. })));
    assert_eq!(o.figure("rcvd_rnr_err"), Some(1));
}

#[test]
fn timeout_lost_ack_then_a_duplicate_answered_not_executed() {
    let (o, p) = run("timeout");
    let dropped: Vec<&Pkt> = p.iter().filter(|p| p.dropped).collect();
    assert_eq!(dropped.len(), 1);
    assert_eq!(
        (dropped[0].from, dropped[0].op(), dropped[0].psn()),
        (1, op::RC_ACKNOWLEDGE, 100),
        "the ACK is lost"
    );
    let sends: Vec<&Pkt> = from_a(&p);
    assert_eq!(psns(sends.iter().copied()), [100, 100], "sent again");
    let gap = sends[1].at_ns - sends[0].at_ns;
    let t = ack_timeout(8).unwrap().as_nanos() as u64;
    assert!(gap >= t, "resent after {gap} ns, before the {t} ns timeout");
    let acks: Vec<&Pkt> = from_b(&p);
    assert_eq!(acks.len(), 2);
    assert_eq!((acks[1].psn(), acks[1].msn()), (100, Some(1)), "same MSN");
    assert_eq!(o.figure("duplicate_request"), Some(1));
    assert_eq!(o.figure("retransmit_timeouts"), Some(1));
    assert_eq!(o.figure("recv_completions"), Some(1), "executed once");
}

#[test]
fn read_consumes_a_psn_per_response_and_retries_only_the_rest() {
    let (o, p) = run("read");
    let reqs: Vec<&Pkt> = from_a(&p);
    assert!(reqs.iter().all(|p| p.op() == op::RC_RDMA_READ_REQUEST));
    assert_eq!(psns(reqs.iter().copied()), [100, 102, 103]);
    let (r2, r3) = (reqs[1].r.reth.unwrap(), reqs[2].r.reth.unwrap());
    assert_eq!(r3.va, r2.va + 1024, "from the lost response on");
    assert_eq!((r2.dma_len, r3.dma_len), (3000, 1976));
    let dropped: Vec<&Pkt> = p.iter().filter(|p| p.dropped).collect();
    assert_eq!(dropped.len(), 1);
    assert_eq!(
        (dropped[0].op(), dropped[0].psn()),
        (op::RC_RDMA_READ_RESPONSE_MIDDLE, 103)
    );
    let resp: Vec<(Opcode, u32)> = from_b(&p).iter().map(|p| (p.op(), p.psn())).collect();
    assert_eq!(
        resp,
        [
            (op::RC_RDMA_READ_RESPONSE_FIRST, 100),
            (op::RC_RDMA_READ_RESPONSE_LAST, 101),
            (op::RC_RDMA_READ_RESPONSE_FIRST, 102),
            (op::RC_RDMA_READ_RESPONSE_MIDDLE, 103),
            (op::RC_RDMA_READ_RESPONSE_LAST, 104),
            (op::RC_RDMA_READ_RESPONSE_FIRST, 103),
            (op::RC_RDMA_READ_RESPONSE_LAST, 104),
        ]
    );
    assert_eq!(o.figure("completer_retry_err"), Some(1));
}

#[test]
fn atomic_duplicate_is_answered_from_the_saved_result_and_memory_changes_once() {
    let (o, p) = run("atomic");
    let reqs: Vec<&Pkt> = from_a(&p);
    assert_eq!(reqs.len(), 2);
    assert!(reqs
        .iter()
        .all(|p| p.op() == op::RC_FETCH_ADD && p.psn() == 100 && !p.dropped));
    let acks: Vec<&Pkt> = from_b(&p);
    assert_eq!(acks.len(), 2);
    assert!(acks[0].dropped && !acks[1].dropped);
    for a in &acks {
        assert_eq!(a.op(), op::RC_ATOMIC_ACKNOWLEDGE);
        assert_eq!(a.r.atomic_ack_eth.unwrap().orig, 100, "the saved result");
    }
    let (before, after) = (o.figure("remote_before"), o.figure("remote_after"));
    assert_eq!((before, after), (Some(100), Some(105)), "added once");
    assert_eq!(o.figure("fetched"), Some(100));
    assert_eq!(o.figure("duplicate_request"), Some(1));
}

#[test]
fn every_lesson_prints_the_same_bytes_twice_at_every_width() {
    for l in learn::lessons() {
        for width in [60, 80, 120] {
            let d = draw::Opts {
                width,
                ..draw::Opts::default()
            };
            let one = learn::text(l, &l.run().unwrap(), &d);
            let two = learn::text(l, &l.run().unwrap(), &d);
            assert_eq!(one, two, "{} at {width}", l.name);
            // Title and sections are there, however the lines were wrapped.
            let flat = one.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(flat.contains(l.title) && flat.contains(l.cites), "{one}");
            for line in one.lines() {
                assert!(
                    line.chars().count() <= width.max(60),
                    "{} at {width}: {line:?} is {} wide",
                    l.name,
                    line.chars().count()
                );
            }
        }
    }
}

fn tool(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(BIN)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn the_tool_lists_runs_the_same_twice_and_refuses_an_unknown_lesson() {
    let (code, list, _) = tool(&["learn", "--list"]);
    assert_eq!(code, 0);
    for l in learn::lessons() {
        assert!(list.contains(l.name) && list.contains(l.title), "{list}");
    }
    let (c1, one, e1) = tool(&["learn", "all", "--width", "100"]);
    let (c2, two, _) = tool(&["learn", "all", "--width", "100"]);
    assert_eq!((c1, c2), (0, 0), "{e1}");
    assert_eq!(one, two, "the same bytes on every run");
    print!("{one}");
    // The tool prints exactly the library's text (piped: no colour).
    let l = learn::find("gobackn").unwrap();
    let want = learn::text(l, &l.run().unwrap(), &draw::Opts::default());
    let (code, got, _) = tool(&["learn", "gobackn"]);
    assert_eq!((code, got), (0, want));
    let (code, _, err) = tool(&["learn", "nosuch"]);
    assert_eq!(code, 2);
    assert!(err.contains("no lesson \"nosuch\""), "{err}");
}
