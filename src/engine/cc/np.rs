//! The notification point (IBA Annex A17.9): a CE-marked RoCE packet that passed the
//! ingress checks for a QP is answered with a CNP to the QP that sent it, at most one per
//! `min_time_between_cnps` (mlx5 `np_min_time_between_cnps`) per peer QP.

use super::CcConfig;
use crate::engine::Instant;
use crate::wire::opcode::op;
use crate::wire::{BthRepr, Psn, RoceRepr};
use rustc_hash::FxHashMap;
use std::net::IpAddr;

/// A CNP waiting for `poll_transmit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingCnp {
    /// Our QP (its P_Key and UDP source port).
    pub qpn: u32,
    /// The sender of the marked packet: its address and QPN (the CNP's DestQP).
    pub peer_ip: IpAddr,
    pub peer_qpn: u32,
}

/// Most CNPs queued at once; more are coalesced away (the NP paces them anyway).
pub const MAX_PENDING: usize = 1024;

/// One QP's NP state: when the last CNP went to each peer QP (RC/UC: one peer; UD: one
/// entry per sender, pruned so that it cannot grow without bound).
#[derive(Debug, Default)]
pub struct Np {
    last: FxHashMap<(IpAddr, u32), Instant>,
}

/// Peers remembered per QP before old entries are pruned.
const MAX_PEERS: usize = 256;

impl Np {
    /// A CE-marked packet from `peer`: whether a CNP may go now.
    pub fn may_send(&mut self, now: Instant, peer: (IpAddr, u32), cfg: &CcConfig) -> bool {
        let gap = u128::from(cfg.min_time_between_cnps) * 1_000;
        if let Some(&at) = self.last.get(&peer) {
            if now.since(at).as_nanos() < gap {
                return false;
            }
        }
        if self.last.len() >= MAX_PEERS {
            // Entries older than the gap say nothing any more.
            self.last.retain(|_, at| now.since(*at).as_nanos() < gap);
            if self.last.len() >= MAX_PEERS {
                self.last.clear();
            }
        }
        self.last.insert(peer, now);
        true
    }
}

/// The CNP to `peer_qpn` (A17.9.3; the bytes of a real one: `81 00 ff ff | 40 00 00 d2 |
/// 00 00 00 00 | 16x00 | ICRC`): opcode 0x81, BECN set, our P_Key, PSN 0, AckReq 0, 16
/// zero bytes. The ICRC is left zero for the caller to fill.
pub fn cnp_repr(pkey: u16, peer_qpn: u32) -> RoceRepr {
    RoceRepr::new(BthRepr {
        opcode: op::CNP,
        solicited: false,
        migreq: false,
        pad: 0,
        tver: 0,
        pkey,
        fecn: false,
        becn: true,
        dqpn: peer_qpn,
        ack_req: false,
        psn: Psn::new(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cnp_bytes_are_a17s() {
        let mut buf = [0xaau8; 64];
        let n = cnp_repr(0xffff, 0xd2).emit(&mut buf, &[]).unwrap();
        assert_eq!(n, 32);
        assert_eq!(
            &buf[..12],
            &[0x81, 0, 0xff, 0xff, 0x40, 0, 0, 0xd2, 0, 0, 0, 0]
        );
        assert!(buf[12..32].iter().all(|&b| b == 0));
    }

    #[test]
    fn pacing_per_peer() {
        let cfg = CcConfig::default(); // 4 µs
        let ip: IpAddr = "198.18.0.1".parse().unwrap();
        let mut np = Np::default();
        let t = |us: u64| Instant::from_nanos(us * 1000);
        assert!(np.may_send(t(10), (ip, 5), &cfg));
        assert!(!np.may_send(t(13), (ip, 5), &cfg));
        assert!(np.may_send(t(13), (ip, 6), &cfg));
        assert!(np.may_send(t(14), (ip, 5), &cfg));
        let zero: CcConfig = "min_time_between_cnps=0".parse().unwrap();
        assert!(np.may_send(t(14), (ip, 5), &zero));
    }
}
