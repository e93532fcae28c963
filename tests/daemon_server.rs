//! The daemon's server against hand-driven processes (the control protocol and the rings
//! by hand, no engine): a UDP daemon on 127.0.31.1 (its own thread), attached "processes"
//! that push and pop raw packets, and a plain UDP socket on 127.0.31.2 as the network.
//! Routing by DestQP block, packets for nobody counted, hairpin between two processes of
//! the daemon, a process's forged source address refused, detach and quarantine, a wrong
//! protocol version refused, PortDown to every process when the daemon stops, and a
//! hairpin that waits for room in its receiver's ring (then drops, past the hold).

use roce_emu::daemon::control::{self, PortInfo, ToDaemon, ToProcess};
use roce_emu::daemon::lease;
use roce_emu::daemon::port::PortSpec;
use roce_emu::daemon::server::{Config, Daemon};
use roce_emu::ring::{Link, LinkFds, Meta, Popped, ProcessEnd};
use socket2::{Domain, SockAddr, Socket, Type};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(5);

struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    socket: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start(ip: &str, tag: &str) -> Running {
    start_holding(ip, tag, roce_emu::daemon::server::HAIRPIN_HOLD)
}

/// [`start`] with packets between two of its processes held for `hold` at most.
fn start_holding(ip: &str, tag: &str, hold: Duration) -> Running {
    let socket =
        std::env::temp_dir().join(format!("roce-emu-test-{tag}-{}.sock", std::process::id()));
    let mut cfg = Config::new(PortSpec::Udp(ip.parse().unwrap()), socket.clone());
    cfg.quarantine = Duration::from_secs(3600);
    cfg.ring_bytes = 1 << 16;
    cfg.hairpin_hold = hold;
    let d = Daemon::open(cfg).expect("daemon");
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = Arc::clone(&stop);
    let thread = std::thread::spawn(move || {
        d.run(&s2).unwrap();
    });
    Running {
        stop,
        thread: Some(thread),
        socket,
    }
}

