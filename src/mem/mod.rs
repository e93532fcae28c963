//! Registered memory: protection domains, memory regions, their keys, and the SGE
//! copies the transport does into and out of them.
//!
//! This is the emulator's model of IBA chapter 10.6 (Memory Management). It knows
//! nothing about packets: callers hand it a protection domain, a key, an address range
//! and the access they need, and get either the region or a [`MemError`] that says which
//! check failed, what was asked and what was found. The engine turns those errors into
//! NAK codes and completion statuses; this module never decides protocol outcomes.
//!
//! - [`Pd`] and [`Access`] (here): who may use a region and how.
//! - [`key`]: [`Lkey`]/[`Rkey`] (`index << 8 | key byte`, as rxe) and the deterministic
//!   [`KeyGen`] that picks key bytes.
//! - [`mr`]: [`MemoryRegion`], its bytes, and the overflow-safe range check.
//! - [`backing`]: [`Backing`], the bytes behind a region: owned, or the caller's own
//!   memory registered in place; the only `unsafe` in this module, fenced.
//! - [`table`]: [`MrTable`], which allocates PDs and MRs and validates every access in
//!   rxe's `lookup_mem` order.
//! - [`sge`]: scatter/gather lists and the cursor the transport walks them with
//!   (rxe `copy_data`).
//!
//! Layering (design §6.1, rule 2): this module imports nothing else of the crate and does
//! no I/O; `tests/layering.rs` checks it. Everything is deterministic: key bytes come
//! from a seeded generator, never from the OS.

// The one module of `mem` with unsafe code (raw copies and atomics on registered
// memory, the foreign-memory constructor); `tests/layering.rs` holds it to that.
#[allow(unsafe_code)]
pub mod backing;
pub mod key;
pub mod mr;
pub mod mw;
pub mod sge;
pub mod table;

pub use backing::{faults_caught, AtomicOp, Backing};
pub use key::{Key, KeyGen, Lkey, Rkey};
pub use mr::{range_within, MemoryRegion, MrState};
pub use mw::{MemoryWindow, MwBind, MwState, MwType, OnQp};
pub use sge::{copy_in, copy_out, gather, scatter, total_len, Sge, SgeCursor};
pub use table::{MrTable, MrTableConfig, Rereg};

use core::fmt;
use core::ops::{BitAnd, BitOr, BitOrAssign};

/// A protection domain handle (IBA chapter 10, "Protection Domains": a QP may only use
/// memory registered in its own PD, so one application's QP cannot reach another's
/// memory even with a valid key).
///
/// Handles are allocated by [`MrTable::alloc_pd`] and only mean something to the table
/// that allocated them; every lookup compares the PD of the caller with the PD of the
/// region, so a forged handle gains nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pd(u32);

impl Pd {
    /// The handle as a number (for logs and control messages).
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// A handle from a number, e.g. one received over the daemon's control socket. The
    /// table checks it on use ([`MrTable::check_pd`]).
    pub const fn from_raw(raw: u32) -> Pd {
        Pd(raw)
    }
}

impl fmt::Display for Pd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pd {}", self.0)
    }
}

/// Access rights of a memory region, bit-compatible with ibverbs' `IBV_ACCESS_*`.
///
/// Local read access is always granted and has no flag (IBA 10.6, memory region access
/// rights). REMOTE_WRITE and REMOTE_ATOMIC also require LOCAL_WRITE: a region the
/// network may write must be one the local HCA may write; [`Access::is_consistent`]
/// checks it and [`MrTable::reg_mr`] refuses an inconsistent set, as `ibv_reg_mr` does
/// with `EINVAL`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u32);

