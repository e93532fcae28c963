//! Foreign memory that goes bad after registration (issue 21, 2c): the program registers
//! its own mmap'd memory, then makes it read-only, PROT_NONE, unmaps it, or truncates the
//! file it maps. A peer's WRITE, SEND, READ or ATOMIC there, or a local SGE there, must
//! fail as an access error, counted (`mem_faults`), and never kill the program with
//! SIGSEGV or SIGBUS (mem/backing/fault.rs catches the fault).
//!
//! One test, its scenarios in sequence: the munmap one leaves a hole in the address
//! space, which another test thread's mmap could fill meanwhile.

mod common;

use common::rc::{Opts, Pair};
use roce_emu::engine::*;
use roce_emu::mem::{faults_caught, Access, Backing, Lkey, MemoryRegion, Sge};
use std::sync::Arc;

const A: usize = 0;
const B: usize = 1;

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// `len` bytes of fresh anonymous memory, read-write, filled with `fill`.
fn map(len: usize, fill: u8) -> *mut u8 {
    // SAFETY: a new private anonymous mapping; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // SAFETY: the mapping just made, `len` bytes, read-write.
    unsafe { std::ptr::write_bytes(p as *mut u8, fill, len) };
    p as *mut u8
}

fn protect(p: *mut u8, len: usize, prot: libc::c_int) {
    // SAFETY: a mapping of ours (the test's), `len` bytes.
    assert_eq!(unsafe { libc::mprotect(p as *mut _, len, prot) }, 0);
}

/// Registers `[p, p + len)` on `which` at its own address with every right.
fn register(pair: &mut Pair, which: usize, p: *mut u8, len: usize) -> Arc<MemoryRegion> {
    let pd = pair.end(which).pd;
    // SAFETY: the test keeps the memory mapped (or deliberately breaks it, which is what
    // the fault handling is for) until it deregisters the region at the end of the
    // scenario; nothing else frees it.
    let b = unsafe { Backing::foreign(p, len) }.unwrap();
    pair.engine(which)
        .mem()
        .reg_mr_at_addr(pd, b, Access::ALL)
        .unwrap()
}

fn remote(mr: &MemoryRegion, off: u64) -> Remote {
    Remote {
        va: mr.iova() + off,
        rkey: mr.rkey().0,
    }
}

/// One completion of `which`, its status.
fn status(p: &mut Pair, which: usize) -> WcStatus {
    let c = p.completions(which);
    assert_eq!(c.len(), 1, "{c:?}");
    c[0].status
}

fn finish(p: &mut Pair, which: usize, mr: Arc<MemoryRegion>) {
    p.engine(which).mem().dereg_mr(mr.lkey()).unwrap();
}

