//! `roce-emu counters`: what a daemon has moved, per port and per process. The text shows
//! every group `--json` has (port counters, port_stats, l2, leases, faults, capture, each
//! process with its engine counters and per-QP counters), zeros folded into "(all others
//! 0)". `--watch SECS` reads them again every SECS and shows rates per QP and for the port
//! beside the totals ([`watch`]): redrawn in place on a terminal, one block per reading
//! (stamped with the time) when piped; Ctrl-C or `--count N` readings end it.

mod record;
mod watch;

use crate::daemon::lease;
use serde_json::{Map, Value};
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(clap::Args, Debug)]
pub struct CountersArgs {
    /// The daemon's control socket (default: the one daemon running at the default
    /// path, $XDG_RUNTIME_DIR/roce-emu/ or /run/roce-emu/).
    #[arg(long = "daemon", alias = "socket", value_name = "SOCKET")]
    pub daemon: Option<PathBuf>,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Read them again every SECS seconds and show rates (packets/s, MB/s, retries/s,
    /// NAKs/s) per QP and for the port beside the totals, until Ctrl-C (or --count).
    #[arg(long, value_name = "SECS", value_parser = super::seconds)]
    pub watch: Option<Duration>,
    /// With --watch: stop after N readings.
    #[arg(long, value_name = "N", requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// With --watch: append each reading to FILE as one JSON line (time, the queue's
    /// counters, the port's, each QP's counters and sending rate) instead of showing it;
    /// `roce-emu plot FILE` draws it.
    #[arg(long, value_name = "FILE", requires = "watch")]
    pub record: Option<PathBuf>,
}

/// `k v` for every field of `o` but `skip`: numbers that are not 0, other scalars that are
/// not null, and `(all others 0)` when some were 0. Objects and arrays are left to the
/// caller.
fn fields(o: &Map<String, Value>, skip: &[&str]) -> String {
    let mut shown = Vec::new();
    let mut zeros = 0;
    for (k, v) in o {
        if skip.contains(&k.as_str()) {
            continue;
        }
        match v {
            Value::Number(n) if n.as_u64() == Some(0) => zeros += 1,
            Value::Number(n) => shown.push(format!("{k} {n}")),
            Value::String(s) => shown.push(format!("{k} {s:?}")),
            Value::Bool(b) => shown.push(format!("{k} {b}")),
            Value::Null | Value::Object(_) | Value::Array(_) => {}
        }
    }
    match (shown.is_empty(), zeros) {
        (true, 0) => "(none)".into(),
        (true, _) => "(all 0)".into(),
        (false, 0) => shown.join(", "),
        (false, _) => format!("{}, (all others 0)", shown.join(", ")),
    }
}

/// One group: `  NAME  fields`, or what a null group means.
fn group(out: &mut String, name: &str, v: &Value, null: &str) {
    let text = match v {
        Value::Object(o) => fields(o, &[]),
        Value::Null => null.to_string(),
        other => other.to_string(),
    };
    let _ = writeln!(out, "  {name:<12} {text}");
}

/// An object with its nested objects' fields brought up as `outer_inner` (the CM's
/// counters group MADs by kind and drops by reason).
fn flatten(v: &Value) -> Value {
    fn into(out: &mut Map<String, Value>, prefix: &str, v: &Map<String, Value>) {
        for (k, x) in v {
            let name = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}_{k}")
            };
            match x {
                Value::Object(o) => into(out, &name, o),
                other => {
                    out.insert(name, other.clone());
                }
            }
        }
    }
    match v {
        Value::Object(o) => {
            let mut out = Map::new();
            into(&mut out, "", o);
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// The counters as text.
pub fn render(v: &Value) -> String {
    let mut out = String::new();
    let port = &v["port"];
    let addrs: Vec<String> = port["addrs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| a.as_str().unwrap_or("?").to_string())
        .collect();
    let _ = writeln!(
        out,
        "port {} {} ({}), MTU {}",
        port["kind"].as_str().unwrap_or("?"),
        port["name"].as_str().unwrap_or("?"),
        addrs.join(", "),
        port["mtu"]
    );
    let counters = match &v["counters"] {
        Value::Object(o) => fields(o, &[]),
        _ => "(none)".into(),
    };
    let _ = writeln!(out, "  {:<12} {counters}", "counters");
    group(&mut out, "port_stats", &v["port_stats"], "(none)");
    group(&mut out, "l2", &v["l2"], "(none: a UDP port has no frames)");
    group(&mut out, "qp1", &v["qp1"], "(none)");
    group(&mut out, "cm", &flatten(&v["cm"]), "(none)");
    group(&mut out, "cm_clients", &v["cm_clients"], "(none)");
    let l = &v["leases"];
    let _ = writeln!(
        out,
        "  {:<12} {} leased, {} in quarantine, {} free",
        "leases", l["leased"], l["quarantined"], l["free"]
    );
    let rules = v["faults"]["rules"].as_array().cloned().unwrap_or_default();
    let cleared = v["faults"]["cleared"].as_array().map_or(0, |c| c.len());
    let _ = writeln!(
        out,
        "  {:<12} {} rules{}",
        "faults",
        rules.len(),
        if cleared > 0 {
            format!(", {cleared} cleared")
        } else {
            String::new()
        }
    );
    for r in &rules {
        let _ = writeln!(
            out,
            "    {:<56} matched {} applied {}",
            r["rule"].as_str().unwrap_or("?"),
            r["matched"],
            r["applied"]
        );
    }
    group(&mut out, "capture", &v["capture"], "off");
    out.push_str(&render_queue(&v["queue"]));
    let procs = v["processes"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(out, "processes: {}", procs.len());
    for p in &procs {
        render_process(&mut out, p);
    }
    out
}

/// The egress queue's line: off, or its settings and counters (`roce-emu queue show`).
pub fn render_queue(q: &Value) -> String {
    let mut out = String::new();
    let Value::Object(o) = q else {
        return out;
    };
    let on = q["enabled"].as_bool() == Some(true);
    let _ = writeln!(
        out,
        "  {:<12} {} ({})",
        "queue",
        if on { "on" } else { "off" },
        q["config"].as_str().unwrap_or("?")
    );
    let _ = writeln!(out, "    {}", fields(o, &["enabled", "config"]));
    for f in q["flows"].as_array().into_iter().flatten() {
        let Value::Object(fo) = f else { continue };
        let _ = writeln!(
            out,
            "    to {} qp {:#08x}: {}",
            f["dst"].as_str().unwrap_or("?"),
            f["qpn"].as_u64().unwrap_or(0),
            fields(fo, &["dst", "qpn"])
        );
    }
    out
}

fn render_process(out: &mut String, p: &Value) {
    let qpns = p["block"]
        .as_u64()
        .and_then(|b| u8::try_from(b).ok())
        .map(|b| {
            let (lo, hi) = lease::range(b);
            format!(" (QPNs {lo:#08x}-{hi:#08x})")
        })
        .unwrap_or_default();
    let left = match p["left"].as_str() {
        Some(why) => format!(", left: {why}"),
        None => ", attached".into(),
    };
    let _ = writeln!(
        out,
        "  pid {} uid {} block {}{qpns}{left}",
        p["pid"], p["uid"], p["block"]
    );
    let o = p.as_object().cloned().unwrap_or_default();
    let skip = ["pid", "uid", "block", "left", "report_error"];
    let _ = writeln!(out, "    ring:  {}", fields(&o, &skip));
    if let Some(e) = p["report_error"].as_str() {
        let _ = writeln!(out, "    last bad counter report: {e}");
    }
    let nic = match &p["nic"] {
        Value::Object(n) => fields(n, &[]),
        _ => "(no report yet)".into(),
    };
    let _ = writeln!(out, "    nic:   {nic}");
    for q in p["qps"].as_array().into_iter().flatten() {
        let c = match &q["counters"] {
            Value::Object(c) => fields(c, &[]),
            _ => "(none)".into(),
        };
        let _ = writeln!(out, "    qp {:#08x}: {c}", q["qpn"].as_u64().unwrap_or(0));
        if let Some(g) = q["cc"].as_object() {
            let mbit = |k: &str| g.get(k).and_then(Value::as_u64).unwrap_or(0) as f64 / 1e6;
            let alpha = g.get("alpha").and_then(Value::as_u64).unwrap_or(0);
            let _ = writeln!(
                out,
                "      DCQCN: current rate {:.1} Mbit/s, target {:.1} Mbit/s, alpha {alpha}/1024",
                mbit("current_rate"),
                mbit("target_rate"),
            );
        }
    }
}

/// `YYYY-MM-DD HH:MM:SS UTC` (civil from days, Howard Hinnant's algorithm: no time
/// zone data needed).
pub fn utc_stamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub fn counters(args: &CountersArgs) -> i32 {
    let socket = match super::find_daemon::resolve(args.daemon.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("roce-emu counters: {e}");
            return 2;
        }
    };
    let Some(every) = args.watch else {
        return match super::daemon::fetch(&socket) {
            Ok(v) if args.json => {
                println!("{v}");
                0
            }
            Ok(v) => {
                print!("{}", render(&v));
                0
            }
            Err(e) => {
                eprintln!("roce-emu counters: {e}");
                1
            }
        };
    };
    // Ctrl-C sets `stop`, which the wait between readings checks, so the watch ends
    // after a whole block (exit 0); a second Ctrl-C ends it at once. signal-hook's flag
    // API: its handler only stores to an atomic.
    let stop = Arc::new(AtomicBool::new(false));
    let sigint = signal_hook::consts::SIGINT;
    let registered =
        signal_hook::flag::register_conditional_shutdown(sigint, 130, Arc::clone(&stop))
            .and_then(|_| signal_hook::flag::register(sigint, Arc::clone(&stop)));
    if let Err(e) = registered {
        tracing::warn!("cannot catch SIGINT ({e}): Ctrl-C will end the watch mid-block");
    }
    watch_loop(&socket, every, args, &stop)
}

/// Step of the wait between readings: how soon Ctrl-C is seen.
const STOP_POLL: Duration = Duration::from_millis(20);

fn watch_loop(socket: &PathBuf, every: Duration, args: &CountersArgs, stop: &AtomicBool) -> i32 {
    let mut out = std::io::stdout();
    // On a terminal each reading replaces the last (cursor home, clear below); piped, one
    // block per reading, stamped, so a log reads in order.
    let redraw = out.is_terminal() && !args.json;
    let mut rates = watch::Rates::default();
    let mut recorder = record::Recorder::default();
    let mut file = match &args.record {
        Some(path) => match std::fs::File::create(path) {
            Ok(f) => Some(std::io::BufWriter::new(f)),
            Err(e) => {
                eprintln!("roce-emu counters: {}: {e}", path.display());
                return 1;
            }
        },
        None => None,
    };
    let mut readings = 0u64;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let v = match super::daemon::fetch(socket) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("roce-emu counters: {e}");
                return 1;
            }
        };
        let now = Instant::now();
        let stamp = utc_stamp(SystemTime::now());
        let block = if let Some(f) = &mut file {
            let line = recorder.line(&v, now);
            if writeln!(f, "{line}").and_then(|_| f.flush()).is_err() {
                eprintln!("roce-emu counters: cannot write the record");
                return 1;
            }
            String::new()
        } else if args.json {
            format!("{v}\n")
        } else {
            let rows = watch::rows(&v);
            let k = rates.update(&rows, now);
            let table = watch::table(&rows, &k);
            let title = watch::title(&v, every, &stamp);
            if redraw {
                format!("\x1b[H\x1b[J{title} (Ctrl-C ends)\n{table}")
            } else {
                format!("--- {stamp} ---\n{title}\n{table}\n")
            }
        };
        // A reader gone (a closed pipe) ends the watch quietly.
        if out
            .write_all(block.as_bytes())
            .and_then(|_| out.flush())
            .is_err()
        {
            return 0;
        }
        readings += 1;
        if args.count.is_some_and(|c| readings >= c) {
            break;
        }
        next += every;
        // Late (a slow daemon, a suspended terminal): the next reading now, not a burst.
        let now = Instant::now();
        if next < now {
            next = now;
        }
        while !stop.load(Ordering::Relaxed) {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(STOP_POLL));
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamp_is_civil_time() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        assert_eq!(utc_stamp(t), "2026-11-18 11:06:40 UTC");
        assert_eq!(utc_stamp(UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(utc_stamp(leap), "2000-02-29 00:00:00 UTC");
    }

    #[test]
    fn zeros_fold() {
        let v: Value = serde_json::json!({
            "port": {"kind": "udp", "name": "127.0.0.9", "addrs": ["127.0.0.9"], "mtu": 1500},
            "counters": {"rcvd_pkts": 10, "sent_pkts": 0, "refused": 0},
            "port_stats": {"gso_sends": 3, "truncated": 0},
            "l2": null, "capture": null,
            "leases": {"leased": 1, "quarantined": 0, "free": 254},
            "faults": {"rules": [], "cleared": []},
            "processes": [{"pid": 7, "uid": 0, "block": 1, "left": null, "rcvd_pkts": 5,
                "sent_pkts": 0, "report_error": null,
                "nic": {"acks_sent": 2}, "qps": [{"qpn": 65536, "counters": {"sent_pkts": 4}}]}]
        });
        let t = render(&v);
        assert!(
            t.contains("counters     rcvd_pkts 10, (all others 0)"),
            "{t}"
        );
        assert!(
            t.contains("port_stats   gso_sends 3, (all others 0)"),
            "{t}"
        );
        assert!(t.contains("qp 0x010000: sent_pkts 4"), "{t}");
        assert!(t.contains("nic:   acks_sent 2"), "{t}");
        assert!(t.contains("capture      off"), "{t}");
    }
}
