//! `--pcap`: a perf run and a pingpong run over loopback write one frame per RoCE packet
//! sent and received. Every frame decodes with `roce-emu pcap` with a valid ICRC (the
//! synthesised headers carry the IPv4 ID actually used), tshark decodes every frame as
//! InfiniBand, and the frame count equals the NIC's sent + received datagrams.
//! Without tshark the tshark half prints SKIPPED (and fails under CI, which installs it).

mod common;

use common::proc::{finish, spawn, strings, text, BIN};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roce-emu-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// "FILE: N packets captured (S sent + R received)" from a tool's stderr.
fn summary(stderr: &str, file: &Path) -> (u64, u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with(&file.display().to_string()))
        .unwrap_or_else(|| panic!("no capture summary for {} in:\n{stderr}", file.display()));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let n = nums.len();
    assert!(n >= 3, "{line}");
    (nums[n - 3], nums[n - 2], nums[n - 1])
}

/// Frames in `file` per `roce-emu pcap --json`, asserting each is RoCE with a valid ICRC.
fn decode_ours(file: &Path) -> u64 {
    let out = Command::new(BIN)
        .args(["pcap", "--json"])
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let mut n = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["icrc_ok"], serde_json::Value::Bool(true), "{line}");
        n += 1;
    }
    n
}

/// (frames, frames tshark decodes as InfiniBand), or None without tshark.
fn decode_tshark(file: &Path) -> Option<(u64, u64)> {
    let run = |filter: Option<&str>| -> Option<u64> {
        let mut c = Command::new("tshark");
        c.arg("-r")
            .arg(file)
            .args(["-T", "fields", "-e", "frame.number"]);
        if let Some(f) = filter {
            c.args(["-Y", f]);
        }
        let out = c.output().ok()?;
        assert!(out.status.success(), "tshark: {:?}", text(&out));
        Some(String::from_utf8_lossy(&out.stdout).lines().count() as u64)
    };
    Some((run(None)?, run(Some("infiniband"))?))
}

fn check_capture(file: &Path, stderr: &str) {
    let (captured, sent, received) = summary(stderr, file);
    assert!(sent > 0 && received > 0, "{stderr}");
    assert_eq!(captured, sent + received, "{stderr}");
    assert_eq!(decode_ours(file), sent + received, "{}", file.display());
    match decode_tshark(file) {
        Some((all, ib)) => {
            assert_eq!(all, sent + received, "tshark frames in {}", file.display());
            assert_eq!(ib, all, "frames tshark does not decode as InfiniBand");
        }
        None if std::env::var_os("CI").is_some() => panic!("tshark is missing under CI"),
        None => eprintln!("SKIPPED: tshark half of the capture check (no tshark on PATH)"),
    }
}

/// Runs `tool` as server on `sip` and client on `cip` with `args`, each capturing to its
/// own file, and checks both captures.
fn run_captured(tool: &str, name: &str, args: &[&str], sip: &str, cip: &str) {
    let files = [sip, cip].map(|ip| tmp(&format!("{name}-{ip}.pcap")));
    let side = |ip: &str, wait: &str, file: &Path| {
        let mut a = strings(args);
        a.extend(strings(&["--bind", ip, "--wait", wait, "--pcap"]));
        a.push(file.display().to_string());
        a
    };
    let server = spawn(tool, &side(sip, "20", &files[0]));
    let mut c = side(cip, "10", &files[1]);
    c.push(sip.to_string());
    let client = finish(spawn(tool, &c), Duration::from_secs(60), "client");
    let server = finish(server, Duration::from_secs(60), "server");
    for (o, file) in [(&server, &files[0]), (&client, &files[1])] {
        let (stdout, stderr) = text(o);
        assert!(o.status.success(), "{stdout}\n{stderr}");
        check_capture(file, &stderr);
        let _ = std::fs::remove_file(file);
    }
}

#[test]
fn perf_write_capture_holds_every_packet() {
    let args = [
        "write", "-s", "8192", "-n", "300", "-m", "1024", "-p", "18930",
    ];
    run_captured("perf", "perf", &args, "127.0.11.1", "127.0.11.2");
}

#[test]
fn pingpong_capture_holds_every_packet() {
    let args = ["-s", "3000", "-n", "200", "-m", "1024", "-p", "18931"];
    run_captured("pingpong", "pp", &args, "127.0.11.3", "127.0.11.4");
}
