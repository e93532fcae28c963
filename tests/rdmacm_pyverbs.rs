//! rdma-core's pyverbs rdma_cm tests (Debian 12's tests/test_rdmacm.py over
//! python3-pyverbs, unmodified) on the drop-in librdmacm.so.1, with zero configuration
//! (tests/common/zero.rs: `roce-emu run` in a namespace of the test's own; the device is
//! rxe_lo on 127.0.0.1, its daemon started on demand).
//!
//! pyverbs finds the address to use from the device's net interface in sysfs
//! (`/sys/class/infiniband/<dev>/device/net/<if>`, then `ip -j addr show <if>`) and skips
//! every rdma_cm test without one: tools/dropin/sysfs_netdev.sh shows the program that
//! entry (rxe_lo -> lo) in a private mount namespace. Each test forks a passive and an
//! active process (multiprocessing, fork) that connect through the daemon's CM.
//!
//! On a real rxe all 10 pass. Here 7 pass: sync and async traffic, async reject, RDMA
//! READ and WRITE, an external QP, UDP (SIDR); the 3 multicast tests skip ("Multicast is
//! not supported on this device": rdma_join_multicast is not in the drop-in: no
//! multicast in the CM or the NIC), which `SKIPS` lists. Anything else that skips,
//! fails or errs fails this test.

mod common;

use common::dropin;
use common::zero::Zero;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What may skip, and why (the reason pyverbs prints).
const SKIPS: &[(&str, &str)] = &[
    (
        "test_rdmacm_async_multicast_traffic",
        "Multicast is not supported on this device",
    ),
    (
        "test_rdmacm_async_ex_multicast_traffic",
        "Multicast is not supported on this device",
    ),
    (
        "test_rdmacm_async_ex_leave_multicast_traffic",
        "Multicast is not supported on this device",
    ),
];
const MIN_PASSED: usize = 7;

#[test]
fn pyverbs_test_rdmacm() {
    let Some(z) = Zero::new("rdmacm_pyverbs", "rdmapy") else {
        return;
    };
    if !std::path::Path::new("/usr/bin/python3.11").exists() {
        common::netns::skip(
            "rdmacm_pyverbs",
            "no python3.11 (Debian 12's pyverbs is built for it)",
        );
        return;
    }
    let sysfs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/dropin/sysfs_netdev.sh");
    // `roce-emu run -- sysfs_netdev.sh rxe_lo lo python3.11 tests/run_tests.py ...`.
    let mut c = z.ns.cmd(common::daemon::BIN);
    c.arg("run")
        .arg("--")
        .arg(&sysfs)
        .args(["rxe_lo", "lo", "/usr/bin/python3.11", "tests/run_tests.py"])
        .args(["-v", "--dev", "rxe_lo", "--port", "1", "--gid", "1"])
        .arg("test_rdmacm")
        .current_dir(&z.env.root)
        .env(
            "PYTHONPATH",
            z.env.root.join("usr/lib/python3/dist-packages"),
        )
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("LD_LIBRARY_PATH", &z.env.tree_libs)
        .env_remove("ROCE_EMU_DEVICES")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let start = Instant::now();
    let out = dropin::finish(c.spawn().unwrap(), Duration::from_secs(180), "test_rdmacm");
    let log = format!(
        "{}{}",
        dropin::stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("test_rdmacm on the drop-in, {:.1?}:", start.elapsed());
    let mut passed = 0;
    let mut bad = Vec::new();
    for line in log.lines().filter(|l| l.starts_with("test_rdmacm")) {
        let name = line.split_whitespace().next().unwrap_or("");
        let verdict = line.rsplit(" ... ").next().unwrap_or("");
        eprintln!("  {name:<46} {verdict}");
        if verdict == "ok" {
            passed += 1;
        } else if let Some(why) = verdict.strip_prefix("skipped ") {
            let why = why.trim_matches(|c| c == '\'' || c == '"');
            if !SKIPS.iter().any(|(n, w)| *n == name && *w == why) {
                bad.push(line.to_string());
            }
        } else {
            bad.push(line.to_string());
        }
    }
    assert!(
        out.status.success() && bad.is_empty() && passed >= MIN_PASSED,
        "{passed} passed (at least {MIN_PASSED}); unexpected: {bad:#?}\n{log}\ndaemon: {}",
        z.counters()
    );
    let cm = &z.counters()["cm"];
    eprintln!("daemon cm mads_in {}", cm["mads_in"]);
}
