//! `ROCE_EMU_LOG=debug` on the drop-in says why things a new user meets fail, with no
//! colour codes when stderr is not a terminal: a GID index the device does not have (the
//! device's GIDs named), and a request over the responder's path MTU (two unmodified
//! Debian 12 `ibv_rc_pingpong` with mismatched MTUs). Addresses 127.0.55.x, TCP ports
//! 19130-19139. (The R_Key refusal's line is checked in `responder_log`.)

mod common;

use common::dropin::{self, finish, show, wait_listening};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

fn no_escape(tag: &str, bytes: &[u8]) {
    assert!(
        !bytes.contains(&0x1b),
        "{tag}: an ESC byte (colour code) in a log written to a pipe:\n{}",
        String::from_utf8_lossy(bytes)
    );
}

#[test]
fn a_gid_index_out_of_range_names_the_devices_gids() {
    let Some(env) = dropin::setup("dropin_log gid") else {
        return;
    };
    let out = env
        .cmd(
            "ibv_rc_pingpong",
            "rxe0=127.0.55.1",
            &["-d", "rxe0", "-g", "1", "-p", "19130"],
        )
        .env("ROCE_EMU_LOG", "debug")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("can't read sgid of index 1"), "{}", show(&out));
    assert!(
        err.contains("rxe0: no GID at port 1 index 1")
            && err.contains("GID[0] = ::ffff:127.0.55.1")
            && err.contains("-g 0"),
        "{}",
        show(&out)
    );
    assert!(err.contains("DEBUG"), "{err}");
    no_escape("gid", &out.stderr);
}

#[test]
fn a_request_over_the_path_mtu_is_logged_by_the_responder() {
    let Some(env) = dropin::setup("dropin_log mtu") else {
        return;
    };
    let (sip, cip) = ("127.0.55.2", "127.0.55.3");
    let base = ["-d", "rxe0", "-g", "0", "-p", "19131", "-n", "5"];
    let mut sargs = base.to_vec();
    sargs.extend(["-m", "1024"]);
    let mut cargs = base.to_vec();
    cargs.extend(["-m", "2048", sip]);
    let server = env
        .cmd("ibv_rc_pingpong", &format!("rxe0={sip}"), &sargs)
        .env("ROCE_EMU_LOG", "debug")
        .spawn()
        .unwrap();
    assert!(wait_listening(19131, Duration::from_secs(20)), "no server");
    let client = env
        .cmd("ibv_rc_pingpong", &format!("rxe0={cip}"), &cargs)
        .env("ROCE_EMU_LOG", "debug")
        .spawn()
        .unwrap();
    let c = finish(client, LIMIT, "client");
    let s = finish(server, LIMIT, "server");
    let err = String::from_utf8_lossy(&s.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("refused (NAK invalid request)"))
        .unwrap_or_else(|| panic!("no refusal line\n--- server: {}", show(&s)));
    assert!(
        line.contains("QP 0x")
            && line.contains("2048 bytes of payload with path MTU 1024")
            && line.contains("over the path MTU"),
        "{line}"
    );
    assert!(
        String::from_utf8_lossy(&c.stderr).contains("remote invalid request error (9)"),
        "{}",
        show(&c)
    );
    no_escape("server", &s.stderr);
    no_escape("client", &c.stderr);
}
