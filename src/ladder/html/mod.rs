//! The ladder as one self-contained HTML page (`roce-emu ladder --html FILE`): per flow a
//! sequence diagram in inline SVG, the requester's column left, the responder's right,
//! time down, one arrow per packet (design wave3/congestion-teaching-k8s.md §B2, §B3).
//!
//! The page fetches nothing: its CSS and its small script are inline, and a
//! Content-Security-Policy forbids every load (`default-src 'none'`), so a capture's page
//! opened from a mail or a CI artifact makes no request. It reads without JavaScript:
//! each arrow carries a `<title>` (the browser's tooltip) with every field of the packet
//! under Wireshark's names (`infiniband.bth.psn`); the script only adds a details panel
//! (hover, click to pin, or focus with the keyboard) built from that same title, and
//! opens on one packet when the address ends in `#frame-N`.
//!
//! The markup is also well-formed XML (every element closed, the script in a commented
//! CDATA section, only the five XML escapes), so tests parse it with an XML parser.
//! Every string from the ladder (labels, CM summaries, field values, the title) is
//! escaped; control characters become U+FFFD.
//!
//! Each arrow is `<g class="pkt ..." data-frame data-psn data-opcode ...>` holding the
//! `<title>`, the arrow's line and head (a dropped packet's line stops short in a cross,
//! a retransmission's is dashed), its label `<text class="lbl">` (the model's label, cut
//! with an ellipsis when it is too long to fit; the whole of it is in `data-label` and
//! the title), and its frame, time and notes (retransmitted and why, duplicate, what an
//! ACK or READ response covers, CE, a bad ICRC, the CM message).

use super::model::{
    Aeth, Covers, Fate, Flow, FlowKind, Ladder, Packet, Retransmit, Row, Side, WaitKind,
};
use std::collections::HashMap;
use std::fmt::Write;

mod assets;
use assets::{CSS, JS, LEGEND};

/// The requester's and the responder's column (SVG x), and where the notes start.
const XL: f64 = 190.0;
const XR: f64 = 700.0;
const X_NOTES: f64 = 755.0;
const SVG_W: f64 = 1100.0;
/// The frame number and the time, left of the brackets.
const X_TIME: f64 = 46.0;
/// The column boxes' height, then one slot per row.
const HEAD_H: f64 = 62.0;
const PITCH: f64 = 26.0;
/// How far an arrow falls from its sender to its receiver (time passes on the wire).
const SLOPE: f64 = 8.0;
/// A dropped packet's arrow stops this far across, in a cross.
const DROP_AT: f64 = 0.6;
/// How many characters of a label fit between the columns (12 px monospace, about 7.3 px
/// a character, leaving a margin), and of the notes right of the diagram (11 px). Longer ones are cut with
/// an ellipsis (the model lets a renderer shorten a label, never reorder it); the whole
/// text is in the arrow's title and `data-label`.
const LABEL_CHARS: usize = 62;
const NOTE_CHARS: usize = 52;
/// At most this many covered requests get a tick on an ACK's bracket.
const MAX_TICKS: u32 = 64;

/// The whole page: a header (title, counts), one section per flow, and a side panel with
/// the legend and the packet details.
pub fn page(l: &Ladder, title: &str) -> String {
    page_parts(&[("", l)], title)
}

