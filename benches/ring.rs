//! Packets per second through a shared-memory ring (`roce_emu::ring`) between two threads,
//! for 64-byte and 4 KiB packets, against two baselines measured in the same run:
//!
//! - `mpsc`: `std::sync::mpsc::sync_channel` of `Vec<u8>` (std's channel is crossbeam's
//!   bounded array queue): the producer copies each packet into a new Vec, the consumer
//!   copies it out, as the ring copies in and out.
//! - `memcpy`: one thread copying each packet in and out of a buffer, no queue and no
//!   second core: the floor of the copies alone.
//!
//! The ring producer pushes batches of 32 and publishes once per batch (retrying while
//! full, as a test harness may; the daemon would drop); the consumer pops batches of 32
//! and sleeps on the doorbell when the ring is empty. Each case runs ROUNDS times and the
//! best round is reported (interference from other load only ever slows a round down).
//! Run: `cargo bench --bench ring` (RING_BENCH_SECS per case, default 0.5 s).

use roce_emu::ring::{bell_pair, create_region, Consumer, Meta, Popped, Producer, PushError};
use std::hint::black_box;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

const BATCH: usize = 32;
const ROUNDS: usize = 5;
/// The ring's data area (and the channel's depth in packets of the size, and the memcpy
/// area): RING_BENCH_CAP bytes, default 1 MiB.
fn capacity() -> usize {
    std::env::var("RING_BENCH_CAP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 20)
}

fn meta() -> Meta {
    Meta::new(([10, 0, 0, 1], 49152).into(), ([10, 0, 0, 2], 4791).into())
}

fn ring_pair() -> (Producer, Consumer) {
    let fd = create_region(capacity()).unwrap();
    let (pb, cb) = bell_pair().unwrap();
    (
        Producer::attach(fd.as_fd(), pb).unwrap(),
        Consumer::attach(fd.as_fd(), cb).unwrap(),
    )
}

/// Packets per second moving `n` packets of `size` bytes through a ring.
fn ring(size: usize, n: u64) -> f64 {
    let (mut p, mut c) = ring_pair();
    let start = Instant::now();
    let producer = std::thread::spawn(move || {
        let packet = vec![0xa5u8; size];
        let m = meta();
        let mut sent = 0;
        while sent < n {
            let mut full = false;
            for _ in 0..BATCH.min((n - sent) as usize) {
                match p.try_push(&m, &packet) {
                    Ok(()) => sent += 1,
                    Err(PushError::Full) => {
                        full = true;
                        break;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            p.flush().unwrap();
            if full {
                // Give the consumer the core (two cores may be all there is).
                std::thread::yield_now();
            }
        }
        p.stats()
    });
    let mut pool = vec![0u8; BATCH * size];
    let mut out = [Popped {
        meta: meta(),
        offset: 0,
        len: 0,
    }; BATCH];
    let mut got = 0;
    while got < n {
        let k = c.pop_batch(&mut pool, size, &mut out).unwrap();
        black_box(&pool);
        got += k as u64;
        if k == 0 {
            c.wait(Duration::from_millis(100)).unwrap();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    producer.join().unwrap();
    n as f64 / secs
}

/// The same through std's bounded channel of `Vec<u8>`.
fn mpsc(size: usize, n: u64) -> f64 {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(capacity() / (size + 64));
    let start = Instant::now();
    let producer = std::thread::spawn(move || {
        let packet = vec![0xa5u8; size];
        for _ in 0..n {
            tx.send(packet.clone()).unwrap();
        }
    });
    let mut buf = vec![0u8; size];
    for _ in 0..n {
        let v = rx.recv().unwrap();
        buf.copy_from_slice(&v);
        black_box(&buf);
    }
    let secs = start.elapsed().as_secs_f64();
    producer.join().unwrap();
    n as f64 / secs
}

/// One thread copying each packet into a 1 MiB area and out again.
fn memcpy(size: usize, n: u64) -> f64 {
    let packet = vec![0xa5u8; size];
    let cap = capacity();
    let mut area = vec![0u8; cap];
    let mut buf = vec![0u8; size];
    let slots = cap / size;
    let start = Instant::now();
    for i in 0..n as usize {
        let at = (i % slots) * size;
        area[at..at + size].copy_from_slice(black_box(&packet));
        buf.copy_from_slice(&area[at..at + size]);
        black_box(&buf);
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// The best of ROUNDS runs of about `secs` each (sized by a short probe of the case
/// itself), and the packet count of a run.
fn best(f: fn(usize, u64) -> f64, size: usize, secs: f64, quick: bool) -> (f64, u64) {
    let n = if quick {
        1000
    } else {
        ((f(size, 20_000) * secs) as u64).max(20_000)
    };
    let r = (0..ROUNDS).map(|_| f(size, n)).fold(0.0, f64::max);
    (r, n)
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing and wants a
    // quick run only.
    let quick = !std::env::args().any(|a| a == "--bench");
    let secs: f64 = std::env::var("RING_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.5);
    for size in [64usize, 4096] {
        let (r, n) = best(ring, size, secs, quick);
        let (q, _) = best(mpsc, size, secs, quick);
        let (m, _) = best(memcpy, size, secs, quick);
        println!(
            "ring {size:>4} B: {:>6.2} Mpkt/s ({:>5.2} GB/s)  mpsc<Vec<u8>> {:>6.2} Mpkt/s  \
             memcpy {:>6.2} Mpkt/s  ring/mpsc {:.2}  ring/memcpy {:.2}  (best of {ROUNDS} runs of {n} packets)",
            r / 1e6,
            r * size as f64 / 1e9,
            q / 1e6,
            m / 1e6,
            r / q,
            r / m,
        );
    }
}
