//! `roce-emu demo`: two NICs on loopback (127.0.0.1 and 127.0.0.2, each on UDP 4791) run
//! SEND, SEND with immediate, WRITE, WRITE with immediate, READ, COMPARE_SWAP and
//! FETCH_ADD from 0 bytes to several MTUs over real sockets, verify every byte, and print
//! latency and throughput. `--loss P` drops that share of datagrams (seeded) on both
//! sides and everything must still verify. Exit status 0 only if every check passed.

use crate::verbs::Spin;
use crate::verbs::*;
use crate::verbs::{self, Context};
use crate::verbs::{Access, MemoryRegion, Sge};
use crate::wire::Psn;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant as WallInstant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address of the first NIC.
    #[arg(long, default_value = "127.0.0.1")]
    pub a: IpAddr,
    /// Address of the second NIC.
    #[arg(long, default_value = "127.0.0.2")]
    pub b: IpAddr,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value_t = 1024)]
    pub mtu: u32,
    /// Messages per operation and size (1 to 1,000,000).
    // Bounded: each row keeps one latency per message (16 bytes each) for its percentiles,
    // and `-n 4294967296` used to abort on a 64 GiB allocation.
    #[arg(short = 'n', long, default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=MAX_ITERS))]
    pub iters: u32,
    /// Share of datagrams each side drops on transmit (0.0 to 0.5).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Seed of the loss rule.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub nic: super::NicArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    CmpSwap,
    FetchAdd,
}

impl Op {
    const ALL: [Op; 7] = [
        Op::Send,
        Op::SendImm,
        Op::Write,
        Op::WriteImm,
        Op::Read,
        Op::CmpSwap,
        Op::FetchAdd,
    ];
    fn name(self) -> &'static str {
        match self {
            Op::Send => "SEND",
            Op::SendImm => "SEND_WITH_IMM",
            Op::Write => "RDMA_WRITE",
            Op::WriteImm => "RDMA_WRITE_WITH_IMM",
            Op::Read => "RDMA_READ",
            Op::CmpSwap => "COMPARE_SWAP",
            Op::FetchAdd => "FETCH_ADD",
        }
    }
    fn consumes_recv(self) -> bool {
        matches!(self, Op::Send | Op::SendImm | Op::WriteImm)
    }
}

// Buffer layout (offsets in each NIC's 1 MiB region).
const REGION: u64 = 1 << 20;
const A_SRC: u64 = 0;
const A_DST: u64 = 256 << 10;
const A_ATOMIC: u64 = 512 << 10;
const B_RECV: u64 = 0;
const B_WRITE: u64 = 256 << 10;
const B_READ: u64 = 512 << 10;
const B_ATOMIC: u64 = 768 << 10;
const MAX_MSG: u32 = 128 << 10;
/// The largest `-n`: a million messages per row is hours of traffic already.
const MAX_ITERS: i64 = 1_000_000;
/// How long one message may take before the demo gives up on it.
const MSG_DEADLINE: Duration = Duration::from_secs(20);

struct Nic {
    ctx: Context,
    /// `--spin-us`.
    spin: Duration,
    mr: Arc<MemoryRegion>,
    cq: u32,
    qpn: u32,
    iova: u64,
}

impl Nic {
    fn mr(&self) -> &Arc<MemoryRegion> {
        &self.mr
    }
    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.iova + off,
            length: len,
            lkey: self.mr.lkey(),
        }
    }
}

fn pattern(op: Op, size: u32, i: usize) -> Vec<u8> {
    let seed = (op as u8).wrapping_mul(53) ^ (i as u8).wrapping_mul(7) ^ (size as u8);
    (0..size)
        .map(|k| {
            (k as u8)
                .wrapping_mul(131)
                .wrapping_add(seed)
                .wrapping_add((k >> 8) as u8)
        })
        .collect()
}

struct Row {
    op: Op,
    size: u32,
    lat: Vec<Duration>,
    failures: Vec<String>,
}

