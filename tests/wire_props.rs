//! Property tests for the wire layer (`src/wire`).
//!
//! 1. Every fixed header: Repr -> emit over stale bytes -> parse gives the Repr back, with
//!    or without bytes after it, and emit writes exactly the header's bytes.
//! 2. Every truncated length of every fixed header is the exact `Truncated` error.
//! 3. Whole RoCE packets for every known opcode: round trip, exact truncation errors
//!    (expected values computed here from `Headers::ORDER`), unknown opcodes, mismatched
//!    extension headers.
//! 4. (frame_props.rs) Whole Ethernet/VLAN/IP/UDP frames: round trip through `FrameRepr::emit` and
//!    `RoceFrame::parse_ethernet`, an ICRC reference computed here bit by bit, and single
//!    byte changes: an invariant byte changes the ICRC, a variant (masked) field does not.
//! 5. (psn_props.rs) `Psn` arithmetic over the whole 24-bit space.

mod common;

use common::wire_gen::*;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use roce_emu::wire::atomic::ack;
use roce_emu::wire::opcode::{Flags, Headers};
use roce_emu::wire::{
    aeth, atomic, bth, cnp, deth, ieth, immdt, reth, AethRepr, AtomicAckEthRepr, AtomicEthRepr,
    BthRepr, DethRepr, Header, IethRepr, ImmDtRepr, Opcode, RethRepr, RocePacket, RoceRepr,
    Syndrome, WireError, ICRC_LEN,
};

fn config() -> ProptestConfig {
    common::wire_gen::config("proptest-regressions/wire_props.txt")
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

#[test]
fn ext_header_table_matches_order() {
    for ((h, _, len), (oh, olen)) in EXT_HEADERS.iter().zip(Headers::ORDER) {
        assert_eq!((*h, *len), (oh, olen));
    }
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
