//! Unit tests of one ring in one process: both ends map the same memfd separately, as two
//! processes would. Corruption is written through the file (`pwrite`), never through a
//! Rust reference to the mapping.

use super::*;
use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::time::Duration;

fn bell() -> OwnedFd {
    bell_pair().unwrap().1
}

/// A producer, a consumer, and the memfd as a file to scribble on.
fn pair(cap: usize) -> (Producer, Consumer, File) {
    let fd = create_region(cap).unwrap();
    let (pb, cb) = bell_pair().unwrap();
    let p = Producer::attach(fd.as_fd(), pb).unwrap();
    let c = Consumer::attach(fd.as_fd(), cb).unwrap();
    (p, c, File::from(fd))
}

fn meta(i: u16) -> Meta {
    let src: SocketAddr = "10.0.0.1:49152".parse().unwrap();
    let dst: SocketAddr = "[fe80::1]:4791".parse().unwrap();
    Meta {
        src,
        dst,
        ipv4_id: (i % 2 == 0).then_some(i),
        segment: (i % 3 == 0).then_some(1),
        flags: i,
        ecn: (i % 4) as u8,
    }
}

fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i * 31 + k) as u8).collect()
}

#[test]
fn round_trip_and_wraparound() {
    let (mut p, mut c, _f) = pair(MIN_CAPACITY);
    let mut buf = vec![0u8; MAX_PACKET];
    // 100-byte packets take 160 bytes: 4096 is not a multiple, so entries pad and wrap.
    for i in 0..1000usize {
        let data = payload(i, 100 + i % 7);
        p.push(&meta(i as u16), &data).unwrap();
        let (m, len) = c.pop(&mut buf).unwrap().unwrap();
        assert_eq!(m, meta(i as u16));
        assert_eq!(&buf[..len], &data[..]);
    }
    assert_eq!(c.pop(&mut buf).unwrap(), None);
    assert_eq!(c.stats().popped, 1000);
    assert_eq!(p.stats().doorbells, 0, "nobody slept, nobody was rung");
}

