//! The IB CM connection messages (IBA 12.6-12.9; the kernel's `cm.c` handlers of the same
//! names): REQ, MRA, REJ, REP, RTU, DREQ, DREP in, the answers and retransmissions out, and
//! the IB CM events rdma_cm turns into ucma events (`cma_ib_handler`).

use super::id::{CmState, Outstanding, RdmaState};
use super::stats::DropReason;
use super::timers::{self, after_ms, convert_to_ms};
use super::ucma::{self, ConnParam, EventKind, IdNum, PortSpace, QpType};
use super::{cma_takes, Cm, MadPeer};
use crate::engine::Instant;
use crate::wire::cm::{
    cma, drep, dreq, mra, rej, rep, req, rtu, service_id, CmMad, Message, RejReason,
};
use crate::wire::mad::{self, attr};
use std::net::{IpAddr, SocketAddr};

/// -ETIMEDOUT, the status of UNREACHABLE and of a DREQ that got no answer.
pub use super::errno::ETIMEDOUT;

/// The IB CM events rdma_cm acts on (`enum ib_cm_event_type`).
pub(super) enum IbEv {
    ReqError,
    RepError,
    RepReceived(ConnParam),
    /// RTU received, or the owner's NOTIFY(COMM_EST).
    Established,
    DreqError,
    DreqReceived,
    DrepReceived,
    TimewaitExit,
    RejReceived {
        reason: u16,
        private_data: Vec<u8>,
    },
}

/// A REP as the 256 bytes `cm_issue_rej` reads its comm IDs from.
fn raw_rep(r: &rep::Repr) -> Vec<u8> {
    let mut b = vec![0u8; mad::MAD_LEN];
    CmMad::new(0, 0, Message::Rep(*r)).emit(&mut b);
    b
}

/// `n` bytes of `data`, zero-padded (private data areas).
pub(super) fn padded<const N: usize>(data: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    let n = data.len().min(N);
    a[..n].copy_from_slice(&data[..n]);
    a
}

impl Cm {
    pub(super) fn recv_mad(&mut self, now: Instant, peer: MadPeer, bytes: &[u8]) {
        if bytes.len() < mad::MAD_LEN {
            self.stats.drop(DropReason::Malformed);
            return;
        }
        let Ok(h) = mad::Repr::parse(&mad::Packet::new_unchecked(&bytes[..mad::HEADER_LEN])) else {
            self.stats.drop(DropReason::Malformed);
            return;
        };
        if h.base_version != mad::BASE_VERSION
            || h.mgmt_class != mad::CLASS_CM
            || h.class_version != mad::CM_CLASS_VERSION
            || h.method != mad::METHOD_SEND
        {
            self.stats.drop(DropReason::NotCm);
            return;
        }
        if !(attr::REQ..=attr::SIDR_REP).contains(&h.attr_id) {
            // LAP/APR: "not supported for RoCE link layer" (cm_lap_handler).
            self.stats.drop(DropReason::Unsupported);
            return;
        }
        let Ok(m) = CmMad::parse(bytes) else {
            self.stats.drop(DropReason::Malformed);
            return;
        };
        self.stats.mads_in.bump(h.attr_id);
        let tid = h.tid;
        match m.msg {
            Message::Req(r) => self.req_handler(now, peer, tid, &r, bytes),
            Message::Mra(r) => self.mra_handler(now, &r),
            Message::Rej(r) => self.rej_handler(now, &r),
            Message::Rep(r) => self.rep_handler(now, peer, &r),
            Message::Rtu(r) => self.rtu_handler(&r),
            Message::Dreq(r) => self.dreq_handler(now, peer, tid, &r),
            Message::Drep(r) => self.drep_handler(now, &r),
            Message::SidrReq(r) => self.sidr_req_handler(peer, tid, &r),
            Message::SidrRep(r) => self.sidr_rep_handler(&r),
            // Filtered out above by attribute; counted the same if they ever get here.
            Message::Lap(_) | Message::Apr(_) | Message::ClassPortInfo(_) => {
                self.stats.drop(DropReason::Unsupported)
            }
        }
    }

    /// `cm_acquire_id(local, remote)`: the id whose connection has local ID `local` and
    /// knows the peer's as `remote` (0 before the REP).
    pub(super) fn acquire(&self, local: u32, remote: u32) -> Option<IdNum> {
        let id = *self.by_comm.get(&local)?;
        let c = self.ids.get(&id)?.conn.as_ref()?;
        (c.remote_id == remote).then_some(id)
    }

