//! UC (IBA 9.8) as protocol traces over the simulator: UC opcodes and no ACK at all; a
//! send WR completes when its last packet leaves; a lost packet costs its whole message
//! (lost FIRST, MIDDLE or LAST) and the responder takes the next message whole; no
//! receive WQE or a bad R_Key drops the message without a NAK and keeps the QP; READ,
//! atomics and SEND with invalidate are refused at post time; the modify rules are UC's.

mod common;

use common::rc::{pattern, statuses, Opts, Pair};
use roce_emu::engine::*;
use roce_emu::mem::Access;
use roce_emu::sim::rule::DropNth;

const A: usize = 0;
const B: usize = 1;

fn uc() -> Opts {
    Opts {
        qp_type: QpType::Uc,
        access: Access::LOCAL_WRITE.union(Access::REMOTE_WRITE),
        ..Opts::default()
    }
}

/// Completions on `which`'s CQ as (wr_id, status, opcode, byte_len).
fn comps(p: &mut Pair, which: usize) -> Vec<(u64, WcStatus, WcOpcode, u32)> {
    p.completions(which)
        .iter()
        .map(|c| (c.wr_id, c.status, c.opcode, c.byte_len))
        .collect()
}

#[test]
fn uc_sends_and_writes_with_uc_opcodes_no_acks_and_completes_on_transmit() {
    let mut p = Pair::new(uc());
    p.write_mem(A, 0, &pattern(1, 8192));
    p.post_recv(B, 7, 0, 4096);
    p.post_recv(B, 8, 4096, 64);
    p.send(A, 1, SendOp::Send, 0, 2500);
    let remote = p.end(B).remote(64 * 1024);
    p.send(A, 2, SendOp::Write { remote }, 0, 1024);
    let remote = p.end(B).remote(128 * 1024);
    p.send(A, 3, SendOp::WriteWithImm { remote, imm: 9 }, 0, 1500);
    // Sent and completed at once: nothing waits for an answer, no timer is armed.
    let mut n = 0;
    while p.transmit(A).is_some() {
        n += 1;
    }
    assert_eq!(n, 6);
    assert_eq!(
        statuses(&p.completions(A)),
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    assert_eq!(
        p.engine(A).poll_timeout(),
        None,
        "UC arms no retransmit timer"
    );

    // Again through the network, to see the trace and the receiver. The six packets
    // above never reached B (PSNs 256-261): it resynchronises on the FIRST at 262.
    p.send(A, 4, SendOp::Send, 0, 2500);
    let remote = p.end(B).remote(64 * 1024);
    p.send(A, 5, SendOp::Write { remote }, 0, 1024);
    let remote = p.end(B).remote(128 * 1024);
    p.send(A, 6, SendOp::WriteWithImm { remote, imm: 9 }, 0, 1500);
    p.settle();
    assert_eq!(
        p.untimed_trace(),
        [
            "0->1 UC_SEND_FIRST psn=262",
            "0->1 UC_SEND_MIDDLE psn=263",
            "0->1 UC_SEND_LAST psn=264",
            "0->1 UC_RDMA_WRITE_ONLY psn=265",
            "0->1 UC_RDMA_WRITE_FIRST psn=266",
            "0->1 UC_RDMA_WRITE_LAST_WITH_IMMEDIATE psn=267",
        ],
        "no ACK ever goes back"
    );
    assert_eq!(
        comps(&mut p, B),
        [
            (7, WcStatus::Success, WcOpcode::Recv, 2500),
            (8, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 1500),
        ]
    );
    assert_eq!(p.read_mem(B, 0, 2500), pattern(1, 2500));
    assert_eq!(p.read_mem(B, 64 * 1024, 1024), pattern(1, 1024));
    assert_eq!(p.read_mem(B, 128 * 1024, 1500), pattern(1, 1500));
    assert_eq!(p.counter(B, Counter::AcksSent), 0);
    assert_eq!(p.counter(B, Counter::UcMsgAbandoned), 0);
}

/// Message 1 (5 packets) loses packet `lost`; message 2 (3 packets) follows. The first
/// receive WQE is not completed for message 1: message 2 lands in it whole.
fn lose_one_packet_of_the_first_message(lost: u64) -> Pair {
    let mut p = Pair::new(uc());
    p.write_mem(A, 0, &pattern(1, 5000));
    p.write_mem(A, 8192, &pattern(2, 3000));
    p.post_recv(B, 7, 0, 8192);
    p.post_recv(B, 8, 8192, 8192);
    p.net.add_rule(A, B, DropNth::new(&[lost]));
    p.send(A, 1, SendOp::Send, 0, 5000);
    p.send(A, 2, SendOp::Send, 8192, 3000);
    p.settle();
    p.print_trace();
    // The sender cannot know: both WRs succeed.
    assert_eq!(
        statuses(&p.completions(A)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    // Only the whole message arrives, into the first WQE; the second WQE waits.
    assert_eq!(
        comps(&mut p, B),
        [(7, WcStatus::Success, WcOpcode::Recv, 3000)]
    );
    assert_eq!(p.read_mem(B, 0, 3000), pattern(2, 3000));
    assert_eq!(p.state(B), QpState::Rts);
    assert_eq!(p.counter(B, Counter::NaksSent), 0);
    assert_eq!(p.counter(B, Counter::AcksSent), 0);
    assert_eq!(p.counter(B, Counter::RdmaRecvs), 1);
    // The WQE still posted takes the next message.
    p.send(A, 3, SendOp::Send, 0, 100);
    p.settle();
    assert_eq!(
        comps(&mut p, B),
        [(8, WcStatus::Success, WcOpcode::Recv, 100)]
    );
    p
}

#[test]
fn loss_mid_message_drops_that_message_and_the_next_arrives_whole() {
    let p = lose_one_packet_of_the_first_message(2);
    // MIDDLE 258, MIDDLE 259 and LAST 260 came after the gap.
    assert_eq!(p.counter(B, Counter::UcDropOutOfSeq), 3);
    assert_eq!(p.counter(B, Counter::UcMsgAbandoned), 1);
}

#[test]
fn a_lost_last_is_seen_at_the_next_first_which_starts_a_new_message() {
    let p = lose_one_packet_of_the_first_message(5);
    // Nothing out of sequence: the next FIRST shows the message in progress lost its end.
    assert_eq!(p.counter(B, Counter::UcDropOutOfSeq), 0);
    assert_eq!(p.counter(B, Counter::UcMsgAbandoned), 1);
}

#[test]
fn a_lost_first_drops_the_middles_and_last_that_follow() {
    let p = lose_one_packet_of_the_first_message(1);
    // No message was in progress: four packets without their FIRST, nothing abandoned.
    assert_eq!(p.counter(B, Counter::UcDropOutOfSeq), 4);
    assert_eq!(p.counter(B, Counter::UcMsgAbandoned), 0);
}

#[test]
fn a_lost_write_with_immediate_completes_nothing_at_the_receiver() {
    let mut p = Pair::new(uc());
    p.write_mem(A, 0, &pattern(4, 3000));
    p.post_recv(B, 7, 0, 0);
    p.net.add_rule(A, B, DropNth::new(&[3]));
    let remote = p.end(B).remote(4096);
    p.send(A, 1, SendOp::WriteWithImm { remote, imm: 1 }, 0, 3000);
    p.send(A, 2, SendOp::WriteWithImm { remote, imm: 2 }, 0, 1000);
    p.settle();
    assert_eq!(
        statuses(&p.completions(A)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let c = p.completions(B);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].wr_id, c[0].byte_len, c[0].imm), (7, 1000, Some(2)));
    assert_eq!(p.counter(B, Counter::UcMsgAbandoned), 1);
}

#[test]
fn no_receive_wqe_drops_the_message_without_rnr_and_the_qp_goes_on() {
    let mut p = Pair::new(uc());
    p.write_mem(A, 0, &pattern(5, 3000));
    p.send(A, 1, SendOp::Send, 0, 3000);
    p.settle();
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
    assert_eq!(p.counter(B, Counter::UcDropNoRecvWqe), 1);
    // The FIRST was refused; its MIDDLE and LAST are the rest of a dropped message.
    assert_eq!(p.counter(B, Counter::UcDropOutOfSeq), 2);
    assert_eq!(p.counter(B, Counter::SendRnrErr), 0);
    assert_eq!(p.opcodes(Some(B)), Vec::<String>::new(), "no RNR NAK");
    p.post_recv(B, 7, 0, 4096);
    p.send(A, 2, SendOp::Send, 0, 3000);
    p.settle();
    assert_eq!(
        comps(&mut p, B),
        [(7, WcStatus::Success, WcOpcode::Recv, 3000)]
    );
    assert_eq!(p.read_mem(B, 0, 3000), pattern(5, 3000));
}

#[test]
fn a_bad_rkey_or_a_too_long_send_drops_the_message_and_keeps_the_qp() {
    let mut p = Pair::new(uc());
    p.write_mem(A, 0, &pattern(6, 3000));
    let good = p.end(B).remote(4096);
    let bad = Remote {
        rkey: good.rkey ^ 0x100,
        ..good
    };
    p.send(A, 1, SendOp::Write { remote: bad }, 0, 3000);
    p.post_recv(B, 7, 8192, 100);
    p.send(A, 2, SendOp::Send, 0, 3000); // longer than the receive buffer
    p.send(A, 3, SendOp::Write { remote: good }, 0, 3000);
    p.settle();
    assert_eq!(p.completions(A).len(), 3);
    assert!(
        p.completions(B).is_empty(),
        "no completion for a dropped message"
    );
    assert_eq!(p.counter(B, Counter::UcDropInvalid), 2);
    assert_eq!(p.state(B), QpState::Rts);
    assert_eq!(p.read_mem(B, 4096, 3000), pattern(6, 3000));
    assert_eq!(p.opcodes(Some(B)), Vec::<String>::new(), "no NAK");
}

#[test]
fn read_atomics_and_send_with_invalidate_are_refused_at_post_time() {
    let mut p = Pair::new(uc());
    let qpn = p.end(A).qpn;
    let remote = p.end(B).remote(0);
    let sge = [p.end(A).sge(0, 8)];
    for (op, name) in [
        (SendOp::Read { remote }, "RDMA READ"),
        (
            SendOp::CompareSwap {
                remote,
                compare: 0,
                swap: 1,
            },
            "atomic compare and swap",
        ),
        (SendOp::FetchAdd { remote, add: 1 }, "atomic fetch and add"),
        (SendOp::SendWithInv { rkey: 5 }, "SEND with invalidate"),
    ] {
        let wr = SendWr {
            wr_id: 1,
            op,
            local: Local::Sges(&sge),
            flags: SendFlags::default(),
        };
        let now = p.net.now;
        assert_eq!(
            p.engine(A).post_send(now, qpn, &wr),
            Err(VerbsError::OpNotOnQpType {
                qpn,
                op: name,
                qp_type: "UC"
            })
        );
    }
}

#[test]
fn modify_takes_ucs_attributes_and_refuses_rcs() {
    let mut net = roce_emu::sim::Net::new(1);
    let e = &mut net.nodes[0].engine;
    let cap = QpCap::default();
    let o = roce_emu::sim::direct::RcEndOpts {
        qp_type: QpType::Uc,
        ..roce_emu::sim::direct::RcEndOpts::new(0x1000, 4096, cap)
    };
    let end = roce_emu::sim::direct::rc_end_with(e, &o).unwrap();
    let q = end.qpn;
    let now = Instant::ZERO;
    e.modify_qp(now, q, &QpAttr::init(Access::REMOTE_WRITE))
        .unwrap();
    // RC's RTR attributes: UC has no responder resources or RNR timer.
    let peer = std::net::IpAddr::from([127, 0, 0, 2]);
    let rc_rtr = QpAttr::rtr(peer, Mtu::M1024, 5, roce_emu::wire::Psn::new(1), 4, 12);
    assert!(matches!(
        e.modify_qp(now, q, &rc_rtr),
        Err(VerbsError::UnexpectedAttr { .. })
    ));
    let rtr = QpAttr {
        max_dest_rd_atomic: None,
        min_rnr_timer: None,
        ..rc_rtr
    };
    e.modify_qp(now, q, &rtr).unwrap();
    // RC's RTS attributes: no timeout, retries or initiator depth on UC.
    let rc_rts = QpAttr::rts(roce_emu::wire::Psn::new(7), 14, 7, 7, 4);
    assert!(matches!(
        e.modify_qp(now, q, &rc_rts),
        Err(VerbsError::UnexpectedAttr { .. })
    ));
    let no_psn = QpAttr {
        state: Some(QpState::Rts),
        ..Default::default()
    };
    assert!(matches!(
        e.modify_qp(now, q, &no_psn),
        Err(VerbsError::MissingAttr { .. })
    ));
    let rts = QpAttr {
        state: Some(QpState::Rts),
        sq_psn: Some(roce_emu::wire::Psn::new(7)),
        ..Default::default()
    };
    e.modify_qp(now, q, &rts).unwrap();
    assert_eq!(e.qp(q).unwrap().state, QpState::Rts);
}

#[test]
fn a_bad_lkey_fails_locally_at_either_end_and_sends_nothing_back() {
    use roce_emu::mem::{Lkey, Sge};
    // The sender's own key: LOC_PROT_ERR, the rest flushed, nothing on the wire (as RC).
    let mut p = Pair::new(uc());
    let sge = Sge {
        lkey: Lkey(0x7777_7700),
        ..p.end(A).sge(0, 64)
    };
    p.post_sges(A, 1, SendOp::Send, &[sge]);
    p.post_sges(A, 2, SendOp::Send, &[sge]);
    p.settle();
    assert!(p.net.trace.as_ref().unwrap().is_empty(), "nothing sent");
    assert_eq!(
        statuses(&p.completions(A)),
        [(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.state(A), QpState::Err);

    // The receiver's WQE with a bad key: it completes in error and B goes to ERR (rxe
    // RESPST_ERR_MALFORMED_WQE, class A, for every QP type), with no NAK on UC; the
    // sender's WR succeeded when it left.
    let mut p = Pair::new(uc());
    let (qpn, now) = (p.b.qpn, p.net.now);
    let sge = Sge {
        lkey: Lkey(p.end(B).lkey().0 ^ 0x55),
        ..p.end(B).sge(0, 64)
    };
    let wr = RecvWr {
        wr_id: 7,
        sges: &[sge],
    };
    p.engine(B).post_recv(now, qpn, &wr).unwrap();
    p.send(A, 1, SendOp::Send, 0, 64);
    p.settle();
    assert_eq!(statuses(&p.completions(B)), [(7, WcStatus::LocProtErr)]);
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
    assert_eq!(p.state(B), QpState::Err);
    assert_eq!(p.opcodes(Some(B)), Vec::<String>::new(), "no NAK");
}

#[test]
fn sqd_finishes_the_message_in_progress_then_reports_drained() {
    let mut p = Pair::new(uc());
    p.post_recv(B, 7, 0, 8192);
    p.post_recv(B, 8, 8192, 64);
    p.send(A, 1, SendOp::Send, 0, 3000);
    // The FIRST leaves, then SQD is asked for: the message goes on to its LAST (it has
    // started), nothing new starts, and the drain is reported once the LAST is out.
    let first = p.transmit(A).expect("the FIRST");
    assert_eq!(first.bth.opcode.name(), "UC_SEND_FIRST");
    let sqd = QpAttr {
        state: Some(QpState::Sqd),
        sq_draining_notify: Some(true),
        ..Default::default()
    };
    p.modify(A, &sqd).unwrap();
    let qpn = p.a.qpn;
    assert!(p.events(A).is_empty(), "not drained before its LAST");
    p.send(A, 2, SendOp::Send, 0, 16);
    let rest: Vec<String> = p
        .drain(A)
        .iter()
        .map(|r| r.bth.opcode.name().into())
        .collect();
    assert_eq!(rest, ["UC_SEND_MIDDLE", "UC_SEND_LAST"]);
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
    assert_eq!(p.events(A), [AsyncEvent::SqDrained { qpn }]);
    // Back to RTS: the second WR goes.
    let rts = QpAttr {
        state: Some(QpState::Rts),
        ..Default::default()
    };
    p.modify(A, &rts).unwrap();
    p.settle();
    assert_eq!(statuses(&p.completions(A)), [(2, WcStatus::Success)]);
    assert_eq!(
        comps(&mut p, B),
        [(7, WcStatus::Success, WcOpcode::Recv, 16)]
    );
}