#[test]
fn full_ring_refuses_and_recovers() {
    let (mut p, mut c, _f) = pair(MIN_CAPACITY);
    let data = [7u8; 1000];
    let m = meta(1);
    let mut n = 0;
    loop {
        match p.try_push(&m, &data) {
            Ok(()) => n += 1,
            Err(PushError::Full) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(n, MIN_CAPACITY / record_len(1000));
    p.flush().unwrap();
    assert_eq!(p.try_push(&m, &data), Err(PushError::Full));
    assert_eq!(p.stats().full, 2);
    let mut buf = [0u8; 1000];
    assert_eq!(c.pop(&mut buf).unwrap().unwrap().1, 1000);
    p.push(&m, &data).unwrap();
    assert_eq!(
        p.try_push(&m, &[0u8; MAX_PACKET + 1]),
        Err(PushError::TooLarge)
    );
    assert_eq!(p.try_push(&m, &[0u8; 8192]), Err(PushError::TooLarge));
}

#[test]
fn batch_publishes_once_and_slots_bound_packets() {
    let (mut p, mut c, _f) = pair(1 << 16);
    let metas: Vec<Meta> = (0..10).map(meta).collect();
    let datas: Vec<Vec<u8>> = (0..10).map(|i| payload(i, 60 + 10 * i)).collect();
    let n = p
        .push_batch(metas.iter().zip(datas.iter().map(|d| &d[..])))
        .unwrap();
    assert_eq!(n, 10);
    let mut pool = vec![0u8; 8 * 128];
    let mut out = [Popped {
        meta: meta(0),
        offset: 0,
        len: 0,
    }; 8];
    // Slots of 128 bytes: packets 7..9 (130..150 bytes) are dropped as too long.
    let got = c.pop_batch(&mut pool, 128, &mut out).unwrap();
    assert_eq!(got, 7);
    for (i, o) in out[..got].iter().enumerate() {
        assert_eq!(o.meta, metas[i]);
        assert_eq!(&pool[o.offset..o.offset + o.len], &datas[i][..]);
    }
    assert_eq!(c.pop_batch(&mut pool, 128, &mut out).unwrap(), 0);
    assert_eq!(c.stats().too_long, 3);
}

/// The daemon's hairpin: packets taken from one ring and copied straight into another
/// (wrapping in both), their space handed back only at `commit`.
#[test]
fn take_and_push_from_copy_ring_to_ring() {
    let (mut p1, mut c1, _f1) = pair(MIN_CAPACITY);
    let (mut p2, mut c2, _f2) = pair(MIN_CAPACITY);
    let mut buf = vec![0u8; MAX_PACKET];
    for round in 0..200usize {
        let data = payload(round, 300 + round % 11);
        p1.push(&meta(round as u16), &data).unwrap();
        let e = c1.take().unwrap().unwrap();
        assert_eq!((e.meta(), e.len()), (&meta(round as u16), data.len()));
        let mut bth = [0u8; 12];
        assert!(c1.read(&e, 5, &mut bth));
        assert_eq!(&bth[..], &data[5..17]);
        assert!(
            !c1.read(&e, data.len() - 4, &mut bth),
            "past the packet's end"
        );
        let mut out = meta(round as u16);
        out.flags ^= 0x8000;
        p2.try_push_from(&out, &c1, &e).unwrap();
        p2.flush().unwrap();
        c1.commit().unwrap();
        let (m, len) = c2.pop(&mut buf).unwrap().unwrap();
        assert_eq!(m, out);
        assert_eq!(&buf[..len], &data[..]);
    }
    assert_eq!(c1.take().unwrap(), None);
    // Taken but not committed: the producer still sees the space as used.
    let big = payload(7, 3000);
    p1.push(&meta(1), &big).unwrap();
    let e = c1.take().unwrap().unwrap();
    assert_eq!(p1.push(&meta(2), &big), Err(PushError::Full));
    // An entry given with the wrong ring, lying outside it: refused, nothing breaks.
    let (mut p3, mut c3, _f3) = pair(1 << 16);
    for i in 0..4 {
        p3.push(&meta(i), &big).unwrap();
    }
    let mut far = None;
    while let Some(x) = c3.take().unwrap() {
        far = Some(x);
    }
    let far = far.unwrap();
    assert_eq!(
        p2.try_push_from(&meta(3), &c1, &far),
        Err(PushError::TooLarge)
    );
    p2.try_push_from(&meta(3), &c1, &e).unwrap();
    p2.flush().unwrap();
    let (_, len) = c2.pop(&mut buf).unwrap().unwrap();
    assert_eq!(&buf[..len], &big[..]);
    c1.commit().unwrap();
    p1.push(&meta(2), &big).unwrap();
    assert_eq!(c1.stats().popped, 201);
}

#[test]
fn a_sleeping_consumer_is_woken() {
    let (mut p, mut c, _f) = pair(MIN_CAPACITY);
    // Nothing there: the wait times out.
    assert!(!c.wait(Duration::from_millis(20)).unwrap());
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        p.push(&meta(0), b"hello").unwrap();
        p.stats().doorbells
    });
    assert!(c.wait(Duration::from_secs(10)).unwrap());
    assert_eq!(t.join().unwrap(), 1, "the producer rang once");
    let mut buf = [0u8; 16];
    assert_eq!(c.pop(&mut buf).unwrap().unwrap().1, 5);
}

fn put(f: &File, off: usize, word: u64) {
    f.write_all_at(&word.to_le_bytes(), off as u64).unwrap();
}

