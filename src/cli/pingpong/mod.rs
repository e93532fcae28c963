//! `roce-emu pingpong`: the RC ping-pong of rdma-core's `ibv_rc_pingpong` (rdma-core 44),
//! over the UDP backend, so that either side can be the real tool on a real RoCE NIC or rxe.
//!
//! What matches `ibv_rc_pingpong`, because the other side may be it:
//!
//! - the out-of-band exchange: plain TCP, port 18515 by default; the client connects and
//!   writes first; each side sends one 52-byte record
//!   `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, GID as 32 hex digits) and a NUL; the server
//!   connects its QP before it answers; then the client sends `done\0`;
//! - the QP: one SGE each way, send queue depth 1, `-r` receives, CQ of `-r` + 1 entries; RTR
//!   with `min_rnr_timer` 12 and `max_dest_rd_atomic` 1, RTS with `timeout` 14, `retry_cnt` 7,
//!   `rnr_retry` 7 and `max_rd_atomic` 1; no remote access rights; a random 24-bit PSN;
//! - the traffic: both sides pre-post `-r` receives of `-s` bytes into the one buffer they
//!   also send from (filled with 0x7b); the client sends first; a side sends again once its
//!   previous send and the next receive have both completed; receives are re-posted in bulk
//!   when one or none is left; `-c` sets byte 0 of every page of the client's buffer to 0
//!   before the first send and has the server check those bytes after the last exchange;
//! - the output: the `local address:` and `remote address:` lines and the two result lines,
//!   timed from the client's first post (the server: from the end of the exchange) to the
//!   last completion, with `bytes = size * iters * 2`.
//!
//! What differs: the NIC's GID is its IP address (`--bind`; an IPv4 address as the
//! IPv4-mapped `::ffff:a.b.c.d`, which is rxe's GID for it), so `-g` is accepted and
//! ignored; `-l` too (no VLAN priority on a UDP socket), and `-d`/`-i` (one device, one
//! port). The server listens on 0.0.0.0:PORT as rc_pingpong does, but on [::]:PORT
//! (dual-stack) when its GID is IPv6, so a client that names it by its IPv6 address
//! connects; it waits for a client as long as `--wait` says (default: forever, as rc_pingpong); every later wait is bounded: the
//! client's connection attempts (`--wait`, default 5 s), each step of the exchange and any
//! stretch of traffic without a completion (`--timeout`). Any failure, a wrong `-c` check
//! included, exits with status 1 (rc_pingpong only prints `invalid data in page N`). The
//! data loop polls the NIC for a while before it sleeps on the socket (`Spin`), where
//! rc_pingpong busy-polls its CQ.

mod exchange;
mod nic;
mod record;

use exchange::*;
use nic::*;
pub use record::*;

use super::oob::{self, LocateError, OobError};
use crate::verbs::Spin;
use crate::verbs::{self, Context, Event};
use crate::verbs::{Access, MemoryRegion, Sge};
use crate::verbs::{
    AsyncEvent, Completion, Local, Mtu, QpAttr, QpCap, QpInit, QpState, RecvWr, SendFlags, SendOp,
    SendWr, WcStatus,
};
use crate::verbs::{DEFAULT_MIN_RNR_TIMER, DEFAULT_TIMEOUT, MAX_RETRY_CNT, RNR_RETRY_INFINITE};
use crate::wire::Psn;
use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `ibv_rc_pingpong`'s default TCP port.
pub const DEFAULT_PORT: u16 = 18515;
/// Bytes of one address record: `sizeof "0000:000000:000000:" + 32 hex digits` with its NUL.
pub const RECORD_LEN: usize = 52;
/// What the client sends after the server's record: `sizeof "done"` bytes.
pub const DONE: &[u8; 5] = b"done\0";
/// rc_pingpong's work request IDs (they double as its `pending` bits).
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// The page size `-c` steps by: rc_pingpong uses `sysconf(_SC_PAGESIZE)`, 4096 on x86-64.
const PAGE_SIZE: usize = 4096;
/// What `-c` puts in byte 0 of every page: rc_pingpong's `i / page_size % sizeof(char)`,
/// which is 0 whatever the page.
const CHK_BYTE: u8 = 0;
/// Where the buffer sits in the NIC's address space (never on the wire for SENDs).
const IOVA: u64 = 0x7f00_0000_0000;
/// How long the client tries to connect when `--wait` is not given.
const DEFAULT_CONNECT_WAIT: f64 = 5.0;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Server to connect to (client role); without it, wait for a client (server role).
    pub server: Option<String>,
    /// TCP port of the address exchange.
    #[arg(short = 'p', long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Size of the message to exchange, bytes.
    #[arg(short = 's', long, default_value_t = 4096)]
    pub size: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value_t = 1024)]
    pub mtu: u32,
    /// Receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub iters: u32,
    /// Service level (accepted for compatibility; not used on UDP).
    #[arg(short = 'l', long, default_value_t = 0)]
    pub sl: i32,
    /// GID index (accepted for compatibility; the GID is the --bind address).
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<i32>,
    /// IB device (accepted for compatibility with rc_pingpong scripts and ignored: the NIC
    /// is the one bound to --bind).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,
    /// IB port (accepted for compatibility and ignored: the NIC has one port).
    #[arg(short = 'i', long = "ib-port", value_name = "PORT")]
    pub ib_port: Option<u32>,
    /// Validate the received buffer, as rc_pingpong -c does.
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// This NIC's IP address (its GID): UDP port 4791 is bound there. Default: 127.0.0.1 for
    /// the server, 127.0.0.2 for a client of a loopback server (::1 if the server is named
    /// by IPv6 loopback only); required otherwise. An IPv6 server listens on TCP [::].
    #[arg(long)]
    pub bind: Option<IpAddr>,
    /// Seconds the client keeps trying to connect (default 5) or the server waits for a
    /// client (default: forever, as rc_pingpong).
    #[arg(long, value_name = "SECS", value_parser = super::seconds)]
    pub wait: Option<Duration>,
    /// Seconds any step of the exchange, or the traffic, may go without progress.
    #[arg(long, value_name = "SECS", value_parser = super::seconds, default_value = "10")]
    pub timeout: Duration,
    #[command(flatten)]
    pub nic: super::NicArgs,
}

