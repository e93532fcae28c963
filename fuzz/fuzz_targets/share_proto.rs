//! Arbitrary bytes as what another process sends on the shared port's Unix socket: control
//! messages (join, lease, refusal) and forward messages (packets with their addresses).
//! Every byte from another process is untrusted.
//!
//! Properties: no panic on any input; every entry a forward message yields lies inside the
//! message; a control message that decodes re-encodes to bytes that decode to it again;
//! `dest_block` never panics on a packet of any length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_emu::backend::shared::proto::{dest_block, parse, Control};

fuzz_target!(|data: &[u8]| {
    let _ = parse(data, |_meta, range, seg| {
        assert!(range.end <= data.len() && range.start <= range.end);
        assert!(seg > 0);
    });
    if let Ok(c) = Control::decode(data) {
        assert_eq!(Control::decode(&c.encode()), Ok(c));
    }
    let _ = dest_block(data);
});