fn nic(args: &Args, ip: IpAddr, iova: u64, seed: u64) -> Result<Nic, String> {
    let mut dev = args
        .nic
        .device(ip, args.nic.pcap.as_ref().map(|p| pcap_path(p, ip)));
    // As the Linux soft-RoCE does: retry_cnt 7 retries forever, so a lossy link delays
    // messages but never fails them (the IBA's finite count is the engine default).
    dev.engine.retry_cnt_7_infinite = true;
    dev.loss = (args.loss > 0.0).then_some((args.loss, seed));
    let ctx = dev.open().map_err(|e| e.to_string())?;
    let pd = ctx.alloc_pd();
    let mr = ctx
        .reg_mr(pd, iova, REGION, Access::ALL)
        .map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(128, None).map_err(|e| e.to_string())?;
    let qpn = ctx
        .create_qp(&QpInit::rc(
            pd,
            cq,
            QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
        ))
        .map_err(|e| e.to_string())?;
    Ok(Nic {
        ctx,
        spin: args.nic.spin(),
        mr,
        cq,
        qpn,
        iova,
    })
}

/// `--pcap FILE` with two NICs in one process: one file each, `FILE` with `-a`/`-b`
/// before the extension... simply the NIC's address appended, so both are found.
fn pcap_path(p: &std::path::Path, ip: IpAddr) -> std::path::PathBuf {
    let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned());
    let ext = p.extension().map(|s| s.to_string_lossy().into_owned());
    let name = match (stem, ext) {
        (Some(s), Some(e)) => format!("{s}-{ip}.{e}"),
        (Some(s), None) => format!("{s}-{ip}"),
        _ => format!("roce-emu-{ip}.pcap"),
    };
    p.with_file_name(name)
}

/// What `wait` says when SIGINT arrived (`stop` set) before the message completed.
const INTERRUPTED: &str = "interrupted";

/// Drives both NICs until `done` holds or the deadline passes; gives up at once when
/// `stop` is set (a message retransmitted at 30% loss may otherwise hold Ctrl-C for up to
/// `MSG_DEADLINE`).
fn wait(
    a: &mut Nic,
    b: &mut Nic,
    stop: &AtomicBool,
    mut done: impl FnMut(&mut Nic, &mut Nic) -> Result<bool, String>,
) -> Result<bool, String> {
    let start = WallInstant::now();
    let mut spin = Spin::new(a.spin);
    loop {
        if done(a, b)? {
            return Ok(true);
        }
        if stop.load(Ordering::Relaxed) {
            return Err(INTERRUPTED.into());
        }
        if start.elapsed() > MSG_DEADLINE {
            return Ok(false);
        }
        if !spin.keep_polling() {
            verbs::wait_any(&[&a.ctx, &b.ctx], Duration::from_millis(5))
                .map_err(|e| e.to_string())?;
            spin.slept();
        }
    }
}

