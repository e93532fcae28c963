//! `roce-emu ladder --live FILE|-`: the ladder drawn as the capture grows, a row as soon
//! as it is complete (`ladder::build::Builder::push`). FILE is a capture still being
//! written: a daemon's or a tool's `--pcap FILE` (pcapng, flushed as it goes), or
//! tcpdump's `-U -w FILE`; `-` reads standard input as it arrives (`tcpdump -U -w - |
//! roce-emu ladder --live -`, or a tool's `--pcap /dev/stdout`).
//!
//! The bytes read so far are parsed again from the start at each step and the frames
//! already drawn skipped: pcap and pcapng records only make sense after the file's (and,
//! for pcapng, each interface's) header, and a record cut short at the end is simply not
//! there yet (`for_each_record` stops before it). A teaching capture is thousands of
//! packets, not millions; this keeps the reader the one `roce-emu pcap` uses.
//!
//! When rows of another flow than the last drawn come, that flow's header is drawn again,
//! so every row stands under its columns. The drawing ends at the end of standard input,
//! when the file has not grown for `--idle-exit SECS`, or at Ctrl-C.

use super::ladder::{ArgError, Args};
use crate::ladder::build::Builder;
use crate::ladder::model::Flow;
use crate::ladder::text::{self, TextOpts};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// How often a file that did not grow is looked at again.
const POLL: Duration = Duration::from_millis(100);

/// Checks what `--live` cannot do: the window and PSN filters need the finished ladder
/// (a retransmission's reason, a wait's end, come after the rows they explain).
pub fn check(args: &Args) -> Result<(), ArgError> {
    if args.from.is_some() || args.to.is_some() || args.psn.is_some() || args.html.is_some() {
        return Err(ArgError::Live);
    }
    Ok(())
}

/// Where the bytes come from.
enum Input {
    Stdin(std::io::Stdin),
    File(std::fs::File),
}

impl Input {
    /// Appends what is there now; `Ok(false)` at the end of standard input.
    fn read_more(&mut self, buf: &mut Vec<u8>) -> std::io::Result<bool> {
        let mut chunk = [0u8; 64 * 1024];
        match self {
            Input::Stdin(s) => {
                let n = s.lock().read(&mut chunk)?;
                buf.extend_from_slice(&chunk[..n]);
                Ok(n > 0)
            }
            Input::File(f) => {
                // A capture rewritten from the start (a new run of the tool): begin again.
                let len = f.metadata()?.len();
                if len < buf.len() as u64 {
                    buf.clear();
                }
                f.seek(SeekFrom::Start(buf.len() as u64))?;
                f.read_to_end(buf)?;
                Ok(true)
            }
        }
    }
}

/// What has been drawn so far.
struct Drawn {
    /// Frames given to the builder (tshark's numbers: all frames, RoCE or not).
    frames: usize,
    /// The time of the first frame.
    t0: Option<i128>,
    /// The flow whose header the last rows stand under.
    last_flow: Option<usize>,
}

/// Runs the live drawing; the exit status.
pub fn run(args: &Args, opts: &TextOpts, idle_exit: Option<Duration>) -> i32 {
    let name = super::pcap::display_name(&args.file);
    let mut input = if args.file == Path::new("-") {
        Input::Stdin(std::io::stdin())
    } else {
        match std::fs::File::open(&args.file) {
            Ok(f) => Input::File(f),
            Err(e) => {
                eprintln!("roce-emu ladder: {name}: {e}");
                return 2;
            }
        }
    };
    let mut buf = Vec::new();
    let mut b = Builder::new();
    let mut d = Drawn {
        frames: 0,
        t0: None,
        last_flow: None,
    };
    let stdout = std::io::stdout();
    let mut grew_at = Instant::now();
    loop {
        let before = buf.len();
        let open = match input.read_more(&mut buf) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("roce-emu ladder: {name}: {e}");
                return 2;
            }
        };
        if buf.len() > before {
            grew_at = Instant::now();
            let out = step(&buf, &mut b, &mut d, args.qp, opts);
            let mut w = stdout.lock();
            // A closed pipe ends the drawing quietly.
            if w.write_all(out.as_bytes()).and_then(|_| w.flush()).is_err() {
                return 0;
            }
        }
        if !open {
            break;
        }
        if matches!(input, Input::File(_)) {
            if idle_exit.is_some_and(|i| grew_at.elapsed() >= i) {
                break;
            }
            if buf.len() == before {
                std::thread::sleep(POLL);
            }
        }
    }
    let s = b.stats();
    eprintln!(
        "{name}: {} frames, {} RoCEv2 packets in {} flows ({} malformed, {} bad ICRC)",
        d.frames,
        s.packets,
        b.flows().len(),
        s.malformed,
        s.bad_icrc
    );
    0
}

/// Feeds the frames not yet given to the builder; the text of the rows they completed.
fn step(buf: &[u8], b: &mut Builder, d: &mut Drawn, qp: Option<u32>, o: &TextOpts) -> String {
    let mut out = String::new();
    let done = d.frames;
    // A file that is not (yet) a capture, or whose header is still being written: try
    // again with more bytes.
    let _ = super::pcap::for_each_record(buf, |rec| {
        if rec.n <= done {
            return;
        }
        d.frames = rec.n;
        let t0 = *d.t0.get_or_insert(rec.time_ns);
        let Some(link) = rec.link else {
            return;
        };
        let Some(obs) = crate::ladder::source::from_frame(rec.n, rec.time_ns - t0, link, rec.data)
        else {
            return;
        };
        for (i, row) in b.push(&obs) {
            let f = &b.flows()[i];
            if !wanted(f, qp) {
                continue;
            }
            if d.last_flow != Some(i) {
                if d.last_flow.is_some() {
                    out.push('\n');
                }
                out.push_str(&text::flow_header(f, o));
                d.last_flow = Some(i);
            }
            out.push_str(&text::row(f, &row, o));
        }
    });
    out
}

fn wanted(f: &Flow, qp: Option<u32>) -> bool {
    qp.is_none_or(|q| f.requester.qpn == Some(q) || f.responder.qpn == Some(q))
}
