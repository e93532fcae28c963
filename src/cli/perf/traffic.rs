//! The bandwidth tests' traffic (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw):
//! the client's window of work requests, the SEND server's receives, the end checks.

use super::*;

// ---- the traffic ---------------------------------------------------------------------------

pub(super) struct Plan {
    pub(super) test: Test,
    pub(super) atomic: AtomicOp,
    pub(super) size: u32,
    pub(super) iters: u64,
    pub(super) tx_depth: u64,
    pub(super) cq_mod: u64,
    pub(super) check: bool,
    pub(super) timeout: Duration,
    pub(super) geo: Geometry,
}

/// Throughput from (messages done, time) marks: average over the whole run, peak over
/// the best stretch between two marks.
pub(super) struct Meter {
    pub(super) start: Instant,
    pub(super) marks: Vec<(u64, Instant)>,
}

impl Meter {
    pub(super) fn new(capacity: usize) -> Meter {
        Meter {
            start: Instant::now(),
            marks: Vec::with_capacity(capacity),
        }
    }

    pub(super) fn report(&self, size: u32, iters: u64) -> Report {
        const MB: f64 = 1_048_576.0;
        let rate = |n: u64, d: Duration| {
            let s = d.as_secs_f64().max(1e-9);
            (n as f64 * f64::from(size) / s / MB, n as f64 / s / 1e6)
        };
        let end = self.marks.last().map_or(self.start, |m| m.1);
        let (bw_avg, msg_rate) = rate(iters, end - self.start);
        let mut bw_peak = bw_avg;
        let mut prev = (0, self.start);
        for &(n, t) in &self.marks {
            if n > prev.0 && t > prev.1 {
                bw_peak = bw_peak.max(rate(n - prev.0, t - prev.1).0);
            }
            prev = (n, t);
        }
        Report {
            size: u64::from(size),
            iters,
            bw_peak,
            bw_avg,
            msg_rate,
        }
    }
}

pub(super) fn op_name(test: Test) -> &'static str {
    match test {
        Test::Write => "RDMA WRITE",
        Test::Read => "RDMA READ",
        Test::Send => "SEND",
        Test::Atomic => "atomic",
    }
}

pub(super) fn failure(
    test: Test,
    n: u64,
    iters: u64,
    status: WcStatus,
    size: u32,
    peer: IpAddr,
) -> PerfError {
    let hint = match status {
        WcStatus::RemAccessErr => format!(
            ": the peer refused the remote address or key: is its -s smaller than our {size}, \
             or is it running a different test?"
        ),
        WcStatus::RemInvReqErr => format!(
            ": the peer refused the {size}-byte message: is its -s smaller, or is it \
             running a different test?"
        ),
        WcStatus::RetryExcErr => format!(
            ": {peer} stopped acknowledging: is the peer still running, and can it reach us \
             on UDP port 4791?"
        ),
        WcStatus::RnrRetryExcErr => ": the peer never posted a receive".to_string(),
        _ => String::new(),
    };
    PerfError::Completion {
        op: op_name(test),
        n,
        iters,
        status,
        hint,
    }
}

