//! The engine's own bookkeeping: handle allocation, the ready set and the timer heap.

use super::*;
use crate::mem::{Access, Pd};
use crate::wire::bth::QPN_MASK;
use std::net::{IpAddr, Ipv4Addr};

fn ip(x: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 18, 0, x))
}

fn engine(x: u8) -> Engine {
    Engine::new(EngineConfig::new(ip(x)), Arc::new(MrTable::new()))
}

fn init(pd: Pd, cq: u32) -> QpInit {
    QpInit {
        qp_type: QpType::Rc,
        pd,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap::default(),
        sq_sig_all: false,
    }
}

/// An engine with one PD and one CQ.
fn bare() -> (Engine, Pd, u32) {
    let mut e = engine(1);
    let pd = e.mem().alloc_pd();
    let cq = e.create_cq(16).unwrap();
    (e, pd, cq)
}

#[test]
fn ids_skip_numbers_in_use_wrap_and_run_out() {
    let mut ids = Ids {
        next: 4,
        lo: 2,
        hi: 5,
    };
    let used = [3u32, 4];
    let free = |n: u32| used.contains(&n);
    assert_eq!(ids.alloc(2, free), Some(5));
    // Past `hi` it goes back to `lo`, never below it.
    assert_eq!(ids.alloc(2, free), Some(2));
    assert_eq!(ids.alloc(2, free), Some(5));
    let all = |_| true;
    assert_eq!(ids.alloc(4, all), None);
}

#[test]
fn qpn_wrap_never_replaces_a_live_qp_nor_hands_out_0_or_1() {
    let (mut e, pd, cq) = bare();
    let a = e.create_qp(&init(pd, cq)).unwrap();
    assert_eq!(a, FIRST_QPN);
    e.modify_qp(a, &QpAttr::init(Access::REMOTE_WRITE)).unwrap();
    // The counter at the top of the 24-bit space: the next ones wrap past 0 and 1.
    e.qpns.next = QPN_MASK;
    let b = e.create_qp(&init(pd, cq)).unwrap();
    assert_eq!(b, QPN_MASK);
    let c = e.create_qp(&init(pd, cq)).unwrap();
    assert_eq!(c, 2, "0 and 1 are the special QPs");
    // Around again to the live QP A: it is skipped, not replaced.
    e.qpns.next = FIRST_QPN;
    let d = e.create_qp(&init(pd, cq)).unwrap();
    assert_eq!(d, FIRST_QPN + 1);
    assert_eq!(e.qp(a).unwrap().state, QpState::Init);
    assert_eq!(e.qp(d).unwrap().state, QpState::Reset);
    // A number frees when its QP goes, and is handed out again.
    e.destroy_qp(b).unwrap();
    e.qpns.next = QPN_MASK - 1;
    let f = e.create_qp(&init(pd, cq)).unwrap();
    let g = e.create_qp(&init(pd, cq)).unwrap();
    let h = e.create_qp(&init(pd, cq)).unwrap();
    assert_eq!([f, g, h], [QPN_MASK - 1, QPN_MASK, 3]);
    assert_eq!(e.qps.len(), 6);
}

#[test]
fn qpns_run_out_with_an_error_and_come_back() {
    let (mut e, pd, cq) = bare();
    // A space of three numbers stands for the 2^24 - 2 real ones.
    e.qpns = Ids {
        next: 2,
        lo: 2,
        hi: 4,
    };
    let q: Vec<u32> = (0..3)
        .map(|_| e.create_qp(&init(pd, cq)).unwrap())
        .collect();
    assert_eq!(q, [2, 3, 4]);
    assert_eq!(e.create_qp(&init(pd, cq)), Err(VerbsError::NoFreeQpn));
    e.destroy_qp(3).unwrap();
    assert_eq!(e.create_qp(&init(pd, cq)), Ok(3));
    assert_eq!(e.create_qp(&init(pd, cq)), Err(VerbsError::NoFreeQpn));
}

#[test]
fn cq_handles_wrap_past_live_ones_and_run_out() {
    let (mut e, _pd, first) = bare();
    assert_eq!(first, 1);
    e.cq_ids.next = u32::MAX;
    assert_eq!(e.create_cq(4), Ok(u32::MAX));
    // 0 is never a handle, and 1 is live.
    assert_eq!(e.create_cq(4), Ok(2));
    e.destroy_cq(u32::MAX).unwrap();
    e.cq_ids.next = u32::MAX - 1;
    assert_eq!(e.create_cq(4), Ok(u32::MAX - 1));
    assert_eq!(e.create_cq(4), Ok(u32::MAX));
    assert_eq!(e.create_cq(4), Ok(3));
    // A small space stands for the 2^32 - 1 handles: 1, 2 and 3 live in it.
    e.destroy_cq(u32::MAX - 1).unwrap();
    e.destroy_cq(u32::MAX).unwrap();
    e.cq_ids = Ids {
        next: 1,
        lo: 1,
        hi: 5,
    };
    assert_eq!(e.create_cq(4), Ok(4));
    assert_eq!(e.create_cq(4), Ok(5));
    assert_eq!(e.create_cq(4), Err(VerbsError::NoFreeCq));
    e.destroy_cq(2).unwrap();
    assert_eq!(e.create_cq(4), Ok(2));
}

#[test]
fn destroy_cq_names_the_lowest_qp_still_using_it() {
    let (mut e, pd, cq) = bare();
    let other = e.create_cq(16).unwrap();
    let a = e.create_qp(&init(pd, other)).unwrap();
    let b = e
        .create_qp(&QpInit {
            recv_cq: cq,
            ..init(pd, other)
        })
        .unwrap();
    let c = e.create_qp(&init(pd, cq)).unwrap();
    assert_eq!(e.destroy_cq(cq), Err(VerbsError::CqInUse { cq, qpn: b }));
    e.destroy_qp(b).unwrap();
    assert_eq!(e.destroy_cq(cq), Err(VerbsError::CqInUse { cq, qpn: c }));
    e.destroy_qp(c).unwrap();
    assert_eq!(e.destroy_cq(cq), Ok(()));
    assert_eq!(
        e.destroy_cq(other),
        Err(VerbsError::CqInUse { cq: other, qpn: a })
    );
}
