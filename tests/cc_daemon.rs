//! Congestion control end to end through two daemons and unmodified-protocol tools: the
//! client's daemon (127.0.96.1) has an egress queue that marks every ECN-capable packet
//! it queues behind another (kmin 0, kmax 1 byte), the server's daemon (127.0.96.2) hands
//! its processes `--cc` settings. `roce-emu perf write` between them:
//!
//! - the client's requests leave ECT(0) (its reaction point is on), the queue marks them,
//!   the server's NIC counts every CE it receives (`np_ecn_marked_roce_packets` equals the
//!   queue's `cp_ecn_marked`) and answers with CNPs, paced; the client's NIC handles or
//!   ignores each (`rp_cnp_handled + rp_cnp_ignored == np_cnp_sent`) and cuts its rate;
//! - with the daemon's `--cc np_enable=0` the marks are counted and no CNP is sent: the
//!   daemon's settings reached the process's engine;
//! - with the client's own `--cc rp_enable=0` its packets leave Not-ECT: nothing is
//!   marked.

mod common;

use roce_emu::daemon::port::PortSpec;
use roce_emu::daemon::server::{Config, Daemon};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_roce-emu");

struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    socket: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn start(ip: &str, queue: Option<&str>, cc: Option<&str>, tag: &str) -> Running {
    let socket =
        std::env::temp_dir().join(format!("roce-emu-cc-{tag}-{}.sock", std::process::id()));
    let mut cfg = Config::new(PortSpec::Udp(ip.parse().unwrap()), socket.clone());
    cfg.queue = queue.map(|q| q.parse().unwrap());
    cfg.cc = cc.map(str::to_string);
    let d = Daemon::open(cfg).expect("daemon");
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = Arc::clone(&stop);
    let thread = std::thread::spawn(move || d.run(&s2).map(drop).unwrap());
    Running {
        stop,
        thread: Some(thread),
        socket,
    }
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
    {
        let a = start("127.0.96.1", Some(queue), None, "a1");
        let b = start("127.0.96.2", None, Some("min_time_between_cnps=50"), "b1");
        perf(&a, &b, 18611, None);
        let (ca, cb) = (counters(&a), counters(&b));
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
