//! The engine's own bookkeeping: handle allocation, the ready set and the timer heap.
//! (Unit tests may use the simulator's bring-up and back-to-back wiring, as the
//! responder's do; the engine's code may not.)

use super::*;
use crate::mem::{Access, Pd};
use crate::sim::direct::{connect, rc_end, Direct, RcEnd, RcParams};
use crate::wire::bth::QPN_MASK;
use crate::wire::Psn;
use std::net::{IpAddr, Ipv4Addr};

fn ip(x: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 18, 0, x))
}

fn engine(x: u8) -> Engine {
    Engine::new(EngineConfig::new(ip(x)), Arc::new(MrTable::new()))
}

fn init(pd: Pd, cq: u32) -> QpInit {
    QpInit::rc(pd, cq, QpCap::default())
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
    e.modify_qp(Instant::ZERO, a, &QpAttr::init(Access::REMOTE_WRITE))
        .unwrap();
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
fn qpns_stay_inside_the_configured_range() {
    // A NIC attached to a daemon owns one block of 2^16 QPNs (`daemon::lease`).
    let mut cfg = EngineConfig::new(ip(1));
    cfg.qpn_lo = 0x3_0000;
    cfg.qpn_hi = 0x3_0002;
    cfg.udp_src_port = Some(40_000);
    let mut e = Engine::new(cfg, Arc::new(MrTable::new()));
    let pd = e.mem().alloc_pd();
    let cq = e.create_cq(16).unwrap();
    let q: Vec<u32> = (0..3)
        .map(|_| e.create_qp(&init(pd, cq)).unwrap())
        .collect();
    assert_eq!(
        q,
        [0x3_0000, 0x3_0001, 0x3_0002],
        "from the bottom of the block"
    );
    assert_eq!(e.create_qp(&init(pd, cq)), Err(VerbsError::NoFreeQpn));
    e.destroy_qp(0x3_0001).unwrap();
    assert_eq!(e.create_qp(&init(pd, cq)), Ok(0x3_0001));
    // Every QP sends from the one configured port, before and after it knows its peer.
    assert_eq!(e.qp(0x3_0000).unwrap().src_port, 40_000);
    e.modify_qp(Instant::ZERO, 0x3_0000, &QpAttr::init(Access::REMOTE_WRITE))
        .unwrap();
    let rtr = QpAttr::rtr(ip(2), Mtu::M1024, 0x11, Psn::new(0), 1, 12);
    e.modify_qp(Instant::ZERO, 0x3_0000, &rtr).unwrap();
    assert_eq!(e.qp(0x3_0000).unwrap().src_port, 40_000);
    // Block 0 starts at FIRST_QPN as the default space does, and never hands out 0 or 1.
    let mut cfg = EngineConfig::new(ip(1));
    cfg.qpn_lo = 0;
    cfg.qpn_hi = 0xffff;
    let mut e = Engine::new(cfg, Arc::new(MrTable::new()));
    let pd = e.mem().alloc_pd();
    let cq = e.create_cq(16).unwrap();
    assert_eq!(e.create_qp(&init(pd, cq)), Ok(FIRST_QPN));
    e.qpns.next = 0xffff;
    assert_eq!(e.create_qp(&init(pd, cq)), Ok(0xffff));
    assert_eq!(
        e.create_qp(&init(pd, cq)),
        Ok(2),
        "wraps inside the block, past 0 and 1"
    );
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

/// `n` connected pairs between two engines.
fn pairs(n: usize) -> (Direct, Vec<(RcEnd, RcEnd)>) {
    let (mut a, mut b) = (engine(1), engine(2));
    let mut v = Vec::new();
    for _ in 0..n {
        // A connected QP with its CQ and 64 KiB of memory at 0x1000.
        let ea = rc_end(&mut a, 0x1000, 1 << 16, QpCap::default()).unwrap();
        let eb = rc_end(&mut b, 0x1000, 1 << 16, QpCap::default()).unwrap();
        let p = RcParams::default();
        let (one, two) = (Psn::new(1), Psn::new(2));
        connect(&mut a, ea.qpn, ip(2), eb.qpn, one, two, &p).unwrap();
        connect(&mut b, eb.qpn, ip(1), ea.qpn, two, one, &p).unwrap();
        v.push((ea, eb));
    }
    (Direct::new(a, b), v)
}

fn write(e: &mut Engine, end: &RcEnd, peer: &RcEnd, wr_id: u64) {
    let sge = [end.sge(0, 64)];
    let wr = SendWr {
        wr_id,
        op: SendOp::Write {
            remote: peer.remote(0),
        },
        local: Local::Sges(&sge),
        flags: SendFlags::default(),
    };
    e.post_send(Instant::ZERO, end.qpn, &wr).unwrap();
}

/// The destination QPN of a packet `poll_transmit` wrote.
fn dqpn(buf: &[u8]) -> u32 {
    u32::from_be_bytes([0, buf[5], buf[6], buf[7]])
}

#[test]
fn qps_take_turns_in_qpn_order_from_the_last_one_served() {
    let (mut d, v) = pairs(3);
    let mut buf = vec![0u8; 4096 + 128];
    let t = Instant::from_nanos(1000);
    let mut order = |d: &mut Direct| {
        let mut o = Vec::new();
        while d.a.poll_transmit(t, &mut buf).is_some() {
            o.push(v.iter().position(|(_, b)| b.qpn == dqpn(&buf)).unwrap());
        }
        o
    };
    for (i, (ea, eb)) in v.iter().enumerate() {
        for k in 0..2 {
            write(&mut d.a, ea, eb, (i * 2 + k) as u64);
        }
    }
    assert_eq!(order(&mut d), [0, 1, 2, 0, 1, 2]);
    // Served last: 2. A QP that becomes ready takes its turn by QPN, not by arrival.
    write(&mut d.a, &v[1].0, &v[1].1, 10);
    write(&mut d.a, &v[0].0, &v[0].1, 11);
    write(&mut d.a, &v[1].0, &v[1].1, 12);
    assert_eq!(order(&mut d), [0, 1, 1]);
    write(&mut d.a, &v[2].0, &v[2].1, 13);
    write(&mut d.a, &v[0].0, &v[0].1, 14);
    assert_eq!(order(&mut d), [2, 0]);
}

#[test]
fn destroying_a_qp_takes_it_out_of_the_round_robin_and_the_timers() {
    let (mut d, v) = pairs(2);
    let mut buf = vec![0u8; 4096 + 128];
    let (a0, a1) = (&v[0].0, &v[1].0);
    // QP 0 sends at t1 and arms its retransmit timer first; QP 1 at t2.
    write(&mut d.a, a0, &v[0].1, 1);
    let t1 = Instant::from_nanos(1000);
    assert!(d.a.poll_transmit(t1, &mut buf).is_some());
    write(&mut d.a, a1, &v[1].1, 2);
    let t2 = Instant::from_nanos(2000);
    assert!(d.a.poll_transmit(t2, &mut buf).is_some());
    let first = d.a.poll_timeout().unwrap();
    assert_eq!(Some(first), d.a.qp(a0.qpn).unwrap().next_timeout());
    // QP 0 has more to send when it goes.
    write(&mut d.a, a0, &v[0].1, 3);
    assert!(d.a.may_transmit());
    d.a.destroy_qp(a0.qpn).unwrap();
    assert!(!d.a.may_transmit());
    assert!(d.a.poll_transmit(t2, &mut buf).is_none());
    assert_eq!(d.a.poll_timeout(), d.a.qp(a1.qpn).unwrap().next_timeout());
    assert!(d.a.poll_timeout() > Some(first));
    // A new QP under the old number inherits none of it.
    d.a.qpns.next = a0.qpn;
    let pd = d.a.mem().alloc_pd();
    let cq = d.a.create_cq(16).unwrap();
    assert_eq!(d.a.create_qp(&init(pd, cq)), Ok(a0.qpn));
    assert!(!d.a.may_transmit());
    assert_eq!(d.a.poll_timeout(), d.a.qp(a1.qpn).unwrap().next_timeout());
    d.a.destroy_qp(a1.qpn).unwrap();
    assert_eq!(d.a.poll_timeout(), None);
    assert!(d.a.timers.is_empty());
    d.a.handle_timeout(Instant::from_nanos(u64::MAX));
    assert_eq!(d.a.counters().get(Counter::RetransmitTimeouts), 0);
}

#[test]
fn timer_heap_stays_small_on_a_long_stream() {
    let (mut d, v) = pairs(3);
    let mut buf = vec![0u8; 4096 + 128];
    // QP 0's request is lost: its retransmit deadline, earlier than all the stream's,
    // stays at the top of the heap, so the stream's old entries never surface there.
    write(&mut d.a, &v[0].0, &v[0].1, 0);
    assert!(d.a.poll_transmit(Instant::ZERO, &mut buf).is_some());
    let stuck = d.a.poll_timeout();
    assert!(stuck.is_some());
    let (ea, eb) = &v[1];
    for i in 0..2000u64 {
        write(&mut d.a, ea, eb, i);
        d.pump(Instant::from_nanos(1000 * (i + 1)));
        // Each ACK moves the retransmit deadline; the old entries must not pile up.
        assert!(d.a.timers.len() <= 2 * 3 + 64, "{}", d.a.timers.len());
    }
    assert_eq!(d.a.poll_timeout(), stuck, "all but QP 0's acknowledged");
}

#[test]
fn a_qp_waiting_out_an_rnr_nak_is_asked_again_after_its_timer() {
    let (mut d, v) = pairs(2);
    let (ea, eb) = &v[0];
    let sge = [ea.sge(0, 64)];
    let send = SendWr {
        wr_id: 7,
        op: SendOp::Send,
        local: Local::Sges(&sge),
        flags: SendFlags {
            signaled: true,
            ..Default::default()
        },
    };
    d.a.post_send(Instant::ZERO, ea.qpn, &send).unwrap();
    // No receive at B: RNR NAK, and A waits before it resends.
    d.pump(Instant::from_nanos(1000));
    assert_eq!(d.a.counters().get(Counter::RcvdRnrErr), 1);
    let wait = d.a.poll_timeout().expect("RNR wait armed");
    assert!(
        !d.a.may_transmit(),
        "nothing to send until the wait is over"
    );
    let rsge = [eb.sge(0, 64)];
    let recv = RecvWr {
        wr_id: 8,
        sges: &rsge,
    };
    d.b.post_recv(Instant::from_nanos(1000), eb.qpn, &recv)
        .unwrap();
    d.a.handle_timeout(wait);
    assert!(d.a.may_transmit());
    assert_eq!(d.pump(wait), 2, "the SEND again, and its ACK");
    let mut wc = [Completion::default(); 2];
    assert_eq!(d.b.poll_cq(eb.cq, &mut wc), Ok(1));
    assert_eq!((wc[0].wr_id, wc[0].status), (8, WcStatus::Success));
    assert_eq!(d.a.poll_cq(ea.cq, &mut wc), Ok(1));
    assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::Success));
}

