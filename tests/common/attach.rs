//! A hand-driven "process" of a daemon: the control protocol and the rings by hand, no
//! engine (tests/daemon_fault.rs, tests/daemon_capture.rs).

use roce_emu::daemon::control::{self, PortInfo, ToDaemon, ToProcess};
use roce_emu::ring::{Link, LinkFds, Meta, Popped, ProcessEnd};
use roce_emu::wire::icrc::{self, PseudoHeaders};
use socket2::{Domain, SockAddr, Socket, Type};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

pub const WAIT: Duration = Duration::from_secs(5);

pub fn connect(path: &Path) -> Socket {
    let s = Socket::new(Domain::UNIX, Type::SEQPACKET, None).unwrap();
    s.connect(&SockAddr::unix(path).unwrap()).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

pub struct Proc {
    pub sock: Socket,
    pub block: u8,
    pub port: PortInfo,
    pub link: ProcessEnd,
}

pub fn attach(path: &Path) -> Proc {
    let sock = connect(path);
    let hello = ToDaemon::Hello {
        version: control::VERSION,
        pid: std::process::id(),
    };
    control::send(sock.as_fd(), &hello, &[]).unwrap();
    let (msg, _) = control::recv::<ToProcess>(sock.as_fd()).unwrap();
    let ToProcess::Welcome { block, port, .. } = msg else {
        panic!("not welcomed: {msg:?}");
    };
    let fds = LinkFds::recv(sock.as_fd()).unwrap();
    let link = Link::attach(fds).unwrap();
    Proc {
        sock,
        block,
        port,
        link,
    }
}

/// One request on a new connection, and the answer.
pub fn ask(path: &Path, msg: &ToDaemon) -> ToProcess {
    let s = connect(path);
    control::send(s.as_fd(), msg, &[]).unwrap();
    control::recv::<ToProcess>(s.as_fd()).unwrap().0
}

pub fn counters(path: &Path) -> serde_json::Value {
    match ask(path, &ToDaemon::Counters) {
        ToProcess::Counters { json } => json,
        m => panic!("{m:?}"),
    }
}

/// Sets a fault rule; the daemon's error text if it refused it.
pub fn fault(path: &Path, rule: &str) -> Option<String> {
    match ask(path, &ToDaemon::Fault { rule: rule.into() }) {
        ToProcess::FaultSet { error } => error,
        m => panic!("{m:?}"),
    }
}

/// RC SEND ONLY to `qpn`, `n` in its payload, `len` bytes with a valid ICRC for `src` ->
/// `dst` with IPv4 ID 0 (as an engine makes it: the port rebases it for the ID it uses).
pub fn packet(src: SocketAddr, dst: SocketAddr, qpn: u32, n: u32, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len.max(20)];
    p[0] = 0x04;
    p[2..4].copy_from_slice(&[0xff, 0xff]);
    p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    p[12..16].copy_from_slice(&n.to_be_bytes());
    let ph = PseudoHeaders::new(src, dst, 0, p.len());
    icrc::fill(ph.ip(), ph.udp(), &mut p).unwrap();
    p
}

/// The number `packet` put in.
pub fn number(p: &[u8]) -> u32 {
    u32::from_be_bytes(p[12..16].try_into().unwrap())
}

/// Pops everything that arrives until nothing has for `quiet`.
pub fn pop_all(p: &mut Proc, quiet: Duration) -> Vec<(Meta, Vec<u8>)> {
    let mut pool = vec![0u8; 1 << 16];
    let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let mut out = vec![
        Popped {
            meta: Meta::new(any, any),
            offset: 0,
            len: 0,
        };
        8
    ];
    let mut got = Vec::new();
    let mut last = Instant::now();
    while last.elapsed() < quiet {
        let n = p.link.rx.pop_batch(&mut pool, 8192, &mut out).unwrap();
        for o in &out[..n] {
            got.push((o.meta, pool[o.offset..o.offset + o.len].to_vec()));
        }
        if n > 0 {
            last = Instant::now();
        } else {
            let _ = p.link.rx.wait(Duration::from_millis(20));
        }
    }
    got
}