/// Polls `n`'s CQ (which drives its NIC) for one completion.
fn poll_one(n: &Nic) -> Result<Option<Completion>, String> {
    let mut c = [Completion::default()];
    match n.ctx.poll_cq(n.cq, &mut c) {
        Ok(1) => Ok(Some(c[0])),
        Ok(_) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// One message of `op`: post, drive to completion, verify. Returns the latency.
fn one(
    a: &mut Nic,
    b: &mut Nic,
    op: Op,
    size: u32,
    i: usize,
    word: &mut u64,
    stop: &AtomicBool,
) -> Result<Duration, String> {
    let data = pattern(op, size, i);
    let imm = 0x1000_0000 | i as u32;
    let b_remote = |off: u64| Remote {
        va: b.iova + off,
        rkey: b.mr.rkey().0,
    };
    let (sop, local) = match op {
        Op::Send => (SendOp::Send, a.sge(A_SRC, size)),
        Op::SendImm => (SendOp::SendWithImm { imm }, a.sge(A_SRC, size)),
        Op::Write => (
            SendOp::Write {
                remote: b_remote(B_WRITE),
            },
            a.sge(A_SRC, size),
        ),
        Op::WriteImm => (
            SendOp::WriteWithImm {
                remote: b_remote(B_WRITE),
                imm,
            },
            a.sge(A_SRC, size),
        ),
        Op::Read => (
            SendOp::Read {
                remote: b_remote(B_READ),
            },
            a.sge(A_DST, size),
        ),
        Op::CmpSwap => {
            // Alternate hits and misses of the compare.
            let compare = if i % 2 == 0 { *word } else { !*word };
            (
                SendOp::CompareSwap {
                    remote: b_remote(B_ATOMIC),
                    compare,
                    swap: i as u64 * 0x0101_0101 + 7,
                },
                a.sge(A_ATOMIC, 8),
            )
        }
        Op::FetchAdd => (
            SendOp::FetchAdd {
                remote: b_remote(B_ATOMIC),
                add: i as u64 + 1,
            },
            a.sge(A_ATOMIC, 8),
        ),
    };
    let err = |e: &dyn std::fmt::Display| e.to_string();
    match op {
        Op::Read => {
            b.mr().write(b.iova + B_READ, &data).map_err(|e| err(&e))?;
            a.mr().fill(0);
        }
        Op::CmpSwap | Op::FetchAdd => {}
        _ => a.mr().write(a.iova + A_SRC, &data).map_err(|e| err(&e))?,
    }
    if op.consumes_recv() {
        b.mr().fill(0);
        let sge = b.sge(B_RECV, MAX_MSG);
        b.ctx
            .post_recv(
                b.qpn,
                &RecvWr {
                    wr_id: i as u64,
                    sges: &[sge],
                },
            )
            .map_err(|e| err(&e))?;
    }
    let t0 = WallInstant::now();
    a.ctx
        .post_send(
            a.qpn,
            &SendWr {
                wr_id: i as u64,
                op: sop,
                local: Local::Sges(&[local]),
                flags: SendFlags {
                    signaled: true,
                    ..Default::default()
                },
            },
        )
        .map_err(|e| err(&e))?;
    let mut sent = None;
    let mut recv = None;
    let ok = wait(a, b, stop, |a, b| {
        if sent.is_none() {
            sent = poll_one(a)?;
        }
        // Polled whatever the operation and until the end: polling is what drives B's
        // NIC here (the ACK of a SEND leaves with B's next poll).
        if let Some(c) = poll_one(b)? {
            if recv.is_some() || !op.consumes_recv() {
                return Err(format!("NIC B completed an unexpected receive: {c:?}"));
            }
            recv = Some(c);
        }
        // An error completion ends the wait: the receive side may never complete.
        let failed = sent.is_some_and(|c| c.status != WcStatus::Success);
        Ok(sent.is_some() && (recv.is_some() || !op.consumes_recv() || failed))
    })?;
    let lat = t0.elapsed();
    if !ok {
        return Err(format!("no completion within {MSG_DEADLINE:?}"));
    }
    let s = sent.expect("waited for it");
    if s.status != WcStatus::Success || s.wr_id != i as u64 {
        return Err(format!(
            "send completion: wr_id {} status {}",
            s.wr_id, s.status
        ));
    }
    if let Some(r) = recv {
        let want_imm = matches!(op, Op::SendImm | Op::WriteImm).then_some(imm);
        if r.status != WcStatus::Success || r.byte_len != size || r.imm != want_imm {
            return Err(format!(
                "receive completion: status {} byte_len {} imm {:?} (expected {size}, {want_imm:?})",
                r.status, r.byte_len, r.imm
            ));
        }
    }
    let read = |n: &Nic, off: u64, len: usize| -> Result<Vec<u8>, String> {
        let mut v = vec![0; len];
        n.mr().read(n.iova + off, &mut v).map_err(|e| err(&e))?;
        Ok(v)
    };
    let got = match op {
        Op::Send | Op::SendImm => read(b, B_RECV, size as usize)?,
        Op::Write | Op::WriteImm => read(b, B_WRITE, size as usize)?,
        Op::Read => read(a, A_DST, size as usize)?,
        Op::CmpSwap | Op::FetchAdd => {
            let orig = u64::from_ne_bytes(read(a, A_ATOMIC, 8)?.try_into().expect("8 bytes"));
            let now = u64::from_ne_bytes(read(b, B_ATOMIC, 8)?.try_into().expect("8 bytes"));
            if orig != *word {
                return Err(format!(
                    "atomic returned {orig:#x}, the word held {:#x}",
                    *word
                ));
            }
            let expect = match sop {
                SendOp::CompareSwap { compare, swap, .. } => {
                    if compare == *word {
                        swap
                    } else {
                        *word
                    }
                }
                SendOp::FetchAdd { add, .. } => word.wrapping_add(add),
                _ => unreachable!(),
            };
            if now != expect {
                return Err(format!(
                    "remote word {now:#x} after the atomic, expected {expect:#x}"
                ));
            }
            *word = now;
            return Ok(lat);
        }
    };
    if got != data {
        let at = got.iter().zip(&data).position(|(x, y)| x != y).unwrap_or(0);
        return Err(format!("data differs at byte {at} of {size}"));
    }
    Ok(lat)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let k = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[k]
}

/// How the demo ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pass,
    Fail,
    /// SIGINT (Ctrl-C): what finished was printed.
    Interrupted,
}

/// The shell's status for a program that stopped on SIGINT: 128 + 2.
const STATUS_INTERRUPTED: i32 = 130;

/// `roce-emu demo`.
pub fn run(args: &Args) -> i32 {
    // Ctrl-C sets `stop`, checked between messages and while one is in flight, so the
    // rows that finished and the counters are printed before the demo exits 130. A second
    // Ctrl-C (the flag already set) exits at once, for a demo that does not stop. Both
    // through signal-hook's safe flag API: its handler only stores to an atomic.
    let stop = Arc::new(AtomicBool::new(false));
    let sigint = signal_hook::consts::SIGINT;
    let registered = signal_hook::flag::register_conditional_shutdown(
        sigint,
        STATUS_INTERRUPTED,
        Arc::clone(&stop),
    )
    .and_then(|_| signal_hook::flag::register(sigint, Arc::clone(&stop)));
    if let Err(e) = registered {
        tracing::warn!("cannot catch SIGINT ({e}): Ctrl-C will end the demo without its table");
    }
    match run_inner(args, &stop) {
        Ok(Outcome::Pass) => 0,
        Ok(Outcome::Fail) => 1,
        Ok(Outcome::Interrupted) => STATUS_INTERRUPTED,
        Err(e) => {
            eprintln!("roce-emu demo: {e}");
            2
        }
    }
}

/// Prints one row of the table (and its failures); returns whether it passed.
fn print_row(r: &mut Row, interrupted: bool) -> bool {
    r.lat.sort();
    let total: Duration = r.lat.iter().sum();
    let mbps = if total.is_zero() {
        0.0
    } else {
        f64::from(r.size) * r.lat.len() as f64 / total.as_secs_f64() / 1e6
    };
    let ok = r.failures.is_empty();
    println!(
        "{:<22} {:>7} {:>6} {:>11.1} {:>11.1} {:>11.2}  {}",
        r.op.name(),
        r.size,
        r.lat.len(),
        pct(&r.lat, 0.5).as_secs_f64() * 1e6,
        pct(&r.lat, 0.99).as_secs_f64() * 1e6,
        mbps,
        match (ok, interrupted) {
            (false, _) => "FAILED",
            (true, true) => "interrupted",
            (true, false) => "ok",
        }
    );
    for f in &r.failures {
        println!("    {f}");
    }
    ok
}

fn run_inner(args: &Args, stop: &AtomicBool) -> Result<Outcome, String> {
    let mtu = Mtu::from_bytes(args.mtu).ok_or(format!(
        "--mtu {} is not a path MTU: use 256, 512, 1024, 2048 or 4096",
        args.mtu
    ))?;
    if !(0.0..=0.5).contains(&args.loss) {
        return Err(format!("--loss {} is out of range 0.0..=0.5", args.loss));
    }
    let mut a = nic(args, args.a, 0x7f00_0000_0000, args.seed)?;
    let mut b = nic(
        args,
        args.b,
        0x7f10_0000_0000,
        args.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15),
    )?;
    let (pa, pb) = (Psn::new(0xfff000), Psn::new(0x123456));
    // timeout 10: 4.2 ms; loopback round trips are tens of microseconds.
    let (timeout, retry, rnr_retry, min_rnr, rd_atomic) = (
        10,
        MAX_RETRY_CNT,
        RNR_RETRY_INFINITE,
        DEFAULT_MIN_RNR_TIMER,
        16,
    );
    let remote = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    for (n, peer, peer_qpn, my, theirs) in
        [(&a, args.b, b.qpn, pa, pb), (&b, args.a, a.qpn, pb, pa)]
    {
        let rtr = QpAttr::rtr(peer, mtu, peer_qpn, theirs, rd_atomic, min_rnr);
        let rts = QpAttr::rts(my, timeout, retry, rnr_retry, rd_atomic);
        verbs::connect_rc(&n.ctx, n.qpn, remote, &rtr, &rts).map_err(|e| e.to_string())?;
        tracing::debug!(qpn = n.qpn, %peer, peer_qpn, "QP connected (RTS)");
    }
    println!(
        "roce-emu demo: NIC A {} QP {:#x} <-> NIC B {} QP {:#x}, RC, path MTU {}, UDP loopback, retry_cnt 7 (forever, as rxe){}",
        args.a,
        a.qpn,
        args.b,
        b.qpn,
        mtu.bytes(),
        if args.loss > 0.0 {
            format!(
                ", {:.1}% loss each way (seed {})",
                args.loss * 100.0,
                args.seed
            )
        } else {
            String::new()
        }
    );
    let m = mtu.bytes();
    let sizes = [0, 1, 64, m - 1, m, m + 1, 3 * m + 5, 64 << 10];
    let mut word = 0u64;
    a.mr().fill(0);
    b.mr().fill(0);
    // The header now and each row as soon as its operation and size finish: at --loss 0.3
    // the whole table takes tens of seconds.
    println!(
        "{:<22} {:>7} {:>6} {:>11} {:>11} {:>11}  check",
        "operation", "bytes", "msgs", "median us", "p99 us", "MB/s"
    );
    let mut broken = false;
    let mut interrupted = false;
    let mut all_ok = true;
    let mut msgs = 0;
    'ops: for op in Op::ALL {
        let sizes: &[u32] = if matches!(op, Op::CmpSwap | Op::FetchAdd) {
            &[8]
        } else {
            &sizes
        };
        for &size in sizes {
            if broken || interrupted {
                break 'ops;
            }
            let iters = args.iters as usize;
            let n = if size > 16 * m {
                iters.div_ceil(4).max(5)
            } else {
                iters
            };
            let mut row = Row {
                op,
                size,
                lat: Vec::with_capacity(n),
                failures: Vec::new(),
            };
            for i in 0..n {
                if stop.load(Ordering::Relaxed) {
                    interrupted = true;
                    break;
                }
                match one(&mut a, &mut b, op, size, i, &mut word, stop) {
                    Ok(l) => row.lat.push(l),
                    // The message did not fail: SIGINT cut it short.
                    Err(_) if stop.load(Ordering::Relaxed) => {
                        interrupted = true;
                        break;
                    }
                    Err(e) => {
                        row.failures.push(format!("message {i}: {e}"));
                        if row.failures.len() >= 3 {
                            break;
                        }
                    }
                }
                // A failed QP fails everything after it: stop at the first broken state.
                for (name, n) in [("A", &a), ("B", &b)] {
                    let st = n.ctx.qp_state(n.qpn).map_err(|e| e.to_string());
                    if st != Ok(QpState::Rts) {
                        row.failures
                            .push(format!("QP {name} left RTS ({st:?}): stopping"));
                        broken = true;
                    }
                }
                if broken {
                    break;
                }
            }
            msgs += row.lat.len();
            // A row SIGINT cut before its first message has nothing to show.
            if interrupted && row.lat.is_empty() && row.failures.is_empty() {
                break 'ops;
            }
            all_ok &= print_row(&mut row, interrupted);
            tracing::debug!(
                op = op.name(),
                size,
                messages = row.lat.len(),
                failures = row.failures.len(),
                "row finished"
            );
        }
    }
    for (name, n) in [("A", &a), ("B", &b)] {
        let c = n.ctx.counters();
        let shown: Vec<String> = c.nonzero().map(|(k, v)| format!("{k}={v}")).collect();
        println!("NIC {name} counters: {}", shown.join(" "));
        let b = n.ctx.port_stats();
        let io = n.ctx.io_stats();
        println!(
            "NIC {name} I/O: {} datagrams sent ({} in {} GSO sends), {} received ({} in {} \
             GRO-coalesced), {} dropped by --loss, {} dropped on a socket unwritable for 1 s",
            io.tx_datagrams,
            b.gso_segments,
            b.gso_sends,
            io.rx_datagrams,
            b.gro_segments,
            b.gro_datagrams,
            b.fault_dropped,
            b.tx_stalled
        );
        if let Some(p) = &args.nic.pcap {
            println!(
                "NIC {name} capture: {}",
                n.ctx.capture_summary(&pcap_path(p, n.ctx.local_ip()))
            );
        }
    }
    println!(
        "note: a UDP socket cannot see the IPv4 identification the ICRC covers; each NIC \
         solves for it from the ICRC (counter icrc_id_solved; a damaged packet passes with \
         probability 2^-16; see README)."
    );
    if interrupted {
        println!(
            "interrupted (SIGINT): {msgs} messages finished before it, {}",
            if all_ok {
                "every byte verified"
            } else {
                "see the rows marked FAILED"
            }
        );
        return Ok(Outcome::Interrupted);
    }
    if all_ok {
        println!("PASS: {msgs} messages, every byte verified");
        Ok(Outcome::Pass)
    } else {
        println!("FAIL: see the rows marked FAILED");
        Ok(Outcome::Fail)
    }
}
