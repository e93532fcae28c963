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

use super::oob::{self, LocateError, OobError};
use super::pingpong::{gid_to_ip, ip_to_gid, random_psn};
use crate::verbs::Spin;
use crate::verbs::{self, Context, Event};
use crate::verbs::{link_mtu, wait_readable};
use crate::verbs::{Access, MemoryRegion, Sge};
use crate::verbs::{
    AsyncEvent, Completion, Local, Mtu, QpAttr, QpCap, QpInit, QpState, QpType, RecvWr, Remote,
    SendFlags, SendOp, SendWr, WcStatus,
};
use crate::wire::Psn;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

// ---- the address record -----------------------------------------------------------------

/// One side's record (perftest's `struct pingpong_dest`, as `ethernet_write_keys` prints it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub lid: u16,
    pub out_reads: u16,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    pub vaddr: u64,
    pub gid: [u8; 16],
    pub srqn: u32,
}

impl Record {
    /// `"%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 x "%02x:" + "%08x:"` and a NUL.
    pub fn to_bytes(&self) -> [u8; RECORD_LEN] {
        let mut s = String::with_capacity(RECORD_LEN);
        let _ = write!(
            s,
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        for b in self.gid {
            let _ = write!(s, "{b:02x}:");
        }
        let _ = write!(s, "{:08x}:", self.srqn);
        let mut rec = [0u8; RECORD_LEN];
        rec[..s.len()].copy_from_slice(s.as_bytes());
        rec
    }

    /// Reads a record: 23 colon-terminated hexadecimal fields before the NUL.
    pub fn parse(rec: &[u8]) -> Option<Record> {
        let end = rec.iter().position(|&b| b == 0)?;
        let text = std::str::from_utf8(&rec[..end]).ok()?;
        let f: Vec<&str> = text.split(':').collect();
        if f.len() != 24 || !f[23].is_empty() {
            return None;
        }
        let h = |t: &str, bits: u32| {
            let v = u64::from_str_radix(t, 16).ok()?;
            (t.len() <= 16 && (bits == 64 || v >> bits == 0)).then_some(v)
        };
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = h(f[6 + i], 8)? as u8;
        }
        Some(Record {
            lid: h(f[0], 16)? as u16,
            out_reads: h(f[1], 16)? as u16,
            qpn: h(f[2], 24)? as u32,
            psn: h(f[3], 24)? as u32,
            rkey: h(f[4], 32)? as u32,
            vaddr: h(f[5], 64)?,
            gid,
            srqn: h(f[22], 32)? as u32,
        })
    }

    fn gid_v6(&self) -> std::net::Ipv6Addr {
        std::net::Ipv6Addr::from(self.gid)
    }
}

/// The figures perftest exchanges after a test (`struct bw_report_data`, the first five).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Report {
    pub size: u64,
    pub iters: u64,
    pub bw_peak: f64,
    pub bw_avg: f64,
    pub msg_rate: f64,
}

// ---- the out-of-band connection, with the NIC running -----------------------------------

/// The TCP connection of the exchange. Reads keep the NIC running: once the QP is up, the
/// peer may be sending while we wait for its next record.
struct Oob {
    s: TcpStream,
    peer: SocketAddr,
    client: bool,
    timeout: Duration,
    tool: &'static str,
}

