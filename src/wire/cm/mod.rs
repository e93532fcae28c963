//! Communication manager messages (IBA chapter 12.6; Linux
//! `include/rdma/ibta_vol1_c12.h`): the 232 bytes after the [`super::mad`] header of a
//! CM MAD (class 0x07), which travels as a UD SEND ONLY to QP1 behind BTH and DETH.
//!
//! Each message is a module with the wire contract's two levels: `Packet`, a view over
//! the message (offset 0 = MAD byte 24), and `Repr` with `parse`/`emit`. Bit fields are
//! numbered from the least significant bit, so the IBA's MSB-first `byte 43 [7:3]` is
//! `bits(43, 3, 5)` in the field lists. Every message is [`MSG_LEN`] bytes long (private
//! data fills the rest), so one length check covers every accessor.
//!
//! [`Message`] picks the message by attribute ID and [`CmMad`] reads or writes a whole
//! 256-byte MAD. [`cma`] is rdma_cm's header inside REQ/SIDR_REQ private data, and
//! [`service_id`] its service IDs.

mod alt;
pub mod cma;
mod conn;
pub mod cpi;
pub(crate) mod fields;
mod path;
pub mod rep;
pub mod req;
pub mod show;
mod sidr;

pub use alt::{apr, lap};
pub use conn::{drep, dreq, mra, rej, rtu};
pub use sidr::{sidr_rep, sidr_req};

use super::mad::{self, attr};
use super::{Header, Result, WireError};
use core::fmt;

/// Bytes of every CM message: the MAD's data after its 24-byte header.
pub const MSG_LEN: usize = mad::DATA_LEN;

macro_rules! rej_reasons {
    ($($(#[$doc:meta])* $name:ident = $code:expr, $text:expr;)+) => {
        /// Why a REJ rejects (IBA 12.6.7.2, the reason table after Table 108, REJ contents;
        /// Linux `enum ib_cm_rej_reason`).
        /// Codes this table does not name are kept as `Other`, so every value round-trips.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum RejReason {
            $($(#[$doc])* $name,)+
            Other(u16),
        }

        impl RejReason {
            pub const fn from_code(code: u16) -> RejReason {
                match code {
                    $($code => RejReason::$name,)+
                    c => RejReason::Other(c),
                }
            }
            pub const fn code(self) -> u16 {
                match self {
                    $(RejReason::$name => $code,)+
                    RejReason::Other(c) => c,
                }
            }
            /// The kernel's name (`ibcm_rej_reason_strs`), or `None` for `Other`.
            pub const fn name(self) -> Option<&'static str> {
                match self {
                    $(RejReason::$name => Some($text),)+
                    RejReason::Other(_) => None,
                }
            }
        }
    };
}

rej_reasons! {
    NoQp = 1, "no QP";
    NoEec = 2, "no EEC";
    NoResources = 3, "no resources";
    Timeout = 4, "timeout";
    Unsupported = 5, "unsupported";
    InvalidCommId = 6, "invalid comm ID";
    InvalidCommInstance = 7, "invalid comm instance";
    /// No listener on the service ID.
    InvalidServiceId = 8, "invalid service ID";
    InvalidTransportType = 9, "invalid transport type";
    StaleConn = 10, "stale conn";
    RdcNotExist = 11, "RDC not exist";
    InvalidGid = 12, "invalid GID";
    InvalidLid = 13, "invalid LID";
    InvalidSl = 14, "invalid SL";
    InvalidTrafficClass = 15, "invalid traffic class";
    InvalidHopLimit = 16, "invalid hop limit";
    InvalidPacketRate = 17, "invalid packet rate";
    InvalidAltGid = 18, "invalid alt GID";
    InvalidAltLid = 19, "invalid alt LID";
    InvalidAltSl = 20, "invalid alt SL";
    InvalidAltTrafficClass = 21, "invalid alt traffic class";
    InvalidAltHopLimit = 22, "invalid alt hop limit";
    InvalidAltPacketRate = 23, "invalid alt packet rate";
    PortCmRedirect = 24, "port CM redirect";
    PortRedirect = 25, "port redirect";
    InvalidMtu = 26, "invalid MTU";
    InsufficientRespResources = 27, "insufficient resp resources";
    /// `rdma_reject`: the application said no.
    ConsumerDefined = 28, "consumer defined";
    InvalidRnrRetry = 29, "invalid RNR retry";
    DuplicateLocalCommId = 30, "duplicate local comm ID";
    InvalidClassVersion = 31, "invalid class version";
    InvalidFlowLabel = 32, "invalid flow label";
    InvalidAltFlowLabel = 33, "invalid alt flow label";
    /// ECE: the vendor option is not supported.
    VendorOptionNotSupported = 35, "vendor option not supported";
}

impl fmt::Display for RejReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({})", self.code()),
            None => write!(f, "reason {}", self.code()),
        }
    }
}

