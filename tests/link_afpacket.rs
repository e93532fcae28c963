//! PacketLink on one end of a veth pair (root, in a namespace of the test's own); the other
//! end has 10.99.1.1. The link, as 10.99.1.2 with the interface's MAC, asks for it by ARP
//! and pings it with hand-built frames, in batches; it never receives a frame it sent.

mod common;
#[path = "common/frames.rs"]
mod frames;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::netns::{skip, Netns};
use frames::{arp_request, echo_request, in_netns, is_echo_reply, parse_arp, wait_for};
use roce_emu::backend::{FrameLink, PacketLink};

const KERNEL: Ipv4Addr = Ipv4Addr::new(10, 99, 1, 1);
const US: Ipv4Addr = Ipv4Addr::new(10, 99, 1, 2);
const WAIT: Duration = Duration::from_secs(5);

#[test]
fn afpacket_arp_and_ping_over_veth_without_own_frames() {
    if !nix::unistd::geteuid().is_root() {
        skip(
            "afpacket_arp_and_ping_over_veth",
            "needs root for a network namespace and a packet socket",
        );
        return;
    }
    let ns = Netns::new("afp");
    ns.ip(&["link", "add", "rva", "type", "veth", "peer", "name", "rvb"]);
    ns.ip(&["addr", "add", "10.99.1.1/24", "dev", "rvb"]);
    ns.ip(&["link", "set", "rva", "up"]);
    ns.ip(&["link", "set", "rvb", "up"]);
    assert!(
        PacketLink::open("rva").is_err(),
        "rva is in the namespace only"
    );
    in_netns(&ns.0, || {
        let mut link = PacketLink::open("rva").expect("open AF_PACKET");
        assert_eq!(link.mtu(), 1500);
        let mac = link.mac();
        assert_ne!(mac, [0; 6]);

        // Two ARP requests in one call: one sendmmsg.
        let arp = arp_request(mac, US, KERNEL);
        assert_eq!(link.send_frames(&[&arp, &arp]).unwrap(), 2);
        assert_eq!(link.stats().tx_syscalls, 1);
        let (reply, mut seen) = wait_for(&mut link, WAIT, None, |f| {
            parse_arp(f)
                .is_some_and(|a| a.op == 2 && a.ip == KERNEL && a.to_mac == mac && a.to_ip == US)
        });
        let kmac = parse_arp(&reply.expect("the kernel's ARP reply"))
            .unwrap()
            .mac;
        assert_ne!(kmac, mac);

        // Eight pings in one call; all eight replies come back.
        let payload: Vec<u8> = (0..56u8).collect();
        let pings: Vec<Vec<u8>> = (1..=8)
            .map(|seq| echo_request((mac, US), (kmac, KERNEL), 0x5151, seq, &payload))
            .collect();
        let refs: Vec<&[u8]> = pings.iter().map(Vec::as_slice).collect();
        assert_eq!(link.send_frames(&refs).unwrap(), 8);
        assert_eq!(link.stats().tx_syscalls, 2);
        let mut want: Vec<u16> = (1..=8).collect();
        let (_, more) = wait_for(&mut link, WAIT, Some((mac, US)), |f| {
            want.retain(|&seq| !is_echo_reply(f, KERNEL, US, 0x5151, seq, &payload));
            want.is_empty()
        });
        assert!(want.is_empty(), "echo replies missing for seq {want:?}");
        seen.extend(more);

        // Whatever else arrives in a moment (the kernel's IPv6 on both ends, say).
        let (_, rest) = wait_for(&mut link, Duration::from_millis(300), None, |_| false);
        seen.extend(rest);
        let own: Vec<_> = seen.iter().filter(|f| f[6..12] == mac).collect();
        assert!(own.is_empty(), "received frames sent from rva: {own:02x?}");

        let s = link.stats();
        eprintln!("{s:?}");
        assert_eq!(s.tx_frames, 10, "{s:?}");
        assert_eq!(s.tx_errors + s.tx_dropped + s.rx_truncated, 0, "{s:?}");
        assert!(
            s.rx_frames >= 9 && s.rx_frames == seen.len() as u64,
            "{s:?}"
        );
    });
}
