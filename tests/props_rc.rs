//! Exactly-once delivery, as a property: random sequences of every RC operation (sizes 0
//! to 3 path MTUs, random MTU, PSNs starting near the 24-bit wrap) between two NICs over a
//! link that loses up to 30% of packets, duplicates and reorders them. Every WR completes
//! exactly once, in order, successfully; remote memory, received messages and READ/atomic
//! results equal a reference model byte for byte; atomics are applied exactly once.
//!
//! The first property runs with rxe's "retry_cnt 7 = forever" so that it tests delivery at
//! any loss; with the IBA's finite count, 30% loss exhausts 7 retries for a multi-packet
//! READ a few percent of the time, a correct RETRY_EXC_ERR.
//!
//! A second property raises the loss until retries run out: the QP reports
//! RETRY_EXC_ERR once, flushes the rest, and what did arrive is neither corrupt nor
//! duplicated.
//!
//! A third property runs error paths over a clean link (duplication only: a loss or a
//! reordering could legitimately turn an earlier READ/atomic into RETRY_EXC_ERR once the
//! responder is in ERR): some operations carry a bad R_Key, a bad length, a missing
//! access right or a bad L_Key. Every operation before the first faulty one completes
//! with its true result, the faulty one with its status (REM_ACCESS_ERR, REM_INV_REQ_ERR,
//! LOC_PROT_ERR), the rest are flushed, and the responder's memory is exactly the model
//! after the operations reported successful.
//!
//! `PROPTEST_CASES` sets the number of cases (default 64 per property here; the closing
//! runs use many more in release mode: `cargo test --release --test props_rc`).

mod common;

use common::rc::BUF;
use common::rc::{pattern, Opts, Pair};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use roce_emu::engine::*;
use roce_emu::mem::{Access, MwBind, MwType, Rereg, Sge};
use roce_emu::sim::rule::Random;

const A: usize = 0;
const B: usize = 1;

// Layout (offsets in each side's 1 MiB buffer).
const SRC: u64 = 0; // A: source bytes, 64 KiB of pattern
const REGION: u64 = 0; // B: WRITE targets in the first half, READ sources in the second
const REGION_LEN: u64 = 64 * 1024;
/// READs never overlap WRITEs: a READ retried after a later WRITE executed may see the
/// newer bytes (a re-executed duplicate READ reads memory again; applications fence).
const HALF: u64 = REGION_LEN / 2;
const WORDS: u64 = 64 * 1024; // B: 8 atomic words
const NWORDS: u64 = 8;
const SLOT: u64 = 12 * 1024; // 3 x 4096
const READ_DST: u64 = 64 * 1024; // A: one slot per op
const ATOMIC_DST: u64 = 800 * 1024; // A: 8 bytes per op
const RECV: u64 = 128 * 1024; // B: one receive slot per op
const MAX_OPS: usize = 40;

#[derive(Debug, Clone)]
enum Op {
    Send {
        len: u32,
        src: u64,
    },
    SendImm {
        len: u32,
        src: u64,
        imm: u32,
    },
    Write {
        len: u32,
        src: u64,
        dst: u64,
    },
    WriteImm {
        len: u32,
        src: u64,
        dst: u64,
        imm: u32,
    },
    Read {
        len: u32,
        src: u64,
    },
    Cas {
        word: u64,
        hit: bool,
        swap: u64,
    },
    Fadd {
        word: u64,
        add: u64,
    },
}

fn op_strategy(mtu: u32) -> impl Strategy<Value = Op> {
    let len = 0..=3 * mtu;
    let src = |len: u32| 0..=(HALF - u64::from(len));
    let rsrc = |len: u32| HALF..=(REGION_LEN - u64::from(len));
    prop_oneof![
        len.clone()
            .prop_flat_map(move |l| src(l).prop_map(move |s| Op::Send { len: l, src: s })),
        (len.clone(), any::<u32>()).prop_flat_map(move |(l, imm)| src(l).prop_map(move |s| {
            Op::SendImm {
                len: l,
                src: s,
                imm,
            }
        })),
        len.clone()
            .prop_flat_map(move |l| (src(l), src(l)).prop_map(move |(s, d)| Op::Write {
                len: l,
                src: s,
                dst: d
            })),
        (len.clone(), any::<u32>()).prop_flat_map(move |(l, imm)| (src(l), src(l)).prop_map(
            move |(s, d)| Op::WriteImm {
                len: l,
                src: s,
                dst: d,
                imm
            }
        )),
        len.prop_flat_map(move |l| rsrc(l).prop_map(move |s| Op::Read { len: l, src: s })),
        (0..NWORDS, any::<bool>(), any::<u64>()).prop_map(|(word, hit, swap)| Op::Cas {
            word,
            hit,
            swap
        }),
        (0..NWORDS, any::<u64>()).prop_map(|(word, add)| Op::Fadd { word, add }),
    ]
}

