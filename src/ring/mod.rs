//! Shared-memory packet rings between the daemon and one attached process (design
//! real-programs.md §1.3, §3): the daemon owns the port and moves packets, the engines stay
//! in the programs' processes, and the link between them costs no system call per packet.
//!
//! A ring is a single-producer single-consumer queue of variable-length packets (up to
//! [`MAX_PACKET`] bytes each, with their addresses) in one memfd that both processes map.
//! A [`link::Link`] is two rings (daemon -> process "rx", process -> daemon "tx") and a
//! doorbell per ring (a socket pair: each side its own end, so the other side cannot make
//! it block, [`link::bell_pair`]); the daemon creates them and passes the memory and the
//! process's bell ends over the process's Unix socket with `SCM_RIGHTS`.
//!
//! # The shared region (one memfd per ring, sealed against shrinking and growing)
//!
//! ```text
//! offset  size  field                 written by
//!      0     8  magic "RoCEring"      creator, once
//!      8     4  version (1)           creator, once
//!     12     4  header length (4096)  creator, once
//!     16     8  capacity (bytes)      creator, once: a power of two, 4 KiB ..= 1 GiB
//!    128     8  tail                  producer (AtomicU64, Release)
//!    256     8  head                  consumer (AtomicU64, Release)
//!    264     8  waiting               consumer sets, producer clears (AtomicU64)
//!   4096   cap  data: entries back to back, each 8-aligned
//! ```
//!
//! `head` and `tail` are byte counters that only grow (2^64 bytes never wrap); an entry at
//! counter `p` lies at data offset `p % capacity`. The producer and the consumer lines
//! are 128 bytes apart so neither side's writes invalidate the other's line (adjacent-line
//! prefetch pairs 64-byte lines). An entry is a 56-byte header and the packet:
//!
//! ```text
//!  0 u32 packet length     4 u16 kind (PACKET | PAD)     6 u16 caller's flags
//!  8 u8  address bits: 1 src is IPv6, 2 dst is IPv6, 4 has an IPv4 ID   9 u8 ECN (0..=3)
//! 10 u16 IPv4 ID          12 u32 GSO/GRO segment size (0: none)
//! 16 u16 src port         18 u16 dst port                20 u32 spare
//! 24 [16] src IP (IPv4 in the first 4 bytes)             40 [16] dst IP
//! 56 packet bytes, then padding to a multiple of 8
//! ```
//!
//! An entry never wraps: when it does not fit before the end of the data area, the
//! producer fills the rest with a PAD entry (its length field is the whole pad) and
//! starts at offset 0. Integers are little-endian: both ends run on one machine.
//!
//! # Memory ordering, and why no wakeup is lost
//!
//! - Data: the producer writes an entry, then publishes `tail` with a Release store; the
//!   consumer loads `tail` with Acquire, so every byte before that tail is visible to it.
//!   The consumer copies entries out, then publishes `head` with Release; the producer
//!   loads `head` with Acquire before reusing the space, so the consumer's reads happen
//!   before the producer overwrites. Each side keeps its own index in a local and only
//!   ever reads the other's: a peer scribbling over our own index changes nothing we do.
//!   Both publish once per batch.
//! - Doorbell: the consumer, finding the ring empty, stores `waiting = 1`, issues a SeqCst
//!   fence, and loads `tail` again; only if it is still unchanged does it sleep in
//!   `poll` on its bell. The producer stores `tail`, issues a SeqCst fence, and loads
//!   `waiting`; only if it is 1 does it swap it to 0 and ring the bell (one system
//!   call per sleep, none under load). This is the store-buffering (Dekker) pattern: the
//!   two fences are ordered in the single total order of SeqCst operations, and whichever
//!   comes second sees the other side's store (C++ [atomics.fences]/p4, which Rust
//!   follows). So either the consumer sees the new tail and does not sleep, or the
//!   producer sees `waiting` and rings. A ring that lands between the consumer's check and
//!   its `poll` is not lost either: the bell's byte stays queued until read, so the
//!   `poll` returns at once. A swap racing with the consumer's own reset only leaves a
//!   spurious count, which costs one empty wakeup. The fences are CPU barriers (mfence /
//!   dmb ish) on shared physical memory, so the argument holds across processes.
//!
//! # A hostile peer
//!
//! The other process can write anything anywhere in the region at any time. Each side
//! therefore reads every shared word once into a local (volatile or atomic load, see
//! [`shm`]), validates it (index alignment, an index behind ours or more than a capacity
//! ahead, an index that moves backwards, an unknown kind, a length past the end of the
//! data area or past the published tail) and uses only the local. Framing errors declare
//! the ring broken ([`Corrupt`], sticky: the framing cannot be trusted again); an entry
//! that is framed correctly but says something impossible (unknown address bits, a
//! segment longer than the packet) is dropped and counted. The capacity is read once, at
//! attach, and the memfd is sealed, so no access can leave the mapping or hit a page past
//! the end of the file. The producer never blocks: a full ring is [`PushError::Full`];
//! [`Producer::room`] says beforehand how many packets surely fit, so a producer that can
//! wait (a process's engine) keeps the rest, and one that cannot (the daemon delivering
//! from the port) counts a drop.
//!
//! `ring` is a leaf: it imports nothing else of the crate, so the daemon and the verbs
//! layer can both use it (`tests/layering.rs`).

pub mod link;
#[allow(unsafe_code)]
mod shm;
mod spsc;

