//! Two daemons on two TAP interfaces, bridged in a namespace of the test's own (root
//! only): each has its own MAC and addresses (10.96.0.2 and .3, fd00:96::2 and ::3); the
//! namespace's bridge holds 10.96.0.1 and fd00:96::1. `ping` and `ping -6` reach both
//! daemons (ARP, ND and echo answered by their L2), and each daemon's counters and
//! control socket answer. Daemons run as `roce-emu daemon` processes, stopped by SIGTERM:
//! their TAPs and sockets are gone afterwards.

mod common;

use common::daemon::{finish_ok_within, tool_in as d_tool, Daemon};
use common::netns::{skip, Netns};
use std::process::Command;

fn link_exists(ns: &Netns, name: &str) -> bool {
    Command::new("ip")
        .args(["-n", &ns.0, "link", "show", name])
        .output()
        .unwrap()
        .status
        .success()
}

fn ping(ns: &Netns, args: &[&str]) {
    let out = ns
        .cmd("ping")
        .args(["-c", "3", "-i", "0.2", "-W", "2"])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("3 received"),
        "ping {args:?}: {text}"
    );
}

#[test]
fn two_tap_daemons_on_a_bridge_answer_ping_and_ping6() {
    if !nix::unistd::geteuid().is_root() {
        skip(
            "daemon_tap",
            "needs root for a namespace, TAPs and a bridge",
        );
        return;
    }
    if Command::new("ping").arg("-V").output().is_err() {
        skip("daemon_tap", "needs ping (iputils-ping)");
        return;
    }
    let ns = Netns::new("dtap");
    ns.ip(&["link", "add", "br96", "type", "bridge"]);
    ns.ip(&["addr", "add", "10.96.0.1/24", "dev", "br96"]);
    ns.ip(&["addr", "add", "fd00:96::1/64", "dev", "br96", "nodad"]);
    ns.ip(&["link", "set", "br96", "up"]);
    let a = Daemon::start(Some(&ns), "tap:rdta,10.96.0.2/24,fd00:96::2/64", "dta", &[]);
    let b = Daemon::start(Some(&ns), "tap:rdtb,10.96.0.3/24,fd00:96::3/64", "dtb", &[]);
    for t in ["rdta", "rdtb"] {
        ns.ip(&["link", "set", t, "master", "br96"]);
    }
    ping(&ns, &["10.96.0.2"]);
    ping(&ns, &["10.96.0.3"]);
    ping(&ns, &["-6", "fd00:96::2"]);
    ping(&ns, &["-6", "fd00:96::3"]);

    let v = a.counters();
    assert_eq!(v["port"]["kind"], "tap", "{v}");
    assert_eq!(v["port"]["name"], "rdta", "{v}");

    let sock_a = a.socket.clone();
    drop(a);
    drop(b);
    assert!(
        !link_exists(&ns, "rdta") && !link_exists(&ns, "rdtb"),
        "a TAP outlived its daemon"
    );
    assert!(!sock_a.exists(), "the socket outlived its daemon");
}

