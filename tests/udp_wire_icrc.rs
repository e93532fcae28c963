//! What the UDP backend puts on the wire is what the engine's ICRC assumed: the demo's
//! packets, captured by tcpdump, all carry a valid ICRC. That covers the IPv4 ID: 0 with
//! DF from an unconnected socket, and for the segments of a UDP GSO send, the IDs the
//! kernel counts up from there (the backend rewrites their ICRCs to match). A receiving
//! UDP socket cannot check this (it never sees the IP ID); real rxe drops every packet
//! where it is wrong.
//!
//! The demo runs in a network namespace of its own whose `lo` has UDP segmentation
//! offload turned off, so the kernel cuts GSO sends before tcpdump sees them, as it does
//! for any device without the offload (a tap, a bridge port): the capture holds the
//! packets a peer receives. Needs root, `ip`, `ethtool` and tcpdump: SKIPPED loudly
//! otherwise, and a failure under CI.

mod common;

use common::netns::Netns;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn skip(why: &str) {
    common::netns::skip("udp_wire_icrc", why);
}

/// A namespace whose `lo` cuts GSO sends into datagrams before tcpdump sees them, as a
/// tap or a bridge does.
fn wire_netns() -> Netns {
    let ns = Netns::new("wire");
    let ok = ns
        .cmd("ethtool")
        .args(["-K", "lo", "tx-udp-segmentation", "off"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "ethtool -K lo tx-udp-segmentation off");
    ns
}

/// IPv4 identifications of the Ethernet/IPv4 frames of a classic pcap file.
fn ipv4_ids(pcap: &[u8]) -> Vec<u16> {
    let mut ids = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let len = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = &pcap[at + 16..(at + 16 + len).min(pcap.len())];
        at += 16 + len;
        if f.len() >= 34 && f[12..14] == [8, 0] {
            ids.push(u16::from_be_bytes([f[18], f[19]]));
        }
    }
    ids
}

#[test]
fn demo_packets_on_the_wire_carry_valid_icrcs() {
    if !nix::unistd::geteuid().is_root() {
        return skip("not root (namespaces and tcpdump need it)");
    }
    for tool in ["tcpdump", "ethtool", "ip"] {
        let found = Command::new(tool).arg("-V").output().is_ok()
            || Command::new(tool).arg("--version").output().is_ok();
        if !found {
            return skip(&format!("{tool} is not installed"));
        }
    }
    let ns = wire_netns();
    let dir = std::env::temp_dir().join(format!("roce-emu-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("demo.pcap");
    let (a, b) = ("127.0.0.51", "127.0.0.52");
    let mut dump = ns
        .cmd("tcpdump")
        // A large capture buffer: the demo's bursts outrun tcpdump's default one.
        .args(["-i", "lo", "-U", "--immediate-mode", "-B", "32768", "-w"])
        .arg(&pcap)
        .arg(format!("udp port 4791 and host {a}"))
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start tcpdump");
    // Wait (bounded) for tcpdump to say it is listening.
    let mut err = BufReader::new(dump.stderr.take().unwrap());
    let start = Instant::now();
    let mut line = String::new();
    while !line.contains("listening") {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 || start.elapsed() > Duration::from_secs(10) {
            let _ = dump.kill();
            panic!("tcpdump did not start: {line}");
        }
    }
    let demo = ns
        .cmd(env!("CARGO_BIN_EXE_roce-emu"))
        .args(["demo", "-n", "5", "--a", a, "--b", b])
        .output()
        .expect("run the demo");
    std::thread::sleep(Duration::from_millis(300));
    // Stop only the tcpdump we started, by its PID (`ip netns exec` execs it).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(dump.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let _ = dump.wait();
    assert!(
        demo.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&demo.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_roce-emu"))
        .args(["pcap", "--json"])
        .arg(&pcap)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let frames: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let roce = frames.iter().filter(|f| f.get("opcode").is_some()).count();
    let bad = frames.iter().filter(|f| f["icrc_ok"] == false).count();
    let ids = ipv4_ids(&std::fs::read(&pcap).unwrap());
    let segments = ids.iter().filter(|&&id| id != 0).count();
    eprintln!(
        "{roce} RoCE frames captured, {bad} with a bad ICRC, {segments} with a nonzero IP ID \
         (GSO segments after the first)"
    );
    // tcpdump may drop part of a burst; what matters is that every captured packet's
    // ICRC is right, over a sample of every operation.
    assert!(roce >= 50, "only {roce} RoCE frames captured");
    assert_eq!(bad, 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success());
    // The demo's multi-packet messages leave as GSO trains: their later segments carry
    // IDs 1, 2, ... and the ICRCs above were checked against those.
    assert!(
        segments >= 20,
        "only {segments} GSO segments seen: was GSO used?"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
