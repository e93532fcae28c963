//! Debian 12's unmodified `ibv_srq_pingpong` on the drop-in libibverbs.so.1: several RC
//! QPs per side (4, and the default 16) receiving through one shared receive queue,
//! server and client as two processes on one address (they share its UDP port), as
//! tests/dropin_debian.rs runs ibv_rc_pingpong; and with zero set-up (no
//! ROCE_EMU_DEVICES) in a namespace of its own. Addresses 127.0.23.x, TCP ports
//! 18950-18959.

mod common;

use common::dropin::{self, pair, stdout};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn srq_pingpong(tag: &str, port: u16, extra: &[&str]) {
    let Some(env) = dropin::setup(tag) else {
        return;
    };
    let p = port.to_string();
    let mut args = vec!["-d", "rxe0", "-g", "1", "-p", &p, "-n", "300"];
    args.extend_from_slice(extra);
    let n = (port - 18950 + 1) as u8;
    let ip = format!("127.0.23.{n}");
    let dev = format!("rxe0={ip}");
    let mut server = env.cmd("ibv_srq_pingpong", &dev, &args);
    let mut cargs = args.clone();
    cargs.push(&ip);
    let mut client = env.cmd("ibv_srq_pingpong", &dev, &cargs);
    let (s, c) = pair(&mut server, &mut client, port, LIMIT, tag);
    for (who, o) in [("server", &s), ("client", &c)] {
        let text = stdout(o);
        assert!(text.contains("300 iters in"), "{tag} {who}: {text}");
    }
    // One line per QP of each side: the QPs asked for, all on the SRQ.
    let qps: usize = extra
        .windows(2)
        .find(|w| w[0] == "-q")
        .map_or(16, |w| w[1].parse().unwrap());
    assert_eq!(stdout(&c).matches("local address").count(), qps, "{tag}");
}

#[test]
fn ibv_srq_pingpong_4_qps() {
    srq_pingpong("srq_pingpong_q4", 18950, &["-q", "4"]);
}

#[test]
fn ibv_srq_pingpong_16_qps_default() {
    srq_pingpong("srq_pingpong_default", 18951, &[]);
}

#[test]
fn ibv_srq_pingpong_65536_bytes_mtu_1024_with_events() {
    srq_pingpong(
        "srq_pingpong_65536_events",
        18952,
        &["-q", "8", "-s", "65536", "-m", "1024", "-e"],
    );
}

#[test]
fn ibv_srq_pingpong_zero_set_up() {
    // As tests/dropin_debian.rs's zero set-up test for RC.
    dropin::pingpong_with_zero_set_up("srq_zero_set_up", "dropinsrq", "ibv_srq_pingpong", LIMIT);
}
