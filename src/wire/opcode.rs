//! The BTH opcode table (IBA Table 35; rxe's `rxe_opcode.c`): for every opcode, its name,
//! transport, which extension headers follow the BTH and what the packet means.
//!
//! One `const` table answers every question about an opcode; header offsets and lengths
//! are computed from the header set, never written by hand. Unknown opcodes have no entry
//! and are reported as [`WireError::UnknownOpcode`](super::WireError::UnknownOpcode).

use super::layout;
use core::fmt;

/// The transport an opcode belongs to: the top three bits of the opcode (IBA 9.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    Rc,
    Uc,
    Rd,
    Ud,
    /// RoCEv2 Congestion Notification Packet (Annex A17.9.3), opcode 0x81.
    Cnp,
}

/// Extension headers after the BTH, one bit each, in wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Headers(u8);

impl Headers {
    pub const DETH: Headers = Headers(1 << 0);
    pub const RETH: Headers = Headers(1 << 1);
    pub const ATOMIC_ETH: Headers = Headers(1 << 2);
    pub const AETH: Headers = Headers(1 << 3);
    pub const ATOMIC_ACK_ETH: Headers = Headers(1 << 4);
    pub const IMMDT: Headers = Headers(1 << 5);
    pub const IETH: Headers = Headers(1 << 6);
    /// The 16 reserved bytes of a CNP.
    pub const CNP: Headers = Headers(1 << 7);
    pub const NONE: Headers = Headers(0);

    /// Every header, in the order it appears on the wire, with its length in bytes.
    pub const ORDER: [(Headers, usize); 8] = [
        (Headers::DETH, layout::DETH_LEN),
        (Headers::RETH, layout::RETH_LEN),
        (Headers::ATOMIC_ETH, layout::ATOMIC_ETH_LEN),
        (Headers::AETH, layout::AETH_LEN),
        (Headers::ATOMIC_ACK_ETH, layout::ATOMIC_ACK_ETH_LEN),
        (Headers::IMMDT, layout::IMMDT_LEN),
        (Headers::IETH, layout::IETH_LEN),
        (Headers::CNP, layout::CNP_LEN),
    ];

    pub const fn union(self, other: Headers) -> Headers {
        Headers(self.0 | other.0)
    }

    pub const fn without(self, other: Headers) -> Headers {
        Headers(self.0 & !other.0)
    }

    pub const fn contains(self, other: Headers) -> bool {
        self.0 & other.0 == other.0
    }

    /// Total length of these extension headers.
    pub const fn len(self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < Headers::ORDER.len() {
            if self.contains(Headers::ORDER[i].0) {
                n += Headers::ORDER[i].1;
            }
            i += 1;
        }
        n
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Offset of `which` from the end of the BTH, if present.
    pub const fn offset_of(self, which: Headers) -> Option<usize> {
        if !self.contains(which) || which.0 == 0 {
            return None;
        }
        let mut n = 0;
        let mut i = 0;
        while i < Headers::ORDER.len() {
            if Headers::ORDER[i].0 .0 == which.0 {
                return Some(n);
            }
            if self.contains(Headers::ORDER[i].0) {
                n += Headers::ORDER[i].1;
            }
            i += 1;
        }
        None
    }
}

/// What a packet with this opcode is and does, as bits (rxe's `RXE_*_MASK` meaning bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u16);

impl Flags {
    /// A request: goes to the responder.
    pub const REQ: Flags = Flags(1 << 0);
    /// A response (ACK, atomic ACK, READ response): goes to the completer.
    pub const RESP: Flags = Flags(1 << 1);
    pub const SEND: Flags = Flags(1 << 2);
    pub const WRITE: Flags = Flags(1 << 3);
    pub const READ: Flags = Flags(1 << 4);
    pub const ATOMIC: Flags = Flags(1 << 5);
    /// Carries payload bytes (possibly zero of them).
    pub const PAYLOAD: Flags = Flags(1 << 6);
    /// First packet of a message.
    pub const START: Flags = Flags(1 << 7);
    /// Neither first nor last.
    pub const MIDDLE: Flags = Flags(1 << 8);
    /// Last packet of a message.
    pub const END: Flags = Flags(1 << 9);
    /// Consumes a receive WQE at the responder (SEND, WRITE with immediate).
    pub const RWR: Flags = Flags(1 << 10);
    /// Completes a message at the responder (generates a receive completion).
    pub const COMP: Flags = Flags(1 << 11);
    pub const IMM: Flags = Flags(1 << 12);
    pub const INV: Flags = Flags(1 << 13);
    /// A plain or atomic acknowledge.
    pub const ACK: Flags = Flags(1 << 14);
    pub const CNP: Flags = Flags(1 << 15);
    pub const NONE: Flags = Flags(0);

    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// Everything the table knows about one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// rxe's name without the `IB_OPCODE_` prefix, e.g. `RC_SEND_ONLY`.
    pub name: &'static str,
    pub transport: Transport,
    pub headers: Headers,
    pub flags: Flags,
    /// BTH plus extension headers, computed from `headers` when the table is built.
    hlen: u8,
    /// Offset from the start of the BTH of each extension header (by bit of `Headers`),
    /// 0 where absent; computed when the table is built.
    offsets: [u8; 8],
}

impl OpcodeInfo {
    /// Length of BTH plus extension headers.
    #[inline]
    pub const fn header_len(&self) -> usize {
        self.hlen as usize
    }

