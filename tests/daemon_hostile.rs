//! One hostile client against `roce-emu daemon` while two honest programs use it (issue 21,
//! finding 2d): a UDP daemon on 127.0.36.1; `perf write --check` (server and client,
//! TCP port 18960) through it; and in this test process one client doing every trick at
//! once, from threads, re-attaching whenever the daemon drops it:
//! - it clears O_NONBLOCK on both of its doorbell ends (`fcntl F_SETFL 0`), never drains
//!   them, fills its receive bell (an eventfd's counter, on a daemon of protocol 1) and
//!   rings its transmit bell without end (256 rings, a 200 us pause);
//! - it keeps its transmit ring full: packets to the port's own address for a QPN block
//!   nobody holds, to its own block (whose receive ring it never reads), and to
//!   127.0.36.2:4791, where nobody listens;
//! - it sends `Counters` requests on its control socket without end and never reads one
//!   answer;
//! - it sends `QpCounters` reports of garbage JSON, one with a counter name of 60 KB (as
//!   large as a message may be) and one of 100 KB (larger than any);
//! - 20 more connections of it say nothing.
//!
//! Meanwhile `roce-emu counters --json` runs every 200 ms and must answer within 2 s each
//! time. At the end both perf sides have verified every byte, and the daemon is alive and
//! answers once more after the hostile client goes.
//!
//! `ROCE_EMU_BIN_UNDER_TEST` runs another build of `roce-emu` (the daemon, perf and
//! counters), and `ROCE_EMU_PROTOCOL_UNDER_TEST` the protocol version the hostile client
//! says, to show the test fail on a daemon before the hardening (protocol 1, eventfd bells).

use roce_emu::daemon::control::{self, ControlError, ToDaemon, ToProcess};
use roce_emu::daemon::lease;
use roce_emu::ring::{Link, LinkFds, Meta};
use socket2::{Domain, SockAddr, Socket, Type};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PORT_IP: &str = "127.0.36.1";
/// Nobody listens there: the daemon's sends to it go to loopback and are dropped.
const NOBODY: &str = "127.0.36.2:4791";
/// The longest a `counters` answer may take.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);
/// A `counters` still running this long is killed (and counted as unanswered).
const COUNTERS_LIMIT: Duration = Duration::from_secs(5);
const PERF_LIMIT: Duration = Duration::from_secs(40);
/// How long the hostile client keeps at it (longer if perf takes longer).
const HOSTILE_FOR: Duration = Duration::from_secs(12);

fn bin() -> PathBuf {
    std::env::var_os("ROCE_EMU_BIN_UNDER_TEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_roce-emu")))
}

fn protocol() -> u32 {
    std::env::var("ROCE_EMU_PROTOCOL_UNDER_TEST")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(control::VERSION)
}

