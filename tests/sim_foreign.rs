//! Memory regions over memory the caller owns (design real-programs.md §1.2): the test
//! allocates the buffers, registers them in place as foreign memory, and checks a remote
//! RDMA WRITE, READ, FETCH_ADD and COMPARE_SWAP by reading its own buffers, not the
//! region's API. Also the table-level rules for foreign regions (range, keys, PD), which
//! need `unsafe` to construct and so cannot live in the library's own unit tests.

mod common;

use common::rc::{pattern, Opts, Pair};
use roce_emu::engine::*;
use roce_emu::mem::{Access, Backing, Key, MemError, MemoryRegion, MrTable, Rkey};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

const A: usize = 0;
const B: usize = 1;
const ALL: Access = Access::ALL;

/// Registers `[ptr, ptr + len)` in place at its own address.
///
/// # Safety
/// The memory must outlive the region: the caller deregisters it and drops every `Arc`
/// before freeing the memory.
unsafe fn foreign(
    t: &MrTable,
    pd: roce_emu::mem::Pd,
    ptr: *mut u8,
    len: usize,
) -> Arc<MemoryRegion> {
    // SAFETY: forwarded to the caller (above).
    let b = unsafe { Backing::foreign(ptr, len) }.unwrap();
    t.reg_mr_at_addr(pd, b, ALL).unwrap()
}

// The program's buffers are atomics (AtomicU8/AtomicU64, i.e. plain bytes and words in
// memory), so that the test's own reads and writes of them go through shared references
// to interior-mutable memory and never invalidate the raw pointer the region holds, as a
// `&mut` to a Vec's bytes would under Rust's aliasing rules. A C program has no such
// rules; the bytes are the same.
fn buffer(len: usize, fill: u8) -> Box<[AtomicU8]> {
    (0..len).map(|_| AtomicU8::new(fill)).collect()
}

fn get(b: &[AtomicU8]) -> Vec<u8> {
    b.iter().map(|x| x.load(Ordering::Relaxed)).collect()
}

fn put(b: &[AtomicU8], data: &[u8]) {
    for (x, &v) in b.iter().zip(data) {
        x.store(v, Ordering::Relaxed);
    }
}

/// Deregisters `mr` and checks nothing else holds it, so the caller may free the memory.
fn release(t: &MrTable, mr: Arc<MemoryRegion>) {
    t.dereg_mr(mr.lkey()).unwrap();
    assert_eq!(
        Arc::strong_count(&mr),
        1,
        "an operation still holds the region"
    );
}

