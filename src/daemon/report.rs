//! Per-process and per-QP counters at the daemon (issue 15, build item 5).
//!
//! The engines run in the programs' processes, so only they know their QPs' counters
//! (rxe's names, `engine::stats`: `sent_pkts`, `rcvd_pkts`, `duplicate_request`,
//! `out_of_seq_request`, `rcvd_seq_err`, `rcvd_rnr_err`, `send_rnr_err`,
//! `retry_exceeded_err`, `retry_rnr_exceeded_err`, `completer_retry_err`, ...). Each
//! attached process publishes them ([`Reporter`]): a `QpCounters` control message every
//! [`PUBLISH_EVERY`] while it drives its NIC, once more before it destroys a QP and as it
//! leaves. The daemon keeps the last report of each process ([`ProcessReport`]), after
//! the process is gone too (a process killed keeps its last periodic report).
//!
//! A report is untrusted input. Its size is bounded by the control message's
//! (`control::MAX_MSG`); it is read field by field: an object `nic` of counter names to
//! numbers, and an array `qps` of at most [`MAX_QPS_PER_MSG`] objects `{qpn, counters}`.
//! A wrong type, an unknown counter name or a QPN outside the process's leased block makes
//! that part of the report an error, counted (`report_errors`, the last one kept as
//! `report_error`) and skipped: never a panic, never the end of the attachment. The daemon
//! keeps at most [`MAX_QPS_KEPT`] QPs per process (more are counted, `qps_dropped`).
//!
//! `roce-emu counters` gets the processes in one answer or, when they do not fit in one
//! control message, in several ([`counters_answer`], [`collect_answer`]).

use super::control::{self, ControlError, ToDaemon, ToProcess, MAX_MSG};
use super::lease;
use crate::backend::PortStats;
use crate::engine::{Counter, Counters, Engine, Instant};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

/// How often a process publishes its counters while it drives its NIC.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(500);
/// QPs per report message (each message stays far below `control::MAX_MSG`).
pub const MAX_QPS_PER_MSG: usize = 32;
/// QPs the daemon keeps per process.
pub const MAX_QPS_KEPT: usize = 256;
/// Departed processes whose counters the daemon keeps (the oldest go first).
pub const MAX_DEPARTED: usize = 128;
/// A polling program's calls read the clock for the report once in this many (the others
/// use the driver's last reading: no clock read per poll).
const CLOCK_EVERY: u32 = 1024;
/// What one answer message may hold, leaving room for its envelope.
const BUDGET: usize = MAX_MSG - 1024;

// ---- the process side --------------------------------------------------------------------

/// Publishes an attached NIC's counters to its daemon, on the control socket.
pub struct Reporter {
    sock: Arc<OwnedFd>,
    due: Instant,
    calls: u32,
    /// Report messages sent, and those not sent (the daemon's socket full, or gone).
    pub sent: u64,
    pub failed: u64,
}

impl Reporter {
    pub(crate) fn new(sock: Arc<OwnedFd>) -> Reporter {
        Reporter {
            sock,
            due: Instant::ZERO,
            calls: 0,
            sent: 0,
            failed: 0,
        }
    }

    /// From a call that drives the NIC: the time to publish at, if [`PUBLISH_EVERY`] has
    /// passed since the last report, by `recent` (the driver's last clock reading) or,
    /// once in a while, by `clock` (a program polling an idle NIC makes no new readings).
    pub fn due(&mut self, recent: Instant, clock: impl FnOnce() -> Instant) -> Option<Instant> {
        self.calls = self.calls.wrapping_add(1);
        let now = if self.calls % CLOCK_EVERY == 0 {
            clock()
        } else {
            recent
        };
        (now >= self.due).then_some(now)
    }

    /// Publishes now: the engine's counters and what the process's port dropped (its
    /// side of the rings: packets to send that found the ring full).
    pub fn publish(&mut self, now: Instant, engine: &Engine, port: &PortStats) {
        self.due = now.saturating_add(PUBLISH_EVERY);
        for m in messages(engine, port.tx_stalled) {
            // Never a wait: a daemon that does not read gets the next report instead.
            match control::try_send(self.sock.as_fd(), &m) {
                Ok(()) => self.sent += 1,
                Err(_) => self.failed += 1,
            }
        }
    }
}

