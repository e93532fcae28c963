//! The verbs layer over real UDP sockets on loopback: completion channels as pollable fds
//! (one-shot, solicited-only), the progress thread serving a peer while the program makes
//! no call, async events on their fd, PD ownership, and memory the caller allocated.
//! Each test uses its own pair of 127.0.9.x addresses, so they run in parallel.

mod common;

use common::nic::{connect_psns, End, Nic, IOVA, WAIT};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use roce_emu::engine::{AsyncEvent, Completion, Remote, SendOp, WcOpcode, WcStatus};
use roce_emu::mem::{Access, Backing};
use roce_emu::verbs::{self, CompChannel, Device, Event};
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// A NIC on `ip` with one QP; its CQ's events on a completion channel if `channel`.
fn end(ip: &str, channel: bool) -> (End, Option<CompChannel>) {
    let ctx = Device::new(ip.parse().unwrap())
        .open()
        .expect("open the NIC");
    let ch = channel.then(|| ctx.create_comp_channel().unwrap());
    (End::new(Nic::new(ctx, ch.as_ref())), ch)
}

fn pair(a: &str, b: &str, b_channel: bool) -> (End, End, Option<CompChannel>) {
    let (a, _) = end(a, false);
    let (b, ch) = end(b, b_channel);
    connect_psns(a.ep(), b.ep(), (100, 200));
    (a, b, ch)
}

fn send(e: &End, wr_id: u64, op: SendOp, off: u64, len: u32, solicited: bool) {
    e.ep().post_wr(wr_id, op, off, len, solicited).unwrap();
}

fn readable(fd: BorrowedFd<'_>, within: Duration) -> bool {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    let ms = within.as_millis() as u16;
    poll(&mut fds, PollTimeout::from(ms)).unwrap() == 1
}

/// The must-show: a program that sleeps in poll(2) on the completion channel's fd is woken
/// by a SEND that arrives while it makes no call (the progress thread ran the NIC), gets
/// the event, and finds the completion. Then: one-shot (no second event without re-arming)
/// and solicited-only (a SEND without SE raises nothing; one with SE does).
#[test]
fn completion_channel_fd_wakes_poll() {
    let (a, b, ch) = pair("127.0.9.1", "127.0.9.2", true);
    let ch = ch.unwrap();
    for i in 0..4 {
        b.ep().post_recv_wr(i, i * 1024, 1024);
    }
    b.ctx.req_notify_cq(b.cq, false).unwrap();
    assert!(
        !readable(ch.fd(), Duration::from_millis(50)),
        "event before any completion"
    );

    send(&a, 1, SendOp::Send, 0, 100, false);
    assert!(
        readable(ch.fd(), WAIT),
        "the channel fd never became readable"
    );
    assert_eq!(ch.try_get_event(), Some(b.cq));
    assert!(!readable(ch.fd(), Duration::ZERO), "one event, one read");
    let c = b.poll_one();
    assert_eq!((c.wr_id, c.status, c.byte_len), (0, WcStatus::Success, 100));
    assert_eq!(a.poll_one().status, WcStatus::Success);

    // Not re-armed: the next SEND completes without an event.
    send(&a, 2, SendOp::Send, 0, 10, false);
    assert_eq!(b.poll_one().wr_id, 1);
    assert!(!readable(ch.fd(), Duration::from_millis(100)), "one-shot");
    assert_eq!(a.poll_one().status, WcStatus::Success);

    // Solicited only: a plain SEND completes silently, a SEND with SE raises the event.
    b.ctx.req_notify_cq(b.cq, true).unwrap();
    send(&a, 3, SendOp::Send, 0, 10, false);
    assert_eq!(a.poll_one().status, WcStatus::Success);
    assert!(
        !readable(ch.fd(), Duration::from_millis(100)),
        "unsolicited SEND raised an event"
    );
    send(&a, 4, SendOp::Send, 0, 10, true);
    assert!(readable(ch.fd(), WAIT), "solicited SEND raised no event");
    assert_eq!(ch.get_event(WAIT), Some(b.cq));
    let got: Vec<u64> = (0..2).map(|_| b.poll_one().wr_id).collect();
    assert_eq!(got, [2, 3]);
}

