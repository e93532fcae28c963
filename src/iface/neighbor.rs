//! The neighbour cache: IP address to MAC, shared by ARP (RFC 826) and IPv6 Neighbor
//! Discovery (RFC 4861 §7.3), with the datagrams held while an address resolves.
//!
//! Entries follow RFC 4861 §7.3.2's reachability states, which Linux's neighbour code
//! applies to ARP too:
//!
//! - INCOMPLETE (`Incomplete`): a broadcast/multicast request is out (`TRIES` of them,
//!   `RETRY` apart); datagrams wait in a bounded queue; no answer drops them.
//! - REACHABLE: confirmed (a unicast ARP reply, a solicited NA) less than `ttl` ago; used.
//! - STALE: `ttl` passed, or the MAC came unconfirmed (a request, an unsolicited NA, a
//!   new MAC). Still used at once, with no timer of its own; its first use moves it to
//! - DELAY: used, and given `delay` for an answer to come anyway; then
//! - PROBE: unicast requests to the known MAC, `RETRY` apart; an answer makes it
//!   REACHABLE; after `PROBES` unanswered the entry is removed (the neighbour went away
//!   or changed its MAC), and the next datagram resolves by broadcast/multicast again.
//!
//! So an idle neighbour costs nothing when traffic resumes (its STALE MAC is used at once
//! while it is re-validated), and a wrong MAC is used for at most `delay` plus `PROBES`
//! retries before it is gone.
//!
//! Every bound is explicit: entries (`max_entries`; a full cache evicts a resolved entry,
//! STALE ones first, never an INCOMPLETE one), datagrams per neighbour and in all.

use super::eth::Mac;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Time between resolution requests, and between unicast probes (RFC 4861 §10
/// RETRANS_TIMER; RFC 1122 §2.3.2.1 asks ARP for at most one request per second per
/// address).
pub const RETRY: Duration = Duration::from_secs(1);
/// Broadcast/multicast requests sent before giving up (RFC 4861 §10 MAX_MULTICAST_SOLICIT).
pub const TRIES: u8 = 3;
/// Unicast probes sent before a neighbour is given up (RFC 4861 §10 MAX_UNICAST_SOLICIT).
pub const PROBES: u8 = 3;
/// How long a used STALE entry waits in DELAY before the first probe (RFC 4861 §10
/// DELAY_FIRST_PROBE_TIME), or the entry lifetime if that is shorter (so a lifetime
/// shortened for a test shortens this too).
pub const DELAY_FIRST_PROBE: Duration = Duration::from_secs(5);

/// A datagram waiting for its neighbour: the RoCE packet as the engine made it (ICRC for
/// IPv4 ID 0), framed when it is released.
#[derive(Debug, Clone)]
pub struct Held {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub ecn: crate::wire::Ecn,
    pub payload: Vec<u8>,
}

/// A resolved entry's reachability state (RFC 4861 §7.3.2), as `Iface::neighbors` shows
/// it. Every state but STALE has a deadline, which `poll_at` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeighborState {
    /// Confirmed; becomes STALE at `until`.
    Reachable { until: Duration },
    /// Unconfirmed since `since`: used at once, re-validated from its first use on.
    Stale { since: Duration },
    /// Used while STALE: the first unicast probe goes out at `probe_at`.
    Delay { probe_at: Duration },
    /// `sent` unicast probes out, unanswered; at `next_at` the next one, or (after
    /// `PROBES`) the entry is removed.
    Probe { sent: u8, next_at: Duration },
}

#[derive(Debug)]
enum State {
    Resolved {
        mac: Mac,
        state: NeighborState,
    },
    Incomplete {
        /// Requests sent so far.
        tries: u8,
        retry_at: Duration,
        held: VecDeque<Held>,
    },
}

/// What `lookup` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Send to this MAC now. `stale`: the entry was STALE, and this use moved it to DELAY
    /// (its re-validation started; `handle_timeout` sends the probes).
    Found { mac: Mac, stale: bool },
    /// A request is out; hold the datagram.
    Pending,
    /// Unknown (or given up): start resolving.
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