/// One page of several ladders, each under its name (a conformance run: a part per
/// script and target); the flows are numbered through the page. An empty name adds no
/// heading.
pub fn page_parts(parts: &[(&str, &Ladder)], title: &str) -> String {
    let mut stats = crate::ladder::model::Stats::default();
    let mut nflows = 0;
    for (_, l) in parts {
        stats.packets += l.stats.packets;
        stats.malformed += l.stats.malformed;
        stats.bad_icrc += l.stats.bad_icrc;
        nflows += l.flows.len();
    }
    let rows: usize = parts
        .iter()
        .flat_map(|(_, l)| l.flows.iter())
        .map(|f| f.rows.len())
        .sum();
    let mut out = String::with_capacity(4096 + rows * 900);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n");
    out.push_str(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\"/>\n",
    );
    out.push_str("<meta name=\"generator\" content=\"roce-emu ladder\"/>\n<title>");
    esc(&mut out, title);
    out.push_str("</title>\n<style>");
    out.push_str(CSS);
    out.push_str("</style>\n</head>\n<body>\n<main>\n<h1>");
    esc(&mut out, title);
    out.push_str("</h1>\n<p class=\"summary\">");
    let s = &stats;
    let _ = write!(
        out,
        "{} flow{}, {} packet{} read ({} not RoCE or malformed, {} with a bad ICRC).",
        nflows,
        plural(nflows),
        s.packets,
        plural(s.packets),
        s.malformed,
        s.bad_icrc
    );
    out.push_str(
        " <span class=\"nojs\">Hover an arrow for every field of its packet.</span>\
         <span class=\"jsonly\">Hover, click (to pin) or tab to an arrow: its fields are \
         shown on the right.</span></p>\n",
    );
    if nflows == 0 && parts.iter().all(|(name, _)| name.is_empty()) {
        out.push_str("<p class=\"empty\">No RoCE packets.</p>\n");
    }
    let mut i = 0;
    for (name, l) in parts {
        if !name.is_empty() {
            out.push_str("<h2 class=\"part\">");
            esc(&mut out, name);
            out.push_str("</h2>\n");
            if l.flows.is_empty() {
                out.push_str("<p class=\"empty\">No RoCE packets.</p>\n");
            }
        }
        for f in &l.flows {
            flow(&mut out, i, f);
            i += 1;
        }
    }
    out.push_str("</main>\n<aside>\n");
    out.push_str(LEGEND);
    out.push_str(
        "<section id=\"details\" aria-live=\"polite\"><h2>Packet</h2>\
         <p id=\"details-hint\">No packet chosen.</p></section>\n</aside>\n",
    );
    out.push_str("<script>//<![CDATA[\n");
    out.push_str(JS);
    out.push_str("//]]></script>\n</body>\n</html>\n");
    out
}

/// One flow: a heading and its diagram.
fn flow(out: &mut String, i: usize, f: &Flow) {
    let kind = kind_name(f.kind);
    let packets = f
        .rows
        .iter()
        .filter(|r| matches!(r, Row::Packet(_)))
        .count();
    let _ = write!(
        out,
        "<section class=\"flow\" id=\"flow-{n}\" data-kind=\"{lower}\">\n<h2>Flow {n}: {kind} ",
        n = i + 1,
        lower = kind.to_ascii_lowercase(),
    );
    out.push_str(&endpoint_text(f.requester.ip, f.requester.qpn));
    out.push_str(" \u{21c4} ");
    out.push_str(&endpoint_text(f.responder.ip, f.responder.qpn));
    let _ = writeln!(out, ", {} packet{}</h2>", packets, plural(packets));

    let height = HEAD_H + 18.0 + f.rows.len() as f64 * PITCH + 12.0;
    let _ = writeln!(
        out,
        "<svg class=\"ladder\" width=\"{SVG_W}\" height=\"{height}\" \
         viewBox=\"0 0 {SVG_W} {height}\">"
    );
    let _ = writeln!(
        out,
        "<text class=\"flowname\" x=\"6\" y=\"20\">flow {}</text>\
         <text class=\"flowname\" x=\"6\" y=\"36\">{}</text>",
        i + 1,
        kind
    );
    // A CM exchange has an active side (it sent the REQ) and a passive one (IBA 12.6).
    let (left, right) = match f.kind {
        FlowKind::Cm => ("active side", "passive side"),
        _ => ("requester", "responder"),
    };
    column_head(out, XL, left, f.requester.ip, f.requester.qpn);
    column_head(out, XR, right, f.responder.ip, f.responder.qpn);
    let _ = writeln!(
        out,
        "<line class=\"life\" x1=\"{XL}\" y1=\"{HEAD_H}\" x2=\"{XL}\" y2=\"{height}\"/>\
         <line class=\"life\" x1=\"{XR}\" y1=\"{HEAD_H}\" x2=\"{XR}\" y2=\"{height}\"/>"
    );

    let mut st = FlowState::default();
    for (r, row) in f.rows.iter().enumerate() {
        let y = HEAD_H + 18.0 + r as f64 * PITCH;
        match row {
            Row::Packet(p) => packet(out, &mut st, p, y),
            Row::Gap {
                from,
                first_psn,
                count,
                t_ns,
            } => gap(out, *from, *first_psn, *count, *t_ns, y),
            Row::Wait {
                side,
                kind,
                start_ns,
                end_ns,
            } => wait(out, &st, *side, kind, *start_ns, *end_ns, y),
        }
    }
    out.push_str("</svg>\n</section>\n");
}

