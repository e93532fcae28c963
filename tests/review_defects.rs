//! Protocol defects an adversarial review found, one test each (plus the ones it only
//! suspected). Each test failed on the code before its fix; the comments say what the
//! IBA or rxe asks for.

mod common;

use common::rc::{pattern, pick, signaled, statuses, Opts, Pair};
use roce_emu::engine::*;
use roce_emu::mem::{Access, Sge};
use roce_emu::sim::rule::{DropIf, Verdict};
use roce_emu::wire::opcode::op;
use roce_emu::wire::{AtomicEthRepr, NakCode, Opcode, RethRepr, RoceRepr, Syndrome};

const A: usize = 0;
const B: usize = 1;

fn syndromes(rs: &[RoceRepr]) -> Vec<(u32, Syndrome)> {
    rs.iter()
        .filter_map(|r| r.aeth.map(|a| (r.bth.psn.value(), a.syndrome)))
        .collect()
}

// ---- (a) ------------------------------------------------------------------------------

/// IBA 10.6.7.2 (Send with Invalidate) lets a peer invalidate only what it could reach:
/// a region it holds an R_Key for, one registered with remote access rights (memory
/// windows later). A receive buffer registered LOCAL_WRITE only is the responder's own
/// business; before the fix a peer could invalidate it and the next receive into it
/// failed with LOC_PROT_ERR. Now the invalidation is refused like an unusable R_Key: NAK
/// Remote Access Error (an R_Key violation, rxe `invalidate_rkey` failing ->
/// RESPST_ERR_INVALIDATE_RKEY), the receive WQE completes in error with rxe's status
/// (REM_INV_REQ_ERR) and the QP goes to ERR. The region stays valid.
#[test]
fn send_with_invalidate_cannot_invalidate_a_local_only_region() {
    let mut p = Pair::new(Opts::default());
    let lo = p.reg_mr(B, 0x7000_0000, 4096, Access::LOCAL_WRITE);
    p.post_recv(B, 7, 0, 64);
    let sge = Sge {
        addr: lo.iova(),
        length: 64,
        lkey: lo.lkey(),
    };
    p.try_post_recv_sges(B, 8, &[sge]).unwrap();
    p.send(A, 1, SendOp::SendWithInv { rkey: lo.rkey().0 }, 0, 16);
    p.send(A, 2, SendOp::Send, 0, 16);
    p.settle();
    p.print_packets();
    assert!(
        lo.is_valid(),
        "a local-only region was invalidated remotely"
    );
    let fl = p.flow();
    assert!(
        fl.contains(&"B>A RC_ACKNOWLEDGE 0x100 NAK acc".to_string()),
        "{fl:?}"
    );
    assert_eq!(
        statuses(&p.completions(A)),
        [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        statuses(&p.completions(B)),
        [(7, WcStatus::RemInvReqErr), (8, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.state(B), QpState::Err);
}

/// Nor a region with remote rights: a peer may invalidate only a memory window or a
/// fast-registered region (IBA 10.6.7.2), and a region from Register Memory Region is
/// neither (rxe: `rxe_invalidate_mr` refuses a user region). The conformance script
/// spec/inval/send_inv_plain_mr.rc found roce-emu invalidating it.
#[test]
fn send_with_invalidate_cannot_invalidate_a_registered_remote_region_either() {
    let mut p = Pair::new(Opts::default());
    let rr = p.reg_mr(
        B,
        0x7000_0000,
        4096,
        Access::LOCAL_WRITE | Access::REMOTE_READ,
    );
    p.post_recv(B, 7, 0, 64);
    p.send(A, 1, SendOp::SendWithInv { rkey: rr.rkey().0 }, 0, 16);
    p.settle();
    assert!(
        rr.is_valid(),
        "a registered region was invalidated remotely"
    );
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::RemAccessErr)]);
    assert_eq!(statuses(&p.completions(B)), [(7, WcStatus::RemInvReqErr)]);
    assert_eq!(p.state(B), QpState::Err);
}

// ---- (b) ------------------------------------------------------------------------------

fn word_at(p: &Pair, which: usize, off: u64) -> u64 {
    u64::from_ne_bytes(p.read_mem(which, off, 8).try_into().unwrap())
}

/// An SGE over `which`'s buffer whose L_Key has a wrong key byte: LOC_PROT_ERR.
fn bad_sge(p: &Pair, which: usize) -> Sge {
    let mut s = p.end(which).sge(0, 16);
    s.lkey = roce_emu::mem::Lkey(s.lkey.0 ^ 0xff);
    s
}

