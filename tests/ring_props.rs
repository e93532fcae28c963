//! The shared-memory rings in one process, through two mappings of one memfd as two
//! processes would have: random packets round-trip in order; a consumer that sleeps is
//! always woken (two threads, bounded waits); a hostile writer scribbling over the region
//! while packets flow causes counted errors, never a panic or a read out of bounds.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use roce_emu::ring::{
    bell_pair, create_region, Consumer, Meta, Popped, Producer, PushError, MAX_PACKET,
};
use roce_emu::rng::Rng;
use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn pair(cap: usize) -> (Producer, Consumer, File) {
    let fd = create_region(cap).unwrap();
    let (pb, cb) = bell_pair().unwrap();
    let p = Producer::attach(fd.as_fd(), pb).unwrap();
    let c = Consumer::attach(fd.as_fd(), cb).unwrap();
    (p, c, File::from(fd))
}

fn meta(i: u64) -> Meta {
    let src = SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 49152));
    let dst: SocketAddr = "[2001:db8::1]:4791".parse().unwrap();
    Meta {
        src,
        dst,
        ipv4_id: Some(i as u16),
        segment: None,
        flags: (i >> 16) as u16,
        ecn: 0,
    }
}

/// Packet `i` of length `len`: its index, then a pattern that depends on it.
fn fill(i: u64, buf: &mut [u8]) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = (i as usize).wrapping_mul(131).wrapping_add(k) as u8;
    }
    let n = buf.len().min(8);
    buf[..n].copy_from_slice(&i.to_le_bytes()[..n]);
}

fn check(i: u64, m: &Meta, bytes: &[u8], want_len: usize) {
    assert_eq!(bytes.len(), want_len, "packet {i}: length");
    assert_eq!(*m, meta(i), "packet {i}: metadata");
    let mut want = vec![0u8; want_len];
    fill(i, &mut want);
    assert!(bytes == &want[..], "packet {i}: contents");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/ring_props.txt",
        ))),
        ..ProptestConfig::default()
    })]

    /// Pushes until full (or the packets run out), pops a random number, repeats: every
    /// packet comes out once, in order, intact, across many wraparounds.
    #[test]
    fn random_sizes_round_trip(
        sizes in prop::collection::vec(prop_oneof![0usize..200, 200usize..9000, Just(MAX_PACKET)], 1..300),
        cap_log in 17u32..19,
        seed in any::<u64>(),
    ) {
        let (mut p, mut c, _f) = pair(1 << cap_log);
        let mut rng = Rng::new(seed);
        let mut buf = vec![0u8; MAX_PACKET];
        let mut packet = vec![0u8; MAX_PACKET];
        let (mut sent, mut got) = (0usize, 0usize);
        while got < sizes.len() {
            while sent < sizes.len() {
                fill(sent as u64, &mut packet[..sizes[sent]]);
                match p.try_push(&meta(sent as u64), &packet[..sizes[sent]]) {
                    Ok(()) => sent += 1,
                    Err(PushError::Full) => break,
                    Err(e) => panic!("push {sent}: {e}"),
                }
            }
            p.flush().unwrap();
            let take = 1 + rng.below(8);
            for _ in 0..take {
                let Some((m, len)) = c.pop(&mut buf).unwrap() else { break };
                check(got as u64, &m, &buf[..len], sizes[got]);
                got += 1;
            }
        }
        prop_assert_eq!(c.pop(&mut buf).unwrap(), None);
        prop_assert_eq!(c.stats().popped as usize, sizes.len());
    }
}