/// The nonzero counters of `c`, by name.
fn named(c: &Counters) -> Map<String, Value> {
    c.nonzero()
        .map(|(k, v)| (k.to_string(), v.into()))
        .collect()
}

/// An engine's report: the NIC's totals and the packets the process dropped on its way
/// to the daemon (`tx_dropped`) in the first message, its QPs (in QPN order)
/// [`MAX_QPS_PER_MSG`] a message.
pub fn messages(engine: &Engine, tx_dropped: u64) -> Vec<ToDaemon> {
    let mut qps: Vec<(u32, &Counters)> = engine.qp_counters().collect();
    qps.sort_unstable_by_key(|(q, _)| *q);
    let entry = |(qpn, c): &(u32, &Counters)| {
        let mut e = json!({ "qpn": qpn, "counters": named(c) });
        // DCQCN's gauges while the QP is under it (Engine::qp_cc), as mlx5 shows them.
        if let Some(g) = engine.qp_cc(*qpn) {
            e["cc"] = json!({
                "current_rate": g.current_rate,
                "target_rate": g.target_rate,
                "alpha": g.alpha,
            });
        }
        e
    };
    let mut out = vec![ToDaemon::QpCounters {
        report: json!({
            "nic": named(&engine.counters()),
            "tx_dropped": tx_dropped,
            "qps": qps.iter().take(MAX_QPS_PER_MSG).map(entry).collect::<Vec<_>>(),
        }),
    }];
    for chunk in qps.chunks(MAX_QPS_PER_MSG).skip(1) {
        out.push(ToDaemon::QpCounters {
            report: json!({ "qps": chunk.iter().map(entry).collect::<Vec<_>>() }),
        });
    }
    out
}

// ---- the daemon side ---------------------------------------------------------------------

/// What a process reported of its engine, as the daemon keeps it.
#[derive(Debug, Default, Clone)]
pub struct ProcessReport {
    nic: Counters,
    qps: BTreeMap<u32, Counters>,
    /// DCQCN's gauges of the QPs under it at their last report.
    cc: BTreeMap<u32, CcGauges>,
    /// Packets the process dropped because its ring to the daemon was full.
    tx_dropped: u64,
    reports: u64,
    errors: u64,
    last_error: Option<String>,
    qps_dropped: u64,
}

/// A QP's DCQCN gauges as a process reports them: rates in bits/s, alpha in 1/1024.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CcGauges {
    pub current_rate: u64,
    pub target_rate: u64,
    pub alpha: u16,
}

/// The gauges of a report's `cc` object; `None` when absent or not three numbers in
/// range (alpha is at most 1023).
fn gauges_of(v: &Value) -> Option<CcGauges> {
    let n = |k: &str| v.get(k).and_then(Value::as_u64);
    Some(CcGauges {
        current_rate: n("current_rate")?,
        target_rate: n("target_rate")?,
        alpha: u16::try_from(n("alpha")?).ok().filter(|&a| a <= 1023)?,
    })
}

/// Longest piece of a process's own text (a counter name it made up) kept in an error: a
/// report is untrusted, and what the daemon keeps of it goes into every `counters` answer,
/// which must stay within one control message.
const MAX_ECHO: usize = 64;

/// `k` as an error may quote it: at most `MAX_ECHO` characters.
fn echo(k: &str) -> String {
    match k.char_indices().nth(MAX_ECHO) {
        Some((at, _)) => format!("{:?}... ({} bytes)", &k[..at], k.len()),
        None => format!("{k:?}"),
    }
}

/// What is wrong with a counter set in a report (the names quoted are cut to
/// `MAX_ECHO` characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CounterError {
    #[error("counters: not an object")]
    NotObject,
    #[error("no counter {0}")]
    Unknown(String),
    #[error("counter {0}: not an unsigned number")]
    NotNumber(String),
}

