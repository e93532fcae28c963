//! Arbitrary bytes as a CM MAD (the payload of a UD SEND ONLY to QP1), and as a
//! `cma_hdr`. Every attribute the CM class defines is read: REQ, MRA, REJ, REP, RTU,
//! DREQ, DREP, SIDR_REQ, SIDR_REP, LAP, APR and ClassPortInfo (the attribute ID is the
//! input's bytes 16-17, so the fuzzer reaches each).
//!
//! Properties, for every input that `CmMad::parse` accepts:
//! - its one-line `Display` (what `roce-emu pcap` prints, `cma_hdr` of REQ/SIDR_REQ
//!   private data included) never panics;
//! - `emit` writes the 256 bytes (into a buffer pre-filled with the input's complement),
//!   and they re-parse to an equal `CmMad`;
//! - emit is a fixed point: emitting the re-parsed value gives the same bytes (reserved
//!   bits, the only ones `emit` may change, are zero after one emit).
//!
//! And for `cma::Repr`, the same round trip over its 36 bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_emu::wire::cm::{cma, CmMad};
use roce_emu::wire::mad::MAD_LEN;

fuzz_target!(|data: &[u8]| {
    match CmMad::parse(data) {
        Err(e) => {
            let _ = e.to_string();
        }
        Ok(m) => {
            let _ = m.to_string();
            let mut buf: Vec<u8> = data[..MAD_LEN].iter().map(|b| !b).collect();
            m.emit(&mut buf);
            let again = CmMad::parse(&buf)
                .unwrap_or_else(|e| panic!("emitted MAD fails to parse: {e} ({m:?})"));
            assert_eq!(again, m);
            let mut buf2 = vec![0u8; MAD_LEN];
            again.emit(&mut buf2);
            assert_eq!(buf, buf2, "emit is not a fixed point");
        }
    }
    if let Ok(p) = cma::Packet::new_checked(data) {
        if let Ok(r) = cma::Repr::parse(&p) {
            let _ = r.to_string();
            let mut buf: Vec<u8> = data[..cma::HEADER_LEN].iter().map(|b| !b).collect();
            r.emit(&mut cma::Packet::new_unchecked(&mut buf[..]));
            let again = cma::Repr::parse(&cma::Packet::new_checked(&buf[..]).unwrap())
                .unwrap_or_else(|e| panic!("emitted cma_hdr fails to parse: {e}"));
            assert_eq!(again, r);
        }
    }
});
