//! `roce-emu pcap FILE`: decode every frame of a capture (`-`: standard input, so
//! `tcpdump -w - | roce-emu pcap -` works).
//!
//! Reads classic pcap and pcapng (pcap-file crate); links Ethernet, raw IP and Linux
//! cooked captures. One line per frame: its number, its time relative to the first frame
//! (seconds, as tshark shows it), its direction when known (`in`/`out`: pcapng
//! `epb_flags`, a Linux cooked header's packet type, or the port's own address), and the
//! decode; or with `--json` one JSON object per frame with the fields Wireshark's
//! `infiniband` dissector shows. A capture still being written (its last record cut
//! short) is read up to there. A UDP datagram holding a GSO train (several RoCE packets,
//! captured on `lo` before segmentation) is named as such and, when its packets verify,
//! decoded one by one ([`train`]). A packet to QP1 also shows the MAD it carries: a CM
//! message by name with its IDs and key fields (`wire::cm`'s one-line `Display`), another
//! class by its header; `--json` adds `mad` and `cm` objects (`mad_json.rs`). Exit status: 0, or 1 if any ICRC was bad (the frames
//! are named on stderr), or 2 if the file cannot be read.

mod json;
mod mad_json;
mod read;
pub mod train;

pub use json::to_json;
pub use read::{for_each_record, Dir, Record, Records};

use crate::wire::pretty::{self, FrameDecode, Link};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use train::Train;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The capture to read (pcap or pcapng); `-` reads standard input.
    pub file: PathBuf,
    /// One JSON object per frame instead of text.
    #[arg(long)]
    pub json: bool,
    /// The capturing port's own address (repeatable): frames from it are `out`, to it
    /// `in`, where the capture itself does not say.
    #[arg(long = "local", value_name = "ADDR")]
    pub local: Vec<IpAddr>,
}

/// Why a capture could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("not a pcap or pcapng file (magic number {0:02x?})")]
    NotPcap([u8; 4]),
    #[error("empty: no pcap header")]
    Empty,
    #[error("only {0} bytes: too short for a pcap header")]
    Short(usize),
    #[error("capture unreadable after frame {after}: {source}")]
    Format {
        after: usize,
        source: pcap_file::PcapError,
    },
}

/// What decoding a capture found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub frames: usize,
    pub roce: usize,
    pub skipped: usize,
    pub malformed: usize,
    /// 1-based numbers of the frames whose ICRC did not match.
    pub bad_icrc: Vec<usize>,
    /// GSO trains split into packets that each verify (not counted as bad ICRCs).
    pub trains: usize,
    /// The file ended inside a record: a capture still being written.
    pub incomplete: bool,
}

/// How to show frames.
#[derive(Debug, Default, Clone)]
pub struct Options {
    pub json: bool,
    /// The port's own addresses, for frames whose direction the file does not give.
    pub local: Vec<IpAddr>,
}

/// Calls `each(frame_number, link, bytes)` for every packet of a pcap or pcapng file held
/// in memory. `None` link means a link type this tool does not decode. A last record cut
/// short (a capture still being written) ends the frames.
pub fn for_each_frame(
    bytes: &[u8],
    mut each: impl FnMut(usize, Option<Link>, &[u8]),
) -> Result<usize, PcapError> {
    for_each_record(bytes, |r| each(r.n, r.link, r.data)).map(|s| s.frames)
}

/// Seconds with microseconds, as tshark's default time column (`-0.000001` before).
pub fn format_time(rel_ns: i128) -> String {
    let us = rel_ns / 1_000;
    let sign = if us < 0 { "-" } else { "" };
    let us = us.unsigned_abs();
    format!("{sign}{}.{:06}", us / 1_000_000, us % 1_000_000)
}

/// The direction of a RoCE frame from the port's own addresses: from one is `out`, to one
/// `in`; both or neither says nothing.
fn dir_by_address(d: &FrameDecode<'_>, own: &[IpAddr], local: &[IpAddr]) -> Option<Dir> {
    let FrameDecode::Roce(r) = d else { return None };
    let mine = |a: IpAddr| own.contains(&a) || local.contains(&a);
    match (mine(r.frame.ip.src()), mine(r.frame.ip.dst())) {
        (true, false) => Some(Dir::Out),
        (false, true) => Some(Dir::In),
        _ => None,
    }
}

