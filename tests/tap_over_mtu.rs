//! A NIC on a TAP whose QP's path MTU is larger than the link's: every packet over the
//! link's MTU is dropped by the port's L2, and that is said (a warn line, rate-limited) and
//! counted (`PortStats::tx_over_mtu`), never passed off as sent. The TAP (MTU 1500) lives
//! in a namespace of the test's own, the kernel on 10.97.0.1, the NIC on 10.97.0.2; its
//! peer is a UDP NIC on the kernel's address. Root only (loud skip otherwise).

mod common;

use common::log::Log;
#[path = "common/frames.rs"]
mod frames;

use common::netns::{skip, Netns};
use common::nic::{End, Nic};
use frames::in_netns;
use roce_emu::backend::l2::{iface_config, L2Backend};
use roce_emu::backend::TapLink;
use roce_emu::engine::{Mtu, QpAttr, SendOp, WcStatus};
use roce_emu::mem::Access;
use roce_emu::verbs::{self, Device, DEFAULT_MIN_RNR_TIMER, RNR_RETRY_INFINITE};
use roce_emu::wire::Psn;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// `e`'s QP to RTS toward `peer`'s at MTU 2048, ACK timeout code 10 (4 ms), 1 retry.
fn connect(e: &End, peer: &End, mtu: Mtu) {
    let rtr = QpAttr::rtr(
        peer.ip,
        mtu,
        peer.qpn,
        Psn::new(0),
        4,
        DEFAULT_MIN_RNR_TIMER,
    );
    let rts = QpAttr::rts(Psn::new(0), 10, 1, RNR_RETRY_INFINITE, 4);
    verbs::connect_rc(&e.ctx, e.qpn, Access::ALL, &rtr, &rts).unwrap();
}

#[test]
fn packets_over_a_taps_mtu_are_logged_and_counted_as_dropped() {
    if !nix::unistd::geteuid().is_root() {
        skip(
            "tap_over_mtu",
            "needs root for a network namespace and a TAP",
        );
        return;
    }
    let log = Log::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .init();
    let ns = Netns::new("tapmtu");
    in_netns(&ns.0, || {
        let link = TapLink::create("rmtu0").expect("create TAP");
        ns.ip(&["addr", "add", "10.97.0.1/24", "dev", "rmtu0"]);
        let us = Ipv4Addr::new(10, 97, 0, 2);
        let cfg = iface_config(&link, Some((us, 24)), None);
        assert_eq!(cfg.mtu, 1500, "a new TAP's MTU");
        let port = L2Backend::new(link, cfg).unwrap();
        let a = End::new(Nic::new(
            Device::new(IpAddr::V4(us)).open_on(Box::new(port)).unwrap(),
            None,
        ));
        let mut dev = Device::new("10.97.0.1".parse().unwrap());
        dev.share = false;
        let b = End::new(Nic::new(dev.open().unwrap(), None));
        connect(&a, &b, Mtu::M2048);
        connect(&b, &a, Mtu::M2048);

        // A SEND that fits (one packet of 1000 bytes): delivered, nothing over the MTU.
        b.ep().post_recv_wr(1, 0, 8192);
        a.ep().post_wr(2, SendOp::Send, 0, 1000, false).unwrap();
        let c = b.poll_one();
        assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));
        assert_eq!(a.poll_one().status, WcStatus::Success);
        assert_eq!(a.stats().tx_over_mtu, 0);

        // 4096 bytes at MTU 2048: two packets of 2048 bytes of payload, 2076 of IP each,
        // over the link's 1500. Dropped, counted, logged; the SEND fails after its retry.
        b.ep().post_recv_wr(3, 0, 8192);
        a.ep().post_wr(4, SendOp::Send, 0, 4096, false).unwrap();
        let c = a.poll_one();
        assert_eq!((c.wr_id, c.status), (4, WcStatus::RetryExcErr));
        let s = a.stats();
        // Sent once and retransmitted once, two packets each time.
        assert_eq!(s.tx_over_mtu, 4, "{s:?}");
        let l2 = a.ctx.port_stats();
        assert_eq!(l2.tx_over_mtu, 4);
    });
    let deadline = Instant::now() + Duration::from_secs(2);
    let text = loop {
        let text = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
        if text.contains("larger than the link's MTU") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("larger than the link's MTU"))
        .collect();
    // Rate-limited: one line for the four drops (within OVER_MTU_WARN_EVERY).
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
    assert!(lines[0].contains("1500 bytes"), "{}", lines[0]);
    assert!(
        lines[0].contains("2064 bytes of RoCE to 10.97.0.1:4791"),
        "{}",
        lines[0]
    );
}
