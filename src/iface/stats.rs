//! What the interface counts, and the reasons it drops input or refuses a send.

/// Why a received frame was not taken (each bumps its own counter in [`IfaceStats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum DropReason {
    /// Addressed to another host: another MAC, another IP, a multicast group we are not
    /// in, an NS for someone else's address, an ARP packet for another target.
    NotForUs,
    /// Without the configured 802.1Q tag, with another VID, tagged when none is
    /// configured, or with stacked tags.
    BadVlan,
    /// Too short for its headers, inconsistent lengths, wrong version, a group source MAC,
    /// an ND message that fails RFC 4861's validity checks.
    Malformed,
    /// IPv4 header, ICMP, ICMPv6 or (non-zero) UDP checksum wrong.
    BadChecksum,
    /// A source address no host may send from (RFC 1122 §3.2.1.3, RFC 4291): broadcast,
    /// multicast, unspecified, loopback.
    BadSource,
    /// An IPv4 fragment: RoCEv2 is sent with DF and never fragmented.
    Fragment,
    /// An IPv6 extension header: RoCEv2 puts UDP right after the fixed header.
    Ipv6ExtensionHeader,
    /// An EtherType, IP protocol or ARP hardware/protocol type this interface does not
    /// speak.
    Unsupported,
    /// UDP to a port other than 4791 (no ICMP port unreachable is sent).
    NotRocePort,
    /// ICMP or ICMPv6 other than echo request and NS/NA (replies, unreachables, router
    /// advertisements): nothing here acts on them.
    IcmpOther,
    /// An ND message whose hop limit is not 255, so it may come from off-link (RFC 4861
    /// §7.1.1, §7.1.2).
    BadHopLimit,
}

/// Why [`super::Iface::send`] refused a datagram (each bumps its own counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error, serde::Serialize)]
pub enum TxError {
    /// The destination is not on-link (no gateway is supported), is multicast or
    /// broadcast, is one of our own addresses, or its family differs from the source's.
    #[error("no route to the destination (not on-link)")]
    NoRoute,
    /// The source address is not one of this interface's.
    #[error("the source address is not this interface's")]
    BadSource,
    /// The IP datagram would exceed the interface MTU.
    #[error("datagram larger than the interface MTU")]
    TooBig,
    /// The neighbour is resolving and its queue (or the queues in all) is full.
    #[error("the queue of datagrams waiting for address resolution is full")]
    QueueFull,
    /// The caller's buffer cannot hold the frame.
    #[error("output buffer too small for the frame")]
    BufferTooSmall,
}

/// Named counters (serialised for `counters` and logs).
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IfaceStats {
    /// Frames given to `receive`, and frames handed out by `send` and `poll_transmit`.
    pub rx_frames: u64,
    pub tx_frames: u64,
    /// RoCEv2 datagrams delivered (`Rx::Roce`) and framed.
    pub rx_roce: u64,
    pub tx_roce: u64,
    pub arp_requests_rx: u64,
    pub arp_requests_tx: u64,
    pub arp_replies_rx: u64,
    pub arp_replies_tx: u64,
    pub nd_ns_rx: u64,
    pub nd_ns_tx: u64,
    pub nd_na_rx: u64,
    pub nd_na_tx: u64,
    /// Echo requests answered.
    pub icmp_echo: u64,
    pub icmpv6_echo: u64,
    // Receive drops, one per `DropReason`.
    pub not_for_us: u64,
    pub bad_vlan: u64,
    pub malformed: u64,
    pub bad_checksum: u64,
    pub bad_source: u64,
    pub ipv4_fragment: u64,
    pub ipv6_ext_header: u64,
    pub unsupported: u64,
    pub not_roce_port: u64,
    pub icmp_other: u64,
    pub bad_hop_limit: u64,
    // Send refusals, one per `TxError`.
    pub no_route: u64,
    pub tx_bad_source: u64,
    pub too_big: u64,
    pub queue_full: u64,
    pub buffer_too_small: u64,
    /// Held datagrams dropped because their neighbour never answered.
    pub pending_dropped: u64,
    /// Neighbours that never answered (`TRIES` requests).
    pub resolve_failed: u64,
    /// Cache entries that reached the end of their lifetime (`neighbor_ttl`) unconfirmed:
    /// REACHABLE became STALE (kept, and used at once when wanted).
    pub neighbor_expired: u64,
    /// Datagrams sent at once on a STALE entry instead of waiting for a resolution: the
    /// entry's first use, which moves it to DELAY and starts its re-validation.
    pub neighbor_stale_used: u64,
    /// Unicast probes (ARP requests, NS) sent to the MAC of an entry being re-validated
    /// (PROBE state), `PROBES` at most per entry.
    pub neighbor_probes: u64,
    /// Entries confirmed REACHABLE again (a probe answered) after being STALE, DELAY or
    /// PROBE.
    pub neighbor_reconfirmed: u64,
    /// Entries removed because their probes went unanswered (the neighbour went away, or
    /// now answers at another MAC): the next datagram resolves by broadcast/multicast.
    pub neighbor_probe_failed: u64,
    /// Entries whose MAC an ARP or ND message replaced (a neighbour that came back with
    /// another MAC); the new MAC is STALE until confirmed.
    pub neighbor_mac_changed: u64,
    /// Replies and requests dropped because the control queue was full (a caller that
    /// does not drain `poll_transmit`), or because a reply would exceed the MTU.
    pub control_dropped: u64,
}

impl IfaceStats {
    pub(super) fn count_drop(&mut self, r: DropReason) {
        let c = match r {
            DropReason::NotForUs => &mut self.not_for_us,
            DropReason::BadVlan => &mut self.bad_vlan,
            DropReason::Malformed => &mut self.malformed,
            DropReason::BadChecksum => &mut self.bad_checksum,
            DropReason::BadSource => &mut self.bad_source,
            DropReason::Fragment => &mut self.ipv4_fragment,
            DropReason::Ipv6ExtensionHeader => &mut self.ipv6_ext_header,
            DropReason::Unsupported => &mut self.unsupported,
            DropReason::NotRocePort => &mut self.not_roce_port,
            DropReason::IcmpOther => &mut self.icmp_other,
            DropReason::BadHopLimit => &mut self.bad_hop_limit,
        };
        *c += 1;
    }

    pub(super) fn count_tx_error(&mut self, e: TxError) {
        let c = match e {
            TxError::NoRoute => &mut self.no_route,
            TxError::BadSource => &mut self.tx_bad_source,
            TxError::TooBig => &mut self.too_big,
            TxError::QueueFull => &mut self.queue_full,
            TxError::BufferTooSmall => &mut self.buffer_too_small,
        };
        *c += 1;
    }
}
