//! `roce-emu plot FILE -o OUT.svg`: draws a record of `roce-emu counters --watch SECS
//! --record FILE` (JSON lines, `counters::record`): each flow's sending rate (Mbit/s) over
//! time in the upper panel, the port's egress queue depth (KB) in the lower, with axes,
//! ticks and a legend.
//!
//! The SVG is written by hand: a few lines, rectangles and text are all it takes, and a
//! plotting crate (plotters and its font stack) would add far more to the build than this
//! file; the output is self-contained (no script, no external font or style).

use serde_json::Value;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The record (JSON lines from `roce-emu counters --watch SECS --record FILE`).
    #[arg(value_name = "FILE")]
    pub input: PathBuf,
    /// Where to write the SVG.
    #[arg(short = 'o', long = "output", value_name = "OUT.svg")]
    pub output: PathBuf,
    /// The title (default: the record's file name).
    #[arg(long)]
    pub title: Option<String>,
}

/// One line of the plot: its name and (t, value) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// The flows' rates (Mbit/s) and the queue depth (KB) of a record's lines. Flows that
/// never had a rate are left out; bad lines are skipped (counted in the second value).
pub fn series(text: &str) -> (Vec<Series>, Series, usize) {
    let mut flows: Vec<Series> = Vec::new();
    let mut queue = Series {
        name: "queue depth".into(),
        points: Vec::new(),
    };
    let mut bad = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            bad += 1;
            continue;
        };
        let Some(t) = v["t"].as_f64() else {
            bad += 1;
            continue;
        };
        if let Some(q) = v["queue"]["cp_queue_bytes"].as_f64() {
            queue.points.push((t, q / 1e3));
        }
        for f in v["flows"].as_array().into_iter().flatten() {
            let (Some(name), Some(rate)) = (f["flow"].as_str(), f["rate_bps"].as_f64()) else {
                continue;
            };
            let k = match flows.iter().position(|s| s.name == name) {
                Some(k) => k,
                None => {
                    flows.push(Series {
                        name: name.into(),
                        points: Vec::new(),
                    });
                    flows.len() - 1
                }
            };
            flows[k].points.push((t, rate / 1e6));
        }
    }
    flows.sort_by(|a, b| a.name.cmp(&b.name));
    (flows, queue, bad)
}

const W: f64 = 960.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 240.0;
const COLOURS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// A "nice" axis top and step for data up to `max` (1, 2 or 5 times a power of ten).
fn nice(max: f64) -> (f64, f64) {
    let max = if max > 0.0 && max.is_finite() {
        max
    } else {
        1.0
    };
    let raw = max / 5.0;
    let p = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p);
    (step * (max / step).ceil(), step)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One panel: axes, ticks, grid, a polyline per series.
#[allow(clippy::too_many_arguments)]
fn panel(
    out: &mut String,
    top: f64,
    height: f64,
    t_max: f64,
    ylabel: &str,
    series: &[(&Series, &str, &str)],
) {
    let width = W - LEFT - RIGHT;
    let ymax = series
        .iter()
        .flat_map(|(s, _, _)| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let (ytop, ystep) = nice(ymax);
    let (xtop, xstep) = nice(t_max);
    let x = |t: f64| LEFT + t / xtop * width;
    let y = |v: f64| top + height - v / ytop * height;
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#333"/>"##
    );
    let mut v = 0.0;
    while v <= ytop + ystep / 2.0 {
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{x2}" y2="{yy:.1}" stroke="#ddd"/><text x="{tx}" y="{ty:.1}" text-anchor="end" font-size="12">{v}</text>"##,
            yy = y(v),
            x2 = LEFT + width,
            tx = LEFT - 6.0,
            ty = y(v) + 4.0,
            v = fmt_num(v)
        );
        v += ystep;
    }
    let mut t = 0.0;
    while t <= xtop + xstep / 2.0 {
        let _ = writeln!(
            out,
            r##"<line x1="{xx:.1}" y1="{b}" x2="{xx:.1}" y2="{b2}" stroke="#333"/><text x="{xx:.1}" y="{ty}" text-anchor="middle" font-size="12">{t}</text>"##,
            xx = x(t),
            b = top + height,
            b2 = top + height + 5.0,
            ty = top + height + 18.0,
            t = fmt_num(t)
        );
        t += xstep;
    }
    let _ = writeln!(
        out,
        r##"<text x="20" y="{cy:.1}" font-size="13" text-anchor="middle" transform="rotate(-90 20 {cy:.1})">{label}</text>"##,
        cy = top + height / 2.0,
        label = esc(ylabel)
    );
    for (k, (s, colour, class)) in series.iter().enumerate() {
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|&(t, v)| format!("{:.1},{:.1}", x(t), y(v)))
            .collect();
        let _ = writeln!(
            out,
            r##"<polyline class="{class}" fill="none" stroke="{colour}" stroke-width="1.8" points="{}"><title>{}</title></polyline>"##,
            pts.join(" "),
            esc(&s.name)
        );
        let ly = top + 14.0 + 18.0 * k as f64;
        let lx = LEFT + width + 16.0;
        let _ = writeln!(
            out,
            r##"<line x1="{lx}" y1="{ly}" x2="{lx2}" y2="{ly}" stroke="{colour}" stroke-width="3"/><text x="{tx}" y="{ty}" font-size="12">{}</text>"##,
            esc(&s.name),
            lx2 = lx + 20.0,
            tx = lx + 26.0,
            ty = ly + 4.0
        );
    }
}

