//! One line per CM message (`roce-emu pcap`, logs): its name, communication IDs and the
//! fields a connection trace needs, with codes by name (REJ reasons, MRA's message, SIDR
//! and APR statuses) and rdma_cm's service IDs and `cma_hdr` spelt out.

use super::{apr, cma, mra, req, service_id, sidr_rep, sidr_req, CmMad, Message};
use crate::wire::mad;
use core::fmt;

impl req::Repr {
    /// rdma_cm's header at the start of the private data, when the service ID is an
    /// rdma_cm one and the header reads (`cma_get_net_info`). AF_IB connections (port
    /// space IB from an `sockaddr_ib`) carry none, and a header that does not read is
    /// `None` here rather than an error: the private data is then the user's.
    pub fn cma_hdr(&self) -> Option<cma::Repr> {
        cma_hdr(self.service_id, &self.private_data)
    }
}

impl sidr_req::Repr {
    /// As [`req::Repr::cma_hdr`].
    pub fn cma_hdr(&self) -> Option<cma::Repr> {
        cma_hdr(self.service_id, &self.private_data)
    }
}

fn cma_hdr(sid: u64, pd: &[u8]) -> Option<cma::Repr> {
    service_id::rdma_cm(sid)?;
    cma::Repr::parse(&cma::Packet::new_checked(pd).ok()?).ok()
}

/// The name of a `message_mraed` / `message_rejected` value.
pub const fn which_message(v: u8) -> &'static str {
    match v {
        0 => "REQ",
        1 => "REP",
        2 => "other",
        _ => "reserved",
    }
}

/// MRA calls its third value LAP where REJ calls it "other".
pub const fn mraed_name(v: u8) -> &'static str {
    match v {
        mra::MRAED_LAP => "LAP",
        v => which_message(v),
    }
}

/// A SIDR_REP status by name (IBA 12.11.2; Linux `enum ib_cm_sidr_status`).
pub const fn sidr_status_name(v: u8) -> Option<&'static str> {
    Some(match v {
        sidr_rep::STATUS_SUCCESS => "success",
        sidr_rep::STATUS_UNSUPPORTED => "unsupported",
        sidr_rep::STATUS_REJECT => "reject",
        sidr_rep::STATUS_NO_QP => "no QP",
        sidr_rep::STATUS_REDIRECT => "redirect",
        sidr_rep::STATUS_UNSUPPORTED_VERSION => "unsupported version",
        _ => return None,
    })
}

/// A CM timeout exponent as time: 4.096 µs · 2^t (IBA 12.7.33).
pub struct Timeout(pub u8);

impl fmt::Display for Timeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = 4096u64 << self.0.min(31);
        if ns < 1_000_000 {
            write!(f, "{:.1}us", ns as f64 / 1e3)
        } else if ns < 1_000_000_000 {
            write!(f, "{:.1}ms", ns as f64 / 1e6)
        } else {
            write!(f, "{:.1}s", ns as f64 / 1e9)
        }
    }
}

/// ` sid=0x... (TCP port 7174)`: the service ID, and its port space and port when it is an
/// rdma_cm one.
struct Sid(u64);

impl fmt::Display for Sid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, " sid={:#018x}", self.0)?;
        if let Some((ps, port)) = service_id::rdma_cm(self.0) {
            write!(f, " ({ps} port {port})")?;
        }
        Ok(())
    }
}

