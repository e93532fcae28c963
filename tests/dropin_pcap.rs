//! `ROCE_EMU_PCAP=FILE` on the drop-in: two unmodified Debian 12 `ibv_rc_pingpong` each
//! write a capture of their own (the device name and pid in its name), whose frames are
//! exactly the packets their NIC sent and received (the line each program's stderr gets at
//! close or exit says how many), every one decoded by `roce-emu pcap` with a valid ICRC.
//! Once for a pair that closes its device, once for a pair that exits on an error
//! completion without closing (mismatched MTUs: the capture is completed by the exit
//! hook). And a pair of `ibv_ud_pingpong` (UD datagrams). Addresses 127.0.54.x, TCP ports
//! 19120-19129.

mod common;

use common::daemon::BIN;
use common::dropin::{self, finish, show, wait_listening};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

/// The capture a program's stderr names: (file, captured, sent + received).
fn summary(stderr: &str) -> (PathBuf, u64, u64) {
    // "roce-emu: FILE: N packets captured (S sent + R received)"
    let line = stderr
        .lines()
        .find(|l| l.starts_with("roce-emu: ") && l.contains("packets captured"))
        .unwrap_or_else(|| panic!("no capture line in:\n{stderr}"));
    let rest = &line["roce-emu: ".len()..];
    let (file, counts) = rest.split_once(": ").unwrap();
    let nums: Vec<u64> = counts
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(nums.len(), 3, "{line}");
    (PathBuf::from(file), nums[0], nums[1] + nums[2])
}

/// `roce-emu pcap --json FILE`: the frames, each with a valid ICRC.
fn decoded_frames(file: &Path) -> usize {
    let out = Command::new(BIN)
        .args(["pcap", "--json"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "roce-emu pcap {file:?}: {}",
        show(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut n = 0;
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["icrc_ok"], serde_json::Value::Bool(true), "{file:?}: {l}");
        n += 1;
    }
    n
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A pair of `program` with `ROCE_EMU_PCAP` into a fresh folder (`server_args` and
/// `client_args` added to each side's); the client must report `want`.
fn pair(
    tag: &str,
    program: &str,
    n: u8,
    port: u16,
    server_args: &[&str],
    client_args: &[&str],
    want: &str,
) {
    let Some(env) = dropin::setup(tag) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("roce-emu-dropin-pcap-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join("pp.pcap");
    let (sip, cip) = (format!("127.0.54.{n}"), format!("127.0.54.{}", n + 1));
    let p = port.to_string();
    let args = |extra: &[&str], peer: Option<&str>| -> Vec<String> {
        let mut a: Vec<String> = ["-d", "rxe0", "-g", "1", "-p", &p, "-n", "20"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
        a.extend(peer.map(str::to_string));
        a
    };
    let sargs = args(server_args, None);
    let cargs = args(client_args, Some(&sip));
    let server = env
        .cmd(program, &format!("rxe0={sip}"), &strs(&sargs))
        .env("ROCE_EMU_PCAP", &base)
        .spawn()
        .unwrap();
    assert!(
        wait_listening(port, Duration::from_secs(20)),
        "{tag}: no server"
    );
    let client = env
        .cmd(program, &format!("rxe0={cip}"), &strs(&cargs))
        .env("ROCE_EMU_PCAP", &base)
        .spawn()
        .unwrap();
    let c = finish(client, LIMIT, &format!("{tag} client"));
    let s = finish(server, LIMIT, &format!("{tag} server"));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&c.stdout),
        String::from_utf8_lossy(&c.stderr)
    );
    assert!(
        all.contains(want),
        "{tag}: {want:?} missing\n--- client: {}",
        show(&c)
    );
    let mut files = Vec::new();
    for (who, o) in [("server", &s), ("client", &c)] {
        let (file, captured, moved) = summary(&String::from_utf8_lossy(&o.stderr));
        assert!(
            file.starts_with(&dir)
                && file
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("pp.rxe0."),
            "{tag} {who}: {file:?}"
        );
        let frames = decoded_frames(&file);
        eprintln!(
            "{tag} {who}: {file:?}: {frames} frames, {captured} captured, {moved} sent + received"
        );
        assert!(frames > 0, "{tag} {who}");
        assert_eq!(frames as u64, captured, "{tag} {who}");
        assert_eq!(frames as u64, moved, "{tag} {who}");
        files.push(file);
    }
    assert_ne!(files[0], files[1], "one file per program");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rc_pingpong_captures_hold_every_packet_sent_and_received() {
    pair(
        "pcap, closed",
        "ibv_rc_pingpong",
        1,
        19120,
        &["-m", "1024"],
        &["-m", "1024"],
        "20 iters in",
    );
}

#[test]
fn rc_pingpong_captures_are_complete_when_a_program_exits_on_an_error() {
    pair(
        "pcap, exit on error",
        "ibv_rc_pingpong",
        3,
        19121,
        &["-m", "1024"],
        &["-m", "2048"],
        "remote invalid request error (9)",
    );
}

/// UD datagrams (DETH, no ACKs), from two addresses: every one in the captures with a
/// valid ICRC.
#[test]
fn ud_pingpong_captures_hold_every_datagram_with_a_valid_icrc() {
    pair(
        "pcap, ud",
        "ibv_ud_pingpong",
        5,
        19122,
        &["-s", "1024"],
        &["-s", "1024"],
        "20 iters in",
    );
}
