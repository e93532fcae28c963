//! Neighbour entries that expire mid-run (issue 15, must-show 1): TAP daemons bridged in a
//! namespace of the test's own (root only), each with `--neigh-timeout 0.2` (ARP and ND
//! entries live 200 ms instead of 60 s), over IPv4 (10.97.0.2 and .3) and IPv6
//! (fd00:97::4 and ::5; daemons with only an IPv6 address, so their GID is IPv6).
//!
//! - Continuous traffic (pingpong and perf write `--check`, each running for well over a
//!   second, so every entry reaches the end of its lifetime several times): every message
//!   verified; each daemon sent ARP requests (NS) again and again, the entries in use being
//!   re-confirmed before they expire; nothing dropped for want of a neighbour.
//! - Traffic with idle gaps longer than the lifetime (two verbs contexts of this test,
//!   one on each daemon): the entries really expire (`neighbor_expired`) and are resolved
//!   again with the first message after each gap waiting in the pending queue. A 4 KiB
//!   SEND (4 packets) fits the queue: nothing refused. A 64 KiB SEND (64 packets) does
//!   not: the queue holds 16 and refuses the rest (`queue_full`), the requester
//!   retransmits, and the message arrives exactly once with every byte right.

mod common;

use common::daemon::{Daemon, BIN};
use common::netns::{skip, Netns};
use roce_emu::verbs::{self, Context, Device};
use roce_emu::verbs::{
    Access, Completion, Counter, Local, MemoryRegion, Mtu, QpAttr, QpCap, QpInit, RecvWr,
    SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus,
};
use roce_emu::verbs::{DEFAULT_MIN_RNR_TIMER, DEFAULT_TIMEOUT, MAX_RETRY_CNT, RNR_RETRY_INFINITE};
use roce_emu::wire::Psn;
use serde_json::Value;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TTL: &str = "0.2";
/// Longer than the lifetime, and than the daemon's longest sleep (100 ms), which is when
/// its timers run at the latest.
const GAP: Duration = Duration::from_millis(450);
const IOVA: u64 = 0x1000_0000;
const LEN: u64 = 1 << 18;
const SMALL: u32 = 4096;
const BIG: u32 = 65536;
/// `IfaceConfig::pending_max`: datagrams held per neighbour while it resolves.
const PENDING_MAX: u64 = 16;

