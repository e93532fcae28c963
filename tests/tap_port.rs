//! A NIC that owns its frames: a verbs context on a TAP port (`backend::l2::L2Backend` over
//! `TapLink`, the L2 of `iface`), with its own MAC and address 10.98.0.2, in a namespace of
//! the test's own; the kernel holds 10.98.0.1 on the other side of the TAP. The kernel's
//! `ping` reaches the NIC (ARP and ICMP echo answered by `iface`), and an RC connection to
//! a UDP NIC on the kernel's address carries SEND, WRITE and READ with every byte checked:
//! ARP resolution before the first packet, every IPv4 ICRC checked in full on receive.
//! Root only (loud skip otherwise).

mod common;
#[path = "common/frames.rs"]
mod frames;

use common::netns::{skip, Netns};
use common::nic::{connect_psns, End, Nic, IOVA};
use frames::in_netns;
use roce_emu::backend::l2::{iface_config, L2Backend};
use roce_emu::backend::TapLink;
use roce_emu::engine::{Remote, SendOp, WcStatus};
use roce_emu::verbs::Device;
use std::net::{IpAddr, Ipv4Addr};

fn post(e: &End, wr_id: u64, op: SendOp, off: u64, len: u32) {
    e.ep().post_wr(wr_id, op, off, len, false).unwrap();
}

#[test]
fn a_nic_on_a_tap_answers_ping_and_carries_rc_traffic_to_the_kernels_address() {
    if !nix::unistd::geteuid().is_root() {
        skip("tap_port", "needs root for a network namespace and a TAP");
        return;
    }
    if std::process::Command::new("ping")
        .arg("-V")
        .output()
        .is_err()
    {
        skip("tap_port", "needs ping (iputils-ping)");
        return;
    }
    let ns = Netns::new("tapport");
    in_netns(&ns.0, || {
        let link = TapLink::create("rport0").expect("create TAP");
        ns.ip(&["addr", "add", "10.98.0.1/24", "dev", "rport0"]);
        let us = Ipv4Addr::new(10, 98, 0, 2);
        let cfg = iface_config(&link, Some((us, 24)), None);
        let port = L2Backend::new(link, cfg).unwrap();
        let a = End::new(Nic::new(
            Device::new(IpAddr::V4(us)).open_on(Box::new(port)).unwrap(),
            None,
        ));
        let kernel: IpAddr = "10.98.0.1".parse().unwrap();
        let mut dev = Device::new(kernel);
        dev.share = false;
        let b = End::new(Nic::new(dev.open().unwrap(), None));

        // The kernel pings the NIC: ARP then ICMP echo, answered by its progress thread.
        let ping = ns
            .cmd("ping")
            .args(["-c", "3", "-i", "0.2", "-W", "2", "10.98.0.2"])
            .output()
            .unwrap();
        assert!(
            ping.status.success(),
            "ping: {}",
            String::from_utf8_lossy(&ping.stdout)
        );
        assert!(String::from_utf8_lossy(&ping.stdout).contains("3 received"));

        connect_psns(a.ep(), b.ep(), (10, 20));
        // SEND b -> a (a's receive first), WRITE a -> b (64 KiB), READ a <- b (32 KiB).
        a.ep().post_recv_wr(1, 0, 4096);
        b.mr.write(IOVA + 100, b"over the tap").unwrap();
        post(&b, 2, SendOp::Send, 100, 12);
        let c = a.poll_one();
        assert_eq!((c.wr_id, c.status, c.byte_len), (1, WcStatus::Success, 12));
        assert_eq!(b.poll_one().status, WcStatus::Success);
        assert_eq!(a.mr.to_vec()[..12], *b"over the tap");

        let pattern: Vec<u8> = (0..65536u32).map(|i| (i * 7 + 3) as u8).collect();
        a.mr.write(IOVA + 65536, &pattern).unwrap();
        let remote = Remote {
            va: IOVA,
            rkey: b.mr.rkey().0,
        };
        post(&a, 3, SendOp::Write { remote }, 65536, 65536);
        assert_eq!(a.poll_one().status, WcStatus::Success);
        assert_eq!(b.mr.to_vec()[..65536], pattern[..]);

        b.mr.write(IOVA + 70000, &pattern[..32768]).unwrap();
        let remote = Remote {
            va: IOVA + 70000,
            rkey: b.mr.rkey().0,
        };
        post(&a, 4, SendOp::Read { remote }, 0, 32768);
        assert_eq!(a.poll_one().status, WcStatus::Success);
        assert_eq!(a.mr.to_vec()[..32768], pattern[..32768]);

        // The NIC on the TAP checked every IPv4 ICRC in full (it sees the IP ID), solved
        // none: the counters tell.
        let ca = a.ctx.counters();
        assert_eq!(ca.get(roce_emu::engine::Counter::IcrcIdSolved), 0, "{ca:?}");
    });
}
