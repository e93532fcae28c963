//! The terminal ladder (`roce-emu ladder`): one flow after another, each a header naming
//! its two columns (address, QPN, role) and one line per packet, time flowing down.
//!
//! The layout follows sngrep's SIP ladder: the requester's column on the left, the
//! responder's on the right, and between them one arrow per packet pointing the way the
//! packet went, its label (`RDMA_WRITE_FIRST psn=12 A len=1024`, `ACKNOWLEDGE psn=14 ACK
//! msn=3`) on the sender's side of the arrow:
//!
//! ```text
//!       time   frame 10.0.0.1 QP 0x11                          10.0.0.2 QP 0x12
//!                    ┌ requester                                       responder ┐
//!   0.000012      #3 ├─ RDMA_WRITE_FIRST psn=12 A len=1024 ──────────────────────>│
//!   0.000020      #4 │<──────────────────────────── ACKNOWLEDGE psn=12 ACK msn=1 ─┤
//! ```
//!
//! What else a teaching ladder needs (design wave3 §B2) is drawn in the line itself: a
//! retransmission (IBA §9.7.5.1.3 go-back-N, §9.7.6.1.3 timeout) dashed and marked
//! `↻ after NAK #12` / `↻ after RNR #8` / `↻ timeout`; a duplicate `dup`; a packet lost on
//! the wire ends in `✗` before the far column; what an ACK or a READ response covers
//! (§9.7.5.1.1, §9.7.5.1.2) as `covers 10-13`; PSNs never seen as `… PSN 14-16 never
//! seen`; timers as a bar on the waiting side over two lines, the wait's start and end
//! (`┃ RNR wait 1.28 ms`, `┃ ACK timeout`).
//!
//! Every line fits `TextOpts::width` (at least [`MIN_WIDTH`]): labels are shortened
//! (opcode abbreviations, compact notes, then an ellipsis), never wrapped. `ascii` draws
//! with ASCII only; `color` adds ANSI SGR escapes around the same text, so the visible
//! text, and its width, is the same either way. Output depends only on the ladder and
//! the options (golden tests, tests/ladder_text.rs).

use super::model::{Aeth, Endpoint, Fate, Flow, FlowKind, Ladder, Packet, Row, Side, WaitKind};

mod label;
use label::{duration, fit_label, ms_text};

/// Options of the drawing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextOpts {
    /// Columns every line fits in (a width below [`MIN_WIDTH`] is drawn at that).
    pub width: usize,
    /// ANSI colours (the caller decides: a terminal, `--color`, `NO_COLOR`).
    pub color: bool,
    /// ASCII only (no box drawing, arrows or symbols).
    pub ascii: bool,
}

impl Default for TextOpts {
    fn default() -> TextOpts {
        TextOpts {
            width: 100,
            color: false,
            ascii: false,
        }
    }
}

/// The narrowest drawing: the time and frame columns plus a 39-column arrow.
pub const MIN_WIDTH: usize = 60;

/// Time column: seconds since the first packet, right-aligned (`  0.001234`).
const TIME_W: usize = 10;
/// Frame column: `#12345`, right-aligned.
const FRAME_W: usize = 7;
/// Where the left column's rail is.
const LEFT: usize = TIME_W + 1 + FRAME_W + 1;

/// The whole ladder: each flow's header and rows, a blank line between flows.
pub fn render(l: &Ladder, o: &TextOpts) -> String {
    let mut out = String::new();
    for (i, f) in l.flows.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&flow_header(f, o));
        for r in &f.rows {
            out.push_str(&row(f, r, o));
        }
    }
    out
}

