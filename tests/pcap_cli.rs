//! `roce-emu pcap` as a command: `-` reads standard input, an empty file is named as such,
//! IPv6 socket addresses are bracketed, and 64-bit JSON fields survive jq.

mod common;

use common::proc::{text, BIN};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// `roce-emu pcap ARGS` with `input` on its standard input.
fn pcap_stdin(args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = Command::new(BIN)
        .arg("pcap")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = common::proc::finish(child, Duration::from_secs(30), "pcap -");
    writer.join().unwrap();
    out
}

#[test]
fn dash_reads_standard_input() {
    let file = data("write_send_imm_s64.pcap");
    let bytes = std::fs::read(&file).unwrap();
    for json in [false, true] {
        let mut args = vec![];
        if json {
            args.push("--json");
        }
        let from_file = Command::new(BIN)
            .arg("pcap")
            .args(&args)
            .arg(&file)
            .output()
            .unwrap();
        args.push("-");
        let from_stdin = pcap_stdin(&args, &bytes);
        let (out, err) = text(&from_stdin);
        assert_eq!(from_stdin.status.code(), Some(0), "{err}");
        assert!(!out.is_empty());
        assert_eq!(out, text(&from_file).0, "--json {json}");
        assert!(err.starts_with("standard input: "), "{err}");
    }
}

#[test]
fn empty_input_says_so() {
    let empty = tmp("pcap_cli_empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let out = Command::new(BIN).arg("pcap").arg(&empty).output().unwrap();
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "roce-emu pcap: {} is empty: no pcap header",
            empty.display()
        )
    );
    let out = pcap_stdin(&["-"], b"");
    assert_eq!(
        text(&out).1.trim_end(),
        "roce-emu pcap: standard input is empty: no pcap header"
    );
    let out = pcap_stdin(&["-"], b"\xd4\xc3");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).1.contains("is only 2 bytes: too short"),
        "{}",
        text(&out).1
    );
}

#[test]
fn ipv6_socket_addresses_are_bracketed() {
    let out = Command::new(BIN)
        .arg("pcap")
        .arg(data("rc_pingpong_ipv6_s256.pcap"))
        .output()
        .unwrap();
    let (stdout, err) = text(&out);
    assert!(out.status.success(), "{err}");
    let roce: Vec<&str> = stdout.lines().filter(|l| l.contains(" -> ")).collect();
    assert!(!roce.is_empty(), "{stdout}");
    for l in &roce {
        // "N TIME SRC -> DST ...": the frame number and its time come first.
        let addrs = l.split(' ').nth(2).unwrap();
        assert!(addrs.starts_with("[2001:db8:4791::"), "{l}");
        assert!(
            l.contains("]:49441 -> [2001:db8:4791::") && l.contains("]:4791 "),
            "{l}"
        );
    }
    // IPv4 stays as it was.
    let out = Command::new(BIN)
        .arg("pcap")
        .arg(data("rc_pingpong_s64.pcap"))
        .output()
        .unwrap();
    assert!(text(&out)
        .0
        .lines()
        .any(|l| l.contains(" 198.18.0.12:") && l.contains(" -> 198.18.0.11:4791 ")));
}

/// A WRITE whose RETH VA is 0x7fff_ffff_ffff_fff1 (above 2^53): the JSON gives it as a
/// string that jq passes through unchanged, where a number would come back rounded.
#[test]
fn u64_fields_survive_jq() {
    const VA: u64 = 0x7fff_ffff_ffff_fff1;
    let mut frames = common::frames(&data("write_bw_s4096.pcap"));
    // The first RDMA WRITE FIRST/ONLY (opcodes 6, 10) over Ethernet/IPv4/UDP: its RETH
    // follows the 12-byte BTH. The ICRC is then wrong, which the decode reports; the VA
    // is what matters here.
    let f = frames
        .iter_mut()
        .find(|f| {
            common::is_udp_4791(f)
                && f[12..14] == [8, 0]
                && matches!(f[14 + usize::from(f[14] & 0x0f) * 4 + 8], 6 | 10)
        })
        .expect("a WRITE with a RETH");
    let reth = 14 + usize::from(f[14] & 0x0f) * 4 + 8 + 12;
    f[reth..reth + 8].copy_from_slice(&VA.to_be_bytes());
    let frame = f.clone();
    let path = tmp("pcap_cli_big_va.pcap");
    {
        let mut w =
            pcap_file::pcap::PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
        let p = pcap_file::pcap::PcapPacket::new(Duration::ZERO, frame.len() as u32, &frame);
        w.write_packet(&p).unwrap();
    }
    let out = Command::new(BIN)
        .args(["pcap", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    let (stdout, err) = text(&out);
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(
        v["reth"]["va"],
        serde_json::Value::String(format!("{VA:#x}")),
        "{stdout}{err}"
    );
    // jq itself, when installed: it reads numbers as doubles.
    let jq = Command::new("jq")
        .args(["-r", ".reth.va"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn();
    match jq {
        Ok(mut jq) => {
            jq.stdin
                .take()
                .unwrap()
                .write_all(stdout.as_bytes())
                .unwrap();
            let got = jq.wait_with_output().unwrap();
            assert_eq!(
                String::from_utf8_lossy(&got.stdout).trim(),
                "0x7ffffffffffffff1"
            );
        }
        Err(_) => eprintln!("jq not installed: checked the JSON string only"),
    }
}
