//! The process side of `roce-emu daemon` (`daemon::client`), against a small fake daemon
//! in this test (a thread): it accepts on a Unix socket, answers `Hello` with `Welcome`
//! and a ring link (`ring::Link::create`), answers `Info`, and moves packets between the
//! attached processes by the QPN block of their BTH DestQP (the top byte), as the real
//! daemon routes received packets. Two verbs contexts attach to it and run SEND, WRITE and
//! READ with every byte checked; `PortDown` and the daemon's end fail their calls and
//! raise the port error event; `info`, a refusal, a silent daemon and a missing socket
//! give errors naming the socket. Every wait is bounded.

mod common;

use common::nic::{connect, pattern, Ep, Nic, IOVA, SEND_SRC, WAIT, WRITE_DST, WRITE_SRC};
use roce_emu::backend::{Backend, Outgoing, Received};
use roce_emu::daemon::client::{self, AttachError, DaemonBackend};
use roce_emu::daemon::control::{self, PortInfo, ToDaemon, ToProcess};
use roce_emu::daemon::lease;
use roce_emu::engine::{Completion, Mtu, Remote, SendOp, WcOpcode};
use roce_emu::ring::{DaemonEnd, Link, Meta};
use roce_emu::verbs::{self, Context, Device, Event};
use socket2::{Domain, SockAddr, Socket, Type};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The fake daemon's port: a UDP port on loopback, sending from this source port.
const PORT_IP: &str = "127.0.0.1";
const SRC_PORT: u16 = 50_123;
/// `Mode::Small`'s rings: about 60 packets of the port's MTU.
const SMALL_RING: usize = 64 << 10;
/// The largest packet an engine makes: a 4096-byte MTU and headers.
const PACKET_MAX: usize = 4096 + 256;

fn port_info() -> PortInfo {
    PortInfo {
        prefixes: Vec::new(),
        kind: "udp".into(),
        name: PORT_IP.into(),
        addrs: vec![PORT_IP.parse().unwrap()],
        mac: [0x02, 0, 0, 0, 0, 1],
        mtu: 1500,
    }
}

fn sock_path(test: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "roce-emu-daemon-client-{}-{test}.sock",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&p);
    p
}

/// How the fake daemon answers `Hello`.
#[derive(Clone)]
enum Mode {
    Welcome,
    Refuse(String),
    /// Accepts and never answers.
    Silent,
    /// Welcomes with the smallest rings and never reads what processes send.
    Stalled,
    /// Welcomes with small rings, and moves nothing while `Seen::hold` is set (a daemon
    /// descheduled on a loaded machine); never drops: it takes a packet only when every
    /// receive ring has room for it.
    Small,
}

enum Cmd {
    /// `PortDown` to the process holding this block.
    PortDown(u8, String),
}

struct Attached {
    sock: Socket,
    block: u8,
    end: DaemonEnd,
}

/// What the fake daemon saw.
#[derive(Default)]
struct Seen {
    moved: AtomicU64,
    /// Packets whose addresses were not the port's with the source port given, to 4791.
    bad_meta: AtomicU64,
    /// Packets for a block nobody holds.
    unrouted: AtomicU64,
    /// `Mode::Small` moves nothing while set.
    hold: AtomicBool,
}

struct Fake {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    cmd: mpsc::Sender<Cmd>,
    seen: Arc<Seen>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Fake {
    fn start(test: &str, mode: Mode) -> Fake {
        let path = sock_path(test);
        let listener = Socket::new(Domain::UNIX, Type::SEQPACKET, None).unwrap();
        listener.bind(&SockAddr::unix(&path).unwrap()).unwrap();
        listener.listen(8).unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Seen::default());
        let (tx, rx) = mpsc::channel();
        let thread = {
            let (stop, seen) = (Arc::clone(&stop), Arc::clone(&seen));
            std::thread::spawn(move || run_fake(listener, mode, stop, seen, rx))
        };
        Fake {
            path,
            stop,
            cmd: tx,
            seen,
            thread: Some(thread),
        }
    }

