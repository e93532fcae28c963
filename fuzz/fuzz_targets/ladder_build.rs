//! Arbitrary bytes as a stream of packets through the ladder builder
//! (`roce_emu::ladder::build::Builder`, issue 24): the harness and its properties are
//! tests/common/ladder_any.rs, shared with the proptests of tests/ladder_build.rs. The
//! seeds (tools/fuzz-seed.sh) are the real captures' packets in order.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/ladder_any.rs"]
mod ladder_any;

fuzz_target!(|data: &[u8]| {
    ladder_any::build_any(data);
});
