//! Congestion control end to end through two daemons and unmodified-protocol tools: the
//! client's daemon (127.0.96.1) has an egress queue that marks every ECN-capable packet
//! it queues behind another (kmin 0, kmax 1 byte), the server's daemon (127.0.96.2) hands
//! its processes `--cc` settings. `roce-emu perf write` between them:
//!
//! - the client's requests leave ECT(0) (its reaction point is on), the queue marks them,
//!   the server's NIC counts every CE it receives (`np_ecn_marked_roce_packets` equals the
//!   queue's `cp_ecn_marked`) and answers with CNPs, paced; the client's NIC handles or
//!   ignores each (`rp_cnp_handled + rp_cnp_ignored == np_cnp_sent`) and cuts its rate;
//! - the server daemon's capture agrees with its counters, as tshark reads it (CE-marked
//!   packets in, CNPs out with PSN 0) and as `roce-emu pcap` does (BECN, valid ICRCs);
//! - with the daemon's `--cc np_enable=0` the marks are counted and no CNP is sent: the
//!   daemon's settings reached the process's engine;
//! - with the client's own `--cc rp_enable=0` its packets leave Not-ECT: nothing is
//!   marked.

mod common;

use common::in_thread::Running;
use roce_emu::daemon::port::PortSpec;
use roce_emu::daemon::server::Config;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_roce-emu");

fn start(ip: &str, queue: Option<&str>, cc: Option<&str>, tag: &str) -> Running {
    start_capturing(ip, queue, cc, tag, None)
}

fn start_capturing(
    ip: &str,
    queue: Option<&str>,
    cc: Option<&str>,
    tag: &str,
    pcap: Option<PathBuf>,
) -> Running {
    let socket =
        std::env::temp_dir().join(format!("roce-emu-cc-{tag}-{}.sock", std::process::id()));
    let mut cfg = Config::new(PortSpec::Udp(ip.parse().unwrap()), socket.clone());
    cfg.pcap = pcap;
    cfg.queue = queue.map(|q| q.parse().unwrap());
    cfg.cc = cc.map(str::to_string);
    common::in_thread::start(cfg)
}