fn bad_remote(p: &Pair) -> Remote {
    let mut r = p.end(B).remote(0x2000);
    r.rkey ^= 0xff;
    r
}

/// IBA 9.7.5.1 / C9-28: responses leave in PSN order, and an error NAK for a later
/// request does not undo an earlier READ or atomic the responder executed: its response
/// is still owed. Before the fix, the responder's QP entering ERR on the WRITE's bad
/// R_Key threw away the queued atomic ACK (`keep_only_naks`) and the requester completed
/// the *atomic* with REM_ACCESS_ERR although it had been applied.
#[test]
fn atomic_before_a_bad_write_completes_with_its_original_value() {
    let mut p = Pair::new(Opts::default());
    p.write_mem(B, 0x100, &41u64.to_ne_bytes());
    let remote = p.end(B).remote(0x100);
    p.send(A, 1, SendOp::FetchAdd { remote, add: 1 }, 0x800, 8);
    let remote = bad_remote(&p);
    p.send(A, 2, SendOp::Write { remote }, 0, 64);
    p.settle();
    p.print_packets();
    assert_eq!(word_at(&p, B, 0x100), 42, "the atomic was applied once");
    assert_eq!(
        statuses(&p.completions(A)),
        [(1, WcStatus::Success), (2, WcStatus::RemAccessErr)]
    );
    assert_eq!(word_at(&p, A, 0x800), 41, "the original value came back");
}

/// The same with a READ before the bad WRITE: every READ response goes out first.
#[test]
fn read_before_a_bad_write_completes_with_its_bytes() {
    let mut p = Pair::new(Opts::default());
    p.write_mem(B, 0x4000, &pattern(9, 3000));
    let remote = p.end(B).remote(0x4000);
    p.send(A, 1, SendOp::Read { remote }, 0x10000, 3000);
    let remote = bad_remote(&p);
    p.send(A, 2, SendOp::Write { remote }, 0, 64);
    p.settle();
    p.print_packets();
    assert_eq!(
        statuses(&p.completions(A)),
        [(1, WcStatus::Success), (2, WcStatus::RemAccessErr)]
    );
    assert_eq!(p.read_mem(A, 0x10000, 3000), pattern(9, 3000));
}

/// A NAK completes only the WQE whose PSN it names (rxe `check_psn`: a response past the
/// head WQE's last PSN, with a READ/atomic at the head, means that WQE's response was
/// lost: COMPST_ERROR_RETRY). Here the atomic ACK is lost and the WRITE's NAK arrives
/// with the atomic at the head. Before the fix the atomic completed REM_ACCESS_ERR (it
/// was applied!). Now the requester retries the atomic; the responder, in ERR, answers
/// nothing more, so the atomic ends RETRY_EXC_ERR ("outcome unknown"), never a
/// remote access error, and the WRITE is flushed behind it.
#[test]
fn a_nak_past_an_unanswered_atomic_retries_it_instead_of_failing_it() {
    let mut p = Pair::new(Opts {
        timeout: 8,
        retry_cnt: 2,
        ..Opts::default()
    });
    p.write_mem(B, 0x100, &41u64.to_ne_bytes());
    let remote = p.end(B).remote(0x100);
    let atomic = (SendOp::FetchAdd { remote, add: 1 }, 0x800, 8);
    retried_not_failed(&mut p, op::RC_ATOMIC_ACKNOWLEDGE, atomic, op::RC_FETCH_ADD);
    assert_eq!(word_at(&p, B, 0x100), 42);
}

