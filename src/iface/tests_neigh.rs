//! The neighbour states (RFC 4861 §7.3.2: REACHABLE, STALE, DELAY, PROBE), transition by
//! transition with a fake clock: an idle entry is used at once when traffic resumes and
//! re-validated by unicast probes; a neighbour that went away, or came back with another
//! MAC, is detected and resolved again; eviction prefers STALE entries.

use super::neighbor::{self, Held, Learn, Lookup};
use super::tests::{cfg, check_delivered, drain, pair, pump, roce_packet, sa, t};
use super::tests::{G_A, G_B, IP_A, IP_B, MAC_A, MAC_B};
use super::*;

const MAC_C: Mac = [0x02, 0x00, 0x00, 0x00, 0x00, 0x0c];

/// The state of `ip`'s resolved entry at `i`, if any.
fn state(i: &Iface, ip: impl Into<IpAddr>) -> Option<(Mac, NeighborState)> {
    let ip = ip.into();
    i.neighbors()
        .find(|(k, _, _)| *k == ip)
        .map(|(_, m, s)| (m, s))
}

/// A resolves B (by a broadcast request at `at`): REACHABLE for 60 s.
fn resolved_pair(dst: IpAddr, at: f64) -> (Iface, Iface, SocketAddr, SocketAddr) {
    let (mut a, mut b) = pair();
    let src: IpAddr = if dst.is_ipv4() {
        IP_A.into()
    } else {
        G_A.into()
    };
    let (s, d) = (sa(src, 49152), sa(dst, 4791));
    let mut out = vec![0u8; 1600];
    assert_eq!(
        a.send(
            t(at),
            s,
            d,
            Ecn::NotEct,
            &roce_packet(s, d, 20, 0),
            &mut out
        ),
        Ok(None)
    );
    let (_, at_b) = pump(&mut a, &mut b, t(at));
    assert_eq!(at_b.len(), 1);
    let until = t(at + 60.0);
    assert_eq!(
        state(&a, dst),
        Some((MAC_B, NeighborState::Reachable { until }))
    );
    (a, b, s, d)
}

/// An ARP request frame's Ethernet destination and target address.
fn arp_request_to(f: &[u8]) -> (Mac, Ipv4Addr) {
    assert_eq!(f[12..14], [0x08, 0x06]);
    assert_eq!(f[20..22], [0, 1], "a request");
    let mut dst = [0u8; 6];
    dst.copy_from_slice(&f[..6]);
    (dst, Ipv4Addr::new(f[38], f[39], f[40], f[41]))
}

/// The issue: a 64-packet burst after an idle gap longer than the lifetime goes out at
/// once on the STALE entry (nothing held, nothing refused); the entry is re-validated by
/// a unicast probe after DELAY and is REACHABLE again.
#[test]
fn stale_entry_is_used_at_once_then_probed_and_confirmed() {
    let (mut a, mut b, s, d) = resolved_pair(IP_B.into(), 0.0);
    // B learned A from A's broadcast request: known, not confirmed.
    let since = t(0.0);
    assert_eq!(
        state(&b, IP_A),
        Some((MAC_A, NeighborState::Stale { since }))
    );
    assert_eq!(a.poll_timeout(), Some(t(60.0)));
    a.handle_timeout(t(60.0));
    let since = t(60.0);
    assert_eq!(
        state(&a, IP_B),
        Some((MAC_B, NeighborState::Stale { since }))
    );
    assert_eq!((a.stats().neighbor_expired, a.poll_timeout()), (1, None));

    // Idle until 200 s, then 64 packets: all framed at once, to B's MAC.
    let mut out = vec![0u8; 1600];
    for k in 0..64u8 {
        let p = roce_packet(s, d, 1000, k);
        let n = a
            .send(t(200.0), s, d, Ecn::NotEct, &p, &mut out)
            .unwrap()
            .expect("sent now");
        assert_eq!(out[..6], MAC_B);
        match b.receive(t(200.0), &out[..n]) {
            Rx::Roce {
                src,
                dst,
                ipv4_id,
                payload,
                ..
            } => check_delivered(&(out[..n].to_vec(), src, dst, ipv4_id, payload), &p),
            other => panic!("{other:?}"),
        }
    }
    let st = a.stats();
    assert_eq!(
        (st.queue_full, st.neighbor_stale_used, a.pending()),
        (0, 1, 0)
    );
    let probe_at = t(205.0);
    assert_eq!(
        state(&a, IP_B),
        Some((MAC_B, NeighborState::Delay { probe_at }))
    );
    assert!(
        drain(&mut a, t(200.0)).is_empty(),
        "no request before DELAY ends"
    );
    assert_eq!(a.poll_timeout(), Some(probe_at));

    // DELAY over: one unicast ARP request to B's MAC; B answers; REACHABLE again.
    a.handle_timeout(t(205.0));
    let next_at = t(206.0);
    assert_eq!(
        state(&a, IP_B),
        Some((MAC_B, NeighborState::Probe { sent: 1, next_at }))
    );
    let probe = drain(&mut a, t(205.0));
    assert_eq!(probe.len(), 1);
    assert_eq!(arp_request_to(&probe[0]), (MAC_B, IP_B));
    assert_eq!(a.stats().neighbor_probes, 1);
    assert_eq!(b.receive(t(205.0), &probe[0]), Rx::Consumed);
    pump(&mut a, &mut b, t(205.0));
    let until = t(265.0);
    assert_eq!(
        state(&a, IP_B),
        Some((MAC_B, NeighborState::Reachable { until }))
    );
    assert_eq!(a.stats().neighbor_reconfirmed, 1);

    // Expiry found by `send` itself, before handle_timeout ran: used at once all the same.
    let p = roce_packet(s, d, 20, 9);
    assert!(a
        .send(t(500.0), s, d, Ecn::NotEct, &p, &mut out)
        .unwrap()
        .is_some());
    let st = a.stats();
    assert_eq!((st.neighbor_expired, st.neighbor_stale_used), (2, 2));
    let probe_at = t(505.0);
    assert_eq!(
        state(&a, IP_B),
        Some((MAC_B, NeighborState::Delay { probe_at }))
    );
    assert_eq!(
        (st.pending_dropped, st.resolve_failed, st.arp_requests_tx),
        (0, 0, 2)
    );
}