// ---- errors -----------------------------------------------------------------------------

/// Everything that ends a ping-pong early, each with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum PingpongError {
    #[error("-m {0} is not a path MTU: use 256, 512, 1024, 2048 or 4096 (the same on both sides)")]
    Mtu(u32),
    #[error("{what} must be at least 1")]
    Zero { what: &'static str },
    #[error(transparent)]
    Locate(#[from] LocateError),
    #[error(
        "--bind {bind} and the peer's GID {peer} are not the same IP version: bind an \
         address of the peer's family (or run the peer with the matching -g index)"
    )]
    Family { bind: IpAddr, peer: Ipv6Addr },
    #[error(
        "opening the NIC: {source}: IPv6 loopback has one address, ::1, and the server's NIC \
         holds its UDP port 4791 (on one machine the two NICs need two addresses): give this \
         client --bind with another IPv6 address of this machine (as root: `ip -6 addr add \
         fd00::2/128 dev lo`), or run the server with --bind on such an address"
    )]
    V6LoopbackTaken { source: verbs::Error },
    #[error("{what}: {source}")]
    Verbs {
        what: &'static str,
        source: verbs::Error,
    },
    #[error("registering the {size}-byte buffer: {source}")]
    Mem { size: u32, source: verbs::Error },
    #[error(
        "could not connect to {target} ({addrs}) within {secs} s: {source}: start the server \
         first (`roce-emu pingpong` or `ibv_rc_pingpong` without a SERVER), check -p"
    )]
    Connect {
        target: String,
        addrs: String,
        secs: f64,
        source: std::io::Error,
    },
    #[error(transparent)]
    Oob(#[from] OobError),
    #[error(
        "no answer from the peer {peer} within {secs} s while {doing}: is it \
         ibv_rc_pingpong (or roce-emu pingpong) with the same -p, running as the {role}?"
    )]
    ExchangeTimeout {
        peer: SocketAddr,
        doing: &'static str,
        secs: f64,
        role: &'static str,
    },
    #[error("the peer {peer} closed the connection while {doing}{hint}")]
    ExchangeClosed {
        peer: SocketAddr,
        doing: &'static str,
        hint: &'static str,
    },
    #[error("the exchange with {peer} failed while {doing}: {source}")]
    Exchange {
        peer: SocketAddr,
        doing: &'static str,
        source: std::io::Error,
    },
    #[error("the peer {peer} sent a malformed address record: {source} (got {text:?})")]
    Record {
        peer: SocketAddr,
        source: RecordError,
        text: String,
    },
    #[error("the peer {peer} sent {got:?} where the client's \"done\\0\" belongs")]
    NotDone { peer: SocketAddr, got: String },
    #[error(
        "the peer {peer} sent GID :: (none): run ibv_rc_pingpong with -g and the index of \
         its RoCE v2 GID for an IPv4 or IPv6 address (rxe: -g 1 for IPv4)"
    )]
    NoGid { peer: SocketAddr },
    #[error("posted only {posted} of {wanted} receives: {source}")]
    PostRecv {
        posted: u32,
        wanted: u32,
        source: verbs::Error,
    },
    #[error(
        "{what} completion failed: {status} (wr_id {wr_id}) after {scnt} sends and {rcnt} \
         receives of {iters}{hint}"
    )]
    Completion {
        what: &'static str,
        status: WcStatus,
        wr_id: u64,
        scnt: u32,
        rcnt: u32,
        iters: u32,
        hint: String,
    },
    #[error("completion for unknown wr_id {0}")]
    UnknownWrId(u64),
    #[error("asynchronous error {event:?}: the QP is in state {state}")]
    Async { event: Event, state: QpState },
    #[error(
        "no completion for {secs} s after {scnt} sends and {rcnt} receives of {iters}: the \
         peer stopped, or {peer} and {local} cannot reach each other on UDP port 4791"
    )]
    Stalled {
        secs: f64,
        scnt: u32,
        rcnt: u32,
        iters: u32,
        peer: IpAddr,
        local: IpAddr,
    },
    #[error(
        "-c: {pages} page(s) of the last message held wrong data (did the client run with -c \
         too?)"
    )]
    Invalid { pages: usize },
}

