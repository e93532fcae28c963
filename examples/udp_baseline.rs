//! Raw UDP baselines for `tools/bench-net.sh`: what the kernel's UDP path alone delivers on
//! this machine, to hold `roce-emu perf` and `roce-emu pingpong` against.
//!
//! ```text
//! udp_baseline sink  BIND:PORT [gro]           receive (recvmmsg, 32 a call; with gro: UDP
//!                                              GRO, one recvmsg a train) until 1 s quiet
//! udp_baseline blast DST:PORT SIZE COUNT [gso] send COUNT datagrams (sendmmsg, 32 a call;
//!                                              with gso: one UDP GSO send per 64 KiB)
//! udp_baseline echo  BIND:PORT COUNT [K]       answer COUNT round trips (busy polling)
//! udp_baseline ping  DST:PORT SIZE COUNT [K]   COUNT round trips (busy polling), K each way
//! ```
//! K is 1 (one datagram each way, the default), 2 (RC's pattern: each side sends its
//! message and a 28-byte ACK of the other's in one `sendmmsg`, and receives two
//! datagrams) or `gso` (the same two datagrams as one UDP GSO send, received with GRO, as
//! roce-emu's UDP backend sends a message and the ACK behind it).
//! ```text
//! ```
//! `sink` and `ping` print one JSON object.

use nix::sys::socket::{
    recvmmsg, recvmsg, sendmmsg, sendmsg, setsockopt, sockopt, ControlMessage, ControlMessageOwned,
    MsgFlags, MultiHeaders, SockaddrStorage,
};
use std::io::{IoSlice, IoSliceMut};
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