impl Access {
    /// `IBV_ACCESS_LOCAL_WRITE`: the local HCA may write (receive buffers, READ
    /// responses, atomic results).
    pub const LOCAL_WRITE: Access = Access(1);
    /// `IBV_ACCESS_REMOTE_WRITE`: RDMA WRITE from the peer.
    pub const REMOTE_WRITE: Access = Access(2);
    /// `IBV_ACCESS_REMOTE_READ`: RDMA READ from the peer.
    pub const REMOTE_READ: Access = Access(4);
    /// `IBV_ACCESS_REMOTE_ATOMIC`: compare-and-swap and fetch-and-add from the peer.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// `IBV_ACCESS_MW_BIND`: memory windows may be bound to the region (IBA 10.6.7,
    /// C10-73). Grants no access by itself.
    pub const MW_BIND: Access = Access(16);
    /// Every access right: LOCAL_WRITE and the three remote ones (not MW_BIND, which is
    /// a permission to bind windows, not an access, and applies to regions only).
    pub const ALL: Access = Access(0xf);
    /// Every flag this module knows.
    const KNOWN: Access = Access(0x1f);
    /// The rights a peer can use (an R_Key is issued only with one of them).
    pub const REMOTE: Access = Access(2 | 4 | 8);

    const NAMES: [(Access, &'static str); 5] = [
        (Access::LOCAL_WRITE, "LOCAL_WRITE"),
        (Access::REMOTE_WRITE, "REMOTE_WRITE"),
        (Access::REMOTE_READ, "REMOTE_READ"),
        (Access::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        (Access::MW_BIND, "MW_BIND"),
    ];

    /// No rights beyond local read.
    pub const fn empty() -> Access {
        Access(0)
    }

    /// The `IBV_ACCESS_*` bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Flags from `IBV_ACCESS_*` bits; `None` if any bit is one this module does not
    /// implement (zero-based, on-demand paging, ...), so that an
    /// unsupported request is refused rather than silently narrowed.
    pub const fn from_bits(bits: u32) -> Option<Access> {
        if bits & !Access::KNOWN.0 == 0 {
            Some(Access(bits))
        } else {
            None
        }
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every flag of `other` is set in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag of `other` is set in `self`.
    pub const fn intersects(self, other: Access) -> bool {
        self.0 & other.0 != 0
    }

    /// The flags of both.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }

    /// The flags of `self` that are not in `other` (what is missing when a check fails).
    pub const fn difference(self, other: Access) -> Access {
        Access(self.0 & !other.0)
    }

    /// The IBA/ibverbs rule: REMOTE_WRITE or REMOTE_ATOMIC only together with
    /// LOCAL_WRITE (a remote peer must not get a right the local HCA lacks).
    pub const fn is_consistent(self) -> bool {
        !self.intersects(Access::REMOTE_WRITE.union(Access::REMOTE_ATOMIC))
            || self.contains(Access::LOCAL_WRITE)
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

impl BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        *self = self.union(rhs);
    }
}

impl BitAnd for Access {
    type Output = Access;
    fn bitand(self, rhs: Access) -> Access {
        Access(self.0 & rhs.0)
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("LOCAL_READ");
        }
        let mut first = true;
        for (flag, name) in Access::NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Access({self})")
    }
}

/// Why a memory operation was refused.
///
/// Lookup failures carry the key that was presented ([`Key::Local`] for L_Keys, i.e. a
/// local protection error; [`Key::Remote`] for R_Keys, i.e. a remote access error) plus
/// what was asked and what the table found, so a log line is enough to see the cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    /// The protection domain was never allocated or has been deallocated.
    #[error("no such protection domain: {pd}")]
    NoSuchPd { pd: Pd },
    /// `dealloc_pd` while memory regions or windows are still allocated in the PD.
    #[error("{pd} still has {mrs} memory region(s) or window(s) allocated")]
    PdInUse { pd: Pd, mrs: usize },
    /// REMOTE_WRITE or REMOTE_ATOMIC requested without LOCAL_WRITE (ibv_reg_mr: EINVAL).
    #[error("access {access} needs LOCAL_WRITE")]
    InvalidAccess { access: Access },
    /// A memory region of zero bytes (rxe refuses it: `ib_umem_get` pins no page).
    #[error("zero-length memory region at iova {iova:#x}")]
    ZeroLengthMr { iova: u64 },
    /// The region `[iova, iova + length)` does not fit in the 64-bit address space.
    #[error("memory region at iova {iova:#x} of {length} bytes wraps past 2^64")]
    MrWraps { iova: u64, length: u64 },
    /// The region is longer than the table's configured maximum.
    #[error("memory region of {length} bytes exceeds the maximum of {max}")]
    MrTooLarge { length: u64, max: u64 },
    /// Foreign memory at address 0.
    #[error("memory region at a null address")]
    NullAddress,
    /// The bytes backing the region could not be allocated.
    #[error("cannot allocate {length} bytes for a memory region")]
    OutOfMemory { length: u64 },
    /// Every MR index is in use.
    #[error("memory region table full ({max} regions)")]
    TableFull { max: u32 },
    /// No memory region is registered at the key's index.
    #[error("no memory region for {key}")]
    NoSuchMr { key: Key },
    /// A region exists at the index but its key byte differs (stale or forged key).
    #[error("{asked} does not match the region's {found}")]
    KeyMismatch { asked: Key, found: Key },
    /// The region belongs to another protection domain.
    #[error("{key} belongs to {found}, not {asked}")]
    PdMismatch { key: Key, asked: Pd, found: Pd },
    /// The region was invalidated (SEND with Invalidate or Local Invalidate), or the
    /// window is not bound (free, invalidated, deallocated, or bound with length 0).
    #[error("{key} names an invalidated region or an unbound window")]
    MrInvalid { key: Key },
    /// SEND with Invalidate or LOCAL_INV named a region registered with Register Memory
    /// Region or a type 1 window: only type 2 windows and fast-registered regions may
    /// be invalidated that way (IBA 10.6.7.2.5, o10-37.2.26), and roce-emu has no
    /// fast registration.
    #[error("{key} names a registered region or a type 1 window, which cannot be invalidated")]
    NotInvalidatable { key: Key },
    /// A type 2 window's R_Key arrived on another QP than the one it is bound to (type
    /// 2B windows belong to their QP, IBA 10.6.7.2).
    #[error("{key} is bound to QP {found:?}, not QP {asked:?}")]
    QpMismatch {
        key: Key,
        asked: Option<u32>,
        found: Option<u32>,
    },
    /// A memory window bind was refused (the IBA rule broken is in the message): the
    /// work request completes with IBV_WC_MW_BIND_ERR.
    #[error("bind of window {rkey} refused: {why}")]
    BindRefused { rkey: Rkey, why: &'static str },
    /// `dereg_mr` or `rereg_mr` of a region memory windows are bound to (IBA
    /// 10.6.7.2.6; rxe refuses with EINVAL).
    #[error("{lkey} has {windows} memory window(s) bound")]
    MrHasWindows { lkey: Lkey, windows: u32 },
    /// `rereg_mr` asked for nothing, or for something invalid.
    #[error("rereg_mr: {why}")]
    BadRereg { why: &'static str },
    /// The region lacks an access right the operation needs.
    #[error("{key} grants {have}, the operation needs {need}")]
    AccessDenied {
        key: Key,
        need: Access,
        have: Access,
    },
    /// `[va, va + len)` is not inside the region's `[iova, iova + length)`.
    #[error("{key}: [{va:#x}, +{len}) is outside the region [{mr_iova:#x}, +{mr_len})")]
    OutOfRange {
        key: Key,
        va: u64,
        len: u64,
        mr_iova: u64,
        mr_len: u64,
    },
    /// The memory behind the region faulted during the access: the program unmapped it,
    /// made it read-only (for a write or an atomic) or inaccessible, or truncated the file
    /// it maps, after registering it. The access did nothing more (a WRITE may have stored
    /// part of its bytes); as for a bad key, the peer gets a remote access error (a local
    /// SGE, a local protection error).
    #[error(
        "{key}: the memory at [{va:#x}, +{len}) faulted (unmapped or protected since registration)"
    )]
    Fault { key: Key, va: u64, len: u64 },
    /// An atomic operation on an address that is not 8-byte aligned.
    #[error("atomic operation at {va:#x} is not 8-byte aligned")]
    MisalignedAtomic { va: u64 },
    /// More data than the SGE list has room (or bytes) for, from the cursor on.
    #[error("local length error: {need} bytes, {have} left in the SGE list")]
    LocalLengthError { need: u64, have: u64 },
    /// The SGE lengths add up to more than a message can carry (u32 bytes).
    #[error("SGE list of {sges} entries is longer than u32::MAX bytes")]
    SgeTotalOverflow { sges: usize },
}

impl MemError {
    /// The key the failed check was about, if the error comes from a lookup.
    pub fn key(&self) -> Option<Key> {
        match *self {
            MemError::NoSuchMr { key }
            | MemError::PdMismatch { key, .. }
            | MemError::MrInvalid { key }
            | MemError::QpMismatch { key, .. }
            | MemError::AccessDenied { key, .. }
            | MemError::OutOfRange { key, .. }
            | MemError::Fault { key, .. } => Some(key),
            MemError::KeyMismatch { asked, .. } => Some(asked),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_bits_are_ibverbs_values() {
        assert_eq!(Access::LOCAL_WRITE.bits(), 1);
        assert_eq!(Access::REMOTE_WRITE.bits(), 2);
        assert_eq!(Access::REMOTE_READ.bits(), 4);
        assert_eq!(Access::REMOTE_ATOMIC.bits(), 8);
        assert_eq!(Access::MW_BIND.bits(), 16);
        assert_eq!(Access::from_bits(0xf), Some(Access::ALL));
        assert_eq!(Access::from_bits(0x1f), Some(Access::ALL | Access::MW_BIND));
        // IBV_ACCESS_ZERO_BASED (32) and anything above is not implemented: refused.
        assert_eq!(Access::from_bits(32), None);
        assert_eq!(Access::from_bits(1 | 64), None);
    }

    #[test]
    fn access_set_operations() {
        let rw = Access::LOCAL_WRITE | Access::REMOTE_READ;
        assert!(rw.contains(Access::LOCAL_WRITE));
        assert!(rw.contains(Access::empty()));
        assert!(!rw.contains(Access::LOCAL_WRITE | Access::REMOTE_WRITE));
        assert!(rw.intersects(Access::REMOTE_READ | Access::REMOTE_ATOMIC));
        assert!(!rw.intersects(Access::REMOTE_ATOMIC));
        assert_eq!(rw.difference(Access::LOCAL_WRITE), Access::REMOTE_READ);
        assert_eq!(rw & Access::REMOTE_READ, Access::REMOTE_READ);
        let mut a = Access::empty();
        a |= Access::REMOTE_ATOMIC;
        assert_eq!(a.union(Access::LOCAL_WRITE).bits(), 9);
        assert_eq!(rw.to_string(), "LOCAL_WRITE|REMOTE_READ");
        assert_eq!(Access::empty().to_string(), "LOCAL_READ");
    }

    #[test]
    fn remote_write_and_atomic_need_local_write() {
        for bits in 0..32 {
            let a = Access::from_bits(bits).unwrap();
            let needs_lw = a.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC);
            assert_eq!(
                a.is_consistent(),
                !needs_lw || a.contains(Access::LOCAL_WRITE),
                "{a}"
            );
        }
        assert!(Access::REMOTE_READ.is_consistent());
        assert!(!Access::REMOTE_WRITE.is_consistent());
        assert!(!Access::REMOTE_ATOMIC.is_consistent());
        assert!((Access::REMOTE_ATOMIC | Access::LOCAL_WRITE).is_consistent());
    }

    #[test]
    fn error_messages_name_what_failed() {
        let e = MemError::PdMismatch {
            key: Key::Remote(Rkey(0x0000_0142)),
            asked: Pd::from_raw(2),
            found: Pd::from_raw(1),
        };
        assert_eq!(e.to_string(), "rkey 0x00000142 belongs to pd 1, not pd 2");
        assert_eq!(e.key(), Some(Key::Remote(Rkey(0x142))));
        assert_eq!(MemError::MisalignedAtomic { va: 4 }.key(), None);
    }
}