#[test]
fn memory_broken_after_registration_fails_accesses_cleanly() {
    let pg = page();
    let before = faults_caught();

    // ---- WRITE into memory made read-only: REM_ACCESS_ERR, nothing written ----
    let mut p = Pair::new(Opts::default());
    let mem = map(2 * pg, 0x11);
    let mr = register(&mut p, B, mem, 2 * pg);
    protect(mem, 2 * pg, libc::PROT_READ);
    p.write_mem(A, 0, &[0xaa; 512]);
    p.send(
        A,
        1,
        SendOp::Write {
            remote: remote(&mr, 100),
        },
        0,
        512,
    );
    p.settle();
    assert_eq!(status(&mut p, A), WcStatus::RemAccessErr);
    assert_eq!(p.counter(B, Counter::MemFaults), 1);
    // SAFETY: still mapped (read-only): reading is fine.
    assert_eq!(unsafe { *mem.add(100) }, 0x11, "nothing written");
    finish(&mut p, B, mr);

    // ---- READ from PROT_NONE memory: REM_ACCESS_ERR ----
    let mut p = Pair::new(Opts::default());
    let mr = register(&mut p, B, mem, 2 * pg);
    protect(mem, 2 * pg, libc::PROT_NONE);
    p.send(
        A,
        2,
        SendOp::Read {
            remote: remote(&mr, 0),
        },
        0,
        256,
    );
    p.settle();
    assert_eq!(status(&mut p, A), WcStatus::RemAccessErr);
    assert_eq!(p.counter(B, Counter::MemFaults), 1);
    finish(&mut p, B, mr);

    // ---- ATOMIC on read-only memory: REM_ACCESS_ERR, the word unchanged ----
    let mut p = Pair::new(Opts::default());
    let mr = register(&mut p, B, mem, 2 * pg);
    protect(mem, 2 * pg, libc::PROT_READ);
    let fa = SendOp::FetchAdd {
        remote: remote(&mr, 64),
        add: 1,
    };
    p.send(A, 3, fa, 0, 8);
    p.settle();
    assert_eq!(status(&mut p, A), WcStatus::RemAccessErr);
    assert_eq!(p.counter(B, Counter::MemFaults), 1);
    // SAFETY: mapped read-only.
    assert_eq!(unsafe { *mem.add(64) }, 0x11);
    finish(&mut p, B, mr);

    // ---- SEND into a receive buffer made read-only: the receiver's WQE fails with a
    // local protection error, the sender gets REM_OP_ERR ----
    let mut p = Pair::new(Opts::default());
    protect(mem, 2 * pg, libc::PROT_READ | libc::PROT_WRITE);
    let mr = register(&mut p, B, mem, 2 * pg);
    let sge = Sge {
        addr: mr.iova(),
        length: 1024,
        lkey: mr.lkey(),
    };
    p.try_post_recv_sges(B, 7, &[sge]).unwrap();
    protect(mem, 2 * pg, libc::PROT_READ);
    p.send(A, 4, SendOp::Send, 0, 256);
    p.settle();
    assert_eq!(status(&mut p, B), WcStatus::LocProtErr);
    assert_eq!(status(&mut p, A), WcStatus::RemOpErr);
    assert_eq!(p.counter(B, Counter::MemFaults), 1);
    finish(&mut p, B, mr);

    // ---- a local SGE over PROT_NONE memory (the source of a WRITE): LOC_PROT_ERR ----
    let mut p = Pair::new(Opts::default());
    let mr = register(&mut p, A, mem, 2 * pg);
    protect(mem, 2 * pg, libc::PROT_NONE);
    let dst = p.end(B).mr.clone();
    let sge = Sge {
        addr: mr.iova(),
        length: 512,
        lkey: Lkey(mr.lkey().0),
    };
    p.post_sges(
        A,
        5,
        SendOp::Write {
            remote: remote(&dst, 0),
        },
        &[sge],
    );
    p.settle();
    assert_eq!(status(&mut p, A), WcStatus::LocProtErr);
    assert_eq!(p.counter(A, Counter::MemFaults), 1);
    finish(&mut p, A, mr);

    // ---- a file mapping truncated under a WRITE: SIGBUS, caught: REM_ACCESS_ERR ----
    let mut p = Pair::new(Opts::default());
    let path = std::env::temp_dir().join(format!("roce-emu-sim-fault-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    file.set_len(2 * pg as u64).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: a new shared mapping of our own file.
    let fm = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * pg,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(fm, libc::MAP_FAILED);
    let mr = register(&mut p, B, fm as *mut u8, 2 * pg);
    file.set_len(0).unwrap();
    p.send(
        A,
        6,
        SendOp::Write {
            remote: remote(&mr, pg as u64),
        },
        0,
        64,
    );
    p.settle();
    assert_eq!(status(&mut p, A), WcStatus::RemAccessErr);
    assert_eq!(p.counter(B, Counter::MemFaults), 1);
    finish(&mut p, B, mr);
    // SAFETY: our mapping, no longer registered.
    unsafe { libc::munmap(fm, 2 * pg) };
    drop(file);
    let _ = std::fs::remove_file(&path);

    // ---- WRITE into memory unmapped after registration: REM_ACCESS_ERR ----
    let mut p = Pair::new(Opts::default());
    protect(mem, 2 * pg, libc::PROT_READ | libc::PROT_WRITE);
    let mr = register(&mut p, B, mem, 2 * pg);
    // SAFETY: our mapping; the region over it is what this scenario breaks on purpose.
    assert_eq!(unsafe { libc::munmap(mem as *mut _, 2 * pg) }, 0);
    p.send(
        A,
        8,
        SendOp::Write {
            remote: remote(&mr, 0),
        },
        0,
        128,
    );
    p.settle();
    assert_eq!(status(&mut p, A), WcStatus::RemAccessErr);
    assert_eq!(p.counter(B, Counter::MemFaults), 1);
    finish(&mut p, B, mr);

    // Every fault above was caught by the handler, and the program is still here.
    assert!(
        faults_caught() - before >= 7,
        "{}",
        faults_caught() - before
    );
}

/// A fault outside the fault-safe routines is not ours: the handler passes it on (here to
/// Rust's own handler, then the default action), and the process dies of SIGSEGV as it
/// would without us, rather than carrying on from a wrong address.
#[test]
fn a_fault_elsewhere_still_kills_with_sigsegv() {
    let mut x = [0u8; 8];
    // SAFETY: `x` outlives the backing; registering foreign memory installs the handler.
    drop(unsafe { Backing::foreign(x.as_mut_ptr(), 8) }.unwrap());
    // SAFETY: fork(2); the child only faults (no lock, no allocation) and never returns.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: deliberately not: a read of address 8, which is never mapped.
        unsafe { std::ptr::read_volatile(8 as *const u8) };
        // SAFETY: _exit(2) only (not reached if the fault kills, as it must).
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
        "child status {status:#x}"
    );
}
