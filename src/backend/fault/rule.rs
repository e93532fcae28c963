//! Fault rules and the decisions they make, one packet at a time.
//!
//! A rule is an action (drop, duplicate, reorder, delay, corrupt), a rate, and a filter
//! (direction, BTH opcode, BTH DestQP). Every rule draws from its own seeded [`Rng`], and
//! only for packets its filter matches, so a rule's choices depend on its seed and the
//! packets it sees, never on other rules or on the clock: a seed reproduces a run for the
//! same packet sequence. The text syntax is parsed in `daemon::fault`; `Display` writes it
//! back (with the effective seed), and parsing that text gives the same rule.

use crate::rng::Rng;
use crate::wire::bth;
use crate::wire::opcode::Opcode;
use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// Which way a packet goes through the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dir {
    /// Received from the wire.
    In,
    /// Sent to the wire.
    Out,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    Drop,
    /// Sent (or delivered) twice.
    Duplicate,
    /// Held back until `depth` later packets of the same direction went by (or
    /// [`REORDER_MAX_HOLD`] passed, so a quiet link does not keep it forever).
    Reorder {
        depth: u32,
    },
    /// Held back for this long.
    Delay(Duration),
    /// One byte changed (XOR with a non-zero value), never the BTH byte the ICRC masks:
    /// the receiver's ICRC check must catch every corrupted packet.
    Corrupt,
}

/// Longest a reordered packet is held when too few packets follow it.
pub const REORDER_MAX_HOLD: Duration = Duration::from_millis(50);
/// Longest delay a rule may ask for (a held packet holds memory).
pub const MAX_DELAY: Duration = Duration::from_secs(10);
/// Deepest reorder a rule may ask for.
pub const MAX_DEPTH: u32 = 1024;

#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub action: Action,
    /// The share of matching packets acted on, in percent (0 to 100).
    pub percent: f64,
    /// None: both directions.
    pub dir: Option<Dir>,
    pub opcode: Option<u8>,
    pub qpn: Option<u32>,
    pub seed: u64,
}

impl Rule {
    /// A rule with no filter at 100% and the default seed for its action.
    pub fn new(action: Action) -> Rule {
        Rule {
            action,
            percent: 100.0,
            dir: None,
            opcode: None,
            qpn: None,
            seed: default_seed(&action),
        }
    }

    /// Whether the rule's filter takes this packet (BTH through ICRC).
    pub fn matches(&self, dir: Dir, pkt: &[u8]) -> bool {
        if self.dir.is_some_and(|d| d != dir) {
            return false;
        }
        if self.opcode.is_none() && self.qpn.is_none() {
            return true;
        }
        if pkt.len() < bth::HEADER_LEN {
            return false;
        }
        let qpn = u32::from_be_bytes([0, pkt[5], pkt[6], pkt[7]]);
        self.opcode.is_none_or(|o| o == pkt[bth::field::OPCODE])
            && self.qpn.is_none_or(|q| q == qpn)
    }
}

/// The seed of a rule that names none: fixed per action (so `drop 5%` is the same run
/// every time) and different between actions (so `drop 5%` and `corrupt 5%` do not pick
/// the same packets).
pub fn default_seed(a: &Action) -> u64 {
    match a {
        Action::Drop => 1,
        Action::Duplicate => 2,
        Action::Reorder { .. } => 3,
        Action::Delay(_) => 4,
        Action::Corrupt => 5,
    }
}

/// A duration as the rule syntax writes it: whole `s`, `ms` or `us` when exact.
pub fn fmt_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us % 1_000_000 == 0 {
        format!("{}s", us / 1_000_000)
    } else if us % 1000 == 0 {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.action {
            Action::Drop => write!(f, "drop")?,
            Action::Duplicate => write!(f, "duplicate")?,
            Action::Reorder { .. } => write!(f, "reorder")?,
            Action::Delay(d) => write!(f, "delay {}", fmt_duration(d))?,
            Action::Corrupt => write!(f, "corrupt")?,
        }
        write!(f, " {}%", self.percent)?;
        match self.dir {
            Some(Dir::In) => write!(f, " in")?,
            Some(Dir::Out) => write!(f, " out")?,
            None => {}
        }
        if let Some(o) = self.opcode {
            match Opcode(o).info() {
                Some(i) => write!(f, " opcode={}", i.name)?,
                None => write!(f, " opcode={o}")?,
            }
        }
        if let Some(q) = self.qpn {
            write!(f, " qpn={q:#x}")?;
        }
        if let Action::Reorder { depth } = self.action {
            write!(f, " depth={depth}")?;
        }
        write!(f, " seed={}", self.seed)
    }
}

