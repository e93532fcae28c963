//! The daemon started on demand (`daemon::demand`): NICs that share an address attach to
//! the daemon of `udp:IP`, which the first of them starts, detached. Two contexts in one
//! process, two processes, the first leaving or killed while the second goes on, the
//! daemon leaving after its idle time, and starters racing. Every test uses its own
//! 127.0.15.x addresses, so they run in parallel with each other and with the other test
//! files.
//!
//! The two-process tests run this test binary again as the other process (`child_entry`,
//! chosen by `SHARED_PORT_CHILD`), talking over its stdin and stdout.

mod common;

use common::nic::{connect, exchange, pattern, Info, Nic, IOVA, READ_LEN, READ_SRC, RECV_DST};
use common::nic::{SEND_LEN, SEND_SRC, WAIT, WRITE_DST, WRITE_LEN};
use roce_emu::backend::Backend;
use roce_emu::daemon::client::{self, DaemonBackend};
use roce_emu::daemon::demand::{self, Settings};
use roce_emu::engine::{SendOp, WcOpcode};
use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[test]
fn two_contexts_in_one_process_share_an_address() {
    let a = Nic::open("127.0.15.1");
    let b = Nic::open("127.0.15.1");
    let far = Nic::open("127.0.15.3");
    let (qa, qb, qf) = (a.qp(), b.qp(), far.qp());
    // Each leased its own block of QPNs from the daemon (block 0 is never leased).
    assert_ne!(qa.qpn >> 16, 0, "{:#x}", qa.qpn);
    assert_ne!(qa.qpn >> 16, qb.qpn >> 16, "{:#x} {:#x}", qa.qpn, qb.qpn);
    connect(qa, qb);
    exchange(qa, qb, 1);
    // And the first with a NIC on another address: the daemon routes by DestQP.
    let qa2 = a.qp();
    connect(qa2, qf);
    exchange(qa2, qf, 2);
    let (sa, sb) = (a.stats(), b.stats());
    assert!(
        sa.share_received > 0 && sb.share_received > 0,
        "{sa:?} {sb:?}"
    );
    assert_eq!((sa.share_malformed, sb.share_malformed), (0, 0));
}

const CHILD_ENV: &str = "SHARED_PORT_CHILD";

/// The other process, started by this binary with `--exact child_entry`.
struct Peer {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Peer {
    fn spawn(mode: &str, addr: &str) -> Peer {
        Peer::spawn_as(mode, addr, None)
    }

