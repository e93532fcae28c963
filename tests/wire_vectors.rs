//! Byte-exact vectors: every RoCE packet of every real rxe capture under tests/data
//! parses, re-emits byte-identically from its Repr (ICRC included), and its ICRC
//! verifies; changing any one byte the ICRC covers makes the check fail, while the
//! variant fields the ICRC masks (A17.4.1) may change freely.

mod common;

use roce_emu::wire::{icrc, RoceFrame, RoceRepr, WireError, ICRC_LEN};
use std::collections::BTreeSet;

/// The one UDP-4791 datagram in the captures that is not RoCE: the lab's host probe sends
/// garbage first to show rxe drops it (shared/captures/README.md). Frame numbers 1-based.
const NOT_ROCE: &[(&str, usize)] = &[("host_probe_rc_send.pcap", 1)];

#[test]
fn every_captured_packet_parses_reemits_and_verifies() {
    let mut opcodes = BTreeSet::new();
    let mut total = 0;
    for path in common::captures() {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let mut n_roce = 0;
        for (i, f) in common::frames(&path).iter().enumerate() {
            let num = i + 1;
            if !common::is_udp_4791(f) {
                continue;
            }
            let frame =
                RoceFrame::parse_ethernet(f).unwrap_or_else(|e| panic!("{name}#{num}: {e}"));
            if NOT_ROCE.contains(&(name.as_str(), num)) {
                // Garbage: its "ICRC" is wrong and its opcode byte is not a RoCE opcode.
                assert!(matches!(
                    frame.verify_icrc(),
                    Err(WireError::BadIcrc { .. })
                ));
                assert!(matches!(frame.packet(), Err(WireError::UnknownOpcode(_))));
                continue;
            }
            frame
                .verify_icrc()
                .unwrap_or_else(|e| panic!("{name}#{num}: {e}"));
            let pkt = frame
                .packet()
                .unwrap_or_else(|e| panic!("{name}#{num}: {e}"));
            let repr = RoceRepr::parse(&pkt).unwrap_or_else(|e| panic!("{name}#{num}: {e}"));
            opcodes.insert(repr.bth.opcode);

            // Re-emit the whole frame from the Reprs: Ethernet, IP, UDP, RoCE, new ICRC.
            let mut buf = vec![0xa5u8; f.len() + 64];
            let len = frame
                .repr()
                .emit(&mut buf, &repr, pkt.payload())
                .unwrap_or_else(|e| panic!("{name}#{num}: {e}"));
            let end = frame.roce_offset + frame.roce.len();
            assert_eq!(len, end, "{name}#{num}: length");
            assert_eq!(
                &buf[..len],
                &f[..end],
                "{name}#{num}: re-emitted bytes differ"
            );

            // The RoCE part alone, through RoceRepr::emit + icrc::fill.
            let mut roce = vec![0x5au8; repr.buffer_len()];
            repr.emit(&mut roce, pkt.payload()).unwrap();
            icrc::fill(frame.ip.bytes(), frame.udp.slice(), &mut roce).unwrap();
            assert_eq!(&roce[..], frame.roce, "{name}#{num}: RoCE bytes differ");
            n_roce += 1;
        }
        assert!(n_roce > 0, "{name}: no RoCE packet");
        total += n_roce;
    }
    eprintln!("{total} RoCE packets re-emitted byte-identically");
    // The captures exercise these opcodes; if a capture changes, this says so.
    use roce_emu::wire::opcode::op::*;
    for op in [
        RC_SEND_FIRST,
        RC_SEND_MIDDLE,
        RC_SEND_LAST,
        RC_SEND_ONLY,
        RC_SEND_ONLY_WITH_IMMEDIATE,
        RC_RDMA_WRITE_FIRST,
        RC_RDMA_WRITE_MIDDLE,
        RC_RDMA_WRITE_LAST,
        RC_RDMA_WRITE_ONLY,
        RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        RC_RDMA_READ_REQUEST,
        RC_RDMA_READ_RESPONSE_FIRST,
        RC_RDMA_READ_RESPONSE_LAST,
        RC_RDMA_READ_RESPONSE_ONLY,
        RC_ACKNOWLEDGE,
        RC_ATOMIC_ACKNOWLEDGE,
        RC_COMPARE_SWAP,
        RC_FETCH_ADD,
        UC_SEND_FIRST,
        UC_SEND_LAST,
        UD_SEND_ONLY,
    ] {
        assert!(opcodes.contains(&op), "no {op} in the captures");
    }
}

/// Offsets (from the IP header) of the bytes the ICRC masks, for IPv4 (IHL 5) and IPv6.
fn masked(ip_version: u8, ip_len: usize) -> Vec<usize> {
    let mut v = if ip_version == 4 {
        vec![1, 8, 10, 11]
    } else {
        vec![1, 2, 3, 7] // and the low nibble of byte 0, handled by the caller
    };
    v.extend([ip_len + 6, ip_len + 7]); // UDP checksum
    v.push(ip_len + 8 + 4); // BTH byte 4: FECN, BECN, reserved
    v
}

#[test]
fn any_changed_covered_byte_fails_the_icrc() {
    let mut checked = 0usize;
    for path in common::captures() {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        for (i, f) in common::frames(&path).iter().enumerate() {
            if !common::is_udp_4791(f) || NOT_ROCE.contains(&(name.as_str(), i + 1)) {
                continue;
            }
            let frame = RoceFrame::parse_ethernet(f).unwrap();
            let ip_start = frame.roce_offset - 8 - frame.ip.bytes().len();
            let end = frame.roce_offset + frame.roce.len();
            let mut bytes = f[ip_start..end].to_vec();
            let ip_len = frame.ip.bytes().len();
            let version = bytes[0] >> 4;
            let skip = masked(version, ip_len);
            for at in 0..bytes.len() {
                if skip.contains(&at) {
                    continue;
                }
                for x in [0x01u8, 0x80, 0xff] {
                    if version == 6 && at == 0 && x & 0xf0 == 0 {
                        continue; // the low nibble of byte 0 is traffic class: masked
                    }
                    bytes[at] ^= x;
                    let (ip, rest) = bytes.split_at(ip_len);
                    let (udp, roce) = rest.split_at(8);
                    let r = icrc::verify(ip, udp, roce);
                    assert!(
                        r.is_err(),
                        "{name}#{}: byte {at} ^ {x:#x} went unnoticed",
                        i + 1
                    );
                    // The one-pass check the receive path uses, which masks by
                    // correcting the CRC's start instead of copying the headers.
                    let r = icrc::verify_in_place(&bytes, ip_len);
                    assert!(
                        r.is_err(),
                        "{name}#{}: byte {at} ^ {x:#x} went unnoticed in place",
                        i + 1
                    );
                    bytes[at] ^= x;
                    checked += 1;
                }
            }
            // Masked (variant) fields: any value, same ICRC.
            for &at in &skip {
                bytes[at] ^= 0x5a;
            }
            if version == 6 {
                bytes[0] ^= 0x0f;
            }
            let (ip, rest) = bytes.split_at(ip_len);
            let (udp, roce) = rest.split_at(8);
            icrc::verify(ip, udp, roce).unwrap_or_else(|e| panic!("{name}#{}: {e}", i + 1));
            icrc::verify_in_place(&bytes, ip_len)
                .unwrap_or_else(|e| panic!("{name}#{} in place: {e}", i + 1));
            assert!(roce.len() > ICRC_LEN);
        }
    }
    assert!(checked > 100_000, "only {checked} mutations checked");
    eprintln!("{checked} single-byte mutations, each caught by the ICRC");
}
