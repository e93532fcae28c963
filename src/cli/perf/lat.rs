//! The latency tests (ib_write_lat, ib_send_lat): the sides take turns, one message at a
//! time.

use super::*;

/// `pattern` over `0..len`.
pub(super) fn pattern_bytes(seed: u8, len: u64) -> Vec<u8> {
    (0..len).map(|i| pattern(i, seed)).collect()
}

/// Bytes of a latency message that carry data: a WRITE's last byte carries the turn.
pub(super) fn lat_data_len(test: Test, size: u32) -> u64 {
    match test {
        Test::Write => u64::from(size.saturating_sub(1)),
        _ => u64::from(size),
    }
}

/// `--check` of one latency message: `len` bytes at `off` are the peer's pattern.
pub(super) fn check_lat(mr: &MemoryRegion, off: u64, len: u64, seed: u8, k: u64) -> Result<()> {
    let (at, end) = (off as usize, (off + len) as usize);
    mr.with_bytes_in(at..end, |got| {
        match got
            .iter()
            .enumerate()
            .find(|&(j, &x)| x != pattern(j as u64, seed))
        {
            None => Ok(()),
            Some((j, &x)) => Err(PerfError::Check(format!(
                "message {k}: byte {j} is {x:#04x}, expected {:#04x}",
                pattern(j as u64, seed)
            ))),
        }
    })
}

/// Where the peer's writes land in ib_write_lat's layout: perftest's `BUFF_SIZE`.
pub(super) fn lat_half(size: u32, cycle: u32) -> u64 {
    u64::from(size.max(cycle))
}

/// Latency figures in microseconds, of half the round trip, as perftest's
/// `print_report_lat` gives them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LatReport {
    pub size: u64,
    pub iters: u64,
    pub t_min: f64,
    pub t_max: f64,
    pub t_typical: f64,
    pub t_avg: f64,
    pub t_stdev: f64,
    pub p99: f64,
    pub p999: f64,
}

impl LatReport {
    /// From the times of each post: consecutive posts are one round trip apart.
    pub(super) fn from_posts(size: u32, posts: &[Instant]) -> LatReport {
        let mut d: Vec<f64> = posts
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1e6 / 2.0)
            .collect();
        if d.is_empty() {
            return LatReport {
                size: u64::from(size),
                iters: posts.len() as u64,
                ..Default::default()
            };
        }
        d.sort_by(f64::total_cmp);
        let n = d.len();
        let avg = d.iter().sum::<f64>() / n as f64;
        let var = d.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        let pct = |p: f64| d[((n as f64 * p).ceil() as usize).clamp(1, n) - 1];
        LatReport {
            size: u64::from(size),
            iters: posts.len() as u64,
            t_min: d[0],
            t_max: d[n - 1],
            t_typical: d[n / 2],
            t_avg: avg,
            t_stdev: var.sqrt(),
            p99: pct(0.99),
            p999: pct(0.999),
        }
    }
}

/// The two sides take turns (ib_send_lat: the client first; ib_write_lat: the server);
/// each side sends message k + 1 once the peer's message k is in (its last byte carries k for WRITE, a receive completes for
/// SEND) and its own previous message completed.
pub(super) fn lat_traffic(
    nic: &mut Nic,
    p: &Plan,
    rem: &Record,
    client: bool,
    half: u64,
    mut recv: Option<&mut RecvState>,
) -> Result<LatReport> {
    let mut wc = [Completion::default(); 16];
    let mut posts = Vec::with_capacity(p.iters as usize);
    let (mut scnt, mut rcnt, mut ccnt, mut arrived) = (0u64, 0u64, 0u64, 0u64);
    let poll_at = IOVA + half + u64::from(p.size.max(1)) - 1;
    let data_len = lat_data_len(p.test, p.size);
    let (mine, theirs) = if client {
        (CLIENT_SEED, SERVER_SEED)
    } else {
        (SERVER_SEED, CLIENT_SEED)
    };
    let mut progress = Instant::now();
    let mut spin = Spin::new(nic.spin);
    while scnt < p.iters || rcnt < p.iters || ccnt < p.iters {
        // Completions: our sends, and (SEND) the peer's messages.
        let n = nic.reap(p, &mut wc)?;
        for c in &wc[..n] {
            if c.opcode == verbs::WcOpcode::Recv {
                arrived += 1;
                if let Some(r) = recv.as_deref_mut() {
                    if p.check {
                        let slot = (c.wr_id % r.depth) * p.geo.stride;
                        check_lat(&nic.mr, slot, data_len, theirs, arrived)?;
                    }
                    if r.posted < p.iters {
                        r.post_one(nic, p.size, &p.geo)?;
                    }
                }
            } else {
                ccnt += 1;
            }
        }
        if n > 0 {
            progress = Instant::now();
        }
        if p.test == Test::Write && rcnt < p.iters {
            let mut b = [0u8];
            let _ = nic.mr.read(poll_at, &mut b);
            // The peer's message k carries k's low byte (perftest's `(char)++scnt`).
            if b[0] == ((rcnt + 1) & 0xff) as u8 {
                arrived = rcnt + 1;
                if p.check {
                    check_lat(&nic.mr, half, data_len, theirs, arrived)?;
                }
            }
        }
        // Take in the peer's message, then send ours when it is our turn: the side that
        // starts sends k + 1 after the peer's k, the other after the peer's k + 1; both
        // after their own previous message completed (perftest waits for it the same way).
        // ib_send_lat's client starts; ib_write_lat's server does.
        if arrived > rcnt {
            rcnt += 1;
        }
        let starts = (p.test == Test::Send) == client;
        let turn = if starts {
            rcnt == scnt
        } else {
            rcnt == scnt + 1
        };
        if scnt < p.iters && ccnt == scnt && turn {
            posts.push(Instant::now());
            let sge = [nic.sge(0, p.size)];
            let op = match p.test {
                Test::Write => {
                    // The last byte of what we write tells the peer which message it is.
                    let _ = nic
                        .mr
                        .write(IOVA + u64::from(p.size) - 1, &[((scnt + 1) & 0xff) as u8]);
                    SendOp::Write {
                        remote: Remote {
                            va: rem.vaddr,
                            rkey: rem.rkey,
                        },
                    }
                }
                _ => {
                    if p.check {
                        // A receive slot may share these bytes: put our pattern back. The
                        // peer's next message cannot land before this one has left.
                        let _ = nic.mr.write(IOVA, &pattern_bytes(mine, data_len));
                    }
                    SendOp::Send
                }
            };
            nic.ctx
                .post_send(
                    nic.qpn,
                    &SendWr {
                        wr_id: scnt,
                        op,
                        local: Local::Sges(&sge),
                        flags: SendFlags {
                            signaled: true,
                            ..Default::default()
                        },
                    },
                )
                .map_err(verbs("posting a work request"))?;
            scnt += 1;
            progress = Instant::now();
        }
        nic.step(&mut spin, n > 0, progress, p, rcnt.min(scnt))?;
    }
    Ok(LatReport::from_posts(p.size, &posts))
}
