//! BIND_MW, LOCAL_INV and SEND with Invalidate of type 2 windows between two engines on
//! the simulated wire.

use crate::engine::{
    Completion, Local, QpCap, QpState, RecvWr, Remote, SendFlags, SendOp, SendWr, WcOpcode,
    WcStatus,
};
use crate::mem::{Access, Lkey, MwBind, MwState, MwType, Sge};
use crate::sim::direct::{connect, rc_end_with, RcEnd, RcEndOpts, RcParams};
use crate::sim::rule::DropNth;
use crate::sim::Net;
use crate::wire::Psn;

/// Two connected RC QPs (A = node 0, B = node 1), buffers of 4 KiB with every right.
fn pair() -> (Net, [RcEnd; 2]) {
    let mut net = Net::new(2);
    let end = |net: &mut Net, n: usize| {
        let o = RcEndOpts {
            cq_depth: 64,
            sq_sig_all: true,
            mr_access: Access::ALL | Access::MW_BIND,
            ..RcEndOpts::new(0x1000_0000 * (n as u64 + 1), 4096, QpCap::default())
        };
        rc_end_with(&mut net.nodes[n].engine, &o).unwrap()
    };
    let s = [end(&mut net, 0), end(&mut net, 1)];
    for (me, peer) in [(0, 1), (1, 0)] {
        let ip = net.nodes[peer].ip;
        let psn = Psn::new(0x100);
        let p = RcParams::default();
        connect(
            &mut net.nodes[me].engine,
            s[me].qpn,
            ip,
            s[peer].qpn,
            psn,
            psn,
            &p,
        )
        .unwrap();
    }
    (net, s)
}

fn post(net: &mut Net, node: usize, qpn: u32, wr_id: u64, op: SendOp, sges: &[Sge]) {
    let wr = SendWr {
        wr_id,
        op,
        local: Local::Sges(sges),
        flags: SendFlags::default(),
    };
    let now = net.now;
    net.nodes[node].engine.post_send(now, qpn, &wr).unwrap();
}

fn poll(net: &mut Net, node: usize, cq: u32) -> Vec<Completion> {
    let mut c = [Completion::default(); 16];
    let n = net.nodes[node].engine.poll_cq(cq, &mut c).unwrap();
    c[..n].to_vec()
}

fn bind_op(mw_rkey: u32, new_key: u8, mr: Lkey, va: u64, length: u64) -> SendOp {
    SendOp::BindMw {
        mw_rkey,
        new_rkey: (mw_rkey & !0xff) | u32::from(new_key),
        bind: MwBind {
            mr_lkey: mr,
            va,
            length,
            access: Access::REMOTE_WRITE | Access::REMOTE_READ,
            zero_based: false,
        },
    }
}

/// B binds a type 2 window onto bytes [0x100, 0x200) of its buffer; A WRITEs through it
/// (the bytes land there), then SENDs with Invalidate naming it (B's receive completion
/// carries the key and the window is free), then WRITEs again: refused, nothing lands.
#[test]
fn bind_write_send_with_invalidate_then_refused() {
    let (mut net, s) = pair();
    let mw = net.nodes[1]
        .engine
        .mem()
        .alloc_mw(s[1].pd, MwType::Type2)
        .unwrap();
    let old = mw.rkey().0;
    let op = bind_op(
        old,
        old as u8 ^ 0x5a,
        s[1].lkey(),
        s[1].iova() + 0x100,
        0x100,
    );
    post(&mut net, 1, s[1].qpn, 7, op, &[]);
    net.run_idle(10_000).unwrap();
    let c = poll(&mut net, 1, s[1].cq);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].opcode),
        (7, WcStatus::Success, WcOpcode::BindMw)
    );
    let rkey = mw.rkey().0;
    assert_eq!(rkey, (old & !0xff) | u32::from(old as u8 ^ 0x5a));
    assert_eq!(mw.qpn(), Some(s[1].qpn));

    s[0].mr.fill(0xab);
    let write = |va| SendOp::Write {
        remote: Remote { va, rkey },
    };
    post(
        &mut net,
        0,
        s[0].qpn,
        1,
        write(s[1].iova() + 0x1f0),
        &[s[0].sge(0, 16)],
    );
    net.run_idle(10_000).unwrap();
    let c = poll(&mut net, 0, s[0].cq);
    assert_eq!(c[0].status, WcStatus::Success);
    s[1].mr.with_bytes(|b| {
        assert!(b[0x1f0..0x200].iter().all(|&x| x == 0xab));
        assert!(b[..0x1f0].iter().chain(&b[0x200..]).all(|&x| x == 0));
    });

    // SEND with Invalidate of the window.
    let now = net.now;
    let sge = [s[1].sge(0x800, 64)];
    let rwr = RecvWr {
        wr_id: 9,
        sges: &sge,
    };
    net.nodes[1].engine.post_recv(now, s[1].qpn, &rwr).unwrap();
    post(
        &mut net,
        0,
        s[0].qpn,
        2,
        SendOp::SendWithInv { rkey },
        &[s[0].sge(0, 8)],
    );
    net.run_idle(10_000).unwrap();
    assert_eq!(poll(&mut net, 0, s[0].cq)[0].status, WcStatus::Success);
    let c = poll(&mut net, 1, s[1].cq);
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].opcode),
        (9, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(c[0].invalidated_rkey, Some(rkey));
    assert_eq!(mw.state(), MwState::Free);
    assert_eq!(s[1].mr.windows(), 0);

    // The key is dead: the WRITE is refused and no byte changes.
    s[0].mr.fill(0xcd);
    post(
        &mut net,
        0,
        s[0].qpn,
        3,
        write(s[1].iova() + 0x100),
        &[s[0].sge(0, 16)],
    );
    net.run_idle(100_000).unwrap();
    let c = poll(&mut net, 0, s[0].cq);
    assert_eq!(c[0].status, WcStatus::RemAccessErr);
    s[1].mr.with_bytes(|b| assert!(!b.contains(&0xcd)));
}

