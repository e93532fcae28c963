//! Raw UDP baselines for `tools/bench-net.sh`: what the kernel's UDP path alone delivers on
//! this machine, to hold `roce-emu perf` and `roce-emu pingpong` against.
//!
//! ```text
//! udp_baseline sink  BIND:PORT                 receive (recvmmsg, 32 a call) until 1 s quiet
//! udp_baseline blast DST:PORT SIZE COUNT       send COUNT datagrams (sendmmsg, 32 a call)
//! udp_baseline echo  BIND:PORT COUNT [K]       answer COUNT datagrams (busy polling); with
//!                                              K = 2, answer every 2nd with 2 (sendmmsg)
//! udp_baseline ping  DST:PORT SIZE COUNT [K]   COUNT round trips (busy polling) of K
//!                                              datagrams each way (default 1)
//! ```
//! K = 2 is RC's pattern: each side sends its message and the ACK of the other's, in one
//! `sendmmsg`, and receives two datagrams.
//! ```text
//! ```
//! `sink` and `ping` print one JSON object.

use nix::sys::socket::{recvmmsg, sendmmsg, MsgFlags, MultiHeaders, SockaddrStorage};
use std::io::{ErrorKind, IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const BATCH: usize = 32;
const SLOT: usize = 9216;

fn arg<T: std::str::FromStr>(a: &[String], i: usize, what: &str) -> T {
    a.get(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| die(&format!("missing or bad {what}")))
}

fn die(msg: &str) -> ! {
    eprintln!("udp_baseline: {msg}");
    std::process::exit(2)
}

fn bind(addr: SocketAddr) -> UdpSocket {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        None,
    )
    .unwrap_or_else(|e| die(&format!("socket: {e}")));
    let _ = s.set_recv_buffer_size(8 << 20);
    let _ = s.set_send_buffer_size(8 << 20);
    s.bind(&addr.into())
        .unwrap_or_else(|e| die(&format!("bind {addr}: {e}")));
    s.into()
}

fn sink(addr: SocketAddr) {
    let s = bind(addr);
    s.set_nonblocking(true).expect("nonblocking");
    let mut pool = vec![0u8; SLOT * BATCH];
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    let (mut n, mut bytes) = (0u64, 0u64);
    let (mut first, mut last) = (None, Instant::now());
    let start = Instant::now();
    loop {
        let got = {
            let mut iovs: Vec<[IoSliceMut<'_>; 1]> = pool
                .chunks_exact_mut(SLOT)
                .map(|c| [IoSliceMut::new(c)])
                .collect();
            match recvmmsg(
                s.as_raw_fd(),
                &mut headers,
                iovs.iter_mut(),
                MsgFlags::MSG_DONTWAIT,
                None,
            ) {
                Ok(r) => r.map(|m| m.bytes as u64).collect::<Vec<_>>(),
                Err(nix::errno::Errno::EAGAIN) => Vec::new(),
                Err(e) => die(&format!("recvmmsg: {e}")),
            }
        };
        if got.is_empty() {
            let quiet = if first.is_some() {
                last.elapsed()
            } else {
                start.elapsed()
            };
            if quiet > Duration::from_secs(if first.is_some() { 1 } else { 30 }) {
                break;
            }
            continue;
        }
        last = Instant::now();
        first.get_or_insert(last);
        n += got.len() as u64;
        bytes += got.iter().sum::<u64>();
    }
    let secs = first.map_or(0.0, |f| (last - f).as_secs_f64());
    println!(
        "{{\"datagrams\":{n},\"bytes\":{bytes},\"secs\":{secs},\"mb_per_sec\":{}}}",
        if secs > 0.0 {
            bytes as f64 / secs / 1_048_576.0
        } else {
            0.0
        }
    );
}

fn blast(dst: SocketAddr, size: usize, count: u64) {
    let src: SocketAddr = if dst.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }
        .parse()
        .expect("addr");
    let s = bind(src);
    let payload = vec![0x5au8; size];
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    let addrs: Vec<Option<SockaddrStorage>> = (0..BATCH).map(|_| Some(dst.into())).collect();
    let mut sent = 0u64;
    while sent < count {
        let k = ((count - sent) as usize).min(BATCH);
        let iovs: Vec<[IoSlice<'_>; 1]> = (0..k).map(|_| [IoSlice::new(&payload)]).collect();
        match sendmmsg(
            s.as_raw_fd(),
            &mut headers,
            iovs.iter(),
            &addrs[..k],
            [],
            MsgFlags::empty(),
        ) {
            Ok(r) => sent += r.count() as u64,
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
            Err(e) => die(&format!("sendmmsg: {e}")),
        }
    }
}

fn recv_spin(s: &UdpSocket, buf: &mut [u8], limit: Duration) -> (usize, SocketAddr) {
    let start = Instant::now();
    loop {
        match s.recv_from(buf) {
            Ok(r) => return r,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if start.elapsed() > limit {
                    die("no datagram within the time limit");
                }
            }
            Err(e) => die(&format!("recv: {e}")),
        }
    }
}

