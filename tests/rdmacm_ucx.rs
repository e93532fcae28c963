//! UCX 1.13 (Debian 12's libucx0 and ucx-utils, unmodified) on the drop-in librdmacm.so.1,
//! with zero configuration (tests/common/zero.rs: `roce-emu run` in a namespace of the
//! test's own, the on-demand daemon of udp:127.0.0.1), under tools/dropin/devnodes.sh
//! (UCX lists a verbs device only when its /dev/infiniband node exists: docs/ucx.md):
//!
//! - `ucx_info -d` lists the `rdmacm` connection manager (UCX's uct_rdmacm component: it
//!   creates an event channel and an id, which the drop-in serves without
//!   /dev/infiniband/rdma_cm), with max_conn_priv 54 bytes as on a real rxe (92 bytes of
//!   REQ private data, 36 for the rdma_cm header, 2 for UCX's own header);
//! - a UCP client-server connection over a socket address through rdma_cm
//!   (`UCX_SOCKADDR_TLS_PRIORITY=rdmacm`: UCP's listener and `ucp_ep_create` by sockaddr,
//!   wireup data in the REQ/REP private data) with UCX's `io_demo`, 200 read and write
//!   IOs checked (`-q`). `ucx_perftest` 1.13 has no client-server (sockaddr) mode: it
//!   exchanges worker addresses over its own TCP socket (tests/dropin_ucx.rs runs it), so
//!   io_demo, from the same ucx-utils package, is the sockaddr program here.

mod common;

use common::dropin;
use common::zero::Zero;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn devnodes() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/dropin/devnodes.sh")
}

/// The namespace, or `None` after a loud skip (no root, no packages, no mount namespace
/// for the device nodes).
fn setup(test: &str, prefix: &str) -> Option<Zero> {
    let z = Zero::new(test, prefix)?;
    let probe = Command::new(devnodes())
        .args(["test", "-c", "/dev/infiniband/uverbs0"])
        .output()
        .unwrap();
    if !probe.status.success() {
        common::netns::skip(
            test,
            "tools/dropin/devnodes.sh cannot make /dev/infiniband here",
        );
        return None;
    }
    for b in ["ucx_info", "io_demo"] {
        assert!(
            z.env.bin(b).exists(),
            "{b} missing: tools/dropin/debian.sh must fetch ucx-utils"
        );
    }
    Some(z)
}

#[test]
fn ucx_info_lists_the_rdmacm_connection_manager() {
    let Some(z) = setup("rdmacm_ucx_info", "ucxinfo") else {
        return;
    };
    let c = z
        .run_under(Some(&devnodes()), "ucx_info", &["-d"])
        .spawn()
        .unwrap();
    let out = dropin::finish(c, Duration::from_secs(60), "ucx_info -d");
    assert!(out.status.success(), "{}", dropin::show(&out));
    let text = dropin::stdout(&out);
    let cm: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("# Connection manager: rdmacm"))
        .take(2)
        .collect();
    println!("{}", cm.join("\n"));
    assert_eq!(cm.len(), 2, "no rdmacm connection manager:\n{text}");
    assert!(cm[1].contains("max_conn_priv: 54 bytes"), "{}", cm[1]);
    // And the device's verbs transports, as without rdma_cm.
    assert!(text.contains("Transport: rc_verbs"), "{text}");
}

#[test]
fn ucp_sockaddr_connection_over_rdmacm_io_demo() {
    let Some(z) = setup("rdmacm_ucx_io_demo", "ucxio") else {
        return;
    };
    let io = |args: &[&str]| {
        let mut c = z.run_under(Some(&devnodes()), "io_demo", args);
        c.env("UCX_SOCKADDR_TLS_PRIORITY", "rdmacm")
            .env("UCX_TLS", "rc,self");
        c
    };
    let common = ["-p", "13510", "-q", "-d", "1024:65536"];
    let server = io(&common).spawn().unwrap();
    // Its listener is an rdma_cm id bound to 0.0.0.0:13510 on the daemon.
    let listening = z.wait_ids(1, Duration::from_secs(30));
    let client = io(&[&common[..], &["-i", "200", "-o", "read,write", "127.0.0.1"]].concat())
        .spawn()
        .unwrap();
    let c = dropin::finish(client, Duration::from_secs(90), "io_demo client");
    // The server runs until signalled: ours, by PID (devnodes.sh and roce-emu run exec).
    let _ = kill(Pid::from_raw(server.id() as i32), Signal::SIGTERM);
    let s = dropin::finish(server, Duration::from_secs(10), "io_demo server");
    let cout = dropin::stdout(&c);
    assert!(
        listening && c.status.success() && cout.contains("Client exit with status 'OK'"),
        "listened: {listening}\n--- client: {}\n--- server: {}\n--- daemon: {}",
        dropin::show(&c),
        dropin::show(&s),
        z.counters()
    );
    for l in cout
        .lines()
        .filter(|l| l.contains("total min:") || l.contains("Connected"))
    {
        println!("{l}");
    }
    assert!(cout.contains("Connected to server [0] 127.0.0.1"), "{cout}");
    // Each report counts the operations since the previous one (`report_performance` of
    // `total_iter - total_prev_iter`, every second and at the end): a slow run reports
    // its 200 in several lines.
    let done: u64 = cout
        .lines()
        .filter_map(|l| l.split_once("[DEMO] total min:"))
        .filter_map(|(_, rest)| {
            let n = rest.split_once(" total:")?.1;
            n.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert_eq!(done, 200, "{cout}");
    // The connection went through the daemon's CM (REQ/REP/RTU with UCX's private data).
    let cm = &z.counters()["cm"];
    println!("daemon cm mads_in {}", cm["mads_in"]);
    assert!(cm["mads_in"]["rep"].as_u64().unwrap_or(0) >= 1, "{cm}");
    assert!(cm["mads_in"]["rtu"].as_u64().unwrap_or(0) >= 1, "{cm}");
}
