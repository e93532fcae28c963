//! Completion timestamps through Debian 12's unmodified `ibv_rc_pingpong -t`: it creates
//! its CQ with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, reads each receive's timestamp with
//! `ibv_wc_read_completion_ts` and prints the clock cycles between receive completions
//! (ticks of `hca_core_clock`, 1 GHz here: nanoseconds). Before completion timestamps it
//! failed at CQ creation. Address 127.0.20.139, TCP port 18839 (the block of
//! tests/dropin_debian.rs).

mod common;

use common::dropin::{self, pair, stdout};
use std::time::Duration;

#[test]
fn ibv_rc_pingpong_with_completion_timestamps() {
    let tag = "rc_pingpong_timestamps";
    let Some(env) = dropin::setup(tag) else {
        return;
    };
    let (port, ip) = (18839u16, "127.0.20.139");
    let dev = format!("rxe0={ip}");
    let p = port.to_string();
    let args = ["-d", "rxe0", "-g", "1", "-p", &p, "-n", "200", "-t"];
    let mut server = env.cmd("ibv_rc_pingpong", &dev, &args);
    let mut cargs = args.to_vec();
    cargs.push(ip);
    let mut client = env.cmd("ibv_rc_pingpong", &dev, &cargs);
    let (s, c) = pair(&mut server, &mut client, port, Duration::from_secs(60), tag);
    for (who, o) in [("server", &s), ("client", &c)] {
        let text = stdout(o);
        assert!(text.contains("200 iters in"), "{who}: {text}");
        // "Average receive completion clock cycles = N": the mean gap between receives,
        // in ns; a round trip here takes between a microsecond and a second.
        let avg = text
            .lines()
            .find_map(|l| l.strip_prefix("Average receive completion clock cycles = "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{who}: no average: {text}"));
        assert!((1e3..1e9).contains(&avg), "{who}: average {avg} ns: {text}");
    }
}
