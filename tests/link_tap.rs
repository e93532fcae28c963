//! TapLink against the kernel (root, in a namespace of the test's own): the kernel side of
//! the TAP has 10.99.0.1; the link, as 10.99.0.2 with its own MAC, asks for it by ARP and
//! pings it with hand-built frames. Also: a created TAP goes when the link is dropped, an
//! attached persistent one stays.

mod common;
#[path = "common/frames.rs"]
mod frames;

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;

use common::netns::{skip, Netns};
use frames::{arp_request, echo_request, in_netns, is_echo_reply, parse_arp, wait_for};
use roce_emu::backend::{FrameLink, FrameRx, TapLink};

const KERNEL: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const US: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
const WAIT: Duration = Duration::from_secs(5);

fn root(test: &str) -> bool {
    let ok = nix::unistd::geteuid().is_root();
    if !ok {
        skip(test, "needs root for a network namespace and a TAP");
    }
    ok
}

fn link_exists(ns: &Netns, name: &str) -> bool {
    Command::new("ip")
        .args(["-n", &ns.0, "link", "show", name])
        .output()
        .unwrap()
        .status
        .success()
}

#[test]
fn tap_arp_and_ping_the_kernel() {
    if !root("tap_arp_and_ping_the_kernel") {
        return;
    }
    let ns = Netns::new("tap");
    in_netns(&ns.0, || {
        let mut link = TapLink::create("rtap0").expect("create TAP");
        assert_eq!(link.name(), "rtap0");
        assert_eq!(link.mtu(), 1500);
        let mac = link.mac();
        assert_eq!(mac[0] & 3, 2, "locally administered unicast: {mac:02x?}");
        // create brought it up: only the address is the test's.
        ns.ip(&["addr", "add", "10.99.0.1/24", "dev", "rtap0"]);

        assert_eq!(
            link.send_frames(&[&arp_request(mac, US, KERNEL)]).unwrap(),
            1
        );
        let (reply, _) = wait_for(&mut link, WAIT, None, |f| {
            parse_arp(f)
                .is_some_and(|a| a.op == 2 && a.ip == KERNEL && a.to_mac == mac && a.to_ip == US)
        });
        let reply = reply.expect("the kernel's ARP reply");
        let kmac = parse_arp(&reply).unwrap().mac;
        assert_ne!(kmac, mac, "our MAC differs from the kernel side's");
        assert_eq!(reply[0..6], mac, "the reply is addressed to our MAC");

        let payload: Vec<u8> = (0..56u8).collect();
        let ping = echo_request((mac, US), (kmac, KERNEL), 0x4242, 1, &payload);
        assert_eq!(link.send_frames(&[&ping]).unwrap(), 1);
        let (pong, _) = wait_for(&mut link, WAIT, Some((mac, US)), |f| {
            is_echo_reply(f, KERNEL, US, 0x4242, 1, &payload)
        });
        assert!(pong.is_some(), "the kernel's echo reply");

        // A frame shorter than an Ethernet header: the kernel refuses it; counted, skipped.
        assert_eq!(link.send_frames(&[&[1, 2, 3, 4, 5], &ping]).unwrap(), 1);

        // A reply longer than the receive slot: dropped and counted, never cut short.
        let big: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let ping = echo_request((mac, US), (kmac, KERNEL), 0x4242, 2, &big);
        link.send_frames(&[&ping]).unwrap();
        let mut pool = vec![0u8; 512 * 4];
        let mut out = [FrameRx::default(); 4];
        let end = std::time::Instant::now() + WAIT;
        while link.stats().rx_truncated == 0 && std::time::Instant::now() < end {
            let n = link.recv_frames(&mut pool, 512, &mut out).unwrap();
            assert!(out[..n].iter().all(|r| r.len <= 512));
            std::thread::sleep(Duration::from_millis(5));
        }

        let s = link.stats();
        eprintln!("{s:?}");
        assert_eq!(s.rx_truncated, 1, "{s:?}");
        assert_eq!(s.tx_errors, 1, "{s:?}");
        assert_eq!(s.tx_dropped, 0, "{s:?}");
        assert!(
            s.tx_frames >= 4 && s.tx_syscalls == s.tx_frames + 1,
            "{s:?}"
        );
        assert!(s.rx_frames >= 2 && s.rx_bytes >= 42 + 98, "{s:?}");
        assert!(s.rx_syscalls > s.rx_frames, "{s:?}");
    });
}

#[test]
fn dropping_a_created_tap_removes_it_and_an_attached_one_stays() {
    if !root("dropping_a_created_tap_removes_it") {
        return;
    }
    let ns = Netns::new("tapdrop");
    in_netns(&ns.0, || {
        let link = TapLink::create("rtap1").expect("create TAP");
        assert!(link_exists(&ns, "rtap1"));
        assert!(
            TapLink::create("rtap1").is_err(),
            "create refuses a name in use"
        );
        drop(link);
        assert!(!link_exists(&ns, "rtap1"), "gone with its file descriptor");

        assert!(TapLink::attach("rtap2").is_err(), "attach needs a TAP");
        ns.ip(&["tuntap", "add", "dev", "rtap2", "mode", "tap"]);
        let link = TapLink::attach("rtap2").expect("attach persistent TAP");
        drop(link);
        assert!(link_exists(&ns, "rtap2"), "a persistent TAP stays");
    });
}
