//! `roce-emu pcap FILE`: decode every frame of a capture (`-`: standard input, so
//! `tcpdump -w - | roce-emu pcap -` works).
//!
//! Reads classic pcap and pcapng (pcap-file crate); links Ethernet, raw IP and Linux
//! cooked captures. One line per frame, or with `--json` one JSON object per frame with
//! the fields Wireshark's `infiniband` dissector shows. Exit status: 0, or 1 if any ICRC
//! was bad (the frames are named on stderr), or 2 if the file cannot be read.

use crate::wire::pretty::{self, FrameDecode, Link, RoceDecode};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;
use serde_json::{json, Map, Value};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The capture to read (pcap or pcapng); `-` reads standard input.
    pub file: PathBuf,
    /// One JSON object per frame instead of text.
    #[arg(long)]
    pub json: bool,
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
}

const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

fn link_of(dl: DataLink) -> Option<Link> {
    match dl {
        DataLink::ETHERNET => Some(Link::Ethernet),
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Some(Link::Ip),
        DataLink::LINUX_SLL => Some(Link::LinuxSll),
        DataLink::LINUX_SLL2 => Some(Link::LinuxSll2),
        _ => None,
    }
}

/// Calls `each(frame_number, link, bytes)` for every packet of a pcap or pcapng file held
/// in memory. `None` link means a link type this tool does not decode.
pub fn for_each_frame(
    bytes: &[u8],
    mut each: impl FnMut(usize, Option<Link>, &[u8]),
) -> Result<usize, PcapError> {
    let magic: [u8; 4] = match bytes.get(..4).and_then(|m| m.try_into().ok()) {
        Some(m) => m,
        None if bytes.is_empty() => return Err(PcapError::Empty),
        None => return Err(PcapError::Short(bytes.len())),
    };
    let mut n = 0;
    let fmt_err = |after, source| PcapError::Format { after, source };
    if magic == PCAPNG_MAGIC {
        let mut r = PcapNgReader::new(bytes).map_err(|e| fmt_err(0, e))?;
        // Link types by interface id, per section (the reader's own list is borrowed
        // while a block is alive).
        let mut links: Vec<Option<Link>> =
            r.interfaces().iter().map(|i| link_of(i.linktype)).collect();
        while let Some(block) = r.next_block() {
            let block = block.map_err(|e| fmt_err(n, e))?;
            let (iface, data): (u32, &[u8]) = match &block {
                Block::SectionHeader(_) => {
                    links.clear();
                    continue;
                }
                Block::InterfaceDescription(i) => {
                    links.push(link_of(i.linktype));
                    continue;
                }
                Block::EnhancedPacket(p) => (p.interface_id, &p.data),
                Block::SimplePacket(p) => (0, &p.data),
                Block::Packet(p) => (u32::from(p.interface_id), &p.data),
                _ => continue,
            };
            n += 1;
            each(n, links.get(iface as usize).copied().flatten(), data);
        }
    } else {
        let mut r = PcapReader::new(bytes).map_err(|e| match e {
            pcap_file::PcapError::InvalidField(_) => PcapError::NotPcap(magic),
            e => fmt_err(0, e),
        })?;
        let link = link_of(r.header().datalink);
        let snap_len = r.header().snaplen;
        // Raw records: pcap-file 2.0's checked `next_packet` refuses a frame whose original
        // length exceeds the snap length, which is what every truncated (`-s N`) capture
        // holds. The one check that matters, what is stored fits the snap length, is here.
        while let Some(p) = r.next_raw_packet() {
            let p = p.map_err(|e| fmt_err(n, e))?;
            if p.incl_len > snap_len.max(p.orig_len) {
                return Err(fmt_err(
                    n,
                    pcap_file::PcapError::InvalidField("PacketHeader incl_len > snap_len"),
                ));
            }
            n += 1;
            each(n, link, &p.data);
        }
    }
    Ok(n)
}

