//! `roce-emu learn`: lessons. Each runs a short scripted exchange between two NICs in the
//! simulator (`sim::Net`: virtual time, fault rules, no randomness but fixed seeds), so
//! every run prints the same; it shows the exchange as a ladder with a few lines saying
//! what to look for and which section of the InfiniBand Architecture Specification
//! (IBA, volume 1, chapter 9: the reliable connection) says so, and checks what the
//! exchange must have done (completions, memory, counters) before it shows it.
//!
//! The lessons (design wave3 §B2, issue 24): a clean multi-packet RDMA WRITE, coalesced
//! ACKs, a lost packet and go-back-N, the RNR NAK and its timer, a lost ACK and the local
//! ACK timeout, READ responses and a lost one, an atomic executed exactly once.

pub mod draw;
mod lessons;
mod pair;

use crate::sim::Traced;
use std::fmt::Write as _;
use std::net::IpAddr;

/// A lesson that did not go as scripted (a bug in the engine or the lesson, never the
/// user's): what differed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LessonError(pub String);

/// One lesson.
pub struct Lesson {
    /// What `roce-emu learn NAME` takes.
    pub name: &'static str,
    pub title: &'static str,
    /// The IBA sections it shows.
    pub cites: &'static str,
    /// What happens, before the ladder.
    pub about: &'static str,
    /// What to look for in the ladder, one point each.
    pub look: &'static [&'static str],
    run: fn() -> Result<Outcome, LessonError>,
}

/// What a lesson's run left.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Every packet, dropped ones included, in the order they were sent.
    pub trace: Vec<Traced>,
    /// The nodes' addresses (the trace's `from`/`to` index them).
    pub addrs: Vec<IpAddr>,
    /// The requester's and the responder's QPN.
    pub qpns: (u32, u32),
    /// What the lesson checked at the end, one sentence each.
    pub results: Vec<String>,
    /// Named figures the lesson measured (memory words, counters), for tests.
    pub figures: Vec<(&'static str, u64)>,
}

impl Outcome {
    /// The figure `name`.
    pub fn figure(&self, name: &str) -> Option<u64> {
        self.figures.iter().find(|(n, _)| *n == name).map(|f| f.1)
    }
}

impl Lesson {
    /// Runs the scripted exchange (deterministic).
    pub fn run(&self) -> Result<Outcome, LessonError> {
        (self.run)()
    }
}

/// Every lesson, in teaching order.
pub fn lessons() -> &'static [Lesson] {
    lessons::ALL
}

/// The lesson called `name`.
pub fn find(name: &str) -> Option<&'static Lesson> {
    lessons().iter().find(|l| l.name == name)
}

/// `text` cut into lines of at most `width` columns (words are not split), each
/// starting with `indent`.
fn wrap(text: &str, width: usize, indent: &str, first: &str) -> String {
    let mut out = String::new();
    let mut line = first.to_string();
    let mut empty = true;
    for w in text.split_whitespace() {
        if !empty && line.chars().count() + 1 + w.chars().count() > width {
            out += line.trim_end();
            out.push('\n');
            line = indent.to_string();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line += w;
        empty = false;
    }
    if !empty {
        out += line.trim_end();
        out.push('\n');
    }
    out
}

/// The lesson as the terminal shows it: title, what happens, the ladder, what to look
/// for, what was checked.
pub fn text(l: &Lesson, o: &Outcome, d: &draw::Opts) -> String {
    let width = d.width.max(60);
    let mut out = String::new();
    out += &wrap(&format!("Lesson {}: {}", l.name, l.title), width, "  ", "");
    out += &wrap(l.cites, width, "  ", "");
    out.push('\n');
    out += &wrap(l.about, width, "", "");
    out.push('\n');
    out += &draw::text(&o.trace, &o.addrs, o.qpns, d);
    out.push('\n');
    out += "What to look for:\n";
    for p in l.look {
        out += &wrap(p, width, "    ", "  - ");
    }
    out.push('\n');
    out += "Checked after the run:\n";
    for r in &o.results {
        out += &wrap(r, width, "    ", "  - ");
    }
    out
}

/// The list `roce-emu learn --list` prints.
pub fn list() -> String {
    let mut out = String::new();
    let w = lessons().iter().map(|l| l.name.len()).max().unwrap_or(0);
    for l in lessons() {
        let _ = writeln!(out, "  {:<w$}  {}", l.name, l.title);
    }
    out
}
