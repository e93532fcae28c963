//! Finding the daemon without naming its socket: `roce-emu counters` and `fault` use the
//! one daemon at the default path ($XDG_RUNTIME_DIR/roce-emu/), list them when there are
//! several, say how to start one when there is none; text `counters` shows every group
//! `--json` has, `--watch` stamps each refresh; and a NIC on an address a daemon holds
//! attaches to it.

mod common;

use common::daemon::{wait_for_socket, BIN};
use common::proc::text;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// A runtime folder of this test's own (the default socket folder is under it).
fn runtime(tag: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("daemon-find-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cmd(xdg: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env("XDG_RUNTIME_DIR", xdg);
    c
}

/// A daemon on UDP `ip` at its default socket; stopped (SIGTERM, by PID) when dropped.
struct D(Child, PathBuf);

impl D {
    fn start(xdg: &Path, ip: &str) -> D {
        let child = cmd(xdg)
            .args(["daemon", "--port", &format!("udp:{ip}")])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let socket = xdg.join("roce-emu").join(format!("udp-{ip}.sock"));
        wait_for_socket(&socket, ip);
        D(child, socket)
    }
}

impl Drop for D {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        for _ in 0..250 {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(xdg: &Path, args: &[&str]) -> Output {
    let c = cmd(xdg)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::proc::finish(c, Duration::from_secs(30), args[0])
}

#[test]
fn counters_and_fault_find_the_daemon() {
    let xdg = runtime("one");
    // None running: say how to start one.
    let out = run(&xdg, &["counters"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no roce-emu daemon answers in"), "{err}");
    assert!(err.contains("roce-emu daemon --port udp:ADDR"), "{err}");

    // One: used.
    let a = D::start(&xdg, "127.0.41.1");
    let out = run(&xdg, &["counters"]);
    let (t, err) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(t.starts_with("port udp 127.0.41.1 (127.0.41.1)"), "{t}");
    for g in [
        "counters ",
        "port_stats ",
        "l2 ",
        "leases ",
        "faults ",
        "capture ",
    ] {
        assert!(t.contains(&format!("\n  {g}")), "no {g}in\n{t}");
    }
    assert!(t.contains("(all others 0)") || t.contains("(all 0)"), "{t}");
    assert!(t.contains("processes: 0"), "{t}");
    let out = run(&xdg, &["fault", "drop", "1%", "in"]);
    let (t, err) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(t.contains("drop 1% in"), "{t}");
    // The new spelling and the old one name the same daemon.
    let sock = a.1.to_str().unwrap();
    for opt in ["--daemon", "--socket"] {
        let out = run(&xdg, &["counters", "--json", opt, sock]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["faults"]["rules"].as_array().unwrap().len(), 1);
    }

    // --watch: a time stamp per refresh, rates from the second on.
    let mut w = cmd(&xdg)
        .args(["counters", "--watch", "0.2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(900));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(w.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = w.wait();
    let mut s = String::new();
    std::io::Read::read_to_string(w.stdout.as_mut().unwrap(), &mut s).unwrap();
    let stamps: Vec<&str> = s.lines().filter(|l| l.starts_with("--- ")).collect();
    assert!(stamps.len() >= 2, "{s}");
    assert!(
        stamps[0].ends_with(" UTC ---") && stamps[0].len() == 31,
        "{s}"
    );

    // Two: listed, the user chooses.
    let b = D::start(&xdg, "127.0.41.2");
    let out = run(&xdg, &["counters"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("2 roce-emu daemons are running"), "{err}");
    for d in [&a, &b] {
        assert!(
            err.contains(&format!("--daemon {}", d.1.display())),
            "{err}"
        );
    }
    assert!(err.contains("port udp 127.0.41.1") && err.contains("port udp 127.0.41.2"));
    drop(b);
}

/// A tool on an address whose daemon runs at the default path attaches to it (the
/// daemon on demand, `daemon::demand`, finds it there) instead of failing to bind
/// 127.0.41.3:4791: the NIC opens, and the daemon counts the process.
#[test]
fn a_tool_attaches_to_the_daemon_at_the_default_path() {
    let xdg = runtime("held");
    let _d = D::start(&xdg, "127.0.41.3");
    let out = run(
        &xdg,
        &[
            "perf",
            "write",
            "--bind",
            "127.0.41.3",
            "-p",
            "18643",
            "--wait",
            "1",
        ],
    );
    let (o, err) = text(&out);
    // It opened and waited for its client, which never comes.
    assert!(!out.status.success(), "{o}{err}");
    assert!(err.contains("no client connected"), "{err}");
    let out = run(&xdg, &["counters", "--json"]);
    let (o, err) = text(&out);
    let v: serde_json::Value = serde_json::from_str(&o).unwrap_or_else(|e| panic!("{e}: {o}{err}"));
    assert_eq!(v["counters"]["attached"], 1, "{o}");
}
