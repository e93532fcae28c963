//! A 4 KiB-MTU RDMA WRITE stream through two engines in memory (no sockets): the full
//! sender and receiver path per packet (gather from memory, headers, ICRC generate,
//! ICRC check, parse, R_Key check, copy into memory, ACK), against memcpy of the same
//! bytes in the same run. `tools/bench-engine.sh` prints the ratios.
//!
//! `engine_qp_scale`: the cost per packet of one pair streaming 64-byte SENDs while up to
//! 9,999 other connected pairs sit idle; it should not grow with their number.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use roce_emu::engine::*;
use roce_emu::mem::{MrTable, Sge};
use roce_emu::sim::direct::{connect, rc_end, Direct, RcParams};
use roce_emu::wire::Psn;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

/// Bytes per WRITE message and messages per iteration.
const MSG: u32 = 64 * 1024;
const BATCH: usize = 16;
const IOVA: u64 = 0x10_0000;

struct Setup {
    d: Direct,
    qpn: u32,
    cq: u32,
    sge: Sge,
    remote: Remote,
    t: u64,
    wcs: Vec<Completion>,
}

fn setup() -> Setup {
    let ip = |x| IpAddr::V4(Ipv4Addr::new(198, 18, 0, x));
    let mut a = Engine::new(EngineConfig::new(ip(1)), Arc::new(MrTable::new()));
    let mut b = Engine::new(EngineConfig::new(ip(2)), Arc::new(MrTable::new()));
    let cap = QpCap {
        max_send_wr: 256,
        max_recv_wr: 16,
        ..QpCap::default()
    };
    let len = u64::from(MSG) * 2;
    let ea = rc_end(&mut a, IOVA, len, cap).unwrap();
    let eb = rc_end(&mut b, IOVA, len, cap).unwrap();
    let p = RcParams::default();
    connect(&mut a, ea.qpn, ip(2), eb.qpn, Psn::new(1), Psn::new(2), &p).unwrap();
    connect(&mut b, eb.qpn, ip(1), ea.qpn, Psn::new(2), Psn::new(1), &p).unwrap();
    let fill: Vec<u8> = (0..MSG).map(|i| i as u8).collect();
    ea.mr.write(IOVA, &fill).unwrap();
    Setup {
        d: Direct::new(a, b),
        qpn: ea.qpn,
        cq: ea.cq,
        sge: Sge {
            addr: IOVA,
            length: MSG,
            lkey: ea.mr.lkey(),
        },
        remote: Remote {
            va: IOVA,
            rkey: eb.mr.rkey().0,
        },
        t: 0,
        wcs: vec![Completion::default(); BATCH],
    }
}

impl Setup {
    /// Posts BATCH WRITEs (the last signaled), moves every packet, reaps the completion.
    fn batch(&mut self) -> usize {
        let now = Instant::from_nanos(self.t);
        let sges = [self.sge];
        for i in 0..BATCH {
            self.d
                .a
                .post_send(
                    now,
                    self.qpn,
                    &SendWr {
                        wr_id: i as u64,
                        op: SendOp::Write {
                            remote: self.remote,
                        },
                        local: Local::Sges(&sges),
                        flags: SendFlags {
                            signaled: i == BATCH - 1,
                            ..Default::default()
                        },
                    },
                )
                .unwrap();
        }
        self.t += 1000;
        let n = self.d.pump(Instant::from_nanos(self.t));
        let done = self.d.a.poll_cq(self.cq, &mut self.wcs).unwrap();
        assert_eq!(done, 1);
        assert_eq!(self.wcs[0].status, WcStatus::Success);
        n
    }
}

fn bench(c: &mut Criterion) {
    let mut s = setup();
    let pkts = s.batch();
    let bytes = u64::from(MSG) * BATCH as u64;
    eprintln!("one iteration: {BATCH} WRITEs of {MSG} bytes = {pkts} packets (data + ACKs)");
    let mut g = c.benchmark_group("engine_write_4096");
    g.throughput(Throughput::Bytes(bytes));
    let src: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
    let mut dst = vec![0u8; bytes as usize];
    // Baseline: the sender's gather plus the receiver's scatter are two copies of every
    // byte; memcpy of the same bytes once is the floor.
    g.bench_function("memcpy_baseline", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(dst[dst.len() - 1])
        })
    });
    g.bench_function("two_engines_write_stream", |b| {
        b.iter(|| black_box(s.batch()))
    });
    g.finish();
}

