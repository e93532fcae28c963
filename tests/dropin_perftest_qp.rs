//! perftest 4.5's UD and UC modes (Debian 12's unmodified binaries) on the drop-in
//! libibverbs.so.1, server and client as two processes on this machine, each on a loopback
//! address of its own, as tests/dropin_debian.rs runs the RC modes: `ib_send_bw -c UD`,
//! `ib_send_lat -c UD`, `ib_send_bw -c UC`, `ib_write_bw -c UC`. A device without the QP
//! type fails them (perftest: "Couldn't create IB resources"), never skips. Addresses
//! 127.0.53.x, TCP ports 18970-18979.

mod common;

use common::dropin::{self, pair, stdout};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// `tool -c CONN ARGS` between two processes, the server on `rxe0=127.0.53.(10N+1)`, the
/// client on `rxe0=127.0.53.(10N+2)`; the client's result row
/// (the server's if the client prints none), split in fields. No `-x`: perftest picks the
/// device's RoCE v2 IPv4 GID itself (index 0 while the device has one GID, 1 in a table
/// like rxe's, whose index 0 is the link-local GID).
fn perftest(tool: &str, conn: &str, n: u8, port: u16, args: &[&str]) -> Option<Vec<String>> {
    let tag = format!("{tool} -c {conn} {}", args.join(" "));
    let env = dropin::setup(&tag)?;
    let p = port.to_string();
    // Each on an address of its own, so each has its own daemon and rings. UD and UC have
    // no retransmission, and a message lost on the way leaves perftest's SEND server
    // waiting forever for it. The sender never drops (its engine waits for room in its
    // ring); the receiver's 4 MiB ring is where a receiving process that falls behind
    // loses packets (counted: `ring_full`), as a debug build does behind a sender on a
    // loaded machine (CI lost one of `-n 300` x 16 KiB, 4.9 MB; the release build keeps up
    // with `-n 3000` beside two busy loops). So every run here fits in that ring.
    let ip = format!("127.0.53.{}", 10 * n + 1);
    let client_ip = format!("127.0.53.{}", 10 * n + 2);
    let mut a = vec!["-d", "rxe0", "-p", &p, "-c", conn];
    a.extend_from_slice(args);
    let mut server = env.cmd(tool, &format!("rxe0={ip}"), &a);
    let mut ca = a.clone();
    ca.push(&ip);
    let mut client = env.cmd(tool, &format!("rxe0={client_ip}"), &ca);
    let (s, c) = pair(&mut server, &mut client, port, LIMIT, &tag);
    let (stext, ctext) = (stdout(&s), stdout(&c));
    for text in [&ctext, &stext] {
        // perftest's banner names the connection type it ran.
        assert!(
            text.contains(&format!("Connection type : {conn}")),
            "{tag}: {text}"
        );
    }
    let row = ctext
        .lines()
        .chain(stext.lines())
        .find(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 3 && f[0].parse::<u64>().is_ok() && f[1].parse::<f64>().is_ok()
        })
        .unwrap_or_else(|| panic!("{tag}: no result row\n{ctext}\n{stext}"));
    eprintln!("{tag}: {row}");
    Some(row.split_whitespace().map(str::to_string).collect())
}

#[test]
fn ib_send_bw_ud() {
    // UD: one packet per message, at most the path MTU (rxe0 on lo: 4096).
    let Some(row) = perftest("ib_send_bw", "UD", 1, 18970, &["-s", "2048", "-n", "1000"]) else {
        return;
    };
    assert_eq!(row[0], "2048", "{row:?}");
    assert_eq!(row[1], "1000", "{row:?}");
}

#[test]
fn ib_send_lat_ud() {
    let Some(row) = perftest("ib_send_lat", "UD", 2, 18971, &["-s", "8", "-n", "500"]) else {
        return;
    };
    assert_eq!(row[0], "8", "{row:?}");
    assert_eq!(row[1], "500", "{row:?}");
}

#[test]
fn ib_send_bw_uc() {
    // 4 packets a message at the loopback's MTU of 4096: FIRST, MIDDLE, LAST; 3.3 MB in
    // all (see `perftest`).
    let Some(row) = perftest("ib_send_bw", "UC", 3, 18972, &["-s", "16384", "-n", "200"]) else {
        return;
    };
    assert_eq!(row[0], "16384", "{row:?}");
    assert_eq!(row[1], "200", "{row:?}");
}

#[test]
fn ib_write_bw_uc() {
    let Some(row) = perftest("ib_write_bw", "UC", 4, 18973, &["-s", "65536", "-n", "300"]) else {
        return;
    };
    assert_eq!(row[0], "65536", "{row:?}");
    assert_eq!(row[1], "300", "{row:?}");
}