/// An error an operation may be given (property 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The R_Key's key byte is wrong.
    Rkey,
    /// The target region lacks the right (REMOTE_READ-only for writes and atomics,
    /// REMOTE_WRITE-only for READs).
    Right,
    /// SEND: the receive buffer is one byte short; WRITE/READ: the range runs one byte
    /// past the region.
    Length,
    /// The local SGE's L_Key is wrong (SEND/WRITE only: found before anything is sent).
    Lkey,
}

/// What an applied fault makes of the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// NAKed by the responder with Remote Access Error.
    RemAccess,
    /// SEND longer than the receive buffer: LOC_LEN_ERR there, REM_INV_REQ_ERR here.
    ShortRecv,
    /// Refused by the requester: LOC_PROT_ERR, nothing sent.
    LocProt,
}

/// The fault that applies to `op`, if any (zero-length operations check no key, C9-88).
fn apply(op: &Op, f: Fault) -> Option<(Fault, Outcome)> {
    use Fault::*;
    let len = match *op {
        Op::Send { len, .. }
        | Op::SendImm { len, .. }
        | Op::Write { len, .. }
        | Op::WriteImm { len, .. }
        | Op::Read { len, .. } => len,
        Op::Cas { .. } | Op::Fadd { .. } => 8,
    };
    if len == 0 {
        return None;
    }
    Some(match (op, f) {
        (Op::Send { .. } | Op::SendImm { .. }, Lkey) => (Lkey, Outcome::LocProt),
        (Op::Send { .. } | Op::SendImm { .. }, _) => (Length, Outcome::ShortRecv),
        (Op::Write { .. } | Op::WriteImm { .. }, Lkey) => (Lkey, Outcome::LocProt),
        // A READ's L_Key is used only when its responses arrive, after later requests
        // may have executed remotely: not generated.
        (Op::Read { .. }, Lkey) => (Rkey, Outcome::RemAccess),
        (Op::Cas { .. } | Op::Fadd { .. }, Length | Lkey) => (Right, Outcome::RemAccess),
        (_, f) => (f, Outcome::RemAccess),
    })
}