/// Two threads, small packets, a producer that pauses now and then so the consumer
/// sleeps often: a lost wakeup would leave the consumer asleep with packets waiting, and
/// its bounded wait would time out. None may.
#[test]
fn no_lost_wakeup_under_stress() {
    const N: u64 = 200_000;
    let (mut p, mut c, _f) = pair(1 << 16);
    let producer = std::thread::spawn(move || {
        let mut rng = Rng::new(7);
        let mut packet = [0u8; 64];
        let mut i = 0;
        while i < N {
            let batch = 1 + rng.below(16);
            for _ in 0..batch.min(N - i) {
                let len = 8 + rng.below(56) as usize;
                fill(i, &mut packet[..len]);
                // Bytes 8.. carry the length so the consumer can check it.
                packet[len - 1] = len as u8;
                match p.try_push(&meta(i), &packet[..len]) {
                    Ok(()) => i += 1,
                    Err(PushError::Full) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            p.flush().unwrap();
            match rng.below(64) {
                0 => std::thread::sleep(Duration::from_micros(rng.below(200))),
                1..=8 => std::thread::yield_now(),
                _ => {}
            }
        }
        p.stats()
    });
    let start = Instant::now();
    let mut pool = vec![0u8; 32 * 64];
    let mut out = [Popped {
        meta: meta(0),
        offset: 0,
        len: 0,
    }; 32];
    let mut next = 0u64;
    let mut timeouts = 0;
    while next < N {
        let n = c.pop_batch(&mut pool, 64, &mut out).unwrap();
        for o in &out[..n] {
            let bytes = &pool[o.offset..o.offset + o.len];
            assert_eq!(bytes[o.len - 1] as usize, o.len);
            let mut want = vec![0u8; o.len];
            fill(next, &mut want);
            want[o.len - 1] = o.len as u8;
            assert_eq!(bytes, &want[..], "packet {next}");
            assert_eq!(o.meta, meta(next));
            next += 1;
        }
        if n == 0 && !c.wait(Duration::from_secs(5)).unwrap() {
            timeouts += 1;
            assert!(
                timeouts < 2,
                "consumer slept 5 s with {next} of {N} received"
            );
        }
        assert!(start.elapsed() < Duration::from_secs(120), "too slow");
    }
    let ps = producer.join().unwrap();
    let cs = c.stats();
    eprintln!("stress: {cs:?} {ps:?} in {:?}", start.elapsed());
    assert_eq!(timeouts, 0);
    assert!(cs.sleeps > 10, "the consumer hardly slept: {cs:?}");
    assert!(
        ps.doorbells <= cs.sleeps + 1,
        "one doorbell per sleep at most"
    );
}

/// A writer scribbles random bytes at random places (header and data) while a producer
/// pushes and the consumer pops, over many short rounds. The consumer may see broken
/// rings, malformed entries and garbage bytes; it must never panic, and every packet it
/// returns lies within its buffer.
#[test]
fn hostile_scribbler_gives_only_counted_errors() {
    let mut rng = Rng::new(42);
    let (mut broken, mut popped, mut malformed, mut producer_broken) = (0, 0, 0, 0);
    for round in 0..60 {
        let cap = 1 << 16;
        let (mut p, mut c, f) = pair(cap);
        let stop = Arc::new(AtomicBool::new(false));
        let scribbler = {
            let stop = stop.clone();
            let mut rng = Rng::new(round);
            std::thread::spawn(move || {
                let mut junk = [0u8; 64];
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) && n < 2000 {
                    let len = 1 + rng.below(64) as usize;
                    for b in &mut junk[..len] {
                        *b = rng.next_u64() as u8;
                    }
                    // Mostly the data area, sometimes the header's index words.
                    let off = if rng.below(8) == 0 {
                        rng.below(512)
                    } else {
                        4096 + rng.below(cap as u64)
                    };
                    let _ = f.write_at(&junk[..len], off);
                    n += 1;
                    if n % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        };
        let mut buf = vec![0u8; 2048];
        let mut packet = [0u8; 1500];
        for i in 0..3000u64 {
            let len = rng.below(1500) as usize;
            fill(i, &mut packet[..len]);
            match p.push(&meta(i), &packet[..len]) {
                Ok(()) | Err(PushError::Full) => {}
                Err(PushError::Broken(_)) => producer_broken += 1,
                Err(e) => panic!("{e}"),
            }
            match c.pop(&mut buf) {
                Ok(Some((_, len))) => assert!(len <= buf.len()),
                Ok(None) => {}
                Err(_) => {
                    broken += 1;
                    break;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        scribbler.join().unwrap();
        popped += c.stats().popped;
        malformed += c.stats().malformed;
    }
    eprintln!(
        "hostile: {broken} of 60 rings broken at the consumer, {producer_broken} producer \
         errors, {popped} packets popped, {malformed} malformed entries dropped"
    );
    assert!(
        broken > 0,
        "the scribbler never broke a ring: the test tests nothing"
    );
}
