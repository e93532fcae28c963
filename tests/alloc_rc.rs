//! No heap allocation per packet on the steady-state RC data path: two engines wired
//! back to back through fixed buffers (no simulator, whose queue allocates), a global
//! allocator that counts, and streams of WRITE, READ and SEND after a warm-up.

use roce_emu::engine::*;
use roce_emu::mem::{Access, MrTable, Sge};
use roce_emu::wire::Psn;
use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

struct End {
    e: Engine,
    qpn: u32,
    cq: u32,
    sge: Sge,
    remote: Remote,
    ip: IpAddr,
}

const LEN: u32 = 16 * 1024;

fn end(ip: [u8; 4]) -> End {
    let ip = IpAddr::V4(Ipv4Addr::from(ip));
    let mem = Arc::new(MrTable::new());
    let pd = mem.alloc_pd();
    let mr = mem.reg_mr(pd, 0x10_0000, 1 << 20, Access::ALL).unwrap();
    let mut e = Engine::new(EngineConfig::new(ip), mem);
    let cq = e.create_cq(4096).unwrap();
    let qpn = e
        .create_qp(&QpInit {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                ..QpCap::default()
            },
            sq_sig_all: true,
        })
        .unwrap();
    End {
        e,
        qpn,
        cq,
        sge: Sge {
            addr: 0x10_0000,
            length: LEN,
            lkey: mr.lkey(),
        },
        remote: Remote {
            va: 0x10_0000 + 0x8_0000,
            rkey: mr.rkey().0,
        },
        ip,
    }
}

fn connect(a: &mut End, b: &End) {
    let steps = [
        QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            access: Some(Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC),
            ..Default::default()
        },
        QpAttr {
            state: Some(QpState::Rtr),
            av: Some(AddressVector { dest_ip: b.ip }),
            path_mtu: Some(Mtu::M4096),
            dest_qpn: Some(b.qpn),
            rq_psn: Some(Psn::new(0xfff000)),
            max_dest_rd_atomic: Some(4),
            min_rnr_timer: Some(12),
            ..Default::default()
        },
        QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(Psn::new(0xfff000)),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(4),
            ..Default::default()
        },
    ];
    for s in steps {
        a.e.modify_qp(a.qpn, &s).unwrap();
    }
}

/// Moves packets both ways until neither side has anything to send.
fn pump(a: &mut End, b: &mut End, buf: &mut [u8], now: Instant) -> usize {
    let mut n = 0;
    loop {
        let mut moved = false;
        for dir in 0..2 {
            let (from, to) = if dir == 0 {
                (&mut *a, &mut *b)
            } else {
                (&mut *b, &mut *a)
            };
            while let Some(t) = from.e.poll_transmit(now, buf) {
                to.e.handle_datagram(
                    now,
                    Datagram {
                        src: t.src,
                        dst: SocketAddr::new(to.ip, 4791),
                        ipv4_id: Some(0),
                        data: &buf[..t.len],
                    },
                );
                n += 1;
                moved = true;
            }
        }
        if !moved {
            return n;
        }
    }
}

fn round(a: &mut End, b: &mut End, op: u32, buf: &mut [u8], wcs: &mut [Completion]) -> usize {
    let sop = match op % 3 {
        0 => SendOp::Write { remote: b.remote },
        1 => SendOp::Read { remote: b.remote },
        _ => SendOp::Send,
    };
    if matches!(sop, SendOp::Send) {
        let sge = Sge {
            addr: b.sge.addr + 0x4_0000,
            ..b.sge
        };
        b.e.post_recv(
            b.qpn,
            &RecvWr {
                wr_id: 9,
                sges: &[sge],
            },
        )
        .unwrap();
    }
    let sges = [a.sge];
    a.e.post_send(
        a.qpn,
        &SendWr {
            wr_id: u64::from(op),
            op: sop,
            local: Local::Sges(&sges),
            flags: SendFlags::default(),
        },
    )
    .unwrap();
    let n = pump(a, b, buf, Instant::from_nanos(u64::from(op) * 1000));
    let done = a.e.poll_cq(a.cq, wcs).unwrap();
    assert_eq!(done, 1, "one completion per WR");
    assert_eq!(wcs[0].status, WcStatus::Success);
    b.e.poll_cq(b.cq, wcs).unwrap();
    n
}

#[test]
fn steady_state_data_path_does_not_allocate() {
    let mut a = end([198, 18, 0, 1]);
    let mut b = end([198, 18, 0, 2]);
    connect(&mut a, &b);
    connect(&mut b, &a);
    let mut buf = vec![0u8; 4096 + 128];
    let mut wcs = [Completion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        qpn: 0,
        byte_len: 0,
        imm: None,
        invalidated_rkey: None,
        src_qp: 0,
    }; 8];
    // Warm-up: queues reach their working size.
    for op in 0..30 {
        round(&mut a, &mut b, op, &mut buf, &mut wcs);
    }
    // The counter counts: one deliberate allocation is seen.
    ALLOCS.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    drop(std::hint::black_box(Vec::<u8>::with_capacity(64)));
    assert_eq!(
        ALLOCS.load(Ordering::Relaxed),
        1,
        "the counting allocator works"
    );
    ALLOCS.store(0, Ordering::Relaxed);
    let mut packets = 0;
    for op in 30..3030 {
        packets += round(&mut a, &mut b, op, &mut buf, &mut wcs);
    }
    COUNTING.store(false, Ordering::Relaxed);
    let allocs = ALLOCS.load(Ordering::Relaxed);
    eprintln!("{packets} packets (WRITE/READ/SEND of {LEN} bytes, PSNs across the wrap), {allocs} allocations");
    assert!(packets > 3000 * 4, "the loop moved {packets} packets");
    assert_eq!(allocs, 0, "heap allocations on the steady-state path");
}