/// What a received ARP or ND message says about its MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Learn {
    /// It may create an entry (otherwise it only updates one we have).
    pub add: bool,
    /// It confirms reachability (a unicast ARP reply to us, a solicited NA): the entry
    /// becomes REACHABLE. Otherwise a new or changed MAC is STALE and a known one keeps
    /// its state (RFC 4861 §7.2.3, §7.2.5; Linux's `neigh_update`).
    pub confirmed: bool,
    /// It may replace a different MAC (ARP always, RFC 826's merge; an NA only with its
    /// override flag, §7.2.5).
    pub override_mac: bool,
}

/// What `learn` changed.
#[derive(Debug, Default)]
pub struct Learned {
    /// Datagrams that waited for this neighbour, now to be sent to its MAC.
    pub released: Vec<Held>,
    /// An entry's MAC was replaced.
    pub mac_changed: bool,
    /// A STALE, DELAY or PROBE entry became REACHABLE again.
    pub reconfirmed: bool,
}

/// What `handle_timeout` did, for the interface to act on and count.
#[derive(Debug, Default)]
pub struct Expired {
    /// Addresses whose broadcast/multicast request must be sent again.
    pub retry: Vec<IpAddr>,
    /// Unicast probes to send now: address and the MAC it is believed at.
    pub probe: Vec<(IpAddr, Mac)>,
    /// REACHABLE entries that became STALE.
    pub expired: u64,
    /// Entries whose `PROBES` unicast probes went unanswered, removed.
    pub probe_failed: u64,
    /// Addresses that never answered resolution, and the datagrams dropped with them.
    pub failed: u64,
    pub dropped: u64,
}

