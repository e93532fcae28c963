//! Fault rules at a UDP daemon's port, set at run time over the control socket: a daemon
//! on 127.0.32.1 in the test process, one hand-driven process attached, a plain UDP
//! socket on 127.0.32.2 as the wire sending it 1000 packets per round.
//!
//! `drop 50% in seed=7` drops exactly the packets the same rule drops when run here on
//! the same sequence (a seed reproduces its choices), about half; `clear` stops it;
//! `corrupt` changes a byte of every packet it takes; bad rules are refused with the
//! reason; `roce-emu fault` sets and lists rules.

mod common;

use common::attach::{attach, counters, fault, number, packet, pop_all, Proc};
use common::in_thread::Running;
use roce_emu::backend::fault::{Dir, Faults};
use roce_emu::daemon::fault::{parse, Command};
use roce_emu::daemon::lease;
use roce_emu::daemon::port::PortSpec;
use roce_emu::daemon::server::Config;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

const N: u32 = 1000;
const BIN: &str = env!("CARGO_BIN_EXE_roce-emu");

fn start(ip: &str) -> Running {
    let socket = std::env::temp_dir().join(format!("roce-emu-fault-{}.sock", std::process::id()));
    let mut cfg = Config::new(PortSpec::Udp(ip.parse().unwrap()), socket.clone());
    cfg.ring_bytes = 4 << 20;
    common::in_thread::start(cfg)
}

/// The wire sends packets 0..N (paced, so no socket buffer overflows); the process gets
/// what passes.
fn round(wire: &UdpSocket, to: SocketAddr, p: &mut Proc, base: u32) -> Vec<Vec<u8>> {
    let from = wire.local_addr().unwrap();
    let qpn = lease::range(p.block).0 | 0x11;
    for n in 0..N {
        wire.send_to(&packet(from, to, qpn, base + n, 64), to)
            .unwrap();
        if n % 25 == 24 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    pop_all(p, Duration::from_millis(400))
        .into_iter()
        .map(|(_, b)| b)
        .collect()
}

/// Which of packets base..base+N the rule `text` drops, decided here on the same bytes.
fn expected_drops(text: &str, from: SocketAddr, to: SocketAddr, qpn: u32, base: u32) -> Vec<u32> {
    let Ok(Command::Add(r)) = parse(text) else {
        panic!("{text}")
    };
    let mut f = Faults::new([r]);
    (0..N)
        .filter(|n| {
            let mut p = packet(from, to, qpn, base + n, 64);
            f.decide(Dir::In, &mut p).drop
        })
        .map(|n| base + n)
        .collect()
}

#[test]
fn run_time_rules_drop_a_seeded_half_clear_and_corrupt() {
    let d = start("127.0.32.1");
    let mut p = attach(&d.socket);
    let to: SocketAddr = "127.0.32.1:4791".parse().unwrap();
    let wire = UdpSocket::bind("127.0.32.2:4791").unwrap();
    let from = wire.local_addr().unwrap();
    let qpn = lease::range(p.block).0 | 0x11;

    // No rule: all arrive.
    assert_eq!(round(&wire, to, &mut p, 0).len(), N as usize);

    // 50% drop, set at run time.
    let rule = "drop 50% in seed=7";
    assert_eq!(fault(&d.socket, rule), None);
    let got: Vec<u32> = round(&wire, to, &mut p, N)
        .iter()
        .map(|b| number(b))
        .collect();
    let dropped = expected_drops(rule, from, to, qpn, N);
    let kept: Vec<u32> = (N..2 * N).filter(|n| !dropped.contains(n)).collect();
    assert_eq!(got, kept, "exactly the packets the seed keeps, in order");
    assert!(
        (450..550).contains(&dropped.len()),
        "{} of {N} dropped at 50%",
        dropped.len()
    );
    eprintln!("drop 50% seed=7: {} of {N} dropped", dropped.len());
    let c = counters(&d.socket);
    let r = &c["faults"]["rules"][0];
    assert_eq!(r["rule"], "drop 50% in seed=7", "{c}");
    assert_eq!(r["matched"], N, "{c}");
    assert_eq!(r["applied"], dropped.len(), "{c}");

    // clear: all arrive again; the cleared rule's counters stay in the report.
    assert_eq!(fault(&d.socket, "clear"), None);
    assert_eq!(round(&wire, to, &mut p, 2 * N).len(), N as usize);
    let c = counters(&d.socket);
    assert_eq!(c["faults"]["rules"].as_array().unwrap().len(), 0, "{c}");
    assert_eq!(c["faults"]["cleared"][0]["applied"], dropped.len(), "{c}");

    // corrupt: every packet has one byte changed. Those whose DestQP byte changed go to
    // nobody (counted as no_owner); every other arrives, in order, one byte off.
    let no_owner = |c: &serde_json::Value| c["counters"]["no_owner"].as_u64().unwrap();
    let before = no_owner(&counters(&d.socket));
    assert_eq!(fault(&d.socket, "corrupt 100% in"), None);
    let got = round(&wire, to, &mut p, 3 * N);
    let lost = no_owner(&counters(&d.socket)) - before;
    assert_eq!(got.len() as u64 + lost, u64::from(N));
    assert!(lost < 100, "{lost} of {N} lost their DestQP");
    let diff = |b: &[u8], n: u32| {
        let want = packet(from, to, qpn, 3 * N + n, 64);
        b.iter().zip(&want).filter(|(x, y)| x != y).count()
    };
    let mut n = 0;
    for b in &got {
        while n < N && diff(b, n) != 1 {
            n += 1;
        }
        assert!(n < N, "a packet matching none one byte off: {b:02x?}");
        n += 1;
    }
    assert_eq!(fault(&d.socket, "clear"), None);

    // Bad rules: refused with what to fix; nothing changes.
    let e = fault(&d.socket, "drop 500%").expect("refused");
    assert!(e.contains("between 0% and 100%"), "{e}");
    let e = fault(&d.socket, "explode").expect("refused");
    assert!(e.contains("no action `explode`"), "{e}");

    // The command: sets, lists, refuses.
    let out = std::process::Command::new(BIN)
        .args(["fault", "--socket"])
        .arg(&d.socket)
        .args([
            "delay",
            "1ms",
            "5%",
            "out;",
            "duplicate",
            "1%",
            "opcode=RC_ACKNOWLEDGE",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("delay 1ms 5% out seed=4"), "{text}");
    assert!(
        text.contains("duplicate 1% opcode=RC_ACKNOWLEDGE seed=2"),
        "{text}"
    );
    let out = std::process::Command::new(BIN)
        .args(["fault", "--socket"])
        .arg(&d.socket)
        .args(["drop", "5%", "sideways"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown word `sideways`"), "{err}");
}