/// A WRITE one byte past the window (inside the region) is refused: the window, not
/// the region, bounds the peer.
#[test]
fn window_range_not_region_range() {
    let (mut net, s) = pair();
    let mw = net.nodes[1]
        .engine
        .mem()
        .alloc_mw(s[1].pd, MwType::Type2)
        .unwrap();
    let old = mw.rkey().0;
    let op = bind_op(old, old as u8 ^ 1, s[1].lkey(), s[1].iova() + 0x100, 0x100);
    post(&mut net, 1, s[1].qpn, 7, op, &[]);
    net.run_idle(10_000).unwrap();
    poll(&mut net, 1, s[1].cq);
    s[0].mr.fill(0xab);
    let remote = Remote {
        va: s[1].iova() + 0x1f1,
        rkey: mw.rkey().0,
    };
    post(
        &mut net,
        0,
        s[0].qpn,
        1,
        SendOp::Write { remote },
        &[s[0].sge(0, 16)],
    );
    net.run_idle(100_000).unwrap();
    assert_eq!(poll(&mut net, 0, s[0].cq)[0].status, WcStatus::RemAccessErr);
    s[1].mr.with_bytes(|b| assert!(b.iter().all(|&x| x == 0)));
}

/// LOCAL_INV frees the window (completion LocalInv); A's READ through it is refused.
/// Local operations complete in send-queue order: B's WRITE to A, posted before the
/// bind, completes first although the bind needs no packet.
#[test]
fn local_invalidate_and_order() {
    let (mut net, s) = pair();
    let mw = net.nodes[1]
        .engine
        .mem()
        .alloc_mw(s[1].pd, MwType::Type2)
        .unwrap();
    let old = mw.rkey().0;
    let remote = s[0].remote(0);
    post(
        &mut net,
        1,
        s[1].qpn,
        1,
        SendOp::Write { remote },
        &[s[1].sge(0, 8)],
    );
    let op = bind_op(old, old as u8 ^ 2, s[1].lkey(), s[1].iova(), 4096);
    post(&mut net, 1, s[1].qpn, 2, op, &[]);
    let rkey = (old & !0xff) | u32::from(old as u8 ^ 2);
    post(&mut net, 1, s[1].qpn, 3, SendOp::LocalInv { rkey }, &[]);
    net.run_idle(10_000).unwrap();
    let c = poll(&mut net, 1, s[1].cq);
    let got: Vec<_> = c.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::BindMw),
            (3, WcStatus::Success, WcOpcode::LocalInv),
        ]
    );
    assert_eq!(mw.state(), MwState::Free);
    let remote = Remote {
        va: s[1].iova(),
        rkey,
    };
    post(
        &mut net,
        0,
        s[0].qpn,
        4,
        SendOp::Read { remote },
        &[s[0].sge(0, 8)],
    );
    net.run_idle(100_000).unwrap();
    assert_eq!(poll(&mut net, 0, s[0].cq)[0].status, WcStatus::RemAccessErr);
}

