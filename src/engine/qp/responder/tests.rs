use crate::engine::Mtu;
use crate::engine::{
    Completion, Counter, Local, QpCap, Remote, SendFlags, SendOp, SendWr, WcStatus,
};
use crate::mem::{MemoryRegion, Sge};
use crate::sim::direct::{connect, rc_end_with, RcEndOpts, RcParams};
use crate::sim::rule::DropNth;
use crate::sim::Net;
use crate::wire::Psn;
use std::sync::Arc;

/// Two connected RC QPs (A = node 0, B = node 1), first PSNs 0x100 both ways.
fn pair() -> (Net, [(Arc<MemoryRegion>, u32, u32); 2]) {
    let mut net = Net::new(2);
    let end = |net: &mut Net, n: usize| {
        let o = RcEndOpts {
            cq_depth: 64,
            sq_sig_all: true,
            ..RcEndOpts::new(0x1000_0000 * (n as u64 + 1), 4096, QpCap::default())
        };
        let e = rc_end_with(&mut net.nodes[n].engine, &o).unwrap();
        (e.mr, e.cq, e.qpn)
    };
    let s = [end(&mut net, 0), end(&mut net, 1)];
    let p = RcParams {
        mtu: Mtu::M1024,
        timeout: 8,
        max_rd_atomic: 4,
        ..RcParams::default()
    };
    for (me, peer) in [(0, 1), (1, 0)] {
        let ip = net.nodes[peer].ip;
        let (q, psn) = (s[me].2, Psn::new(0x100));
        connect(&mut net.nodes[me].engine, q, ip, s[peer].2, psn, psn, &p).unwrap();
    }
    (net, s)
}

fn fetch_add(net: &mut Net, s: &[(Arc<MemoryRegion>, u32, u32); 2], wr_id: u64, dst: u64) {
    let (a, b) = (&s[0], &s[1]);
    let wr = SendWr {
        wr_id,
        op: SendOp::FetchAdd {
            remote: Remote {
                va: b.0.iova(),
                rkey: b.0.rkey().0,
            },
            add: 1,
        },
        local: Local::Sges(&[Sge {
            addr: a.0.iova() + dst,
            length: 8,
            lkey: a.0.lkey(),
        }]),
        flags: SendFlags {
            signaled: true,
            ..Default::default()
        },
    };
    let now = net.now;
    net.nodes[0].engine.post_send(now, a.2, &wr).unwrap();
}

fn word(mr: &MemoryRegion, off: u64) -> u64 {
    let mut b = [0u8; 8];
    mr.read(mr.iova() + off, &mut b).unwrap();
    u64::from_ne_bytes(b)
}

/// PSNs repeat every 2^24. A replay entry recorded exactly 2^24 PSNs before a new
/// atomic at the same PSN value is stale; a duplicate of the new atomic must be
/// answered with the new one's original value (IBA 9.7.5.1.2: an atomic's duplicate
/// returns *its* result), not the stale one's. The 2^24 - 1 PSNs of traffic between
/// the two atomics (SEND/WRITEs, which leave the ring alone) are skipped by moving
/// both sides' PSNs; everything else runs over the simulated wire. Before the fix the
/// ring was searched from slot 0 and the stale entry answered.
#[test]
fn a_duplicate_atomic_is_answered_by_its_own_entry_not_one_2_24_psns_older() {
    let (mut net, s) = pair();
    fetch_add(&mut net, &s, 1, 0);
    net.run_idle(10_000).unwrap();
    assert_eq!(word(&s[0].0, 0), 0);
    // 2^24 - 1 PSNs of other traffic.
    let skip = Psn::MASK;
    let qa = &mut net.nodes[0].engine.qps.get_mut(&s[0].2).unwrap().qp;
    let next = qa.req.psn.add(skip);
    qa.req.reset(next);
    qa.comp.psn = next;
    let qb = &mut net.nodes[1].engine.qps.get_mut(&s[1].2).unwrap().qp;
    qb.resp.epsn = qb.resp.epsn.add(skip);
    assert_eq!(
        qb.resp.epsn,
        Psn::new(0x100),
        "the same PSN as the first atomic"
    );
    // The second atomic's ACK is lost: A retries, B answers the duplicate from its
    // ring.
    net.add_rule(1, 0, DropNth::new(&[1]));
    fetch_add(&mut net, &s, 2, 8);
    net.run_idle(100_000).unwrap();
    let mut c = [Completion::default(); 4];
    let n = net.nodes[0].engine.poll_cq(s[0].1, &mut c).unwrap();
    let st: Vec<_> = c[..n].iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(st, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let b = &net.nodes[1].engine;
    assert_eq!(b.counters().get(Counter::DuplicateRequest), 1);
    assert_eq!(word(&s[1].0, 0), 2, "applied twice in all, once each");
    assert_eq!(
        word(&s[0].0, 8),
        1,
        "the second atomic's own original value"
    );
}