/// An optional trailing word: present (true), absent (false), anything else an error.
fn flag(a: &[String], i: usize, word: &str) -> bool {
    match a.get(i).map(String::as_str) {
        None => false,
        Some(w) if w == word => true,
        Some(w) => die(&format!("expected {word} or nothing, not {w}")),
    }
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

fn sink(addr: SocketAddr, gro: bool) {
    let s = bind(addr);
    s.set_nonblocking(true).expect("nonblocking");
    if gro {
        setsockopt(&s, sockopt::UdpGroSegment, &true)
            .unwrap_or_else(|e| die(&format!("UDP_GRO: {e}")));
    }
    let mut cmsg = nix::cmsg_space!(i32);
    let mut pool = vec![0u8; SLOT * BATCH];
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    let (mut n, mut bytes) = (0u64, 0u64);
    let (mut first, mut last) = (None, Instant::now());
    let start = Instant::now();
    loop {
        // With GRO one receive holds a train: (datagrams, bytes).
        let got: Vec<(u64, u64)> = if gro {
            let mut iov = [IoSliceMut::new(&mut pool[..])];
            match recvmsg::<SockaddrStorage>(
                s.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(m) => {
                    let mut k = 1;
                    for c in m.cmsgs().into_iter().flatten() {
                        if let ControlMessageOwned::UdpGroSegments(g) = c {
                            k = m.bytes.div_ceil(g.max(1) as usize) as u64;
                        }
                    }
                    vec![(k, m.bytes as u64)]
                }
                Err(nix::errno::Errno::EAGAIN) => Vec::new(),
                Err(e) => die(&format!("recvmsg: {e}")),
            }
        } else {
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
                Ok(r) => r.map(|m| (1, m.bytes as u64)).collect::<Vec<_>>(),
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
        n += got.iter().map(|g| g.0).sum::<u64>();
        bytes += got.iter().map(|g| g.1).sum::<u64>();
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

fn blast(dst: SocketAddr, size: usize, count: u64, gso: bool) {
    let src: SocketAddr = if dst.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }
        .parse()
        .expect("addr");
    let s = bind(src);
    let payload = vec![0x5au8; size];
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    let addrs: Vec<Option<SockaddrStorage>> = (0..BATCH).map(|_| Some(dst.into())).collect();
    let mut sent = 0u64;
    // GSO: trains of as many datagrams as fit 64 KiB, one sendmsg each.
    let train = (65_000 / size.max(1)).clamp(1, 64);
    while gso && sent < count {
        let k = ((count - sent) as usize).min(train);
        let iovs: Vec<IoSlice<'_>> = (0..k).map(|_| IoSlice::new(&payload)).collect();
        let seg = size as u16;
        match sendmsg(
            s.as_raw_fd(),
            &iovs,
            &[ControlMessage::UdpGsoSegments(&seg)],
            MsgFlags::empty(),
            Some(&SockaddrStorage::from(dst)),
        ) {
            Ok(_) => sent += k as u64,
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
            Err(e) => die(&format!("sendmsg (GSO): {e}")),
        }
    }
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

/// Receives one datagram (busy polling): the length of the first datagram in it, its
/// source, and how many datagrams it holds (more than one when GRO coalesced them).
fn recv_spin(s: &UdpSocket, buf: &mut [u8], limit: Duration) -> (usize, SocketAddr, usize) {
    let start = Instant::now();
    let mut cmsg = nix::cmsg_space!(i32);
    loop {
        let mut iov = [IoSliceMut::new(buf)];
        match recvmsg::<SockaddrStorage>(
            s.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_DONTWAIT,
        ) {
            Ok(m) => {
                let (mut first, mut segs) = (m.bytes, 1);
                for c in m.cmsgs().into_iter().flatten() {
                    if let ControlMessageOwned::UdpGroSegments(g) = c {
                        first = (g.max(1) as usize).min(m.bytes);
                        segs = m.bytes.div_ceil(first);
                    }
                }
                let from = m
                    .address
                    .and_then(|a| {
                        a.as_sockaddr_in()
                            .map(|v| SocketAddr::from((v.ip(), v.port())))
                            .or_else(|| {
                                a.as_sockaddr_in6()
                                    .map(|v| SocketAddr::from((v.ip(), v.port())))
                            })
                    })
                    .unwrap_or_else(|| die("datagram without a source"));
                return (first, from, segs);
            }
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {
                if start.elapsed() > limit {
                    die("no datagram within the time limit");
                }
            }
            Err(e) => die(&format!("recv: {e}")),
        }
    }
}

fn echo(addr: SocketAddr, count: u64, mode: Mode) {
    let s = bind(addr);
    s.set_nonblocking(true).expect("nonblocking");
    if mode == Mode::Gso {
        setsockopt(&s, sockopt::UdpGroSegment, &true)
            .unwrap_or_else(|e| die(&format!("UDP_GRO: {e}")));
    }
    let mut buf = vec![0u8; SLOT];
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(2, None);
    for _ in 0..count {
        let mut got = 0;
        let mut last = (0, addr);
        while got < mode.datagrams() {
            let (n, from, segs) = recv_spin(&s, &mut buf, Duration::from_secs(30));
            got += segs;
            if got == 1 || mode == Mode::Gso {
                last = (n.min(buf.len()), from);
            }
        }
        // Answer with the message (for Gso: the first segment's bytes).
        let (n, from) = last;
        send_k(&s, &mut headers, &buf[..n.min(SLOT)], from, mode);
    }
}

/// Sends `data` and, unless `mode` is `One`, an ACK-sized 28 bytes after it: two
/// datagrams by `sendmmsg`, or one GSO send the kernel cuts in two.
fn send_k(
    s: &UdpSocket,
    headers: &mut MultiHeaders<SockaddrStorage>,
    data: &[u8],
    to: SocketAddr,
    mode: Mode,
) {
    let ack = &data[..data.len().min(28)];
    let iovs = [[IoSlice::new(data)], [IoSlice::new(ack)]];
    let addrs = [
        Some(SockaddrStorage::from(to)),
        Some(SockaddrStorage::from(to)),
    ];
    loop {
        let r = match mode {
            Mode::Gso => {
                let seg = data.len() as u16;
                sendmsg(
                    s.as_raw_fd(),
                    &[IoSlice::new(data), IoSlice::new(ack)],
                    &[ControlMessage::UdpGsoSegments(&seg)],
                    MsgFlags::empty(),
                    Some(&SockaddrStorage::from(to)),
                )
                .map(|_| ())
            }
            _ => sendmmsg(
                s.as_raw_fd(),
                headers,
                iovs[..mode.datagrams()].iter(),
                &addrs[..mode.datagrams()],
                [],
                MsgFlags::empty(),
            )
            .map(|_| ()),
        };
        match r {
            Ok(()) => return,
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
            Err(e) => die(&format!("send: {e}")),
        }
    }
}

fn ping(dst: SocketAddr, size: usize, count: u64, mode: Mode) {
    let src: SocketAddr = if dst.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }
        .parse()
        .expect("addr");
    let s = bind(src);
    s.set_nonblocking(true).expect("nonblocking");
    if mode == Mode::Gso {
        setsockopt(&s, sockopt::UdpGroSegment, &true)
            .unwrap_or_else(|e| die(&format!("UDP_GRO: {e}")));
    }
    let out = vec![0x5au8; size];
    let mut buf = vec![0u8; SLOT];
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(2, None);
    let start = Instant::now();
    for _ in 0..count {
        send_k(&s, &mut headers, &out, dst, mode);
        let mut got = 0;
        while got < mode.datagrams() {
            got += recv_spin(&s, &mut buf, Duration::from_secs(5)).2;
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6 / count as f64;
    println!(
        "{{\"iters\":{count},\"size\":{size},\"datagrams_each_way\":{},\"gso\":{},\"usec_per_iter\":{usec}}}",
        mode.datagrams(),
        mode == Mode::Gso
    );
}

/// How many datagrams go each way per round trip, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// One datagram.
    One,
    /// The message and an ACK-sized datagram, by `sendmmsg`.
    Two,
    /// The same two as one UDP GSO send, received with GRO (what roce-emu's UDP backend
    /// does with a message and the ACK that follows it).
    Gso,
}

fn mode(k: Option<&String>) -> Mode {
    match k.map(String::as_str) {
        None | Some("1") => Mode::One,
        Some("2") => Mode::Two,
        Some("gso") => Mode::Gso,
        Some(other) => die(&format!("K is 1, 2 or gso, not {other}")),
    }
}

impl Mode {
    fn datagrams(self) -> usize {
        if self == Mode::One {
            1
        } else {
            2
        }
    }
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    match a.first().map(String::as_str) {
        Some("sink") => sink(arg(&a, 1, "BIND:PORT"), flag(&a, 2, "gro")),
        Some("blast") => blast(
            arg(&a, 1, "DST:PORT"),
            arg(&a, 2, "SIZE"),
            arg(&a, 3, "COUNT"),
            flag(&a, 4, "gso"),
        ),
        Some("echo") => echo(arg(&a, 1, "BIND:PORT"), arg(&a, 2, "COUNT"), mode(a.get(3))),
        Some("ping") => ping(
            arg(&a, 1, "DST:PORT"),
            arg(&a, 2, "SIZE"),
            arg(&a, 3, "COUNT"),
            mode(a.get(4)),
        ),
        _ => die(
            "usage: sink BIND:PORT [gro] | blast DST:PORT SIZE COUNT [gso] | \
             echo BIND:PORT COUNT [K] | ping DST:PORT SIZE COUNT [K]",
        ),
    }
}
