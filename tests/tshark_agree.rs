//! `roce-emu pcap --json` agrees with Wireshark's `infiniband` dissector (tshark), frame by
//! frame, on every capture in `tests/data/*.pcap`.
//!
//! For each file the built binary prints one JSON object per frame and tshark prints one
//! tab-separated line per frame (`-T fields`). Every RoCEv2 frame is compared key by key;
//! frames tshark does not decode as `infiniband` must be frames roce-emu reports as
//! `skipped`, and the other way round. Each disagreement is printed as
//! `file frame key: ours=.. tshark=..` and the test asserts there are none.
//!
//! Field mapping (tshark 4.0 names; `tshark -G fields | grep infiniband`):
//!
//! | roce-emu key           | tshark field                                    |
//! |------------------------|-------------------------------------------------|
//! | frame                  | frame.number                                    |
//! | opcode                 | infiniband.bth.opcode                           |
//! | dqpn                   | infiniband.bth.destqp (hex)                     |
//! | psn                    | infiniband.bth.psn                              |
//! | ack_req / se / migreq  | infiniband.bth.a / .se / .m (1/0 or True/False) |
//! | pad / tver / pkey      | infiniband.bth.padcnt / .tver / .p_key          |
//! | payload_len            | udp.length - 8 - headers tshark shows - pad - 4 (ICRC); and `data.len - pad` when the payload went to the `data` dissector |
//! | icrc                   | infiniband.invariant.crc (hex, bytes read big-endian) |
//! | icrc_ok                | no tshark field: an independent ICRC computed here from the raw bytes |
//! | reth.va/rkey/dma_len   | infiniband.reth.va / .r_key / .dmalen           |
//! | aeth.syndrome/msn      | infiniband.aeth.syndrome / .msn                 |
//! | atomiceth.va/rkey      | infiniband.reth.va / .r_key (4.0 reuses the RETH fields inside AtomicETH) |
//! | atomiceth.swap_add/compare | infiniband.atomiceth.swapdt / .cmpdt        |
//! | atomicacketh.orig      | infiniband.atomicacketh.origremdt               |
//! | immdt.imm              | infiniband.immdt (FT_BYTES, read big-endian)    |
//! | ieth.rkey              | infiniband.ieth (FT_BYTES, read big-endian)     |
//! | deth.qkey / src_qp     | infiniband.deth.q_key / .srcqp (hex)            |
//!
//! The 64-bit fields (`reth.va`, `atomiceth.va/swap_add/compare`, `atomicacketh.orig`) are
//! `"0x..."` strings in roce-emu's JSON, so that jq keeps every bit; they are compared as
//! such, tshark's number formatted the same way.
//!
//! Header presence comes from the FT_BYTES fields `infiniband.bth`, `.reth`, `.atomiceth`,
//! `.aeth`, `.atomicacketh`, `.immdt`, `.ieth`, `.deth`; their lengths give the header sizes
//! used for `payload_len`.
//!
//! A frame to UDP port 4791 whose BTH opcode is unknown (frame 1 of
//! `host_probe_rc_send.pcap`, ASCII text sent by a host) is an explicit expectation, see
//! [`UNKNOWN_OPCODE_FRAMES`]: tshark decodes its BTH, shows the rest as
//! `infiniband.vendor` and no ICRC; roce-emu must report the same BTH fields, an error in
//! the BTH, no `payload_len`, the last four bytes as `icrc` and `icrc_ok: false`.
//!
//! Without tshark on PATH the test prints `SKIPPED` to stderr and passes, unless `CI` is set
//! (CI installs tshark), in which case it fails.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Frames sent to UDP 4791 that are not RoCEv2 (unknown BTH opcode), by file name.
const UNKNOWN_OPCODE_FRAMES: &[(&str, usize)] = &[("host_probe_rc_send.pcap", 1)];

/// The tshark fields requested, in column order.
const FIELDS: &[&str] = &[
    "frame.number",
    "frame.protocols",
    "udp.length",
    "infiniband.bth",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.a",
    "infiniband.bth.se",
    "infiniband.bth.m",
    "infiniband.bth.padcnt",
    "infiniband.bth.tver",
    "infiniband.bth.p_key",
    "infiniband.reth",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.atomiceth",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.aeth",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.atomicacketh",
    "infiniband.atomicacketh.origremdt",
    "infiniband.immdt",
    "infiniband.ieth",
    "infiniband.deth",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.invariant.crc",
    "infiniband.vendor",
    "data.len",
];

