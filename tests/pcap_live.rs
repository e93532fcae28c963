//! `roce-emu pcap` on what a new user points it at: a capture still being written (its
//! last record cut short), frames with their time and direction, and a GSO train captured
//! on `lo` (several RoCE packets in one UDP datagram).

mod common;

use common::proc::{text, BIN};
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn pcap(args: &[&str], file: &Path) -> Output {
    Command::new(BIN)
        .arg("pcap")
        .args(args)
        .arg(file)
        .output()
        .unwrap()
}

const STILL: &str = "(capture still being written: last record incomplete)";

/// A classic pcap cut in the middle of its last record (header or data) reads as the
/// whole records before it, exit 0, and says the capture is still being written.
#[test]
fn truncated_pcap_reads_as_far_as_it_goes() {
    let file = data("write_bw_s4096.pcap");
    let bytes = std::fs::read(&file).unwrap();
    let whole = pcap(&[], &file);
    let (all, _) = text(&whole);
    let n_all = all.lines().filter(|l| !l.starts_with(' ')).count();
    // The last record starts where the last frame's bytes begin less its 16-byte header.
    let last = common::frames(&file).pop().unwrap();
    let last_at = bytes.len() - last.len() - 16;
    for cut in [last_at + 5, last_at + 16 + last.len() / 2, bytes.len() - 1] {
        let path = tmp("pcap_live_growing.pcap");
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let out = pcap(&[], &path);
        let (stdout, err) = text(&out);
        assert_eq!(out.status.code(), Some(0), "cut at {cut}: {err}");
        assert!(err.contains(STILL), "cut at {cut}: {err}");
        assert_eq!(stdout.lines().count(), n_all - 1, "cut at {cut}");
        assert!(all.starts_with(&stdout));
    }
    // The whole file says nothing of the kind.
    assert!(!text(&whole).1.contains("still being written"));
}

/// A pcapng with an interface block and EPBs flagged in and out: each frame shows its
/// time from the first (microseconds, as tshark) and its direction; a block cut short at
/// the end is the end of the capture so far.
#[test]
fn pcapng_time_direction_and_growing() {
    let frames: Vec<Vec<u8>> = common::frames(&data("rc_pingpong_s64.pcap"))
        .into_iter()
        .filter(|f| common::is_udp_4791(f))
        .take(3)
        .collect();
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: 65535,
        options: vec![InterfaceDescriptionOption::IfTsResol(9)],
    })
    .unwrap();
    let t0 = Duration::from_secs(1_700_000_000);
    let stamps = [0u64, 1_500, 2_000_250_000]; // ns after t0
    let flags = [Some(1u32), Some(2), None];
    for ((f, ns), fl) in frames.iter().zip(stamps).zip(flags) {
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: 0,
            timestamp: t0 + Duration::from_nanos(ns),
            original_len: f.len() as u32,
            data: Cow::Borrowed(&f[..]),
            options: fl.map(EnhancedPacketOption::Flags).into_iter().collect(),
        })
        .unwrap();
    }
    let bytes = w.into_inner();
    let path = tmp("pcap_live.pcapng");
    std::fs::write(&path, &bytes).unwrap();
    let out = pcap(&[], &path);
    let (stdout, err) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(lines[0].starts_with("1 0.000000 in 198.18."), "{stdout}");
    assert!(lines[1].starts_with("2 0.000001 out 198.18."), "{stdout}");
    assert!(lines[2].starts_with("3 2.000250 198.18."), "{stdout}");
    // The third frame's direction from the port's own address.
    let dst = lines[2]
        .split(" -> ")
        .nth(1)
        .unwrap()
        .split(':')
        .next()
        .unwrap();
    let out = pcap(&["--local", dst], &path);
    assert!(
        text(&out)
            .0
            .lines()
            .nth(2)
            .unwrap()
            .starts_with("3 2.000250 in "),
        "{}",
        text(&out).0
    );
    // JSON carries the same.
    let out = pcap(&["--json"], &path);
    let v: Vec<serde_json::Value> = text(&out)
        .0
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(v[0]["time"], 0.0);
    assert_eq!(v[0]["direction"], "in");
    assert_eq!(v[1]["direction"], "out");
    assert_eq!(v[2]["time"], 2.00025);
    assert!(v[2].get("direction").is_none());
    // Cut inside the last block: two frames, exit 0, said on stderr.
    std::fs::write(&path, &bytes[..bytes.len() - 7]).unwrap();
    let out = pcap(&[], &path);
    let (stdout, err) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(err.contains(STILL), "{err}");
}

/// The IPv4 header offset of an Ethernet frame, and its length.
fn ipv4(f: &[u8]) -> (usize, usize) {
    assert_eq!(f[12..14], [8, 0]);
    (14, usize::from(f[14] & 0x0f) * 4)
}

/// One frame holding `frames`' RoCE packets in one UDP datagram, headers from the first
/// (IPv4 total length and UDP length for the whole), as captured on lo before the
/// kernel's GSO segmentation.
fn train_of(frames: &[Vec<u8>]) -> Vec<u8> {
    let (ip, ihl) = ipv4(&frames[0]);
    let udp = ip + ihl;
    let mut out = frames[0][..udp + 8].to_vec();
    for f in frames {
        out.extend_from_slice(&f[udp + 8..]);
    }
    let udp_len = (out.len() - udp) as u16;
    out[udp + 4..udp + 6].copy_from_slice(&udp_len.to_be_bytes());
    out[ip + 2..ip + 4].copy_from_slice(&(udp_len + ihl as u16).to_be_bytes());
    out[udp + 6..udp + 8].copy_from_slice(&[0, 0]);
    out
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = pcap_file::pcap::PcapWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    for f in frames {
        let p = pcap_file::pcap::PcapPacket::new(Duration::ZERO, f.len() as u32, f);
        w.write_packet(&p).unwrap();
    }
}

