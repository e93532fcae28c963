//! Service ID resolution for UD ids (IBA 12.11; the kernel's `cm_sidr_*` and
//! `cma_resolve_ib_udp`/`cma_send_sidr_rep`): the RDMA_PS_UDP port space's connect is a
//! SIDR_REQ carrying rdma_cm's header, answered by a SIDR_REP with the QPN and Q_Key.

use super::addr::cma_header;
use super::cmd::EINVAL;
use super::conn::padded;
use super::id::{CmState, Conn, RdmaState};
use super::stats::DropReason;
use super::timers::{self, convert_to_ms, RDMA_UDP_QKEY};
use super::ucma::{self, ConnParam, EventKind, IdNum, PortSpace, QpType};
use super::{cma_takes, Cm, MadPeer};
use crate::engine::Instant;
use crate::wire::cm::{cma, service_id, sidr_rep, sidr_req, CmMad, Message};
use std::net::{IpAddr, SocketAddr};

impl Cm {
    /// `cma_resolve_ib_udp`: SIDR_REQ, 2^(20-8) ms apart, 15 retries.
    pub(super) fn sidr_connect(
        &mut self,
        now: Instant,
        id: IdNum,
        p: &ConnParam,
    ) -> Result<(), (i32, String)> {
        let max = sidr_req::PRIVATE_DATA_LEN - cma::HEADER_LEN;
        if p.private_data.len() > max {
            return Err((EINVAL, format!("connect: private data over {max} bytes")));
        }
        let i = &self.ids[&id];
        let (src, dst, ps) = (i.src.expect("resolved"), i.dst.expect("resolved"), i.ps);
        let local_id = self.alloc_comm();
        let peer = MadPeer {
            remote: dst.ip(),
            local: src.ip(),
        };
        let mut c = Conn::new(peer, local_id, QpType::Ud);
        c.tid = Cm::form_tid(local_id);
        c.state = CmState::SidrReqSent;
        c.max_cm_retries = timers::CMA_MAX_CM_RETRIES;
        c.timeout_ms = convert_to_ms(timers::CMA_CM_RESPONSE_TIMEOUT);
        let mut pd = [0u8; sidr_req::PRIVATE_DATA_LEN];
        cma_header(src, dst).emit(&mut cma::Packet::new_unchecked(&mut pd[..]));
        pd[cma::HEADER_LEN..cma::HEADER_LEN + p.private_data.len()]
            .copy_from_slice(&p.private_data);
        let m = sidr_req::Repr {
            request_id: local_id,
            pkey: timers::DEFAULT_PKEY,
            service_id: service_id::new(ps.raw() as u16, dst.port()),
            private_data: pd,
        };
        let (tid, timeout) = (c.tid, c.timeout_ms);
        let i = self.ids.get_mut(&id).expect("checked");
        i.conn = Some(c);
        i.state = RdmaState::Connect;
        self.by_comm.insert(local_id, id);
        self.send_tracked(now, id, &CmMad::new(tid, 0, Message::SidrReq(m)), timeout);
        Ok(())
    }

    fn sidr_rep_to(&mut self, peer: MadPeer, tid: u64, r: sidr_rep::Repr) {
        self.send(peer, &CmMad::new(tid, 0, Message::SidrRep(r)));
    }

    fn sidr_rep_status(request_id: u32, sid: u64, status: u8) -> sidr_rep::Repr {
        sidr_rep::Repr {
            request_id,
            status,
            additional_info_length: 0,
            vendor_id_h: 0,
            qpn: 0,
            vendor_id_l: 0,
            service_id: sid,
            qkey: 0,
            additional_info: [0; sidr_rep::ADD_INFO_LEN],
            private_data: [0; sidr_rep::PRIVATE_DATA_LEN],
        }
    }

