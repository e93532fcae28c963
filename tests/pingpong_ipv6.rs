//! `roce-emu pingpong` over IPv6, end to end, and rc_pingpong's device options.
//!
//! IPv6 loopback has one address, ::1. NICs on one address share it (the last case
//! below), but the first two cases need second and third IPv6 addresses; adding them
//! (`ip -6 addr add`) takes root. The test therefore runs both sides in a network namespace of its own whose `lo`
//! carries ::1, fd00::1 and fd00::2: SKIPPED loudly when not root or without `ip`, and a
//! failure under CI.
//!
//! - server `--bind ::1`, client `--bind fd00::2 ::1`: the server listens on TCP [::] (it
//!   used to listen on 0.0.0.0 only, refusing the client), both GIDs are IPv6;
//! - server `--bind fd00::1`, client `::1` without --bind: the client's default address
//!   for an IPv6 loopback server is ::1 (it used to be 127.0.0.2, an IPv4 GID);
//! - server `--bind ::1`, client `::1` without --bind: both NICs on ::1, sharing it (the
//!   first receives for both and forwards by QPN; it used to be an error).

mod common;

use common::netns::Netns;
use common::proc::{finish, text};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn skip(why: &str) {
    common::netns::skip("pingpong_ipv6", why);
}

/// The namespace with fd00::1 and fd00::2 on its `lo`.
fn v6_netns() -> Netns {
    let ns = Netns::new("v6");
    for a in ["fd00::1/128", "fd00::2/128"] {
        ns.ip(&["-6", "addr", "add", a, "dev", "lo", "nodad"]);
    }
    ns
}

/// `roce-emu pingpong ARGS` started inside the namespace.
fn pingpong(ns: &Netns, args: &[&str]) -> std::process::Child {
    ns.cmd(common::proc::BIN)
        .arg("pingpong")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ip netns exec roce-emu")
}

const LIMIT: Duration = Duration::from_secs(30);

/// A server and a client, each with its own arguments; both waited for within `LIMIT`.
fn pair(ns: &Netns, server: &[&str], client: &[&str]) -> (Output, Output) {
    let common = ["-p", "18700", "-n", "20", "-s", "1024", "--timeout", "5"];
    let mut s = common.to_vec();
    s.extend(["--wait", "10"]);
    s.extend(server);
    let server = pingpong(ns, &s);
    let mut c = common.to_vec();
    c.extend(["--wait", "5"]);
    c.extend(client);
    let client = pingpong(ns, &c);
    let client = finish(client, LIMIT, "client");
    let server = finish(server, LIMIT, "server");
    (server, client)
}

fn assert_ran(who: &str, out: &Output, local_gid: &str, remote_gid: &str) {
    let (stdout, stderr) = text(out);
    assert!(
        out.status.success(),
        "{who} exited {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let line = |what: &str| {
        stdout
            .lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("{who}: no {what:?} line in\n{stdout}"))
            .to_string()
    };
    assert!(
        line("local address:").ends_with(&format!("GID {local_gid}")),
        "{who}:\n{stdout}"
    );
    assert!(
        line("remote address:").ends_with(&format!("GID {remote_gid}")),
        "{who}:\n{stdout}"
    );
    assert!(line(" iters in ").starts_with("20 iters in "), "{stdout}");
}

#[test]
fn pingpong_over_ipv6_loopback() {
    if !nix::unistd::geteuid().is_root() {
        return skip("not root (a second IPv6 loopback address needs a namespace)");
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return skip("ip (iproute2) is not installed");
    }
    let ns = v6_netns();

    // The server on ::1 (TCP on [::]), the client on the second address.
    let (server, client) = pair(&ns, &["--bind", "::1"], &["--bind", "fd00::2", "::1"]);
    assert_ran("server --bind ::1", &server, "::1", "fd00::2");
    assert_ran("client --bind fd00::2 ::1", &client, "fd00::2", "::1");

    // The client's default for a server named ::1: ::1, an IPv6 GID.
    let (server, client) = pair(&ns, &["--bind", "fd00::1"], &["::1"]);
    assert_ran("server --bind fd00::1", &server, "fd00::1", "::1");
    assert_ran("client ::1", &client, "::1", "fd00::1");

    // Both on ::1: the two NICs share the address (the default) through its daemon,
    // started on demand (`daemon::demand`): each leases a QPN block from it.
    let (server, client) = pair(&ns, &["--bind", "::1"], &["::1"]);
    assert_ran("server --bind ::1 (shared)", &server, "::1", "::1");
    assert_ran("client ::1 beside it", &client, "::1", "::1");
}

/// `-d DEV` and `-i PORT`, as rc_pingpong scripts pass them, are accepted (and ignored):
/// this server runs until `--wait` ends it for want of a client, instead of a usage error.
#[test]
fn device_options_are_accepted() {
    let out = Command::new(common::proc::BIN)
        .args(["pingpong", "-d", "rxe0", "-i", "1"])
        .args(["--bind", "127.0.0.81", "-p", "18802"])
        .args(["--wait", "0.3"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no client connected"), "{stderr}");
    let help = Command::new(common::proc::BIN)
        .args(["pingpong", "--help"])
        .output()
        .unwrap();
    let help = text(&help).0;
    assert!(
        help.contains("--ib-dev") && help.contains("--ib-port"),
        "{help}"
    );
}
