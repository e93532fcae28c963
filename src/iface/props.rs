//! Property tests: arbitrary bytes, and valid frames with a few bytes changed, never make
//! the interface panic, and every `Rx::Roce` range lies inside its frame.

use super::tests::{pair, roce_frame_v4, t, G_A, G_B, IP_A, IP_B, MAC_A, MAC_B};
use super::*;
use etherparse::PacketBuilder;
use proptest::prelude::*;

/// Receives `frame` on a fresh pair's B and checks the one invariant a caller relies on.
fn receive_any(frame: &[u8]) {
    let (_, mut b) = pair();
    if let Rx::Roce { payload, .. } = b.receive(t(0.0), frame) {
        assert!(payload.start <= payload.end && payload.end <= frame.len());
        assert!(payload.len() >= 16);
    }
    let mut out = vec![0u8; b.frame_capacity()];
    while let Some(n) = b.poll_transmit(t(0.0), &mut out) {
        assert!(n <= out.len());
    }
    b.handle_timeout(t(1000.0));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(frame in proptest::collection::vec(any::<u8>(), 0..200)) {
        receive_any(&frame);
    }

    /// Valid frames with a few bytes changed: reaches past the Ethernet and IP checks.
    #[test]
    fn mutated_frames_never_panic(
        which in 0usize..3,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        cut in any::<usize>(),
    ) {
        let mut f = match which {
            0 => roce_frame_v4(),
            1 => {
                let mut r = Vec::new();
                PacketBuilder::ethernet2(MAC_A, MAC_B)
                    .ipv6(G_A.octets(), G_B.octets(), 255)
                    .icmpv6_echo_request(1, 1)
                    .write(&mut r, &[7u8; 24])
                    .unwrap();
                r
            }
            _ => {
                let mut r = vec![0u8; 60];
                eth::emit(&mut r, eth::BROADCAST, MAC_A, None, eth::ETHERTYPE_ARP);
                arp::Arp { op: 1, sha: MAC_A, spa: IP_A, tha: [0; 6], tpa: IP_B }.emit(&mut r[14..]);
                r
            }
        };
        for (at, v) in edits {
            let k = at % f.len();
            f[k] = v;
        }
        f.truncate(cut % (f.len() + 1));
        receive_any(&f);
    }
}
