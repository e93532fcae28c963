//! Property tests for the wire layer (`src/wire`).
//!
//! 1. Every fixed header: Repr -> emit over stale bytes -> parse gives the Repr back, with
//!    or without bytes after it, and emit writes exactly the header's bytes.
//! 2. Every truncated length of every fixed header is the exact `Truncated` error.
//! 3. Whole RoCE packets for every known opcode: round trip, exact truncation errors
//!    (expected values computed here from `Headers::ORDER`), unknown opcodes, mismatched
//!    extension headers.
//! 4. Whole Ethernet/VLAN/IP/UDP frames: round trip through `FrameRepr::emit` and
//!    `RoceFrame::parse_ethernet`, an ICRC reference computed here bit by bit, and single
//!    byte changes: an invariant byte changes the ICRC, a variant (masked) field does not.
//! 5. `Psn` arithmetic over the whole 24-bit space.

use etherparse::{
    EtherType, Ethernet2Header, IpDscp, IpEcn, IpFragOffset, IpNumber, Ipv4Header, Ipv4Options,
    Ipv6FlowLabel, Ipv6Header, SingleVlanHeader, SlicedPacket, TransportSlice, UdpHeader, VlanId,
    VlanPcp,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::FileFailurePersistence;
use roce_emu::wire::aeth::CREDITS_INVALID;
use roce_emu::wire::atomic::ack;
use roce_emu::wire::bth::QPN_MASK;
use roce_emu::wire::opcode::{Flags, Headers, OPCODES};
use roce_emu::wire::{
    aeth, atomic, bth, cnp, deth, icrc, ieth, immdt, reth, AethRepr, AtomicAckEthRepr,
    AtomicEthRepr, BthRepr, DethRepr, FrameRepr, Header, IethRepr, ImmDtRepr, IpRepr, NakCode,
    Opcode, Psn, RethRepr, RoceFrame, RocePacket, RoceRepr, Syndrome, WireError, ICRC_LEN,
    ROCE_UDP_PORT,
};
use std::net::SocketAddr;

/// What a buffer holds before emit: stale bytes that emit must overwrite.
const STALE: u8 = 0xa5;

/// The default config (256 cases, `PROPTEST_CASES` honoured), with failures saved where
/// they can be committed: proptest's default looks for a `lib.rs` beside the test file,
/// which integration tests do not have.
fn config() -> ProptestConfig {
    ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/wire_props.txt",
        ))),
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------
// Strategies, one per header
// ---------------------------------------------------------------------------------------

prop_compose! {
    fn arb_bth()(
        opcode in any::<u8>(),
        solicited in any::<bool>(),
        migreq in any::<bool>(),
        pad in 0u8..=3,
        tver in 0u8..=15,
        pkey in any::<u16>(),
        fecn in any::<bool>(),
        becn in any::<bool>(),
        dqpn in 0u32..=QPN_MASK,
        ack_req in any::<bool>(),
        psn in 0u32..=Psn::MASK,
    ) -> BthRepr {
        BthRepr {
            opcode: Opcode(opcode),
            solicited,
            migreq,
            pad,
            tver,
            pkey,
            fecn,
            becn,
            dqpn,
            ack_req,
            psn: Psn::new(psn),
        }
    }
}

prop_compose! {
    fn arb_reth()(va in any::<u64>(), rkey in any::<u32>(), dma_len in any::<u32>()) -> RethRepr {
        RethRepr { va, rkey, dma_len }
    }
}

fn arb_syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..=CREDITS_INVALID).prop_map(|credits| Syndrome::Ack { credits }),
        (0u8..=0x1f).prop_map(|timer| Syndrome::RnrNak { timer }),
        (0u8..=4).prop_map(|c| Syndrome::Nak(NakCode::from_u8(c).unwrap())),
    ]
}

prop_compose! {
    fn arb_aeth()(syndrome in arb_syndrome(), msn in 0u32..=0x00ff_ffff) -> AethRepr {
        AethRepr { syndrome, msn }
    }
}