/// rdma_cm service IDs (`rdma_get_service_id` in the kernel's `cma.c`; IBA Annex A11,
/// "RDMA IP CM Service"): `(port space << 16) | port`, which puts the IP CM prefix
/// 0x0000000001 in the top 40 bits and the protocol (0x06 TCP, 0x11 UDP) in the next 8.
pub mod service_id {
    /// `RDMA_PS_IPOIB`.
    pub const PS_IPOIB: u16 = 0x0002;
    /// `RDMA_PS_TCP`: RC connections (rping, rdma_server, ...).
    pub const PS_TCP: u16 = 0x0106;
    /// `RDMA_PS_UDP`: UD through SIDR.
    pub const PS_UDP: u16 = 0x0111;
    /// `RDMA_PS_IB`.
    pub const PS_IB: u16 = 0x013f;

    /// The service ID of `port` in port space `ps`.
    pub const fn new(ps: u16, port: u16) -> u64 {
        ((ps as u64) << 16) | port as u64
    }

    /// The port space and port of an rdma_cm service ID, or `None` if the top 32 bits
    /// are not zero (not an rdma_cm ID).
    pub const fn split(sid: u64) -> Option<(u16, u16)> {
        if sid >> 32 != 0 {
            None
        } else {
            Some(((sid >> 16) as u16, sid as u16))
        }
    }

    /// The name of a port space (`enum rdma_ucm_port_space` without `RDMA_PS_`), or
    /// `None` for one rdma_cm does not define.
    pub const fn ps_name(ps: u16) -> Option<&'static str> {
        match ps {
            PS_IPOIB => Some("IPOIB"),
            PS_TCP => Some("TCP"),
            PS_UDP => Some("UDP"),
            PS_IB => Some("IB"),
            _ => None,
        }
    }

    /// The port space and port of an rdma_cm service ID in a port space rdma_cm defines.
    pub const fn rdma_cm(sid: u64) -> Option<(&'static str, u16)> {
        match split(sid) {
            Some((ps, port)) => match ps_name(ps) {
                Some(name) => Some((name, port)),
                None => None,
            },
            None => None,
        }
    }
}

/// One CM message, chosen by the MAD's attribute ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Message {
    Req(req::Repr),
    Mra(mra::Repr),
    Rej(rej::Repr),
    Rep(rep::Repr),
    Rtu(rtu::Repr),
    Dreq(dreq::Repr),
    Drep(drep::Repr),
    SidrReq(sidr_req::Repr),
    SidrRep(sidr_rep::Repr),
    Lap(lap::Repr),
    Apr(apr::Repr),
    ClassPortInfo(cpi::Repr),
}

impl Message {
    /// The MAD attribute ID of the message.
    pub const fn attr_id(&self) -> u16 {
        match self {
            Message::Req(_) => attr::REQ,
            Message::Mra(_) => attr::MRA,
            Message::Rej(_) => attr::REJ,
            Message::Rep(_) => attr::REP,
            Message::Rtu(_) => attr::RTU,
            Message::Dreq(_) => attr::DREQ,
            Message::Drep(_) => attr::DREP,
            Message::SidrReq(_) => attr::SIDR_REQ,
            Message::SidrRep(_) => attr::SIDR_REP,
            Message::Lap(_) => attr::LAP,
            Message::Apr(_) => attr::APR,
            Message::ClassPortInfo(_) => attr::CLASS_PORT_INFO,
        }
    }