/// `10.0.0.1 QP 0x000011` (escaped: an address prints no markup, but the rule holds).
fn endpoint_text(ip: std::net::IpAddr, qpn: Option<u32>) -> String {
    let mut s = String::new();
    esc(&mut s, &ip.to_string());
    s.push_str(" QP ");
    s.push_str(&qpn_text(qpn));
    s
}

fn qpn_text(qpn: Option<u32>) -> String {
    match qpn {
        Some(q) => format!("0x{q:06x}"),
        None => "?".to_string(),
    }
}

fn column_head(out: &mut String, x: f64, role: &str, ip: std::net::IpAddr, qpn: Option<u32>) {
    let _ = write!(
        out,
        "<g class=\"colhead\"><rect x=\"{}\" y=\"4\" width=\"200\" height=\"{}\" rx=\"4\"/>\
         <text x=\"{x}\" y=\"18\" class=\"role\">{role}</text><text x=\"{x}\" y=\"34\">",
        x - 100.0,
        HEAD_H - 12.0
    );
    esc(out, &ip.to_string());
    let _ = writeln!(
        out,
        "</text><text x=\"{x}\" y=\"48\">QP {}</text></g>",
        qpn_text(qpn)
    );
}

/// What the diagram has drawn so far, for brackets and timer bars.
#[derive(Default)]
struct FlowState {
    /// The y where each side's latest packet with a PSN arrived (or was lost).
    last_y: [HashMap<u32, f64>; 2],
    /// Packet rows' times and ys, in order.
    times: Vec<(i128, f64)>,
    /// Brackets drawn so far (their nesting level cycles).
    brackets: usize,
    /// The request whose READ/atomic responses got a bracket last: one bracket per
    /// request (on its first response), not one per response packet.
    answered: Option<usize>,
}

fn side_ix(s: Side) -> usize {
    match s {
        Side::Requester => 0,
        Side::Responder => 1,
    }
}

fn col_x(s: Side) -> f64 {
    match s {
        Side::Requester => XL,
        Side::Responder => XR,
    }
}

fn other(s: Side) -> Side {
    match s {
        Side::Requester => Side::Responder,
        Side::Responder => Side::Requester,
    }
}

