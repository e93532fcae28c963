//! Debian 12's unmodified RDMA programs on the drop-in libibverbs.so.1: ibverbs-utils
//! (ibv_devices, ibv_devinfo, ibv_rc_pingpong) and perftest 4.5, server and client as two
//! processes on this machine, on one address (they share its UDP port). Addresses
//! 127.0.20.x, TCP ports 18800-18899; the zero-set-up test runs in its own namespace.

mod common;

use common::dropin::{self, pair, show, stdout};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// `rxe0` on `127.0.20.N`.
fn dev(n: u8) -> String {
    format!("rxe0=127.0.20.{n}")
}

#[test]
fn ibv_devices_and_devinfo_show_the_device_as_rxe_does() {
    let Some(env) = dropin::setup("ibv_devices_and_devinfo") else {
        return;
    };
    let out = env.cmd("ibv_devices", &dev(1), &[]).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = stdout(&out);
    assert!(text.contains("rxe0"), "{text}");
    // The node GUID is lo's MAC as EUI-64 (all zero MAC: 0200:00ff:fe00:0000).
    assert!(text.contains("020000fffe000000"), "{text}");

    let out = env.cmd("ibv_devinfo", &dev(1), &["-v"]).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = stdout(&out);
    for want in [
        "hca_id:\trxe0",
        "vendor_id:\t\t\t0xffffff",
        "PORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        // rxe's table (src/verbs/gids.rs): the link-local default GID of the MAC (lo's,
        // all zeros), then the device's address: `-g 1` as on rxe.
        "GID[  0]:\t\tfe80::200:ff:fe00:0, RoCE v2",
        "GID[  1]:\t\t::ffff:127.0.20.1, RoCE v2",
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
    ] {
        assert!(text.contains(want), "{want:?} missing:\n{text}");
    }

    // Congestion-control knobs from the environment: a good one opens, a bad one fails
    // the open and says which knob and what is known.
    let out = env
        .cmd("ibv_devinfo", &dev(1), &[])
        .env("ROCE_EMU_CC", "rp_enable=0")
        .env("ROCE_EMU_CC_rxe0", "min_time_between_cnps=0")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let out = env
        .cmd("ibv_devinfo", &dev(1), &[])
        .env("ROCE_EMU_CC_rxe0", "rpg_ai_rate=fast")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("bad value `fast` for `rpg_ai_rate`"),
        "{}",
        show(&out)
    );
}

fn rc_pingpong(tag: &str, port: u16, extra: &[&str]) {
    let Some(env) = dropin::setup(tag) else {
        return;
    };
    let p = port.to_string();
    let mut args = vec!["-d", "rxe0", "-g", "1", "-p", &p, "-n", "200"];
    args.extend_from_slice(extra);
    // Both on one address of their own: the server opens first and starts the address's
    // daemon (`daemon::demand`), the client attaches to it, as two programs on a machine
    // do. One address per test, so each test's daemon and counters are its own.
    let n = (100 + port - 18800) as u8;
    let ip = format!("127.0.20.{n}");
    let mut server = env.cmd("ibv_rc_pingpong", &dev(n), &args);
    let mut cargs = args.clone();
    cargs.push(&ip);
    let mut client = env.cmd("ibv_rc_pingpong", &dev(n), &cargs);
    let (s, c) = pair(&mut server, &mut client, port, LIMIT, tag);
    for (who, o) in [("server", &s), ("client", &c)] {
        let text = stdout(o);
        assert!(text.contains("200 iters in"), "{tag} {who}: {text}");
    }
}

