//! `-v`/`-vv` (anywhere on the command line) and `RUST_LOG` turn on log lines, which go to
//! stderr only; without them the tools print no log lines at all.

mod common;

use common::proc::{finish, spawn, strings, text, BIN};
use std::process::Command;
use std::time::Duration;

fn capture() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/write_lat_s8.pcap")
}

fn pcap(pre: &[&str], post: &[&str], env: Option<&str>) -> (String, String) {
    let mut c = Command::new(BIN);
    c.args(pre).arg("pcap").args(post).arg(capture());
    c.env_remove("RUST_LOG");
    if let Some(v) = env {
        c.env("RUST_LOG", v);
    }
    let out = c.output().unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{pre:?} {post:?} {env:?}: {e}");
    (o, e)
}

fn has_level(s: &str, level: &str) -> bool {
    s.lines().any(|l| l.contains(&format!(" {level} roce_emu")))
}

#[test]
fn quiet_by_default_and_verbose_on_request() {
    let (out, err) = pcap(&[], &[], None);
    for level in ["INFO", "DEBUG", "TRACE"] {
        assert!(!has_level(&err, level), "{err}");
    }
    assert!(!has_level(&out, "DEBUG"));
    // Before and after the subcommand; logs on stderr, never stdout.
    for (pre, post) in [(&["-vv"][..], &[][..]), (&[][..], &["-v", "-v"][..])] {
        let (out, err) = pcap(pre, post, None);
        assert!(has_level(&err, "DEBUG"), "{pre:?} {post:?}: {err}");
        assert!(!has_level(&out, "DEBUG"), "{out}");
    }
    let (_, err) = pcap(&["-v"], &[], None);
    assert!(!has_level(&err, "DEBUG"), "{err}");
    let (_, err) = pcap(&[], &[], Some("roce_emu=debug"));
    assert!(has_level(&err, "DEBUG"), "{err}");
    // A RUST_LOG that does not parse is named, and the tool still runs.
    let (_, err) = pcap(&[], &[], Some("roce_emu=[nonsense"));
    assert!(err.contains("RUST_LOG") && err.contains("ignored"), "{err}");
}

/// The pingpong exchange's steps are logged at debug on both sides.
#[test]
fn pingpong_exchange_steps_at_debug() {
    let common = [
        "-p",
        "18820",
        "-n",
        "5",
        "-s",
        "64",
        "--timeout",
        "5",
        "-vv",
    ];
    let mut s = strings(&common);
    s.extend(strings(&["--wait", "15", "--bind", "127.0.0.83"]));
    let server = spawn("pingpong", &s);
    let mut c = strings(&common);
    c.extend(strings(&[
        "--wait",
        "10",
        "--bind",
        "127.0.0.84",
        "127.0.0.83",
    ]));
    let client = spawn("pingpong", &c);
    let client = finish(client, Duration::from_secs(30), "client");
    let server = finish(server, Duration::from_secs(30), "server");
    let (cout, cerr) = text(&client);
    let (sout, serr) = text(&server);
    assert!(client.status.success(), "{cout}{cerr}");
    assert!(server.status.success(), "{sout}{serr}");
    for step in [
        "connected to the server",
        "read the server's address record",
        "exchange finished",
        "moving the QP to RTR and RTS",
    ] {
        assert!(cerr.contains(step), "client: no {step:?} in\n{cerr}");
    }
    for step in [
        "listening on TCP 0.0.0.0:18820",
        "client connected",
        "read the client's address record",
        "exchange finished",
    ] {
        assert!(serr.contains(step), "server: no {step:?} in\n{serr}");
    }
    assert!(!has_level(&cout, "DEBUG") && !has_level(&sout, "DEBUG"));
}
