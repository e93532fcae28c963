//! The congestion point on a UDP daemon's port (`backend::queue`): a daemon on
//! 127.0.91.1 in the test process, one hand-driven process attached pushing packets into
//! its ring at once, and a UDP port on 127.0.91.2 as the receiver, which reads each
//! datagram's ECN codepoint (`Received.ecn`).
//!
//! - at 8 Mbit/s, 200 packets of 1000 bytes leave 1 ms apart: the last comes ~199 ms
//!   after the first;
//! - with kmin 5 KB, kmax 10 KB, pmax 0, the ECT(0) packets that find more than 10 KB
//!   queued arrive CE, those that find less arrive ECT(0), Not-ECT ones never change; the
//!   port counts the marks;
//! - a 10 KB buffer takes ~10 of 50 packets given at once and tail-drops the rest,
//!   counted;
//! - `roce-emu queue set/show/clear` over the control socket, refusals naming the word.
//!
//! Run it inside a network namespace of its own where CI shares the host's
//! (`unshare -n sh -c 'ip link set lo up; cargo test --test daemon_queue'`).

mod common;

use common::attach::{ask, attach, counters, packet, Proc};
use common::in_thread::Running;
use roce_emu::backend::udp::UdpBackend;
use roce_emu::backend::Received;
use roce_emu::daemon::control::{ToDaemon, ToProcess};
use roce_emu::daemon::port::PortSpec;
use roce_emu::daemon::server::Config;
use roce_emu::ring::Meta;
use roce_emu::wire::Ecn;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_roce-emu");

fn start(ip: &str, queue: Option<&str>, tag: &str) -> Running {
    let socket =
        std::env::temp_dir().join(format!("roce-emu-queue-{tag}-{}.sock", std::process::id()));
    let mut cfg = Config::new(PortSpec::Udp(ip.parse().unwrap()), socket.clone());
    cfg.queue = queue.map(|q| q.parse().unwrap());
    common::in_thread::start(cfg)
}

/// Pushes `n` packets of `len` bytes, packet `i` with codepoint `ecn(i)`, at once.
fn push(p: &mut Proc, ours: SocketAddr, peer: SocketAddr, n: u32, len: usize, ecn: fn(u32) -> Ecn) {
    for i in 0..n {
        let mut m = Meta::new(ours, peer);
        m.ecn = ecn(i).bits();
        p.link
            .tx
            .push(&m, &packet(ours, peer, 0x42, i, len))
            .unwrap();
    }
}

/// What arrives (number, codepoint, time) until nothing has for `quiet`.
fn receive(rx: &mut UdpBackend, quiet: Duration) -> Vec<(u32, Ecn, Instant)> {
    let mut pool = vec![0u8; 1 << 18];
    let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let mut meta = vec![
        Received {
            src: any,
            dst: any,
            offset: 0,
            len: 0,
            segment: None,
            ipv4_id: None,
            ecn: Ecn::NotEct,
        };
        64
    ];
    let mut got = Vec::new();
    let mut last = Instant::now();
    while last.elapsed() < quiet {
        let n = rx.recv_batch(&mut pool, &mut meta).unwrap();
        let now = Instant::now();
        for r in &meta[..n] {
            let seg = r.segment.unwrap_or(r.len).max(1);
            let mut at = r.offset;
            while at < r.offset + r.len {
                let b = &pool[at..at + seg.min(r.offset + r.len - at)];
                got.push((
                    u32::from_be_bytes(b[12..16].try_into().unwrap()),
                    r.ecn,
                    now,
                ));
                at += seg;
            }
        }
        if n > 0 {
            last = now;
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    got
}

fn queue_cmd(socket: &std::path::Path, command: &str) -> (Option<String>, serde_json::Value) {
    match ask(
        socket,
        &ToDaemon::Queue {
            command: command.into(),
        },
    ) {
        ToProcess::QueueSet { error, report } => (error, report),
        m => panic!("{m:?}"),
    }
}

fn q(c: &serde_json::Value, k: &str) -> u64 {
    c["queue"][k]
        .as_u64()
        .unwrap_or_else(|| panic!("{k} in {c}"))
}

#[test]
fn packets_leave_at_the_line_rate() {
    let d = start(
        "127.0.91.1",
        Some("rate=8mbit buffer=1MB kmin=1MB kmax=1MB"),
        "rate",
    );
    let mut p = attach(&d.socket);
    let ours: SocketAddr = "127.0.91.1:4791".parse().unwrap();
    let mut rx = UdpBackend::bind("127.0.91.2".parse().unwrap()).unwrap();
    let peer = rx.local();
    push(&mut p, ours, peer, 200, 1000, |_| Ecn::NotEct);
    let got = receive(&mut rx, Duration::from_millis(300));
    assert_eq!(got.len(), 200);
    assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "in order");
    // 1000 bytes at 8 Mbit/s: 1 ms each.
    let span = got[199].2 - got[0].2;
    eprintln!("200 x 1000 B at 8 Mbit/s: first to last {span:?}");
    assert!(
        span >= Duration::from_millis(185) && span <= Duration::from_millis(260),
        "{span:?}"
    );
    // Over any 50 packets, about 50 ms.
    let mid = got[150].2 - got[100].2;
    assert!(
        mid >= Duration::from_millis(45) && mid <= Duration::from_millis(70),
        "{mid:?}"
    );
    let c = counters(&d.socket);
    assert_eq!(q(&c, "cp_tx_pkts"), 200, "{c}");
    assert_eq!(q(&c, "cp_tx_bytes"), 200_000, "{c}");
    assert_eq!(q(&c, "cp_enqueued"), 200, "{c}");
    assert_eq!(q(&c, "cp_queue_bytes"), 0, "{c}");
    assert!(q(&c, "cp_max_queue_bytes") > 20_000, "{c}");
    assert_eq!(c["queue"]["enabled"], true);
    // Counted per flow (destination and DestQP) too.
    let f = &c["queue"]["flows"][0];
    assert_eq!(
        (f["dst"].as_str(), f["qpn"].as_u64()),
        (Some("127.0.91.2"), Some(0x42)),
        "{c}"
    );
    assert_eq!(f["tx_bytes"], 200_000, "{c}");
    let out = std::process::Command::new(BIN)
        .args(["counters", "--daemon"])
        .arg(&d.socket)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("to 127.0.91.2 qp 0x000042: tx_bytes 200000, tx_pkts 200"),
        "{text}"
    );
}