impl Oob {
    fn role(&self) -> &'static str {
        if self.client {
            "server"
        } else {
            "client"
        }
    }

    fn io_err(&self, doing: &'static str, e: std::io::Error) -> PerfError {
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => PerfError::ExchangeTimeout {
                peer: self.peer,
                doing,
                secs: self.timeout.as_secs_f64(),
                tool: self.tool,
                role: self.role(),
            },
            ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::BrokenPipe
            | ErrorKind::ConnectionAborted => PerfError::ExchangeClosed {
                peer: self.peer,
                doing,
            },
            _ => PerfError::Exchange {
                peer: self.peer,
                doing,
                source: e,
            },
        }
    }

    fn send(&mut self, data: &[u8], doing: &'static str) -> Result<()> {
        // A few hundred bytes at most: the socket buffer takes them without blocking.
        self.s.write_all(data).map_err(|e| self.io_err(doing, e))
    }

    /// Reads exactly `buf`, running `nic` meanwhile; gives up after `timeout` without a
    /// byte from the peer or a packet from the NIC.
    fn recv(
        &mut self,
        mut nic: Option<&mut Nic>,
        buf: &mut [u8],
        doing: &'static str,
    ) -> Result<()> {
        self.s
            .set_nonblocking(true)
            .map_err(|e| self.io_err(doing, e))?;
        let mut got = 0;
        let mut last = Instant::now();
        let mut spin = Spin::new(nic.as_deref().map_or(Duration::ZERO, |n| n.spin));
        while got < buf.len() {
            match self.s.read(&mut buf[got..]) {
                Ok(0) => return Err(self.io_err(doing, ErrorKind::UnexpectedEof.into())),
                Ok(n) => {
                    got += n;
                    last = Instant::now();
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    let wait = Duration::from_millis(20);
                    if let Some(n) = nic.as_deref_mut() {
                        // The peer's traffic may be running: poll as the data loops do.
                        if n.service()? {
                            spin.active();
                            last = Instant::now();
                            continue;
                        }
                        if spin.keep_polling() {
                            continue;
                        }
                        spin.slept();
                    }
                    if last.elapsed() > self.timeout {
                        return Err(self.io_err(doing, ErrorKind::TimedOut.into()));
                    }
                    match nic.as_deref() {
                        Some(n) => n
                            .ctx
                            .wait_with(&[self.s.as_fd()], wait)
                            .map_err(verbs("waiting for the NIC"))?,
                        None => wait_readable(&[self.s.as_fd()], wait),
                    }
                }
                Err(e) => return Err(self.io_err(doing, e)),
            }
        }
        self.s
            .set_nonblocking(false)
            .map_err(|e| self.io_err(doing, e))
    }

    /// One step: the client writes first, the server reads first.
    fn xchg(
        &mut self,
        nic: Option<&mut Nic>,
        my: &[u8],
        rem: &mut [u8],
        doing: &'static str,
    ) -> Result<()> {
        if self.client {
            self.send(my, doing)?;
            self.recv(nic, rem, doing)
        } else {
            self.recv(nic, rem, doing)?;
            self.send(my, doing)
        }
    }

    fn hand_shake(
        &mut self,
        nic: Option<&mut Nic>,
        my: &Record,
        doing: &'static str,
    ) -> Result<Record> {
        let mut rem = [0u8; RECORD_LEN];
        self.xchg(nic, &my.to_bytes(), &mut rem, doing)?;
        Record::parse(&rem).ok_or_else(|| PerfError::Record {
            peer: self.peer,
            what: "address record",
            text: String::from_utf8_lossy(&rem).into_owned(),
        })
    }

    fn xchg_u64(&mut self, nic: Option<&mut Nic>, v: u64, doing: &'static str) -> Result<u64> {
        let mut rem = [0u8; 8];
        self.xchg(nic, &v.to_be_bytes(), &mut rem, doing)?;
        Ok(u64::from_be_bytes(rem))
    }

    /// perftest's `xchg_bw_reports`: five 8-byte big-endian values, one step each.
    fn xchg_reports(&mut self, mut nic: Option<&mut Nic>, my: &Report) -> Result<Report> {
        const DOING: &str = "exchanging the reports";
        Ok(Report {
            size: self.xchg_u64(nic.as_deref_mut(), my.size, DOING)?,
            iters: self.xchg_u64(nic.as_deref_mut(), my.iters, DOING)?,
            bw_peak: f64::from_bits(self.xchg_u64(
                nic.as_deref_mut(),
                my.bw_peak.to_bits(),
                DOING,
            )?),
            bw_avg: f64::from_bits(self.xchg_u64(
                nic.as_deref_mut(),
                my.bw_avg.to_bits(),
                DOING,
            )?),
            msg_rate: f64::from_bits(self.xchg_u64(nic, my.msg_rate.to_bits(), DOING)?),
        })
    }
}

// ---- the NIC -------------------------------------------------------------------------------

struct Nic {
    ctx: Context,
    /// `--spin-us`.
    spin: Duration,
    mr: Arc<MemoryRegion>,
    cq: u32,
    qpn: u32,
    bind: IpAddr,
    peer: IpAddr,
}

impl Nic {
    /// An asynchronous QP error ends the test.
    fn check_events(&mut self) -> Result<()> {
        if let Some(event) = self.ctx.poll_async_event() {
            if !matches!(event, Event::Engine(AsyncEvent::SqDrained { .. })) {
                let state = self.ctx.qp_state(self.qpn).unwrap_or(QpState::Err);
                let hint = match event {
                    Event::Engine(
                        AsyncEvent::QpRequestError { .. } | AsyncEvent::QpAccessError { .. },
                    ) => {
                        ": the peer sent a request this side refused (a size beyond this \
                         side's -s, or a different test? give both sides the same test and -s)"
                    }
                    _ => "",
                };
                return Err(PerfError::Async { event, state, hint });
            }
        }
        Ok(())
    }

    /// Runs the NIC once; an asynchronous QP error ends the test.
    fn service(&mut self) -> Result<bool> {
        self.check_events()?;
        self.ctx.progress().map_err(verbs("running the NIC"))
    }

    /// After a poll of the CQ that found nothing (`busy`: the caller has work of its own):
    /// runs the NIC once more; when neither it nor the caller had anything to do, polls
    /// on while `spin` allows and then sleeps until a datagram or the next timer; an error
    /// once nothing has progressed for the plan's timeout since `progress` (`done` of its
    /// messages complete).
    fn step(
        &mut self,
        spin: &mut Spin,
        busy: bool,
        progress: Instant,
        p: &Plan,
        done: u64,
    ) -> Result<()> {
        if self.service()? {
            spin.active();
            return Ok(());
        }
        if busy || spin.keep_polling() {
            return Ok(());
        }
        if progress.elapsed() > p.timeout {
            return Err(PerfError::Stalled {
                secs: p.timeout.as_secs_f64(),
                done,
                iters: p.iters,
                hint: self.stall_hint(),
            });
        }
        self.ctx
            .wait(Duration::from_millis(100))
            .map_err(verbs("waiting for the NIC"))?;
        spin.slept();
        Ok(())
    }

    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: IOVA + off,
            length: len,
            lkey: self.mr.lkey(),
        }
    }

    /// Why traffic probably stopped, from what the NIC saw of the peer.
    fn stall_hint(&self) -> String {
        let c = self.ctx.counters();
        let (peer, local) = (self.peer, self.bind);
        if c.get(verbs::Counter::RcvdRnrErr) > 0 {
            format!(
                ": {peer} answers with RNR NAKs, it has no receive posted: is it a send server \
                 (`roce-emu perf send` or ib_send_bw)? give both sides the same test"
            )
        } else if c.get(verbs::Counter::RcvdPkts) == 0 {
            format!(
                ": nothing at all came from {peer}: it cannot reach {local} on UDP port 4791, \
                 or it does not run this test (give both sides the same test)"
            )
        } else {
            format!(
                ": {peer} stopped sending: did it end (see its output), or does it run a \
                 different -n or test? (give both sides the same test, -n and -s)"
            )
        }
    }

    /// Keeps answering the peer for a moment after the test: a user-space NIC answers
    /// nothing once its process exits, and the peer's last ACK or retransmission may still
    /// be on its way.
    fn linger(&mut self, quiet: Duration, max: Duration) {
        self.ctx.linger(quiet, max);
    }
}

