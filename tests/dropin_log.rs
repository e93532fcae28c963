//! `ROCE_EMU_LOG=debug` on the drop-in says why things a new user meets fail, with no
//! colour codes when stderr is not a terminal: a GID index the device does not have or
//! does not send from (the device's GIDs named, and the index to use), and a request over the responder's path MTU (two unmodified
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
            &["-d", "rxe0", "-g", "1024", "-p", "19130"],
        )
        .env("ROCE_EMU_LOG", "debug")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("can't read sgid of index 1024"),
        "{}",
        show(&out)
    );
    assert!(
        err.contains("rxe0: no GID at port 1 index 1024")
            && err.contains("GID[0] = fe80::200:ff:fe00:0")
            && err.contains("GID[1] = ::ffff:127.0.55.1 (the device's address)"),
        "{}",
        show(&out)
    );
    assert!(err.contains("DEBUG"), "{err}");
    no_escape("gid", &out.stderr);
}

/// `-g 0` is rxe's link-local default GID (fe80:: + the MAC's EUI-64): listed, readable,
/// but not an address the device sends from, so connecting with it fails at modify_qp
/// (EINVAL, "Failed to modify QP to RTR") and the library says which index to use, once,
/// without being asked (`ROCE_EMU_LOG` unset): the likeliest first-hour mistake.
#[test]
fn the_link_local_gid_is_refused_at_modify_qp_naming_the_index_to_use() {
    let Some(env) = dropin::setup("dropin_log gid0") else {
        return;
    };
    let (sip, cip) = ("127.0.55.4", "127.0.55.5");
    let base = ["-d", "rxe0", "-g", "0", "-p", "19132", "-n", "5"];
    let server = env
        .cmd("ibv_rc_pingpong", &format!("rxe0={sip}"), &base)
        .env_remove("ROCE_EMU_LOG")
        .spawn()
        .unwrap();
    assert!(wait_listening(19132, Duration::from_secs(20)), "no server");
    let mut cargs = base.to_vec();
    cargs.push(sip);
    let client = env
        .cmd("ibv_rc_pingpong", &format!("rxe0={cip}"), &cargs)
        .env_remove("ROCE_EMU_LOG")
        .spawn()
        .unwrap();
    let c = finish(client, LIMIT, "client");
    let s = finish(server, LIMIT, "server");
    // The server connects first (ibv_rc_pingpong's server moves its QP to RTR before it
    // answers), fails, and closes the exchange: the client then fails reading it.
    assert!(!c.status.success(), "client: {}", show(&c));
    assert!(!s.status.success(), "server: {}", show(&s));
    let err = String::from_utf8_lossy(&s.stderr);
    assert!(err.contains("Failed to modify QP to RTR"), "{}", show(&s));
    assert!(
        err.contains(
            "GID index 0 is fe80::200:ff:fe00:0, an address the device does not send from"
        ) && err.contains(&format!("GID[1] = ::ffff:{sip} (the device's address)"))
            && err.contains("use GID index 1 (-g 1)"),
        "{}",
        show(&s)
    );
}

#[test]
fn a_request_over_the_path_mtu_is_logged_by_the_responder() {
    let Some(env) = dropin::setup("dropin_log mtu") else {
        return;
    };
    let (sip, cip) = ("127.0.55.2", "127.0.55.3");
    let base = ["-d", "rxe0", "-g", "1", "-p", "19131", "-n", "5"];
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