type Result<T, E = PingpongError> = std::result::Result<T, E>;

fn verbs<E: Into<verbs::Error>>(what: &'static str) -> impl FnOnce(E) -> PingpongError {
    move |source| PingpongError::Verbs {
        what,
        source: source.into(),
    }
}

// ---- the command ------------------------------------------------------------------------

/// `roce-emu pingpong`: returns the exit status.
pub fn run(args: &Args) -> i32 {
    match run_inner(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("roce-emu pingpong: {e}");
            1
        }
    }
}

fn run_inner(args: &Args) -> Result<()> {
    let mtu = Mtu::from_bytes(args.mtu).ok_or(PingpongError::Mtu(args.mtu))?;
    if args.rx_depth == 0 {
        return Err(PingpongError::Zero {
            what: "-r (rx depth)",
        });
    }
    if args.iters == 0 {
        return Err(PingpongError::Zero { what: "-n (iters)" });
    }
    let (timeout, wait) = (args.timeout, args.wait);

    // Where the server is, and so which address this NIC takes by default.
    let (addrs, bind) = oob::locate(args.server.as_deref(), args.port, args.bind)?;
    let server = args.server.as_deref().zip(addrs);

    tracing::debug!(?bind, server = ?args.server, "this NIC's address");
    if args.ib_dev.is_some() || args.ib_port.is_some() {
        tracing::info!("-d/-i ignored: the NIC is the one on {bind}");
    }
    let mut pp = Pingpong::new(args, bind, mtu).map_err(|e| match e {
        // The default client address of an IPv6 loopback server is ::1, which the server
        // itself holds when both run here: say what to do instead.
        PingpongError::Verbs {
            source: source @ verbs::Error::Port(verbs::BackendError::Bind { .. }),
            ..
        } if args.bind.is_none() && bind == IpAddr::V6(Ipv6Addr::LOCALHOST) => {
            PingpongError::V6LoopbackTaken { source }
        }
        e => e,
    })?;
    // The TCP exchange runs on `bind`; the NIC's address (its GID) is the daemon's port's
    // when attached to one (a TAP daemon's address is not the host's), else `bind`.
    let tcp = bind;
    let bind = pp.ctx.local_ip();
    pp.bind = bind;
    // rc_pingpong posts its receives before the exchange.
    pp.routs = pp.post_recv(pp.rx_depth);
    if let Some(source) = pp.recv_error.take() {
        return Err(PingpongError::PostRecv {
            posted: pp.routs,
            wanted: pp.rx_depth,
            source,
        });
    }
    let my = Dest {
        lid: 0,
        qpn: pp.qpn,
        psn: random_psn(),
        gid: ip_to_gid(bind),
    };
    print_dest("local address: ", &my);

    let rem = match &server {
        Some((name, addrs)) => {
            let wait = wait.unwrap_or(Duration::from_secs_f64(DEFAULT_CONNECT_WAIT));
            let target = format!("{name}:{}", args.port);
            let (rem, peer) = client_exchange(&target, addrs, wait, timeout, &my)?;
            print_dest("remote address:", &rem);
            pp.connect(&my, &rem, rem_peer(&rem, bind, Some(peer))?)?;
            rem
        }
        None => server_exchange(tcp, args.port, wait, timeout, &my, |rem, peer| {
            let ip = rem_peer(rem, bind, Some(peer))?;
            pp.connect(&my, rem, ip)
        })?,
    };
    if server.is_none() {
        print_dest("remote address:", &rem);
    }

    pp.pending = RECV_WRID;
    let is_client = server.is_some();
    if is_client {
        if args.chk {
            for i in (0..pp.size as usize).step_by(PAGE_SIZE) {
                pp.mr
                    .write(IOVA + i as u64, &[CHK_BYTE])
                    .map_err(|source| PingpongError::Mem {
                        size: pp.size,
                        source: source.into(),
                    })?;
            }
        }
        pp.post_send()?;
        pp.pending |= SEND_WRID;
    }
    let start = Instant::now();
    pp.run_loop(timeout)?;
    let elapsed = start.elapsed();
    tracing::debug!(?elapsed, "traffic done; answering the peer's last packets");
    pp.linger();
    if let Some(path) = &args.nic.pcap {
        eprintln!("{}", pp.ctx.capture_summary(path));
    }

    // rc_pingpong: `float usec` from whole microseconds of two gettimeofday calls.
    let usec = elapsed.as_micros() as f32;
    let bytes = i64::from(args.size) * i64::from(args.iters) * 2;
    println!(
        "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
        bytes,
        f64::from(usec) / 1_000_000.0,
        bytes as f64 * 8.0 / f64::from(usec)
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        args.iters,
        f64::from(usec) / 1_000_000.0,
        f64::from(usec / args.iters as f32)
    );
    if !is_client && args.chk {
        let mut bad = 0;
        for i in (0..pp.size as usize).step_by(PAGE_SIZE) {
            let mut b = [0u8];
            pp.mr
                .read(IOVA + i as u64, &mut b)
                .map_err(|source| PingpongError::Mem {
                    size: pp.size,
                    source: source.into(),
                })?;
            if b[0] != CHK_BYTE {
                println!("invalid data in page {}", i / PAGE_SIZE);
                bad += 1;
            }
        }
        if bad > 0 {
            return Err(PingpongError::Invalid { pages: bad });
        }
    }
    Ok(())
}

