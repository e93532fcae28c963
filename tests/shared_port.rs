//! NICs sharing one IP address (`backend::shared`): two contexts in one process, two
//! processes, a peer on another address reaching a member through the hub, and the hub
//! going away (dropped, or its process killed) while members keep their QPs. Every test
//! uses its own 127.0.15.x addresses, so they run in parallel with each other and with
//! the other test files.
//!
//! The two-process tests run this test binary again as the other process (`child_entry`,
//! chosen by `SHARED_PORT_CHILD`), talking over its stdin and stdout.

mod common;

use common::nic::{connect, exchange, pattern, Info, Nic, IOVA, READ_LEN, READ_SRC, RECV_DST};
use common::nic::{SEND_LEN, SEND_SRC, WAIT, WRITE_DST, WRITE_LEN};
use roce_emu::engine::{SendOp, WcOpcode};
use roce_emu::verbs::Device;
use std::io::{BufRead, Write};
use std::net::UdpSocket;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[test]
fn two_contexts_in_one_process_share_an_address() {
    let a = Nic::open("127.0.15.1");
    let b = Nic::open("127.0.15.1");
    let (qa, qb) = (a.qp(), b.qp());
    // The first holds the port and numbers its QPs as a NIC alone does; the second leased
    // another block of QPNs.
    assert_eq!(qa.qpn, 0x11);
    assert_eq!(qb.qpn >> 16, 1, "{:#x}", qb.qpn);
    connect(qa, qb);
    exchange(qa, qb, 1);
    // Every packet forwarded reaches the member (a last ACK may still be on its way).
    let deadline = Instant::now() + WAIT;
    while b.stats().share_received < a.stats().share_forwarded {
        assert!(Instant::now() < deadline, "{:?} {:?}", a.stats(), b.stats());
        std::thread::sleep(Duration::from_millis(2));
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.share_joined, sa.share_left), (1, 0), "{sa:?}");
    assert!(sa.share_forwarded > 0, "{sa:?}");
    assert!(sa.share_forward_msgs > 0, "{sa:?}");
    assert!(sa.share_forward_msgs <= sa.share_forwarded, "{sa:?}");
    assert_eq!(sa.share_forward_dropped, 0, "{sa:?}");
    assert_eq!(sb.share_received, sa.share_forwarded, "{sa:?} {sb:?}");
    assert_eq!(sb.share_malformed, 0, "{sb:?}");
    // The member goes: the hub sees it leave.
    drop(b);
    let deadline = Instant::now() + WAIT;
    while a.stats().share_left == 0 {
        assert!(Instant::now() < deadline, "the hub never saw the member go");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A peer on another address reaches a member's QP through the hub, and the hub sorts
/// what it receives: a packet for a block nobody leased stays with it (counted), one for
/// the member's block is forwarded.
#[test]
fn a_peer_elsewhere_reaches_a_member_through_the_hub() {
    let hub = Nic::open("127.0.15.2");
    let member = Nic::open("127.0.15.2");
    let far = Nic::open("127.0.15.3");
    let (qm, qf) = (member.qp(), far.qp());
    assert!(qm.qpn >= 0x1_0000, "{:#x}", qm.qpn);
    connect(qm, qf);
    exchange(qm, qf, 7);
    let s = hub.stats();
    assert!(s.share_forwarded > 0, "{s:?}");
    assert_eq!(s.share_unleased, 0, "{s:?}");

    // Raw datagrams with only a BTH: DestQP 0x50_0011 (block 0x50, unleased) and one in
    // the member's block.
    let raw = UdpSocket::bind("127.0.15.3:0").unwrap();
    let forwarded = member.stats().share_received;
    for dqpn in [0x50_0011u32, qm.qpn] {
        let mut p = [0u8; 32];
        p[0] = 0x04; // RC SEND ONLY
        p[4..8].copy_from_slice(&dqpn.to_be_bytes());
        raw.send_to(&p, "127.0.15.2:4791").unwrap();
    }
    let deadline = Instant::now() + WAIT;
    while hub.stats().share_unleased < 1 || member.stats().share_received < forwarded + 1 {
        assert!(
            Instant::now() < deadline,
            "{:?} {:?}",
            hub.stats(),
            member.stats()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(hub.stats().share_unleased, 1);
    // The member's engine dropped it (no valid ICRC); its QP still works.
    exchange(qm, qf, 9);
}

/// The hub's context is dropped mid-run: one member becomes the hub, the other joins it,
/// both keep their QPs (to each other, and to a peer elsewhere), and a third context then
/// joins the new hub.
#[test]
fn members_keep_their_qps_when_the_hub_goes() {
    let hub = Nic::open("127.0.15.4");
    let hq = hub.qp();
    let m1 = Nic::open("127.0.15.4");
    let m2 = Nic::open("127.0.15.4");
    let far = Nic::open("127.0.15.5");
    let (m1_far, m1_m2, m2_m1) = (m1.qp(), m1.qp(), m2.qp());
    let (far_m1, far_hub) = (far.qp(), far.qp());
    connect(m1_far, far_m1);
    connect(m1_m2, m2_m1);
    connect(hq, far_hub);
    exchange(m1_far, far_m1, 1);
    exchange(m1_m2, m2_m1, 2);
    exchange(hq, far_hub, 3);
    assert_eq!(hub.stats().share_joined, 2);

    drop(hub);
    exchange(m1_far, far_m1, 4);
    exchange(m1_m2, m2_m1, 5);
    let (s1, s2) = (m1.stats(), m2.stats());
    assert_eq!(
        (
            s1.share_takeovers + s2.share_takeovers,
            s1.share_rejoins + s2.share_rejoins
        ),
        (1, 1),
        "{s1:?} {s2:?}"
    );

    let third = Nic::open("127.0.15.4");
    let (q3, far_3) = (third.qp(), far.qp());
    let blocks = [m1_far.qpn >> 16, m2_m1.qpn >> 16, q3.qpn >> 16];
    assert!(
        blocks[2] != blocks[0] && blocks[2] != blocks[1],
        "{blocks:x?}"
    );
    connect(q3, far_3);
    exchange(q3, far_3, 6);
    let new_hub = if s1.share_takeovers == 1 { &m1 } else { &m2 };
    assert_eq!(
        new_hub.stats().share_joined,
        2,
        "the other member and the third"
    );
    exchange(m1_m2, m2_m1, 7);
}

// ---- two processes -------------------------------------------------------------------

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
        let mut child = cmd
            .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{mode} {addr}"))
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

/// Two processes open the same address: the second is a member; they SEND, WRITE and
/// READ to each other.
#[test]
fn two_processes_on_one_address_exchange_messages() {
    let a = Nic::open("127.0.15.6");
    let qa = a.qp();
    let mut peer = Peer::spawn("member", "127.0.15.6");
    let theirs = parse_info(&peer.expect("INFO"));
    assert!(
        theirs.qpn >= 0x1_0000,
        "the child leased a block: {theirs:?}"
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
    let s = a.stats();
    assert!(s.share_forwarded > 0 && s.share_joined == 1, "{s:?}");
}

/// The hub is another process, killed mid-run: this process's member becomes the hub,
/// keeps its QP to a peer elsewhere, and a third context joins it.
#[test]
fn a_member_outlives_the_hub_process() {
    let mut hub = Peer::spawn("hub", "127.0.15.7");
    hub.expect("READY");
    let m = Nic::open("127.0.15.7");
    let far = Nic::open("127.0.15.8");
    let (qm, qf) = (m.qp(), far.qp());
    assert!(qm.qpn >= 0x1_0000, "a member: {:#x}", qm.qpn);
    connect(qm, qf);
    exchange(qm, qf, 1);
    // SIGKILL: the hub's process gets no say; the kernel closes its sockets.
    hub.child.kill().unwrap();
    hub.child.wait().unwrap();
    exchange(qm, qf, 2);
    let s = m.stats();
    assert_eq!(s.share_takeovers, 1, "{s:?}");
    let third = Nic::open("127.0.15.7");
    let q3 = third.qp();
    assert_ne!(q3.qpn >> 16, qm.qpn >> 16);
    let qm3 = m.qp();
    connect(q3, qm3);
    exchange(q3, qm3, 3);
    assert_eq!(m.stats().share_joined, 1);
    drop(hub);
}

/// Whether this test runs as root (it can then start a child as another user); else it
/// says loudly that it skips.
fn root_or_skip(test: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        eprintln!("SKIPPED: {test} needs root (a child process as uid 65534)");
    }
    root
}

/// The hub's listening name is abstract (no permissions): a NIC of another user connects
/// to it, and must be refused, or its packets would reach this user's processes and this
/// user's packets for its block would reach it.
#[test]
fn another_users_nic_cannot_join_the_hub() {
    if !root_or_skip("another_users_nic_cannot_join_the_hub") {
        return;
    }
    let hub = Nic::open("127.0.15.11");
    let mut other = Peer::spawn_as("try", "127.0.15.11", Some(65534));
    let l = other.expect("");
    assert!(
        l.starts_with("REFUSED") && l.contains("another user"),
        "{l}"
    );
    other.finish();
    let s = hub.stats();
    assert_eq!((s.share_joined, s.share_forwarded), (0, 0), "{s:?}");
    assert!(hub.ctx.local_ip().is_ipv4());
}

/// And a NIC never joins a hub of another user (who would then receive its packets).
#[test]
fn a_hub_of_another_user_is_not_joined() {
    if !root_or_skip("a_hub_of_another_user_is_not_joined") {
        return;
    }
    let mut hub = Peer::spawn_as("hub", "127.0.15.12", Some(65534));
    hub.expect("READY");
    let e = Device::new("127.0.15.12".parse().unwrap())
        .open()
        .err()
        .expect("a hub of uid 65534 must not be joined by root");
    assert!(e.to_string().contains("another user"), "{e}");
    drop(hub);
}

/// Connections that say nothing (a stuck or hostile program of this user) neither block
/// nor delay a NIC that joins after them.
#[test]
fn silent_connections_do_not_stop_a_join() {
    use socket2::{Domain, SockAddr, Socket, Type};
    let ip: std::net::IpAddr = "127.0.15.13".parse().unwrap();
    let hub = Nic::open("127.0.15.13");
    let name = roce_emu::backend::shared::listener_name(ip);
    let silent: Vec<Socket> = (0..20)
        .map(|_| {
            let s = Socket::new(Domain::UNIX, Type::SEQPACKET, None).unwrap();
            s.connect(&SockAddr::unix(&name).unwrap()).unwrap();
            s
        })
        .collect();
    let start = Instant::now();
    let m = Nic::open("127.0.15.13");
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "the join took {:?}",
        start.elapsed()
    );
    let (qh, qm) = (hub.qp(), m.qp());
    connect(qh, qm);
    exchange(qh, qm, 1);
    drop(silent);
}

/// A block a member left is not granted to the next NIC at once: a late packet for one of
/// the old QPs must not reach a QP of the new NIC with the same QPN.
#[test]
fn a_departed_members_block_is_quarantined() {
    let hub = Nic::open("127.0.15.14");
    let first = Nic::open("127.0.15.14");
    let block = first.qp().qpn >> 16;
    drop(first);
    let start = Instant::now();
    while hub.stats().share_left == 0 {
        assert!(start.elapsed() < WAIT, "the member never left");
        std::thread::sleep(Duration::from_millis(2));
    }
    let next = Nic::open("127.0.15.14");
    assert_ne!(next.qp().qpn >> 16, block, "the departed member's block");
}

/// A NIC that made no QP (a program that only opened the device, as pyverbs' tests open
/// and close hundreds) leaves no quarantine behind: no peer can know its QPNs.
#[test]
fn a_block_never_used_for_a_qp_comes_back_at_once() {
    let hub = Nic::open("127.0.15.17");
    for i in 0..300 {
        let m = Device::new("127.0.15.17".parse().unwrap())
            .open()
            .unwrap_or_else(|e| panic!("open number {i}: {e}"));
        drop(m);
        let start = Instant::now();
        while hub.stats().share_left < i + 1 {
            assert!(start.elapsed() < WAIT, "the member never left");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The hub's process forks a child that lives on without exec, then exits: the child must
/// not keep the port and the hub's sockets (closed in forked children), or this member
/// never sees the hub go, cannot take the port over, and its QP dies.
#[test]
fn a_hub_that_forks_and_exits_leaves_the_port_to_its_members() {
    let mut hub = Peer::spawn("forkhub", "127.0.15.15");
    let ready = hub.expect("READY");
    let grandchild: i32 = ready.split_whitespace().nth(1).unwrap().parse().unwrap();
    let m = Nic::open("127.0.15.15");
    let far = Nic::open("127.0.15.16");
    let (qm, qf) = (m.qp(), far.qp());
    assert!(qm.qpn >= 0x1_0000, "a member: {:#x}", qm.qpn);
    connect(qm, qf);
    exchange(qm, qf, 1);
    hub.say("go");
    let deadline = Instant::now() + WAIT;
    while hub.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the hub did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
    exchange(qm, qf, 2);
    let s = m.stats();
    // The forked child, ours to end.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(grandchild),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert_eq!(s.share_takeovers, 1, "{s:?}");
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
    if mode == "try" {
        // Opens the address and says whether it could.
        match Device::new(addr.parse().unwrap()).open() {
            Ok(_) => println!("CHILD OPENED"),
            Err(e) => println!("CHILD REFUSED {e}"),
        }
        return;
    }
    if mode == "forkhub" {
        // The hub, which forks a child that lives on (no exec) and then exits itself.
        let n = Nic::open(addr);
        let _q = n.qp();
        // SAFETY: the child only sleeps (async-signal-safe) until killed or 30 s pass.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            for _ in 0..30 {
                // SAFETY: sleep(3) in the forked child.
                unsafe { libc::sleep(1) };
            }
            // SAFETY: leave without running the parent's atexit handlers or destructors.
            unsafe { libc::_exit(0) };
        }
        println!("CHILD READY {pid}");
        let _ = stdin.next();
        // Exits with its NIC open, as a program that returns from main.
        std::process::exit(0);
    }
    let n = Nic::open(addr);
    match mode {
        "hub" => {
            let _q = n.qp();
            println!("CHILD READY");
            // Until killed (or the parent's end closes).
            while let Some(Ok(_)) = stdin.next() {}
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
