//! A link between two real processes: this test binary re-runs itself as the attached
//! process (`child`, selected by an environment variable), receives the link's
//! descriptors over a Unix socket (`SCM_RIGHTS`) and produces into the tx ring while the
//! parent, as the daemon, consumes. Mode `produce`: 100k packets, checked in order and
//! byte for byte. Mode `hostile`: packets and random bytes written over the shared region
//! from the other process; the parent must see only counted errors.

use roce_emu::ring::{Link, LinkFds, Meta, Popped, PushError};
use roce_emu::rng::Rng;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const N: u64 = 100_000;
const ENV_SOCK: &str = "ROCE_RING_TEST_SOCK";
const ENV_MODE: &str = "ROCE_RING_TEST_MODE";

fn meta(i: u64) -> Meta {
    Meta {
        src: SocketAddr::from(([192, 0, 2, 1], 49152 + (i % 1000) as u16)),
        dst: SocketAddr::from(([192, 0, 2, 2], 4791)),
        ipv4_id: Some(i as u16),
        segment: None,
        flags: (i >> 16) as u16,
        ecn: 0,
    }
}

fn len_of(i: u64) -> usize {
    8 + (i.wrapping_mul(7919) % 1500) as usize
}

fn fill(i: u64, buf: &mut [u8]) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = (i as usize).wrapping_mul(31).wrapping_add(k) as u8;
    }
    buf[..8].copy_from_slice(&i.to_le_bytes());
}

/// The attached process; a no-op when this binary runs as the test suite.
#[test]
fn child() {
    let (Ok(path), Ok(mode)) = (std::env::var(ENV_SOCK), std::env::var(ENV_MODE)) else {
        return;
    };
    let sock = UnixStream::connect(path).unwrap();
    let fds = LinkFds::recv(sock.as_fd()).unwrap();
    let scribble = std::fs::File::from(fds.tx_mem.try_clone().unwrap());
    let mut end = Link::attach(fds).unwrap();
    let mut packet = vec![0u8; 1600];
    let mut rng = Rng::new(99);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut i = 0;
    while i < N && Instant::now() < deadline {
        for _ in 0..32 {
            let len = len_of(i);
            fill(i, &mut packet[..len]);
            match end.tx.try_push(&meta(i), &packet[..len]) {
                Ok(()) => i += 1,
                Err(PushError::Full) => break,
                Err(_) if mode == "hostile" => return,
                Err(e) => panic!("{e}"),
            }
            if i == N {
                break;
            }
        }
        match end.tx.flush() {
            Ok(_) => {}
            Err(_) if mode == "hostile" => return,
            Err(e) => panic!("{e}"),
        }
        if mode == "hostile" {
            let mut junk = [0u8; 32];
            let n = 1 + rng.below(32) as usize;
            junk[..n].iter_mut().for_each(|b| *b = rng.next_u64() as u8);
            let off = if rng.below(16) == 0 {
                rng.below(512)
            } else {
                4096 + rng.below(end.tx.capacity() as u64)
            };
            let _ = scribble.write_at(&junk[..n], off);
        }
        std::thread::yield_now();
    }
    if mode == "hostile" {
        // Random scribbles break the ring only if one lands on an entry the parent has not
        // read yet, which depends on timing: end with one that must, a tail published far
        // past anything the ring can hold (the producer's index word, at offset 128).
        let _ = scribble.write_at(&(1u64 << 60).to_le_bytes(), 128);
        let _ = end.tx.flush();
    }
    // Stay until the parent has read everything (it closes the socket).
    let _ = std::io::Read::read(&mut &sock, &mut [0u8; 1]);
}

/// Starts the child in `mode` and returns it with the daemon's end of a fresh link.
fn spawn(mode: &str) -> (Child, roce_emu::ring::DaemonEnd, UnixStream) {
    let path = std::env::temp_dir().join(format!("roce-ring-{}-{mode}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(ENV_SOCK, &path)
        .env(ENV_MODE, mode)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let sock = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => panic!("the child never connected: {e}"),
        }
    };
    let _ = std::fs::remove_file(&path);
    sock.set_nonblocking(false).unwrap();
    let (end, fds) = Link::create(1 << 20).unwrap();
    fds.send(sock.as_fd()).unwrap();
    (child, end, sock)
}

#[test]
fn a_child_process_sends_100k_packets_in_order() {
    let (mut child, mut end, sock) = spawn("produce");
    let start = Instant::now();
    let mut pool = vec![0u8; 32 * 2048];
    let mut out = [Popped {
        meta: meta(0),
        offset: 0,
        len: 0,
    }; 32];
    let mut want = vec![0u8; 2048];
    let mut next = 0;
    while next < N {
        let n = end.tx.pop_batch(&mut pool, 2048, &mut out).unwrap();
        for o in &out[..n] {
            let len = len_of(next);
            assert_eq!(o.len, len, "packet {next}");
            fill(next, &mut want[..len]);
            assert!(
                pool[o.offset..o.offset + len] == want[..len],
                "packet {next}"
            );
            assert_eq!(o.meta, meta(next));
            next += 1;
        }
        if n == 0 {
            end.tx.wait(Duration::from_secs(1)).unwrap();
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "only {next} of {N} packets"
        );
    }
    let s = end.tx.stats();
    eprintln!("100k from a child in {:?}: {s:?}", start.elapsed());
    drop(sock);
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_hostile_child_process_gives_only_counted_errors() {
    let (mut child, mut end, sock) = spawn("hostile");
    let start = Instant::now();
    let mut pool = vec![0u8; 32 * 2048];
    let mut out = [Popped {
        meta: meta(0),
        offset: 0,
        len: 0,
    }; 32];
    let mut broken = None;
    while start.elapsed() < Duration::from_secs(20) {
        match end.tx.pop_batch(&mut pool, 2048, &mut out) {
            Ok(0) => {
                let _ = end.tx.wait(Duration::from_millis(100));
            }
            Ok(n) => assert!(out[..n].iter().all(|o| o.offset + o.len <= pool.len())),
            Err(c) => {
                broken = Some(c);
                break;
            }
        }
    }
    eprintln!(
        "hostile child: broken {broken:?} after {:?}, {:?}",
        start.elapsed(),
        end.tx.stats()
    );
    drop(sock);
    let _ = child.kill();
    let _ = child.wait();
    assert!(broken.is_some(), "the scribbles never broke the ring");
}