impl Message {
    /// The IBA's short name of the message.
    pub const fn name(&self) -> &'static str {
        match self {
            Message::Req(_) => "REQ",
            Message::Mra(_) => "MRA",
            Message::Rej(_) => "REJ",
            Message::Rep(_) => "REP",
            Message::Rtu(_) => "RTU",
            Message::Dreq(_) => "DREQ",
            Message::Drep(_) => "DREP",
            Message::SidrReq(_) => "SIDR_REQ",
            Message::SidrRep(_) => "SIDR_REP",
            Message::Lap(_) => "LAP",
            Message::Apr(_) => "APR",
            Message::ClassPortInfo(_) => "ClassPortInfo",
        }
    }

    /// (local, remote) communication IDs, for the messages that carry them (SIDR's
    /// request ID is the local one).
    pub const fn comm_ids(&self) -> (Option<u32>, Option<u32>) {
        match self {
            Message::Req(r) => (Some(r.local_comm_id), None),
            Message::Mra(r) => (Some(r.local_comm_id), Some(r.remote_comm_id)),
            Message::Rej(r) => (Some(r.local_comm_id), Some(r.remote_comm_id)),
            Message::Rep(r) => (Some(r.local_comm_id), Some(r.remote_comm_id)),
            Message::Rtu(r) => (Some(r.local_comm_id), Some(r.remote_comm_id)),
            Message::Dreq(r) => (Some(r.local_comm_id), Some(r.remote_comm_id)),
            Message::Drep(r) => (Some(r.local_comm_id), Some(r.remote_comm_id)),
            Message::SidrReq(r) => (Some(r.request_id), None),
            Message::SidrRep(r) => (Some(r.request_id), None),
            Message::Lap(r) => (Some(r.local_comm_id), Some(r.remote_comm_id)),
            Message::Apr(r) => (Some(r.local_comm_id), Some(r.remote_comm_id)),
            Message::ClassPortInfo(_) => (None, None),
        }
    }
}

/// One line: the message, its communication IDs and the fields a connection trace needs.
impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CM {}", self.name())?;
        match self.comm_ids() {
            (Some(l), Some(r)) => write!(f, " lcid={l:#010x} rcid={r:#010x}")?,
            (Some(l), None) if matches!(self, Message::Req(_)) => write!(f, " lcid={l:#010x}")?,
            (Some(id), None) => write!(f, " id={id:#010x}")?,
            _ => {}
        }
        match self {
            Message::Req(r) => {
                write!(
                    f,
                    "{} qpn={:#x} psn={:#x} mtu={}",
                    Sid(r.service_id),
                    r.local_qpn,
                    r.starting_psn,
                    r.path_mtu
                )?;
                if let Some(h) = r.cma_hdr() {
                    write!(f, " {h}")?;
                }
                Ok(())
            }
            Message::Rep(r) => write!(f, " qpn={:#x} psn={:#x}", r.local_qpn, r.starting_psn),
            Message::Rtu(_) | Message::Drep(_) => Ok(()),
            Message::Dreq(r) => write!(f, " qpn={:#x}", r.remote_qpn),
            Message::Mra(r) => write!(
                f,
                " mraed={} timeout={} ({})",
                mraed_name(r.message_mraed),
                r.service_timeout,
                Timeout(r.service_timeout)
            ),
            Message::Rej(r) => write!(
                f,
                " rejected={} reason={}",
                which_message(r.message_rejected),
                r.reason
            ),
            Message::SidrReq(r) => {
                write!(f, "{}", Sid(r.service_id))?;
                if let Some(h) = r.cma_hdr() {
                    write!(f, " {h}")?;
                }
                Ok(())
            }
            Message::SidrRep(r) => {
                match sidr_status_name(r.status) {
                    Some(n) => write!(f, " status={n} ({})", r.status)?,
                    None => write!(f, " status={}", r.status)?,
                }
                write!(f, " qpn={:#x} qkey={:#x}", r.qpn, r.qkey)
            }
            Message::Lap(r) => write!(f, " qpn={:#x}", r.remote_qpn),
            Message::Apr(r) => write!(f, " status={}", apr::Status(r.ap_status)),
            Message::ClassPortInfo(r) => write!(
                f,
                " v{} cap={:#06x} resp_time={}",
                r.class_version, r.capability_mask, r.resp_time_value
            ),
        }
    }
}

impl fmt::Display for CmMad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.msg)?;
        let h = &self.header;
        if h.method != mad::METHOD_SEND {
            write!(f, " method={:#04x}", h.method)?;
        }
        if h.status != 0 {
            write!(f, " status={:#06x}", h.status)?;
        }
        write!(f, " tid={:#x}", h.tid)
    }
}
