//! What the engine_rx_* targets share: the input's records, delivery of a datagram, the
//! patches that point a fuzzed packet at the QPs and keys the set-up made, memory
//! filled with a pattern and the checks that it kept it, and "at most once".
//!
//! Input format of every engine_rx_* target: records of `[len u16 LE][ctl u8][bytes]`;
//! `ctl` bit 0 chooses the receiving engine (0: the one under test, B), the other bits
//! are the target's patch selectors.
#![allow(dead_code)]

use roce_emu::engine::{Completion, Datagram, Engine, Instant};
use roce_emu::mem::{Access, MemoryRegion, MrTable, Pd};
use roce_emu::wire::opcode::{Headers, Opcode};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

pub const GUARD: u8 = 0xa5;
pub const PAGE: u64 = 4096;

pub fn ip(x: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 18, 0, x))
}

/// The byte a patterned buffer holds at `i`: position-dependent, so that a shifted copy
/// of the buffer onto itself is seen too.
pub fn pattern(i: usize) -> u8 {
    (i as u8).wrapping_mul(7) ^ ((i >> 8) as u8) ^ 0x5a
}

/// One record of the input.
pub struct Rec<'a> {
    pub to_b: bool,
    pub ctl: u8,
    pub pkt: &'a [u8],
}

/// Splits the input into records (a short tail is dropped).
pub fn records(mut rest: &[u8]) -> impl Iterator<Item = Rec<'_>> {
    std::iter::from_fn(move || {
        if rest.len() < 3 {
            return None;
        }
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 3);
        let ctl = rest[2];
        let pkt = &rest[3..3 + len];
        rest = &rest[3 + len..];
        Some(Rec {
            to_b: ctl & 1 == 0,
            ctl,
            pkt,
        })
    })
}

/// Hands `pkt` to `to` as if `from` sent it to port 4791.
pub fn deliver(to: &mut Engine, from: IpAddr, now: Instant, pkt: &[u8]) {
    let dst = SocketAddr::new(to.config().local_ip, 4791);
    to.handle_datagram(
        now,
        Datagram {
            src: SocketAddr::new(from, 49441),
            dst,
            ipv4_id: Some(0),
            ecn: roce_emu::wire::Ecn::NotEct,
            data: pkt,
        },
    );
}

/// The packet's extension header `h`, as a mutable slice, if its opcode has one and the
/// packet is long enough.
fn header(pkt: &mut [u8], h: Headers) -> Option<&mut [u8]> {
    let info = Opcode(*pkt.first()?).info()?;
    let r = info.range_of(h)?;
    pkt.get_mut(r)
}

/// Points the BTH at QP `qpn`.
pub fn set_dqpn(pkt: &mut [u8], qpn: u32) {
    if let Some(b) = pkt.get_mut(5..8) {
        b.copy_from_slice(&qpn.to_be_bytes()[1..]);
    }
}

/// Sets the BTH's PSN to `base` plus the packet's own low PSN byte taken as a signed
/// offset: PSNs around the one a connection started at, where the receiver's expected PSN
/// and its duplicate window lie (a random 24-bit PSN would almost never be in sequence).
pub fn set_psn_near(pkt: &mut [u8], base: u32) {
    if let Some(b) = pkt.get_mut(9..12) {
        let off = i32::from(b[2] as i8);
        let psn = base.wrapping_add(off as u32) & 0xff_ffff;
        b.copy_from_slice(&psn.to_be_bytes()[1..]);
    }
}

/// Sets the DETH's Q_Key (UD packets).
pub fn set_qkey(pkt: &mut [u8], qkey: u32) {
    if let Some(d) = header(pkt, Headers::DETH) {
        d[0..4].copy_from_slice(&qkey.to_be_bytes());
    }
}