/// Debian's unmodified `ibv_ud_pingpong` (UD QPs, address handles from `-g 1`, the
/// 40-byte GRH slot ahead of every receive), server and client on one address.
fn ud_pingpong(tag: &str, port: u16, extra: &[&str]) {
    let Some(env) = dropin::setup(tag) else {
        return;
    };
    let p = port.to_string();
    let mut args = vec!["-d", "rxe0", "-g", "1", "-p", &p, "-n", "200"];
    args.extend_from_slice(extra);
    let n = (100 + port - 18800) as u8;
    let ip = format!("127.0.20.{n}");
    let mut server = env.cmd("ibv_ud_pingpong", &dev(n), &args);
    let mut cargs = args.clone();
    cargs.push(&ip);
    let mut client = env.cmd("ibv_ud_pingpong", &dev(n), &cargs);
    let (s, c) = pair(&mut server, &mut client, port, LIMIT, tag);
    for (who, o) in [("server", &s), ("client", &c)] {
        let text = stdout(o);
        assert!(text.contains("200 iters in"), "{tag} {who}: {text}");
    }
}

#[test]
fn ibv_ud_pingpong_default_size() {
    ud_pingpong("ud_pingpong", 18870, &[]);
}

#[test]
fn ibv_ud_pingpong_1_byte_with_completion_events() {
    ud_pingpong("ud_pingpong_events", 18871, &["-s", "1", "-e"]);
}

#[test]
fn ibv_rc_pingpong_1_byte_mtu_1024() {
    rc_pingpong("rc_pingpong_1", 18800, &["-s", "1", "-m", "1024"]);
}

#[test]
fn ibv_rc_pingpong_4096_bytes_mtu_1024() {
    rc_pingpong("rc_pingpong_4096", 18801, &["-s", "4096", "-m", "1024"]);
}

#[test]
fn ibv_rc_pingpong_65536_bytes_mtu_4096() {
    rc_pingpong(
        "rc_pingpong_65536_4096",
        18802,
        &["-s", "65536", "-m", "4096"],
    );
}

#[test]
fn ibv_rc_pingpong_65536_bytes_mtu_1024() {
    rc_pingpong(
        "rc_pingpong_65536_1024",
        18803,
        &["-s", "65536", "-m", "1024"],
    );
}

#[test]
fn ibv_rc_pingpong_1_byte_mtu_4096() {
    rc_pingpong("rc_pingpong_1_4096", 18806, &["-s", "1", "-m", "4096"]);
}

#[test]
fn ibv_rc_pingpong_4096_bytes_mtu_4096() {
    rc_pingpong(
        "rc_pingpong_4096_4096",
        18807,
        &["-s", "4096", "-m", "4096"],
    );
}

#[test]
fn ibv_rc_pingpong_with_completion_events() {
    rc_pingpong("rc_pingpong_events", 18804, &["-s", "4096", "-e"]);
}

#[test]
fn ibv_rc_pingpong_new_send_api() {
    // -N: ibv_create_qp_ex, ibv_wr_start/ibv_wr_send/ibv_wr_set_sge/ibv_wr_complete.
    rc_pingpong("rc_pingpong_new_api", 18805, &["-s", "4096", "-N"]);
}

/// perftest `tool ARGS` between two processes; the client's result table row.
fn perftest(tag: &str, tool: &str, port: u16, args: &[&str]) -> Option<String> {
    let env = dropin::setup(tag)?;
    let p = port.to_string();
    let mut a = vec!["-d", "rxe0", "-p", &p];
    a.extend_from_slice(args);
    let server_ip = format!("127.0.20.{}", 4 + (port % 50) * 2);
    let mut ca = a.clone();
    ca.push(&server_ip);
    // perftest calibrates its cycle counter against the clock before it reports, and
    // gives up ("Correlation coefficient r^2: ... < 0.9", "Can't produce a report") when
    // the CPU is too busy for a steady sample: a fault of the measurement on a loaded
    // 2-core machine, not of the NIC. Such a pair is run again (at most twice), loudly.
    let mut tries = 0;
    let (s, c) = loop {
        tries += 1;
        let mut server = env.cmd(tool, &dev(4 + (port % 50) as u8 * 2), &a);
        let mut client = env.cmd(tool, &dev(4 + (port % 50) as u8 * 2), &ca);
        let (s, c) = dropin::run_pair(&mut server, &mut client, port, LIMIT, tag);
        if s.status.success() && c.status.success() {
            break (s, c);
        }
        let calibration = [&s, &c]
            .iter()
            .any(|o| String::from_utf8_lossy(&o.stderr).contains("Can't produce a report"));
        assert!(
            calibration && tries < 3,
            "{tag}\n--- server: {}\n--- client: {}",
            show(&s),
            show(&c)
        );
        eprintln!(
            "*** {tag}: perftest could not calibrate its clock (CPU too busy); running the pair again ({tries} of 3)"
        );
    };
    let (stext, ctext) = (stdout(&s), stdout(&c));
    // The result row: the first number on it is the message size.
    let row = ctext
        .lines()
        .chain(stext.lines())
        .find(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 3 && f[0].parse::<u64>().is_ok() && f[1].parse::<f64>().is_ok()
        })
        .unwrap_or_else(|| panic!("{tag}: no result row\n{ctext}\n{stext}"))
        .to_string();
    Some(row)
}