#[test]
fn corrupt_indices_and_entries_break_the_ring() {
    let mut buf = vec![0u8; MAX_PACKET];
    let cases: &[(&str, usize, u64, Corrupt)] = &[
        ("misaligned tail", OFF_TAIL, 3, Corrupt::Misaligned),
        (
            "tail past a capacity",
            OFF_TAIL,
            2 * MIN_CAPACITY as u64,
            Corrupt::OutOfRange,
        ),
        (
            "unknown kind",
            HEADER_LEN,
            8 | 0x1234 << 32,
            Corrupt::BadKind,
        ),
        (
            "pad too short",
            HEADER_LEN,
            8 | u64::from(KIND_PAD) << 32,
            Corrupt::BadPad,
        ),
        (
            "length past the tail",
            HEADER_LEN,
            60000 | u64::from(KIND_PACKET) << 32,
            Corrupt::BadLength,
        ),
        (
            "length past max",
            HEADER_LEN,
            0xffff_ffff | u64::from(KIND_PACKET) << 32,
            Corrupt::BadLength,
        ),
    ];
    for (what, off, word, want) in cases {
        let (mut p, mut c, f) = pair(MIN_CAPACITY);
        p.push(&meta(0), &[1u8; 64]).unwrap();
        put(&f, *off, *word);
        assert_eq!(c.pop(&mut buf), Err(*want), "{what}");
        assert_eq!(c.pop(&mut buf), Err(*want), "{what}: sticky");
    }
    // A tail that moves backwards.
    let (mut p, mut c, f) = pair(MIN_CAPACITY);
    p.push(&meta(0), &[1u8; 64]).unwrap();
    c.pop(&mut buf).unwrap().unwrap();
    put(&f, OFF_TAIL, 0);
    assert_eq!(c.pop(&mut buf), Err(Corrupt::Backwards));
}

#[test]
fn impossible_metadata_is_dropped_not_fatal() {
    let (mut p, mut c, f) = pair(MIN_CAPACITY);
    p.push(&meta(1), &[1u8; 64]).unwrap();
    p.push(&meta(1), &[2u8; 64]).unwrap();
    // Address bits no producer writes, in the first entry (byte 8 of its header).
    f.write_all_at(&[0x80], (HEADER_LEN + 8) as u64).unwrap();
    let mut buf = [0u8; 64];
    let (_, len) = c.pop(&mut buf).unwrap().unwrap();
    assert_eq!((len, buf[0]), (64, 2));
    assert_eq!(c.stats().malformed, 1);
}

#[test]
fn a_hostile_head_breaks_the_producer_not_the_process() {
    let (mut p, _c, f) = pair(MIN_CAPACITY);
    let data = [0u8; 1000];
    while p.try_push(&meta(0), &data).is_ok() {}
    p.flush().unwrap();
    // A head ahead of everything the producer published would let it overwrite entries
    // the consumer has not read (or, unchecked, compute a negative free space).
    put(&f, OFF_HEAD, 1 << 40);
    assert_eq!(
        p.try_push(&meta(0), &data),
        Err(PushError::Broken(Corrupt::OutOfRange))
    );
}

/// Found by the `ring_consume` fuzz target: a region whose indices start a few bytes
/// short of 2^64 (a consistent pair, so attach accepts it) made the producer's tail wrap
/// on its first push (an overflow panic in debug builds).
#[test]
fn indices_near_the_end_of_u64_break_the_ring_not_the_process() {
    let fd = create_region(MIN_CAPACITY).unwrap();
    let f = File::from(fd.try_clone().unwrap());
    let near = u64::MAX - 15;
    put(&f, OFF_TAIL, near);
    put(&f, OFF_HEAD, near);
    let mut p = Producer::attach(fd.as_fd(), bell()).unwrap();
    assert_eq!(
        p.try_push(&meta(0), &[0u8; 100]),
        Err(PushError::Broken(Corrupt::OutOfRange))
    );
}