    /// Reads the message `attr_id` names from `data` (the bytes after the MAD header).
    /// An attribute the CM class does not define is `Reserved`.
    pub fn parse(attr_id: u16, data: &[u8]) -> Result<Message> {
        Ok(match attr_id {
            attr::REQ => Message::Req(req::Repr::parse(&req::Packet::new_checked(data)?)?),
            attr::MRA => Message::Mra(mra::Repr::parse(&mra::Packet::new_checked(data)?)?),
            attr::REJ => Message::Rej(rej::Repr::parse(&rej::Packet::new_checked(data)?)?),
            attr::REP => Message::Rep(rep::Repr::parse(&rep::Packet::new_checked(data)?)?),
            attr::RTU => Message::Rtu(rtu::Repr::parse(&rtu::Packet::new_checked(data)?)?),
            attr::DREQ => Message::Dreq(dreq::Repr::parse(&dreq::Packet::new_checked(data)?)?),
            attr::DREP => Message::Drep(drep::Repr::parse(&drep::Packet::new_checked(data)?)?),
            attr::SIDR_REQ => Message::SidrReq(sidr_req::Repr::parse(
                &sidr_req::Packet::new_checked(data)?,
            )?),
            attr::SIDR_REP => Message::SidrRep(sidr_rep::Repr::parse(
                &sidr_rep::Packet::new_checked(data)?,
            )?),
            attr::LAP => Message::Lap(lap::Repr::parse(&lap::Packet::new_checked(data)?)?),
            attr::APR => Message::Apr(apr::Repr::parse(&apr::Packet::new_checked(data)?)?),
            attr::CLASS_PORT_INFO => {
                Message::ClassPortInfo(cpi::Repr::parse(&cpi::Packet::new_checked(data)?)?)
            }
            other => {
                return Err(WireError::Reserved {
                    header: Header::Mad,
                    field: "attribute ID",
                    value: u32::from(other),
                })
            }
        })
    }

    pub const fn buffer_len(&self) -> usize {
        MSG_LEN
    }

    /// Writes the message into `data` (the bytes after the MAD header), which must hold
    /// at least [`MSG_LEN`] bytes.
    pub fn emit(&self, data: &mut [u8]) {
        match self {
            Message::Req(r) => r.emit(&mut req::Packet::new_unchecked(data)),
            Message::Mra(r) => r.emit(&mut mra::Packet::new_unchecked(data)),
            Message::Rej(r) => r.emit(&mut rej::Packet::new_unchecked(data)),
            Message::Rep(r) => r.emit(&mut rep::Packet::new_unchecked(data)),
            Message::Rtu(r) => r.emit(&mut rtu::Packet::new_unchecked(data)),
            Message::Dreq(r) => r.emit(&mut dreq::Packet::new_unchecked(data)),
            Message::Drep(r) => r.emit(&mut drep::Packet::new_unchecked(data)),
            Message::SidrReq(r) => r.emit(&mut sidr_req::Packet::new_unchecked(data)),
            Message::SidrRep(r) => r.emit(&mut sidr_rep::Packet::new_unchecked(data)),
            Message::Lap(r) => r.emit(&mut lap::Packet::new_unchecked(data)),
            Message::Apr(r) => r.emit(&mut apr::Packet::new_unchecked(data)),
            Message::ClassPortInfo(r) => r.emit(&mut cpi::Packet::new_unchecked(data)),
        }
    }
}

/// A whole CM MAD: the common header and the message its attribute ID names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMad {
    pub header: mad::Repr,
    pub msg: Message,
}

impl CmMad {
    /// A CM Send MAD carrying `msg` (the attribute ID comes from the message). A
    /// ClassPortInfo travels in a Get or GetResp instead: set `header.method` to
    /// [`mad::METHOD_GET`] or [`mad::METHOD_GET_RESP`].
    pub const fn new(tid: u64, attr_mod: u32, msg: Message) -> CmMad {
        CmMad {
            header: mad::Repr::cm_send(tid, msg.attr_id(), attr_mod),
            msg,
        }
    }

    /// Reads a 256-byte MAD (longer buffers are fine: UD payloads may be padded).
    /// A class other than the CM's is `Reserved`; so is an attribute not in [`Message`].
    /// Truncation offsets are from the start of the MAD.
    pub fn parse(bytes: &[u8]) -> Result<CmMad> {
        if bytes.len() < mad::MAD_LEN {
            return Err(super::error::truncated(
                Header::Mad,
                mad::MAD_LEN,
                bytes.len(),
            ));
        }
        let header = mad::Repr::parse(&mad::Packet::new_unchecked(bytes))?;
        if header.mgmt_class != mad::CLASS_CM {
            return Err(WireError::Reserved {
                header: Header::Mad,
                field: "management class",
                value: u32::from(header.mgmt_class),
            });
        }
        let msg = Message::parse(header.attr_id, &bytes[mad::HEADER_LEN..mad::MAD_LEN])
            .map_err(|e| e.add_offset(mad::HEADER_LEN))?;
        Ok(CmMad { header, msg })
    }

    pub const fn buffer_len(&self) -> usize {
        mad::MAD_LEN
    }

    /// Writes all 256 bytes. The header is written as it is; [`CmMad::new`] keeps its
    /// attribute ID in step with the message.
    pub fn emit(&self, bytes: &mut [u8]) {
        self.header.emit(&mut mad::Packet::new_unchecked(
            &mut bytes[..mad::HEADER_LEN],
        ));
        self.msg.emit(&mut bytes[mad::HEADER_LEN..mad::MAD_LEN]);
    }
}
