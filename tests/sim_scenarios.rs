//! RC behaviours as protocol traces over the simulator, one per behaviour: loss and
//! retransmission, RNR, READs and atomics, ordering, ACKs, SQD. With tests/sim_errors.rs
//! (the error paths) they produce every completion status (Success, RETRY_EXC_ERR,
//! RNR_RETRY_EXC_ERR, REM_ACCESS_ERR, REM_INV_REQ_ERR, REM_OP_ERR, LOC_PROT_ERR,
//! LOC_LEN_ERR, WR_FLUSH_ERR).

mod common;

use common::rc::{parse_pkt, pattern, pick, signaled, statuses, Opts, Pair};
use roce_emu::engine::*;
use roce_emu::sim::rule::{DropIf, DropNth, Rule, Verdict};
use roce_emu::wire::opcode::op;
use roce_emu::wire::RoceRepr;

const A: usize = 0;
const B: usize = 1;

/// Index of the first line of `f` that contains `what`.
fn line_with(f: &[String], what: &str) -> usize {
    f.iter()
        .position(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no {what} in {f:?}"))
}

fn opcode_of(b: &[u8]) -> u8 {
    b[0]
}

#[test]
fn sequence_nak_once_per_gap_then_go_back_n() {
    let mut p = Pair::new(Opts::default());
    p.write_mem(A, 0, &pattern(5, 5000));
    p.post_recv(B, 7, 0, 8192);
    p.net.add_rule(A, B, DropNth::new(&[2])); // the first SEND_MIDDLE
    p.send(A, 1, SendOp::Send, 0, 5000);
    p.settle();
    p.print_trace();
    let f = p.untimed_trace();
    assert_eq!(
        &f[..7],
        [
            "0->1 RC_SEND_FIRST psn=256",
            "0->1 RC_SEND_MIDDLE psn=257 [Drop]",
            "0->1 RC_SEND_MIDDLE psn=258",
            "0->1 RC_SEND_MIDDLE psn=259",
            "0->1 RC_SEND_LAST psn=260",
            "1->0 RC_ACKNOWLEDGE psn=257 NAK PSN sequence error",
            "0->1 RC_SEND_MIDDLE psn=257",
        ]
    );
    // One NAK for the gap although three packets arrived out of sequence.
    assert_eq!(
        f.iter().filter(|l| l.contains("NAK PSN sequence")).count(),
        1
    );
    assert_eq!(p.counter(B, Counter::OutOfSeqRequest), 3);
    assert_eq!(p.counter(A, Counter::RcvdSeqErr), 1);
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
    assert_eq!(p.read_mem(B, 0, 5000), pattern(5, 5000));
}

#[test]
fn lost_ack_retransmits_after_the_timeout_and_is_acked_again() {
    let mut p = Pair::new(Opts {
        timeout: 8, // 4.096 us * 256 = ~1 ms
        ..Opts::default()
    });
    p.post_recv(B, 7, 0, 64);
    p.net.add_rule(B, A, DropNth::new(&[1]));
    p.send(A, 1, SendOp::Send, 0, 64);
    p.settle();
    p.print_trace();
    let tr = p.net.trace.as_ref().unwrap();
    assert_eq!(tr.len(), 4); // SEND, ACK (lost), SEND again, ACK
    let gap = tr[2].at.since(tr[0].at);
    assert!(
        gap.as_micros() >= 1048,
        "resent after {gap:?}, before the 1.05 ms timeout"
    );
    assert_eq!(p.counter(B, Counter::DuplicateRequest), 1);
    assert_eq!(p.counter(A, Counter::RetransmitTimeouts), 1);
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
    assert_eq!(p.completions(B).len(), 1, "delivered once");
}

#[test]
fn retries_exhausted_fail_the_wr_and_flush_the_rest() {
    let mut p = Pair::new(Opts {
        timeout: 8,
        retry_cnt: 2,
        ..Opts::default()
    });
    p.net.add_rule(A, B, DropIf(|_: &[u8]| true));
    for i in 0..3 {
        p.send(
            A,
            i,
            SendOp::Write {
                remote: p.end(B).remote(0),
            },
            0,
            16,
        );
    }
    p.settle();
    p.print_trace();
    let first = p
        .untimed_trace()
        .iter()
        .filter(|l| l.contains("psn=256"))
        .count();
    assert_eq!(first, 3, "sent once and retried twice");
    assert_eq!(
        statuses(&p.completions(A)),
        [
            (0, WcStatus::RetryExcErr),
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(p.state(A), QpState::Err);
    assert!(p.engine(A).poll_event() == Some(AsyncEvent::QpFatal { qpn: p.a.qpn }));
}

#[test]
fn rnr_nak_waits_the_timer_then_succeeds() {
    let mut p = Pair::new(Opts {
        min_rnr_timer: 14, // 1.28 ms
        ..Opts::default()
    });
    p.send(A, 1, SendOp::Send, 0, 32);
    // Let the RNR NAK happen, then post the receive.
    p.net
        .run_until(1000, |n| {
            n.nodes[B].engine.counters().get(Counter::SendRnrErr) > 0
        })
        .unwrap();
    p.post_recv(B, 7, 0, 64);
    p.settle();
    p.print_trace();
    let f = p.untimed_trace();
    assert_eq!(f[1], "1->0 RC_ACKNOWLEDGE psn=256 RNR-NAK timer=14");
    let tr = p.net.trace.as_ref().unwrap();
    let wait = tr[2].at.since(tr[1].at);
    assert!(
        wait.as_micros() >= 1280,
        "resent {wait:?} after the RNR NAK"
    );
    assert_eq!(p.counter(A, Counter::RcvdRnrErr), 1);
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
}

#[test]
fn rnr_retry_zero_fails_with_rnr_retry_exceeded() {
    let mut p = Pair::new(Opts {
        rnr_retry: 0,
        ..Opts::default()
    });
    p.send(A, 1, SendOp::Send, 0, 32);
    p.send(A, 2, SendOp::Send, 0, 32);
    p.settle();
    assert_eq!(
        statuses(&p.completions(A)),
        [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.counter(A, Counter::RetryRnrExceededErr), 1);
}

#[test]
fn atomics_are_executed_exactly_once_under_duplication_and_lost_acks() {
    let mut p = Pair::new(Opts {
        timeout: 8,
        ..Opts::default()
    });
    p.write_mem(B, 512, &100u64.to_ne_bytes());
    let at = p.end(B).remote(512);
    // Every atomic request twice.
    p.net
        .add_rule(A, B, pick(op::RC_FETCH_ADD, &[], Verdict::Duplicate));
    p.net
        .add_rule(A, B, pick(op::RC_COMPARE_SWAP, &[], Verdict::Duplicate));
    p.net.add_rule(B, A, DropNth::new(&[1])); // the first ATOMIC_ACKNOWLEDGE
    p.send(A, 1, SendOp::FetchAdd { remote: at, add: 5 }, 0, 8);
    p.send(
        A,
        2,
        SendOp::CompareSwap {
            remote: at,
            compare: 105,
            swap: 7,
        },
        8,
        8,
    );
    p.settle();
    p.print_trace();
    assert_eq!(
        statuses(&p.completions(A)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(
        p.read_mem(A, 0, 8),
        100u64.to_ne_bytes(),
        "FETCH_ADD saw 100"
    );
    assert_eq!(
        p.read_mem(A, 8, 8),
        105u64.to_ne_bytes(),
        "COMPARE_SWAP saw 105"
    );
    assert_eq!(
        p.read_mem(B, 512, 8),
        7u64.to_ne_bytes(),
        "+5 once, then swapped"
    );
    assert!(
        p.counter(B, Counter::DuplicateRequest) >= 2,
        "duplicates were answered"
    );
}

#[test]
fn lost_read_response_reissues_the_read_for_the_rest_only() {
    let mut p = Pair::new(Opts {
        timeout: 8,
        ..Opts::default()
    });
    p.write_mem(B, 0, &pattern(9, 3000));
    let remote = p.end(B).remote(0);
    p.net.add_rule(
        B,
        A,
        DropIf({
            let mut done = false;
            move |b: &[u8]| {
                let hit = !done && opcode_of(b) == op::RC_RDMA_READ_RESPONSE_MIDDLE.0;
                done |= hit;
                hit
            }
        }),
    );
    p.send(A, 1, SendOp::Read { remote }, 4096, 3000);
    p.settle();
    p.print_trace();
    let tr = p.net.trace.as_ref().unwrap();
    let reqs: Vec<RoceRepr> = tr
        .iter()
        .filter(|t| opcode_of(&t.bytes) == op::RC_RDMA_READ_REQUEST.0)
        .map(|t| parse_pkt(&t.bytes))
        .collect();
    assert_eq!(reqs.len(), 2);
    let retry = reqs[1].reth.unwrap();
    assert_eq!(retry.va, remote.va + 1024, "asks from the lost packet on");
    assert_eq!(retry.dma_len, 3000 - 1024);
    assert_eq!(reqs[1].bth.psn.value(), 257);
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
    assert_eq!(p.read_mem(A, 4096, 3000), pattern(9, 3000));
}

/// SEND with Invalidate of a registered region's R_Key: refused (only memory windows and
/// fast-registered regions may be invalidated remotely, IBA 10.6.7.2): NAK Remote Access
/// Error, the receive completes REM_INV_REQ_ERR, the WRITE behind the SEND is flushed
/// (the requester's QP is in ERR), and the region stays valid.
#[test]
fn send_with_invalidate_of_a_registered_region_is_refused() {
    let mut p = Pair::new(Opts::default());
    let rkey = p.end(B).rkey().0;
    p.post_recv(B, 7, 0, 64);
    p.send(A, 1, SendOp::SendWithInv { rkey }, 0, 16);
    p.send(
        A,
        2,
        SendOp::Write {
            remote: p.end(B).remote(128),
        },
        0,
        16,
    );
    p.settle();
    p.print_trace();
    assert_eq!(
        p.untimed_trace()[0],
        "0->1 RC_SEND_ONLY_WITH_INVALIDATE psn=256"
    );
    let rb = p.completions(B);
    assert_eq!(rb[0].status, WcStatus::RemInvReqErr);
    assert_eq!(rb[0].invalidated_rkey, None);
    assert_eq!(
        statuses(&p.completions(A)),
        [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
}

#[test]
fn write_with_immediate_consumes_a_receive_and_reports_the_length() {
    let mut p = Pair::new(Opts::default());
    p.write_mem(A, 0, &pattern(3, 2500));
    p.post_recv(B, 7, 0, 0);
    p.send(
        A,
        1,
        SendOp::WriteWithImm {
            remote: p.end(B).remote(4096),
            imm: 0xabcd,
        },
        0,
        2500,
    );
    p.settle();
    assert_eq!(
        p.opcodes(Some(A)),
        [
            "RC_RDMA_WRITE_FIRST",
            "RC_RDMA_WRITE_MIDDLE",
            "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE"
        ]
    );
    let rb = p.completions(B);
    assert_eq!(
        (rb[0].opcode, rb[0].byte_len, rb[0].imm),
        (WcOpcode::RecvRdmaWithImm, 2500, Some(0xabcd))
    );
    assert_eq!(p.read_mem(B, 4096, 2500), pattern(3, 2500));
}

#[test]
fn every_mtu_segments_every_size_and_crosses_the_psn_wrap() {
    for mtu in [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096] {
        let m = mtu.bytes();
        for size in [0, 1, m - 1, m, m + 1, 3 * m] {
            let mut p = Pair::new(Opts {
                mtu,
                psn_a: 0xff_fffe,
                psn_b: 0xff_ffff,
                ..Opts::default()
            });
            p.write_mem(A, 0, &pattern(size as u8, size as usize));
            p.write_mem(B, 65536, &pattern(!size as u8, size as usize));
            p.post_recv(B, 7, 0, 3 * 4096);
            p.send(A, 1, SendOp::Send, 0, size);
            p.send(
                A,
                2,
                SendOp::Write {
                    remote: p.end(B).remote(32768),
                },
                0,
                size,
            );
            p.send(
                A,
                3,
                SendOp::Read {
                    remote: p.end(B).remote(65536),
                },
                16384,
                size,
            );
            p.settle();
            let n = size.div_ceil(m).max(1) as usize;
            let sends = p
                .opcodes(Some(A))
                .iter()
                .filter(|o| o.starts_with("RC_SEND"))
                .count();
            assert_eq!(sends, n, "mtu {m} size {size}");
            let resp = p
                .opcodes(Some(B))
                .iter()
                .filter(|o| o.contains("READ_RESPONSE"))
                .count();
            assert_eq!(resp, n, "mtu {m} size {size}");
            let ok = statuses(&p.completions(A));
            assert_eq!(
                ok,
                [
                    (1, WcStatus::Success),
                    (2, WcStatus::Success),
                    (3, WcStatus::Success)
                ]
            );
            assert_eq!(
                p.read_mem(B, 0, size as usize),
                pattern(size as u8, size as usize)
            );
            assert_eq!(
                p.read_mem(B, 32768, size as usize),
                pattern(size as u8, size as usize)
            );
            assert_eq!(
                p.read_mem(A, 16384, size as usize),
                pattern(!size as u8, size as usize)
            );
        }
    }
}

#[test]
fn max_rd_atomic_one_keeps_one_read_in_flight() {
    let mut p = Pair::new(Opts {
        max_rd_atomic: 1,
        ..Opts::default()
    });
    p.send(
        A,
        1,
        SendOp::Read {
            remote: p.end(B).remote(0),
        },
        0,
        2048,
    );
    p.send(
        A,
        2,
        SendOp::Read {
            remote: p.end(B).remote(0),
        },
        4096,
        100,
    );
    p.settle();
    let f = p.untimed_trace();
    let second = line_with(&f, "READ_REQUEST psn=258");
    let last = line_with(&f, "READ_RESPONSE_LAST psn=257");
    assert!(second > last, "second READ before the first's data: {f:?}");
}

#[test]
fn fence_waits_for_earlier_reads() {
    let mut p = Pair::new(Opts::default());
    p.post_recv(B, 7, 0, 64);
    p.send(
        A,
        1,
        SendOp::Read {
            remote: p.end(B).remote(0),
        },
        0,
        3000,
    );
    let fenced = SendFlags {
        fence: true,
        ..signaled()
    };
    p.send_flags(A, 2, SendOp::Send, 8192, 16, fenced);
    p.settle();
    let f = p.untimed_trace();
    let send = line_with(&f, "RC_SEND_ONLY");
    let last = line_with(&f, "READ_RESPONSE_LAST");
    assert!(send > last, "fenced SEND before the READ completed: {f:?}");
}

#[test]
fn inline_and_unsignaled_sends() {
    let mut p = Pair::new(Opts::default());
    p.post_recv(B, 7, 0, 64);
    p.post_recv(B, 8, 64, 64);
    let qpn = p.a.qpn;
    let now = p.net.now;
    let e = p.engine(A);
    e.post_send(
        now,
        qpn,
        &SendWr {
            wr_id: 1,
            op: SendOp::Send,
            local: Local::Inline(b"inline bytes, no lkey"),
            flags: SendFlags::default(), // unsignaled
        },
    )
    .unwrap();
    e.post_send(
        now,
        qpn,
        &SendWr {
            wr_id: 2,
            op: SendOp::SendWithImm { imm: 9 },
            local: Local::Inline(b"second"),
            flags: SendFlags {
                signaled: true,
                ..Default::default()
            },
        },
    )
    .unwrap();
    p.settle();
    assert_eq!(
        statuses(&p.completions(A)),
        [(2, WcStatus::Success)],
        "unsignaled success is silent"
    );
    assert_eq!(p.read_mem(B, 0, 21), b"inline bytes, no lkey");
    assert_eq!(p.completions(B).len(), 2);
}

#[test]
fn acks_coalesce_and_carry_the_msn() {
    let mut p = Pair::new(Opts::default());
    for i in 0..16 {
        p.post_recv(B, i, 64 * i, 64);
        p.send(A, i, SendOp::Send, 0, 8);
    }
    p.settle();
    let acks: Vec<RoceRepr> = p
        .net
        .trace
        .as_ref()
        .unwrap()
        .iter()
        .filter(|t| opcode_of(&t.bytes) == op::RC_ACKNOWLEDGE.0)
        .map(|t| parse_pkt(&t.bytes))
        .collect();
    assert!(acks.len() < 16, "{} ACKs for 16 SENDs", acks.len());
    let last = acks.last().unwrap();
    assert_eq!(last.bth.psn.value(), 256 + 15);
    assert_eq!(last.aeth.unwrap().msn, 16, "MSN counts completed messages");
    assert!(p.counter(B, Counter::AcksCoalesced) > 0);
    assert_eq!(p.completions(A).len(), 16);
}

/// Flips one payload byte of the n-th packet.
struct CorruptNth {
    n: u64,
    seen: u64,
}
impl Rule for CorruptNth {
    fn on_packet(&mut self, _: Instant, pkt: &[u8]) -> Verdict {
        self.seen += 1;
        if self.seen == self.n {
            Verdict::Corrupt {
                at: pkt.len() - 10,
                xor: 0x40,
            }
        } else {
            Verdict::Pass
        }
    }
}

#[test]
fn a_corrupted_packet_is_caught_by_the_icrc_and_resent() {
    let mut p = Pair::new(Opts {
        timeout: 8,
        ..Opts::default()
    });
    p.write_mem(A, 0, &pattern(4, 3000));
    p.post_recv(B, 7, 0, 4096);
    p.net.add_rule(A, B, CorruptNth { n: 3, seen: 0 }); // the SEND_LAST
    p.send(A, 1, SendOp::Send, 0, 3000);
    p.settle();
    p.print_trace();
    assert_eq!(p.counter(B, Counter::DropBadIcrc), 1);
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
    assert_eq!(
        p.read_mem(B, 0, 3000),
        pattern(4, 3000),
        "the corrupt byte never landed"
    );
}

#[test]
fn sqd_finishes_what_started_starts_nothing_new_and_reports_drained() {
    let mut p = Pair::new(Opts::default());
    p.post_recv(B, 7, 0, 8192);
    p.post_recv(B, 8, 8192, 64);
    p.send(A, 1, SendOp::Send, 0, 5000);
    // Send the first packet only, then ask for SQD with notification.
    let mut buf = vec![0u8; 8192];
    let now = p.net.now;
    let _ = p.engine(A).poll_transmit(now, &mut buf).unwrap();
    p.modify(
        A,
        &QpAttr {
            state: Some(QpState::Sqd),
            sq_draining_notify: Some(true),
            ..Default::default()
        },
    )
    .unwrap();
    p.send(A, 2, SendOp::Send, 0, 16);
    p.net.clear_rules();
    // The first packet was taken off the engine by hand: the timer resends it.
    p.settle();
    let sent: Vec<String> = p.opcodes(Some(A));
    assert!(
        !sent.iter().any(|o| o == "RC_SEND_ONLY"),
        "a new WR started in SQD: {sent:?}"
    );
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
    let ev = p.events(A);
    let qpn = p.a.qpn;
    assert!(ev.contains(&AsyncEvent::SqDrained { qpn }), "{ev:?}");
    // Back to RTS: the second WR goes.
    p.modify(
        A,
        &QpAttr {
            state: Some(QpState::Rts),
            ..Default::default()
        },
    )
    .unwrap();
    p.settle();
    assert_eq!(statuses(&p.completions(A)), [(2, WcStatus::Success)]);
}

/// A lone positive ACK yields to its QP's ready request (it is cumulative and covers
/// nothing the request depends on), so a ping-pong answer and the ACK of the ping leave
/// in that order, the shorter last, as one UDP GSO send can carry them. Anything else
/// waiting in the responder (a NAK, a READ response) keeps going first.
#[test]
fn a_lone_ack_goes_out_behind_the_qps_request() {
    let mut p = Pair::new(Opts::default());
    p.post_recv(B, 1, 0, 64);
    p.post_recv(A, 1, 0, 64);
    p.send(A, 1, SendOp::Send, 0, 64);
    let now = Instant::from_nanos(1_000);
    let mut buf = [0u8; 4352];
    // A's SEND reaches B: B now owes an ACK.
    let t = p.engine(A).poll_transmit(now, &mut buf).expect("A sends");
    let ping = buf[..t.len].to_vec();
    p.engine(B).handle_datagram(
        now,
        Datagram {
            src: t.src,
            dst: t.dst,
            ipv4_id: Some(0),
            ecn: roce_emu::wire::Ecn::NotEct,
            data: &ping,
        },
    );
    assert_eq!(p.completions(B).len(), 1, "B received the ping");
    // B answers before its NIC transmits: the answer first, then the ACK.
    p.send(B, 2, SendOp::Send, 0, 64);
    let mut order = Vec::new();
    while let Some(t) = p.engine(B).poll_transmit(now, &mut buf) {
        order.push((buf[0], t.len));
    }
    assert_eq!(
        order,
        vec![
            (op::RC_SEND_ONLY.0, 12 + 64 + 4),
            (op::RC_ACKNOWLEDGE.0, 12 + 4 + 4)
        ]
    );
    // With no request ready, the ACK goes at once.
    let mut p = Pair::new(Opts::default());
    p.post_recv(B, 1, 0, 64);
    p.send(A, 1, SendOp::Send, 0, 64);
    let t = p.engine(A).poll_transmit(now, &mut buf).expect("A sends");
    let ping = buf[..t.len].to_vec();
    p.engine(B).handle_datagram(
        now,
        Datagram {
            src: t.src,
            dst: t.dst,
            ipv4_id: Some(0),
            ecn: roce_emu::wire::Ecn::NotEct,
            data: &ping,
        },
    );
    let t = p.engine(B).poll_transmit(now, &mut buf).expect("B ACKs");
    assert_eq!((buf[0], t.len), (op::RC_ACKNOWLEDGE.0, 20));
}
