//! Protocol defects an adversarial review found, one test each (plus the ones it only
//! suspected). Each test failed on the code before its fix; the comments say what the
//! IBA or rxe asks for.

mod common;

use common::rc::{Opts, Pair};
use roce_emu::engine::*;
use roce_emu::mem::{Access, Sge};

const A: usize = 0;
const B: usize = 1;

fn statuses(c: &[Completion]) -> Vec<(u64, WcStatus)> {
    c.iter().map(|c| (c.wr_id, c.status)).collect()
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

/// The rule does not stop a legitimate invalidation: a region with a remote right is
/// still invalidated (tests/sim_scenarios.rs covers the full flow).
#[test]
fn send_with_invalidate_still_invalidates_a_remote_region() {
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
    assert!(!rr.is_valid());
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
    let rb = p.completions(B);
    assert_eq!(statuses(&rb), [(7, WcStatus::Success)]);
    assert_eq!(rb[0].invalidated_rkey, Some(rr.rkey().0));
}