fn fault_strategy() -> impl Strategy<Value = Option<Fault>> {
    prop_oneof![
        16 => Just(None),
        1 => Just(Some(Fault::Rkey)),
        1 => Just(Some(Fault::Right)),
        1 => Just(Some(Fault::Length)),
        1 => Just(Some(Fault::Lkey)),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    mtu: Mtu,
    psn_a: u32,
    psn_b: u32,
    ops: Vec<Op>,
    seed: u64,
    /// Per direction: loss, duplication, reordering probabilities.
    fwd: (f64, f64, f64),
    back: (f64, f64, f64),
    /// Property 1: the requests reach B's region through a type 2 memory window bound
    /// over it (by a BIND_MW on B's QP) instead of the region's own rkey.
    window: bool,
    /// Probability of a CE mark on each of A's packets that is not lost (property 4;
    /// 0 elsewhere): B's notification point answers with CNPs, A's DCQCN paces it.
    ce: f64,
}

fn psn_near_wrap() -> impl Strategy<Value = u32> {
    prop_oneof![0xff_fff0u32..=0xff_ffff, 0u32..=0xff_ffff]
}

fn faults(max_loss: f64) -> impl Strategy<Value = (f64, f64, f64)> {
    (0.0..=max_loss, 0.0..=0.1f64, 0.0..=0.2f64)
}

fn case(max_loss: f64) -> impl Strategy<Value = Case> {
    prop_oneof![
        Just(Mtu::M256),
        Just(Mtu::M512),
        Just(Mtu::M1024),
        Just(Mtu::M2048),
        Just(Mtu::M4096)
    ]
    .prop_flat_map(move |mtu| {
        (
            Just(mtu),
            psn_near_wrap(),
            psn_near_wrap(),
            prop::collection::vec(op_strategy(mtu.bytes()), 1..=MAX_OPS),
            any::<u64>(),
            faults(max_loss),
            faults(max_loss),
            any::<bool>(),
        )
    })
    .prop_map(|(mtu, psn_a, psn_b, ops, seed, fwd, back, window)| Case {
        mtu,
        psn_a,
        psn_b,
        ops,
        seed,
        fwd,
        back,
        window,
        ce: 0.0,
    })
}

/// What the responder's memory and the requester's results must be.
#[derive(Clone)]
struct Model {
    region: Vec<u8>,
    words: [u64; NWORDS as usize],
    /// Expected receive completions: (byte_len, imm, data) in order.
    recvs: Vec<(u32, Option<u32>, Vec<u8>, WcOpcode)>,
    /// Expected READ data per op index, atomic originals per op index.
    reads: Vec<(usize, Vec<u8>)>,
    atomics: Vec<(usize, u64)>,
}

struct Run {
    pair: Pair,
    /// Model after each op (index i = after ops[..i]).
    snapshots: Vec<Model>,
    /// The first operation given a fault, and what the fault makes of it.
    first_fault: Option<(usize, Outcome)>,
    /// What each operation's fault makes of it.
    outcomes: Vec<Option<Outcome>>,
    /// Receive WRs posted on B.
    nrecv: u64,
}

fn setup(c: &Case, timeout: u8, retry_cnt: u8) -> Run {
    setup_with_faults(c, timeout, retry_cnt, &[])
}

/// Where the regions without a right are on B (property 3).
const RO_IOVA: u64 = 0x7000_0000;
const WO_IOVA: u64 = 0x7100_0000;

fn setup_with_faults(c: &Case, timeout: u8, retry_cnt: u8, faults: &[Option<Fault>]) -> Run {
    let mut pair = Pair::new(Opts {
        // Property 1 retries forever (rxe's meaning of retry_cnt 7): at 30% loss each way
        // the IBA's 7 retries legitimately run out for a multi-packet READ a few percent
        // of the time, which property 2 covers. Here only delivery is under test.
        retry7_forever: retry_cnt == MAX_RETRY_CNT,
        mtu: c.mtu,
        psn_a: c.psn_a,
        psn_b: c.psn_b,
        timeout,
        retry_cnt,
        max_rd_atomic: 4,
        ..Opts::default()
    });
    // RC_TRACE=1 keeps the packet trace and prints it when a case fails.
    if std::env::var_os("RC_TRACE").is_none() {
        pair.net.trace = None;
    }
    let src = pattern(c.seed as u8, REGION_LEN as usize);
    let region0 = pattern((c.seed >> 8) as u8 ^ 0x5a, REGION_LEN as usize);
    pair.write_mem(A, SRC, &src);
    pair.write_mem(B, REGION, &region0);
    let words0: [u64; NWORDS as usize] =
        core::array::from_fn(|i| (c.seed.rotate_left(i as u32 * 7)) ^ i as u64);
    for (i, w) in words0.iter().enumerate() {
        pair.write_mem(B, WORDS + 8 * i as u64, &w.to_ne_bytes());
    }
    let mut m = Model {
        region: region0,
        words: words0,
        recvs: Vec::new(),
        reads: Vec::new(),
        atomics: Vec::new(),
    };
    let mut snapshots = vec![m.clone()];
    let mut b = pair.end(B).remote(0);
    if c.window && faults.is_empty() {
        b.rkey = bind_window(&mut pair);
    }
    let mut nrecv = 0u64;
    let mut first_fault = None;
    let mut outcomes = Vec::new();
    let (ro, wo) = if faults.iter().any(Option::is_some) {
        let rw = Access::LOCAL_WRITE;
        (
            Some(pair.reg_mr(B, RO_IOVA, BUF, rw | Access::REMOTE_READ)),
            Some(pair.reg_mr(B, WO_IOVA, BUF, rw | Access::REMOTE_WRITE)),
        )
    } else {
        (None, None)
    };
    for (i, op) in c.ops.iter().enumerate() {
        let sl = |s: u64, l: u32| src[s as usize..(s + u64::from(l)) as usize].to_vec();
        let (sop, off, len) = match *op {
            Op::Send { len, src: s } => {
                m.recvs.push((len, None, sl(s, len), WcOpcode::Recv));
                (SendOp::Send, SRC + s, len)
            }
            Op::SendImm { len, src: s, imm } => {
                m.recvs.push((len, Some(imm), sl(s, len), WcOpcode::Recv));
                (SendOp::SendWithImm { imm }, SRC + s, len)
            }
            Op::Write { len, src: s, dst } => {
                m.region[dst as usize..(dst + u64::from(len)) as usize]
                    .copy_from_slice(&sl(s, len));
                let remote = Remote {
                    va: b.va + REGION + dst,
                    rkey: b.rkey,
                };
                (SendOp::Write { remote }, SRC + s, len)
            }
            Op::WriteImm {
                len,
                src: s,
                dst,
                imm,
            } => {
                m.region[dst as usize..(dst + u64::from(len)) as usize]
                    .copy_from_slice(&sl(s, len));
                m.recvs
                    .push((len, Some(imm), Vec::new(), WcOpcode::RecvRdmaWithImm));
                let remote = Remote {
                    va: b.va + REGION + dst,
                    rkey: b.rkey,
                };
                (SendOp::WriteWithImm { remote, imm }, SRC + s, len)
            }
            Op::Read { len, src: s } => {
                m.reads.push((
                    i,
                    m.region[s as usize..(s + u64::from(len)) as usize].to_vec(),
                ));
                let remote = Remote {
                    va: b.va + REGION + s,
                    rkey: b.rkey,
                };
                (SendOp::Read { remote }, READ_DST + SLOT * i as u64, len)
            }
            Op::Cas { word, hit, swap } => {
                let cur = m.words[word as usize];
                let compare = if hit { cur } else { cur ^ 1 };
                m.atomics.push((i, cur));
                if compare == cur {
                    m.words[word as usize] = swap;
                }
                let remote = Remote {
                    va: b.va + WORDS + 8 * word,
                    rkey: b.rkey,
                };
                (
                    SendOp::CompareSwap {
                        remote,
                        compare,
                        swap,
                    },
                    ATOMIC_DST + 8 * i as u64,
                    8,
                )
            }
            Op::Fadd { word, add } => {
                let cur = m.words[word as usize];
                m.atomics.push((i, cur));
                m.words[word as usize] = cur.wrapping_add(add);
                let remote = Remote {
                    va: b.va + WORDS + 8 * word,
                    rkey: b.rkey,
                };
                (
                    SendOp::FetchAdd { remote, add },
                    ATOMIC_DST + 8 * i as u64,
                    8,
                )
            }
        };
        let fault = faults.get(i).copied().flatten().and_then(|f| apply(op, f));
        if first_fault.is_none() {
            first_fault = fault.map(|(_, o)| (i, o));
        }
        outcomes.push(fault.map(|(_, o)| o));
        let mut sop = sop;
        let mut lkey = pair.end(A).lkey();
        let mut recv_len = SLOT as u32;
        match fault.map(|(f, _)| f) {
            None => {}
            Some(Fault::Lkey) => lkey = roce_emu::mem::Lkey(lkey.0 ^ 0xff),
            Some(Fault::Length) if matches!(op, Op::Send { .. } | Op::SendImm { .. }) => {
                recv_len = len - 1
            }
            Some(f) => {
                let ro = ro.as_ref().expect("registered with faults");
                let wo = wo.as_ref().expect("registered with faults");
                let retarget = |r: &mut Remote, write: bool| match f {
                    Fault::Rkey => r.rkey ^= 0xff,
                    Fault::Right => {
                        let mr = if write { ro } else { wo };
                        r.va = r.va - b.va + mr.iova();
                        r.rkey = mr.rkey().0;
                    }
                    // One byte past the end of B's buffer.
                    _ => r.va = b.va + BUF - u64::from(len) + 1,
                };
                match &mut sop {
                    SendOp::Write { remote } | SendOp::WriteWithImm { remote, .. } => {
                        retarget(remote, true)
                    }
                    SendOp::Read { remote } => retarget(remote, false),
                    SendOp::CompareSwap { remote, .. } | SendOp::FetchAdd { remote, .. } => {
                        retarget(remote, true)
                    }
                    _ => unreachable!("SENDs take Length or Lkey"),
                }
            }
        }
        if matches!(
            op,
            Op::Send { .. } | Op::SendImm { .. } | Op::WriteImm { .. }
        ) {
            pair.post_recv(B, 1000 + nrecv, RECV + SLOT * nrecv, recv_len);
            nrecv += 1;
        }
        let sge = Sge {
            addr: pair.end(A).iova() + off,
            length: len,
            lkey,
        };
        pair.post_sges(A, i as u64, sop, &[sge]);
        snapshots.push(m.clone());
    }
    let rule = |(drop, duplicate, reorder): (f64, f64, f64), seed: u64| {
        let mut r = Random::new(seed);
        r.drop = drop;
        r.duplicate = duplicate;
        r.reorder = reorder;
        r
    };
    let mut f = rule(c.fwd, c.seed);
    f.ce = c.ce;
    let bk = rule(c.back, c.seed ^ 0xdead_beef);
    pair.net.add_rule(A, B, f);
    pair.net.add_rule(B, A, bk);
    Run {
        pair,
        snapshots,
        first_fault,
        outcomes,
        nrecv,
    }
}

/// Binds a type 2 window over the whole of B's buffer (every remote right) with a
/// BIND_MW on B's QP, takes its completion off B's CQ, and gives its rkey. B's region gets
/// IBV_ACCESS_MW_BIND by re-registration first (same lkey, same bytes).
fn bind_window(pair: &mut Pair) -> u32 {
    let end = pair.end(B).clone();
    let mem = pair.engine(B).mem().clone();
    let access = end.mr.access() | Access::MW_BIND;
    let rereg = Rereg {
        access: Some(access),
        ..Rereg::default()
    };
    mem.rereg_mr(end.lkey(), rereg).unwrap();
    let mw = mem.alloc_mw(end.pd, MwType::Type2).unwrap();
    let old = mw.rkey().0;
    let new_rkey = (old & !0xff) | (old.wrapping_add(1) & 0xff);
    let op = SendOp::BindMw {
        mw_rkey: old,
        new_rkey,
        bind: MwBind {
            mr_lkey: end.lkey(),
            va: end.iova(),
            length: BUF,
            access: Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC,
            zero_based: false,
        },
    };
    pair.post_sges(B, 999, op, &[]);
    pair.net.run_idle(10_000).unwrap();
    let c = pair.completions(B);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(
        (c[0].status, c[0].opcode),
        (WcStatus::Success, WcOpcode::BindMw)
    );
    assert_eq!(mw.rkey().0, new_rkey);
    new_rkey
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/props_rc.txt",
        ))),
        ..ProptestConfig::default()
    }
}

