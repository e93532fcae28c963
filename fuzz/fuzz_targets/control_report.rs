//! Arbitrary bytes as a daemon control message: what any process of the daemon's user can
//! send it (`ToDaemon`), and what a process reads from a daemon (`ToProcess`), both
//! parsed as `control::recv` does (`serde_json::from_slice`). A `QpCounters` report is
//! then taken as the daemon takes it (`ProcessReport::apply`, for a process not attached
//! and for a few leased blocks, twice each: reports accumulate), each process entry
//! serialised as the daemon keeps it (`server::ProcessCounters`), and the lot put in a
//! `counters` answer (`report::counters_answer`).
//!
//! Properties: no panic on any input; every message of the answer `control::encode`s
//! (fits `control::MAX_MSG`), however large or strange the report was.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_emu::daemon::control::{self, ToDaemon, ToProcess};
use roce_emu::daemon::report::{counters_answer, ProcessReport};
use roce_emu::daemon::server::ProcessCounters;

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<ToProcess>(data);
    let Ok(ToDaemon::QpCounters { report }) = serde_json::from_slice::<ToDaemon>(data) else {
        return;
    };
    // The blocks of the processes that report: none (not attached), the first, one the
    // input names (so QPNs the input chose can fall in it), the last.
    let named = data.last().copied().unwrap_or(2);
    let mut processes = Vec::new();
    for (i, block) in [None, Some(1), Some(named), Some(255)]
        .into_iter()
        .enumerate()
    {
        let mut engine = ProcessReport::default();
        engine.apply(&report, block);
        engine.apply(&report, block);
        let p = ProcessCounters {
            pid: i as u32,
            block: block.unwrap_or(0),
            left: (i % 2 == 1).then(|| "it closed its socket".to_string()),
            engine,
            ..ProcessCounters::default()
        };
        processes.push(serde_json::to_value(&p).expect("a process entry serialises"));
    }
    let base = serde_json::json!({ "port": { "kind": "udp" }, "counters": {} });
    for m in counters_answer(base, processes) {
        if let Err(e) = control::encode(&m) {
            panic!("an answer message does not encode: {e}");
        }
    }
});
