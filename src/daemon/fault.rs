//! The fault rule syntax of `roce-emu daemon --fault RULE` and `roce-emu fault RULE`:
//!
//! ```text
//! drop P% [in|out] [opcode=NAME|NUM] [qpn=N] [seed=S]
//! duplicate P% [filters]
//! reorder P% [depth=N] [filters]         held until N later packets passed (default 4)
//! delay TIME [P%] [filters]              TIME: 10ms, 500us, 1s
//! corrupt P% [filters]                   one byte changed: the receiver's ICRC catches it
//! clear                                  removes every rule
//! list                                   (answered with the counters)
//! ```
//!
//! The rate defaults to 100%; without `in` or `out` a rule acts both ways; `opcode=` takes
//! rxe's names (`RC_SEND_ONLY`, case-insensitive, `IB_OPCODE_` prefix allowed) or a number;
//! numbers may be hex (`0x11`). Text comes from the command line or a control socket:
//! every error is a message naming the word to fix, never a panic.

use crate::backend::fault::rule::{MAX_DELAY, MAX_DEPTH};
use crate::backend::fault::{Action, Dir, Rule};
use crate::wire::opcode::Opcode;
use std::time::Duration;

/// What one rule text asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Add(Rule),
    Clear,
    List,
}

/// Longest rule text taken (a control message is bounded anyway; this keeps errors short).
const MAX_LEN: usize = 512;
const DEFAULT_DEPTH: u32 = 4;
const FILTERS: &str = "P%, in, out, opcode=NAME|NUM, qpn=N, seed=S";

/// Why a rule text was refused; each names the word to fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuleError {
    #[error("a rule is at most {MAX_LEN} characters")]
    TooLong,
    #[error("empty rule: write e.g. `drop 5%`, `delay 10ms 5% out`, `clear` or `list`")]
    Empty,
    #[error("`{word}` takes nothing after it (found `{found}`)")]
    TrailingWord { word: String, found: String },
    #[error("`delay` needs a time first, e.g. `delay 10ms 5%`")]
    DelayWithoutTime,
    #[error("no action `{0}`: use drop, duplicate, reorder, delay, corrupt, clear or list")]
    NoAction(String),
    #[error("two rates (`{0}`): give one")]
    TwoRates(String),
    #[error("two directions (`{0}`): give in or out once, or neither for both")]
    TwoDirections(String),
    #[error("qpn={0} is over 24 bits (0xffffff)")]
    QpnTooLarge(String),
    #[error("depth={0}: give 1 to {MAX_DEPTH}")]
    BadDepth(String),
    #[error("`{0}`: depth= is for reorder rules only")]
    DepthNotReorder(String),
    #[error("unknown setting `{key}=` in `{word}`: expected {FILTERS}")]
    UnknownSetting { key: String, word: String },
    #[error("a time (`{0}`) is for delay rules only, right after `delay`")]
    TimeNotDelay(String),
    #[error("unknown word `{0}`: expected {FILTERS}")]
    UnknownWord(String),
    #[error("rate `{0}` is not between 0% and 100%")]
    RateRange(String),
    #[error("rate `{0}` is not a number: write e.g. 5% or 0.5%")]
    RateNotNumber(String),
    #[error("{what}={value} is not a number (decimal or 0x hex)")]
    NotNumber { what: &'static str, value: String },
    #[error("opcode={0} is over 255")]
    OpcodeTooLarge(String),
    #[error(
        "no opcode named `{0}`: use rxe's names (RC_SEND_ONLY, RC_ACKNOWLEDGE, ...) or a number"
    )]
    NoOpcode(String),
    #[error("`{0}` is not a time: write e.g. 10ms, 500us or 1s")]
    NotTime(String),
    #[error("`{0}` is longer than the {max}s a delay may be", max = MAX_DELAY.as_secs())]
    DelayTooLong(String),
}