#[test]
fn ect_packets_past_kmax_arrive_ce_and_not_ect_never() {
    let d = start(
        "127.0.91.3",
        Some("rate=8mbit buffer=1MB kmin=5KB kmax=10KB pmax=0"),
        "mark",
    );
    let mut p = attach(&d.socket);
    let ours: SocketAddr = "127.0.91.3:4791".parse().unwrap();
    let mut rx = UdpBackend::bind("127.0.91.4".parse().unwrap()).unwrap();
    let peer = rx.local();
    // Every third packet Not-ECT, the rest ECT(0).
    let sent = |i: u32| if i % 3 == 2 { Ecn::NotEct } else { Ecn::Ect0 };
    push(&mut p, ours, peer, 60, 1000, sent);
    let got = receive(&mut rx, Duration::from_millis(300));
    assert_eq!(got.len(), 60);
    let mut ce = 0;
    for &(i, ecn, _) in &got {
        if sent(i) == Ecn::NotEct {
            assert_eq!(ecn, Ecn::NotEct, "packet {i}");
        } else if i < 5 {
            // Found less than kmin queued (pmax 0: none in the band either).
            assert_eq!(ecn, Ecn::Ect0, "packet {i}");
        } else if i >= 20 {
            // Found at least 20 KB less what left meanwhile: above kmax.
            assert_eq!(ecn, Ecn::Ce, "packet {i}");
        }
        ce += u64::from(ecn == Ecn::Ce);
    }
    eprintln!("60 packets (40 ECT(0)) at once, kmax 10 KB: {ce} arrived CE");
    let c = counters(&d.socket);
    assert_eq!(q(&c, "cp_ecn_marked"), ce, "{c}");
    assert!(ce >= 26, "{ce}");
}

#[test]
fn a_full_buffer_tail_drops_and_counts() {
    let d = start("127.0.91.5", Some("rate=8mbit buffer=10KB"), "drop");
    let mut p = attach(&d.socket);
    let ours: SocketAddr = "127.0.91.5:4791".parse().unwrap();
    let mut rx = UdpBackend::bind("127.0.91.6".parse().unwrap()).unwrap();
    let peer = rx.local();
    push(&mut p, ours, peer, 50, 1000, |_| Ecn::Ect0);
    let got = receive(&mut rx, Duration::from_millis(300));
    let c = counters(&d.socket);
    let dropped = q(&c, "cp_dropped");
    eprintln!(
        "50 x 1000 B into 10 KB: {} arrived, {dropped} dropped",
        got.len()
    );
    assert_eq!(got.len() as u64 + dropped, 50, "{c}");
    assert!((10..=13).contains(&got.len()), "{} arrived", got.len());
    assert_eq!(q(&c, "cp_enqueued"), got.len() as u64);
    assert_eq!(c["queue"]["flows"][0]["dropped"], dropped, "{c}");
    assert!(q(&c, "cp_max_queue_bytes") <= 10_000, "{c}");
}

#[test]
fn set_show_and_clear_at_run_time() {
    let d = start("127.0.91.7", None, "cmd");
    let c = counters(&d.socket);
    assert_eq!(c["queue"]["enabled"], false, "{c}");
    let (e, r) = queue_cmd(&d.socket, "set rate=1gbit kmin=40KB kmax=200KB pmax=0.2");
    assert_eq!(e, None);
    assert_eq!(r["enabled"], true);
    assert_eq!(
        r["config"],
        "rate=1000000000 buffer=2000000B kmin=40000B kmax=200000B pmax=0.2 seed=1"
    );
    // A second set changes only what it names.
    let (e, r) = queue_cmd(&d.socket, "set buffer=64KiB");
    assert_eq!(e, None);
    assert!(
        r["config"]
            .as_str()
            .unwrap()
            .contains("buffer=65536B kmin=40000B"),
        "{r}"
    );
    let (e, _) = queue_cmd(&d.socket, "set rate=fast");
    assert!(e.unwrap().contains("rate=fast"));
    let (e, _) = queue_cmd(&d.socket, "explode");
    assert!(e.unwrap().contains("no queue command `explode`"));

    let run = |args: &[&str]| {
        let out = std::process::Command::new(BIN)
            .arg("queue")
            .arg("--daemon")
            .arg(&d.socket)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, _) = run(&["show"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("queue        on (rate=1000000000"), "{out}");
    assert!(!out.contains(" qp 0x"), "no flow yet: {out}");
    let (code, _, err) = run(&["set", "kmin=9KB", "kmax=1KB"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("kmin (9000) is above kmax (1000)"), "{err}");
    let (code, out, _) = run(&["clear"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("queue        off"), "{out}");
    let out = std::process::Command::new(BIN)
        .args(["counters", "--daemon"])
        .arg(&d.socket)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("queue        off (rate=1000000000"), "{text}");
}
