//! Arbitrary frames into `iface::Iface::receive`, interleaved with sends, time steps and
//! `poll_transmit`, on an interface whose identity the input chooses (so seeds taken from
//! captures configure it as the capture's receiver and reach past the address checks).
//!
//! Input: a 29-byte header, then records.
//!   header: flags (bit 0: VLAN on), VID (2 bytes, big-endian), MAC (6), IPv4 (4),
//!           IPv6 global address (16); prefixes /24 and /64.
//!   record: op (1 byte), length (2 bytes, little-endian), that many bytes.
//!     op % 4 == 0 or 3: the bytes are a received frame;
//!     op % 4 == 1: the bytes are a RoCE payload sent to a neighbour chosen by its first
//!                  byte (IPv4 or IPv6, on-link or not);
//!     op % 4 == 2: time advances by (first byte) quarter seconds; `handle_timeout`.
//! After each record, `poll_transmit` is drained.
//!
//! Properties: nothing panics; every `Rx::Roce` range lies inside its frame and holds at
//! least a BTH and an ICRC; every frame out fits the buffer it was written to and at most
//! `frame_capacity` bytes; `poll_timeout` never lies in the past after `handle_timeout`;
//! the held-datagram count never exceeds the configured bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_emu::iface::{Iface, IfaceConfig, Rx};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

const HEADER: usize = 29;

fuzz_target!(|data: &[u8]| {
    if data.len() < HEADER {
        return;
    }
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&data[3..9]);
    mac[0] &= 0xfe; // a unicast MAC
    let v4 = Ipv4Addr::new(data[9], data[10], data[11], data[12]);
    let mut g = [0u8; 16];
    g.copy_from_slice(&data[13..29]);
    let v6 = Ipv6Addr::from(g);
    let mut cfg = IfaceConfig::new(mac);
    cfg.ipv4 = Some((v4, 24));
    cfg.ipv6 = vec![(v6, 64)];
    if data[0] & 1 != 0 {
        cfg.vlan = Some(u16::from_be_bytes([data[1], data[2]]) & 0x0fff);
    }
    cfg.pending_max = 4;
    cfg.pending_total_max = 8;
    let mut iface = Iface::new(cfg);
    let cap = iface.frame_capacity();
    let mut out = vec![0u8; cap + 16];
    let mut now = Duration::ZERO;

    let mut rest = &data[HEADER..];
    while rest.len() >= 3 {
        let op = rest[0];
        let len = usize::from(u16::from_le_bytes([rest[1], rest[2]])).min(rest.len() - 3);
        let body = &rest[3..3 + len];
        rest = &rest[3 + len..];
        match op % 4 {
            1 => {
                let pick = body.first().copied().unwrap_or(0);
                let (src, dst) = if pick & 1 == 0 {
                    let d = Ipv4Addr::from(u32::from(v4) ^ u32::from(pick >> 1));
                    (IpAddr::V4(v4), IpAddr::V4(d))
                } else {
                    let d = Ipv6Addr::from(u128::from(v6) ^ u128::from(pick >> 1));
                    let src = if pick & 2 == 0 {
                        v6
                    } else {
                        iface.link_local()
                    };
                    (IpAddr::V6(src), IpAddr::V6(d))
                };
                let (src, dst) = (SocketAddr::new(src, 49152), SocketAddr::new(dst, 4791));
                let buf_len = if pick & 0x80 != 0 {
                    body.len().min(out.len())
                } else {
                    out.len()
                };
                if let Ok(Some(n)) = iface.send(
                    now,
                    src,
                    dst,
                    roce_emu::wire::Ecn::from_tos(pick),
                    body,
                    &mut out[..buf_len],
                ) {
                    assert!(n <= buf_len && n <= cap, "send wrote {n} of {buf_len}");
                }
            }
            2 => {
                let step = body.first().copied().unwrap_or(1);
                now += Duration::from_millis(250 * u64::from(step));
                iface.handle_timeout(now);
                if let Some(at) = iface.poll_timeout() {
                    assert!(at > now, "timer at {at:?} not after {now:?}");
                }
            }
            _ => {
                if let Rx::Roce { payload, .. } = iface.receive(now, body) {
                    assert!(payload.start < payload.end && payload.end <= body.len());
                    assert!(payload.len() >= 16, "{payload:?}");
                }
            }
        }
        while let Some(n) = iface.poll_transmit(now, &mut out) {
            assert!(n <= cap, "poll_transmit wrote {n} > {cap}");
        }
        assert!(iface.pending() <= 8);
    }
    let _ = iface.stats().rx_frames;
    let _ = iface.neighbors().count();
});
