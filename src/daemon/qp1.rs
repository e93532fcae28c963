//! QP1, the General Services Interface QP (IBA 13.4.5), in the daemon: the management
//! datagrams of the connection manager (`crate::cm::Cm`) as RoCEv2 packets. Sans-IO: a
//! received packet's bytes in, its MAD (or why it was dropped) out; a MAD in, the packet
//! (BTH through ICRC) out.
//!
//! What a packet to QP1 must be, as rxe checks it (`rxe_recv.c`: `hdr_check`, `check_keys`,
//! then `rxe_icrc_check`) and the kernel's MAD layer takes it (`ib_mad_recv_done`: one
//! whole MAD):
//! - transport header version 0 (`hdr_check`);
//! - UD SEND ONLY (0x64): the GSI QP is a UD QP (`check_type_state`: a non-UD opcode to a
//!   UD QP is dropped); a MAD has no immediate data, so SEND ONLY WITH IMMEDIATE is dropped
//!   too;
//! - P_Key 0xFFFF or 0x7FFF (`check_keys` matches the port's default P_Key 0xFFFF with
//!   `pkey_match`: same low 15 bits, one of the two a full member), else rxe's
//!   `bad_pkey_cntr`;
//! - DETH Q_Key 0x80010000 (`check_keys`: for QP1 always `GSI_QKEY`), else rxe's
//!   `qkey_viol_cntr`;
//! - a valid ICRC (A17.4.1);
//! - a payload of exactly one 256-byte MAD (IBA 13.4.1) and no pad.
//!
//! What leaves, as rxe's requester builds a GSI send (`rxe_req.c`, `init_req_packet`):
//! UD SEND ONLY, P_Key 0xFFFF, DestQP 1, no AckReq, the PSN of QP1's own send sequence
//! (the kernel's MAD layer starts it at 0, `ib_mad_change_qp_state_to_rts`), DETH Q_Key
//! 0x80010000 and source QP 1, the MAD, and the ICRC computed for IPv4 identification 0
//! (what a UDP port's socket sends with DF set, and what a frame port rebases from).

use crate::wire::icrc::{self, Ipv4IdSolver, PseudoHeaders};
use crate::wire::opcode::op;
use crate::wire::{bth, deth, BthRepr, DethRepr, Psn, RoceRepr, ICRC_LEN};
use serde::Serialize;
use std::net::SocketAddr;

/// The GSI QP's number (IBA 13.4.5).
pub const GSI_QPN: u32 = 1;
/// The Q_Key of every GSI datagram (IBA 13.4.5, `IB_QP1_QKEY`).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// A MAD (IBA 13.4.1).
pub const MAD_LEN: usize = crate::wire::mad::MAD_LEN;
/// The port's default P_Key, a full member (IBA 10.9.1.2); rxe's only one.
pub const DEFAULT_PKEY: u16 = bth::DEFAULT_PKEY;
/// A QP1 packet from BTH through ICRC.
pub const PACKET_LEN: usize = bth::HEADER_LEN + deth::HEADER_LEN + MAD_LEN + ICRC_LEN;
/// The MAD's offset in the packet.
const MAD_AT: usize = bth::HEADER_LEN + deth::HEADER_LEN;

/// Why a packet to QP1 was not handed to the connection manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drop {
    /// Shorter than BTH + DETH + ICRC.
    Short,
    /// Transport header version other than 0.
    Tver,
    /// Not UD SEND ONLY.
    Opcode,
    /// P_Key other than 0xFFFF / 0x7FFF.
    Pkey,
    /// DETH Q_Key other than the GSI Q_Key.
    Qkey,
    /// The ICRC does not match (or, over IPv4 through a UDP socket, no identification
    /// makes it match).
    Icrc,
    /// Valid headers, but the payload is not one 256-byte MAD.
    Length,
}

/// QP1's counters (in `roce-emu counters` under `qp1`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Qp1Counters {
    /// MADs received and handed to the connection manager.
    pub rcvd_pkts: u64,
    /// MADs sent on the port.
    pub sent_pkts: u64,
    /// MADs to one of the port's own addresses, handed straight back (never on the wire).
    pub hairpin_pkts: u64,
    /// MADs the connection manager addressed from no address of the port (dropped).
    pub bad_source: u64,
    pub drop_short: u64,
    pub drop_tver: u64,
    pub drop_opcode: u64,
    /// rxe's `bad_pkey_cntr` (a port attribute, `set_bad_pkey_cntr` in `check_keys`): a
    /// P_Key that does not match the default one.
    pub bad_pkey_cntr: u64,
    /// rxe's `qkey_viol_cntr` (a port attribute, `set_qkey_viol_cntr` in `check_keys`): a
    /// DETH Q_Key other than the GSI Q_Key.
    pub qkey_viol_cntr: u64,
    pub drop_bad_icrc: u64,
    pub drop_length: u64,
}

impl Qp1Counters {
    pub fn count(&mut self, d: Drop) {
        let c = match d {
            Drop::Short => &mut self.drop_short,
            Drop::Tver => &mut self.drop_tver,
            Drop::Opcode => &mut self.drop_opcode,
            Drop::Pkey => &mut self.bad_pkey_cntr,
            Drop::Qkey => &mut self.qkey_viol_cntr,
            Drop::Icrc => &mut self.drop_bad_icrc,
            Drop::Length => &mut self.drop_length,
        };
        *c += 1;
    }

