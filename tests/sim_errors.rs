//! RC error paths over the simulator, one test per behaviour: NAKs for a bad R_Key, an
//! access beyond a region, a missing remote right, a receive too short, a bad L_Key, a
//! middle packet without a first and a reserved opcode; flushes on entering ERR, a CQ
//! overrun, and misuse of the API as typed errors. tests/sim_scenarios.rs has the rest.

mod common;

use common::rc::{statuses, Opts, Pair};
use roce_emu::engine::*;
use roce_emu::mem::{Access, Lkey, Sge};
use roce_emu::wire::opcode::op;
use roce_emu::wire::RoceRepr;

const A: usize = 0;
const B: usize = 1;

#[test]
fn bad_rkey_is_nakked_remote_access_error() {
    let mut p = Pair::new(Opts::default());
    let mut remote = p.end(B).remote(0);
    remote.rkey ^= 0xff; // right index, wrong key byte
    p.send(A, 1, SendOp::Write { remote }, 0, 64);
    p.settle();
    p.print_trace();
    assert_eq!(
        p.untimed_trace()[1],
        "1->0 RC_ACKNOWLEDGE psn=256 NAK remote access error"
    );
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::RemAccessErr)]);
    assert_eq!(p.state(B), QpState::Err, "the responder goes to ERR too");
    assert_eq!(p.read_mem(B, 0, 64), vec![0; 64], "nothing written");
}

#[test]
fn write_beyond_the_region_is_refused() {
    let mut p = Pair::new(Opts::default());
    let remote = p.end(B).remote(common::rc::BUF - 8);
    p.send(A, 1, SendOp::Write { remote }, 0, 64);
    p.settle();
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::RemAccessErr)]);
}

#[test]
fn write_to_a_qp_without_remote_write_is_an_invalid_request() {
    let mut p = Pair::new(Opts {
        qp_access: Some(Access::REMOTE_READ),
        ..Opts::default()
    });
    p.send(
        A,
        1,
        SendOp::Write {
            remote: p.end(B).remote(0),
        },
        0,
        64,
    );
    p.settle();
    assert_eq!(
        p.untimed_trace()[1],
        "1->0 RC_ACKNOWLEDGE psn=256 NAK invalid request"
    );
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::RemInvReqErr)]);
}

#[test]
fn send_longer_than_the_receive_buffer_local_length_and_invalid_request() {
    let mut p = Pair::new(Opts::default());
    p.post_recv(B, 7, 0, 100);
    p.send(A, 1, SendOp::Send, 0, 200);
    p.settle();
    assert_eq!(statuses(&p.completions(B)), [(7, WcStatus::LocLenErr)]);
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::RemInvReqErr)]);
}

#[test]
fn receive_wqe_with_a_bad_lkey_is_a_remote_operational_error() {
    let mut p = Pair::new(Opts::default());
    let qpn = p.b.qpn;
    let sge = Sge {
        addr: p.end(B).iova(),
        length: 64,
        lkey: Lkey(p.end(B).lkey().0 ^ 0x55),
    };
    let now = p.net.now;
    p.engine(B)
        .post_recv(
            now,
            qpn,
            &RecvWr {
                wr_id: 7,
                sges: &[sge],
            },
        )
        .unwrap();
    p.send(A, 1, SendOp::Send, 0, 64);
    p.settle();
    assert_eq!(statuses(&p.completions(B)), [(7, WcStatus::LocProtErr)]);
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::RemOpErr)]);
}

#[test]
fn send_with_a_bad_lkey_is_a_local_protection_error() {
    let mut p = Pair::new(Opts::default());
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
}

#[test]
fn entering_err_flushes_everything_in_order_and_later_posts_too() {
    let mut p = Pair::new(Opts::default());
    p.post_recv(B, 7, 0, 64);
    p.post_recv(B, 8, 64, 64);
    p.modify(
        B,
        &QpAttr {
            state: Some(QpState::Err),
            ..Default::default()
        },
    )
    .unwrap();
    p.post_recv(B, 9, 128, 64);
    assert_eq!(
        statuses(&p.completions(B)),
        [
            (7, WcStatus::WrFlushErr),
            (8, WcStatus::WrFlushErr),
            (9, WcStatus::WrFlushErr)
        ]
    );
}

#[test]
fn cq_overrun_is_an_async_error_and_the_qp_goes_to_err() {
    let mut p = Pair::new(Opts {
        cq_depth: 2,
        ..Opts::default()
    });
    for i in 0..4 {
        p.send(
            A,
            i,
            SendOp::Write {
                remote: p.end(B).remote(0),
            },
            0,
            8,
        );
    }
    p.settle();
    let ev = p.events(A);
    assert!(
        ev.iter().any(|e| matches!(e, AsyncEvent::CqError { .. })),
        "{ev:?}"
    );
    assert_eq!(p.state(A), QpState::Err);
    assert!(p.counter(A, Counter::CqOverrun) > 0);
}

