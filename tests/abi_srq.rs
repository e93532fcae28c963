//! Shared receive queues through the drop-in, from C: tests/abi/srq_events.c, compiled
//! against Debian 12's libibverbs-dev headers and linked against our library (as
//! tests/abi_paths.rs builds its programs), checks the device's SRQ limits, two QPs on
//! one SRQ, the one-shot limit event and Last WQE Reached through ibv_get_async_event
//! (element.srq / element.qp), EBUSY on destroying an SRQ in use, and ibv_create_srq_ex.
//! Address 127.0.21.5.

mod common;

use common::dropin;
use std::process::Command;
use std::time::Duration;

#[test]
fn srq_limit_and_last_wqe_events_reach_ibv_get_async_event() {
    let Some(env) = dropin::setup("abi_srq") else {
        return;
    };
    let exe = std::env::temp_dir().join(format!("roce-emu-srq_events-{}", std::process::id()));
    let src = format!("{}/tests/abi/srq_events.c", env!("CARGO_MANIFEST_DIR"));
    let cc = Command::new("cc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(src)
        .arg(format!("-I{}", env.root.join("usr/include").display()))
        .arg(format!("-L{}", env.lib.display()))
        .arg("-libverbs")
        .arg("-pthread")
        .output()
        .expect("cc");
    assert!(cc.status.success(), "cc: {}", dropin::show(&cc));
    let child = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &env.lib)
        .env("ROCE_EMU_DEVICES", "rxe0=127.0.21.5")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = dropin::finish(child, Duration::from_secs(120), "srq_events");
    let _ = std::fs::remove_file(&exe);
    assert!(out.status.success(), "{}", dropin::show(&out));
    let text = dropin::stdout(&out);
    assert_eq!(text.matches("PASS ").count(), 6, "{text}");
}