prop_compose! {
    fn arb_atomic_eth()(
        va in any::<u64>(),
        rkey in any::<u32>(),
        swap_add in any::<u64>(),
        compare in any::<u64>(),
    ) -> AtomicEthRepr {
        AtomicEthRepr { va, rkey, swap_add, compare }
    }
}

prop_compose! {
    fn arb_atomic_ack_eth()(orig in any::<u64>()) -> AtomicAckEthRepr {
        AtomicAckEthRepr { orig }
    }
}

prop_compose! {
    fn arb_immdt()(imm in any::<u32>()) -> ImmDtRepr {
        ImmDtRepr { imm }
    }
}

prop_compose! {
    fn arb_ieth()(rkey in any::<u32>()) -> IethRepr {
        IethRepr { rkey }
    }
}

prop_compose! {
    fn arb_deth()(qkey in any::<u32>(), src_qpn in 0u32..=QPN_MASK) -> DethRepr {
        DethRepr { qkey, src_qpn }
    }
}

fn arb_cnp() -> impl Strategy<Value = cnp::Repr> {
    Just(cnp::Repr)
}

// ---------------------------------------------------------------------------------------
// 1. Every fixed header round-trips; 2. every truncation is the exact error
// ---------------------------------------------------------------------------------------

/// Emits `repr` over stale bytes, checks it wrote exactly `$len` bytes and the same bytes
/// whatever the buffer held, parses it back alone and followed by `trailing`.
macro_rules! header_roundtrip {
    ($test:ident, $strategy:expr, $module:ident, $Repr:ty, $len:expr) => {
        proptest! {
    #![proptest_config(config())]

            #[test]
            fn $test(repr in $strategy, trailing in vec(any::<u8>(), 1..64)) {
                let n: usize = $len;
                prop_assert_eq!(repr.buffer_len(), n);

                // Over stale bytes, with room to spare: only the header's bytes change.
                let mut buf = vec![STALE; n + trailing.len()];
                repr.emit(&mut $module::Packet::new_unchecked(&mut buf[..]));
                prop_assert!(buf[n..].iter().all(|&b| b == STALE), "emit wrote past the header");

                // Every byte is written: the result does not depend on what was there.
                let mut zeroed = vec![0u8; n];
                repr.emit(&mut $module::Packet::new_unchecked(&mut zeroed[..]));
                prop_assert_eq!(&buf[..n], &zeroed[..]);

                // Exactly the header.
                let p = $module::Packet::new_checked(&buf[..n]);
                prop_assert!(p.is_ok(), "{:?}", p);
                let p = p.unwrap();
                prop_assert_eq!(p.as_bytes(), &zeroed[..]);
                prop_assert_eq!(<$Repr>::parse(&p), Ok(repr));

                // Followed by arbitrary bytes.
                buf[n..].copy_from_slice(&trailing);
                let p = $module::Packet::new_checked(&buf[..]);
                prop_assert!(p.is_ok(), "{:?}", p);
                let p = p.unwrap();
                prop_assert_eq!(p.as_bytes(), &zeroed[..]);
                prop_assert_eq!(<$Repr>::parse(&p), Ok(repr));
            }
        }
    };
}

header_roundtrip!(bth_roundtrip, arb_bth(), bth, BthRepr, bth::HEADER_LEN);
header_roundtrip!(reth_roundtrip, arb_reth(), reth, RethRepr, reth::HEADER_LEN);
header_roundtrip!(aeth_roundtrip, arb_aeth(), aeth, AethRepr, aeth::HEADER_LEN);
header_roundtrip!(
    atomic_eth_roundtrip,
    arb_atomic_eth(),
    atomic,
    AtomicEthRepr,
    atomic::HEADER_LEN
);
header_roundtrip!(
    atomic_ack_eth_roundtrip,
    arb_atomic_ack_eth(),
    ack,
    AtomicAckEthRepr,
    atomic::ACK_HEADER_LEN
);
header_roundtrip!(
    immdt_roundtrip,
    arb_immdt(),
    immdt,
    ImmDtRepr,
    immdt::HEADER_LEN
);
header_roundtrip!(ieth_roundtrip, arb_ieth(), ieth, IethRepr, ieth::HEADER_LEN);
header_roundtrip!(deth_roundtrip, arb_deth(), deth, DethRepr, deth::HEADER_LEN);
header_roundtrip!(cnp_roundtrip, arb_cnp(), cnp, cnp::Repr, cnp::HEADER_LEN);

