//! Per-process and per-QP counters through `roce-emu daemon` (a UDP port): the attached
//! programs publish their engines' counters, the daemon keeps them after the programs
//! exit (or are killed), and `roce-emu counters` shows them, consistent with what the
//! daemon itself counted and with the transfer (pingpong: its SENDs exactly; perf write
//! `--check`: its packets). A report that is garbage is counted, not
//! the end of the process's attachment. Addresses 127.0.34.1 and .2, TCP ports 18950-18959.

mod common;

use common::attach;
use common::daemon::{Daemon, BIN};
use common::proc::{finish, spawn, strings, text};
use roce_emu::daemon::control::{self, ToDaemon};
use serde_json::Value;
use std::os::fd::AsFd;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const ITERS: u64 = 300;

fn pingpong(d: &Daemon, ip: &str, port: &str, iters: u64, server: bool) -> Child {
    let n = iters.to_string();
    let mut a = strings(&[
        "-p", port, "--bind", ip, "-n", &n, "-s", "4096", "-m", "1024", "--wait", "20", "--daemon",
    ]);
    a.push(d.socket.display().to_string());
    if !server {
        a.push(ip.to_string());
    }
    spawn("pingpong", &a)
}

fn ok(who: &str, c: Child) -> String {
    let o = finish(c, Duration::from_secs(60), who);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{who}: {}\n{out}\n{err}", o.status);
    out
}

/// The process entry of `pid` in the daemon's counters.
fn process(v: &Value, pid: u32) -> Value {
    v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("no process {pid}: {v:#}"))
        .clone()
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

/// The one QP of a process entry, checked to be in the process's block.
fn only_qp(p: &Value) -> Value {
    let qps = p["qps"].as_array().unwrap();
    assert_eq!(qps.len(), 1, "pingpong has one QP: {p:#}");
    let block = p["block"].as_u64().unwrap();
    assert_eq!(qps[0]["qpn"].as_u64().unwrap() >> 16, block, "{p:#}");
    qps[0]["counters"].clone()
}