fn tool_in(ns: &Netns, d: &Daemon, args: &[&str]) -> Child {
    ns.cmd(BIN)
        .args(args)
        .arg("--daemon")
        .arg(&d.socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish_ok(c: Child, who: &str) -> String {
    let o = common::proc::finish(c, Duration::from_secs(120), who);
    let (out, err) = common::proc::text(&o);
    assert!(o.status.success(), "{who}: {}\n{out}\n{err}", o.status);
    out
}

fn l2(d: &Daemon) -> Value {
    let v = d.counters();
    assert!(v["l2"].is_object(), "a TAP port has L2 counters: {v:#}");
    v["l2"].clone()
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("no counter {k}: {v:#}"))
}

/// Requests sent to resolve or re-confirm: ARP requests (IPv4) or NS (IPv6).
fn requests(l: &Value, v6: bool) -> u64 {
    n(l, if v6 { "nd_ns_tx" } else { "arp_requests_tx" })
}

/// Nothing lost for want of a neighbour: none dropped with a neighbour that never
/// answered, no request or reply lost. (Datagrams refused by a full pending queue are
/// checked against the retransmissions, `refused_were_retransmitted`.)
fn nothing_dropped(who: &str, l: &Value) {
    for k in ["pending_dropped", "resolve_failed", "control_dropped"] {
        assert_eq!(n(l, k), 0, "{who}: {k}: {l:#}");
    }
}

/// Datagrams the pending queue refused (it holds `PENDING_MAX` per neighbour while it
/// resolves) were retransmitted: the processes attached to the two daemons (their
/// per-QP counters, which the daemons keep after they exit) report go-back-N retries.
/// (Every message arriving once, every byte right, is what the tools checked.)
fn refused_were_retransmitted(daemons: [&Daemon; 2]) {
    let (mut refused, mut retries) = (0, 0);
    for d in daemons {
        let v = d.counters();
        refused += n(&v["l2"], "queue_full");
        retries += v["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["nic"]["completer_retry_err"].as_u64().unwrap_or(0))
            .sum::<u64>();
    }
    eprintln!("{refused} datagrams refused while resolving, {retries} go-back-N retries");
    if refused > 0 {
        assert!(retries > 0, "{refused} refused, never retransmitted");
    }
}

/// Pingpong and perf write between a program on `a` (server) and one on `b`; the TCP
/// exchange on the bridge's address `tcp`.
fn continuous(ns: &Netns, a: &Daemon, b: &Daemon, tcp: &str, port: u16) {
    let p = port.to_string();
    let pp = |d: &Daemon, server: bool| {
        let mut args = vec![
            "pingpong", "--bind", tcp, "-p", &p, "-n", "3000", "-s", "4096", "--wait", "20",
        ];
        if !server {
            args.push(tcp);
        }
        tool_in(ns, d, &args)
    };
    let start = Instant::now();
    let s = pp(a, true);
    let c = pp(b, false);
    assert!(finish_ok(c, "pingpong client").contains("3000 iters in"));
    assert!(finish_ok(s, "pingpong server").contains("3000 iters in"));
    let p = (port + 1).to_string();
    let pf = |d: &Daemon, server: bool| {
        let mut args = vec![
            "perf", "write", "--bind", tcp, "-p", &p, "--check", "-s", "65536", "-n", "1500",
            "--wait", "20",
        ];
        if !server {
            args.push(tcp);
        }
        tool_in(ns, d, &args)
    };
    let s = pf(a, true);
    let c = pf(b, false);
    assert!(finish_ok(c, "perf client").contains("--check: every byte verified"));
    assert!(finish_ok(s, "perf server").contains("--check: every byte verified"));
    let took = start.elapsed();
    // Several lifetimes: each entry reached its end (and was re-confirmed) again and again.
    assert!(took > Duration::from_millis(1000), "ran only {took:?}");
    eprintln!("continuous traffic over {tcp}: {took:?}");
}

// ---- two verbs contexts of this test, one on each daemon ----------------------------

struct End {
    ctx: Context,
    mr: Arc<MemoryRegion>,
    cq: u32,
    qpn: u32,
}

fn end(d: &Daemon) -> End {
    let mut dev = Device::new("127.0.0.1".parse().unwrap());
    dev.daemon = Some(d.socket.clone());
    let ctx = dev.open().expect("attach");
    let pd = ctx.alloc_pd();
    let mr = ctx.reg_mr(pd, IOVA, LEN, Access::ALL).unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qpn = ctx
        .create_qp(&QpInit {
            sq_sig_all: true,
            ..QpInit::rc(pd, cq, cap)
        })
        .unwrap();
    End { ctx, mr, cq, qpn }
}

fn connect(x: &End, y: &End) {
    let rtr = QpAttr::rtr(
        y.ctx.local_ip(),
        Mtu::M1024,
        y.qpn,
        Psn::new(0),
        4,
        DEFAULT_MIN_RNR_TIMER,
    );
    let rts = QpAttr::rts(
        Psn::new(0),
        DEFAULT_TIMEOUT,
        MAX_RETRY_CNT,
        RNR_RETRY_INFINITE,
        4,
    );
    verbs::connect_rc(&x.ctx, x.qpn, Access::ALL, &rtr, &rts).unwrap();
}

impl End {
    fn sge(&self, off: u64, len: u32) -> [Sge; 1] {
        [Sge {
            addr: IOVA + off,
            length: len,
            lkey: self.mr.lkey(),
        }]
    }

    fn post_recv(&self, wr_id: u64) {
        let sge = self.sge(0x2_0000, BIG);
        let wr = RecvWr { wr_id, sges: &sge };
        self.ctx.post_recv(self.qpn, &wr).unwrap();
    }

    /// The next completion, within `within` (None if none came).
    fn poll(&self, within: Duration) -> Option<Completion> {
        let deadline = Instant::now() + within;
        let mut c = [Completion::default()];
        loop {
            if self.ctx.poll_cq(self.cq, &mut c).unwrap() == 1 {
                return Some(c[0]);
            }
            if Instant::now() > deadline {
                return None;
            }
            self.ctx.wait(Duration::from_millis(1)).unwrap();
        }
    }

    fn counter(&self, c: Counter) -> u64 {
        self.ctx.counters().get(c)
    }
}

fn pattern(seed: u64, len: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29) ^ (seed as u8) ^ (i >> 9) as u8)
        .collect()
}

/// One SEND of `len` bytes from `x` to `y`: it arrives exactly once with every byte
/// right. `y` keeps one receive more than it needs posted, so a duplicate delivery would
/// complete it.
fn send_once(x: &End, y: &End, len: u32, seed: u64) {
    y.post_recv(seed);
    let data = pattern(seed, len);
    x.mr.write(IOVA, &data).unwrap();
    let sge = x.sge(0, len);
    let wr = SendWr {
        wr_id: seed,
        op: SendOp::Send,
        local: Local::Sges(&sge),
        flags: SendFlags {
            signaled: true,
            ..Default::default()
        },
    };
    x.ctx.post_send(x.qpn, &wr).unwrap();
    let w = Duration::from_secs(10);
    let c = x.poll(w).expect("the sender's completion");
    assert_eq!((c.status, c.wr_id), (WcStatus::Success, seed), "{c:?}");
    let r = y.poll(w).expect("the receiver's completion");
    assert_eq!(
        (r.status, r.opcode, r.byte_len),
        (WcStatus::Success, WcOpcode::Recv, len),
        "{r:?}"
    );
    let mut got = vec![0u8; len as usize];
    y.mr.read(IOVA + 0x2_0000, &mut got).unwrap();
    assert!(got == data, "SEND {seed}: the bytes differ");
    assert!(
        y.poll(Duration::from_millis(100)).is_none(),
        "SEND {seed} delivered twice"
    );
}