/// A flow's header: its kind and endpoints, then the column names over the rails. Each
/// line ends in a newline.
pub fn flow_header(f: &Flow, o: &TextOpts) -> String {
    let g = Geo::new(o);
    let gl = glyphs(o.ascii);
    let (kind, roles) = match f.kind {
        FlowKind::Rc => ("RC", ["requester", "responder"]),
        FlowKind::Uc => ("UC", ["requester", "responder"]),
        FlowKind::Ud => ("UD", ["first sender", "peer"]),
        FlowKind::Cm => ("CM", ["active", "passive"]),
    };
    let (left, right) = (
        endpoint_name(&f.requester, f.kind),
        endpoint_name(&f.responder, f.kind),
    );
    let mut out = String::new();

    // Title: `══ RC  10.0.0.1 QP 0x11 ⇄ 10.0.0.2 QP 0x12 ═══...`.
    let mut title = format!("{0}{0} {kind}  {left} {1} {right} ", gl.title, gl.both);
    if width(&title) + 2 > g.w {
        title = format!("{0}{0} {kind} ", gl.title);
    }
    let fill = g.w.saturating_sub(width(&title));
    title.extend(std::iter::repeat_n(gl.title, fill));
    let mut t = Line::default();
    t.push(&title, Style::Title);
    out.push_str(&t.finish(o.color));

    // Column names: on one line when both fit, else one line each.
    let room = g.w - LEFT;
    let (left, right) = (fit(&left, room, gl), fit(&right, room, gl));
    let heads = format!("{:>TIME_W$} {:>FRAME_W$} ", "time", "frame");
    let mut names = Line::default();
    names.push(&heads, Style::Dim);
    names.push(&left, Style::Bold);
    if width(&left) + 1 + width(&right) <= room {
        names.pad_to(g.w - width(&right));
        names.push(&right, Style::Bold);
        out.push_str(&names.finish(o.color));
    } else {
        out.push_str(&names.finish(o.color));
        let mut n2 = Line::default();
        n2.pad_to(g.w - width(&right));
        n2.push(&right, Style::Bold);
        out.push_str(&n2.finish(o.color));
    }

    // Roles over the rails: `┌ requester ... responder ┐`.
    let mut r = Line::default();
    r.pad_to(LEFT);
    r.push(&format!("{} {}", gl.corner_l, roles[0]), Style::Dim);
    let right_role = format!("{} {}", roles[1], gl.corner_r);
    r.pad_to(g.w - width(&right_role));
    r.push(&right_role, Style::Dim);
    out.push_str(&r.finish(o.color));
    out
}

/// One row: a packet's line, a gap's line, or a wait's two lines (its start and its end).
/// Each line ends in a newline.
pub fn row(f: &Flow, r: &Row, o: &TextOpts) -> String {
    let g = Geo::new(o);
    let gl = glyphs(o.ascii);
    match r {
        Row::Packet(p) => packet_line(f, p, &g, gl).finish(o.color),
        Row::Gap {
            from,
            first_psn,
            count,
            t_ns,
        } => {
            let last = first_psn.wrapping_add(count.saturating_sub(1)) & 0xff_ffff;
            let psns = if *count <= 1 {
                format!("PSN {first_psn}")
            } else {
                format!("PSN {first_psn}-{last}")
            };
            let text = format!("{} {psns} never seen", gl.ellipsis);
            let mut l = prefix(*t_ns, None, gl);
            inside(&mut l, &g, gl, *from, &text, Style::Gap, None);
            l.finish(o.color)
        }
        Row::Wait {
            side,
            kind,
            start_ns,
            end_ns,
        } => {
            let first = match kind {
                WaitKind::Rnr { ms, .. } => format!("RNR wait {}", ms_text(*ms)),
                WaitKind::AckTimeout => "ACK timeout".to_string(),
            };
            let second = format!("waited {}", duration(end_ns - start_ns, gl));
            let mut a = prefix(*start_ns, None, gl);
            inside(&mut a, &g, gl, *side, &first, Style::Wait, Some(*side));
            let mut b = prefix(*end_ns, None, gl);
            inside(&mut b, &g, gl, *side, &second, Style::Wait, Some(*side));
            let mut s = a.finish(o.color);
            s.push_str(&b.finish(o.color));
            s
        }
    }
}

/// Where things go on a line of `w` columns.
struct Geo {
    w: usize,
    /// The right column's rail (the last column of the line).
    right: usize,
}