/// Runs until A has `n` completions; returns them.
fn drive(run: &mut Run, n: usize) -> Result<Vec<Completion>, TestCaseError> {
    let mut got = Vec::new();
    let cq = run.pair.end(A).cq;
    let mut buf = [Completion::default(); 64];
    for _ in 0..2_000_000 {
        let k = run.pair.engine(A).poll_cq(cq, &mut buf).unwrap();
        got.extend_from_slice(&buf[..k]);
        if got.len() >= n {
            // Let duplicates and late packets drain: nothing may change after completion.
            run.pair
                .net
                .run_idle(1_000_000)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let k = run.pair.engine(A).poll_cq(cq, &mut buf).unwrap();
            got.extend_from_slice(&buf[..k]);
            return Ok(got);
        }
        if !run.pair.net.step() {
            let k = run.pair.engine(A).poll_cq(cq, &mut buf).unwrap();
            got.extend_from_slice(&buf[..k]);
            return Ok(got);
        }
    }
    Err(TestCaseError::fail("did not converge"))
}

fn word(p: &Pair, w: u64) -> u64 {
    u64::from_ne_bytes(p.read_mem(B, WORDS + 8 * w, 8).try_into().unwrap())
}

/// Runs a property over generated cases, reporting cases and operations covered.
fn run_property<S: Strategy>(
    name: &str,
    strategy: S,
    check: impl Fn(S::Value) -> Result<usize, TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ops = AtomicUsize::new(0);
    let cases = AtomicUsize::new(0);
    let mut runner = proptest::test_runner::TestRunner::new(config());
    let result = runner.run(&strategy, |v| {
        let n = check(v)?;
        ops.fetch_add(n, Ordering::Relaxed);
        cases.fetch_add(1, Ordering::Relaxed);
        Ok(())
    });
    eprintln!(
        "{name}: {} cases, {} operations",
        cases.load(Ordering::Relaxed),
        ops.load(Ordering::Relaxed)
    );
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

fn check_delivery(c: Case) -> Result<usize, TestCaseError> {
    let mut run = setup(&c, 8, MAX_RETRY_CNT);
    let n = c.ops.len();
    let comps = drive(&mut run, n)?;
    let m = run.snapshots.last().unwrap().clone();
    let p = &mut run.pair;
    // Every WR exactly once, in order, successfully.
    prop_assert_eq!(comps.len(), n, "completions: {:?}", comps);
    if comps.iter().any(|c| c.status != WcStatus::Success) && p.net.trace.is_some() {
        p.print_trace();
        eprintln!(
            "A: {}B: {}",
            p.net.nodes[A].engine.counters(),
            p.net.nodes[B].engine.counters()
        );
    }
    for (i, cpl) in comps.iter().enumerate() {
        prop_assert_eq!(cpl.wr_id, i as u64);
        prop_assert_eq!(cpl.status, WcStatus::Success, "op {}: {:?}", i, c.ops[i]);
    }
    // Remote memory and atomic words equal the model.
    prop_assert!(
        p.read_mem(B, REGION, REGION_LEN as usize) == m.region,
        "region differs"
    );
    for w in 0..NWORDS {
        prop_assert_eq!(word(p, w), m.words[w as usize], "word {}", w);
    }
    // Received messages: in order, exact data, imm, length; nothing extra.
    let recvs = p.completions(B);
    prop_assert_eq!(recvs.len(), m.recvs.len());
    for (k, (r, (len, imm, data, opc))) in recvs.iter().zip(&m.recvs).enumerate() {
        prop_assert_eq!(r.wr_id, 1000 + k as u64);
        prop_assert_eq!(r.status, WcStatus::Success);
        prop_assert_eq!((r.byte_len, r.imm, r.opcode), (*len, *imm, *opc));
        if *opc == WcOpcode::Recv {
            prop_assert!(
                p.read_mem(B, RECV + SLOT * k as u64, data.len()) == *data,
                "recv {} data",
                k
            );
        }
    }
    // READ results and atomic originals.
    for (i, data) in &m.reads {
        prop_assert!(
            p.read_mem(A, READ_DST + SLOT * *i as u64, data.len()) == *data,
            "read {} data",
            i
        );
    }
    for (i, orig) in &m.atomics {
        let got = u64::from_ne_bytes(
            p.read_mem(A, ATOMIC_DST + 8 * *i as u64, 8)
                .try_into()
                .unwrap(),
        );
        prop_assert_eq!(got, *orig, "atomic {} original", i);
    }
    prop_assert_eq!(p.state(A), QpState::Rts);
    prop_assert_eq!(p.state(B), QpState::Rts);
    Ok(n)
}

fn check_clean_failure((c, loss): (Case, f64)) -> Result<usize, TestCaseError> {
    let mut c = c;
    c.fwd.0 = loss;
    c.back.0 = loss;
    let mut run = setup(&c, 8, 1);
    let n = c.ops.len();
    let comps = drive(&mut run, n)?;
    let p = &mut run.pair;
    // Every WR exactly once, in order: successes, at most one RETRY_EXC_ERR, flushes.
    prop_assert_eq!(comps.len(), n, "completions: {:?}", comps);
    let k = comps
        .iter()
        .position(|c| c.status != WcStatus::Success)
        .unwrap_or(n);
    for (i, cpl) in comps.iter().enumerate() {
        prop_assert_eq!(cpl.wr_id, i as u64);
        let want = if i < k {
            WcStatus::Success
        } else if i == k {
            WcStatus::RetryExcErr
        } else {
            WcStatus::WrFlushErr
        };
        prop_assert_eq!(cpl.status, want, "op {}", i);
    }
    if k < n {
        prop_assert_eq!(p.state(A), QpState::Err);
        prop_assert_eq!(p.counter(A, Counter::RetryExceededErr), 1);
    }
    // What arrived is a prefix of what was sent, exact and never twice.
    let m = run.snapshots.last().unwrap().clone();
    let recvs: Vec<_> = p
        .completions(B)
        .into_iter()
        .filter(|r| r.status == WcStatus::Success)
        .collect();
    prop_assert!(recvs.len() <= m.recvs.len());
    for (k2, (r, (len, imm, data, opc))) in recvs.iter().zip(&m.recvs).enumerate() {
        prop_assert_eq!(r.wr_id, 1000 + k2 as u64);
        prop_assert_eq!((r.byte_len, r.imm, r.opcode), (*len, *imm, *opc));
        if *opc == WcOpcode::Recv {
            prop_assert!(
                p.read_mem(B, RECV + SLOT * k2 as u64, data.len()) == *data,
                "recv {} data",
                k2
            );
        }
    }
    // Atomic words: the result of applying some prefix of the ops exactly once.
    let words: Vec<u64> = (0..NWORDS).map(|w| word(p, w)).collect();
    prop_assert!(
        run.snapshots.iter().any(|s| s.words[..] == words[..]),
        "atomic words {:x?} match no prefix of the operations",
        words
    );
    // No byte of the region holds a value no operation ever wrote there.
    let region = p.read_mem(B, REGION, REGION_LEN as usize);
    for (pos, v) in region.iter().enumerate() {
        prop_assert!(
            run.snapshots.iter().any(|s| s.region[pos] == *v),
            "byte {} = {} is corrupt",
            pos,
            v
        );
    }
    Ok(n)
}

#[test]
fn every_wr_completes_exactly_once_and_memory_matches_the_model() {
    run_property(
        "delivery under loss, duplication, reordering",
        case(0.3),
        check_delivery,
    );
}

/// Property 4: exactly-once delivery holds with congestion control at work: CE marks on
/// random packets of A (whose requests go ECT(0)), B's CNPs, A's DCQCN cuts and pacer,
/// over the same lossy, duplicating, reordering link. The CC counters stay consistent:
/// every CNP answers a mark, and A handles or ignores at most the CNPs sent (twice each,
/// as the link duplicates).
/// Marks, CNPs and cuts over all cases of property 4, printed to show CC was at work.
static CE_TOTALS: [std::sync::atomic::AtomicU64; 3] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 3];
use std::sync::atomic::Ordering::Relaxed;

