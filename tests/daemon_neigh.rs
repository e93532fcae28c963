//! Neighbour entries that expire mid-run (issue 15, must-show 1), and the neighbour
//! states that make an expiry cost nothing (RFC 4861 §7.3.2's REACHABLE, STALE, DELAY,
//! PROBE, as Linux applies them to ARP too): TAP daemons bridged in a namespace of the
//! test's own (root only), each with `--neigh-timeout 0.2` (ARP and ND entries are
//! REACHABLE for 200 ms instead of 60 s, and a used STALE entry waits as long in DELAY
//! before its first unicast probe), over IPv4 (10.97.0.2 and .3) and IPv6 (fd00:97::4
//! and ::5; daemons with only an IPv6 address, so their GID is IPv6).
//!
//! - Continuous traffic (pingpong and perf write `--check`, each running for well over a
//!   second, so every entry reaches the end of its lifetime several times): every message
//!   verified; the entries in use were re-validated by unicast probes (ARP requests, NS)
//!   again and again; nothing dropped for want of a neighbour, nothing refused by the
//!   pending queue.
//! - Traffic with idle gaps longer than the lifetime (two verbs contexts of this test,
//!   one on each daemon): the entries really expire (`neighbor_expired`), and the first
//!   message after each gap goes out at once on the STALE entry (`neighbor_stale_used`):
//!   a 4 KiB SEND (4 packets) and a 64 KiB SEND (64 packets, more than the 16 the pending
//!   queue holds) with 0 packets refused and no retransmission; each entry is then probed
//!   and confirmed again (`neighbor_probes`, `neighbor_reconfirmed`), no probe failing.
//! - A peer whose daemon stops and is started again on its TAP and address, which gets
//!   another (random) MAC. Silent, it is found by the probes: they go unanswered, the
//!   entry is removed (`neighbor_probe_failed`) and the next (retransmitted) packet
//!   resolves the new MAC. Speaking first, its broadcast ARP request replaces the MAC
//!   (`neighbor_mac_changed`) and nothing is retransmitted.

mod common;

use common::daemon::{finish_ok_within, tool_in as d_tool, Daemon};
use common::netns::{skip, Netns};
use roce_emu::verbs::{self, Context, Device};
use roce_emu::verbs::{
    Access, Completion, Counter, Local, MemoryRegion, Mtu, QpAttr, QpCap, QpInit, RecvWr,
    SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus,
};
use roce_emu::verbs::{DEFAULT_MIN_RNR_TIMER, DEFAULT_TIMEOUT, MAX_RETRY_CNT, RNR_RETRY_INFINITE};
use roce_emu::wire::Psn;
use serde_json::Value;

use std::sync::Arc;
use std::time::{Duration, Instant};

const TTL: &str = "0.2";
/// Longer than the lifetime plus DELAY plus the daemon's longest sleep (100 ms, which is
/// when its timers run at the latest): an entry used before the gap was probed, confirmed
/// and has become STALE again when the gap ends.
const GAP: Duration = Duration::from_millis(650);
const IOVA: u64 = 0x1000_0000;
const LEN: u64 = 1 << 18;
const SMALL: u32 = 4096;
const BIG: u32 = 65536;
/// A local ACK timeout of 4.096 µs × 2^18 (about 1.07 s), 8 tries: long enough for an
/// entry naming a MAC that is gone to be probed (DELAY, then 3 probes a second apart) and
/// removed while the requester still retries.
const LONG_TIMEOUT: u8 = 18;

fn l2(d: &Daemon) -> Value {
    let v = d.counters();
    assert!(v["l2"].is_object(), "a TAP port has L2 counters: {v:#}");
    v["l2"].clone()
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("no counter {k}: {v:#}"))
}

/// Requests sent to resolve or to probe: ARP requests (IPv4) or NS (IPv6).
fn requests(l: &Value, v6: bool) -> u64 {
    n(l, if v6 { "nd_ns_tx" } else { "arp_requests_tx" })
}