#[test]
fn each_qp_counts_its_own_packets_and_the_totals_keep_a_destroyed_one() {
    let (mut d, v) = pairs(2);
    let get = |e: &Engine, qpn: u32, c: Counter| {
        e.qp_counters()
            .find(|(q, _)| *q == qpn)
            .map(|(_, k)| k.get(c))
            .unwrap()
    };
    // Three WRITEs on pair 0, one on pair 1; the ACKs come back.
    for i in 0..3 {
        write(&mut d.a, &v[0].0, &v[0].1, i);
    }
    write(&mut d.a, &v[1].0, &v[1].1, 9);
    d.pump(Instant::from_nanos(1000));
    let (a0, a1, b0, b1) = (v[0].0.qpn, v[1].0.qpn, v[0].1.qpn, v[1].1.qpn);
    assert_eq!(get(&d.a, a0, Counter::SentPkts), 3);
    assert_eq!(get(&d.a, a1, Counter::SentPkts), 1);
    // What one side's QP sent, its peer QP received, and the other way round.
    for (x, y) in [(a0, b0), (a1, b1)] {
        assert_eq!(
            get(&d.a, x, Counter::SentPkts),
            get(&d.b, y, Counter::RcvdPkts)
        );
        assert_eq!(
            get(&d.b, y, Counter::SentPkts),
            get(&d.a, x, Counter::RcvdPkts)
        );
        assert!(get(&d.b, y, Counter::SentPkts) > 0, "ACKs");
    }
    // The NIC's totals are the QPs' sums, and keep a destroyed QP's.
    let total = |e: &Engine, c| e.counters().get(c);
    let sent = total(&d.a, Counter::SentPkts);
    assert_eq!(sent, 4);
    d.a.destroy_qp(a0).unwrap();
    assert_eq!(total(&d.a, Counter::SentPkts), sent);
    assert_eq!(d.a.qp_counters().count(), 1);
    // A packet for no QP is the NIC's, not a QP's.
    write(&mut d.b, &v[0].1, &v[0].0, 5);
    d.pump(Instant::from_nanos(2000));
    assert_eq!(total(&d.a, Counter::DropUnknownQp), 1);
    assert_eq!(get(&d.a, a1, Counter::DropUnknownQp), 0);
}
