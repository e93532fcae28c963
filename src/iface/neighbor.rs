//! The neighbour cache: IP address to MAC, shared by ARP (RFC 826) and IPv6 Neighbor
//! Discovery (RFC 4861 §7.3), with the datagrams held while an address resolves.
//!
//! After smoltcp's `iface::neighbor` (an entry expires at a deadline; lookups before it
//! answer), plus what a NIC carrying a transport needs that smoltcp leaves to its sockets:
//! datagrams wait in a bounded per-neighbour queue instead of being dropped, requests are
//! retried on a timer, and an entry in use is re-confirmed with a unicast probe before it
//! expires, so a running connection does not stall for a round trip every `ttl` (the idea
//! of RFC 4861 §7.3.3's PROBE state, without its DELAY and STALE states).
//!
//! Every bound is explicit: entries (`max_entries`; a full cache evicts the resolved entry
//! closest to expiry, never a pending one), datagrams per neighbour and datagrams in all.

use super::eth::Mac;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Time between resolution requests (RFC 4861 §10 RETRANS_TIMER; RFC 1122 §2.3.2.1 asks
/// ARP for at most one request per second per address).
pub const RETRY: Duration = Duration::from_secs(1);
/// Requests sent before giving up (RFC 4861 §10 MAX_MULTICAST_SOLICIT).
pub const TRIES: u8 = 3;

/// A datagram waiting for its neighbour: the RoCE packet as the engine made it (ICRC for
/// IPv4 ID 0), framed when it is released.
#[derive(Debug, Clone)]
pub struct Held {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub payload: Vec<u8>,
}

#[derive(Debug)]
enum State {
    Resolved {
        mac: Mac,
        expires: Duration,
        /// A unicast probe went out for this lifetime; the answer refreshes the entry.
        probed: bool,
    },
    Pending {
        /// Requests sent so far.
        tries: u8,
        retry_at: Duration,
        held: VecDeque<Held>,
    },
}

/// What `lookup` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Send to this MAC; `probe` asks the caller to send a unicast request to it now (the
    /// entry is in its last quarter and has not been probed yet).
    Found { mac: Mac, probe: bool },
    /// A request is out; hold the datagram.
    Pending,
    /// Unknown (or just expired): start resolving.
    Missing,
}

/// Why a datagram could not be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldError {
    /// This neighbour's queue, or the queues in all, are full.
    QueueFull,
    /// The cache is full of pending entries (nothing resolved to evict).
    CacheFull,
}

/// What `handle_timeout` did, for the interface to act on and count.
#[derive(Debug, Default)]
pub struct Expired {
    /// Addresses whose request must be sent again.
    pub retry: Vec<IpAddr>,
    /// Resolved entries that expired.
    pub expired: u64,
    /// Addresses that never answered, and the datagrams dropped with them.
    pub failed: u64,
    pub dropped: u64,
}

#[derive(Debug)]
pub struct Cache {
    map: HashMap<IpAddr, State>,
    ttl: Duration,
    per_neighbor: usize,
    total_max: usize,
    max_entries: usize,
    /// Datagrams held here plus those released but not yet sent (`release_done`).
    held_total: usize,
}

impl Cache {
    pub fn new(ttl: Duration, per_neighbor: usize, total_max: usize, max_entries: usize) -> Cache {
        Cache {
            map: HashMap::new(),
            ttl,
            per_neighbor,
            total_max,
            max_entries: max_entries.max(1),
            held_total: 0,
        }
    }

    /// Looks `ip` up for sending at `now`. An entry past its deadline counts as missing
    /// (and is removed) even if `handle_timeout` has not run yet.
    pub fn lookup(&mut self, ip: IpAddr, now: Duration) -> (Lookup, bool) {
        let mut expired = false;
        let answer = match self.map.get_mut(&ip) {
            None => Lookup::Missing,
            Some(State::Pending { .. }) => Lookup::Pending,
            Some(State::Resolved { expires, .. }) if *expires <= now => {
                self.map.remove(&ip);
                expired = true;
                Lookup::Missing
            }
            Some(State::Resolved {
                mac,
                expires,
                probed,
            }) => {
                let probe = !*probed && *expires - now <= self.ttl / 4;
                *probed |= probe;
                Lookup::Found { mac: *mac, probe }
            }
        };
        (answer, expired)
    }

    /// Holds `held` for a neighbour already pending.
    pub fn hold(&mut self, ip: IpAddr, held: Held) -> Result<(), HoldError> {
        if self.held_total >= self.total_max {
            return Err(HoldError::QueueFull);
        }
        match self.map.get_mut(&ip) {
            Some(State::Pending { held: q, .. }) if q.len() < self.per_neighbor => {
                q.push_back(held);
                self.held_total += 1;
                Ok(())
            }
            _ => Err(HoldError::QueueFull),
        }
    }