/// A's request `(op, local offset, length)` loses its first `lost` response, then a WRITE
/// with a bad R_Key draws a NAK while it is at the head: it must be retried (`request`
/// goes out again) and end RETRY_EXC_ERR, the WRITE flushed behind it.
fn retried_not_failed(p: &mut Pair, lost: Opcode, first: (SendOp, u64, u32), request: Opcode) {
    p.net.add_rule(B, A, pick(lost, &[1], Verdict::Drop));
    p.send(A, 1, first.0, first.1, first.2);
    let remote = bad_remote(p);
    p.send(A, 2, SendOp::Write { remote }, 0, 64);
    p.settle();
    p.print_packets();
    let sent = p.packets().iter().filter(|k| k.opcode == request).count();
    assert!(sent >= 2, "{request} was not retried");
    assert_eq!(
        statuses(&p.completions(A)),
        [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
}

/// The READ flavour: the READ's last response is lost, the WRITE's NAK arrives with the
/// READ at the head. The READ is retried, not failed with the WRITE's error.
#[test]
fn a_nak_past_an_unfinished_read_retries_it_instead_of_failing_it() {
    let mut p = Pair::new(Opts {
        timeout: 8,
        retry_cnt: 2,
        ..Opts::default()
    });
    let remote = p.end(B).remote(0x4000);
    let read = (SendOp::Read { remote }, 0x10000, 3000);
    let lost = op::RC_RDMA_READ_RESPONSE_LAST;
    retried_not_failed(&mut p, lost, read, op::RC_RDMA_READ_REQUEST);
}

// ---- (c) ------------------------------------------------------------------------------

/// B received a SEND and owes its ACK; before B transmits, its own next request fails
/// locally (bad L_Key: LOC_PROT_ERR, IBA 10.8.3.1) and the QP goes to ERR. The SEND was
/// delivered and completed at B, so its ACK must still go out (IBA 9.7.5.1: every
/// request executed is acknowledged); before the fix the ACK was dropped on entering ERR
/// and A timed out with RETRY_EXC_ERR for a message that had arrived.
#[test]
fn an_ack_owed_before_a_local_error_still_goes_out() {
    let mut p = Pair::new(Opts {
        timeout: 8,
        retry_cnt: 1,
        ..Opts::default()
    });
    p.post_recv(B, 7, 0, 64);
    p.send(A, 1, SendOp::Send, 0, 32);
    // Hand A's SEND to B directly so that B's bad WR can be posted before B transmits.
    let now = p.net.now;
    let mut buf = vec![0u8; roce_emu::sim::MAX_PACKET];
    let t = p.engine(A).poll_transmit(now, &mut buf).expect("the SEND");
    p.engine(B).handle_datagram(
        now,
        Datagram {
            src: t.src,
            dst: t.dst,
            ipv4_id: Some(0),
            ecn: roce_emu::wire::Ecn::NotEct,
            data: &buf[..t.len],
        },
    );
    let bad = bad_sge(&p, B);
    p.post_sges(B, 9, SendOp::Send, &[bad]);
    p.settle();
    p.print_packets();
    assert_eq!(p.state(B), QpState::Err);
    assert_eq!(
        statuses(&p.completions(B)),
        [(7, WcStatus::Success), (9, WcStatus::LocProtErr)]
    );
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
}

// ---- (d) ------------------------------------------------------------------------------

fn sqd_sqd(p: &mut Pair, which: usize, attr: QpAttr) {
    p.modify(
        which,
        &QpAttr {
            state: Some(QpState::Sqd),
            ..Default::default()
        },
    )
    .unwrap();
    p.modify(
        which,
        &QpAttr {
            state: Some(QpState::Sqd),
            ..attr
        },
    )
    .unwrap();
    p.modify(
        which,
        &QpAttr {
            state: Some(QpState::Rts),
            ..Default::default()
        },
    )
    .unwrap();
}

/// max_dest_rd_atomic raised in SQD -> SQD (IBA 11.2.4.2 allows it there) must give the
/// responder that many replay entries (rxe `rxe_qp_from_attr` reallocates its
/// resources). Before the fix the ring kept its first size (1): with 4 READs in flight, a
/// lost response of the first made its retried READ unanswerable and A ran out of retries.
#[test]
fn raising_max_dest_rd_atomic_in_sqd_grows_the_replay_ring() {
    let mut p = Pair::new(Opts {
        max_rd_atomic: 1,
        timeout: 8,
        retry_cnt: 3,
        ..Opts::default()
    });
    sqd_sqd(
        &mut p,
        B,
        QpAttr {
            max_dest_rd_atomic: Some(4),
            ..Default::default()
        },
    );
    sqd_sqd(
        &mut p,
        A,
        QpAttr {
            max_rd_atomic: Some(4),
            ..Default::default()
        },
    );
    p.write_mem(B, 0x4000, &pattern(3, 256));
    p.net.add_rule(
        B,
        A,
        pick(op::RC_RDMA_READ_RESPONSE_ONLY, &[1], Verdict::Drop),
    );
    for i in 0..4u64 {
        let remote = p.end(B).remote(0x4000 + 64 * i);
        p.send(A, i, SendOp::Read { remote }, 0x10000 + 64 * i, 64);
    }
    p.settle();
    p.print_packets();
    assert_eq!(
        statuses(&p.completions(A)),
        (0..4).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(p.counter(B, Counter::DropReplayMissing), 0);
    assert_eq!(p.read_mem(A, 0x10000, 256), pattern(3, 256));
}

// ---- (e) ------------------------------------------------------------------------------

/// max_dest_rd_atomic = 0: the responder takes no READ or atomic (IBA 9.4.4/C9-91; rxe
/// `check_resource`: RESPST_ERR_TOO_MANY_RDMA_ATM_REQ -> NAK Invalid Request). Before the
/// fix 0 was treated as 1 and the READ was served.
#[test]
fn max_dest_rd_atomic_zero_naks_a_read_invalid_request() {
    let mut p = Pair::new(Opts {
        max_rd_atomic: 0,
        ..Opts::default()
    });
    // A may issue one READ; B (max_dest_rd_atomic 0) must refuse it.
    sqd_sqd(
        &mut p,
        A,
        QpAttr {
            max_rd_atomic: Some(1),
            ..Default::default()
        },
    );
    let remote = p.end(B).remote(0);
    p.send(A, 1, SendOp::Read { remote }, 0x10000, 64);
    p.settle();
    p.print_packets();
    assert!(p
        .flow()
        .contains(&"B>A RC_ACKNOWLEDGE 0x100 NAK inv".to_string()));
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::RemInvReqErr)]);
    assert_eq!(p.state(B), QpState::Err);
}