#[test]
fn api_misuse_is_a_typed_error() {
    let mut p = Pair::new(Opts {
        depth: 2,
        ..Opts::default()
    });
    let qpn = p.a.qpn;
    let sge = p.end(A).sge(0, 8);
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Send,
        local: Local::Sges(std::slice::from_ref(&sge)),
        flags: SendFlags::default(),
    };
    let now = p.net.now;
    let e = p.engine(A);
    let bad_va = SendWr {
        op: SendOp::FetchAdd {
            remote: Remote {
                va: 0x1003,
                rkey: 1,
            },
            add: 1,
        },
        ..wr
    };
    assert!(matches!(
        e.post_send(now, qpn, &bad_va),
        Err(VerbsError::AtomicAlignment { va: 0x1003 })
    ));
    e.post_send(now, qpn, &wr).unwrap();
    e.post_send(now, qpn, &wr).unwrap();
    assert!(matches!(
        e.post_send(now, qpn, &wr),
        Err(VerbsError::QueueFull { depth: 2, .. })
    ));
    assert!(matches!(
        e.modify_qp(
            now,
            qpn,
            &QpAttr {
                state: Some(QpState::Rtr),
                ..Default::default()
            }
        ),
        Err(VerbsError::InvalidTransition { .. })
    ));
    assert!(matches!(
        e.modify_qp(
            now,
            qpn,
            &QpAttr {
                retry_cnt: Some(8),
                ..Default::default()
            }
        ),
        Err(VerbsError::UnexpectedAttr { .. })
    ));
    assert!(matches!(
        e.post_send(now, 0x999, &wr),
        Err(VerbsError::NoSuchQp(0x999))
    ));
}

#[test]
fn a_middle_packet_without_a_first_is_an_invalid_request() {
    // A peer that breaks the opcode sequence (IBA 9.8.3): craft SEND_MIDDLE at the
    // expected PSN and deliver it to B's engine directly.
    let mut p = Pair::new(Opts::default());
    p.post_recv(B, 7, 0, 4096);
    let r = RoceRepr {
        payload_len: 1024,
        ..p.request(op::RC_SEND_MIDDLE, 256, 0)
    };
    p.inject(&r, &[0u8; 1024]);
    let nak = p.transmit(B).expect("a NAK");
    assert_eq!(
        nak.aeth.unwrap().syndrome,
        roce_emu::wire::Syndrome::Nak(roce_emu::wire::NakCode::InvalidRequest)
    );
    assert_eq!(p.state(B), QpState::Err);
    assert_eq!(statuses(&p.completions(B)), [(7, WcStatus::WrFlushErr)]);
}

/// A request with a reserved RC opcode (0x1f): its BTH passes the header checks, the
/// responder cannot execute it: at the expected PSN a NAK Invalid Request and the QP to
/// ERR (IBA 9.9, responder class C: unsupported or reserved opcode;
/// spec/invalid/reserved_opcode.rc). Ahead of the expected PSN it is an ordinary gap
/// (one sequence NAK); behind it, a duplicate, dropped. rxe drops it silently (no
/// opcode-table entry).
#[test]
fn a_reserved_opcode_is_an_invalid_request() {
    let reserved = |p: &Pair, psn: u32| {
        let r = RoceRepr {
            payload_len: 4,
            ..p.request(op::RC_SEND_ONLY, psn, 0)
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf, &[1, 2, 3, 4]).unwrap();
        buf[0] = 0x1f;
        buf
    };
    let mut p = Pair::new(Opts::default());
    p.post_recv(B, 7, 0, 4096);
    // Behind: dropped. Ahead: one sequence NAK for 256.
    let b = reserved(&p, 255);
    p.inject_bytes(b);
    assert!(p.transmit(B).is_none(), "a duplicate is dropped");
    let b = reserved(&p, 258);
    p.inject_bytes(b);
    let nak = p.transmit(B).expect("a sequence NAK");
    assert_eq!(nak.bth.psn.value(), 256);
    assert_eq!(
        nak.aeth.unwrap().syndrome,
        roce_emu::wire::Syndrome::Nak(roce_emu::wire::NakCode::PsnSequenceError)
    );
    assert_eq!(p.state(B), QpState::Rts);
    // At the expected PSN: NAK Invalid Request, QP to ERR, the receive flushed.
    let b = reserved(&p, 256);
    p.inject_bytes(b);
    let nak = p.transmit(B).expect("a NAK");
    assert_eq!(nak.bth.psn.value(), 256);
    assert_eq!(
        nak.aeth.unwrap().syndrome,
        roce_emu::wire::Syndrome::Nak(roce_emu::wire::NakCode::InvalidRequest)
    );
    assert_eq!(p.state(B), QpState::Err);
    assert_eq!(statuses(&p.completions(B)), [(7, WcStatus::WrFlushErr)]);
}
