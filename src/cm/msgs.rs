//! The IB CM messages a connection sends (the kernel's `cm_format_*` and `ib_send_cm_*`):
//! MRA, REJ (and `cm_issue_rej` to a REQ that made no connection), DREQ, DREP, RTU, with
//! the state changes their sending makes.

use super::conn::padded;
use super::id::CmState;
use super::ucma::IdNum;
use super::{Cm, MadPeer};
use crate::engine::Instant;
use crate::wire::cm::{drep, dreq, mra, rej, rtu, CmMad, Message, RejReason};
use crate::wire::mad;

impl Cm {
    // ---- message formats (cm_format_*) ----

    pub(super) fn fmt_mra(&self, id: IdNum, mraed: u8) -> Option<CmMad> {
        let c = self.ids.get(&id)?.conn.as_ref()?;
        Some(CmMad::new(
            c.tid,
            0,
            Message::Mra(mra::Repr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                message_mraed: mraed,
                service_timeout: c.service_timeout,
                private_data: padded(&c.private_data),
            }),
        ))
    }

    /// `cm_format_rej`: which comm ID and message it names depends on the state.
    pub(super) fn fmt_rej(&self, id: IdNum, reason: u16, ari: &[u8], pd: &[u8]) -> Option<CmMad> {
        let c = self.ids.get(&id)?.conn.as_ref()?;
        let (local, rejected) = match c.state {
            CmState::ReqRcvd => (0, rej::REJECTED_REQ),
            CmState::MraReqSent => (c.local_id, rej::REJECTED_REQ),
            CmState::RepRcvd | CmState::MraRepSent => (c.local_id, rej::REJECTED_REP),
            _ => (c.local_id, rej::REJECTED_OTHER),
        };
        Some(CmMad::new(
            c.tid,
            0,
            Message::Rej(rej::Repr {
                local_comm_id: local,
                remote_comm_id: c.remote_id,
                message_rejected: rejected,
                reject_info_length: ari.len().min(rej::ARI_LEN) as u8,
                reason: RejReason::from_code(reason),
                ari: padded(ari),
                private_data: padded(pd),
            }),
        ))
    }

    /// `ib_send_cm_rej`: REJ in the states that allow it; then IDLE or TIMEWAIT.
    pub(super) fn send_rej(
        &mut self,
        now: Instant,
        id: IdNum,
        reason: u16,
        ari: &[u8],
        pd: &[u8],
    ) -> bool {
        let st = self.conn_state(id);
        use CmState::*;
        let to_timewait = match st {
            ReqSent | MraReqRcvd | ReqRcvd | MraReqSent | RepRcvd | MraRepSent => false,
            RepSent | MraRepRcvd => true,
            _ => return false,
        };
        if let Some(m) = self.fmt_rej(id, reason, ari, pd) {
            self.send_conn(id, &m);
        }
        self.cancel(id);
        if to_timewait {
            self.enter_timewait(now, id);
        } else {
            self.reset_to_idle(id);
        }
        true
    }

    /// `cm_issue_rej`: a REJ to a REQ that made no connection, echoing its IDs and TID.
    pub(super) fn issue_rej(
        &mut self,
        peer: MadPeer,
        tid: u64,
        raw: &[u8],
        reason: RejReason,
        rejected: u8,
    ) {
        let msg = &raw[mad::HEADER_LEN..];
        let u32_at = |o: usize| u32::from_be_bytes([msg[o], msg[o + 1], msg[o + 2], msg[o + 3]]);
        let m = CmMad::new(
            tid,
            0,
            Message::Rej(rej::Repr {
                local_comm_id: u32_at(4),
                remote_comm_id: u32_at(0),
                message_rejected: rejected,
                reject_info_length: 0,
                reason,
                ari: [0; rej::ARI_LEN],
                private_data: [0; rej::PRIVATE_DATA_LEN],
            }),
        );
        self.send(peer, &m);
    }

    /// `ib_send_cm_dreq`: only from ESTABLISHED. `retry` false sends it once (destroy).
    pub(super) fn send_dreq(&mut self, now: Instant, id: IdNum, retry: bool) -> bool {
        let Some(c) = self.ids.get(&id).and_then(|i| i.conn.as_ref()) else {
            return false;
        };
        if c.state != CmState::Established {
            return false;
        }
        let m = CmMad::new(
            Cm::form_tid(c.local_id),
            0,
            Message::Dreq(dreq::Repr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                remote_qpn: c.remote_qpn,
                private_data: [0; dreq::PRIVATE_DATA_LEN],
            }),
        );
        let timeout = c.timeout_ms;
        self.set_state(id, CmState::DreqSent);
        if retry {
            self.send_tracked(now, id, &m, timeout);
        } else {
            self.send_conn(id, &m);
        }
        true
    }

    /// `ib_send_cm_drep`: only from DREQ_RCVD; enters timewait.
    pub(super) fn send_drep(&mut self, now: Instant, id: IdNum) -> bool {
        if self.conn_state(id) != CmState::DreqRcvd {
            return false;
        }
        // The DREP's private data (none from rdma_disconnect) replaces the RTU's, for its
        // repetition in timewait (cm_set_private_data).
        if let Some(c) = self.ids.get_mut(&id).and_then(|i| i.conn.as_mut()) {
            c.private_data.clear();
        }
        self.enter_timewait(now, id);
        if let Some(m) = self.fmt_drep(id) {
            self.send_conn(id, &m);
        }
        true
    }

    pub(super) fn fmt_drep(&self, id: IdNum) -> Option<CmMad> {
        let c = self.ids.get(&id)?.conn.as_ref()?;
        Some(CmMad::new(
            c.tid,
            0,
            Message::Drep(drep::Repr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                private_data: padded(&c.private_data),
            }),
        ))
    }

    pub(super) fn fmt_rtu(&self, id: IdNum) -> Option<CmMad> {
        let c = self.ids.get(&id)?.conn.as_ref()?;
        Some(CmMad::new(
            c.tid,
            0,
            Message::Rtu(rtu::Repr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                private_data: padded(&c.private_data),
            }),
        ))
    }

    /// `ib_send_cm_rtu` (rdma_establish / ACCEPT on the active side).
    pub(super) fn send_rtu(&mut self, id: IdNum, pd: &[u8]) -> bool {
        if !matches!(self.conn_state(id), CmState::RepRcvd | CmState::MraRepSent) {
            return false;
        }
        if let Some(c) = self.ids.get_mut(&id).and_then(|i| i.conn.as_mut()) {
            c.private_data = pd.to_vec();
            c.state = CmState::Established;
        }
        if let Some(m) = self.fmt_rtu(id) {
            self.send_conn(id, &m);
        }
        true
    }
}