    pub(super) fn conn_state(&self, id: IdNum) -> CmState {
        self.ids.get(&id).map_or(CmState::Idle, |i| i.cm_state())
    }

    pub(super) fn set_state(&mut self, id: IdNum, s: CmState) {
        if let Some(c) = self.ids.get_mut(&id).and_then(|i| i.conn.as_mut()) {
            c.state = s;
        }
    }

    /// `ib_cancel_mad` of the id's outstanding message.
    pub(super) fn cancel(&mut self, id: IdNum) {
        if let Some(c) = self.ids.get_mut(&id).and_then(|i| i.conn.as_mut()) {
            c.msg = None;
        }
    }

    /// `cm_reset_to_idle`.
    pub(super) fn reset_to_idle(&mut self, id: IdNum) {
        self.unlist_remote(id);
        self.set_state(id, CmState::Idle);
    }

    /// `cm_enter_timewait`: 2^(av.timeout - 8) ms, then IDLE and TIMEWAIT_EXIT.
    pub(super) fn enter_timewait(&mut self, now: Instant, id: IdNum) {
        self.unlist_remote(id);
        if let Some(c) = self.ids.get_mut(&id).and_then(|i| i.conn.as_mut()) {
            c.state = CmState::Timewait;
            c.timewait_until = Some(after_ms(now, convert_to_ms(c.av_timeout)));
        }
    }

    /// Sends `m` for `id` and keeps it for retransmission (`ib_post_send_mad` with a timeout).
    pub(super) fn send_tracked(&mut self, now: Instant, id: IdNum, m: &CmMad, timeout_ms: u64) {
        let Some(c) = self.ids.get(&id).and_then(|i| i.conn.as_ref()) else {
            return;
        };
        let (peer, retries, state) = (c.peer, c.max_cm_retries, c.state);
        let bytes = self.send(peer, m);
        if let Some(c) = self.ids.get_mut(&id).and_then(|i| i.conn.as_mut()) {
            c.msg = Some(Outstanding {
                bytes,
                attr_id: m.header.attr_id,
                state,
                timeout_ms,
                retries_left: retries,
                deadline: after_ms(now, timeout_ms),
            });
        }
    }

    /// A message of `id`'s connection to its peer, not retransmitted.
    pub(super) fn send_conn(&mut self, id: IdNum, m: &CmMad) {
        if let Some(peer) = self
            .ids
            .get(&id)
            .and_then(|i| i.conn.as_ref())
            .map(|c| c.peer)
        {
            self.send(peer, m);
        }
    }

    // ---- handlers ----

