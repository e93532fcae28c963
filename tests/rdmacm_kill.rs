//! A program killed with SIGKILL in the middle of an rdma_cm connection, with zero
//! configuration (tests/common/zero.rs: `roce-emu run` in a namespace of the test's own,
//! the on-demand daemon of udp:127.0.0.1): its CM connection to the daemon ends, the
//! daemon's CM calls `owner_gone` (DREQ its connections, REJ its pending connects, drop its
//! ids), so
//! - its peer gets the event the kernel would give it (DISCONNECTED mid-transfer,
//!   REJECTED mid-connect) and the surviving rping ends, saying so;
//! - the daemon's CM holds none of the killed program's ids (`roce-emu counters --json`:
//!   `cm_clients.ids`, `cm_clients.gone`);
//! - the next connection on the same port works.

mod common;

use common::dropin;
use common::zero::Zero;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// rping's own process: `ip netns exec` and `roce-emu run` both exec, so the child's PID
/// is the program's.
fn signal(c: &Child, s: Signal) {
    kill(Pid::from_raw(c.id() as i32), s).unwrap();
}

/// Waits (bounded) until `f` holds for the daemon's counters; the last counters.
fn wait_counters(z: &Zero, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let c = z.counters();
        if f(&c) {
            return c;
        }
        assert!(Instant::now() < deadline, "{what}: {c}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn n(v: &Value, group: &str, key: &str) -> u64 {
    v[group][key].as_u64().unwrap_or(0)
}

/// rping server and client with 3 verified pings on `port` succeed (the port is free
/// again after a killed program).
fn next_connection_works(z: &Zero, port: &str) {
    let s = z
        .run(
            "rping",
            &["-s", "-a", "127.0.0.1", "-p", port, "-v", "-C", "3"],
        )
        .spawn()
        .unwrap();
    if !z.wait_ids(1, Duration::from_secs(20)) {
        let _ = kill(Pid::from_raw(s.id() as i32), Signal::SIGKILL);
        let out = dropin::finish(s, Duration::from_secs(5), "next rping server");
        panic!(
            "the next server never listened: {}\n{} {:?}",
            dropin::show(&out),
            z.counters(),
            z.socket()
        );
    }
    let c = z
        .run(
            "rping",
            &["-c", "-a", "127.0.0.1", "-p", port, "-v", "-C", "3"],
        )
        .spawn()
        .unwrap();
    let limit = Duration::from_secs(60);
    let c = dropin::finish(c, limit, "next rping client");
    let s = dropin::finish(s, limit, "next rping server");
    assert!(
        c.status.success() && s.status.success(),
        "the next connection on port {port}\n--- server: {}\n--- client: {}",
        dropin::show(&s),
        dropin::show(&c)
    );
    assert!(dropin::stdout(&c).contains("ping data: rdma-ping-2: "));
    println!("next connection on port {port}: 3 verified pings");
}

/// Mid-transfer: an endless `rping -v` pair; the client is killed while pinging. The
/// server gets DISCONNECTED (the daemon sent DREQ for the dead client) and ends.
#[test]
fn client_killed_mid_transfer() {
    let Some(z) = Zero::new("rdmacm_kill_transfer", "rdmakill1") else {
        return;
    };
    let s = z
        .run("rping", &["-s", "-a", "127.0.0.1", "-p", "7481", "-v"])
        // A line per ping, endless: nobody reads it while it runs (a full pipe would
        // stop rping in printf).
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(z.wait_ids(1, Duration::from_secs(20)), "no listener");
    let c = z
        .run("rping", &["-c", "-a", "127.0.0.1", "-p", "7481", "-v"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Connected (RTU in) and pinging a while.
    let up = wait_counters(&z, "never connected", |v| {
        n(&v["cm"], "mads_in", "rtu") >= 1
    });
    println!("connected: cm_clients {}", up["cm_clients"]);
    std::thread::sleep(Duration::from_secs(1));
    signal(&c, Signal::SIGKILL);
    let c = dropin::finish(c, Duration::from_secs(5), "killed client");
    assert!(!c.status.success());
    let s = dropin::finish(s, Duration::from_secs(30), "rping server");
    let serr = String::from_utf8_lossy(&s.stderr).into_owned();
    println!("surviving server: {}, stderr: {serr}", s.status);
    assert!(serr.contains("DISCONNECT EVENT"), "{}", dropin::show(&s));
    let after = wait_counters(&z, "the killed client's ids stay", |v| {
        n(v, "cm_clients", "ids") == 0 && n(v, "cm_clients", "connected") == 0
    });
    println!(
        "after: cm_clients {} cm mads_out {}",
        after["cm_clients"], after["cm"]["mads_out"]
    );
    assert!(n(&after["cm"], "mads_out", "dreq") >= 1, "{after}");
    assert!(n(&after, "cm_clients", "gone") >= 2, "{after}");
    next_connection_works(&z, "7481");
}

/// Mid-connect: the server is stopped (SIGSTOP) once it listens, so the client's REQ
/// waits for an accept that never comes; the server is then killed. The daemon REJects
/// the pending connect for it: the client gets REJECTED and ends.
#[test]
fn server_killed_mid_connect() {
    let Some(z) = Zero::new("rdmacm_kill_connect", "rdmakill2") else {
        return;
    };
    let s = z
        .run(
            "rping",
            &["-s", "-a", "127.0.0.1", "-p", "7482", "-v", "-C", "3"],
        )
        .spawn()
        .unwrap();
    assert!(z.wait_ids(1, Duration::from_secs(20)), "no listener");
    signal(&s, Signal::SIGSTOP);
    let c = z
        .run(
            "rping",
            &["-c", "-a", "127.0.0.1", "-p", "7482", "-v", "-C", "3"],
        )
        .spawn()
        .unwrap();
    // The REQ reached the stopped server's daemon side.
    let mid = wait_counters(&z, "no REQ", |v| n(&v["cm"], "mads_in", "req") >= 1);
    println!("mid-connect: cm_clients {}", mid["cm_clients"]);
    std::thread::sleep(Duration::from_millis(500));
    signal(&s, Signal::SIGKILL);
    let s = dropin::finish(s, Duration::from_secs(5), "killed server");
    assert!(!s.status.success());
    let c = dropin::finish(c, Duration::from_secs(30), "rping client");
    let cerr = String::from_utf8_lossy(&c.stderr).into_owned();
    println!("surviving client: {}\nstderr: {cerr}", c.status);
    assert!(
        cerr.contains("RDMA_CM_EVENT_REJECTED") || cerr.contains("RDMA_CM_EVENT_UNREACHABLE"),
        "{}",
        dropin::show(&c)
    );
    let after = wait_counters(&z, "the killed server's ids stay", |v| {
        n(v, "cm_clients", "ids") == 0 && n(v, "cm_clients", "connected") == 0
    });
    println!(
        "after: cm_clients {} cm mads_out {}",
        after["cm_clients"], after["cm"]["mads_out"]
    );
    assert!(n(&after["cm"], "mads_out", "rej") >= 1, "{after}");
    next_connection_works(&z, "7482");
}
