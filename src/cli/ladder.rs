//! `roce-emu ladder FILE|-`: a capture (pcap or pcapng, any link `roce-emu pcap` reads;
//! `-` reads standard input) drawn as a ladder per QP pair, requester left, responder
//! right, time down (`ladder::text`), or written as a page (`--html`, `ladder::html`).
//!
//! The file loop is here (the `ladder` layer does no I/O): each record through
//! `ladder::source::from_frame` into the `ladder::build::Builder`, frames that are not
//! RoCEv2 counted. Filters (`--qp`, `--from`/`--to`, `--psn`) apply to the built ladder
//! (`Ladder::filtered`), so a retransmission in the window still says which NAK caused
//! it. Colour only on a terminal or with `--color always`, never with `NO_COLOR` set
//! (no-color.org) unless `--color always`; the width is `--width`, else the terminal's
//! (`COLUMNS`, else `stty size`), else 100. Exit status: 0, or 2 for a file that cannot be
//! read or a page that cannot be written.

use crate::ladder::build::Builder;
use crate::ladder::model::{Filter, Ladder};
use crate::ladder::text::{self, TextOpts, MIN_WIDTH};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// The widest drawing `--width` accepts (a sanity bound: lines are built whole).
pub const MAX_WIDTH: usize = 1000;
// The messages say the bounds as numbers.
const _: () = assert!(MIN_WIDTH == 60 && MAX_WIDTH == 1000);
/// The width when the output is not a terminal (a pipe, a file).
pub const PIPED_WIDTH: usize = 100;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The capture to draw (pcap or pcapng); `-` reads standard input.
    pub file: PathBuf,
    /// Only the flows with this QPN on either side (decimal, or hex with 0x).
    #[arg(long, value_name = "QPN", value_parser = parse_qpn)]
    pub qp: Option<u32>,
    /// Only the rows at or after this time: seconds since the first frame, as `roce-emu
    /// pcap` and tshark show them (`1.5`, or with a unit: `250ms`, `40us`).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub from: Option<i128>,
    /// Only the rows at or before this time (as --from).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub to: Option<i128>,
    /// Only the packets with a PSN from A to B, inclusive (`100-120`, or one PSN; A after
    /// B wraps past 16777215); gaps and waits among them are kept.
    #[arg(long, value_name = "A-B", value_parser = parse_psn_range)]
    pub psn: Option<PsnRange>,
    /// Columns every line fits in (60 to 1000; default: the terminal's width, or 100
    /// when the output is not a terminal). Labels are shortened to fit, never wrapped.
    #[arg(long, value_name = "N", value_parser = parse_width)]
    pub width: Option<usize>,
    /// ANSI colours: `auto` on a terminal unless NO_COLOR is set, `always`, `never`.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorWhen::Auto)]
    pub color: ColorWhen,
    /// Draw with ASCII characters only (no box drawing, arrows or symbols).
    #[arg(long)]
    pub ascii: bool,
    /// Also write the ladder as one self-contained HTML page (inline SVG, no network):
    /// every packet's fields under Wireshark's names.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Draw as the capture grows, each row as soon as it is complete: FILE is being
    /// written (a daemon's or a tool's `--pcap FILE`, `tcpdump -U -w FILE`), `-` is a
    /// stream (`tcpdump -U -w - | roce-emu ladder --live -`). Ends at the end of
    /// standard input, after --idle-exit, or at Ctrl-C.
    #[arg(long)]
    pub live: bool,
    /// With --live on a file: stop once it has not grown for this long (seconds).
    #[arg(long, value_name = "SECS", requires = "live", value_parser = parse_secs)]
    pub idle_exit: Option<std::time::Duration>,
}

/// `--idle-exit`: seconds, more than 0.
pub fn parse_secs(s: &str) -> Result<std::time::Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(std::time::Duration::from_secs_f64(v)),
        _ => Err(format!(
            "{s:?} is not a time in seconds: a number above 0, e.g. 2 or 0.5"
        )),
    }
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

/// `--psn A-B`: inclusive, modulo 2^24.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsnRange {
    pub first: u32,
    pub last: u32,
}

/// A bad option value, named with what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    #[error("{0:?} is not a QPN: a number below 16777216 (2^24), decimal or 0x hex")]
    Qpn(String),
    #[error(
        "{0:?} is not a time: seconds since the first frame, a number not below 0 \
         (e.g. 1.5), optionally with a unit s, ms, us or ns (e.g. 250ms)"
    )]
    Time(String),
    #[error("{0:?} is not a PSN range: A-B or A, PSNs below 16777216 (2^24), e.g. 100-120")]
    PsnRange(String),
    #[error("{0:?} is not a width: a number of columns from 60 to 1000")]
    Width(String),
    #[error("--from {from} is after --to {to}: nothing to draw")]
    Window { from: String, to: String },
    #[error(
        "--live draws rows as they come: --from, --to, --psn and --html need the whole \
         capture (draw the file once it is written); with --live, --qp selects flows"
    )]
    Live,
}

