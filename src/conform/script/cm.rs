//! The connection manager's statements (`role cm_passive`): a MAD as `send mad` and
//! `expect mad` name it, and rdma_cm's event names.

use super::args::Args;
use crate::conform::cm;

/// A CM MAD as a script names it: the message and the fields given (values resolved when
/// run: numbers, or `ours`, `theirs`, `sent`, `got`, `target_qpn`, `target_rq_psn`,
/// `peer_qpn`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadSpec {
    pub name: &'static str,
    pub attr: u16,
    pub fields: Vec<(String, String)>,
}

/// rdma_cm's event names without `RDMA_CM_EVENT_` (`enum rdma_cm_event_type`).
pub const CM_EVENTS: &[&str] = &[
    "ADDR_RESOLVED",
    "ADDR_ERROR",
    "ROUTE_RESOLVED",
    "ROUTE_ERROR",
    "CONNECT_REQUEST",
    "CONNECT_RESPONSE",
    "CONNECT_ERROR",
    "UNREACHABLE",
    "REJECTED",
    "ESTABLISHED",
    "DISCONNECTED",
    "DEVICE_REMOVAL",
    "MULTICAST_JOIN",
    "MULTICAST_ERROR",
    "ADDR_CHANGE",
    "TIMEWAIT_EXIT",
];

/// `NAME field=value ...` after `send mad` or `expect mad`.
pub(super) fn mad_spec(a: &mut Args<'_>) -> Result<MadSpec, String> {
    let names: Vec<&str> = cm::NAMES.iter().map(|(n, _)| *n).collect();
    let w = a
        .word_in(&names)
        .ok_or_else(|| format!("mad needs a message: {}", names.join(" ")))?;
    let (name, attr) = cm::attr_by_name(w).ok_or("unknown message")?;
    let fields = a.rest();
    for (k, _) in &fields {
        if !cm::known(attr, k) {
            return Err(format!(
                "{k}= is not a field of {name}: tid {}",
                cm::fields(attr).join(" ")
            ));
        }
    }
    Ok(MadSpec { name, attr, fields })
}
