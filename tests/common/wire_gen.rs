//! Strategies and helpers shared by the wire layer's property tests (`wire_props`,
//! `frame_props`, `psn_props`).

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::FileFailurePersistence;
use roce_emu::wire::aeth::CREDITS_INVALID;
use roce_emu::wire::atomic::ack;
use roce_emu::wire::bth::QPN_MASK;
use roce_emu::wire::opcode::{Flags, Headers, OPCODES};
use roce_emu::wire::{
    aeth, atomic, bth, cnp, deth, ieth, immdt, reth, AethRepr, AtomicAckEthRepr, AtomicEthRepr,
    BthRepr, DethRepr, Header, IethRepr, ImmDtRepr, NakCode, Opcode, Psn, RethRepr, RoceRepr,
    Syndrome, WireError, ICRC_LEN,
};

/// What a buffer holds before emit: stale bytes that emit must overwrite.
pub const STALE: u8 = 0xa5;

/// The default config (256 cases, `PROPTEST_CASES` honoured), with failures saved in
/// `path`, where they can be committed: proptest's default looks for a `lib.rs` beside the
/// test file, which integration tests do not have.
pub fn config(path: &'static str) -> ProptestConfig {
    ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(path))),
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------
// Strategies, one per header
// ---------------------------------------------------------------------------------------

prop_compose! {
    pub fn arb_bth()(
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
    pub fn arb_reth()(va in any::<u64>(), rkey in any::<u32>(), dma_len in any::<u32>()) -> RethRepr {
        RethRepr { va, rkey, dma_len }
    }
}

pub fn arb_syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..=CREDITS_INVALID).prop_map(|credits| Syndrome::Ack { credits }),
        (0u8..=0x1f).prop_map(|timer| Syndrome::RnrNak { timer }),
        (0u8..=4).prop_map(|c| Syndrome::Nak(NakCode::from_u8(c).unwrap())),
    ]
}

prop_compose! {
    pub fn arb_aeth()(syndrome in arb_syndrome(), msn in 0u32..=0x00ff_ffff) -> AethRepr {
        AethRepr { syndrome, msn }
    }
}

prop_compose! {
    pub fn arb_atomic_eth()(
        va in any::<u64>(),
        rkey in any::<u32>(),
        swap_add in any::<u64>(),
        compare in any::<u64>(),
    ) -> AtomicEthRepr {
        AtomicEthRepr { va, rkey, swap_add, compare }
    }
}

prop_compose! {
    pub fn arb_atomic_ack_eth()(orig in any::<u64>()) -> AtomicAckEthRepr {
        AtomicAckEthRepr { orig }
    }
}

prop_compose! {
    pub fn arb_immdt()(imm in any::<u32>()) -> ImmDtRepr {
        ImmDtRepr { imm }
    }
}

prop_compose! {
    pub fn arb_ieth()(rkey in any::<u32>()) -> IethRepr {
        IethRepr { rkey }
    }
}

prop_compose! {
    pub fn arb_deth()(qkey in any::<u32>(), src_qpn in 0u32..=QPN_MASK) -> DethRepr {
        DethRepr { qkey, src_qpn }
    }
}

pub fn arb_cnp() -> impl Strategy<Value = cnp::Repr> {
    Just(cnp::Repr)
}

// ---------------------------------------------------------------------------------------
// 3. Whole RoCE packets
// ---------------------------------------------------------------------------------------

pub fn known_opcodes() -> Vec<u8> {
    (0..=255u8)
        .filter(|&o| OPCODES[usize::from(o)].is_some())
        .collect()
}

pub fn unknown_opcodes() -> Vec<u8> {
    (0..=255u8)
        .filter(|&o| OPCODES[usize::from(o)].is_none())
        .collect()
}

/// One value of every extension header; the packet strategy keeps those its opcode needs.
#[derive(Debug, Clone, Copy)]
pub struct Exts {
    pub deth: DethRepr,
    pub reth: RethRepr,
    pub atomic_eth: AtomicEthRepr,
    pub aeth: AethRepr,
    pub atomic_ack_eth: AtomicAckEthRepr,
    pub immdt: ImmDtRepr,
    pub ieth: IethRepr,
}

prop_compose! {
    pub fn arb_exts()(
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
pub fn arb_payload_len() -> impl Strategy<Value = usize> {
    prop_oneof![1 => 0usize..=8, 3 => 0usize..=4200]
}

/// A RoCE packet of a known opcode with exactly the extension headers it demands, and its
/// payload.
pub fn arb_roce() -> impl Strategy<Value = (RoceRepr, Vec<u8>)> {
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
pub const EXT_HEADERS: [(Headers, Header, usize); 8] = [
    (Headers::DETH, Header::Deth, 8),
    (Headers::RETH, Header::Reth, 16),
    (Headers::ATOMIC_ETH, Header::AtomicEth, 28),
    (Headers::AETH, Header::Aeth, 4),
    (Headers::ATOMIC_ACK_ETH, Header::AtomicAckEth, 8),
    (Headers::IMMDT, Header::ImmDt, 4),
    (Headers::IETH, Header::Ieth, 4),
    (Headers::CNP, Header::Cnp, 16),
];

/// Where each extension header of `headers` starts (from the BTH), in wire order.
pub fn layout(headers: Headers) -> Vec<(Headers, Header, usize, usize)> {
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
pub fn expected_check(op: u8, pad: u8, len: usize) -> Result<(), WireError> {
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
pub fn holds(h: Headers, at: &[u8], repr: &RoceRepr) -> bool {
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
pub fn emit_roce(repr: &RoceRepr, payload: &[u8], fill: u8) -> Vec<u8> {
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