/// The same over IPv6: the probe is an NS to B's own address and MAC (§7.3.3), and B's
/// solicited NA confirms the entry.
#[test]
fn stale_ipv6_entry_is_probed_with_a_unicast_ns() {
    let (mut a, mut b, s, d) = resolved_pair(G_B.into(), 0.0);
    let mut out = vec![0u8; 1600];
    a.handle_timeout(t(60.0));
    assert!(a
        .send(
            t(61.0),
            s,
            d,
            Ecn::NotEct,
            &roce_packet(s, d, 20, 1),
            &mut out
        )
        .unwrap()
        .is_some());
    assert_eq!(a.poll_timeout(), Some(t(66.0)));
    a.handle_timeout(t(66.0));
    let ns = drain(&mut a, t(66.0));
    assert_eq!(ns.len(), 1);
    assert_eq!(ns[0][..6], MAC_B);
    assert_eq!(ns[0][38..54], G_B.octets(), "to B's address, not its group");
    assert_eq!(ns[0][54], 135);
    assert_eq!((a.stats().nd_ns_tx, a.stats().neighbor_probes), (2, 1));
    assert_eq!(b.receive(t(66.0), &ns[0]), Rx::Consumed);
    pump(&mut a, &mut b, t(66.0));
    let until = t(126.0);
    assert_eq!(
        state(&a, G_B),
        Some((MAC_B, NeighborState::Reachable { until }))
    );
}

/// A neighbour that went away: its STALE entry is used, probed `PROBES` times a second
/// apart, then removed (never used again); the next datagram resolves by broadcast, and
/// with no answer that gives up too.
#[test]
fn vanished_neighbour_is_given_up_after_its_probes() {
    let (mut a, _gone, s, d) = resolved_pair(IP_B.into(), 0.0);
    let mut out = vec![0u8; 1600];
    let mut send = |a: &mut Iface, at: f64| {
        a.send(
            t(at),
            s,
            d,
            Ecn::NotEct,
            &roce_packet(s, d, 20, 2),
            &mut out,
        )
    };
    assert!(
        send(&mut a, 100.0).unwrap().is_some(),
        "STALE: sent at once"
    );
    for (at, sent) in [(105.0, 1), (106.0, 2), (107.0, 3)] {
        assert_eq!(a.poll_timeout(), Some(t(at)));
        a.handle_timeout(t(at));
        let f = drain(&mut a, t(at));
        assert_eq!(f.len(), 1);
        assert_eq!(arp_request_to(&f[0]), (MAC_B, IP_B), "unicast probe {sent}");
        let next_at = t(at + 1.0);
        assert_eq!(
            state(&a, IP_B),
            Some((MAC_B, NeighborState::Probe { sent, next_at }))
        );
        // Still used while probing (RFC 4861 §7.3.3), without restarting the probes.
        assert!(send(&mut a, at + 0.5).unwrap().is_some());
    }
    assert_eq!(a.poll_timeout(), Some(t(108.0)));
    a.handle_timeout(t(108.0));
    assert_eq!(state(&a, IP_B), None, "given up");
    assert_eq!(a.poll_timeout(), None);
    assert!(drain(&mut a, t(108.0)).is_empty());
    assert_eq!(
        (a.stats().neighbor_probes, a.stats().neighbor_probe_failed),
        (3, 1)
    );
    // The next datagram waits for a broadcast request.
    assert_eq!(send(&mut a, 109.0), Ok(None));
    let f = drain(&mut a, t(109.0));
    assert_eq!(arp_request_to(&f[0]), (eth::BROADCAST, IP_B));
    for at in [110.0, 111.0, 112.0] {
        a.handle_timeout(t(at));
    }
    let st = a.stats();
    assert_eq!(
        (st.resolve_failed, st.pending_dropped, st.arp_requests_tx),
        (1, 1, 1 + 3 + 3)
    );
}

