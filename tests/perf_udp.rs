//! `roce-emu perf` as server and client in two processes over UDP on loopback: every
//! operation (WRITE, READ, SEND, both atomics) at several sizes and MTUs with `--check`
//! (every byte, every atomic verified end to end), the JSON figures, and the failures a
//! user meets (no server, a size beyond the server's buffer, a silent peer, mismatched
//! runs under --check, bad options) as clear errors within bounded time.
//!
//! Each test uses its own 127.0.0.x addresses and TCP port, so they run in parallel.

use std::net::TcpListener;
mod common;

use common::proc::{self, finish, strings, text};
use std::process::{Child, Output};
use std::time::{Duration, Instant};

fn spawn(args: &[String]) -> Child {
    proc::spawn("perf", args)
}

/// A server bound to `sip` and a client bound to `cip`, on the same TCP port.
fn pair(sip: &str, cip: &str, port: u16, sargs: &[&str], cargs: &[&str]) -> (Output, Output) {
    let port = port.to_string();
    let mut s = strings(&["-p", &port, "--wait", "20", "--timeout", "5", "--bind", sip]);
    s.extend(strings(sargs));
    let server = spawn(&s);
    let mut c = strings(&["-p", &port, "--wait", "10", "--timeout", "5", "--bind", cip]);
    c.extend(strings(cargs));
    c.push(sip.to_string());
    let client = spawn(&c);
    let client = finish(client, Duration::from_secs(60), "client");
    let server = finish(server, Duration::from_secs(30), "server");
    (server, client)
}