    fn req_handler(&mut self, now: Instant, peer: MadPeer, tid: u64, r: &req::Repr, raw: &[u8]) {
        // A duplicate REQ (cm_match_req -> cm_dup_req_handler).
        if let Some(&dup) = self.remote_ids.get(&(r.local_comm_id, r.local_ca_guid)) {
            match self.conn_state(dup) {
                CmState::MraReqSent => {
                    if let Some(m) = self.fmt_mra(dup, mra::MRAED_REQ) {
                        self.send(peer, &m);
                        self.stats.duplicates_answered += 1;
                    }
                }
                _ => self.stats.drop(DropReason::Duplicate),
            }
            return;
        }
        // A REQ from a QP we still have a connection with: that one is stale (the peer
        // lost it); REJ(STALE_CONN) and DREQ the old one (cm_match_req).
        if let Some(&old) = self.remote_qps.get(&(r.local_qpn, r.local_ca_guid)) {
            self.issue_rej(peer, tid, raw, RejReason::StaleConn, rej::REJECTED_REQ);
            self.send_dreq(now, old, true);
            return;
        }
        let listener_ps = service_id::split(r.service_id)
            .and_then(|(ps, port)| Some((PortSpace::from_raw(u32::from(ps))?, port)));
        let Some((ps, port)) = listener_ps.filter(|&(ps, port)| {
            self.ports.ids(ps, port).any(|i| {
                self.ids
                    .get(&i)
                    .is_some_and(|x| x.state == RdmaState::Listen)
            })
        }) else {
            // No listener on the service ID (cm_match_req), unless one is about to come
            // back (`relisten`).
            let remote = (r.local_comm_id, r.local_ca_guid);
            if let Some(port) = listener_ps {
                if self.relisten.holds(remote) {
                    self.stats.drop(DropReason::Duplicate);
                    return;
                }
                if self.relisten.expects_listen(now, port) && raw.len() >= 256 {
                    let mut mad = [0; 256];
                    mad.copy_from_slice(&raw[..256]);
                    self.stats.reqs_held += 1;
                    self.relisten.hold(super::relisten::Held {
                        port,
                        until: now.saturating_add(super::relisten::HOLD),
                        peer,
                        mad,
                        remote,
                    });
                    return;
                }
            }
            self.issue_rej(
                peer,
                tid,
                raw,
                RejReason::InvalidServiceId,
                rej::REJECTED_REQ,
            );
            return;
        };
        // rdma_cm's part (cma_ib_req_handler): its header, a listener for the address, the
        // QP type. A failure there destroys the new IB CM id in REQ_RCVD: REJ(consumer).
        let qp_type = match r.transport_service_type {
            0 => Some(QpType::Rc),
            1 => Some(QpType::Uc),
            _ => None,
        };
        let hdr = cma::Packet::new_checked(&r.private_data[..])
            .ok()
            .and_then(|p| cma::Repr::parse(&p).ok());
        let Some(hdr) = hdr else {
            self.stats.drop(DropReason::BadCmaHeader);
            self.issue_rej(
                peer,
                tid,
                raw,
                RejReason::ConsumerDefined,
                rej::REJECTED_REQ,
            );
            return;
        };
        let (src_ip, dst_ip): (IpAddr, IpAddr) = match hdr.addrs {
            cma::Addrs::V4 { src, dst } => (src.into(), dst.into()),
            cma::Addrs::V6 { src, dst } => (src.into(), dst.into()),
        };
        let listener = qp_type.and_then(|t| self.find_listener(ps, port, dst_ip, Some(t)));
        let Some(listener) = listener.filter(|_| self.is_local(dst_ip)) else {
            self.issue_rej(
                peer,
                tid,
                raw,
                RejReason::ConsumerDefined,
                rej::REJECTED_REQ,
            );
            return;
        };
        if !self.backlog_room(listener) {
            self.stats.drop(DropReason::Backlog);
            return;
        }
        let p = r.primary_path;
        let lat = p.local_ack_timeout;
        let plt = lat - u8::from(lat > 0);
        let sgid_index = self.sgid_index(dst_ip);
        let local_id = self.alloc_comm();
        let num = self.new_child(listener, qp_type.unwrap_or(QpType::Rc));
        let seq = self.psn();
        let mtu = r.path_mtu;
        let Some(child) = self.ids.get_mut(&num) else {
            return;
        };
        child.seq_num = seq;
        child.src = Some(SocketAddr::new(dst_ip, port));
        child.dst = Some(SocketAddr::new(src_ip, hdr.src_port));
        child.hop_limit = p.hop_limit;
        child.path = Some(ucma::Path {
            sgid: p.remote_gid,
            dgid: p.local_gid,
            pkey: r.pkey,
            mtu,
            hop_limit: p.hop_limit,
            traffic_class: p.traffic_class,
            sl: p.sl,
            flow_label: p.flow_label,
            rate: p.packet_rate,
            packet_life_time: plt,
        });
        let mut c = super::id::Conn::new(peer, local_id, qp_type.unwrap_or(QpType::Rc));
        c.remote_id = r.local_comm_id;
        c.remote_guid = r.local_ca_guid;
        c.tid = tid;
        c.remote_qpn = r.local_qpn;
        c.sq_psn = r.starting_psn;
        c.timeout_ms = convert_to_ms(r.local_cm_response_timeout);
        c.max_cm_retries = r.max_cm_retries;
        c.initiator_depth = r.responder_resources;
        c.responder_resources = r.initiator_depth;
        c.path_mtu = mtu;
        c.pkey = r.pkey;
        c.retry_count = r.retry_count;
        c.rnr_retry_count = r.rnr_retry_count;
        c.av = ucma::Av {
            dgid: p.local_gid,
            sgid_index,
            flow_label: p.flow_label,
            hop_limit: p.hop_limit,
            traffic_class: p.traffic_class,
            sl: p.sl,
            port_num: 1,
        };
        c.av_timeout = plt + 1;
        // REQ_RCVD, then rdma_cm's MRA with IB_CM_MRA_FLAG_DELAY: sent only to a
        // duplicate REQ (ucma always leaves the accept to the program).
        c.state = CmState::MraReqSent;
        c.service_timeout = timers::CMA_CM_MRA_SETTING;
        c.in_remote_table = true;
        child.conn = Some(c);
        self.by_comm.insert(local_id, num);
        self.remote_ids
            .insert((r.local_comm_id, r.local_ca_guid), num);
        self.remote_qps.insert((r.local_qpn, r.local_ca_guid), num);
        let param = ConnParam {
            private_data: r.private_data[cma::HEADER_LEN..].to_vec(),
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            flow_control: u8::from(r.e2e_flow_control),
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            qp_num: r.local_qpn,
            qkey: 0,
        };
        let _ = now;
        self.event(num, EventKind::ConnectRequest, 0, Some(param));
    }