#[test]
fn programs_on_two_tap_daemons_run_pingpong_and_perf_between_them() {
    if !nix::unistd::geteuid().is_root() {
        skip(
            "daemon_tap_tools",
            "needs root for a namespace, TAPs and a bridge",
        );
        return;
    }
    let ns = Netns::new("dtapt");
    ns.ip(&["link", "add", "br95", "type", "bridge"]);
    ns.ip(&["addr", "add", "10.95.0.1/24", "dev", "br95"]);
    ns.ip(&["link", "set", "br95", "up"]);
    let a = Daemon::start(Some(&ns), "tap:rdua,10.95.0.2/24", "dua", &[]);
    let b = Daemon::start(Some(&ns), "tap:rdub,10.95.0.3/24", "dub", &[]);
    for t in ["rdua", "rdub"] {
        ns.ip(&["link", "set", t, "master", "br95"]);
    }
    // The TCP exchanges run on the namespace's own address; the RoCE traffic goes from
    // daemon to daemon over the bridge (each NIC's GID is its daemon's address).
    let s = d_tool(
        &ns,
        &a,
        &[
            "pingpong",
            "--bind",
            "10.95.0.1",
            "-p",
            "18720",
            "-n",
            "300",
            "-s",
            "4096",
            "--wait",
            "20",
        ],
    );
    let c = d_tool(
        &ns,
        &b,
        &[
            "pingpong",
            "--bind",
            "10.95.0.1",
            "-p",
            "18720",
            "-n",
            "300",
            "-s",
            "4096",
            "--wait",
            "10",
            "10.95.0.1",
        ],
    );
    let out = finish_ok_within(90, c, "pingpong client");
    assert!(
        out.contains("300 iters in") && out.contains("::ffff:10.95.0.3"),
        "{out}"
    );
    assert!(finish_ok_within(90, s, "pingpong server").contains("300 iters in"));
    for (i, args) in [
        vec!["write", "-s", "65536", "-n", "200"],
        vec!["read", "-s", "65536", "-n", "200"],
        vec!["send", "-s", "4096", "-n", "200"],
        vec!["atomic", "-A", "CMP_AND_SWAP", "-n", "200"],
        vec!["atomic", "-A", "FETCH_AND_ADD", "-n", "200"],
    ]
    .into_iter()
    .enumerate()
    {
        let p = (18721 + i).to_string();
        let mut sa = vec![
            "perf",
            "--bind",
            "10.95.0.1",
            "-p",
            &p,
            "--check",
            "--wait",
            "20",
        ];
        sa.extend_from_slice(&args);
        let mut ca = vec![
            "perf",
            "--bind",
            "10.95.0.1",
            "-p",
            &p,
            "--check",
            "--wait",
            "10",
        ];
        ca.extend_from_slice(&args);
        ca.push("10.95.0.1");
        let s = d_tool(&ns, &a, &sa);
        let c = d_tool(&ns, &b, &ca);
        let out = finish_ok_within(90, c, &format!("{args:?} client"));
        assert!(
            out.contains("--check: every byte verified"),
            "{args:?}: {out}"
        );
        let out = finish_ok_within(90, s, &format!("{args:?} server"));
        assert!(
            out.contains("--check: every byte verified"),
            "{args:?}: {out}"
        );
    }

    // 5% loss each way at daemon a, set while it runs: RC retransmits, nothing is lost.
    a.fault(&["drop", "5%", "seed=11"]);
    let s = d_tool(
        &ns,
        &a,
        &[
            "pingpong",
            "--bind",
            "10.95.0.1",
            "-p",
            "18730",
            "-n",
            "200",
            "-s",
            "4096",
            "--wait",
            "20",
        ],
    );
    let c = d_tool(
        &ns,
        &b,
        &[
            "pingpong",
            "--bind",
            "10.95.0.1",
            "-p",
            "18730",
            "-n",
            "200",
            "-s",
            "4096",
            "--wait",
            "10",
            "10.95.0.1",
        ],
    );
    assert!(finish_ok_within(90, c, "lossy pingpong client").contains("200 iters in"));
    assert!(finish_ok_within(90, s, "lossy pingpong server").contains("200 iters in"));
    let s = d_tool(
        &ns,
        &a,
        &[
            "perf",
            "write",
            "--bind",
            "10.95.0.1",
            "-p",
            "18731",
            "--check",
            "-s",
            "65536",
            "-n",
            "200",
            "--wait",
            "20",
        ],
    );
    let c = d_tool(
        &ns,
        &b,
        &[
            "perf",
            "write",
            "--bind",
            "10.95.0.1",
            "-p",
            "18731",
            "--check",
            "-s",
            "65536",
            "-n",
            "200",
            "--wait",
            "10",
            "10.95.0.1",
        ],
    );
    assert!(finish_ok_within(90, c, "lossy perf client").contains("--check: every byte verified"));
    assert!(finish_ok_within(90, s, "lossy perf server").contains("--check: every byte verified"));
    let v = a.counters();
    let applied = v["faults"]["rules"][0]["applied"].as_u64().unwrap_or(0);
    assert!(applied > 10, "the rule dropped only {applied}: {v}");
    a.fault(&["clear"]);
}