fn ok_json(who: &str, o: &Output) -> serde_json::Value {
    let (stdout, stderr) = text(o);
    assert!(
        o.status.success(),
        "{who} exited {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        o.status
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{who}: not one JSON object ({e}):\n{stdout}"))
}

/// Runs one test both ways round the check and returns the client's figures.
fn run_checked(
    sip: &str,
    cip: &str,
    port: u16,
    test: &str,
    extra: &[&str],
    size: u64,
    iters: u64,
) -> serde_json::Value {
    let n = iters.to_string();
    let mut a = vec![test, "-n", &n, "--check", "--json"];
    a.extend_from_slice(extra);
    let (server, client) = pair(sip, cip, port, &a, &a);
    let c = ok_json("client", &client);
    let s = ok_json("server", &server);
    let tool = format!("ib_{test}_bw");
    for (who, v) in [("client", &c), ("server", &s)] {
        assert_eq!(v["test"], tool.as_str(), "{who}: {v}");
        assert_eq!(v["role"], who, "{v}");
        assert_eq!(v["bytes"], size, "{who}: {v}");
        assert_eq!(v["iterations"], iters, "{who}: {v}");
        assert_eq!(v["checked"], true, "{v}");
        let avg = v["bw_average_mb_per_sec"].as_f64().expect("average");
        let peak = v["bw_peak_mb_per_sec"].as_f64().expect("peak");
        let rate = v["msg_rate_mpps"].as_f64().expect("rate");
        assert!(rate > 0.0 && avg >= 0.0 && peak + 1e-9 >= avg, "{who}: {v}");
        if size > 0 {
            assert!(avg > 0.0, "{who}: {v}");
        }
    }
    assert_eq!(c["local"], cip);
    assert_eq!(c["peer"], sip);
    c
}

#[test]
fn write_sizes_and_mtus() {
    for (i, (size, mtu)) in [
        (1u64, "1024"),
        (4096, "1024"),
        (65536, "4096"),
        (10_000, "256"),
    ]
    .into_iter()
    .enumerate()
    {
        let s = size.to_string();
        let c = run_checked(
            "127.0.0.40",
            "127.0.0.41",
            18700 + i as u16,
            "write",
            &["-s", &s, "-m", mtu],
            size,
            300,
        );
        assert_eq!(c["mtu"], mtu.parse::<u64>().unwrap());
        let io = &c["io"];
        assert_eq!(io["gso_fallbacks"], 0, "{io}");
        assert_eq!(io["truncated"], 0, "{io}");
    }
    // Multi-packet messages leave in GSO trains (loopback has GSO everywhere): from the
    // port, which is the daemon's each tool attached to (started on demand).
    let mut segments = 0;
    for ip in ["127.0.0.40", "127.0.0.41"] {
        let sock = roce_emu::backend::daemon_path::udp_socket(ip.parse().unwrap());
        let out = std::process::Command::new(common::daemon::BIN)
            .args(["counters", "--json", "--daemon"])
            .arg(&sock)
            .output()
            .unwrap();
        let (o, e) = text(&out);
        let v: serde_json::Value =
            serde_json::from_str(&o).unwrap_or_else(|x| panic!("{x}: {o}{e}"));
        assert_eq!(v["port_stats"]["gso_fallbacks"], 0, "{o}");
        segments += v["port_stats"]["gso_segments"].as_u64().unwrap_or(0);
    }
    assert!(segments > 0, "no GSO train left the daemons");
}

#[test]
fn read_sizes() {
    for (i, size) in [8u64, 2048, 65536].into_iter().enumerate() {
        let s = size.to_string();
        run_checked(
            "127.0.0.42",
            "127.0.0.43",
            18710 + i as u16,
            "read",
            &["-s", &s, "-m", "1024"],
            size,
            300,
        );
    }
}

#[test]
fn send_sizes() {
    for (i, size) in [0u64, 1024, 3000, 65536].into_iter().enumerate() {
        let s = size.to_string();
        run_checked(
            "127.0.0.44",
            "127.0.0.45",
            18720 + i as u16,
            "send",
            // rx depth below the message count: the server re-posts as it goes.
            &["-s", &s, "-m", "1024", "-r", "64"],
            size,
            300,
        );
    }
}

#[test]
fn atomics_both_kinds() {
    for (i, kind) in ["FETCH_AND_ADD", "CMP_AND_SWAP"].into_iter().enumerate() {
        let c = run_checked(
            "127.0.0.46",
            "127.0.0.47",
            18730 + i as u16,
            "atomic",
            &["-A", kind],
            8,
            1000,
        );
        assert_eq!(c["atomic"], kind);
    }
}

/// A send window smaller than the completion interval (-t 8 < -Q 100): the client asks
/// for completions often enough to keep going; a receive queue of 1 that the server re-posts
/// only 1 ms after each completion (--recv-hold-us) makes it answer RNR NAKs that the client
/// waits out.
#[test]
fn small_tx_depth_and_rnr() {
    let (server, client) = pair(
        "127.0.0.60",
        "127.0.0.61",
        18746,
        &[
            "send",
            "-s",
            "64",
            "-n",
            "50",
            "-r",
            "1",
            "--recv-hold-us",
            "1000",
            "--json",
            "--check",
        ],
        &[
            "send", "-s", "64", "-n", "50", "-t", "8", "--json", "--check",
        ],
    );
    let c = ok_json("client", &client);
    let s = ok_json("server", &server);
    assert!(
        c["counters"]["rcvd_rnr_err"].as_u64().unwrap_or(0) > 0,
        "{c}"
    );
    assert!(
        s["counters"]["send_rnr_err"].as_u64().unwrap_or(0) > 0,
        "{s}"
    );
    // No -m: the port MTU follows the interface; loopback's 65536 bytes take 4096.
    assert_eq!(c["mtu"], 4096, "{c}");
    assert_eq!(s["mtu"], 4096, "{s}");
}

/// `--lat` (ib_write_lat, ib_send_lat): the two sides take turns for -n messages; both
/// report the half round trip's percentiles in order, and the counters show exactly one
/// message each way per iteration.
#[test]
fn latency_write_and_send() {
    for (i, test) in ["write", "send"].into_iter().enumerate() {
        let a = [test, "--lat", "-s", "100", "-n", "300", "--json"];
        let (server, client) = pair("127.0.0.62", "127.0.0.63", 18747 + i as u16, &a, &a);
        for (who, o) in [("client", &client), ("server", &server)] {
            let v = ok_json(who, o);
            assert_eq!(v["test"], format!("ib_{test}_lat").as_str(), "{v}");
            assert_eq!(v["iterations"], 300, "{v}");
            assert_eq!(v["bytes"], 100, "{v}");
            let f = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"));
            let (min, typ, p99, p999, max) = (
                f("t_min_usec"),
                f("t_typical_usec"),
                f("p99_usec"),
                f("p99_9_usec"),
                f("t_max_usec"),
            );
            assert!(
                0.0 < min && min <= typ && typ <= p99 && p99 <= p999 && p999 <= max,
                "{v}"
            );
            assert!(f("t_avg_usec") >= min && f("t_avg_usec") <= max, "{v}");
            // One message each way per iteration, plus nothing else but ACKs.
            let sent = v["counters"]["sent_pkts"].as_u64().unwrap();
            let rcvd = v["counters"]["rcvd_pkts"].as_u64().unwrap();
            assert!(
                (600..=620).contains(&sent) && (600..=620).contains(&rcvd),
                "{v}"
            );
        }
    }
}

/// The smaller MTU wins, as perftest's check_mtu does.
#[test]
fn mtu_is_negotiated_down() {
    let (server, client) = pair(
        "127.0.0.48",
        "127.0.0.49",
        18740,
        &["write", "-s", "8192", "-n", "50", "-m", "4096", "--json"],
        &["write", "-s", "8192", "-n", "50", "-m", "512", "--json"],
    );
    assert_eq!(ok_json("client", &client)["mtu"], 512);
    assert_eq!(ok_json("server", &server)["mtu"], 512);
}

/// The table perftest prints, with the right counts.
#[test]
fn table_output() {
    let (server, client) = pair(
        "127.0.0.50",
        "127.0.0.51",
        18741,
        &["write", "-s", "4096", "-n", "200"],
        &["write", "-s", "4096", "-n", "200"],
    );
    for (who, o) in [("client", &client), ("server", &server)] {
        let (stdout, stderr) = text(o);
        assert!(o.status.success(), "{who}: {stdout}\n{stderr}");
        assert!(stdout.contains("RDMA_Write BW Test"), "{stdout}");
        let head = stdout
            .lines()
            .position(|l| l.contains("#bytes"))
            .unwrap_or_else(|| panic!("{who}: no table in\n{stdout}"));
        assert!(stdout
            .lines()
            .nth(head)
            .unwrap()
            .contains("BW average[MB/sec]"));
        let row: Vec<&str> = stdout
            .lines()
            .nth(head + 1)
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(row.len(), 5, "{row:?}");
        assert_eq!(row[0], "4096");
        assert_eq!(row[1], "200");
        for f in &row[2..] {
            assert!(f.parse::<f64>().is_ok_and(|v| v > 0.0), "{row:?}");
        }
    }
}

fn failed_with(who: &str, o: &Output, needle: &str) {
    let (stdout, stderr) = text(o);
    assert!(
        !o.status.success(),
        "{who} should have failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stderr.contains(needle),
        "{who}: expected {needle:?} in\n{stderr}"
    );
}

#[test]
fn size_beyond_the_servers_buffer_is_a_remote_access_error() {
    let (server, client) = pair(
        "127.0.0.52",
        "127.0.0.53",
        18742,
        &["write", "-s", "4096", "-n", "20"],
        &["write", "-s", "65536", "-n", "20"],
    );
    failed_with("client", &client, "remote access error");
    failed_with("client", &client, "-s smaller");
    failed_with("server", &server, "QpAccessError");
}

#[test]
fn check_catches_a_mismatched_run() {
    let (server, client) = pair(
        "127.0.0.54",
        "127.0.0.55",
        18743,
        &["write", "-s", "64", "-n", "100", "--check"],
        &["write", "-s", "64", "-n", "99", "--check"],
    );
    // Not a --check failure: the runs differ, and the message says what to change.
    failed_with("server", &server, "give both sides the same -n and -s");
    let (_, stderr) = text(&server);
    assert!(!stderr.contains("--check:"), "{stderr}");
    // The client finished its test; the server's refusal comes after.
    let _ = client;
}

/// `--lat --check`: every message of ib_write_lat and ib_send_lat carries the sender's
/// pattern and the receiver verifies it; a peer that sends no pattern fails the check.
#[test]
fn latency_check_verifies_every_message() {
    for (i, test) in ["write", "send"].into_iter().enumerate() {
        let a = [test, "--lat", "--check", "-s", "300", "-n", "100"];
        let (server, client) = pair("127.0.13.1", "127.0.13.2", 18760 + i as u16, &a, &a);
        for (who, o) in [("client", &client), ("server", &server)] {
            let (stdout, stderr) = text(o);
            assert!(o.status.success(), "{who}: {stdout}\n{stderr}");
            assert!(stdout.contains("Latency Test"), "{who}: {stdout}");
            assert!(!stdout.contains("CQ Moderation"), "{who}: {stdout}");
            assert!(
                stdout.contains("--check: every byte verified"),
                "{who}: {stdout}"
            );
        }
    }
    let (server, _) = pair(
        "127.0.13.3",
        "127.0.13.4",
        18762,
        &["write", "--lat", "--check", "-s", "64", "-n", "50"],
        &["write", "--lat", "-s", "64", "-n", "50"],
    );
    failed_with("server", &server, "--check: message 1: byte 0 is 0x00");
}

/// Runs that do not match stall with a message that names the likely cause, not a
/// reachability problem.
#[test]
fn mismatched_runs_name_the_cause() {
    let (server, client) = pair(
        "127.0.13.5",
        "127.0.13.6",
        18763,
        &["send", "-n", "400"],
        &["send", "-n", "200"],
    );
    failed_with("server", &server, "after 200 of 400 messages");
    failed_with("server", &server, "stopped sending");
    failed_with(
        "client",
        &client,
        "is the server still waiting for messages",
    );
    let (_, client) = pair(
        "127.0.13.7",
        "127.0.13.8",
        18764,
        &["write", "-s", "4096", "-n", "100"],
        &["send", "-s", "4096", "-n", "100"],
    );
    failed_with("client", &client, "answers with RNR NAKs");
}

#[test]
fn a_server_without_a_client_says_to_start_one() {
    let s = spawn(&strings(&[
        "write",
        "-p",
        "18765",
        "--wait",
        "1",
        "--bind",
        "127.0.13.9",
    ]));
    let out = finish(s, Duration::from_secs(10), "server");
    failed_with(
        "server",
        &out,
        "no client connected to TCP port 18765 within 1 s",
    );
    failed_with("server", &out, "start the client");
}

#[test]
fn no_server_is_a_bounded_clear_error() {
    let start = Instant::now();
    let c = spawn(&strings(&[
        "write",
        "-p",
        "18744",
        "--wait",
        "1",
        "--bind",
        "127.0.0.57",
        "127.0.0.56",
    ]));
    let out = finish(c, Duration::from_secs(10), "client");
    failed_with("client", &out, "could not connect to 127.0.0.56:18744");
    failed_with("client", &out, "start the server first");
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// A peer that accepts and never says a word.
#[test]
fn silent_peer_times_out() {
    let l = TcpListener::bind("127.0.0.58:18745").expect("listen");
    let c = spawn(&strings(&[
        "send",
        "-p",
        "18745",
        "--timeout",
        "1",
        "--bind",
        "127.0.0.59",
        "127.0.0.58",
    ]));
    let (_held, _) = l.accept().expect("accept");
    let out = finish(c, Duration::from_secs(10), "client");
    failed_with("client", &out, "no answer from the peer 127.0.0.58:18745");
    failed_with("client", &out, "ib_send_bw");
}

#[test]
fn bad_options_are_named() {
    for (args, needle) in [
        (&["atomic", "-s", "16"][..], "atomics are 8 bytes"),
        (&["write", "-m", "1500"][..], "-m 1500 is not a port MTU"),
        (
            &["write", "-n", "0"][..],
            "-n (iterations) must be at least 1",
        ),
        (
            &["write", "--timeout", "0"][..],
            "0 is not a positive number of seconds",
        ),
        (
            &["write", "--recv-hold-us", "100"][..],
            "--recv-hold-us slows the receives of a send server",
        ),
        (
            &["write", "192.0.2.1"][..],
            "is not on this machine: give --bind IP",
        ),
        (
            &["write", "-s", "4294967295"][..],
            "-s 4294967295 is larger than a message can be",
        ),
    ] {
        let out = finish(spawn(&strings(args)), Duration::from_secs(10), "perf");
        assert!(!out.status.success(), "{args:?}");
        let (_, stderr) = text(&out);
        assert!(
            stderr.contains(needle),
            "{args:?}: {needle:?} not in {stderr}"
        );
    }
}