/// SENDs per iteration of the scale bench, and their size.
const SCALE_BATCH: usize = 16;
const SCALE_MSG: u32 = 64;

/// Two engines with `n` connected QP pairs; the last pair created streams SENDs.
struct Scale {
    d: Direct,
    qa: u32,
    qb: u32,
    cqa: u32,
    cqb: u32,
    send: Sge,
    recv: Sge,
    t: u64,
    wcs: Vec<Completion>,
}

fn scale_setup(n: usize) -> Scale {
    let ip = |x| IpAddr::V4(Ipv4Addr::new(198, 18, 0, x));
    let mut a = Engine::new(EngineConfig::new(ip(1)), Arc::new(MrTable::new()));
    let mut b = Engine::new(EngineConfig::new(ip(2)), Arc::new(MrTable::new()));
    // The idle pairs are as small as a QP gets, so that 10,000 of them set up quickly.
    let idle = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        ..QpCap::default()
    };
    let busy = QpCap {
        max_send_wr: 2 * SCALE_BATCH,
        max_recv_wr: 2 * SCALE_BATCH,
        ..QpCap::default()
    };
    let p = RcParams::default();
    let mut last = None;
    for i in 0..n {
        let cap = if i + 1 == n { busy } else { idle };
        let ea = rc_end(&mut a, IOVA, 4096, cap).unwrap();
        let eb = rc_end(&mut b, IOVA, 4096, cap).unwrap();
        connect(&mut a, ea.qpn, ip(2), eb.qpn, Psn::new(1), Psn::new(2), &p).unwrap();
        connect(&mut b, eb.qpn, ip(1), ea.qpn, Psn::new(2), Psn::new(1), &p).unwrap();
        last = Some((ea, eb));
    }
    let (ea, eb) = last.expect("n >= 1");
    Scale {
        d: Direct::new(a, b),
        qa: ea.qpn,
        qb: eb.qpn,
        cqa: ea.cq,
        cqb: eb.cq,
        send: Sge {
            addr: IOVA,
            length: SCALE_MSG,
            lkey: ea.mr.lkey(),
        },
        recv: Sge {
            addr: IOVA,
            length: SCALE_MSG,
            lkey: eb.mr.lkey(),
        },
        t: 0,
        wcs: vec![Completion::default(); SCALE_BATCH],
    }
}

impl Scale {
    /// Reposts SCALE_BATCH receives, posts as many SENDs (the last signaled), moves every
    /// packet and reaps all completions: the steady state of a message stream.
    fn batch(&mut self) -> usize {
        let now = Instant::from_nanos(self.t);
        let recv = [self.recv];
        let send = [self.send];
        for i in 0..SCALE_BATCH {
            let wr = RecvWr {
                wr_id: i as u64,
                sges: &recv,
            };
            self.d.b.post_recv(now, self.qb, &wr).unwrap();
        }
        for i in 0..SCALE_BATCH {
            let wr = SendWr {
                wr_id: i as u64,
                op: SendOp::Send,
                local: Local::Sges(&send),
                flags: SendFlags {
                    signaled: i == SCALE_BATCH - 1,
                    ..Default::default()
                },
            };
            self.d.a.post_send(now, self.qa, &wr).unwrap();
        }
        self.t += 1000;
        let n = self.d.pump(Instant::from_nanos(self.t));
        let got = self.d.b.poll_cq(self.cqb, &mut self.wcs).unwrap();
        assert_eq!(got, SCALE_BATCH);
        let done = self.d.a.poll_cq(self.cqa, &mut self.wcs).unwrap();
        assert_eq!(done, 1);
        assert_eq!(self.wcs[0].status, WcStatus::Success);
        n
    }
}

fn bench_scale(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine_qp_scale");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for n in [1, 100, 1_000, 10_000] {
        let t0 = std::time::Instant::now();
        let mut s = scale_setup(n);
        let setup = t0.elapsed();
        let pkts = s.batch();
        // The packets per iteration must not depend on `n`, or the figures would not
        // compare; the report divides the time per iteration by this.
        eprintln!(
            "{n} QP pairs: set up in {setup:.2?}; one iteration = {SCALE_BATCH} SENDs of \
             {SCALE_MSG} bytes = {pkts} packets"
        );
        g.throughput(Throughput::Elements(pkts as u64));
        g.bench_function(format!("send64_{n}_qps"), |b| {
            b.iter(|| black_box(s.batch()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench, bench_scale);
criterion_main!(benches);