fn connect(path: &PathBuf) -> Socket {
    let s = Socket::new(Domain::UNIX, Type::SEQPACKET, None).unwrap();
    s.connect(&SockAddr::unix(path).unwrap()).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

struct Proc {
    sock: Socket,
    block: u8,
    port: PortInfo,
    src_port: Option<u16>,
    link: ProcessEnd,
}

fn attach(path: &PathBuf) -> Proc {
    let sock = connect(path);
    control::send(
        sock.as_fd(),
        &ToDaemon::Hello {
            version: control::VERSION,
            pid: std::process::id(),
        },
        &[],
    )
    .unwrap();
    let (msg, _) = control::recv::<ToProcess>(sock.as_fd()).unwrap();
    let ToProcess::Welcome {
        block,
        port,
        src_port,
        ..
    } = msg
    else {
        panic!("not welcomed: {msg:?}");
    };
    let fds = LinkFds::recv(sock.as_fd()).unwrap();
    let link = Link::attach(fds).unwrap();
    Proc {
        sock,
        block,
        port,
        src_port,
        link,
    }
}

/// A packet with BTH DestQP `qpn` and a recognisable body.
fn packet(qpn: u32, tag: u8, len: usize) -> Vec<u8> {
    let mut p = vec![tag; len];
    p[0] = 0x04; // RC SEND ONLY
    p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    p
}

fn pop_one(p: &mut Proc) -> (Meta, Vec<u8>) {
    let deadline = Instant::now() + WAIT;
    let mut pool = vec![0u8; 65536];
    let mut out = [Popped {
        meta: Meta::new(any(), any()),
        offset: 0,
        len: 0,
    }];
    loop {
        let n = p.link.rx.pop_batch(&mut pool, 65536, &mut out).unwrap();
        if n == 1 {
            return (out[0].meta, pool[..out[0].len].to_vec());
        }
        assert!(Instant::now() < deadline, "nothing arrived");
        let _ = p.link.rx.wait(Duration::from_millis(50));
    }
}

fn any() -> SocketAddr {
    "0.0.0.0:0".parse().unwrap()
}

fn counters(path: &PathBuf) -> serde_json::Value {
    let s = connect(path);
    control::send(s.as_fd(), &ToDaemon::Counters, &[]).unwrap();
    match control::recv::<ToProcess>(s.as_fd()).unwrap().0 {
        ToProcess::Counters { json } => json,
        m => panic!("{m:?}"),
    }
}

#[test]
fn the_daemon_routes_by_qpn_block_between_the_wire_and_its_processes() {
    let d = start("127.0.31.1", "route");
    let mut a = attach(&d.socket);
    let mut b = attach(&d.socket);
    assert_ne!(a.block, b.block);
    assert_eq!(
        a.port.addrs,
        vec!["127.0.31.1".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(a.src_port, Some(4791));
    let ours: SocketAddr = "127.0.31.1:4791".parse().unwrap();
    let wire = UdpSocket::bind("127.0.31.2:4791").unwrap();
    wire.set_read_timeout(Some(WAIT)).unwrap();
    let peer: SocketAddr = "127.0.31.2:4791".parse().unwrap();

    // Wire -> the owner of the DestQP's block.
    let (a_lo, _) = lease::range(a.block);
    let (b_lo, _) = lease::range(b.block);
    wire.send_to(&packet(a_lo | 0x11, 0xaa, 300), ours).unwrap();
    wire.send_to(&packet(b_lo | 0x12, 0xbb, 200), ours).unwrap();
    let (m, bytes) = pop_one(&mut a);
    assert_eq!((m.src, m.dst), (peer, ours));
    assert_eq!(bytes, packet(a_lo | 0x11, 0xaa, 300));
    assert_eq!(pop_one(&mut b).1, packet(b_lo | 0x12, 0xbb, 200));
    // A block nobody leases: counted, delivered to no one.
    wire.send_to(&packet(0x77_0001, 0xcc, 64), ours).unwrap();

    // A process -> the wire, from the port's address and port.
    a.link
        .tx
        .push(&Meta::new(ours, peer), &packet(0x00_0042, 0xdd, 500))
        .unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = wire.recv_from(&mut buf).unwrap();
    assert_eq!((n, from), (500, ours));
    assert_eq!(buf[..n], packet(0x00_0042, 0xdd, 500)[..]);

    // Hairpin: a to b through the daemon's own address.
    a.link
        .tx
        .push(&Meta::new(ours, ours), &packet(b_lo | 0x13, 0xee, 100))
        .unwrap();
    let (m, bytes) = pop_one(&mut b);
    assert_eq!(bytes, packet(b_lo | 0x13, 0xee, 100));
    assert_eq!(m.ipv4_id, Some(0));

    // A forged source address goes nowhere.
    let forged: SocketAddr = "127.0.31.9:4791".parse().unwrap();
    a.link
        .tx
        .push(&Meta::new(forged, peer), &packet(0x00_0042, 0x11, 64))
        .unwrap();
    wire.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(
        wire.recv_from(&mut buf).is_err(),
        "the forged packet went out"
    );

    let c = counters(&d.socket);
    let k = &c["counters"];
    assert_eq!(k["no_owner"], 1, "{c}");
    assert_eq!(k["hairpin_pkts"], 1, "{c}");
    assert_eq!(k["bad_source"], 1, "{c}");
    assert_eq!(k["sent_pkts"], 1, "{c}");
    assert_eq!(c["leases"]["leased"], 2, "{c}");

    // a leaves: its block is quarantined (it said it made a QP: `Using`), its packets go
    // nowhere, its counters stay.
    control::send(a.sock.as_fd(), &ToDaemon::Using, &[]).unwrap();
    drop(a);
    let deadline = Instant::now() + WAIT;
    loop {
        let c = counters(&d.socket);
        if c["leases"]["quarantined"] == 1 {
            assert_eq!(c["leases"]["leased"], 1, "{c}");
            let procs = c["processes"].as_array().unwrap();
            assert!(procs.iter().any(|p| p["left"].is_string()), "{c}");
            break;
        }
        assert!(Instant::now() < deadline, "a never detached: {c}");
        std::thread::sleep(Duration::from_millis(20));
    }
    wire.send_to(&packet(a_lo | 0x11, 0xaa, 64), ours).unwrap();
    let deadline = Instant::now() + WAIT;
    while counters(&d.socket)["counters"]["no_owner"] != 2 {
        assert!(Instant::now() < deadline, "the late packet was not dropped");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The daemon stops: b hears that the port is down.
    drop(d);
    match control::recv::<ToProcess>(b.sock.as_fd()).unwrap().0 {
        ToProcess::PortDown { why } => assert!(why.contains("stopped"), "{why}"),
        m => panic!("{m:?}"),
    }
}

#[test]
fn a_process_of_another_protocol_version_is_refused() {
    let d = start("127.0.31.3", "version");
    let s = connect(&d.socket);
    control::send(
        s.as_fd(),
        &ToDaemon::Hello {
            version: 999,
            pid: 1,
        },
        &[],
    )
    .unwrap();
    match control::recv::<ToProcess>(s.as_fd()).unwrap().0 {
        ToProcess::Refused { why } => assert!(why.contains("version 999"), "{why}"),
        m => panic!("{m:?}"),
    }
    // Garbage on the control socket ends that connection, not the daemon.
    let g = connect(&d.socket);
    nix::unistd::write(&g, b"{garbage").unwrap();
    let p = attach(&d.socket);
    assert_eq!(p.block, 1, "the daemon still serves");
    assert_eq!(counters(&d.socket)["counters"]["control_errors"], 1);
}

#[test]
fn another_user_cannot_attach() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!(
            "\n*** SKIPPED another_user_cannot_attach: needs root to run as another user ***\n"
        );
        assert!(std::env::var_os("CI").is_none(), "CI must run this test");
        return;
    }
    use std::os::unix::process::CommandExt;
    let d = start("127.0.31.5", "uid");
    let as_nobody = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_roce-emu"))
            .args(["counters", "--socket"])
            .arg(&d.socket)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap()
    };
    // The socket is 0660 and the daemon's: another user cannot even connect.
    let out = as_nobody();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("Permission denied"),
        "{err}"
    );
    // Opened to everyone by mistake, the daemon still checks who connects.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = as_nobody();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("user 65534 may not use this daemon"),
        "{err}"
    );
    assert_eq!(counters(&d.socket)["counters"]["refused"], 1);
}