/// The responder side runs on the progress thread: B never calls into its context while
/// A WRITEs, READs and does atomics on B's memory.
#[test]
fn progress_thread_serves_a_peer_that_makes_no_call() {
    let (a, b, _) = pair("127.0.9.3", "127.0.9.4", false);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    a.mr.write(IOVA, &data).unwrap();
    b.mr.write(IOVA + 0x8000, &[0x42; 8]).unwrap();
    b.mr.write(IOVA + 0x9000, &5u64.to_ne_bytes()).unwrap();
    let rkey = b.mr.rkey().0;
    let remote = |off| Remote {
        va: IOVA + off,
        rkey,
    };
    send(
        &a,
        1,
        SendOp::Write {
            remote: remote(0x4000),
        },
        0,
        3000,
        false,
    );
    assert_eq!(a.poll_one().status, WcStatus::Success);
    send(
        &a,
        2,
        SendOp::Read {
            remote: remote(0x8000),
        },
        0x100,
        8,
        false,
    );
    assert_eq!(a.poll_one().status, WcStatus::Success);
    send(
        &a,
        3,
        SendOp::FetchAdd {
            remote: remote(0x9000),
            add: 10,
        },
        0x200,
        8,
        false,
    );
    let c = a.poll_one();
    assert_eq!(
        (c.status, c.opcode),
        (WcStatus::Success, WcOpcode::FetchAdd)
    );

    let mut got = vec![0; 3000];
    b.mr.read(IOVA + 0x4000, &mut got).unwrap();
    assert_eq!(got, data, "the WRITE landed");
    let mut r = [0u8; 8];
    a.mr.read(IOVA + 0x100, &mut r).unwrap();
    assert_eq!(r, [0x42; 8], "the READ brought B's bytes");
    a.mr.read(IOVA + 0x200, &mut r).unwrap();
    assert_eq!(u64::from_ne_bytes(r), 5, "FETCH_ADD returned the original");
    b.mr.read(IOVA + 0x9000, &mut r).unwrap();
    assert_eq!(u64::from_ne_bytes(r), 15, "FETCH_ADD added");
}

/// A WRITE with a bad R_Key: A's WR fails REM_ACCESS_ERR, and B's async fd becomes
/// readable with the access error of its QP, raised by the progress thread.
#[test]
fn async_event_fd_reports_an_access_error() {
    let (a, b, _) = pair("127.0.9.5", "127.0.9.6", false);
    let bad = Remote {
        va: IOVA,
        rkey: b.mr.rkey().0 ^ 0x80,
    };
    send(&a, 1, SendOp::Write { remote: bad }, 0, 64, false);
    assert_eq!(a.poll_one().status, WcStatus::RemAccessErr);
    assert!(readable(b.ctx.async_fd(), WAIT), "no async event on B");
    assert_eq!(
        b.ctx.get_async_event(WAIT),
        Some(Event::Engine(AsyncEvent::QpAccessError { qpn: b.qpn }))
    );
}

/// `ibv_dealloc_pd` semantics: refused while a QP or a region uses the PD.
#[test]
fn a_pd_in_use_is_not_deallocated() {
    let (e, _) = end("127.0.9.7", false);
    let err = e.ctx.dealloc_pd(e.pd).unwrap_err();
    assert!(
        matches!(err, verbs::Error::PdInUse { qpn, .. } if qpn == e.qpn),
        "{err}"
    );
    e.ctx.destroy_qp(e.qpn).unwrap();
    let err = e.ctx.dealloc_pd(e.pd).unwrap_err();
    assert!(err.to_string().contains("region"), "{err}");
    e.ctx.dereg_mr(e.mr.lkey()).unwrap();
    e.ctx.dealloc_pd(e.pd).unwrap();
}

/// Memory the test allocated, registered where it is: a remote WRITE lands in the test's
/// own buffer and a remote FETCH_ADD acts on the test's own 8-byte word.
#[test]
fn remote_write_and_atomic_land_in_caller_memory() {
    let (a, b, _) = pair("127.0.9.8", "127.0.9.9", false);
    // The program's memory: 64 words; word 0 is the atomic target, bytes 64.. the WRITE's.
    let words: Box<[std::sync::atomic::AtomicU64]> = (0..64)
        .map(|_| std::sync::atomic::AtomicU64::new(0))
        .collect();
    words[0].store(1000, std::sync::atomic::Ordering::SeqCst);
    let addr = words.as_ptr() as *mut u8;
    // SAFETY: `words` outlives the region: it is deregistered below before `words` drops,
    // and the verbs layer deregisters under the NIC lock, so no access follows.
    let backing = unsafe { Backing::foreign(addr, 64 * 8) }.unwrap();
    let va = addr as u64;
    let mr = b
        .ctx
        .reg_mr_backing(b.pd, va, backing, Access::ALL)
        .unwrap();
    let data: Vec<u8> = (0..100u8).collect();
    a.mr.write(IOVA, &data).unwrap();
    let remote = |off| Remote {
        va: va + off,
        rkey: mr.rkey().0,
    };
    send(&a, 1, SendOp::Write { remote: remote(64) }, 0, 100, false);
    assert_eq!(a.poll_one().status, WcStatus::Success);
    send(
        &a,
        2,
        SendOp::FetchAdd {
            remote: remote(0),
            add: 234,
        },
        0x800,
        8,
        false,
    );
    assert_eq!(a.poll_one().status, WcStatus::Success);

    // Read back through the program's own words, not the region.
    let bytes: Vec<u8> = words[8..21]
        .iter()
        .flat_map(|w| w.load(std::sync::atomic::Ordering::SeqCst).to_ne_bytes())
        .collect();
    assert_eq!(
        &bytes[..100],
        &data[..],
        "the WRITE landed in the caller's buffer"
    );
    assert_eq!(words[0].load(std::sync::atomic::Ordering::SeqCst), 1234);
    let mut orig = [0u8; 8];
    a.mr.read(IOVA + 0x800, &mut orig).unwrap();
    assert_eq!(u64::from_ne_bytes(orig), 1000);
    let lkey = mr.lkey();
    drop(mr);
    b.ctx.dereg_mr(lkey).unwrap();
}