#[test]
fn remote_write_read_and_atomics_act_on_the_callers_own_memory() {
    let mut p = Pair::new(Opts::default());
    // The program's buffer: 64 guard bytes, 4096 registered bytes, 64 guard bytes.
    let mine = buffer(64 + 4096 + 64, 0xee);
    // The program's counters, which it also updates itself with its own atomics.
    let words: Box<[AtomicU64]> = (0..4).map(|_| AtomicU64::new(0)).collect();
    words[1].store(7, Ordering::SeqCst);

    let t = Arc::clone(p.engine(B).mem());
    let pd = p.end(B).pd;
    // SAFETY: `mine` and `words` live to the end of the test, after `release` below.
    let (buf, ctr) = unsafe {
        (
            foreign(&t, pd, mine.as_ptr().add(64) as *mut u8, 4096),
            foreign(&t, pd, words.as_ptr() as *mut u8, 32),
        )
    };
    assert_eq!(
        buf.iova(),
        mine.as_ptr() as u64 + 64,
        "iova defaults to the address"
    );
    assert!(!buf.backing().is_owned());
    let remote = |mr: &MemoryRegion, off: u64| Remote {
        va: mr.iova() + off,
        rkey: mr.rkey().0,
    };

    p.write_mem(A, 0, &pattern(5, 3000));
    p.send(
        A,
        1,
        SendOp::Write {
            remote: remote(&buf, 100),
        },
        0,
        3000,
    );
    p.send(
        A,
        2,
        SendOp::FetchAdd {
            remote: remote(&ctr, 0),
            add: 5,
        },
        8000,
        8,
    );
    p.send(
        A,
        3,
        SendOp::CompareSwap {
            remote: remote(&ctr, 8),
            compare: 7,
            swap: 99,
        },
        8008,
        8,
    );
    p.send(
        A,
        4,
        SendOp::CompareSwap {
            remote: remote(&ctr, 16),
            compare: 1,
            swap: 2,
        },
        8016,
        8,
    );
    p.settle();
    let st: Vec<_> = p
        .completions(A)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        st,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (4, WcStatus::Success)
        ]
    );
    // The WRITE landed in the program's own bytes, and nowhere else.
    assert_eq!(get(&mine[64 + 100..64 + 3100]), pattern(5, 3000));
    assert!(get(&mine[..64 + 100]).iter().all(|&x| x == 0xee));
    assert!(get(&mine[64 + 3100..]).iter().all(|&x| x == 0xee));
    // The atomics acted on the program's words, in host order, and returned originals.
    assert_eq!(words[0].load(Ordering::SeqCst), 5);
    assert_eq!(words[1].load(Ordering::SeqCst), 99);
    assert_eq!(
        words[2].load(Ordering::SeqCst),
        0,
        "compare failed: unchanged"
    );
    assert_eq!(p.read_mem(A, 8000, 8), 0u64.to_ne_bytes());
    assert_eq!(p.read_mem(A, 8008, 8), 7u64.to_ne_bytes());
    assert_eq!(p.read_mem(A, 8016, 8), 0u64.to_ne_bytes());

    // A READ sees what the program itself wrote there.
    put(&mine[64 + 4000..64 + 4096], &pattern(9, 96));
    p.send(
        A,
        5,
        SendOp::Read {
            remote: remote(&buf, 4000),
        },
        4096,
        96,
    );
    p.settle();
    assert_eq!(p.completions(A)[0].status, WcStatus::Success);
    assert_eq!(p.read_mem(A, 4096, 96), pattern(9, 96));

    // One byte past the registered range: refused, not a byte of the guard touched.
    p.send(
        A,
        6,
        SendOp::Write {
            remote: remote(&buf, 4000),
        },
        0,
        97,
    );
    p.settle();
    assert_eq!(p.completions(A)[0].status, WcStatus::RemAccessErr);
    assert!(get(&mine[64 + 4096..]).iter().all(|&x| x == 0xee));
    assert_eq!(get(&mine[64 + 4000..64 + 4096]), pattern(9, 96));

    release(&t, buf);
    release(&t, ctr);
    drop(mine);
}

/// Remote FETCH_ADDs through the simulated network while a thread of the program adds
/// to the same word with its own `AtomicU64::fetch_add`: every increment counts.
#[test]
fn remote_fetch_add_races_exactly_with_the_programs_own_atomics() {
    const REMOTE: u64 = 300;
    const LOCAL: u64 = 200_000;
    let mut p = Pair::new(Opts::default());
    let word = Box::new(AtomicU64::new(0));
    let t = Arc::clone(p.engine(B).mem());
    // SAFETY: `word` outlives the region (released before the end of the test).
    let mr = unsafe { foreign(&t, p.end(B).pd, word.as_ptr().cast(), 8) };
    let rw = Remote {
        va: mr.iova(),
        rkey: mr.rkey().0,
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..LOCAL {
                word.fetch_add(1, Ordering::Relaxed);
            }
        });
        for i in 0..REMOTE {
            p.send(
                A,
                i,
                SendOp::FetchAdd {
                    remote: rw,
                    add: 1 << 32,
                },
                8 * (i % 64),
                8,
            );
            if i % 64 == 63 {
                p.settle();
            }
        }
        p.settle();
    });
    let c = p.completions(A);
    assert_eq!(c.len() as u64, REMOTE);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    assert_eq!(word.load(Ordering::SeqCst), (REMOTE << 32) + LOCAL);
    release(&t, mr);
}

