//! `roce-emu perf`: the RC bandwidth tests of perftest 4.5 (`ib_write_bw`, `ib_read_bw`,
//! `ib_send_bw`, `ib_atomic_bw`), speaking their TCP exchange, so that either side can be
//! the real tool on rxe or a RoCE NIC.
//!
//! The exchange (perftest 4.5-0.17, Ethernet, no `-R`; each step is "the client writes,
//! the server reads, the server writes, the client reads"):
//! version (16 bytes, `"6.06"`), cycle buffer and cache line size (4 bytes each, big
//! endian; both sides take the larger), port MTU (2 bytes, the `ibv_mtu` value as text; both
//! take the smaller), then 108-byte address records
//! `lid:out_reads:qpn:psn:rkey:vaddr:gid bytes:srqn:` — 3 before the traffic for WRITE, READ
//! and atomics (4 for SEND, the last after the server posted its receives); after the traffic
//! one more record and, except for SEND, five 8-byte big-endian report values (size,
//! iterations, peak, average, message rate); at the end one record and `done\0` each way.
//!
//! The traffic is perftest's: the client keeps `-t` work requests in flight and asks for a
//! completion every `-Q`; remote (and local) addresses step by the size rounded up to the
//! cache line and wrap at the cycle buffer (perftest's `increase_rem_addr`) when a message
//! fits twice in it; FETCH_AND_ADD adds 1. The server of WRITE, READ and atomics only
//! answers; the server of SEND keeps `-r` receives posted. The figures: bytes over the time
//! from the first post to the last completion, in MB/s of 2^20 bytes (perftest's default);
//! the peak over windows of `-Q` completions.
//!
//! Beyond perftest: `--check` verifies the data end to end when both sides are roce-emu
//! (patterned buffers; atomics as counters: CMP_AND_SWAP swaps k for k+1 where the slot has
//! seen k operations, so each slot ends at its count), and every wait is bounded.

mod exchange;
pub use exchange::{Record, Report};
mod lat;
mod nic;
mod output;
mod traffic;

use super::oob::{self, LocateError, OobError};
use super::pingpong::{gid_to_ip, ip_to_gid, random_psn};
use crate::verbs::Spin;
use crate::verbs::{self, Context, Event};
use crate::verbs::{link_mtu, wait_readable};
use crate::verbs::{Access, MemoryRegion, Sge};
use crate::verbs::{
    AsyncEvent, Completion, Local, Mtu, QpAttr, QpCap, QpInit, QpState, RecvWr, Remote, SendFlags,
    SendOp, SendWr, WcStatus,
};
use crate::verbs::{DEFAULT_MIN_RNR_TIMER, DEFAULT_TIMEOUT, MAX_RETRY_CNT, RNR_RETRY_INFINITE};
use crate::wire::{layout, Psn, ICRC_LEN};
use exchange::*;
use lat::*;
use nic::*;
use output::*;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use traffic::*;

/// perftest's TCP port.
pub const DEFAULT_PORT: u16 = 18515;
/// The version string perftest 4.5-0.17 sends; it refuses peers older than 5.70.
const VERSION: &[u8] = b"6.06";
/// One address record, NUL included.
pub const RECORD_LEN: usize = 108;
/// perftest's cycle buffer (the page size) and cache line size on x86-64.
const CYCLE_BUFFER: u32 = 4096;
const CACHE_LINE: u32 = 64;
/// Where the buffer sits in this NIC's address space (its VAddr in the record).
const IOVA: u64 = 0x7f00_0000_0000;
const DEFAULT_CONNECT_WAIT: f64 = 5.0;
/// Patterns `--check` fills the two sides' buffers with.
const CLIENT_SEED: u8 = 0x5a;
const SERVER_SEED: u8 = 0xa5;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    Write,
    Read,
    Send,
    Atomic,
}