/// B restarts with another MAC and stays silent: A's STALE entry still names the old MAC,
/// whose frames (and probes) nobody takes; after the probes it is removed and the next
/// datagram resolves the new MAC.
#[test]
fn silent_mac_change_is_found_by_the_probes() {
    let (mut a, _old_b, s, d) = resolved_pair(IP_B.into(), 0.0);
    let mut b = Iface::new(cfg(MAC_C, IP_B, G_B));
    let mut out = vec![0u8; 1600];
    let n = a
        .send(
            t(100.0),
            s,
            d,
            Ecn::NotEct,
            &roce_packet(s, d, 20, 3),
            &mut out,
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        b.receive(t(100.0), &out[..n]),
        Rx::Dropped(DropReason::NotForUs)
    );
    for at in [105.0, 106.0, 107.0] {
        a.handle_timeout(t(at));
        for f in drain(&mut a, t(at)) {
            assert_eq!(b.receive(t(at), &f), Rx::Dropped(DropReason::NotForUs));
        }
    }
    a.handle_timeout(t(108.0));
    assert_eq!(a.stats().neighbor_probe_failed, 1);
    let p = roce_packet(s, d, 20, 4);
    assert_eq!(a.send(t(108.5), s, d, Ecn::NotEct, &p, &mut out), Ok(None));
    let (_, at_b) = pump(&mut a, &mut b, t(108.5));
    assert_eq!(at_b.len(), 1);
    assert_eq!(at_b[0].0[..6], MAC_C);
    check_delivered(&at_b[0], &p);
    let until = t(168.5);
    assert_eq!(
        state(&a, IP_B),
        Some((MAC_C, NeighborState::Reachable { until }))
    );
}

/// B restarts with another MAC and speaks first (its NS for A, over IPv6): A takes the
/// new MAC at once, unconfirmed (STALE), uses it, and confirms it with a probe.
#[test]
fn announced_mac_change_is_taken_and_confirmed() {
    let (mut a, _old_b, s, d) = resolved_pair(G_B.into(), 0.0);
    let mut b = Iface::new(cfg(MAC_C, IP_B, G_B));
    let mut out = vec![0u8; 1600];
    // B's first datagram to A: B resolves A with a multicast NS carrying MAC_C.
    let (bs, bd) = (sa(G_B, 49152), sa(G_A, 4791));
    assert_eq!(
        b.send(
            t(10.0),
            bs,
            bd,
            Ecn::NotEct,
            &roce_packet(bs, bd, 20, 5),
            &mut out
        ),
        Ok(None)
    );
    for f in drain(&mut b, t(10.0)) {
        assert_eq!(a.receive(t(10.0), &f), Rx::Consumed);
    }
    let since = t(10.0);
    assert_eq!(
        state(&a, G_B),
        Some((MAC_C, NeighborState::Stale { since }))
    );
    assert_eq!(a.stats().neighbor_mac_changed, 1);
    // A's NA reaches B, which releases its datagram to A.
    let (at_a, _) = pump(&mut a, &mut b, t(10.0));
    assert_eq!(at_a.len(), 1);
    // A's next datagram goes to the new MAC at once; the probe after DELAY confirms it.
    let p = roce_packet(s, d, 20, 6);
    let n = a
        .send(t(11.0), s, d, Ecn::NotEct, &p, &mut out)
        .unwrap()
        .unwrap();
    assert_eq!(out[..6], MAC_C);
    assert!(matches!(b.receive(t(11.0), &out[..n]), Rx::Roce { .. }));
    a.handle_timeout(t(16.0));
    pump(&mut a, &mut b, t(16.0));
    let until = t(76.0);
    assert_eq!(
        state(&a, G_B),
        Some((MAC_C, NeighborState::Reachable { until }))
    );
    let st = a.stats();
    assert_eq!(
        (
            st.neighbor_probes,
            st.neighbor_reconfirmed,
            st.neighbor_probe_failed
        ),
        (1, 1, 0)
    );
}

