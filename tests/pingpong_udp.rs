//! `roce-emu pingpong` as server and client in two processes over UDP on loopback: every
//! size and MTU, with and without `-c`, both sides print rc_pingpong's two result lines
//! with the right counts and exit 0; and the failures (no server, a message larger than
//! the peer's buffer, a silent peer, a bad MTU) are clear errors within bounded time.
//!
//! Each test uses its own 127.0.0.x addresses and TCP ports, so they run in parallel.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
mod common;

use common::proc::{self, finish, strings, text};
use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// Messages per run: enough to loop over the receive refill, short enough for debug builds.
const ITERS: u32 = 40;

fn spawn(args: &[String]) -> Child {
    proc::spawn("pingpong", args)
}

/// Runs a server on `server_ip` and a client on `client_ip` with the same `args`.
/// `None` addresses use the defaults (no --bind; the client connects to 127.0.0.1).
fn pair(
    server_ip: Option<&str>,
    client_ip: Option<&str>,
    port: u16,
    server_args: &[&str],
    client_args: &[&str],
) -> (Output, Output) {
    let port = port.to_string();
    let mut s = strings(&["-p", &port, "--wait", "15", "--timeout", "5"]);
    if let Some(ip) = server_ip {
        s.extend(strings(&["--bind", ip]));
    }
    s.extend(strings(server_args));
    let server = spawn(&s);
    let mut c = strings(&["-p", &port, "--wait", "10", "--timeout", "5"]);
    if let Some(ip) = client_ip {
        c.extend(strings(&["--bind", ip]));
    }
    c.extend(strings(client_args));
    c.push(server_ip.unwrap_or("127.0.0.1").to_string());
    let client = spawn(&c);
    let client = finish(client, Duration::from_secs(20), "client");
    let server = finish(server, Duration::from_secs(20), "server");
    (server, client)
}

/// A `%.2f` number.
fn is_fixed2(t: &str) -> bool {
    let Some((int, frac)) = t.split_once('.') else {
        return false;
    };
    !int.is_empty() && int.bytes().all(|b| b.is_ascii_digit()) && frac.len() == 2 && {
        frac.bytes().all(|b| b.is_ascii_digit())
    }
}

/// Checks rc_pingpong's two result lines and returns usec/iter.
fn check_results(who: &str, out: &Output, size: u64, iters: u32) -> f64 {
    let (stdout, stderr) = text(out);
    assert!(
        out.status.success(),
        "{who} exited {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let bytes_line = stdout
        .lines()
        .find(|l| l.contains(" bytes in "))
        .unwrap_or_else(|| panic!("{who}: no bytes line in\n{stdout}"));
    let w: Vec<&str> = bytes_line.split(' ').collect();
    // "%lld bytes in %.2f seconds = %.2f Mbit/sec"
    assert_eq!(w.len(), 8, "{who}: {bytes_line:?}");
    assert_eq!(
        w[0],
        (size * u64::from(iters) * 2).to_string(),
        "{bytes_line:?}"
    );
    assert_eq!(&w[1..3], ["bytes", "in"]);
    assert!(is_fixed2(w[3]), "{bytes_line:?}");
    assert_eq!(&w[4..6], ["seconds", "="]);
    assert!(is_fixed2(w[6]), "{bytes_line:?}");
    assert_eq!(w[7], "Mbit/sec");
    let iters_line = stdout
        .lines()
        .find(|l| l.contains(" iters in "))
        .unwrap_or_else(|| panic!("{who}: no iters line in\n{stdout}"));
    // "%d iters in %.2f seconds = %.2f usec/iter"
    let w: Vec<&str> = iters_line.split(' ').collect();
    assert_eq!(w.len(), 8, "{who}: {iters_line:?}");
    assert_eq!(w[0], iters.to_string());
    assert_eq!(&w[1..3], ["iters", "in"]);
    assert!(is_fixed2(w[3]) && is_fixed2(w[6]), "{iters_line:?}");
    assert_eq!(&w[4..6], ["seconds", "="]);
    assert_eq!(w[7], "usec/iter");
    assert!(!stdout.contains("invalid data"), "{who}: {stdout}");
    w[6].parse().unwrap()
}

/// Every size at one MTU, with or without -c, on its own addresses and ports.
fn matrix(server_ip: &str, client_ip: &str, port: u16, mtu: u32, chk: bool) {
    let mtu = mtu.to_string();
    for (k, size) in [1u64, 64, 1024, 4096, 5000].into_iter().enumerate() {
        let size_s = size.to_string();
        let n = ITERS.to_string();
        let mut args = vec!["-s", &size_s, "-m", &mtu, "-n", &n, "-r", "16"];
        if chk {
            args.push("-c");
        }
        let (server, client) = pair(
            Some(server_ip),
            Some(client_ip),
            port + k as u16,
            &args,
            &args,
        );
        let s = check_results("server", &server, size, ITERS);
        let c = check_results("client", &client, size, ITERS);
        eprintln!("-s {size} -m {mtu} -c {chk}: server {s} usec/iter, client {c} usec/iter");
    }
}

#[test]
fn mtu_1024() {
    matrix("127.0.0.10", "127.0.0.11", 18600, 1024, false);
}

#[test]
fn mtu_1024_chk() {
    matrix("127.0.0.12", "127.0.0.13", 18610, 1024, true);
}

#[test]
fn mtu_4096() {
    matrix("127.0.0.14", "127.0.0.15", 18620, 4096, false);
}

#[test]
fn mtu_4096_chk() {
    matrix("127.0.0.16", "127.0.0.17", 18630, 4096, true);
}

/// No --bind: the server takes 127.0.0.1, the client of a loopback server 127.0.0.2; the
/// GIDs printed are those addresses IPv4-mapped. rc_pingpong's defaults otherwise (-s 4096).
#[test]
fn default_addresses() {
    let (server, client) = pair(None, None, 18640, &["-n", "20"], &["-n", "20"]);
    check_results("server", &server, 4096, 20);
    check_results("client", &client, 4096, 20);
    let (s, _) = text(&server);
    let (c, _) = text(&client);
    // A QP of the block the daemon of the address leased (`daemon::lease`: block 0 is
    // never leased).
    let qpn = |out: &str, side: &str| {
        let at = out
            .find(&format!("  {side} LID 0x0000, QPN 0x"))
            .unwrap_or_else(|| panic!("{out}"));
        let hex = &out[at + side.len() + 21..][..6];
        u32::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("{hex}: {out}"))
    };
    for side in ["local address: ", "remote address:"] {
        let q = qpn(&s, side);
        assert!(q >> 16 != 0, "{q:#x}: {s}");
    }
    assert!(s.contains(", GID ::ffff:127.0.0.1\n"), "{s}");
    assert!(s.contains(", GID ::ffff:127.0.0.2\n"), "{s}");
    assert!(c.contains(", GID ::ffff:127.0.0.2\n"), "{c}");
}