impl Test {
    /// perftest's test name, as its banner prints it.
    fn title(self) -> &'static str {
        match self {
            Test::Write => "RDMA_Write BW Test",
            Test::Read => "RDMA_Read BW Test",
            Test::Send => "Send BW Test",
            Test::Atomic => "Atomic BW Test",
        }
    }
    /// The banner title of ib_write_lat and ib_send_lat.
    fn lat_title(self) -> &'static str {
        match self {
            Test::Write => "RDMA_Write Latency Test",
            Test::Send => "Send Latency Test",
            Test::Read => "RDMA_Read Latency Test",
            Test::Atomic => "Atomic Latency Test",
        }
    }
    fn tool(self) -> &'static str {
        match self {
            Test::Write => "ib_write_bw",
            Test::Read => "ib_read_bw",
            Test::Send => "ib_send_bw",
            Test::Atomic => "ib_atomic_bw",
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
}

impl AtomicOp {
    fn name(self) -> &'static str {
        match self {
            AtomicOp::CmpAndSwap => "CMP_AND_SWAP",
            AtomicOp::FetchAndAdd => "FETCH_AND_ADD",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The operation: write, read, send or atomic (ib_write_bw, ib_read_bw, ib_send_bw,
    /// ib_atomic_bw).
    #[arg(value_enum)]
    pub test: Test,
    /// Message size in bytes (perftest's default 65536; atomics are 8).
    #[arg(short = 's', long)]
    pub size: Option<u32>,
    /// Number of messages (default 5000; 1000 with --lat).
    #[arg(short = 'n', long)]
    pub iters: Option<u64>,
    /// Latency instead of bandwidth, as ib_write_lat and ib_send_lat: the two sides take
    /// turns, one message at a time; percentiles of half the round trip (write and send).
    #[arg(long)]
    pub lat: bool,
    /// Port MTU: 256, 512, 1024, 2048 or 4096; the two sides use the smaller. Default: the
    /// largest that fits the MTU of --bind's interface, as rxe's port MTU follows its
    /// netdev (4096 on loopback or a 9000-byte link, 1024 on a 1500-byte one).
    #[arg(short = 'm', long)]
    pub mtu: Option<u32>,
    /// TCP port of the exchange.
    #[arg(short = 'p', long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Atomic operation.
    #[arg(
        short = 'A',
        long = "atomic_type",
        value_enum,
        default_value = "FETCH_AND_ADD"
    )]
    pub atomic: AtomicOp,
    /// Work requests the client keeps in flight.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    pub tx_depth: u32,
    /// Receives the SEND server keeps posted.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 512)]
    pub rx_depth: u32,
    /// The SEND server re-posts a completed receive only this long after its completion,
    /// as a slow application would: with a small -r the client's SENDs find no receive and
    /// are answered with RNR NAKs (IBA 9.7.5.2.8), which exercises the requester's RNR
    /// timer and retries.
    #[arg(
        long = "recv-hold-us",
        value_name = "MICROSECONDS",
        default_value_t = 0
    )]
    pub recv_hold_us: u64,
    #[command(flatten)]
    pub nic: super::NicArgs,
    /// Ask for a completion every this many work requests.
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100)]
    pub cq_mod: u32,
    /// Verify every byte (and every atomic) end to end; both sides must be roce-emu with
    /// --check.
    #[arg(long)]
    pub check: bool,
    /// Print the figures as one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// This NIC's IP address (its GID); default 127.0.0.1 (server) or 127.0.0.2 (client of
    /// a loopback server).
    #[arg(long)]
    pub bind: Option<IpAddr>,
    /// How long the server waits for a client (default: forever) and the client for the
    /// server to listen (default 5 s).
    #[arg(long, value_name = "SECS", value_parser = super::seconds)]
    pub wait: Option<Duration>,
    /// Longest silence (no exchange step, no packet) before giving up.
    #[arg(long, value_name = "SECS", value_parser = super::seconds, default_value = "10")]
    pub timeout: Duration,
    /// perftest's device (-d), GID index (-x) and CM-less (-F) options: accepted and
    /// ignored, the NIC is the one bound to --bind.
    #[arg(short = 'd', long = "ib-dev", hide = true)]
    pub dev: Option<String>,
    #[arg(short = 'x', long = "gid-index", hide = true)]
    pub gid_index: Option<u32>,
    #[arg(short = 'F', long = "CPU-freq", hide = true)]
    pub cpu_freq: bool,
    /// The server to connect to; without it, be the server.
    pub server: Option<String>,
}