/// What is wrong with a process's report (`QpCounters`): counted, shown in `counters`
/// as its `report_error`, never the end of its attachment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error("a report from a process not attached")]
    NotAttached,
    #[error("the report is not an object")]
    NotObject,
    #[error("tx_dropped: not an unsigned number")]
    TxDropped,
    #[error("nic: {0}")]
    Nic(CounterError),
    #[error("qps: not an array")]
    QpsNotArray,
    #[error("{0} QPs in one report (at most {MAX_QPS_PER_MSG})")]
    TooManyQps(usize),
    #[error("qpn {0:?} outside the block leased")]
    QpnOutside(Option<String>),
    #[error("QP {qpn:#x}: {source}")]
    Qp { qpn: u32, source: CounterError },
    #[error("QP {0:#x}: no counters")]
    NoCounters(u32),
    #[error("QP {0:#x}: cc: current_rate, target_rate, alpha (0..=1023) as numbers")]
    Gauges(u32),
}

/// Why the rest of a `counters` answer could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("an answer announcing {0} more messages")]
    TooMany(u64),
    #[error("unexpected answer {0}")]
    Unexpected(String),
    #[error("the daemon closed mid-answer")]
    Closed,
    #[error(transparent)]
    Control(ControlError),
}

/// A counter set from a report: an object of known names to unsigned numbers.
fn counters_of(v: &Value) -> Result<Counters, CounterError> {
    let obj = v.as_object().ok_or(CounterError::NotObject)?;
    let mut c = Counters::default();
    for (k, n) in obj {
        let which = Counter::ALL
            .iter()
            .find(|c| c.name() == k)
            .ok_or_else(|| CounterError::Unknown(echo(k)))?;
        let n = n.as_u64().ok_or_else(|| CounterError::NotNumber(echo(k)))?;
        c.add(*which, n);
    }
    Ok(c)
}

impl ProcessReport {
    /// Takes one `QpCounters` report of a process leasing `block` (None: not attached).
    pub fn apply(&mut self, report: &Value, block: Option<u8>) {
        self.reports += 1;
        if let Err(e) = self.parse(report, block) {
            self.errors += 1;
            self.last_error = Some(e.to_string());
        }
    }

