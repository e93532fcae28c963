//! QP1 packets: what `Sender::build` makes parses back; the CM MADs of a real rping
//! (kernel rxe at both ends, tests/data/cm/rping_cm_s64.pcap) parse as valid QP1 packets,
//! ICRC included; every header rxe checks, when wrong, is its own counted drop.

use super::*;
use crate::cli::pcap::for_each_record;
use crate::wire::RoceFrame;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

const CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/cm/rping_cm_s64.pcap"
);

fn v4(a: [u8; 4], port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(a)), port)
}

fn mad(seed: u8) -> [u8; MAD_LEN] {
    core::array::from_fn(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
}

/// (src, dst, ipv4 id, packet) as a UDP socket or a frame port would hand it over.
fn built(src: SocketAddr, dst: SocketAddr, m: &[u8]) -> Vec<u8> {
    let mut s = Sender::new();
    let mut buf = vec![0u8; PACKET_LEN + 16];
    let n = s.build(src, dst, m, &mut buf);
    assert_eq!(n, PACKET_LEN);
    buf.truncate(n);
    buf
}

#[test]
fn a_built_packet_parses_back_over_ipv4_and_ipv6() {
    let m = mad(3);
    let (src, dst) = (v4([10, 0, 0, 1], 0xc0ba), v4([10, 0, 0, 2], 4791));
    let pkt = built(src, dst, &m);
    // Its headers are rxe's for a GSI send.
    let p = crate::wire::RocePacket::new_checked(&pkt[..]).unwrap();
    let r = RoceRepr::parse(&p).unwrap();
    assert_eq!(r.bth.opcode, op::UD_SEND_ONLY);
    assert_eq!(
        (r.bth.pkey, r.bth.dqpn, r.bth.psn),
        (0xffff, 1, Psn::new(0))
    );
    assert_eq!(
        r.deth,
        Some(DethRepr {
            qkey: GSI_QKEY,
            src_qpn: 1
        })
    );
    let mut solver = Ipv4IdSolver::new();
    // As a frame port sees it (ID 0, what it is built for), and as a UDP socket (no ID).
    for id in [Some(0), None] {
        let net = Net {
            src,
            dst,
            ipv4_id: id,
        };
        assert_eq!(parse(&net, &pkt, &mut solver), Ok(&m[..]));
    }
    // Another address under the ICRC: not valid.
    let wrong = Net {
        src: v4([10, 0, 0, 3], 0xc0ba),
        dst,
        ipv4_id: Some(0),
    };
    assert_eq!(parse(&wrong, &pkt, &mut solver), Err(Drop::Icrc));

    let s6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)), 4791);
    let d6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)), 4791);
    let pkt6 = built(s6, d6, &m);
    let net6 = Net {
        src: s6,
        dst: d6,
        ipv4_id: None,
    };
    assert_eq!(parse(&net6, &pkt6, &mut solver), Ok(&m[..]));
}

#[test]
fn the_psn_counts_up_per_packet() {
    let mut s = Sender::new();
    let (src, dst) = (v4([10, 0, 0, 1], 1), v4([10, 0, 0, 2], 4791));
    let mut buf = [0u8; PACKET_LEN];
    for want in 0..3u32 {
        s.build(src, dst, &mad(0), &mut buf);
        assert_eq!(bth::Packet::new_unchecked(&buf[..]).psn(), Psn::new(want));
    }
}

