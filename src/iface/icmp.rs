//! ICMP echo (RFC 792) and ICMPv6 (RFC 4443): echo replies, and the hand-off of
//! Neighbor Discovery messages to `nd`.

use super::eth::L2;
use super::ip::{self, Ipv4, Ipv6};
use super::{DropReason, Iface, Rx};
use std::time::Duration;

/// Type, code, checksum, identifier, sequence number (RFC 792, RFC 4443 §4.1).
const ECHO_HEADER_LEN: usize = 8;
const ICMP_ECHO_REPLY: u8 = 0;
const ICMP_ECHO_REQUEST: u8 = 8;
pub const ICMPV6_ECHO_REQUEST: u8 = 128;
pub const ICMPV6_ECHO_REPLY: u8 = 129;
pub const ND_NEIGHBOR_SOLICIT: u8 = 135;
pub const ND_NEIGHBOR_ADVERT: u8 = 136;

impl Iface {
    /// Answers an echo request with the same identifier, sequence number and data (RFC 792:
    /// "the data received in the echo message must be returned in the echo reply"),
    /// to the MAC it came from.
    pub(super) fn process_icmpv4(&mut self, l2: &L2, h: &Ipv4, msg: &[u8]) -> Rx {
        if msg.len() < ECHO_HEADER_LEN {
            return Rx::Dropped(DropReason::Malformed);
        }
        // The checksum covers the whole ICMP message (RFC 792).
        if ip::finish(ip::sum(msg, 0)) != 0 {
            return Rx::Dropped(DropReason::BadChecksum);
        }
        if msg[0] != ICMP_ECHO_REQUEST || msg[1] != 0 {
            return Rx::Dropped(DropReason::IcmpOther);
        }
        self.stats.icmp_echo += 1;
        self.ipv4_control(
            l2.src,
            h.dst,
            h.src,
            ip::PROTO_ICMP,
            |b| {
                b.copy_from_slice(msg);
                b[0] = ICMP_ECHO_REPLY;
                b[2..4].fill(0);
                let c = ip::finish(ip::sum(b, 0));
                b[2..4].copy_from_slice(&c.to_be_bytes());
            },
            msg.len(),
        );
        Rx::Consumed
    }

    /// Checks an ICMPv6 message's checksum (RFC 4443 §2.3, over the pseudo-header) and
    /// dispatches it. `unicast`: sent to one of our addresses, not to a group.
    pub(super) fn process_icmpv6(
        &mut self,
        now: Duration,
        l2: &L2,
        h: &Ipv6,
        msg: &[u8],
        unicast: bool,
    ) -> Rx {
        if msg.len() < 4 {
            return Rx::Dropped(DropReason::Malformed);
        }
        let acc = ip::pseudo_v6(&h.src, &h.dst, ip::PROTO_ICMPV6, msg.len());
        if ip::finish(ip::sum(msg, acc)) != 0 {
            return Rx::Dropped(DropReason::BadChecksum);
        }
        match msg[0] {
            ICMPV6_ECHO_REQUEST => self.echo_v6(l2, h, msg, unicast),
            ND_NEIGHBOR_SOLICIT => self.process_ns(now, l2, h, msg),
            ND_NEIGHBOR_ADVERT => self.process_na(now, h, msg),
            _ => Rx::Dropped(DropReason::IcmpOther),
        }
    }

    /// RFC 4443 §4.2: the reply carries the request's identifier, sequence number and
    /// data. Echo to a group is not answered (RFC 4443 §4.2 allows either; a NIC that
    /// answers ff02::1 pings only adds noise).
    fn echo_v6(&mut self, l2: &L2, h: &Ipv6, msg: &[u8], unicast: bool) -> Rx {
        if !unicast {
            return Rx::Dropped(DropReason::NotForUs);
        }
        if h.src.is_unspecified() {
            return Rx::Dropped(DropReason::BadSource);
        }
        if msg.len() < ECHO_HEADER_LEN || msg[1] != 0 {
            return Rx::Dropped(DropReason::Malformed);
        }
        self.stats.icmpv6_echo += 1;
        self.icmpv6_control(l2.src, h.dst, h.src, ip::DEFAULT_TTL, msg.len(), |b| {
            b.copy_from_slice(msg);
            b[0] = ICMPV6_ECHO_REPLY;
        });
        Rx::Consumed
    }
}
