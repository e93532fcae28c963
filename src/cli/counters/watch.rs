//! `roce-emu counters --watch SECS [--count N]`: rates a person can read over time, per QP
//! and for the port, beside the totals. Every column counts both directions (sent and
//! received):
//!
//! - packets: the port's own counters (`sent_pkts` to the wire, `hairpin_pkts` from one
//!   process to another, `rcvd_pkts` delivered to a process); a QP's `sent_pkts` and
//!   `rcvd_pkts`;
//! - MB (10^6 bytes): the port's, what every process's ring moved (`sent_bytes`,
//!   `rcvd_bytes`); a QP's, its engine's `sent_bytes` and `rcvd_bytes` (whole RoCE packets);
//! - retries: go-back-N restarts (local ACK timeout, sequence NAK, missing response:
//!   rxe's `completer_retry_err`) and RNR retries (`rcvd_rnr_err`);
//! - NAKs: sent (`naks_sent`, `send_rnr_err`) and received (`rcvd_seq_err`,
//!   `rcvd_rnr_err`).
//!
//! The port's packet and byte counters move as packets pass: their rates are taken
//! between two readings. The engines' (a QP's, and the port's retries and NAKs, summed
//! over its processes) arrive in the processes' reports, every 500 ms
//! (`daemon::report::PUBLISH_EVERY`): their rates are taken between the two last readings
//! at which they moved (so "-" until a counter moved twice), held until a report is
//! overdue, then 0; a departed process reports no more, so its counters that stand still
//! are at 0 at once. A watch faster than the reports thus shows steady rates, not
//! alternate zeros and bursts.

use crate::daemon::report::PUBLISH_EVERY;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// One row's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    pub pkts: u64,
    pub bytes: u64,
    pub retries: u64,
    pub naks: u64,
}

impl Figures {
    fn get(&self, i: usize) -> u64 {
        [self.pkts, self.bytes, self.retries, self.naks][i]
    }
}

/// Which row: the port, or one QP of one process (a pid and a block: pids are reused).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Port,
    Qp { pid: u64, block: u64, qpn: u64 },
}

