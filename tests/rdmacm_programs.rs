//! Debian 12's unmodified rdma_cm programs on the drop-in librdmacm.so.1, through
//! `roce-emu run`, attached to a `roce-emu daemon --port udp:127.0.62.X` whose
//! connection manager (QP1, REQ/REP/RTU, DREQ/DREP, SIDR) connects them: server and
//! client are two processes on the daemon's one address (the hairpin).
//!
//! - rping -v -C 10 (async API, rdma_establish-free path, RDMA READ/WRITE);
//! - ucmatose -c 4 -m (4 connections, rdma_migrate_id to a new channel);
//! - rdma_server / rdma_client (the synchronous API: rdma_getaddrinfo, rdma_create_ep,
//!   rdma_get_request);
//! - udaddy (UD over SIDR_REQ/SIDR_REP);
//! - libfabric 1.17 fi_pingpong -p verbs -e msg;
//! - qperf -cm1 rc_bw rc_lat rc_rdma_write_bw rc_rdma_read_bw;
//! - a listener on INADDR_ANY through two devices.

mod common;

use common::daemon::{Daemon, BIN};
use common::dropin;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `roce-emu run --devices rxe0=daemon:SOCK -- PROGRAM ARGS` with Debian's libraries on
/// the path (roce-emu run puts ours first).
fn run(env: &dropin::Env, d: &Daemon, program: &str, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("run")
        .arg("--devices")
        .arg(format!("rxe0=daemon:{}", d.socket.display()))
        .arg("--")
        .arg(env.bin(program))
        .args(args)
        .env("LD_LIBRARY_PATH", &env.tree_libs)
        .env_remove("ROCE_EMU_DEVICES")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Waits (bounded) until the daemon's connection manager holds `n` ids (the server
/// bound and listening), and a little more for its listen to follow its bind.
fn wait_ids(d: &Daemon, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let c = d.counters();
        if c["cm_clients"]["ids"].as_u64().unwrap_or(0) >= n {
            std::thread::sleep(Duration::from_millis(300));
            return;
        }
        assert!(Instant::now() < deadline, "the server never listened: {c}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Server, then client once the server listens; both must exit 0.
fn pair(
    env: &dropin::Env,
    d: &Daemon,
    program: (&str, &str),
    server: &[&str],
    client: &[&str],
) -> (Output, Output) {
    let s = run(env, d, program.0, server).spawn().unwrap();
    wait_ids(d, 1);
    let c = run(env, d, program.1, client).spawn().unwrap();
    let limit = Duration::from_secs(60);
    let cout = dropin::finish(c, limit, program.1);
    let sout = dropin::finish(s, limit, program.0);
    assert!(
        cout.status.success() && sout.status.success(),
        "{program:?}\n--- server: {}\n--- client: {}\n--- daemon: {}",
        dropin::show(&sout),
        dropin::show(&cout),
        d.counters()
    );
    (sout, cout)
}

/// The drop-in and a daemon of its own on `ip` (each test its own loopback address: one
/// UDP port 4791 per address, and the tests run in parallel).
fn setup(test: &str, ip: &str) -> Option<(&'static dropin::Env, Daemon)> {
    let env = dropin::setup(test)?;
    let d = Daemon::start(None, &format!("udp:{ip}"), test, &["--spin-us", "0"]);
    Some((env, d))
}

#[test]
fn rping_ten_verified_pings() {
    let Some((env, d)) = setup("rdmacm_rping", "127.0.62.21") else {
        return;
    };
    let (s, c) = pair(
        env,
        &d,
        ("rping", "rping"),
        &["-s", "-a", "127.0.62.21", "-p", "7471", "-v", "-C", "10"],
        &["-c", "-a", "127.0.62.21", "-p", "7471", "-v", "-C", "10"],
    );
    let (sout, cout) = (dropin::stdout(&s), dropin::stdout(&c));
    for i in 0..10 {
        assert!(
            cout.contains(&format!("ping data: rdma-ping-{i}: ")),
            "{cout}"
        );
        assert!(
            sout.contains(&format!("server ping data: rdma-ping-{i}: ")),
            "{sout}"
        );
    }
    let cm = &d.counters()["cm"];
    assert!(cm["mads_in"]["rtu"].as_u64().unwrap() >= 1, "{cm}");
    assert!(cm["mads_in"]["dreq"].as_u64().unwrap() >= 1, "{cm}");
}

#[test]
fn ucmatose_four_connections_migrated() {
    let Some((env, d)) = setup("rdmacm_ucmatose", "127.0.62.22") else {
        return;
    };
    let (s, c) = pair(
        env,
        &d,
        ("ucmatose", "ucmatose"),
        &["-b", "127.0.62.22", "-p", "7472", "-c", "4", "-m"],
        &["-s", "127.0.62.22", "-p", "7472", "-c", "4", "-m"],
    );
    let (sout, cout) = (dropin::stdout(&s), dropin::stdout(&c));
    for out in [&sout, &cout] {
        assert!(out.contains("data transfers complete"), "{out}");
        assert!(out.contains("migrating to new event channel"), "{out}");
        assert!(out.contains("return status 0"), "{out}");
    }
    assert!(sout.contains("disconnected"), "{sout}");
}

#[test]
fn rdma_server_and_rdma_client_synchronous_api() {
    let Some((env, d)) = setup("rdmacm_sync", "127.0.62.23") else {
        return;
    };
    let (s, c) = pair(
        env,
        &d,
        ("rdma_server", "rdma_client"),
        &["-s", "127.0.62.23", "-p", "7473"],
        &["-s", "127.0.62.23", "-p", "7473"],
    );
    assert!(
        dropin::stdout(&s).contains("rdma_server: end 0"),
        "{}",
        dropin::show(&s)
    );
    assert!(
        dropin::stdout(&c).contains("rdma_client: end 0"),
        "{}",
        dropin::show(&c)
    );
}

#[test]
fn udaddy_ud_over_sidr() {
    let Some((env, d)) = setup("rdmacm_udaddy", "127.0.62.24") else {
        return;
    };
    // udaddy's port is fixed (7174); -p is its port space.
    let (s, c) = pair(
        env,
        &d,
        ("udaddy", "udaddy"),
        &["-b", "127.0.62.24"],
        &["-s", "127.0.62.24"],
    );
    for out in [dropin::stdout(&s), dropin::stdout(&c)] {
        assert!(out.contains("data transfers complete"), "{out}");
        assert!(out.contains("return status 0"), "{out}");
    }
    let cm = &d.counters()["cm"];
    assert!(cm["mads_in"]["sidr_rep"].as_u64().unwrap() >= 1, "{cm}");
}

#[test]
fn a_wildcard_listener_serves_every_device() {
    let Some(env) = dropin::setup("rdmacm_wildcard") else {
        return;
    };
    let a = Daemon::start(
        None,
        "udp:127.0.62.27",
        "rdmacm_wild_a",
        &["--spin-us", "0"],
    );
    let b = Daemon::start(
        None,
        "udp:127.0.62.28",
        "rdmacm_wild_b",
        &["--spin-us", "0"],
    );
    let devices = format!(
        "rxe0=daemon:{},rxe1=daemon:{}",
        a.socket.display(),
        b.socket.display()
    );
    let cmd = |args: &[&str]| {
        // Both devices (not the one `run` names).
        let mut c = Command::new(BIN);
        c.arg("run")
            .arg("--devices")
            .arg(&devices)
            .arg("--")
            .arg(env.bin("rping"))
            .args(args)
            .env("LD_LIBRARY_PATH", &env.tree_libs)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let mut server = cmd(&["-s", "-P", "-p", "7474", "-v", "-C", "3"])
        .spawn()
        .unwrap();
    wait_ids(&a, 1);
    wait_ids(&b, 1);
    for ip in ["127.0.62.27", "127.0.62.28"] {
        let c = cmd(&["-c", "-a", ip, "-p", "7474", "-v", "-C", "3"])
            .spawn()
            .unwrap();
        let out = dropin::finish(c, Duration::from_secs(60), "rping client");
        assert!(
            out.status.success(),
            "client to {ip}: {}",
            dropin::show(&out)
        );
        assert!(
            dropin::stdout(&out).contains("ping data: rdma-ping-2: "),
            "{}",
            dropin::show(&out)
        );
    }
    // Each connection went through its own device's connection manager.
    for d in [&a, &b] {
        let cm = &d.counters()["cm"];
        assert!(cm["mads_in"]["rtu"].as_u64().unwrap() >= 1, "{cm}");
    }
    // The persistent server never exits by itself: ours, by PID (its output, a pipe
    // rping buffers, goes with it).
    let _ = server.kill();
    let _ = server.wait();
}

/// libfabric 1.17's verbs provider (FI_EP_MSG: rdma_cm, with the server bound to
/// 127.0.0.1, which the kernel binds to the first device and so does the drop-in).
#[test]
fn libfabric_fi_pingpong_verbs_msg() {
    let Some((env, d)) = setup("rdmacm_libfabric", "127.0.62.29") else {
        return;
    };
    if !env.bin("fi_pingpong").exists() {
        common::netns::skip("rdmacm_libfabric", "no fi_pingpong (libfabric-bin)");
        return;
    }
    let args = ["-p", "verbs", "-e", "msg", "-I", "100", "-S", "1024"];
    let s = run(
        env,
        &d,
        "fi_pingpong",
        &[&args[..], &["-B", "47611"]].concat(),
    )
    .spawn()
    .unwrap();
    // Its control connection is TCP: the server listens there once it has its endpoint.
    assert!(
        dropin::wait_listening(47611, Duration::from_secs(20)),
        "fi_pingpong server never listened"
    );
    let c = run(
        env,
        &d,
        "fi_pingpong",
        &[&args[..], &["-P", "47611", "127.0.62.29"]].concat(),
    )
    .spawn()
    .unwrap();
    let limit = Duration::from_secs(60);
    let cout = dropin::finish(c, limit, "fi_pingpong client");
    let sout = dropin::finish(s, limit, "fi_pingpong server");
    assert!(
        cout.status.success() && sout.status.success(),
        "--- server: {}\n--- client: {}",
        dropin::show(&sout),
        dropin::show(&cout)
    );
    for out in [dropin::stdout(&sout), dropin::stdout(&cout)] {
        assert!(out.contains("1k      100     =100"), "{out}");
    }
}

/// Zero configuration: no ROCE_EMU_DEVICES, in a network namespace of its own (the
/// machine is `lo` alone, the device rxe_lo on 127.0.0.1): the first rdma_cm call starts
/// the on-demand daemon of udp:127.0.0.1 (`daemon::demand`), whose connection manager
/// connects rping's server and client.
#[test]
fn rping_with_zero_set_up() {
    if !nix::unistd::geteuid().is_root() {
        common::netns::skip("rdmacm_zero", "needs root for a network namespace");
        return;
    }
    let Some(env) = dropin::setup("rdmacm_zero") else {
        return;
    };
    let ns = common::netns::Netns::new("rdmacm0");
    let rping = |args: &[&str]| {
        let mut c = ns.cmd(env.bin("rping").to_str().unwrap());
        c.args(args)
            .env("LD_LIBRARY_PATH", env.library_path())
            .env_remove("ROCE_EMU_DEVICES")
            .env("ROCE_EMU_BIN", BIN)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let server = rping(&["-s", "-a", "127.0.0.1", "-p", "7475", "-v", "-C", "3"])
        .spawn()
        .unwrap();
    // The server starts the daemon and listens; until then a client is rejected (no
    // listener) or finds no daemon: try again, a bounded number of times.
    let mut last = None;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(500));
        let c = rping(&["-c", "-a", "127.0.0.1", "-p", "7475", "-v", "-C", "3"])
            .spawn()
            .unwrap();
        let out = dropin::finish(c, Duration::from_secs(60), "rping client");
        if out.status.success() {
            last = Some(out);
            break;
        }
        last = Some(out);
    }
    let c = last.unwrap();
    let s = dropin::finish(server, Duration::from_secs(60), "rping server");
    assert!(
        c.status.success() && s.status.success(),
        "--- server: {}\n--- client: {}",
        dropin::show(&s),
        dropin::show(&c)
    );
    assert!(
        dropin::stdout(&c).contains("ping data: rdma-ping-2: "),
        "{}",
        dropin::show(&c)
    );
}

/// qperf 0.4.11 with `-cm1`: its RC tests (SEND, RDMA WRITE, RDMA READ) connect through
/// rdma_cm.
#[test]
fn qperf_rc_bw_and_lat_over_rdma_cm() {
    let Some((env, d)) = setup("rdmacm_qperf", "127.0.62.30") else {
        return;
    };
    // The server runs until killed (ours, by PID); its control port is TCP.
    let mut server = run(env, &d, "qperf", &["-lp", "19771"])
        .env("ROCE_EMU_LOG", "roce_emu_rdmacm=debug")
        .spawn()
        .unwrap();
    assert!(
        dropin::wait_listening(19771, Duration::from_secs(20)),
        "qperf server never listened"
    );
    let c = run(
        env,
        &d,
        "qperf",
        &[
            "-lp",
            "19771",
            "-cm1",
            "-t",
            "1",
            "127.0.62.30",
            "rc_bw",
            "rc_lat",
            "rc_rdma_write_bw",
            "rc_rdma_read_bw",
        ],
    )
    .spawn()
    .unwrap();
    let out = dropin::finish(c, Duration::from_secs(60), "qperf client");
    let _ = server.kill();
    let sout = server.wait_with_output().unwrap();
    let text = dropin::stdout(&out);
    assert!(
        out.status.success(),
        "{}\n--- server: {}\n--- daemon: {}",
        dropin::show(&out),
        dropin::show(&sout),
        d.counters()
    );
    assert!(text.contains("rc_bw:") && text.contains("MB/sec"), "{text}");
    assert!(
        text.contains("rc_lat:") && text.contains("latency"),
        "{text}"
    );
    for t in ["rc_rdma_write_bw:", "rc_rdma_read_bw:"] {
        let rest = &text[text.find(t).unwrap_or_else(|| panic!("no {t} in {text}"))..];
        assert!(rest.contains("MB/sec") || rest.contains("GB/sec"), "{text}");
    }
    println!("{text}");
    // One rdma_cm connection per test.
    let cm = &d.counters()["cm"];
    assert!(cm["mads_in"]["rtu"].as_u64().unwrap() >= 4, "{cm}");
}
