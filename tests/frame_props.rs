//! Property tests for whole frames (`src/wire/frame.rs`, `src/wire/icrc.rs`): round trip
//! through `FrameRepr::emit` and `RoceFrame::parse_ethernet`, an ICRC reference computed
//! here bit by bit, and single byte changes: an invariant byte changes the ICRC, a variant
//! (masked) field does not. Shared strategies: tests/common/wire_gen.rs.

mod common;

use common::wire_gen::*;
use etherparse::{
    EtherType, Ethernet2Header, IpDscp, IpEcn, IpFragOffset, IpNumber, Ipv4Header, Ipv4Options,
    Ipv6FlowLabel, Ipv6Header, SingleVlanHeader, SlicedPacket, TransportSlice, UdpHeader, VlanId,
    VlanPcp,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use roce_emu::wire::{
    bth, icrc, FrameRepr, IpRepr, RoceFrame, RoceRepr, WireError, ICRC_LEN, ROCE_UDP_PORT,
};
use std::net::SocketAddr;

fn config() -> ProptestConfig {
    common::wire_gen::config("proptest-regressions/frame_props.txt")
}

// ---------------------------------------------------------------------------------------
// 4. Whole frames
// ---------------------------------------------------------------------------------------

/// CRC-32 (IEEE 802.3, reflected, as zlib), bit by bit: a reference independent of the
/// crate's `crc32fast`.
fn crc32_reference(parts: &[&[u8]]) -> u32 {
    let mut crc = !0u32;
    for part in parts {
        for &b in *part {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
    }
    !crc
}

/// Bits of an IP header byte that are variant, i.e. replaced by ones for the ICRC
/// (IBA A17.4.1): IPv4 TOS (DSCP+ECN), TTL, header checksum; IPv6 traffic class, flow
/// label, hop limit.
fn ip_variant_bits(v6: bool, i: usize) -> u8 {
    match (v6, i) {
        (false, 1) | (false, 8) | (false, 10) | (false, 11) => 0xff,
        (true, 0) => 0x0f,
        (true, 1..=3) | (true, 7) => 0xff,
        _ => 0,
    }
}

/// Variant bits of a UDP header byte: the checksum.
fn udp_variant_bits(i: usize) -> u8 {
    if i == 6 || i == 7 {
        0xff
    } else {
        0
    }
}

/// Variant bits of a RoCE packet byte (from the BTH): BTH byte 4 (FECN, BECN, reserved).
fn roce_variant_bits(i: usize) -> u8 {
    if i == 4 {
        0xff
    } else {
        0
    }
}

/// The ICRC by its definition: CRC-32 over 8 bytes of ones (the masked LRH), the IP
/// header, the UDP header and BTH through pad, variant bits set to one.
fn icrc_reference(v6: bool, ip: &[u8], udp: &[u8], covered: &[u8]) -> u32 {
    let ip: Vec<u8> = ip
        .iter()
        .enumerate()
        .map(|(i, &b)| b | ip_variant_bits(v6, i))
        .collect();
    let udp: Vec<u8> = udp
        .iter()
        .enumerate()
        .map(|(i, &b)| b | udp_variant_bits(i))
        .collect();
    let bth: Vec<u8> = covered[..bth::HEADER_LEN]
        .iter()
        .enumerate()
        .map(|(i, &b)| b | roce_variant_bits(i))
        .collect();
    crc32_reference(&[&[0xff; 8], &ip, &udp, &bth, &covered[bth::HEADER_LEN..]])
}

#[test]
fn crc32_reference_is_crc32() {
    // The check value of CRC-32/ISO-HDLC.
    assert_eq!(crc32_reference(&[b"123456789"]), 0xcbf4_3926);
}

fn arb_ipv4() -> impl Strategy<Value = Ipv4Header> {
    (
        (any::<u16>(), any::<bool>(), any::<u8>(), 0u8..=63, 0u8..=3),
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        // Options are rare on RoCE, but the ICRC covers them: sometimes 4..=40 bytes.
        prop_oneof![4 => Just(0usize), 1 => 1usize..=10],
        vec(any::<u8>(), 40),
    )
        .prop_map(
            |((id, df, ttl, dscp, ecn), source, destination, words, opts)| Ipv4Header {
                dscp: IpDscp::try_new(dscp).unwrap(),
                ecn: IpEcn::try_new(ecn).unwrap(),
                total_len: 0,
                identification: id,
                dont_fragment: df,
                more_fragments: false,
                fragment_offset: IpFragOffset::ZERO,
                time_to_live: ttl,
                protocol: IpNumber::UDP,
                header_checksum: 0,
                source,
                destination,
                options: Ipv4Options::try_from(&opts[..words * 4]).unwrap(),
            },
        )
}

fn arb_ipv6() -> impl Strategy<Value = Ipv6Header> {
    (
        any::<u8>(),
        0u32..=0xf_ffff,
        any::<u8>(),
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
    )
        .prop_map(|(tc, flow, hop_limit, source, destination)| Ipv6Header {
            traffic_class: tc,
            flow_label: Ipv6FlowLabel::try_new(flow).unwrap(),
            payload_length: 0,
            next_header: IpNumber::UDP,
            hop_limit,
            source,
            destination,
        })
}

prop_compose! {
    fn arb_vlan()(pcp in 0u8..=7, dei in any::<bool>(), id in 0u16..=0x0fff) -> SingleVlanHeader {
        SingleVlanHeader {
            pcp: VlanPcp::try_new(pcp).unwrap(),
            drop_eligible_indicator: dei,
            vlan_id: VlanId::try_new(id).unwrap(),
            // Set by the frame strategy.
            ether_type: EtherType(0),
        }
    }
}

/// Ethernet, 0-2 VLAN tags, IPv4 or IPv6, UDP to 4791 with checksum 0.
fn arb_frame_repr() -> impl Strategy<Value = FrameRepr> {
    (
        any::<[u8; 6]>(),
        any::<[u8; 6]>(),
        vec(arb_vlan(), 0..=2),
        select(vec![
            EtherType::VLAN_TAGGED_FRAME,
            EtherType::PROVIDER_BRIDGING,
            EtherType::VLAN_DOUBLE_TAGGED_FRAME,
        ]),
        prop_oneof![
            arb_ipv4().prop_map(IpRepr::V4),
            arb_ipv6().prop_map(IpRepr::V6)
        ],
        any::<u16>(),
    )
        .prop_map(|(source, destination, mut vlans, outer, ip, sport)| {
            let ip_type = match ip {
                IpRepr::V4(_) => EtherType::IPV4,
                IpRepr::V6(_) => EtherType::IPV6,
            };
            // Each tag's type names what follows it.
            let n = vlans.len();
            for (i, tag) in vlans.iter_mut().enumerate() {
                tag.ether_type = if i + 1 == n {
                    ip_type
                } else {
                    EtherType::VLAN_TAGGED_FRAME
                };
            }
            let mut v = vlans.into_iter();
            FrameRepr {
                eth: Some(Ethernet2Header {
                    source,
                    destination,
                    ether_type: if n == 0 { ip_type } else { outer },
                }),
                vlans: [v.next(), v.next()],
                ip,
                udp: UdpHeader {
                    source_port: sport,
                    destination_port: ROCE_UDP_PORT,
                    length: 0,
                    checksum: 0,
                },
            }
        })
}

/// The FrameRepr as emitted: emit sets the IP and UDP lengths and the IPv4 checksum.
fn normalised(f: &FrameRepr, roce_len: usize) -> FrameRepr {
    let mut f = f.clone();
    let udp_len = UdpHeader::LEN + roce_len;
    match &mut f.ip {
        IpRepr::V4(h) => {
            h.set_payload_len(udp_len).unwrap();
            h.header_checksum = h.calc_header_checksum();
        }
        IpRepr::V6(h) => h.set_payload_length(udp_len).unwrap(),
    }
    f.udp.length = u16::try_from(udp_len).unwrap();
    f
}

/// The header bytes a frame must start with, serialised by etherparse.
fn header_bytes(f: &FrameRepr) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(e) = &f.eth {
        out.extend_from_slice(&e.to_bytes());
    }
    for v in f.vlans.iter().flatten() {
        out.extend_from_slice(&v.to_bytes());
    }
    match &f.ip {
        IpRepr::V4(h) => out.extend_from_slice(&h.to_bytes()),
        IpRepr::V6(h) => out.extend_from_slice(&h.to_bytes()),
    }
    out.extend_from_slice(&f.udp.to_bytes());
    out
}

/// A frame, emitted, with the offsets of its parts.
#[derive(Debug, Clone)]
struct Frame {
    repr: FrameRepr,
    roce: RoceRepr,
    payload: Vec<u8>,
    bytes: Vec<u8>,
    ip_start: usize,
    udp_start: usize,
    roce_start: usize,
}

impl Frame {
    fn v6(&self) -> bool {
        matches!(self.repr.ip, IpRepr::V6(_))
    }
    fn ip(&self) -> &[u8] {
        &self.bytes[self.ip_start..self.udp_start]
    }
    fn udp(&self) -> &[u8] {
        &self.bytes[self.udp_start..self.roce_start]
    }
    fn roce(&self) -> &[u8] {
        &self.bytes[self.roce_start..]
    }
    /// The ICRC as stored (least significant byte first).
    fn icrc(&self) -> u32 {
        let n = self.bytes.len();
        u32::from_le_bytes(self.bytes[n - 4..].try_into().unwrap())
    }
    /// Variant bits of the frame byte at `pos` (0 outside IP/UDP/BTH).
    fn variant_bits(&self, pos: usize) -> u8 {
        if pos < self.ip_start {
            0
        } else if pos < self.udp_start {
            ip_variant_bits(self.v6(), pos - self.ip_start)
        } else if pos < self.roce_start {
            udp_variant_bits(pos - self.udp_start)
        } else {
            roce_variant_bits(pos - self.roce_start)
        }
    }
    /// `verify` on a modified copy of the frame, with this frame's offsets.
    fn verify_modified(&self, m: &[u8]) -> Result<(), WireError> {
        icrc::verify(
            &m[self.ip_start..self.udp_start],
            &m[self.udp_start..self.roce_start],
            &m[self.roce_start..],
        )
    }
}

fn arb_frame() -> impl Strategy<Value = Frame> {
    (arb_frame_repr(), arb_roce()).prop_map(|(repr, (roce, payload))| {
        let mut buf = vec![STALE; repr.header_len() + roce.buffer_len() + 9];
        let n = repr.emit(&mut buf, &roce, &payload).expect("frame emits");
        assert_eq!(n, repr.header_len() + roce.buffer_len());
        assert!(
            buf[n..].iter().all(|&b| b == STALE),
            "emit wrote past the frame"
        );
        buf.truncate(n);
        let l2 = Ethernet2Header::LEN + repr.vlans.iter().flatten().count() * SingleVlanHeader::LEN;
        let ip_len = match &repr.ip {
            IpRepr::V4(h) => h.header_len(),
            IpRepr::V6(_) => Ipv6Header::LEN,
        };
        Frame {
            ip_start: l2,
            udp_start: l2 + ip_len,
            roce_start: l2 + ip_len + UdpHeader::LEN,
            repr,
            roce,
            payload,
            bytes: buf,
        }
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn frame_roundtrip(f in arb_frame(), trailing in vec(any::<u8>(), 0..64)) {
        let want = normalised(&f.repr, f.roce.buffer_len());
        prop_assert_eq!(f.roce_start, f.repr.header_len());
        prop_assert_eq!(&f.bytes[..f.roce_start], &header_bytes(&want)[..]);

        let frame = RoceFrame::parse_ethernet(&f.bytes);
        prop_assert!(frame.is_ok(), "{:?}", frame.map(|_| ()));
        let frame = frame.unwrap();
        prop_assert_eq!(frame.roce_offset, f.roce_start);
        prop_assert_eq!(frame.roce, f.roce());
        prop_assert_eq!(frame.ip.bytes(), f.ip());
        prop_assert_eq!(frame.udp.slice(), f.udp());
        prop_assert_eq!(&frame.repr(), &want);
        let p = frame.packet();
        prop_assert!(p.is_ok(), "{:?}", p.map(|_| ()));
        let p = p.unwrap();
        prop_assert_eq!(RoceRepr::parse(&p), Ok(f.roce));
        prop_assert_eq!(p.payload(), &f.payload[..]);
        prop_assert_eq!(frame.verify_icrc(), Ok(()));

        // The stored ICRC is the one the definition gives.
        let covered = &f.roce()[..f.roce().len() - ICRC_LEN];
        prop_assert_eq!(f.icrc(), icrc_reference(f.v6(), f.ip(), f.udp(), covered));
        prop_assert_eq!(icrc::compute(f.ip(), f.udp(), covered), Ok(f.icrc()));
        prop_assert_eq!(p.icrc(), f.icrc());

        // etherparse, reading the frame on its own, finds the same UDP payload.
        let sliced = SlicedPacket::from_ethernet(&f.bytes);
        prop_assert!(sliced.is_ok(), "{:?}", sliced);
        match sliced.unwrap().transport {
            Some(TransportSlice::Udp(u)) => {
                prop_assert_eq!(u.destination_port(), ROCE_UDP_PORT);
                prop_assert_eq!(u.payload(), f.roce());
            }
            other => prop_assert!(false, "etherparse found {:?}", other),
        }

        // Ethernet padding or an FCS after the IP datagram is not part of the packet.
        let mut padded = f.bytes.clone();
        padded.extend_from_slice(&trailing);
        let frame2 = RoceFrame::parse_ethernet(&padded);
        prop_assert!(frame2.is_ok(), "{:?}", frame2.map(|_| ()));
        let frame2 = frame2.unwrap();
        prop_assert_eq!(frame2.roce, f.roce());
        prop_assert_eq!(&frame2.repr(), &want);
        prop_assert_eq!(frame2.verify_icrc(), Ok(()));

        // Re-emitting what was parsed gives the same frame.
        let mut again = vec![0u8; f.bytes.len()];
        prop_assert_eq!(frame.repr().emit(&mut again, &f.roce, &f.payload), Ok(f.bytes.len()));
        prop_assert_eq!(&again, &f.bytes);
    }

    /// A frame that starts at IP (no Ethernet header) parses with `parse_ip`.
    #[test]
    fn frame_without_ethernet(f in arb_frame()) {
        let mut repr = f.repr.clone();
        repr.eth = None;
        repr.vlans = [None, None];
        let mut buf = vec![0u8; repr.header_len() + f.roce.buffer_len()];
        prop_assert_eq!(repr.emit(&mut buf, &f.roce, &f.payload), Ok(buf.len()));
        prop_assert_eq!(&buf[..], &f.bytes[f.ip_start..]);
        let frame = RoceFrame::parse_ip(&buf);
        prop_assert!(frame.is_ok(), "{:?}", frame.map(|_| ()));
        let frame = frame.unwrap();
        prop_assert_eq!(frame.repr(), normalised(&repr, f.roce.buffer_len()));
        prop_assert_eq!(frame.verify_icrc(), Ok(()));
        prop_assert_eq!(RoceRepr::parse(&frame.packet().unwrap()), Ok(f.roce));
    }

    /// Changing one byte the ICRC covers: if any changed bit is invariant the ICRC no
    /// longer matches; if only variant bits changed it still does.
    #[test]
    fn frame_single_byte_changes(
        f in arb_frame(),
        at in any::<Index>(),
        in_headers in any::<bool>(),
        xor in 1u8..=255,
    ) {
        // Half the time in IP/UDP/BTH/extension headers, where the variant fields are.
        let hdr_end = f.roce_start + f.roce.bth.opcode.info().unwrap().header_len();
        let covered_end = f.bytes.len() - ICRC_LEN;
        let pos = if in_headers {
            f.ip_start + at.index(hdr_end - f.ip_start)
        } else {
            f.ip_start + at.index(covered_end - f.ip_start)
        };
        let mut m = f.bytes.clone();
        m[pos] ^= xor;
        let invariant = xor & !f.variant_bits(pos) != 0;
        let got = f.verify_modified(&m);
        if invariant {
            // What the ICRC of the changed bytes is by definition (masked as the original
            // IP version says): a one-byte change always changes a CRC-32.
            let covered = &m[f.roce_start..m.len() - ICRC_LEN];
            let (ip, udp) = (&m[f.ip_start..f.udp_start], &m[f.udp_start..f.roce_start]);
            let reference = icrc_reference(f.v6(), ip, udp, covered);
            prop_assert_ne!(reference, f.icrc());
            // Changing the IP version (or the IPv4 header length) leaves no IP header to
            // mask: `compute` refuses it; every other change is a mismatch.
            let structural = if f.v6() { 0xf0 } else { 0xff };
            if pos == f.ip_start && xor & structural != 0 {
                prop_assert!(
                    // (A version nibble turned from 6 into 4 can make a valid IHL: the
                    // header is then masked as IPv4 and the ICRC mismatches.)
                    matches!(
                        got,
                        Err(WireError::NotRoce(_)) | Err(WireError::Malformed { .. })
                    ) || matches!(got, Err(WireError::BadIcrc { found, .. }) if found == f.icrc()),
                    "byte {} ^ {:#04x}: {:?}", pos, xor, got
                );
            } else {
                prop_assert_eq!(
                    got,
                    Err(WireError::BadIcrc { found: f.icrc(), computed: reference }),
                    "byte {} ^ {:#04x}", pos, xor
                );
            }
            // When the changed frame still parses, the frame-level check fails too.
            if let Ok(frame) = RoceFrame::parse_ethernet(&m) {
                if frame.roce_offset == f.roce_start && frame.roce.len() == f.roce().len() {
                    let v = frame.verify_icrc();
                    prop_assert!(matches!(v, Err(WireError::BadIcrc { .. })), "{:?}", v);
                }
            }
        } else {
            prop_assert_eq!(got, Ok(()), "byte {} ^ {:#04x}", pos, xor);
            let frame = RoceFrame::parse_ethernet(&m);
            prop_assert!(frame.is_ok(), "{:?}", frame.map(|_| ()));
            prop_assert_eq!(frame.unwrap().verify_icrc(), Ok(()));
        }
    }

    /// Every variant field, set to any value, leaves the ICRC as it was (the IPv4 header
    /// checksum then no longer matches, which neither the parser nor the ICRC looks at).
    #[test]
    fn frame_variant_fields_do_not_change_icrc(
        f in arb_frame(),
        which in any::<Index>(),
        value in any::<u8>(),
    ) {
        let mut variant: Vec<(usize, u8)> = (f.ip_start..f.roce_start + bth::HEADER_LEN)
            .map(|p| (p, f.variant_bits(p)))
            .filter(|&(_, bits)| bits != 0)
            .collect();
        let expected_count = if f.v6() { 5 } else { 4 } + 2 + 1;
        prop_assert_eq!(variant.len(), expected_count);
        let (pos, bits) = variant.swap_remove(which.index(variant.len()));
        let mut m = f.bytes.clone();
        m[pos] = (m[pos] & !bits) | (value & bits);
        prop_assert_eq!(f.verify_modified(&m), Ok(()));
        let covered = &m[f.roce_start..m.len() - ICRC_LEN];
        prop_assert_eq!(
            icrc::compute(&m[f.ip_start..f.udp_start], &m[f.udp_start..f.roce_start], covered),
            Ok(f.icrc())
        );
        let frame = RoceFrame::parse_ethernet(&m);
        prop_assert!(frame.is_ok(), "{:?}", frame.map(|_| ()));
        let frame = frame.unwrap();
        prop_assert_eq!(frame.verify_icrc(), Ok(()));
        // BTH byte 4 carries FECN/BECN: the Repr follows the byte, the rest is unchanged.
        let parsed = RoceRepr::parse(&frame.packet().unwrap()).unwrap();
        let mut want = f.roce;
        want.bth.fecn = m[f.roce_start + 4] & 0x80 != 0;
        want.bth.becn = m[f.roce_start + 4] & 0x40 != 0;
        prop_assert_eq!(parsed, want);
    }

    /// Bytes the ICRC does not cover: Ethernet addresses and VLAN TCIs, and the ICRC
    /// itself (changing it is a mismatch, found = the changed value).
    #[test]
    fn frame_uncovered_bytes(f in arb_frame(), at in any::<Index>(), xor in 1u8..=255) {
        let mut uncovered: Vec<usize> = (0..12).collect();
        for i in 0..f.repr.vlans.iter().flatten().count() {
            let tci = Ethernet2Header::LEN + i * SingleVlanHeader::LEN;
            uncovered.extend([tci, tci + 1]);
        }
        let pos = uncovered[at.index(uncovered.len())];
        let mut m = f.bytes.clone();
        m[pos] ^= xor;
        let frame = RoceFrame::parse_ethernet(&m);
        prop_assert!(frame.is_ok(), "{:?}", frame.map(|_| ()));
        prop_assert_eq!(frame.unwrap().verify_icrc(), Ok(()));

        let n = m.len();
        let pos = n - ICRC_LEN + at.index(ICRC_LEN);
        let mut m = f.bytes.clone();
        m[pos] ^= xor;
        let found = u32::from_le_bytes(m[n - 4..].try_into().unwrap());
        prop_assert_eq!(
            RoceFrame::parse_ethernet(&m).unwrap().verify_icrc(),
            Err(WireError::BadIcrc { found, computed: f.icrc() })
        );
    }

    /// `PseudoHeaders`, rebuilt from addresses, ports, length and IP ID alone, verify the
    /// ICRC of any frame sent the way it assumes (IPv4 with DF and no options, or IPv6),
    /// and of no other.
    #[test]
    fn pseudo_headers_rebuild_the_icrc_input(f in arb_frame()) {
        let frame = RoceFrame::parse_ethernet(&f.bytes).unwrap();
        let src = SocketAddr::new(frame.ip.src(), frame.udp.source_port());
        let dst = SocketAddr::new(frame.ip.dst(), frame.udp.destination_port());
        let (id, assumed) = match &f.repr.ip {
            IpRepr::V4(h) => (h.identification, h.dont_fragment && h.options.is_empty()),
            IpRepr::V6(_) => (0, true),
        };
        let ph = icrc::PseudoHeaders::new(src, dst, id, f.roce().len());
        prop_assert_eq!(ph.udp().len(), UdpHeader::LEN);
        let got = icrc::verify(ph.ip(), ph.udp(), f.roce());
        if assumed {
            prop_assert_eq!(ph.ip().len(), f.ip().len());
            prop_assert_eq!(got, Ok(()));
        } else {
            prop_assert!(matches!(got, Err(WireError::BadIcrc { .. })), "{:?}", got);
        }
    }
}