impl Geo {
    fn new(o: &TextOpts) -> Geo {
        let w = o.width.max(MIN_WIDTH);
        Geo { w, right: w - 1 }
    }
    /// Columns strictly between the rails.
    fn inner(&self) -> usize {
        self.right - LEFT - 1
    }
}

/// The characters a drawing uses.
struct Glyphs {
    rail: char,
    line: char,
    dash: char,
    head_r: char,
    head_l: char,
    /// The sender's rail, where an arrow leaves.
    tee_l: char,
    tee_r: char,
    drop: char,
    bar: char,
    title: char,
    corner_l: char,
    corner_r: char,
    both: &'static str,
    ellipsis: &'static str,
    retx: &'static str,
    /// The mark before a compact note (`↻NAK#12`, `retx:NAK#12`).
    retx_short: &'static str,
    micro: &'static str,
}

const UNICODE: Glyphs = Glyphs {
    rail: '│',
    line: '─',
    dash: '╌',
    head_r: '>',
    head_l: '<',
    tee_l: '├',
    tee_r: '┤',
    drop: '✗',
    bar: '┃',
    title: '═',
    corner_l: '┌',
    corner_r: '┐',
    both: "⇄",
    ellipsis: "…",
    retx: "↻",
    retx_short: "↻",
    micro: "µs",
};

const ASCII: Glyphs = Glyphs {
    rail: '|',
    line: '-',
    dash: '.',
    head_r: '>',
    head_l: '<',
    tee_l: '+',
    tee_r: '+',
    drop: 'X',
    bar: '#',
    title: '=',
    corner_l: '+',
    corner_r: '+',
    both: "<->",
    ellipsis: "...",
    retx: "retx",
    retx_short: "retx:",
    micro: "us",
};

fn glyphs(ascii: bool) -> &'static Glyphs {
    if ascii {
        &ASCII
    } else {
        &UNICODE
    }
}

/// What a piece of a line is, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Plain,
    Dim,
    Bold,
    Title,
    /// A request (requester to responder).
    Req,
    /// A response or acknowledgement.
    Resp,
    Nak,
    Rnr,
    Retx,
    Drop,
    Gap,
    Wait,
}

impl Style {
    /// ANSI SGR parameters.
    fn sgr(self) -> &'static str {
        match self {
            Style::Plain => "",
            Style::Dim => "2",
            Style::Bold => "1",
            Style::Title => "1;34",
            Style::Req => "36",
            Style::Resp => "32",
            Style::Nak => "1;31",
            Style::Rnr | Style::Wait => "33",
            Style::Retx => "35",
            Style::Drop | Style::Gap => "31",
        }
    }
}

/// Columns a string takes: one per character (every glyph used here is one column wide).
fn width(s: &str) -> usize {
    s.chars().count()
}

/// One line being built: styled pieces, their width.
#[derive(Default)]
struct Line {
    segs: Vec<(String, Style)>,
    w: usize,
}

impl Line {
    fn push(&mut self, s: &str, st: Style) {
        if s.is_empty() {
            return;
        }
        self.w += width(s);
        match self.segs.last_mut() {
            Some((t, last)) if *last == st => t.push_str(s),
            _ => self.segs.push((s.to_string(), st)),
        }
    }
    fn push_char(&mut self, c: char, st: Style) {
        let mut b = [0u8; 4];
        self.push(c.encode_utf8(&mut b), st);
    }
    fn pad_to(&mut self, col: usize) {
        if col > self.w {
            let n = col - self.w;
            self.push(&" ".repeat(n), Style::Plain);
        }
    }
    /// The text with a newline; trailing blanks dropped.
    fn finish(mut self, color: bool) -> String {
        while let Some((t, _)) = self.segs.last_mut() {
            let k = t.trim_end_matches(' ').len();
            t.truncate(k);
            if t.is_empty() {
                self.segs.pop();
            } else {
                break;
            }
        }
        let mut out = String::new();
        for (t, st) in &self.segs {
            if color && *st != Style::Plain {
                out.push_str("\x1b[");
                out.push_str(st.sgr());
                out.push('m');
                out.push_str(t);
                out.push_str("\x1b[0m");
            } else {
                out.push_str(t);
            }
        }
        out.push('\n');
        out
    }
}

