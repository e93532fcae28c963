//! Unreliable Datagram (IBA 9.8, 10.2.4): one packet per message, no connection, no ACK,
//! no retry. The send queue's WRs each name their destination ([`UdDest`]: an address
//! handle's IP, the remote QPN and Q_Key); the packet carries a DETH (the Q_Key and our
//! QPN). The receive side checks the Q_Key, writes the 40-byte network header slot ahead
//! of the payload (rxe `execute`, `union rdma_network_hdr`) and completes with the
//! source QP. QP 1 (GSI, the management QP) is a UD QP with the GSI Q_Key.
//!
//! What is rxe's here, and where it is not:
//! - a message longer than the port MTU completes successfully without a packet
//!   (C10-93.1.1; `rxe_req.c`, "fake a successful UD send": the PSN still advances);
//! - a packet with no receive WQE is dropped (class D, counted: UD has no RNR);
//! - a message longer than the receive WQE completes that WQE with a local length error
//!   (IBA 11.6.2; the QP stays usable). rxe instead drops the packet and leaves the WQE
//!   (`RESPST_ERR_LENGTH`, class D), after copying the header into it.

use super::attr::Attr;
use super::{Ctx, Qp, QpState};
use crate::engine::stats::Counter;
use crate::engine::wr::{Completion, NetworkHdr, SendOp, WcOpcode, WcStatus};
use crate::wire::opcode::op;
use crate::wire::{BthRepr, DethRepr, ImmDtRepr, RoceRepr};
use std::net::IpAddr;

/// The QPN of the General Services Interface QP (IBA 13.4.5 "QP1").
pub const GSI_QPN: u32 = 1;
/// The Q_Key of every GSI datagram (IBA 13.4.5; `IB_QP1_QKEY`).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Bytes of network header a UD receive consumes at the head of its buffer (IBA 11.4.1.2,
/// the GRH; RoCEv2 puts the IP header there).
pub const GRH_LEN: usize = 40;
/// TTL (hop limit) assumed for a received packet whose IP header was not seen: what
/// Linux and the L2 framing put on every RoCE packet roce-emu sends.
pub const DEFAULT_TTL: u8 = 64;

/// Where one UD send goes: the address handle (the peer's IP address, its GID) and the
/// remote QP's number and Q_Key (`ibv_send_wr.wr.ud`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdDest {
    pub dest_ip: IpAddr,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// What the receive side knows of the IP and UDP headers around a datagram, to rebuild
/// the network header slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetHdr {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IPv4 identification (as received, or solved from the ICRC; 0 if unknown).
    pub ipv4_id: u16,
    /// UDP payload bytes (BTH through ICRC).
    pub udp_payload: usize,
}

/// The 40 bytes rxe writes at the head of a UD receive buffer (`execute`, `union
/// rdma_network_hdr`): for IPv6 the packet's IPv6 header; for IPv4, 20 zero bytes and
/// then the 20-byte IPv4 header, whose checksum libibverbs checks to tell the two apart
/// (`ibv_init_ah_from_wc`, `get_grh_header_version`).
///
/// roce-emu rebuilds the header from what it knows: addresses, lengths and the IPv4 ID
/// as received; TOS/traffic class 0, flow label 0, TTL 64 and DF set, which is what every
/// roce-emu sender puts on the wire (a UDP socket or the L2 framing does not hand these
/// fields up).
pub fn network_header(h: &NetHdr) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    let udp_len = 8 + h.udp_payload;
    match (h.src, h.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let ip = &mut g[20..];
            ip[0] = 0x45; // version 4, IHL 5 words
            ip[1] = 0; // TOS
            ip[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
            ip[4..6].copy_from_slice(&h.ipv4_id.to_be_bytes());
            ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF, offset 0
            ip[8] = DEFAULT_TTL;
            ip[9] = 17; // UDP
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            let c = ipv4_checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
        }
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                IpAddr::V6(v6) => v6.octets(),
            };
            g[0] = 0x60; // version 6, traffic class 0, flow label 0
            g[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            g[6] = 17; // next header: UDP
            g[7] = DEFAULT_TTL;
            g[8..24].copy_from_slice(&v6(s));
            g[24..40].copy_from_slice(&v6(d));
        }
    }
    g
}

