//! The library side of rdma_cm against a tiny fake connection manager (a Unix
//! SOCK_SEQPACKET socket answering `ToDaemon::Info` and `CmHello`, then `ucma::Request`s,
//! and sending events when told to): no daemon, no network.
//!
//! - `verbs::cm` (Rust): replies matched by sequence number across threads, events to
//!   their id's channel, the channel fd readable exactly while events wait, O_NONBLOCK,
//!   a connect request's new id routed to its listener's channel, migrate moving queued
//!   events, destroy dropping them, a daemon that goes failing commands cleanly.
//! - librdmacm.so.1 (C, through a probe program compiled against Debian's rdma_cma.h):
//!   the same through the C API, plus ack/destroy accounting, sync mode (a NULL channel)
//!   and rdma_migrate_id.

mod common;

use roce_emu::cm::ucma::{
    self, Command, ConnParam, Event, EventKind, IdNum, Reply, Request, ToLibrary,
};
use roce_emu::daemon::control::{self, PortInfo, ToDaemon, ToProcess};
use roce_emu::verbs::cm::{Conn, EventChannel};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the fake does on a command, besides its reply: events to send after the reply.
type Script = Arc<dyn Fn(&Command, &mut IdNum) -> (Reply, Vec<Event>) + Send + Sync>;

struct Fake {
    path: PathBuf,
    /// Every command received, in order.
    log: Arc<Mutex<Vec<Command>>>,
    /// The CM connections' sockets (the test pushes events on them, or closes them).
    socks: Arc<Mutex<Vec<Arc<OwnedFd>>>>,
}

fn event(id: IdNum, kind: EventKind) -> Event {
    Event {
        id,
        listen_id: None,
        kind,
        status: 0,
        param: None,
        ah: None,
    }
}

/// A SOCK_SEQPACKET listener (std has none): socket2.
fn seqpacket_listener(path: &Path) -> socket2::Socket {
    use socket2::{Domain, SockAddr, Socket, Type};
    let s = Socket::new(Domain::UNIX, Type::SEQPACKET, None).unwrap();
    s.bind(&SockAddr::unix(path).unwrap()).unwrap();
    s.listen(16).unwrap();
    s
}

