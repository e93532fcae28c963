//! The ucma commands (`drivers/infiniband/core/ucma.c` over `cma.c`): ids, binding,
//! address and route resolution, listen, connect, accept, reject, disconnect, options,
//! destroy. Errors are the kernel's errno for the same mistake.

use super::addr::cma_header;
use super::conn::padded;
use super::id::{CmState, Conn, Id, RdmaState};
use super::timers::{self, convert_to_ms};
use super::ucma::{
    self, CmOption, Command, ConnParam, EventKind, IdInfo, IdNum, PortSpace, QpType, Reply,
};
use super::{Cm, MadPeer, Owner};
use crate::engine::Instant;
use crate::wire::cm::{cma, req, service_id, CmMad, Message, RejReason};

use super::errno::err;
pub use super::errno::{EINVAL, ENOENT};

pub(super) type CmdResult = Result<Reply, (i32, String)>;

impl Cm {
    pub(super) fn run_command(&mut self, now: Instant, owner: Owner, cmd: Command) -> CmdResult {
        match cmd {
            Command::CreateId { ps, qp_type } => {
                // ucma_get_qp_type: the port space decides but for RDMA_PS_IB.
                let qp_type = match ps {
                    PortSpace::Tcp => QpType::Rc,
                    PortSpace::Udp | PortSpace::Ipoib => QpType::Ud,
                    PortSpace::Ib => qp_type,
                };
                let num = self.next_id;
                self.next_id = num
                    .checked_add(1)
                    .ok_or((12, "create_id: no id numbers left".to_string()))?;
                let seq = self.psn();
                self.ids.insert(num, Id::new(num, owner, ps, qp_type, seq));
                Ok(Reply::Id { id: num })
            }
            Command::DestroyId { id } => {
                self.own(owner, id)?;
                let i = &self.ids[&id];
                if i.state == RdmaState::Listen {
                    if let Some(port) = i.bound {
                        // Its owner may listen there again at once (`relisten`).
                        self.relisten.unlistened(now, (i.ps, port));
                    }
                }
                self.destroy(now, id);
                Ok(Reply::Done)
            }
            Command::Bind { id, addr } => {
                self.own(owner, id)?;
                if self.ids[&id].state != RdmaState::Idle {
                    return err(EINVAL, "bind: the id is already bound");
                }
                let a = self.bind_id(id, addr)?;
                Ok(Reply::Bound { addr: a })
            }
            Command::ResolveAddr {
                id,
                src,
                dst,
                timeout_ms,
            } => {
                self.own(owner, id)?;
                self.resolve_addr(now, id, src, dst, timeout_ms)?;
                Ok(Reply::Done)
            }
            Command::ResolveRoute { id, timeout_ms: _ } => {
                self.own(owner, id)?;
                self.resolve_route(id)?;
                Ok(Reply::Done)
            }
            Command::Query { id } => {
                self.own(owner, id)?;
                let i = &self.ids[&id];
                Ok(Reply::Info(IdInfo {
                    src: i.src,
                    dst: i.dst,
                    node_guid: if i.has_device { self.cfg.node_guid } else { 0 },
                    port_num: 1,
                    pkey: timers::DEFAULT_PKEY,
                    path: i.path,
                }))
            }
            Command::Listen { id, backlog } => {
                self.own(owner, id)?;
                self.listen(id, backlog)?;
                let i = &self.ids[&id];
                if let Some(port) = i.bound {
                    // REQs that waited for this listener (`relisten`), as if just in.
                    for h in self.relisten.take_port((i.ps, port)) {
                        self.stats.mads_in.req -= 1;
                        self.recv_mad(now, h.peer, &h.mad);
                    }
                }
                Ok(Reply::Done)
            }
            Command::Connect { id, param } => {
                self.own(owner, id)?;
                self.connect(now, id, &param)?;
                Ok(Reply::Done)
            }
            Command::Accept { id, param } => {
                self.own(owner, id)?;
                self.accept(now, id, &param)?;
                Ok(Reply::Done)
            }
            Command::Reject {
                id,
                private_data,
                reason,
            } => {
                self.own(owner, id)?;
                self.reject(now, id, &private_data, reason)?;
                Ok(Reply::Done)
            }
            Command::Disconnect { id } => {
                self.own(owner, id)?;
                if self.ids[&id].conn.is_none() {
                    return err(EINVAL, "disconnect: the id has no connection");
                }
                // rdma_disconnect: DREQ, else DREP to a DREQ received, else nothing.
                if !self.send_dreq(now, id, true) {
                    self.send_drep(now, id);
                }
                Ok(Reply::Done)
            }
            Command::InitQpAttr { id, state } => {
                self.own(owner, id)?;
                Ok(Reply::QpAttrs(self.init_qp_attr(id, state)?))
            }
            Command::SetOption { id, option } => {
                self.own(owner, id)?;
                self.set_option(id, option)?;
                Ok(Reply::Done)
            }
            Command::Notify { id, event } => {
                self.own(owner, id)?;
                // IB_EVENT_COMM_EST (enum ib_event_type / ibv_event_type 4).
                if event != 4 || self.ids[&id].conn.is_none() {
                    return err(EINVAL, "notify: only COMM_EST (4) on a connection");
                }
                self.establish(id)
                    .map_err(|e| (e, "notify: the connection is not waiting for an RTU".into()))?;
                Ok(Reply::Done)
            }
        }
    }

