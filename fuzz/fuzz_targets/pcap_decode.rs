//! Arbitrary bytes as a capture file (classic pcap or pcapng) through the pcap decoder,
//! `roce_emu::cli::pcap::decode_capture`, in both output modes (text and JSON).
//!
//! Properties: no panic, and bounded work, on any file; both modes read the same frames
//! and reach the same summary; the summary is self-consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_emu::cli::pcap::{decode_capture, for_each_frame, Options};

fuzz_target!(|data: &[u8]| {
    let opts = |json| Options {
        json,
        local: vec!["127.0.0.1".parse().unwrap()],
    };
    let text = decode_capture(data, &opts(false), &mut std::io::sink());
    let json = decode_capture(data, &opts(true), &mut std::io::sink());
    let (text, json) = match (text, json) {
        (Ok(t), Ok(j)) => (t, j),
        (Err(a), Err(b)) => {
            assert_eq!(
                a.to_string(),
                b.to_string(),
                "text and JSON modes fail differently"
            );
            return;
        }
        (t, j) => panic!("text and JSON modes disagree: {t:?} vs {j:?}"),
    };
    assert_eq!(text, json, "text and JSON modes summarise differently");
    let frames = for_each_frame(data, |_, _, _| {}).expect("decode_capture read this file");
    assert_eq!(text.frames, frames, "frame count");
    assert!(text.roce + text.skipped <= text.frames, "{text:?}");
    assert!(text.malformed <= text.frames, "{text:?}");
    assert!(text.bad_icrc.len() <= text.roce, "{text:?}");
    assert!(
        text.bad_icrc.windows(2).all(|w| w[0] < w[1])
            && text.bad_icrc.iter().all(|&n| 1 <= n && n <= text.frames),
        "bad ICRC frame numbers: {text:?}"
    );
});
