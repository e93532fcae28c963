//! `roce-emu counters --watch SECS --count N`: rates per QP and for the port beside the
//! totals, one stamped block per reading when piped; non-zero while a ping-pong runs
//! through a daemon the test starts, zero once it stopped; Ctrl-C ends a watch cleanly.
//! Address 127.0.24.1, TCP port 18990.

mod common;

use common::daemon::{Daemon, BIN};
use common::proc::{finish, spawn, strings, text};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const IP: &str = "127.0.24.1";

fn pingpong(d: &Daemon, server: bool) -> Child {
    let mut a = strings(&[
        "-p",
        "18990",
        "--bind",
        IP,
        "-n",
        "100000000",
        "-s",
        "4096",
        "-m",
        "1024",
        "--wait",
        "20",
        "--daemon",
    ]);
    a.push(d.socket.display().to_string());
    if !server {
        a.push(IP.to_string());
    }
    spawn("pingpong", &a)
}

/// `counters --watch SECS --count N`, piped: its blocks (each the lines after a `--- `
/// stamp).
fn watch(d: &Daemon, secs: &str, count: u32) -> Vec<Vec<String>> {
    let c = Command::new(BIN)
        .args(["counters", "--daemon"])
        .arg(&d.socket)
        .args(["--watch", secs, "--count", &count.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = finish(c, Duration::from_secs(30), "counters --watch");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}\n{out}");
    print!("{out}");
    let mut blocks: Vec<Vec<String>> = Vec::new();
    for l in out.lines() {
        if l.starts_with("--- ") {
            assert!(l.ends_with(" UTC ---"), "{l}");
            blocks.push(Vec::new());
        } else if let Some(b) = blocks.last_mut() {
            if !l.is_empty() {
                b.push(l.to_string());
            }
        }
    }
    assert_eq!(blocks.len(), count as usize, "{out}");
    blocks
}

/// A row's cells: rates (pkts/s, MB/s, retry/s, NAK/s; None for "-") and totals.
#[derive(Debug)]
struct Cells {
    rates: [Option<f64>; 4],
    totals: [f64; 4],
}

fn cells(line: &str) -> Cells {
    let w: Vec<&str> = line.split_whitespace().collect();
    let nums = &w[w.len() - 8..];
    let rate = |s: &str| (s != "-").then(|| s.parse::<f64>().unwrap());
    Cells {
        rates: [rate(nums[0]), rate(nums[1]), rate(nums[2]), rate(nums[3])],
        totals: [0, 1, 2, 3].map(|i| nums[4 + i].parse::<f64>().unwrap()),
    }
}

fn port_row(b: &[String]) -> Cells {
    assert!(b[0].starts_with("daemon port udp 127.0.24."), "{b:#?}");
    let l = b
        .iter()
        .find(|l| l.starts_with("port "))
        .unwrap_or_else(|| panic!("no port row in {b:#?}"));
    cells(l)
}

fn qp_rows(b: &[String]) -> Vec<Cells> {
    b.iter()
        .filter(|l| l.trim_start().starts_with("qp 0x"))
        .map(|l| cells(l))
        .collect()
}

#[test]
fn watch_shows_rates_while_traffic_runs_and_zero_after() {
    let d = Daemon::start(None, &format!("udp:{IP}"), "watch", &[]);
    let server = pingpong(&d, true);
    let client = pingpong(&d, false);
    let pids = [server.id(), client.id()];
    // Both publish their QPs' counters while they run.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = d.counters();
        let moving = v["processes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| pids.contains(&(p["pid"].as_u64().unwrap() as u32)))
            .filter(|p| p["qps"][0]["counters"]["rdma_recvs"].as_u64() >= Some(50))
            .count();
        if moving == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "no traffic: {v:#}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // The port moves between any two readings: rates from the second block on.
    let blocks = watch(&d, "0.2", 3);
    assert_eq!(
        port_row(&blocks[0]).rates,
        [None; 4],
        "no rate from one reading"
    );
    for b in &blocks[1..] {
        let p = port_row(b);
        assert!(p.rates[0] > Some(0.0), "packets/s: {b:#?}");
        assert!(p.rates[1] > Some(0.0), "MB/s: {b:#?}");
        assert!(p.totals[0] > 0.0 && p.totals[1] > 0.0, "{b:#?}");
        assert_eq!(qp_rows(b).len(), 2, "both QPs listed: {b:#?}");
    }
    // The QPs' counters come in their processes' reports, every 500 ms: a QP's rate is
    // there once two reports moved it, within about 1.1 s.
    let blocks = watch(&d, "0.3", 6);
    for who in pids {
        let rows: Vec<Cells> = blocks
            .iter()
            .filter_map(|b| {
                let l = b.iter().find(|l| l.contains(&format!(" pid {who} ")))?;
                Some(cells(l))
            })
            .collect();
        assert_eq!(rows.len(), blocks.len(), "pid {who} listed: {blocks:#?}");
        assert!(
            rows.iter()
                .any(|q| q.rates[0] > Some(0.0) && q.rates[1] > Some(0.0)),
            "pid {who}'s QP: no rate in {blocks:#?}"
        );
        assert!(rows.iter().all(|q| q.totals[0] > 0.0), "{blocks:#?}");
    }

    // Traffic stops (our children, by PID).
    for c in [server, client] {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = finish(c, Duration::from_secs(5), "pingpong");
    }
    let blocks = watch(&d, "0.2", 3);
    for b in &blocks[1..] {
        let p = port_row(b);
        assert_eq!(p.rates, [Some(0.0); 4], "nothing moves: {b:#?}");
        assert!(p.totals[0] > 0.0, "the totals stay: {b:#?}");
        // The departed processes' QPs no longer move, so they are not listed.
        assert!(qp_rows(b).is_empty(), "{b:#?}");
    }
}

#[test]
fn ctrl_c_ends_a_watch_after_a_whole_block_and_count_needs_watch() {
    let d = Daemon::start(None, "udp:127.0.24.2", "watch-int", &[]);
    let c = Command::new(BIN)
        .args(["counters", "--daemon"])
        .arg(&d.socket)
        .args(["--watch", "0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let o = finish(c, Duration::from_secs(5), "counters --watch");
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}\n{out}");
    let stamps = out.lines().filter(|l| l.starts_with("--- ")).count();
    assert!(stamps >= 2, "{out}");
    // The last block is whole: it ends with its port row and the blank line after.
    assert!(out.ends_with("\n\n"), "{out:?}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("port ")).count(),
        stamps
    );

    let o = Command::new(BIN)
        .args(["counters", "--daemon"])
        .arg(&d.socket)
        .args(["--count", "2"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "--count without --watch");
}