/// A daemon of another user is never attached to: it would receive every packet the
/// program sends. (As root, the test starts one as uid 65534.)
#[test]
fn a_daemon_of_another_user_is_not_attached_to() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: a_daemon_of_another_user_is_not_attached_to needs root");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = std::env::temp_dir().join(format!("roce-emu-test-other-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = dir.join("d.sock");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_roce-emu"))
        .args(["daemon", "--port", "udp:127.0.31.9", "--socket"])
        .arg(&socket)
        .uid(65534)
        .gid(65534)
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !socket.exists() {
        assert!(start.elapsed() < WAIT, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let e = roce_emu::daemon::client::DaemonBackend::connect(&socket)
        .err()
        .expect("root must not attach to a daemon of uid 65534");
    assert!(e.to_string().contains("runs as user 65534"), "{e}");
    let e = roce_emu::daemon::client::info(&socket).expect_err("nor ask it");
    assert!(e.to_string().contains("runs as user 65534"), "{e}");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// 300 programs that only open the device (an `ibv_devinfo` loop: attach, leave) through
/// a daemon whose quarantine is an hour: none is refused, since a block whose process made
/// no QP needs no quarantine (255 such programs locked everyone out for a minute). One
/// that made a QP (`Using`) still leaves its block in quarantine.
#[test]
fn programs_that_make_no_qp_leave_no_quarantine() {
    let d = start("127.0.31.11", "devinfo");
    let wait_left = |n: u64| {
        let deadline = Instant::now() + WAIT;
        while counters(&d.socket)["counters"]["detached"] != n {
            assert!(Instant::now() < deadline, "process {n} never detached");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    for i in 1..=300u64 {
        drop(attach(&d.socket));
        wait_left(i);
    }
    let p = attach(&d.socket);
    control::send(p.sock.as_fd(), &ToDaemon::Using, &[]).unwrap();
    drop(p);
    wait_left(301);
    let c = counters(&d.socket);
    assert_eq!(c["leases"]["quarantined"], 1, "{c}");
    assert_eq!(c["counters"]["refused"], 0, "{c}");
}

/// The pid the daemon shows is the one the kernel gives (`SO_PEERCRED`), not the one a
/// process claims in its Hello.
#[test]
fn the_pid_shown_is_the_kernels() {
    let d = start("127.0.31.12", "pid");
    let sock = connect(&d.socket);
    let hello = ToDaemon::Hello {
        version: control::VERSION,
        pid: 4_000_000,
    };
    control::send(sock.as_fd(), &hello, &[]).unwrap();
    let (msg, _) = control::recv::<ToProcess>(sock.as_fd()).unwrap();
    assert!(matches!(msg, ToProcess::Welcome { .. }), "{msg:?}");
    let _fds = LinkFds::recv(sock.as_fd()).unwrap();
    let c = counters(&d.socket);
    let pids: Vec<u64> = c["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["pid"].as_u64())
        .collect();
    assert_eq!(pids, [u64::from(std::process::id())], "{c}");
}

/// A quarantine too long for a `Duration` (it panicked the daemon) is a clear error.
#[test]
fn an_absurd_quarantine_is_an_error_not_a_panic() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_roce-emu"))
        .args([
            "daemon",
            "--port",
            "udp:127.0.31.13",
            "--quarantine",
            "1e20",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("too long") && !err.contains("panicked"),
        "{err}"
    );
}

/// Pushes `tags` as packets of `len` bytes to `to` from `p`, as fast as its tx ring has
/// room (as the driver does: `Producer::room`), within `WAIT`.
fn push_all(p: &mut Proc, ours: SocketAddr, to: u32, tags: std::ops::Range<u8>, len: usize) {
    let deadline = Instant::now() + WAIT;
    let mut tags = tags.peekable();
    while tags.peek().is_some() {
        for _ in 0..p.link.tx.room(len) {
            let Some(t) = tags.next() else { break };
            p.link
                .tx
                .try_push(&Meta::new(ours, ours), &packet(to, t, len))
                .unwrap();
        }
        p.link.tx.flush().unwrap();
        assert!(Instant::now() < deadline, "no room for {:?}", tags.peek());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The tags (body bytes) of what `p` has received, in order.
fn drain_tags(p: &mut Proc) -> Vec<u8> {
    let mut pool = vec![0u8; 65536];
    let mut out = [Popped {
        meta: Meta::new(any(), any()),
        offset: 0,
        len: 0,
    }];
    let mut tags = Vec::new();
    while p.link.rx.pop_batch(&mut pool, 65536, &mut out).unwrap() == 1 {
        tags.push(pool[out[0].offset + 8]);
    }
    tags
}

/// Two processes of one daemon are joined without loss, as PFC joins two NICs: while the
/// receiver's ring is full (its program descheduled), the sender's packets wait in the
/// sender's ring, in order, and arrive once it reads; nothing is dropped (UC and UD would
/// never send it again). A receiver that stops reading for longer than the daemon's
/// hairpin hold no longer holds its sender: what does not fit is dropped and counted,
/// and the sender's ring drains.
#[test]
fn a_hairpin_waits_for_room_in_the_receivers_ring() {
    let ours: SocketAddr = "127.0.31.55:4791".parse().unwrap();
    // 40 packets of 2000 bytes: 82 KB, more than a 64 KiB ring, less than two.
    let (n, len) = (40u8, 2000);
    {
        let d = start_holding("127.0.31.55", "hold", Duration::from_secs(30));
        let mut a = attach(&d.socket);
        let mut b = attach(&d.socket);
        let (b_lo, _) = lease::range(b.block);
        push_all(&mut a, ours, b_lo | 1, 0..n, len);
        // b reads nothing for a while: a's packets wait.
        std::thread::sleep(Duration::from_millis(50));
        let c = counters(&d.socket);
        assert_eq!(c["counters"]["ring_full"], 0, "{c}");
        let mut got = Vec::new();
        let deadline = Instant::now() + WAIT;
        while got.len() < n as usize {
            got.extend(drain_tags(&mut b));
            assert!(Instant::now() < deadline, "{} of {n} arrived", got.len());
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got, (0..n).collect::<Vec<u8>>(), "every packet, in order");
        let c = counters(&d.socket);
        assert_eq!(c["counters"]["ring_full"], 0, "{c}");
        assert_eq!(c["counters"]["hairpin_pkts"], u64::from(n), "{c}");
    }
    // A receiver that stops reading: held for 50 ms, then dropped.
    let d = start_holding("127.0.31.55", "hold2", Duration::from_millis(50));
    let mut a = attach(&d.socket);
    let mut b = attach(&d.socket);
    let (b_lo, _) = lease::range(b.block);
    push_all(&mut a, ours, b_lo | 1, 0..n, len);
    let deadline = Instant::now() + WAIT;
    let c = loop {
        let c = counters(&d.socket);
        // Every packet taken from a's ring (`hairpin_pkts`), the ones that did not fit
        // dropped (`ring_full`).
        if c["counters"]["hairpin_pkts"] == u64::from(n) {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "a's packets neither arrived nor dropped: {c}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let dropped = c["counters"]["ring_full"].as_u64().unwrap();
    assert!(dropped > 0, "{c}");
    let got = drain_tags(&mut b);
    assert_eq!(got.len() as u64 + dropped, u64::from(n), "{c}");
    assert_eq!(
        got,
        (0..got.len() as u8).collect::<Vec<u8>>(),
        "the first ones, in order"
    );
}
