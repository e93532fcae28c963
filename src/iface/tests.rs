//! Byte-exact frames, two interfaces wired back to back, timers, bounds, counters, and a
//! property test on arbitrary input. Checksums of what we emit are checked with
//! etherparse's own code, not ours.

use super::*;
use crate::wire::icrc::{self, PseudoHeaders};
use crate::wire::RoceFrame;
use etherparse::{
    Icmpv4Header, Icmpv4Slice, Ipv4HeaderSlice, NetSlice, PacketBuilder, SlicedPacket,
    TransportSlice,
};

pub(super) const MAC_A: Mac = [0x02, 0x00, 0x00, 0x00, 0x00, 0x0a];
pub(super) const MAC_B: Mac = [0x02, 0x00, 0x00, 0x00, 0x00, 0x0b];
pub(super) const IP_A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub(super) const IP_B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub(super) const G_A: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
pub(super) const G_B: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);

pub(super) fn t(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

pub(super) fn cfg(mac: Mac, v4: Ipv4Addr, v6: Ipv6Addr) -> IfaceConfig {
    let mut c = IfaceConfig::new(mac);
    c.ipv4 = Some((v4, 24));
    c.ipv6 = vec![(v6, 64)];
    c
}

pub(super) fn pair() -> (Iface, Iface) {
    (
        Iface::new(cfg(MAC_A, IP_A, G_A)),
        Iface::new(cfg(MAC_B, IP_B, G_B)),
    )
}

pub(super) fn sa(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}

/// A RoCE packet (RC SEND ONLY, BTH .. ICRC) as the engine makes it: ICRC for IPv4 ID 0.
pub(super) fn roce_packet(src: SocketAddr, dst: SocketAddr, len: usize, seed: u8) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    p[0] = 0x04;
    let ph = PseudoHeaders::new(src, dst, 0, len);
    icrc::fill(ph.ip(), ph.udp(), &mut p).unwrap();
    p
}