    /// The child, as user `uid` when given (root only).
    fn spawn_as(mode: &str, addr: &str, uid: Option<u32>) -> Peer {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        if let Some(uid) = uid {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(uid);
        }
        // A process group of its own, as a program started from a shell is (a ^C to it
        // must not reach this test).
        use std::os::unix::process::CommandExt as _;
        cmd.process_group(0);
        let mut child = cmd
            .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{mode} {addr}"))
            // A daemon a child starts leaves soon after the test.
            .env(demand::IDLE_VAR, "0.5")
            .env(demand::QUARANTINE_VAR, "0.5")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                // libtest may print "test child_entry ... " first on the same line.
                if let Some(i) = l.find("CHILD ") {
                    if tx.send(l[i + 6..].to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        Peer { child, lines }
    }

    fn expect(&mut self, what: &str) -> String {
        match self.lines.recv_timeout(WAIT) {
            Ok(l) if l.starts_with(what) => l,
            other => panic!("the child said {other:?}, not {what}"),
        }
    }

    fn say(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    fn finish(mut self) {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "the child failed: {st}");
                return;
            }
            assert!(Instant::now() < deadline, "the child did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn info_line(i: Info) -> String {
    format!("INFO {} {} {}", i.ip, i.qpn, i.rkey)
}

fn parse_info(l: &str) -> Info {
    let f: Vec<&str> = l.split_whitespace().collect();
    Info {
        ip: f[1].parse().unwrap(),
        qpn: f[2].parse().unwrap(),
        rkey: f[3].parse().unwrap(),
    }
}

/// Two processes open the same address: they SEND, WRITE and READ to each other through
/// the daemon the first one started.
#[test]
fn two_processes_on_one_address_exchange_messages() {
    let a = Nic::open("127.0.15.6");
    let qa = a.qp();
    let mut peer = Peer::spawn("member", "127.0.15.6");
    let theirs = parse_info(&peer.expect("INFO"));
    assert_ne!(
        theirs.qpn >> 16,
        qa.qpn >> 16,
        "the child leased its own block"
    );
    qa.connect(theirs);
    qa.nic
        .mr
        .write(IOVA + READ_SRC, &pattern(4, READ_LEN))
        .unwrap();
    qa.post_recv();
    peer.say(&info_line(qa.info()));
    peer.expect("READY");
    qa.write(theirs, &pattern(2, WRITE_LEN));
    // The child answers our SEND with its own: its arrival may beat our SEND's ACK.
    qa.nic
        .mr
        .write(IOVA + SEND_SRC, &pattern(1, SEND_LEN))
        .unwrap();
    qa.post(SendOp::Send, SEND_SRC, SEND_LEN).unwrap();
    let mut ops = [qa.poll_one(), qa.poll_one()].map(|c| (c.opcode, c.byte_len));
    ops.sort_by_key(|o| o.0 == WcOpcode::Recv);
    assert_eq!(
        ops,
        [(WcOpcode::Send, SEND_LEN), (WcOpcode::Recv, SEND_LEN)]
    );
    assert_eq!(
        qa.bytes(RECV_DST, SEND_LEN),
        pattern(3, SEND_LEN),
        "the child's SEND"
    );
    peer.expect("DONE");
    peer.finish();
}

/// The process that started the daemon (the child, first on the address) exits, or is
/// killed: the daemon is not its to take along (its own session), and this process's
/// QP to a peer elsewhere goes on; a third context then attaches.
fn the_starter_goes(addr: &str, far: &str, kill: bool) {
    let mut first = Peer::spawn("hub", addr);
    first.expect("READY");
    // The child started the daemon (a daemon of an earlier run still up would make this
    // test prove nothing: the children's daemons leave a second after their last client),
    // in a session of its own.
    let socket = roce_emu::backend::daemon_path::udp_socket(addr.parse().unwrap());
    let pids = daemons_on(&socket);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pids[0])).unwrap();
    // pid (comm) state ppid pgrp session ...
    let f: Vec<u32> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .skip(1)
        .take(3)
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(f[0], first.child.id(), "started by the child: {stat}");
    assert_eq!(
        (f[1], f[2]),
        (pids[0], pids[0]),
        "a session of its own: {stat}"
    );
    let m = Nic::open(addr);
    let far = Nic::open(far);
    let (qm, qf) = (m.qp(), far.qp());
    connect(qm, qf);
    exchange(qm, qf, 1);
    if kill {
        // ^C as a terminal sends it, to the program's whole process group (the daemon it
        // started is in a session of its own: not hit), then SIGKILL: the process gets no
        // say; the kernel closes its sockets.
        let group = nix::unistd::Pid::from_raw(first.child.id() as i32);
        nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGINT).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let _ = first.child.kill();
        first.child.wait().unwrap();
    } else {
        first.say("bye");
        first.finish();
    }
    exchange(qm, qf, 2);
    let third = Nic::open(addr);
    let (q3, qm3) = (third.qp(), m.qp());
    assert_ne!(q3.qpn >> 16, qm.qpn >> 16);
    connect(q3, qm3);
    exchange(q3, qm3, 3);
    exchange(qm, qf, 4);
}

#[test]
fn the_first_exiting_does_not_disturb_the_second() {
    the_starter_goes("127.0.15.7", "127.0.15.8", false);
}

#[test]
fn a_program_killed_leaves_the_other_working() {
    the_starter_goes("127.0.15.4", "127.0.15.5", true);
}

/// Settings for a daemon of the tests' own: its socket and log in a fresh folder.
fn private(test: &str, idle: Duration, quarantine: Duration) -> Settings {
    let dir = std::env::temp_dir().join(format!("roce-emu-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Settings {
        idle,
        quarantine,
        bin: None,
        dir: Some(dir),
    }
}

fn answers(socket: &Path) -> bool {
    client::info_within(socket, Duration::from_millis(500)).is_ok()
}

/// The pids of the `roce-emu daemon` processes listening on `socket`.
fn daemons_on(socket: &Path) -> Vec<u32> {
    let want = socket.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
            args.contains(&&b"daemon"[..]) && args.contains(&want.as_bytes())
        })
        .collect()
}