/// Everything that ends a test early, each with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("-m {0} is not a port MTU: use 256, 512, 1024, 2048 or 4096")]
    Mtu(u32),
    #[error("{what} must be at least 1")]
    Zero { what: &'static str },
    #[error("atomics are 8 bytes: drop -s or give -s 8 (got -s {0})")]
    AtomicSize(u32),
    #[error("--lat runs write or send (ib_write_lat, ib_send_lat), not {0:?}")]
    LatTest(Test),
    #[error("perf write --lat needs -s 1 or more: the last byte carries the turn")]
    LatSize,
    #[error("-s {0} is larger than a message can be (2^31 bytes, IBA 9.4.1): give a smaller -s")]
    SizeTooLarge(u32),
    #[error(
        "--recv-hold-us slows the receives of a send server (perf send, no --lat, no SERVER): \
         drop it here"
    )]
    RecvHold,
    #[error(transparent)]
    Locate(#[from] LocateError),
    #[error("{source}{hint}")]
    Oob { source: OobError, hint: String },
    #[error(
        "no answer from the peer {peer} within {secs} s while {doing}: is it {tool} (or roce-emu \
         perf with the same test) with the same -p, running as the {role}?"
    )]
    ExchangeTimeout {
        peer: SocketAddr,
        doing: &'static str,
        secs: f64,
        tool: &'static str,
        role: &'static str,
    },
    #[error("the peer {peer} closed the connection while {doing} (see its output)")]
    ExchangeClosed {
        peer: SocketAddr,
        doing: &'static str,
    },
    #[error("the exchange with {peer} failed while {doing}: {source}")]
    Exchange {
        peer: SocketAddr,
        doing: &'static str,
        source: std::io::Error,
    },
    #[error("the peer {peer} speaks perftest version {version:?}; perftest needs 5.70 or later")]
    Version { peer: SocketAddr, version: String },
    #[error("the peer {peer} sent a malformed {what}: {text:?}")]
    Record {
        peer: SocketAddr,
        what: &'static str,
        text: String,
    },
    #[error(
        "the peer {peer} sent GID {gid}, which is not an IP address: run perftest with -x and \
         the index of its RoCE v2 GID for an IPv4 or IPv6 address (rxe: -x 1 for IPv4)"
    )]
    NoGid {
        peer: SocketAddr,
        gid: std::net::Ipv6Addr,
    },
    #[error(
        "--bind {bind} and the peer's GID {peer} are not the same IP version: bind an address \
         of the peer's family (or run the peer with the matching -x)"
    )]
    Family { bind: IpAddr, peer: IpAddr },
    #[error("{what}: {source}")]
    Verbs {
        what: &'static str,
        source: verbs::Error,
    },
    #[error("registering the {size}-byte buffer: {source}")]
    Mem { size: u64, source: verbs::Error },
    #[error("{op} {n} of {iters} failed: {status}{hint}")]
    Completion {
        op: &'static str,
        n: u64,
        iters: u64,
        status: WcStatus,
        hint: String,
    },
    #[error("asynchronous error {event:?}: the QP is in state {state}{hint}")]
    Async {
        event: Event,
        state: QpState,
        hint: &'static str,
    },
    #[error("no progress for {secs} s after {done} of {iters} messages{hint}")]
    Stalled {
        secs: f64,
        done: u64,
        iters: u64,
        hint: String,
    },
    #[error("--check: {0} (did the peer run roce-emu perf with --check too?)")]
    Check(String),
    /// The two sides do not run the same test (found without --check).
    #[error("{0}")]
    Mismatch(String),
}

type Result<T, E = PerfError> = std::result::Result<T, E>;

/// An exchange set-up error with what to do about it, which depends on the side.
fn oob_err(tool: &'static str) -> impl FnOnce(OobError) -> PerfError {
    move |source| {
        let hint = match &source {
            OobError::Connect { .. } => format!(
                ": start the server first (`roce-emu perf` or `{tool}` without a SERVER), \
                 check -p"
            ),
            OobError::NoClient { .. } => format!(
                ": start the client (`roce-emu perf ... SERVER` or `{tool} SERVER`, with this \
                 machine's address and the same -p), or give --wait more seconds"
            ),
            _ => String::new(),
        };
        PerfError::Oob { source, hint }
    }
}

