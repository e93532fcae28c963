//! Congestion control over the simulator (issue 25): the notification point answers a
//! CE-marked packet with one CNP (IBA Annex A17.9.3), paced per peer QP by
//! `min_time_between_cnps`; the reaction point cuts the rate with DCQCN's mlx5 rule,
//! recovers by timer and byte counter, and its pacer spaces the QP's requests by
//! len*8/RC in virtual time. The simulator's `MarkCeIf` rule plays the congested switch.

mod common;

use common::rc::{pattern, Opts, Pair};
use core::time::Duration;
use roce_emu::engine::*;
use roce_emu::sim::rule::{MarkCeIf, Verdict};
use roce_emu::wire::opcode::op;
use roce_emu::wire::{icrc, Ecn, RocePacket, RoceRepr, ROCE_UDP_PORT};
use std::net::SocketAddr;

const A: usize = 0;
const B: usize = 1;

fn pair(cc: &str) -> Pair {
    let cc: CcConfig = cc.parse().unwrap();
    Pair::with_config(Opts::default(), |c| c.cc = cc)
}

/// Every traced packet from `from` with its opcode: (time ns, opcode, ECN, bytes).
fn sent(p: &Pair, from: usize) -> Vec<(u64, roce_emu::wire::Opcode, Ecn, Vec<u8>)> {
    p.net
        .trace
        .as_ref()
        .unwrap()
        .iter()
        .filter(|t| t.from == from && t.verdict != Verdict::Drop)
        .map(|t| {
            let pkt = RocePacket::new_checked(&t.bytes[..]).unwrap();
            (t.at.as_nanos(), pkt.opcode(), t.ecn, t.bytes.clone())
        })
        .collect()
}

fn cnps(p: &Pair, from: usize) -> Vec<Vec<u8>> {
    sent(p, from)
        .into_iter()
        .filter(|s| s.1 == op::CNP)
        .map(|s| s.3)
        .collect()
}

/// Marks CE on A's data packets whose 1-based index (in A->B order) is in `which`.
fn mark(p: &mut Pair, which: &'static [u64]) {
    p.net
        .add_rule(A, B, MarkCeIf::new(move |n, _| which.contains(&n)));
}

fn send(p: &mut Pair, wr_id: u64, len: u32) {
    p.write_mem(A, 0, &pattern(wr_id as u8, len as usize));
    p.post_recv(B, wr_id, 0, 1 << 16);
    p.send(A, wr_id, SendOp::Send, 0, len);
}

#[test]
fn one_ce_mark_gets_exactly_one_cnp_with_every_field_right() {
    let mut p = pair("");
    mark(&mut p, &[1]);
    send(&mut p, 1, 64);
    p.settle();
    p.print_trace();
    // A's request went out ECT(0) and arrived CE; B's ACK is Not-ECT.
    let a = sent(&p, A);
    assert_eq!((a[0].1, a[0].2), (op::RC_SEND_ONLY, Ecn::Ce));
    let b = sent(&p, B);
    assert!(b.iter().all(|s| s.2 == Ecn::NotEct), "B sends Not-ECT");
    let c = cnps(&p, B);
    assert_eq!(c.len(), 1, "exactly one CNP");
    let bytes = &c[0];
    assert_eq!(bytes.len(), 32, "BTH + 16 reserved + ICRC");
    let r = RoceRepr::parse(&RocePacket::new_checked(&bytes[..]).unwrap()).unwrap();
    assert_eq!(r.bth.opcode, op::CNP);
    assert!(r.bth.becn && !r.bth.fecn && !r.bth.ack_req && !r.bth.solicited);
    assert_eq!(r.bth.pkey, DEFAULT_PKEY);
    assert_eq!(r.bth.dqpn, p.a.qpn, "DestQP: the marked packet's sender");
    assert_eq!(r.bth.psn.value(), 0);
    assert!(bytes[12..28].iter().all(|&b| b == 0));
    assert_eq!(&bytes[..5], &[0x81, 0, 0xff, 0xff, 0x40]);
    // The ICRC is valid from B's QP port to A's RoCE port.
    let sport = p.net.nodes[B].engine.qp(p.b.qpn).unwrap().src_port;
    let src = SocketAddr::new(p.net.nodes[B].ip, sport);
    let dst = SocketAddr::new(p.net.nodes[A].ip, ROCE_UDP_PORT);
    let ph = icrc::PseudoHeaders::new(src, dst, 0, bytes.len());
    icrc::verify(ph.ip(), ph.udp(), bytes).expect("valid ICRC");
    assert_eq!(p.counter(B, Counter::NpEcnMarkedRocePackets), 1);
    assert_eq!(p.counter(B, Counter::NpCnpSent), 1);
    assert_eq!(p.counter(A, Counter::RpCnpHandled), 1);
    assert_eq!(p.counter(A, Counter::RpCnpIgnored), 0);
    // The message itself was delivered.
    assert_eq!(p.completions(A).len(), 1);
    assert_eq!(p.completions(B).len(), 1);
}