/// `s` in at most `n` columns: cut, with an ellipsis, when longer.
fn fit(s: &str, n: usize, gl: &Glyphs) -> String {
    if width(s) <= n {
        return s.to_string();
    }
    let e = width(gl.ellipsis);
    if n <= e {
        return s.chars().take(n).collect();
    }
    let mut t: String = s.chars().take(n - e).collect();
    let k = t.trim_end().len();
    t.truncate(k);
    t.push_str(gl.ellipsis);
    t
}

/// The column heading of an endpoint: `10.0.0.1 QP 0x11`.
fn endpoint_name(e: &Endpoint, kind: FlowKind) -> String {
    match (kind, e.qpn) {
        (FlowKind::Cm, _) => format!("{} CM (QP1)", e.ip),
        (_, Some(q)) => format!("{} QP {q:#x}", e.ip),
        (_, None) => format!("{} QP ?", e.ip),
    }
}

/// Seconds since the first packet in exactly [`TIME_W`] columns, microseconds when they
/// fit (as tshark's time column), fewer decimals for long captures.
fn time_text(t_ns: i128) -> String {
    const MAX: i128 = 9_999_999_999;
    let us = t_ns / 1_000;
    let neg = us < 0;
    let us = us.unsigned_abs();
    let secs = us / 1_000_000;
    let int = format!("{}{secs}", if neg { "-" } else { "" });
    let s = if int.len() + 7 <= TIME_W {
        format!("{int}.{:06}", us % 1_000_000)
    } else if int.len() + 2 <= TIME_W {
        let dec = TIME_W - int.len() - 1;
        let frac = (us % 1_000_000) / 10u128.pow(6 - dec as u32);
        format!("{int}.{frac:0dec$}")
    } else if int.len() <= TIME_W {
        int
    } else if neg {
        (-MAX / 10).to_string()
    } else {
        MAX.to_string()
    };
    format!("{s:>TIME_W$}")
}

fn frame_text(frame: Option<usize>, gl: &Glyphs) -> String {
    let Some(n) = frame else {
        return " ".repeat(FRAME_W);
    };
    let s = format!("#{n}");
    if width(&s) <= FRAME_W {
        return format!("{s:>FRAME_W$}");
    }
    // More than six digits: the last ones, the frame's place within its million.
    let digits = n.to_string();
    let lead = if gl.ellipsis == "…" { "…" } else { "~" };
    let keep = FRAME_W - 1;
    format!("{lead}{}", &digits[digits.len() - keep..])
}

/// Time and frame columns.
fn prefix(t_ns: i128, frame: Option<usize>, gl: &Glyphs) -> Line {
    let mut l = Line::default();
    l.push(&time_text(t_ns), Style::Dim);
    l.push(" ", Style::Plain);
    l.push(&frame_text(frame, gl), Style::Dim);
    l.push(" ", Style::Plain);
    l
}

/// Between the rails, `text` on `side`'s side (left-aligned after the left rail, or
/// right-aligned before the right one); `bar` replaces that side's rail with the timer bar.
fn inside(
    l: &mut Line,
    g: &Geo,
    gl: &Glyphs,
    side: Side,
    text: &str,
    st: Style,
    bar: Option<Side>,
) {
    let text = fit(text, g.inner() - 2, gl);
    let rail = |s: Side| {
        if bar == Some(s) {
            (gl.bar, Style::Wait)
        } else {
            (gl.rail, Style::Dim)
        }
    };
    let (lc, ls) = rail(Side::Requester);
    l.push_char(lc, ls);
    match side {
        Side::Requester => {
            l.push(" ", Style::Plain);
            l.push(&text, st);
        }
        Side::Responder => {
            l.pad_to(g.right - 1 - width(&text));
            l.push(&text, st);
        }
    }
    l.pad_to(g.right);
    let (rc, rs) = rail(Side::Responder);
    l.push_char(rc, rs);
}