#[derive(Debug)]
pub struct Cache {
    map: HashMap<IpAddr, State>,
    /// REACHABLE lasts this long.
    ttl: Duration,
    /// DELAY lasts this long.
    delay: Duration,
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
            delay: DELAY_FIRST_PROBE.min(ttl),
            per_neighbor,
            total_max,
            max_entries: max_entries.max(1),
            held_total: 0,
        }
    }

    /// Looks `ip` up for sending at `now`: a resolved entry in any state answers with its
    /// MAC (a STALE one moves to DELAY). The bool: a REACHABLE entry past its deadline
    /// became STALE here, before `handle_timeout` ran.
    pub fn lookup(&mut self, ip: IpAddr, now: Duration) -> (Lookup, bool) {
        let mut expired = false;
        let answer = match self.map.get_mut(&ip) {
            None => Lookup::Missing,
            Some(State::Incomplete { .. }) => Lookup::Pending,
            Some(State::Resolved { mac, state }) => {
                if let NeighborState::Reachable { until } = *state {
                    if until <= now {
                        *state = NeighborState::Stale { since: until };
                        expired = true;
                    }
                }
                let stale = matches!(state, NeighborState::Stale { .. });
                if stale {
                    *state = NeighborState::Delay {
                        probe_at: now + self.delay,
                    };
                }
                Lookup::Found { mac: *mac, stale }
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
            Some(State::Incomplete { held: q, .. }) if q.len() < self.per_neighbor => {
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
            State::Incomplete {
                tries: 1,
                retry_at: now + RETRY,
                held: VecDeque::from([held]),
            },
        );
        self.held_total += 1;
        Ok(())
    }

    /// Makes room for one more entry keyed `ip`: evicts a resolved entry if the cache is
    /// full, the one least likely to be wanted (STALE longest, then PROBE, DELAY, and
    /// REACHABLE closest to its end). False if every entry is INCOMPLETE.
    fn make_room(&mut self, ip: &IpAddr) -> bool {
        if self.map.len() < self.max_entries || self.map.contains_key(ip) {
            return true;
        }
        let victim = self
            .map
            .iter()
            .filter_map(|(k, s)| match s {
                State::Resolved { state, .. } => Some((evict_rank(state), *k)),
                State::Incomplete { .. } => None,
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
    /// option, an NA's target link-layer option), as `how` allows.
    pub fn learn(&mut self, ip: IpAddr, mac: Mac, now: Duration, how: Learn) -> Learned {
        let mut out = Learned::default();
        let reachable = NeighborState::Reachable {
            until: now + self.ttl,
        };
        let fresh = if how.confirmed {
            reachable
        } else {
            NeighborState::Stale { since: now }
        };
        match self.map.get_mut(&ip) {
            Some(State::Resolved { mac: old, state }) => {
                if *old != mac {
                    if !how.override_mac {
                        // §7.2.5: the MAC is kept, but no longer trusted as confirmed.
                        if matches!(state, NeighborState::Reachable { .. }) {
                            *state = NeighborState::Stale { since: now };
                        }
                        return out;
                    }
                    *old = mac;
                    *state = fresh;
                    out.mac_changed = true;
                } else if how.confirmed {
                    out.reconfirmed = !matches!(state, NeighborState::Reachable { .. });
                    *state = reachable;
                }
            }
            Some(s @ State::Incomplete { .. }) => {
                let old = std::mem::replace(s, State::Resolved { mac, state: fresh });
                if let State::Incomplete { held, .. } = old {
                    // Datagrams that waited are a use: an unconfirmed MAC is re-validated.
                    if !held.is_empty() && !how.confirmed {
                        *s = State::Resolved {
                            mac,
                            state: NeighborState::Delay {
                                probe_at: now + self.delay,
                            },
                        };
                    }
                    // Still counted in held_total until `release_done`.
                    out.released = held.into();
                }
            }
            None => {
                if how.add && self.make_room(&ip) {
                    self.map.insert(ip, State::Resolved { mac, state: fresh });
                }
            }
        }
        out
    }

    /// A confirmation that names no MAC (a solicited NA without a target link-layer
    /// option, §7.2.5): a resolved entry becomes REACHABLE. True if it was not.
    pub fn confirm(&mut self, ip: IpAddr, now: Duration) -> bool {
        match self.map.get_mut(&ip) {
            Some(State::Resolved { state, .. }) => {
                let was = matches!(state, NeighborState::Reachable { .. });
                *state = NeighborState::Reachable {
                    until: now + self.ttl,
                };
                !was
            }
            _ => false,
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

    /// The earliest deadline: a retry, a give-up, the end of REACHABLE or DELAY, a probe.
    pub fn poll_at(&self) -> Option<Duration> {
        self.map
            .values()
            .filter_map(|s| match s {
                State::Resolved { state, .. } => deadline(state),
                State::Incomplete { retry_at, .. } => Some(*retry_at),
            })
            .min()
    }

    /// Runs every deadline at or before `now`.
    pub fn handle_timeout(&mut self, now: Duration) -> Expired {
        let mut out = Expired::default();
        let mut dropped_held = 0usize;
        self.map.retain(|ip, s| match s {
            State::Resolved { mac, state } => match *state {
                NeighborState::Reachable { until } if until <= now => {
                    *state = NeighborState::Stale { since: until };
                    out.expired += 1;
                    true
                }
                NeighborState::Delay { probe_at } if probe_at <= now => {
                    *state = NeighborState::Probe {
                        sent: 1,
                        next_at: now + RETRY,
                    };
                    out.probe.push((*ip, *mac));
                    true
                }
                NeighborState::Probe { sent, next_at } if next_at <= now => {
                    if sent >= PROBES {
                        out.probe_failed += 1;
                        return false;
                    }
                    *state = NeighborState::Probe {
                        sent: sent + 1,
                        next_at: now + RETRY,
                    };
                    out.probe.push((*ip, *mac));
                    true
                }
                _ => true,
            },
            State::Incomplete {
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

    /// Resolved entries: address, MAC, state.
    pub fn resolved(&self) -> impl Iterator<Item = (IpAddr, Mac, NeighborState)> + '_ {
        self.map.iter().filter_map(|(ip, s)| match s {
            State::Resolved { mac, state } => Some((*ip, *mac, *state)),
            State::Incomplete { .. } => None,
        })
    }
}

/// When a resolved entry's timer runs (STALE has none).
fn deadline(s: &NeighborState) -> Option<Duration> {
    match *s {
        NeighborState::Reachable { until } => Some(until),
        NeighborState::Stale { .. } => None,
        NeighborState::Delay { probe_at } => Some(probe_at),
        NeighborState::Probe { next_at, .. } => Some(next_at),
    }
}

/// Eviction order, lowest first: STALE the longest, then PROBE, DELAY, REACHABLE.
fn evict_rank(s: &NeighborState) -> (u8, Duration) {
    match *s {
        NeighborState::Stale { since } => (0, since),
        NeighborState::Probe { next_at, .. } => (1, next_at),
        NeighborState::Delay { probe_at } => (2, probe_at),
        NeighborState::Reachable { until } => (3, until),
    }
}