/// The IPv4 header checksum (RFC 791): the ones' complement of the ones' complement sum
/// of the header's 16-bit words, the checksum field taken as 0.
pub fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum = 0u32;
    for (i, w) in h.chunks(2).enumerate() {
        if i == 5 {
            continue; // the checksum field itself
        }
        let hi = u32::from(w[0]) << 8;
        sum += hi | u32::from(*w.get(1).unwrap_or(&0));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// rxe's UDP source port for a UD QP (`rxe_qp_init_req`): `0xC000 + (hash_32(qpn, 14) &
/// 0x3fff)`, `hash_32` being the multiplication by the 32-bit golden ratio.
pub fn ud_sport(qpn: u32) -> u16 {
    let h = qpn.wrapping_mul(0x61C8_8647) >> (32 - 14);
    0xc000 | (h & 0x3fff) as u16
}

/// Required and optional attributes of a UD (and GSI) transition: the kernel's
/// `qp_state_table` rows for IB_QPT_UD (IBA 11.2.5.2). INIT needs the P_Key index, the
/// port and the Q_Key; RTR nothing more; RTS the send PSN.
pub fn ud_rules(from: QpState, to: QpState) -> Option<(&'static [Attr], &'static [Attr])> {
    use Attr::*;
    use QpState::*;
    const NONE: &[Attr] = &[];
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (NONE, NONE),
        (Reset, Init) => (&[PkeyIndex, Port, Qkey], NONE),
        (Init, Init) => (NONE, &[PkeyIndex, Port, Qkey]),
        (Init, Rtr) => (NONE, &[PkeyIndex, Qkey]),
        (Rtr, Rts) => (&[SqPsn], &[Qkey]),
        (Rts, Rts) | (Sqd, Rts) | (Sqe, Rts) => (NONE, &[Qkey]),
        (Rts, Sqd) => (NONE, &[EnSqdAsyncNotify]),
        (Sqd, Sqd) => (NONE, &[PkeyIndex, Qkey]),
        _ => return None,
    })
}

impl Qp {
    /// Whether this is the GSI QP (QP1).
    pub fn is_gsi(&self) -> bool {
        self.qpn == GSI_QPN
    }

    /// The Q_Key a datagram must carry to be received: the GSI Q_Key on QP1 (rxe
    /// `check_keys`), else the QP's.
    pub fn expected_qkey(&self) -> u32 {
        if self.is_gsi() {
            GSI_QKEY
        } else {
            self.attrs.qkey
        }
    }

    /// UD: nothing to send until a command changes that (not in RTS, or queue empty).
    pub(crate) fn ud_stalled(&self) -> bool {
        self.state != QpState::Rts || self.sq.is_empty()
    }

    /// UD requester: the packet of the WQE at the head of the send queue, which completes
    /// as it is handed out (no ACK). WQEs longer than the port MTU complete on the way
    /// without a packet.
    pub(crate) fn ud_next_request(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
        let mtu = ctx.cfg.port_mtu;
        // Bounded by the queue: each pass pops one WQE or returns.
        while !self.ud_stalled() {
            let w = *self.sq.front()?;
            let psn = self.req.psn;
            let Some(dest) = w.ud else {
                // post_send refuses a UD WR without a destination: never here.
                self.sq.pop_front();
                let c = self.completion(w.wr_id, WcStatus::LocQpOpErr, WcOpcode::Send, 0);
                ctx.complete(self.send_cq, c);
                self.enter_error(ctx, true);
                return None;
            };
            if w.len > mtu {
                // C10-93.1.1: no packet, no error; rxe still consumes a PSN.
                self.sq.pop_front();
                self.req.psn = psn.add(1);
                ctx.stats.inc(Counter::UdSendTooLong);
                if w.flags.signaled {
                    let c = self.completion(w.wr_id, WcStatus::Success, WcOpcode::Send, w.len);
                    ctx.complete(self.send_cq, c);
                }
                continue;
            }
            let (opcode, imm) = match w.op {
                SendOp::SendWithImm { imm } => (op::UD_SEND_ONLY_WITH_IMMEDIATE, Some(imm)),
                _ => (op::UD_SEND_ONLY, None),
            };
            let len = w.len as usize;
            let repr = RoceRepr {
                deth: Some(DethRepr {
                    qkey: dest.remote_qkey,
                    src_qpn: self.qpn,
                }),
                immdt: imm.map(|imm| ImmDtRepr { imm }),
                payload_len: len,
                ..RoceRepr::new(BthRepr {
                    opcode,
                    solicited: w.flags.solicited,
                    migreq: false,
                    pad: RoceRepr::pad_for(len),
                    tver: 0,
                    pkey: self.attrs.pkey(),
                    fecn: false,
                    becn: false,
                    dqpn: dest.remote_qpn,
                    ack_req: false,
                    psn,
                })
            };
            let mut gathered = Ok(());
            let written = repr.emit_with(buf, |dst| {
                if !dst.is_empty() {
                    gathered = w.local.gather(ctx.mem, self.pd, 0, dst);
                }
            });
            let n = written.ok()?; // buffer too small: the caller's bug, nothing sent
            ctx.stats.note_mem(&gathered);
            self.sq.pop_front();
            if gathered.is_err() {
                // Local protection error (IBA 10.8.3.1): the WQE fails, the QP goes to
                // ERR (rxe: `req_error`), the rest is flushed.
                let c = self.completion(w.wr_id, WcStatus::LocProtErr, WcOpcode::Send, 0);
                ctx.complete(self.send_cq, c);
                self.enter_error(ctx, true);
                return None;
            }
            self.req.psn = psn.add(1);
            self.ud_tx_dst = Some(dest.dest_ip);
            ctx.stats.inc(Counter::RdmaSends);
            if w.flags.signaled {
                let c = self.completion(w.wr_id, WcStatus::Success, WcOpcode::Send, w.len);
                ctx.complete(self.send_cq, c);
            }
            return Some(n);
        }
        None
    }