/// A refused bind (the window is not free: bound already) completes with MW_BIND_ERR,
/// the QP goes to ERR and what follows is flushed.
#[test]
fn refused_bind_fails_the_qp() {
    let (mut net, s) = pair();
    let mw = net.nodes[1]
        .engine
        .mem()
        .alloc_mw(s[1].pd, MwType::Type2)
        .unwrap();
    let old = mw.rkey().0;
    post(
        &mut net,
        1,
        s[1].qpn,
        1,
        bind_op(old, 3, s[1].lkey(), s[1].iova(), 64),
        &[],
    );
    net.run_idle(10_000).unwrap();
    let new = mw.rkey().0;
    // Bound: a second bind of a type 2 window is refused (o10-37.2.30).
    post(
        &mut net,
        1,
        s[1].qpn,
        2,
        bind_op(new, 4, s[1].lkey(), s[1].iova(), 64),
        &[],
    );
    post(
        &mut net,
        1,
        s[1].qpn,
        3,
        SendOp::LocalInv { rkey: new },
        &[],
    );
    net.run_idle(10_000).unwrap();
    let c = poll(&mut net, 1, s[1].cq);
    let got: Vec<_> = c.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success, WcOpcode::BindMw),
            (2, WcStatus::MwBindErr, WcOpcode::BindMw),
            (3, WcStatus::WrFlushErr, WcOpcode::LocalInv),
        ]
    );
    assert_eq!(net.nodes[1].engine.qps[&s[1].qpn].qp.state, QpState::Err);
    assert_eq!(mw.rkey().0, new, "the refused bind changed nothing");
}

/// A go-back-N retry over an executed bind does not execute it again: B's WRITE is lost,
/// the bind behind it is done, the SEND after it draws a sequence NAK; the retry resends
/// the WRITE and the SEND and passes over the bind, and all three succeed in order.
#[test]
fn a_retry_passes_over_an_executed_bind() {
    let (mut net, s) = pair();
    let mw = net.nodes[1]
        .engine
        .mem()
        .alloc_mw(s[1].pd, MwType::Type2)
        .unwrap();
    let old = mw.rkey().0;
    let now = net.now;
    let sge = [s[0].sge(0x800, 64)];
    let rwr = RecvWr {
        wr_id: 50,
        sges: &sge,
    };
    net.nodes[0].engine.post_recv(now, s[0].qpn, &rwr).unwrap();
    net.add_rule(1, 0, DropNth::new(&[1]));
    let remote = s[0].remote(0);
    post(
        &mut net,
        1,
        s[1].qpn,
        1,
        SendOp::Write { remote },
        &[s[1].sge(0, 8)],
    );
    post(
        &mut net,
        1,
        s[1].qpn,
        2,
        bind_op(old, 9, s[1].lkey(), s[1].iova(), 64),
        &[],
    );
    post(&mut net, 1, s[1].qpn, 3, SendOp::Send, &[s[1].sge(0, 8)]);
    net.run_idle(100_000).unwrap();
    let c = poll(&mut net, 1, s[1].cq);
    let got: Vec<_> = c.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::BindMw),
            (3, WcStatus::Success, WcOpcode::Send),
        ]
    );
    assert_eq!(mw.state(), MwState::Valid);
    assert_eq!(s[1].mr.windows(), 1);
}

/// Destroying the QP a type 2 window is bound to frees the window: its key dies with the
/// QP (a later QP with the same QPN cannot use it) and the region can be deregistered.
#[test]
fn destroying_the_qp_frees_its_type2_windows() {
    let (mut net, s) = pair();
    let mw = net.nodes[1]
        .engine
        .mem()
        .alloc_mw(s[1].pd, MwType::Type2)
        .unwrap();
    let old = mw.rkey().0;
    post(
        &mut net,
        1,
        s[1].qpn,
        1,
        bind_op(old, 5, s[1].lkey(), s[1].iova(), 64),
        &[],
    );
    net.run_idle(10_000).unwrap();
    assert_eq!((mw.state(), s[1].mr.windows()), (MwState::Valid, 1));
    net.nodes[1].engine.destroy_qp(s[1].qpn).unwrap();
    assert_eq!((mw.state(), s[1].mr.windows()), (MwState::Free, 0));
    assert_eq!(mw.qpn(), None);
    net.nodes[1].engine.mem().dereg_mr(s[1].lkey()).unwrap();
}