    fn mra_handler(&mut self, now: Instant, r: &mra::Repr) {
        let id = match r.message_mraed {
            mra::MRAED_REQ => self.acquire(r.remote_comm_id, 0),
            mra::MRAED_REP | mra::MRAED_LAP => self.acquire(r.remote_comm_id, r.local_comm_id),
            _ => None,
        };
        let Some(id) = id else {
            self.stats.drop(DropReason::Unmatched);
            return;
        };
        let c = self.ids.get_mut(&id).and_then(|i| i.conn.as_mut());
        let Some(c) = c else { return };
        let timeout = convert_to_ms(r.service_timeout) + convert_to_ms(c.av_timeout);
        let next = match (c.state, r.message_mraed) {
            (CmState::ReqSent, mra::MRAED_REQ) => CmState::MraReqRcvd,
            (CmState::RepSent, mra::MRAED_REP) => CmState::MraRepRcvd,
            (CmState::MraReqRcvd | CmState::MraRepRcvd, _) => {
                self.stats.drop(DropReason::Duplicate);
                return;
            }
            _ => {
                self.stats.drop(DropReason::Unmatched);
                return;
            }
        };
        // ib_modify_mad: the wait restarts with the longer timeout, for every retry left.
        let Some(m) = c.msg.as_mut() else {
            self.stats.drop(DropReason::Unmatched);
            return;
        };
        m.timeout_ms = timeout;
        m.deadline = after_ms(now, timeout);
        m.state = next;
        c.state = next;
    }

    fn rej_handler(&mut self, now: Instant, r: &rej::Repr) {
        let reason = r.reason.code();
        let id = if reason == RejReason::Timeout.code() {
            let mut g = [0u8; 8];
            g.copy_from_slice(&r.ari[..8]);
            self.remote_ids
                .get(&(r.local_comm_id, u64::from_be_bytes(g)))
                .copied()
        } else if r.message_rejected == rej::REJECTED_REQ {
            self.acquire(r.remote_comm_id, 0)
        } else {
            self.acquire(r.remote_comm_id, r.local_comm_id)
        };
        let Some(id) = id else {
            self.stats.drop(DropReason::Unmatched);
            return;
        };
        use CmState::*;
        match self.conn_state(id) {
            st @ (ReqSent | MraReqRcvd | RepSent | MraRepRcvd | ReqRcvd | MraReqSent) => {
                if matches!(st, ReqSent | MraReqRcvd | RepSent | MraRepRcvd) {
                    self.cancel(id);
                }
                if reason == RejReason::StaleConn.code() {
                    self.enter_timewait(now, id);
                } else {
                    self.reset_to_idle(id);
                }
            }
            DreqSent | RepRcvd | MraRepSent | Established => {
                self.cancel(id);
                self.enter_timewait(now, id);
            }
            _ => {
                self.stats.drop(DropReason::Unmatched);
                return;
            }
        }
        let private_data = r.private_data.to_vec();
        self.cma_event(
            id,
            IbEv::RejReceived {
                reason,
                private_data,
            },
        );
    }