/// Decodes a capture held in memory, writing one line or JSON object per frame to `out`.
/// Never panics on any input. Output errors (a closed pipe) end the listing quietly.
pub fn decode_capture(bytes: &[u8], json: bool, out: &mut dyn Write) -> Result<Summary, PcapError> {
    let mut s = Summary::default();
    let mut out_ok = true;
    for_each_frame(bytes, |n, link, data| {
        s.frames += 1;
        let d = match link {
            Some(link) => pretty::decode(link, data),
            None => FrameDecode::NotRoce("link type not decoded"),
        };
        match &d {
            FrameDecode::NotRoce(_) => s.skipped += 1,
            FrameDecode::BadFrame(_) => s.malformed += 1,
            FrameDecode::Roce(r) => {
                s.roce += 1;
                if r.repr.is_err() {
                    s.malformed += 1;
                }
                if r.icrc.is_some_and(|i| !i.ok()) {
                    s.bad_icrc.push(n);
                }
            }
        }
        if out_ok {
            let res = if json {
                writeln!(out, "{}", to_json(n, &d))
            } else {
                writeln!(out, "{n} {}", text_line(&d))
            };
            out_ok = res.is_ok();
        }
    })?;
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

/// A 64-bit field as a JSON string, `"0x..."`: jq (and JavaScript) read JSON numbers as
/// doubles, which keep 53 bits, so a VA like 0x7f00_0000_0001_2345 or an atomic operand
/// would come out altered. The 32-bit and smaller fields stay numbers.
fn u64_json(v: u64) -> Value {
    Value::String(format!("{v:#x}"))
}

/// The JSON object of one frame. Keys follow the list; numbers are JSON numbers,
/// except the 64-bit fields (`reth.va`, `atomiceth.va`, `.swap_add`, `.compare`,
/// `atomicacketh.orig`), which are `"0x..."` strings (see `u64_json`).
pub fn to_json(n: usize, d: &FrameDecode<'_>) -> Value {
    let mut o = Map::new();
    o.insert("frame".into(), json!(n));
    match d {
        FrameDecode::NotRoce(why) => {
            o.insert("skipped".into(), json!(why));
        }
        FrameDecode::BadFrame(e) => {
            error_fields(&mut o, e);
        }
        FrameDecode::Roce(r) => roce_fields(&mut o, r),
    }
    Value::Object(o)
}

fn error_fields(o: &mut Map<String, Value>, e: &crate::wire::WireError) {
    o.insert("error".into(), json!(e.to_string()));
    if let Some(h) = e.header() {
        o.insert("error_header".into(), json!(h.name()));
    }
    if let crate::wire::WireError::Truncated { offset, .. } = e {
        o.insert("error_offset".into(), json!(offset));
    }
}

fn roce_fields(o: &mut Map<String, Value>, r: &RoceDecode<'_>) {
    o.insert("src".into(), json!(r.frame.ip.src().to_string()));
    o.insert("dst".into(), json!(r.frame.ip.dst().to_string()));
    o.insert("udp_sport".into(), json!(r.frame.udp.source_port()));
    if let Some(b) = &r.bth {
        o.insert("opcode".into(), json!(b.opcode.0));
        o.insert("opcode_name".into(), json!(b.opcode.name()));
        o.insert("dqpn".into(), json!(b.dqpn));
        o.insert("psn".into(), json!(b.psn.value()));
        o.insert("ack_req".into(), json!(b.ack_req));
        o.insert("se".into(), json!(b.solicited));
        o.insert("migreq".into(), json!(b.migreq));
        o.insert("pad".into(), json!(b.pad));
        o.insert("tver".into(), json!(b.tver));
        o.insert("pkey".into(), json!(b.pkey));
        o.insert("fecn".into(), json!(b.fecn));
        o.insert("becn".into(), json!(b.becn));
    }
    match &r.repr {
        Ok(p) => {
            o.insert("payload_len".into(), json!(p.payload_len));
            if let Some(h) = &p.reth {
                o.insert(
                    "reth".into(),
                    json!({"va": u64_json(h.va), "rkey": h.rkey, "dma_len": h.dma_len}),
                );
            }
            if let Some(h) = &p.aeth {
                o.insert(
                    "aeth".into(),
                    json!({"syndrome": h.syndrome.to_u8(), "msn": h.msn}),
                );
            }
            if let Some(h) = &p.atomic_eth {
                o.insert(
                    "atomiceth".into(),
                    json!({
                        "va": u64_json(h.va),
                        "rkey": h.rkey,
                        "swap_add": u64_json(h.swap_add),
                        "compare": u64_json(h.compare),
                    }),
                );
            }
            if let Some(h) = &p.atomic_ack_eth {
                o.insert("atomicacketh".into(), json!({"orig": u64_json(h.orig)}));
            }
            if let Some(h) = &p.immdt {
                o.insert("immdt".into(), json!({"imm": h.imm}));
            }
            if let Some(h) = &p.ieth {
                o.insert("ieth".into(), json!({"rkey": h.rkey}));
            }
            if let Some(h) = &p.deth {
                o.insert("deth".into(), json!({"qkey": h.qkey, "src_qp": h.src_qpn}));
            }
        }
        Err(e) => error_fields(o, e),
    }
    if let Some(i) = &r.icrc {
        o.insert("icrc".into(), json!(i.wire_be()));
        o.insert("icrc_ok".into(), json!(i.ok()));
    }
}

/// What `args.file` names, for messages: `-` is standard input.
fn display_name(file: &Path) -> String {
    if file == Path::new("-") {
        "standard input".to_string()
    } else {
        file.display().to_string()
    }
}

/// The whole capture: the file, or standard input for `-`.
fn read_input(file: &Path) -> std::io::Result<Vec<u8>> {
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
    let res = decode_capture(&bytes, args.json, &mut out);
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
            eprintln!(
                "{}: {} frames, {} RoCEv2, {} skipped, {} malformed, {} bad ICRC",
                name,
                s.frames,
                s.roce,
                s.skipped,
                s.malformed,
                s.bad_icrc.len()
            );
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
