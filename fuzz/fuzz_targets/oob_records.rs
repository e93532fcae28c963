//! Arbitrary bytes as the peer's address records of the two TCP exchanges: rc_pingpong's
//! 52-byte record (`cli::pingpong::Dest::from_record`) and perftest's 108-byte record
//! (`cli::perf::Record::parse`). Every peer byte is untrusted.
//!
//! Properties: no panic on any input, of any length; a record that parses re-encodes to
//! bytes that parse to the same value (a round trip through the canonical form).
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_emu::cli::perf::Record;
use roce_emu::cli::pingpong::Dest;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = Dest::from_record(data) {
        let again = Dest::from_record(&d.to_record()).expect("a canonical record parses");
        assert_eq!(again, d);
    }
    if let Some(r) = Record::parse(data) {
        let again = Record::parse(&r.to_bytes()).expect("a canonical record parses");
        assert_eq!(again, r);
    }
});