fn verbs<E: Into<verbs::Error>>(what: &'static str) -> impl FnOnce(E) -> PerfError {
    move |source| PerfError::Verbs {
        what,
        source: source.into(),
    }
}

/// The port MTU a NIC on `bind`'s interface has: the largest path MTU whose packets (IP,
/// UDP, BTH, RETH, payload, ICRC) fit the link; 1024 when the link is unknown.
pub(super) fn port_mtu(bind: IpAddr) -> Mtu {
    let ip = if bind.is_ipv4() { 20 } else { 40 };
    const UDP_LEN: u32 = 8;
    let overhead = ip + UDP_LEN + (layout::BTH_LEN + layout::RETH_LEN + ICRC_LEN) as u32;
    let Some(link) = link_mtu(bind) else {
        return Mtu::M1024;
    };
    [Mtu::M4096, Mtu::M2048, Mtu::M1024, Mtu::M512]
        .into_iter()
        .find(|m| m.bytes() + overhead <= link)
        .unwrap_or(Mtu::M256)
}

/// The byte `--check` expects at `off` of a buffer filled with `seed`.
pub(super) fn pattern(off: u64, seed: u8) -> u8 {
    (off.wrapping_mul(131).wrapping_add(u64::from(seed)) % 251) as u8
}

pub(super) fn fill_pattern(mr: &MemoryRegion, seed: u8) {
    mr.with_bytes_mut(|b| {
        for (i, x) in b.iter_mut().enumerate() {
            *x = pattern(i as u64, seed);
        }
    });
}

/// perftest's `INC`: `size` rounded up to whole cache lines (at least one).
pub(super) fn stride(size: u32, cache_line: u32) -> u64 {
    u64::from(size.max(1)).div_ceil(u64::from(cache_line)) * u64::from(cache_line)
}