    /// UD responder: one datagram (SEND only or SEND only with immediate, its headers
    /// checked by the ingress: transport, P_Key, state).
    pub(crate) fn ud_on_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        r: &RoceRepr,
        payload: &[u8],
        net: &NetHdr,
    ) {
        let Some(deth) = r.deth else {
            ctx.stats.inc(Counter::DropMalformed);
            return;
        };
        if deth.qkey != self.expected_qkey() {
            ctx.stats.inc(Counter::QkeyViolation);
            return;
        }
        // An "only" packet longer than the port MTU (rxe `check_length`, class D).
        if payload.len() > ctx.cfg.port_mtu as usize {
            ctx.stats.inc(Counter::DropMalformed);
            return;
        }
        // From the QP's RQ or its SRQ (`recv.rs`): a UD message is one packet, so the
        // WQE is taken and consumed at once.
        if self.recv_wqe(ctx).is_none() {
            ctx.stats.inc(Counter::UdDropNoRecvWqe);
            return;
        }
        let Some(wqe) = self.consume_recv_wqe() else {
            return;
        };
        let total = GRH_LEN + payload.len();
        let base = Completion {
            src_qp: deth.src_qpn,
            network_hdr: Some(match (net.src, net.dst) {
                (IpAddr::V4(_), IpAddr::V4(_)) => NetworkHdr::Ipv4,
                _ => NetworkHdr::Ipv6,
            }),
            ..self.completion(wqe.wr_id, WcStatus::Success, WcOpcode::Recv, 0)
        };
        if total > wqe.len as usize {
            let c = Completion {
                status: WcStatus::LocLenErr,
                ..base
            };
            return ctx.complete(self.recv_cq, c);
        }
        let hdr = network_header(net);
        let sges = wqe.sges.as_slice();
        let mut r1 = crate::mem::scatter(ctx.mem, self.pd, sges, 0, &hdr);
        if r1.is_ok() && !payload.is_empty() {
            r1 = crate::mem::scatter(ctx.mem, self.pd, sges, GRH_LEN as u64, payload);
        }
        ctx.stats.note_mem(&r1);
        if r1.is_err() {
            let c = Completion {
                status: WcStatus::LocProtErr,
                ..base
            };
            ctx.complete(self.recv_cq, c);
            return self.enter_error(ctx, true);
        }
        let c = Completion {
            byte_len: total as u32,
            imm: r.immdt.map(|i| i.imm),
            ..base
        };
        ctx.stats.inc(Counter::RdmaRecvs);
        ctx.complete(self.recv_cq, c);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn ipv4_slot_is_rxes_and_checksummed() {
        let h = NetHdr {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            ipv4_id: 0x1234,
            udp_payload: 100,
        };
        let g = network_header(&h);
        assert_eq!(g[..20], [0u8; 20]);
        assert_eq!(g[20], 0x45);
        assert_eq!(u16::from_be_bytes([g[22], g[23]]), 128);
        assert_eq!(u16::from_be_bytes([g[24], g[25]]), 0x1234);
        assert_eq!(g[29], 17);
        assert_eq!(g[32..36], [10, 0, 0, 1]);
        assert_eq!(g[36..40], [10, 0, 0, 2]);
        // A valid header sums to 0xffff with its checksum in.
        let mut sum = 0u32;
        for w in g[20..].chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
    }

    #[test]
    fn ipv6_slot_is_the_ipv6_header() {
        let h = NetHdr {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            ipv4_id: 0,
            udp_payload: 60,
        };
        let g = network_header(&h);
        assert_eq!(g[0] >> 4, 6);
        assert_eq!(u16::from_be_bytes([g[4], g[5]]), 68);
        assert_eq!((g[6], g[7]), (17, 64));
        assert_eq!(
            g[8..24],
            "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets()
        );
    }

    #[test]
    fn ud_source_port_is_rxes_hash() {
        // hash_32(0x11, 14) = (0x11 * 0x61C88647) >> 18.
        let h = 0x11u32.wrapping_mul(0x61C8_8647) >> 18;
        assert_eq!(ud_sport(0x11), 0xc000 | h as u16);
        assert!(ud_sport(0x12) >= 0xc000);
    }

    #[test]
    fn ud_transitions() {
        use QpState::*;
        assert_eq!(
            ud_rules(Reset, Init).unwrap().0,
            &[Attr::PkeyIndex, Attr::Port, Attr::Qkey]
        );
        assert!(ud_rules(Init, Rtr).unwrap().0.is_empty());
        assert_eq!(ud_rules(Rtr, Rts).unwrap().0, &[Attr::SqPsn]);
        assert!(ud_rules(Init, Rts).is_none());
    }
}
