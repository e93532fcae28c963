//! UCX 1.13 (Debian 12's libucx0 and ucx-utils, unmodified, fetched by tools/dropin/debian.sh)
//! on the drop-in libibverbs.so.1: `ucx_info -d` lists our device's verbs transports, and
//! `ucx_perftest` runs between two processes on this machine over RC (`UCX_TLS=rc,self`:
//! rc_verbs, its endpoints wired up over UD) and over UD (`UCX_TLS=ud_verbs,self`), a
//! bandwidth and a latency test each. UCX's default configuration otherwise; the device is
//! `rxe0` on an address of its own (ROCE_EMU_DEVICES, as the other drop-in tests), so UCX
//! sees one device; and with zero set-up (no ROCE_EMU_DEVICES) in a network namespace of
//! its own. Addresses 127.0.52.x, TCP ports 13410-13429.
//!
//! UCX lists a verbs device only when `/dev/infiniband/<dev_name>` is a character device
//! the process may open (uct_ib_device_is_accessible; it never opens it): the programs run
//! under tools/dropin/devnodes.sh, which makes those nodes in a private mount namespace
//! (a user namespace too when not root). Where no namespace can be made the tests print
//! SKIPPED (a failure under CI). A device that lacks a transport is a failure, never a skip.

mod common;

use common::dropin::{self, show, stdout, wait_listening, Env};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);

fn devnodes() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/dropin/devnodes.sh")
}

/// The environment, or `None` after a loud skip (no Debian packages, or no namespace for
/// the device nodes).
fn setup(test: &str) -> Option<&'static Env> {
    let env = dropin::setup(test)?;
    for b in ["ucx_info", "ucx_perftest"] {
        // debian.sh fetched the packages: a missing program is this tree's fault.
        assert!(
            env.bin(b).exists(),
            "{} missing: tools/dropin/debian.sh must fetch ucx-utils",
            env.bin(b).display()
        );
    }
    // No right to make a mount namespace (a confined container, or a plain user where
    // unprivileged user namespaces are off) is this machine's limit, not the drop-in's:
    // said once, loudly.
    let probe = Command::new(devnodes())
        .args(["test", "-c", "/dev/infiniband/uverbs0"])
        .output()
        .unwrap();
    if !probe.status.success() {
        common::netns::skip(
            test,
            &format!(
                "tools/dropin/devnodes.sh cannot make /dev/infiniband here: {}",
                String::from_utf8_lossy(&probe.stderr).trim()
            ),
        );
        return None;
    }
    Some(env)
}

/// `program ARGS` on the drop-in with device `rxe0=ADDR`, under devnodes.sh; `tls` is
/// UCX_TLS.
fn ucx(env: &Env, program: &str, addr: &str, tls: Option<&str>, args: &[&str]) -> Command {
    let mut c = Command::new(devnodes());
    c.arg(env.bin(program))
        .args(args)
        .env("LD_LIBRARY_PATH", env.library_path())
        .env("ROCE_EMU_DEVICES", format!("rxe0={addr}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(t) = tls {
        c.env("UCX_TLS", t);
    }
    c
}

/// The transports `ucx_info -d` lists on memory domain `md`, each with whether its
/// interface opened (`< failed to open interface >` follows one that did not).
fn transports(text: &str, md: &str) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let l = line.trim_start_matches('#').trim();
        if let Some(name) = l.strip_prefix("Memory domain:") {
            inside = name.trim() == md;
        } else if !inside {
            continue;
        } else if let Some(tl) = l.strip_prefix("Transport:") {
            out.push((tl.trim().to_string(), true));
        } else if l.contains("failed to open interface") {
            if let Some(last) = out.last_mut() {
                last.1 = false;
            }
        }
    }
    out
}