/// The port MTU a NIC on `bind`'s interface has: the largest path MTU whose packets (IP,
/// UDP, BTH, RETH, payload, ICRC) fit the link; 1024 when the link is unknown.
fn port_mtu(bind: IpAddr) -> Mtu {
    let ip = if bind.is_ipv4() { 20 } else { 40 };
    let overhead = ip + 8 + 12 + 16 + 4;
    let Some(link) = link_mtu(bind) else {
        return Mtu::M1024;
    };
    [Mtu::M4096, Mtu::M2048, Mtu::M1024, Mtu::M512]
        .into_iter()
        .find(|m| m.bytes() + overhead <= link)
        .unwrap_or(Mtu::M256)
}

/// The byte `--check` expects at `off` of a buffer filled with `seed`.
/// `pattern` over `0..len`.
fn pattern_bytes(seed: u8, len: u64) -> Vec<u8> {
    (0..len).map(|i| pattern(i, seed)).collect()
}

/// Bytes of a latency message that carry data: a WRITE's last byte carries the turn.
fn lat_data_len(test: Test, size: u32) -> u64 {
    match test {
        Test::Write => u64::from(size.saturating_sub(1)),
        _ => u64::from(size),
    }
}

/// `--check` of one latency message: `len` bytes at `off` are the peer's pattern.
fn check_lat(mr: &MemoryRegion, off: u64, len: u64, seed: u8, k: u64) -> Result<()> {
    let (at, end) = (off as usize, (off + len) as usize);
    mr.with_bytes_in(at..end, |got| {
        match got
            .iter()
            .enumerate()
            .find(|&(j, &x)| x != pattern(j as u64, seed))
        {
            None => Ok(()),
            Some((j, &x)) => Err(PerfError::Check(format!(
                "message {k}: byte {j} is {x:#04x}, expected {:#04x}",
                pattern(j as u64, seed)
            ))),
        }
    })
}

fn pattern(off: u64, seed: u8) -> u8 {
    (off.wrapping_mul(131).wrapping_add(u64::from(seed)) % 251) as u8
}

fn fill_pattern(mr: &MemoryRegion, seed: u8) {
    mr.with_bytes_mut(|b| {
        for (i, x) in b.iter_mut().enumerate() {
            *x = pattern(i as u64, seed);
        }
    });
}

/// perftest's `INC`: `size` rounded up to whole cache lines (at least one).
fn stride(size: u32, cache_line: u32) -> u64 {
    u64::from(size.max(1)).div_ceil(u64::from(cache_line)) * u64::from(cache_line)
}

/// Where message `i` goes (perftest's `increase_rem_addr`): step by `stride`, wrapping at
/// the cycle buffer, when a message fits twice in it; otherwise always offset 0.
fn offset(i: u64, size: u32, geo: &Geometry) -> u64 {
    if size <= geo.cycle / 2 {
        let slots = u64::from(geo.cycle) / geo.stride;
        (i % slots) * geo.stride
    } else {
        0
    }
}