#[test]
fn two_marks_within_min_time_between_cnps_get_one_cnp() {
    // One 2-packet message: both marked, arriving at the same instant (the NP's 4 µs).
    let mut p = pair("");
    mark(&mut p, &[1, 2]);
    send(&mut p, 1, 2048);
    p.settle();
    assert_eq!(p.counter(B, Counter::NpEcnMarkedRocePackets), 2);
    assert_eq!(cnps(&p, B).len(), 1);
    assert_eq!(p.counter(B, Counter::NpCnpSent), 1);
}

#[test]
fn min_time_between_cnps_zero_answers_every_mark() {
    let mut p = pair("min_time_between_cnps=0");
    mark(&mut p, &[1, 2]);
    send(&mut p, 1, 2048);
    p.settle();
    assert_eq!(cnps(&p, B).len(), 2);
    // The second CNP came within rate_reduce_monitor_period of the first cut.
    assert_eq!(p.counter(A, Counter::RpCnpHandled), 1);
    assert_eq!(p.counter(A, Counter::RpCnpIgnored), 1);
}

#[test]
fn marks_further_apart_than_the_interval_get_one_cnp_each() {
    let mut p = pair("");
    mark(&mut p, &[1, 2]);
    send(&mut p, 1, 64);
    p.settle();
    let t1 = p.net.now;
    send(&mut p, 2, 64);
    p.settle();
    assert!(p.net.now.since(t1) > Duration::from_micros(4));
    assert_eq!(cnps(&p, B).len(), 2);
    assert_eq!(p.counter(B, Counter::NpCnpSent), 2);
}

#[test]
fn np_disabled_counts_ce_and_sends_no_cnp() {
    let mut p = pair("np_enable=0");
    mark(&mut p, &[1]);
    send(&mut p, 1, 64);
    p.settle();
    assert_eq!(p.counter(B, Counter::NpEcnMarkedRocePackets), 1);
    assert!(cnps(&p, B).is_empty());
    assert_eq!(p.counter(B, Counter::NpCnpSent), 0);
}

#[test]
fn rp_disabled_sends_not_ect_and_ignores_cnps() {
    let mut p = pair("rp_enable=0");
    mark(&mut p, &[1]);
    send(&mut p, 1, 64);
    p.settle();
    // Not-ECT: the switch cannot mark it, so no CE and no CNP.
    assert!(sent(&p, A).iter().all(|s| s.2 == Ecn::NotEct));
    assert_eq!(p.counter(B, Counter::NpEcnMarkedRocePackets), 0);
    // A CNP injected to B (the sender there) is ignored with rp_enable=0.
    inject_cnp(&mut p, Ecn::NotEct);
    assert_eq!(p.counter(B, Counter::RpCnpIgnored), 1);
    assert_eq!(p.net.nodes[B].engine.qp_cc(p.b.qpn), None);
}

/// Delivers a CNP for B's QP from A's address to B's engine now, with `ecn`.
fn inject_cnp(p: &mut Pair, ecn: Ecn) {
    let mut r = p.request(op::CNP, 0, 0);
    r.bth.becn = true;
    r.bth.ack_req = false;
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut buf, &[]).unwrap();
    let src = SocketAddr::new(p.net.nodes[A].ip, 49441);
    let dst = SocketAddr::new(p.net.nodes[B].ip, ROCE_UDP_PORT);
    let ph = icrc::PseudoHeaders::new(src, dst, 0, buf.len());
    icrc::fill(ph.ip(), ph.udp(), &mut buf).unwrap();
    let now = p.net.now;
    p.engine(B).handle_datagram(
        now,
        Datagram {
            src,
            dst,
            ipv4_id: Some(0),
            ecn,
            data: &buf,
        },
    );
}