/// A child of ours: SIGTERM (by PID) when dropped, SIGKILL if it has not gone in 5 s.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for `c` at most `limit` (killed, by PID, after): its exit status if it exited,
/// and its output.
fn wait_output(mut c: Child, limit: Duration) -> (Option<std::process::ExitStatus>, String) {
    let deadline = Instant::now() + limit;
    let mut exited = None;
    while Instant::now() < deadline {
        if let Ok(Some(s)) = c.try_wait() {
            exited = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if exited.is_none() {
        let _ = c.kill();
    }
    let o = c.wait_with_output().expect("output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (exited, text)
}

/// `roce-emu counters --json`: how long it took and what it said, or why it did not answer.
fn ask_counters(socket: &Path) -> Result<(Duration, serde_json::Value), String> {
    let t = Instant::now();
    let c = Command::new(bin())
        .args(["counters", "--json", "--daemon"])
        .arg(socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    match wait_output(c, COUNTERS_LIMIT) {
        (Some(s), out) if s.success() => {
            let took = t.elapsed();
            let v = serde_json::from_str::<serde_json::Value>(out.trim())
                .map_err(|e| format!("not JSON ({e}): {out}"))?;
            Ok((took, v))
        }
        (Some(s), out) => Err(format!("failed ({s}): {out}")),
        (None, _) => Err(format!("no answer within {COUNTERS_LIMIT:?}")),
    }
}

fn perf(socket: &Path, server: bool) -> Child {
    let mut c = Command::new(bin());
    c.args([
        "perf", "write", "-p", "18960", "--bind", PORT_IP, "-s", "65536", "-n", "2000", "-m",
        "1024", "--check", "--wait", "20", "--daemon",
    ])
    .arg(socket);
    if !server {
        c.arg(PORT_IP);
    }
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn connect(path: &Path) -> Socket {
    let s = Socket::new(Domain::UNIX, Type::SEQPACKET, None).unwrap();
    s.connect(&SockAddr::unix(path).unwrap()).unwrap();
    s
}

/// A BTH-shaped packet for DestQP `qpn`.
fn packet(qpn: u32, len: usize) -> Vec<u8> {
    let mut p = vec![0x5a; len];
    p[0] = 0x04; // RC SEND ONLY
    p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    p
}

/// Clears O_NONBLOCK on a descriptor we were given (on an eventfd this is the daemon's
/// open file too).
fn make_blocking(fd: &OwnedFd) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    fcntl(fd, FcntlArg::F_SETFL(OFlag::empty())).unwrap();
}

/// Rings a doorbell end without ever waiting ourselves: a byte on a socket (protocol 2),
/// an increment of an eventfd (protocol 1).
fn ring(bell: &OwnedFd) {
    use nix::sys::socket::{send, MsgFlags};
    match send(bell.as_raw_fd(), &[1], MsgFlags::MSG_DONTWAIT) {
        Err(nix::errno::Errno::ENOTSOCK) => {
            let mut pfd = [nix::poll::PollFd::new(
                bell.as_fd(),
                nix::poll::PollFlags::POLLOUT,
            )];
            if nix::poll::poll(&mut pfd, nix::poll::PollTimeout::ZERO).unwrap_or(0) > 0 {
                let _ = nix::unistd::write(bell, &1u64.to_ne_bytes());
            }
        }
        _ => std::thread::yield_now(),
    }
}

#[derive(Default)]
struct Tally {
    sessions: AtomicU64,
    pushed: AtomicU64,
    rings: AtomicU64,
    counters_sent: AtomicU64,
    reports_sent: AtomicU64,
    oversized: AtomicU64,
}

/// One attachment of the hostile client, every trick from its own thread, until the
/// daemon drops it or `stop`. `Err` if it could not attach.
fn hostile_session(socket: &Path, stop: &AtomicBool, tally: &Tally) -> Result<(), String> {
    let sock = connect(socket);
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let hello = ToDaemon::Hello {
        version: protocol(),
        pid: std::process::id(),
    };
    control::send(sock.as_fd(), &hello, &[]).map_err(|e| format!("hello: {e}"))?;
    let (msg, _) = control::recv::<ToProcess>(sock.as_fd()).map_err(|e| format!("welcome: {e}"))?;
    let ToProcess::Welcome {
        block,
        port,
        src_port,
        ..
    } = msg
    else {
        return Err(format!("not welcomed: {msg:?}"));
    };
    let fds = LinkFds::recv(sock.as_fd()).map_err(|e| format!("link: {e:?}"))?;
    tally.sessions.fetch_add(1, Ordering::Relaxed);
    make_blocking(&fds.rx_bell);
    make_blocking(&fds.tx_bell);
    let tx_bell = fds.tx_bell.try_clone().unwrap();
    // On an eventfd, a counter one short of its maximum: the daemon's next ring of it
    // would wait for us to read it, which we never do. On a socket, 8 bytes to the
    // daemon's end, which it never reads.
    let _ = nix::unistd::write(&fds.rx_bell, &(u64::MAX - 1).to_ne_bytes());
    let link = Link::attach(fds).map_err(|e| format!("attach: {e:?}"))?;
    let (mut rx, mut tx) = (link.rx, link.tx);
    let _ = sock.set_nonblocking(true);
    let ip = port.addrs[0];
    let ours = SocketAddr::new(ip, src_port.unwrap_or(4791));
    let to_self = SocketAddr::new(ip, 4791);
    let nobody: SocketAddr = NOBODY.parse().unwrap();
    let free_block = lease::range(200).0;
    let own_block = lease::range(block).0;
    let gone = AtomicBool::new(false);
    let over = || stop.load(Ordering::Relaxed) || gone.load(Ordering::Relaxed);
    std::thread::scope(|s| {
        // The transmit bell, rung without end.
        // (Every loop of the client pauses a moment now and then: a program that burns a
        // core slows its neighbours through the kernel's scheduler, not the daemon, and on
        // a 2-core machine it would time out the honest programs' RC retries by itself.)
        s.spawn(|| {
            while !over() {
                for _ in 0..256 {
                    ring(&tx_bell);
                }
                tally.rings.fetch_add(256, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        // The transmit ring, kept full; the receive ring, armed and never read.
        s.spawn(|| {
            let mut i = 0u32;
            while !over() {
                let (dst, qpn) = match i % 3 {
                    0 => (to_self, free_block | (i & 0xffff)),
                    1 => (to_self, own_block | 1),
                    _ => (nobody, free_block | 1),
                };
                i = i.wrapping_add(1);
                match tx.push(&Meta::new(ours, dst), &packet(qpn, 1024)) {
                    Ok(()) => {
                        tally.pushed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => std::thread::sleep(Duration::from_micros(100)),
                }
                let _ = rx.arm();
            }
        });
        // Counters requests, never an answer read; reports of garbage.
        s.spawn(|| {
            let garbage = [
                serde_json::json!({ "nic": { "x".repeat(60_000): 1 } }),
                serde_json::json!({ "qps": [{ "qpn": own_block | 1,
                    "counters": { "y".repeat(60_000): 5 } }] }),
                serde_json::json!({ "nic": [[[[1]]]], "qps": "all of them", "tx_dropped": -1 }),
                serde_json::json!({ "qps": [null, 1, {"qpn": "x"}, {"qpn": u64::MAX}] }),
                serde_json::json!([1, 2, 3]),
            ];
            let started = Instant::now();
            let mut i = 0usize;
            let mut sent_big = false;
            while !over() {
                match control::try_send(sock.as_fd(), &ToDaemon::Counters) {
                    Ok(()) => {
                        tally.counters_sent.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(ControlError::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(_) => gone.store(true, Ordering::Relaxed),
                }
                let report = ToDaemon::QpCounters {
                    report: garbage[i % garbage.len()].clone(),
                };
                i += 1;
                if control::try_send(sock.as_fd(), &report).is_ok() {
                    tally.reports_sent.fetch_add(1, Ordering::Relaxed);
                }
                // After 4 s (it ends the attachment on a daemon that checks, and the
                // client attaches again): a report of 100 KB, larger than any message,
                // then one that is not JSON.
                if !sent_big && started.elapsed() > Duration::from_secs(4) {
                    let big = format!(
                        r#"{{"msg":"qp_counters","report":{{"nic":{{"{}":1}}}}}}"#,
                        "z".repeat(100_000)
                    );
                    if control::try_send_bytes(sock.as_fd(), big.as_bytes()).is_ok() {
                        sent_big = true;
                        tally.oversized.fetch_add(1, Ordering::Relaxed);
                        let _ = control::try_send_bytes(sock.as_fd(), b"{\"msg\":\"qp_count");
                    }
                }
            }
        });
    });
    Ok(())
}

#[test]
fn a_hostile_client_neither_stops_nor_starves_the_daemon() {
    let socket = std::env::temp_dir().join(format!("roce-emu-hostile-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&socket);
    let daemon = Guard(
        Command::new(bin())
            .args(["daemon", "--port", &format!("udp:{PORT_IP}"), "--socket"])
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "the daemon never made its socket"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let began = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    // The hostile client: attached again each time the daemon drops it.
    let hostile = {
        let (socket, stop, tally) = (socket.clone(), Arc::clone(&stop), Arc::clone(&tally));
        std::thread::spawn(move || {
            let silent: Vec<Socket> = (0..20).map(|_| connect(&socket)).collect();
            let mut refusals = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Err(e) = hostile_session(&socket, &stop, &tally) {
                    refusals.push(e);
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            drop(silent);
            refusals
        })
    };
    // The observer: `counters` every 200 ms.
    let answers = Arc::new(Mutex::new(Vec::<Result<Duration, String>>::new()));
    let observer = {
        let (socket, stop, answers) = (socket.clone(), Arc::clone(&stop), Arc::clone(&answers));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let a = ask_counters(&socket).map(|(took, _)| took);
                answers.lock().unwrap().push(a);
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };

    std::thread::sleep(Duration::from_millis(500));
    let server = perf(&socket, true);
    std::thread::sleep(Duration::from_millis(300));
    let client = perf(&socket, false);
    let t = Instant::now();
    let client = wait_output(client, PERF_LIMIT);
    let server = wait_output(server, PERF_LIMIT.saturating_sub(t.elapsed()));
    let perf_took = t.elapsed();
    // The hostile client stays at least `HOSTILE_FOR` (past the daemon's 10 s limit for
    // connections that never attach), the observer with it.
    while began.elapsed() < HOSTILE_FOR {
        std::thread::sleep(Duration::from_millis(50));
    }

    stop.store(true, Ordering::Relaxed);
    let refusals = hostile.join().unwrap();
    observer.join().unwrap();
    let answers = answers.lock().unwrap().clone();
    let worst = answers
        .iter()
        .filter_map(|a| a.as_ref().ok())
        .max()
        .copied();
    let late: Vec<_> = answers
        .iter()
        .filter(|a| !matches!(a, Ok(d) if *d <= ANSWER_WITHIN))
        .collect();
    eprintln!(
        "hostile: {} attachments ({} refused), {} packets pushed, {} rings, {} counters \
         requests and {} reports unread, {} oversized; perf took {perf_took:?}; counters answered {} \
         times, worst {worst:?}, {} late or unanswered; refusals {refusals:?}",
        tally.sessions.load(Ordering::Relaxed),
        refusals.len(),
        tally.pushed.load(Ordering::Relaxed),
        tally.rings.load(Ordering::Relaxed),
        tally.counters_sent.load(Ordering::Relaxed),
        tally.reports_sent.load(Ordering::Relaxed),
        tally.oversized.load(Ordering::Relaxed),
        answers.len(),
        late.len(),
    );

    let mut daemon = daemon;
    let alive = daemon.0.try_wait().unwrap().is_none();
    let last = ask_counters(&socket);
    for (who, (status, out)) in [("perf client", &client), ("perf server", &server)] {
        assert!(
            status.is_some_and(|s| s.success()) && out.contains("--check: every byte verified"),
            "{who} ({status:?}, counters worst {worst:?}, {} late):\n{out}",
            late.len()
        );
    }
    assert!(
        tally.sessions.load(Ordering::Relaxed) >= 1,
        "the hostile client never attached: {refusals:?}"
    );
    assert!(
        answers.len() >= 5,
        "counters asked only {} times",
        answers.len()
    );
    assert!(late.is_empty(), "counters late or unanswered: {late:?}");
    assert!(alive, "the daemon died");
    let (took, v) = last.expect("the daemon answers after the hostile client went");
    assert!(took < ANSWER_WITHIN, "last answer took {took:?}");
    // Every trick reached the daemon: packets for nobody's block and off the machine,
    // reports that were garbage, messages that were not messages; and why it dropped
    // each attachment of the hostile client.
    let k = &v["counters"];
    let hostile: Vec<&serde_json::Value> = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["pid"] == std::process::id())
        .collect();
    eprintln!(
        "daemon: no_owner {}, ring_full {}, sent_pkts {}, control_errors {}; hostile \
         attachments left: {:?}",
        k["no_owner"],
        k["ring_full"],
        k["sent_pkts"],
        k["control_errors"],
        hostile.iter().map(|p| &p["left"]).collect::<Vec<_>>()
    );
    assert!(k["no_owner"].as_u64() > Some(0), "{v:#}");
    assert!(
        k["sent_pkts"].as_u64() > Some(0),
        "nothing sent to {NOBODY}: {v:#}"
    );
    assert!(
        hostile
            .iter()
            .any(|p| p["report_errors"].as_u64() > Some(0)),
        "{v:#}"
    );
}