#[test]
fn foreign_regions_keep_every_check() {
    let t = MrTable::new();
    let pd = t.alloc_pd();
    let pd2 = t.alloc_pd();
    let mem: Box<[AtomicU64]> = (0..8).map(|_| AtomicU64::new(0)).collect();
    let word = |i: usize| mem[i].load(Ordering::SeqCst);
    let base = mem.as_ptr() as *mut u8;
    // SAFETY: `mem` outlives every region made of it (all released below).
    let (whole, ro, shifted) = unsafe {
        let whole = foreign(&t, pd, base, 32);
        let ro = t
            .reg_mr_backing(
                pd,
                0x1000,
                Backing::foreign(base.add(32), 32).unwrap(),
                Access::REMOTE_READ,
            )
            .unwrap();
        // Registered at an iova 4 bytes off the address's alignment.
        let shifted = t
            .reg_mr_backing(pd, 0x2004, Backing::foreign(base.add(32), 32).unwrap(), ALL)
            .unwrap();
        (whole, ro, shifted)
    };
    let (iova, rk) = (whole.iova(), whole.rkey());
    t.write_remote(pd, rk, iova + 24, &[1; 8]).unwrap();
    assert_eq!(word(3), u64::from_ne_bytes([1; 8]));
    // Range: one byte past the region is refused, nothing written.
    assert!(matches!(
        t.write_remote(pd, rk, iova + 25, &[2; 8]),
        Err(MemError::OutOfRange { .. })
    ));
    assert!(matches!(
        t.write_remote(pd, rk, iova.wrapping_sub(1), &[2; 2]),
        Err(MemError::OutOfRange { .. })
    ));
    assert_eq!(word(3), u64::from_ne_bytes([1; 8]));
    assert_eq!(word(4), 0);
    // PD and keys.
    assert!(matches!(
        t.write_remote(pd2, rk, iova, &[2]),
        Err(MemError::PdMismatch { .. })
    ));
    let stale = Rkey::new(rk.index(), rk.key() ^ 1);
    assert!(matches!(
        t.write_remote(pd, stale, iova, &[2]),
        Err(MemError::KeyMismatch { .. })
    ));
    // Access rights: a read-only region at its own iova.
    assert_eq!(ro.iova(), 0x1000);
    mem[4].store(42, Ordering::SeqCst);
    let mut out = [0u8; 8];
    t.read_remote(pd, ro.rkey(), 0x1000, &mut out).unwrap();
    assert_eq!(u64::from_ne_bytes(out), 42);
    assert_eq!(
        t.write_remote(pd, ro.rkey(), 0x1000, &[1]),
        Err(MemError::AccessDenied {
            key: Key::Remote(ro.rkey()),
            need: Access::REMOTE_WRITE,
            have: Access::REMOTE_READ
        })
    );
    // Atomics: on the program's word, and refused where the host word is misaligned
    // although the va is aligned.
    assert_eq!(t.fetch_add(pd, rk, iova + 8, 3), Ok(0));
    assert_eq!(word(1), 3);
    assert_eq!(
        t.fetch_add(pd, shifted.rkey(), 0x2008, 1),
        Err(MemError::MisalignedAtomic { va: 0x2008 })
    );
    assert_eq!(word(4), 42);
    // A PD with regions cannot go; the device's max_mr_size holds for foreign memory.
    assert_eq!(t.dealloc_pd(pd), Err(MemError::PdInUse { pd, mrs: 3 }));
    let small = MrTable::with_config(roce_emu::mem::MrTableConfig {
        max_mr_len: 16,
        ..Default::default()
    });
    let spd = small.alloc_pd();
    // SAFETY: refused, so nothing is kept.
    let b = unsafe { Backing::foreign(base, 32) }.unwrap();
    assert_eq!(
        small.reg_mr_at_addr(spd, b, ALL).unwrap_err(),
        MemError::MrTooLarge {
            length: 32,
            max: 16
        }
    );
    small.dealloc_pd(spd).unwrap();
    for mr in [whole, ro, shifted] {
        release(&t, mr);
    }
    t.dealloc_pd(pd).unwrap();
    drop(mem);
}
