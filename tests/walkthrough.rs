//! The seeds' walk-through as a user runs it, with roce-emu instead of rxe: two nodes,
//! nodeA and nodeB, each a `roce-emu daemon` on a TAP interface of its own, bridged in a
//! namespace of the test's (root only); `ibv_devinfo` on each node, `ping` to each node
//! (the daemons' own ARP and ICMP), then Debian 12's unmodified `rping -s -a B` on nodeB
//! and `rping -c -a B` on nodeA, with verified pings (`-V`): the connection goes over the
//! bridge as CM MADs between the two daemons' QP1s (REQ/REP/RTU, DREQ/DREP), and the data
//! as RC between the two programs.

mod common;

use common::daemon::Daemon;
use common::dropin;
use common::netns::{skip, Netns};
use std::process::{Command, Stdio};
use std::time::Duration;

const A: &str = "10.97.0.2";
const B: &str = "10.97.0.3";

/// `PROGRAM ARGS` on `node` (its daemon is the device rxe0), inside the namespace.
fn on(env: &dropin::Env, ns: &Netns, node: &Daemon, program: &str, args: &[&str]) -> Command {
    let mut c = ns.cmd(env.bin(program).to_str().unwrap());
    c.args(args)
        .env("LD_LIBRARY_PATH", env.library_path())
        .env(
            "ROCE_EMU_DEVICES",
            format!("rxe0=daemon:{}", node.socket.display()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn ping(ns: &Netns, to: &str) -> String {
    let out = ns
        .cmd("ping")
        .args(["-c", "3", "-i", "0.2", "-W", "2", to])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success() && text.contains("3 received"),
        "ping {to}: {text}"
    );
    text
}

#[test]
fn two_tap_nodes_ibv_devinfo_ping_and_rping() {
    if !nix::unistd::geteuid().is_root() {
        skip(
            "walkthrough",
            "needs root for a namespace, TAPs and a bridge",
        );
        return;
    }
    if Command::new("ping").arg("-V").output().is_err() {
        skip("walkthrough", "needs ping (iputils-ping)");
        return;
    }
    let Some(env) = dropin::setup("walkthrough") else {
        return;
    };
    let ns = Netns::new("walk");
    ns.ip(&["link", "add", "br97", "type", "bridge"]);
    ns.ip(&["addr", "add", "10.97.0.1/24", "dev", "br97"]);
    ns.ip(&["link", "set", "br97", "up"]);
    let node_a = Daemon::start(Some(&ns), &format!("tap:nodeA,{A}/24"), "walka", &[]);
    let node_b = Daemon::start(Some(&ns), &format!("tap:nodeB,{B}/24"), "walkb", &[]);
    for t in ["nodeA", "nodeB"] {
        ns.ip(&["link", "set", t, "master", "br97"]);
    }

    for (name, node, ip) in [("nodeA", &node_a, A), ("nodeB", &node_b, B)] {
        let out = on(env, &ns, node, "ibv_devinfo", &[]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && text.contains("hca_id:\trxe0")
                && text.contains("PORT_ACTIVE")
                && text.contains("link_layer:\t\tEthernet"),
            "ibv_devinfo on {name}: {}",
            dropin::show(&out)
        );
        let p = ping(&ns, ip);
        println!(
            "{name}: ibv_devinfo lists rxe0 (PORT_ACTIVE, Ethernet); {}",
            p.lines().last().unwrap_or("")
        );
    }

    let server = on(
        env,
        &ns,
        &node_b,
        "rping",
        &["-s", "-a", B, "-C", "10", "-V", "-v"],
    )
    .spawn()
    .unwrap();
    // rping's client does not retry a connect the server is not yet listening for (a REJ,
    // reason 8): wait until nodeB's manager holds the listening id.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while node_b.counters()["cm_clients"]["ids"].as_u64().unwrap_or(0) < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "rping -s never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let client = on(
        env,
        &ns,
        &node_a,
        "rping",
        &["-c", "-a", B, "-C", "10", "-V", "-v"],
    )
    .spawn()
    .unwrap();
    let c = dropin::finish(client, Duration::from_secs(60), "rping -c (nodeA)");
    let s = dropin::finish(server, Duration::from_secs(60), "rping -s (nodeB)");
    assert!(
        c.status.success() && s.status.success(),
        "--- rping -s on nodeB: {}\n--- rping -c on nodeA: {}\n--- nodeA: {}\n--- nodeB: {}",
        dropin::show(&s),
        dropin::show(&c),
        node_a.counters(),
        node_b.counters()
    );
    let (cout, sout) = (dropin::stdout(&c), dropin::stdout(&s));
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
    // The connection crossed the bridge as CM MADs between the two daemons' QP1s.
    let (ca, cb) = (node_a.counters(), node_b.counters());
    for (who, c, msgs) in [
        ("nodeA", &ca, ["rep", "drep"]),
        ("nodeB", &cb, ["req", "rtu"]),
    ] {
        for m in msgs {
            assert!(
                c["cm"]["mads_in"][m].as_u64().unwrap_or(0) >= 1,
                "{who} received no {m}: {}",
                c["cm"]
            );
        }
    }
    println!(
        "rping -c -a {B} -C 10 -V on nodeA: 10 verified pings; CM MADs in: nodeA {}, nodeB {}",
        ca["cm"]["mads_in"], cb["cm"]["mads_in"]
    );
}
