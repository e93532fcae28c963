//! The NIC and the traffic: rc_pingpong's QP, buffer, receives and send loop.

use super::*;

// ---- the NIC and the traffic ------------------------------------------------------------

pub(super) struct Pingpong {
    pub(super) ctx: Context,
    pub(super) mr: Arc<MemoryRegion>,
    pub(super) cq: u32,
    pub(super) qpn: u32,
    pub(super) size: u32,
    pub(super) mtu: Mtu,
    pub(super) rx_depth: u32,
    pub(super) iters: u32,
    pub(super) bind: IpAddr,
    pub(super) peer: IpAddr,
    /// rc_pingpong's `pending`, `routs`, `scnt`, `rcnt`.
    pub(super) pending: u64,
    pub(super) routs: u32,
    pub(super) scnt: u32,
    pub(super) rcnt: u32,
    /// Why the last `post_recv` stopped short.
    pub(super) recv_error: Option<verbs::Error>,
    /// `--spin-us`.
    pub(super) spin: Duration,
}

impl Pingpong {
    /// rc_pingpong's `pp_init_ctx`: buffer of 0x7b, MR (local write only), CQ of rx_depth +
    /// 1, RC QP (1 send WR, rx_depth receive WRs, one SGE each), moved to INIT.
    pub(super) fn new(args: &Args, bind: IpAddr, mtu: Mtu) -> Result<Pingpong> {
        let dev = args.nic.device(bind, args.nic.pcap.clone());
        let ctx = dev.open().map_err(verbs("opening the NIC"))?;
        let pd = ctx.alloc_pd();
        let mr = ctx
            .reg_mr(pd, IOVA, u64::from(args.size.max(1)), Access::LOCAL_WRITE)
            .map_err(|source| PingpongError::Mem {
                size: args.size,
                source,
            })?;
        mr.fill(0x7b);
        let cq = ctx
            .create_cq(args.rx_depth as usize + 1, None)
            .map_err(verbs("creating the CQ (-r too large?)"))?;
        let qpn = ctx
            .create_qp(&QpInit::rc(
                pd,
                cq,
                QpCap {
                    max_send_wr: 1,
                    max_recv_wr: args.rx_depth as usize,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
            ))
            .map_err(verbs("creating the QP (-r too large?)"))?;
        ctx.modify_qp(qpn, &QpAttr::init(Access::empty()))
            .map_err(verbs("moving the QP to INIT"))?;
        Ok(Pingpong {
            ctx,
            mr,
            cq,
            qpn,
            size: args.size,
            mtu,
            rx_depth: args.rx_depth,
            iters: args.iters,
            bind,
            peer: bind,
            pending: 0,
            routs: 0,
            scnt: 0,
            rcnt: 0,
            recv_error: None,
            spin: args.nic.spin(),
        })
    }

    pub(super) fn sge(&self) -> Sge {
        Sge {
            addr: IOVA,
            length: self.size,
            lkey: self.mr.lkey(),
        }
    }

    /// rc_pingpong's `pp_connect_ctx`: RTR then RTS toward the peer.
    pub(super) fn connect(&mut self, my: &Dest, rem: &Dest, peer: IpAddr) -> Result<()> {
        self.peer = peer;
        tracing::debug!(
            qpn = self.qpn,
            %peer,
            dest_qpn = rem.qpn,
            mtu = self.mtu.bytes(),
            "moving the QP to RTR and RTS"
        );
        let rtr = QpAttr::rtr(
            peer,
            self.mtu,
            rem.qpn,
            Psn::new(rem.psn),
            1,
            DEFAULT_MIN_RNR_TIMER,
        );
        self.ctx
            .modify_qp(self.qpn, &rtr)
            .map_err(verbs("moving the QP to RTR"))?;
        self.ctx
            .modify_qp(
                self.qpn,
                &QpAttr::rts(
                    Psn::new(my.psn),
                    DEFAULT_TIMEOUT,
                    MAX_RETRY_CNT,
                    RNR_RETRY_INFINITE,
                    1,
                ),
            )
            .map_err(verbs("moving the QP to RTS"))
    }

    /// Posts up to `n` receives of the whole buffer; returns how many went (rc_pingpong's
    /// `pp_post_recv`), keeping the reason it stopped.
    pub(super) fn post_recv(&mut self, n: u32) -> u32 {
        let sge = [self.sge()];
        for i in 0..n {
            let wr = RecvWr {
                wr_id: RECV_WRID,
                sges: &sge,
            };
            if let Err(e) = self.ctx.post_recv(self.qpn, &wr) {
                self.recv_error = Some(e);
                return i;
            }
        }
        n
    }

    pub(super) fn post_send(&mut self) -> Result<()> {
        let sge = [self.sge()];
        self.ctx
            .post_send(
                self.qpn,
                &SendWr {
                    wr_id: SEND_WRID,
                    op: SendOp::Send,
                    local: Local::Sges(&sge),
                    flags: SendFlags {
                        signaled: true,
                        ..Default::default()
                    },
                },
            )
            .map_err(verbs("posting a send"))
    }
    /// rc_pingpong's `parse_single_wc`.
    pub(super) fn on_completion(&mut self, c: &Completion) -> Result<()> {
        if c.status != WcStatus::Success {
            return Err(self.failed(c));
        }
        match c.wr_id {
            SEND_WRID => self.scnt += 1,
            RECV_WRID => {
                self.routs -= 1;
                if self.routs <= 1 {
                    self.routs += self.post_recv(self.rx_depth - self.routs);
                    if self.routs < self.rx_depth {
                        return Err(PingpongError::PostRecv {
                            posted: self.routs,
                            wanted: self.rx_depth,
                            source: self.recv_error.take().expect("post_recv stopped short"),
                        });
                    }
                }
                self.rcnt += 1;
            }
            other => return Err(PingpongError::UnknownWrId(other)),
        }
        self.pending &= !c.wr_id;
        if self.scnt < self.iters && self.pending == 0 {
            self.post_send()?;
            self.pending = RECV_WRID | SEND_WRID;
        }
        Ok(())
    }

    /// A failed completion, with what probably caused it.
    pub(super) fn failed(&mut self, c: &Completion) -> PingpongError {
        // A flush follows the QP's own failure: the async event says which.
        let cause = std::iter::from_fn(|| self.ctx.poll_async_event())
            .find(|e| !matches!(e, Event::Engine(AsyncEvent::SqDrained { .. })));
        let (what, hint) = match (c.wr_id, c.status) {
            (wr, WcStatus::WrFlushErr) => (
                if wr == RECV_WRID { "receive" } else { "send" },
                match cause {
                    Some(Event::Engine(AsyncEvent::QpRequestError { .. })) => format!(
                        ": the QP failed on an invalid request from the peer: a packet larger \
                         than this side's -m {} or a message larger than its -s {}? (give both \
                         sides the same -s and -m)",
                        self.mtu.bytes(),
                        self.size
                    ),
                    Some(e) => format!(": the QP failed first ({e:?})"),
                    None => ": the QP had failed".to_string(),
                },
            ),
            (RECV_WRID, WcStatus::LocLenErr) => (
                "receive",
                format!(
                    ": the peer sent a message larger than this side's -s {}: give both \
                     sides the same -s",
                    self.size
                ),
            ),
            (RECV_WRID, _) => ("receive", String::new()),
            (_, WcStatus::RemInvReqErr) => (
                "send",
                format!(
                    ": the peer refused the {}-byte message: is its -s smaller, or its -m \
                     not {}? (give both sides the same -s and -m)",
                    self.size,
                    self.mtu.bytes()
                ),
            ),
            (_, WcStatus::RetryExcErr) => (
                "send",
                format!(
                    ": {} stopped acknowledging: is the peer still running, and can it reach \
                     {} on UDP port 4791?",
                    self.peer, self.bind
                ),
            ),
            (_, WcStatus::RnrRetryExcErr) => {
                ("send", ": the peer never had a receive posted".to_string())
            }
            _ => ("send", String::new()),
        };
        PingpongError::Completion {
            what,
            status: c.status,
            wr_id: c.wr_id,
            scnt: self.scnt,
            rcnt: self.rcnt,
            iters: self.iters,
            hint,
        }
    }

    /// Drives the NIC until `iters` sends and receives completed, polling while `Spin`
    /// says so and sleeping on the socket (or the next timer) otherwise.
    pub(super) fn run_loop(&mut self, timeout: Duration) -> Result<()> {
        let mut wc = [Completion::default(); 2];
        let mut progress = Instant::now();
        let mut spin = Spin::new(self.spin);
        while self.rcnt < self.iters || self.scnt < self.iters {
            // Polling sends what was posted and receives what waits; our next message and
            // the ACK of the peer's leave together with the next poll.
            let n = self
                .ctx
                .poll_cq(self.cq, &mut wc)
                .map_err(verbs("polling the CQ"))?;
            for c in &wc[..n] {
                self.on_completion(c)?;
            }
            if let Some(event) = self.ctx.poll_async_event() {
                if !matches!(event, Event::Engine(AsyncEvent::SqDrained { .. })) {
                    let state = self.ctx.qp_state(self.qpn).unwrap_or(QpState::Err);
                    return Err(PingpongError::Async { event, state });
                }
            }
            if n > 0 {
                progress = Instant::now();
                spin.active();
                continue;
            }
            if spin.keep_polling() {
                continue;
            }
            if progress.elapsed() > timeout {
                return Err(PingpongError::Stalled {
                    secs: timeout.as_secs_f64(),
                    scnt: self.scnt,
                    rcnt: self.rcnt,
                    iters: self.iters,
                    peer: self.peer,
                    local: self.bind,
                });
            }
            self.ctx
                .wait(Duration::from_millis(100))
                .map_err(verbs("waiting for the NIC"))?;
            spin.slept();
        }
        Ok(())
    }

    /// Keeps the NIC answering for a while after the last completion: a user-space NIC
    /// answers nothing once its process exits, and the peer may still need the ACK of its
    /// last message (if ours was lost it resends after its ACK timeout).
    pub(super) fn linger(&mut self) {
        self.ctx.linger(LINGER_QUIET, LINGER_MAX);
    }
}

/// See `Pingpong::linger`: rxe's ACK timeout for rc_pingpong's `timeout` 14 is ~67 ms.
pub(super) const LINGER_QUIET: Duration = Duration::from_millis(300);
pub(super) const LINGER_MAX: Duration = Duration::from_secs(2);
