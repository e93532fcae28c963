//! The engine's ingress: one received datagram through rxe's checks (`rxe_rcv`), to the
//! responder or the completer of its QP.

use super::*;

impl Engine {
    /// One received datagram. The ingress pipeline, in rxe's order (`rxe_rcv`): ICRC,
    /// parse (lengths, opcode, pad), TVer, QP lookup, transport, state, P_Key, source,
    /// then requests to the responder and responses to the completer.
    pub fn handle_datagram(&mut self, now: Instant, d: Datagram<'_>) {
        let Some(ipv4_id) = self.check_icrc(&d) else {
            return;
        };
        let pkt = match RocePacket::new_checked(d.data) {
            Ok(p) => p,
            Err(crate::wire::WireError::UnknownOpcode(_)) => {
                return self.on_reserved_opcode(now, &d);
            }
            Err(_) => {
                self.stats.inc(Counter::DropMalformed);
                return;
            }
        };
        let repr = match RoceRepr::parse(&pkt) {
            Ok(r) => r,
            Err(_) => {
                self.stats.inc(Counter::DropMalformed);
                return;
            }
        };
        if repr.bth.tver != 0 {
            self.stats.inc(Counter::DropBadTver);
            return;
        }
        let info = pkt.info();
        let qpn = repr.bth.dqpn;
        if info.transport == Transport::Cnp {
            return self.on_cnp(now, &d, &repr.bth);
        }
        let Some(Slot { qp, stats, .. }) = self.qps.get_mut(&qpn) else {
            self.stats.inc(Counter::DropUnknownQp);
            return;
        };
        let transport_ok = matches!(
            (info.transport, qp.qp_type),
            (Transport::Rc, QpType::Rc) | (Transport::Uc, QpType::Uc) | (Transport::Ud, QpType::Ud)
        );
        if !transport_ok {
            stats.inc(Counter::DropWrongTransport);
            return;
        }
        if !qp::pkey_match(repr.bth.pkey, qp.attrs.pkey()) {
            stats.inc(Counter::DropPkeyMismatch);
            return;
        }
        // RC: only the connected peer may talk to the QP (rxe check_addr).
        if qp.attrs.av.is_some_and(|av| av.dest_ip != d.src.ip()) {
            stats.inc(Counter::DropWrongSource);
            return;
        }
        let is_req = info.is(Flags::REQ);
        let ok_state = if is_req { qp.receives() } else { qp.sends() };
        if !ok_state {
            stats.inc(Counter::DropBadState);
            return;
        }
        stats.inc(Counter::RcvdPkts);
        stats.add(Counter::RcvdBytes, d.data.len() as u64);
        // The notification point's view of it (A17.9): who sent it, should it be CE.
        let ce_from = (d.ecn == crate::wire::Ecn::Ce).then(|| {
            let peer_qpn = match qp.qp_type {
                QpType::Ud => repr.deth.map_or(0, |h| h.src_qpn),
                _ => qp.attrs.dest_qpn,
            };
            (d.src.ip(), peer_qpn)
        });
        let payload = pkt.payload();
        let mut ctx = ctx!(self, now, stats);
        ctx.solicited = repr.bth.solicited;
        if qp.qp_type == QpType::Ud {
            // Datagrams: Q_Key, receive WQE, the network header slot (`qp/ud.rs`).
            let net = qp::ud::NetHdr {
                src: d.src.ip(),
                dst: d.dst.ip(),
                ipv4_id: ipv4_id.unwrap_or(0),
                udp_payload: d.data.len(),
            };
            qp.ud_on_request(&mut ctx, &repr, payload, &net);
        } else if is_req {
            qp.on_request(&mut ctx, &repr, payload);
        } else {
            qp.on_response(&mut ctx, &repr, payload);
        }
        self.touch(qpn);
        self.after_call(now);
        if let Some((ip, peer_qpn)) = ce_from {
            self.np_on_ce(now, qpn, ip, peer_qpn);
        }
    }

