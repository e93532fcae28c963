//! A switch egress port, sans-IO: packets and time in, departures out.
//!
//! - **Line rate**: a packet finishes leaving `len * 8 / rate` after the previous one
//!   finished (or after it came, if the link was idle); it departs then. Bytes are the
//!   RoCE datagram's (BTH through ICRC, the UDP payload), the same bytes the engine's
//!   DCQCN pacer counts; Ethernet/IP/UDP headers are not counted.
//! - **Depth**: the bytes still to serialise, `backlog time * rate / 8` (the packet in
//!   service counts for its unsent part): exact for this fluid link, and O(1).
//! - **RED/ECN** (as switch vendors expose it, and HPCC's `ShouldSendCN`): at enqueue,
//!   with `q` the depth the arriving packet sees, an ECN-capable packet (`Ecn::capable`)
//!   is marked CE with probability 0 for `q <= kmin`, `pmax * (q - kmin) / (kmax - kmin)`
//!   for `kmin < q <= kmax`, 1 above `kmax`. Not-ECT packets are never marked.
//! - **Tail drop**: a packet that does not fit in the buffer (`q + len > buffer`) is
//!   dropped, ECN-capable or not. WRED's early drop of Not-ECT packets is not modelled: a
//!   Not-ECT packet is only ever tail-dropped.
//!
//! The random draws come from `crate::rng::Rng` seeded by `seed`: the same packets at the
//! same times give the same marks.

use crate::rng::Rng;
use crate::wire::Ecn;
use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// The queue's settings: `rate=1gbit buffer=2MB kmin=40KB kmax=200KB pmax=0.2 seed=1`.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueConfig {
    /// Line rate, bits/s (> 0).
    pub rate: u64,
    /// Buffer, bytes (> 0).
    pub buffer: u64,
    /// RED thresholds on the depth, bytes (`kmin <= kmax`).
    pub kmin: u64,
    pub kmax: u64,
    /// Marking probability at `kmax`, 0..=1.
    pub pmax: f64,
    pub seed: u64,
}

impl Default for QueueConfig {
    /// 10 Gbit/s, 2 MB of buffer, the DCQCN paper's marking (Kmin 5 KB, Kmax 200 KB,
    /// Pmax 1%).
    fn default() -> QueueConfig {
        QueueConfig {
            rate: 10_000_000_000,
            buffer: 2_000_000,
            kmin: 5_000,
            kmax: 200_000,
            pmax: 0.01,
            seed: 1,
        }
    }
}

/// Why a queue setting was refused; each names the word to fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueueConfigError {
    #[error("`{0}`: write key=value (rate, buffer, kmin, kmax, pmax, seed)")]
    NotKeyValue(String),
    #[error("no setting `{0}`: use rate, buffer, kmin, kmax, pmax or seed")]
    UnknownKey(String),
    #[error("rate={0}: write bits/s or a number with kbit, mbit or gbit (e.g. 1gbit), above 0")]
    BadRate(String),
    #[error("{key}={value}: write bytes or a number with B, KB, MB, KiB or MiB (e.g. 200KB)")]
    BadSize { key: &'static str, value: String },
    #[error("pmax={0}: write a number from 0 to 1")]
    BadPmax(String),
    #[error("seed={0}: write a whole number")]
    BadSeed(String),
    #[error("buffer=0: the buffer must hold something")]
    ZeroBuffer,
    #[error("kmin ({kmin}) is above kmax ({kmax})")]
    KminAboveKmax { kmin: u64, kmax: u64 },
}

/// `1gbit`, `100mbit`, `5kbit`, `1000000` (bits/s).
fn rate(v: &str) -> Result<u64, QueueConfigError> {
    let l = v.to_ascii_lowercase();
    let (num, mul) = if let Some(n) = l.strip_suffix("gbit") {
        (n, 1e9)
    } else if let Some(n) = l.strip_suffix("mbit") {
        (n, 1e6)
    } else if let Some(n) = l.strip_suffix("kbit") {
        (n, 1e3)
    } else if let Some(n) = l.strip_suffix("bit") {
        (n, 1.0)
    } else {
        (l.as_str(), 1.0)
    };
    match num.parse::<f64>() {
        Ok(x) if x.is_finite() && x * mul >= 1.0 && x * mul <= 1e15 => Ok((x * mul) as u64),
        _ => Err(QueueConfigError::BadRate(v.into())),
    }
}

