//! The wire layer's one error type.

use core::fmt;

/// A header or part of a frame, named in errors and in the pcap decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Header {
    Ethernet,
    Vlan,
    Ipv4,
    Ipv6,
    Udp,
    Bth,
    Deth,
    Reth,
    AtomicEth,
    Aeth,
    AtomicAckEth,
    ImmDt,
    Ieth,
    Cnp,
    /// Payload and pad bytes, as announced by the BTH pad count.
    Payload,
    Icrc,
    /// The 24-byte MAD common header (IBA 13.4.2) of a QP1 datagram.
    Mad,
    /// A communication manager message, the 232 bytes after the MAD header (IBA 12.6).
    Cm,
    /// The rdma_cm private-data header (`struct cma_hdr`) at the start of a REQ or
    /// SIDR_REQ's private data.
    CmaHdr,
}

impl Header {
    /// The name Wireshark and the IBA use.
    pub const fn name(self) -> &'static str {
        match self {
            Header::Ethernet => "Ethernet",
            Header::Vlan => "VLAN",
            Header::Ipv4 => "IPv4",
            Header::Ipv6 => "IPv6",
            Header::Udp => "UDP",
            Header::Bth => "BTH",
            Header::Deth => "DETH",
            Header::Reth => "RETH",
            Header::AtomicEth => "AtomicETH",
            Header::Aeth => "AETH",
            Header::AtomicAckEth => "AtomicAckETH",
            Header::ImmDt => "ImmDt",
            Header::Ieth => "IETH",
            Header::Cnp => "CNP",
            Header::Payload => "payload",
            Header::Icrc => "ICRC",
            Header::Mad => "MAD",
            Header::Cm => "CM",
            Header::CmaHdr => "cma_hdr",
        }
    }
}

impl fmt::Display for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why bytes could not be read as (or written into) a packet.
///
/// Offsets are from the start of the buffer handed to the failing call (the RoCE packet,
/// i.e. the BTH, for RoCE headers; the frame for framing headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer ends inside a header.
    #[error("{header} truncated at offset {offset}: needs {need} bytes, {have} present")]
    Truncated {
        header: Header,
        /// Where the header starts.
        offset: usize,
        /// Bytes the header needs from `offset`.
        need: usize,
        /// Bytes present from `offset`.
        have: usize,
    },
    /// The BTH opcode is not one this implementation knows (IBA Table 35); reported, never
    /// guessed.
    #[error("unknown BTH opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// The BTH pad count announces more pad bytes than there are payload bytes.
    #[error("pad count {pad} exceeds the {avail} bytes between headers and ICRC")]
    BadPad { pad: u8, avail: usize },
    /// An opcode that carries no payload (ACK, READ request, atomics, CNP) has bytes
    /// between its headers and the ICRC.
    #[error("opcode {opcode:#04x} carries no payload but {len} bytes follow its headers")]
    UnexpectedPayload { opcode: u8, len: usize },
    /// A field holds a value the IBA reserves (for example an AETH syndrome of type 0b10).
    #[error("{header} field {field} holds reserved value {value:#x}")]
    Reserved {
        header: Header,
        field: &'static str,
        value: u32,
    },
    /// A Repr lacks an extension header its opcode requires, or has one it forbids.
    #[error("opcode {opcode:#04x} {what} {header}")]
    HeaderMismatch {
        opcode: u8,
        header: Header,
        /// "requires" or "forbids".
        what: &'static str,
    },
    /// The invariant CRC does not match the packet.
    #[error("ICRC mismatch: packet has {found:#010x}, computed {computed:#010x}")]
    BadIcrc { found: u32, computed: u32 },
    /// The frame is well formed but is not RoCEv2 (not IP, not UDP, not port 4791, ...).
    #[error("not RoCEv2: {0}")]
    NotRoce(&'static str),
    /// A framing header (Ethernet, VLAN, IP, UDP) is malformed in a way other than length.
    #[error("{header} malformed: {reason}")]
    Malformed {
        header: Header,
        reason: &'static str,
    },
}

impl WireError {
    /// Shift the offset of a `Truncated` error by `by` bytes, as the error bubbles up
    /// from a header to the packet that contains it.
    pub fn add_offset(self, by: usize) -> Self {
        match self {
            WireError::Truncated {
                header,
                offset,
                need,
                have,
            } => WireError::Truncated {
                header,
                offset: offset + by,
                need,
                have,
            },
            other => other,
        }
    }

    /// The header the error is about, when there is one.
    pub fn header(&self) -> Option<Header> {
        match *self {
            WireError::Truncated { header, .. }
            | WireError::Reserved { header, .. }
            | WireError::HeaderMismatch { header, .. }
            | WireError::Malformed { header, .. } => Some(header),
            WireError::UnknownOpcode(_) => Some(Header::Bth),
            WireError::BadPad { .. } | WireError::UnexpectedPayload { .. } => Some(Header::Payload),
            WireError::BadIcrc { .. } => Some(Header::Icrc),
            WireError::NotRoce(_) => None,
        }
    }
}

/// `Truncated` for a header of fixed length `need` read from a buffer of `have` bytes.
pub(crate) fn truncated(header: Header, need: usize, have: usize) -> WireError {
    WireError::Truncated {
        header,
        offset: 0,
        need,
        have,
    }
}