/// Where message `i` goes (perftest's `increase_rem_addr`): step by `stride`, wrapping at
/// the cycle buffer, when a message fits twice in it; otherwise always offset 0.
pub(super) fn offset(i: u64, size: u32, geo: &Geometry) -> u64 {
    if size <= geo.cycle / 2 {
        let slots = u64::from(geo.cycle) / geo.stride;
        (i % slots) * geo.stride
    } else {
        0
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Geometry {
    pub(super) cycle: u32,
    pub(super) stride: u64,
}

/// The end of a test (perftest's `ctx_close_connection`): one more hand shake and "done"
/// from each side (`handshake`; ib_write_lat just ends), then the NIC keeps answering
/// for a moment, since the peer may still need the ACK of its last message.
fn close(
    oob: &mut Oob,
    nic: &mut Nic,
    me: &Record,
    handshake: bool,
    (quiet, max): (Duration, Duration),
    args: &Args,
    client: bool,
) -> Result<()> {
    if handshake {
        // A send server still waiting for messages never reaches this step: say so.
        let closing = if client && args.test == Test::Send {
            "closing (is the server still waiting for messages? give both sides the same -n)"
        } else {
            "closing"
        };
        oob.hand_shake(Some(nic), me, closing)?;
        let _ = oob.s.write_all(b"done\0");
    }
    nic.linger(quiet, max);
    if let Some(path) = &args.nic.pcap {
        eprintln!("{}", nic.ctx.capture_summary(path));
    }
    Ok(())
}

/// The NIC's counters and I/O figures added to a test's JSON.
fn with_nic_figures(mut j: serde_json::Value, nic: &Nic) -> serde_json::Value {
    j["counters"] = nic.ctx.counters().nonzero().collect();
    j["io"] = io_json(&nic.ctx);
    j
}

// ---- the command ---------------------------------------------------------------------------

/// `roce-emu perf`: returns the exit status.
pub fn run(args: &Args) -> i32 {
    match run_inner(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("roce-emu perf: {e}");
            1
        }
    }
}

fn run_inner(args: &Args) -> Result<()> {
    let test = args.test;
    let mtu = match args.mtu {
        Some(m) => Some(Mtu::from_bytes(m).ok_or(PerfError::Mtu(m))?),
        None => None,
    };
    let lat = args.lat;
    if lat && !matches!(test, Test::Write | Test::Send) {
        return Err(PerfError::LatTest(test));
    }
    let size = match (test, args.size) {
        (Test::Atomic, None | Some(8)) => 8,
        (Test::Atomic, Some(s)) => return Err(PerfError::AtomicSize(s)),
        // perftest's DEF_SIZE_LAT and DEF_SIZE_BW.
        (_, s) => s.unwrap_or(if lat { 2 } else { 65536 }),
    };
    if lat && test == Test::Write && size == 0 {
        return Err(PerfError::LatSize);
    }
    if u64::from(size) > verbs::MAX_MSG {
        return Err(PerfError::SizeTooLarge(size));
    }
    let iters = args.iters.unwrap_or(if lat { 1000 } else { 5000 });
    for (v, what) in [
        (iters, "-n (iterations)"),
        (u64::from(args.tx_depth), "-t (tx depth)"),
        (u64::from(args.rx_depth), "-r (rx depth)"),
        (u64::from(args.cq_mod), "-Q (cq moderation)"),
    ] {
        if v == 0 {
            return Err(PerfError::Zero { what });
        }
    }
    if args.recv_hold_us > 0 && (test != Test::Send || lat || args.server.is_some()) {
        return Err(PerfError::RecvHold);
    }
    let (timeout, wait) = (args.timeout, args.wait);

    let (addrs, bind) = oob::locate(args.server.as_deref(), args.port, args.bind)?;
    let server = args.server.as_deref().zip(addrs);
    let tool = test.tool();

    // The UDP port first: "address in use" is better said before a peer is waiting.
    let dev = args.nic.device(bind, args.nic.pcap.clone());
    let max_rd = dev.engine.max_rd_atomic;
    let ctx = dev.open().map_err(verbs("opening the NIC"))?;
    // The TCP exchange runs on --bind; the NIC's address (its GID) is the daemon's port's
    // when attached to one (a TAP daemon's address is not the host's), else --bind.
    let tcp = bind;
    let bind = ctx.local_ip();
    let mtu = mtu.unwrap_or_else(|| port_mtu(bind));

    let (s, peer, client) = match &server {
        Some((name, addrs)) => {
            let target = format!("{name}:{}", args.port);
            let w = wait.unwrap_or(Duration::from_secs_f64(DEFAULT_CONNECT_WAIT));
            let s = oob::connect(&target, addrs, w).map_err(oob_err(tool))?;
            let peer = s.peer_addr().unwrap_or(addrs[0]);
            (s, peer, true)
        }
        None => {
            if !args.json {
                println!("Waiting for client to connect... (TCP port {})", args.port);
            }
            let (s, peer) = oob::accept_for(tcp, args.port, wait).map_err(oob_err(tool))?;
            (s, peer, false)
        }
    };
    s.set_write_timeout(Some(timeout))
        .map_err(|source| PerfError::Exchange {
            peer,
            doing: "setting socket timeouts",
            source,
        })?;
    let mut oob = Oob {
        s,
        peer,
        client,
        timeout,
        tool,
    };

    // Version, system data, MTU (exchange_versions, check_sys_data, check_mtu).
    let mut my = [0u8; 16];
    my[..VERSION.len()].copy_from_slice(VERSION);
    let mut rem = [0u8; 16];
    oob.xchg(None, &my, &mut rem, "exchanging versions")?;
    let version = String::from_utf8_lossy(&rem[..rem.iter().position(|&b| b == 0).unwrap_or(16)])
        .into_owned();
    if version.parse::<f64>().map_or(true, |v| v < 5.70) {
        return Err(PerfError::Version { peer, version });
    }
    let mut rem4 = [0u8; 4];
    oob.xchg(
        None,
        &CYCLE_BUFFER.to_be_bytes(),
        &mut rem4,
        "exchanging the page size",
    )?;
    let cycle = CYCLE_BUFFER.max(u32::from_be_bytes(rem4));
    oob.xchg(
        None,
        &CACHE_LINE.to_be_bytes(),
        &mut rem4,
        "exchanging the cache line size",
    )?;
    let cache_line = CACHE_LINE.max(u32::from_be_bytes(rem4)).max(1);
    let mut mtu_txt = [0u8; 2];
    mtu_txt[0] = b'0' + mtu as u8;
    let mut rem2 = [0u8; 2];
    oob.xchg(None, &mtu_txt, &mut rem2, "exchanging the MTU")?;
    let rem_mtu = (rem2[0] as char)
        .to_digit(10)
        .and_then(|v| Mtu::from_ibv(v as u8));
    let path_mtu = match rem_mtu {
        Some(r) if r < mtu => {
            if !args.json {
                println!(
                    " Peer's MTU is {} bytes: using it (ours {})",
                    r.bytes(),
                    mtu.bytes()
                );
            }
            r
        }
        _ => mtu,
    };
    let geo = Geometry {
        cycle,
        stride: stride(size, cache_line),
    };

    // Resources (ctx_init): the buffer, perftest's size unless SEND's receives need more.
    let mut buf_len = stride(size.max(cycle), cache_line) * 2;
    if test == Test::Send && (!client || args.lat) {
        buf_len = buf_len.max(u64::from(args.rx_depth) * geo.stride);
    }
    let pd = ctx.alloc_pd();
    let mr = ctx
        .reg_mr(pd, IOVA, buf_len, Access::ALL)
        .map_err(|source| PerfError::Mem {
            size: buf_len,
            source,
        })?;
    if test == Test::Atomic || lat {
        // Atomics count from 0; ib_write_lat's turn byte starts at 0.
        mr.fill(0);
        if lat && args.check {
            // What this side sends carries its pattern (WRITE: all but the turn byte).
            let seed = if client { CLIENT_SEED } else { SERVER_SEED };
            let n = lat_data_len(test, size);
            mr.write(IOVA, &pattern_bytes(seed, n))
                .map_err(|source| PerfError::Mem {
                    size: buf_len,
                    source: source.into(),
                })?;
        }
    } else {
        fill_pattern(&mr, if client { CLIENT_SEED } else { SERVER_SEED });
    }
    let depth = args.tx_depth as usize + args.rx_depth as usize + 1;
    let cq = ctx
        .create_cq(depth, None)
        .map_err(verbs("creating the CQ (-t or -r too large?)"))?;
    let qpn = ctx
        .create_qp(&QpInit::rc(
            pd,
            cq,
            QpCap {
                max_send_wr: args.tx_depth as usize,
                max_recv_wr: args.rx_depth as usize,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
        ))
        .map_err(verbs("creating the QP (-t or -r too large?)"))?;
    ctx.modify_qp(
        qpn,
        &QpAttr::init(Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC),
    )
    .map_err(verbs("moving the QP to INIT"))?;
    let mut nic = Nic {
        ctx,
        spin: args.nic.spin(),
        mr,
        cq,
        qpn,
        bind,
        peer: bind,
    };

    let me = Record {
        lid: 0,
        out_reads: if matches!(test, Test::Read | Test::Atomic) {
            u16::from(max_rd)
        } else {
            1
        },
        qpn,
        psn: random_psn(),
        rkey: if test == Test::Send {
            0
        } else {
            nic.mr.rkey().0
        },
        // ib_write_lat's peer writes into the second half (perftest's layout).
        vaddr: if lat {
            IOVA + lat_half(size, cycle)
        } else {
            IOVA
        },
        gid: ip_to_gid(bind),
        srqn: 0,
    };
    if lat && test == Test::Write {
        // ib_write_lat shakes hands once more before the addresses.
        oob.hand_shake(None, &me, "synchronising")?;
    }
    let rem = oob.hand_shake(None, &me, "exchanging QP addresses")?;
    let peer_ip = gid_to_ip(rem.gid).ok_or(PerfError::NoGid {
        peer,
        gid: rem.gid_v6(),
    })?;
    if peer_ip.is_ipv4() != bind.is_ipv4() {
        return Err(PerfError::Family {
            bind,
            peer: peer_ip,
        });
    }
    nic.peer = peer_ip;
    // ctx_connect: RTR then RTS, with perftest's timers (min_rnr_timer 12, timeout 14,
    // retry_cnt and rnr_retry 7).
    let e = &nic.ctx;
    let rtr = QpAttr::rtr(
        peer_ip,
        path_mtu,
        rem.qpn,
        Psn::new(rem.psn),
        me.out_reads as u8,
        DEFAULT_MIN_RNR_TIMER,
    );
    e.modify_qp(qpn, &rtr)
        .map_err(verbs("moving the QP to RTR"))?;
    let rd_atomic = rem.out_reads.clamp(1, u16::from(max_rd)) as u8;
    e.modify_qp(
        qpn,
        &QpAttr::rts(
            Psn::new(me.psn),
            DEFAULT_TIMEOUT,
            MAX_RETRY_CNT,
            RNR_RETRY_INFINITE,
            rd_atomic,
        ),
    )
    .map_err(verbs("moving the QP to RTS"))?;

    if !args.json {
        print_banner(test, args, size, path_mtu, client);
        print_record(" local address:", &me);
        print_record(" remote address:", &rem);
    }
    // The remaining hand shakes before the traffic (send_bw has one more, after the
    // server's receives are posted).
    oob.hand_shake(Some(&mut nic), &me, "synchronising after connecting")?;
    oob.hand_shake(Some(&mut nic), &me, "synchronising before the test")?;
    let mut server_recv = None;
    if test == Test::Send {
        // ib_send_lat: both sides receive; ib_send_bw: the server.
        if !client || lat {
            server_recv = Some(RecvState::post(&mut nic, args, iters, size, &geo)?);
        }
        oob.hand_shake(Some(&mut nic), &me, "synchronising before the test")?;
    }

    let plan = Plan {
        test,
        atomic: args.atomic,
        size,
        iters,
        tx_depth: u64::from(args.tx_depth),
        // A completion at least every tx_depth WRs, or the window never reopens (perftest
        // lowers cq_mod to tx_depth the same way).
        cq_mod: u64::from(args.cq_mod.min(args.tx_depth)),
        check: args.check,
        timeout,
        geo,
    };
    if lat {
        let half = lat_half(size, cycle);
        let r = lat_traffic(&mut nic, &plan, &rem, client, half, server_recv.as_mut())?;
        // ib_write_lat just ends; either way the peer may still need our last ACK.
        let linger = (Duration::from_millis(100), Duration::from_millis(1000));
        close(
            &mut oob,
            &mut nic,
            &me,
            test == Test::Send,
            linger,
            args,
            client,
        )?;
        if args.json {
            let j = with_nic_figures(lat_json(test, &r, path_mtu, client, bind, peer_ip), &nic);
            println!("{j}");
        } else {
            print_lat(&r);
            if plan.check {
                println!(" --check: every byte verified");
            }
        }
        return Ok(());
    }
    let shown = if client {
        let mine = client_traffic(&mut nic, &plan, &rem)?;
        if test != Test::Send {
            oob.hand_shake(Some(&mut nic), &me, "synchronising after the test")?;
            oob.xchg_reports(Some(&mut nic), &mine)?;
        }
        mine
    } else if let Some(mut r) = server_recv {
        server_send_traffic(&mut nic, &plan, &mut r)?
    } else {
        // WRITE, READ and atomics: the server only answers, until the client says it is
        // done; then the client's figures are the test's.
        oob.hand_shake(
            Some(&mut nic),
            &me,
            "waiting for the client's test to finish",
        )?;
        let theirs = oob.xchg_reports(Some(&mut nic), &Report::default())?;
        if plan.check {
            server_check(&nic, &plan, &theirs)?;
        }
        theirs
    };
    let linger = (Duration::from_millis(50), Duration::from_millis(500));
    close(&mut oob, &mut nic, &me, true, linger, args, client)?;
    if args.json {
        let j = report_json(test, args, &shown, path_mtu, client, bind, peer_ip);
        let j = with_nic_figures(j, &nic);
        println!("{j}");
    } else {
        print_report(&shown);
        if plan.check {
            println!(" --check: every byte verified");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
