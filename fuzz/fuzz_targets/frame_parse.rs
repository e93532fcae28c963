//! Arbitrary bytes as a RoCEv2 frame, read both from Ethernet
//! (`RoceFrame::parse_ethernet`) and from IP (`RoceFrame::parse_ip`).
//!
//! Properties: nothing panics; and for every frame whose RoCE packet parses, re-emitting
//! the whole frame with `FrameRepr::emit` succeeds, and the result re-parses (with the
//! same entry point) to an equal `RoceRepr` and an equal payload, and its ICRC verifies.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_emu::wire::{RoceFrame, RoceRepr, WireError};

#[derive(Clone, Copy, Debug)]
enum Entry {
    Ethernet,
    Ip,
}

impl Entry {
    fn parse(self, data: &[u8]) -> Result<RoceFrame<'_>, WireError> {
        match self {
            Entry::Ethernet => RoceFrame::parse_ethernet(data),
            Entry::Ip => RoceFrame::parse_ip(data),
        }
    }
}

fn check(data: &[u8], entry: Entry) {
    let frame = match entry.parse(data) {
        Ok(f) => f,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let _ = (frame.ip.src(), frame.ip.dst());
    // Both run on every parsed frame, whether or not the RoCE packet is well formed.
    let packet = frame.packet();
    let _ = frame.verify_icrc();
    let Ok(packet) = packet else { return };
    let Ok(repr) = RoceRepr::parse(&packet) else {
        return;
    };
    let payload = packet.payload();

    let frepr = frame.repr();
    let len = frepr.header_len() + repr.buffer_len();
    // Not zeroed: emit must write every byte it returns.
    let mut buf = vec![0xa5u8; len];
    let n = frepr
        .emit(&mut buf, &repr, payload)
        .unwrap_or_else(|e| panic!("{entry:?}: re-emit failed: {e} ({repr:?})"));
    assert_eq!(n, len, "{entry:?}: emit length");
    let out = &buf[..n];

    let again = entry
        .parse(out)
        .unwrap_or_else(|e| panic!("{entry:?}: re-emitted frame fails: {e}"));
    assert_eq!(
        again.roce_offset,
        frepr.header_len(),
        "{entry:?}: RoCE offset"
    );
    assert_eq!(
        again.roce.len(),
        repr.buffer_len(),
        "{entry:?}: RoCE length"
    );
    let p2 = again
        .packet()
        .unwrap_or_else(|e| panic!("{entry:?}: re-emitted RoCE packet fails check_len: {e}"));
    let repr2 = RoceRepr::parse(&p2)
        .unwrap_or_else(|e| panic!("{entry:?}: re-emitted RoCE packet fails to parse: {e}"));
    assert_eq!(repr, repr2, "{entry:?}: RoceRepr changed");
    assert_eq!(payload, p2.payload(), "{entry:?}: payload changed");
    again
        .verify_icrc()
        .unwrap_or_else(|e| panic!("{entry:?}: re-emitted ICRC does not verify: {e}"));
}

fuzz_target!(|data: &[u8]| {
    check(data, Entry::Ethernet);
    check(data, Entry::Ip);
});