/// The header lengths the IBA gives, written out rather than taken from the modules.
#[test]
fn header_lengths_are_the_iba_ones() {
    assert_eq!(bth::HEADER_LEN, 12);
    assert_eq!(reth::HEADER_LEN, 16);
    assert_eq!(aeth::HEADER_LEN, 4);
    assert_eq!(atomic::HEADER_LEN, 28);
    assert_eq!(atomic::ACK_HEADER_LEN, 8);
    assert_eq!(immdt::HEADER_LEN, 4);
    assert_eq!(ieth::HEADER_LEN, 4);
    assert_eq!(deth::HEADER_LEN, 8);
    assert_eq!(cnp::HEADER_LEN, 16);
    assert_eq!(ICRC_LEN, 4);
}

/// A CNP's 16 reserved bytes are written as zero whatever the buffer held.
#[test]
fn cnp_reserved_bytes_are_zero() {
    let mut buf = [STALE; cnp::HEADER_LEN + 4];
    cnp::Repr.emit(&mut cnp::Packet::new_unchecked(&mut buf[..]));
    assert_eq!(buf[..cnp::HEADER_LEN], [0u8; cnp::HEADER_LEN]);
    assert_eq!(buf[cnp::HEADER_LEN..], [STALE; 4]);
}

/// For each header of length N and each len in 0..N, `new_checked` and `parse` (on an
/// unchecked view) fail with exactly `Truncated { header, 0, N, len }`; at N they succeed.
macro_rules! header_truncations {
    ($test:ident, $module:ident, $Repr:ty, $header:expr, $len:expr) => {
        proptest! {
    #![proptest_config(config())]

            #[test]
            fn $test(bytes in vec(any::<u8>(), $len)) {
                let n: usize = $len;
                // A syndrome the IBA reserves would make the AETH parse fail for another
                // reason; the length checks come first, but keep full-length parses valid.
                let mut bytes = bytes;
                if $header == Header::Aeth {
                    bytes[0] &= 0x1f;
                }
                for len in 0..n {
                    let want = Err(WireError::Truncated {
                        header: $header,
                        offset: 0,
                        need: n,
                        have: len,
                    });
                    let checked = $module::Packet::new_checked(&bytes[..len]).map(|_| ());
                    prop_assert_eq!(checked, want, "len {}", len);
                    let unchecked = $module::Packet::new_unchecked(&bytes[..len]);
                    prop_assert_eq!(unchecked.check_len(), want, "len {}", len);
                    prop_assert_eq!(<$Repr>::parse(&unchecked).map(|_| ()), want, "len {}", len);
                }
                let full = $module::Packet::new_checked(&bytes[..]);
                prop_assert!(full.is_ok());
                prop_assert!(<$Repr>::parse(&full.unwrap()).is_ok());
            }
        }
    };
}

header_truncations!(bth_truncations, bth, BthRepr, Header::Bth, bth::HEADER_LEN);
header_truncations!(
    reth_truncations,
    reth,
    RethRepr,
    Header::Reth,
    reth::HEADER_LEN
);
header_truncations!(
    aeth_truncations,
    aeth,
    AethRepr,
    Header::Aeth,
    aeth::HEADER_LEN
);
header_truncations!(
    atomic_eth_truncations,
    atomic,
    AtomicEthRepr,
    Header::AtomicEth,
    atomic::HEADER_LEN
);
header_truncations!(
    atomic_ack_eth_truncations,
    ack,
    AtomicAckEthRepr,
    Header::AtomicAckEth,
    atomic::ACK_HEADER_LEN
);
header_truncations!(
    immdt_truncations,
    immdt,
    ImmDtRepr,
    Header::ImmDt,
    immdt::HEADER_LEN
);
header_truncations!(
    ieth_truncations,
    ieth,
    IethRepr,
    Header::Ieth,
    ieth::HEADER_LEN
);
header_truncations!(
    deth_truncations,
    deth,
    DethRepr,
    Header::Deth,
    deth::HEADER_LEN
);
header_truncations!(
    cnp_truncations,
    cnp,
    cnp::Repr,
    Header::Cnp,
    cnp::HEADER_LEN
);