/// max_rd_atomic = 0: the requester may have no READ/atomic outstanding, so it can never
/// issue one (rxe `check_init_depth` would leave it at the head of the SQ forever,
/// blocking everything behind it). Refusing it at post time is the useful reading: the
/// application learns at once (ibv_post_send's EINVAL for a WR the QP cannot execute).
/// Before the fix 0 was treated as 1 and the READ went out.
#[test]
fn max_rd_atomic_zero_refuses_reads_and_atomics_at_post_time() {
    let mut p = Pair::new(Opts {
        max_rd_atomic: 0,
        ..Opts::default()
    });
    let remote = p.end(B).remote(0);
    let r = p.try_send_flags(A, 1, SendOp::Read { remote }, 0x10000, 64, signaled());
    assert!(
        matches!(r, Err(VerbsError::InvalidState { .. })),
        "READ posted: {r:?}"
    );
    let r = p.try_send_flags(
        A,
        2,
        SendOp::FetchAdd { remote, add: 1 },
        0x800,
        8,
        signaled(),
    );
    assert!(matches!(r, Err(VerbsError::InvalidState { .. })), "{r:?}");
    // Other operations are unaffected.
    p.post_recv(B, 7, 0, 64);
    p.send(A, 3, SendOp::Send, 0, 16);
    p.settle();
    assert_eq!(statuses(&p.completions(A)), [(3, WcStatus::Success)]);
    assert!(p
        .packets()
        .iter()
        .all(|k| k.opcode != op::RC_RDMA_READ_REQUEST));
}

// ---- (f) ------------------------------------------------------------------------------

/// A hand-built WRITE_ONLY of `len` bytes of 0xab with pad 1 to B's buffer at 0x100, and
/// what B sends back.
fn write_only_with_pad_1(len: u32) -> (Pair, Vec<RoceRepr>) {
    let mut p = Pair::new(Opts::default());
    let b = p.end(B).remote(0x100);
    let mut r = p.request(op::RC_RDMA_WRITE_ONLY, 0x100, 1);
    r.reth = Some(RethRepr {
        va: b.va,
        rkey: b.rkey,
        dma_len: len,
    });
    r.payload_len = len as usize;
    p.inject(&r, &vec![0xab; len as usize]);
    let out = p.drain(B);
    (p, out)
}

/// IBA 9.2.3 / rxe `check_rkey`: a WRITE packet's payload plus pad is a multiple of 4
/// (pad = -resid & 3 on the last packet, 0 before); anything else is a length error,
/// NAK Invalid Request. Before the fix a WRITE_ONLY of 8 bytes with pad 1 was accepted.
#[test]
fn a_write_whose_pad_breaks_alignment_is_an_invalid_request() {
    let (p, out) = write_only_with_pad_1(8);
    assert_eq!(
        syndromes(&out),
        [(0x100, Syndrome::Nak(NakCode::InvalidRequest))]
    );
    assert_eq!(p.read_mem(B, 0x100, 8), [0; 8], "nothing written");
}

