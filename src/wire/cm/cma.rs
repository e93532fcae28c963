//! The rdma_cm private-data header (`struct cma_hdr` in the kernel's and librdmacm's
//! `cma.c`): the first 36 bytes of a REQ's or SIDR_REQ's private data, naming the IP
//! endpoints the IB CM itself does not carry. All fields are in network order.
//!
//! | byte  | field                                                    |
//! |-------|----------------------------------------------------------|
//! | 0     | cma_version, 0x00                                        |
//! | 1     | ip_version << 4: 0x40 IPv4, 0x60 IPv6 (low nibble reserved) |
//! | 2-3   | the active side's source port                            |
//! | 4-19  | source address (IPv4 in bytes 16-19, 4-15 zero)          |
//! | 20-35 | destination address (IPv4 in bytes 32-35)                |

use crate::wire::field::*;
use crate::wire::{Header, Result, WireError};
use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};

mod field {
    use crate::wire::field::Field;
    pub const VERSION: usize = 0;
    pub const IP_VERSION: usize = 1;
    pub const PORT: Field = 2..4;
    pub const SRC: Field = 4..20;
    pub const DST: Field = 20..36;
}

pub const HEADER_LEN: usize = field::DST.end;
/// The only `cma_version` (`CMA_VERSION`).
pub const CMA_VERSION: u8 = 0x00;

crate::wire::view::fixed_view!(Header::CmaHdr, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    #[inline]
    pub fn cma_version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }
    /// The IP version nibble: 4 or 6.
    #[inline]
    pub fn ip_version(&self) -> u8 {
        self.buffer.as_ref()[field::IP_VERSION] >> 4
    }
    #[inline]
    pub fn src_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::PORT)
    }
    /// The 16 bytes of the source address field.
    #[inline]
    pub fn src_raw(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        a
    }
    /// The 16 bytes of the destination address field.
    #[inline]
    pub fn dst_raw(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        a
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn set_cma_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::VERSION] = v;
    }
    /// Writes the IP version nibble; the reserved low nibble becomes zero.
    #[inline]
    pub fn set_ip_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::IP_VERSION] = v << 4;
    }
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::PORT, v);
    }
    #[inline]
    pub fn set_src_raw(&mut self, v: [u8; 16]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&v);
    }
    #[inline]
    pub fn set_dst_raw(&mut self, v: [u8; 16]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&v);
    }
}

/// The two addresses of a `cma_hdr`, of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Addrs {
    V4 { src: Ipv4Addr, dst: Ipv4Addr },
    V6 { src: Ipv6Addr, dst: Ipv6Addr },
}

/// The meaningful fields of a `cma_hdr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The active side's source port.
    pub src_port: u16,
    pub addrs: Addrs,
}

fn v4(raw: [u8; 16]) -> Ipv4Addr {
    Ipv4Addr::new(raw[12], raw[13], raw[14], raw[15])
}

fn v4_raw(a: Ipv4Addr) -> [u8; 16] {
    let mut raw = [0u8; 16];
    raw[12..].copy_from_slice(&a.octets());
    raw
}

impl Repr {
    /// Reads the header. A `cma_version` other than 0 or an IP version other than 4 or 6
    /// is `Reserved` (the kernel rejects both); the pad before an IPv4 address is ignored.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        if p.cma_version() != CMA_VERSION {
            return Err(WireError::Reserved {
                header: Header::CmaHdr,
                field: "cma_version",
                value: u32::from(p.cma_version()),
            });
        }
        let addrs = match p.ip_version() {
            4 => Addrs::V4 {
                src: v4(p.src_raw()),
                dst: v4(p.dst_raw()),
            },
            6 => Addrs::V6 {
                src: Ipv6Addr::from(p.src_raw()),
                dst: Ipv6Addr::from(p.dst_raw()),
            },
            v => {
                return Err(WireError::Reserved {
                    header: Header::CmaHdr,
                    field: "ip_version",
                    value: u32::from(v),
                })
            }
        };
        Ok(Repr {
            src_port: p.src_port(),
            addrs,
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes all 36 bytes; the IPv4 pads and the reserved nibble become zero.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_cma_version(CMA_VERSION);
        p.set_src_port(self.src_port);
        match self.addrs {
            Addrs::V4 { src, dst } => {
                p.set_ip_version(4);
                p.set_src_raw(v4_raw(src));
                p.set_dst_raw(v4_raw(dst));
            }
            Addrs::V6 { src, dst } => {
                p.set_ip_version(6);
                p.set_src_raw(src.octets());
                p.set_dst_raw(dst.octets());
            }
        }
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addrs {
            Addrs::V4 { src, dst } => write!(f, "cma_hdr {src}:{} -> {dst}", self.src_port),
            Addrs::V6 { src, dst } => write!(f, "cma_hdr [{src}]:{} -> {dst}", self.src_port),
        }
    }
}