const PSN_SPACE: u64 = 1 << 24;

fn number(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `--qp`: a 24-bit QPN.
pub fn parse_qpn(s: &str) -> Result<u32, ArgError> {
    match number(s) {
        Some(q) if q < PSN_SPACE => Ok(q as u32),
        _ => Err(ArgError::Qpn(s.to_string())),
    }
}

/// `--from`/`--to`: nanoseconds since the first frame.
pub fn parse_time(s: &str) -> Result<i128, ArgError> {
    let bad = || ArgError::Time(s.to_string());
    let t = s.trim();
    let (num, scale) = [
        ("ns", 1.0),
        ("us", 1e3),
        ("µs", 1e3),
        ("ms", 1e6),
        ("s", 1e9),
    ]
    .iter()
    .find_map(|(u, k)| t.strip_suffix(u).map(|n| (n.trim_end(), *k)))
    .unwrap_or((t, 1e9));
    let v: f64 = num.parse().map_err(|_| bad())?;
    // At most ten years: any capture's span, far from i128's limits.
    if !v.is_finite() || v < 0.0 || v * scale > 3.2e17 {
        return Err(bad());
    }
    Ok((v * scale).round() as i128)
}

/// `--psn A-B` or `--psn A`.
pub fn parse_psn_range(s: &str) -> Result<PsnRange, ArgError> {
    let bad = || ArgError::PsnRange(s.to_string());
    let psn = |p: &str| number(p).filter(|&v| v < PSN_SPACE).map(|v| v as u32);
    let (a, b) = match s.split_once('-') {
        Some((a, b)) => (psn(a).ok_or_else(bad)?, psn(b).ok_or_else(bad)?),
        None => {
            let a = psn(s).ok_or_else(bad)?;
            (a, a)
        }
    };
    Ok(PsnRange { first: a, last: b })
}

/// `--width`.
pub fn parse_width(s: &str) -> Result<usize, ArgError> {
    match s.trim().parse::<usize>() {
        Ok(w) if (MIN_WIDTH..=MAX_WIDTH).contains(&w) => Ok(w),
        _ => Err(ArgError::Width(s.to_string())),
    }
}

/// Whether to colour: `always`, `never`, or on a terminal when `NO_COLOR` is unset or
/// empty (no-color.org: a command-line option overrides it).
pub fn use_color(when: ColorWhen, is_tty: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    match when {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => is_tty && no_color.is_none_or(|v| v.is_empty()),
    }
}

/// The drawing's width without `--width`: a terminal's (`COLUMNS` when it is a number,
/// else what `probe` finds), at least [`MIN_WIDTH`]; [`PIPED_WIDTH`] when not a terminal.
pub fn default_width(
    is_tty: bool,
    columns: Option<&str>,
    probe: impl FnOnce() -> Option<usize>,
) -> usize {
    if !is_tty {
        return PIPED_WIDTH;
    }
    let cols = columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
        .or_else(probe)
        .unwrap_or(PIPED_WIDTH);
    cols.clamp(MIN_WIDTH, MAX_WIDTH)
}

/// The terminal's columns from `stty size` on /dev/tty (std has no TIOCGWINSZ, and this
/// crate keeps its unsafe calls to two fenced modules).
fn stty_columns() -> Option<usize> {
    let tty = std::fs::File::open("/dev/tty").ok()?;
    let out = std::process::Command::new("stty")
        .arg("size")
        .stdin(tty)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let s = String::from_utf8(out.stdout).ok()?;
    s.split_whitespace().nth(1)?.parse().ok()
}

/// The filters the options ask for, `None` when there are none.
pub fn filter_of(args: &Args) -> Result<Option<Filter>, ArgError> {
    if let (Some(a), Some(b)) = (args.from, args.to) {
        if a > b {
            return Err(ArgError::Window {
                from: secs(a),
                to: secs(b),
            });
        }
    }
    if args.qp.is_none() && args.from.is_none() && args.to.is_none() && args.psn.is_none() {
        return Ok(None);
    }
    Ok(Some(Filter {
        qp: args.qp,
        from_ns: args.from,
        to_ns: args.to,
        psn: args.psn.map(|r| (r.first, r.last)),
    }))
}

fn secs(ns: i128) -> String {
    format!("{}s", ns as f64 / 1e9)
}

/// What reading a capture found besides the ladder.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReadSummary {
    pub frames: usize,
    /// Frames that are not RoCEv2 (another protocol, or a link type not decoded).
    pub not_roce: usize,
    /// The file ended inside a record: a capture still being written.
    pub incomplete: bool,
}