fn check_delivery_under_ce((mut c, ce): (Case, f64)) -> Result<usize, TestCaseError> {
    c.ce = ce;
    let mut run = setup(&c, 8, MAX_RETRY_CNT);
    let n = c.ops.len();
    let comps = drive(&mut run, n)?;
    let p = &mut run.pair;
    prop_assert_eq!(comps.len(), n, "completions: {:?}", comps);
    for (i, cpl) in comps.iter().enumerate() {
        prop_assert_eq!(cpl.wr_id, i as u64);
        prop_assert_eq!(cpl.status, WcStatus::Success, "op {}: {:?}", i, c.ops[i]);
    }
    let m = run.snapshots.last().unwrap().clone();
    prop_assert!(
        p.read_mem(B, REGION, REGION_LEN as usize) == m.region,
        "region differs"
    );
    for w in 0..NWORDS {
        prop_assert_eq!(word(p, w), m.words[w as usize], "word {}", w);
    }
    let recvs = p.completions(B);
    prop_assert_eq!(recvs.len(), m.recvs.len());
    for (k, (r, (len, imm, data, opc))) in recvs.iter().zip(&m.recvs).enumerate() {
        prop_assert_eq!(r.wr_id, 1000 + k as u64);
        prop_assert_eq!((r.byte_len, r.imm, r.opcode), (*len, *imm, *opc));
        if *opc == WcOpcode::Recv {
            prop_assert!(
                p.read_mem(B, RECV + SLOT * k as u64, data.len()) == *data,
                "recv {} data",
                k
            );
        }
    }
    for (i, data) in &m.reads {
        prop_assert!(
            p.read_mem(A, READ_DST + SLOT * *i as u64, data.len()) == *data,
            "read {} data",
            i
        );
    }
    let marked = p.counter(B, Counter::NpEcnMarkedRocePackets);
    let cnps = p.counter(B, Counter::NpCnpSent);
    let seen = p.counter(A, Counter::RpCnpHandled) + p.counter(A, Counter::RpCnpIgnored);
    CE_TOTALS[0].fetch_add(marked, Relaxed);
    CE_TOTALS[1].fetch_add(cnps, Relaxed);
    CE_TOTALS[2].fetch_add(p.counter(A, Counter::RpRateDecreases), Relaxed);
    prop_assert!(
        cnps <= marked && (marked == 0 || cnps >= 1),
        "{} CNPs for {} marks",
        cnps,
        marked
    );
    // The link may duplicate a CNP (once), never make one up.
    prop_assert!(seen <= 2 * cnps, "{} CNPs seen, {} sent", seen, cnps);
    // Idle again: DCQCN recovered to line rate and let go.
    prop_assert_eq!(p.net.nodes[A].engine.qp_cc(p.a.qpn), None);
    prop_assert_eq!(p.state(A), QpState::Rts);
    prop_assert_eq!(p.state(B), QpState::Rts);
    Ok(n)
}