fn print_dest(what: &str, d: &Dest) {
    println!(
        "  {what} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        d.lid,
        d.qpn,
        d.psn,
        d.gid_v6()
    );
}

/// The peer's IP from its GID, checked against ours.
fn rem_peer(rem: &Dest, bind: IpAddr, peer: Option<SocketAddr>) -> Result<IpAddr> {
    let peer = peer.unwrap_or(SocketAddr::new(bind, 0));
    let ip = gid_to_ip(rem.gid).ok_or(PingpongError::NoGid { peer })?;
    if ip.is_ipv4() != bind.is_ipv4() {
        return Err(PingpongError::Family {
            bind,
            peer: rem.gid_v6(),
        });
    }
    Ok(ip)
}

/// A random 24-bit PSN (rc_pingpong: `lrand48() & 0xffffff`).
pub(crate) fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (h.finish() & 0xff_ffff) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// The first record of shared/captures/rc_pingpong_s64.pcap (rxe, rdma-core 44).
    const CAPTURED: &[u8; RECORD_LEN] = b"0000:000011:9e6004:00000000000000000000ffffc612000c\0";

    #[test]
    fn record_round_trip() {
        let d = Dest::from_record(CAPTURED).unwrap();
        assert_eq!(d.lid, 0);
        assert_eq!(d.qpn, 0x11);
        assert_eq!(d.psn, 0x9e6004);
        assert_eq!(
            gid_to_ip(d.gid),
            Some(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 12)))
        );
        assert_eq!(&d.to_record(), CAPTURED);
    }

    #[test]
    fn record_errors() {
        let mut r = *CAPTURED;
        r[51] = b'0';
        assert_eq!(Dest::from_record(&r), Err(RecordError::NoNul));
        assert_eq!(
            Dest::from_record(&CAPTURED[..51]),
            Err(RecordError::Length(51))
        );
        let mut r = *CAPTURED;
        r[4] = b'-';
        assert_eq!(Dest::from_record(&r), Err(RecordError::Fields(3)));
        let mut r = *CAPTURED;
        r[20] = b'g';
        assert!(matches!(
            Dest::from_record(&r),
            Err(RecordError::Hex { field: "GID", .. })
        ));
        assert_eq!(gid_to_ip([0; 16]), None);
    }
}
