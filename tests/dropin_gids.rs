//! The GID table as rxe's, seen by Debian 12's unmodified programs on the drop-in, on an
//! interface like the lab's (src/verbs/gids.rs): `eth0` (a veth whose peer is up, so it
//! has a carrier) in a network namespace of its own with the lab guest's MAC 52:54:00:4c:ab:01, 198.18.0.11/24 and
//! 2001:db8:4791::11/64. rxe on that interface (Debian 12, kernel 6.1) shows GID 0
//! `fe80::5054:ff:fe4c:ab01`, 1 `::ffff:198.18.0.11`, 2 `2001:db8:4791::11`, all RoCE v2
//! (/work/shared/captures: `-g 1` IPv4, `-g 2` IPv6); zero set-up shows the same.
//!
//! - `ibv_devinfo -v` lists that table;
//! - `ibv_rc_pingpong -g 1` between two programs on a device serving the IPv6 address
//!   (`rxe0=2001:db8:4791::11`), whose table puts that address at index 1: IPv6 GIDs end
//!   to end (a device serves one address: rxe's `-g 2` for IPv6 is, on the zero-set-up
//!   device that serves the IPv4 address, listed but refused at modify_qp);
//! - `ibv_asyncwatch` sees IBV_EVENT_GID_CHANGE when an address goes or comes.
//!
//! Root only (a namespace): SKIPPED loudly otherwise, a failure under CI. TCP ports
//! 18950-18959.

mod common;

use common::dropin::{self, show, stdout};
use common::netns::{self, Netns};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

/// A namespace (`roceemu-PREFIX-PID`) with the lab's guest interface as `eth0`.
fn lab_netns(tag: &str, prefix: &str) -> Option<(Netns, &'static dropin::Env)> {
    if !nix::unistd::geteuid().is_root() {
        netns::skip(tag, "needs root for a network namespace");
        return None;
    }
    let env = dropin::setup(tag)?;
    let ns = Netns::new(prefix);
    ns.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "eth9",
    ]);
    ns.ip(&["link", "set", "eth9", "up"]);
    ns.ip(&["link", "set", "eth0", "address", "52:54:00:4c:ab:01"]);
    ns.ip(&["addr", "add", "198.18.0.11/24", "dev", "eth0"]);
    ns.ip(&[
        "addr",
        "add",
        "2001:db8:4791::11/64",
        "dev",
        "eth0",
        "nodad",
    ]);
    ns.ip(&["link", "set", "eth0", "up"]);
    // The link-local address comes with the link (EUI-64), after DAD is skipped or done.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !addrs(&ns).contains("fe80::5054:ff:fe4c:ab01") {
        assert!(
            Instant::now() < deadline,
            "no link-local address: {}",
            addrs(&ns)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some((ns, env))
}