pub fn parse(text: &str) -> Result<Command, RuleError> {
    if text.len() > MAX_LEN {
        return Err(RuleError::TooLong);
    }
    let mut words = text.split_whitespace();
    let Some(first) = words.next() else {
        return Err(RuleError::Empty);
    };
    let action = match first.to_ascii_lowercase().as_str() {
        "clear" | "list" => {
            if let Some(w) = words.next() {
                return Err(RuleError::TrailingWord {
                    word: first.into(),
                    found: w.into(),
                });
            }
            return Ok(if first.eq_ignore_ascii_case("clear") {
                Command::Clear
            } else {
                Command::List
            });
        }
        "drop" => Action::Drop,
        "duplicate" | "dup" => Action::Duplicate,
        "reorder" => Action::Reorder {
            depth: DEFAULT_DEPTH,
        },
        "corrupt" => Action::Corrupt,
        "delay" => {
            let Some(t) = words.next() else {
                return Err(RuleError::DelayWithoutTime);
            };
            Action::Delay(duration(t)?)
        }
        _ => return Err(RuleError::NoAction(first.into())),
    };
    let mut rule = Rule::new(action);
    let mut seen_rate = false;
    for w in words {
        let lw = w.to_ascii_lowercase();
        if let Some(p) = w.strip_suffix('%') {
            if seen_rate {
                return Err(RuleError::TwoRates(w.into()));
            }
            seen_rate = true;
            rule.percent = percent(p, w)?;
        } else if lw == "in" || lw == "out" {
            if rule.dir.is_some() {
                return Err(RuleError::TwoDirections(w.into()));
            }
            rule.dir = Some(if lw == "in" { Dir::In } else { Dir::Out });
        } else if let Some((k, v)) = w.split_once('=') {
            match k.to_ascii_lowercase().as_str() {
                "opcode" | "op" => rule.opcode = Some(opcode(v)?),
                "qpn" | "qp" => {
                    let q = number(v, "qpn")?;
                    if q > 0x00ff_ffff {
                        return Err(RuleError::QpnTooLarge(v.into()));
                    }
                    rule.qpn = Some(q as u32);
                }
                "seed" => rule.seed = number(v, "seed")?,
                "depth" => match &mut rule.action {
                    Action::Reorder { depth } => {
                        let d = number(v, "depth")?;
                        if d == 0 || d > u64::from(MAX_DEPTH) {
                            return Err(RuleError::BadDepth(v.into()));
                        }
                        *depth = d as u32;
                    }
                    _ => return Err(RuleError::DepthNotReorder(w.into())),
                },
                _ => {
                    return Err(RuleError::UnknownSetting {
                        key: k.into(),
                        word: w.into(),
                    })
                }
            }
        } else if duration(w).is_ok() {
            return Err(RuleError::TimeNotDelay(w.into()));
        } else {
            return Err(RuleError::UnknownWord(w.into()));
        }
    }
    Ok(Command::Add(rule))
}

/// `5`, `0.5`, `100` (the `%` already cut off).
fn percent(p: &str, w: &str) -> Result<f64, RuleError> {
    match p.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=100.0).contains(&v) => Ok(v),
        Ok(_) => Err(RuleError::RateRange(w.into())),
        Err(_) => Err(RuleError::RateNotNumber(w.into())),
    }
}

/// A decimal or `0x` hex number.
fn number(v: &str, what: &'static str) -> Result<u64, RuleError> {
    let r = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse::<u64>(),
    };
    r.map_err(|_| RuleError::NotNumber {
        what,
        value: v.into(),
    })
}

/// An opcode by rxe's name or number.
fn opcode(v: &str) -> Result<u8, RuleError> {
    if v.starts_with(|c: char| c.is_ascii_digit()) {
        let n = number(v, "opcode")?;
        return u8::try_from(n).map_err(|_| RuleError::OpcodeTooLarge(v.into()));
    }
    let up = v.to_ascii_uppercase();
    let name = up.strip_prefix("IB_OPCODE_").unwrap_or(&up);
    (0..=255u8)
        .find(|&o| Opcode(o).info().is_some_and(|i| i.name == name))
        .ok_or_else(|| RuleError::NoOpcode(v.into()))
}

/// `10ms`, `500us`, `1s`, `2.5ms`.
fn duration(t: &str) -> Result<Duration, RuleError> {
    let bad = || RuleError::NotTime(t.into());
    let (num, unit) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(bad());
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad());
    }
    // Checked before the conversion, which panics on huge values.
    if v * unit > MAX_DELAY.as_secs_f64() {
        return Err(RuleError::DelayTooLong(t.into()));
    }
    let d = Duration::from_secs_f64(v * unit);
    // Whole microseconds: what `Display` writes, so a rule reads back as itself.
    Ok(Duration::from_micros(d.as_micros() as u64))
}

#[cfg(test)]
mod tests;