#[test]
fn delivery_holds_under_ce_marks_cnps_and_pacing() {
    run_property(
        "delivery under CE marks, CNPs, DCQCN pacing and loss",
        (case(0.3), 0.0..=0.5f64),
        check_delivery_under_ce,
    );
    let [m, c, d] = &CE_TOTALS;
    eprintln!(
        "CE marks {}, CNPs sent {}, rate cuts {}",
        m.load(Relaxed),
        c.load(Relaxed),
        d.load(Relaxed)
    );
    assert!(d.load(Relaxed) > 0, "DCQCN cut some rate");
}

#[test]
fn when_retries_run_out_the_qp_fails_cleanly() {
    run_property(
        "retries exhausted",
        (case(0.0), 0.6..0.95f64),
        check_clean_failure,
    );
}

fn check_errors((c, faults): (Case, Vec<Option<Fault>>)) -> Result<usize, TestCaseError> {
    let mut run = setup_with_faults(&c, 8, MAX_RETRY_CNT, &faults);
    let n = c.ops.len();
    let comps = drive(&mut run, n)?;
    let p = &mut run.pair;
    if p.net.trace.is_some() {
        p.print_trace();
    }
    let (k, outcome) = run.first_fault.map_or((n, None), |(k, o)| (k, Some(o)));
    // Successes up to the faulty one, its error, then flushes; each WR exactly once.
    prop_assert_eq!(comps.len(), n, "completions: {:?}", comps);
    for (i, cpl) in comps.iter().enumerate() {
        prop_assert_eq!(cpl.wr_id, i as u64);
        let want = match (i.cmp(&k), outcome) {
            (core::cmp::Ordering::Less, _) | (_, None) => WcStatus::Success,
            (core::cmp::Ordering::Equal, Some(Outcome::RemAccess)) => WcStatus::RemAccessErr,
            (core::cmp::Ordering::Equal, Some(Outcome::ShortRecv)) => WcStatus::RemInvReqErr,
            (core::cmp::Ordering::Equal, Some(Outcome::LocProt)) => WcStatus::LocProtErr,
            (core::cmp::Ordering::Greater, _) => WcStatus::WrFlushErr,
        };
        // A later WR with a bad L_Key may have been refused before the QP went to ERR:
        // it then completes with its own LOC_PROT_ERR rather than a flush.
        let own = i > k
            && run.outcomes[i] == Some(Outcome::LocProt)
            && cpl.status == WcStatus::LocProtErr;
        prop_assert!(
            cpl.status == want || own,
            "op {}: {:?} completed {:?}, expected {:?} (first fault at {})",
            i,
            c.ops[i],
            cpl.status,
            want,
            k
        );
    }
    // The responder executed exactly the operations before the faulty one.
    let m = &run.snapshots[k];
    prop_assert!(
        p.read_mem(B, REGION, REGION_LEN as usize) == m.region,
        "region differs from the model after {} operations",
        k
    );
    for w in 0..NWORDS {
        prop_assert_eq!(word(p, w), m.words[w as usize], "word {}", w);
    }
    // READ results and atomic originals of the successful ones are the true ones.
    let fin = run.snapshots.last().unwrap();
    for (i, data) in fin.reads.iter().filter(|(i, _)| *i < k) {
        prop_assert!(
            p.read_mem(A, READ_DST + SLOT * *i as u64, data.len()) == *data,
            "read {} data",
            i
        );
    }
    for (i, orig) in fin.atomics.iter().filter(|(i, _)| *i < k) {
        let got = u64::from_ne_bytes(
            p.read_mem(A, ATOMIC_DST + 8 * *i as u64, 8)
                .try_into()
                .unwrap(),
        );
        prop_assert_eq!(got, *orig, "atomic {} original", i);
    }
    // Receives: the messages before the faulty one, exact; then LOC_LEN_ERR for a SEND
    // too long for its buffer, then flushes if the responder went to ERR.
    let recvs = p.completions(B);
    let ok = m.recvs.len();
    prop_assert!(recvs.len() >= ok, "receives: {:?}", recvs);
    for (j, (r, (len, imm, data, opc))) in recvs.iter().zip(&m.recvs).enumerate() {
        prop_assert_eq!(r.wr_id, 1000 + j as u64);
        prop_assert_eq!(r.status, WcStatus::Success);
        prop_assert_eq!((r.byte_len, r.imm, r.opcode), (*len, *imm, *opc));
        if *opc == WcOpcode::Recv {
            prop_assert!(
                p.read_mem(B, RECV + SLOT * j as u64, data.len()) == *data,
                "recv {} data",
                j
            );
        }
    }
    let mut rest = recvs[ok..].iter();
    if outcome == Some(Outcome::ShortRecv) {
        prop_assert_eq!(rest.next().map(|r| r.status), Some(WcStatus::LocLenErr));
    }
    let remote_error = matches!(outcome, Some(Outcome::RemAccess | Outcome::ShortRecv));
    let flushed = rest.len() as u64;
    prop_assert!(rest.all(|r| r.status == WcStatus::WrFlushErr));
    let consumed = recvs.len() as u64 - flushed;
    prop_assert_eq!(
        flushed,
        if remote_error {
            run.nrecv - consumed
        } else {
            0
        },
        "flushed receives"
    );
    let (sa, sb) = match outcome {
        None => (QpState::Rts, QpState::Rts),
        Some(Outcome::LocProt) => (QpState::Err, QpState::Rts),
        Some(_) => (QpState::Err, QpState::Err),
    };
    prop_assert_eq!(p.state(A), sa);
    prop_assert_eq!(p.state(B), sb);
    Ok(n)
}

#[test]
fn errors_fail_exactly_the_faulty_operation_and_flush_the_rest() {
    let clean = case(0.0).prop_map(|mut c| {
        // Duplication only: no loss, no reordering (see the module comment).
        c.fwd.2 = 0.0;
        c.back.2 = 0.0;
        c
    });
    run_property(
        "error paths",
        clean.prop_flat_map(|c| {
            let n = c.ops.len();
            (Just(c), prop::collection::vec(fault_strategy(), n))
        }),
        check_errors,
    );
}