/// Idle gaps longer than the lifetime between messages, `rounds` times each way.
fn with_gaps(da: &Daemon, db: &Daemon, v6: bool, rounds: u64) {
    let (a, b) = (end(da), end(db));
    connect(&a, &b);
    connect(&b, &a);
    // The spare receive on each side (see `send_once`).
    a.post_recv(0);
    b.post_recv(0);
    let (la0, lb0) = (l2(da), l2(db));
    let mut seed = 1;
    let mut refused_total = 0;
    for _ in 0..rounds {
        // A to B, small: the 4 packets wait in A's pending queue while B resolves.
        std::thread::sleep(GAP);
        let full = n(&l2(da), "queue_full");
        send_once(&a, &b, SMALL, seed);
        assert_eq!(n(&l2(da), "queue_full"), full, "4 packets fit the queue");
        seed += 1;
        // B to A, large: B's queue holds 16 of the 64 packets at most; those that come
        // while it is full are refused and B's QP retransmits them.
        std::thread::sleep(GAP);
        let (full, retries) = (
            n(&l2(db), "queue_full"),
            b.counter(Counter::CompleterRetryErr),
        );
        send_once(&b, &a, BIG, seed);
        let refused = n(&l2(db), "queue_full") - full;
        assert!(
            refused <= u64::from(BIG / 1024) - PENDING_MAX,
            "B refused {refused} of 64 packets: the queue holds {PENDING_MAX}: {:#}",
            l2(db)
        );
        if refused > 0 {
            assert!(
                b.counter(Counter::CompleterRetryErr) > retries,
                "B refused {refused} packets, and its QP never retransmitted"
            );
        }
        refused_total += refused;
        seed += 1;
    }
    for (who, d, before) in [("A", da, &la0), ("B", db, &lb0)] {
        let l = l2(d);
        let diff = |k: &str| n(&l, k) - n(before, k);
        // Each gap expired the entries; each first message after one resolved again.
        assert!(diff("neighbor_expired") >= rounds, "{who}: {l:#}");
        let asked = requests(&l, v6) - requests(before, v6);
        assert!(asked >= rounds, "{who} resolved only {asked} times: {l:#}");
        for k in ["pending_dropped", "resolve_failed", "control_dropped"] {
            assert_eq!(diff(k), 0, "{who}: {k}: {l:#}");
        }
    }
    // Each message once: the receivers' QPs saw as many SENDs as were posted.
    assert_eq!(b.counter(Counter::RdmaRecvs), rounds);
    assert_eq!(a.counter(Counter::RdmaRecvs), rounds);
    eprintln!(
        "with gaps ({}): {refused_total} packets refused by a full pending queue, all \
         retransmitted; A {:#}\nB {:#}",
        if v6 { "IPv6" } else { "IPv4" },
        l2(da),
        l2(db)
    );
}

#[test]
fn neighbour_entries_that_expire_mid_run_are_resolved_again_without_losing_a_message() {
    if !nix::unistd::geteuid().is_root() {
        skip(
            "daemon_neigh",
            "needs root for a namespace, TAPs and a bridge",
        );
        return;
    }
    let ns = Netns::new("dneigh");
    ns.ip(&["link", "add", "br97", "type", "bridge"]);
    ns.ip(&["addr", "add", "10.97.0.1/24", "dev", "br97"]);
    ns.ip(&["addr", "add", "fd00:97::1/64", "dev", "br97", "nodad"]);
    ns.ip(&["link", "set", "br97", "up"]);
    let ttl = ["--neigh-timeout", TTL];
    let a = Daemon::start(Some(&ns), "tap:rdna,10.97.0.2/24", "dna", &ttl);
    let b = Daemon::start(Some(&ns), "tap:rdnb,10.97.0.3/24", "dnb", &ttl);
    let c = Daemon::start(Some(&ns), "tap:rdnc,fd00:97::4/64", "dnc", &ttl);
    let d = Daemon::start(Some(&ns), "tap:rdnd,fd00:97::5/64", "dnd", &ttl);
    for t in ["rdna", "rdnb", "rdnc", "rdnd"] {
        ns.ip(&["link", "set", t, "master", "br97"]);
    }

    for (v6, x, y, port) in [(false, &a, &b, 18952), (true, &c, &d, 18954)] {
        let before = [l2(x), l2(y)];
        continuous(&ns, x, y, "10.97.0.1", port);
        for (who, d, before) in [("server's", x, &before[0]), ("client's", y, &before[1])] {
            let l = l2(d);
            eprintln!("continuous, {who} daemon (IPv6 {v6}): {l:#}");
            nothing_dropped(who, &l);
            // Resolved at the start and re-confirmed before each expiry while in use:
            // more than once, whichever side asked first.
            let asked = requests(&l, v6) - requests(before, v6);
            assert!(asked >= 2, "{who} daemon asked {asked} times: {l:#}");
            assert!(n(&l, "neighbor_probes") >= 1, "{who}: {l:#}");
        }
        refused_were_retransmitted([x, y]);
        with_gaps(x, y, v6, 3);
    }
}