/// `2MB`, `40KB`, `64KiB`, `1500B`, `1500`: KB and MB are 10^3 and 10^6 (as switch data
/// sheets write them), KiB and MiB 2^10 and 2^20.
fn size(key: &'static str, v: &str) -> Result<u64, QueueConfigError> {
    let l = v.to_ascii_lowercase();
    let (num, mul) = [
        ("mib", 1u64 << 20),
        ("kib", 1 << 10),
        ("mb", 1_000_000),
        ("kb", 1000),
        ("b", 1),
    ]
    .iter()
    .find_map(|(s, m)| l.strip_suffix(s).map(|n| (n, *m)))
    .unwrap_or((l.as_str(), 1));
    match num.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 && x * (mul as f64) <= 1e12 => {
            Ok((x * mul as f64) as u64)
        }
        _ => Err(QueueConfigError::BadSize {
            key,
            value: v.into(),
        }),
    }
}

impl QueueConfig {
    /// `self` with the `key=value` words of `text` applied (separated by spaces or
    /// commas); what `roce-emu queue set` does to the settings in force.
    pub fn with(&self, text: &str) -> Result<QueueConfig, QueueConfigError> {
        let mut c = self.clone();
        for w in text
            .split(|ch: char| ch == ',' || ch.is_whitespace())
            .filter(|w| !w.is_empty())
        {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| QueueConfigError::NotKeyValue(w.into()))?;
            match k.to_ascii_lowercase().as_str() {
                "rate" => c.rate = rate(v)?,
                "buffer" => c.buffer = size("buffer", v)?,
                "kmin" => c.kmin = size("kmin", v)?,
                "kmax" => c.kmax = size("kmax", v)?,
                "pmax" => {
                    c.pmax = match v.parse::<f64>() {
                        Ok(p) if (0.0..=1.0).contains(&p) => p,
                        _ => return Err(QueueConfigError::BadPmax(v.into())),
                    }
                }
                "seed" => c.seed = v.parse().map_err(|_| QueueConfigError::BadSeed(v.into()))?,
                _ => return Err(QueueConfigError::UnknownKey(k.into())),
            }
        }
        if c.buffer == 0 {
            return Err(QueueConfigError::ZeroBuffer);
        }
        if c.kmin > c.kmax {
            return Err(QueueConfigError::KminAboveKmax {
                kmin: c.kmin,
                kmax: c.kmax,
            });
        }
        Ok(c)
    }

    /// Time to serialise `len` bytes at the line rate.
    pub fn serialise(&self, len: usize) -> Duration {
        Duration::from_nanos(((len as u128 * 8 * 1_000_000_000) / self.rate as u128) as u64)
    }

    /// The RED marking probability at depth `q` (bytes).
    pub fn mark_probability(&self, q: u64) -> f64 {
        if q <= self.kmin {
            0.0
        } else if q > self.kmax {
            1.0
        } else {
            // kmin < q <= kmax, so kmax > kmin.
            self.pmax * (q - self.kmin) as f64 / (self.kmax - self.kmin) as f64
        }
    }
}

impl FromStr for QueueConfig {
    type Err = QueueConfigError;
    /// The defaults with `text`'s settings.
    fn from_str(text: &str) -> Result<QueueConfig, QueueConfigError> {
        QueueConfig::default().with(text)
    }
}

impl fmt::Display for QueueConfig {
    /// The same syntax back (exact numbers: bits/s and bytes).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rate={} buffer={}B kmin={}B kmax={}B pmax={} seed={}",
            self.rate, self.buffer, self.kmin, self.kmax, self.pmax, self.seed
        )
    }
}

/// The congestion point's counters (names as issue 25's contract gives them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueStats {
    /// Packets taken into the queue.
    pub cp_enqueued: u64,
    /// ECN-capable packets marked CE at enqueue.
    pub cp_ecn_marked: u64,
    /// Packets dropped because they did not fit (tail drop).
    pub cp_dropped: u64,
    /// Packets and bytes that left.
    pub cp_tx_pkts: u64,
    pub cp_tx_bytes: u64,
    /// Gauge: the depth (bytes) at the last event, and the largest seen.
    pub cp_queue_bytes: u64,
    pub cp_max_queue_bytes: u64,
}

/// What became of an offered packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Queued; it will leave with this codepoint (CE if marked) at this time.
    Queued { ecn: Ecn, departs: Instant },
    /// Tail-dropped.
    Dropped,
}