/// A pending entry answered by something that does not confirm reachability (the
/// neighbour's own broadcast request): the held datagrams go out, and since they used an
/// unconfirmed MAC the entry is in DELAY; a confirming reply afterwards makes it REACHABLE.
#[test]
fn incomplete_entry_resolved_by_a_request_goes_to_delay() {
    let (mut a, mut b) = pair();
    let mut out = vec![0u8; 1600];
    let (s, d) = (sa(IP_A, 49152), sa(IP_B, 4791));
    assert_eq!(
        a.send(
            t(0.0),
            s,
            d,
            Ecn::NotEct,
            &roce_packet(s, d, 20, 7),
            &mut out
        ),
        Ok(None)
    );
    let a_request = drain(&mut a, t(0.0));
    let (bs, bd) = (sa(IP_B, 49152), sa(IP_A, 4791));
    assert_eq!(
        b.send(
            t(0.0),
            bs,
            bd,
            Ecn::NotEct,
            &roce_packet(bs, bd, 20, 8),
            &mut out
        ),
        Ok(None)
    );
    for f in drain(&mut b, t(0.0)) {
        assert_eq!(a.receive(t(0.0), &f), Rx::Consumed);
    }
    let probe_at = t(5.0);
    assert_eq!(
        state(&a, IP_B),
        Some((MAC_B, NeighborState::Delay { probe_at }))
    );
    // A's reply and its released datagram reach B; A's own request gets B's reply.
    for f in a_request {
        b.receive(t(0.0), &f);
    }
    let (at_a, at_b) = pump(&mut a, &mut b, t(0.0));
    assert_eq!((at_a.len(), at_b.len()), (1, 1));
    let until = t(60.0);
    assert_eq!(
        state(&a, IP_B),
        Some((MAC_B, NeighborState::Reachable { until }))
    );
}

/// A full cache evicts the STALE entry unconfirmed the longest, then PROBE, DELAY and
/// REACHABLE ones; never an INCOMPLETE one.
#[test]
fn eviction_prefers_stale_entries() {
    let mut c = neighbor::Cache::new(t(60.0), 4, 16, 3);
    let ip = |k: u8| IpAddr::V4(Ipv4Addr::new(10, 0, 0, k));
    let confirmed = Learn {
        add: true,
        confirmed: true,
        override_mac: true,
    };
    let unconfirmed = Learn {
        confirmed: false,
        ..confirmed
    };
    c.learn(ip(1), MAC_B, t(0.0), confirmed);
    c.learn(ip(2), MAC_B, t(1.0), unconfirmed);
    c.learn(ip(3), MAC_B, t(2.0), unconfirmed);
    assert_eq!(
        c.lookup(ip(3), t(3.0)).0,
        Lookup::Found {
            mac: MAC_B,
            stale: true
        }
    );
    let held = || Held {
        src: sa(IP_A, 1),
        dst: sa(ip(4), 4791),
        ecn: Ecn::NotEct,
        payload: vec![0; 20],
    };
    // Full: 1 REACHABLE, 2 STALE, 3 DELAY. 2 goes.
    c.start(ip(4), t(4.0), held()).unwrap();
    let left: Vec<_> = (1..=4).map(|k| c.contains(&ip(k))).collect();
    assert_eq!(left, [true, false, true, true]);
    // Then the DELAY one, then the REACHABLE one; INCOMPLETE ones stay.
    c.start(ip(5), t(4.0), held()).unwrap();
    assert!(!c.contains(&ip(3)));
    c.start(ip(6), t(4.0), held()).unwrap();
    assert!(!c.contains(&ip(1)));
    assert!(c.start(ip(7), t(4.0), held()).is_err(), "all INCOMPLETE");
    // A learn that cannot make room adds nothing.
    c.learn(ip(8), MAC_B, t(5.0), confirmed);
    assert!(!c.contains(&ip(8)));
    assert_eq!(c.resolved().count(), 0);
}

/// RFC 4861 §7.2.5: an NA without override naming another MAC does not replace it, but
/// no longer lets the entry count as REACHABLE.
#[test]
fn na_without_override_does_not_replace_the_mac() {
    let mut c = neighbor::Cache::new(t(60.0), 4, 16, 8);
    let ip = IpAddr::V6(G_B);
    let how = Learn {
        add: false,
        confirmed: true,
        override_mac: false,
    };
    c.learn(ip, MAC_B, t(0.0), Learn { add: true, ..how });
    let l = c.learn(ip, MAC_C, t(1.0), how);
    assert!(!l.mac_changed);
    let since = t(1.0);
    let e: Vec<_> = c.resolved().collect();
    assert_eq!(e, vec![(ip, MAC_B, NeighborState::Stale { since })]);
    // The same MAC, solicited: confirmed again.
    assert!(c.learn(ip, MAC_B, t(2.0), how).reconfirmed);
}