    /// `ucma_get_ctx`: ENOENT for an unknown id, EINVAL for another owner's.
    fn own(&self, owner: Owner, id: IdNum) -> Result<(), (i32, String)> {
        match self.ids.get(&id) {
            None => err(ENOENT, format!("no rdma_cm id {id}")),
            Some(i) if i.owner != owner => err(EINVAL, format!("id {id} is not yours")),
            Some(_) => Ok(()),
        }
    }

    /// `rdma_connect` -> `cma_connect_ib` (REQ) or `cma_resolve_ib_udp` (SIDR_REQ).
    fn connect(&mut self, now: Instant, id: IdNum, p: &ConnParam) -> Result<(), (i32, String)> {
        let i = &self.ids[&id];
        if i.state != RdmaState::RouteResolved {
            return err(EINVAL, "connect: the route is not resolved");
        }
        if i.qp_type == QpType::Ud {
            return self.sidr_connect(now, id, p);
        }
        let max = req::PRIVATE_DATA_LEN - cma::HEADER_LEN;
        if p.private_data.len() > max {
            return err(EINVAL, format!("connect: private data over {max} bytes"));
        }
        let (src, dst) = (i.src.expect("resolved"), i.dst.expect("resolved"));
        let path = i.path.expect("route resolved");
        let (ps, qp_type, seq) = (i.ps, i.qp_type, i.seq_num);
        let local_id = self.alloc_comm();
        let peer = MadPeer {
            remote: dst.ip(),
            local: src.ip(),
        };
        let mut c = Conn::new(peer, local_id, qp_type);
        c.tid = Cm::form_tid(local_id);
        c.local_qpn = p.qp_num & 0x00ff_ffff;
        c.rq_psn = seq;
        c.timeout_ms = 2 * convert_to_ms(path.packet_life_time)
            + convert_to_ms(timers::CMA_CM_RESPONSE_TIMEOUT);
        c.max_cm_retries = timers::CMA_MAX_CM_RETRIES;
        c.path_mtu = path.mtu;
        c.pkey = path.pkey;
        c.responder_resources = p.responder_resources;
        c.initiator_depth = p.initiator_depth;
        c.retry_count = p.retry_count.min(7);
        c.rnr_retry_count = p.rnr_retry_count.min(7);
        c.av = ucma::Av {
            dgid: path.dgid,
            sgid_index: self.sgid_index(src.ip()),
            flow_label: path.flow_label,
            hop_limit: path.hop_limit,
            traffic_class: path.traffic_class,
            sl: path.sl,
            port_num: 1,
        };
        c.av_timeout = path.packet_life_time + 1;
        c.state = CmState::ReqSent;
        let mut pd = [0u8; req::PRIVATE_DATA_LEN];
        cma_header(src, dst).emit(&mut cma::Packet::new_unchecked(&mut pd[..]));
        pd[cma::HEADER_LEN..cma::HEADER_LEN + p.private_data.len()]
            .copy_from_slice(&p.private_data);
        let sub = path.hop_limit <= 1;
        let lid = if sub { 0 } else { 0xffff };
        let m = req::Repr {
            local_comm_id: local_id,
            vendor_id: 0,
            service_id: service_id::new(ps.raw() as u16, dst.port()),
            local_ca_guid: self.cfg.node_guid,
            local_qkey: 0,
            local_qpn: c.local_qpn,
            responder_resources: c.responder_resources,
            local_eecn: 0,
            initiator_depth: c.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: timers::CMA_CM_RESPONSE_TIMEOUT,
            transport_service_type: u8::from(qp_type == QpType::Uc),
            e2e_flow_control: p.flow_control != 0,
            starting_psn: seq,
            local_cm_response_timeout: timers::CMA_CM_RESPONSE_TIMEOUT,
            retry_count: c.retry_count,
            pkey: path.pkey,
            path_mtu: path.mtu,
            rdc_exists: false,
            rnr_retry_count: c.rnr_retry_count,
            max_cm_retries: timers::CMA_MAX_CM_RETRIES,
            srq: p.srq,
            extended_transport_type: 0,
            primary_path: req::Path {
                local_lid: lid,
                remote_lid: lid,
                local_gid: path.sgid,
                remote_gid: path.dgid,
                flow_label: path.flow_label,
                packet_rate: path.rate,
                traffic_class: path.traffic_class,
                hop_limit: path.hop_limit,
                sl: path.sl,
                subnet_local: sub,
                local_ack_timeout: timers::ack_timeout(timers::CA_ACK_DELAY, path.packet_life_time),
            },
            alternate_path: req::Path::default(),
            sap_supported: false,
            private_data: pd,
        };
        let timeout = c.timeout_ms;
        let tid = c.tid;
        let i = self.ids.get_mut(&id).expect("checked");
        i.conn = Some(c);
        i.state = RdmaState::Connect;
        self.by_comm.insert(local_id, id);
        self.send_tracked(now, id, &CmMad::new(tid, 0, Message::Req(m)), timeout);
        Ok(())
    }