impl Fake {
    fn start(tag: &str, script: Script) -> Fake {
        let path =
            std::env::temp_dir().join(format!("roce-emu-fakecm-{tag}.{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = seqpacket_listener(&path);
        let log = Arc::new(Mutex::new(Vec::new()));
        let socks = Arc::new(Mutex::new(Vec::new()));
        let (l2, s2) = (log.clone(), socks.clone());
        // Lives as long as the test process (accept fails once the listener goes).
        std::thread::spawn(move || {
            while let Ok((sock, _)) = listener.accept() {
                let sock: Arc<OwnedFd> = Arc::new(sock.into());
                let (log, socks, script) = (l2.clone(), s2.clone(), script.clone());
                std::thread::spawn(move || serve(sock, log, socks, script));
            }
        });
        Fake { path, log, socks }
    }

    fn commands(&self) -> Vec<Command> {
        self.log.lock().unwrap().clone()
    }

    /// Sends an event on every CM connection.
    fn push(&self, e: Event) {
        for s in self.socks.lock().unwrap().iter() {
            control::send(s.as_fd(), &ToLibrary::Event(e.clone()), &[]).unwrap();
        }
    }

    /// Closes the CM connections (the daemon died).
    fn close(&self) {
        for s in self.socks.lock().unwrap().drain(..) {
            let _ = nix::sys::socket::shutdown(s.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn port() -> PortInfo {
    PortInfo {
        kind: "udp".into(),
        name: "127.0.0.1".into(),
        addrs: vec!["127.0.0.1".parse().unwrap()],
        mac: [2, 0, 0, 0, 0, 1],
        mtu: 1500,
    }
}

/// One connection: `Info` (a device list) or `CmHello` then requests.
fn serve(
    sock: Arc<OwnedFd>,
    log: Arc<Mutex<Vec<Command>>>,
    socks: Arc<Mutex<Vec<Arc<OwnedFd>>>>,
    script: Script,
) {
    let Ok((first, _)) = control::recv::<ToDaemon>(sock.as_fd()) else {
        return;
    };
    match first {
        ToDaemon::Info => {
            let m = ToProcess::Info {
                version: control::VERSION,
                port: port(),
            };
            let _ = control::send(sock.as_fd(), &m, &[]);
            return;
        }
        ToDaemon::CmHello { version, .. } => {
            assert_eq!(version, ucma::VERSION);
            let m = ToProcess::CmWelcome {
                version: ucma::VERSION,
                node_guid: 0x0200_00ff_fe00_0001,
                addrs: port().addrs,
                mtu: 1024,
            };
            control::send(sock.as_fd(), &m, &[]).unwrap();
        }
        // A data-path attach (Hello): not this fake's job.
        m => {
            let why = format!("the fake manager does not serve {m:?}");
            let _ = control::send(sock.as_fd(), &ToProcess::Refused { why }, &[]);
            return;
        }
    }
    socks.lock().unwrap().push(sock.clone());
    let mut next: IdNum = 100;
    while let Ok((req, _)) = control::recv::<Request>(sock.as_fd()) {
        log.lock().unwrap().push(req.command.clone());
        let (reply, events) = script(&req.command, &mut next);
        let m = ToLibrary::Reply {
            seq: req.seq,
            reply,
        };
        if control::send(sock.as_fd(), &m, &[]).is_err() {
            return;
        }
        for e in events {
            let _ = control::send(sock.as_fd(), &ToLibrary::Event(e), &[]);
        }
    }
}

/// The plain script: ids numbered from 100, every other command Done, no events.
fn plain() -> Script {
    Arc::new(|c: &Command, next: &mut IdNum| match c {
        Command::CreateId { .. } => {
            *next += 1;
            (Reply::Id { id: *next }, vec![])
        }
        Command::Bind { addr, .. } => (Reply::Bound { addr: *addr }, vec![]),
        _ => (Reply::Done, vec![]),
    })
}

fn readable(ch: &EventChannel, ms: u16) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut p = [PollFd::new(ch.as_fd(), PollFlags::POLLIN)];
    poll(&mut p, PollTimeout::from(ms)).unwrap() == 1
}

fn set_nonblocking(ch: &EventChannel) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let fl = OFlag::from_bits_truncate(fcntl(ch.as_fd(), FcntlArg::F_GETFL).unwrap());
    fcntl(ch.as_fd(), FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK)).unwrap();
}

fn create(conn: &Conn) -> IdNum {
    match conn
        .command(Command::CreateId {
            ps: ucma::PortSpace::Tcp,
            qp_type: ucma::QpType::Rc,
        })
        .unwrap()
    {
        Reply::Id { id } => id,
        r => panic!("{r:?}"),
    }
}

#[test]
fn commands_events_channels_migrate_and_destroy() {
    let fake = Fake::start("rust", plain());
    let conn = Conn::connect(&fake.path).expect("CM hello");
    assert_eq!(conn.welcome().mtu, 1024);
    assert_eq!(conn.welcome().addrs, port().addrs);

    // Commands from several threads at once: each gets its own reply.
    let ids: Vec<IdNum> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8).map(|_| s.spawn(|| create(&conn))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 8, "{ids:?}");
    let e = conn.command(Command::Query { id: 1 }).unwrap();
    assert_eq!(e, Reply::Done);

    let a = EventChannel::new().unwrap();
    let b = EventChannel::new().unwrap();
    let listener = create(&conn);
    conn.route(listener, &a);
    assert!(!readable(&a, 0));
    // An event for the listener: the fd turns readable, the event comes out.
    fake.push(event(listener, EventKind::AddrResolved));
    assert!(readable(&a, 2000));
    let d = a.get().unwrap();
    assert_eq!(d.event.kind, EventKind::AddrResolved);
    assert!(Arc::ptr_eq(&d.conn, &conn));
    assert!(!readable(&a, 0), "a token left after the event was taken");
    // O_NONBLOCK on the fd: an empty channel is EAGAIN, not a block.
    set_nonblocking(&a);
    let e = a.get().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");

    // A connect request: the new id is routed to the listener's channel, so its next
    // event lands there too.
    let mut req = event(500, EventKind::ConnectRequest);
    req.listen_id = Some(listener);
    req.param = Some(ConnParam {
        private_data: b"hello".to_vec(),
        qp_num: 0x11,
        ..Default::default()
    });
    fake.push(req);
    fake.push(event(500, EventKind::Established));
    fake.push(event(listener, EventKind::AddrChange));
    assert!(readable(&a, 2000));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(a.len(), 3);
    assert_eq!(conn.channel_of(500).map(|c| c.same(&a)), Some(true));
    let d = a.get().unwrap();
    assert_eq!(d.event.kind, EventKind::ConnectRequest);
    assert_eq!(d.event.param.unwrap().private_data, b"hello");
    // Migrate the new id: its queued ESTABLISHED moves to b, the listener's event stays.
    conn.migrate(500, &b);
    assert_eq!((a.len(), b.len()), (1, 1));
    assert!(readable(&b, 0));
    assert_eq!(b.get().unwrap().event.kind, EventKind::Established);
    assert!(!readable(&b, 0));
    assert_eq!(a.get().unwrap().event.kind, EventKind::AddrChange);
    assert!(!readable(&a, 0));
    // Later events of the migrated id go to b.
    fake.push(event(500, EventKind::Disconnected));
    assert!(readable(&b, 2000));
    // Destroy: queued events go with their tokens; later ones are dropped.
    let gone = b.take_for(&conn, 500);
    assert_eq!(gone.len(), 1);
    assert!(!readable(&b, 0));
    conn.unroute(500);
    fake.push(event(500, EventKind::TimewaitExit));
    std::thread::sleep(Duration::from_millis(100));
    assert!(!readable(&b, 0));
    assert_eq!(
        conn.dropped_events
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert!(fake
        .commands()
        .iter()
        .any(|c| matches!(c, Command::Query { id: 1 })));

    // The daemon goes: its ids get DEVICE_REMOVAL (the listener's on a), commands fail
    // with Gone (ENODEV), never hang.
    fake.close();
    assert!(readable(&a, 2000));
    let d = a.get().unwrap();
    assert_eq!(
        (d.event.id, d.event.kind),
        (listener, EventKind::DeviceRemoval)
    );
    assert!(!readable(&b, 0), "the destroyed id got an event");
    let e = conn.command(Command::Query { id: 1 }).unwrap_err();
    assert_eq!(e.errno(), libc::ENODEV, "{e}");
    assert!(conn.is_gone());
}

#[test]
fn a_daemon_without_a_connection_manager_is_a_clear_error() {
    // The daemon of this branch's base refuses CmHello until the CM side is merged: the
    // refusal reaches the program as the daemon's reason.
    let path = std::env::temp_dir().join(format!("roce-emu-fakecm-refuse.{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let l = seqpacket_listener(&path);
    std::thread::spawn(move || {
        if let Ok((s, _)) = l.accept() {
            let s: OwnedFd = s.into();
            let _ = control::recv::<ToDaemon>(s.as_fd());
            let why = "this daemon has no connection manager".to_string();
            let _ = control::send(s.as_fd(), &ToProcess::Refused { why }, &[]);
        }
    });
    let e = Conn::connect(&path).err().expect("refused");
    assert!(e.to_string().contains("no connection manager"), "{e}");
    assert_eq!(e.errno(), libc::ENODEV);
    let _ = std::fs::remove_file(&path);
}