fn echo(addr: SocketAddr, count: u64, k: usize) {
    let s = bind(addr);
    s.set_nonblocking(true).expect("nonblocking");
    let mut buf = vec![0u8; SLOT];
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(2, None);
    for i in 0..count * k as u64 {
        let (n, from) = recv_spin(&s, &mut buf, Duration::from_secs(30));
        if (i + 1) % k as u64 == 0 {
            send_k(&s, &mut headers, &buf[..n], from, k);
        }
    }
}

/// Sends `k` copies of `data` (the message, and for k = 2 an ACK-sized 28 bytes) in one
/// `sendmmsg`.
fn send_k(
    s: &UdpSocket,
    headers: &mut MultiHeaders<SockaddrStorage>,
    data: &[u8],
    to: SocketAddr,
    k: usize,
) {
    let ack = &data[..data.len().min(28)];
    let iovs = [[IoSlice::new(ack)], [IoSlice::new(data)]];
    let addrs = [
        Some(SockaddrStorage::from(to)),
        Some(SockaddrStorage::from(to)),
    ];
    let first = 2 - k.clamp(1, 2);
    loop {
        match sendmmsg(
            s.as_raw_fd(),
            headers,
            iovs[first..].iter(),
            &addrs[first..],
            [],
            MsgFlags::empty(),
        ) {
            Ok(_) => return,
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
            Err(e) => die(&format!("sendmmsg: {e}")),
        }
    }
}

fn ping(dst: SocketAddr, size: usize, count: u64, k: usize) {
    let src: SocketAddr = if dst.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }
        .parse()
        .expect("addr");
    let s = bind(src);
    s.set_nonblocking(true).expect("nonblocking");
    let out = vec![0x5au8; size];
    let mut buf = vec![0u8; SLOT];
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(2, None);
    let start = Instant::now();
    for _ in 0..count {
        send_k(&s, &mut headers, &out, dst, k);
        for _ in 0..k {
            recv_spin(&s, &mut buf, Duration::from_secs(5));
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6 / count as f64;
    println!(
        "{{\"iters\":{count},\"size\":{size},\"datagrams_each_way\":{k},\"usec_per_iter\":{usec}}}"
    );
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    match a.first().map(String::as_str) {
        Some("sink") => sink(arg(&a, 1, "BIND:PORT")),
        Some("blast") => blast(
            arg(&a, 1, "DST:PORT"),
            arg(&a, 2, "SIZE"),
            arg(&a, 3, "COUNT"),
        ),
        Some("echo") => echo(
            arg(&a, 1, "BIND:PORT"),
            arg(&a, 2, "COUNT"),
            a.get(3).map_or(1, |_| arg(&a, 3, "K")),
        ),
        Some("ping") => ping(
            arg(&a, 1, "DST:PORT"),
            arg(&a, 2, "SIZE"),
            arg(&a, 3, "COUNT"),
            a.get(4).map_or(1, |_| arg(&a, 4, "K")),
        ),
        _ => die(
            "usage: sink BIND:PORT | blast DST:PORT SIZE COUNT | echo BIND:PORT COUNT [K] | \
             ping DST:PORT SIZE COUNT [K]",
        ),
    }
}
