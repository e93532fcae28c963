//! The MAD common header (IBA 13.4.2, Figure 146): the first 24 bytes of every 256-byte
//! management datagram, such as the communication manager's messages to QP1
//! ([`super::cm`]).

use super::field::*;
use super::{Header, Result};
use core::fmt;

mod field {
    use super::Field;
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    /// R (0x80, a response) and the method proper (0x7f).
    pub const METHOD: usize = 3;
    pub const STATUS: Field = 4..6;
    pub const CLASS_SPECIFIC: Field = 6..8;
    pub const TID: Field = 8..16;
    pub const ATTR_ID: Field = 16..18;
    /// Bytes 18-19 are reserved.
    pub const ATTR_MOD: Field = 20..24;
}

/// Bytes of the common header.
pub const HEADER_LEN: usize = field::ATTR_MOD.end;
/// Bytes of a whole MAD (IBA 13.4.1): the header and 232 bytes of class data.
pub const MAD_LEN: usize = 256;
/// Bytes of class data after the common header.
pub const DATA_LEN: usize = MAD_LEN - HEADER_LEN;

/// The only base version of the MADs QP1 carries (OPA's 0x80 is not IBA).
pub const BASE_VERSION: u8 = 1;
/// Management class of the communication manager.
pub const CLASS_CM: u8 = 0x07;
/// Class version of the CM in the IBA 1.2+ format (`IB_CM_CLASS_VERSION`).
pub const CM_CLASS_VERSION: u8 = 2;
/// Method Send: the CM's messages (all but ClassPortInfo).
pub const METHOD_SEND: u8 = 0x03;
/// Method Get: a ClassPortInfo query (IBA 13.4.5).
pub const METHOD_GET: u8 = 0x01;
/// Method GetResp: the answer to a Get (the R bit set).
pub const METHOD_GET_RESP: u8 = 0x81;
/// The R bit of the method byte: the MAD is a response.
pub const METHOD_RESPONSE: u8 = 0x80;

/// CM attribute IDs (IBA Table 106).
pub mod attr {
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const RTU: u16 = 0x0014;
    pub const DREQ: u16 = 0x0015;
    pub const DREP: u16 = 0x0016;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
    pub const LAP: u16 = 0x0019;
    pub const APR: u16 = 0x001a;
}

super::view::fixed_view!(Header::Mad, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    #[inline]
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[field::BASE_VERSION]
    }
    #[inline]
    pub fn mgmt_class(&self) -> u8 {
        self.buffer.as_ref()[field::MGMT_CLASS]
    }
    #[inline]
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS_VERSION]
    }
    /// The whole method byte, R bit included.
    #[inline]
    pub fn method(&self) -> u8 {
        self.buffer.as_ref()[field::METHOD]
    }
    #[inline]
    pub fn status(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::STATUS)
    }
    #[inline]
    pub fn class_specific(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CLASS_SPECIFIC)
    }
    /// Transaction ID.
    #[inline]
    pub fn tid(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::TID)
    }
    #[inline]
    pub fn attr_id(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::ATTR_ID)
    }
    #[inline]
    pub fn attr_mod(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::ATTR_MOD)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn set_base_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::BASE_VERSION] = v;
    }
    #[inline]
    pub fn set_mgmt_class(&mut self, v: u8) {
        self.buffer.as_mut()[field::MGMT_CLASS] = v;
    }
    #[inline]
    pub fn set_class_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::CLASS_VERSION] = v;
    }
    #[inline]
    pub fn set_method(&mut self, v: u8) {
        self.buffer.as_mut()[field::METHOD] = v;
    }
    #[inline]
    pub fn set_status(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::STATUS, v);
    }
    #[inline]
    pub fn set_class_specific(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::CLASS_SPECIFIC, v);
    }
    #[inline]
    pub fn set_tid(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::TID, v);
    }
    /// Writes the attribute ID and zeroes the reserved bytes after it.
    #[inline]
    pub fn set_attr_id(&mut self, v: u16) {
        set_u32(self.buffer.as_mut(), 16..20, u32::from(v) << 16);
    }
    #[inline]
    pub fn set_attr_mod(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::ATTR_MOD, v);
    }
}

/// The meaningful fields of a MAD common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    /// Method byte, R bit (0x80) included.
    pub method: u8,
    pub status: u16,
    pub class_specific: u16,
    pub tid: u64,
    pub attr_id: u16,
    pub attr_mod: u32,
}

impl Repr {
    /// A CM Send MAD header (base version 1, class 0x07 version 2, status 0).
    pub const fn cm_send(tid: u64, attr_id: u16, attr_mod: u32) -> Repr {
        Repr {
            base_version: BASE_VERSION,
            mgmt_class: CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod,
        }
    }

    /// Reads the fields; fails only on a short buffer. Which classes and versions are
    /// served is the business of the MAD's consumer.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            base_version: p.base_version(),
            mgmt_class: p.mgmt_class(),
            class_version: p.class_version(),
            method: p.method(),
            status: p.status(),
            class_specific: p.class_specific(),
            tid: p.tid(),
            attr_id: p.attr_id(),
            attr_mod: p.attr_mod(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes all 24 bytes; the reserved bytes become zero.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_base_version(self.base_version);
        p.set_mgmt_class(self.mgmt_class);
        p.set_class_version(self.class_version);
        p.set_method(self.method);
        p.set_status(self.status);
        p.set_class_specific(self.class_specific);
        p.set_tid(self.tid);
        p.set_attr_id(self.attr_id);
        p.set_attr_mod(self.attr_mod);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MAD class={:#04x} v{} method={:#04x} attr={:#06x} tid={:#x}",
            self.mgmt_class, self.class_version, self.method, self.attr_id, self.tid
        )?;
        if self.status != 0 {
            write!(f, " status={:#06x}", self.status)?;
        }
        if self.attr_mod != 0 {
            write!(f, " mod={:#x}", self.attr_mod)?;
        }
        Ok(())
    }
}
