//! The NIC of a test: a verbs context with its one QP, CQ and buffer, and the loop step
//! that polls or sleeps.

use super::*;

// ---- the NIC -------------------------------------------------------------------------------

pub(super) struct Nic {
    pub(super) ctx: Context,
    /// `--spin-us`.
    pub(super) spin: Duration,
    pub(super) mr: Arc<MemoryRegion>,
    pub(super) cq: u32,
    pub(super) qpn: u32,
    pub(super) bind: IpAddr,
    pub(super) peer: IpAddr,
}

impl Nic {
    /// An asynchronous QP error ends the test.
    pub(super) fn check_events(&mut self) -> Result<()> {
        if let Some(event) = self.ctx.poll_async_event() {
            if !matches!(event, Event::Engine(AsyncEvent::SqDrained { .. })) {
                let state = self.ctx.qp_state(self.qpn).unwrap_or(QpState::Err);
                let hint = match event {
                    Event::Engine(
                        AsyncEvent::QpRequestError { .. } | AsyncEvent::QpAccessError { .. },
                    ) => {
                        ": the peer sent a request this side refused (a size beyond this \
                         side's -s, or a different test? give both sides the same test and -s)"
                    }
                    _ => "",
                };
                return Err(PerfError::Async { event, state, hint });
            }
        }
        Ok(())
    }

    /// Takes completions; a failed one ends the test with what probably caused it.
    pub(super) fn reap(&mut self, p: &Plan, wc: &mut [Completion]) -> Result<usize> {
        let n = self
            .ctx
            .poll_cq(self.cq, wc)
            .map_err(verbs("polling the CQ"))?;
        if let Some(c) = wc[..n].iter().find(|c| c.status != WcStatus::Success) {
            return Err(failure(
                p.test,
                c.wr_id + 1,
                p.iters,
                c.status,
                p.size,
                self.peer,
            ));
        }
        Ok(n)
    }

    /// Runs the NIC once; an asynchronous QP error ends the test.
    pub(super) fn service(&mut self) -> Result<bool> {
        self.check_events()?;
        self.ctx.progress().map_err(verbs("running the NIC"))
    }

    /// After a poll of the CQ (which ran the NIC): `active`, the caller got completions or
    /// still has work of its own. Otherwise polls on while `spin` allows and then sleeps
    /// until a datagram or the next timer; an error once nothing has progressed for the
    /// plan's timeout since `progress` (`done` of its messages complete). It does not run
    /// the NIC again: the poll just did, and a second run was a second receive system call
    /// on every idle turn.
    pub(super) fn step(
        &mut self,
        spin: &mut Spin,
        active: bool,
        progress: Instant,
        p: &Plan,
        done: u64,
    ) -> Result<()> {
        self.check_events()?;
        if active {
            spin.active();
            return Ok(());
        }
        if spin.keep_polling() {
            return Ok(());
        }
        if progress.elapsed() > p.timeout {
            return Err(PerfError::Stalled {
                secs: p.timeout.as_secs_f64(),
                done,
                iters: p.iters,
                hint: self.stall_hint(),
            });
        }
        self.ctx
            .wait(Duration::from_millis(100))
            .map_err(verbs("waiting for the NIC"))?;
        spin.slept();
        Ok(())
    }

    pub(super) fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: IOVA + off,
            length: len,
            lkey: self.mr.lkey(),
        }
    }

    /// Why traffic probably stopped, from what the NIC saw of the peer.
    pub(super) fn stall_hint(&self) -> String {
        let c = self.ctx.counters();
        let (peer, local) = (self.peer, self.bind);
        if c.get(verbs::Counter::RcvdRnrErr) > 0 {
            format!(
                ": {peer} answers with RNR NAKs, it has no receive posted: is it a send server \
                 (`roce-emu perf send` or ib_send_bw)? give both sides the same test"
            )
        } else if c.get(verbs::Counter::RcvdPkts) == 0 {
            format!(
                ": nothing at all came from {peer}: it cannot reach {local} on UDP port 4791, \
                 or it does not run this test (give both sides the same test)"
            )
        } else {
            format!(
                ": {peer} stopped sending: did it end (see its output), or does it run a \
                 different -n or test? (give both sides the same test, -n and -s)"
            )
        }
    }

    /// Keeps answering the peer for a moment after the test: a user-space NIC answers
    /// nothing once its process exits, and the peer's last ACK or retransmission may still
    /// be on its way.
    pub(super) fn linger(&mut self, quiet: Duration, max: Duration) {
        self.ctx.linger(quiet, max);
    }
}