/// The same packet with the right pad (0) is accepted: the check is not overzealous.
#[test]
fn a_write_with_the_right_pad_is_accepted() {
    let (p, out) = write_only_with_pad_1(7);
    assert!(matches!(
        syndromes(&out)[..],
        [(0x100, Syndrome::Ack { .. })]
    ));
    assert_eq!(p.read_mem(B, 0x100, 7), [0xab; 7]);
}

/// rxe `check_keys`/`pkey_match`: P_Keys match on their low 15 bits when either side is a
/// full member; our QP's P_Key is the full-member default 0xffff, so a limited member's
/// 0x7fff is accepted. 0x8000 (partition 0) never matches. Before the fix 0x7fff was
/// dropped as a P_Key mismatch.
#[test]
fn a_limited_member_pkey_is_accepted() {
    let mut p = Pair::new(Opts::default());
    p.post_recv(B, 7, 0, 64);
    let mut r = p.request(op::RC_SEND_ONLY, 0x100, 0);
    r.bth.pkey = 0x7fff;
    r.payload_len = 16;
    p.inject(&r, &[1; 16]);
    assert_eq!(p.counter(B, Counter::DropPkeyMismatch), 0);
    assert_eq!(statuses(&p.completions(B)), [(7, WcStatus::Success)]);
    let mut r = p.request(op::RC_SEND_ONLY, 0x101, 0);
    r.bth.pkey = 0x8000;
    p.inject(&r, &[]);
    assert_eq!(p.counter(B, Counter::DropPkeyMismatch), 1);
}

/// A misaligned atomic with a bad R_Key: the key is checked first (rxe `check_rkey`
/// before `atomic_reply`'s alignment check; MrTable::compare_swap's documented order), so
/// the NAK is Remote Access Error. Before the fix it was Invalid Request.
#[test]
fn a_misaligned_atomic_with_a_bad_rkey_is_a_remote_access_error() {
    let mut p = Pair::new(Opts::default());
    let b = p.end(B).remote(0x104);
    let mut r = p.request(op::RC_FETCH_ADD, 0x100, 0);
    r.atomic_eth = Some(AtomicEthRepr {
        va: b.va,
        rkey: b.rkey ^ 0xff,
        swap_add: 1,
        compare: 0,
    });
    p.inject(&r, &[]);
    assert_eq!(
        syndromes(&p.drain(B)),
        [(0x100, Syndrome::Nak(NakCode::RemoteAccessError))]
    );
    // With a good key the misalignment is what is wrong: Invalid Request.
    let mut p = Pair::new(Opts::default());
    let mut r = p.request(op::RC_FETCH_ADD, 0x100, 0);
    r.atomic_eth = Some(AtomicEthRepr {
        va: b.va,
        rkey: b.rkey,
        swap_add: 1,
        compare: 0,
    });
    p.inject(&r, &[]);
    assert_eq!(
        syndromes(&p.drain(B)),
        [(0x100, Syndrome::Nak(NakCode::InvalidRequest))]
    );
}

// ---- suspected ------------------------------------------------------------------------

/// A RETH DMA length above 2^31 (IBA 9.4.1: messages are at most 2^31 bytes; rxe
/// `check_length`: dmalen > 1 << 31 -> RESPST_ERR_LENGTH) is an Invalid Request, checked
/// before the R_Key, and nothing overflows. Before the fix the (too small) region made
/// it a Remote Access Error.
#[test]
fn a_reth_length_above_2_31_is_an_invalid_request() {
    for (opcode, len) in [
        (op::RC_RDMA_READ_REQUEST, 0x8000_0001u32),
        (op::RC_RDMA_READ_REQUEST, u32::MAX),
        (op::RC_RDMA_WRITE_FIRST, u32::MAX),
    ] {
        let mut p = Pair::new(Opts {
            mtu: Mtu::M256,
            ..Opts::default()
        });
        let b = p.end(B).remote(0);
        let mut r = p.request(opcode, 0x100, 0);
        r.reth = Some(RethRepr {
            va: b.va,
            rkey: b.rkey,
            dma_len: len,
        });
        let payload = if opcode == op::RC_RDMA_WRITE_FIRST {
            vec![0u8; 256]
        } else {
            Vec::new()
        };
        r.payload_len = payload.len();
        p.inject(&r, &payload);
        assert_eq!(
            syndromes(&p.drain(B)),
            [(0x100, Syndrome::Nak(NakCode::InvalidRequest))],
            "{opcode} len {len:#x}"
        );
        assert_eq!(p.state(B), QpState::Err);
    }
}

