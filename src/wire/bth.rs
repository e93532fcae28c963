//! Base Transport Header (IBA 9.2, Figure 112): 12 bytes on every packet.

use super::field::*;
use super::opcode::Opcode;
use super::psn::Psn;
use super::{Header, Result};
use core::fmt;

pub(crate) mod field {
    use super::Field;
    pub const OPCODE: usize = 0;
    /// SE (0x80), MigReq (0x40), PadCnt (0x30), TVer (0x0f).
    pub const FLAGS: usize = 1;
    pub const PKEY: Field = 2..4;
    /// FECN (0x80), BECN (0x40), 6 reserved bits. The whole byte is "variant" for the ICRC.
    pub const FECN_BECN: usize = 4;
    pub const DQPN: Field = 5..8;
    /// AckReq (0x80), 7 reserved bits.
    pub const ACKREQ: usize = 8;
    pub const PSN: Field = 9..12;
}

pub const HEADER_LEN: usize = field::PSN.end;
// The fields end where the opcode table (via `layout`) says this header ends.
const _: () = assert!(HEADER_LEN == super::layout::BTH_LEN);

const SE: u8 = 0x80;
const MIGREQ: u8 = 0x40;
const PAD_SHIFT: u8 = 4;
const PAD_MASK: u8 = 0x30;
const TVER_MASK: u8 = 0x0f;
const FECN: u8 = 0x80;
const BECN: u8 = 0x40;
const ACKREQ: u8 = 0x80;
/// The default P_Key: full member (bit 15) of the default partition 0x7fff (IBA 10.9,
/// partitioning). The BTH's one-line form names only another P_Key.
pub const DEFAULT_PKEY: u16 = 0xffff;
/// Largest queue pair number: QPNs are 24 bits.
pub const QPN_MASK: u32 = 0x00ff_ffff;

super::view::fixed_view!(Header::Bth, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    #[inline]
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref()[field::OPCODE])
    }
    #[inline]
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & SE != 0
    }
    #[inline]
    pub fn migreq(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & MIGREQ != 0
    }
    /// Pad count: bytes of padding after the payload, 0..=3.
    #[inline]
    pub fn pad(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] & PAD_MASK) >> PAD_SHIFT
    }
    /// Transport header version; 0 is the only one defined (IBA 9.2.4).
    #[inline]
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & TVER_MASK
    }
    #[inline]
    pub fn pkey(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::PKEY)
    }
    #[inline]
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::FECN_BECN] & FECN != 0
    }
    #[inline]
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::FECN_BECN] & BECN != 0
    }
    #[inline]
    pub fn dqpn(&self) -> u32 {
        u24_at(self.buffer.as_ref(), field::DQPN)
    }
    #[inline]
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACKREQ] & ACKREQ != 0
    }
    #[inline]
    pub fn psn(&self) -> Psn {
        Psn::new(u24_at(self.buffer.as_ref(), field::PSN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn set_opcode(&mut self, v: Opcode) {
        self.buffer.as_mut()[field::OPCODE] = v.0;
    }
    /// Writes SE, MigReq, PadCnt and TVer together (they share a byte).
    #[inline]
    pub fn set_flags(&mut self, se: bool, migreq: bool, pad: u8, tver: u8) {
        self.buffer.as_mut()[field::FLAGS] = (if se { SE } else { 0 })
            | (if migreq { MIGREQ } else { 0 })
            | ((pad << PAD_SHIFT) & PAD_MASK)
            | (tver & TVER_MASK);
    }
    #[inline]
    pub fn set_pkey(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::PKEY, v);
    }
    /// Writes FECN and BECN; the reserved bits become zero.
    #[inline]
    pub fn set_ecn(&mut self, fecn: bool, becn: bool) {
        self.buffer.as_mut()[field::FECN_BECN] =
            (if fecn { FECN } else { 0 }) | (if becn { BECN } else { 0 });
    }
    #[inline]
    pub fn set_dqpn(&mut self, v: u32) {
        set_u24(self.buffer.as_mut(), field::DQPN, v);
    }
    /// Writes AckReq; the reserved bits become zero.
    #[inline]
    pub fn set_ack_req(&mut self, v: bool) {
        self.buffer.as_mut()[field::ACKREQ] = if v { ACKREQ } else { 0 };
    }
    #[inline]
    pub fn set_psn(&mut self, v: Psn) {
        set_u24(self.buffer.as_mut(), field::PSN, v.value());
    }
}

/// The meaningful fields of a BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub opcode: Opcode,
    /// Solicited event (SE).
    pub solicited: bool,
    /// Migration request (M).
    pub migreq: bool,
    /// Pad count, 0..=3.
    pub pad: u8,
    /// Transport header version, 0..=15 (only 0 is defined).
    pub tver: u8,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    /// Destination QP, 24 bits.
    pub dqpn: u32,
    pub ack_req: bool,
    pub psn: Psn,
}

impl Repr {
    /// Reads the fields. Never fails once `check_len` passed; opcode validity is the
    /// business of the whole-packet parser ([`super::roce`]).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            opcode: p.opcode(),
            solicited: p.solicited(),
            migreq: p.migreq(),
            pad: p.pad(),
            tver: p.tver(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            dqpn: p.dqpn(),
            ack_req: p.ack_req(),
            psn: p.psn(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes all 12 bytes; reserved bits become zero.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_opcode(self.opcode);
        p.set_flags(self.solicited, self.migreq, self.pad, self.tver);
        p.set_pkey(self.pkey);
        p.set_ecn(self.fecn, self.becn);
        p.set_dqpn(self.dqpn);
        p.set_ack_req(self.ack_req);
        p.set_psn(self.psn);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} QP={:#08x} PSN={}", self.opcode, self.dqpn, self.psn)?;
        let flags = [
            (self.ack_req, " A"),
            (self.solicited, " SE"),
            (self.migreq, " M"),
            (self.fecn, " FECN"),
            (self.becn, " BECN"),
        ];
        for (on, s) in flags {
            if on {
                f.write_str(s)?;
            }
        }
        if self.pad != 0 {
            write!(f, " pad={}", self.pad)?;
        }
        if self.tver != 0 {
            write!(f, " tver={}", self.tver)?;
        }
        if self.pkey != DEFAULT_PKEY {
            write!(f, " pkey={:#06x}", self.pkey)?;
        }
        Ok(())
    }
}