/// Every syndrome byte either decodes to a syndrome that encodes back to it, or is one the
/// IBA reserves (bit 7 set, kind 0b10, or a NAK code above 4) and is reported as such,
/// also from a whole packet.
#[test]
fn aeth_syndrome_bytes_decode_or_are_reserved() {
    for v in 0..=255u8 {
        let reserved = v & 0x80 != 0 || (v >> 5) == 0b10 || ((v >> 5) == 0b11 && v & 0x1f > 4);
        match Syndrome::from_u8(v) {
            Ok(s) => {
                assert!(!reserved, "{v:#04x} decoded as {s:?}");
                assert_eq!(s.to_u8(), v);
            }
            Err(e) => {
                assert!(reserved, "{v:#04x}: {e}");
                assert_eq!(
                    e,
                    WireError::Reserved {
                        header: Header::Aeth,
                        field: "syndrome",
                        value: u32::from(v)
                    }
                );
                // The same from an ACK packet.
                let mut pkt = [0u8; 12 + 4 + 4];
                pkt[0] = 0x11; // RC_ACKNOWLEDGE
                pkt[12] = v;
                let p = RocePacket::new_checked(&pkt[..]).unwrap();
                assert_eq!(RoceRepr::parse(&p), Err(e));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// 3. Whole RoCE packets
// ---------------------------------------------------------------------------------------

fn known_opcodes() -> Vec<u8> {
    (0..=255u8)
        .filter(|&o| OPCODES[usize::from(o)].is_some())
        .collect()
}

fn unknown_opcodes() -> Vec<u8> {
    (0..=255u8)
        .filter(|&o| OPCODES[usize::from(o)].is_none())
        .collect()
}

/// One value of every extension header; the packet strategy keeps those its opcode needs.
#[derive(Debug, Clone, Copy)]
struct Exts {
    deth: DethRepr,
    reth: RethRepr,
    atomic_eth: AtomicEthRepr,
    aeth: AethRepr,
    atomic_ack_eth: AtomicAckEthRepr,
    immdt: ImmDtRepr,
    ieth: IethRepr,
}

prop_compose! {
    fn arb_exts()(
        deth in arb_deth(),
        reth in arb_reth(),
        atomic_eth in arb_atomic_eth(),
        aeth in arb_aeth(),
        atomic_ack_eth in arb_atomic_ack_eth(),
        immdt in arb_immdt(),
        ieth in arb_ieth(),
    ) -> Exts {
        Exts { deth, reth, atomic_eth, aeth, atomic_ack_eth, immdt, ieth }
    }
}

/// Payload lengths: often tiny (every residue mod 4, the empty payload), else up to 4200.
fn arb_payload_len() -> impl Strategy<Value = usize> {
    prop_oneof![1 => 0usize..=8, 3 => 0usize..=4200]
}

/// A RoCE packet of a known opcode with exactly the extension headers it demands, and its
/// payload.
fn arb_roce() -> impl Strategy<Value = (RoceRepr, Vec<u8>)> {
    (
        select(known_opcodes()),
        arb_bth(),
        arb_exts(),
        prop::option::weighted(0.25, 0u8..=3),
        arb_payload_len(),
    )
        .prop_flat_map(|(op, bth, x, any_pad, len)| {
            let info = Opcode(op).info().unwrap();
            let (len, pad) = if info.is(Flags::PAYLOAD) {
                (len, any_pad.unwrap_or(RoceRepr::pad_for(len)))
            } else {
                (0, 0)
            };
            let h = info.headers;
            let repr = RoceRepr {
                bth: BthRepr {
                    opcode: Opcode(op),
                    pad,
                    ..bth
                },
                deth: h.contains(Headers::DETH).then_some(x.deth),
                reth: h.contains(Headers::RETH).then_some(x.reth),
                atomic_eth: h.contains(Headers::ATOMIC_ETH).then_some(x.atomic_eth),
                aeth: h.contains(Headers::AETH).then_some(x.aeth),
                atomic_ack_eth: h
                    .contains(Headers::ATOMIC_ACK_ETH)
                    .then_some(x.atomic_ack_eth),
                immdt: h.contains(Headers::IMMDT).then_some(x.immdt),
                ieth: h.contains(Headers::IETH).then_some(x.ieth),
                payload_len: len,
            };
            (Just(repr), vec(any::<u8>(), len))
        })
}

/// Each extension header bit, the name errors give it, and its length, in wire order.
const EXT_HEADERS: [(Headers, Header, usize); 8] = [
    (Headers::DETH, Header::Deth, 8),
    (Headers::RETH, Header::Reth, 16),
    (Headers::ATOMIC_ETH, Header::AtomicEth, 28),
    (Headers::AETH, Header::Aeth, 4),
    (Headers::ATOMIC_ACK_ETH, Header::AtomicAckEth, 8),
    (Headers::IMMDT, Header::ImmDt, 4),
    (Headers::IETH, Header::Ieth, 4),
    (Headers::CNP, Header::Cnp, 16),
];

#[test]
fn ext_header_table_matches_order() {
    for ((h, _, len), (oh, olen)) in EXT_HEADERS.iter().zip(Headers::ORDER) {
        assert_eq!((*h, *len), (oh, olen));
    }
}

/// Where each extension header of `headers` starts (from the BTH), in wire order.
fn layout(headers: Headers) -> Vec<(Headers, Header, usize, usize)> {
    let mut off = bth::HEADER_LEN;
    let mut out = Vec::new();
    for (h, name, len) in EXT_HEADERS {
        if headers.contains(h) {
            out.push((h, name, off, len));
            off += len;
        }
    }
    out
}

/// What `RocePacket::new_checked` must say about the first `len` bytes of a packet of
/// opcode `op` with BTH pad count `pad`.
fn expected_check(op: u8, pad: u8, len: usize) -> Result<(), WireError> {
    let trunc = |header, offset: usize, need| {
        Err(WireError::Truncated {
            header,
            offset,
            need,
            have: len - offset,
        })
    };
    if len < bth::HEADER_LEN {
        return trunc(Header::Bth, 0, bth::HEADER_LEN);
    }
    let info = Opcode(op).info().ok_or(WireError::UnknownOpcode(op))?;
    let mut end = bth::HEADER_LEN;
    for (_, name, off, hlen) in layout(info.headers) {
        if len < off + hlen {
            return trunc(name, off, hlen);
        }
        end = off + hlen;
    }
    if len < end + ICRC_LEN {
        return trunc(Header::Icrc, end, ICRC_LEN);
    }
    let avail = len - end - ICRC_LEN;
    if !info.is(Flags::PAYLOAD) && avail != 0 {
        return Err(WireError::UnexpectedPayload {
            opcode: op,
            len: avail,
        });
    }
    if usize::from(pad) > avail {
        return Err(WireError::BadPad { pad, avail });
    }
    Ok(())
}

/// Whether `at`, read with the view of extension header `h`, holds what `repr` says.
fn holds(h: Headers, at: &[u8], repr: &RoceRepr) -> bool {
    match h {
        Headers::DETH => deth::Packet::new_checked(at)
            .and_then(|p| DethRepr::parse(&p))
            .ok()
            .eq(&repr.deth),
        Headers::RETH => reth::Packet::new_checked(at)
            .and_then(|p| RethRepr::parse(&p))
            .ok()
            .eq(&repr.reth),
        Headers::ATOMIC_ETH => atomic::Packet::new_checked(at)
            .and_then(|p| AtomicEthRepr::parse(&p))
            .ok()
            .eq(&repr.atomic_eth),
        Headers::AETH => aeth::Packet::new_checked(at)
            .and_then(|p| AethRepr::parse(&p))
            .ok()
            .eq(&repr.aeth),
        Headers::ATOMIC_ACK_ETH => ack::Packet::new_checked(at)
            .and_then(|p| AtomicAckEthRepr::parse(&p))
            .ok()
            .eq(&repr.atomic_ack_eth),
        Headers::IMMDT => immdt::Packet::new_checked(at)
            .and_then(|p| ImmDtRepr::parse(&p))
            .ok()
            .eq(&repr.immdt),
        Headers::IETH => ieth::Packet::new_checked(at)
            .and_then(|p| IethRepr::parse(&p))
            .ok()
            .eq(&repr.ieth),
        // The CNP's 16 reserved bytes, written as zero.
        _ => at.len() == cnp::HEADER_LEN && at.iter().all(|&b| b == 0),
    }
}

/// Emits `repr` into a stale buffer with room to spare; returns the packet bytes.
fn emit_roce(repr: &RoceRepr, payload: &[u8], fill: u8) -> Vec<u8> {
    let mut buf = vec![fill; repr.buffer_len() + 7];
    let n = repr.emit(&mut buf, payload).expect("a valid Repr emits");
    assert_eq!(n, repr.buffer_len());
    assert!(
        buf[n..].iter().all(|&b| b == fill),
        "emit wrote past the packet"
    );
    buf.truncate(n);
    buf
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn roce_roundtrip((repr, payload) in arb_roce()) {
        let info = repr.bth.opcode.info().unwrap();
        let hlen = bth::HEADER_LEN + layout(info.headers).iter().map(|l| l.3).sum::<usize>();
        prop_assert_eq!(info.header_len(), hlen);
        prop_assert_eq!(
            repr.buffer_len(),
            hlen + payload.len() + usize::from(repr.bth.pad) + ICRC_LEN
        );

        let bytes = emit_roce(&repr, &payload, STALE);
        // Every byte is written (headers, pad, zeroed ICRC) whatever the buffer held.
        prop_assert_eq!(&bytes, &emit_roce(&repr, &payload, 0));

        let p = RocePacket::new_checked(&bytes[..]);
        prop_assert!(p.is_ok(), "{:?}", p.map(|_| ()));
        let p = p.unwrap();
        prop_assert_eq!(RoceRepr::parse(&p), Ok(repr));
        prop_assert_eq!(p.header_len(), hlen);
        prop_assert_eq!(p.payload(), &payload[..]);
        prop_assert_eq!(p.payload_len(), payload.len());
        prop_assert_eq!(p.pad(), repr.bth.pad);
        prop_assert!(p.pad_bytes().iter().all(|&b| b == 0));
        prop_assert_eq!(p.pad_bytes().len(), usize::from(repr.bth.pad));
        prop_assert_eq!(p.icrc(), 0);
        prop_assert_eq!(p.covered().len(), bytes.len() - ICRC_LEN);

        // Each header sits where the wire order puts it: parse it there with its own view.
        let bth_view = bth::Packet::new_checked(&bytes[..]).unwrap();
        prop_assert_eq!(BthRepr::parse(&bth_view), Ok(repr.bth));
        for (h, _, off, len) in layout(info.headers) {
            let ok = holds(h, &bytes[off..off + len], &repr);
            prop_assert!(ok, "{:?} at {} does not hold what the Repr says", h, off);
        }
    }

    /// Every length below `header_len + 4` is `Truncated` naming the right header, offset,
    /// need and have; every longer cut is what the pad/payload rules say, never `Truncated`.
    #[test]
    fn roce_truncations((repr, payload) in arb_roce()) {
        let bytes = emit_roce(&repr, &payload, STALE);
        let op = repr.bth.opcode.0;
        let info = repr.bth.opcode.info().unwrap();
        for len in 0..=bytes.len() {
            let want = expected_check(op, repr.bth.pad, len);
            if len < info.header_len() + ICRC_LEN {
                prop_assert!(matches!(want, Err(WireError::Truncated { .. })), "len {}", len);
            } else {
                prop_assert!(!matches!(want, Err(WireError::Truncated { .. })), "len {}", len);
            }
            let got = RocePacket::new_checked(&bytes[..len]).map(|_| ());
            prop_assert_eq!(got, want, "len {}", len);
            let unchecked = RocePacket::new_unchecked(&bytes[..len]);
            prop_assert_eq!(RoceRepr::parse(&unchecked).map(|_| ()), want, "parse, len {}", len);
        }
    }

    /// Opcodes outside the table are refused, by the parser and by emit.
    #[test]
    fn roce_unknown_opcode(
        op in select(unknown_opcodes()),
        rest in vec(any::<u8>(), 0..80),
        bth in arb_bth(),
    ) {
        let mut bytes = vec![op];
        bytes.extend_from_slice(&rest);
        let want = if bytes.len() < bth::HEADER_LEN {
            WireError::Truncated {
                header: Header::Bth,
                offset: 0,
                need: bth::HEADER_LEN,
                have: bytes.len(),
            }
        } else {
            WireError::UnknownOpcode(op)
        };
        prop_assert_eq!(RocePacket::new_checked(&bytes[..]).map(|_| ()), Err(want));

        let repr = RoceRepr::new(BthRepr { opcode: Opcode(op), pad: 0, ..bth });
        let mut buf = vec![0u8; 256];
        prop_assert_eq!(repr.emit(&mut buf, &[]), Err(WireError::UnknownOpcode(op)));
        prop_assert_eq!(repr.check().map(|_| ()), Err(WireError::UnknownOpcode(op)));
    }

    /// A Repr that lacks a header its opcode requires, or has one it forbids, is refused
    /// naming that header.
    #[test]
    fn roce_header_mismatch((repr, payload) in arb_roce(), x in arb_exts(), which in 0usize..7) {
        let mut bad = repr;
        let (h, name) = [
            (Headers::DETH, Header::Deth),
            (Headers::RETH, Header::Reth),
            (Headers::ATOMIC_ETH, Header::AtomicEth),
            (Headers::AETH, Header::Aeth),
            (Headers::ATOMIC_ACK_ETH, Header::AtomicAckEth),
            (Headers::IMMDT, Header::ImmDt),
            (Headers::IETH, Header::Ieth),
        ][which];
        fn toggle<T>(o: &mut Option<T>, v: T) {
            *o = match o.take() {
                Some(_) => None,
                None => Some(v),
            };
        }
        match which {
            0 => toggle(&mut bad.deth, x.deth),
            1 => toggle(&mut bad.reth, x.reth),
            2 => toggle(&mut bad.atomic_eth, x.atomic_eth),
            3 => toggle(&mut bad.aeth, x.aeth),
            4 => toggle(&mut bad.atomic_ack_eth, x.atomic_ack_eth),
            5 => toggle(&mut bad.immdt, x.immdt),
            _ => toggle(&mut bad.ieth, x.ieth),
        }
        let required = repr.bth.opcode.info().unwrap().headers.contains(h);
        let want = WireError::HeaderMismatch {
            opcode: repr.bth.opcode.0,
            header: name,
            what: if required { "requires" } else { "forbids" },
        };
        let mut buf = vec![0u8; bad.buffer_len() + 64];
        prop_assert_eq!(bad.emit(&mut buf, &payload), Err(want));
    }

    /// Opcodes without payload refuse payload bytes and pad; emit refuses a short buffer.
    #[test]
    fn roce_emit_refusals((repr, payload) in arb_roce(), extra in 1usize..8, pad in 1u8..=3) {
        let info = repr.bth.opcode.info().unwrap();
        if !info.is(Flags::PAYLOAD) {
            let more = RoceRepr { payload_len: extra, ..repr };
            let mut buf = vec![0u8; more.buffer_len()];
            prop_assert_eq!(
                more.emit(&mut buf, &vec![0u8; extra]),
                Err(WireError::UnexpectedPayload { opcode: repr.bth.opcode.0, len: extra })
            );
            let padded = RoceRepr { bth: BthRepr { pad, ..repr.bth }, ..repr };
            prop_assert_eq!(
                padded.emit(&mut buf, &[]),
                Err(WireError::UnexpectedPayload {
                    opcode: repr.bth.opcode.0,
                    len: usize::from(pad),
                })
            );
        }
        let total = repr.buffer_len();
        let short = total - extra.min(total);
        let mut buf = vec![0u8; short];
        prop_assert_eq!(
            repr.emit(&mut buf, &payload),
            Err(WireError::Truncated { header: Header::Bth, offset: 0, need: total, have: short })
        );
    }
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

// ---------------------------------------------------------------------------------------
// 5. PSN arithmetic over the whole 24-bit space (src/wire/psn.rs tests the window
//    0..2^23 of `add` then `diff`; these cover every u32 operand and the wrap)
// ---------------------------------------------------------------------------------------

const PSN_SPACE: u64 = 1 << 24;

fn arb_psn() -> impl Strategy<Value = Psn> {
    // Bias towards the wrap and the half-way points.
    prop_oneof![
        (0u32..=Psn::MASK),
        (Psn::MASK - 8..=Psn::MASK),
        (0u32..8),
        (Psn::HALF - 8..Psn::HALF + 8),
    ]
    .prop_map(Psn::new)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn psn_new_keeps_24_bits(v in any::<u32>()) {
        let p = Psn::new(v);
        prop_assert_eq!(p.value(), v & 0x00ff_ffff);
        prop_assert_eq!(Psn::new(p.value()), p);
    }

    #[test]
    fn psn_add_sub_are_modular(p in arb_psn(), n in any::<u32>(), m in any::<u32>()) {
        let a = u64::from(p.value());
        prop_assert_eq!(u64::from(p.add(n).value()), (a + u64::from(n)) % PSN_SPACE);
        prop_assert_eq!(
            u64::from(p.sub(n).value()),
            (a + PSN_SPACE - u64::from(n) % PSN_SPACE) % PSN_SPACE
        );
        prop_assert_eq!(p.add(n).sub(n), p);
        prop_assert_eq!(p.sub(n).add(n), p);
        prop_assert_eq!(p.add(n).add(m), p.add(n.wrapping_add(m)));
        prop_assert_eq!(p.add(n), p.sub(n.wrapping_neg()));
        // Adding the whole space is the identity.
        prop_assert_eq!(p.add(n).add(1 << 24), p.add(n));
    }

    /// `diff` is the unique representative of `a - b` mod 2^24 in -2^23..2^23.
    #[test]
    fn psn_diff_whole_range(a in arb_psn(), b in arb_psn()) {
        let d = a.diff(b);
        prop_assert!((-(Psn::HALF as i32)..Psn::HALF as i32).contains(&d));
        prop_assert_eq!(b.add(d as u32), a);
        let raw = (u64::from(a.value()) + PSN_SPACE - u64::from(b.value())) % PSN_SPACE;
        let want = if raw >= u64::from(Psn::HALF) {
            raw as i64 - PSN_SPACE as i64
        } else {
            raw as i64
        };
        prop_assert_eq!(i64::from(d), want);

        // Ordering: exactly one of before/equal/after, consistent with cmp_serial.
        let ord = a.cmp_serial(b);
        prop_assert_eq!(ord, d.cmp(&0));
        prop_assert_eq!(a.is_before(b), ord.is_lt());
        prop_assert_eq!(a.is_after(b), ord.is_gt());
        prop_assert_eq!(ord.is_eq(), a == b);
        // Antisymmetric except exactly half the space apart, where serial order is
        // undefined and both sides say "before" (as rxe's psn_compare does).
        if d == -(Psn::HALF as i32) {
            prop_assert_eq!(b.diff(a), d);
            prop_assert!(a.is_before(b) && b.is_before(a));
        } else {
            prop_assert_eq!(b.diff(a), -d);
            prop_assert_eq!(a.is_before(b), b.is_after(a));
        }
    }

    /// Across the wrap: `n` steps ahead (n < 2^23) is after, more than 2^23 is before.
    #[test]
    fn psn_order_across_wrap(p in arb_psn(), n in 1u32..Psn::HALF) {
        prop_assert!(p.add(n).is_after(p));
        prop_assert!(p.is_before(p.add(n)));
        prop_assert!(p.sub(n).is_before(p));
        prop_assert_eq!(p.add(Psn::HALF + n).diff(p), n as i32 - Psn::HALF as i32);
        prop_assert!(p.add(Psn::HALF + n).is_before(p));
    }
}