pub(super) fn drain(i: &mut Iface, now: Duration) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; i.frame_capacity()];
    while let Some(n) = i.poll_transmit(now, &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

/// A frame received as RoCE, with what `receive` said.
pub(super) type Delivered = (Vec<u8>, SocketAddr, SocketAddr, Option<u16>, Range<usize>);

/// Moves control traffic both ways until both are quiet; returns the RoCE frames each
/// side received (at A, at B).
pub(super) fn pump(
    a: &mut Iface,
    b: &mut Iface,
    now: Duration,
) -> (Vec<Delivered>, Vec<Delivered>) {
    let (mut at_a, mut at_b) = (Vec::new(), Vec::new());
    for _ in 0..16 {
        let (fa, fb) = (drain(a, now), drain(b, now));
        if fa.is_empty() && fb.is_empty() {
            return (at_a, at_b);
        }
        for (frames, to, got) in [(fa, &mut *b, &mut at_b), (fb, &mut *a, &mut at_a)] {
            for f in frames {
                if let Rx::Roce {
                    src,
                    dst,
                    ipv4_id,
                    payload,
                    ..
                } = to.receive(now, &f)
                {
                    got.push((f, src, dst, ipv4_id, payload));
                }
            }
        }
    }
    panic!("no convergence");
}

/// Checks a delivered frame: the range is the packet sent (but for the rebased ICRC), the
/// ICRC verifies for the ID the frame carries, in place and from pseudo headers.
pub(super) fn check_delivered(d: &Delivered, sent: &[u8]) {
    let (f, src, dst, id, r) = d;
    let got = &f[r.clone()];
    assert_eq!(got.len(), sent.len());
    assert_eq!(got[..got.len() - 4], sent[..sent.len() - 4]);
    RoceFrame::parse_ethernet(f).unwrap().verify_icrc().unwrap();
    let ph = PseudoHeaders::new(*src, *dst, id.unwrap_or(0), got.len());
    icrc::verify(ph.ip(), ph.udp(), got).unwrap();
}

#[test]
fn arp_request_and_reply_are_byte_exact() {
    let (mut a, mut b) = pair();
    let (s, d) = (sa(IP_A, 49152), sa(IP_B, 4791));
    let mut out = [0u8; 1600];
    let p = roce_packet(s, d, 32, 1);
    assert_eq!(a.send(t(0.0), s, d, Ecn::NotEct, &p, &mut out), Ok(None));
    let req = drain(&mut a, t(0.0));
    assert_eq!(req.len(), 1);
    let mut want = Vec::new();
    want.extend([0xff; 6]);
    want.extend(MAC_A);
    want.extend([0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    want.extend(MAC_A);
    want.extend([10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2]);
    want.resize(60, 0);
    assert_eq!(req[0], want);

    assert_eq!(b.receive(t(0.0), &req[0]), Rx::Consumed);
    let rep = drain(&mut b, t(0.0));
    let mut want = Vec::new();
    want.extend(MAC_A);
    want.extend(MAC_B);
    want.extend([0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2]);
    want.extend(MAC_B);
    want.extend([10, 0, 0, 2]);
    want.extend(MAC_A);
    want.extend([10, 0, 0, 1]);
    want.resize(60, 0);
    assert_eq!(rep, vec![want]);
    assert_eq!(b.stats().arp_requests_rx, 1);
    assert_eq!(b.stats().arp_replies_tx, 1);
    // RFC 826: B, the target, learned A from the request.
    assert!(b
        .neighbors()
        .any(|(ip, m, _)| ip == IpAddr::V4(IP_A) && m == MAC_A));
}

/// The NS A sends for B's link-local address, and B's NA, field by field; the ICMPv6
/// checksums checked by etherparse.
#[test]
fn ns_and_na_are_byte_exact() {
    let (mut a, mut b) = pair();
    let (lla, llb) = (a.link_local(), b.link_local());
    assert_eq!(
        lla,
        "fe80::ff:fe00:a".parse::<Ipv6Addr>().unwrap(),
        "EUI-64 flips the U/L bit"
    );
    let (s, d) = (sa(lla, 49152), sa(llb, 4791));
    let mut out = [0u8; 1600];
    assert_eq!(
        a.send(
            t(0.0),
            s,
            d,
            Ecn::NotEct,
            &roce_packet(s, d, 40, 2),
            &mut out
        ),
        Ok(None)
    );
    let ns = drain(&mut a, t(0.0)).remove(0);
    let mut want = vec![0x33, 0x33, 0xff, 0x00, 0x00, 0x0b];
    want.extend(MAC_A);
    want.extend([0x86, 0xdd, 0x60, 0, 0, 0, 0, 32, 58, 255]);
    want.extend(lla.octets());
    want.extend("ff02::1:ff00:b".parse::<Ipv6Addr>().unwrap().octets());
    want.extend([135, 0, ns[56], ns[57], 0, 0, 0, 0]);
    want.extend(llb.octets());
    want.extend([1, 1]);
    want.extend(MAC_A);
    assert_eq!(ns, want);
    assert_icmpv6_checksum(&ns);

    assert_eq!(b.receive(t(0.0), &ns), Rx::Consumed);
    let na = drain(&mut b, t(0.0)).remove(0);
    let mut want = MAC_A.to_vec();
    want.extend(MAC_B);
    want.extend([0x86, 0xdd, 0x60, 0, 0, 0, 0, 32, 58, 255]);
    want.extend(llb.octets());
    want.extend(lla.octets());
    // Solicited and override set.
    want.extend([136, 0, na[56], na[57], 0x60, 0, 0, 0]);
    want.extend(llb.octets());
    want.extend([2, 1]);
    want.extend(MAC_B);
    assert_eq!(na, want);
    assert_icmpv6_checksum(&na);

    // The NA releases the held datagram.
    assert_eq!(a.receive(t(0.0), &na), Rx::Consumed);
    let (_, at_b) = pump(&mut a, &mut b, t(0.0));
    assert_eq!(at_b.len(), 1);
    assert_eq!(at_b[0].3, None);
}

fn assert_icmpv6_checksum(f: &[u8]) {
    let p = SlicedPacket::from_ethernet(f).unwrap();
    let Some(NetSlice::Ipv6(ip)) = &p.net else {
        panic!("not IPv6")
    };
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!("not ICMPv6")
    };
    let h = ip.header();
    assert!(icmp.is_checksum_valid(h.source(), h.destination()));
}

#[test]
fn echo_v4_reply_has_valid_checksums() {
    let (_, mut b) = pair();
    let data = b"abcdefghijklmnopq"; // odd length: the checksum's padding byte
    let mut req = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(IP_A.octets(), IP_B.octets(), 64)
        .icmpv4_echo_request(0x1234, 7)
        .write(&mut req, data)
        .unwrap();
    assert_eq!(b.receive(t(0.0), &req), Rx::Consumed);
    let rep = drain(&mut b, t(0.0)).remove(0);
    let p = SlicedPacket::from_ethernet(&rep).unwrap();
    assert_eq!(rep[..6], MAC_A);
    let Some(NetSlice::Ipv4(ip)) = &p.net else {
        panic!()
    };
    let h: Ipv4HeaderSlice = ip.header();
    assert_eq!(h.source(), IP_B.octets());
    assert_eq!(h.destination(), IP_A.octets());
    assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum());
    let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
        panic!()
    };
    let icmp: &Icmpv4Slice = icmp;
    assert_eq!(icmp.type_u8(), 0);
    assert_eq!(&rep[14 + 20 + 4..14 + 20 + 8], &[0x12, 0x34, 0, 7]);
    assert_eq!(icmp.payload(), data);
    let want = Icmpv4Header::with_checksum(icmp.icmp_type(), icmp.payload());
    assert_eq!(icmp.checksum(), want.checksum);
    assert_eq!(b.stats().icmp_echo, 1);

    // A corrupted request is counted, not answered.
    let mut bad = req.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert_eq!(
        b.receive(t(0.0), &bad),
        Rx::Dropped(DropReason::BadChecksum)
    );
    assert!(drain(&mut b, t(0.0)).is_empty());
}

