//! The one place the lessons draw their trace. Issue 24's ladder turns the simulator's
//! trace into rows (`ladder::source::from_trace`, `ladder::build::build`) and draws them
//! (`ladder::text::render`, `ladder::html::page`); until those are merged this file
//! draws a plain arrow per packet itself, from the same trace, so the lessons run and
//! are tested on their own. Wiring the ladder in is this file alone:
//!
//! ```text
//! fn ladder(trace: &[Traced], addrs: &[IpAddr]) -> crate::ladder::model::Ladder {
//!     let pkts = crate::ladder::source::from_trace(trace, addrs);
//!     crate::ladder::build::build(pkts.iter().map(|p| p.as_observed()))
//! }
//! pub fn text(trace, addrs, _qpns, o) -> String {
//!     let t = crate::ladder::text::TextOpts { width: o.width, color: o.color, ascii: o.ascii };
//!     crate::ladder::text::render(&ladder(trace, addrs), &t)
//! }
//! pub fn html(trace, addrs, title) -> Result<String, LessonError> {
//!     Ok(crate::ladder::html::page(&ladder(trace, addrs), title))
//! }
//! ```

use super::LessonError;
use crate::sim::rule::Verdict;
use crate::sim::Traced;
use crate::wire::{RocePacket, RoceRepr, Syndrome};
use std::fmt::Write as _;
use std::net::IpAddr;

/// How to draw.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    /// Columns of the terminal (at least 60 are used).
    pub width: usize,
    /// ANSI colour (only on a terminal, never with `NO_COLOR`).
    pub color: bool,
    /// ASCII only (no box-drawing characters).
    pub ascii: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            width: 80,
            color: false,
            ascii: false,
        }
    }
}

/// The trace's ladder as text: requester (node 0) left, responder (node 1) right, time
/// down, one arrow per packet, a dropped one ending in a cross.
pub fn text(trace: &[Traced], addrs: &[IpAddr], qpns: (u32, u32), o: &Opts) -> String {
    let width = o.width.max(60);
    // "   12345.678  " then the arrow.
    let span = width - LEAD;
    let mut out = String::new();
    let side = |i: usize, q: u32| {
        let ip = addrs.get(i).map_or("?".to_string(), |a| a.to_string());
        format!("{ip} QP {q:#x}")
    };
    let (l, r) = (side(0, qpns.0), side(1, qpns.1));
    let gap = span.saturating_sub(l.len() + r.len()).max(1);
    let _ = writeln!(out, "{:>12}  {l}{}{r}", "time (us)", " ".repeat(gap));
    for t in trace {
        let label = label(&t.bytes);
        let us = t.at.as_nanos() as f64 / 1000.0;
        let dropped = t.verdict == Verdict::Drop;
        let line = arrow(&label, t.from == 0, dropped, span, o.ascii);
        let _ = writeln!(out, "{us:>12.3}  {line}");
    }
    out
}

/// Columns before the arrows: the time.
const LEAD: usize = 14;

/// The page of the lesson's ladder (`--html`): needs the ladder's builder and page.
pub fn html(_trace: &[Traced], _addrs: &[IpAddr], _title: &str) -> Result<String, LessonError> {
    Err(LessonError(
        "--html needs the ladder's page renderer (issue 24), not in this build".into(),
    ))
}

/// `OPCODE psn=N [A] [len=N] [AETH]`, Wireshark's order.
fn label(bytes: &[u8]) -> String {
    let Ok(p) = RocePacket::new_checked(bytes) else {
        return "(malformed)".into();
    };
    let Ok(r) = RoceRepr::parse(&p) else {
        return "(malformed)".into();
    };
    let name = r.bth.opcode.name();
    let name = name.strip_prefix("RC_").unwrap_or(name);
    let mut s = format!("{name} psn={}", r.bth.psn.value());
    if r.bth.ack_req {
        s += " A";
    }
    if let Some(reth) = r.reth {
        if reth.dma_len != 0 && r.payload_len == 0 {
            let _ = write!(s, " dmalen={}", reth.dma_len);
        }
    }
    if r.payload_len > 0 {
        let _ = write!(s, " len={}", r.payload_len);
    }
    if let Some(a) = r.atomic_eth {
        let _ = write!(s, " add/swap={}", a.swap_add);
    }
    if let Some(a) = r.aeth {
        match a.syndrome {
            Syndrome::Ack { .. } => {
                let _ = write!(s, " ACK msn={}", a.msn);
            }
            Syndrome::RnrNak { timer } => {
                let ms = crate::engine::time::rnr_timer(timer).as_secs_f64() * 1000.0;
                let _ = write!(s, " RNR-NAK timer={timer} ({ms} ms)");
            }
            Syndrome::Nak(c) => {
                let _ = write!(s, " NAK code={} ({})", c as u8, c.name());
            }
        }
    }
    if let Some(a) = r.atomic_ack_eth {
        let _ = write!(s, " orig={}", a.orig);
    }
    s
}

/// One arrow `span` columns wide with its label inside (cut to fit).
fn arrow(label: &str, rightward: bool, dropped: bool, span: usize, ascii: bool) -> String {
    let (dash, head_r, head_l, cross, more) = if ascii {
        ('-', '>', '<', 'X', '~')
    } else {
        ('─', '▶', '◀', '✗', '…')
    };
    let mut label = label.to_string();
    if dropped {
        label += " (lost)";
    }
    // At least two dashes and the head besides the label and its two spaces.
    let room = span.saturating_sub(5).max(8);
    if label.chars().count() > room {
        label = label.chars().take(room - 1).collect::<String>();
        label.push(more);
    }
    let fill = span.saturating_sub(3 + label.chars().count()).max(2);
    let (pre, post) = (fill / 2, fill - fill / 2);
    let d = |n: usize| dash.to_string().repeat(n);
    match (rightward, dropped) {
        (true, false) => format!("{} {label} {}{head_r}", d(pre), d(post)),
        // Lost on the way: the arrow stops short of the other side.
        (true, true) => format!("{} {label} {}{cross}", d(pre), d(post / 3)),
        (false, false) => format!("{head_l}{} {label} {}", d(pre), d(post)),
        (false, true) => format!(
            "{}{cross}{} {label} {}",
            " ".repeat(pre - pre / 3),
            d(pre / 3),
            d(post)
        ),
    }
}