#[derive(Debug, Clone, Copy)]
struct Geometry {
    cycle: u32,
    stride: u64,
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
            let (s, peer) = oob::accept_for(bind, args.port, wait).map_err(oob_err(tool))?;
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
        .create_qp(&QpInit {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            cap: QpCap {
                max_send_wr: args.tx_depth as usize,
                max_recv_wr: args.rx_depth as usize,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
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
        12,
    );
    e.modify_qp(qpn, &rtr)
        .map_err(verbs("moving the QP to RTR"))?;
    let rd_atomic = rem.out_reads.clamp(1, u16::from(max_rd)) as u8;
    e.modify_qp(qpn, &QpAttr::rts(Psn::new(me.psn), 14, 7, 7, rd_atomic))
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
        if test == Test::Send {
            // A send server still waiting for messages never reaches this step: say so.
            let closing = if client && test == Test::Send {
                "closing (is the server still waiting for messages? give both sides the same -n)"
            } else {
                "closing"
            };
            oob.hand_shake(Some(&mut nic), &me, closing)?;
            let _ = oob.s.write_all(b"done\0");
        }
        // ib_write_lat just ends; either way the peer may still need our last ACK.
        nic.linger(Duration::from_millis(100), Duration::from_millis(1000));
        if let Some(path) = &args.nic.pcap {
            eprintln!("{}", nic.ctx.capture_summary(path));
        }
        if args.json {
            let mut j = lat_json(test, &r, path_mtu, client, bind, peer_ip);
            j["counters"] = nic.ctx.counters().nonzero().collect();
            j["io"] = io_json(&nic.ctx);
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
    // ctx_close_connection: one more hand shake, then "done" from each side.
    // A send server still waiting for messages never reaches this step: say so.
    let closing = if client && test == Test::Send {
        "closing (is the server still waiting for messages? give both sides the same -n)"
    } else {
        "closing"
    };
    oob.hand_shake(Some(&mut nic), &me, closing)?;
    let _ = oob.s.write_all(b"done\0");
    nic.linger(Duration::from_millis(50), Duration::from_millis(500));
    if let Some(path) = &args.nic.pcap {
        eprintln!("{}", nic.ctx.capture_summary(path));
    }

    if args.json {
        let mut j = report_json(test, args, &shown, path_mtu, client, bind, peer_ip);
        j["counters"] = nic.ctx.counters().nonzero().collect();
        j["io"] = io_json(&nic.ctx);
        println!("{j}");
    } else {
        print_report(&shown);
        if plan.check {
            println!(" --check: every byte verified");
        }
    }
    Ok(())
}

fn print_banner(test: Test, args: &Args, size: u32, mtu: Mtu, client: bool) {
    let line = "-".repeat(87);
    println!("{line}");
    if args.lat {
        // ib_write_lat / ib_send_lat: one message in flight, no CQ moderation; the client
        // alone prints its TX depth (shared/captures/write_lat_s8.txt).
        println!("                    {}", test.lat_title());
        println!(" Connection type : RC\t\tUsing SRQ      : OFF");
        if client {
            println!(" TX depth        : 1");
        }
        println!(
            " Mtu             : {}[B]\t\tMessage size   : {size}",
            mtu.bytes()
        );
        println!(
            " Iterations      : {}\t\t{}",
            args.iters.unwrap_or(1000),
            if client { "Client" } else { "Server" }
        );
        println!("{line}");
        return;
    }
    println!("                    {}", test.title());
    println!(" Connection type : RC\t\tUsing SRQ      : OFF");
    println!(
        " TX depth        : {}\t\t{}",
        args.tx_depth,
        if client { "Client" } else { "Server" }
    );
    if test == Test::Atomic {
        println!(" Atomic type     : {}", args.atomic.name());
    }
    println!(
        " Mtu             : {}[B]\t\tMessage size   : {size}",
        mtu.bytes()
    );
    println!(
        " CQ Moderation   : {}\t\tIterations     : {}",
        args.cq_mod,
        args.iters
            .map_or_else(|| "default".to_string(), |n| n.to_string())
    );
    println!("{line}");
}

fn print_record(what: &str, r: &Record) {
    println!(
        "{what} LID {:#06x} QPN {:#06x} PSN {:#08x} RKey {:#010x} VAddr {:#018x}",
        r.lid, r.qpn, r.psn, r.rkey, r.vaddr
    );
    let gid: Vec<String> = r.gid.iter().map(|b| format!("{b:02x}")).collect();
    println!(" GID: {}", gid.join(":"));
}

fn print_report(r: &Report) {
    let line = "-".repeat(87);
    println!("{line}");
    println!(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]");
    println!(
        " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
        r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
    );
    println!("{line}");
}

fn report_json(
    test: Test,
    args: &Args,
    r: &Report,
    mtu: Mtu,
    client: bool,
    bind: IpAddr,
    peer: IpAddr,
) -> serde_json::Value {
    serde_json::json!({
        "test": test.tool(),
        "role": if client { "client" } else { "server" },
        "atomic": (test == Test::Atomic).then_some(args.atomic.name()),
        "bytes": r.size,
        "iterations": r.iters,
        "bw_peak_mb_per_sec": r.bw_peak,
        "bw_average_mb_per_sec": r.bw_avg,
        "msg_rate_mpps": r.msg_rate,
        "mtu": mtu.bytes(),
        "local": bind.to_string(),
        "peer": peer.to_string(),
        "checked": args.check,
    })
}

// ---- the traffic ---------------------------------------------------------------------------

struct Plan {
    test: Test,
    atomic: AtomicOp,
    size: u32,
    iters: u64,
    tx_depth: u64,
    cq_mod: u64,
    check: bool,
    timeout: Duration,
    geo: Geometry,
}

/// Throughput from (messages done, time) marks: average over the whole run, peak over
/// the best stretch between two marks.
struct Meter {
    start: Instant,
    marks: Vec<(u64, Instant)>,
}

impl Meter {
    fn new(capacity: usize) -> Meter {
        Meter {
            start: Instant::now(),
            marks: Vec::with_capacity(capacity),
        }
    }

    fn report(&self, size: u32, iters: u64) -> Report {
        const MB: f64 = 1_048_576.0;
        let rate = |n: u64, d: Duration| {
            let s = d.as_secs_f64().max(1e-9);
            (n as f64 * f64::from(size) / s / MB, n as f64 / s / 1e6)
        };
        let end = self.marks.last().map_or(self.start, |m| m.1);
        let (bw_avg, msg_rate) = rate(iters, end - self.start);
        let mut bw_peak = bw_avg;
        let mut prev = (0, self.start);
        for &(n, t) in &self.marks {
            if n > prev.0 && t > prev.1 {
                bw_peak = bw_peak.max(rate(n - prev.0, t - prev.1).0);
            }
            prev = (n, t);
        }
        Report {
            size: u64::from(size),
            iters,
            bw_peak,
            bw_avg,
            msg_rate,
        }
    }
}

fn op_name(test: Test) -> &'static str {
    match test {
        Test::Write => "RDMA WRITE",
        Test::Read => "RDMA READ",
        Test::Send => "SEND",
        Test::Atomic => "atomic",
    }
}

fn failure(test: Test, n: u64, iters: u64, status: WcStatus, size: u32, peer: IpAddr) -> PerfError {
    let hint = match status {
        WcStatus::RemAccessErr => format!(
            ": the peer refused the remote address or key: is its -s smaller than our {size}, \
             or is it running a different test?"
        ),
        WcStatus::RemInvReqErr => format!(
            ": the peer refused the {size}-byte message: is its -s smaller, or is it \
             running a different test?"
        ),
        WcStatus::RetryExcErr => format!(
            ": {peer} stopped acknowledging: is the peer still running, and can it reach us \
             on UDP port 4791?"
        ),
        WcStatus::RnrRetryExcErr => ": the peer never posted a receive".to_string(),
        _ => String::new(),
    };
    PerfError::Completion {
        op: op_name(test),
        n,
        iters,
        status,
        hint,
    }
}

/// The client's test: `iters` operations, `tx_depth` in flight, a completion every
/// `cq_mod` and for the last.
fn client_traffic(nic: &mut Nic, p: &Plan, rem: &Record) -> Result<Report> {
    let mut wc = [Completion::default(); 16];
    let slots = if p.size <= p.geo.cycle / 2 {
        (u64::from(p.geo.cycle) / p.geo.stride) as usize
    } else {
        1
    };
    // How many operations each atomic slot has seen: CMP_AND_SWAP swaps k for k + 1.
    let mut visits = vec![0u64; slots];
    let mut meter = Meter::new((p.iters / p.cq_mod) as usize + 2);
    let (mut posted, mut done) = (0u64, 0u64);
    let mut progress = Instant::now();
    let mut spin = Spin::new(nic.spin);
    while done < p.iters {
        while posted < p.iters && posted - done < p.tx_depth {
            let off = offset(posted, p.size, &p.geo);
            let remote = Remote {
                va: rem.vaddr + off,
                rkey: rem.rkey,
            };
            let slot = (off / p.geo.stride) as usize;
            let op = match p.test {
                Test::Write => SendOp::Write { remote },
                Test::Read => SendOp::Read { remote },
                Test::Send => SendOp::Send,
                Test::Atomic => match p.atomic {
                    AtomicOp::FetchAndAdd => SendOp::FetchAdd { remote, add: 1 },
                    AtomicOp::CmpAndSwap => SendOp::CompareSwap {
                        remote,
                        compare: visits[slot],
                        swap: visits[slot] + 1,
                    },
                },
            };
            visits[slot] += 1;
            let sge = [nic.sge(off, p.size)];
            let signaled = (posted + 1) % p.cq_mod == 0 || posted + 1 == p.iters;
            if posted == 0 {
                meter.start = Instant::now();
            }
            nic.ctx
                .post_send(
                    nic.qpn,
                    &SendWr {
                        wr_id: posted,
                        op,
                        local: Local::Sges(&sge),
                        flags: SendFlags {
                            signaled,
                            ..Default::default()
                        },
                    },
                )
                .map_err(verbs("posting a work request"))?;
            posted += 1;
        }
        let n = nic
            .ctx
            .poll_cq(nic.cq, &mut wc)
            .map_err(verbs("polling the CQ"))?;
        if n > 0 {
            let now = Instant::now();
            for c in &wc[..n] {
                if c.status != WcStatus::Success {
                    return Err(failure(
                        p.test,
                        c.wr_id + 1,
                        p.iters,
                        c.status,
                        p.size,
                        nic.peer,
                    ));
                }
                done = done.max(c.wr_id + 1);
            }
            meter.marks.push((done, now));
            progress = now;
            continue;
        }
        nic.step(&mut spin, false, progress, p, done)?;
    }
    if p.check && p.test == Test::Read {
        // Each READ brought the server's bytes at the same offset into ours.
        for i in 0..p.iters.min(slots as u64) {
            let off = offset(i, p.size, &p.geo);
            check_range(&nic.mr, off, p.size, SERVER_SEED, "READ data")?;
        }
    }
    Ok(meter.report(p.size, p.iters))
}

fn check_range(mr: &MemoryRegion, off: u64, len: u32, seed: u8, what: &str) -> Result<()> {
    mr.with_bytes_in(
        off as usize..off as usize + len as usize,
        |region| match region
            .iter()
            .enumerate()
            .find(|&(j, &x)| x != pattern(off + j as u64, seed))
        {
            None => Ok(()),
            Some((j, &x)) => Err(PerfError::Check(format!(
                "{what}: byte {} of the buffer is {x:#04x}, expected {:#04x}",
                off + j as u64,
                pattern(off + j as u64, seed)
            ))),
        },
    )
}

/// The server's end check for WRITE and atomics, from the client's report (size, iters).
fn server_check(nic: &Nic, p: &Plan, theirs: &Report) -> Result<()> {
    if theirs.size != u64::from(p.size) || theirs.iters != p.iters {
        return Err(PerfError::Mismatch(format!(
            "the client ran {} x {} bytes, this side expected {} x {}: give both sides the same \
             -n and -s",
            theirs.iters, theirs.size, p.iters, p.size
        )));
    }
    let slots = if p.size <= p.geo.cycle / 2 {
        u64::from(p.geo.cycle) / p.geo.stride
    } else {
        1
    };
    match p.test {
        Test::Write => {
            for i in 0..p.iters.min(slots) {
                check_range(
                    &nic.mr,
                    offset(i, p.size, &p.geo),
                    p.size,
                    CLIENT_SEED,
                    "WRITE data",
                )?;
            }
        }
        Test::Atomic => {
            for s in 0..slots.min(p.iters) {
                let want = p.iters / slots + u64::from(s < p.iters % slots);
                let mut v = [0u8; 8];
                let _ = nic.mr.read(IOVA + s * p.geo.stride, &mut v);
                let got = u64::from_ne_bytes(v);
                if got != want {
                    return Err(PerfError::Check(format!(
                        "atomic slot {s} holds {got}, expected {want} operations"
                    )));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// The SEND server's receives: `rx_depth` posted at distinct offsets, re-posted as they
/// complete until `iters` messages are in.
struct RecvState {
    posted: u64,
    depth: u64,
    started: Option<Instant>,
    /// --recv-hold-us: how long a completed receive waits before it is posted again, and
    /// when each waiting one is due (in completion order, so the front is the earliest).
    hold: Duration,
    held: VecDeque<Instant>,
}

impl RecvState {
    fn post(
        nic: &mut Nic,
        args: &Args,
        iters: u64,
        size: u32,
        geo: &Geometry,
    ) -> Result<RecvState> {
        let mut r = RecvState {
            posted: 0,
            depth: u64::from(args.rx_depth),
            started: None,
            hold: Duration::from_micros(args.recv_hold_us),
            held: VecDeque::new(),
        };
        for _ in 0..r.depth.min(iters) {
            r.post_one(nic, size, geo)?;
        }
        Ok(r)
    }

    fn post_one(&mut self, nic: &mut Nic, size: u32, geo: &Geometry) -> Result<()> {
        let off = (self.posted % self.depth) * geo.stride;
        let sge = [nic.sge(off, size)];
        nic.ctx
            .post_recv(
                nic.qpn,
                &RecvWr {
                    wr_id: self.posted,
                    sges: &sge,
                },
            )
            .map_err(verbs("posting a receive"))?;
        self.posted += 1;
        Ok(())
    }

    /// A receive completed: post the next one now, or after the hold.
    fn replace(&mut self, nic: &mut Nic, p: &Plan, now: Instant) -> Result<()> {
        if self.hold.is_zero() {
            self.repost(nic, p)
        } else {
            self.held.push_back(now + self.hold);
            Ok(())
        }
    }

    /// Posts the held receives that are due; true while some are still held. Reads the
    /// clock only when some are: this runs on every idle poll.
    fn release(&mut self, nic: &mut Nic, p: &Plan) -> Result<bool> {
        if self.held.is_empty() {
            return Ok(false);
        }
        let now = Instant::now();
        while self.held.front().is_some_and(|&due| due <= now) {
            self.held.pop_front();
            self.repost(nic, p)?;
        }
        Ok(!self.held.is_empty())
    }

    /// Posts the next receive, if the test still needs one.
    fn repost(&mut self, nic: &mut Nic, p: &Plan) -> Result<()> {
        if self.posted < p.iters {
            self.post_one(nic, p.size, &p.geo)?;
        }
        Ok(())
    }
}

fn server_send_traffic(nic: &mut Nic, p: &Plan, r: &mut RecvState) -> Result<Report> {
    let mut wc = [Completion::default(); 16];
    let mut meter = Meter::new((p.iters / p.cq_mod) as usize + 2);
    let mut done = 0u64;
    let mut progress = Instant::now();
    let mut spin = Spin::new(nic.spin);
    while done < p.iters {
        let n = nic
            .ctx
            .poll_cq(nic.cq, &mut wc)
            .map_err(verbs("polling the CQ"))?;
        if n > 0 {
            let now = Instant::now();
            let start = *r.started.get_or_insert(now);
            if done == 0 {
                meter.start = start;
            }
            for c in &wc[..n] {
                if c.status != WcStatus::Success {
                    return Err(failure(
                        p.test,
                        c.wr_id + 1,
                        p.iters,
                        c.status,
                        p.size,
                        nic.peer,
                    ));
                }
                if c.byte_len != p.size {
                    return Err(PerfError::Mismatch(format!(
                        "message {} has {} bytes, expected -s {}: give both sides the same -s",
                        c.wr_id + 1,
                        c.byte_len,
                        p.size
                    )));
                }
                if p.check {
                    // Message m came from the client's offset for m, into our slot for m.
                    let ours = (c.wr_id % r.depth) * p.geo.stride;
                    let theirs = offset(c.wr_id, p.size, &p.geo);
                    let slot = ours as usize..ours as usize + p.size as usize;
                    nic.mr.with_bytes_in(slot, |got| {
                        match got
                            .iter()
                            .enumerate()
                            .find(|&(j, &x)| x != pattern(theirs + j as u64, CLIENT_SEED))
                        {
                            None => Ok(()),
                            Some((j, &x)) => Err(PerfError::Check(format!(
                                "SEND {}: byte {j} is {x:#04x}, expected {:#04x}",
                                c.wr_id + 1,
                                pattern(theirs + j as u64, CLIENT_SEED)
                            ))),
                        }
                    })?;
                }
                done += 1;
                r.replace(nic, p, now)?;
            }
            if done % p.cq_mod == 0 || done == p.iters {
                meter.marks.push((done, now));
            }
            progress = now;
            continue;
        }
        // Held receives: keep polling (no sleep on the socket) until they are posted.
        let holding = r.release(nic, p)?;
        nic.step(&mut spin, holding, progress, p, done)?;
    }
    Ok(meter.report(p.size, p.iters))
}

// ---- latency (ib_write_lat, ib_send_lat) ---------------------------------------------------

fn print_lat(r: &LatReport) {
    let line = "-".repeat(87);
    println!("{line}");
    println!(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    \
         t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
    );
    println!(
        " {:<7} {:<10}     {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        r.size, r.iters, r.t_min, r.t_max, r.t_typical, r.t_avg, r.t_stdev, r.p99, r.p999
    );
    println!("{line}");
}

/// The I/O path's counters (the engine's are under "counters").
fn io_json(ctx: &Context) -> serde_json::Value {
    let b = ctx.port_stats();
    let io = ctx.io_stats();
    serde_json::json!({
        "tx_datagrams": io.tx_datagrams,
        "rx_datagrams": io.rx_datagrams,
        "gso_sends": b.gso_sends,
        "gso_segments": b.gso_segments,
        "gso_fallbacks": b.gso_fallbacks,
        "gro_datagrams": b.gro_datagrams,
        "gro_segments": b.gro_segments,
        "truncated": b.truncated,
        "tx_stalled": b.tx_stalled,
    })
}

fn lat_json(
    test: Test,
    r: &LatReport,
    mtu: Mtu,
    client: bool,
    bind: IpAddr,
    peer: IpAddr,
) -> serde_json::Value {
    serde_json::json!({
        "test": if test == Test::Write { "ib_write_lat" } else { "ib_send_lat" },
        "role": if client { "client" } else { "server" },
        "bytes": r.size,
        "iterations": r.iters,
        "t_min_usec": r.t_min,
        "t_max_usec": r.t_max,
        "t_typical_usec": r.t_typical,
        "t_avg_usec": r.t_avg,
        "t_stdev_usec": r.t_stdev,
        "p99_usec": r.p99,
        "p99_9_usec": r.p999,
        "mtu": mtu.bytes(),
        "local": bind.to_string(),
        "peer": peer.to_string(),
    })
}

/// Where the peer's writes land in ib_write_lat's layout: perftest's `BUFF_SIZE`.
fn lat_half(size: u32, cycle: u32) -> u64 {
    u64::from(size.max(cycle))
}

/// Latency figures in microseconds, of half the round trip, as perftest's
/// `print_report_lat` gives them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LatReport {
    pub size: u64,
    pub iters: u64,
    pub t_min: f64,
    pub t_max: f64,
    pub t_typical: f64,
    pub t_avg: f64,
    pub t_stdev: f64,
    pub p99: f64,
    pub p999: f64,
}

impl LatReport {
    /// From the times of each post: consecutive posts are one round trip apart.
    fn from_posts(size: u32, posts: &[Instant]) -> LatReport {
        let mut d: Vec<f64> = posts
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1e6 / 2.0)
            .collect();
        if d.is_empty() {
            return LatReport {
                size: u64::from(size),
                iters: posts.len() as u64,
                ..Default::default()
            };
        }
        d.sort_by(f64::total_cmp);
        let n = d.len();
        let avg = d.iter().sum::<f64>() / n as f64;
        let var = d.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        let pct = |p: f64| d[((n as f64 * p).ceil() as usize).clamp(1, n) - 1];
        LatReport {
            size: u64::from(size),
            iters: posts.len() as u64,
            t_min: d[0],
            t_max: d[n - 1],
            t_typical: d[n / 2],
            t_avg: avg,
            t_stdev: var.sqrt(),
            p99: pct(0.99),
            p999: pct(0.999),
        }
    }
}

/// The two sides take turns (ib_send_lat: the client first; ib_write_lat: the server);
/// each side sends message k + 1 once the peer's message k is in (its last byte carries k for WRITE, a receive completes for
/// SEND) and its own previous message completed.
fn lat_traffic(
    nic: &mut Nic,
    p: &Plan,
    rem: &Record,
    client: bool,
    half: u64,
    mut recv: Option<&mut RecvState>,
) -> Result<LatReport> {
    let mut wc = [Completion::default(); 16];
    let mut posts = Vec::with_capacity(p.iters as usize);
    let (mut scnt, mut rcnt, mut ccnt, mut arrived) = (0u64, 0u64, 0u64, 0u64);
    let poll_at = IOVA + half + u64::from(p.size.max(1)) - 1;
    let data_len = lat_data_len(p.test, p.size);
    let (mine, theirs) = if client {
        (CLIENT_SEED, SERVER_SEED)
    } else {
        (SERVER_SEED, CLIENT_SEED)
    };
    let mut progress = Instant::now();
    let mut spin = Spin::new(nic.spin);
    while scnt < p.iters || rcnt < p.iters || ccnt < p.iters {
        // Completions: our sends, and (SEND) the peer's messages.
        let n = nic
            .ctx
            .poll_cq(nic.cq, &mut wc)
            .map_err(verbs("polling the CQ"))?;
        for c in &wc[..n] {
            if c.status != WcStatus::Success {
                return Err(failure(
                    p.test,
                    c.wr_id + 1,
                    p.iters,
                    c.status,
                    p.size,
                    nic.peer,
                ));
            }
            if c.opcode == verbs::WcOpcode::Recv {
                arrived += 1;
                if let Some(r) = recv.as_deref_mut() {
                    if p.check {
                        let slot = (c.wr_id % r.depth) * p.geo.stride;
                        check_lat(&nic.mr, slot, data_len, theirs, arrived)?;
                    }
                    if r.posted < p.iters {
                        r.post_one(nic, p.size, &p.geo)?;
                    }
                }
            } else {
                ccnt += 1;
            }
        }
        if n > 0 {
            progress = Instant::now();
        }
        if p.test == Test::Write && rcnt < p.iters {
            let mut b = [0u8];
            let _ = nic.mr.read(poll_at, &mut b);
            // The peer's message k carries k's low byte (perftest's `(char)++scnt`).
            if b[0] == ((rcnt + 1) & 0xff) as u8 {
                arrived = rcnt + 1;
                if p.check {
                    check_lat(&nic.mr, half, data_len, theirs, arrived)?;
                }
            }
        }
        // Take in the peer's message, then send ours when it is our turn: the side that
        // starts sends k + 1 after the peer's k, the other after the peer's k + 1; both
        // after their own previous message completed (perftest waits for it the same way).
        // ib_send_lat's client starts; ib_write_lat's server does.
        if arrived > rcnt {
            rcnt += 1;
        }
        let starts = (p.test == Test::Send) == client;
        let turn = if starts {
            rcnt == scnt
        } else {
            rcnt == scnt + 1
        };
        if scnt < p.iters && ccnt == scnt && turn {
            posts.push(Instant::now());
            let sge = [nic.sge(0, p.size)];
            let op = match p.test {
                Test::Write => {
                    // The last byte of what we write tells the peer which message it is.
                    let _ = nic
                        .mr
                        .write(IOVA + u64::from(p.size) - 1, &[((scnt + 1) & 0xff) as u8]);
                    SendOp::Write {
                        remote: Remote {
                            va: rem.vaddr,
                            rkey: rem.rkey,
                        },
                    }
                }
                _ => {
                    if p.check {
                        // A receive slot may share these bytes: put our pattern back. The
                        // peer's next message cannot land before this one has left.
                        let _ = nic.mr.write(IOVA, &pattern_bytes(mine, data_len));
                    }
                    SendOp::Send
                }
            };
            nic.ctx
                .post_send(
                    nic.qpn,
                    &SendWr {
                        wr_id: scnt,
                        op,
                        local: Local::Sges(&sge),
                        flags: SendFlags {
                            signaled: true,
                            ..Default::default()
                        },
                    },
                )
                .map_err(verbs("posting a work request"))?;
            scnt += 1;
            progress = Instant::now();
        }
        nic.step(&mut spin, n > 0, progress, p, rcnt.min(scnt))?;
    }
    Ok(LatReport::from_posts(p.size, &posts))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client's record of shared/captures/write_bw_s4096.pcap (rxe, perftest 4.5-0.17).
    const CAPTURED: &[u8] = b"0000:0001:000011:8db1b9:00000225:000055e9d7deb000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:0c:00000000:\0";

    #[test]
    fn record_round_trips_the_capture() {
        let r = Record::parse(CAPTURED).expect("parses");
        assert_eq!(r.out_reads, 1);
        assert_eq!(r.qpn, 0x11);
        assert_eq!(r.psn, 0x8db1b9);
        assert_eq!(r.rkey, 0x225);
        assert_eq!(r.vaddr, 0x55e9_d7de_b000);
        assert_eq!(gid_to_ip(r.gid), Some("198.18.0.12".parse().unwrap()));
        assert_eq!(&r.to_bytes()[..], CAPTURED);
        assert_eq!(CAPTURED.len(), RECORD_LEN);
    }

    #[test]
    fn malformed_records_are_refused() {
        for bad in [
            &b"\0"[..],
            b"0000:0001:000011:8db1b9:00000225:000055e9d7deb000:00\0",
            b"0000:0001:1000011:8db1b9:00000225:000055e9d7deb000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:0c:00000000:\0",
            b"0000:0001:000011:8db1b9:00000225:000055e9d7deb000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:zz:00000000:\0",
            b"no nul",
        ] {
            assert_eq!(Record::parse(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn offsets_follow_perftest() {
        // 4096-byte cycle, 64-byte lines: 8-byte atomics use 64 slots of 64 bytes.
        let g = Geometry {
            cycle: 4096,
            stride: stride(8, 64),
        };
        assert_eq!(offset(0, 8, &g), 0);
        assert_eq!(offset(1, 8, &g), 64);
        assert_eq!(offset(63, 8, &g), 63 * 64);
        assert_eq!(offset(64, 8, &g), 0);
        // A 4096-byte message does not fit twice: always offset 0.
        let g = Geometry {
            cycle: 4096,
            stride: stride(4096, 64),
        };
        assert_eq!(offset(5, 4096, &g), 0);
        assert_eq!(stride(100, 64), 128);
        assert_eq!(stride(0, 64), 64);
    }

    #[test]
    fn meter_peak_is_the_best_window() {
        let t0 = Instant::now();
        let m = Meter {
            start: t0,
            marks: vec![
                (100, t0 + Duration::from_millis(100)),
                (200, t0 + Duration::from_millis(150)),
            ],
        };
        let r = m.report(1_048_576, 200);
        assert!((r.bw_avg - 200.0 / 0.15).abs() < 1e-6, "{r:?}");
        assert!((r.bw_peak - 100.0 / 0.05).abs() < 1e-6, "{r:?}");
        assert!((r.msg_rate - 200.0 / 0.15 / 1e6).abs() < 1e-12, "{r:?}");
    }
}