    /// `cm_sidr_req_handler` + `cma_ib_req_handler`'s UD branch.
    pub(super) fn sidr_req_handler(&mut self, peer: MadPeer, tid: u64, r: &sidr_req::Repr) {
        if self.sidr_remote.contains_key(&(r.request_id, peer.remote)) {
            self.stats.drop(DropReason::Duplicate);
            return;
        }
        let sp = service_id::split(r.service_id)
            .and_then(|(ps, port)| Some((PortSpace::from_raw(u32::from(ps))?, port)));
        let Some((ps, port)) = sp.filter(|&(ps, port)| {
            self.ports.ids(ps, port).any(|i| {
                self.ids
                    .get(&i)
                    .is_some_and(|x| x.state == RdmaState::Listen)
            })
        }) else {
            let rep = Cm::sidr_rep_status(r.request_id, r.service_id, sidr_rep::STATUS_UNSUPPORTED);
            self.sidr_rep_to(peer, tid, rep);
            return;
        };
        let reject = Cm::sidr_rep_status(r.request_id, r.service_id, sidr_rep::STATUS_REJECT);
        let hdr = cma::Packet::new_checked(&r.private_data[..])
            .ok()
            .and_then(|p| cma::Repr::parse(&p).ok());
        let Some(hdr) = hdr else {
            self.stats.drop(DropReason::BadCmaHeader);
            self.sidr_rep_to(peer, tid, reject);
            return;
        };
        let (src_ip, dst_ip): (IpAddr, IpAddr) = match hdr.addrs {
            cma::Addrs::V4 { src, dst } => (src.into(), dst.into()),
            cma::Addrs::V6 { src, dst } => (src.into(), dst.into()),
        };
        let listener = self
            .find_listener(ps, port, dst_ip, Some(QpType::Ud))
            .filter(|_| self.is_local(dst_ip));
        let Some(listener) = listener else {
            self.sidr_rep_to(peer, tid, reject);
            return;
        };
        if !self.backlog_room(listener) {
            self.stats.drop(DropReason::Backlog);
            return;
        }
        let num = self.new_child(listener, QpType::Ud);
        let seq = self.psn();
        let local_id = self.alloc_comm();
        let mtu = self.mtu_code();
        let av = ucma::Av {
            dgid: ucma::ip_gid(peer.remote),
            sgid_index: self.sgid_index(dst_ip),
            flow_label: 0,
            hop_limit: 64,
            traffic_class: 0,
            sl: 0,
            port_num: 1,
        };
        let Some(child) = self.ids.get_mut(&num) else {
            return;
        };
        child.seq_num = seq;
        child.src = Some(SocketAddr::new(dst_ip, port));
        child.dst = Some(SocketAddr::new(src_ip, hdr.src_port));
        child.path = Some(ucma::Path {
            sgid: ucma::ip_gid(dst_ip),
            dgid: av.dgid,
            pkey: r.pkey,
            mtu,
            hop_limit: av.hop_limit,
            traffic_class: 0,
            sl: 0,
            flow_label: 0,
            rate: 0,
            packet_life_time: timers::CMA_IBOE_PACKET_LIFETIME,
        });
        let mut c = Conn::new(peer, local_id, QpType::Ud);
        c.remote_id = r.request_id;
        c.tid = tid;
        c.state = CmState::SidrReqRcvd;
        c.av = av;
        child.conn = Some(c);
        self.sidr_remote.insert((r.request_id, peer.remote), num);
        let param = ConnParam {
            private_data: r.private_data[cma::HEADER_LEN..].to_vec(),
            ..ConnParam::default()
        };
        self.event_ah(num, EventKind::ConnectRequest, 0, Some(param), Some(av));
    }

    fn sidr_answer(&mut self, id: IdNum, rep: sidr_rep::Repr) {
        let Some(i) = self.ids.get_mut(&id) else {
            return;
        };
        i.parent = None;
        let Some(c) = i.conn.as_mut() else { return };
        c.state = CmState::Idle;
        let (peer, tid, key) = (c.peer, c.tid, (c.remote_id, c.peer.remote));
        self.sidr_remote.remove(&key);
        self.sidr_rep_to(peer, tid, rep);
    }

