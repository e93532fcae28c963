//! Random traffic for the SRQ properties (tests/props_srq.rs, tests/props_srq_err.rs): 2
//! to 4 RC QP pairs, SENDs and WRITEs with immediate of 0 to 3 path MTUs on random QPs, a
//! random MTU, loss, duplication and reordering both ways, and how the SRQ is filled.
#![allow(dead_code)]

use proptest::prelude::*;
use roce_emu::engine::Mtu;
use roce_emu::sim::rule::Random;

pub const SLOT: u64 = 12 * 1024; // 3 x 4096
pub const RECV: u64 = 0; // B: one slot per WQE
pub const MAX_MSGS: usize = 40;

#[derive(Debug, Clone)]
pub struct Msg {
    pub qp: usize,
    pub len: u32,
    /// WRITE with immediate (into B's buffer past the receive slots) instead of SEND.
    pub write: bool,
}

#[derive(Debug, Clone)]
pub struct Case {
    pub qps: usize,
    pub mtu: Mtu,
    pub msgs: Vec<Msg>,
    /// WQEs posted before any message, then the size of each refill of an empty SRQ.
    pub first: usize,
    pub refill: usize,
    pub fwd: (f64, f64, f64),
    pub back: (f64, f64, f64),
    pub seed: u64,
}

pub fn case() -> impl Strategy<Value = Case> {
    let mtu = prop_oneof![Just(Mtu::M256), Just(Mtu::M1024), Just(Mtu::M4096)];
    let fault = (0.0..0.3f64, 0.0..0.1f64, 0.0..0.2f64);
    (2usize..=4, mtu, fault.clone(), fault, any::<u64>()).prop_flat_map(
        |(qps, mtu, fwd, back, seed)| {
            let m = mtu.bytes();
            let msg = (0..qps, 0..=3 * m, any::<bool>()).prop_map(|(qp, len, write)| Msg {
                qp,
                len,
                write,
            });
            (
                proptest::collection::vec(msg, 1..=MAX_MSGS),
                0usize..=MAX_MSGS,
                1usize..=8,
            )
                .prop_map(move |(msgs, first, refill)| Case {
                    qps,
                    mtu,
                    first: first.min(msgs.len()),
                    msgs,
                    refill,
                    fwd,
                    back,
                    seed,
                })
        },
    )
}

pub fn rule((drop, duplicate, reorder): (f64, f64, f64), seed: u64) -> Random {
    let mut r = Random::new(seed);
    r.drop = drop;
    r.duplicate = duplicate;
    r.reorder = reorder;
    r
}