    fn rep_handler(&mut self, now: Instant, peer: MadPeer, r: &rep::Repr) {
        let _ = now;
        let Some(id) = self.acquire(r.remote_comm_id, 0) else {
            // cm_dup_rep_handler: the RTU again, or the MRA again.
            let Some(id) = self.acquire(r.remote_comm_id, r.local_comm_id) else {
                self.stats.drop(DropReason::Unmatched);
                return;
            };
            let m = match self.conn_state(id) {
                CmState::Established => self.fmt_rtu(id),
                CmState::MraRepSent => self.fmt_mra(id, mra::MRAED_REP),
                _ => None,
            };
            match m {
                Some(m) => {
                    self.send(peer, &m);
                    self.stats.duplicates_answered += 1;
                }
                None => self.stats.drop(DropReason::Duplicate),
            }
            return;
        };
        if !matches!(self.conn_state(id), CmState::ReqSent | CmState::MraReqRcvd) {
            self.stats.drop(DropReason::Unmatched);
            return;
        }
        let key = (r.local_comm_id, r.local_ca_guid);
        if self.remote_ids.contains_key(&key) {
            self.stats.drop(DropReason::Duplicate);
            return;
        }
        let qkey = (r.local_qpn, r.local_ca_guid);
        if let Some(&old) = self.remote_qps.get(&qkey) {
            // cm_rep_handler's stale connection: REJ the REP, DREQ the old connection;
            // this one stays in REQ_SENT until its timer gives up.
            self.issue_rej(
                peer,
                self.ids[&id].conn.as_ref().map_or(0, |c| c.tid),
                raw_rep(r).as_slice(),
                RejReason::StaleConn,
                rej::REJECTED_REP,
            );
            self.send_dreq(now, old, true);
            return;
        }
        self.remote_ids.insert(key, id);
        self.remote_qps.insert(qkey, id);
        let Some(c) = self.ids.get_mut(&id).and_then(|i| i.conn.as_mut()) else {
            return;
        };
        c.in_remote_table = true;
        c.state = CmState::RepRcvd;
        c.remote_id = r.local_comm_id;
        c.remote_guid = r.local_ca_guid;
        c.remote_qpn = r.local_qpn;
        c.initiator_depth = r.responder_resources;
        c.responder_resources = r.initiator_depth;
        c.sq_psn = r.starting_psn;
        c.rnr_retry_count = r.rnr_retry_count;
        c.av_timeout = timers::ack_timeout(r.target_ack_delay, c.av_timeout.saturating_sub(1));
        c.msg = None;
        let param = ConnParam {
            private_data: r.private_data.to_vec(),
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            flow_control: u8::from(r.e2e_flow_control),
            retry_count: 0,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            qp_num: r.local_qpn,
            qkey: 0,
        };
        self.cma_event(id, IbEv::RepReceived(param));
    }

    fn rtu_handler(&mut self, r: &rtu::Repr) {
        let Some(id) = self.acquire(r.remote_comm_id, r.local_comm_id) else {
            self.stats.drop(DropReason::Unmatched);
            return;
        };
        if !matches!(self.conn_state(id), CmState::RepSent | CmState::MraRepRcvd) {
            self.stats.drop(DropReason::Duplicate);
            return;
        }
        self.set_state(id, CmState::Established);
        self.cancel(id);
        self.cma_event(id, IbEv::Established);
    }

    /// NOTIFY(IB_EVENT_COMM_EST) (`cm_establish`): the QP saw the first packet before the RTU.
    pub(super) fn establish(&mut self, id: IdNum) -> Result<(), i32> {
        match self.conn_state(id) {
            CmState::RepSent | CmState::MraRepRcvd => {
                self.set_state(id, CmState::Established);
                self.cancel(id);
                self.cma_event(id, IbEv::Established);
                Ok(())
            }
            CmState::Established => Err(106), // EISCONN
            _ => Err(22),
        }
    }

    fn dreq_handler(&mut self, now: Instant, peer: MadPeer, tid: u64, r: &dreq::Repr) {
        let Some(id) = self.acquire(r.remote_comm_id, r.local_comm_id) else {
            // cm_issue_drep: a DREP to a DREQ for a connection we no longer have.
            let m = CmMad::new(
                tid,
                0,
                Message::Drep(drep::Repr {
                    local_comm_id: r.remote_comm_id,
                    remote_comm_id: r.local_comm_id,
                    private_data: [0; drep::PRIVATE_DATA_LEN],
                }),
            );
            self.send(peer, &m);
            self.stats.duplicates_answered += 1;
            return;
        };
        let Some(c) = self.ids.get(&id).and_then(|i| i.conn.as_ref()) else {
            return;
        };
        if c.local_qpn != r.remote_qpn {
            self.stats.drop(DropReason::Unmatched);
            return;
        }
        use CmState::*;
        match c.state {
            RepSent | DreqSent => self.cancel(id),
            Established | MraRepRcvd => {}
            Timewait => {
                if let Some(m) = self.fmt_drep(id) {
                    self.send(peer, &m);
                    self.stats.duplicates_answered += 1;
                }
                return;
            }
            DreqRcvd => {
                self.stats.drop(DropReason::Duplicate);
                return;
            }
            _ => {
                self.stats.drop(DropReason::Unmatched);
                return;
            }
        }
        if let Some(c) = self.ids.get_mut(&id).and_then(|i| i.conn.as_mut()) {
            c.state = DreqRcvd;
            c.tid = tid;
        }
        let _ = now;
        self.cma_event(id, IbEv::DreqReceived);
    }

