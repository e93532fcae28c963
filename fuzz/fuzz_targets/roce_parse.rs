//! Arbitrary bytes as a RoCE packet (the UDP payload of a RoCEv2 datagram: BTH through
//! ICRC).
//!
//! Properties, for every input that `RocePacket::new_checked` + `RoceRepr::parse` accept:
//! - `RoceRepr::emit` of the parsed Repr and payload succeeds and writes exactly as many
//!   bytes as the input;
//! - the emitted packet re-parses to an equal Repr and an equal payload;
//! - the emitted bytes equal the input everywhere except where `emit` normalises: the
//!   reserved bits (BTH byte 4 low 6 bits, BTH byte 8 low 7 bits, DETH byte 4, the 16
//!   CNP bytes), the pad bytes (written as zero) and the ICRC (written as zero: it needs
//!   the IP and UDP headers, see `wire::icrc`).
//!
//! The output buffer is pre-filled with the complement of the input, so a byte that
//! `emit` forgot to write shows up as a mismatch rather than passing by luck.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_emu::wire::opcode::Headers;
use roce_emu::wire::{RocePacket, RoceRepr};

/// BTH byte 4: FECN (0x80), BECN (0x40), then 6 reserved bits.
const BTH_FECN_BECN: usize = 4;
const BTH_FECN_BECN_KEEP: u8 = 0xc0;
/// BTH byte 8: AckReq (0x80), then 7 reserved bits.
const BTH_ACKREQ: usize = 8;
const BTH_ACKREQ_KEEP: u8 = 0x80;
/// DETH byte 4 is reserved (between Q_Key and the source QP).
const DETH_RESERVED: usize = 4;
const CNP_LEN: usize = 16;

/// Zeroes every bit `RoceRepr::emit` does not carry over from a parsed packet.
fn mask(bytes: &mut [u8], repr: &RoceRepr) {
    let info = repr.info().expect("a parsed Repr has a known opcode");
    bytes[BTH_FECN_BECN] &= BTH_FECN_BECN_KEEP;
    bytes[BTH_ACKREQ] &= BTH_ACKREQ_KEEP;
    if let Some(off) = info.offset_of(Headers::DETH) {
        bytes[off + DETH_RESERVED] = 0;
    }
    if let Some(off) = info.offset_of(Headers::CNP) {
        bytes[off..off + CNP_LEN].fill(0);
    }
    // Pad and ICRC: everything after the payload.
    let end = info.header_len() + repr.payload_len;
    bytes[end..].fill(0);
}

fuzz_target!(|data: &[u8]| {
    let packet = match RocePacket::new_checked(data) {
        Ok(p) => p,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    // The accessors check_len vouches for must not panic.
    let _ = (packet.pad_bytes(), packet.covered(), packet.icrc_wire_be());
    let repr = match RoceRepr::parse(&packet) {
        Ok(r) => r,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let _ = repr.to_string();
    let payload = packet.payload();
    assert_eq!(payload.len(), repr.payload_len);
    assert_eq!(repr.buffer_len(), data.len());
    assert_eq!(
        repr.check().map(|i| i.header_len()),
        Ok(packet.header_len())
    );

    let mut buf: Vec<u8> = data.iter().map(|b| !b).collect();
    let n = repr
        .emit(&mut buf, payload)
        .unwrap_or_else(|e| panic!("emit of a parsed Repr failed: {e} ({repr:?})"));
    assert_eq!(n, data.len());

    let again = RocePacket::new_checked(&buf[..n])
        .unwrap_or_else(|e| panic!("emitted packet fails check_len: {e}"));
    let repr2 =
        RoceRepr::parse(&again).unwrap_or_else(|e| panic!("emitted packet fails to parse: {e}"));
    assert_eq!(repr, repr2);
    assert_eq!(payload, again.payload());
    assert!(again.pad_bytes().iter().all(|&b| b == 0), "pad not zeroed");
    assert_eq!(again.icrc(), 0, "ICRC not zeroed");

    let mut want = data.to_vec();
    mask(&mut want, &repr);
    let mut got = buf[..n].to_vec();
    mask(&mut got, &repr);
    // emit writes reserved bits, pad and ICRC as zero, so masking changes nothing...
    assert_eq!(
        got,
        &buf[..n],
        "emit left a reserved bit, pad byte or ICRC byte non-zero"
    );
    // ...and every other bit is the input's.
    assert_eq!(want, got, "emit changed bytes other than reserved/pad/ICRC");
});
