//! The daemon's `--pcap FILE`: a pcapng file with the port's interface block and every
//! frame in and out. The RoCE frames in it are exactly the packets the daemon counted
//! (rcvd_pkts + sent_pkts), every ICRC verifies (`roce-emu pcap`), and tshark decodes the
//! file. A TAP daemon (root: a namespace, TAPs and a bridge) captures its real frames, ARP
//! and ICMP echo included; a UDP daemon (no root) one synthesised frame per datagram.
//! Without tshark the tshark check is skipped loudly (a failure under CI).

mod common;

use common::attach::{attach, counters, packet, pop_all};
use common::netns::{skip, Netns};
use roce_emu::daemon::lease;
use roce_emu::daemon::port::PortSpec;
use roce_emu::daemon::server::{Config, Daemon};
use roce_emu::ring::Meta;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_roce-emu");

/// `roce-emu pcap FILE`: (frames, RoCE frames); every ICRC must verify (exit 0).
fn decode(file: &Path) -> (u64, u64) {
    let out = Command::new(BIN).arg("pcap").arg(file).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "roce-emu pcap: {err}");
    assert!(err.contains(" 0 malformed, 0 bad ICRC"), "{err}");
    // "FILE: N frames, M RoCEv2, ..."
    let nums: Vec<u64> = err
        .rsplit(": ")
        .next()
        .unwrap()
        .split(", ")
        .filter_map(|w| w.split(' ').next()?.parse().ok())
        .collect();
    (nums[0], nums[1])
}

/// tshark reads the file: one row per frame, none malformed; the protocols of each.
fn tshark(file: &Path) -> Option<Vec<String>> {
    if Command::new("tshark").arg("-v").output().is_err() {
        skip("daemon_capture (tshark)", "needs tshark");
        return None;
    }
    let config = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("daemon_capture_tshark");
    std::fs::create_dir_all(&config).unwrap();
    let out = Command::new("tshark")
        .env("WIRESHARK_CONFIG_DIR", &config)
        .args(["-n", "-r"])
        .arg(file)
        .args(["-d", "udp.port==4791,infiniband"])
        .args(["-T", "fields", "-E", "separator=/t"])
        .args(["-e", "frame.protocols", "-e", "_ws.malformed"])
        .output()
        .expect("run tshark");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<String> = text.lines().map(str::to_owned).collect();
    for r in &rows {
        let cols: Vec<&str> = r.split('\t').collect();
        assert!(cols.get(1).is_none_or(|m| m.is_empty()), "malformed: {r}");
    }
    Some(rows)
}

#[test]
fn a_udp_daemon_captures_one_frame_per_datagram() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let file = dir.join(format!("daemon-udp-{}.pcapng", std::process::id()));
    let socket = dir.join(format!("daemon-cap-{}.sock", std::process::id()));
    let mut cfg = Config::new(PortSpec::Udp("127.0.33.1".parse().unwrap()), socket.clone());
    cfg.pcap = Some(file.clone());
    let d = Daemon::open(cfg).expect("daemon");
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = Arc::clone(&stop);
    let t = std::thread::spawn(move || d.run(&s2).unwrap());

    let mut p = attach(&socket);
    let ours: SocketAddr = "127.0.33.1:4791".parse().unwrap();
    let wire = UdpSocket::bind("127.0.33.2:4791").unwrap();
    let peer = wire.local_addr().unwrap();
    let qpn = lease::range(p.block).0 | 0x11;
    for n in 0..40 {
        wire.send_to(&packet(peer, ours, qpn, n, 100 + n as usize), ours)
            .unwrap();
        let out = packet(ours, peer, 0x42, n, 60 + n as usize);
        p.link.tx.push(&Meta::new(ours, peer), &out).unwrap();
    }
    assert_eq!(pop_all(&mut p, Duration::from_millis(300)).len(), 40);
    let c = counters(&socket);
    let k = &c["counters"];
    let moved = k["rcvd_pkts"].as_u64().unwrap() + k["sent_pkts"].as_u64().unwrap();
    assert_eq!(moved, 80, "{c}");
    assert_eq!(c["capture"]["frames"], 80, "{c}");
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();

    assert_eq!(decode(&file), (80, 80));
    if let Some(rows) = tshark(&file) {
        assert_eq!(rows.len(), 80);
        assert!(
            rows.iter().all(|r| r.contains("udp:infiniband")),
            "{rows:?}"
        );
    }
}

