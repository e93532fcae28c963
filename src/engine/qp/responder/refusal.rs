//! Debug lines for the requests the responder refuses with a NAK, so a user who sees a
//! remote error on the other side (or `naks_sent` here) can find why in the responder's
//! log (`ROCE_EMU_LOG=debug` in the drop-in, `-vv` in the tools). The engine stays
//! deterministic: `tracing` only reports, as quinn-proto's sans-IO core does; nothing here
//! changes what the engine does.

use crate::mem::{Access, MemError};
use crate::wire::Psn;

/// The R_Key, protection domain, rights or range of a WRITE, READ or atomic refused
/// (NAK Remote Access Error). The error names the region's bounds when the range is
/// outside them ([`MemError::OutOfRange`]).
pub(super) fn access(qpn: u32, op: &str, psn: Psn, rkey: u32, va: u64, len: u64, e: &MemError) {
    tracing::debug!(
        "QP {qpn:#x}: {op} PSN {} refused (NAK remote access error): rkey {rkey:#x}, VA \
         {va:#x}, length {len}: {e}",
        psn.value()
    );
}

/// The operation a RETH stands for, by the right it needs.
pub(super) fn op_of(need: Access) -> &'static str {
    if need == Access::REMOTE_READ {
        "READ"
    } else {
        "WRITE"
    }
}

/// A request packet whose payload does not fit the path MTU (NAK Invalid Request): larger
/// than the MTU, or a first or middle packet shorter than it. The peer's path MTU is
/// larger than this QP's (its `-m` differs).
pub(super) fn length(qpn: u32, psn: Psn, len: usize, mtu: u32) {
    let why = if len > mtu as usize {
        "over the path MTU: the requester's path MTU is larger than this QP's"
    } else {
        "a first or middle packet must carry exactly the path MTU"
    };
    tracing::debug!(
        "QP {qpn:#x}: request PSN {} refused (NAK invalid request): {len} bytes of payload \
         with path MTU {mtu}: {why}",
        psn.value()
    );
}
