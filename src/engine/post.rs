//! Work requests in: `post_send` (RC, UC, and UD with its destination) and `post_recv`,
//! each checked against the QP's type, state and limits before it is queued.

use super::*;

impl Engine {
    /// `ibv_post_send`. In ERR the WR is accepted and flushed at once (IBA 10.3.1).
    pub fn post_send(&mut self, now: Instant, qpn: u32, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        self.post_send_to(now, qpn, wr, None)
    }

    /// `ibv_post_send` on a UD QP: the WR's datagram goes to `dest` (`wr.ud`: the address
    /// handle, remote QPN and Q_Key). SEND and SEND with immediate only.
    pub fn post_send_ud(
        &mut self,
        now: Instant,
        qpn: u32,
        wr: &SendWr<'_>,
        dest: &UdDest,
    ) -> Result<(), VerbsError> {
        self.post_send_to(now, qpn, wr, Some(*dest))
    }

    fn post_send_to(
        &mut self,
        now: Instant,
        qpn: u32,
        wr: &SendWr<'_>,
        ud: Option<UdDest>,
    ) -> Result<(), VerbsError> {
        let slot = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let qp = &mut slot.qp;
        match (qp.qp_type == QpType::Ud, ud.is_some()) {
            (true, false) => return Err(VerbsError::UdNeedsDest { qpn }),
            (false, true) => return Err(VerbsError::NotUd { qpn }),
            (true, true) if !matches!(wr.op, SendOp::Send | SendOp::SendWithImm { .. }) => {
                return Err(VerbsError::OpNotOnQpType {
                    qpn,
                    qp_type: "UD",
                    op: wr.op.name(),
                });
            }
            _ => {}
        }
        if !matches!(qp.state, QpState::Rts | QpState::Sqd | QpState::Err) {
            return Err(VerbsError::InvalidState {
                qpn,
                state: qp.state,
                op: "post a send WR (RTS, SQD or ERR needed)",
            });
        }
        // An operation UC lacks (READ, atomics, SEND with invalidate) is refused here,
        // so the program learns at once; rxe accepts it and its requester then finds no
        // UC opcode for it (`next_opcode_uc` -> -EINVAL, status LOC_QP_OP_ERR).
        if qp.qp_type == QpType::Uc {
            if let Some(op) = qp::uc::refused_on_uc(&wr.op) {
                return Err(VerbsError::OpNotOnQpType {
                    qpn,
                    op,
                    qp_type: "UC",
                });
            }
        }
        // max_rd_atomic = 0 allows no READ/atomic outstanding, so one could never be
        // issued: rxe's `check_init_depth` would leave it at the head of the SQ forever,
        // blocking every WR behind it. Refused here instead (ibv_post_send's EINVAL for
        // a WR the QP cannot execute), so the application learns at once.
        if wr.op.is_read_or_atomic() && qp.attrs.max_rd_atomic == 0 && qp.state != QpState::Err {
            return Err(VerbsError::InvalidState {
                qpn,
                state: qp.state,
                op: "post a READ or atomic (max_rd_atomic is 0)",
            });
        }
        if qp.sq.len() >= qp.cap.max_send_wr {
            return Err(VerbsError::QueueFull {
                qpn,
                queue: Queue::Send,
                depth: qp.cap.max_send_wr,
            });
        }
        let (local, len) = match wr.local {
            Local::Sges(s) => {
                if s.len() > qp.cap.max_send_sge {
                    return Err(VerbsError::TooManySge {
                        n: s.len(),
                        max: qp.cap.max_send_sge,
                    });
                }
                let l = SgeList::new(s);
                let len = s.iter().map(|g| u64::from(g.length)).sum::<u64>();
                (LocalData::Sges(l), len)
            }
            Local::Inline(d) => {
                if d.len() > qp.cap.max_inline_data || wr.op.is_read_or_atomic() {
                    return Err(VerbsError::InlineTooLong {
                        len: d.len(),
                        max: if wr.op.is_read_or_atomic() {
                            0
                        } else {
                            qp.cap.max_inline_data
                        },
                    });
                }
                let mut buf = [0u8; config::MAX_INLINE];
                buf[..d.len()].copy_from_slice(d);
                (LocalData::Inline { buf, len: d.len() }, d.len() as u64)
            }
        };
        if len > MAX_MSG {
            return Err(VerbsError::MessageTooLong { len });
        }
        if let SendOp::CompareSwap { remote, .. } | SendOp::FetchAdd { remote, .. } = wr.op {
            if len != 8 {
                return Err(VerbsError::AtomicLength { len });
            }
            if remote.va % 8 != 0 {
                return Err(VerbsError::AtomicAlignment { va: remote.va });
            }
        }
        // Local keys are checked when the data moves (rxe does the same): a bad one
        // completes the WR with LOC_PROT_ERR, as ibverbs specifies.
        let mut flags = wr.flags;
        flags.signaled |= qp.sq_sig_all;
        let wqe = SendWqe {
            wr_id: wr.wr_id,
            op: wr.op,
            flags,
            local,
            len: len as u32,
            started: false,
            first_psn: Default::default(),
            last_psn: Default::default(),
            read_done: 0,
            error: None,
            ud,
        };
        qp.sq.push_back(wqe);
        if qp.state == QpState::Err {
            let mut ctx = ctx!(self, now, &mut slot.stats);
            qp.flush_now(&mut ctx);
            self.touch(qpn);
            self.after_call(now);
        } else {
            self.touch(qpn);
        }
        Ok(())
    }

    /// `ibv_post_recv`. Allowed from INIT on; in ERR the WR is flushed at once.
    pub fn post_recv(&mut self, now: Instant, qpn: u32, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let slot = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let qp = &mut slot.qp;
        if qp.state == QpState::Reset {
            return Err(VerbsError::InvalidState {
                qpn,
                state: qp.state,
                op: "post a receive WR (INIT or later needed)",
            });
        }
        if let Some(srq) = qp.srq {
            // rxe: a QP on an SRQ has no receive queue (the provider's `rq.queue` is NULL
            // and `rxe_post_recv` fails with EINVAL; the kernel's too).
            return Err(VerbsError::QpOnSrq { qpn, srq });
        }
        if qp.rq.len() >= qp.cap.max_recv_wr {
            return Err(VerbsError::QueueFull {
                qpn,
                queue: Queue::Recv,
                depth: qp.cap.max_recv_wr,
            });
        }
        if wr.sges.len() > qp.cap.max_recv_sge {
            return Err(VerbsError::TooManySge {
                n: wr.sges.len(),
                max: qp.cap.max_recv_sge,
            });
        }
        let sges = SgeList::new(wr.sges);
        let len = sges.total().ok_or(VerbsError::MessageTooLong {
            len: wr.sges.iter().map(|s| u64::from(s.length)).sum(),
        })?;
        qp.rq.push_back(RecvWqe {
            wr_id: wr.wr_id,
            sges,
            len,
        });
        if qp.state == QpState::Err {
            let mut ctx = ctx!(self, now, &mut slot.stats);
            qp.flush_now(&mut ctx);
            self.touch(qpn);
            self.after_call(now);
        }
        Ok(())
    }
}