/// A daemon process of the test's own, stopped (SIGTERM, by PID) when dropped, so a
/// failing test leaves none behind.
struct Guard(Option<Child>);

impl Guard {
    /// Stops it; its stdout.
    fn stop(mut self) -> String {
        let child = self.0.take().unwrap();
        term(&child);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            term(&c);
            let _ = c.wait();
        }
    }
}

fn term(child: &Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
}

fn spawn_daemon(ns: &Netns, port: &str, tag: &str, pcap: Option<&Path>) -> (Guard, PathBuf) {
    let socket = std::env::temp_dir().join(format!("roce-emu-{tag}-{}.sock", std::process::id()));
    let mut c = ns.cmd(BIN);
    c.args(["daemon", "--port", port, "--socket"]).arg(&socket);
    if let Some(f) = pcap {
        c.arg("--pcap").arg(f);
    }
    let child = Guard(Some(
        c.stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    ));
    common::daemon::wait_for_socket(&socket, tag);
    (child, socket)
}

#[test]
fn a_tap_daemon_captures_its_real_frames() {
    if !nix::unistd::geteuid().is_root() {
        skip(
            "daemon_capture",
            "needs root for a namespace, TAPs and a bridge",
        );
        return;
    }
    if Command::new("ping").arg("-V").output().is_err() {
        skip("daemon_capture", "needs ping (iputils-ping)");
        return;
    }
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("daemon-tap-{}.pcapng", std::process::id()));
    let ns = Netns::new("dcap");
    ns.ip(&["link", "add", "br97", "type", "bridge"]);
    ns.ip(&["addr", "add", "10.97.0.1/24", "dev", "br97"]);
    ns.ip(&["link", "set", "br97", "up"]);
    let (a, sock_a) = spawn_daemon(&ns, "tap:rdca,10.97.0.2/24", "dca", Some(&file));
    let (b, sock_b) = spawn_daemon(&ns, "tap:rdcb,10.97.0.3/24", "dcb", None);
    for t in ["rdca", "rdcb"] {
        ns.ip(&["link", "set", t, "master", "br97"]);
    }
    let ping = ns
        .cmd("ping")
        .args(["-c", "3", "-i", "0.2", "-W", "2", "10.97.0.2"])
        .output()
        .unwrap();
    assert!(
        ping.status.success(),
        "{}",
        String::from_utf8_lossy(&ping.stdout)
    );

    // A process on each daemon: 1 + 30 packets A -> B and 1 + 20 B -> A; the first of
    // each waits for ARP (an L2 holds only a few datagrams for an unresolved neighbour).
    let mut pa = attach(&sock_a);
    let mut pb = attach(&sock_b);
    let addr_a: SocketAddr = "10.97.0.2:49152".parse().unwrap();
    let addr_b: SocketAddr = "10.97.0.3:49153".parse().unwrap();
    let to = |a: SocketAddr| SocketAddr::new(a.ip(), 4791);
    let qa = lease::range(pa.block).0 | 0x21;
    let qb = lease::range(pb.block).0 | 0x22;
    let first = packet(addr_a, to(addr_b), qb, 99, 64);
    pa.link
        .tx
        .push(&Meta::new(addr_a, to(addr_b)), &first)
        .unwrap();
    assert_eq!(pop_all(&mut pb, Duration::from_millis(500)).len(), 1);
    let first = packet(addr_b, to(addr_a), qa, 99, 64);
    pb.link
        .tx
        .push(&Meta::new(addr_b, to(addr_a)), &first)
        .unwrap();
    assert_eq!(pop_all(&mut pa, Duration::from_millis(500)).len(), 1);
    for n in 0..30 {
        let p = packet(addr_a, to(addr_b), qb, n, 64 + 10 * n as usize);
        pa.link.tx.push(&Meta::new(addr_a, to(addr_b)), &p).unwrap();
    }
    for n in 0..20 {
        let p = packet(addr_b, to(addr_a), qa, n, 1000 + n as usize);
        pb.link.tx.push(&Meta::new(addr_b, to(addr_a)), &p).unwrap();
    }
    assert_eq!(pop_all(&mut pb, Duration::from_millis(500)).len(), 30);
    assert_eq!(pop_all(&mut pa, Duration::from_millis(500)).len(), 20);
    // A second process on daemon A: 10 packets A -> it are hairpinned (never on the
    // TAP), and the capture holds them all the same.
    let mut pc = attach(&sock_a);
    let qc = lease::range(pc.block).0 | 0x23;
    let addr_c: SocketAddr = "10.97.0.2:49154".parse().unwrap();
    for n in 0..10 {
        let p = packet(addr_a, to(addr_c), qc, n, 200);
        pa.link.tx.push(&Meta::new(addr_a, to(addr_c)), &p).unwrap();
    }
    assert_eq!(pop_all(&mut pc, Duration::from_millis(500)).len(), 10);
    let hairpin = 10;

    let line = a.stop();
    drop(b.stop());
    // "... stopped; R packets received, S sent, ..."
    let tail = line
        .split("stopped; ")
        .nth(1)
        .unwrap_or_else(|| panic!("{line}"));
    let words: Vec<&str> = tail.split_whitespace().collect();
    let rcvd: u64 = words[0].parse().unwrap();
    let sent: u64 = words[3].trim_end_matches(',').parse().unwrap();
    // A hairpinned packet counts as received (it reached its owner), not as sent.
    assert_eq!((rcvd, sent), (21 + hairpin, 31), "{line}");

    let (frames, roce) = decode(&file);
    assert_eq!(
        roce,
        rcvd + sent,
        "RoCE frames in the capture = the daemon's counters, its hairpin included"
    );
    assert!(frames > roce, "ARP and ICMP frames are in the capture too");
    if let Some(rows) = tshark(&file) {
        assert_eq!(rows.len() as u64, frames);
        let count = |p: &str| rows.iter().filter(|r| r.contains(p)).count();
        assert_eq!(count("udp:infiniband") as u64, roce, "{rows:?}");
        assert!(count("eth:ethertype:arp") >= 2, "{rows:?}");
        assert_eq!(
            count("ip:icmp"),
            6,
            "3 echo requests and 3 replies: {rows:?}"
        );
    }
    drop(sock_b);
}