#[test]
fn ucx_info_lists_rc_and_ud_verbs_on_the_device() {
    let Some(env) = setup("ucx_info") else {
        return;
    };
    let out = ucx(env, "ucx_info", "127.0.52.1", None, &["-v"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(stdout(&out).contains("Version 1.13"), "{}", show(&out));

    let out = ucx(env, "ucx_info", "127.0.52.1", None, &["-d"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = stdout(&out);
    let tls = transports(&text, "rxe0");
    eprintln!("ucx_info -d on rxe0: {tls:?}");
    for want in ["rc_verbs", "ud_verbs"] {
        assert!(
            tls.iter().any(|(t, ok)| t == want && *ok),
            "ucx_info -d: no working {want} on rxe0 ({tls:?}):\n{}",
            show(&out)
        );
    }
    // The device as UCX sees it: port 1, an IB component.
    assert!(text.contains("Device: rxe0:1"), "{text}");
}

/// `ucx_perftest -t TEST -s SIZE -n ITERS` between two processes with UCX_TLS=`tls`, on
/// 127.0.52.N and TCP port 13408 + N; checks the client's `Final:` row (iterations, latency
/// 50th percentile / average / overall us, bandwidth average / overall MB/s, message rate);
/// the opcodes of the client's packets (every frame well formed, valid ICRC).
fn perftest(
    tag: &str,
    tls: &str,
    n: u8,
    [test, size, iters]: [&str; 3],
) -> Option<BTreeMap<String, usize>> {
    let port = 13408 + u16::from(n);
    let env = setup(tag)?;
    let addr = format!("127.0.52.{n}");
    let p = port.to_string();
    // The client's packets, captured by the drop-in (ROCE_EMU_PCAP: FILE.rxe0.PID.pcap).
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("ucx-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let server = ucx(env, "ucx_perftest", &addr, Some(tls), &["-p", &p])
        .spawn()
        .unwrap();
    if !wait_listening(port, Duration::from_secs(20)) {
        let out = dropin::finish(server, Duration::from_secs(1), tag);
        panic!("{tag}: the server never listened on {port}: {}", show(&out));
    }
    let client = ucx(
        env,
        "ucx_perftest",
        &addr,
        Some(tls),
        &[
            // The out-of-band exchange goes to the device's own address.
            &addr, "-p", &p, "-t", test, "-s", size, "-n", iters, "-w", "100",
        ],
    )
    .env("ROCE_EMU_PCAP", dir.join("client.pcap"))
    .spawn()
    .unwrap();
    let c = dropin::finish(client, LIMIT, &format!("{tag} client"));
    let s = dropin::finish(server, LIMIT, &format!("{tag} server"));
    let both = |c: &Output, s: &Output| format!("--- server: {}\n--- client: {}", show(s), show(c));
    assert!(
        c.status.success() && s.status.success(),
        "{tag}\n{}",
        both(&c, &s)
    );
    let text = stdout(&c);
    let fin = text
        .lines()
        .find(|l| l.starts_with("Final:"))
        .unwrap_or_else(|| panic!("{tag}: no Final: row\n{}", both(&c, &s)));
    let f: Vec<&str> = fin.split_whitespace().collect();
    assert_eq!(f.get(1), Some(&iters), "{tag}: {fin}");
    eprintln!("{tag}: {fin}");
    Some(opcodes(&dir))
}

/// How many packets of each opcode (`RC_SEND_FIRST`, `UD_SEND_ONLY`, ...) the captures in
/// `dir` hold, by `roce-emu pcap`, which must find every frame well formed with a valid ICRC.
fn opcodes(dir: &std::path::Path) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    assert!(!files.is_empty(), "no capture in {}", dir.display());
    for f in files {
        let out = Command::new(env!("CARGO_BIN_EXE_roce-emu"))
            .arg("pcap")
            .arg(&f)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "roce-emu pcap {}: {}",
            f.display(),
            show(&out)
        );
        let text = stdout(&out);
        let summary = String::from_utf8_lossy(&out.stderr);
        assert!(
            summary.contains(" 0 malformed, 0 bad ICRC"),
            "{}: {summary}",
            f.display()
        );
        for tok in text.split_whitespace() {
            if ["RC_", "UC_", "UD_"].iter().any(|p| tok.starts_with(p)) {
                *n.entry(tok.to_string()).or_default() += 1;
            }
        }
    }
    n
}

/// Packets in `n` whose opcode starts with `prefix`.
fn count(n: &BTreeMap<String, usize>, prefix: &str) -> usize {
    n.iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| v)
        .sum()
}

/// Over RC: the endpoints were wired up over UD (ud_verbs as UCX's auxiliary transport),
/// the data went over RC.
fn ran_over_rc(tag: &str, r: Option<BTreeMap<String, usize>>) {
    let Some(ops) = r else { return };
    eprintln!("{tag}: client's packets {ops:?}");
    assert!(count(&ops, "UD_SEND") > 0, "{tag}: no UD wire-up: {ops:?}");
    assert!(count(&ops, "RC_") > 100, "{tag}: no RC traffic: {ops:?}");
}

/// Over UD: UD datagrams only.
fn ran_over_ud(tag: &str, r: Option<BTreeMap<String, usize>>) {
    let Some(ops) = r else { return };
    eprintln!("{tag}: client's packets {ops:?}");
    assert!(
        count(&ops, "UD_SEND") > 100,
        "{tag}: no UD traffic: {ops:?}"
    );
    assert_eq!(count(&ops, "RC_") + count(&ops, "UC_"), 0, "{tag}: {ops:?}");
}

#[test]
fn ucx_perftest_rc_tag_bandwidth() {
    ran_over_rc(
        "ucx rc tag_bw",
        perftest("ucx rc tag_bw", "rc,self", 2, ["tag_bw", "65536", "2000"]),
    );
}

#[test]
fn ucx_perftest_rc_tag_latency() {
    ran_over_rc(
        "ucx rc tag_lat",
        perftest("ucx rc tag_lat", "rc,self", 3, ["tag_lat", "8", "2000"]),
    );
}

#[test]
fn ucx_perftest_ud_tag_bandwidth() {
    ran_over_ud(
        "ucx ud tag_bw",
        perftest(
            "ucx ud tag_bw",
            "ud_verbs,self",
            4,
            ["tag_bw", "65536", "500"],
        ),
    );
}

#[test]
fn ucx_perftest_ud_tag_latency() {
    ran_over_ud(
        "ucx ud tag_lat",
        perftest(
            "ucx ud tag_lat",
            "ud_verbs,self",
            5,
            ["tag_lat", "8", "2000"],
        ),
    );
}

/// Zero set-up: no ROCE_EMU_DEVICES, so the device list is the machine's interfaces; in a
/// network namespace of its own that is `lo` alone, the device `rxe_lo` on 127.0.0.1.
/// Both ends of `ucx_perftest -t tag_lat` over `UCX_TLS=rc,self` there.
#[test]
fn ucx_perftest_rc_with_zero_set_up_in_a_namespace() {
    let tag = "ucx zero set-up";
    let Some(env) = setup(tag) else {
        return;
    };
    let ns = common::netns::Netns::new("ucx");
    let run = |args: &[&str]| {
        let mut c = ns.cmd(devnodes().to_str().unwrap());
        c.arg(env.bin("ucx_perftest"))
            .args(args)
            .env("LD_LIBRARY_PATH", env.library_path())
            .env_remove("ROCE_EMU_DEVICES")
            .env("UCX_TLS", "rc,self")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    // `ip netns exec`, devnodes.sh and unshare each exec the next: the PID is the
    // server's, and its /proc/PID/net the namespace's.
    let server = run(&["-p", "13420"]).spawn().unwrap();
    if !dropin::wait_listening_in(Some(server.id()), 13420, Duration::from_secs(20)) {
        let out = dropin::finish(server, Duration::from_secs(1), tag);
        panic!("{tag}: the server never listened: {}", show(&out));
    }
    let client = run(&[
        "127.0.0.1",
        "-p",
        "13420",
        "-t",
        "tag_lat",
        "-n",
        "1000",
        "-w",
        "100",
    ])
    .spawn()
    .unwrap();
    let c = dropin::finish(client, LIMIT, &format!("{tag} client"));
    let s = dropin::finish(server, LIMIT, &format!("{tag} server"));
    assert!(
        c.status.success() && s.status.success(),
        "{tag}\n--- server: {}\n--- client: {}",
        show(&s),
        show(&c)
    );
    let text = stdout(&c);
    let fin = text.lines().find(|l| l.starts_with("Final:"));
    assert!(
        fin.is_some_and(|l| l.split_whitespace().nth(1) == Some("1000")),
        "{tag}: {text}"
    );
    eprintln!("{tag}: {}", fin.unwrap());
}