/// Nothing lost for want of a neighbour: none dropped with a neighbour that never
/// answered, no request or reply lost.
fn nothing_dropped(who: &str, l: &Value) {
    for k in ["pending_dropped", "resolve_failed", "control_dropped"] {
        assert_eq!(n(l, k), 0, "{who}: {k}: {l:#}");
    }
}

/// The pending queue refused nothing (a STALE entry is used at once, so a datagram waits
/// only for a neighbour never resolved, or one whose probes failed).
fn nothing_refused(who: &str, l: &Value) {
    assert_eq!(n(l, "queue_full"), 0, "{who}: {l:#}");
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
        d_tool(ns, d, &args)
    };
    let start = Instant::now();
    let s = pp(a, true);
    let c = pp(b, false);
    assert!(finish_ok_within(120, c, "pingpong client").contains("3000 iters in"));
    assert!(finish_ok_within(120, s, "pingpong server").contains("3000 iters in"));
    let p = (port + 1).to_string();
    let pf = |d: &Daemon, server: bool| {
        let mut args = vec![
            "perf", "write", "--bind", tcp, "-p", &p, "--check", "-s", "65536", "-n", "1500",
            "--wait", "20",
        ];
        if !server {
            args.push(tcp);
        }
        d_tool(ns, d, &args)
    };
    let s = pf(a, true);
    let c = pf(b, false);
    assert!(finish_ok_within(120, c, "perf client").contains("--check: every byte verified"));
    assert!(finish_ok_within(120, s, "perf server").contains("--check: every byte verified"));
    let took = start.elapsed();
    // Several lifetimes: each entry reached its end (and was probed) again and again.
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
            srq: None,
            ..QpInit::rc(pd, cq, cap)
        })
        .unwrap();
    End { ctx, mr, cq, qpn }
}

fn connect(x: &End, y: &End) {
    connect_with(x, y, DEFAULT_TIMEOUT);
}

fn connect_with(x: &End, y: &End, timeout: u8) {
    let rtr = QpAttr::rtr(
        y.ctx.local_ip(),
        Mtu::M1024,
        y.qpn,
        Psn::new(0),
        4,
        DEFAULT_MIN_RNR_TIMER,
    );
    let rts = QpAttr::rts(Psn::new(0), timeout, MAX_RETRY_CNT, RNR_RETRY_INFINITE, 4);
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
    for _ in 0..rounds {
        // A to B, small, then B to A, large (64 packets: four times what the pending
        // queue holds): each after a gap, each on a STALE entry, sent at once.
        for (x, y, dx, len) in [(&a, &b, da, SMALL), (&b, &a, db, BIG)] {
            std::thread::sleep(GAP);
            let (l0, retries) = (l2(dx), x.counter(Counter::CompleterRetryErr));
            send_once(x, y, len, seed);
            let l = l2(dx);
            let diff = |k: &str| n(&l, k) - n(&l0, k);
            assert_eq!(diff("queue_full"), 0, "{len} B: packets refused: {l:#}");
            assert!(
                diff("neighbor_stale_used") >= 1,
                "{len} B: not STALE: {l:#}"
            );
            assert_eq!(
                x.counter(Counter::CompleterRetryErr),
                retries,
                "{len} B: retransmitted"
            );
            seed += 1;
        }
    }
    // The last entries used are probed and confirmed after DELAY.
    std::thread::sleep(GAP);
    for (who, d, before) in [("A", da, &la0), ("B", db, &lb0)] {
        let l = l2(d);
        let diff = |k: &str| n(&l, k) - n(before, k);
        // Each gap expired the entries; each first message after one used the STALE
        // entry, which was then probed (unicast) and confirmed.
        for k in [
            "neighbor_expired",
            "neighbor_stale_used",
            "neighbor_probes",
            "neighbor_reconfirmed",
        ] {
            assert!(diff(k) >= rounds, "{who}: {k}: {l:#}");
        }
        let asked = requests(&l, v6) - requests(before, v6);
        assert!(asked >= rounds, "{who} asked only {asked} times: {l:#}");
        for k in [
            "pending_dropped",
            "resolve_failed",
            "control_dropped",
            "queue_full",
            "neighbor_probe_failed",
        ] {
            assert_eq!(diff(k), 0, "{who}: {k}: {l:#}");
        }
    }
    // Each message once: the receivers' QPs saw as many SENDs as were posted.
    assert_eq!(b.counter(Counter::RdmaRecvs), rounds);
    assert_eq!(a.counter(Counter::RdmaRecvs), rounds);
    eprintln!(
        "with gaps ({}): every message sent at once on a STALE entry; A {:#}\nB {:#}",
        if v6 { "IPv6" } else { "IPv4" },
        l2(da),
        l2(db)
    );
}