fn packet(out: &mut String, st: &mut FlowState, p: &Packet, y: f64) {
    let class = kind_class(p);
    let dropped = p.fate == Fate::Dropped;
    let _ = write!(
        out,
        "<g class=\"pkt {class}{}{}{}\" tabindex=\"0\" data-frame=\"{}\" data-psn=\"{}\" \
         data-opcode=\"{}\" data-name=\"{}\" data-from=\"{}\" data-fate=\"{}\" data-t-ns=\"{}\"",
        if p.retransmit.is_some() { " retx" } else { "" },
        if dropped { " dropped" } else { "" },
        if p.duplicate { " dup" } else { "" },
        p.frame,
        p.psn,
        p.opcode,
        p.name,
        side_name(p.from),
        if dropped { "dropped" } else { "delivered" },
        p.t_ns
    );
    if let Some(r) = p.retransmit {
        let _ = write!(out, " data-retransmit=\"{}\"", retransmit_key(r));
    }
    // The whole label, whatever the arrow shows of it.
    out.push_str(" data-label=\"");
    esc(out, &p.label);
    out.push('"');
    out.push_str(">\n<title>");
    let notes = notes(p);
    let mut t = format!(
        "frame {}  t={} s  {} \u{2192} {}\n{}\n",
        p.frame,
        fmt_time(p.t_ns),
        side_name(p.from),
        side_name(other(p.from)),
        p.label
    );
    for n in &notes {
        t.push_str(n);
        t.push('\n');
    }
    for f in &p.fields {
        let _ = writeln!(t, "{} = {}", f.name, f.value);
    }
    esc(out, t.trim_end());
    out.push_str("</title>\n");

    // The arrow: from the sender's column to the receiver's, falling SLOPE. The line is
    // written left to right whatever the direction, so a dashed line's pattern starts at
    // the requester's column on every arrow.
    let x0 = col_x(p.from);
    let x1 = col_x(other(p.from));
    let frac = if dropped { DROP_AT } else { 1.0 };
    let (xe, ye) = (x0 + (x1 - x0) * frac, y + SLOPE * frac);
    let (dx, dy) = (x1 - x0, SLOPE);
    let len = (dx * dx + dy * dy).sqrt();
    let (ux, uy) = (dx / len, dy / len);
    // Delivered: the line stops at the head's base; the head is a filled triangle.
    let (lx, ly) = if dropped {
        (xe, ye)
    } else {
        (xe - ux * 9.0, ye - uy * 9.0)
    };
    let (ax, ay, bx, by) = if x0 < lx {
        (x0, y, lx, ly)
    } else {
        (lx, ly, x0, y)
    };
    let _ = write!(
        out,
        "<line class=\"hit\" x1=\"{x0}\" y1=\"{y}\" x2=\"{xe:.1}\" y2=\"{ye:.1}\"/>\
         <line class=\"arrow\" x1=\"{ax:.1}\" y1=\"{ay:.1}\" x2=\"{bx:.1}\" y2=\"{by:.1}\"/>"
    );
    if dropped {
        let _ = write!(
            out,
            "<path class=\"cross\" d=\"M{:.1},{:.1}l10,10m0,-10l-10,10\"/>",
            xe - 5.0,
            ye - 5.0
        );
    } else {
        let (px, py) = (-uy, ux);
        let _ = write!(
            out,
            "<polygon class=\"head\" points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\"/>",
            xe,
            ye,
            xe - ux * 9.0 + px * 4.0,
            ye - uy * 9.0 + py * 4.0,
            xe - ux * 9.0 - px * 4.0,
            ye - uy * 9.0 - py * 4.0
        );
    }
    let _ = write!(
        out,
        "\n<text class=\"lbl\" x=\"{}\" y=\"{:.1}\">",
        (XL + XR) / 2.0,
        y + SLOPE / 2.0 - 7.0
    );
    esc(out, &fit(&p.label, LABEL_CHARS));
    let _ = write!(
        out,
        "</text><text class=\"frame\" x=\"6\" y=\"{:.1}\">#{}</text>\
         <text class=\"time\" x=\"{}\" y=\"{:.1}\">{}</text>",
        y + 4.0,
        p.frame,
        X_TIME,
        y + 4.0,
        fmt_time(p.t_ns)
    );
    if !notes.is_empty() {
        let _ = write!(
            out,
            "<text class=\"note\" x=\"{X_NOTES}\" y=\"{:.1}\">",
            y + 4.0
        );
        esc(out, &fit(&notes.join(" \u{b7} "), NOTE_CHARS));
        out.push_str("</text>");
    }
    if let Some(c) = p.covers {
        bracket(out, st, p, &c, y + SLOPE);
    }
    out.push_str("</g>\n");

    st.last_y[side_ix(p.from)].insert(p.psn, ye);
    st.times.push((p.t_ns, ye));
}

/// A bracket beside the column of the requests' sender, from the first covered request
/// down to where the ACK (or response) arrives, with a tick at each covered request.
fn bracket(out: &mut String, st: &mut FlowState, p: &Packet, c: &Covers, y_ack: f64) {
    if c.request_frame.is_some() {
        if st.answered == c.request_frame {
            return;
        }
        st.answered = c.request_frame;
    }
    let senders = other(p.from);
    let seen = &st.last_y[side_ix(senders)];
    let count = c.last_psn.wrapping_sub(c.first_psn) & 0xff_ffff;
    let mut ys: Vec<f64> = Vec::new();
    let mut look = |k: u32| {
        if let Some(&y) = seen.get(&(c.first_psn.wrapping_add(k) & 0xff_ffff)) {
            ys.push(y);
        }
    };
    if count < MAX_TICKS {
        (0..=count).for_each(&mut look);
    } else {
        (0..MAX_TICKS / 2).for_each(&mut look);
        (count - MAX_TICKS / 2..=count).for_each(&mut look);
    }
    if ys.is_empty() {
        return;
    }
    let top = ys.iter().copied().fold(f64::INFINITY, f64::min).min(y_ack);
    let level = (st.brackets % 6) as f64;
    st.brackets += 1;
    // Left of the requester's column, or right of the responder's.
    let (col, dir) = match senders {
        Side::Requester => (XL, -1.0),
        Side::Responder => (XR, 1.0),
    };
    let bx = col + dir * (12.0 + level * 7.0);
    let near = col + dir * 3.0;
    let mut d = format!("M{near},{top:.1}H{bx}V{y_ack:.1}H{near}");
    for y in &ys {
        let _ = write!(d, "M{bx},{y:.1}H{near}");
    }
    let _ = write!(out, "<path class=\"covers\" d=\"{d}\"/>");
}