/// A pair at MTU 256 whose A -> B packets are all lost (only what A sends is looked at).
fn cut_off_at_mtu_256() -> Pair {
    let mut p = Pair::new(Opts {
        mtu: Mtu::M256,
        ..Opts::default()
    });
    p.net.add_rule(A, B, DropIf(|_: &[u8]| true));
    p
}

/// A READ of 2^31 bytes (two SGEs of 2^30 over A's buffer): 2^23 PSNs at MTU 256.
fn post_read_of_2_31_bytes(p: &mut Pair, wr_id: u64) {
    let remote = p.end(B).remote(0);
    let s = p.end(A).sge(0, 1 << 30);
    p.post_sges(A, wr_id, SendOp::Read { remote }, &[s, s]);
}

/// A READ of 2^31 bytes at MTU 256 spans 2^23 PSNs, half the PSN space. Serial PSN
/// arithmetic (IBA 9.7.1) only orders PSNs less than 2^23 apart, so nothing may be sent
/// behind it until its responses have moved the window: before the fix the window check
/// saw the 2^23 distance as negative and sent the next request at once, whose PSN
/// then made the READ's own first responses look like "never sent" to the completer.
#[test]
fn a_read_spanning_2_23_psns_is_sent_alone() {
    let mut p = cut_off_at_mtu_256();
    post_read_of_2_31_bytes(&mut p, 1);
    p.send(A, 2, SendOp::Send, 0, 16);
    let r = p.transmit(A).expect("the READ");
    assert_eq!(r.bth.opcode, op::RC_RDMA_READ_REQUEST);
    assert_eq!(r.reth.unwrap().dma_len, 1 << 31);
    assert!(
        p.transmit(A).is_none(),
        "a request went out 2^23 PSNs after the READ's first"
    );
}

/// The same READ behind a SEND still unacknowledged would end 2^23 + 1 PSNs after the
/// oldest unacknowledged PSN: it waits for the SEND's ACK.
#[test]
fn a_read_spanning_2_23_psns_waits_for_the_window_to_empty() {
    let mut p = cut_off_at_mtu_256();
    p.send(A, 1, SendOp::Send, 0, 16);
    post_read_of_2_31_bytes(&mut p, 2);
    let r = p.transmit(A).expect("the SEND");
    assert_eq!(r.bth.opcode, op::RC_SEND_ONLY);
    assert!(
        p.transmit(A).is_none(),
        "the READ went out with a SEND unacknowledged before it"
    );
}

// ---- found by the error-path property (tests/props_rc.rs) ------------------------------

/// A local protection error on a WR (IBA 10.8.3.1: LOC_PROT_ERR, the QP goes to ERR)
/// must not take down the WRs before it that are already executing remotely: they
/// complete with their true results first, and only then does the failing WR complete
/// and the QP enter ERR (rxe marks the WQE `wqe_state_error` and its completer fails it
/// when it reaches the head). Before the fix the WRITE and the atomic before it were
/// flushed (WR_FLUSH_ERR) although both had been applied.
#[test]
fn a_local_protection_error_waits_for_the_wrs_before_it() {
    let mut p = Pair::new(Opts::default());
    p.write_mem(B, 0x100, &41u64.to_ne_bytes());
    p.write_mem(A, 0, &pattern(2, 64));
    p.send(
        A,
        1,
        SendOp::Write {
            remote: p.end(B).remote(0x4000),
        },
        0,
        64,
    );
    let remote = p.end(B).remote(0x100);
    p.send(A, 2, SendOp::FetchAdd { remote, add: 1 }, 0x800, 8);
    let bad = bad_sge(&p, A);
    p.post_recv(B, 7, 0, 64);
    p.post_sges(A, 3, SendOp::Send, &[bad]);
    p.send(A, 4, SendOp::Send, 0, 16);
    p.settle();
    p.print_packets();
    assert_eq!(
        statuses(&p.completions(A)),
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::LocProtErr),
            (4, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(word_at(&p, A, 0x800), 41);
    assert_eq!(p.read_mem(B, 0x4000, 64), pattern(2, 64));
    assert_eq!(p.state(A), QpState::Err);
}
