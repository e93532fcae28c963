//! Arbitrary bytes as a stream of packets through the ladder builder, and what must hold
//! whatever they are: shared by the `ladder_build` fuzz target (fuzz/fuzz_targets/, which
//! includes this file) and the proptests of tests/ladder_build.rs.
//!
//! Each packet: its length (16 bits, little-endian), a selector byte (bits: source
//! address = sel % 3, destination = sel / 3 % 3 of 198.18.0.1, 198.18.0.2, 2001:db8::1;
//! 0x20 dropped; 0x10 ICRC checked, 0x08 and good; the top two bits the ECN), then its
//! RoCE bytes (BTH..ICRC).
//!
//! Properties: no panic; every row `push` returned is in `flows()`, and nothing else is;
//! every packet is either drawn once (its first field the BTH opcode) or counted
//! malformed; filtering never panics.

use roce_emu::ladder::build::Builder;
use roce_emu::ladder::model::{Fate, Filter, Observed, Row};
use std::net::{IpAddr, SocketAddr};

pub fn build_any(data: &[u8]) {
    let addrs: [IpAddr; 3] = [
        "198.18.0.1".parse().unwrap(),
        "198.18.0.2".parse().unwrap(),
        "2001:db8::1".parse().unwrap(),
    ];
    let mut b = Builder::new();
    let mut rest = data;
    let mut n = 0usize;
    let mut returned = 0usize;
    while rest.len() >= 3 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
        let sel = rest[2];
        let body = &rest[3..];
        let (pkt, r) = body.split_at(len.min(body.len()));
        rest = r;
        n += 1;
        let o = Observed {
            frame: n,
            t_ns: (n as i128) * 1000 - i128::from(sel & 3) * 700,
            src: SocketAddr::new(addrs[usize::from(sel) % 3], 4791),
            dst: SocketAddr::new(addrs[usize::from(sel / 3) % 3], 4791),
            ecn: sel >> 6,
            roce: pkt,
            fate: if sel & 0x20 != 0 {
                Fate::Dropped
            } else {
                Fate::Delivered
            },
            icrc_ok: (sel & 0x10 != 0).then_some(sel & 8 != 0),
        };
        returned += b.push(&o).len();
    }
    let rows: usize = b.flows().iter().map(|f| f.rows.len()).sum();
    assert_eq!(rows, returned);
    let l = b.finish();
    assert_eq!(l.stats.packets, n);
    let mut drawn = 0;
    for r in l.flows.iter().flat_map(|f| &f.rows) {
        if let Row::Packet(p) = r {
            drawn += 1;
            assert_eq!(p.fields[0].name, "infiniband.bth.opcode");
        }
    }
    assert_eq!(drawn + l.stats.malformed, n);
    let _ = l.filtered(&Filter {
        qp: Some(0x11),
        from_ns: Some(0),
        to_ns: Some(5000),
        psn: Some((0xff_fff0, 5)),
    });
}