/// The client's test: `iters` operations, `tx_depth` in flight, a completion every
/// `cq_mod` and for the last.
pub(super) fn client_traffic(nic: &mut Nic, p: &Plan, rem: &Record) -> Result<Report> {
    let mut wc = [Completion::default(); 16];
    let slots = if p.size <= p.geo.cycle / 2 {
        (u64::from(p.geo.cycle) / p.geo.stride) as usize
    } else {
        1
    };
    // How many operations each atomic slot has seen: CMP_AND_SWAP swaps k for k + 1.
    let mut visits = vec![0u64; slots];
    let mut meter = Meter::new((p.iters / p.cq_mod) as usize + 2);
    let (mut posted, mut done) = (0u64, 0u64);
    let mut progress = Instant::now();
    let mut spin = Spin::new(nic.spin);
    while done < p.iters {
        while posted < p.iters && posted - done < p.tx_depth {
            let off = offset(posted, p.size, &p.geo);
            let remote = Remote {
                va: rem.vaddr + off,
                rkey: rem.rkey,
            };
            let slot = (off / p.geo.stride) as usize;
            let op = match p.test {
                Test::Write => SendOp::Write { remote },
                Test::Read => SendOp::Read { remote },
                Test::Send => SendOp::Send,
                Test::Atomic => match p.atomic {
                    AtomicOp::FetchAndAdd => SendOp::FetchAdd { remote, add: 1 },
                    AtomicOp::CmpAndSwap => SendOp::CompareSwap {
                        remote,
                        compare: visits[slot],
                        swap: visits[slot] + 1,
                    },
                },
            };
            visits[slot] += 1;
            let sge = [nic.sge(off, p.size)];
            let signaled = (posted + 1) % p.cq_mod == 0 || posted + 1 == p.iters;
            if posted == 0 {
                meter.start = Instant::now();
            }
            nic.ctx
                .post_send(
                    nic.qpn,
                    &SendWr {
                        wr_id: posted,
                        op,
                        local: Local::Sges(&sge),
                        flags: SendFlags {
                            signaled,
                            ..Default::default()
                        },
                    },
                )
                .map_err(verbs("posting a work request"))?;
            posted += 1;
        }
        let n = nic.reap(p, &mut wc)?;
        if n > 0 {
            let now = Instant::now();
            for c in &wc[..n] {
                done = done.max(c.wr_id + 1);
            }
            meter.marks.push((done, now));
            progress = now;
            spin.active();
            continue;
        }
        nic.step(&mut spin, false, progress, p, done)?;
    }
    if p.check && p.test == Test::Read {
        // Each READ brought the server's bytes at the same offset into ours.
        for i in 0..p.iters.min(slots as u64) {
            let off = offset(i, p.size, &p.geo);
            check_range(&nic.mr, off, p.size, SERVER_SEED, "READ data")?;
        }
    }
    Ok(meter.report(p.size, p.iters))
}

pub(super) fn check_range(
    mr: &MemoryRegion,
    off: u64,
    len: u32,
    seed: u8,
    what: &str,
) -> Result<()> {
    mr.with_bytes_in(
        off as usize..off as usize + len as usize,
        |region| match region
            .iter()
            .enumerate()
            .find(|&(j, &x)| x != pattern(off + j as u64, seed))
        {
            None => Ok(()),
            Some((j, &x)) => Err(PerfError::Check(format!(
                "{what}: byte {} of the buffer is {x:#04x}, expected {:#04x}",
                off + j as u64,
                pattern(off + j as u64, seed)
            ))),
        },
    )
}

