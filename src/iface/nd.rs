//! IPv6 Neighbor Discovery, the address-resolution part (RFC 4861 §7): Neighbor
//! Solicitations and Advertisements, with their link-layer address options.

use super::eth::{self, Mac, L2};
use super::icmp::{ND_NEIGHBOR_ADVERT, ND_NEIGHBOR_SOLICIT};
use super::ip::Ipv6;
use super::neighbor::Learn;
use super::{DropReason, Iface, Rx};
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

/// ND messages must arrive with this hop limit, proving they were not forwarded (RFC 4861
/// §7.1.1, §7.1.2), and are sent with it (§7.2.2, §7.2.4).
pub const ND_HOP_LIMIT: u8 = 255;
/// Type, code, checksum, 4 bytes of flags/reserved, target address (RFC 4861 §4.3, §4.4).
pub const ND_LEN: usize = 24;
/// A link-layer address option for Ethernet: type, length 1 (in 8-byte units), MAC.
const LLADDR_OPT_LEN: usize = 8;
const OPT_SOURCE_LLADDR: u8 = 1;
const OPT_TARGET_LLADDR: u8 = 2;
/// NA flags (RFC 4861 §4.4): router, solicited, override.
const NA_SOLICITED: u8 = 0x40;
const NA_OVERRIDE: u8 = 0x20;

/// The link-layer address option of `kind` in `opts`, if any; `Err` if an option has
/// length 0 or runs past the end (RFC 4861 §7.1.1: such messages are discarded).
fn lladdr_option(mut opts: &[u8], kind: u8) -> Result<Option<Mac>, DropReason> {
    let mut found = None;
    while !opts.is_empty() {
        if opts.len() < 2 || opts[1] == 0 {
            return Err(DropReason::Malformed);
        }
        let len = usize::from(opts[1]) * 8;
        if len > opts.len() {
            return Err(DropReason::Malformed);
        }
        // Longer link-layer options belong to other media; Ethernet's is one unit.
        if opts[0] == kind && len == LLADDR_OPT_LEN {
            found = Some(eth::mac_at(opts, 2));
        }
        opts = &opts[len..];
    }
    Ok(found)
}

/// The checks RFC 4861 §7.1.1 and §7.1.2 share; returns the target.
fn check_common(h: &Ipv6, msg: &[u8]) -> Result<Ipv6Addr, DropReason> {
    if h.hop_limit != ND_HOP_LIMIT {
        return Err(DropReason::BadHopLimit);
    }
    if msg[1] != 0 || msg.len() < ND_LEN {
        return Err(DropReason::Malformed);
    }
    let mut t = [0u8; 16];
    t.copy_from_slice(&msg[8..24]);
    let target = Ipv6Addr::from(t);
    if target.is_multicast() {
        return Err(DropReason::Malformed);
    }
    Ok(target)
}

/// Writes an NS or NA: type, code 0, checksum 0 (filled by the caller), `flags`,
/// `target`, one link-layer address option.
fn emit(b: &mut [u8], kind: u8, flags: u8, target: &Ipv6Addr, opt: u8, mac: &Mac) {
    b[0] = kind;
    b[1] = 0;
    b[2..4].fill(0);
    b[4] = flags;
    b[5..8].fill(0);
    b[8..24].copy_from_slice(&target.octets());
    b[24] = opt;
    b[25] = 1;
    b[26..32].copy_from_slice(mac);
}

