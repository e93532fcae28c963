//! Errors returned to the application for API misuse. Network input never produces an
//! error: it is counted ([`super::stats`]) and maybe NAKed.

use super::state::QpState;
use crate::mem::MemError;

/// Which work queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    Send,
    Recv,
}

impl core::fmt::Display for Queue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Queue::Send => "send",
            Queue::Recv => "receive",
        })
    }
}

/// A verbs call the engine refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    /// No QP with this number.
    #[error("no QP {0:#x}")]
    NoSuchQp(u32),
    /// No CQ with this handle.
    #[error("no CQ {0}")]
    NoSuchCq(u32),
    /// Every QPN is in use (2 to 2^24 - 1: 0 and 1 name the special QPs).
    #[error("no free QPN: every QPN is in use")]
    NoFreeQpn,
    /// Every CQ handle is in use.
    #[error("no free CQ handle: every one is in use")]
    NoFreeCq,
    /// The CQ is still used by a QP.
    #[error("CQ {cq} is in use by QP {qpn:#x}")]
    CqInUse { cq: u32, qpn: u32 },
    /// The operation is not allowed in the QP's current state.
    #[error("QP {qpn:#x} is in state {state}: cannot {op}")]
    InvalidState {
        qpn: u32,
        state: QpState,
        op: &'static str,
    },
    /// The work queue is full (its depth was set at create time).
    #[error("QP {qpn:#x} {queue} queue is full ({depth} work requests outstanding)")]
    QueueFull {
        qpn: u32,
        queue: Queue,
        depth: usize,
    },
    /// More SGEs than the QP was created for.
    #[error("{n} SGEs given, the QP allows {max}")]
    TooManySge { n: usize, max: usize },
    /// Inline data longer than the QP allows.
    #[error("{len} bytes of inline data, the QP allows {max}")]
    InlineTooLong { len: usize, max: usize },
    /// A message longer than 2^31 bytes (IBA 9.4.1: message size limit).
    #[error("message of {len} bytes exceeds the 2^31-byte limit")]
    MessageTooLong { len: u64 },
    /// An atomic needs exactly one 8-byte local buffer (or 8 bytes inline is refused).
    #[error("atomic operations need one 8-byte local SGE, got {len} bytes")]
    AtomicLength { len: u64 },
    /// A remote atomic address that is not 8-byte aligned (IBA 9.4.5).
    #[error("atomic remote address {va:#x} is not 8-byte aligned")]
    AtomicAlignment { va: u64 },
    /// This transition is not in the QP state diagram (IBA 10.3.1, Figure 124).
    #[error("QP {qpn:#x}: no transition from {from} to {to}")]
    InvalidTransition {
        qpn: u32,
        from: QpState,
        to: QpState,
    },
    /// A transition requires an attribute that was not given (ibv_modify_qp rules).
    #[error("QP {qpn:#x}: {from} -> {to} requires attribute {attr}")]
    MissingAttr {
        qpn: u32,
        from: QpState,
        to: QpState,
        attr: &'static str,
    },
    /// An attribute given that this transition does not accept.
    #[error("QP {qpn:#x}: {from} -> {to} does not accept attribute {attr}")]
    UnexpectedAttr {
        qpn: u32,
        from: QpState,
        to: QpState,
        attr: &'static str,
    },
    /// An attribute with a value out of range.
    #[error("attribute {attr} = {value}: {why}")]
    InvalidAttr {
        attr: &'static str,
        value: u64,
        why: &'static str,
    },
    /// A queue depth, SGE or inline capacity beyond the engine's limits.
    #[error("{what} = {asked} exceeds the limit {max}")]
    CapTooLarge {
        what: &'static str,
        asked: usize,
        max: usize,
    },
    /// No SRQ with this handle.
    #[error("no SRQ {0}")]
    NoSuchSrq(u32),
    /// Every SRQ handle is in use.
    #[error("no free SRQ handle: every one is in use")]
    NoFreeSrq,
    /// The SRQ is still used by a QP (destroy the QPs first).
    #[error("SRQ {srq} is in use by QP {qpn:#x}")]
    SrqInUse { srq: u32, qpn: u32 },
    /// The SRQ holds `depth` WQEs already.
    #[error("SRQ {srq} is full ({depth} work requests outstanding)")]
    SrqFull { srq: u32, depth: usize },
    /// A receive WR posted to a QP that takes its receives from an SRQ.
    #[error("QP {qpn:#x} receives from SRQ {srq}: post receive WRs with post_srq_recv")]
    QpOnSrq { qpn: u32, srq: u32 },
    /// A QP type not implemented.
    #[error("QP type {0} is not supported yet")]
    UnsupportedQpType(&'static str),
    /// A send on a UD QP names no destination (`post_send_ud` gives the address handle,
    /// the remote QPN and Q_Key).
    #[error("QP {qpn:#x} is UD: a send needs a destination (address, remote QPN, Q_Key)")]
    UdNeedsDest { qpn: u32 },
    /// A UD destination given for a send on a connected QP (its peer is fixed).
    #[error("QP {qpn:#x} is connected: a send takes no UD destination")]
    NotUd { qpn: u32 },
    /// An operation the QP's transport does not have (IBA 9.8.1: UC carries SEND and
    /// RDMA WRITE, with or without immediate; UD SEND and SEND with immediate only;
    /// ibv_post_send's EINVAL).
    #[error("QP {qpn:#x} is {qp_type}: {op} is not available on it")]
    OpNotOnQpType {
        qpn: u32,
        op: &'static str,
        qp_type: &'static str,
    },
    /// QPN 1 (the GSI QP) exists already.
    #[error("the GSI QP (QPN 1) exists already")]
    GsiExists,
    /// A memory registration problem.
    #[error("CQ {cq} holds {held} completions: cannot resize it to {asked}")]
    CqResize { cq: u32, asked: usize, held: usize },

    #[error(transparent)]
    Mem(#[from] MemError),
}