    fn drep_handler(&mut self, now: Instant, r: &drep::Repr) {
        let Some(id) = self.acquire(r.remote_comm_id, r.local_comm_id) else {
            self.stats.drop(DropReason::Unmatched);
            return;
        };
        if !matches!(self.conn_state(id), CmState::DreqSent | CmState::DreqRcvd) {
            self.stats.drop(DropReason::Duplicate);
            return;
        }
        self.enter_timewait(now, id);
        self.cancel(id);
        self.cma_event(id, IbEv::DrepReceived);
    }

    /// The outstanding message of `id` timed out: retry, or give up
    /// (`cm_process_send_error`).
    pub(super) fn msg_timeout(&mut self, now: Instant, id: IdNum) {
        let Some(c) = self.ids.get_mut(&id).and_then(|i| i.conn.as_mut()) else {
            return;
        };
        let Some(m) = c.msg.as_mut() else { return };
        if m.deadline > now {
            return;
        }
        if m.retries_left > 0 {
            m.retries_left -= 1;
            m.deadline = after_ms(now, m.timeout_ms);
            let (bytes, attr_id, peer) = (m.bytes, m.attr_id, c.peer);
            self.stats.retries.bump(attr_id);
            self.stats.mads_out.bump(attr_id);
            self.tx.push_back((peer, bytes));
            return;
        }
        let sent_in = m.state;
        c.msg = None;
        self.stats.timeouts += 1;
        if sent_in != c.state {
            return;
        }
        match sent_in {
            CmState::ReqSent | CmState::MraReqRcvd => {
                self.reset_to_idle(id);
                self.cma_event(id, IbEv::ReqError);
            }
            CmState::RepSent | CmState::MraRepRcvd => {
                self.reset_to_idle(id);
                self.cma_event(id, IbEv::RepError);
            }
            CmState::DreqSent => {
                self.enter_timewait(now, id);
                self.cma_event(id, IbEv::DreqError);
            }
            CmState::SidrReqSent => {
                self.set_state(id, CmState::Idle);
                if self.ids.get(&id).is_some_and(|i| cma_takes(i.state, false)) {
                    self.event(id, EventKind::Unreachable, -ETIMEDOUT, None);
                }
            }
            _ => {}
        }
    }

    /// `cma_ib_handler`: an IB CM event becomes the owner's event if the rdma_cm id is
    /// still connecting (or, for TIMEWAIT_EXIT, disconnected).
    pub(super) fn cma_event(&mut self, id: IdNum, ev: IbEv) {
        let Some(i) = self.ids.get_mut(&id) else {
            return;
        };
        if !cma_takes(i.state, matches!(ev, IbEv::TimewaitExit)) {
            return;
        }
        let none = Some(ConnParam::default());
        match ev {
            IbEv::ReqError | IbEv::RepError => {
                self.event(id, EventKind::Unreachable, -ETIMEDOUT, None)
            }
            IbEv::RepReceived(p) => {
                // rdma_cm's MRA(REP) with the delay flag: it answers a duplicate REP only.
                if let Some(c) = i.conn.as_mut() {
                    c.state = CmState::MraRepSent;
                    c.service_timeout = timers::CMA_CM_MRA_SETTING;
                }
                self.event(id, EventKind::ConnectResponse, 0, Some(p));
            }
            IbEv::Established => self.event(id, EventKind::Established, 0, none),
            IbEv::DreqError | IbEv::DreqReceived | IbEv::DrepReceived => {
                i.state = RdmaState::Disconnect;
                let status = if matches!(ev, IbEv::DreqError) {
                    -ETIMEDOUT
                } else {
                    0
                };
                self.event(id, EventKind::Disconnected, status, none);
            }
            IbEv::TimewaitExit => self.event(id, EventKind::TimewaitExit, 0, None),
            IbEv::RejReceived {
                reason,
                private_data,
            } => {
                let p = ConnParam {
                    private_data,
                    ..ConnParam::default()
                };
                self.event(id, EventKind::Rejected, i32::from(reason), Some(p));
            }
        }
    }
}