/// PSNs that were never seen: a grey dotted stub from the sender's column.
fn gap(out: &mut String, from: Side, first: u32, count: u32, t_ns: i128, y: f64) {
    let last = first.wrapping_add(count.saturating_sub(1)) & 0xff_ffff;
    let x0 = col_x(from);
    let x1 = x0 + (col_x(other(from)) - x0) * 0.25;
    // The text starts past the stub's end, on the side of the receiver.
    let (tx, anchor) = if from == Side::Requester {
        (x1 + 8.0, "start")
    } else {
        (x1 - 8.0, "end")
    };
    let what = if count == 1 {
        format!("PSN {first} never seen")
    } else {
        format!("PSNs {first}\u{2013}{last} never seen ({count} packets)")
    };
    let _ = writeln!(
        out,
        "<g class=\"gap\" data-from=\"{}\" data-first-psn=\"{first}\" data-count=\"{count}\">\
         <title>{} (the {} sent them: they were lost before the capture point) at t={} s\
         </title><line x1=\"{x0}\" y1=\"{y}\" x2=\"{x1}\" y2=\"{:.1}\"/>\
         <text class=\"gaplbl\" x=\"{tx}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{}</text></g>",
        side_name(from),
        what,
        side_name(from),
        fmt_time(t_ns),
        y + SLOPE * 0.25,
        y + 4.0,
        what
    );
}

/// A timer that ran: a bar on `side`'s column from where it started (the latest packet
/// row at or before `start_ns`) down to this row, and a note.
fn wait(
    out: &mut String,
    st: &FlowState,
    side: Side,
    kind: &WaitKind,
    start_ns: i128,
    end_ns: i128,
    y: f64,
) {
    let i = st.times.partition_point(|&(t, _)| t <= start_ns);
    let top = if i == 0 {
        y - PITCH / 2.0
    } else {
        st.times[i - 1].1
    };
    let bottom = y + PITCH * 0.6;
    let took = fmt_ms(end_ns - start_ns);
    // The note is short (it must fit right of the diagram); the title says it all.
    let (class, note, what) = match kind {
        WaitKind::Rnr { timer, ms } => (
            "rnr",
            format!("RNR wait {took} (timer {timer} = {ms} ms)"),
            format!(
                "RNR wait: the RNR NAK's timer {timer} means {ms} ms (IBA Table 45); the \
                 requester waited {took}, then sent again (IBA 9.7.5.2.8)"
            ),
        ),
        WaitKind::AckTimeout => (
            "timeout",
            format!("ACK timeout: {took} without an ACK"),
            format!(
                "local ACK timeout: no ACK for {took}, the requester sent again from the \
                 oldest unacknowledged PSN (IBA 9.7.6.1.3)"
            ),
        ),
    };
    let _ = writeln!(
        out,
        "<g class=\"wait {class}\" data-side=\"{}\" data-start-ns=\"{start_ns}\" \
         data-end-ns=\"{end_ns}\"><title>{what}</title>\
         <rect x=\"{}\" y=\"{top:.1}\" width=\"8\" height=\"{:.1}\" rx=\"2\"/>\
         <text class=\"note\" x=\"{X_NOTES}\" y=\"{:.1}\">{note}</text></g>",
        side_name(side),
        col_x(side) - 4.0,
        (bottom - top).max(2.0),
        y + 4.0
    );
}

/// The arrow's colour class.
fn kind_class(p: &Packet) -> &'static str {
    if p.cm.is_some() {
        return "cm";
    }
    if p.name == "CNP" {
        return "cnp";
    }
    match p.aeth {
        Some(Aeth::Nak { .. }) => "nak",
        Some(Aeth::Rnr { .. }) => "rnr",
        Some(Aeth::Ack { .. }) => "resp",
        None if p.name.contains("RESPONSE") || p.name.contains("ACKNOWLEDGE") => "resp",
        None => "req",
    }
}