impl Iface {
    /// RFC 4861 §7.2.3: answer a solicitation for one of our addresses, learning the
    /// solicitor from its source link-layer option.
    pub(super) fn process_ns(&mut self, now: Duration, l2: &L2, h: &Ipv6, msg: &[u8]) -> Rx {
        let target = match check_common(h, msg) {
            Ok(t) => t,
            Err(r) => return Rx::Dropped(r),
        };
        let slla = match lladdr_option(&msg[ND_LEN..], OPT_SOURCE_LLADDR) {
            Ok(o) => o,
            Err(r) => return Rx::Dropped(r),
        };
        let dad = h.src.is_unspecified();
        // §7.1.1: from ::, only to a solicited-node group and without a source option.
        if dad && (h.dst != eth::solicited_node(&target) || slla.is_some()) {
            return Rx::Dropped(DropReason::Malformed);
        }
        self.stats.nd_ns_rx += 1;
        if !self.is_ours_v6(&target) {
            return Rx::Dropped(DropReason::NotForUs);
        }
        if let (false, Some(mac)) = (dad, slla) {
            // §7.2.3: create or update the entry for the solicitor (STALE if new or
            // changed; a known MAC keeps its state).
            let how = Learn {
                add: true,
                confirmed: false,
                override_mac: true,
            };
            self.learned(IpAddr::V6(h.src), mac, now, how);
        }
        // §7.2.4: to a DAD solicitor (which has no address yet) at all-nodes, solicited
        // flag clear; otherwise unicast to the solicitor, solicited. Override set: the
        // address is ours, not an anycast one.
        let (dst, dst_mac, flags) = if dad {
            (
                eth::ALL_NODES,
                eth::ipv6_multicast_mac(&eth::ALL_NODES),
                NA_OVERRIDE,
            )
        } else {
            (h.src, slla.unwrap_or(l2.src), NA_SOLICITED | NA_OVERRIDE)
        };
        let mac = self.cfg.mac;
        self.stats.nd_na_tx += 1;
        self.icmpv6_control(
            dst_mac,
            target,
            dst,
            ND_HOP_LIMIT,
            ND_LEN + LLADDR_OPT_LEN,
            |b| {
                emit(
                    b,
                    ND_NEIGHBOR_ADVERT,
                    flags,
                    &target,
                    OPT_TARGET_LLADDR,
                    &mac,
                )
            },
        );
        Rx::Consumed
    }

    /// RFC 4861 §7.2.5: an advertisement updates an entry we have (resolving a pending
    /// one); one for an address we never asked about is not recorded. Solicited, it
    /// confirms reachability; without override it does not replace a different MAC.
    pub(super) fn process_na(&mut self, now: Duration, h: &Ipv6, msg: &[u8]) -> Rx {
        let target = match check_common(h, msg) {
            Ok(t) => t,
            Err(r) => return Rx::Dropped(r),
        };
        // §7.1.2: a solicited advertisement is never sent to a group.
        if h.dst.is_multicast() && msg[4] & NA_SOLICITED != 0 {
            return Rx::Dropped(DropReason::Malformed);
        }
        let tlla = match lladdr_option(&msg[ND_LEN..], OPT_TARGET_LLADDR) {
            Ok(o) => o,
            Err(r) => return Rx::Dropped(r),
        };
        self.stats.nd_na_rx += 1;
        if self.is_ours_v6(&target) {
            // Another node claims our address (its DAD or a conflict): not learned.
            return Rx::Dropped(DropReason::BadSource);
        }
        let how = Learn {
            add: false,
            confirmed: msg[4] & NA_SOLICITED != 0,
            override_mac: msg[4] & NA_OVERRIDE != 0,
        };
        match tlla {
            Some(mac) if !eth::is_group(&mac) => self.learned(IpAddr::V6(target), mac, now, how),
            Some(_) => {}
            None if how.confirmed => {
                let again = self.neighbors.confirm(IpAddr::V6(target), now);
                self.stats.neighbor_reconfirmed += u64::from(again);
            }
            None => {}
        }
        Rx::Consumed
    }

    /// Sends an NS for `target` with our source link-layer option: to its solicited-node
    /// group to resolve it (§7.2.2), or unicast to the address and `probe`'s MAC to confirm
    /// a cached entry (§7.3.3's probe).
    pub(super) fn neighbor_solicit(&mut self, target: Ipv6Addr, probe: Option<Mac>) {
        let src = self.ipv6_source_for(&target);
        let (dst, dst_mac) = match probe {
            Some(mac) => (target, mac),
            None => {
                let group = eth::solicited_node(&target);
                (group, eth::ipv6_multicast_mac(&group))
            }
        };
        let mac = self.cfg.mac;
        self.stats.nd_ns_tx += 1;
        self.icmpv6_control(
            dst_mac,
            src,
            dst,
            ND_HOP_LIMIT,
            ND_LEN + LLADDR_OPT_LEN,
            |b| emit(b, ND_NEIGHBOR_SOLICIT, 0, &target, OPT_SOURCE_LLADDR, &mac),
        );
    }
}