fn fmt_num(v: f64) -> String {
    let r = (v * 1000.0).round() / 1000.0;
    if r.fract() == 0.0 {
        format!("{}", r as i64)
    } else {
        format!("{r}")
    }
}

/// The SVG of a record's series.
pub fn svg(title: &str, flows: &[Series], queue: &Series) -> String {
    let t_max = flows
        .iter()
        .chain(std::iter::once(queue))
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(0.0, f64::max);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="660" viewBox="0 0 {W} 660" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
<text x="10" y="24" font-size="14">{}</text>"##,
        esc(title)
    );
    let rows: Vec<(&Series, &str, &str)> = flows
        .iter()
        .enumerate()
        .map(|(k, s)| (s, COLOURS[k % COLOURS.len()], "flow"))
        .collect();
    panel(&mut out, 40.0, 330.0, t_max, "sending rate (Mbit/s)", &rows);
    panel(
        &mut out,
        420.0,
        190.0,
        t_max,
        "queue depth (KB)",
        &[(queue, "#000", "queue")],
    );
    let _ = writeln!(
        out,
        r##"<text x="{cx}" y="650" font-size="13" text-anchor="middle">time (s)</text>
</svg>"##,
        cx = (W - RIGHT + LEFT) / 2.0
    );
    out
}

pub fn run(args: &Args) -> i32 {
    let text = match std::fs::read_to_string(&args.input) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("roce-emu plot: {}: {e}", args.input.display());
            return 1;
        }
    };
    let (flows, queue, bad) = series(&text);
    if bad > 0 {
        eprintln!(
            "roce-emu plot: {bad} lines of {} are not a record's (skipped)",
            args.input.display()
        );
    }
    if flows.is_empty() && queue.points.is_empty() {
        eprintln!(
            "roce-emu plot: {}: nothing to draw (write it with roce-emu counters --watch SECS --record FILE)",
            args.input.display()
        );
        return 1;
    }
    let title = args
        .title
        .clone()
        .unwrap_or_else(|| args.input.display().to_string());
    if let Err(e) = std::fs::write(&args.output, svg(&title, &flows, &queue)) {
        eprintln!("roce-emu plot: {}: {e}", args.output.display());
        return 1;
    }
    println!(
        "roce-emu plot: {} flows, {} readings -> {}",
        flows.len(),
        queue.points.len(),
        args.output.display()
    );
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_axes() {
        assert_eq!(nice(950.0), (1000.0, 200.0));
        assert_eq!(nice(7.0), (8.0, 2.0));
        assert_eq!(nice(0.0), (1.0, 0.2));
    }

    /// A record of three flows (one never sending) draws as XML with one polyline per
    /// flow that sent (in name order), and one for the queue; a bad line is skipped.
    #[test]
    fn svg_parses_and_has_a_polyline_per_flow() {
        let mut text = String::new();
        for i in 0..20 {
            let t = i as f64 * 0.1;
            let line = serde_json::json!({
                "t": t,
                "queue": {"cp_queue_bytes": 1000 * i},
                "flows": [
                    {"flow": "pid 1 qp 0x000011", "rate_bps": 4e8},
                    {"flow": "pid 2 qp 0x000021", "rate_bps": if i > 0 { serde_json::json!(5e8) } else { Value::Null }},
                    {"flow": "pid 3 qp <&>", "rate_bps": null},
                ],
            });
            text.push_str(&format!("{line}\n"));
        }
        text.push_str("not json\n");
        let (flows, queue, bad) = series(&text);
        assert_eq!(bad, 1);
        assert_eq!(flows.len(), 2);
        assert_eq!(flows[1].points.len(), 19);
        assert_eq!(queue.points.len(), 20);
        let s = svg("two <flows>", &flows, &queue);
        let doc = roxmltree::Document::parse(&s).expect("the SVG is XML");
        let lines: Vec<_> = doc
            .descendants()
            .filter(|n| n.has_tag_name("polyline"))
            .collect();
        let flow_lines = lines
            .iter()
            .filter(|n| n.attribute("class") == Some("flow"))
            .count();
        assert_eq!(flow_lines, 2);
        assert_eq!(lines.len(), 3);
        assert!(doc
            .descendants()
            .any(|n| n.text() == Some("pid 2 qp 0x000021")));
        assert!(doc.descendants().any(|n| n.text() == Some("two <flows>")));
    }
}