/// Stops `db` and starts another daemon on its TAP `tap` and `port` (a new random MAC),
/// bridged again.
fn restart(ns: &Netns, db: Daemon, port: &str, tap: &str, tag: &str) -> Daemon {
    drop(db);
    let d = Daemon::start(Some(ns), port, tag, &["--neigh-timeout", TTL]);
    ns.ip(&["link", "set", tap, "master", "br97"]);
    d
}

/// A's entry for B names B's old MAC after B's daemon restarts. Silent, B is found again
/// once A's probes fail; speaking first, its ARP request gives A the new MAC at once.
/// Returns the last daemon started.
fn restarted_peer(ns: &Netns, da: &Daemon, db: Daemon, port: &str, tap: &str) -> Daemon {
    let (a, b) = (end(da), end(&db));
    connect(&a, &b);
    connect(&b, &a);
    a.post_recv(0);
    send_once(&b, &a, SMALL, 1);
    drop(b);

    // Silent: A sends first, to the old MAC, until its probes fail.
    let db = restart(ns, db, port, tap, "dnb2");
    let l0 = l2(da);
    let (a, b) = (end(da), end(&db));
    connect_with(&a, &b, LONG_TIMEOUT);
    connect(&b, &a);
    b.post_recv(0);
    let start = Instant::now();
    send_once(&a, &b, SMALL, 2);
    let l = l2(da);
    let diff = |k: &str| n(&l, k) - n(&l0, k);
    eprintln!(
        "silent restart: delivered after {:?}, {} retries: {l:#}",
        start.elapsed(),
        a.counter(Counter::CompleterRetryErr)
    );
    assert!(diff("neighbor_probe_failed") >= 1, "{l:#}");
    for k in ["pending_dropped", "resolve_failed", "control_dropped"] {
        assert_eq!(diff(k), 0, "{k}: {l:#}");
    }
    drop(b);

    // Announced: B sends first; its broadcast request carries the new MAC.
    let db = restart(ns, db, port, tap, "dnb3");
    let l0 = l2(da);
    let (a, b) = (end(da), end(&db));
    connect(&a, &b);
    connect(&b, &a);
    a.post_recv(0);
    b.post_recv(0);
    send_once(&b, &a, SMALL, 3);
    send_once(&a, &b, BIG, 4);
    let l = l2(da);
    let diff = |k: &str| n(&l, k) - n(&l0, k);
    assert!(diff("neighbor_mac_changed") >= 1, "{l:#}");
    assert_eq!(a.counter(Counter::CompleterRetryErr), 0, "{l:#}");
    for k in ["neighbor_probe_failed", "queue_full", "pending_dropped"] {
        assert_eq!(diff(k), 0, "{k}: {l:#}");
    }
    eprintln!("announced restart: {l:#}");
    drop(b);
    db
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
    let b_port = "tap:rdnb,10.97.0.3/24";
    let b = Daemon::start(Some(&ns), b_port, "dnb", &ttl);
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
            nothing_refused(who, &l);
            // Resolved at the start and re-validated by probes while in use: more than
            // once, whichever side asked first.
            let asked = requests(&l, v6) - requests(before, v6);
            assert!(asked >= 2, "{who} daemon asked {asked} times: {l:#}");
            for k in ["neighbor_expired", "neighbor_stale_used", "neighbor_probes"] {
                assert!(n(&l, k) >= 1, "{who}: {k}: {l:#}");
            }
            assert_eq!(n(&l, "neighbor_probe_failed"), 0, "{who}: {l:#}");
        }
        with_gaps(x, y, v6, 3);
    }
    let _b = restarted_peer(&ns, &a, b, b_port, "rdnb");
}