/// What the label does not say: why a packet was sent again, what it covers, marks.
fn notes(p: &Packet) -> Vec<String> {
    let mut n = Vec::new();
    if p.fate == Fate::Dropped {
        n.push("\u{2717} dropped on the wire".to_string());
    }
    match p.retransmit {
        Some(Retransmit::AfterNak { nak_frame }) => n.push(format!(
            "\u{21bb} retransmitted after the NAK in #{nak_frame}"
        )),
        Some(Retransmit::AfterRnr { rnr_frame }) => n.push(format!(
            "\u{21bb} retransmitted after the RNR NAK in #{rnr_frame}"
        )),
        Some(Retransmit::AfterTimeout) => {
            n.push("\u{21bb} retransmitted after the ACK timeout".to_string())
        }
        None => {}
    }
    if p.duplicate {
        n.push("dup: answered from the replay state".to_string());
    }
    if let Some(c) = p.covers {
        let psns = if c.first_psn == c.last_psn {
            format!("PSN {}", c.first_psn)
        } else {
            format!("PSNs {}\u{2013}{}", c.first_psn, c.last_psn)
        };
        match c.request_frame {
            Some(f) => n.push(format!("answers #{f} ({psns})")),
            None => n.push(format!("covers {psns}")),
        }
    }
    match p.aeth {
        Some(Aeth::Ack { credits, msn }) => n.push(format!("ACK credits={credits} msn={msn}")),
        Some(Aeth::Rnr { timer, ms, msn }) => {
            n.push(format!("RNR NAK timer={timer} ({ms} ms) msn={msn}"))
        }
        Some(Aeth::Nak { code, msn }) => n.push(format!("NAK {} msn={msn}", nak_name(code))),
        None => {}
    }
    if let Some(cm) = &p.cm {
        // A CM arrow's label is often the summary itself.
        if !p.label.contains(cm.as_str()) {
            n.push(format!("CM {cm}"));
        }
    }
    if p.ecn == 3 {
        n.push("ECN CE".to_string());
    }
    if p.becn {
        n.push("BECN".to_string());
    }
    if p.icrc_ok == Some(false) {
        n.push("bad ICRC".to_string());
    }
    n
}

fn nak_name(code: u8) -> String {
    match code {
        0 => "PSN sequence error".to_string(),
        1 => "invalid request".to_string(),
        2 => "remote access error".to_string(),
        3 => "remote operational error".to_string(),
        4 => "invalid RD request".to_string(),
        c => format!("code {c}"),
    }
}

fn retransmit_key(r: Retransmit) -> &'static str {
    match r {
        Retransmit::AfterNak { .. } => "nak",
        Retransmit::AfterRnr { .. } => "rnr",
        Retransmit::AfterTimeout => "timeout",
    }
}

fn side_name(s: Side) -> &'static str {
    match s {
        Side::Requester => "requester",
        Side::Responder => "responder",
    }
}

fn kind_name(k: FlowKind) -> &'static str {
    match k {
        FlowKind::Rc => "RC",
        FlowKind::Uc => "UC",
        FlowKind::Ud => "UD",
        FlowKind::Cm => "CM",
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `s` cut to `max` characters, the last an ellipsis, when it is longer.
fn fit(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.chars().count() <= max {
        return s.into();
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('\u{2026}');
    t.into()
}

/// Seconds with microseconds, as tshark's `frame.time_relative` to 6 places.
fn fmt_time(t_ns: i128) -> String {
    let sign = if t_ns < 0 { "-" } else { "" };
    let us = t_ns.unsigned_abs() / 1000;
    format!("{sign}{}.{:06}", us / 1_000_000, us % 1_000_000)
}

/// A duration in milliseconds, to the microsecond.
fn fmt_ms(ns: i128) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let us = ns.unsigned_abs() / 1000;
    format!("{sign}{}.{:03} ms", us / 1000, us % 1000)
}

/// Appends `s` as text or a double-quoted attribute's value: the five XML escapes, and
/// control characters (not allowed in XML, bar tab and newline) as U+FFFD.
fn esc(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' => out.push(c),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
}
