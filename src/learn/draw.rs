//! The one place the lessons draw their trace: the simulator's packets (dropped ones
//! included) become a ladder (`ladder::source::from_trace`, `ladder::build::build`),
//! drawn in the terminal (`ladder::text::render`) or as a page (`ladder::html::page`),
//! exactly as `roce-emu ladder` draws a capture.

use super::LessonError;
use crate::ladder::{build, html as page, model::Ladder, source, text as ladder_text};
use crate::sim::Traced;
use std::net::IpAddr;

/// How to draw.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    /// Columns of the terminal (at least `ladder::text::MIN_WIDTH` are used).
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

fn ladder(trace: &[Traced], addrs: &[IpAddr]) -> Ladder {
    let pkts = source::from_trace(trace, addrs);
    build::build(pkts.iter().map(|p| p.as_observed()))
}

/// The trace's ladder as text: the requester left, the responder right, time down.
/// `_qpns`: the lesson's QPs (the ladder names them from the packets).
pub fn text(trace: &[Traced], addrs: &[IpAddr], _qpns: (u32, u32), o: &Opts) -> String {
    let t = ladder_text::TextOpts {
        width: o.width,
        color: o.color,
        ascii: o.ascii,
    };
    ladder_text::render(&ladder(trace, addrs), &t)
}

/// The page of the lesson's ladder (`--html`).
pub fn html(trace: &[Traced], addrs: &[IpAddr], title: &str) -> Result<String, LessonError> {
    Ok(page::page(&ladder(trace, addrs), title))
}