pub use link::{bell_pair, DaemonEnd, Link, LinkError, LinkFds, ProcessEnd};
pub use spsc::{
    create_region, AttachError, Consumer, ConsumerStats, Entry, Popped, Producer, ProducerStats,
};

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub const MAGIC: u64 = u64::from_le_bytes(*b"RoCEring");
pub const VERSION: u32 = 1;
/// The header, one page: the data area starts page aligned.
pub const HEADER_LEN: usize = 4096;
pub const OFF_MAGIC: usize = 0;
pub const OFF_VERSION: usize = 8;
pub const OFF_CAPACITY: usize = 16;
pub const OFF_TAIL: usize = 128;
pub const OFF_HEAD: usize = 256;
pub const OFF_WAITING: usize = 264;
pub const MIN_CAPACITY: usize = 4096;
pub const MAX_CAPACITY: usize = 1 << 30;
/// The largest packet an entry carries: a 64 KiB GSO train.
pub const MAX_PACKET: usize = 65536;
pub const ENTRY_HEADER: usize = 56;
pub const KIND_PACKET: u16 = 0x5052; // "RP"
pub const KIND_PAD: u16 = 0x4150; // "PA"

const ADDR_SRC6: u8 = 1;
const ADDR_DST6: u8 = 2;
const ADDR_HAS_ID: u8 = 4;

/// The bytes an entry with a `len`-byte packet takes in the data area.
pub const fn record_len(len: usize) -> usize {
    (ENTRY_HEADER + len + 7) & !7
}

/// What travels with a packet: what `backend::Received` and `backend::Outgoing` say of
/// it, so the daemon and the process can convert without loss (IPv6 scope and flow
/// label are not carried: RoCE does not use them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub ipv4_id: Option<u16>,
    /// Several packets of this length back to back (GSO on send, GRO on receive).
    pub segment: Option<u16>,
    /// The caller's own bits; the ring carries them unread.
    pub flags: u16,
    /// The IP header's ECN codepoint, its two bits as in the TOS byte (0 to 3).
    pub ecn: u8,
}

impl Meta {
    /// A packet from `src` to `dst` with no ID, segment or flags.
    pub fn new(src: SocketAddr, dst: SocketAddr) -> Meta {
        Meta {
            src,
            dst,
            ipv4_id: None,
            segment: None,
            flags: 0,
            ecn: 0,
        }
    }
}

fn put_ip(out: &mut [u8], ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(a) => {
            out[..4].copy_from_slice(&a.octets());
            out[4..16].fill(0);
            0
        }
        IpAddr::V6(a) => {
            out.copy_from_slice(&a.octets());
            1
        }
    }
}

fn get_ip(b: &[u8], v6: bool) -> IpAddr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    if v6 {
        IpAddr::V6(Ipv6Addr::from(a))
    } else {
        IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
    }
}

/// The entry header of a `len`-byte packet.
pub fn encode_entry(meta: &Meta, len: usize) -> [u8; ENTRY_HEADER] {
    let mut h = [0u8; ENTRY_HEADER];
    h[0..4].copy_from_slice(&(len as u32).to_le_bytes());
    h[4..6].copy_from_slice(&KIND_PACKET.to_le_bytes());
    h[6..8].copy_from_slice(&meta.flags.to_le_bytes());
    let mut bits = put_ip(&mut h[24..40], meta.src.ip()) * ADDR_SRC6;
    bits |= put_ip(&mut h[40..56], meta.dst.ip()) * ADDR_DST6;
    if let Some(id) = meta.ipv4_id {
        bits |= ADDR_HAS_ID;
        h[10..12].copy_from_slice(&id.to_le_bytes());
    }
    h[8] = bits;
    h[9] = meta.ecn & 3;
    h[12..16].copy_from_slice(&u32::from(meta.segment.unwrap_or(0)).to_le_bytes());
    h[16..18].copy_from_slice(&meta.src.port().to_le_bytes());
    h[18..20].copy_from_slice(&meta.dst.port().to_le_bytes());
    h
}

/// The metadata of an entry header whose framing (length, kind) was already checked, or
/// `None` if it says something no producer of ours writes (the entry is dropped).
pub fn decode_meta(h: &[u8; ENTRY_HEADER], len: usize) -> Option<Meta> {
    let bits = h[8];
    if bits & !(ADDR_SRC6 | ADDR_DST6 | ADDR_HAS_ID) != 0 || h[9] > 3 {
        return None;
    }
    let u16_at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
    let segment = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
    let segment = match segment {
        0 => None,
        s if s as usize <= len && s <= u32::from(u16::MAX) => Some(s as u16),
        _ => return None,
    };
    Some(Meta {
        src: SocketAddr::new(get_ip(&h[24..40], bits & ADDR_SRC6 != 0), u16_at(16)),
        dst: SocketAddr::new(get_ip(&h[40..56], bits & ADDR_DST6 != 0), u16_at(18)),
        ipv4_id: (bits & ADDR_HAS_ID != 0).then(|| u16_at(10)),
        segment,
        flags: u16_at(6),
        ecn: h[9],
    })
}

/// Why a ring can no longer be trusted: what the peer wrote that no correct peer writes.
/// Sticky: once broken, a ring stays broken (the daemon detaches the process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Corrupt {
    #[error("an index is not a multiple of 8")]
    Misaligned,
    #[error("the peer's index moved backwards")]
    Backwards,
    #[error("the tail is more than a capacity ahead of the head, or behind it")]
    OutOfRange,
    #[error("an entry of unknown kind")]
    BadKind,
    #[error("an entry longer than the data area, the published tail or the largest packet")]
    BadLength,
    #[error("a pad entry that does not end at the end of the data area")]
    BadPad,
}

/// Why a packet was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// No room now: the caller drops the packet and counts it (RC retransmits).
    #[error("ring full")]
    Full,
    /// Longer than [`MAX_PACKET`] or than the ring can ever hold.
    #[error("packet too large for the ring")]
    TooLarge,
    #[error("ring broken: {0}")]
    Broken(#[from] Corrupt),
}

#[cfg(test)]
mod tests;