#[test]
fn perftest_bandwidth_tools_complete() {
    for (i, (tool, extra)) in [
        ("ib_write_bw", vec!["-s", "65536", "-n", "300"]),
        ("ib_read_bw", vec!["-s", "65536", "-n", "300"]),
        ("ib_send_bw", vec!["-s", "65536", "-n", "300"]),
        ("ib_atomic_bw", vec!["-A", "CMP_AND_SWAP", "-n", "300"]),
        ("ib_atomic_bw", vec!["-A", "FETCH_AND_ADD", "-n", "300"]),
        (
            "ib_write_bw",
            vec!["-s", "4096", "-n", "300", "--use_old_post_send"],
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let tag = format!("{tool} {}", extra.join(" "));
        let Some(row) = perftest(&tag, tool, 18810 + i as u16, &extra) else {
            return;
        };
        let size: u64 = row.split_whitespace().next().unwrap().parse().unwrap();
        let expect = if tool == "ib_atomic_bw" {
            8
        } else if extra.contains(&"4096") {
            4096
        } else {
            65536
        };
        assert_eq!(size, expect, "{tag}: {row}");
    }
}

#[test]
fn perftest_latency_tools_complete() {
    for (i, tool) in [
        "ib_write_lat",
        "ib_send_lat",
        "ib_read_lat",
        "ib_atomic_lat",
    ]
    .into_iter()
    .enumerate()
    {
        let Some(row) = perftest(tool, tool, 18830 + i as u16, &["-n", "200"]) else {
            return;
        };
        let f: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(f[1], "200", "{tool}: {row}");
    }
}

#[test]
fn roce_emu_run_starts_an_unmodified_program() {
    let Some(env) = dropin::setup("roce_emu_run") else {
        return;
    };
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_roce-emu"))
        .args(["run", "--devices", "rxe7=127.0.20.99", "--"])
        .arg(env.bin("ibv_devices"))
        .env("ROCE_EMU_DROPIN_DIR", &env.lib)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(stdout(&out).contains("rxe7"), "{}", show(&out));

    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_roce-emu"))
        .args(["run", "--devices", "rxe7", "--", "true"])
        .env("ROCE_EMU_DROPIN_DIR", &env.lib)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", show(&bad));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("write NAME=ADDR"));
}

#[test]
fn zero_set_up_two_programs_on_one_machine_reach_each_other() {
    // No ROCE_EMU_DEVICES: the device list is this machine's interfaces. In a namespace of
    // its own the machine is `lo` alone, so the device is rxe_lo on 127.0.0.1.
    if !nix::unistd::geteuid().is_root() {
        common::netns::skip("zero_set_up", "needs root for a network namespace");
        return;
    }
    let Some(env) = dropin::setup("zero_set_up") else {
        return;
    };
    let ns = common::netns::Netns::new("dropin");
    let run = |args: &[&str]| {
        let mut c = ns.cmd(env.bin("ibv_rc_pingpong").to_str().unwrap());
        c.args(args)
            .env("LD_LIBRARY_PATH", env.library_path())
            .env_remove("ROCE_EMU_DEVICES")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    };
    let devinfo = ns
        .cmd(env.bin("ibv_devinfo").to_str().unwrap())
        .env("LD_LIBRARY_PATH", env.library_path())
        .env_remove("ROCE_EMU_DEVICES")
        .output()
        .unwrap();
    assert!(
        stdout(&devinfo).contains("hca_id:\trxe_lo"),
        "{}",
        show(&devinfo)
    );
    let server = run(&["-g", "1", "-n", "100"]).spawn().unwrap();
    // ibv_rc_pingpong's default TCP port, in the namespace's table (the server's view).
    assert!(
        dropin::wait_listening_in(Some(server.id()), 18515, Duration::from_secs(20)),
        "the server never listened"
    );
    let client = run(&["-g", "1", "-n", "100", "127.0.0.1"]).spawn().unwrap();
    let c = dropin::finish(client, LIMIT, "zero set-up client");
    let s = dropin::finish(server, LIMIT, "zero set-up server");
    assert!(
        c.status.success() && s.status.success(),
        "{}\n{}",
        show(&s),
        show(&c)
    );
    assert!(stdout(&c).contains("100 iters in"), "{}", show(&c));
}

#[test]
fn unmodified_programs_attached_to_a_daemon() {
    // ROCE_EMU_DEVICES=rxe0=daemon:SOCKET: the drop-in's device is a lease from
    // `roce-emu daemon` (here a UDP port on 127.0.20.200), the programs' engines in their
    // own processes, the port shared.
    let Some(env) = dropin::setup("dropin_daemon") else {
        return;
    };
    let socket = std::env::temp_dir().join(format!("roce-emu-dropin-{}.sock", std::process::id()));
    /// Stops the daemon (our child, by PID) however the test ends.
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.0.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = self.0.wait();
        }
    }
    let _daemon = Stop(
        std::process::Command::new(env!("CARGO_BIN_EXE_roce-emu"))
            .args(["daemon", "--port", "udp:127.0.20.200", "--socket"])
            .arg(&socket)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(std::time::Instant::now() < deadline, "no daemon socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let dev = format!("rxe0=daemon:{}", socket.display());
    let devinfo = env.cmd("ibv_devinfo", &dev, &["-v"]).output().unwrap();
    assert!(
        stdout(&devinfo).contains("GID[  1]:\t\t::ffff:127.0.20.200, RoCE v2"),
        "{}",
        show(&devinfo)
    );
    let args = [
        "-d", "rxe0", "-g", "1", "-p", "18808", "-n", "200", "-s", "4096",
    ];
    let mut server = env.cmd("ibv_rc_pingpong", &dev, &args);
    let mut cargs = args.to_vec();
    cargs.push("127.0.20.200");
    let mut client = env.cmd("ibv_rc_pingpong", &dev, &cargs);
    let (s, c) = pair(
        &mut server,
        &mut client,
        18808,
        LIMIT,
        "rc_pingpong via daemon",
    );
    assert!(stdout(&c).contains("200 iters in") && stdout(&s).contains("200 iters in"));
    let a = ["-d", "rxe0", "-p", "18809", "-s", "65536", "-n", "300"];
    let mut server = env.cmd("ib_write_bw", &dev, &a);
    let mut ca = a.to_vec();
    ca.push("127.0.20.200");
    let mut client = env.cmd("ib_write_bw", &dev, &ca);
    let (_, c) = pair(
        &mut server,
        &mut client,
        18809,
        LIMIT,
        "ib_write_bw via daemon",
    );
    assert!(stdout(&c).contains(" 65536      300"), "{}", show(&c));
    // UD datagrams between two programs of the daemon: routed by their DestQP too.
    let u = ["-d", "rxe0", "-g", "1", "-p", "18872", "-n", "200"];
    let mut server = env.cmd("ibv_ud_pingpong", &dev, &u);
    let mut cu = u.to_vec();
    cu.push("127.0.20.200");
    let mut client = env.cmd("ibv_ud_pingpong", &dev, &cu);
    let (s, c) = pair(
        &mut server,
        &mut client,
        18872,
        LIMIT,
        "ud_pingpong via daemon",
    );
    assert!(stdout(&c).contains("200 iters in") && stdout(&s).contains("200 iters in"));
}
