use super::*;
use crate::backend::fake::Fake;
use crate::backend::fault::Rule;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::time::Duration;

fn port(rules: &[&str]) -> (Faulty<Fake>, FaultHandle) {
    let rules = rules.iter().map(|t| match crate::daemon::fault::parse(t) {
        Ok(crate::daemon::fault::Command::Add(r)) => r,
        e => panic!("{t}: {e:?}"),
    });
    let h: FaultHandle = Arc::new(Mutex::new(Faults::new(rules.collect::<Vec<Rule>>())));
    (Faulty::new(Fake::new(), Arc::clone(&h)).unwrap(), h)
}

/// Packet `n`: RC SEND ONLY to QP `qpn`, its number in bytes 12..16.
fn pkt(qpn: u32, n: u32) -> Vec<u8> {
    let mut p = vec![0u8; 40];
    p[0] = 0x04;
    p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    p[12..16].copy_from_slice(&n.to_be_bytes());
    p
}

fn num(p: &[u8]) -> u32 {
    u32::from_be_bytes(p[12..16].try_into().unwrap())
}

/// Sends packets `ns` (to QP `qpn(n)`) in batches of 32.
fn send(f: &mut Faulty<Fake>, ns: &[u32], qpn: impl Fn(u32) -> u32) {
    const SLOT: usize = 64;
    for chunk in ns.chunks(32) {
        let mut pool = vec![0u8; 32 * SLOT];
        let a = f.local();
        let out: Vec<Outgoing> = chunk
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let p = pkt(qpn(n), n);
                pool[i * SLOT..i * SLOT + p.len()].copy_from_slice(&p);
                Outgoing {
                    src: a,
                    dst: a,
                    len: p.len(),
                    ecn: Default::default(),
                }
            })
            .collect();
        f.send_batch(&mut pool, SLOT, &out).unwrap();
    }
}

/// Receives everything waiting (the packets' numbers).
fn recv(f: &mut Faulty<Fake>) -> Vec<Vec<u8>> {
    let mut pool = vec![0u8; 1 << 16];
    let mut meta = vec![
        Received {
            src: any(),
            dst: any(),
            offset: 0,
            len: 0,
            segment: None,
            ipv4_id: None,
            ecn: Default::default(),
        };
        16
    ];
    let mut got = Vec::new();
    loop {
        let n = f.recv_batch(&mut pool, &mut meta).unwrap();
        if n == 0 {
            return got;
        }
        for m in &meta[..n] {
            assert_eq!(m.ipv4_id, Some(1), "the IPv4 ID is kept");
            got.push(pool[m.offset..m.offset + m.len].to_vec());
        }
    }
}

#[test]
fn drop_out_is_seeded_and_keeps_the_rest_in_order() {
    let ns: Vec<u32> = (0..1000).collect();
    let once = || {
        let (mut f, h) = port(&["drop 30% out seed=3"]);
        send(&mut f, &ns, |_| 1);
        let sent: Vec<u32> = f.inner().sent.iter().map(|p| num(p)).collect();
        let applied = h.lock().unwrap().report()[0].applied;
        assert_eq!(sent.len() as u64 + applied, 1000);
        assert!(sent.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(f.stats().fault_dropped, applied);
        sent
    };
    let a = once();
    assert!(
        (620..780).contains(&a.len()),
        "{} of 1000 kept at 30%",
        a.len()
    );
    assert_eq!(a, once(), "same seed, same packets");
}

#[test]
fn duplicate_in_delivers_twice_and_clear_stops_it() {
    let (mut f, h) = port(&["duplicate 100% in"]);
    f.inner.queue((0..40).map(|n| pkt(1, n)));
    let got: Vec<u32> = recv(&mut f).iter().map(|p| num(p)).collect();
    let want: Vec<u32> = (0..40).flat_map(|n| [n, n]).collect();
    assert_eq!(got, want);
    // Outgoing packets are untouched by an `in` rule.
    send(&mut f, &[7], |_| 1);
    assert_eq!(f.inner().sent.len(), 1);
    h.lock().unwrap().clear();
    f.inner.queue((0..5).map(|n| pkt(1, n)));
    assert_eq!(recv(&mut f).len(), 5);
}

/// The packets of QP 9 are held until two later packets went by: 0(qp 9) 1 2 3 goes out
/// as 1 2 0 3.
#[test]
fn reorder_holds_a_packet_behind_depth_others() {
    let (mut f, _) = port(&["reorder 100% depth=2 qpn=9"]);
    send(&mut f, &[0, 1, 2, 3], |n| if n == 0 { 9 } else { 1 });
    let sent: Vec<u32> = f.inner().sent.iter().map(|p| num(p)).collect();
    assert_eq!(sent, [1, 2, 0, 3]);
}

/// A delayed packet leaves no earlier than its delay, woken by the port's descriptor with
/// no other traffic.
#[test]
fn delay_releases_on_the_timer() {
    let (mut f, _) = port(&["delay 30ms out"]);
    let t0 = Instant::now();
    send(&mut f, &[5], |_| 1);
    assert!(f.inner().sent.is_empty());
    let mut fds = [PollFd::new(f.rx_fd(), PollFlags::POLLIN)];
    assert_eq!(poll(&mut fds, PollTimeout::from(2000u16)).unwrap(), 1);
    assert!(recv(&mut f).is_empty());
    assert!(t0.elapsed() >= Duration::from_millis(30));
    assert_eq!(
        f.inner().sent.len(),
        1,
        "released when the timer woke the port"
    );
    // Nothing held: the descriptor is quiet again.
    let mut fds = [PollFd::new(f.rx_fd(), PollFlags::POLLIN)];
    assert_eq!(poll(&mut fds, PollTimeout::ZERO).unwrap(), 0);
}

#[test]
fn corrupt_changes_bytes_of_matching_packets_only() {
    let (mut f, _) = port(&["corrupt 100% in opcode=RC_SEND_ONLY"]);
    let mut ack = pkt(1, 1);
    ack[0] = 0x11;
    f.inner.queue([pkt(1, 0), ack.clone()]);
    let got = recv(&mut f);
    assert_ne!(got[0], pkt(1, 0));
    assert_eq!(got[1], ack);
}