    /// Offset of an extension header from the start of the BTH.
    #[inline]
    pub const fn offset_of(&self, which: Headers) -> Option<usize> {
        if which.0.count_ones() != 1 || !self.headers.contains(which) {
            return None;
        }
        Some(self.offsets[which.0.trailing_zeros() as usize] as usize)
    }

    /// Where an extension header lies in the packet, from the start of the BTH: its offset
    /// through its length. A slice of exactly this range lets a view's accessors drop
    /// their bounds checks.
    #[inline]
    pub fn range_of(&self, which: Headers) -> Option<core::ops::Range<usize>> {
        self.offset_of(which).map(|o| o..o + which.len())
    }

    pub const fn has(&self, which: Headers) -> bool {
        self.headers.contains(which)
    }

    pub const fn is(&self, flags: Flags) -> bool {
        self.flags.contains(flags)
    }
}

/// A BTH opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

impl Opcode {
    /// The table entry, or `None` for an opcode this implementation does not know.
    #[inline]
    pub const fn info(self) -> Option<&'static OpcodeInfo> {
        OPCODES[self.0 as usize].as_ref()
    }

    /// The name, or `"UNKNOWN"`.
    pub const fn name(self) -> &'static str {
        match self.info() {
            Some(i) => i.name,
            None => "UNKNOWN",
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Named opcodes (IBA Table 35), so code never writes a bare number.
#[allow(missing_docs)]
pub mod op {
    use super::Opcode;
    pub const RC_SEND_FIRST: Opcode = Opcode(0x00);
    pub const RC_SEND_MIDDLE: Opcode = Opcode(0x01);
    pub const RC_SEND_LAST: Opcode = Opcode(0x02);
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x03);
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x05);
    pub const RC_RDMA_WRITE_FIRST: Opcode = Opcode(0x06);
    pub const RC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x07);
    pub const RC_RDMA_WRITE_LAST: Opcode = Opcode(0x08);
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x09);
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(0x0a);
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x0b);
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(0x0c);
    pub const RC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x0d);
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0e);
    pub const RC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x0f);
    pub const RC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(0x11);
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    pub const RC_COMPARE_SWAP: Opcode = Opcode(0x13);
    pub const RC_FETCH_ADD: Opcode = Opcode(0x14);
    pub const RC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(0x16);
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(0x17);
    pub const UC_SEND_FIRST: Opcode = Opcode(0x20);
    pub const UC_SEND_MIDDLE: Opcode = Opcode(0x21);
    pub const UC_SEND_LAST: Opcode = Opcode(0x22);
    pub const UC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x23);
    pub const UC_SEND_ONLY: Opcode = Opcode(0x24);
    pub const UC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x25);
    pub const UC_RDMA_WRITE_FIRST: Opcode = Opcode(0x26);
    pub const UC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x27);
    pub const UC_RDMA_WRITE_LAST: Opcode = Opcode(0x28);
    pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x29);
    pub const UC_RDMA_WRITE_ONLY: Opcode = Opcode(0x2a);
    pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x2b);
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x65);
    pub const CNP: Opcode = Opcode(0x81);
}