/// The server's end check for WRITE and atomics, from the client's report (size, iters).
pub(super) fn server_check(nic: &Nic, p: &Plan, theirs: &Report) -> Result<()> {
    if theirs.size != u64::from(p.size) || theirs.iters != p.iters {
        return Err(PerfError::Mismatch(format!(
            "the client ran {} x {} bytes, this side expected {} x {}: give both sides the same \
             -n and -s",
            theirs.iters, theirs.size, p.iters, p.size
        )));
    }
    let slots = if p.size <= p.geo.cycle / 2 {
        u64::from(p.geo.cycle) / p.geo.stride
    } else {
        1
    };
    match p.test {
        Test::Write => {
            for i in 0..p.iters.min(slots) {
                check_range(
                    &nic.mr,
                    offset(i, p.size, &p.geo),
                    p.size,
                    CLIENT_SEED,
                    "WRITE data",
                )?;
            }
        }
        Test::Atomic => {
            for s in 0..slots.min(p.iters) {
                let want = p.iters / slots + u64::from(s < p.iters % slots);
                let mut v = [0u8; 8];
                let _ = nic.mr.read(IOVA + s * p.geo.stride, &mut v);
                let got = u64::from_ne_bytes(v);
                if got != want {
                    return Err(PerfError::Check(format!(
                        "atomic slot {s} holds {got}, expected {want} operations"
                    )));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// The SEND server's receives: `rx_depth` posted at distinct offsets, re-posted as they
/// complete until `iters` messages are in.
pub(super) struct RecvState {
    pub(super) posted: u64,
    pub(super) depth: u64,
    pub(super) started: Option<Instant>,
    /// --recv-hold-us: how long a completed receive waits before it is posted again, and
    /// when each waiting one is due (in completion order, so the front is the earliest).
    pub(super) hold: Duration,
    pub(super) held: VecDeque<Instant>,
}

impl RecvState {
    pub(super) fn post(
        nic: &mut Nic,
        args: &Args,
        iters: u64,
        size: u32,
        geo: &Geometry,
    ) -> Result<RecvState> {
        let mut r = RecvState {
            posted: 0,
            depth: u64::from(args.rx_depth),
            started: None,
            hold: Duration::from_micros(args.recv_hold_us),
            held: VecDeque::new(),
        };
        for _ in 0..r.depth.min(iters) {
            r.post_one(nic, size, geo)?;
        }
        Ok(r)
    }

    pub(super) fn post_one(&mut self, nic: &mut Nic, size: u32, geo: &Geometry) -> Result<()> {
        let off = (self.posted % self.depth) * geo.stride;
        let sge = [nic.sge(off, size)];
        nic.ctx
            .post_recv(
                nic.qpn,
                &RecvWr {
                    wr_id: self.posted,
                    sges: &sge,
                },
            )
            .map_err(verbs("posting a receive"))?;
        self.posted += 1;
        Ok(())
    }

    /// A receive completed: post the next one now, or after the hold.
    pub(super) fn replace(&mut self, nic: &mut Nic, p: &Plan, now: Instant) -> Result<()> {
        if self.hold.is_zero() {
            self.repost(nic, p)
        } else {
            self.held.push_back(now + self.hold);
            Ok(())
        }
    }

    /// Posts the held receives that are due; true while some are still held. Reads the
    /// clock only when some are: this runs on every idle poll.
    pub(super) fn release(&mut self, nic: &mut Nic, p: &Plan) -> Result<bool> {
        if self.held.is_empty() {
            return Ok(false);
        }
        let now = Instant::now();
        while self.held.front().is_some_and(|&due| due <= now) {
            self.held.pop_front();
            self.repost(nic, p)?;
        }
        Ok(!self.held.is_empty())
    }

    /// Posts the next receive, if the test still needs one.
    pub(super) fn repost(&mut self, nic: &mut Nic, p: &Plan) -> Result<()> {
        if self.posted < p.iters {
            self.post_one(nic, p.size, &p.geo)?;
        }
        Ok(())
    }
}

pub(super) fn server_send_traffic(nic: &mut Nic, p: &Plan, r: &mut RecvState) -> Result<Report> {
    let mut wc = [Completion::default(); 16];
    let mut meter = Meter::new((p.iters / p.cq_mod) as usize + 2);
    let mut done = 0u64;
    let mut progress = Instant::now();
    let mut spin = Spin::new(nic.spin);
    while done < p.iters {
        let n = nic.reap(p, &mut wc)?;
        if n > 0 {
            let now = Instant::now();
            let start = *r.started.get_or_insert(now);
            if done == 0 {
                meter.start = start;
            }
            for c in &wc[..n] {
                if c.byte_len != p.size {
                    return Err(PerfError::Mismatch(format!(
                        "message {} has {} bytes, expected -s {}: give both sides the same -s",
                        c.wr_id + 1,
                        c.byte_len,
                        p.size
                    )));
                }
                if p.check {
                    // Message m came from the client's offset for m, into our slot for m.
                    let ours = (c.wr_id % r.depth) * p.geo.stride;
                    let theirs = offset(c.wr_id, p.size, &p.geo);
                    let slot = ours as usize..ours as usize + p.size as usize;
                    nic.mr.with_bytes_in(slot, |got| {
                        match got
                            .iter()
                            .enumerate()
                            .find(|&(j, &x)| x != pattern(theirs + j as u64, CLIENT_SEED))
                        {
                            None => Ok(()),
                            Some((j, &x)) => Err(PerfError::Check(format!(
                                "SEND {}: byte {j} is {x:#04x}, expected {:#04x}",
                                c.wr_id + 1,
                                pattern(theirs + j as u64, CLIENT_SEED)
                            ))),
                        }
                    })?;
                }
                done += 1;
                r.replace(nic, p, now)?;
            }
            if done % p.cq_mod == 0 || done == p.iters {
                meter.marks.push((done, now));
            }
            progress = now;
            spin.active();
            continue;
        }
        // Held receives: keep polling (no sleep on the socket) until they are posted.
        let holding = r.release(nic, p)?;
        nic.step(&mut spin, holding, progress, p, done)?;
    }
    Ok(meter.report(p.size, p.iters))
}