/// Names `rkey` where the packet names a remote key: the RETH or AtomicETH (READ, WRITE,
/// atomics), or the IETH (SEND with Invalidate). With `va`, also the address (RETH and
/// AtomicETH): `va` plus the low 16 bits of the address the packet had, so that the
/// fuzzer explores offsets around the start of the key's range.
pub fn set_rkey(pkt: &mut [u8], rkey: u32, va: Option<u64>) {
    for h in [Headers::RETH, Headers::ATOMIC_ETH] {
        if let Some(e) = header(pkt, h) {
            e[8..12].copy_from_slice(&rkey.to_be_bytes());
            if let Some(base) = va {
                let off = u64::from(u16::from_be_bytes([e[6], e[7]]));
                e[0..8].copy_from_slice(&base.wrapping_add(off).to_be_bytes());
            }
        }
    }
    if let Some(e) = header(pkt, Headers::IETH) {
        e.copy_from_slice(&rkey.to_be_bytes());
    }
}

/// A region of `len` bytes at `iova` filled with `fill` (or the [`pattern`] if `None`).
pub fn region(
    mem: &MrTable,
    pd: Pd,
    iova: u64,
    len: u64,
    access: Access,
    fill: Option<u8>,
) -> Arc<MemoryRegion> {
    let mr = mem.reg_mr(pd, iova, len, access).unwrap();
    match fill {
        Some(b) => mr.fill(b),
        None => mr.with_bytes_mut(|b| b.iter_mut().enumerate().for_each(|(i, x)| *x = pattern(i))),
    }
    mr
}

/// Guard regions (local rights only: no key the fuzzed side may name opens them) just
/// below and above `[iova, iova + len)`.
pub fn guards(mem: &MrTable, pd: Pd, iova: u64, len: u64) -> [Arc<MemoryRegion>; 2] {
    [
        region(mem, pd, iova - PAGE, PAGE, Access::LOCAL_WRITE, Some(GUARD)),
        region(mem, pd, iova + len, PAGE, Access::LOCAL_WRITE, Some(GUARD)),
    ]
}

pub fn check_guards(g: &[Arc<MemoryRegion>]) {
    for mr in g {
        mr.with_bytes(|b| {
            if let Some(i) = b.iter().position(|x| *x != GUARD) {
                panic!("guard region at {:#x} changed at +{i}", mr.iova());
            }
        });
    }
}

/// Every byte of the patterned region `mr` outside `allowed` (iova ranges) still holds
/// the pattern.
pub fn check_pattern_outside(mr: &MemoryRegion, allowed: &[(u64, u64)], what: &str) {
    let base = mr.iova();
    mr.with_bytes(|b| {
        for (i, x) in b.iter().enumerate() {
            let va = base + i as u64;
            if *x != pattern(i) && !allowed.iter().any(|(s, l)| va >= *s && va < s + l) {
                panic!("{what}: byte at {va:#x} changed outside every permitted range");
            }
        }
    });
}

/// With ENGINE_RX_DEBUG set in the environment, prints what each engine counted: for
/// reading a crash or checking that a seed reaches what it means to (e.g. `ENGINE_RX_DEBUG=1
/// fuzz/target/x86_64-unknown-linux-gnu/release/engine_rx_mw FILE`).
pub fn debug_counters(a: &Engine, b: &Engine) {
    if std::env::var_os("ENGINE_RX_DEBUG").is_some() {
        eprintln!("A: {:?}", a.counters().nonzero().collect::<Vec<_>>());
        eprintln!("B: {:?}", b.counters().nonzero().collect::<Vec<_>>());
    }
}

/// Drains a CQ.
pub fn drain(e: &mut Engine, cq: u32, out: &mut Vec<Completion>) {
    let mut wc = [Completion::default(); 64];
    loop {
        let n = e.poll_cq(cq, &mut wc).unwrap();
        out.extend_from_slice(&wc[..n]);
        if n < wc.len() {
            return;
        }
    }
}

/// No WR ID completes twice (the IDs given at post are distinct).
pub fn at_most_once(cs: &[Completion], what: &str) {
    let mut seen = HashMap::new();
    for c in cs {
        let n = seen.entry(c.wr_id).or_insert(0u32);
        *n += 1;
        assert!(*n <= 1, "{what}: WR {} completed twice: {cs:?}", c.wr_id);
    }
}
