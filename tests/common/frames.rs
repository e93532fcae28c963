//! Frame-link test helpers: run code inside a test's network namespace (one thread enters
//! it with setns), hand-built ARP and ICMP echo frames with their checksums, and a bounded
//! wait on a link for the frame a test expects. Written independently of the crate's L2.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use roce_emu::backend::{FrameLink, FrameRx};

/// Runs `f` on a thread that entered network namespace `ns` (`ip netns add` made it): a
/// namespace is per thread, so the test's other threads stay where they were.
pub fn in_netns<R: Send>(ns: &str, f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        s.spawn(|| {
            let fd = std::fs::File::open(format!("/run/netns/{ns}")).expect("netns file");
            nix::sched::setns(fd.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
        .join()
        .unwrap()
    })
}

pub const BROADCAST: [u8; 6] = [0xff; 6];

fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// An ARP request (who has `target`? tell `ip` at `mac`), broadcast.
pub fn arp_request(mac: [u8; 6], ip: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut f = eth(BROADCAST, mac, 0x0806);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]); // Ethernet, IPv4, request
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ip.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target.octets());
    f
}

/// An ARP reply from `mac`/`ip` to `to_mac`/`to_ip`.
pub fn arp_reply(mac: [u8; 6], ip: Ipv4Addr, to_mac: [u8; 6], to_ip: Ipv4Addr) -> Vec<u8> {
    let mut f = eth(to_mac, mac, 0x0806);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 2]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ip.octets());
    f.extend_from_slice(&to_mac);
    f.extend_from_slice(&to_ip.octets());
    f
}

/// An ARP frame's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arp {
    /// 1 request, 2 reply.
    pub op: u16,
    pub mac: [u8; 6],
    pub ip: Ipv4Addr,
    pub to_mac: [u8; 6],
    pub to_ip: Ipv4Addr,
}

/// The ARP (Ethernet, IPv4) in frame `f`.
pub fn parse_arp(f: &[u8]) -> Option<Arp> {
    if f.len() < 42 || f[12..14] != [8, 6] || f[14..20] != [0, 1, 8, 0, 6, 4] {
        return None;
    }
    let op = u16::from_be_bytes([f[20], f[21]]);
    let mac = |at: usize| <[u8; 6]>::try_from(&f[at..at + 6]).unwrap();
    let ip = |at: usize| Ipv4Addr::from(<[u8; 4]>::try_from(&f[at..at + 4]).unwrap());
    Some(Arp {
        op,
        mac: mac(22),
        ip: ip(28),
        to_mac: mac(32),
        to_ip: ip(38),
    })
}

/// The Internet checksum (RFC 1071) of `b`.
pub fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An ICMP echo request `src` -> `dst` (id, seq, payload) in an IPv4 frame.
pub fn echo_request(
    (mac, src): ([u8; 6], Ipv4Addr),
    (to_mac, dst): ([u8; 6], Ipv4Addr),
    id: u16,
    seq: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut icmp = vec![8, 0, 0, 0];
    icmp.extend_from_slice(&id.to_be_bytes());
    icmp.extend_from_slice(&seq.to_be_bytes());
    icmp.extend_from_slice(payload);
    let c = checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let total = (20 + icmp.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0x12, 0x34, 0x40, 0, 64, 1, 0, 0]); // ID, DF, TTL, ICMP
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = eth(to_mac, mac, 0x0800);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&icmp);
    f
}

/// True for an echo reply `from` -> `to` with this id, seq and payload, both checksums
/// right.
pub fn is_echo_reply(
    f: &[u8],
    from: Ipv4Addr,
    to: Ipv4Addr,
    id: u16,
    seq: u16,
    payload: &[u8],
) -> bool {
    if f.len() < 42 || f[12..14] != [8, 0] || f[14] != 0x45 || f[23] != 1 {
        return false;
    }
    let ip = &f[14..34];
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if f.len() < 14 + total
        || checksum(ip) != 0
        || ip[12..16] != from.octets()
        || ip[16..20] != to.octets()
    {
        return false;
    }
    let icmp = &f[34..14 + total];
    icmp[0] == 0
        && checksum(icmp) == 0
        && icmp[4..6] == id.to_be_bytes()
        && icmp[6..8] == seq.to_be_bytes()
        && &icmp[8..] == payload
}

/// Receives on `link` until `want` accepts a frame or `within` passes; returns that frame
/// (None on time-out) and every frame seen (the whole batch it came in). ARP requests for `answer` (our MAC and IP)
/// get a reply, so the kernel's neighbour probes never stall the exchange.
pub fn wait_for(
    link: &mut dyn FrameLink,
    within: Duration,
    answer: Option<([u8; 6], Ipv4Addr)>,
    mut want: impl FnMut(&[u8]) -> bool,
) -> (Option<Vec<u8>>, Vec<Vec<u8>>) {
    const SLOT: usize = 2048;
    let mut pool = vec![0u8; SLOT * 16];
    let mut out = [FrameRx::default(); 16];
    let mut seen = Vec::new();
    let end = Instant::now() + within;
    let mut found = None;
    while found.is_none() && Instant::now() < end {
        let n = link
            .recv_frames(&mut pool, SLOT, &mut out)
            .expect("recv_frames");
        for r in &out[..n] {
            let f = pool[r.offset..r.offset + r.len].to_vec();
            if let (Some((mac, ip)), Some(a)) = (answer, parse_arp(&f)) {
                if a.op == 1 && a.to_ip == ip {
                    let reply = arp_reply(mac, ip, a.mac, a.ip);
                    link.send_frames(&[&reply]).expect("send");
                }
            }
            // The rest of the batch is still seen: a test may count every frame.
            if found.is_none() && want(&f) {
                found = Some(f.clone());
            }
            seen.push(f);
        }
        if n == 0 {
            let left = end.saturating_duration_since(Instant::now());
            let ms = u16::try_from(left.as_millis().clamp(1, 100)).unwrap();
            let mut fds = [PollFd::new(link.fd(), PollFlags::POLLIN)];
            let _ = poll(&mut fds, PollTimeout::from(ms));
        }
    }
    (found, seen)
}