#[test]
fn a_ce_marked_cnp_triggers_no_cnp() {
    let mut p = pair("");
    inject_cnp(&mut p, Ecn::Ce);
    assert_eq!(p.counter(B, Counter::NpEcnMarkedRocePackets), 0);
    assert!(p.drain(B).is_empty(), "nothing answers a CNP");
    assert_eq!(p.counter(B, Counter::RpCnpHandled), 1);
}

#[test]
fn a_cnp_halves_the_rate_then_successive_cnps_follow_the_rule() {
    let mut p = pair("line_rate=10gbit");
    let line = 10_000_000_000u64;
    inject_cnp(&mut p, Ecn::NotEct);
    let s = p.net.nodes[B].engine.qp_cc(p.b.qpn).expect("under DCQCN");
    // alpha 1023: RC * (1 - 1023/2048).
    let rc1 = line - ((line * 1023) >> 11);
    assert_eq!((s.current_rate, s.target_rate, s.alpha), (rc1, line, 1023));
    // 2 µs later: within rate_reduce_monitor_period (4 µs), ignored.
    p.net.now = p.net.now.saturating_add(Duration::from_micros(2));
    inject_cnp(&mut p, Ecn::NotEct);
    assert_eq!(p.counter(B, Counter::RpCnpIgnored), 1);
    assert_eq!(
        p.net.nodes[B].engine.qp_cc(p.b.qpn).unwrap().current_rate,
        rc1
    );
    // 50 µs after the first: alpha decayed 50 times by dce_tcp_g/1024, then the cut.
    p.net.now = p.net.now.saturating_add(Duration::from_micros(48));
    inject_cnp(&mut p, Ecn::NotEct);
    let mut a = 1023u64;
    for _ in 0..50 {
        a = 1019 * a / 1024;
    }
    let rc2 = rc1 - ((rc1 * a) >> 11);
    let s = p.net.nodes[B].engine.qp_cc(p.b.qpn).unwrap();
    // No increase happened since the first cut: RT stays (no clamp).
    assert_eq!((s.current_rate, s.target_rate), (rc2, line));
    assert_eq!(s.alpha as u64, 1019 * a / 1024 + 5);
    assert_eq!(p.counter(B, Counter::RpCnpHandled), 2);
    assert_eq!(p.counter(B, Counter::RpRateDecreases), 2);
}

#[test]
fn the_timer_brings_the_rate_back_to_line_rate() {
    let mut p = pair("line_rate=10gbit");
    let line = 10_000_000_000u64;
    inject_cnp(&mut p, Ecn::NotEct);
    let t0 = p.net.now;
    let rc1 = p.net.nodes[B].engine.qp_cc(p.b.qpn).unwrap().current_rate;
    // The first timer event (rpg_time_reset = 300 µs): fast recovery, RC halfway to RT.
    assert_eq!(
        p.net.nodes[B].engine.poll_timeout(),
        Some(t0.saturating_add(Duration::from_micros(300)))
    );
    p.net.step();
    assert_eq!(p.net.now, t0.saturating_add(Duration::from_micros(300)));
    let s = p.net.nodes[B].engine.qp_cc(p.b.qpn).unwrap();
    assert_eq!(s.current_rate, (rc1 + line).div_ceil(2));
    assert_eq!(s.time_stage, 1);
    // Then on to line rate, where DCQCN lets go: no gauge, no timer.
    p.settle();
    assert_eq!(p.net.nodes[B].engine.qp_cc(p.b.qpn), None);
    assert_eq!(p.net.nodes[B].engine.poll_timeout(), None);
    let n = p.counter(B, Counter::RpRateIncreases);
    assert!((2..64).contains(&n), "{n} increase events");
    assert_eq!(
        p.net.now,
        t0.saturating_add(Duration::from_micros(300 * n)),
        "one event per rpg_time_reset"
    );
}