// Building blocks for the table.
const H_NONE: Headers = Headers::NONE;
const P: Flags = Flags::PAYLOAD;
const REQ: Flags = Flags::REQ;
const RESP: Flags = Flags::RESP;
const S: Flags = Flags::START;
const M: Flags = Flags::MIDDLE;
const E: Flags = Flags::END;
const SE: Flags = Flags::START.union(Flags::END);

const fn f(parts: &[Flags]) -> Flags {
    let mut acc = Flags::NONE;
    let mut i = 0;
    while i < parts.len() {
        acc = acc.union(parts[i]);
        i += 1;
    }
    acc
}

const fn entry(
    name: &'static str,
    transport: Transport,
    headers: Headers,
    flags: Flags,
) -> Option<OpcodeInfo> {
    let mut offsets = [0u8; 8];
    let mut i = 0;
    while i < 8 {
        if let Some(o) = headers.offset_of(Headers(1 << i)) {
            offsets[i] = (layout::BTH_LEN + o) as u8;
        }
        i += 1;
    }
    Some(OpcodeInfo {
        name,
        transport,
        headers,
        flags,
        hlen: (layout::BTH_LEN + headers.len()) as u8,
        offsets,
    })
}

/// The SEND and RDMA WRITE opcodes are laid out identically for RC (base 0x00) and UC
/// (base 0x20); this fills one transport's twelve entries.
const fn send_write(
    t: &mut [Option<OpcodeInfo>; 256],
    base: usize,
    tr: Transport,
    names: [&'static str; 12],
) {
    let send = Flags::SEND.union(Flags::REQ).union(P).union(Flags::RWR);
    let write = Flags::WRITE.union(Flags::REQ).union(P);
    let imm = Flags::IMM.union(Flags::RWR);
    t[base] = entry(names[0], tr, H_NONE, send.union(S));
    t[base + 1] = entry(names[1], tr, H_NONE, send.union(M));
    t[base + 2] = entry(names[2], tr, H_NONE, send.union(E).union(Flags::COMP));
    t[base + 3] = entry(
        names[3],
        tr,
        Headers::IMMDT,
        f(&[send, E, Flags::COMP, imm]),
    );
    t[base + 4] = entry(names[4], tr, H_NONE, f(&[send, SE, Flags::COMP]));
    t[base + 5] = entry(
        names[5],
        tr,
        Headers::IMMDT,
        f(&[send, SE, Flags::COMP, imm]),
    );
    t[base + 6] = entry(names[6], tr, Headers::RETH, write.union(S));
    t[base + 7] = entry(names[7], tr, H_NONE, write.union(M));
    t[base + 8] = entry(names[8], tr, H_NONE, write.union(E));
    t[base + 9] = entry(
        names[9],
        tr,
        Headers::IMMDT,
        f(&[write, E, Flags::COMP, imm]),
    );
    t[base + 10] = entry(names[10], tr, Headers::RETH, write.union(SE));
    t[base + 11] = entry(
        names[11],
        tr,
        Headers::RETH.union(Headers::IMMDT),
        f(&[write, SE, Flags::COMP, imm]),
    );
}

const fn build() -> [Option<OpcodeInfo>; 256] {
    let mut t: [Option<OpcodeInfo>; 256] = [None; 256];
    use Transport::*;
    send_write(
        &mut t,
        0x00,
        Rc,
        [
            "RC_SEND_FIRST",
            "RC_SEND_MIDDLE",
            "RC_SEND_LAST",
            "RC_SEND_LAST_WITH_IMMEDIATE",
            "RC_SEND_ONLY",
            "RC_SEND_ONLY_WITH_IMMEDIATE",
            "RC_RDMA_WRITE_FIRST",
            "RC_RDMA_WRITE_MIDDLE",
            "RC_RDMA_WRITE_LAST",
            "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
            "RC_RDMA_WRITE_ONLY",
            "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        ],
    );
    let read_resp = RESP.union(Flags::READ).union(P);
    t[0x0c] = entry(
        "RC_RDMA_READ_REQUEST",
        Rc,
        Headers::RETH,
        f(&[REQ, Flags::READ, SE]),
    );
    t[0x0d] = entry(
        "RC_RDMA_READ_RESPONSE_FIRST",
        Rc,
        Headers::AETH,
        read_resp.union(S),
    );
    t[0x0e] = entry(
        "RC_RDMA_READ_RESPONSE_MIDDLE",
        Rc,
        H_NONE,
        read_resp.union(M),
    );
    t[0x0f] = entry(
        "RC_RDMA_READ_RESPONSE_LAST",
        Rc,
        Headers::AETH,
        read_resp.union(E),
    );
    t[0x10] = entry(
        "RC_RDMA_READ_RESPONSE_ONLY",
        Rc,
        Headers::AETH,
        read_resp.union(SE),
    );
    t[0x11] = entry(
        "RC_ACKNOWLEDGE",
        Rc,
        Headers::AETH,
        f(&[RESP, Flags::ACK, SE]),
    );
    t[0x12] = entry(
        "RC_ATOMIC_ACKNOWLEDGE",
        Rc,
        Headers::AETH.union(Headers::ATOMIC_ACK_ETH),
        f(&[RESP, Flags::ACK, Flags::ATOMIC, SE]),
    );
    t[0x13] = entry(
        "RC_COMPARE_SWAP",
        Rc,
        Headers::ATOMIC_ETH,
        f(&[REQ, Flags::ATOMIC, SE]),
    );
    t[0x14] = entry(
        "RC_FETCH_ADD",
        Rc,
        Headers::ATOMIC_ETH,
        f(&[REQ, Flags::ATOMIC, SE]),
    );
    let send_inv = f(&[REQ, Flags::SEND, P, Flags::RWR, Flags::COMP, Flags::INV]);
    t[0x16] = entry(
        "RC_SEND_LAST_WITH_INVALIDATE",
        Rc,
        Headers::IETH,
        send_inv.union(E),
    );
    t[0x17] = entry(
        "RC_SEND_ONLY_WITH_INVALIDATE",
        Rc,
        Headers::IETH,
        send_inv.union(SE),
    );
    send_write(
        &mut t,
        0x20,
        Uc,
        [
            "UC_SEND_FIRST",
            "UC_SEND_MIDDLE",
            "UC_SEND_LAST",
            "UC_SEND_LAST_WITH_IMMEDIATE",
            "UC_SEND_ONLY",
            "UC_SEND_ONLY_WITH_IMMEDIATE",
            "UC_RDMA_WRITE_FIRST",
            "UC_RDMA_WRITE_MIDDLE",
            "UC_RDMA_WRITE_LAST",
            "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
            "UC_RDMA_WRITE_ONLY",
            "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        ],
    );
    let ud_send = f(&[REQ, Flags::SEND, P, Flags::RWR, Flags::COMP, SE]);
    t[0x64] = entry("UD_SEND_ONLY", Ud, Headers::DETH, ud_send);
    t[0x65] = entry(
        "UD_SEND_ONLY_WITH_IMMEDIATE",
        Ud,
        Headers::DETH.union(Headers::IMMDT),
        ud_send.union(Flags::IMM),
    );
    t[0x81] = entry("CNP", Cnp, Headers::CNP, Flags::CNP);
    t
}

/// The table: one entry per byte value, `None` where the opcode is unknown or reserved.
/// RD opcodes (0x40..) are not carried by RoCEv2 in practice and are not in the table.
pub static OPCODES: [Option<OpcodeInfo>; 256] = build();

#[cfg(test)]
mod test {
    use super::*;

    /// IBA Table 35, written out independently of the table, checked entry by entry.
    #[test]
    fn every_entry_matches_the_iba_list() {
        // (opcode, name suffix, header length incl. BTH, has payload)
        let list: &[(u8, &str, usize, bool)] = &[
            (0x00, "RC_SEND_FIRST", 12, true),
            (0x01, "RC_SEND_MIDDLE", 12, true),
            (0x02, "RC_SEND_LAST", 12, true),
            (0x03, "RC_SEND_LAST_WITH_IMMEDIATE", 16, true),
            (0x04, "RC_SEND_ONLY", 12, true),
            (0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", 16, true),
            (0x06, "RC_RDMA_WRITE_FIRST", 28, true),
            (0x07, "RC_RDMA_WRITE_MIDDLE", 12, true),
            (0x08, "RC_RDMA_WRITE_LAST", 12, true),
            (0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 16, true),
            (0x0a, "RC_RDMA_WRITE_ONLY", 28, true),
            (0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, true),
            (0x0c, "RC_RDMA_READ_REQUEST", 28, false),
            (0x0d, "RC_RDMA_READ_RESPONSE_FIRST", 16, true),
            (0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", 12, true),
            (0x0f, "RC_RDMA_READ_RESPONSE_LAST", 16, true),
            (0x10, "RC_RDMA_READ_RESPONSE_ONLY", 16, true),
            (0x11, "RC_ACKNOWLEDGE", 16, false),
            (0x12, "RC_ATOMIC_ACKNOWLEDGE", 24, false),
            (0x13, "RC_COMPARE_SWAP", 40, false),
            (0x14, "RC_FETCH_ADD", 40, false),
            (0x16, "RC_SEND_LAST_WITH_INVALIDATE", 16, true),
            (0x17, "RC_SEND_ONLY_WITH_INVALIDATE", 16, true),
            (0x20, "UC_SEND_FIRST", 12, true),
            (0x21, "UC_SEND_MIDDLE", 12, true),
            (0x22, "UC_SEND_LAST", 12, true),
            (0x23, "UC_SEND_LAST_WITH_IMMEDIATE", 16, true),
            (0x24, "UC_SEND_ONLY", 12, true),
            (0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", 16, true),
            (0x26, "UC_RDMA_WRITE_FIRST", 28, true),
            (0x27, "UC_RDMA_WRITE_MIDDLE", 12, true),
            (0x28, "UC_RDMA_WRITE_LAST", 12, true),
            (0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 16, true),
            (0x2a, "UC_RDMA_WRITE_ONLY", 28, true),
            (0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, true),
            (0x64, "UD_SEND_ONLY", 20, true),
            (0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", 24, true),
            (0x81, "CNP", 28, false),
        ];
        for &(code, name, hlen, payload) in list {
            let info = Opcode(code)
                .info()
                .unwrap_or_else(|| panic!("{code:#x} missing"));
            assert_eq!(info.name, name);
            assert_eq!(info.header_len(), hlen, "{name}");
            assert_eq!(info.is(Flags::PAYLOAD), payload, "{name}");
            let tr = match code >> 5 {
                0 => Transport::Rc,
                1 => Transport::Uc,
                3 => Transport::Ud,
                _ => Transport::Cnp,
            };
            assert_eq!(info.transport, tr, "{name}");
            // Every message-bearing opcode says where in the message it sits, exactly once.
            let pos = [Flags::START, Flags::MIDDLE, Flags::END]
                .iter()
                .filter(|p| info.is(**p))
                .count();
            if code != 0x81 {
                assert!(pos >= 1, "{name} has no position");
            }
            assert!(!(info.is(Flags::REQ) && info.is(Flags::RESP)), "{name}");
        }
        let known = OPCODES.iter().filter(|e| e.is_some()).count();
        assert_eq!(known, list.len(), "table has entries not in the IBA list");
    }

    #[test]
    fn offsets_follow_wire_order() {
        let i = op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(i.offset_of(Headers::RETH), Some(12));
        assert_eq!(i.offset_of(Headers::IMMDT), Some(28));
        let i = op::RC_ATOMIC_ACKNOWLEDGE.info().unwrap();
        assert_eq!(i.offset_of(Headers::AETH), Some(12));
        assert_eq!(i.offset_of(Headers::ATOMIC_ACK_ETH), Some(16));
        let i = op::UD_SEND_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(i.offset_of(Headers::DETH), Some(12));
        assert_eq!(i.offset_of(Headers::IMMDT), Some(20));
        assert_eq!(i.offset_of(Headers::RETH), None);
    }

    #[test]
    fn unknown_opcodes_have_no_entry() {
        for code in [0x15u8, 0x18, 0x1f, 0x2c, 0x40, 0x60, 0x63, 0x66, 0x80, 0xff] {
            assert!(Opcode(code).info().is_none(), "{code:#x}");
            assert_eq!(Opcode(code).name(), "UNKNOWN");
        }
    }
}
