//! `roce-emu counters --watch SECS --record FILE`: the daemon's counters over time, one
//! JSON object per reading (JSON lines), for `roce-emu plot` and the experiment scripts
//! of tools/cc/. Each line:
//!
//! ```text
//! {"t": seconds since the first reading,
//!  "queue": the port's egress queue (cp_* counters and gauges, settings),
//!  "port": the port's counters (sent_pkts, rcvd_pkts, ...),
//!  "flows": [{"flow": "to ADDR qp 0xQPN", "tx_bytes", "ecn_marked", "dropped",
//!             "rate_bps"}],
//!  "qps": [{"qp": "pid P qp 0xQPN", "pid", "qpn", "sent_bytes", "rcvd_bytes",
//!           "rate_bps", "counters": every counter of the QP (CNPs: np_*, rp_*)}]}
//! ```
//!
//! `flows` are counted by the port's egress queue (`backend::queue`, per destination
//! QP) at each reading, so their `rate_bps` is exact over the interval since the last
//! reading (null at the first). A QP's counters reach the daemon in its process's
//! reports (every 500 ms, `daemon::report::PUBLISH_EVERY`), so its `rate_bps` is taken
//! between the two last readings at which its `sent_bytes` moved (null until it moved),
//! held until a report is overdue (`HOLD`), then 0.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Instant;

/// How long a QP's rate is held when its sent bytes stand still: two report periods.
const HOLD: f64 = 1.0;

/// Per-QP rates between the readings at which its sent bytes moved.
#[derive(Debug, Default)]
pub struct Recorder {
    start: Option<Instant>,
    /// (pid, qpn) -> (time of the last change, sent bytes then, rate since the one before).
    last: BTreeMap<(u64, u64), (f64, u64, Option<f64>)>,
    /// Flow name -> (time, tx bytes) at the last reading.
    flows: BTreeMap<String, (f64, u64)>,
}

impl Recorder {
    /// One line for the counters `v` read at `now`.
    pub fn line(&mut self, v: &Value, now: Instant) -> Value {
        let t = now
            .duration_since(*self.start.get_or_insert(now))
            .as_secs_f64();
        let mut flows = Vec::new();
        for f in v["queue"]["flows"].as_array().into_iter().flatten() {
            let name = format!(
                "to {} qp {:#08x}",
                f["dst"].as_str().unwrap_or("?"),
                f["qpn"].as_u64().unwrap_or(0)
            );
            let bytes = f["tx_bytes"].as_u64().unwrap_or(0);
            let rate = match self.flows.insert(name.clone(), (t, bytes)) {
                Some((t0, b0)) if t > t0 => Some(bytes.saturating_sub(b0) as f64 * 8.0 / (t - t0)),
                _ => None,
            };
            flows.push(json!({
                "flow": name,
                "tx_bytes": bytes,
                "ecn_marked": f["ecn_marked"],
                "dropped": f["dropped"],
                "rate_bps": rate,
            }));
        }
        let mut qps = Vec::new();
        for p in v["processes"].as_array().into_iter().flatten() {
            let pid = p["pid"].as_u64().unwrap_or(0);
            for q in p["qps"].as_array().into_iter().flatten() {
                let qpn = q["qpn"].as_u64().unwrap_or(0);
                let c = &q["counters"];
                let sent = c["sent_bytes"].as_u64().unwrap_or(0);
                let e = self.last.entry((pid, qpn)).or_insert((t, sent, None));
                if sent != e.1 {
                    let rate = (t > e.0).then(|| sent.saturating_sub(e.1) as f64 * 8.0 / (t - e.0));
                    *e = (t, sent, rate);
                }
                let rate = if t - e.0 > HOLD { Some(0.0) } else { e.2 };
                qps.push(json!({
                    "qp": format!("pid {pid} qp {qpn:#08x}"),
                    "pid": pid,
                    "qpn": qpn,
                    "sent_bytes": sent,
                    "rcvd_bytes": c["rcvd_bytes"].as_u64().unwrap_or(0),
                    "rate_bps": rate,
                    "counters": c,
                }));
            }
        }
        json!({
            "t": t,
            "queue": v["queue"],
            "port": v["counters"],
            "flows": flows,
            "qps": qps,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn reading(sent: u64) -> Value {
        json!({"queue": {"cp_queue_bytes": 5,
                         "flows": [{"dst": "10.0.0.2", "qpn": 33, "tx_bytes": sent / 2}]},
               "counters": {"sent_pkts": 1},
               "processes": [{"pid": 7, "qps": [{"qpn": 17, "counters": {"sent_bytes": sent}}]}]})
    }

    #[test]
    fn rates_are_taken_between_the_readings_where_bytes_moved() {
        let mut r = Recorder::default();
        let t0 = Instant::now();
        let a = r.line(&reading(0), t0);
        assert_eq!(a["t"], 0.0);
        assert_eq!(a["qps"][0]["rate_bps"], Value::Null);
        assert_eq!(a["flows"][0]["rate_bps"], Value::Null);
        assert_eq!(a["queue"]["cp_queue_bytes"], 5);
        // Moved by 1 MB over 1 s: 8 Mbit/s; held while it stands still, then 0.
        let b = r.line(&reading(1_000_000), t0 + Duration::from_secs(1));
        assert_eq!(b["qps"][0]["rate_bps"], 8e6);
        let c = r.line(&reading(1_000_000), t0 + Duration::from_millis(1500));
        assert_eq!(c["qps"][0]["rate_bps"], 8e6);
        // The queue's flow: exact per interval (500 KB in 1 s, then nothing).
        assert_eq!(b["flows"][0]["rate_bps"], 4e6);
        assert_eq!(c["flows"][0]["rate_bps"], 0.0);
        assert_eq!(c["flows"][0]["flow"], "to 10.0.0.2 qp 0x000021");
        let d = r.line(&reading(1_000_000), t0 + Duration::from_millis(2100));
        assert_eq!(d["qps"][0]["rate_bps"], 0.0);
        let e = r.line(&reading(2_000_000), t0 + Duration::from_secs(3));
        assert_eq!(e["qps"][0]["rate_bps"], 4e6);
        assert_eq!(e["qps"][0]["qp"], "pid 7 qp 0x000011");
    }
}
