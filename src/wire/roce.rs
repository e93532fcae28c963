//! A whole RoCE packet: BTH, the extension headers its opcode calls for, payload, pad
//! and ICRC (the UDP payload of a RoCEv2 datagram).
//!
//! Checks, in rxe's order (`rxe_rcv`): the BTH fits; the opcode is known; the extension
//! headers fit; the ICRC fits; the pad count fits in what is left; opcodes without payload
//! have none. The ICRC itself needs the IP and UDP headers and is checked by
//! [`super::icrc`].

use super::opcode::{Flags, Headers, Opcode, OpcodeInfo};
use super::{aeth, atomic, bth, cnp, deth, ieth, immdt, reth};
use super::{Header, Result, WireError, ICRC_LEN};
use core::fmt;

/// A view of a RoCE packet (see [`crate::wire`] for the contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// Which `Header` each extension-header bit names, for errors.
const fn header_name(h: Headers) -> Header {
    match h {
        Headers::DETH => Header::Deth,
        Headers::RETH => Header::Reth,
        Headers::ATOMIC_ETH => Header::AtomicEth,
        Headers::AETH => Header::Aeth,
        Headers::ATOMIC_ACK_ETH => Header::AtomicAckEth,
        Headers::IMMDT => Header::ImmDt,
        Headers::IETH => Header::Ieth,
        _ => Header::Cnp,
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps untrusted bytes after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Proves every accessor is in bounds and the layout is one the opcode allows.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        let len = b.len();
        if len < bth::HEADER_LEN {
            return Err(super::error::truncated(Header::Bth, bth::HEADER_LEN, len));
        }
        let info = Opcode(b[0]).info().ok_or(WireError::UnknownOpcode(b[0]))?;
        let hl = info.header_len();
        if len < hl + ICRC_LEN {
            return Err(Self::truncation(info, len));
        }
        let avail = len - hl - ICRC_LEN;
        let pad = bth::Packet::new_unchecked(b).pad();
        if !info.is(Flags::PAYLOAD) && avail != 0 {
            return Err(WireError::UnexpectedPayload {
                opcode: b[0],
                len: avail,
            });
        }
        if usize::from(pad) > avail {
            return Err(WireError::BadPad { pad, avail });
        }
        Ok(())
    }

    /// Which header a packet of `len` bytes (shorter than headers + ICRC) cuts, and where.
    #[cold]
    fn truncation(info: &OpcodeInfo, len: usize) -> WireError {
        let mut off = bth::HEADER_LEN;
        for (h, hlen) in Headers::ORDER {
            if info.headers.contains(h) {
                if len < off + hlen {
                    return WireError::Truncated {
                        header: header_name(h),
                        offset: off,
                        need: hlen,
                        have: len - off,
                    };
                }
                off += hlen;
            }
        }
        WireError::Truncated {
            header: Header::Icrc,
            offset: off,
            need: ICRC_LEN,
            have: len - off,
        }
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole packet, ICRC included.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    #[inline]
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref()[0])
    }

    /// The opcode's table entry. Panics only if the packet was not checked.
    #[inline]
    pub fn info(&self) -> &'static OpcodeInfo {
        self.opcode().info().expect("check_len proved the opcode")
    }

    #[inline]
    pub fn bth(&self) -> bth::Packet<&[u8]> {
        bth::Packet::new_unchecked(&self.buffer.as_ref()[..bth::HEADER_LEN])
    }

    #[inline]
    fn ext(&self, which: Headers) -> Option<&[u8]> {
        Some(&self.buffer.as_ref()[self.info().range_of(which)?])
    }

    pub fn deth(&self) -> Option<deth::Packet<&[u8]>> {
        self.ext(Headers::DETH).map(deth::Packet::new_unchecked)
    }
    pub fn reth(&self) -> Option<reth::Packet<&[u8]>> {
        self.ext(Headers::RETH).map(reth::Packet::new_unchecked)
    }
    pub fn atomic_eth(&self) -> Option<atomic::Packet<&[u8]>> {
        self.ext(Headers::ATOMIC_ETH)
            .map(atomic::Packet::new_unchecked)
    }
    pub fn aeth(&self) -> Option<aeth::Packet<&[u8]>> {
        self.ext(Headers::AETH).map(aeth::Packet::new_unchecked)
    }
    pub fn atomic_ack_eth(&self) -> Option<atomic::ack::Packet<&[u8]>> {
        self.ext(Headers::ATOMIC_ACK_ETH)
            .map(atomic::ack::Packet::new_unchecked)
    }
    pub fn immdt(&self) -> Option<immdt::Packet<&[u8]>> {
        self.ext(Headers::IMMDT).map(immdt::Packet::new_unchecked)
    }
    pub fn ieth(&self) -> Option<ieth::Packet<&[u8]>> {
        self.ext(Headers::IETH).map(ieth::Packet::new_unchecked)
    }

    /// Length of BTH plus extension headers.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.info().header_len()
    }

    #[inline]
    pub fn pad(&self) -> u8 {
        self.bth().pad()
    }

    /// Payload bytes, without pad.
    #[inline]
    pub fn payload_len(&self) -> usize {
        self.buffer.as_ref().len() - self.header_len() - usize::from(self.pad()) - ICRC_LEN
    }

    #[inline]
    pub fn payload(&self) -> &[u8] {
        let start = self.header_len();
        &self.buffer.as_ref()[start..start + self.payload_len()]
    }

    /// The pad bytes (IBA 9.2.3 says they are zero; the receiver does not check).
    #[inline]
    pub fn pad_bytes(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[b.len() - ICRC_LEN - usize::from(self.pad())..b.len() - ICRC_LEN]
    }

    /// Everything the ICRC covers after the IP and UDP headers: BTH to the last pad byte.
    #[inline]
    pub fn covered(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[..b.len() - ICRC_LEN]
    }

    /// The ICRC as the CRC value (it is sent least significant byte first).
    #[inline]
    pub fn icrc(&self) -> u32 {
        let b = self.buffer.as_ref();
        let n = b.len();
        u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]])
    }

    /// The four ICRC bytes read big-endian, as Wireshark shows `infiniband.invariant.crc`.
    #[inline]
    pub fn icrc_wire_be(&self) -> u32 {
        self.icrc().swap_bytes()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        let len = self.payload_len();
        &mut self.buffer.as_mut()[start..start + len]
    }

    /// Stores the ICRC value (least significant byte first).
    #[inline]
    pub fn set_icrc(&mut self, crc: u32) {
        let b = self.buffer.as_mut();
        let n = b.len();
        b[n - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// The meaningful contents of a RoCE packet, payload bytes excepted.
///
/// Exactly the extension headers the opcode calls for are `Some`; [`Repr::emit`] refuses
/// any other combination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub bth: bth::Repr,
    pub deth: Option<deth::Repr>,
    pub reth: Option<reth::Repr>,
    pub atomic_eth: Option<atomic::Repr>,
    pub aeth: Option<aeth::Repr>,
    pub atomic_ack_eth: Option<atomic::AckRepr>,
    pub immdt: Option<immdt::Repr>,
    pub ieth: Option<ieth::Repr>,
    /// Payload bytes, without pad.
    pub payload_len: usize,
}

impl Repr {
    /// A Repr with only a BTH and no payload; add extension headers with struct update.
    pub const fn new(bth: bth::Repr) -> Repr {
        Repr {
            bth,
            deth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
            payload_len: 0,
        }
    }

    /// Parses a checked packet. Never panics once `check_len` passed.
    ///
    /// Always inlined: the Repr is 144 bytes, and returned from a call it is built in
    /// memory a field at a time and then moved by `memcpy`, whose wide loads stall on
    /// those narrow stores (see `RoceFrame::parse_ethernet`). Inlined, the caller builds
    /// it in place: frame split + parse of a 4 KiB WRITE went from 30 to 14 ns.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        let b = p.buffer.as_ref();
        // One table lookup; every extension header is then read at its fixed offset, as a
        // slice of its exact length (constant per call) so the accessors' bounds checks fold.
        let info = p.info();
        let at = |h: Headers| info.range_of(h).map(|r| &b[r]);
        // The AETH syndrome can hold a reserved value: the only way parsing fails here.
        let aeth = match at(Headers::AETH) {
            Some(h) => Some(aeth::Repr::parse(&aeth::Packet::new_unchecked(h))?),
            None => None,
        };
        let bth = bth::Packet::new_unchecked(&b[..bth::HEADER_LEN]);
        Ok(Repr {
            bth: bth::Repr {
                opcode: bth.opcode(),
                solicited: bth.solicited(),
                migreq: bth.migreq(),
                pad: bth.pad(),
                tver: bth.tver(),
                pkey: bth.pkey(),
                fecn: bth.fecn(),
                becn: bth.becn(),
                dqpn: bth.dqpn(),
                ack_req: bth.ack_req(),
                psn: bth.psn(),
            },
            deth: at(Headers::DETH).map(|h| {
                let h = deth::Packet::new_unchecked(h);
                deth::Repr {
                    qkey: h.qkey(),
                    src_qpn: h.src_qpn(),
                }
            }),
            reth: at(Headers::RETH).map(|h| {
                let h = reth::Packet::new_unchecked(h);
                reth::Repr {
                    va: h.va(),
                    rkey: h.rkey(),
                    dma_len: h.dma_len(),
                }
            }),
            atomic_eth: at(Headers::ATOMIC_ETH).map(|h| {
                let h = atomic::Packet::new_unchecked(h);
                atomic::Repr {
                    va: h.va(),
                    rkey: h.rkey(),
                    swap_add: h.swap_add(),
                    compare: h.compare(),
                }
            }),
            aeth,
            atomic_ack_eth: at(Headers::ATOMIC_ACK_ETH).map(|h| atomic::AckRepr {
                orig: atomic::ack::Packet::new_unchecked(h).orig(),
            }),
            immdt: at(Headers::IMMDT).map(|h| immdt::Repr {
                imm: immdt::Packet::new_unchecked(h).imm(),
            }),
            ieth: at(Headers::IETH).map(|h| ieth::Repr {
                rkey: ieth::Packet::new_unchecked(h).rkey(),
            }),
            payload_len: b.len() - info.header_len() - usize::from(bth.pad()) - ICRC_LEN,
        })
    }

    /// The opcode's entry, or `UnknownOpcode`.
    pub fn info(&self) -> Result<&'static OpcodeInfo> {
        self.bth
            .opcode
            .info()
            .ok_or(WireError::UnknownOpcode(self.bth.opcode.0))
    }

    /// Proves the Repr can be emitted: known opcode, exactly the right extension headers,
    /// pad 0..=3, no payload where the opcode has none.
    pub fn check(&self) -> Result<&'static OpcodeInfo> {
        let info = self.info()?;
        let op = self.bth.opcode.0;
        let present = [
            (Headers::DETH, self.deth.is_some()),
            (Headers::RETH, self.reth.is_some()),
            (Headers::ATOMIC_ETH, self.atomic_eth.is_some()),
            (Headers::AETH, self.aeth.is_some()),
            (Headers::ATOMIC_ACK_ETH, self.atomic_ack_eth.is_some()),
            (Headers::IMMDT, self.immdt.is_some()),
            (Headers::IETH, self.ieth.is_some()),
        ];
        // One comparison of bit sets on the way out; the loop only names the culprit.
        let have = present.iter().fold(
            Headers::NONE,
            |acc, &(h, is)| if is { acc.union(h) } else { acc },
        );
        if have != info.headers.without(Headers::CNP) {
            for (h, is) in present {
                let want = info.headers.contains(h);
                if want != is {
                    return Err(WireError::HeaderMismatch {
                        opcode: op,
                        header: header_name(h),
                        what: if want { "requires" } else { "forbids" },
                    });
                }
            }
        }
        if self.bth.pad > 3 {
            return Err(WireError::BadPad {
                pad: self.bth.pad,
                avail: self.payload_len,
            });
        }
        if !info.is(Flags::PAYLOAD) && (self.payload_len != 0 || self.bth.pad != 0) {
            return Err(WireError::UnexpectedPayload {
                opcode: op,
                len: self.payload_len + usize::from(self.bth.pad),
            });
        }
        Ok(info)
    }

    /// Bytes from BTH to ICRC inclusive. Unknown opcodes count as BTH only.
    pub fn buffer_len(&self) -> usize {
        let hdr = self
            .bth
            .opcode
            .info()
            .map_or(bth::HEADER_LEN, |i| i.header_len());
        hdr + self.payload_len + usize::from(self.bth.pad) + ICRC_LEN
    }

    /// The pad count that aligns `payload_len` to 4 bytes (IBA 9.2.3), what every sender
    /// uses.
    pub const fn pad_for(payload_len: usize) -> u8 {
        ((4 - (payload_len % 4)) % 4) as u8
    }

    /// Writes headers and zero pad into `buf[..buffer_len()]`, lets `payload` fill the
    /// payload in place (no intermediate copy), and zeroes the ICRC. The ICRC is filled in
    /// by [`super::icrc`], which needs the IP and UDP headers.
    ///
    /// Errors only if the Repr fails [`Repr::check`] or `buf` is shorter than
    /// [`Repr::buffer_len`].
    pub fn emit_with(&self, buf: &mut [u8], payload: impl FnOnce(&mut [u8])) -> Result<usize> {
        let info = self.check()?;
        let total = self.buffer_len();
        if buf.len() < total {
            return Err(WireError::Truncated {
                header: Header::Bth,
                offset: 0,
                need: total,
                have: buf.len(),
            });
        }
        let buf = &mut buf[..total];
        self.bth
            .emit(&mut bth::Packet::new_unchecked(&mut buf[..bth::HEADER_LEN]));
        // Each header as a slice of its exact length, so the setters' bounds checks fold.
        fn slot<'b>(buf: &'b mut [u8], info: &OpcodeInfo, h: Headers) -> &'b mut [u8] {
            &mut buf[info.range_of(h).expect("check() matched headers to opcode")]
        }
        if let Some(h) = &self.deth {
            h.emit(&mut deth::Packet::new_unchecked(slot(
                buf,
                info,
                Headers::DETH,
            )));
        }
        if let Some(h) = &self.reth {
            h.emit(&mut reth::Packet::new_unchecked(slot(
                buf,
                info,
                Headers::RETH,
            )));
        }
        if let Some(h) = &self.atomic_eth {
            h.emit(&mut atomic::Packet::new_unchecked(slot(
                buf,
                info,
                Headers::ATOMIC_ETH,
            )));
        }
        if let Some(h) = &self.aeth {
            h.emit(&mut aeth::Packet::new_unchecked(slot(
                buf,
                info,
                Headers::AETH,
            )));
        }
        if let Some(h) = &self.atomic_ack_eth {
            h.emit(&mut atomic::ack::Packet::new_unchecked(slot(
                buf,
                info,
                Headers::ATOMIC_ACK_ETH,
            )));
        }
        if let Some(h) = &self.immdt {
            h.emit(&mut immdt::Packet::new_unchecked(slot(
                buf,
                info,
                Headers::IMMDT,
            )));
        }
        if let Some(h) = &self.ieth {
            h.emit(&mut ieth::Packet::new_unchecked(slot(
                buf,
                info,
                Headers::IETH,
            )));
        }
        if info.has(Headers::CNP) {
            cnp::Repr.emit(&mut cnp::Packet::new_unchecked(slot(
                buf,
                info,
                Headers::CNP,
            )));
        }
        let start = info.header_len();
        let end = start + self.payload_len;
        payload(&mut buf[start..end]);
        // Pad (0..=3 bytes) and ICRC: total - end is 4..=7, so two fixed 4-byte writes
        // cover it without a memset call.
        buf[end..end + ICRC_LEN].fill(0);
        buf[total - ICRC_LEN..].fill(0);
        Ok(total)
    }

    /// [`Repr::emit_with`] copying `payload`, which must be `payload_len` bytes long.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize> {
        if payload.len() != self.payload_len {
            return Err(WireError::Truncated {
                header: Header::Payload,
                offset: 0,
                need: self.payload_len,
                have: payload.len(),
            });
        }
        self.emit_with(buf, |dst| dst.copy_from_slice(payload))
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bth)?;
        if let Some(h) = &self.deth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.reth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.atomic_eth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.aeth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.atomic_ack_eth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.immdt {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.ieth {
            write!(f, " {h}")?;
        }
        write!(f, " len={}", self.payload_len)
    }
}