/// A polling program's posts wait for its next poll (one system call per batch); a program
/// that instead goes to sleep on the port (`Context::wait`) must not sit on them: the
/// WRITE leaves before the sleep, and the peer's ACK ends the sleep early. (perf --lat
/// with --spin-us 0 once held every turn for its 100 ms sleep.)
#[test]
fn a_post_made_while_polling_leaves_before_the_program_sleeps() {
    let (a, b, _) = pair("127.0.9.10", "127.0.9.11", false);
    // A polls (so its posts are deferred to its next poll), then posts a WRITE.
    let mut c = [Completion::default()];
    assert_eq!(a.ctx.poll_cq(a.cq, &mut c).unwrap(), 0);
    let remote = Remote {
        va: IOVA,
        rkey: b.mr.rkey().0,
    };
    send(&a, 7, SendOp::Write { remote }, 0, 64, false);
    let t = Instant::now();
    a.ctx.wait(Duration::from_secs(3)).unwrap();
    let slept = t.elapsed();
    assert!(
        slept < Duration::from_secs(2),
        "the sleep lasted {slept:?}: the WRITE waited for it"
    );
    let done = a.poll_one();
    assert_eq!((done.wr_id, done.status), (7, WcStatus::Success));
    drop(b);
}

/// Every NIC seeds its key bytes anew: the first region of each program (here, of each
/// context) must not get the same R_Key run after run, or a peer that saw one program's
/// keys knows the next one's. Four contexts all alike: 2^-24 by chance.
#[test]
fn rkeys_differ_between_nics() {
    let rkeys: Vec<u32> = (0..4)
        .map(|i| {
            let mut dev = Device::new(format!("127.0.34.{}", i + 1).parse().unwrap());
            dev.share = false;
            let ctx = dev.open().unwrap();
            let pd = ctx.alloc_pd();
            ctx.reg_mr(pd, 0x1000, 4096, Access::ALL).unwrap().rkey().0
        })
        .collect();
    assert!(
        rkeys.iter().any(|&k| k != rkeys[0]),
        "the same R_Key in every NIC: {rkeys:x?}"
    );
}

/// Memory made read-only after registration, written by a peer while the program makes no
/// call: the progress thread does the access, faults, and the fault is an access error
/// (the peer's REM_ACCESS_ERR, B's `mem_faults`), not the end of the process. (The
/// progress thread once blocked SIGSEGV with every other signal, which made any fault on
/// it fatal, caught or not.)
#[test]
fn a_fault_on_the_progress_thread_is_an_access_error() {
    let (a, b, _) = pair("127.0.9.12", "127.0.9.13", false);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: a new private anonymous mapping of the test's own.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(mem, libc::MAP_FAILED);
    // SAFETY: the mapping stays until after the region is deregistered below; making it
    // read-only is what the test is about.
    let backing = unsafe { Backing::foreign(mem as *mut u8, page) }.unwrap();
    let va = mem as u64;
    let mr = b
        .ctx
        .reg_mr_backing(b.pd, va, backing, Access::ALL)
        .unwrap();
    // SAFETY: the test's mapping.
    assert_eq!(unsafe { libc::mprotect(mem, page, libc::PROT_READ) }, 0);
    let remote = Remote {
        va,
        rkey: mr.rkey().0,
    };
    // Only A calls (it polls): B's side runs on B's progress thread.
    send(&a, 1, SendOp::Write { remote }, 0, 64, false);
    assert_eq!(a.poll_one().status, WcStatus::RemAccessErr);
    assert_eq!(b.ctx.counters().get(verbs::Counter::MemFaults), 1);
    let lkey = mr.lkey();
    drop(mr);
    b.ctx.dereg_mr(lkey).unwrap();
    // SAFETY: the test's mapping, no longer registered.
    unsafe { libc::munmap(mem, page) };
}
