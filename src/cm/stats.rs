//! The connection manager's counters (`roce-emu counters`): MADs in and out by message,
//! retransmissions, timeouts, and every dropped MAD with its reason (as the engine's
//! `stats.rs`; the kernel's `cm_rx_msgs`/`cm_tx_msgs`/`cm_tx_retries`/`cm_rx_duplicates`).

use serde::Serialize;

/// Counts per CM message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PerMsg {
    pub req: u64,
    pub mra: u64,
    pub rej: u64,
    pub rep: u64,
    pub rtu: u64,
    pub dreq: u64,
    pub drep: u64,
    pub sidr_req: u64,
    pub sidr_rep: u64,
}

impl PerMsg {
    pub(crate) fn bump(&mut self, attr_id: u16) {
        use crate::wire::mad::attr;
        let c = match attr_id {
            attr::REQ => &mut self.req,
            attr::MRA => &mut self.mra,
            attr::REJ => &mut self.rej,
            attr::REP => &mut self.rep,
            attr::RTU => &mut self.rtu,
            attr::DREQ => &mut self.dreq,
            attr::DREP => &mut self.drep,
            attr::SIDR_REQ => &mut self.sidr_req,
            attr::SIDR_REP => &mut self.sidr_rep,
            _ => return,
        };
        *c += 1;
    }

    pub fn total(&self) -> u64 {
        self.req
            + self.mra
            + self.rej
            + self.rep
            + self.rtu
            + self.dreq
            + self.drep
            + self.sidr_req
            + self.sidr_rep
    }
}

/// Why a MAD was dropped (each a counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Shorter than 256 bytes, or a field the wire view refuses.
    Malformed,
    /// Not base version 1 / class 0x07 version 2 / method Send.
    NotCm,
    /// LAP, APR, ClassPortInfo or an unknown attribute (not served on RoCE, as the kernel).
    Unsupported,
    /// Names no connection here, or one in a state that does not take it.
    Unmatched,
    /// A duplicate the protocol answers with nothing (dup REQ before the MRA, ...).
    Duplicate,
    /// A REQ or SIDR_REQ whose rdma_cm header is bad.
    BadCmaHeader,
    /// A connect request refused because the listener's backlog is full (no REJ, so the
    /// peer retries, as ucma).
    Backlog,
    /// An address resolution answer for an id that no longer waits for one.
    StaleResolve,
}

/// Dropped MADs and answers, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Drops {
    pub malformed: u64,
    pub not_cm: u64,
    pub unsupported: u64,
    pub unmatched: u64,
    pub duplicate: u64,
    pub bad_cma_header: u64,
    pub backlog: u64,
    pub stale_resolve: u64,
}

/// Everything [`super::Cm::stats`] reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CmStats {
    /// MADs received, by message (before any drop but `malformed`/`not_cm`/`unsupported`).
    pub mads_in: PerMsg,
    /// MADs sent, by message (retransmissions included).
    pub mads_out: PerMsg,
    /// Retransmissions, by message.
    pub retries: PerMsg,
    /// Requests whose retries ran out (REQ, REP, DREQ, SIDR_REQ) or address resolutions
    /// that timed out.
    pub timeouts: u64,
    /// Duplicates answered (MRA, RTU or DREP again).
    pub duplicates_answered: u64,
    pub drops: Drops,
    /// Events handed to owners.
    pub events: u64,
    /// REQs that found no listener on a port just unlistened by its owner, and waited
    /// for the next listen there (`relisten`).
    pub reqs_held: u64,
    /// Of those, the ones no listener came back for: REJ(invalid service ID), late.
    pub reqs_held_rejected: u64,
}

impl CmStats {
    pub(crate) fn drop(&mut self, why: DropReason) {
        let d = &mut self.drops;
        let c = match why {
            DropReason::Malformed => &mut d.malformed,
            DropReason::NotCm => &mut d.not_cm,
            DropReason::Unsupported => &mut d.unsupported,
            DropReason::Unmatched => &mut d.unmatched,
            DropReason::Duplicate => &mut d.duplicate,
            DropReason::BadCmaHeader => &mut d.bad_cma_header,
            DropReason::Backlog => &mut d.backlog,
            DropReason::StaleResolve => &mut d.stale_resolve,
        };
        *c += 1;
    }

    /// Every dropped MAD or answer.
    pub fn dropped(&self) -> u64 {
        let d = &self.drops;
        d.malformed
            + d.not_cm
            + d.unsupported
            + d.unmatched
            + d.duplicate
            + d.bad_cma_header
            + d.backlog
            + d.stale_resolve
    }
}
