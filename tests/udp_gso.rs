//! The UDP backend's batching on loopback: trains of equal-length datagrams leave as one
//! GSO send and arrive, coalesced (GRO) or not, as the same datagrams in order; IPv4
//! segments carry ICRCs for the IDs the kernel numbers them with.

use roce_emu::backend::udp::{UdpBackend, RX_BATCH, RX_SLOT};
use roce_emu::backend::Outgoing;
use roce_emu::backend::Received;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

const SLOT: usize = 4352;

fn received(rx: &mut UdpBackend, want: usize) -> Vec<Vec<u8>> {
    let mut pool = vec![0u8; RX_BATCH * RX_SLOT];
    let mut got = Vec::new();
    let start = Instant::now();
    while got.len() < want && start.elapsed() < Duration::from_secs(5) {
        let mut meta = [Received {
            src: rx.local(),
            dst: rx.local(),
            offset: 0,
            len: 0,
            segment: None,
            ipv4_id: None,
        }; RX_BATCH];
        let n = rx.recv_batch(&mut pool, &mut meta).unwrap();
        for r in &meta[..n] {
            let bytes = &pool[r.offset..r.offset + r.len];
            for d in bytes.chunks(r.segment.unwrap_or(r.len.max(1))) {
                got.push(d.to_vec());
            }
        }
    }
    got
}

fn send(tx: &mut UdpBackend, dst: SocketAddr, lens: &[usize]) -> Vec<Vec<u8>> {
    let src = SocketAddr::new(tx.local().ip(), 49999);
    let mut pool = vec![0u8; lens.len() * SLOT];
    let mut items = Vec::new();
    let mut sent = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        // Not RoCE: the rebase only touches the last four bytes, which the test skips.
        let d: Vec<u8> = (0..len).map(|k| (i * 7 + k) as u8).collect();
        pool[i * SLOT..i * SLOT + len].copy_from_slice(&d);
        items.push(Outgoing { src, dst, len });
        sent.push(d);
    }
    tx.send_batch(&mut pool, SLOT, &items).unwrap();
    sent
}

#[test]
fn trains_arrive_whole_and_in_order() {
    // Addresses no other test file uses: a daemon started on demand for one (perf_udp's
    // 127.0.0.61) outlives its test by its quarantine.
    let a: IpAddr = "127.0.58.1".parse().unwrap();
    let b: IpAddr = "127.0.58.2".parse().unwrap();
    let mut tx = UdpBackend::bind(a).unwrap();
    let mut rx = UdpBackend::bind(b).unwrap();
    // A train of 5 with a short tail, a lone ACK-sized one, a train of 3, then lengths
    // that cannot join (a longer one after a shorter).
    let lens = [
        1052, 1052, 1052, 1052, 300, 20, 4124, 4124, 4124, 80, 20, 80, 4124,
    ];
    let sent = send(&mut tx, rx.local(), &lens);
    let got = received(&mut rx, lens.len());
    assert_eq!(got.len(), lens.len());
    for (i, (s, g)) in sent.iter().zip(&got).enumerate() {
        assert_eq!(s.len(), g.len(), "datagram {i}");
        assert_eq!(s[..s.len() - 4], g[..g.len() - 4], "datagram {i}");
    }
    // Trains: 4 x 1052 + 300; 20; 3 x 4124 + 80; then 20, 80 and 4124 alone (a train
    // ends at its first shorter datagram).
    assert_eq!(
        (tx.stats.gso_sends, tx.stats.gso_segments),
        (2, 9),
        "{:?}",
        tx.stats
    );
    eprintln!("receiver: {:?}", rx.stats);
}
