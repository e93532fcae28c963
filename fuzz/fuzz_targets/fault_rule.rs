//! Arbitrary text as a fault rule: what `roce-emu fault` sends over a daemon's control
//! socket (any process of the daemon's user can) or `--fault` gives.
//!
//! Properties: no panic on any input; a rule that parses writes back (`Display`, what
//! `list` shows) to text that parses to the same rule.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_emu::daemon::fault::{parse, Command};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(Command::Add(r)) = parse(&text) {
        let again = r.to_string();
        assert_eq!(parse(&again), Ok(Command::Add(r)), "{again}");
    }
});