fn counters(d: &Running) -> Value {
    let out = Command::new(BIN)
        .args(["counters", "--json", "--daemon"])
        .arg(&d.socket)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The sum of NIC counter `name` over a daemon's processes.
fn nic(c: &Value, name: &str) -> u64 {
    c["processes"]
        .as_array()
        .map(|ps| ps.iter().filter_map(|p| p["nic"][name].as_u64()).sum())
        .unwrap_or(0)
}

/// One `roce-emu perf write` of 300 messages of 8 KiB from a client on daemon `a` to a
/// server on daemon `b`, the client with `client_cc` (`--cc`); both exit 0.
fn perf(a: &Running, b: &Running, port: u16, client_cc: Option<&str>) {
    let port = port.to_string();
    let common = ["-n", "300", "-s", "8192", "-p", &port, "--timeout", "30"];
    let server = Command::new(BIN)
        .args(["perf", "write", "--bind", "127.0.96.2", "--daemon"])
        .arg(&b.socket)
        .args(common)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut client = Command::new(BIN);
    client
        .args([
            "perf",
            "write",
            "127.0.96.2",
            "--bind",
            "127.0.96.1",
            "--daemon",
        ])
        .arg(&a.socket)
        .args(common)
        .args(["--wait", "20"]);
    if let Some(cc) = client_cc {
        client.args(["--cc", cc]);
    }
    let c = client.output().unwrap();
    let s = common::proc::finish(server, Duration::from_secs(60), "perf server");
    assert!(c.status.success(), "client: {c:?}");
    assert!(s.status.success(), "server: {s:?}");
}

#[test]
fn ce_marks_become_cnps_and_rate_cuts_and_the_settings_reach_the_engines() {
    // Every ECN-capable packet that finds another queued is marked (p = 1 above 1 byte).
    let queue = "rate=200mbit buffer=4MB kmin=0 kmax=1 pmax=1 seed=1";
    let pcap = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cc_daemon_b.pcapng");
    {
        let a = start("127.0.96.1", Some(queue), None, "a1");
        let b = start_capturing(
            "127.0.96.2",
            None,
            Some("min_time_between_cnps=50"),
            "b1",
            Some(pcap.clone()),
        );
        perf(&a, &b, 18611, None);
        let (ca, cb) = (counters(&a), counters(&b));
        drop(b);
        check_capture(&pcap, &cb);
        let marked = ca["queue"]["cp_ecn_marked"].as_u64().unwrap();
        let ce = nic(&cb, "np_ecn_marked_roce_packets");
        let cnps = nic(&cb, "np_cnp_sent");
        let (handled, ignored) = (nic(&ca, "rp_cnp_handled"), nic(&ca, "rp_cnp_ignored"));
        println!("marked {marked}, CE seen {ce}, CNPs {cnps}, handled {handled}, ignored {ignored}, cuts {}", nic(&ca, "rp_rate_decreases"));
        assert!(marked > 100, "{}", ca["queue"]);
        assert_eq!(ce, marked, "every mark reached the notification point");
        assert!(
            cnps > 0 && cnps < ce,
            "CNPs are paced: {cnps} for {ce} marks"
        );
        assert_eq!(
            handled + ignored,
            cnps,
            "every CNP reached the reaction point"
        );
        assert!(nic(&ca, "rp_rate_decreases") > 0);
    }
    {
        // The daemon's settings reach its processes: marks counted, no CNP.
        let a = start("127.0.96.1", Some(queue), None, "a2");
        let b = start("127.0.96.2", None, Some("np_enable=0"), "b2");
        perf(&a, &b, 18612, None);
        let cb = counters(&b);
        assert!(nic(&cb, "np_ecn_marked_roce_packets") > 0, "{cb}");
        assert_eq!(nic(&cb, "np_cnp_sent"), 0, "{cb}");
        assert_eq!(cb["cc"], "np_enable=0");
    }
    {
        // The client's own settings: no reaction point, so Not-ECT, so never marked.
        let a = start("127.0.96.1", Some(queue), None, "a3");
        let b = start("127.0.96.2", None, None, "b3");
        perf(&a, &b, 18613, Some("rp_enable=0"));
        let (ca, cb) = (counters(&a), counters(&b));
        assert_eq!(ca["queue"]["cp_ecn_marked"], 0, "{}", ca["queue"]);
        assert!(ca["queue"]["cp_enqueued"].as_u64().unwrap() > 100);
        assert_eq!(nic(&cb, "np_ecn_marked_roce_packets"), 0);
    }
}

/// The server daemon's capture agrees with its counters, read by tshark (CE-marked
/// packets in, CNPs out: opcode 129, PSN 0; Debian 12's Wireshark shows no BECN field)
/// and by `roce-emu pcap` (every CNP's ICRC valid, BECN set).
fn check_capture(pcap: &std::path::Path, cb: &Value) {
    let ours = Command::new(BIN).arg("pcap").arg(pcap).output().unwrap();
    assert!(ours.status.success(), "{ours:?}");
    let text = String::from_utf8_lossy(&ours.stdout);
    let cnp_lines: Vec<&str> = text.lines().filter(|l| l.contains(" CNP ")).collect();
    assert_eq!(cnp_lines.len() as u64, nic(cb, "np_cnp_sent"), "{text}");
    assert!(
        cnp_lines.iter().all(|l| l.ends_with(" ok")),
        "{cnp_lines:?}"
    );
    let ce_lines = text.lines().filter(|l| l.contains(" ECN=CE ")).count() as u64;
    let json = Command::new(BIN)
        .args(["pcap", "--json"])
        .arg(pcap)
        .output()
        .unwrap();
    let cnps_becn = String::from_utf8_lossy(&json.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["opcode"] == 0x81)
        .inspect(|v| assert_eq!(v["becn"], true, "{v}"))
        .count() as u64;
    assert_eq!(cnps_becn, nic(cb, "np_cnp_sent"));
    assert_eq!(ce_lines, nic(cb, "np_ecn_marked_roce_packets"));
    if Command::new("tshark").arg("-v").output().is_err() {
        common::netns::skip("cc_daemon (tshark's view)", "needs tshark");
        return;
    }
    let config = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cc_daemon_tshark");
    std::fs::create_dir_all(&config).unwrap();
    let out = Command::new("tshark")
        .env("WIRESHARK_CONFIG_DIR", &config)
        .args(["-n", "-r"])
        .arg(pcap)
        .args(["-d", "udp.port==4791,infiniband"])
        .args(["-T", "fields", "-E", "separator=/t"])
        .args(["-e", "ip.dsfield.ecn", "-e", "infiniband.bth.opcode"])
        .args(["-e", "infiniband.bth.psn"])
        .output()
        .expect("tshark");
    assert!(out.status.success(), "{out:?}");
    let rows = String::from_utf8_lossy(&out.stdout).to_string();
    let mut ce = 0;
    let mut cnps = 0;
    for r in rows.lines() {
        let c: Vec<&str> = r.split('\t').collect();
        if c[0] == "3" {
            ce += 1;
        }
        if c.get(1) == Some(&"129") {
            cnps += 1;
            assert_eq!(c[2], "0", "a CNP's PSN is 0: {r}");
        }
    }
    println!("tshark: {ce} CE-marked packets, {cnps} CNPs");
    assert_eq!(ce, nic(cb, "np_ecn_marked_roce_packets"), "{rows}");
    assert_eq!(cnps, nic(cb, "np_cnp_sent"));
}
