//! UC (unreliable connected) with Debian 12's unmodified programs on the drop-in
//! libibverbs.so.1, as tests/dropin_debian.rs runs the RC ones: `ibv_uc_pingpong` (1 B
//! to 64 KiB, MTU 1024 and 4096, `-e` completion events; and with zero set-up in a
//! network namespace of its own), and perftest 4.5's `-c UC` modes (`ib_send_bw`,
//! `ib_write_bw`, `ib_send_lat`, `ib_write_lat`), server and client as two processes on
//! one address. Addresses 127.0.20.160-163 and 127.0.20.44-50, TCP ports 18860-18863 and
//! 18870-18873. The loopback path loses nothing, so UC (which never retransmits) delivers
//! every message; a lost one would show as a program waiting for it until the limit.

mod common;

use common::dropin::{self, pair, stdout};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// `ibv_uc_pingpong ARGS` between a server and a client on `127.0.20.(100 + port -
/// 18800)`, a device named by ROCE_EMU_DEVICES; both must report `-n` iterations.
fn uc_pingpong(tag: &str, port: u16, extra: &[&str]) {
    let Some(env) = dropin::setup(tag) else {
        return;
    };
    let p = port.to_string();
    let mut args = vec!["-d", "rxe0", "-g", "1", "-p", &p, "-n", "200"];
    args.extend_from_slice(extra);
    let n = (100 + port - 18800) as u8;
    let ip = format!("127.0.20.{n}");
    let dev = format!("rxe0={ip}");
    let mut server = env.cmd("ibv_uc_pingpong", &dev, &args);
    let mut cargs = args.clone();
    cargs.push(&ip);
    let mut client = env.cmd("ibv_uc_pingpong", &dev, &cargs);
    let (s, c) = pair(&mut server, &mut client, port, LIMIT, tag);
    for (who, o) in [("server", &s), ("client", &c)] {
        let text = stdout(o);
        assert!(text.contains("200 iters in"), "{tag} {who}: {text}");
    }
}

#[test]
fn ibv_uc_pingpong_1_byte_mtu_1024() {
    uc_pingpong("uc_pingpong_1", 18860, &["-s", "1", "-m", "1024"]);
}

#[test]
fn ibv_uc_pingpong_4096_bytes_mtu_1024() {
    // Four packets a message: UC_SEND_FIRST, MIDDLE, MIDDLE, LAST.
    uc_pingpong("uc_pingpong_4096", 18861, &["-s", "4096", "-m", "1024"]);
}

#[test]
fn ibv_uc_pingpong_65536_bytes_mtu_4096() {
    uc_pingpong("uc_pingpong_65536", 18862, &["-s", "65536", "-m", "4096"]);
}

#[test]
fn ibv_uc_pingpong_with_completion_events() {
    uc_pingpong("uc_pingpong_events", 18863, &["-s", "4096", "-e"]);
}

#[test]
fn ibv_uc_pingpong_with_zero_set_up() {
    // As tests/dropin_debian.rs's zero set-up test for RC.
    dropin::pingpong_with_zero_set_up("uc_zero_set_up", "dropin-uc", "ibv_uc_pingpong", LIMIT);
}

/// perftest `tool -c UC ARGS` between two processes; the client's result table row.
fn perftest_uc(tag: &str, tool: &str, port: u16, args: &[&str]) -> Option<String> {
    let env = dropin::setup(tag)?;
    let p = port.to_string();
    let mut a = vec!["-d", "rxe0", "-p", &p, "-c", "UC"];
    a.extend_from_slice(args);
    let ip = format!("127.0.20.{}", 4 + (port % 50) * 2);
    let dev = format!("rxe0={ip}");
    let mut server = env.cmd(tool, &dev, &a);
    let mut ca = a.clone();
    ca.push(&ip);
    let mut client = env.cmd(tool, &dev, &ca);
    let (s, c) = pair(&mut server, &mut client, port, LIMIT, tag);
    let (stext, ctext) = (stdout(&s), stdout(&c));
    assert!(
        ctext.contains("Connection type : UC"),
        "{tag}: perftest did not run UC\n{ctext}"
    );
    let row = ctext
        .lines()
        .chain(stext.lines())
        .find(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 3 && f[0].parse::<u64>().is_ok() && f[1].parse::<f64>().is_ok()
        })
        .unwrap_or_else(|| panic!("{tag}: no result row\n{ctext}\n{stext}"))
        .to_string();
    eprintln!("{tag}: {row}");
    Some(row)
}

#[test]
fn perftest_uc_bandwidth_tools_complete() {
    // 300 messages of 4 KiB in 1 KiB packets: 1.2 MiB in all, less than the receiving
    // socket's buffer (4 MiB), so a receiver that falls behind cannot lose a packet. UC
    // never retransmits and its sender completes on transmit, not on delivery: with
    // `-s 524288 -a` a debug build on a loaded machine overflows the buffer (netstat -su
    // "receive buffer errors"), a message is lost and ib_send_bw's server waits for it
    // forever, as it would on rxe or any UC without a lossless link.
    for (i, tool) in ["ib_send_bw", "ib_write_bw"].into_iter().enumerate() {
        let args = ["-s", "4096", "-m", "1024", "-n", "300"];
        let tag = format!("{tool} -c UC");
        let Some(row) = perftest_uc(&tag, tool, 18870 + i as u16, &args) else {
            return;
        };
        let f: Vec<&str> = row.split_whitespace().collect();
        assert_eq!((f[0], f[1]), ("4096", "300"), "{tag}: {row}");
    }
}

#[test]
fn perftest_uc_latency_tools_complete() {
    for (i, tool) in ["ib_send_lat", "ib_write_lat"].into_iter().enumerate() {
        let tag = format!("{tool} -c UC");
        let Some(row) = perftest_uc(&tag, tool, 18872 + i as u16, &["-n", "200"]) else {
            return;
        };
        let f: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(f[1], "200", "{tag}: {row}");
    }
}