    /// A CNP (opcode 0x81, A17.9.3) for QP `bth.dqpn`: the header checks any packet gets
    /// (QP, P_Key, source), then the reaction point. Never answered, CE-marked or not.
    fn on_cnp(&mut self, now: Instant, d: &Datagram<'_>, bth: &crate::wire::BthRepr) {
        let Some(Slot { qp, stats, .. }) = self.qps.get_mut(&bth.dqpn) else {
            self.stats.inc(Counter::DropUnknownQp);
            return;
        };
        if !qp::pkey_match(bth.pkey, qp.attrs.pkey()) {
            stats.inc(Counter::DropPkeyMismatch);
            return;
        }
        if qp.attrs.av.is_some_and(|av| av.dest_ip != d.src.ip()) {
            stats.inc(Counter::DropWrongSource);
            return;
        }
        stats.inc(Counter::RcvdPkts);
        stats.add(Counter::RcvdBytes, d.data.len() as u64);
        self.rp_on_cnp(now, bth.dqpn);
    }

    /// A packet whose opcode is reserved (or one this NIC does not implement). Its BTH
    /// goes through the same header checks as any packet (TVer, QP, transport by the
    /// opcode's top three bits, P_Key, source, state); for an RC QP able to receive, the
    /// responder then treats it as an unsupported request: NAK Invalid Request when its
    /// PSN is the expected one (IBA 9.9, responder class C: unsupported or reserved
    /// opcode), as any other request when it is a duplicate or out of sequence. rxe has
    /// no table entry for such an opcode and drops the packet (spec/invalid/
    /// reserved_opcode.rc).
    fn on_reserved_opcode(&mut self, now: Instant, d: &Datagram<'_>) {
        let b = crate::wire::bth::Packet::new_unchecked(d.data);
        let Ok(bth) = crate::wire::bth::Repr::parse(&b) else {
            self.stats.inc(Counter::DropMalformed);
            return;
        };
        if bth.tver != 0 {
            self.stats.inc(Counter::DropBadTver);
            return;
        }
        let qpn = bth.dqpn;
        let Some(Slot { qp, stats, .. }) = self.qps.get_mut(&qpn) else {
            self.stats.inc(Counter::DropUnknownQp);
            return;
        };
        // Only the RC opcode range (top bits 000) can belong to an RC QP; UC and UD
        // have no NAK, so their reserved opcodes are dropped.
        if bth.opcode.0 >> 5 != 0 || qp.qp_type != QpType::Rc {
            stats.inc(Counter::DropWrongTransport);
            return;
        }
        if !qp::pkey_match(bth.pkey, qp.attrs.pkey()) {
            stats.inc(Counter::DropPkeyMismatch);
            return;
        }
        if qp.attrs.av.is_some_and(|av| av.dest_ip != d.src.ip()) {
            stats.inc(Counter::DropWrongSource);
            return;
        }
        if !qp.receives() {
            stats.inc(Counter::DropBadState);
            return;
        }
        stats.inc(Counter::RcvdPkts);
        stats.add(Counter::RcvdBytes, d.data.len() as u64);
        let mut ctx = ctx!(self, now, stats);
        qp.on_unsupported_request(&mut ctx, bth.psn);
        self.touch(qpn);
        self.after_call(now);
    }

    /// Whether the datagram's ICRC is acceptable (checked, or uncheckable and accepted):
    /// `Some` with its IPv4 identification as received or solved (`None` for IPv6, or
    /// when fuzzing), `None` to drop it.
    fn check_icrc(&mut self, d: &Datagram<'_>) -> Option<Option<u16>> {
        if d.data.len() < ICRC_LEN {
            self.stats.inc(Counter::DropMalformed);
            return None;
        }
        if cfg!(fuzzing) {
            return Some(d.ipv4_id);
        }
        let verdict = match (d.src, d.ipv4_id) {
            (SocketAddr::V4(_), None) => {
                if !self.cfg.accept_unverified_icrc {
                    self.stats.inc(Counter::DropBadIcrc);
                    return None;
                }
                // The ID is the one covered field a UDP socket cannot see: solve for it.
                let ph = PseudoHeaders::new(d.src, d.dst, 0, d.data.len());
                let r = self.id_solver.solve(ph.ip(), ph.udp(), d.data);
                if r.is_ok() {
                    self.stats.inc(Counter::IcrcIdSolved);
                }
                r.map(Some)
            }
            (_, id) => {
                let ph = PseudoHeaders::new(d.src, d.dst, id.unwrap_or(0), d.data.len());
                icrc::verify(ph.ip(), ph.udp(), d.data).map(|()| id)
            }
        };
        match verdict {
            Ok(id) => Some(id),
            Err(_) => {
                self.stats.inc(Counter::DropBadIcrc);
                None
            }
        }
    }
}
