//! The lessons' scripts and words. Node 0 (A) is the requester, node 1 (B) the
//! responder; A's PSNs start at 100. Sections are cited as the engine cites them for the
//! behaviour shown (src/engine/qp: responder.rs, completer.rs, timers.rs, time.rs).

use super::pair::{pattern, Knobs, Pair, A, B};
use super::{Lesson, LessonError, Outcome};
use crate::engine::{Counter, SendOp};
use crate::sim::rule::{DropIf, DropNth};
use crate::wire::opcode::op;

pub(super) const ALL: &[Lesson] = &[
    Lesson {
        name: "write",
        title: "a clean multi-packet RDMA WRITE",
        cites: "IBA 9.7.4 (the requester: one PSN per packet), 9.7.5.1 (the responder \
                acknowledges what asked for it)",
        about: "A writes 4 KiB into B's memory at a path MTU of 1024 bytes: the message \
                leaves as four packets, RDMA_WRITE_FIRST, two MIDDLEs and LAST, with \
                consecutive PSNs from 100. Only the FIRST carries the RETH (B's address, \
                R_Key and the whole length); only the LAST asks for an acknowledgement \
                (AckReq, 'A'). B places each packet's bytes as it comes and answers the \
                LAST with one ACK.",
        look: &[
            "PSNs 100 to 103 in order, one per packet; the next message would start at 104.",
            "The ACK carries PSN 103: it acknowledges every request up to 103. Its MSN is \
             1: one whole message done.",
            "No packet from B until the LAST: a responder acknowledges when asked (AckReq), \
             not per packet.",
        ],
        run: write,
    },
    Lesson {
        name: "coalesce",
        title: "coalesced ACKs",
        cites: "IBA 9.7.5.1 (an ACK with PSN p acknowledges every request up to p)",
        about: "A posts four 512-byte WRITEs at once. Each fits one packet \
                (RDMA_WRITE_ONLY) and each asks for an ACK, but they arrive together, \
                and B answers them with one ACK for the last PSN: a coalesced ACK. The \
                MSN in it counts the messages B finished: 4.",
        look: &[
            "Four requests, PSNs 100 to 103, each with AckReq set.",
            "One ACK, PSN 103, MSN 4: A completes all four WRITEs from it.",
            "B counted the three ACKs it folded into that one (acks_coalesced 3).",
        ],
        run: coalesce,
    },
    Lesson {
        name: "gobackn",
        title: "a lost packet, a sequence NAK, go-back-N",
        cites: "IBA 9.7.5.2.1 (the responder NAKs a PSN gap once, with the PSN it \
                expected), 9.7.5.1.3 (a NAK acknowledges every request before its PSN), \
                9.7.6 (the requester resends from there)",
        about: "A writes 5 KiB to B at MTU 1024: five packets, PSNs 100 to 104. The wire \
                drops the second (PSN 101). B sees 102 while it expects 101: a sequence \
                error. It sends one NAK (code 0, PSN sequence error) carrying PSN 101, and \
                drops 102, 103 and 104 unexecuted. The NAK tells A that 100 arrived and \
                that it must go back to 101: A resends 101 to 104 (go-back-N), and B \
                acknowledges 104.",
        look: &[
            "The cross on PSN 101: lost on the wire.",
            "One NAK only, although three packets arrived out of sequence: B NAKs a gap \
             once and then waits for the PSN it asked for.",
            "The retransmissions are exactly the PSNs from the lost one on: 101, 102, \
             103, 104. PSN 100 is not resent: the NAK acknowledged it.",
            "No timer ran: the NAK made A resend within one round trip.",
        ],
        run: gobackn,
    },
    Lesson {
        name: "rnr",
        title: "the RNR NAK and its timer",
        cites: "IBA 9.7.5.2.8 (receiver not ready), Table 45 (the 5-bit RNR NAK timer)",
        about: "A sends a SEND to B before B has posted a receive. A SEND needs a receive \
                WQE to land in, so B answers with an RNR NAK (receiver not ready) carrying \
                B's minimum RNR timer, code 14: 1.28 ms by IBA Table 45. A waits at least \
                that long and sends the same PSN again; by then B's program has posted a \
                receive, and the SEND is acknowledged.",
        look: &[
            "The RNR NAK carries the PSN of the SEND it refused (100) and timer code 14.",
            "The retransmission leaves 1.28 ms after the NAK arrived: the timer, not the \
             local ACK timeout.",
            "The RNR NAK is not an error: with rnr_retry 7 A retries for ever; with \
             rnr_retry 0 the WR would fail with IBV_WC_RNR_RETRY_EXC_ERR.",
        ],
        run: rnr,
    },
    Lesson {
        name: "timeout",
        title: "a lost ACK, the local ACK timeout, a duplicate",
        cites: "IBA 9.7.6.1.3 (the local ACK timeout: 4.096 us x 2^timeout), 9.7.5.1.2 \
                (a duplicate request is answered, not executed again; C9-105)",
        about: "A sends one SEND; B executes it (the data lands in B's first receive) and \
                sends the ACK, which the wire drops. A hears nothing. Its local ACK timeout \
                (code 8: 4.096 us x 2^8, about 1.05 ms) expires, and A sends the SEND \
                again with the same PSN. B has already executed PSN 100: the second copy \
                is a duplicate, which B acknowledges again from what it remembers, without \
                consuming a second receive.",
        look: &[
            "The cross on the first ACK: lost on the wire.",
            "The retransmission leaves about 1.05 ms after the SEND: the local ACK \
             timeout, as no NAK came.",
            "The second ACK has the same PSN (100) and the same MSN (1): B did not count \
             the duplicate as a new message.",
        ],
        run: timeout,
    },
    Lesson {
        name: "read",
        title: "READ responses, and a lost one",
        cites: "IBA 9.7.4 (a READ request takes one PSN per response packet), 9.7.5.1.5 \
                (a missing response), 9.7.4.1.4 (a retried READ asks only for what is \
                missing)",
        about: "A posts two RDMA READs at MTU 1024: 2048 bytes, then 3000. A READ request \
                is one packet, but it uses up one PSN per response packet: the first \
                (PSN 100) takes 100 and 101, so the second request carries PSN 102 and \
                takes 102 to 104. B answers each with READ_RESPONSE FIRST ... LAST on \
                those PSNs. The wire drops the second READ's MIDDLE response (PSN 103). A \
                sees LAST 104 while it expects 103: a response is missing, and A asks again \
                for the rest only, a READ request with PSN 103 for the last 1976 bytes \
                from B's address plus 1024.",
        look: &[
            "The first READ's responses carry PSNs 100 and 101, the request's own PSN on: \
             the second request starts at 102, not 101.",
            "FIRST and LAST responses carry an AETH (an ACK with the MSN), MIDDLE ones \
             do not.",
            "The retried READ has PSN 103 and dmalen 1976: the bytes of the lost response \
             and after. Responses 103 and 104 answer it.",
        ],
        run: read,
    },
    Lesson {
        name: "atomic",
        title: "an atomic executed exactly once",
        cites: "IBA 9.7.5.1.2 (a duplicate atomic is answered from the saved result, \
                never executed again), 9.7.6.1.3 (the local ACK timeout)",
        about: "B's word holds 100. A sends FETCH_ADD +5: B adds (the word becomes 105) \
                and answers with an ATOMIC_ACKNOWLEDGE carrying the original value, 100. \
                The wire drops that answer. A's local ACK timeout expires and A sends the \
                same FETCH_ADD again, same PSN. Adding again would make 110 and tell A \
                105; instead B finds the PSN in its replay state and answers with the \
                result it saved: 100, without touching the word.",
        look: &[
            "Two FETCH_ADD packets with the same PSN; the second is a duplicate.",
            "Both ATOMIC_ACKNOWLEDGEs carry orig=100.",
            "B's word is 105 at the end: added once.",
        ],
        run: atomic,
    },
];

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), LessonError> {
    if ok {
        Ok(())
    } else {
        Err(LessonError(what()))
    }
}