#[test]
fn echo_v6_reply_has_valid_checksum() {
    let (_, mut b) = pair();
    let mut req = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv6(G_A.octets(), G_B.octets(), 64)
        .icmpv6_echo_request(9, 3)
        .write(&mut req, b"ping -6")
        .unwrap();
    assert_eq!(b.receive(t(0.0), &req), Rx::Consumed);
    let rep = drain(&mut b, t(0.0)).remove(0);
    assert_icmpv6_checksum(&rep);
    assert_eq!(rep[0..6], MAC_A);
    assert_eq!(rep[14 + 8..14 + 24], G_B.octets());
    assert_eq!(rep[14 + 24..14 + 40], G_A.octets());
    assert_eq!(rep[54], 129);
    assert_eq!(&rep[58..], b"\0\x09\0\x03ping -6");
    assert_eq!(b.stats().icmpv6_echo, 1);
}

/// The whole exchange over IPv4: ARP first, the held datagram released by the reply, B
/// delivers it with the right range and ID; later datagrams go straight out, IDs count
/// up, and each ICRC verifies for its ID. B learned A from the request and answers
/// without ARP.
#[test]
fn back_to_back_ipv4() {
    let (mut a, mut b) = pair();
    let (s, d) = (sa(IP_A, 49152), sa(IP_B, 4791));
    let mut out = vec![0u8; a.frame_capacity()];
    let first = roce_packet(s, d, 64, 0);
    assert_eq!(
        a.send(t(0.0), s, d, Ecn::NotEct, &first, &mut out),
        Ok(None)
    );
    assert_eq!(a.pending(), 1);
    let (_, at_b) = pump(&mut a, &mut b, t(0.0));
    assert_eq!(at_b.len(), 1);
    assert_eq!(a.pending(), 0);
    check_delivered(&at_b[0], &first);
    assert_eq!((at_b[0].1, at_b[0].2, at_b[0].3), (s, d, Some(0)));
    assert_eq!(at_b[0].4, 42..42 + 64);

    for (k, len) in [(1u16, 20usize), (2, 1000), (3, 1472)] {
        let p = roce_packet(s, d, len, k as u8);
        let n = a
            .send(t(0.1), s, d, Ecn::NotEct, &p, &mut out)
            .unwrap()
            .unwrap();
        assert_eq!(n, (42 + len).max(60));
        match b.receive(t(0.1), &out[..n]) {
            Rx::Roce {
                src,
                dst,
                ipv4_id,
                payload,
                ..
            } => {
                assert_eq!(ipv4_id, Some(k));
                check_delivered(&(out[..n].to_vec(), src, dst, ipv4_id, payload), &p);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        a.send(
            t(0.1),
            s,
            d,
            Ecn::NotEct,
            &roce_packet(s, d, 1473, 0),
            &mut out
        ),
        Err(TxError::TooBig)
    );
    // B -> A without resolution.
    let (bs, bd) = (sa(IP_B, 50001), sa(IP_A, 4791));
    let back = roce_packet(bs, bd, 24, 9);
    let n = b
        .send(t(0.2), bs, bd, Ecn::NotEct, &back, &mut out)
        .unwrap()
        .unwrap();
    assert!(matches!(a.receive(t(0.2), &out[..n]), Rx::Roce { .. }));
    assert_eq!(b.stats().arp_requests_tx, 0);
    assert_eq!(a.stats().tx_roce, 4);
    assert_eq!(b.stats().rx_roce, 4);
}

/// A datagram sent after the neighbour answered but before the released ones were
/// polled queues behind them: order (and ID order) is kept.
#[test]
fn released_datagrams_are_not_overtaken() {
    let (mut a, mut b) = pair();
    let (s, d) = (sa(IP_A, 49152), sa(IP_B, 4791));
    let mut out = vec![0u8; 1600];
    let p1 = roce_packet(s, d, 20, 1);
    let p2 = roce_packet(s, d, 24, 2);
    assert_eq!(a.send(t(0.0), s, d, Ecn::NotEct, &p1, &mut out), Ok(None));
    for f in drain(&mut a, t(0.0)) {
        b.receive(t(0.0), &f);
    }
    for f in drain(&mut b, t(0.0)) {
        a.receive(t(0.0), &f);
    }
    assert_eq!(a.send(t(0.0), s, d, Ecn::NotEct, &p2, &mut out), Ok(None));
    assert_eq!(a.pending(), 2);
    let frames = drain(&mut a, t(0.0));
    assert_eq!(frames.len(), 2);
    for (k, (f, p)) in frames.iter().zip([&p1, &p2]).enumerate() {
        match b.receive(t(0.0), f) {
            Rx::Roce {
                src,
                dst,
                ipv4_id,
                payload,
                ..
            } => {
                assert_eq!(ipv4_id, Some(k as u16));
                check_delivered(&(f.clone(), src, dst, ipv4_id, payload), p);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(a.pending(), 0);
    assert!(a
        .send(t(0.0), s, d, Ecn::NotEct, &p2, &mut out)
        .unwrap()
        .is_some());
}

/// IPv6 both ways, global addresses; then link-local.
#[test]
fn back_to_back_ipv6() {
    let (mut a, mut b) = pair();
    let mut out = vec![0u8; 1600];
    for (s, d) in [
        (sa(G_A, 49152), sa(G_B, 4791)),
        (sa(a.link_local(), 50000), sa(b.link_local(), 4791)),
    ] {
        let p = roce_packet(s, d, 100, 3);
        assert_eq!(a.send(t(0.0), s, d, Ecn::NotEct, &p, &mut out), Ok(None));
        let (_, at_b) = pump(&mut a, &mut b, t(0.0));
        assert_eq!(at_b.len(), 1);
        check_delivered(&at_b[0], &p);
        assert_eq!(at_b[0].4, 62..162);
        // And back: B learned A from the NS's source link-layer option.
        let (bs, bd) = (sa(d.ip(), 50001), sa(s.ip(), 4791));
        let q = roce_packet(bs, bd, 28, 4);
        let n = b
            .send(t(0.0), bs, bd, Ecn::NotEct, &q, &mut out)
            .unwrap()
            .unwrap();
        match a.receive(t(0.0), &out[..n]) {
            Rx::Roce {
                src,
                dst,
                ipv4_id,
                payload,
                ..
            } => check_delivered(&(out[..n].to_vec(), src, dst, ipv4_id, payload), &q),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(a.stats().nd_ns_tx, 2);
    assert_eq!(b.stats().nd_na_tx, 2);
    assert_eq!(b.stats().nd_ns_tx, 0);
}

/// A neighbour that never answers: three requests a second apart, then the held
/// datagrams are dropped and counted; a later send starts over.
#[test]
fn unanswered_resolution_gives_up() {
    let (mut a, _) = pair();
    let (s, d) = (sa(IP_A, 49152), sa(Ipv4Addr::new(10, 0, 0, 9), 4791));
    let mut out = vec![0u8; 1600];
    for k in 0..3 {
        assert_eq!(
            a.send(
                t(0.0),
                s,
                d,
                Ecn::NotEct,
                &roce_packet(s, d, 20, k),
                &mut out
            ),
            Ok(None)
        );
    }
    assert_eq!(drain(&mut a, t(0.0)).len(), 1);
    for (at, requests) in [(1.0, 1), (2.0, 1), (3.0, 0)] {
        assert_eq!(a.poll_timeout(), Some(t(at)));
        a.handle_timeout(t(at));
        assert_eq!(drain(&mut a, t(at)).len(), requests);
    }
    assert_eq!(a.poll_timeout(), None);
    let st = a.stats();
    assert_eq!(
        (
            st.arp_requests_tx,
            st.resolve_failed,
            st.pending_dropped,
            a.pending()
        ),
        (3, 1, 3, 0)
    );
    assert_eq!(
        a.send(
            t(4.0),
            s,
            d,
            Ecn::NotEct,
            &roce_packet(s, d, 20, 0),
            &mut out
        ),
        Ok(None)
    );
    assert_eq!(a.stats().arp_requests_tx, 4);
}

#[test]
fn pending_queue_is_bounded() {
    let mut c = cfg(MAC_A, IP_A, G_A);
    c.pending_max = 4;
    c.pending_total_max = 6;
    let mut a = Iface::new(c);
    let s = sa(IP_A, 49152);
    let mut out = vec![0u8; 1600];
    let d1 = sa(Ipv4Addr::new(10, 0, 0, 7), 4791);
    let d2 = sa(Ipv4Addr::new(10, 0, 0, 8), 4791);
    let p = roce_packet(s, d1, 20, 0);
    for _ in 0..4 {
        assert_eq!(a.send(t(0.0), s, d1, Ecn::NotEct, &p, &mut out), Ok(None));
    }
    assert_eq!(
        a.send(t(0.0), s, d1, Ecn::NotEct, &p, &mut out),
        Err(TxError::QueueFull)
    );
    for _ in 0..2 {
        assert_eq!(a.send(t(0.0), s, d2, Ecn::NotEct, &p, &mut out), Ok(None));
    }
    assert_eq!(
        a.send(t(0.0), s, d2, Ecn::NotEct, &p, &mut out),
        Err(TxError::QueueFull),
        "total bound"
    );
    assert_eq!((a.stats().queue_full, a.pending()), (2, 6));
}

#[test]
fn vlan_tagged_both_ways_and_mismatches_counted() {
    let (mut ca, mut cb) = (cfg(MAC_A, IP_A, G_A), cfg(MAC_B, IP_B, G_B));
    ca.vlan = Some(100);
    cb.vlan = Some(100);
    let (mut a, mut b) = (Iface::new(ca), Iface::new(cb));
    let (s, d) = (sa(IP_A, 49152), sa(IP_B, 4791));
    let mut out = vec![0u8; a.frame_capacity()];
    assert_eq!(a.frame_capacity(), 1518);
    let p = roce_packet(s, d, 1472, 0);
    assert_eq!(a.send(t(0.0), s, d, Ecn::NotEct, &p, &mut out), Ok(None));
    let req = drain(&mut a, t(0.0));
    assert_eq!(req[0][12..18], [0x81, 0x00, 0x00, 0x64, 0x08, 0x06]);
    for f in &req {
        b.receive(t(0.0), f);
    }
    for f in drain(&mut b, t(0.0)) {
        a.receive(t(0.0), &f);
    }
    let n = a.poll_transmit(t(0.0), &mut out).unwrap();
    assert_eq!(n, 1518);
    match b.receive(t(0.0), &out[..n]) {
        Rx::Roce { payload, .. } => assert_eq!(payload, 46..46 + 1472),
        other => panic!("{other:?}"),
    }
    // Untagged into a tagged interface, tagged into an untagged one, another VID.
    let mut plain = Iface::new(cfg(MAC_B, IP_B, G_B));
    assert_eq!(
        plain.receive(t(0.0), &out[..n]),
        Rx::Dropped(DropReason::BadVlan)
    );
    let mut untagged = out[..n].to_vec();
    untagged.drain(12..16);
    assert_eq!(
        b.receive(t(0.0), &untagged),
        Rx::Dropped(DropReason::BadVlan)
    );
    let mut other = out[..n].to_vec();
    other[15] = 101;
    assert_eq!(b.receive(t(0.0), &other), Rx::Dropped(DropReason::BadVlan));
    assert_eq!(b.stats().bad_vlan, 2);
    // A priority tag (VID 0) is untagged traffic.
    let mut prio = out[..n].to_vec();
    prio[14..16].copy_from_slice(&[0x60, 0x00]);
    assert!(matches!(plain.receive(t(0.0), &prio), Rx::Roce { .. }));
}

/// A valid IPv4 RoCE frame from A to B (built by A, whose ARP was answered by hand).
pub(super) fn roce_frame_v4() -> Vec<u8> {
    let (mut a, mut b) = pair();
    let (s, d) = (sa(IP_A, 49152), sa(IP_B, 4791));
    let mut out = vec![0u8; 1600];
    a.send(
        t(0.0),
        s,
        d,
        Ecn::NotEct,
        &roce_packet(s, d, 32, 0),
        &mut out,
    )
    .unwrap();
    pump(&mut a, &mut b, t(0.0));
    let n = a
        .send(
            t(0.0),
            s,
            d,
            Ecn::NotEct,
            &roce_packet(s, d, 32, 0),
            &mut out,
        )
        .unwrap()
        .unwrap();
    out.truncate(n);
    out
}

/// Re-checksums the IPv4 header of an Ethernet frame after a test edited it.
fn fix_ipv4_checksum(f: &mut [u8]) {
    f[24..26].fill(0);
    let c = ip::finish(ip::sum(&f[14..34], 0));
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn drops_are_counted_by_reason() {
    let (_, mut b) = pair();
    let good = roce_frame_v4();
    assert!(matches!(b.receive(t(0.0), &good), Rx::Roce { .. }));
    let mut cases: Vec<(Vec<u8>, DropReason)> = Vec::new();
    let edit = |f: &dyn Fn(&mut Vec<u8>), fix: bool| {
        let mut x = good.clone();
        f(&mut x);
        if fix {
            fix_ipv4_checksum(&mut x);
        }
        x
    };
    cases.push((edit(&|f| f[5] = 0x0c, false), DropReason::NotForUs));
    cases.push((edit(&|f| f[33] = 3, true), DropReason::NotForUs));
    cases.push((edit(&|f| f[6] = 0x01, false), DropReason::Malformed));
    cases.push((good[..20].to_vec(), DropReason::Malformed));
    cases.push((edit(&|f| f[22] = 1, false), DropReason::BadChecksum));
    cases.push((edit(&|f| f[20] = 0x20, true), DropReason::Fragment));
    cases.push((edit(&|f| f[37] = 0, false), DropReason::NotRocePort));
    cases.push((edit(&|f| f[23] = 6, true), DropReason::Unsupported));
    cases.push((edit(&|f| f[12] = 0x88, false), DropReason::Unsupported));
    cases.push((edit(&|f| f[16..18].fill(0xff), true), DropReason::Malformed));
    cases.push((edit(&|f| f[29] = 255, true), DropReason::BadSource));
    // A non-zero UDP checksum is checked.
    cases.push((edit(&|f| f[40] = 1, false), DropReason::BadChecksum));
    for (f, want) in &cases {
        assert_eq!(b.receive(t(0.0), f), Rx::Dropped(*want), "{want:?}");
    }
    let st = b.stats();
    assert_eq!(
        (
            st.not_for_us,
            st.malformed,
            st.bad_checksum,
            st.ipv4_fragment,
            st.not_roce_port,
            st.unsupported,
            st.bad_source,
        ),
        (2, 3, 2, 1, 1, 2, 1)
    );
    assert_eq!(st.rx_frames, 1 + cases.len() as u64);

    // IPv6: an extension header; an NS with hop limit 64.
    let mut c = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv6(G_A.octets(), G_B.octets(), 64)
        .udp(49152, 4791)
        .write(&mut c, &[0u8; 24])
        .unwrap();
    c[20] = 60;
    assert_eq!(
        b.receive(t(0.0), &c),
        Rx::Dropped(DropReason::Ipv6ExtensionHeader)
    );
    let (mut a, _) = pair();
    let (s, d) = (sa(G_A, 1), sa(G_B, 4791));
    a.send(
        t(0.0),
        s,
        d,
        Ecn::NotEct,
        &roce_packet(s, d, 20, 0),
        &mut [0u8; 1600],
    )
    .unwrap();
    let mut ns = drain(&mut a, t(0.0)).remove(0);
    ns[21] = 64;
    assert_eq!(b.receive(t(0.0), &ns), Rx::Dropped(DropReason::BadHopLimit));
}

#[test]
fn sends_without_a_route_are_refused() {
    let (mut a, _) = pair();
    let mut out = vec![0u8; 1600];
    let s = sa(IP_A, 49152);
    let p = [0u8; 20];
    for (d, want) in [
        (sa(Ipv4Addr::new(10, 0, 1, 5), 4791), TxError::NoRoute),
        (sa(Ipv4Addr::new(10, 0, 0, 255), 4791), TxError::NoRoute),
        (sa(IP_A, 4791), TxError::NoRoute),
        (sa(G_B, 4791), TxError::NoRoute),
        (
            sa("fd01::2".parse::<Ipv6Addr>().unwrap(), 4791),
            TxError::NoRoute,
        ),
    ] {
        assert_eq!(
            a.send(t(0.0), s, d, Ecn::NotEct, &p, &mut out),
            Err(want),
            "{d}"
        );
    }
    let d = sa(IP_B, 4791);
    assert_eq!(
        a.send(t(0.0), sa(IP_B, 1), d, Ecn::NotEct, &p, &mut out),
        Err(TxError::BadSource)
    );
    assert_eq!(
        a.send(t(0.0), s, d, Ecn::NotEct, &p, &mut out[..50]),
        Err(TxError::BufferTooSmall)
    );
    // An IPv4-mapped destination is IPv4.
    let mapped = sa(IP_B.to_ipv6_mapped(), 4791);
    assert_eq!(
        a.send(t(0.0), s, mapped, Ecn::NotEct, &p, &mut out),
        Ok(None)
    );
    assert_eq!((a.stats().no_route, a.stats().tx_bad_source), (5, 1));
}

/// RFC 4861 §7.2.4: a DAD probe (from ::) for our address is answered to all-nodes with
/// the solicited flag clear; RFC 826: an ARP request for someone else updates an entry we
/// have but creates none.
#[test]
fn dad_probe_and_arp_merge_rules() {
    let (_, mut b) = pair();
    let llb = b.link_local();
    let group = eth::solicited_node(&llb);
    let mut ns = vec![0u8; 14 + 40 + 24];
    eth::emit(
        &mut ns,
        eth::ipv6_multicast_mac(&group),
        MAC_A,
        None,
        eth::ETHERTYPE_IPV6,
    );
    ip::emit_v6(
        &mut ns[14..],
        &Ipv6Addr::UNSPECIFIED,
        &group,
        ip::PROTO_ICMPV6,
        255,
        Ecn::NotEct,
        24,
    );
    ns[54] = 135;
    ns[62..78].copy_from_slice(&llb.octets());
    let c = ip::finish(ip::sum(
        &ns[54..],
        ip::pseudo_v6(&Ipv6Addr::UNSPECIFIED, &group, 58, 24),
    ));
    ns[56..58].copy_from_slice(&c.to_be_bytes());
    assert_eq!(b.receive(t(0.0), &ns), Rx::Consumed);
    let na = drain(&mut b, t(0.0)).remove(0);
    assert_eq!(na[..6], [0x33, 0x33, 0, 0, 0, 1]);
    assert_eq!(na[38..54], eth::ALL_NODES.octets());
    assert_eq!(na[58], 0x20, "override only");
    assert_icmpv6_checksum(&na);
    assert_eq!(b.neighbors().count(), 0, "nothing learned from ::");

    let arp = |sha: Mac, spa: Ipv4Addr, tpa: Ipv4Addr| {
        let mut f = vec![0u8; 60];
        eth::emit(&mut f, eth::BROADCAST, sha, None, eth::ETHERTYPE_ARP);
        arp::Arp {
            op: arp::OP_REQUEST,
            sha,
            spa,
            tha: [0; 6],
            tpa,
        }
        .emit(&mut f[14..]);
        f
    };
    let c_ip = Ipv4Addr::new(10, 0, 0, 3);
    let other = Ipv4Addr::new(10, 0, 0, 4);
    let mac_c: Mac = [2, 0, 0, 0, 0, 0x0c];
    assert_eq!(
        b.receive(t(0.0), &arp(mac_c, c_ip, other)),
        Rx::Dropped(DropReason::NotForUs)
    );
    assert_eq!(b.neighbors().count(), 0);
    assert_eq!(b.receive(t(0.0), &arp(mac_c, c_ip, IP_B)), Rx::Consumed);
    let mac_c2: Mac = [2, 0, 0, 0, 0, 0x0d];
    b.receive(t(1.0), &arp(mac_c2, c_ip, other));
    let e: Vec<_> = b.neighbors().collect();
    let stale = NeighborState::Stale { since: t(1.0) };
    assert_eq!(
        e,
        vec![(IpAddr::V4(c_ip), mac_c2, stale)],
        "merged, unconfirmed"
    );
    assert_eq!(b.stats().neighbor_mac_changed, 1);
}

/// A caller that never drains `poll_transmit` loses replies, not memory.
#[test]
fn control_queue_is_bounded() {
    let (mut a, mut b) = pair();
    let mut out = vec![0u8; 1600];
    let (s, d) = (sa(IP_A, 1), sa(IP_B, 4791));
    a.send(
        t(0.0),
        s,
        d,
        Ecn::NotEct,
        &roce_packet(s, d, 20, 0),
        &mut out,
    )
    .unwrap();
    let req = drain(&mut a, t(0.0)).remove(0);
    for _ in 0..100 {
        b.receive(t(0.0), &req);
    }
    assert_eq!(drain(&mut b, t(0.0)).len(), CONTROL_MAX);
    assert_eq!(b.stats().control_dropped, 100 - CONTROL_MAX as u64);
}