    /// Every drop.
    pub fn dropped(&self) -> u64 {
        self.drop_short
            + self.drop_tver
            + self.drop_opcode
            + self.bad_pkey_cntr
            + self.qkey_viol_cntr
            + self.drop_bad_icrc
            + self.drop_length
    }
}

/// Whether a packet (BTH on) is for QP1: its BTH DestQP (bytes 5..8, IBA 9.2). Too short
/// to say is not for QP1 (the router counts it as malformed).
pub fn is_for_qp1(pkt: &[u8]) -> bool {
    pkt.len() >= bth::HEADER_LEN && bth::Packet::new_unchecked(pkt).dqpn() == GSI_QPN
}

/// How a received packet's IP and UDP headers are known: its addresses, and its IPv4
/// identification when the port saw the IP header (a frame port; `None` through a UDP
/// socket, where it is solved from the ICRC as the engine does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub ipv4_id: Option<u16>,
}

/// Checks a packet for QP1 (BTH through ICRC) in rxe's order; its MAD, or why not.
pub fn parse<'a>(net: &Net, pkt: &'a [u8], solver: &mut Ipv4IdSolver) -> Result<&'a [u8], Drop> {
    if pkt.len() < MAD_AT + ICRC_LEN {
        return Err(Drop::Short);
    }
    let b = bth::Packet::new_unchecked(&pkt[..bth::HEADER_LEN]);
    if b.tver() != 0 {
        return Err(Drop::Tver);
    }
    if b.opcode() != op::UD_SEND_ONLY {
        return Err(Drop::Opcode);
    }
    if b.pkey() & 0x7fff != DEFAULT_PKEY & 0x7fff {
        return Err(Drop::Pkey);
    }
    let d = deth::Packet::new_unchecked(&pkt[bth::HEADER_LEN..MAD_AT]);
    if d.qkey() != GSI_QKEY {
        return Err(Drop::Qkey);
    }
    check_icrc(net, pkt, solver)?;
    let pad = usize::from(b.pad());
    if pad != 0 || pkt.len() != PACKET_LEN {
        return Err(Drop::Length);
    }
    Ok(&pkt[MAD_AT..MAD_AT + MAD_LEN])
}

fn check_icrc(net: &Net, pkt: &[u8], solver: &mut Ipv4IdSolver) -> Result<(), Drop> {
    let ok = match (net.src, net.ipv4_id) {
        // A UDP socket does not see the IPv4 identification, which the ICRC covers: the
        // one that makes it match is solved for (`wire::icrc::Ipv4IdSolver`).
        (SocketAddr::V4(_), None) => {
            let ph = PseudoHeaders::new(net.src, net.dst, 0, pkt.len());
            solver.solve(ph.ip(), ph.udp(), pkt).is_ok()
        }
        (_, id) => {
            let ph = PseudoHeaders::new(net.src, net.dst, id.unwrap_or(0), pkt.len());
            icrc::verify(ph.ip(), ph.udp(), pkt).is_ok()
        }
    };
    if ok {
        Ok(())
    } else {
        Err(Drop::Icrc)
    }
}

/// QP1's send side: its PSN sequence.
#[derive(Debug, Clone, Default)]
pub struct Sender {
    psn: Psn,
}

impl Sender {
    /// A send sequence from PSN 0, as the kernel's MAD layer starts QP1.
    pub fn new() -> Sender {
        Sender::default()
    }

    /// Writes the packet carrying `mad` from `src` to `dst` (BTH through ICRC, ICRC for
    /// IPv4 identification 0) into `buf[..PACKET_LEN]`; its length. The PSN advances.
    pub fn build(&mut self, src: SocketAddr, dst: SocketAddr, mad: &[u8], buf: &mut [u8]) -> usize {
        let repr = RoceRepr {
            deth: Some(DethRepr {
                qkey: GSI_QKEY,
                src_qpn: GSI_QPN,
            }),
            payload_len: MAD_LEN,
            ..RoceRepr::new(BthRepr {
                opcode: op::UD_SEND_ONLY,
                solicited: false,
                migreq: false,
                pad: 0,
                tver: 0,
                pkey: DEFAULT_PKEY,
                fecn: false,
                becn: false,
                dqpn: GSI_QPN,
                ack_req: false,
                psn: self.psn,
            })
        };
        let n = repr
            .emit_with(&mut buf[..PACKET_LEN], |p| {
                let m = mad.len().min(MAD_LEN);
                p[..m].copy_from_slice(&mad[..m]);
                p[m..].fill(0);
            })
            .expect("a UD SEND ONLY of one MAD fits PACKET_LEN bytes");
        let ph = PseudoHeaders::new(src, dst, 0, n);
        // Cannot fail: the pseudo headers are whole and the packet longer than a BTH.
        let _ = icrc::fill(ph.ip(), ph.udp(), &mut buf[..n]);
        self.psn = self.psn.add(1);
        n
    }
}

#[cfg(test)]
mod tests;