/// The colour of a packet's arrow: by what it is (a request, or a response, ACK or CNP,
/// whichever side sent it: in a SEND ping-pong both sides send both).
fn packet_style(f: &Flow, p: &Packet) -> Style {
    match p.aeth {
        Some(Aeth::Nak { .. }) => return Style::Nak,
        Some(Aeth::Rnr { .. }) => return Style::Rnr,
        _ => {}
    }
    if p.retransmit.is_some() || p.duplicate {
        return Style::Retx;
    }
    let answer = p.aeth.is_some()
        || p.name.contains("ACKNOWLEDGE")
        || p.name.contains("RESPONSE")
        || p.name == "CNP";
    match (f.kind, p.from) {
        (FlowKind::Cm, Side::Requester) => Style::Req,
        (FlowKind::Cm, Side::Responder) => Style::Resp,
        _ if answer => Style::Resp,
        _ => Style::Req,
    }
}

/// `time #frame ├─ label ─────>│` (or right to left), dashed for a retransmission, cut
/// short with a cross for a packet lost on the wire.
fn packet_line(f: &Flow, p: &Packet, g: &Geo, gl: &Glyphs) -> Line {
    let mut l = prefix(p.t_ns, Some(p.frame), gl);
    let st = packet_style(f, p);
    let n = g.inner();
    // Interior: line, blank, label, blank, at least one line, the head (or a cross and a
    // blank): six columns besides the label.
    let label = fit_label(p, n - 6, gl);
    let lw = width(&label);
    let stroke = if p.retransmit.is_some() {
        gl.dash
    } else {
        gl.line
    };
    let dropped = p.fate == Fate::Dropped;
    // A lost packet's arrow ends three quarters of the way, or just after its label.
    let reach = if dropped {
        (n * 3 / 4).max(lw + 4).min(n - 1)
    } else {
        n
    };
    let run = |k: usize| stroke.to_string().repeat(k);
    match p.from {
        Side::Requester => {
            l.push_char(gl.tee_l, st);
            l.push(&format!("{stroke} "), st);
            l.push(&label, st);
            l.push(" ", st);
            let k = reach - 1 - 2 - lw - 1;
            l.push(&run(k), st);
            if dropped {
                l.push_char(gl.drop, Style::Drop);
                l.pad_to(g.right);
                l.push_char(gl.rail, Style::Dim);
            } else {
                l.push_char(gl.head_r, st);
                l.push_char(gl.rail, Style::Dim);
            }
        }
        Side::Responder => {
            l.push_char(gl.rail, Style::Dim);
            let k = reach - 1 - 2 - lw - 1;
            if dropped {
                l.pad_to(LEFT + 1 + (n - reach));
                l.push_char(gl.drop, Style::Drop);
            } else {
                l.push_char(gl.head_l, st);
            }
            l.push(&run(k), st);
            l.push(" ", st);
            l.push(&label, st);
            l.push(&format!(" {stroke}"), st);
            l.push_char(gl.tee_r, st);
        }
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_column_is_always_ten_wide() {
        for t in [
            0,
            1_234,
            12_345_678_901,
            -5_000,
            999_999_999_999_999,
            i128::MAX / 2,
        ] {
            assert_eq!(
                time_text(t).chars().count(),
                TIME_W,
                "{t}: {:?}",
                time_text(t)
            );
        }
        assert_eq!(time_text(1_234_567), "  0.001234");
        assert_eq!(time_text(12_345_678_901_000), "12345.6789");
    }

    #[test]
    fn frame_column_is_seven_wide() {
        for n in [1, 99, 999_999, 1_234_567, usize::MAX] {
            assert_eq!(frame_text(Some(n), &UNICODE).chars().count(), FRAME_W);
        }
    }
}
