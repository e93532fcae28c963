//! No heap allocation per packet on the steady-state RC data path: two engines wired
//! back to back through fixed buffers (no simulator, whose queue allocates), a global
//! allocator that counts, and streams of WRITE, READ and SEND after a warm-up.

use roce_emu::engine::*;
use roce_emu::mem::{MrTable, Sge};
use roce_emu::sim::direct::{connect, rc_end, Direct, RcEnd, RcParams};
use roce_emu::wire::Psn;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set on the test's own thread only: the harness's threads allocate when they like
    /// (that made this test fail now and then when it counted every thread).
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn counting() -> bool {
    COUNTING.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if counting() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if counting() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const LEN: u32 = 16 * 1024;
const IOVA: u64 = 0x10_0000;

struct Pair {
    d: Direct,
    a: RcEnd,
    b: RcEnd,
}

fn pair() -> Pair {
    let ip = |x| IpAddr::V4(Ipv4Addr::new(198, 18, 0, x));
    let mut ea = Engine::new(EngineConfig::new(ip(1)), Arc::new(MrTable::new()));
    let mut eb = Engine::new(EngineConfig::new(ip(2)), Arc::new(MrTable::new()));
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        ..QpCap::default()
    };
    let a = rc_end(&mut ea, IOVA, 1 << 20, cap).unwrap();
    let b = rc_end(&mut eb, IOVA, 1 << 20, cap).unwrap();
    // PSNs start just before the 24-bit wrap, so the loop crosses it.
    let (pa, pb) = (Psn::new(0xfff000), Psn::new(0xffff00));
    let p = RcParams::default();
    connect(&mut ea, a.qpn, ip(2), b.qpn, pa, pb, &p).unwrap();
    connect(&mut eb, b.qpn, ip(1), a.qpn, pb, pa, &p).unwrap();
    Pair {
        d: Direct::new(ea, eb),
        a,
        b,
    }
}

fn round(p: &mut Pair, op: u32, wcs: &mut [Completion]) -> usize {
    let now = Instant::from_nanos(u64::from(op) * 1000);
    let sge = |e: &RcEnd, off: u64| Sge {
        addr: IOVA + off,
        length: LEN,
        lkey: e.mr.lkey(),
    };
    let remote = Remote {
        va: IOVA + 0x8_0000,
        rkey: p.b.mr.rkey().0,
    };
    let sop = match op % 3 {
        0 => SendOp::Write { remote },
        1 => SendOp::Read { remote },
        _ => SendOp::Send,
    };
    if matches!(sop, SendOp::Send) {
        let sges = [sge(&p.b, 0x4_0000)];
        p.d.b
            .post_recv(
                now,
                p.b.qpn,
                &RecvWr {
                    wr_id: 9,
                    sges: &sges,
                },
            )
            .unwrap();
    }
    let sges = [sge(&p.a, 0)];
    p.d.a
        .post_send(
            now,
            p.a.qpn,
            &SendWr {
                wr_id: u64::from(op),
                op: sop,
                local: Local::Sges(&sges),
                flags: SendFlags {
                    signaled: true,
                    ..Default::default()
                },
            },
        )
        .unwrap();
    let n = p.d.pump(now);
    let done = p.d.a.poll_cq(p.a.cq, wcs).unwrap();
    assert_eq!(done, 1, "one completion per WR");
    assert_eq!(wcs[0].status, WcStatus::Success);
    p.d.b.poll_cq(p.b.cq, wcs).unwrap();
    n
}

#[test]
fn steady_state_data_path_does_not_allocate() {
    let mut p = pair();
    let mut wcs = [Completion::default(); 8];
    // Warm-up: queues reach their working size.
    for op in 0..30 {
        round(&mut p, op, &mut wcs);
    }
    // The counter counts: one deliberate allocation is seen.
    ALLOCS.store(0, Ordering::Relaxed);
    COUNTING.set(true);
    drop(std::hint::black_box(Vec::<u8>::with_capacity(64)));
    assert_eq!(
        ALLOCS.load(Ordering::Relaxed),
        1,
        "the counting allocator works"
    );
    ALLOCS.store(0, Ordering::Relaxed);
    let mut packets = 0;
    for op in 30..3030 {
        packets += round(&mut p, op, &mut wcs);
    }
    COUNTING.set(false);
    let allocs = ALLOCS.load(Ordering::Relaxed);
    eprintln!("{packets} packets (WRITE/READ/SEND of {LEN} bytes, PSNs across the wrap), {allocs} allocations");
    assert!(packets > 3000 * 4, "the loop moved {packets} packets");
    assert_eq!(allocs, 0, "heap allocations on the steady-state path");
}