#[test]
fn per_qp_counters_match_the_transfer_and_the_daemon_and_outlive_the_programs() {
    let d = Daemon::start(None, "udp:127.0.34.1", "counters", &[]);
    let server = pingpong(&d, "127.0.34.1", "18950", ITERS, true);
    let client = pingpong(&d, "127.0.34.1", "18950", ITERS, false);
    let (spid, cpid) = (server.id(), client.id());
    assert!(ok("pingpong client", client).contains("300 iters in"));
    assert!(ok("pingpong server", server).contains("300 iters in"));

    let v = d.counters();
    let (s, c) = (process(&v, spid), process(&v, cpid));
    for p in [&s, &c] {
        // Both left; what they reported is kept.
        assert!(p["left"].is_string(), "{p:#}");
        assert!(n(p, "reports") >= 1, "{p:#}");
        assert_eq!(n(p, "report_errors"), 0, "{p:#}");
        // Nothing dropped between the process and the daemon, either way.
        assert!(p["tx_dropped"] == 0 && p["ring_full"] == 0, "{p:#}");
    }
    let (sq, cq) = (only_qp(&s), only_qp(&c));
    // The transfer: each side sent 300 SENDs of 4 packets (4096 bytes at MTU 1024) and
    // received 300 (rc_pingpong's pattern: both sides post, both sides receive).
    for (who, q) in [("server", &sq), ("client", &cq)] {
        assert_eq!(n(q, "rdma_sends"), ITERS, "{who}: {q:#}");
        assert_eq!(n(q, "rdma_recvs"), ITERS, "{who}: {q:#}");
        assert!(n(q, "sent_pkts") >= 4 * ITERS, "{who}: {q:#}");
        assert!(n(q, "rcvd_pkts") >= 4 * ITERS, "{who}: {q:#}");
    }
    // What one QP sent the other received, packet for packet, save the last few a QP
    // sends as its peer closes (the ACK of the last message, a retransmission).
    for (a, b) in [(&sq, &cq), (&cq, &sq)] {
        let (sent, rcvd) = (n(a, "sent_pkts"), n(b, "rcvd_pkts"));
        assert!(
            rcvd <= sent && sent - rcvd <= 4,
            "sent {sent}, received {rcvd}: {v:#}"
        );
    }
    // The engine's count and the daemon's own, for each process: every packet its QP
    // made crossed the process's ring (the process has one QP; the NIC's totals equal it).
    for (p, q) in [(&s, &sq), (&c, &cq)] {
        assert_eq!(n(p, "sent_pkts"), n(q, "sent_pkts"), "{p:#}");
        assert_eq!(n(&p["nic"], "sent_pkts"), n(q, "sent_pkts"), "{p:#}");
        // Received: what the daemon pushed to the ring, which the engine took in all but
        // the last few (pushed as the process left).
        let (pushed, taken) = (n(p, "rcvd_pkts"), n(&p["nic"], "rcvd_pkts"));
        assert!(
            taken <= pushed && pushed - taken <= 4,
            "pushed {pushed}, taken {taken}: {p:#}"
        );
        assert_eq!(n(q, "rcvd_pkts"), taken, "{p:#}");
        assert!(n(p, "sent_bytes") > n(p, "sent_pkts") * 64, "{p:#}");
        assert!(n(p, "rcvd_bytes") > n(p, "rcvd_pkts") * 64, "{p:#}");
    }
    // The port: both ends on it, so every packet went process to process (hairpin), and
    // the port received (delivered) as many as the processes' rings took or overflowed.
    let k = &v["counters"];
    assert_eq!(
        n(k, "hairpin_pkts"),
        n(&s, "sent_pkts") + n(&c, "sent_pkts"),
        "{v:#}"
    );
    assert_eq!(
        n(k, "rcvd_pkts"),
        n(&s, "rcvd_pkts") + n(&c, "rcvd_pkts") + n(k, "ring_full") + n(k, "no_owner"),
        "{v:#}"
    );

    let (pp_pid, pp_qpn) = (cpid, c["qps"][0]["qpn"].as_u64().unwrap());
    // A perf write --check (64 KiB at an MTU of 1024: at least 64 packets a message): the
    // client's QP sent them all and the server's received them, each packet once bar
    // retransmissions, which both sides count alike.
    let perf = |server: bool| {
        let mut a = strings(&[
            "write",
            "-p",
            "18952",
            "--bind",
            "127.0.34.1",
            "-s",
            "65536",
            "-n",
            "200",
            "-m",
            "1024",
            "--check",
            "--wait",
            "20",
            "--daemon",
        ]);
        a.push(d.socket.display().to_string());
        if !server {
            a.push("127.0.34.1".into());
        }
        spawn("perf", &a)
    };
    let server = perf(true);
    let client = perf(false);
    let (spid, cpid) = (server.id(), client.id());
    assert!(ok("perf client", client).contains("--check: every byte verified"));
    assert!(ok("perf server", server).contains("--check: every byte verified"));
    let v = d.counters();
    let (s, c) = (process(&v, spid), process(&v, cpid));
    let (sq, cq) = (only_qp(&s), only_qp(&c));
    assert!(n(&cq, "sent_pkts") >= 200 * 64, "{c:#}");
    let (sent, rcvd) = (n(&cq, "sent_pkts"), n(&sq, "rcvd_pkts"));
    assert!(rcvd <= sent && sent - rcvd <= 4, "{v:#}");
    assert!(
        n(&sq, "sent_pkts") > 0 && n(&sq, "acks_sent") > 0,
        "ACKs: {s:#}"
    );
    assert_eq!(n(&s, "sent_pkts"), n(&sq, "sent_pkts"), "{s:#}");
    assert_eq!(n(&c, "sent_pkts"), n(&cq, "sent_pkts"), "{c:#}");

    // The text table names the QPs with their counters.
    let out = Command::new(BIN)
        .args(["counters", "--daemon"])
        .arg(&d.socket)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    let line = table
        .lines()
        .find(|l| l.contains(&format!("qp {pp_qpn:#08x}:")))
        .unwrap_or_else(|| panic!("no line for QP {pp_qpn:#x}:\n{table}"));
    assert!(line.contains("rdma_sends 300"), "{line}");
    assert!(table.contains(&format!(" {pp_pid} ")), "{table}");
}