/// The five CM MADs of a real rping connection (REQ, REP, RTU, DREQ, DREP: frames 1, 2,
/// 3, 40, 41) are valid QP1 packets for this parser, ICRC included, whether it sees the
/// IPv4 identification (a frame port) or has to solve for it (a UDP socket: rxe numbers
/// its packets, so the ID is not 0).
#[test]
fn rxes_cm_mads_are_valid_qp1_packets() {
    let bytes = std::fs::read(CAPTURE).unwrap();
    let mut found = Vec::new();
    let mut solver = Ipv4IdSolver::new();
    for_each_record(&bytes, |r| {
        let f = RoceFrame::parse_ethernet(r.data).unwrap();
        if !is_for_qp1(f.roce) {
            return;
        }
        let src = SocketAddr::new(f.ip.src(), f.udp.source_port());
        let dst = SocketAddr::new(f.ip.dst(), f.udp.destination_port());
        let id = match &f.ip {
            crate::wire::frame::IpSlice::V4(h) => h.identification(),
            crate::wire::frame::IpSlice::V6(_) => unreachable!("the capture is IPv4"),
        };
        for ipv4_id in [Some(id), None] {
            let net = Net { src, dst, ipv4_id };
            let m =
                parse(&net, f.roce, &mut solver).unwrap_or_else(|e| panic!("frame {}: {e:?}", r.n));
            assert_eq!(m.len(), MAD_LEN);
            // A CM MAD: base version 1, class 7 (IBA 13.4.2).
            assert_eq!((m[0], m[1]), (1, 7), "frame {}", r.n);
        }
        // The wrong ID under the ICRC fails: the check is real.
        let net = Net {
            src,
            dst,
            ipv4_id: Some(id ^ 1),
        };
        assert_eq!(parse(&net, f.roce, &mut solver), Err(Drop::Icrc));
        found.push(r.n);
    })
    .unwrap();
    assert_eq!(found, [1, 2, 3, 40, 41]);
}

/// Each header rxe checks, made wrong in a packet otherwise valid (ICRC refilled), is its
/// own drop; a damaged byte is an ICRC drop; short packets are short.
#[test]
fn every_wrong_header_is_its_own_drop() {
    let (src, dst) = (v4([10, 0, 0, 1], 0xc0ba), v4([10, 0, 0, 2], 4791));
    let net = Net {
        src,
        dst,
        ipv4_id: Some(0),
    };
    let good = built(src, dst, &mad(9));
    let refill = |p: &mut Vec<u8>| {
        let ph = PseudoHeaders::new(src, dst, 0, p.len());
        icrc::fill(ph.ip(), ph.udp(), p).unwrap();
    };
    let mut solver = Ipv4IdSolver::new();
    let mut case = |edit: &dyn Fn(&mut Vec<u8>), want: Drop| {
        let mut p = good.clone();
        edit(&mut p);
        refill(&mut p);
        assert_eq!(parse(&net, &p, &mut solver), Err(want));
    };
    case(&|p| p[1] |= 0x01, Drop::Tver);
    case(&|p| p[0] = op::UD_SEND_ONLY_WITH_IMMEDIATE.0, Drop::Opcode);
    case(&|p| p[0] = op::RC_SEND_ONLY.0, Drop::Opcode);
    case(&|p| p[2..4].copy_from_slice(&[0x80, 0x01]), Drop::Pkey);
    case(
        &|p| p[12..16].copy_from_slice(&0x0123_4567u32.to_be_bytes()),
        Drop::Qkey,
    );
    case(&|p| p.truncate(PACKET_LEN - 4), Drop::Length);
    case(&|p| p.extend_from_slice(&[0; 4]), Drop::Length);
    // The limited P_Key is a match (rxe's `pkey_match`).
    let mut p = good.clone();
    p[2] = 0x7f;
    refill(&mut p);
    assert!(parse(&net, &p, &mut solver).is_ok());
    // A flipped payload bit: the ICRC.
    let mut p = good.clone();
    p[100] ^= 0x10;
    assert_eq!(parse(&net, &p, &mut solver), Err(Drop::Icrc));
    for n in [0, 11, 12, 23] {
        assert_eq!(parse(&net, &good[..n], &mut solver), Err(Drop::Short));
    }
    let mut c = Qp1Counters::default();
    c.count(Drop::Qkey);
    c.count(Drop::Short);
    assert_eq!((c.qkey_viol_cntr, c.drop_short, c.dropped()), (1, 1, 2));
}