    /// Starts resolving `ip` with `held` waiting (the caller sends the first request now).
    pub fn start(&mut self, ip: IpAddr, now: Duration, held: Held) -> Result<(), HoldError> {
        if self.held_total >= self.total_max || self.per_neighbor == 0 {
            return Err(HoldError::QueueFull);
        }
        if !self.make_room(&ip) {
            return Err(HoldError::CacheFull);
        }
        self.map.insert(
            ip,
            State::Pending {
                tries: 1,
                retry_at: now + RETRY,
                held: VecDeque::from([held]),
            },
        );
        self.held_total += 1;
        Ok(())
    }

    /// Makes room for one more entry keyed `ip`: evicts the resolved entry that expires
    /// first if the cache is full. False if every entry is pending.
    fn make_room(&mut self, ip: &IpAddr) -> bool {
        if self.map.len() < self.max_entries || self.map.contains_key(ip) {
            return true;
        }
        let victim = self
            .map
            .iter()
            .filter_map(|(k, s)| match s {
                State::Resolved { expires, .. } => Some((*expires, *k)),
                State::Pending { .. } => None,
            })
            .min();
        match victim {
            Some((_, k)) => {
                self.map.remove(&k);
                true
            }
            None => false,
        }
    }

    /// Records that `ip` is at `mac` (an ARP packet's sender, an NS's source link-layer
    /// option, an NA's target link-layer option). An existing entry is always updated (RFC
    /// 826's merge, RFC 4861 §7.2.3/§7.2.5); a new one is created only if `may_add`. Returns
    /// the datagrams that were waiting for it, now to be sent to `mac`.
    pub fn learn(&mut self, ip: IpAddr, mac: Mac, now: Duration, may_add: bool) -> Vec<Held> {
        let fresh = State::Resolved {
            mac,
            expires: now + self.ttl,
            probed: false,
        };
        match self.map.get_mut(&ip) {
            Some(s @ State::Resolved { .. }) => {
                *s = fresh;
                Vec::new()
            }
            Some(s @ State::Pending { .. }) => match std::mem::replace(s, fresh) {
                // Still counted in held_total until `release_done`.
                State::Pending { held, .. } => held.into(),
                State::Resolved { .. } => Vec::new(),
            },
            None => {
                if may_add && self.make_room(&ip) {
                    self.map.insert(ip, fresh);
                }
                Vec::new()
            }
        }
    }

    /// Whether an entry for `ip` exists (resolved or pending): RFC 826's merge flag.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        self.map.contains_key(ip)
    }

    /// Counts one more datagram queued outside the cache (behind released ones); false if
    /// the total bound is reached.
    pub fn reserve(&mut self) -> bool {
        if self.held_total >= self.total_max {
            return false;
        }
        self.held_total += 1;
        true
    }

    /// A released datagram was sent or dropped.
    pub fn release_done(&mut self) {
        self.held_total = self.held_total.saturating_sub(1);
    }

    /// Datagrams held or released and not yet sent.
    pub fn held_total(&self) -> usize {
        self.held_total
    }

    /// The earliest deadline: a retry, a give-up, or an expiry.
    pub fn poll_at(&self) -> Option<Duration> {
        self.map
            .values()
            .map(|s| match s {
                State::Resolved { expires, .. } => *expires,
                State::Pending { retry_at, .. } => *retry_at,
            })
            .min()
    }

    /// Runs every deadline at or before `now`.
    pub fn handle_timeout(&mut self, now: Duration) -> Expired {
        let mut out = Expired::default();
        let mut dropped_held = 0usize;
        self.map.retain(|ip, s| match s {
            State::Resolved { expires, .. } => {
                let keep = *expires > now;
                out.expired += u64::from(!keep);
                keep
            }
            State::Pending {
                tries,
                retry_at,
                held,
            } => {
                if *retry_at > now {
                    return true;
                }
                if *tries < TRIES {
                    *tries += 1;
                    *retry_at = now + RETRY;
                    out.retry.push(*ip);
                    return true;
                }
                out.failed += 1;
                dropped_held += held.len();
                false
            }
        });
        self.held_total -= dropped_held;
        out.dropped = dropped_held as u64;
        out
    }

    /// Resolved entries: address, MAC, deadline.
    pub fn resolved(&self) -> impl Iterator<Item = (IpAddr, Mac, Duration)> + '_ {
        self.map.iter().filter_map(|(ip, s)| match s {
            State::Resolved { mac, expires, .. } => Some((*ip, *mac, *expires)),
            State::Pending { .. } => None,
        })
    }
}
