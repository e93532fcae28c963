//! Two unmodified Debian 12 `ibv_rc_pingpong` with mismatched MTUs (server `-m 1024`,
//! client `-m 2048`): the server's NIC gets a packet over its path MTU, NAKs it (Invalid
//! Request) and its program returns from `main` on the error completion, with no
//! `ibv_close_device`. The NAK must still reach the client, which then reports `remote
//! invalid request error (9)`, never `transport retry counter exceeded (12)`: the drop-in
//! sends a completion's packets before the program sees it and hands on what a NIC holds
//! at exit (`abi/src/exit.rs`).
//!
//! In-process (both programs on one shared address, attached to its daemon started on
//! demand: the server's NAK to the client must leave before it exits) and through a `roce-emu daemon` on
//! a UDP port. `DROPIN_EXIT_RUNS` runs each, 5 by default (20 by hand:
//! `DROPIN_EXIT_RUNS=20 cargo test --test dropin_exit`). Addresses 127.0.53.x, TCP ports
//! 19110-19119.

mod common;

use common::daemon::Daemon;
use common::dropin::{self, finish, show, wait_listening};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

fn runs() -> usize {
    std::env::var("DROPIN_EXIT_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
}

/// `runs()` pairs on device list `devices`, the server at `server_ip`; how many clients
/// reported the remote invalid request, and the first other outcome.
fn mismatched(tag: &str, devices: &str, server_ip: &str, port: u16) -> Option<(usize, usize)> {
    let env = dropin::setup(tag)?;
    let p = port.to_string();
    let base = ["-d", "rxe0", "-g", "1", "-p", &p, "-n", "5"];
    let n = runs();
    let mut ok = 0;
    for i in 0..n {
        let mut sargs = base.to_vec();
        sargs.extend(["-m", "1024"]);
        let mut cargs = base.to_vec();
        cargs.extend(["-m", "2048", server_ip]);
        let server = env.cmd("ibv_rc_pingpong", devices, &sargs).spawn().unwrap();
        assert!(
            wait_listening(port, Duration::from_secs(20)),
            "{tag}: the server never listened: {}",
            show(&finish(server, Duration::from_secs(1), tag))
        );
        let client = env.cmd("ibv_rc_pingpong", devices, &cargs).spawn().unwrap();
        let c = finish(client, LIMIT, &format!("{tag} client"));
        let s = finish(server, LIMIT, &format!("{tag} server"));
        let text = String::from_utf8_lossy(&c.stderr);
        if text.contains("remote invalid request error (9)") {
            ok += 1;
        } else {
            eprintln!(
                "{tag} run {i}: the client did not report the remote invalid request\n\
                 --- client: {}\n--- server: {}",
                show(&c),
                show(&s)
            );
        }
    }
    eprintln!("{tag}: remote invalid request in {ok} of {n} runs");
    Some((ok, n))
}

#[test]
fn rc_pingpong_mtu_mismatch_reports_the_nak_in_process() {
    let ip = "127.0.53.1";
    let Some((ok, n)) = mismatched("mtu mismatch, in-process", &format!("rxe0={ip}"), ip, 19110)
    else {
        return;
    };
    assert_eq!(ok, n);
}

#[test]
fn rc_pingpong_mtu_mismatch_reports_the_nak_through_a_daemon() {
    if dropin::setup("mtu mismatch, daemon").is_none() {
        return;
    }
    let ip = "127.0.53.2";
    let d = Daemon::start(None, &format!("udp:{ip}"), "dropin-exit", &[]);
    let devices = format!("rxe0=daemon:{}", d.socket.display());
    let Some((ok, n)) = mismatched("mtu mismatch, daemon", &devices, ip, 19111) else {
        return;
    };
    assert_eq!(ok, n);
}