#[test]
fn the_byte_counter_brings_the_rate_back_to_line_rate() {
    // A timer that never fires in this test; a byte event every 16*64 = 1 KiB sent.
    let mut p = pair("line_rate=10gbit rpg_time_reset=100000000 rpg_byte_reset=16");
    inject_cnp(&mut p, Ecn::NotEct);
    let rc1 = p.net.nodes[B].engine.qp_cc(p.b.qpn).unwrap().current_rate;
    // B sends: 1024-byte payloads make packets of 1024 + 12 + 4 + pad bytes.
    p.write_mem(B, 0, &pattern(3, 64 * 1024));
    for i in 0..8 {
        p.post_recv(A, i, 0, 1 << 16);
        p.send(B, i, SendOp::Send, 0, 8 * 1024);
    }
    p.net
        .run_until(1_000_000, |n| {
            n.nodes[B]
                .engine
                .qp_cc(p.b.qpn)
                .is_none_or(|s| s.current_rate > rc1)
        })
        .unwrap();
    let inc = p.counter(B, Counter::RpRateIncreases);
    assert!(inc >= 1);
    p.settle();
    assert_eq!(p.net.nodes[B].engine.qp_cc(p.b.qpn), None, "recovered");
    assert!(
        p.net.now < Instant::from_nanos(1_000_000_000),
        "by bytes, not the 100 s timer"
    );
    assert_eq!(p.net.nodes[B].engine.poll_timeout(), None);
    assert_eq!(p.completions(B).len(), 8);
}

#[test]
fn the_pacer_spaces_requests_by_len_times_8_over_rc() {
    // 1 Gbit/s, cut to ~500 Mbit/s: a 1040-byte packet holds the QP 16.6 µs, once the
    // first PACER_BURST's worth left (no increase timer meanwhile).
    let mut p = pair("line_rate=1gbit,rpg_time_reset=100000");
    inject_cnp(&mut p, Ecn::NotEct);
    let rc = p.net.nodes[B].engine.qp_cc(p.b.qpn).unwrap().current_rate;
    p.write_mem(B, 0, &pattern(4, 32 * 1024));
    p.post_recv(A, 1, 0, 1 << 16);
    p.send(B, 1, SendOp::Send, 0, 32 * 1024);
    p.settle();
    let reqs: Vec<_> = sent(&p, B)
        .into_iter()
        .filter(|s| s.1 != op::CNP && s.1 .0 < 0x0d)
        .collect();
    assert_eq!(reqs.len(), 32);
    assert!(reqs.iter().all(|s| s.2 == Ecn::Ect0), "requests are ECT(0)");
    let gap = |len: usize| (len as u128 * 8 * 1_000_000_000).div_ceil(rc as u128) as u64;
    let burst = reqs.iter().take_while(|s| s.0 == reqs[0].0).count();
    let want = (PACER_BURST.as_nanos() as u64).div_ceil(gap(reqs[0].3.len())) as usize;
    assert!(
        burst.abs_diff(want) <= 1,
        "{burst} at once, {want} expected"
    );
    for w in reqs[burst..].windows(2) {
        assert_eq!(w[1].0 - w[0].0, gap(w[0].3.len()), "spacing len*8/RC");
    }
    // The pacer did not hold A's ACKs: A answered each at once.
    assert_eq!(p.completions(B).len(), 1);
}

/// Without CNPs a QP's requests leave at the line rate: a burst of `PACER_BURST` worth
/// back to back (credit from the idle time before), then one packet per len*8/line_rate.
#[test]
fn without_cnps_requests_leave_at_line_rate_after_a_burst() {
    let mut p = pair("line_rate=1gbit");
    // Idle for a while first: the credit is PACER_BURST at most.
    p.net.now = Instant::from_nanos(10_000_000);
    p.write_mem(B, 0, &pattern(4, 64 * 1024));
    p.post_recv(A, 1, 0, 1 << 17);
    p.send(B, 1, SendOp::Send, 0, 64 * 1024);
    p.settle();
    let pkts = sent(&p, B);
    let t0 = pkts[0].0;
    let burst = pkts.iter().take_while(|s| s.0 == t0).count();
    let len = pkts[0].3.len() as u64;
    let gap = (len * 8 * 1_000_000_000).div_ceil(1_000_000_000);
    let want = (PACER_BURST.as_nanos() as u64).div_ceil(gap) as usize;
    assert!(
        burst.abs_diff(want) <= 1 && burst < pkts.len(),
        "{burst} at once, {want} expected"
    );
    for w in pkts[burst..].windows(2) {
        if w[1].3.len() as u64 == len {
            assert_eq!(w[1].0 - w[0].0, gap, "then one per len*8/line_rate");
        }
    }
}