    /// The good parts of `v` are taken; the first error found is returned.
    fn parse(&mut self, v: &Value, block: Option<u8>) -> Result<(), ReportError> {
        let block = block.ok_or(ReportError::NotAttached)?;
        let obj = v.as_object().ok_or(ReportError::NotObject)?;
        let mut first_err: Option<ReportError> = None;
        let mut err = |e: ReportError| {
            first_err.get_or_insert(e);
        };
        match obj.get("tx_dropped").map(Value::as_u64) {
            None => {}
            Some(Some(t)) => self.tx_dropped = t,
            Some(None) => err(ReportError::TxDropped),
        }
        if let Some(nic) = obj.get("nic") {
            match counters_of(nic) {
                Ok(c) => self.nic = c,
                Err(e) => err(ReportError::Nic(e)),
            }
        }
        let (lo, hi) = lease::range(block);
        match obj.get("qps").map(|q| q.as_array()) {
            None => {}
            Some(None) => err(ReportError::QpsNotArray),
            Some(Some(a)) if a.len() > MAX_QPS_PER_MSG => err(ReportError::TooManyQps(a.len())),
            Some(Some(a)) => {
                for q in a {
                    let qpn = q.get("qpn").and_then(Value::as_u64);
                    let qpn = match qpn {
                        Some(n) if (u64::from(lo)..=u64::from(hi)).contains(&n) => n as u32,
                        _ => {
                            let shown = q.get("qpn").map(|v| echo(&v.to_string()));
                            err(ReportError::QpnOutside(shown));
                            continue;
                        }
                    };
                    let c = match q.get("counters").map(counters_of) {
                        Some(Ok(c)) => c,
                        Some(Err(e)) => {
                            err(ReportError::Qp { qpn, source: e });
                            continue;
                        }
                        None => {
                            err(ReportError::NoCounters(qpn));
                            continue;
                        }
                    };
                    if self.qps.len() >= MAX_QPS_KEPT && !self.qps.contains_key(&qpn) {
                        self.qps_dropped += 1;
                        continue;
                    }
                    self.qps.insert(qpn, c);
                    // Present while the QP is under DCQCN; absent, it is at line rate.
                    match q.get("cc").map(gauges_of) {
                        Some(Some(g)) => {
                            self.cc.insert(qpn, g);
                        }
                        Some(None) => err(ReportError::Gauges(qpn)),
                        None => {
                            self.cc.remove(&qpn);
                        }
                    }
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The last counters a QP reported.
    pub fn qp(&self, qpn: u32) -> Option<&Counters> {
        self.qps.get(&qpn)
    }
}

/// Flattened into a process's entry: `tx_dropped`, `reports`, `report_errors`,
/// `report_error`, `qps_dropped`, `nic` (the NIC's totals, nonzero counters by name) and `qps` (each
/// `{qpn, counters}`).
impl Serialize for ProcessReport {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(7))?;
        m.serialize_entry("tx_dropped", &self.tx_dropped)?;
        m.serialize_entry("reports", &self.reports)?;
        m.serialize_entry("report_errors", &self.errors)?;
        m.serialize_entry("report_error", &self.last_error)?;
        m.serialize_entry("qps_dropped", &self.qps_dropped)?;
        m.serialize_entry("nic", &named(&self.nic))?;
        let qps: Vec<Value> = self
            .qps
            .iter()
            .map(|(q, c)| {
                let mut e = json!({ "qpn": q, "counters": named(c) });
                if let Some(g) = self.cc.get(q) {
                    e["cc"] = json!(g);
                }
                e
            })
            .collect();
        m.serialize_entry("qps", &qps)?;
        m.end()
    }
}

// ---- the answer to `roce-emu counters` ----------------------------------------------------

fn size(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(BUDGET, |b| b.len())
}

/// Cuts a process entry too large for one message into pieces: the entry with the QPs
/// that fit, then `{"continued": true, "qps": [...]}` pieces with the rest.
fn pieces(mut p: Value, out: &mut Vec<Value>) {
    if size(&p) <= BUDGET / 2 {
        out.push(p);
        return;
    }
    let qps = match p.get_mut("qps").map(Value::take) {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    p["qps"] = Value::Array(Vec::new());
    let mut cur = p;
    let mut used = size(&cur);
    for q in qps {
        let s = size(&q) + 1;
        if used + s > BUDGET / 2 {
            out.push(std::mem::replace(
                &mut cur,
                json!({ "continued": true, "qps": [] }),
            ));
            used = 32;
        }
        if let Some(a) = cur["qps"].as_array_mut() {
            a.push(q);
        }
        used += s;
    }
    out.push(cur);
}

/// The messages answering `Counters`: `base` with as many `processes` as fit, then
/// `CountersMore` messages with the rest (`base["more"]` says how many).
pub fn counters_answer(mut base: Value, processes: Vec<Value>) -> Vec<ToProcess> {
    let mut all = Vec::new();
    for p in processes {
        pieces(p, &mut all);
    }
    base["processes"] = Value::Array(Vec::new());
    let mut used = size(&base) + 16;
    let mut rest: Vec<Vec<Value>> = Vec::new();
    for p in all {
        let s = size(&p) + 1;
        match rest.last_mut() {
            None if used + s <= BUDGET => {
                if let Some(a) = base["processes"].as_array_mut() {
                    a.push(p);
                }
                used += s;
                continue;
            }
            Some(last) if used + s <= BUDGET => {
                last.push(p);
                used += s;
                continue;
            }
            _ => {}
        }
        rest.push(vec![p]);
        used = 64 + s;
    }
    if !rest.is_empty() {
        base["more"] = rest.len().into();
    }
    let mut out = vec![ToProcess::Counters { json: base }];
    out.extend(
        rest.into_iter()
            .map(|processes| ToProcess::CountersMore { processes }),
    );
    out
}

/// Reads the `CountersMore` messages that follow `first` (an answer to `Counters`) on
/// `sock` and puts their processes in it, the continued pieces joined to their entry.
pub fn collect_answer(sock: BorrowedFd<'_>, mut first: Value) -> Result<Value, AnswerError> {
    let more = first.get("more").and_then(Value::as_u64).unwrap_or(0);
    // A daemon's answer has at most MAX_DEPARTED + 255 processes of MAX_QPS_KEPT QPs.
    if more > 100_000 {
        return Err(AnswerError::TooMany(more));
    }
    let mut procs = match first.get_mut("processes").map(Value::take) {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    for _ in 0..more {
        match control::recv::<ToProcess>(sock) {
            Ok((ToProcess::CountersMore { processes }, _)) => procs.extend(processes),
            Ok((m, _)) => return Err(AnswerError::Unexpected(format!("{m:?}"))),
            Err(ControlError::Closed) => return Err(AnswerError::Closed),
            Err(e) => return Err(AnswerError::Control(e)),
        }
    }
    let mut joined: Vec<Value> = Vec::with_capacity(procs.len());
    for p in procs {
        let continued = p.get("continued").and_then(Value::as_bool) == Some(true);
        match joined.last_mut() {
            Some(prev) if continued => {
                if let (Some(a), Some(b)) = (prev["qps"].as_array_mut(), p["qps"].as_array()) {
                    a.extend(b.iter().cloned());
                }
            }
            _ => joined.push(p),
        }
    }
    first["processes"] = Value::Array(joined);
    if let Some(o) = first.as_object_mut() {
        o.remove("more");
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_qpn(block: u8, i: u32) -> u32 {
        lease::range(block).0 + i
    }

    /// DCQCN's gauges travel with a QP's counters while it is under DCQCN, leave with
    /// the first report without them, and a malformed set is counted.
    #[test]
    fn dcqcn_gauges_are_kept_while_reported() {
        let mut r = ProcessReport::default();
        let q = block_qpn(2, 1);
        let cc =
            json!({ "current_rate": 250_000_000u64, "target_rate": 500_000_000u64, "alpha": 512 });
        r.apply(
            &json!({ "qps": [{ "qpn": q, "counters": {}, "cc": cc }] }),
            Some(2),
        );
        assert_eq!(r.errors, 0, "{:?}", r.last_error);
        let shown = serde_json::to_value(&r).unwrap();
        assert_eq!(shown["qps"][0]["cc"], cc);
        r.apply(&json!({ "qps": [{ "qpn": q, "counters": {} }] }), Some(2));
        assert!(serde_json::to_value(&r).unwrap()["qps"][0]
            .get("cc")
            .is_none());
        let bad = json!({ "current_rate": 1, "target_rate": 1, "alpha": 5000 });
        r.apply(
            &json!({ "qps": [{ "qpn": q, "counters": {}, "cc": bad }] }),
            Some(2),
        );
        assert_eq!(r.errors, 1);
    }

    #[test]
    fn a_report_is_taken_and_bad_parts_are_counted_not_fatal() {
        let mut r = ProcessReport::default();
        let q = block_qpn(3, 0x11);
        r.apply(
            &json!({ "nic": { "sent_pkts": 7 }, "tx_dropped": 3, "qps": [{ "qpn": q, "counters": { "sent_pkts": 7, "rcvd_pkts": 2 } }] }),
            Some(3),
        );
        assert_eq!(r.errors, 0, "{:?}", r.last_error);
        assert_eq!(r.qp(q).unwrap().get(Counter::SentPkts), 7);
        assert_eq!(r.nic.get(Counter::SentPkts), 7);
        assert_eq!(r.tx_dropped, 3);
        // A later report replaces a QP's counters; the others stay.
        let q2 = block_qpn(3, 0x12);
        r.apply(
            &json!({ "qps": [{ "qpn": q2, "counters": { "rcvd_pkts": 1 } }] }),
            Some(3),
        );
        assert_eq!(r.qp(q).unwrap().get(Counter::RcvdPkts), 2);
        assert_eq!(r.qp(q2).unwrap().get(Counter::RcvdPkts), 1);
        // Garbage of every kind: counted, nothing taken, no panic.
        let other_block = block_qpn(4, 1);
        let many: Vec<Value> = (0..MAX_QPS_PER_MSG as u32 + 1)
            .map(|i| json!({ "qpn": block_qpn(3, i), "counters": {} }))
            .collect();
        let bad = [
            json!("x"),
            json!({ "nic": [1] }),
            json!({ "nic": { "no_such": 1 } }),
            json!({ "nic": { "sent_pkts": -1 } }),
            json!({ "nic": { "sent_pkts": 1.5 } }),
            json!({ "tx_dropped": "x" }),
            json!({ "qps": {} }),
            json!({ "qps": [{ "qpn": other_block, "counters": {} }] }),
            json!({ "qps": [{ "qpn": "0x11", "counters": {} }] }),
            json!({ "qps": [{ "qpn": q }] }),
            json!({ "qps": many }),
            Value::Null,
        ];
        for (i, b) in bad.iter().enumerate() {
            r.apply(b, Some(3));
            assert_eq!(r.errors, i as u64 + 1, "{b}");
        }
        assert_eq!(r.qps.len(), 2);
        assert_eq!(r.nic.get(Counter::SentPkts), 7);
        // Not attached: nothing taken.
        r.apply(&json!({ "nic": { "sent_pkts": 1 } }), None);
        assert_eq!(r.nic.get(Counter::SentPkts), 7);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["report_errors"], bad.len() as u64 + 1, "{v}");
        assert_eq!(v["qps"][0]["counters"]["sent_pkts"], 7, "{v}");
    }

    #[test]
    fn the_daemon_keeps_a_bounded_number_of_qps() {
        let mut r = ProcessReport::default();
        for chunk in 0..(MAX_QPS_KEPT / MAX_QPS_PER_MSG + 1) as u32 {
            let qps: Vec<Value> = (0..MAX_QPS_PER_MSG as u32)
                .map(|i| {
                    let q = block_qpn(1, chunk * MAX_QPS_PER_MSG as u32 + i);
                    json!({ "qpn": q, "counters": { "sent_pkts": 1 } })
                })
                .collect();
            r.apply(&json!({ "qps": qps }), Some(1));
        }
        assert_eq!(r.qps.len(), MAX_QPS_KEPT);
        assert_eq!(r.qps_dropped, MAX_QPS_PER_MSG as u64);
        assert_eq!(r.errors, 0);
    }

    /// A report naming a counter of 100 KB: the error kept quotes a bounded piece of it,
    /// so every `counters` answer still fits its messages (it broke `counters` for every
    /// user of the daemon, for good).
    #[test]
    fn a_huge_counter_name_cannot_break_the_answer() {
        let mut r = ProcessReport::default();
        let name = "x".repeat(100_000);
        r.apply(&json!({ "nic": { name.clone(): 1 } }), Some(3));
        let q = json!({ "qpn": name, "counters": {} });
        r.apply(&json!({ "qps": [q] }), Some(3));
        assert_eq!(r.errors, 2);
        let entry = serde_json::to_value(&r).unwrap();
        assert!(size(&entry) < 1024, "{} bytes", size(&entry));
        for m in counters_answer(json!({}), vec![entry]) {
            assert!(control::encode(&m).is_ok(), "an answer over MAX_MSG");
        }
    }

    #[test]
    fn a_large_answer_is_cut_into_messages_and_joined_again() {
        // 40 processes of 200 QPs each: far more than one message holds.
        let procs: Vec<Value> = (0..40u32)
            .map(|p| {
                let qps: Vec<Value> = (0..200u32)
                    .map(|q| json!({ "qpn": q, "counters": { "sent_pkts": p * 1000 + q, "rcvd_pkts": 12345 } }))
                    .collect();
                json!({ "pid": p, "qps": qps })
            })
            .collect();
        let msgs = counters_answer(json!({ "counters": { "rcvd_pkts": 1 } }), procs.clone());
        assert!(msgs.len() > 2);
        let (a, b) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::SeqPacket,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let mut first = None;
        // Sent from a thread: the answer is larger than the socket's buffer.
        let t = std::thread::spawn(move || {
            for m in &msgs {
                control::send(a.as_fd(), m, &[]).unwrap();
            }
        });
        if let Ok((ToProcess::Counters { json }, _)) = control::recv::<ToProcess>(b.as_fd()) {
            first = Some(json);
        }
        let got = collect_answer(b.as_fd(), first.unwrap()).unwrap();
        t.join().unwrap();
        assert_eq!(got["processes"], Value::Array(procs));
        assert_eq!(got["counters"]["rcvd_pkts"], 1);
        assert!(got.get("more").is_none());
    }
}