/// The daemon stays while a process is attached and while its block is in quarantine,
/// then leaves after its idle time: its socket goes, its log says why. The next start
/// gets a new one.
#[test]
fn the_daemon_exits_after_the_idle_time() {
    let ip: IpAddr = "127.0.15.20".parse().unwrap();
    let (idle, quarantine) = (Duration::from_millis(400), Duration::from_millis(600));
    let s = private("idle", idle, quarantine);
    let socket = demand::ensure_udp_with(ip, &s).unwrap();
    assert_eq!(daemons_on(&socket).len(), 1);
    let (mut b, _) = DaemonBackend::connect(&socket).unwrap();
    b.mark_used();
    std::thread::sleep(idle * 2);
    assert!(answers(&socket), "left with a process attached");
    let left = Instant::now();
    drop(b);
    std::thread::sleep(quarantine / 2);
    assert!(answers(&socket), "left with a block in quarantine");
    // Watched without connecting: a connection is a client, which keeps it up.
    while socket.exists() || !daemons_on(&socket).is_empty() {
        assert!(
            left.elapsed() < quarantine + idle + Duration::from_secs(3),
            "still up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(left.elapsed() >= quarantine + idle - Duration::from_millis(50));
    let log = std::fs::read_to_string(socket.with_extension("log")).unwrap();
    assert!(log.contains("stopped: idle"), "{log}");
    let again = demand::ensure_udp_with(ip, &s).unwrap();
    assert_eq!(again, socket);
    assert!(answers(&socket));
}

/// Starters racing on one address end with one daemon, and every one of them gets its
/// socket.
#[test]
fn two_starters_racing_end_with_one_daemon() {
    let ip: IpAddr = "127.0.15.21".parse().unwrap();
    let s = private("race", Duration::from_millis(500), Duration::from_millis(1));
    let start = std::sync::Barrier::new(4);
    let got: Vec<PathBuf> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                sc.spawn(|| {
                    start.wait();
                    demand::ensure_udp_with(ip, &s).unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(got.iter().all(|p| *p == got[0]), "{got:?}");
    // The losers fail at once (the port is taken); one stays.
    let deadline = Instant::now() + WAIT;
    while daemons_on(&got[0]).len() != 1 {
        assert!(Instant::now() < deadline, "{:?}", daemons_on(&got[0]));
        std::thread::sleep(Duration::from_millis(20));
    }
    let (b, at) = DaemonBackend::connect(&got[0]).unwrap();
    assert_eq!(at.port.addrs, [ip]);
    drop(b);
}

/// A daemon that cannot start (its address is held by a port that is not a daemon's)
/// is a prompt error that names its log and what it died of.
#[test]
fn a_daemon_that_cannot_start_is_a_clear_error() {
    let ip: IpAddr = "127.0.15.22".parse().unwrap();
    let _held = roce_emu::backend::udp::UdpBackend::bind(ip).unwrap();
    let s = private("held", Duration::from_millis(100), Duration::from_millis(1));
    let start = Instant::now();
    let e = demand::ensure_udp_with(ip, &s).expect_err("4791 is held");
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    let m = e.to_string();
    assert!(m.contains("exited") && m.contains(".log"), "{m}");
    assert!(m.to_lowercase().contains("in use"), "{m}");
}

/// A daemon of the same address in another network namespace (the socket folder is one
/// file system for both) is not ours: we start our own, at a name of our namespace.
#[test]
fn a_daemon_of_another_network_namespace_is_not_joined() {
    if !nix::unistd::geteuid().is_root() {
        common::netns::skip(
            "a_daemon_of_another_network_namespace_is_not_joined",
            "needs root for a network namespace",
        );
        return;
    }
    let ns = common::netns::Netns::new("demand");
    let ip: IpAddr = "127.0.15.23".parse().unwrap();
    let s = private(
        "netns",
        Duration::from_millis(300),
        Duration::from_millis(1),
    );
    let dir = s.dir.clone().unwrap();
    let out = ns
        .cmd(std::env::current_exe().unwrap().to_str().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("ensure {ip}"))
        .env("DEMAND_DIR", &dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let theirs = text
        .lines()
        .find_map(|l| Some(PathBuf::from(l.split_once("CHILD SOCKET ")?.1)))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(theirs, dir.join(format!("udp-{ip}.sock")));
    let ours = demand::ensure_udp_with(ip, &s).unwrap();
    assert_ne!(ours, theirs);
    assert!(
        ours.to_string_lossy().contains("-netns-"),
        "{}",
        ours.display()
    );
    assert_eq!((daemons_on(&ours).len(), daemons_on(&theirs).len()), (1, 1));
    // Found again, not started again.
    assert_eq!(demand::ensure_udp_with(ip, &s).unwrap(), ours);
    assert_eq!(daemons_on(&ours).len(), 1);
}

/// Ours went to the namespace's name while another namespace's daemon held the plain
/// one; once that one has gone, ours is still found (at its name), not a second one
/// started at the plain name (which could not bind the address ours holds: pyverbs'
/// suite in a namespace met this as "cannot bind UDP ...: Address already in use").
#[test]
fn ours_is_found_after_the_other_namespace_daemon_left() {
    if !nix::unistd::geteuid().is_root() {
        common::netns::skip(
            "ours_is_found_after_the_other_namespace_daemon_left",
            "needs root for a network namespace",
        );
        return;
    }
    let ns = common::netns::Netns::new("demand2");
    let ip: IpAddr = "127.0.15.24".parse().unwrap();
    // Ours stays a while with no client; theirs (the child's settings) 300 ms.
    let s = private("netns2", Duration::from_secs(5), Duration::from_millis(1));
    let dir = s.dir.clone().unwrap();
    let out = ns
        .cmd(std::env::current_exe().unwrap().to_str().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("ensure {ip}"))
        .env("DEMAND_DIR", &dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let theirs = text
        .lines()
        .find_map(|l| Some(PathBuf::from(l.split_once("CHILD SOCKET ")?.1)))
        .unwrap_or_else(|| panic!("{text}"));
    let ours = demand::ensure_udp_with(ip, &s).unwrap();
    assert_ne!(ours, theirs);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // Watched from /proc: asking it would be a client, which keeps it.
    while !daemons_on(&theirs).is_empty() {
        assert!(std::time::Instant::now() < deadline, "theirs never left");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(demand::ensure_udp_with(ip, &s).unwrap(), ours);
    assert_eq!(daemons_on(&ours).len(), 1);
    assert!(daemons_on(&theirs).is_empty());
}

/// The other process of the two-process tests (does nothing when run as a test).
#[test]
fn child_entry() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (mode, addr) = spec.split_once(' ').unwrap();
    let mut stdin = std::io::stdin().lock().lines();
    // Bounded even if the parent hangs: it kills us, or we give up.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(60));
        std::process::exit(3);
    });
    if mode == "ensure" {
        // The daemon of `addr` for this process (in its namespace), in DEMAND_DIR.
        let s = Settings {
            idle: Duration::from_millis(300),
            quarantine: Duration::from_millis(1),
            bin: None,
            dir: std::env::var_os("DEMAND_DIR").map(PathBuf::from),
        };
        match demand::ensure_udp_with(addr.parse().unwrap(), &s) {
            Ok(p) => println!("CHILD SOCKET {}", p.display()),
            Err(e) => println!("CHILD ERROR {e}"),
        }
        return;
    }
    let n = Nic::open(addr);
    match mode {
        "hub" => {
            let _q = n.qp();
            println!("CHILD READY");
            // Until told to go (or killed), then out as a program returns from main.
            let _ = stdin.next();
        }
        "member" => {
            let q = n.qp();
            n.mr.write(IOVA + WRITE_DST, &[0; WRITE_LEN as usize])
                .unwrap();
            println!("CHILD {}", info_line(q.info()));
            let theirs = parse_info(&stdin.next().unwrap().unwrap());
            q.connect(theirs);
            q.post_recv();
            println!("CHILD READY");
            assert_eq!(q.recv(), pattern(1, SEND_LEN), "the parent's SEND");
            // The WRITE went before the SEND on one RC connection: it has landed.
            assert_eq!(q.bytes(WRITE_DST, WRITE_LEN), pattern(2, WRITE_LEN));
            q.send(&pattern(3, SEND_LEN));
            assert_eq!(q.read(theirs, READ_LEN), pattern(4, READ_LEN));
            println!("CHILD DONE");
        }
        _ => panic!("unknown child mode {mode}"),
    }
}