#[test]
fn a_killed_program_keeps_its_last_report_and_bad_reports_are_counted() {
    let d = Daemon::start(None, "udp:127.0.34.2", "counters-kill", &[]);
    // A long ping-pong; the server is killed mid-run (our own child, by PID).
    let server = pingpong(&d, "127.0.34.2", "18951", 1_000_000, true);
    let client = pingpong(&d, "127.0.34.2", "18951", 1_000_000, false);
    let spid = server.id();
    // Its reports arrive while it runs.
    let deadline = Instant::now() + Duration::from_secs(20);
    let before = loop {
        let v = d.counters();
        let qps = v["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == spid)
            .map(|p| p["qps"].clone());
        if let Some(q) = qps.and_then(|q| q.as_array().cloned()) {
            if q.len() == 1 && n(&q[0]["counters"], "rdma_recvs") >= 100 {
                break q[0].clone();
            }
        }
        assert!(Instant::now() < deadline, "no report while running: {v:#}");
        std::thread::sleep(Duration::from_millis(100));
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(spid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(!finish(server, Duration::from_secs(5), "server")
        .status
        .success());
    let _ = finish(client, Duration::from_secs(60), "client");
    let v = d.counters();
    let p = process(&v, spid);
    assert!(p["left"].is_string(), "{p:#}");
    let after = only_qp(&p);
    assert!(
        n(&after, "rdma_recvs") >= n(&before["counters"], "rdma_recvs"),
        "{p:#}"
    );
    assert!(n(&after, "sent_pkts") > 0, "{p:#}");

    // A hand-driven process sends reports of every wrong kind: each is counted, it stays
    // attached, and its one good report is taken.
    let h = attach::attach(&d.socket);
    let (lo, _) = roce_emu::daemon::lease::range(h.block);
    let other = roce_emu::daemon::lease::range(h.block.wrapping_add(1).max(1)).0;
    let reports = [
        serde_json::json!("nonsense"),
        serde_json::json!({ "qps": [{ "qpn": other + 0x11, "counters": { "sent_pkts": 1 } }] }),
        serde_json::json!({ "nic": { "sent_pkts": "many" } }),
        serde_json::json!({ "qps": [{ "qpn": lo + 0x11, "counters": { "sent_pkts": 5 } }] }),
    ];
    for r in &reports {
        let m = ToDaemon::QpCounters { report: r.clone() };
        control::send(h.sock.as_fd(), &m, &[]).unwrap();
    }
    // A message that is not even a report ends nothing either: it is a bad control
    // message of an attached process, which the daemon already counts (and detaches):
    // not sent here. The reports are served in order.
    let deadline = Instant::now() + Duration::from_secs(5);
    let p = loop {
        let v = d.counters();
        let p = process(&v, std::process::id());
        if n(&p, "reports") == reports.len() as u64 {
            break p;
        }
        assert!(Instant::now() < deadline, "reports not served: {v:#}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(n(&p, "report_errors"), 3, "{p:#}");
    assert!(p["left"].is_null(), "still attached: {p:#}");
    assert_eq!(p["qps"][0]["qpn"], lo + 0x11, "{p:#}");
    assert_eq!(p["qps"][0]["counters"]["sent_pkts"], 5, "{p:#}");
    assert_eq!(p["qps"].as_array().unwrap().len(), 1, "{p:#}");
}
