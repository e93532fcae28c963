//! The ECN codepoint (RFC 3168) through the interface: written into the IPv4 TOS or IPv6
//! traffic class by `send`, read back by `receive` (issue 25's congestion marks on TAP and
//! AF_PACKET ports).

use super::tests::{check_delivered, pair, pump, roce_packet, sa, t};
use super::tests::{G_A, G_B, IP_A, IP_B};
use super::*;

/// The ECN codepoint travels in the IP header both ways, IPv4 (TOS) and IPv6 (traffic
/// class): written by `send`, read back by `receive`, the ICRC unaffected (it masks those
/// bits), the IPv4 header checksum right.
#[test]
fn ecn_codepoints_cross_in_the_ip_header() {
    let (mut a, mut b) = pair();
    let mut out = vec![0u8; 1600];
    for (s, d) in [
        (sa(IP_A, 49152), sa(IP_B, 4791)),
        (sa(G_A, 49152), sa(G_B, 4791)),
    ] {
        // Resolve the neighbour first.
        let p = roce_packet(s, d, 40, 1);
        assert_eq!(a.send(t(0.0), s, d, Ecn::NotEct, &p, &mut out), Ok(None));
        pump(&mut a, &mut b, t(0.0));
        for ecn in [Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce] {
            let n = a.send(t(0.0), s, d, ecn, &p, &mut out).unwrap().unwrap();
            let tos = if s.is_ipv4() {
                out[15]
            } else {
                (out[14] << 4) | (out[15] >> 4)
            };
            assert_eq!(Ecn::from_tos(tos), ecn, "{s}: the header's bits");
            match b.receive(t(0.0), &out[..n]) {
                Rx::Roce {
                    src,
                    dst,
                    ipv4_id,
                    ecn: got,
                    payload,
                } => {
                    assert_eq!(got, ecn);
                    check_delivered(&(out[..n].to_vec(), src, dst, ipv4_id, payload), &p);
                }
                other => panic!("{ecn:?} over {s}: {other:?}"),
            }
        }
    }
}