/// The ladder of a capture held in memory. Time is relative to the first frame, as
/// tshark's `frame.time_relative`.
pub fn ladder_of(bytes: &[u8]) -> Result<(Ladder, ReadSummary), super::pcap::PcapError> {
    let mut b = Builder::new();
    let mut s = ReadSummary::default();
    let mut first: Option<i128> = None;
    let recs = super::pcap::for_each_record(bytes, |rec| {
        s.frames += 1;
        let t0 = *first.get_or_insert(rec.time_ns);
        let Some(link) = rec.link else {
            s.not_roce += 1;
            return;
        };
        match crate::ladder::source::from_frame(rec.n, rec.time_ns - t0, link, rec.data) {
            Some(o) => {
                // The rows it completes are for live drawing; the whole ladder is drawn
                // at the end.
                let _ = b.push(&o);
            }
            None => s.not_roce += 1,
        }
    })?;
    s.incomplete = recs.incomplete;
    Ok((b.finish(), s))
}

/// `roce-emu ladder`.
pub fn run(args: &Args) -> i32 {
    let filter = match filter_of(args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("roce-emu ladder: {e}");
            return 2;
        }
    };
    let stdout = std::io::stdout();
    let tty = stdout.is_terminal();
    let opts = TextOpts {
        width: args.width.unwrap_or_else(|| {
            default_width(tty, std::env::var("COLUMNS").ok().as_deref(), stty_columns)
        }),
        color: use_color(args.color, tty, std::env::var_os("NO_COLOR").as_deref()),
        ascii: args.ascii,
    };
    if args.live {
        if let Err(e) = super::ladder_live::check(args) {
            eprintln!("roce-emu ladder: {e}");
            return 2;
        }
        return super::ladder_live::run(args, &opts, args.idle_exit);
    }
    let name = super::pcap::display_name(&args.file);
    let bytes = match super::pcap::read_input(&args.file) {
        Ok(b) => b,
        Err(source) => {
            let e = super::pcap::PcapError::Io { path: name, source };
            eprintln!("roce-emu ladder: {e}");
            return 2;
        }
    };
    let (mut ladder, summary) = match ladder_of(&bytes) {
        Ok(l) => l,
        Err(e @ (super::pcap::PcapError::Empty | super::pcap::PcapError::Short(_))) => {
            eprintln!("roce-emu ladder: {name} is {e}");
            return 2;
        }
        Err(e) => {
            eprintln!("roce-emu ladder: {name}: {e}");
            return 2;
        }
    };
    let stats = ladder.stats;
    let flows = ladder.flows.len();
    if let Some(f) = &filter {
        ladder = ladder.filtered(f);
    }
    if let Some(path) = &args.html {
        let title = format!("roce-emu ladder: {name}");
        let page = crate::ladder::html::page(&ladder, &title);
        if let Err(e) = std::fs::write(path, page) {
            eprintln!("roce-emu ladder: cannot write {}: {e}", path.display());
            return 2;
        }
    }
    let drawing = text::render(&ladder, &opts);
    {
        let mut out = std::io::BufWriter::new(stdout.lock());
        // A closed pipe (`| head`) ends the drawing quietly.
        let _ = out.write_all(drawing.as_bytes()).and_then(|_| out.flush());
    }
    let packets: usize = ladder
        .flows
        .iter()
        .map(|f| {
            f.rows
                .iter()
                .filter(|r| matches!(r, crate::ladder::model::Row::Packet(_)))
                .count()
        })
        .sum();
    let shown = if filter.is_some() {
        format!(", {packets} drawn after the filters")
    } else {
        String::new()
    };
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {many}")
        }
    };
    eprintln!(
        "{name}: {}, {} in {}{shown} ({} not RoCEv2, {} malformed, {} bad ICRC)",
        plural(summary.frames, "frame", "frames"),
        plural(stats.packets, "RoCEv2 packet", "RoCEv2 packets"),
        plural(flows, "flow", "flows"),
        summary.not_roce,
        stats.malformed,
        stats.bad_icrc
    );
    if summary.incomplete {
        eprintln!("(capture still being written: last record incomplete)");
    }
    0
}