    fn port_down(&self, block: u8, why: &str) {
        self.cmd.send(Cmd::PortDown(block, why.into())).unwrap();
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn run_fake(
    listener: Socket,
    mode: Mode,
    stop: Arc<AtomicBool>,
    seen: Arc<Seen>,
    cmds: mpsc::Receiver<Cmd>,
) {
    let port = port_info();
    let mut procs: Vec<Attached> = Vec::new();
    // Connections that said Hello to a silent daemon: kept open, never answered.
    let mut silent: Vec<Socket> = Vec::new();
    let mut next_block = 1u8;
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let mut busy = false;
        if let Ok((s, _)) = listener.accept() {
            busy = true;
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(WAIT)).unwrap();
            let Ok((msg, _)) = control::recv::<ToDaemon>(s.as_fd()) else {
                continue;
            };
            match (msg, &mode) {
                (ToDaemon::Info, _) => {
                    let info = ToProcess::Info {
                        version: control::VERSION,
                        port: port.clone(),
                    };
                    control::send(s.as_fd(), &info, &[]).unwrap();
                }
                (ToDaemon::Hello { version, pid }, Mode::Welcome | Mode::Stalled | Mode::Small) => {
                    assert_eq!(version, control::VERSION);
                    assert_eq!(pid, std::process::id());
                    let block = next_block;
                    next_block += 1;
                    let cap = match mode {
                        Mode::Stalled => roce_emu::ring::MIN_CAPACITY,
                        Mode::Small => SMALL_RING,
                        _ => 1 << 20,
                    };
                    let (end, fds) = Link::create(cap).unwrap();
                    let welcome = ToProcess::Welcome {
                        version: control::VERSION,
                        block,
                        port: port.clone(),
                        src_port: Some(SRC_PORT),
                        cc: Some("min_time_between_cnps=7".into()),
                    };
                    control::send(s.as_fd(), &welcome, &[]).unwrap();
                    fds.send(s.as_fd()).unwrap();
                    procs.push(Attached {
                        sock: s,
                        block,
                        end,
                    });
                }
                (ToDaemon::Hello { .. }, Mode::Refuse(why)) => {
                    let no = ToProcess::Refused { why: why.clone() };
                    control::send(s.as_fd(), &no, &[]).unwrap();
                }
                (ToDaemon::Hello { .. }, Mode::Silent) => silent.push(s),
                (m, _) => panic!("fake daemon: unexpected {m:?}"),
            }
        }
        while let Ok(Cmd::PortDown(block, why)) = cmds.try_recv() {
            for p in procs.iter().filter(|p| p.block == block) {
                let down = ToProcess::PortDown { why: why.clone() };
                control::send(p.sock.as_fd(), &down, &[]).unwrap();
            }
        }
        // Every process's packets, to the process holding their DestQP's block.
        let held = matches!(mode, Mode::Stalled)
            || matches!(mode, Mode::Small) && seen.hold.load(Ordering::Relaxed);
        let drain = if held { 0 } else { procs.len() };
        for i in 0..drain {
            loop {
                if matches!(mode, Mode::Small)
                    && procs.iter_mut().any(|p| p.end.rx.room(PACKET_MAX) == 0)
                {
                    break;
                }
                let Ok(Some((meta, len))) = procs[i].end.tx.pop(&mut buf) else {
                    break;
                };
                busy = true;
                let pkt = &buf[..len];
                let want_src = (PORT_IP.parse::<IpAddr>().unwrap(), SRC_PORT);
                if (meta.src.ip(), meta.src.port()) != want_src
                    || meta.dst.port() != roce_emu::wire::ROCE_UDP_PORT
                {
                    seen.bad_meta.fetch_add(1, Ordering::Relaxed);
                }
                let Some(&block) = pkt.get(5) else {
                    seen.unrouted.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let Some(to) = procs.iter_mut().find(|p| p.block == block) else {
                    seen.unrouted.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                // As the port received it: from the sender, to the port's address.
                let rx = Meta::new(meta.src, meta.dst);
                if to.end.rx.try_push(&rx, pkt).is_ok() {
                    seen.moved.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        for p in &mut procs {
            p.end.rx.flush().unwrap();
        }
        if !busy {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    drop(silent);
}

// ---- the verbs side: one NIC per attached context ---------------------------------------

fn device(path: &Path) -> Device {
    // The address given here is not the port's: the daemon's port wins.
    let mut d = Device::new("127.0.0.9".parse().unwrap());
    d.daemon = Some(path.to_path_buf());
    d
}

fn nic(path: &Path) -> Nic {
    Nic::new(
        device(path).open().expect("attach to the fake daemon"),
        None,
    )
}

/// SEND, WRITE and READ each way, every byte checked.
fn exchange(a: Ep<'_>, b: Ep<'_>) {
    common::nic::exchange(a, b, 1);
}

/// A packet of `len` bytes from the port's address and source port to its own 4791, as
/// a process hands it to the daemon.
fn outgoing(len: usize) -> Outgoing {
    let ip: IpAddr = PORT_IP.parse().unwrap();
    Outgoing {
        src: SocketAddr::new(ip, SRC_PORT),
        dst: SocketAddr::new(ip, roce_emu::wire::ROCE_UDP_PORT),
        len,
        ecn: roce_emu::wire::Ecn::NotEct,
    }
}

fn port_error(ctx: &Context) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        match ctx.get_async_event(Duration::from_millis(100)) {
            Some(Event::PortError(why)) => return why,
            Some(_) => {}
            None => assert!(Instant::now() < deadline, "no port error within {WAIT:?}"),
        }
    }
}

// ---- the tests --------------------------------------------------------------------------

#[test]
fn two_contexts_attached_to_a_daemon_exchange_every_operation() {
    let fake = Fake::start("exchange", Mode::Welcome);
    let a = nic(&fake.path);
    let b = nic(&fake.path);
    // The daemon's port is theirs, and each numbers its QPs in the block it leased.
    assert_eq!(a.ctx.local_ip(), PORT_IP.parse::<IpAddr>().unwrap());
    assert_eq!(b.ctx.local_ip(), PORT_IP.parse::<IpAddr>().unwrap());
    let (qa, qb) = (a.qp(), b.qp());
    let (lo1, hi1) = lease::range(1);
    let (lo2, hi2) = lease::range(2);
    assert!((lo1..=hi1).contains(&qa.qpn), "{:#x}", qa.qpn);
    assert!((lo2..=hi2).contains(&qb.qpn), "{:#x}", qb.qpn);
    connect(qa, qb);
    exchange(qa, qb);
    // A second QP pair, sharing the same rings.
    let (qa2, qb2) = (a.qp(), b.qp());
    connect(qa2, qb2);
    exchange(qb2, qa2);

    assert_eq!(fake.seen.bad_meta.load(Ordering::Relaxed), 0);
    assert_eq!(fake.seen.unrouted.load(Ordering::Relaxed), 0);
    let moved = fake.seen.moved.load(Ordering::Relaxed);
    let (sa, sb) = (a.ctx.port_stats(), b.ctx.port_stats());
    assert!(
        sa.share_received > 0 && sb.share_received > 0,
        "{sa:?} {sb:?}"
    );
    assert!(
        sa.share_received + sb.share_received <= moved,
        "{moved} {sa:?} {sb:?}"
    );
    assert_eq!((sa.tx_stalled, sa.truncated, sa.share_malformed), (0, 0, 0));
}

#[test]
fn port_down_fails_later_calls_and_raises_the_port_error() {
    let fake = Fake::start("portdown", Mode::Welcome);
    let a = nic(&fake.path);
    let b = nic(&fake.path);
    let (qa, qb) = (a.qp(), b.qp());
    connect(qa, qb);
    exchange(qa, qb);

    // The daemon stops: A's progress thread, asleep on the port, wakes and reports it.
    fake.port_down(1, "daemon stopping (SIGTERM)");
    let why = port_error(&a.ctx);
    assert!(why.contains("daemon stopping (SIGTERM)"), "{why}");
    assert!(why.contains(&fake.path.display().to_string()), "{why}");
    // Every later call that uses the port fails, naming the reason.
    let e = qa.post(SendOp::Send, SEND_SRC, 8).unwrap_err();
    assert!(e.to_string().contains("daemon stopping"), "{e}");
    let mut c = [Completion::default()];
    let e = a.ctx.poll_cq(a.cq, &mut c).map(|_| ()).unwrap_err();
    assert!(e.to_string().contains("daemon stopping"), "{e}");

    // B still works until its daemon goes away altogether: then its port is down too.
    qb.post(SendOp::Send, SEND_SRC, 8).unwrap();
    drop(fake);
    let why = port_error(&b.ctx);
    assert!(why.contains("closed its socket"), "{why}");
}

#[test]
fn info_gives_the_port_without_attaching() {
    let fake = Fake::start("info", Mode::Silent);
    // A silent daemon (for Hello) still answers Info.
    let port = client::info(&fake.path).unwrap();
    assert_eq!(port, port_info());

    // A device list entry takes the daemon's port.
    let spec = format!("d0=daemon:{}", fake.path.display());
    let devs = verbs::discover::parse(&spec).unwrap();
    assert_eq!(devs.len(), 1);
    assert_eq!(devs[0].ip, PORT_IP.parse::<IpAddr>().unwrap());
    assert_eq!(devs[0].mac, port_info().mac);
    assert_eq!(devs[0].mtu, verbs::discover::active_mtu(1500));
    assert_eq!(devs[0].daemon.as_deref(), Some(fake.path.as_path()));
    let spec = format!("d0=daemon:{}@2048", fake.path.display());
    assert_eq!(verbs::discover::parse(&spec).unwrap()[0].mtu, Mtu::M2048);
}

#[test]
fn a_refusal_a_silent_daemon_and_no_daemon_are_clear_errors() {
    let fake = Fake::start("refused", Mode::Refuse("no free QPN block".into()));
    let Err(e) = DaemonBackend::connect(&fake.path) else {
        panic!("attached to a daemon that refused");
    };
    assert!(matches!(e, AttachError::Refused { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("no free QPN block"), "{text}");
    assert!(text.contains(&fake.path.display().to_string()), "{text}");
    // Through verbs, the same words.
    let Err(e) = device(&fake.path).open() else {
        panic!("opened a device on a daemon that refused");
    };
    assert!(e.to_string().contains("no free QPN block"), "{e}");

    let fake = Fake::start("silent", Mode::Silent);
    let t = Instant::now();
    let Err(e) = DaemonBackend::connect_within(&fake.path, Duration::from_millis(300)) else {
        panic!("attached to a daemon that never answered");
    };
    assert!(t.elapsed() < WAIT);
    assert!(matches!(e, AttachError::Silent { .. }), "{e:?}");
    assert!(
        e.to_string().contains(&fake.path.display().to_string()),
        "{e}"
    );

    let missing = sock_path("missing");
    let Err(e) = DaemonBackend::connect(&missing) else {
        panic!("attached to no daemon");
    };
    assert!(matches!(e, AttachError::Connect { .. }), "{e:?}");
    assert!(
        e.to_string().contains(&missing.display().to_string()),
        "{e}"
    );
    let e = client::info(&missing).unwrap_err();
    assert!(
        e.to_string().contains(&missing.display().to_string()),
        "{e}"
    );
}

fn readable(fd: BorrowedFd<'_>, within: Duration) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let ms = PollTimeout::try_from(within).unwrap();
    let mut p = [PollFd::new(fd, PollFlags::POLLIN)];
    poll(&mut p, ms).unwrap() == 1
}

/// The backend itself: `prepare_sleep` (the driver's, before it sleeps) arms the ring, the
/// daemon's push then rings the rx doorbell (the backend's `rx_fd`), a receive takes the
/// packet, the next `prepare_sleep` drains the bell, and says not to sleep when packets
/// wait; a `PortDown` rings it too and fails every later call.
#[test]
fn the_doorbell_wakes_a_backend_for_packets_and_for_port_down() {
    let fake = Fake::start("bell", Mode::Welcome);
    let (mut a, at) = DaemonBackend::connect(&fake.path).unwrap();
    let (mut b, bt) = DaemonBackend::connect(&fake.path).unwrap();
    assert_eq!((at.block, bt.block), (1, 2));
    assert_eq!(at.src_port, Some(SRC_PORT));
    // The daemon's congestion-control settings reach the process, for its engine.
    assert_eq!(at.cc.as_deref(), Some("min_time_between_cnps=7"));
    assert_eq!(bt.qpn_range(), lease::range(2));
    let ip: IpAddr = PORT_IP.parse().unwrap();
    assert_eq!(
        b.local(),
        SocketAddr::new(ip, roce_emu::wire::ROCE_UDP_PORT)
    );

    const SLOT: usize = 4096;
    let mut pool = vec![0u8; 32 * SLOT];
    let mut got = [Received {
        src: a.local(),
        dst: a.local(),
        offset: 0,
        len: 0,
        segment: None,
        ipv4_id: None,
        ecn: roce_emu::wire::Ecn::NotEct,
    }; 32];
    assert_eq!(b.recv_batch(&mut pool, &mut got).unwrap(), 0);
    assert!(!b.prepare_sleep(), "nothing waits: B may sleep");
    assert!(!readable(b.rx_fd(), Duration::from_millis(50)));

    // A packet for B's block (BTH DestQP in bytes 5..8), from A.
    let mut tx = vec![0u8; 4 * SLOT];
    let pkt: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    tx[..300].copy_from_slice(&pkt);
    tx[5] = bt.block;
    let sent = tx[..300].to_vec();
    let src = SocketAddr::new(ip, SRC_PORT);
    let dst = SocketAddr::new(ip, roce_emu::wire::ROCE_UDP_PORT);
    let out = [Outgoing {
        src,
        dst,
        len: 300,
        ecn: roce_emu::wire::Ecn::NotEct,
    }];
    a.send_batch(&mut tx, SLOT, &out).unwrap();
    assert!(readable(b.rx_fd(), WAIT), "B's doorbell never rang");
    assert_eq!(b.recv_batch(&mut pool, &mut got).unwrap(), 1);
    let r = got[0];
    assert_eq!((r.src, r.dst, r.len), (src, dst, 300));
    assert_eq!(&pool[r.offset..r.offset + r.len], &sent[..]);
    // Empty again: the bell is drained as the ring is armed once more.
    assert_eq!(b.recv_batch(&mut pool, &mut got).unwrap(), 0);
    assert!(!b.prepare_sleep());
    assert!(!readable(b.rx_fd(), Duration::from_millis(50)));
    assert_eq!(b.stats().share_received, 1);
    // A packet that lands before the sleep: no sleep.
    a.send_batch(&mut tx, SLOT, &out).unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while !b.prepare_sleep() {
        assert!(
            std::time::Instant::now() < deadline,
            "the packet never landed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(b.recv_batch(&mut pool, &mut got).unwrap(), 1);
    assert_eq!(b.stats().share_received, 2);

    fake.port_down(2, "maintenance window");
    assert!(
        readable(b.rx_fd(), WAIT),
        "PortDown did not wake the backend"
    );
    for e in [
        b.recv_batch(&mut pool, &mut got).map(|_| ()).unwrap_err(),
        b.send_batch(&mut tx, SLOT, &out).unwrap_err(),
    ] {
        let e = e.to_string();
        assert!(e.contains("maintenance window"), "{e}");
        assert!(e.contains(&fake.path.display().to_string()), "{e}");
    }
    // A, whose port is still up, still sends.
    a.send_batch(&mut tx, SLOT, &out).unwrap();
}

/// A daemon that does not keep up: what does not fit in the tx ring is dropped and
/// counted (RC retransmits), and the send never blocks.
#[test]
fn a_full_ring_drops_and_counts() {
    let fake = Fake::start("stalled", Mode::Stalled);
    let (mut a, _) = DaemonBackend::connect(&fake.path).unwrap();
    const SLOT: usize = 4096;
    let mut tx = vec![0u8; 4 * SLOT];
    let o = outgoing(2000);
    // A 4 KiB ring holds one 2000-byte packet (each takes 2056 bytes with its header).
    let t = Instant::now();
    a.send_batch(&mut tx, SLOT, &[o; 4]).unwrap();
    a.send_batch(&mut tx, SLOT, &[o; 2]).unwrap();
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(a.stats().tx_stalled, 5);
    assert_eq!(a.ring_stats().1.pushed, 1);
}

/// A daemon that falls behind costs no packet. While it moves nothing (as when it is
/// descheduled on a loaded machine), a WRITE four times the size of the process's tx ring
/// fills the ring; the engine keeps the rest, unsent, instead of dropping it (a NIC stops
/// taking work when its queue is full; nothing tells UC or UD to send again), and sends it
/// once the daemon drains the ring. Before the driver asked `Backend::send_room`, the
/// packets that did not fit were dropped (`tx_stalled`) and left for RC's retransmission.
#[test]
fn a_daemon_that_falls_behind_loses_nothing() {
    let fake = Fake::start("behind", Mode::Small);
    let a = nic(&fake.path);
    let b = nic(&fake.path);
    let (qa, qb) = (a.qp(), b.qp());
    connect(qa, qb);
    let len = 4 * SMALL_RING as u32;
    let data = pattern(7, len);
    a.mr.write(IOVA + WRITE_SRC, &data).unwrap();
    fake.seen.hold.store(true, Ordering::Relaxed);
    let remote = Remote {
        va: IOVA + WRITE_DST,
        rkey: b.mr.rkey().0,
    };
    qa.post(SendOp::Write { remote }, WRITE_SRC, len).unwrap();
    // The NIC runs while its program polls: 20 ms of polls with the daemon away (well
    // under the QP's ACK timeout, so no retransmission is due).
    let t = Instant::now();
    let mut c = [Completion::default()];
    while t.elapsed() < Duration::from_millis(20) {
        assert_eq!(
            a.ctx.poll_cq(a.cq, &mut c).unwrap(),
            0,
            "completed while held"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let full = a.ctx.port_stats();
    assert_eq!(
        full.tx_stalled, 0,
        "packets dropped while the daemon was away: {full:?}"
    );
    assert!(a.ctx.io_stats().tx_datagrams > 0, "nothing was sent at all");
    fake.seen.hold.store(false, Ordering::Relaxed);
    assert_eq!(qa.poll_one().opcode, WcOpcode::RdmaWrite);
    assert_eq!(
        b.bytes(WRITE_DST, len),
        data,
        "the WRITE's bytes at the responder"
    );
    assert_eq!(a.ctx.port_stats().tx_stalled, 0);
}

/// A full ring makes the driver wait for room (`send_room`), but a port that went down
/// has no room to wait for: `send_room` is then unbounded, so the next send is made and
/// fails, naming why, instead of the NIC waiting for ever.
#[test]
fn a_port_that_went_down_is_not_waited_on_for_room() {
    let fake = Fake::start("downroom", Mode::Stalled);
    let (mut a, _) = DaemonBackend::connect(&fake.path).unwrap();
    const SLOT: usize = 4096;
    let mut tx = vec![0u8; SLOT];
    let o = outgoing(2000);
    // The 4 KiB ring that nobody drains, with one packet in it: no room for another.
    a.send_batch(&mut tx, SLOT, &[o]).unwrap();
    assert_eq!(a.send_room(2000), 0);
    fake.port_down(1, "daemon stopping (SIGTERM)");
    let deadline = Instant::now() + WAIT;
    while a.send_room(2000) == 0 {
        assert!(
            Instant::now() < deadline,
            "still waiting for room on a port that is down"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let e = a.send_batch(&mut tx, SLOT, &[o]).unwrap_err();
    assert!(e.to_string().contains("daemon stopping"), "{e}");
}