/// Two programs attached to one UDP daemon talk to each other: the daemon hands their
/// packets ring to ring (the hairpin), never on the wire, and its `--pcap` holds them all
/// the same (it held none: the capture wrapped only the port).
#[test]
fn a_udp_daemons_capture_holds_what_it_hairpins() {
    let dir = std::env::temp_dir().join(format!("roce-emu-hairpin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("d.pcapng");
    let pcap_arg = pcap.to_str().unwrap().to_string();
    let d =
        common::daemon::Daemon::start(None, "udp:127.0.33.7", "hairpin", &["--pcap", &pcap_arg]);
    let run = |extra: &[&str]| {
        Command::new(BIN)
            .args([
                "pingpong",
                "-p",
                "18790",
                "--bind",
                "127.0.33.7",
                "-n",
                "50",
            ])
            .args(extra)
            .arg("--daemon")
            .arg(&d.socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let server = run(&["--wait", "20"]);
    let client = run(&["--wait", "10", "127.0.33.7"]);
    common::daemon::finish_ok_within(60, client, "pingpong client");
    common::daemon::finish_ok_within(30, server, "pingpong server");
    let c = d.counters();
    let hairpin = c["counters"]["hairpin_pkts"].as_u64().unwrap();
    assert!(hairpin >= 200, "{c}");
    drop(d);
    let (_, roce) = decode(&pcap);
    assert_eq!(
        roce, hairpin,
        "every hairpinned packet in the capture, once"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
