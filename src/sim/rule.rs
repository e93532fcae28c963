//! Fault rules for a simulated link (turmoil's `Rule`/`Verdict` shape): each rule sees
//! every packet of its direction and may drop, duplicate, delay or corrupt it. Rules own
//! their seeded RNG and counters, so a run is reproducible.

use crate::engine::Instant;
use core::time::Duration;

/// What happens to one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No opinion: later rules decide; if none does, deliver after the link latency.
    Pass,
    Drop,
    /// Deliver twice.
    Duplicate,
    /// Deliver after the latency plus this much (lets later packets overtake: reordering).
    Delay(Duration),
    /// Flip one byte (the ICRC will catch it).
    Corrupt {
        at: usize,
        xor: u8,
    },
    /// Deliver with the ECN field set to CE (RFC 3168), as a congested switch does, if
    /// the packet is ECN-capable (ECT(0)/ECT(1)); a Not-ECT packet passes unmarked.
    MarkCe,
}

pub use crate::rng::Rng;

/// A fault rule for one direction of a link.
pub trait Rule: Send {
    fn on_packet(&mut self, now: Instant, pkt: &[u8]) -> Verdict;
}

/// Random faults with fixed probabilities.
#[derive(Debug, Clone)]
pub struct Random {
    pub rng: Rng,
    pub drop: f64,
    pub duplicate: f64,
    /// Probability of an extra delay of up to `reorder_by`.
    pub reorder: f64,
    pub reorder_by: Duration,
    pub corrupt: f64,
    /// Probability of a CE mark ([`Verdict::MarkCe`]) on a packet not otherwise touched.
    /// Drawn only when above 0, so rules without it keep their random sequence.
    pub ce: f64,
}

impl Random {
    pub fn new(seed: u64) -> Random {
        Random {
            rng: Rng::new(seed),
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_by: Duration::from_micros(50),
            corrupt: 0.0,
            ce: 0.0,
        }
    }
}

impl Rule for Random {
    fn on_packet(&mut self, _now: Instant, pkt: &[u8]) -> Verdict {
        if self.rng.chance(self.drop) {
            Verdict::Drop
        } else if self.rng.chance(self.corrupt) && !pkt.is_empty() {
            let at = self.rng.below(pkt.len() as u64) as usize;
            Verdict::Corrupt {
                at,
                xor: 1 + self.rng.below(255) as u8,
            }
        } else if self.rng.chance(self.duplicate) {
            Verdict::Duplicate
        } else if self.rng.chance(self.reorder) {
            let ns = self.rng.below(self.reorder_by.as_nanos() as u64 + 1);
            Verdict::Delay(Duration::from_nanos(ns))
        } else if self.ce > 0.0 && self.rng.chance(self.ce) {
            Verdict::MarkCe
        } else {
            Verdict::Pass
        }
    }
}

/// Marks CE on exactly the packets whose 1-based index in this direction is listed and
/// whose bytes `which` accepts (the switch of a test that picks its congested packets).
pub struct MarkCeIf<F: FnMut(u64, &[u8]) -> bool + Send> {
    pub which: F,
    seen: u64,
}

impl<F: FnMut(u64, &[u8]) -> bool + Send> MarkCeIf<F> {
    /// `which(n, bytes)` sees the 1-based index `n` of each packet of the direction.
    pub fn new(which: F) -> MarkCeIf<F> {
        MarkCeIf { which, seen: 0 }
    }
}

impl<F: FnMut(u64, &[u8]) -> bool + Send> Rule for MarkCeIf<F> {
    fn on_packet(&mut self, _now: Instant, pkt: &[u8]) -> Verdict {
        self.seen += 1;
        if (self.which)(self.seen, pkt) {
            Verdict::MarkCe
        } else {
            Verdict::Pass
        }
    }
}

/// Drops exactly the packets whose 1-based index in this direction is listed (the lab's
/// nftables `numgen` rule).
#[derive(Debug, Clone, Default)]
pub struct DropNth {
    pub which: Vec<u64>,
    seen: u64,
}

impl DropNth {
    pub fn new(which: &[u64]) -> DropNth {
        DropNth {
            which: which.to_vec(),
            seen: 0,
        }
    }
}

impl Rule for DropNth {
    fn on_packet(&mut self, _now: Instant, _pkt: &[u8]) -> Verdict {
        self.seen += 1;
        if self.which.contains(&self.seen) {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }
}

/// Drops every packet matching a predicate on its bytes (e.g. all ACKs).
pub struct DropIf<F: FnMut(&[u8]) -> bool + Send>(pub F);

impl<F: FnMut(&[u8]) -> bool + Send> Rule for DropIf<F> {
    fn on_packet(&mut self, _now: Instant, pkt: &[u8]) -> Verdict {
        if (self.0)(pkt) {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }
}