/// What the rules decided for one packet. Corruption is already done, in place.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Fate {
    pub drop: bool,
    /// Extra copies (duplicate rules).
    pub extra: u32,
    /// Hold for this long (delay rules; the longest wins).
    pub delay: Option<Duration>,
    /// Hold until this many later packets went by (reorder rules; the deepest wins).
    pub reorder: Option<u32>,
    pub corrupted: bool,
}

impl Fate {
    pub fn held(&self) -> bool {
        self.delay.is_some() || self.reorder.is_some()
    }
}

/// A rule with its random source and counters.
#[derive(Debug, Clone)]
struct Active {
    rule: Rule,
    rng: Rng,
    matched: u64,
    applied: u64,
}

/// One rule's counters, for the daemon's counters JSON.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RuleReport {
    pub rule: String,
    /// Packets the filter took.
    pub matched: u64,
    /// Packets acted on.
    pub applied: u64,
}

/// The port's rules, in the order they were added; every rule is tried on every packet
/// (a drop ends the list: later rules do not see a dropped packet).
#[derive(Debug, Clone, Default)]
pub struct Faults {
    rules: Vec<Active>,
    /// Counters of rules removed by `clear`, so the totals stay whole.
    cleared: Vec<RuleReport>,
}

impl Faults {
    pub fn new(rules: impl IntoIterator<Item = Rule>) -> Faults {
        let mut f = Faults::default();
        for r in rules {
            f.add(r);
        }
        f
    }

    pub fn add(&mut self, rule: Rule) {
        self.rules.push(Active {
            rng: Rng::new(rule.seed),
            rule,
            matched: 0,
            applied: 0,
        });
    }

    /// Removes every rule (their counters move to `cleared`).
    pub fn clear(&mut self) {
        let gone: Vec<RuleReport> = self.report();
        self.cleared.extend(gone);
        self.rules.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether any rule can act on packets going `dir`.
    pub fn acts_on(&self, dir: Dir) -> bool {
        self.rules
            .iter()
            .any(|a| a.rule.dir.is_none_or(|d| d == dir))
    }

    /// The rules in force, with their counters.
    pub fn report(&self) -> Vec<RuleReport> {
        self.rules
            .iter()
            .map(|a| RuleReport {
                rule: a.rule.to_string(),
                matched: a.matched,
                applied: a.applied,
            })
            .collect()
    }

    /// Rules removed by `clear`, with their final counters.
    pub fn cleared(&self) -> &[RuleReport] {
        &self.cleared
    }

    /// Decides the fate of one packet going `dir`; corrupts it in place if a rule says so.
    pub fn decide(&mut self, dir: Dir, pkt: &mut [u8]) -> Fate {
        let mut fate = Fate::default();
        for a in &mut self.rules {
            if !a.rule.matches(dir, pkt) {
                continue;
            }
            a.matched += 1;
            if !a.rng.chance(a.rule.percent / 100.0) {
                continue;
            }
            match a.rule.action {
                Action::Drop => {
                    a.applied += 1;
                    fate.drop = true;
                    return fate;
                }
                Action::Duplicate => fate.extra += 1,
                Action::Reorder { depth } => {
                    fate.reorder = Some(fate.reorder.unwrap_or(0).max(depth));
                }
                Action::Delay(d) => fate.delay = Some(fate.delay.unwrap_or_default().max(d)),
                Action::Corrupt => {
                    if !corrupt(&mut a.rng, pkt) {
                        continue; // nothing the ICRC covers to change
                    }
                    fate.corrupted = true;
                }
            }
            a.applied += 1;
        }
        fate
    }
}

/// Changes one byte of `pkt` that the ICRC covers (every byte but the BTH's masked
/// byte 4); false for an empty packet.
fn corrupt(rng: &mut Rng, pkt: &mut [u8]) -> bool {
    const MASKED: usize = bth::field::FECN_BECN;
    let n = pkt.len();
    let usable = if n > MASKED { n - 1 } else { n };
    if usable == 0 {
        return false;
    }
    let mut at = rng.below(usable as u64) as usize;
    if n > MASKED && at >= MASKED {
        at += 1;
    }
    pkt[at] ^= 1 + rng.below(255) as u8;
    true
}

#[cfg(test)]
mod tests;