/// One row of a reading.
#[derive(Debug, Clone)]
pub struct Row {
    pub key: Key,
    pub label: String,
    pub figures: Figures,
    /// Its process is attached (the port's: any is): its reported counters may still
    /// move. A departed process's QPs are shown only while their rates are not 0.
    pub live: bool,
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

/// An engine counter set's retries and NAKs.
fn retries_naks(c: &Value) -> (u64, u64) {
    let rnr_in = n(c, "rcvd_rnr_err");
    (
        n(c, "completer_retry_err") + rnr_in,
        n(c, "naks_sent") + n(c, "send_rnr_err") + n(c, "rcvd_seq_err") + rnr_in,
    )
}

/// The rows of one `counters` answer: the port, then each QP by process and QPN.
pub fn rows(v: &Value) -> Vec<Row> {
    let procs = v["processes"].as_array().cloned().unwrap_or_default();
    let c = &v["counters"];
    let mut port = Figures {
        pkts: n(c, "sent_pkts") + n(c, "hairpin_pkts") + n(c, "rcvd_pkts"),
        ..Figures::default()
    };
    let mut out = Vec::new();
    let mut attached = false;
    for p in &procs {
        attached |= p["left"].is_null();
        port.bytes += n(p, "sent_bytes") + n(p, "rcvd_bytes");
        let (r, k) = retries_naks(&p["nic"]);
        port.retries += r;
        port.naks += k;
        let (pid, block) = (n(p, "pid"), n(p, "block"));
        for q in p["qps"].as_array().into_iter().flatten() {
            let qc = &q["counters"];
            let (retries, naks) = retries_naks(qc);
            let qpn = n(q, "qpn");
            out.push(Row {
                key: Key::Qp { pid, block, qpn },
                label: format!("  qp {qpn:#08x} pid {pid}"),
                figures: Figures {
                    pkts: n(qc, "sent_pkts") + n(qc, "rcvd_pkts"),
                    bytes: n(qc, "sent_bytes") + n(qc, "rcvd_bytes"),
                    retries,
                    naks,
                },
                live: p["left"].is_null(),
            });
        }
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out.insert(
        0,
        Row {
            key: Key::Port,
            label: "port".into(),
            figures: port,
            live: attached,
        },
    );
    out
}

/// One counter's rate: its value at the last reading and when, the readings at which a
/// reported counter moved (the last [`WINDOW`] of them), and the rate.
#[derive(Debug, Clone)]
struct Track {
    /// The first reading.
    from: Instant,
    value: u64,
    at: Instant,
    moves: VecDeque<(Instant, u64)>,
    rate: Option<f64>,
}

/// Rates from successive readings.
#[derive(Debug, Default)]
pub struct Rates {
    tracks: BTreeMap<(Key, usize), Track>,
}

/// How long a rate is held without its counter moving: two reports missed.
fn hold() -> Duration {
    PUBLISH_EVERY * 2 + Duration::from_millis(100)
}

/// The span a reported counter's rate is taken over (when it moved that long): a move is
/// seen up to one reading after its report, so over several reports the error shrinks
/// (a 0.3 s watch: at most 0.3 s in 2.5 s).
const WINDOW: Duration = Duration::from_millis(2500);

impl Track {
    fn new(x: u64, now: Instant) -> Track {
        Track {
            from: now,
            value: x,
            at: now,
            moves: VecDeque::new(),
            rate: None,
        }
    }

    /// A reading of a counter counted as packets pass: the rate since the last reading.
    fn passing(&mut self, x: u64, now: Instant) {
        let since = now.saturating_duration_since(self.at);
        if since.is_zero() {
            return; // two readings at one instant: nothing to divide by
        }
        // A counter that went back (a departed process forgotten) is a new start, not a
        // negative rate.
        self.rate = Some(x.saturating_sub(self.value) as f64 / since.as_secs_f64());
        (self.value, self.at) = (x, now);
    }

    /// A reading of a counter that moves when a report comes: the rate between the
    /// oldest and the newest move in the window (none until it moved twice: the first
    /// move ends a period that began at a report before the first reading).
    fn reported(&mut self, x: u64, now: Instant, live: bool) {
        if now <= self.at {
            return;
        }
        if x < self.value {
            self.moves.clear();
        }
        if x != self.value {
            self.moves.push_back((now, x));
            while self.moves.len() > 2
                && self
                    .moves
                    .get(1)
                    .is_some_and(|m| now.saturating_duration_since(m.0) >= WINDOW)
            {
                self.moves.pop_front();
            }
            if let (Some(a), Some(b)) = (self.moves.front(), self.moves.back()) {
                if self.moves.len() >= 2 {
                    let dt = b.0.saturating_duration_since(a.0).as_secs_f64();
                    self.rate = Some((b.1 - a.1) as f64 / dt);
                }
            }
        } else {
            // Standing still since its last move, or since the first reading.
            let since = self.moves.back().map_or(self.from, |m| m.0);
            if !live || now.saturating_duration_since(since) > hold() {
                self.rate = Some(0.0);
            }
        }
        (self.value, self.at) = (x, now);
    }
}

impl Rates {
    /// Takes a reading at `now`; the rates per second of each row's four figures (None
    /// before there is a rate: the first reading, a row new since the last, a reported
    /// counter that has not moved twice yet).
    pub fn update(&mut self, rows: &[Row], now: Instant) -> Vec<[Option<f64>; 4]> {
        let mut seen = Vec::new();
        let out = rows
            .iter()
            .map(|r| {
                let mut rates = [None; 4];
                for (i, rate) in rates.iter_mut().enumerate() {
                    let x = r.figures.get(i);
                    let key = (r.key.clone(), i);
                    seen.push(key.clone());
                    let t = self.tracks.entry(key).or_insert_with(|| Track::new(x, now));
                    // The port's packets and bytes are counted as packets pass.
                    if r.key == Key::Port && i < 2 {
                        t.passing(x, now);
                    } else {
                        t.reported(x, now, r.live);
                    }
                    *rate = t.rate;
                }
                rates
            })
            .collect();
        self.tracks.retain(|k, _| seen.contains(k));
        out
    }
}

/// The header, in the rows' columns.
fn head() -> String {
    format!(
        "{:<24}{:>9}{:>9}{:>8}{:>7}  {:>11}{:>11}{:>8}{:>7}",
        "", "pkts/s", "MB/s", "retry/s", "NAK/s", "pkts", "MB", "retries", "NAKs"
    )
}

fn rate_cell(r: Option<f64>, w: usize, mb: bool) -> String {
    match r {
        None => format!("{:>w$}", "-"),
        Some(x) if mb => format!("{:>w$.2}", x / 1e6),
        Some(x) => format!("{:>w$.0}", x),
    }
}

/// The table of one reading: a header, the port, then every QP of an attached process
/// and every QP of a departed one whose rates are not zero.
pub fn table(rows: &[Row], rates: &[[Option<f64>; 4]]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", head());
    for (r, k) in rows.iter().zip(rates) {
        let moving = k.iter().any(|x| x.is_none_or(|x| x > 0.0));
        if r.key != Key::Port && !r.live && !moving {
            continue;
        }
        let f = r.figures;
        let _ = writeln!(
            out,
            "{:<24}{}{}{}{}  {:>11}{:>11.2}{:>8}{:>7}",
            r.label,
            rate_cell(k[0], 9, false),
            rate_cell(k[1], 9, true),
            rate_cell(k[2], 8, false),
            rate_cell(k[3], 7, false),
            f.pkts,
            f.bytes as f64 / 1e6,
            f.retries,
            f.naks
        );
    }
    out
}

/// The line above the table: the port and the time.
pub fn title(v: &Value, every: Duration, stamp: &str) -> String {
    let port = &v["port"];
    let addrs: Vec<&str> = port["addrs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    format!(
        "daemon port {} {} ({}), every {} s, {stamp}",
        port["kind"].as_str().unwrap_or("?"),
        port["name"].as_str().unwrap_or("?"),
        addrs.join(", "),
        every.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(port_pkts: u64, qp_pkts: u64, left: bool) -> Value {
        json!({
            "port": {"kind": "udp", "name": "127.0.0.9", "addrs": ["127.0.0.9"], "mtu": 1500},
            "counters": {"rcvd_pkts": port_pkts, "sent_pkts": port_pkts, "hairpin_pkts": 0},
            "processes": [{"pid": 7, "block": 1, "left": if left { json!("exit") } else { Value::Null },
                "sent_bytes": port_pkts * 1000, "rcvd_bytes": port_pkts * 1000,
                "nic": {"completer_retry_err": 2, "naks_sent": 1},
                "qps": [{"qpn": 65537, "counters": {"sent_pkts": qp_pkts, "rcvd_pkts": qp_pkts,
                    "sent_bytes": qp_pkts * 1000, "rcvd_bytes": 0, "rcvd_seq_err": 1}}]}]
        })
    }

    #[test]
    fn rates_of_passing_and_of_reported_counters() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut r = Rates::default();
        let mut read = |port: u64, qp: u64, left: bool, ms: u64| {
            let rows = rows(&answer(port, qp, left));
            let k = r.update(&rows, at(ms));
            let t = table(&rows, &k);
            (k, t)
        };
        let (k, _) = read(0, 0, false, 0);
        assert_eq!(k[0], [None; 4], "no rate from one reading");
        // The port's packets and bytes move between any two readings.
        let (k, _) = read(100, 0, false, 200);
        assert_eq!(k[0][0], Some(1000.0), "200 packets in 0.2 s");
        assert_eq!(k[0][1], Some(1.0e6), "200 kB in 0.2 s");
        assert_eq!(k[1][0], None, "no report yet");
        // The QP's first report: it covers a time before the first reading, so no rate.
        let (k, _) = read(200, 500, false, 500);
        assert_eq!(k[1][0], None);
        let (k, _) = read(300, 1500, false, 1000);
        assert_eq!(
            k[1][0],
            Some(4000.0),
            "2000 packets between two reports 0.5 s apart"
        );
        assert_eq!(k[1][1], Some(1.0e6 / 0.5));
        let (k, _) = read(300, 1500, false, 1200);
        assert_eq!(k[1][0], Some(4000.0), "held until the next report");
        assert_eq!(k[0][0], Some(0.0), "the port stood still for 0.2 s");
        let (k, t) = read(300, 1500, false, 2200);
        assert_eq!(k[1][0], Some(0.0), "no report moved it for 1.2 s");
        assert_eq!(k[0], [Some(0.0); 4], "{t}");
        assert!(t.contains("  qp 0x010001 pid 7"), "{t}");
        // Totals: 600 packets and 0.6 MB at the port, retries and NAKs from the reports.
        let port = t.lines().nth(1).unwrap();
        assert!(port.ends_with("600       0.60       2      1"), "{t}");
        // A departed process's QP that no longer moves is left out, and what it
        // reported stands still at once.
        let (k, t) = read(300, 1600, true, 2300);
        assert!(k[1][0] > Some(0.0), "its last report: {t}");
        let (k, t) = read(300, 1600, true, 2400);
        assert_eq!(k[1], [Some(0.0); 4]);
        assert!(!t.contains("qp 0x010001"), "{t}");
    }
}