/// Equal-length consecutive RoCE frames from one sender in a real capture (the WRITE
/// MIDDLE packets of a 4 KiB write at MTU 1024).
fn equal_run(n: usize) -> Vec<Vec<u8>> {
    let frames: Vec<Vec<u8>> = common::frames(&data("write_bw_s4096.pcap"))
        .into_iter()
        .filter(|f| common::is_udp_4791(f) && f[12..14] == [8, 0])
        .collect();
    for w in frames.windows(n) {
        let same = w
            .iter()
            .all(|f| f.len() == w[0].len() && f[26..34] == w[0][26..34]);
        if same && w[0].len() > 200 {
            return w.to_vec();
        }
    }
    panic!("no run of {n} equal-length frames");
}

/// A train built from real packets is named, split and each packet decoded with its ICRC
/// ok; the exit status does not count it as a bad ICRC. A train with one packet damaged
/// is still named, and is a bad ICRC.
#[test]
fn gso_train_is_named_and_split() {
    let run = equal_run(3);
    let train = train_of(&run);
    let path = tmp("pcap_live_train.pcap");
    write_pcap(&path, std::slice::from_ref(&train));
    let out = pcap(&[], &path);
    let (stdout, err) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{err}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(
        lines[0].contains("GSO train of 3 packets, not split by the capture point"),
        "{stdout}"
    );
    for (k, l) in lines[1..].iter().enumerate() {
        assert!(l.starts_with(&format!("1.{} 0.000000 ", k + 1)), "{l}");
        assert!(l.ends_with(" ok"), "{l}");
        assert!(!l.contains("BAD"), "{l}");
    }
    assert!(err.contains("0 bad ICRC, 1 GSO trains split"), "{err}");
    // Each piece decodes as the packet it was built from.
    let one = tmp("pcap_live_train_parts.pcap");
    write_pcap(&one, &run);
    let (parts, _) = text(&pcap(&[], &one));
    for (k, p) in parts.lines().enumerate() {
        let ours = lines[k + 1].split_once(" 0.000000 ").unwrap().1;
        let theirs = p.split_once(" 0.000000 ").unwrap().1;
        // The same headers and payload; the ICRC is over the piece's own IP header.
        assert_eq!(
            ours.split(" ICRC=").next(),
            theirs.split(" ICRC=").next(),
            "{ours}\n{theirs}"
        );
    }
    // JSON: one object, the train and its segments.
    let out = pcap(&["--json"], &path);
    let v: serde_json::Value = serde_json::from_str(text(&out).0.trim()).unwrap();
    assert_eq!(v["train"]["packets"], 3);
    assert_eq!(v["train"]["split"], true);
    let segs = v["segments"].as_array().unwrap();
    assert_eq!(segs.len(), 3);
    assert!(segs.iter().all(|s| s["icrc_ok"] == true));
    // One byte of the second packet's payload changed: still a train, not split, bad.
    let mut bad = train.clone();
    let at = train.len() - run[2].len() + 60;
    bad[at - 20] ^= 0xff;
    write_pcap(&path, &[bad]);
    let out = pcap(&[], &path);
    let (stdout, err) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{err}");
    assert!(stdout.contains("GSO train of 3 packets"), "{stdout}");
    assert!(stdout.contains("do not verify"), "{stdout}");
    assert!(err.contains("1 bad ICRC"), "{err}");
}

/// A real capture on `lo` (an AF_PACKET socket on lo while `roce-emu perf write -s 4096
/// --mtu 1024` ran between 127.0.43.2 and 127.0.43.1, received copies only): each WRITE
/// left as two GSO sends, FIRST (1056 bytes, with its RETH) + MIDDLE (1040), then MIDDLE
/// + LAST. Before, both frames were "BAD ICRC" and the exit status 1.
#[test]
fn a_real_lo_capture_of_gso_trains_splits() {
    let file = data("gso/lo_write_s4096_m1024.pcap");
    let out = pcap(&[], &file);
    let (stdout, err) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{err}");
    assert!(err.contains("0 bad ICRC, 2 GSO trains split"), "{err}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].ends_with(
            "GSO train of 2 packets, not split by the capture point (1 x 1056 + 1040 bytes):"
        ),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("1.1 ")
            && lines[1].contains("RC_RDMA_WRITE_FIRST")
            && lines[1].ends_with(" ok")
    );
    assert!(
        lines[2].starts_with("1.2 ")
            && lines[2].contains("RC_RDMA_WRITE_MIDDLE")
            && lines[2].ends_with(" ok")
    );
    assert!(lines[3].contains("(2 x 1040 bytes)"), "{stdout}");
    assert!(lines[5].contains("RC_RDMA_WRITE_LAST") && lines[5].ends_with(" ok"));
    assert!(lines[6].starts_with("3 0.000322 ") && lines[6].contains("RC_ACKNOWLEDGE"));
    let out = pcap(&["--json"], &file);
    let v: Vec<serde_json::Value> = text(&out)
        .0
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(v.len(), 3);
    assert_eq!(v[0]["train"]["segment_len"], 1056);
    assert_eq!(v[0]["train"]["last_len"], 1040);
    assert_eq!(v[0]["segments"][0]["opcode_name"], "RC_RDMA_WRITE_FIRST");
    assert_eq!(v[0]["segments"][1]["icrc_ok"], true);
    assert_eq!(v[2]["time"], 0.000322);
}
