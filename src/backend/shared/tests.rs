//! The shared port on real sockets, below the engine: a coalesced (GRO) datagram split
//! between the hub and a member, and a member taking over the port when the hub goes.
//! Addresses 127.0.15.40 and up (tests/shared_port.rs has the ones below).

use super::*;
use crate::backend::udp::{RX_BATCH, RX_SLOT};

const SLOT: usize = 4352;

/// Receives on `b` until `want` packets came or 5 s passed; each packet's bytes.
fn drain(b: &mut SharedBackend, want: usize) -> Vec<Vec<u8>> {
    let mut pool = vec![0u8; RX_BATCH * RX_SLOT];
    let blank = Received {
        src: b.local(),
        dst: b.local(),
        offset: 0,
        len: 0,
        segment: None,
        ipv4_id: None,
    };
    let mut out = [blank; RX_BATCH];
    let mut got = Vec::new();
    let start = Instant::now();
    // At least one call, so `want` 0 is one receive.
    loop {
        let n = b.recv_batch(&mut pool, &mut out).unwrap();
        for r in &out[..n] {
            assert_eq!(r.dst, b.local());
            let bytes = &pool[r.offset..r.offset + r.len];
            for d in bytes.chunks(r.segment.unwrap_or(r.len).max(1)) {
                got.push(d.to_vec());
            }
        }
        if got.len() >= want || start.elapsed() > Duration::from_secs(5) {
            return got;
        }
        if n == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A packet `len` bytes long whose BTH DestQP is in `block`, its bytes marked with `mark`.
fn packet(block: u8, mark: u8, len: usize) -> Vec<u8> {
    let mut p = vec![mark; len];
    p[..12].fill(0);
    p[5..8].copy_from_slice(&[block, 0x00, 0x11]);
    p
}

/// Sends `packets` to `dst` in one batch from `tx` (equal lengths leave as one GSO train).
fn send(tx: &mut UdpBackend, dst: SocketAddr, packets: &[Vec<u8>]) {
    let mut pool = vec![0u8; packets.len() * SLOT];
    let items: Vec<Outgoing> = packets
        .iter()
        .enumerate()
        .map(|(i, p)| {
            pool[i * SLOT..i * SLOT + p.len()].copy_from_slice(p);
            Outgoing {
                src: tx.local(),
                dst,
                len: p.len(),
            }
        })
        .collect();
    tx.send_batch(&mut pool, SLOT, &items).unwrap();
}

/// Equal up to the last four bytes (an IPv4 GSO segment's ICRC is rewritten for its ID).
fn same(a: &[Vec<u8>], b: &[&Vec<u8>]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.len() == y.len() && x[..x.len() - 4] == y[..y.len() - 4])
}

#[test]
fn a_coalesced_datagram_is_split_between_the_hub_and_a_member() {
    let ip: IpAddr = "127.0.15.40".parse().unwrap();
    let port = SocketAddr::new(ip, ROCE_UDP_PORT);
    let mut hub = SharedBackend::open(ip).unwrap();
    let mut member = SharedBackend::open(ip).unwrap();
    assert!(hub.is_hub() && !member.is_hub());
    assert_eq!(hub.qpn_range(), (0, 0xffff));
    assert_eq!(member.qpn_range(), (0x1_0000, 0x1_ffff));
    assert_eq!(hub.leased_blocks(), [1]);
    assert_ne!(hub.src_port(), member.src_port());

    // One GSO train of 1000-byte packets and a short tail, for blocks 0 (the hub's), 1
    // (the member's) and 7 (nobody's: the hub's engine gets it).
    let blocks = [0u8, 1, 1, 0, 0, 1, 0, 7, 0];
    let sent: Vec<Vec<u8>> = blocks
        .iter()
        .enumerate()
        .map(|(i, &b)| packet(b, i as u8 + 1, if i == 8 { 300 } else { 1000 }))
        .collect();
    let mut tx = UdpBackend::bind_port(SocketAddr::new("127.0.15.41".parse().unwrap(), 0)).unwrap();
    send(&mut tx, port, &sent);
    let pick = |keep: &dyn Fn(u8) -> bool| -> Vec<&Vec<u8>> {
        sent.iter()
            .zip(blocks)
            .filter(|(_, b)| keep(*b))
            .map(|(p, _)| p)
            .collect()
    };
    let kept = drain(&mut hub, 6);
    assert!(
        same(&kept, &pick(&|b| b != 1)),
        "the hub's, in order: {kept:?}"
    );
    let forwarded = drain(&mut member, 3);
    assert!(same(&forwarded, &pick(&|b| b == 1)), "{forwarded:?}");
    let (h, m) = (hub.stats(), member.stats());
    assert!(h.gro_datagrams >= 1, "the train arrived coalesced: {h:?}");
    assert_eq!((h.share_forwarded, h.share_unleased), (3, 1), "{h:?}");
    // Three packets of one run from one source: one entry of one message.
    assert_eq!(h.share_forward_msgs, 1, "{h:?}");
    assert_eq!((m.share_received, m.share_malformed), (3, 0), "{m:?}");

    // The hub goes: the member takes the port over, keeping its block, and a third NIC
    // joins it and gets the next free block (not the old hub's 0).
    drop(hub);
    let start = Instant::now();
    while !member.is_hub() {
        assert!(start.elapsed() < TAKEOVER_WAIT * 2, "no take-over");
        drain(&mut member, 0);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(member.qpn_range(), (0x1_0000, 0x1_ffff));
    assert_eq!(member.stats().share_takeovers, 1);
    assert_eq!(member.stats().share_received, 3, "kept across the change");
    let mut third = SharedBackend::open(ip).unwrap();
    assert_eq!(third.qpn_range(), (0x2_0000, 0x2_ffff));
    let sent = [
        packet(1, 0xa1, 64),
        packet(2, 0xa2, 80),
        packet(0, 0xa0, 96),
    ];
    send(&mut tx, port, &sent);
    let kept = drain(&mut member, 2);
    assert!(same(&kept, &[&sent[0], &sent[2]]), "{kept:?}");
    assert_eq!(member.stats().share_unleased, 1, "block 0 is nobody's now");
    let forwarded = drain(&mut third, 1);
    assert!(same(&forwarded, &[&sent[1]]), "{forwarded:?}");
    drop(third);
    let start = Instant::now();
    while member.stats().share_left == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the third never left"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_nic_that_does_not_share_the_port_is_reported() {
    let ip: IpAddr = "127.0.15.42".parse().unwrap();
    let _alone = UdpBackend::bind(ip).unwrap();
    let start = Instant::now();
    let e = SharedBackend::open(ip).err().expect("the port is held");
    assert!(start.elapsed() < TAKEOVER_WAIT * 2);
    assert!(e.to_string().contains("does not share"), "{e}");
}