const UDP_HDR: usize = 8;
const BTH_LEN: usize = 12;
const ICRC_LEN: usize = 4;

/// One tshark output line: field name to its first occurrence (tshark repeats some fields,
/// e.g. `infiniband.immdt` appears twice with `-E occurrence=a`), empty fields left out.
struct TsharkRow(BTreeMap<&'static str, String>);

impl TsharkRow {
    fn parse(line: &str) -> TsharkRow {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(
            cols.len(),
            FIELDS.len(),
            "tshark line has {} columns, expected {}: {line:?}",
            cols.len(),
            FIELDS.len()
        );
        let mut m = BTreeMap::new();
        for (name, col) in FIELDS.iter().zip(cols) {
            let first = col.split(',').next().unwrap_or("").trim();
            if !first.is_empty() {
                m.insert(*name, first.to_string());
            }
        }
        TsharkRow(m)
    }

    fn has(&self, f: &str) -> bool {
        self.0.contains_key(f)
    }

    fn str(&self, f: &str) -> Option<&str> {
        self.0.get(f).map(String::as_str)
    }

    /// A number as tshark prints it: decimal, or `0x` hex.
    fn num(&self, f: &str) -> Option<u64> {
        self.str(f)
            .map(|s| parse_num(s).unwrap_or_else(|| panic!("{f}: not a number: {s:?}")))
    }

    /// A boolean: `1`/`0` (4.0) or `True`/`False` (other versions).
    fn flag(&self, f: &str) -> Option<bool> {
        self.str(f).map(|s| match s {
            "1" | "True" | "true" => true,
            "0" | "False" | "false" => false,
            _ => panic!("{f}: not a boolean: {s:?}"),
        })
    }

    /// Length in bytes of an FT_BYTES field (printed as plain hex).
    fn byte_len(&self, f: &str) -> Option<usize> {
        self.str(f).map(|s| hex_bytes(s).len())
    }

    /// An FT_BYTES field read as a big-endian number.
    fn bytes_be(&self, f: &str) -> Option<u64> {
        self.str(f).map(|s| {
            hex_bytes(s)
                .iter()
                .fold(0u64, |a, b| (a << 8) | u64::from(*b))
        })
    }

    fn is_infiniband(&self) -> bool {
        self.str("frame.protocols")
            .is_some_and(|p| p.split(':').any(|x| x == "infiniband"))
    }
}

fn parse_num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn hex_bytes(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    assert!(s.len() % 2 == 0, "odd hex string {s:?}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A value as printed in a disagreement: the JSON value, or `absent`.
fn show(v: Option<&Value>) -> String {
    v.map_or_else(|| "absent".to_string(), Value::to_string)
}

/// The raw-byte facts about a RoCEv2 frame, found without roce-emu's parser.
struct RawRoce {
    /// The four ICRC bytes read big-endian.
    icrc_be: u32,
    /// The stored ICRC equals the one computed by the lab rule.
    icrc_ok: bool,
}

/// Link types this test can walk to the IP header.
#[derive(Clone, Copy)]
enum RawLink {
    Ethernet,
    Ip,
    Sll,
    Sll2,
}

fn raw_link(dl: pcap_file::DataLink) -> Option<RawLink> {
    use pcap_file::DataLink as D;
    match dl {
        D::ETHERNET => Some(RawLink::Ethernet),
        D::RAW | D::IPV4 | D::IPV6 => Some(RawLink::Ip),
        D::LINUX_SLL => Some(RawLink::Sll),
        D::LINUX_SLL2 => Some(RawLink::Sll2),
        _ => None,
    }
}

/// Every packet of a pcap or pcapng file, with its link type.
fn raw_frames(bytes: &[u8]) -> Vec<(Option<RawLink>, Vec<u8>)> {
    use pcap_file::pcapng::{Block, PcapNgReader};
    let mut out = Vec::new();
    if bytes.starts_with(&[0x0a, 0x0d, 0x0d, 0x0a]) {
        let mut r = PcapNgReader::new(bytes).expect("pcapng header");
        let mut links: Vec<Option<RawLink>> = r
            .interfaces()
            .iter()
            .map(|i| raw_link(i.linktype))
            .collect();
        while let Some(b) = r.next_block() {
            let b = b.expect("pcapng block");
            let (iface, data): (u32, &[u8]) = match &b {
                Block::SectionHeader(_) => {
                    links.clear();
                    continue;
                }
                Block::InterfaceDescription(i) => {
                    links.push(raw_link(i.linktype));
                    continue;
                }
                Block::EnhancedPacket(p) => (p.interface_id, &p.data),
                Block::SimplePacket(p) => (0, &p.data),
                Block::Packet(p) => (u32::from(p.interface_id), &p.data),
                _ => continue,
            };
            out.push((links.get(iface as usize).copied().flatten(), data.to_vec()));
        }
    } else {
        let mut r = pcap_file::pcap::PcapReader::new(bytes).expect("pcap header");
        let link = raw_link(r.header().datalink);
        while let Some(p) = r.next_packet() {
            out.push((link, p.expect("pcap packet").data.to_vec()));
        }
    }
    out
}

/// Walks link, IP and UDP by hand and checks the ICRC by the lab rule: CRC-32 over 8 bytes
/// of 0xff, the IP header with TOS/TTL/checksum (v4) or traffic class/flow label/hop limit
/// (v6) set to ones, the UDP header with checksum ones, the BTH with byte 4 = 0xff, and the
/// rest up to the ICRC; the CRC is stored least significant byte first.
fn raw_roce(link: Option<RawLink>, f: &[u8]) -> Option<RawRoce> {
    let (mut off, mut etype) = match link? {
        RawLink::Ethernet => (14, u16::from_be_bytes([*f.get(12)?, *f.get(13)?])),
        RawLink::Ip => (0, if f.first()? >> 4 == 6 { 0x86dd } else { 0x0800 }),
        RawLink::Sll => (16, u16::from_be_bytes([*f.get(14)?, *f.get(15)?])),
        RawLink::Sll2 => (20, u16::from_be_bytes([*f.first()?, *f.get(1)?])),
    };
    while matches!(link, Some(RawLink::Ethernet)) && (etype == 0x8100 || etype == 0x88a8) {
        etype = u16::from_be_bytes([*f.get(off + 2)?, *f.get(off + 3)?]);
        off += 4;
    }
    let ip = match etype {
        0x0800 => {
            let ihl = usize::from(f.get(off)? & 0x0f) * 4;
            let mut h = f.get(off..off + ihl)?.to_vec();
            if h[9] != 17 {
                return None;
            }
            h[1] = 0xff;
            h[8] = 0xff;
            h[10] = 0xff;
            h[11] = 0xff;
            h
        }
        0x86dd => {
            let mut h = f.get(off..off + 40)?.to_vec();
            if h[6] != 17 {
                return None;
            }
            h[0] |= 0x0f;
            h[1] = 0xff;
            h[2] = 0xff;
            h[3] = 0xff;
            h[7] = 0xff;
            h
        }
        _ => return None,
    };
    let udp_at = off + ip.len();
    let mut udp = f.get(udp_at..udp_at + UDP_HDR)?.to_vec();
    let ulen = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    let roce = f.get(udp_at + UDP_HDR..udp_at + ulen)?;
    if roce.len() < BTH_LEN + ICRC_LEN {
        return None;
    }
    udp[6] = 0xff;
    udp[7] = 0xff;
    let (covered, tail) = roce.split_at(roce.len() - ICRC_LEN);
    let mut bth = covered[..BTH_LEN].to_vec();
    bth[4] = 0xff;
    let mut h = crc32fast::Hasher::new();
    h.update(&[0xff; 8]);
    h.update(&ip);
    h.update(&udp);
    h.update(&bth);
    h.update(&covered[BTH_LEN..]);
    let computed = h.finalize();
    let tail: [u8; 4] = tail.try_into().unwrap();
    Some(RawRoce {
        icrc_be: u32::from_be_bytes(tail),
        icrc_ok: u32::from_le_bytes(tail) == computed,
    })
}

/// Collects disagreements for one file.
struct Cmp<'a> {
    file: &'a str,
    frame: usize,
    fields: usize,
    bad: Vec<String>,
}

impl Cmp<'_> {
    fn disagree(&mut self, key: &str, ours: String, theirs: String) {
        self.bad.push(format!(
            "{} frame {} {key}: ours={ours} tshark={theirs}",
            self.file, self.frame
        ));
    }

    /// Compares one value. Both sides may be absent (a header neither shows); only values
    /// present on at least one side count as compared fields.
    fn eq(&mut self, key: &str, ours: Option<&Value>, theirs: Option<Value>) {
        if ours.is_some() || theirs.is_some() {
            self.fields += 1;
        }
        if ours != theirs.as_ref() {
            self.disagree(key, show(ours), show(theirs.as_ref()));
        }
    }
}

fn num(v: Option<u64>) -> Option<Value> {
    v.map(Value::from)
}

/// A 64-bit field as roce-emu writes it: a `"0x..."` string, which jq cannot round to a
/// double's 53 bits.
fn hex64(v: Option<u64>) -> Option<Value> {
    v.map(|v| Value::String(format!("{v:#x}")))
}

/// The 64-bit fields, compared as `hex64` strings.
const U64_KEYS: &[&str] = &["va", "swap_add", "compare"];

fn flag(v: Option<bool>) -> Option<Value> {
    v.map(Value::from)
}

/// Compares the BTH and extension headers of one frame both sides decode as RoCEv2.
fn compare_headers(c: &mut Cmp<'_>, o: &Value, t: &TsharkRow) {
    c.eq(
        "opcode",
        o.get("opcode"),
        num(t.num("infiniband.bth.opcode")),
    );
    c.eq("dqpn", o.get("dqpn"), num(t.num("infiniband.bth.destqp")));
    c.eq("psn", o.get("psn"), num(t.num("infiniband.bth.psn")));
    c.eq(
        "ack_req",
        o.get("ack_req"),
        flag(t.flag("infiniband.bth.a")),
    );
    c.eq("se", o.get("se"), flag(t.flag("infiniband.bth.se")));
    c.eq("migreq", o.get("migreq"), flag(t.flag("infiniband.bth.m")));
    c.eq("pad", o.get("pad"), num(t.num("infiniband.bth.padcnt")));
    c.eq("tver", o.get("tver"), num(t.num("infiniband.bth.tver")));
    c.eq("pkey", o.get("pkey"), num(t.num("infiniband.bth.p_key")));

    let sub = |o: &Value, h: &str, k: &str| o.get(h).and_then(|x| x.get(k)).cloned();
    // AtomicETH: tshark 4.0 shows its VA and R_Key under the RETH field names, with no
    // `infiniband.reth` bytes field; a real RETH has both.
    let atomic = t.has("infiniband.atomiceth");
    let reth = t.has("infiniband.reth");
    c.eq(
        "reth",
        o.get("reth").map(|_| &Value::Bool(true)),
        reth.then_some(Value::Bool(true)),
    );
    if reth {
        for (k, f) in [
            ("va", "infiniband.reth.va"),
            ("rkey", "infiniband.reth.r_key"),
            ("dma_len", "infiniband.reth.dmalen"),
        ] {
            let theirs = if U64_KEYS.contains(&k) { hex64 } else { num };
            c.eq(
                &format!("reth.{k}"),
                sub(o, "reth", k).as_ref(),
                theirs(t.num(f)),
            );
        }
    }
    c.eq(
        "atomiceth",
        o.get("atomiceth").map(|_| &Value::Bool(true)),
        atomic.then_some(Value::Bool(true)),
    );
    if atomic {
        for (k, f) in [
            ("va", "infiniband.reth.va"),
            ("rkey", "infiniband.reth.r_key"),
            ("swap_add", "infiniband.atomiceth.swapdt"),
            ("compare", "infiniband.atomiceth.cmpdt"),
        ] {
            let theirs = if U64_KEYS.contains(&k) { hex64 } else { num };
            c.eq(
                &format!("atomiceth.{k}"),
                sub(o, "atomiceth", k).as_ref(),
                theirs(t.num(f)),
            );
        }
    }
    let aeth = t.has("infiniband.aeth");
    c.eq(
        "aeth",
        o.get("aeth").map(|_| &Value::Bool(true)),
        aeth.then_some(Value::Bool(true)),
    );
    if aeth {
        for (k, f) in [
            ("syndrome", "infiniband.aeth.syndrome"),
            ("msn", "infiniband.aeth.msn"),
        ] {
            c.eq(
                &format!("aeth.{k}"),
                sub(o, "aeth", k).as_ref(),
                num(t.num(f)),
            );
        }
    }
    c.eq(
        "atomicacketh.orig",
        sub(o, "atomicacketh", "orig").as_ref(),
        hex64(t.num("infiniband.atomicacketh.origremdt")),
    );
    c.eq(
        "immdt.imm",
        sub(o, "immdt", "imm").as_ref(),
        num(t.bytes_be("infiniband.immdt")),
    );
    c.eq(
        "ieth.rkey",
        sub(o, "ieth", "rkey").as_ref(),
        num(t.bytes_be("infiniband.ieth")),
    );
    let deth = t.has("infiniband.deth");
    c.eq(
        "deth",
        o.get("deth").map(|_| &Value::Bool(true)),
        deth.then_some(Value::Bool(true)),
    );
    if deth {
        for (k, f) in [
            ("qkey", "infiniband.deth.q_key"),
            ("src_qp", "infiniband.deth.srcqp"),
        ] {
            c.eq(
                &format!("deth.{k}"),
                sub(o, "deth", k).as_ref(),
                num(t.num(f)),
            );
        }
    }
}

/// The payload length implied by tshark's view: UDP length less the UDP header, the
/// headers tshark shows, the pad and the ICRC.
fn tshark_payload_len(t: &TsharkRow) -> Option<u64> {
    let udp = t.num("udp.length")? as usize;
    let headers: usize = [
        "infiniband.bth",
        "infiniband.reth",
        "infiniband.atomiceth",
        "infiniband.aeth",
        "infiniband.atomicacketh",
        "infiniband.immdt",
        "infiniband.ieth",
        "infiniband.deth",
    ]
    .iter()
    .filter_map(|f| t.byte_len(f))
    .sum();
    let pad = t.num("infiniband.bth.padcnt")? as usize;
    udp.checked_sub(UDP_HDR + headers + pad + ICRC_LEN)
        .map(|n| n as u64)
}

/// Per-file counts.
#[derive(Default)]
struct FileStats {
    frames: usize,
    roce: usize,
    skipped: usize,
    fields: usize,
}

fn compare_file(exe: &str, tshark_config: &Path, path: &Path, bad: &mut Vec<String>) -> FileStats {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();

    let ours = Command::new(exe)
        .args(["pcap", "--json"])
        .arg(path)
        .output()
        .expect("run roce-emu");
    let code = ours.status.code();
    assert!(
        matches!(code, Some(0 | 1)),
        "{name}: roce-emu pcap exited {:?}: {}",
        ours.status,
        String::from_utf8_lossy(&ours.stderr)
    );
    let ours: Vec<Value> = String::from_utf8(ours.stdout)
        .expect("roce-emu output is UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}: bad JSON {l:?}: {e}")))
        .collect();

    let mut cmd = Command::new("tshark");
    cmd.env("WIRESHARK_CONFIG_DIR", tshark_config)
        .args(["-n", "-r"])
        .arg(path)
        .args(["-d", "udp.port==4791,infiniband"])
        .args(["-T", "fields", "-E", "separator=/t", "-E", "occurrence=a"])
        .args(["-E", "aggregator=,", "-E", "header=n", "-E", "quote=n"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    // tshark writes its "Running as user root" warning to stderr, which is not parsed.
    assert!(
        out.status.success(),
        "{name}: tshark failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("tshark output is UTF-8");
    let theirs: Vec<TsharkRow> = text.lines().map(TsharkRow::parse).collect();

    let raw = raw_frames(&std::fs::read(path).expect("read capture"));

    let mut c = Cmp {
        file: &name,
        frame: 0,
        fields: 0,
        bad: Vec::new(),
    };
    let mut st = FileStats {
        frames: ours.len(),
        ..FileStats::default()
    };
    if ours.len() != theirs.len() || raw.len() != ours.len() {
        c.disagree(
            "frame count",
            ours.len().to_string(),
            format!("{} (raw read: {})", theirs.len(), raw.len()),
        );
    }
    let mut any_bad_icrc = false;
    let mut unknown_seen = Vec::new();
    for (i, ((o, t), (link, bytes))) in ours.iter().zip(&theirs).zip(&raw).enumerate() {
        c.frame = i + 1;
        c.eq("frame", o.get("frame"), num(Some(c.frame as u64)));
        c.eq(
            "frame (frame.number)",
            o.get("frame"),
            num(t.num("frame.number")),
        );
        let ours_roce = o.get("skipped").is_none();
        let theirs_roce = t.is_infiniband();
        if ours_roce != theirs_roce {
            c.disagree(
                "decoded as RoCEv2",
                format!("{ours_roce} {o}"),
                format!("{theirs_roce} ({})", t.str("frame.protocols").unwrap_or("")),
            );
            continue;
        }
        if !ours_roce {
            st.skipped += 1;
            continue;
        }
        st.roce += 1;
        compare_headers(&mut c, o, t);

        let rawr = raw_roce(*link, bytes);
        let ours_ok = o.get("icrc_ok").and_then(Value::as_bool);
        any_bad_icrc |= ours_ok == Some(false);
        c.eq(
            "icrc_ok (independent check)",
            o.get("icrc_ok"),
            flag(rawr.as_ref().map(|r| r.icrc_ok)),
        );

        let unknown_expected = UNKNOWN_OPCODE_FRAMES.contains(&(name.as_str(), c.frame));
        if t.has("infiniband.vendor") && !t.has("infiniband.invariant.crc") {
            // tshark could not name the opcode: the rest of the packet is "vendor" data and
            // no ICRC is shown. Only listed frames may be like this.
            unknown_seen.push(c.frame);
            if !unknown_expected {
                c.disagree(
                    "unexpected unknown-opcode frame",
                    o.to_string(),
                    "infiniband.vendor, no ICRC".into(),
                );
            }
            c.eq("error_header", o.get("error_header"), Some("BTH".into()));
            c.eq("payload_len", o.get("payload_len"), None);
            c.eq(
                "icrc (last 4 bytes)",
                o.get("icrc"),
                num(rawr.as_ref().map(|r| u64::from(r.icrc_be))),
            );
            c.eq("icrc_ok", o.get("icrc_ok"), Some(false.into()));
            continue;
        }
        c.eq(
            "icrc",
            o.get("icrc"),
            num(t.num("infiniband.invariant.crc")),
        );
        c.eq(
            "payload_len",
            o.get("payload_len"),
            num(tshark_payload_len(t)),
        );
        if let Some(d) = t.num("data.len") {
            let pad = t.num("infiniband.bth.padcnt").unwrap_or(0);
            c.eq(
                "payload_len (data.len - pad)",
                o.get("payload_len"),
                num(d.checked_sub(pad)),
            );
        }
        c.eq("error", o.get("error"), None);
    }
    for &(f, n) in UNKNOWN_OPCODE_FRAMES {
        if f == name && !unknown_seen.contains(&n) {
            c.frame = n;
            c.disagree(
                "expected unknown-opcode frame",
                "see above".into(),
                "not decoded as unknown opcode".into(),
            );
        }
    }
    if any_bad_icrc != (code == Some(1)) {
        c.frame = 0;
        c.disagree(
            "exit status",
            format!("{code:?}"),
            format!("1 iff a bad ICRC (bad ICRC seen: {any_bad_icrc})"),
        );
    }
    st.fields = c.fields;
    bad.append(&mut c.bad);
    st
}

fn tshark_available() -> bool {
    match Command::new("tshark").arg("-v").output() {
        Ok(o) => o.status.success(),
        Err(_) => false,
    }
}

#[test]
fn pcap_json_agrees_with_tshark() {
    if !tshark_available() {
        if std::env::var_os("CI").is_some() {
            panic!("tshark is not on PATH, and CI is set: CI must install tshark");
        }
        eprintln!();
        eprintln!("**************************************************************");
        eprintln!("SKIPPED: tshark not installed (tests/tshark_agree.rs compared nothing)");
        eprintln!("**************************************************************");
        return;
    }
    let exe = env!("CARGO_BIN_EXE_roce-emu");
    // An empty configuration directory: no personal preferences or decode-as rules.
    let config = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tshark_agree_config");
    std::fs::create_dir_all(&config).unwrap();

    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no captures in {}", data.display());

    let mut bad = Vec::new();
    let mut empty = Vec::new();
    let (mut total_roce, mut total_fields) = (0, 0);
    for f in &files {
        let st = compare_file(exe, &config, f, &mut bad);
        let name = f.file_name().unwrap().to_string_lossy();
        println!(
            "{name}: {} frames, {} RoCEv2 compared ({} fields), {} skipped by both",
            st.frames, st.roce, st.fields, st.skipped
        );
        if st.roce == 0 {
            empty.push(name.into_owned());
        }
        total_roce += st.roce;
        total_fields += st.fields;
    }
    println!(
        "total: {} files, {total_roce} RoCEv2 frames, {total_fields} fields compared, {} disagreements",
        files.len(),
        bad.len()
    );
    for b in &bad {
        println!("DISAGREE {b}");
    }
    assert!(
        empty.is_empty(),
        "files with no RoCEv2 frame compared: {empty:?}"
    );
    assert!(bad.is_empty(), "{} disagreements with tshark", bad.len());
}