#[test]
fn attach_checks_the_header() {
    let b = bell();
    let fd = create_region(MIN_CAPACITY).unwrap();
    let f = File::from(fd.try_clone().unwrap());
    put(&f, OFF_MAGIC, 0);
    assert!(matches!(
        Consumer::attach(fd.as_fd(), b.try_clone().unwrap()),
        Err(AttachError::BadMagic)
    ));
    let fd = create_region(MIN_CAPACITY).unwrap();
    put(&File::from(fd.try_clone().unwrap()), OFF_CAPACITY, 8192);
    assert!(matches!(
        Consumer::attach(fd.as_fd(), b.try_clone().unwrap()),
        Err(AttachError::BadSize(_))
    ));
    // Unsealed memory (any memfd a peer made up) is refused: it could shrink under us.
    let raw = nix::sys::memfd::memfd_create(c"x", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap();
    nix::unistd::ftruncate(&raw, (HEADER_LEN + MIN_CAPACITY) as i64).unwrap();
    assert!(matches!(
        Consumer::attach(raw.as_fd(), b),
        Err(AttachError::NotSealed)
    ));
    assert!(matches!(
        create_region(5000),
        Err(AttachError::BadCapacity(5000))
    ));
}

#[test]
fn link_fds_travel_over_a_unix_socket() {
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let (mut daemon, fds) = Link::create(1 << 16).unwrap();
    fds.send(a.as_fd()).unwrap();
    drop(fds);
    let mut proc_end = Link::attach(LinkFds::recv(b.as_fd()).unwrap()).unwrap();
    let m = meta(4);
    daemon.rx.push(&m, b"to the process").unwrap();
    proc_end.tx.push(&m, b"to the daemon").unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(proc_end.rx.pop(&mut buf).unwrap(), Some((m, 14)));
    assert_eq!(daemon.tx.pop(&mut buf).unwrap(), Some((m, 13)));
    // A message that is not a link's is refused.
    use std::io::Write;
    (&a).write_all(b"nope").unwrap();
    assert!(matches!(
        LinkFds::recv(b.as_fd()),
        Err(LinkError::Message(_))
    ));
}

/// The other side cannot make a doorbell block: each side has its own end (its own open
/// file), so clearing O_NONBLOCK on one end, or leaving rings unread until its socket is
/// full, changes nothing for the other. (With a shared eventfd, one `fcntl` made the
/// daemon's next drain block forever.)
#[test]
fn a_peer_cannot_make_a_doorbell_block() {
    let (mut daemon, fds) = Link::create(1 << 16).unwrap();
    // The process clears O_NONBLOCK on both of its ends.
    for fd in [&fds.rx_bell, &fds.tx_bell] {
        nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
        )
        .unwrap();
    }
    let proc_end = Link::attach(fds).unwrap();
    // The daemon drains an empty bell and rings a bell nobody reads, many times: none of
    // it waits (a blocking call would hang this test).
    let start = std::time::Instant::now();
    for _ in 0..100_000 {
        daemon.tx.disarm();
        super::link::ring(daemon.rx.bell_for_tests());
    }
    assert!(start.elapsed() < Duration::from_secs(10));
    // The process rings without end: the daemon's drain takes a bounded number each time.
    for _ in 0..1000 {
        super::link::ring(proc_end.tx.bell_for_tests());
    }
    // Its own drain on a bell it made blocking: still never waits (MSG_DONTWAIT).
    let mut rx = proc_end.rx;
    rx.disarm();
    let _ = rx.bell_for_tests();
    daemon.tx.disarm();
    drop(proc_end.tx);
    drop(rx);
    // Its ends gone, the daemon's consumer end reads EOF: a sleeper there wakes.
    assert!(daemon.tx.wait(Duration::from_secs(5)).is_ok());
}

/// `room(largest)` is a promise: that many packets of up to `largest` bytes are taken,
/// wherever the ring's indices stand (a pad at the wrap included), and it is not far
/// short of what fits (one record, the pad's worst case).
#[test]
fn room_is_what_surely_fits() {
    let (mut p, mut c, _f) = pair(64 << 10);
    let mut buf = vec![0u8; MAX_PACKET];
    let largest = 4352;
    let rec = record_len(largest);
    assert_eq!(p.room(largest), (64 << 10) / rec - 1);
    // Every start offset a 100-byte entry leaves: the packets of `room` then wrap.
    for start in 0..40usize {
        p.push(&meta(0), &payload(start, 100 + start % 7)).unwrap();
        while c.pop(&mut buf).unwrap().is_some() {}
        for len in [largest, 1000, 1] {
            let n = p.room(largest);
            for i in 0..n {
                p.try_push(&meta(i as u16), &payload(i, len))
                    .unwrap_or_else(|e| panic!("start {start}, len {len}: {i} of {n}: {e:?}"));
            }
            p.flush().unwrap();
            if len == largest {
                assert_eq!(p.room(largest), 0, "start {start}: full to within a record");
            }
            while c.pop(&mut buf).unwrap().is_some() {}
            assert_eq!(
                p.room(largest),
                (64 << 10) / rec - 1,
                "all taken, room again (start {start}, len {len})"
            );
        }
    }
}