fn outcome(mut p: Pair, results: Vec<String>, figures: Vec<(&'static str, u64)>) -> Outcome {
    Outcome {
        addrs: p.addrs(),
        qpns: (p.a.qpn, p.b.qpn),
        trace: p.take_trace(),
        results,
        figures,
    }
}

fn write() -> Result<Outcome, LessonError> {
    let mut p = Pair::new(&Knobs::default())?;
    let data = pattern(1, 4096);
    p.write_mem(A, 0, &data)?;
    let remote = p.b.remote(0);
    p.post(1, SendOp::Write { remote }, 0, 4096)?;
    p.settle()?;
    p.expect_success(&[1])?;
    check(p.read_mem(B, 0, 4096)? == data, || {
        "B's memory does not hold A's bytes".into()
    })?;
    let results = vec![
        "A's WRITE completed with IBV_WC_SUCCESS.".into(),
        "B's 4096 bytes equal A's, byte for byte.".into(),
    ];
    Ok(outcome(p, results, vec![]))
}

fn coalesce() -> Result<Outcome, LessonError> {
    let mut p = Pair::new(&Knobs::default())?;
    for i in 0..4u64 {
        p.write_mem(A, i * 512, &pattern(i as u8, 512))?;
        let remote = p.b.remote(i * 512);
        p.post(i + 1, SendOp::Write { remote }, i * 512, 512)?;
    }
    p.settle()?;
    p.expect_success(&[1, 2, 3, 4])?;
    let coalesced = p.counter(B, Counter::AcksCoalesced);
    let acks = p.counter(B, Counter::AcksSent);
    let results = vec![
        "A's four WRITEs completed with IBV_WC_SUCCESS, in order.".into(),
        format!("B folded {coalesced} ACKs into the one it sent (acks_coalesced {coalesced})."),
    ];
    Ok(outcome(
        p,
        results,
        vec![("acks_coalesced", coalesced), ("acks_sent", acks)],
    ))
}

fn gobackn() -> Result<Outcome, LessonError> {
    let mut p = Pair::new(&Knobs::default())?;
    let data = pattern(2, 5 * 1024);
    p.write_mem(A, 0, &data)?;
    p.rule(A, DropNth::new(&[2]));
    let remote = p.b.remote(0);
    p.post(1, SendOp::Write { remote }, 0, 5 * 1024)?;
    p.settle()?;
    p.expect_success(&[1])?;
    check(p.read_mem(B, 0, data.len())? == data, || {
        "B's memory does not hold A's bytes".into()
    })?;
    let oos = p.counter(B, Counter::OutOfSeqRequest);
    let naks = p.counter(B, Counter::NaksSent);
    let results = vec![
        "A's WRITE completed with IBV_WC_SUCCESS; B's 5120 bytes equal A's.".into(),
        format!(
            "B dropped {oos} packets out of sequence (out_of_seq_request) and sent {naks} NAK."
        ),
    ];
    Ok(outcome(
        p,
        results,
        vec![("out_of_seq_request", oos), ("naks_sent", naks)],
    ))
}

fn rnr() -> Result<Outcome, LessonError> {
    let mut p = Pair::new(&Knobs {
        min_rnr_timer: 14,
        ..Knobs::default()
    })?;
    let data = pattern(3, 256);
    p.write_mem(A, 0, &data)?;
    p.post(1, SendOp::Send, 0, 256)?;
    // B's program posts its receive just after B refused the SEND.
    p.run_until(|n| n.nodes[B].engine.counters().get(Counter::SendRnrErr) > 0)?;
    p.post_recv(7, 0, 4096)?;
    p.settle()?;
    p.expect_success(&[1])?;
    let got = p.completions(B);
    check(got.len() == 1 && got[0].byte_len == 256, || {
        format!("B's receive completions: {got:?}")
    })?;
    check(p.read_mem(B, 0, 256)? == data, || {
        "B's receive buffer does not hold the SEND".into()
    })?;
    let rnr = p.counter(A, Counter::RcvdRnrErr);
    let results = vec![
        "A's SEND completed with IBV_WC_SUCCESS after one RNR NAK (rcvd_rnr_err 1).".into(),
        "B's receive completed with the 256 bytes A sent.".into(),
    ];
    Ok(outcome(p, results, vec![("rcvd_rnr_err", rnr)]))
}

fn timeout() -> Result<Outcome, LessonError> {
    let mut p = Pair::new(&Knobs::default())?;
    let data = pattern(4, 512);
    p.write_mem(A, 0, &data)?;
    // Two receives: a duplicate executed again would complete the second.
    p.post_recv(7, 0, 1024)?;
    p.post_recv(8, 1024, 1024)?;
    p.rule(B, DropNth::new(&[1]));
    p.post(1, SendOp::Send, 0, 512)?;
    p.settle()?;
    p.expect_success(&[1])?;
    let got = p.completions(B);
    check(got.len() == 1 && got[0].wr_id == 7, || {
        format!("B's receive completions: {got:?} (one expected)")
    })?;
    let dup = p.counter(B, Counter::DuplicateRequest);
    let timeouts = p.counter(A, Counter::RetransmitTimeouts);
    let results = vec![
        "A's SEND completed with IBV_WC_SUCCESS after one local ACK timeout \
         (retransmit_timeouts 1)."
            .into(),
        format!(
            "B received the SEND once: one receive completed, the second is still posted \
             (duplicate_request {dup})."
        ),
    ];
    Ok(outcome(
        p,
        results,
        vec![
            ("duplicate_request", dup),
            ("retransmit_timeouts", timeouts),
            ("recv_completions", got.len() as u64),
        ],
    ))
}

fn read() -> Result<Outcome, LessonError> {
    let mut p = Pair::new(&Knobs::default())?;
    let data = pattern(5, 2048 + 3000);
    p.write_mem(B, 0, &data)?;
    // B's packets: the first READ's two responses, then the second's FIRST, MIDDLE (the
    // fourth: dropped) and LAST.
    p.rule(B, DropNth::new(&[4]));
    let (r1, r2) = (p.b.remote(0), p.b.remote(2048));
    p.post(1, SendOp::Read { remote: r1 }, 0, 2048)?;
    p.post(2, SendOp::Read { remote: r2 }, 2048, 3000)?;
    p.settle()?;
    p.expect_success(&[1, 2])?;
    check(p.read_mem(A, 0, data.len())? == data, || {
        "A's memory does not hold B's bytes".into()
    })?;
    let retries = p.counter(A, Counter::CompleterRetryErr);
    let results = vec![
        "Both READs completed with IBV_WC_SUCCESS; A's 5048 bytes equal B's.".into(),
        format!("A went back once for the lost response (completer_retry_err {retries})."),
    ];
    Ok(outcome(p, results, vec![("completer_retry_err", retries)]))
}

fn atomic() -> Result<Outcome, LessonError> {
    let mut p = Pair::new(&Knobs::default())?;
    let before = 100u64;
    p.write_mem(B, 512, &before.to_ne_bytes())?;
    // The first ATOMIC_ACKNOWLEDGE is lost.
    p.rule(
        B,
        DropIf({
            let mut done = false;
            move |b: &[u8]| {
                let hit = !done && b.first() == Some(&op::RC_ATOMIC_ACKNOWLEDGE.0);
                done |= hit;
                hit
            }
        }),
    );
    let remote = p.b.remote(512);
    p.post(1, SendOp::FetchAdd { remote, add: 5 }, 0, 8)?;
    p.settle()?;
    p.expect_success(&[1])?;
    let word = |v: Vec<u8>| u64::from_ne_bytes(v.try_into().unwrap_or([0; 8]));
    let after = word(p.read_mem(B, 512, 8)?);
    let fetched = word(p.read_mem(A, 0, 8)?);
    check(after == before + 5 && fetched == before, || {
        format!("B's word is {after} (105 expected), A fetched {fetched} (100 expected)")
    })?;
    let dup = p.counter(B, Counter::DuplicateRequest);
    let results = vec![
        format!("A's FETCH_ADD completed with IBV_WC_SUCCESS and fetched {fetched}."),
        format!("B's word is {after}: 100 + 5, added once (duplicate_request {dup})."),
    ];
    Ok(outcome(
        p,
        results,
        vec![
            ("remote_before", before),
            ("remote_after", after),
            ("fetched", fetched),
            ("duplicate_request", dup),
        ],
    ))
}