/// One frame's output prefix: number, time, direction.
fn prefix(n: &str, time: &str, dir: Option<Dir>) -> String {
    match dir {
        Some(d) => format!("{n} {time} {} ", d.name()),
        None => format!("{n} {time} "),
    }
}

/// "GSO train of N packets, not split by the capture point".
fn train_words(t: &Train) -> String {
    let sizes = if t.last_len == t.segment_len {
        format!("{} x {} bytes", t.count, t.segment_len)
    } else {
        format!("{} x {} + {} bytes", t.count - 1, t.segment_len, t.last_len)
    };
    format!(
        "GSO train of {} packets, not split by the capture point ({sizes})",
        t.count
    )
}

/// Where and when a frame was seen.
struct Stamp {
    n: usize,
    rel_ns: i128,
    dir: Option<Dir>,
}

/// Writes one frame, text or JSON; false when the output is gone.
fn write_frame(
    out: &mut dyn Write,
    json: bool,
    st: &Stamp,
    d: &FrameDecode<'_>,
    train: Option<&Train>,
) -> bool {
    let (n, rel_ns, dir) = (st.n, st.rel_ns, st.dir);
    let time = &format_time(rel_ns);
    let decoded_segments: Vec<FrameDecode<'_>> = train
        .and_then(|t| t.segments.as_ref())
        .map(|s| s.iter().map(|f| pretty::decode(Link::Ip, f)).collect())
        .unwrap_or_default();
    if json {
        let mut v = to_json(n, d);
        if let Value::Object(o) = &mut v {
            o.insert("time".into(), json!((rel_ns / 1_000) as f64 / 1e6));
            if let Some(d) = dir {
                o.insert("direction".into(), json!(d.name()));
            }
            if let Some(t) = train {
                o.insert(
                    "train".into(),
                    json!({
                        "packets": t.count,
                        "segment_len": t.segment_len,
                        "last_len": t.last_len,
                        "split": t.split(),
                    }),
                );
                if t.split() {
                    let segs: Vec<Value> = decoded_segments
                        .iter()
                        .enumerate()
                        .map(|(k, s)| to_json(k + 1, s))
                        .collect();
                    o.insert("segments".into(), Value::Array(segs));
                }
            }
        }
        return writeln!(out, "{v}").is_ok();
    }
    let p = prefix(&n.to_string(), time, dir);
    let res = match (d, train) {
        (FrameDecode::Roce(r), Some(t)) if t.split() => {
            let (src, dst) = (r.frame.ip.src(), r.frame.ip.dst());
            let (sp, dp) = (r.frame.udp.source_port(), r.frame.udp.destination_port());
            let mut res = writeln!(
                out,
                "{p}{} -> {} {}:",
                SocketAddr::new(src, sp),
                SocketAddr::new(dst, dp),
                train_words(t)
            );
            for (k, s) in decoded_segments.iter().enumerate() {
                let sp = prefix(&format!("{n}.{}", k + 1), time, dir);
                res = res.and_then(|_| writeln!(out, "{sp}{}", text_line(s)));
            }
            res
        }
        (_, Some(t)) => writeln!(
            out,
            "{p}{} [{}; its packets' ICRCs do not verify]",
            text_line(d),
            train_words(t)
        ),
        _ => writeln!(out, "{p}{}", text_line(d)),
    };
    res.is_ok()
}

/// Decodes a capture held in memory, writing one line or JSON object per frame to `out`.
/// Never panics on any input. Output errors (a closed pipe) end the listing quietly.
pub fn decode_capture(
    bytes: &[u8],
    opts: &Options,
    out: &mut dyn Write,
) -> Result<Summary, PcapError> {
    let mut s = Summary::default();
    let mut out_ok = true;
    let mut first: Option<i128> = None;
    let st = for_each_record(bytes, |rec| {
        s.frames += 1;
        let d = match rec.link {
            Some(link) => pretty::decode(link, rec.data),
            None => FrameDecode::NotRoce("link type not decoded"),
        };
        let mut train = None;
        match &d {
            FrameDecode::NotRoce(_) => s.skipped += 1,
            FrameDecode::BadFrame(_) => s.malformed += 1,
            FrameDecode::Roce(r) => {
                s.roce += 1;
                if r.repr.is_err() {
                    s.malformed += 1;
                }
                if r.icrc.is_some_and(|i| !i.ok()) {
                    train = train::detect(r);
                    if train.as_ref().is_some_and(Train::split) {
                        s.trains += 1;
                    } else {
                        s.bad_icrc.push(rec.n);
                    }
                }
            }
        }
        if out_ok {
            let t0 = *first.get_or_insert(rec.time_ns);
            let rel = rec.time_ns - t0;
            let dir = rec.dir.or_else(|| dir_by_address(&d, rec.own, &opts.local));
            let st = Stamp {
                n: rec.n,
                rel_ns: rel,
                dir,
            };
            out_ok = write_frame(out, opts.json, &st, &d, train.as_ref());
        }
    })?;
    s.incomplete = st.incomplete;
    Ok(s)
}