    /// `rdma_accept`: REP (or SIDR_REP) on a connect request's id; on the active side after
    /// CONNECT_RESPONSE, the RTU (`rdma_establish`: no event, librdmacm reports
    /// ESTABLISHED itself, as with the kernel).
    fn accept(&mut self, now: Instant, id: IdNum, p: &ConnParam) -> Result<(), (i32, String)> {
        let i = &self.ids[&id];
        if i.state != RdmaState::Connect {
            return err(EINVAL, "accept: the id has no connection request");
        }
        match i.cm_state() {
            CmState::SidrReqRcvd => self.sidr_accept(id, p),
            CmState::RepRcvd | CmState::MraRepSent => {
                if p.private_data.len() > crate::wire::cm::rtu::PRIVATE_DATA_LEN {
                    return err(EINVAL, "accept: private data too long for an RTU");
                }
                self.send_rtu(id, &p.private_data);
                Ok(())
            }
            CmState::ReqRcvd | CmState::MraReqSent => self.send_rep(now, id, p),
            _ => err(EINVAL, "accept: nothing to accept"),
        }
    }

    /// `cma_accept_ib` -> `ib_send_cm_rep`.
    fn send_rep(&mut self, now: Instant, id: IdNum, p: &ConnParam) -> Result<(), (i32, String)> {
        use crate::wire::cm::rep;
        if p.private_data.len() > rep::PRIVATE_DATA_LEN {
            return err(EINVAL, "accept: private data over 196 bytes");
        }
        let guid = self.cfg.node_guid;
        let i = self.ids.get_mut(&id).expect("checked");
        i.parent = None;
        let seq = i.seq_num;
        let c = i.conn.as_mut().expect("connecting");
        c.local_qpn = p.qp_num & 0x00ff_ffff;
        c.rq_psn = seq;
        c.initiator_depth = p.initiator_depth;
        c.responder_resources = p.responder_resources;
        c.state = CmState::RepSent;
        let m = rep::Repr {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            local_qkey: 0,
            local_qpn: c.local_qpn,
            vendor_id_h: 0,
            local_eecn: 0,
            vendor_id_m: 0,
            starting_psn: seq,
            vendor_id_l: 0,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: timers::CA_ACK_DELAY,
            failover_accepted: 0,
            e2e_flow_control: p.flow_control != 0,
            rnr_retry_count: p.rnr_retry_count.min(7),
            srq: p.srq,
            local_ca_guid: guid,
            private_data: padded(&p.private_data),
        };
        let (tid, timeout) = (c.tid, c.timeout_ms);
        self.send_tracked(now, id, &CmMad::new(tid, 0, Message::Rep(m)), timeout);
        Ok(())
    }

    /// `rdma_reject`: REJ(consumer defined, or 35 vendor option) with private data.
    fn reject(
        &mut self,
        now: Instant,
        id: IdNum,
        pd: &[u8],
        reason: Option<u16>,
    ) -> Result<(), (i32, String)> {
        let reason = reason.unwrap_or(RejReason::ConsumerDefined.code());
        if reason != RejReason::ConsumerDefined.code()
            && reason != RejReason::VendorOptionNotSupported.code()
        {
            return err(EINVAL, "reject: the reason must be 28 or 35");
        }
        if self.ids[&id].conn.is_none() {
            return err(EINVAL, "reject: the id has no connection");
        }
        if self.ids[&id].cm_state() == CmState::SidrReqRcvd {
            return self.sidr_reject(id, pd);
        }
        if pd.len() > crate::wire::cm::rej::PRIVATE_DATA_LEN {
            return err(EINVAL, "reject: private data over 148 bytes");
        }
        if let Some(i) = self.ids.get_mut(&id) {
            i.parent = None;
        }
        if !self.send_rej(now, id, reason, &[], pd) {
            return err(EINVAL, "reject: not in a state that can be rejected");
        }
        Ok(())
    }

