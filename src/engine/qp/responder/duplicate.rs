//! Duplicate requests (IBA 9.7.5.1.2, rxe `duplicate_request`): moved out of
//! responder.rs unchanged.

use super::{Replay, Response};
use crate::engine::qp::{Ctx, Qp};
use crate::engine::stats::Counter;
use crate::wire::opcode::{Flags, OpcodeInfo};
use crate::wire::RoceRepr;

impl Qp {
    /// A request whose PSN was already seen (IBA 9.7.5.1.2): SEND and WRITE are ACKed
    /// again (nothing is redone); READ is answered again from the replay ring; an atomic
    /// returns its recorded result and is never executed twice.
    pub(super) fn on_duplicate(&mut self, ctx: &mut Ctx<'_>, r: &RoceRepr, info: &OpcodeInfo) {
        let psn = r.bth.psn;
        if info.is(Flags::SEND) || info.is(Flags::WRITE) {
            let (e, m) = (self.resp.epsn.sub(1), self.resp.msn);
            self.resp.push_ack(e, m, ctx.stats);
            return;
        }
        let msn = self.resp.msn;
        if info.is(Flags::READ) {
            let Some(reth) = r.reth else { return };
            let found = self.resp.newest_first().find_map(|(slot, e)| match e {
                Some(Replay::Read {
                    first,
                    last,
                    va,
                    rkey,
                    len,
                }) if psn.diff(*first) >= 0 && psn.diff(*last) <= 0 => {
                    Some((slot, *va, *rkey, *len))
                }
                _ => None,
            });
            let Some((slot, va, rkey, len)) = found else {
                ctx.stats.inc(Counter::DropReplayMissing);
                return;
            };
            // The retried READ may ask for the tail only; it must stay inside the original.
            let inside = reth.rkey == rkey
                && reth.va >= va
                && u64::from(reth.dma_len) <= u64::from(len) - (reth.va - va).min(u64::from(len));
            if !inside {
                ctx.stats.inc(Counter::DropReplayMissing);
                return;
            }
            self.resp
                .queue
                .retain(|q| !matches!(q, Response::Read { slot: s, .. } if *s == slot));
            self.resp.queue.push_back(Response::Read {
                slot,
                psn,
                va: reth.va,
                rkey,
                left: reth.dma_len,
                first: true,
                msn,
            });
            return;
        }
        let orig = self.resp.newest_first().find_map(|(_, e)| match e {
            Some(Replay::Atomic { psn: p, orig }) if *p == psn => Some(*orig),
            _ => None,
        });
        match orig {
            Some(orig) => self
                .resp
                .queue
                .push_back(Response::Atomic { psn, msn, orig }),
            None => ctx.stats.inc(Counter::DropReplayMissing),
        }
    }
}