/// One frame as text: `FrameDecode`'s line, with each address and port written as a
/// socket address, so IPv6 ones are bracketed (`[::1]:4791`, not the ambiguous `::1:4791`).
// The line is `wire::pretty`'s (not this module's to change); only its leading
// `SRC:PORT -> DST:PORT ` is rewritten, and left as it is should that ever change.
pub fn text_line(d: &FrameDecode<'_>) -> String {
    let line = d.to_string();
    let FrameDecode::Roce(r) = d else {
        return line;
    };
    let (src, dst) = (r.frame.ip.src(), r.frame.ip.dst());
    if src.is_ipv4() && dst.is_ipv4() {
        return line;
    }
    let (sport, dport) = (r.frame.udp.source_port(), r.frame.udp.destination_port());
    let plain = format!("{src}:{sport} -> {dst}:{dport} ");
    match line.strip_prefix(&plain) {
        Some(rest) => format!(
            "{} -> {} {rest}",
            SocketAddr::new(src, sport),
            SocketAddr::new(dst, dport)
        ),
        None => line,
    }
}

/// What `args.file` names, for messages: `-` is standard input.
pub(crate) fn display_name(file: &Path) -> String {
    if file == Path::new("-") {
        "standard input".to_string()
    } else {
        file.display().to_string()
    }
}

/// The whole capture: the file, or standard input for `-`.
pub(crate) fn read_input(file: &Path) -> std::io::Result<Vec<u8>> {
    if file == Path::new("-") {
        let mut bytes = Vec::new();
        std::io::stdin().lock().read_to_end(&mut bytes)?;
        Ok(bytes)
    } else {
        std::fs::read(file)
    }
}

/// `roce-emu pcap`.
pub fn run(args: &Args) -> i32 {
    let name = display_name(&args.file);
    let bytes = match read_input(&args.file) {
        Ok(b) => b,
        Err(source) => {
            let e = PcapError::Io { path: name, source };
            eprintln!("roce-emu pcap: {e}");
            return 2;
        }
    };
    tracing::debug!(bytes = bytes.len(), "read {name}");
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let opts = Options {
        json: args.json,
        local: args.local.clone(),
    };
    let res = decode_capture(&bytes, &opts, &mut out);
    let _ = out.flush();
    match res {
        // "FILE is empty: no pcap header", plainly.
        Err(e @ (PcapError::Empty | PcapError::Short(_))) => {
            eprintln!("roce-emu pcap: {name} is {e}");
            2
        }
        Err(e) => {
            eprintln!("roce-emu pcap: {name}: {e}");
            2
        }
        Ok(s) => {
            let trains = if s.trains > 0 {
                format!(", {} GSO trains split", s.trains)
            } else {
                String::new()
            };
            eprintln!(
                "{}: {} frames, {} RoCEv2, {} skipped, {} malformed, {} bad ICRC{trains}",
                name,
                s.frames,
                s.roce,
                s.skipped,
                s.malformed,
                s.bad_icrc.len()
            );
            if s.incomplete {
                eprintln!("(capture still being written: last record incomplete)");
            }
            if s.bad_icrc.is_empty() {
                0
            } else {
                const SHOWN: usize = 20;
                let list: Vec<String> = s
                    .bad_icrc
                    .iter()
                    .take(SHOWN)
                    .map(|n| n.to_string())
                    .collect();
                let more = s.bad_icrc.len().saturating_sub(SHOWN);
                let tail = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                eprintln!(
                    "roce-emu pcap: bad ICRC in frame(s) {}{tail}",
                    list.join(", ")
                );
                1
            }
        }
    }
}