fn addrs(ns: &Netns) -> String {
    let out = Command::new("ip")
        .args(["-n", &ns.0, "addr", "show", "dev", "eth0"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A Debian program in the namespace on the drop-in; `devices`: ROCE_EMU_DEVICES, or zero
/// set-up.
fn program(
    ns: &Netns,
    env: &dropin::Env,
    name: &str,
    devices: Option<&str>,
    args: &[&str],
) -> Command {
    let mut c = ns.cmd(env.bin(name).to_str().unwrap());
    c.args(args)
        .env("LD_LIBRARY_PATH", env.library_path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match devices {
        Some(d) => c.env("ROCE_EMU_DEVICES", d),
        None => c.env_remove("ROCE_EMU_DEVICES"),
    };
    c
}

#[test]
fn devinfo_lists_rxes_table_for_the_labs_interface() {
    let Some((ns, env)) = lab_netns("dropin_gids devinfo", "gids-info") else {
        return;
    };
    let out = program(&ns, env, "ibv_devinfo", None, &["-v", "-d", "rxe0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = stdout(&out);
    let gids: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("GID["))
        .collect();
    assert_eq!(
        gids,
        [
            "GID[  0]:\t\tfe80::5054:ff:fe4c:ab01, RoCE v2",
            "GID[  1]:\t\t::ffff:198.18.0.11, RoCE v2",
            "GID[  2]:\t\t2001:db8:4791::11, RoCE v2",
        ],
        "{text}"
    );
}

/// Both programs on rxe0 = the IPv6 address: `-g 1` is it (the device's address first),
/// and the packets are RoCE v2 over IPv6 (the GIDs printed are IPv6). The IPv4 address is
/// listed (index 2) but not served: `-g 2` fails at modify_qp.
#[test]
fn rc_pingpong_over_an_ipv6_gid() {
    let Some((ns, env)) = lab_netns("dropin_gids ipv6", "gids-v6") else {
        return;
    };
    let dev = Some("rxe0=2001:db8:4791::11");
    let args = ["-d", "rxe0", "-g", "1", "-p", "18950", "-n", "50"];
    let mut server = program(&ns, env, "ibv_rc_pingpong", dev, &args);
    let mut cargs = args.to_vec();
    cargs.push("127.0.0.1");
    let mut client = program(&ns, env, "ibv_rc_pingpong", dev, &cargs);
    let server = server.spawn().unwrap();
    assert!(
        dropin::wait_listening_in(Some(server.id()), 18950, Duration::from_secs(20)),
        "no server"
    );
    let c = dropin::finish(client.spawn().unwrap(), LIMIT, "client");
    let s = dropin::finish(server, LIMIT, "server");
    for (who, o) in [("server", &s), ("client", &c)] {
        assert!(o.status.success(), "{who}: {}", show(o));
        let text = stdout(o);
        assert!(text.contains("50 iters in"), "{who}: {text}");
        assert!(
            text.contains("GID 2001:db8:4791::11"),
            "{who}: not the IPv6 GID: {text}"
        );
    }

    // The interface's IPv4 address is GID 2 of this device, which does not send from it.
    let args = ["-d", "rxe0", "-g", "2", "-p", "18951", "-n", "5"];
    let server = program(&ns, env, "ibv_rc_pingpong", dev, &args)
        .env("ROCE_EMU_LOG", "debug")
        .spawn()
        .unwrap();
    assert!(
        dropin::wait_listening_in(Some(server.id()), 18951, Duration::from_secs(20)),
        "no server"
    );
    let mut cargs = args.to_vec();
    cargs.push("127.0.0.1");
    let c = dropin::finish(
        program(&ns, env, "ibv_rc_pingpong", dev, &cargs)
            .spawn()
            .unwrap(),
        LIMIT,
        "client -g 2",
    );
    let s = dropin::finish(server, LIMIT, "server -g 2");
    assert!(!s.status.success() && !c.status.success(), "{}", show(&s));
    let err = String::from_utf8_lossy(&s.stderr);
    assert!(
        err.contains("Failed to modify QP to RTR")
            && err.contains("GID index 2 is ::ffff:198.18.0.11")
            && err.contains("use GID index 1 (-g 1)"),
        "{}",
        show(&s)
    );
}

/// Kills a child (ours, by PID) however the test ends; its stdout lines, as they come.
struct Watch {
    child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Watch {
    fn new(mut child: std::process::Child) -> Watch {
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let l = std::sync::Arc::clone(&lines);
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        Watch { child, lines }
    }

    /// Waits (at most `limit`) until `n` lines hold `what`; the lines so far.
    fn until(&self, what: &str, n: usize, limit: Duration) -> Result<Vec<String>, Vec<String>> {
        let deadline = Instant::now() + limit;
        loop {
            let l = self.lines.lock().unwrap().clone();
            if l.iter().filter(|x| x.contains(what)).count() >= n {
                return Ok(l);
            }
            if Instant::now() > deadline {
                return Err(l);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// An address removed from the interface, then one added: each is an
/// IBV_EVENT_GID_CHANGE on port 1 (the progress thread reads the addresses every second),
/// and nothing else happens while the addresses stay.
#[test]
fn a_gid_that_goes_or_comes_is_an_event() {
    let Some((ns, env)) = lab_netns("dropin_gids event", "gids-ev") else {
        return;
    };
    // ibv_asyncwatch prints with printf: line-buffered through stdbuf, so that each line
    // comes as it is printed.
    let mut c = ns.cmd("stdbuf");
    c.args([
        "-oL",
        env.bin("ibv_asyncwatch").to_str().unwrap(),
        "-d",
        "rxe0",
    ])
    .env("LD_LIBRARY_PATH", env.library_path())
    .env_remove("ROCE_EMU_DEVICES")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    let watch = Watch::new(c.spawn().unwrap());
    const EV: &str = "IBV_EVENT_GID_CHANGE";
    // The device is open (its table read) once it says where its events come from.
    let open = watch.until("async event FD", 1, Duration::from_secs(20));
    assert!(open.is_ok(), "ibv_asyncwatch did not open rxe0: {open:?}");
    ns.ip(&["addr", "del", "2001:db8:4791::11/64", "dev", "eth0"]);
    let one = watch.until(EV, 1, Duration::from_secs(10));
    assert!(one.is_ok(), "no event for a removed address: {one:?}");
    ns.ip(&["addr", "add", "198.18.0.12/24", "dev", "eth0"]);
    let two = watch.until(EV, 2, Duration::from_secs(10));
    assert!(two.is_ok(), "no event for an added address: {two:?}");
    // Two seconds more: no event without a change.
    std::thread::sleep(Duration::from_secs(2));
    let lines = watch.lines.lock().unwrap().clone();
    let events: Vec<&String> = lines.iter().filter(|l| l.contains(EV)).collect();
    assert_eq!(events.len(), 2, "{lines:?}");
    assert!(events.iter().all(|l| l.contains("port 1")), "{lines:?}");
}