/// A port nothing listens on.
fn free_port() -> u16 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn no_server_is_a_bounded_clear_error() {
    let port = free_port().to_string();
    let t = Instant::now();
    let client = spawn(&strings(&[
        "-p",
        &port,
        "--wait",
        "1",
        "--bind",
        "127.0.0.20",
        "127.0.0.1",
    ]));
    let out = finish(client, Duration::from_secs(10), "client");
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    assert!(
        stderr.starts_with(&format!(
            "roce-emu pingpong: could not connect to 127.0.0.1:{port} (127.0.0.1:{port}) within 1 s"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("start the server first"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// The client's message is larger than the server's receive buffer: the server's receive
/// completes with a local length error, the client's send with remote invalid request.
#[test]
fn message_larger_than_the_peer_can_take_fails_clearly() {
    let (server, client) = pair(
        Some("127.0.0.22"),
        Some("127.0.0.23"),
        18650,
        &["-s", "1024", "-n", "5"],
        &["-s", "5000", "-n", "5"],
    );
    let (_, s) = text(&server);
    let (_, c) = text(&client);
    assert_eq!(server.status.code(), Some(1), "{s}");
    assert_eq!(client.status.code(), Some(1), "{c}");
    assert!(
        s.starts_with("roce-emu pingpong: receive completion failed: local length error"),
        "{s}"
    );
    assert!(s.contains("give both sides the same -s"), "{s}");
    assert!(
        c.starts_with("roce-emu pingpong: send completion failed: remote invalid request error"),
        "{c}"
    );
}

/// Different -m on the two sides: the larger packets are refused, both sides fail.
#[test]
fn different_mtus_fail_clearly() {
    let (server, client) = pair(
        Some("127.0.0.24"),
        Some("127.0.0.25"),
        18655,
        &["-m", "1024", "-n", "5"],
        &["-m", "4096", "-n", "5"],
    );
    let (_, s) = text(&server);
    let (_, c) = text(&client);
    assert_eq!(server.status.code(), Some(1), "{s}");
    assert_eq!(client.status.code(), Some(1), "{c}");
    assert!(s.contains("-m 1024"), "{s}");
    assert!(c.contains("remote invalid request error"), "{c}");
    assert!(c.contains("-m not 4096"), "{c}");
}

/// A client that connects and never sends its record: the server gives up after --timeout.
#[test]
fn silent_peer_times_out() {
    let port = 18660u16;
    let server = spawn(&strings(&[
        "-p",
        &port.to_string(),
        "--wait",
        "10",
        "--timeout",
        "1",
        "--bind",
        "127.0.0.26",
    ]));
    let t = Instant::now();
    let sock = loop {
        match TcpStream::connect((Ipv4Addr::LOCALHOST, port)) {
            Ok(s) => break s,
            Err(_) if t.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("server never listened: {e}"),
        }
    };
    let out = finish(server, Duration::from_secs(10), "server");
    drop(sock);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("roce-emu pingpong: no answer from the peer 127.0.0.1:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("within 1 s while reading its address"),
        "{stderr}"
    );
}

#[test]
fn bad_mtu_is_an_error_message() {
    let out = finish(
        spawn(&strings(&["-m", "1500"])),
        Duration::from_secs(10),
        "pingpong",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr.trim_end(),
        "roce-emu pingpong: -m 1500 is not a path MTU: use 256, 512, 1024, 2048 or 4096 \
         (the same on both sides)"
    );
}

/// `-c` on the server only: the client's buffer keeps its 0x7b in byte 0 of each page, and
/// the server says so as rc_pingpong does ("invalid data in page N"), then fails.
#[test]
fn chk_catches_a_client_that_did_not_fill() {
    let (server, client) = pair(
        Some("127.0.0.28"),
        Some("127.0.0.29"),
        18665,
        &["-s", "5000", "-n", "5", "-c"],
        &["-s", "5000", "-n", "5"],
    );
    check_results("client", &client, 5000, 5);
    let (out, err) = text(&server);
    assert_eq!(server.status.code(), Some(1), "{err}");
    assert!(
        out.contains("\ninvalid data in page 0\ninvalid data in page 1\n"),
        "{out}"
    );
    assert!(err.starts_with("roce-emu pingpong: -c: 2 page(s)"), "{err}");
}
