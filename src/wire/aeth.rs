//! ACK Extended Transport Header (IBA 9.3.5, Figure 118; syndrome encoding Table 44):
//! an 8-bit syndrome (ACK with credit count, RNR NAK with timer code, NAK with error code)
//! and the 24-bit message sequence number.

use super::field::*;
use super::{Header, Result, WireError};
use core::fmt;

mod field {
    use super::Field;
    pub const SYNDROME: usize = 0;
    pub const MSN: Field = 1..4;
}

pub const HEADER_LEN: usize = field::MSN.end;
// The fields end where the opcode table (via `layout`) says this header ends.
const _: () = assert!(HEADER_LEN == super::layout::AETH_LEN);

/// Syndrome bits 6..5 (bit 7 is reserved).
const KIND_SHIFT: u8 = 5;
const KIND_ACK: u8 = 0b00;
const KIND_RNR: u8 = 0b01;
const KIND_NAK: u8 = 0b11;
const VALUE_MASK: u8 = 0x1f;
const RESERVED_BIT: u8 = 0x80;

/// Credit count meaning "no credit information" (IBA 9.7.7.2.5: invalid credit count).
pub const CREDITS_INVALID: u8 = 0x1f;

/// NAK error codes (IBA Table 44).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    PsnSequenceError = 0,
    InvalidRequest = 1,
    RemoteAccessError = 2,
    RemoteOperationalError = 3,
    InvalidRdRequest = 4,
}

impl NakCode {
    pub const fn from_u8(v: u8) -> Option<NakCode> {
        Some(match v {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            _ => return None,
        })
    }
    pub const fn name(self) -> &'static str {
        match self {
            NakCode::PsnSequenceError => "PSN sequence error",
            NakCode::InvalidRequest => "invalid request",
            NakCode::RemoteAccessError => "remote access error",
            NakCode::RemoteOperationalError => "remote operational error",
            NakCode::InvalidRdRequest => "invalid RD request",
        }
    }
}

/// What an AETH says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledge; `credits` is the 5-bit end-to-end credit code.
    Ack {
        credits: u8,
    },
    /// Receiver not ready; `timer` is the 5-bit minimum RNR NAK timer code (IBA Table 45).
    RnrNak {
        timer: u8,
    },
    Nak(NakCode),
}

impl Syndrome {
    /// Decodes a syndrome byte; reserved encodings are errors.
    pub fn from_u8(v: u8) -> Result<Syndrome> {
        let reserved = |value| WireError::Reserved {
            header: Header::Aeth,
            field: "syndrome",
            value,
        };
        if v & RESERVED_BIT != 0 {
            return Err(reserved(u32::from(v)));
        }
        let low = v & VALUE_MASK;
        match v >> KIND_SHIFT {
            KIND_ACK => Ok(Syndrome::Ack { credits: low }),
            KIND_RNR => Ok(Syndrome::RnrNak { timer: low }),
            KIND_NAK => NakCode::from_u8(low)
                .map(Syndrome::Nak)
                .ok_or(reserved(u32::from(v))),
            _ => Err(reserved(u32::from(v))),
        }
    }

    pub const fn to_u8(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => (KIND_ACK << KIND_SHIFT) | (credits & VALUE_MASK),
            Syndrome::RnrNak { timer } => (KIND_RNR << KIND_SHIFT) | (timer & VALUE_MASK),
            Syndrome::Nak(code) => (KIND_NAK << KIND_SHIFT) | code as u8,
        }
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Syndrome::Ack { credits } => write!(f, "ACK credits={credits}"),
            Syndrome::RnrNak { timer } => write!(f, "RNR-NAK timer={timer}"),
            Syndrome::Nak(c) => write!(f, "NAK {}", c.name()),
        }
    }
}

super::view::fixed_view!(Header::Aeth, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The raw syndrome byte.
    #[inline]
    pub fn syndrome_raw(&self) -> u8 {
        self.buffer.as_ref()[field::SYNDROME]
    }
    #[inline]
    pub fn msn(&self) -> u32 {
        u24_at(self.buffer.as_ref(), field::MSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn set_syndrome_raw(&mut self, v: u8) {
        self.buffer.as_mut()[field::SYNDROME] = v;
    }
    #[inline]
    pub fn set_msn(&mut self, v: u32) {
        set_u24(self.buffer.as_mut(), field::MSN, v)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub syndrome: Syndrome,
    /// Message sequence number, 24 bits.
    pub msn: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            syndrome: Syndrome::from_u8(p.syndrome_raw())?,
            msn: p.msn(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_syndrome_raw(self.syndrome.to_u8());
        p.set_msn(self.msn);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AETH {} MSN={}", self.syndrome, self.msn)
    }
}
