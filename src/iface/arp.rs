//! ARP for IPv4 over Ethernet (RFC 826): answering requests for our address, learning
//! senders, asking for neighbours.

use super::eth::{self, Mac};
use super::neighbor::Learn;
use super::{DropReason, Iface, Rx};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// An ARP packet for Ethernet and IPv4: hardware type 1, protocol 0x0800, lengths 6 and 4.
pub const ARP_LEN: usize = 28;
const HTYPE_ETHERNET: u16 = 1;
pub const OP_REQUEST: u16 = 1;
pub const OP_REPLY: u16 = 2;

/// The fields of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arp {
    pub op: u16,
    pub sha: Mac,
    pub spa: Ipv4Addr,
    pub tha: Mac,
    pub tpa: Ipv4Addr,
}

impl Arp {
    /// Reads `b` (the Ethernet payload; trailing padding is ignored).
    pub fn parse(b: &[u8]) -> Result<Arp, DropReason> {
        if b.len() < ARP_LEN {
            return Err(DropReason::Malformed);
        }
        if eth::be16(b, 0) != HTYPE_ETHERNET
            || eth::be16(b, 2) != eth::ETHERTYPE_IPV4
            || b[4] != 6
            || b[5] != 4
        {
            // Another hardware or protocol (RFC 826: "?Do I have the hardware type ...").
            return Err(DropReason::Unsupported);
        }
        let op = eth::be16(b, 6);
        if op != OP_REQUEST && op != OP_REPLY {
            // RARP and InARP opcodes share the format; they are not ours to answer.
            return Err(DropReason::Unsupported);
        }
        Ok(Arp {
            op,
            sha: eth::mac_at(b, 8),
            spa: Ipv4Addr::new(b[14], b[15], b[16], b[17]),
            tha: eth::mac_at(b, 18),
            tpa: Ipv4Addr::new(b[24], b[25], b[26], b[27]),
        })
    }

    /// Writes the 28 bytes.
    pub fn emit(&self, b: &mut [u8]) {
        b[0..2].copy_from_slice(&HTYPE_ETHERNET.to_be_bytes());
        b[2..4].copy_from_slice(&eth::ETHERTYPE_IPV4.to_be_bytes());
        b[4] = 6;
        b[5] = 4;
        b[6..8].copy_from_slice(&self.op.to_be_bytes());
        b[8..14].copy_from_slice(&self.sha);
        b[14..18].copy_from_slice(&self.spa.octets());
        b[18..24].copy_from_slice(&self.tha);
        b[24..28].copy_from_slice(&self.tpa.octets());
    }
}

impl Iface {
    /// RFC 826's reception algorithm: merge the sender into an existing entry whatever
    /// the packet; if we are the target, add the sender when it was not merged, and answer
    /// a request. Only a reply to us sent to our MAC (`unicast`) confirms reachability
    /// (Linux's `arp_process`: broadcast replies and requests leave the entry STALE).
    pub(super) fn process_arp(&mut self, now: Duration, unicast: bool, b: &[u8]) -> Rx {
        let p = match Arp::parse(b) {
            Ok(p) => p,
            Err(r) => return Rx::Dropped(r),
        };
        if p.op == OP_REQUEST {
            self.stats.arp_requests_rx += 1;
        } else {
            self.stats.arp_replies_rx += 1;
        }
        let Some((ours, _)) = self.cfg.ipv4 else {
            return Rx::Dropped(DropReason::NotForUs);
        };
        // A group sender hardware address is never a neighbour's (RFC 1812 §3.3.2 for
        // routers; hosts take the same care), and our own address claimed by another
        // MAC is a conflict, not something to learn.
        if eth::is_group(&p.sha) {
            return Rx::Dropped(DropReason::Malformed);
        }
        if p.spa == ours {
            return Rx::Dropped(DropReason::BadSource);
        }
        // An ARP probe (RFC 5227 §2.1.1) has sender 0.0.0.0: nothing to learn, but one
        // for our address is answered so the prober sees it is taken.
        let learnable = super::ip::v4_source_ok(p.spa) && !self.is_subnet_broadcast(p.spa);
        let spa = IpAddr::V4(p.spa);
        let merged = learnable && self.neighbors.contains(&spa);
        let for_us = p.tpa == ours;
        if learnable && (merged || for_us) {
            let how = Learn {
                add: for_us,
                confirmed: for_us && unicast && p.op == OP_REPLY,
                override_mac: true,
            };
            self.learned(spa, p.sha, now, how);
        }
        if !for_us {
            return Rx::Dropped(DropReason::NotForUs);
        }
        if p.op == OP_REQUEST {
            let reply = Arp {
                op: OP_REPLY,
                sha: self.cfg.mac,
                spa: ours,
                tha: p.sha,
                tpa: p.spa,
            };
            // To the requester's hardware address (RFC 826), not broadcast.
            let f = self.control_frame(p.sha, eth::ETHERTYPE_ARP, ARP_LEN, |b| reply.emit(b));
            self.stats.arp_replies_tx += 1;
            self.queue_control(f);
        }
        Rx::Consumed
    }

    /// Asks who has `target`: broadcast, or unicast to `probe` to confirm a cached entry
    /// (RFC 1122 §2.3.2.1's unicast poll).
    pub(super) fn arp_request(&mut self, target: Ipv4Addr, probe: Option<Mac>) {
        let Some((ours, _)) = self.cfg.ipv4 else {
            return;
        };
        let req = Arp {
            op: OP_REQUEST,
            sha: self.cfg.mac,
            spa: ours,
            // Unknown: RFC 826 leaves it unset; zeros, as Linux sends.
            tha: [0; 6],
            tpa: target,
        };
        let dst = probe.unwrap_or(eth::BROADCAST);
        let f = self.control_frame(dst, eth::ETHERTYPE_ARP, ARP_LEN, |b| req.emit(b));
        self.stats.arp_requests_tx += 1;
        self.queue_control(f);
    }

    /// Records `ip` at `mac` as `how` allows and releases what waited for it (ARP and
    /// ND alike).
    pub(super) fn learned(&mut self, ip: IpAddr, mac: Mac, now: Duration, how: Learn) {
        let l = self.neighbors.learn(ip, mac, now, how);
        self.stats.neighbor_mac_changed += u64::from(l.mac_changed);
        self.stats.neighbor_reconfirmed += u64::from(l.reconfirmed);
        for h in l.released {
            self.released.push_back((mac, h));
        }
    }
}