#[test]
fn a_held_qp_is_not_ready_and_its_deadline_is_the_pacer() {
    // No busy loop: while the pacer holds B's only work, may_transmit is false and
    // poll_timeout is the release time.
    let mut p = pair("line_rate=1gbit");
    inject_cnp(&mut p, Ecn::NotEct);
    p.write_mem(B, 0, &pattern(5, 64 * 1024));
    p.post_recv(A, 1, 0, 1 << 17);
    p.send(B, 1, SendOp::Send, 0, 64 * 1024);
    // The burst's worth goes at once, then the pacer holds the QP.
    let mut sent_now = 0;
    while p.transmit(B).is_some() {
        sent_now += 1;
        assert!(sent_now < 64, "never held");
    }
    assert!(sent_now >= 2, "{sent_now}");
    let s = p.net.nodes[B].engine.qp_cc(p.b.qpn).unwrap();
    let until = s.paced_until.expect("held");
    assert!(!p.net.nodes[B].engine.may_transmit());
    assert_eq!(p.net.nodes[B].engine.poll_timeout(), Some(until));
    // At the release the next packet may go.
    p.engine(B).handle_timeout(until);
    p.net.now = until;
    assert!(p.net.nodes[B].engine.may_transmit());
    assert_eq!(p.transmit(B).unwrap().bth.opcode, op::RC_SEND_MIDDLE);
}

#[test]
fn cnps_to_no_qp_or_a_qp_not_sending_are_not_acted_on() {
    let mut p = pair("");
    // A CNP to a QPN nobody has: a counted drop of the NIC.
    let mut r = p.request(op::CNP, 0, 0);
    r.bth.becn = true;
    r.bth.dqpn = 0x777;
    p.inject(&r, &[]);
    assert_eq!(p.counter(B, Counter::DropUnknownQp), 1);
    // B's QP in ERR does not send: the CNP is ignored, no DCQCN state.
    let now = p.net.now;
    let qpn = p.b.qpn;
    p.engine(B)
        .modify_qp(
            now,
            qpn,
            &QpAttr {
                state: Some(QpState::Err),
                ..QpAttr::default()
            },
        )
        .unwrap();
    inject_cnp(&mut p, Ecn::NotEct);
    assert_eq!(p.counter(B, Counter::RpCnpIgnored), 1);
    assert_eq!(p.counter(B, Counter::RpCnpHandled), 0);
    assert_eq!(p.net.nodes[B].engine.qp_cc(p.b.qpn), None);
}

#[test]
fn reset_forgets_the_qps_dcqcn_state() {
    let mut p = pair("");
    inject_cnp(&mut p, Ecn::NotEct);
    assert!(p.net.nodes[B].engine.qp_cc(p.b.qpn).is_some());
    let (now, qpn) = (p.net.now, p.b.qpn);
    let reset = QpAttr {
        state: Some(QpState::Reset),
        ..QpAttr::default()
    };
    p.engine(B).modify_qp(now, qpn, &reset).unwrap();
    assert_eq!(p.net.nodes[B].engine.qp_cc(qpn), None);
    assert_eq!(p.net.nodes[B].engine.poll_timeout(), None);
}

#[test]
fn ud_marks_from_two_senders_get_a_cnp_each_to_their_deth_source_qp() {
    // Nodes 0 and 2 send a datagram each to node 1 at the same instant, both CE-marked:
    // the NP paces per peer QP, so each sender gets its own CNP.
    let mut u = common::ud::Ud::new(3);
    for from in [0, 2] {
        u.net.add_rule(from, 1, MarkCeIf::new(|_, _| true));
    }
    u.post_recv(1, 1, 0, 1024);
    u.post_recv(1, 2, 1024, 1024);
    u.send(0, 1, 1, 0, 32);
    u.send(2, 1, 1, 0, 32);
    u.net.run_idle(10_000).unwrap();
    let tr = u.net.trace.clone().unwrap();
    let mut got: Vec<(usize, u32, u32)> = tr
        .iter()
        .filter(|t| t.from == 1)
        .map(|t| {
            let r = RoceRepr::parse(&RocePacket::new_checked(&t.bytes[..]).unwrap()).unwrap();
            assert_eq!(
                (r.bth.opcode, r.bth.becn, t.ecn),
                (op::CNP, true, Ecn::NotEct)
            );
            (t.to, r.bth.dqpn, r.bth.psn.value())
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![(0, u.ends[0].qpn, 0), (2, u.ends[2].qpn, 0)],
        "one CNP to each sender's QP"
    );
    assert_eq!(u.counter(1, Counter::NpCnpSent), 2);
    assert_eq!(u.counter(0, Counter::RpCnpHandled), 1);
    assert_eq!(u.counter(2, Counter::RpCnpHandled), 1);
}