#[derive(Debug)]
struct Slot<T> {
    item: T,
    len: usize,
    ecn: Ecn,
    departs: Instant,
}

/// The queue, holding the caller's packets (`T`) until they depart.
#[derive(Debug)]
pub struct QueueModel<T> {
    cfg: QueueConfig,
    rng: Rng,
    queue: VecDeque<Slot<T>>,
    /// When the last queued packet finishes leaving (the link is busy until then).
    busy_until: Option<Instant>,
    stats: QueueStats,
}

impl<T> QueueModel<T> {
    pub fn new(cfg: QueueConfig) -> QueueModel<T> {
        QueueModel {
            rng: Rng::new(cfg.seed),
            cfg,
            queue: VecDeque::new(),
            busy_until: None,
            stats: QueueStats::default(),
        }
    }

    pub fn config(&self) -> &QueueConfig {
        &self.cfg
    }

    /// New settings for what comes next: what is queued keeps its departure times, the
    /// counters go on; the random source restarts from the (new) seed.
    pub fn reconfigure(&mut self, cfg: QueueConfig) {
        self.rng = Rng::new(cfg.seed);
        self.cfg = cfg;
    }

    /// The bytes still to serialise at `now`.
    pub fn depth(&self, now: Instant) -> u64 {
        match self.busy_until {
            Some(t) if t > now => {
                let ns = (t - now).as_nanos();
                (ns * self.cfg.rate as u128 / 8_000_000_000) as u64
            }
            _ => 0,
        }
    }

    /// Offers a packet of `len` bytes arriving at `now` with codepoint `ecn`.
    pub fn enqueue(&mut self, now: Instant, item: T, len: usize, ecn: Ecn) -> Admit {
        let q = self.depth(now);
        if q + len as u64 > self.cfg.buffer {
            self.stats.cp_dropped += 1;
            self.stats.cp_queue_bytes = q;
            return Admit::Dropped;
        }
        let mut ecn = ecn;
        if ecn.capable() && self.rng.chance_or_sure(self.cfg.mark_probability(q)) {
            self.stats.cp_ecn_marked += 1;
            ecn = Ecn::Ce;
        }
        let start = match self.busy_until {
            Some(t) if t > now => t,
            _ => now,
        };
        let departs = start + self.cfg.serialise(len);
        self.busy_until = Some(departs);
        self.queue.push_back(Slot {
            item,
            len,
            ecn,
            departs,
        });
        self.stats.cp_enqueued += 1;
        let d = self.depth(now);
        self.stats.cp_queue_bytes = d;
        self.stats.cp_max_queue_bytes = self.stats.cp_max_queue_bytes.max(d);
        Admit::Queued { ecn, departs }
    }

    /// The next packet that has left by `now`, with its codepoint.
    pub fn pop(&mut self, now: Instant) -> Option<(T, Ecn)> {
        if self.queue.front()?.departs > now {
            return None;
        }
        let s = self.queue.pop_front()?;
        self.stats.cp_tx_pkts += 1;
        self.stats.cp_tx_bytes += s.len as u64;
        self.stats.cp_queue_bytes = self.depth(now);
        Some((s.item, s.ecn))
    }

    /// Everything queued, at once (the queue is being removed).
    pub fn drain(&mut self) -> impl Iterator<Item = (T, Ecn)> + '_ {
        self.busy_until = None;
        self.stats.cp_queue_bytes = 0;
        let stats = &mut self.stats;
        self.queue.drain(..).map(move |s| {
            stats.cp_tx_pkts += 1;
            stats.cp_tx_bytes += s.len as u64;
            (s.item, s.ecn)
        })
    }

    /// When the first queued packet departs.
    pub fn next_departure(&self) -> Option<Instant> {
        self.queue.front().map(|s| s.departs)
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The counters, the depth gauge taken at `now`.
    pub fn stats(&self, now: Instant) -> QueueStats {
        QueueStats {
            cp_queue_bytes: self.depth(now),
            ..self.stats
        }
    }
}

trait ChanceOrSure {
    fn chance_or_sure(&mut self, p: f64) -> bool;
}

impl ChanceOrSure for Rng {
    /// `chance`, but certain at `p >= 1` without a draw (above kmax every packet is
    /// marked; the draws, and so a seed's pattern, stay those of the RED band).
    fn chance_or_sure(&mut self, p: f64) -> bool {
        p >= 1.0 || (p > 0.0 && self.chance(p))
    }
}

#[cfg(test)]
mod tests;