    fn sidr_sid(&self, id: IdNum) -> u64 {
        let i = &self.ids[&id];
        service_id::new(i.ps.raw() as u16, i.src.map_or(0, |s| s.port()))
    }

    /// `cma_send_sidr_rep(SUCCESS)`: the program's QPN and the port space's Q_Key (ucma
    /// passes no Q_Key for IP addresses, so `cma_set_qkey` picks RDMA_UDP_QKEY).
    pub(super) fn sidr_accept(&mut self, id: IdNum, p: &ConnParam) -> Result<(), (i32, String)> {
        if p.private_data.len() > sidr_rep::PRIVATE_DATA_LEN {
            return Err((EINVAL, "accept: private data over 136 bytes".into()));
        }
        let qkey = *self
            .ids
            .get_mut(&id)
            .expect("checked")
            .qkey
            .get_or_insert(RDMA_UDP_QKEY);
        let remote = self.ids[&id].conn.as_ref().map_or(0, |c| c.remote_id);
        let rep = sidr_rep::Repr {
            qpn: p.qp_num & 0x00ff_ffff,
            qkey,
            private_data: padded(&p.private_data),
            ..Cm::sidr_rep_status(remote, self.sidr_sid(id), sidr_rep::STATUS_SUCCESS)
        };
        self.sidr_answer(id, rep);
        Ok(())
    }

    /// `rdma_reject` of a UD request: SIDR_REP(REJECT).
    pub(super) fn sidr_reject(&mut self, id: IdNum, pd: &[u8]) -> Result<(), (i32, String)> {
        if pd.len() > sidr_rep::PRIVATE_DATA_LEN {
            return Err((EINVAL, "reject: private data over 136 bytes".into()));
        }
        let remote = self.ids[&id].conn.as_ref().map_or(0, |c| c.remote_id);
        let rep = sidr_rep::Repr {
            private_data: padded(pd),
            ..Cm::sidr_rep_status(remote, self.sidr_sid(id), sidr_rep::STATUS_REJECT)
        };
        self.sidr_answer(id, rep);
        Ok(())
    }

    /// `cm_sidr_rep_handler` + `cma_sidr_rep_handler`: ESTABLISHED with the peer's QPN,
    /// Q_Key and address vector, or UNREACHABLE with the SIDR status.
    pub(super) fn sidr_rep_handler(&mut self, r: &sidr_rep::Repr) {
        let Some(id) = self.acquire(r.request_id, 0) else {
            self.stats.drop(DropReason::Unmatched);
            return;
        };
        let i = self.ids.get_mut(&id).expect("acquired");
        let Some(c) = i.conn.as_mut().filter(|c| c.state == CmState::SidrReqSent) else {
            self.stats.drop(DropReason::Duplicate);
            return;
        };
        c.state = CmState::Idle;
        c.msg = None;
        if !cma_takes(i.state, false) {
            return;
        }
        let param = ConnParam {
            private_data: r.private_data.to_vec(),
            qp_num: r.qpn,
            qkey: r.qkey,
            ..ConnParam::default()
        };
        if r.status != sidr_rep::STATUS_SUCCESS {
            let st = i32::from(r.status);
            self.event(id, EventKind::Unreachable, st, Some(param));
            return;
        }
        if i.qkey.is_some_and(|q| q != r.qkey) {
            self.event(id, EventKind::AddrError, -EINVAL, None);
            return;
        }
        i.qkey = Some(r.qkey);
        let src = i.src.map(|s| s.ip());
        let path = i.path;
        let sgid_index = src.map_or(1, |s| self.sgid_index(s));
        let ah = path.map(|p| ucma::Av {
            dgid: p.dgid,
            sgid_index,
            flow_label: p.flow_label,
            hop_limit: p.hop_limit,
            traffic_class: p.traffic_class,
            sl: p.sl,
            port_num: 1,
        });
        if let (Some(i), Some(ah)) = (self.ids.get_mut(&id), ah) {
            i.ud_peer = Some((param.clone(), ah));
        }
        self.event_ah(id, EventKind::Established, 0, Some(param), ah);
    }
}