    fn set_option(&mut self, id: IdNum, o: CmOption) -> Result<(), (i32, String)> {
        let i = self.ids.get_mut(&id).expect("checked");
        match o {
            CmOption::Tos(t) => i.tos = Some(t),
            CmOption::ReuseAddr(r) => {
                // rdma_set_reuseaddr.
                if (r && i.state != RdmaState::Listen) || i.state == RdmaState::Idle {
                    i.reuseaddr = r;
                    if let Some(port) = i.bound {
                        let ps = i.ps;
                        self.ports.update(ps, port, id, |b| b.reuseaddr = r);
                    }
                } else {
                    return err(EINVAL, "reuseaddr: not in this state");
                }
            }
            CmOption::AfOnly(a) => {
                if matches!(i.state, RdmaState::Idle | RdmaState::AddrBound) {
                    i.afonly = a;
                } else {
                    return err(EINVAL, "afonly: only before listen or connect");
                }
            }
            CmOption::AckTimeout(t) => {
                if !matches!(i.qp_type, QpType::Rc) {
                    return err(EINVAL, "ack timeout: RC only");
                }
                i.ack_timeout = Some(t);
            }
        }
        Ok(())
    }

    /// `rdma_destroy_id` (`cm_destroy_id` for its connection): what the id had going ends,
    /// and no event for it follows.
    pub(super) fn destroy(&mut self, now: Instant, id: IdNum) {
        use CmState::*;
        let Some(i) = self.ids.get(&id) else { return };
        let (rdma, st) = (i.state, i.cm_state());
        if rdma == RdmaState::Listen {
            // Requests the owner never saw die with the listener (ucma_cleanup_ctx_events).
            let orphans: Vec<IdNum> = self
                .events
                .iter()
                .filter(|(_, e)| e.kind == EventKind::ConnectRequest && e.listen_id == Some(id))
                .map(|(_, e)| e.id)
                .collect();
            for o in orphans {
                self.destroy(now, o);
            }
        }
        match st {
            SidrReqRcvd => {
                let _ = self.sidr_reject(id, &[]);
            }
            ReqSent | MraReqRcvd => {
                self.cancel(id);
                let guid = self.cfg.node_guid.to_be_bytes();
                self.send_rej(now, id, RejReason::Timeout.code(), &guid, &[]);
            }
            ReqRcvd | RepSent | MraRepRcvd | MraReqSent | RepRcvd | MraRepSent => {
                self.cancel(id);
                self.send_rej(now, id, RejReason::ConsumerDefined.code(), &[], &[]);
            }
            Established => {
                // Sent once: the id is gone before any retry (cm_destroy_id's retest).
                self.send_dreq(now, id, false);
            }
            DreqRcvd => {
                self.send_drep(now, id);
            }
            _ => {}
        }
        self.unlist_remote(id);
        let Some(i) = self.ids.remove(&id) else {
            return;
        };
        if let Some(c) = &i.conn {
            if self.by_comm.get(&c.local_id) == Some(&id) {
                self.by_comm.remove(&c.local_id);
            }
        }
        self.sidr_remote.retain(|_, v| *v != id);
        if let Some(port) = i.bound {
            self.ports.unbind(i.ps, port, id);
        }
        self.events.retain(|(_, e)| e.id != id);
        self.resolves.retain(|r| r.0 != id);
    }

    /// Every deadline of `id` that has passed.
    pub(super) fn id_timeout(&mut self, now: Instant, id: IdNum) {
        let Some(i) = self.ids.get_mut(&id) else {
            return;
        };
        if i.resolve_deadline.is_some_and(|d| d <= now) {
            if i.state == RdmaState::AddrQuery {
                self.stats.timeouts += 1;
                self.addr_resolved(now, id, Err(super::conn::ETIMEDOUT));
            } else {
                i.resolve_deadline = None;
            }
        }
        self.msg_timeout(now, id);
        let Some(c) = self.ids.get_mut(&id).and_then(|i| i.conn.as_mut()) else {
            return;
        };
        if c.timewait_until.is_some_and(|d| d <= now) {
            c.timewait_until = None;
            if c.state == CmState::Timewait {
                c.state = CmState::Idle;
                self.cma_event(id, super::conn::IbEv::TimewaitExit);
            }
        }
    }
}
