//! A memory region: a range of the 64-bit I/O virtual address space, its access rights,
//! its keys, its state, and the bytes behind it.
//!
//! The bytes are a [`Backing`]: a buffer this crate allocated (tools, tests) or memory
//! the application registered in place (the C ABI's `ibv_reg_mr`). Either way the NIC
//! reaches them through raw copies and real 8-byte atomics with no lock, and the
//! application through [`MemoryRegion::read`], [`MemoryRegion::write`] and friends (or,
//! for foreign memory, directly). The iova is whatever address the application chose to
//! advertise; the peer uses it in RETH and AtomicETH, and every access is checked
//! against `[iova, iova + length)` before the backing is touched.

use super::backing::{AtomicOp, Backing};
use super::key::{Key, Lkey, Rkey};
use super::{Access, MemError, Pd};
use core::fmt;
use core::ops::Range;
use core::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

/// Whether a region's keys work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MrState {
    /// Keys are usable: accesses are checked and carried out.
    Valid,
    /// Invalidated by SEND with Invalidate or Local Invalidate (IBA 10.6, Memory
    /// Management, invalidation): every L_Key and R_Key access is refused until the
    /// region is deregistered. The application keeps access to its own bytes.
    Invalid,
}

/// Whether `[va, va + len)` lies inside `[mr_iova, mr_iova + mr_len)`, without overflow
/// at any input.
///
/// Written as rxe's `mr_check_range`: first `len > mr_len`, then `va < mr_iova`, then
/// `va - mr_iova > mr_len - len`. Each subtraction is guarded by the comparison before
/// it, so nothing wraps; the naive `va + len > mr_iova + mr_len` wraps near `u64::MAX`
/// and accepted out-of-region accesses in rxe (CVE-2016-8636).
///
/// A zero-length range is inside iff `mr_iova <= va <= mr_iova + mr_len`: it may sit at
/// the region's end (one past the last byte) like an empty slice at `s[s.len()..]`, so
/// a cursor that has consumed a whole region is still "in" it; it touches no byte.
pub const fn range_within(mr_iova: u64, mr_len: u64, va: u64, len: u64) -> bool {
    !(len > mr_len || va < mr_iova || va - mr_iova > mr_len - len)
}

/// A registered memory region. Created by [`MrTable::reg_mr`](super::MrTable::reg_mr)
/// (owned bytes) or [`MrTable::reg_mr_backing`](super::MrTable::reg_mr_backing) (any
/// [`Backing`], e.g. the program's own memory), shared as `Arc<MemoryRegion>`: a lookup
/// clones the `Arc`, so a region deregistered while an operation holds it stays alive
/// (and its bytes with it) until that operation ends. For foreign memory that is what
/// the caller must wait for before freeing it: after `dereg_mr`, the registration's own
/// `Arc` is the last one when `Arc::strong_count` is 1 (no new lookup can find it).
pub struct MemoryRegion {
    pd: Pd,
    iova: u64,
    length: u64,
    access: Access,
    lkey: Lkey,
    rkey: Rkey,
    /// `MrState` as a byte, so invalidation needs no lock.
    state: AtomicU8,
    /// Memory windows bound to the region: while any is, it cannot be deregistered
    /// (IBA 10.6.7.2.6; rxe `num_mw`).
    windows: AtomicU32,
    /// Shared with the region a re-registration without new translation replaced.
    bytes: Arc<Backing>,
}

const STATE_VALID: u8 = 0;
const STATE_INVALID: u8 = 1;

impl MemoryRegion {
    /// Callers (the table) have checked the arguments: `iova + bytes.len() <= 2^64`,
    /// `access` consistent.
    pub(super) fn new(
        pd: Pd,
        iova: u64,
        access: Access,
        lkey: Lkey,
        rkey: Rkey,
        bytes: Backing,
    ) -> MemoryRegion {
        MemoryRegion {
            pd,
            iova,
            length: bytes.len() as u64,
            access,
            lkey,
            rkey,
            state: AtomicU8::new(STATE_VALID),
            windows: AtomicU32::new(0),
            bytes: Arc::new(bytes),
        }
    }

    /// The same region (same lkey, same state) with another PD, rights, rkey or bytes
    /// (`ibv_rereg_mr`); without new bytes, the old ones are shared, not copied.
    pub(super) fn rereg(
        &self,
        pd: Pd,
        iova: u64,
        access: Access,
        rkey: Rkey,
        bytes: Option<Backing>,
    ) -> MemoryRegion {
        let bytes = bytes.map_or_else(|| Arc::clone(&self.bytes), Arc::new);
        let mr = MemoryRegion {
            pd,
            iova,
            length: bytes.len() as u64,
            access,
            lkey: self.lkey,
            rkey,
            state: AtomicU8::new(STATE_VALID),
            windows: AtomicU32::new(0),
            bytes,
        };
        mr.state
            .store(self.state.load(Ordering::Acquire), Ordering::Release);
        mr
    }

    /// Memory windows bound to the region now.
    pub fn windows(&self) -> u32 {
        self.windows.load(Ordering::Acquire)
    }

    pub(super) fn window_bound(&self) {
        self.windows.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn window_unbound(&self) {
        self.windows.fetch_sub(1, Ordering::AcqRel);
    }

    /// The protection domain the region was registered in.
    pub fn pd(&self) -> Pd {
        self.pd
    }

    /// The first address of the region, as the peer names it.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Bytes in the region (never zero).
    pub fn length(&self) -> u64 {
        self.length
    }

    /// The access rights given at registration.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The local key (for SGEs of this PD's QPs).
    pub fn lkey(&self) -> Lkey {
        self.lkey
    }

    /// The remote key (for the peer): the lkey's value, remote rights or not (rxe's
    /// `rxe_mr_init` after Linux 6.1, mlx5; 6.1 gave 0 without a remote right): what a peer may do with it is the region's
    /// access rights' call, checked on every access.
    pub fn rkey(&self) -> Rkey {
        self.rkey
    }

    /// Valid or invalidated.
    pub fn state(&self) -> MrState {
        match self.state.load(Ordering::Acquire) {
            STATE_VALID => MrState::Valid,
            _ => MrState::Invalid,
        }
    }

    /// Whether the keys still work.
    pub fn is_valid(&self) -> bool {
        self.state() == MrState::Valid
    }

    pub(super) fn set_invalid(&self) {
        self.state.store(STATE_INVALID, Ordering::Release);
    }

    /// [`range_within`] for this region, with the error naming `key`.
    pub(super) fn check_range_for(&self, key: Key, va: u64, len: u64) -> Result<(), MemError> {
        if range_within(self.iova, self.length, va, len) {
            Ok(())
        } else {
            Err(MemError::OutOfRange {
                key,
                va,
                len,
                mr_iova: self.iova,
                mr_len: self.length,
            })
        }
    }

    /// Whether `[va, va + len)` is inside the region (errors name the lkey).
    pub fn check_range(&self, va: u64, len: u64) -> Result<(), MemError> {
        self.check_range_for(Key::Local(self.lkey), va, len)
    }

    /// Offset into the bytes of `va`, which a range check has accepted: `va - iova <=
    /// length == bytes.len()`, so the value fits in usize.
    fn offset(&self, va: u64) -> usize {
        (va - self.iova) as usize
    }

    pub(super) fn read_for(&self, key: Key, va: u64, out: &mut [u8]) -> Result<(), MemError> {
        let len = out.len() as u64;
        self.check_range_for(key, va, len)?;
        self.bytes
            .read(self.offset(va), out)
            .map_err(|_| MemError::Fault { key, va, len })
    }

    pub(super) fn write_for(&self, key: Key, va: u64, data: &[u8]) -> Result<(), MemError> {
        let len = data.len() as u64;
        self.check_range_for(key, va, len)?;
        self.bytes
            .write(self.offset(va), data)
            .map_err(|_| MemError::Fault { key, va, len })
    }

    /// For the application-side helpers that return bytes, not errors: the program's own
    /// memory faulting under them (it unmapped a region it still uses) is its bug, said
    /// plainly, as the direct access it stands for would have crashed.
    fn app_fault(&self) -> ! {
        panic!(
            "the memory of region {} at {:#x} was unmapped or protected by the program",
            self.lkey,
            self.bytes.addr()
        )
    }

    /// The bytes behind the region: owned or foreign, its host address.
    pub fn backing(&self) -> &Backing {
        &self.bytes
    }

    /// Application side: copies the bytes at `[iova, iova + out.len())` into `out`.
    ///
    /// Access rights and state do not apply: they govern the HCA's use of the keys, not
    /// the application's use of its own memory.
    pub fn read(&self, iova: u64, out: &mut [u8]) -> Result<(), MemError> {
        self.read_for(Key::Local(self.lkey), iova, out)
    }

    /// Application side: copies `data` to `[iova, iova + data.len())`.
    pub fn write(&self, iova: u64, data: &[u8]) -> Result<(), MemError> {
        self.write_for(Key::Local(self.lkey), iova, data)
    }

    /// Application side: fills the whole region with `byte`.
    pub fn fill(&self, byte: u8) {
        if self.bytes.fill(byte).is_err() {
            self.app_fault();
        }
    }

    /// Application side: a copy of all the region's bytes (index 0 is `iova`).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.bytes.len()];
        if self.bytes.read(0, &mut v).is_err() {
            self.app_fault();
        }
        v
    }

    /// Application side: runs `f` on a snapshot of all the region's bytes (index 0 is
    /// `iova`). It copies the whole region (there is no lock to hold the NIC off while
    /// `f` looks, so `f` sees a copy); for a few bytes [`read`](Self::read) is cheaper.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(&self.to_vec())
    }

    /// Application side: runs `f` on a copy of the bytes at offsets `range` of the region
    /// (offset 0 is `iova`): [`with_bytes`](Self::with_bytes) copying only what `f`
    /// looks at. Panics if `range` is not inside the region, as slice indexing would.
    pub fn with_bytes_in<R>(&self, range: Range<usize>, f: impl FnOnce(&[u8]) -> R) -> R {
        assert!(
            range.start <= range.end && range.end <= self.bytes.len(),
            "range {range:?} outside the region's {} bytes",
            self.bytes.len()
        );
        let mut v = vec![0; range.len()];
        if self.bytes.read(range.start, &mut v).is_err() {
            self.app_fault();
        }
        f(&v)
    }

    /// Application side: runs `f` on a copy of all the region's bytes and writes the
    /// copy back. Not atomic against the NIC: a remote write landing between the copy
    /// and the write-back is overwritten. Meant for setting a buffer up before traffic.
    pub fn with_bytes_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let mut v = self.to_vec();
        let r = f(&mut v);
        if self.bytes.write(0, &v).is_err() {
            self.app_fault();
        }
        r
    }

    /// A real 8-byte atomic at `va` (`op` on the word of the region's memory); the
    /// original value. The word is the u64 in host byte
    /// order (what the host CPU sees as the value, as ibverbs' native `uint64_t`); the
    /// wire's big-endian AtomicETH fields are converted by the engine. Being a hardware
    /// atomic on the memory itself, it is atomic against other QPs' atomics and against
    /// the program's own atomic operations on the same word.
    pub(super) fn atomic_for(&self, key: Key, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        self.check_range_for(key, va, 8)?;
        // Alignment after the key and range checks, as rxe (`rxe_mr_do_atomic_op`). An
        // aligned va at a misaligned host address (foreign memory registered at an
        // iova of another remainder mod 8) is refused the same way: the word cannot be
        // operated on atomically.
        if va % 8 != 0 {
            return Err(MemError::MisalignedAtomic { va });
        }
        match self.bytes.atomic(self.offset(va), op) {
            None => Err(MemError::MisalignedAtomic { va }),
            Some(Ok(orig)) => Ok(orig),
            Some(Err(_)) => Err(MemError::Fault { key, va, len: 8 }),
        }
    }
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("pd", &self.pd)
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("length", &self.length)
            .field("access", &self.access)
            .field("lkey", &format_args!("{}", self.lkey))
            .field("rkey", &format_args!("{}", self.rkey))
            .field("state", &self.state())
            .field("backing", &self.bytes)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn oracle(mr_iova: u64, mr_len: u64, va: u64, len: u64) -> bool {
        let (mi, ml, v, l) = (mr_iova as u128, mr_len as u128, va as u128, len as u128);
        v >= mi && v + l <= mi + ml
    }

    fn mr(iova: u64, len: usize) -> MemoryRegion {
        MemoryRegion::new(
            Pd::from_raw(1),
            iova,
            Access::LOCAL_WRITE,
            Lkey::new(1, 7),
            Rkey::new(1, 7),
            Backing::owned_at(iova, len as u64).unwrap(),
        )
    }

    #[test]
    fn range_exact_ends() {
        // Region [0x1000, 0x1010).
        let (i, l) = (0x1000, 16);
        assert!(range_within(i, l, 0x1000, 16));
        assert!(range_within(i, l, 0x100f, 1));
        assert!(!range_within(i, l, 0x100f, 2));
        assert!(!range_within(i, l, 0x0fff, 1));
        assert!(!range_within(i, l, 0x1000, 17));
        assert!(!range_within(i, l, 0x1010, 1));
        // Zero-length: anywhere in [iova, iova + len], including one past the end.
        assert!(range_within(i, l, 0x1000, 0));
        assert!(range_within(i, l, 0x1010, 0));
        assert!(!range_within(i, l, 0x1011, 0));
        assert!(!range_within(i, l, 0x0fff, 0));
    }

    #[test]
    fn range_near_u64_max() {
        let max = u64::MAX;
        // A region whose last byte is at u64::MAX (end == 2^64).
        let (i, l) = (max - 15, 16);
        assert!(range_within(i, l, max, 1));
        assert!(range_within(i, l, max - 15, 16));
        assert!(range_within(i, l, max - 7, 8));
        assert!(!range_within(i, l, max - 7, 9));
        assert!(!range_within(i, l, max, 2)); // va + len wraps to 0
        assert!(!range_within(i, l, max, max)); // wraps to max - 1
        assert!(range_within(i, l, max, 0));
        // The CVE-2016-8636 shape: va + len wraps below the region end.
        let (i, l) = (0x1000, 0x1000);
        assert!(!range_within(i, l, 0x1800, max - 0x7ff));
        assert!(!range_within(i, l, max, 0x1001));
        // A region covering the whole space except byte u64::MAX.
        assert!(range_within(0, max, 0, max));
        assert!(range_within(0, max, max - 1, 1));
        assert!(!range_within(0, max, max, 1));
        assert!(range_within(0, max, max, 0));
        // Zero-length region (the table refuses them, the function still answers).
        assert!(range_within(5, 0, 5, 0));
        assert!(!range_within(5, 0, 5, 1));
        assert!(!range_within(5, 0, 6, 0));
    }

    #[test]
    fn read_write_by_iova() {
        let m = mr(0xffff_ffff_ffff_fff0, 16);
        m.write(0xffff_ffff_ffff_fff8, &[1, 2, 3, 4, 5, 6, 7, 8])
            .unwrap();
        let mut out = [0u8; 4];
        m.read(0xffff_ffff_ffff_fffc, &mut out).unwrap();
        assert_eq!(out, [5, 6, 7, 8]);
        assert_eq!(
            m.write(0xffff_ffff_ffff_fffc, &[0; 5]),
            Err(MemError::OutOfRange {
                key: Key::Local(Lkey::new(1, 7)),
                va: 0xffff_ffff_ffff_fffc,
                len: 5,
                mr_iova: 0xffff_ffff_ffff_fff0,
                mr_len: 16
            })
        );
        // Nothing was written by the refused call.
        m.with_bytes(|b| assert_eq!(&b[12..], &[5, 6, 7, 8]));
        m.read(u64::MAX, &mut []).unwrap();
        m.with_bytes_mut(|b| b[0] = 0xaa);
        let mut one = [0u8; 1];
        m.read(0xffff_ffff_ffff_fff0, &mut one).unwrap();
        assert_eq!(one, [0xaa]);
        m.fill(0x5a);
        m.with_bytes(|b| assert!(b.iter().all(|&x| x == 0x5a)));
        m.write(0xffff_ffff_ffff_fffe, &[1, 2]).unwrap();
        m.with_bytes_in(13..16, |b| assert_eq!(b, [0x5a, 1, 2]));
        m.with_bytes_in(16..16, |b| assert!(b.is_empty()));
        assert_eq!(m.to_vec().len(), 16);
    }

    #[test]
    #[should_panic(expected = "outside the region's 16 bytes")]
    fn with_bytes_in_past_the_end_panics() {
        mr(0, 16).with_bytes_in(8..17, |_| ());
    }

    #[test]
    fn app_access_ignores_state_and_rights() {
        let m = MemoryRegion::new(
            Pd::from_raw(1),
            0,
            Access::empty(),
            Lkey(0x100),
            Rkey(0x100),
            Backing::owned(8).unwrap(),
        );
        m.set_invalid();
        assert_eq!(m.state(), MrState::Invalid);
        assert!(!m.is_valid());
        m.write(0, &[9]).unwrap();
        let mut b = [0];
        m.read(0, &mut b).unwrap();
        assert_eq!(b, [9]);
    }

    const LOAD: AtomicOp = AtomicOp::FetchAdd(0);

    #[test]
    fn atomic_native_order_and_alignment() {
        let m = mr(0x2000, 32);
        m.write(0x2008, &0x0102_0304_0506_0708u64.to_ne_bytes())
            .unwrap();
        let k = Key::Remote(m.rkey());
        let orig = m.atomic_for(k, 0x2008, AtomicOp::FetchAdd(1)).unwrap();
        assert_eq!(orig, 0x0102_0304_0506_0708);
        let mut b = [0u8; 8];
        m.read(0x2008, &mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 0x0102_0304_0506_0709);
        assert_eq!(
            m.atomic_for(k, 0x2004, LOAD),
            Err(MemError::MisalignedAtomic { va: 0x2004 })
        );
        // The last word of the region is reachable; one past it is out of range.
        assert_eq!(m.atomic_for(k, 0x2018, LOAD), Ok(0));
        assert!(matches!(
            m.atomic_for(k, 0x2020, LOAD),
            Err(MemError::OutOfRange { len: 8, .. })
        ));
    }

    #[test]
    fn debug_does_not_dump_bytes() {
        let s = format!("{:?}", mr(0x10, 4096));
        assert!(s.contains("iova: 0x10"), "{s}");
        assert!(s.contains("lkey 0x00000107"), "{s}");
        assert!(s.len() < 300, "{s}");
    }

    fn edgy() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u64>(),
            0u64..64,
            (0u64..64).prop_map(|d| u64::MAX - d),
            (0u64..64).prop_map(|d| (1u64 << 63).wrapping_add(d).wrapping_sub(32)),
        ]
    }

    proptest! {
        /// The rxe-shaped check accepts exactly when [va, va+len) ⊆ [iova, iova+mr_len)
        /// in exact (u128) arithmetic, for any inputs, including wrapping ones.
        #[test]
        fn range_check_matches_u128(mr_iova in edgy(), mr_len in edgy(), va in edgy(), len in edgy()) {
            prop_assert_eq!(range_within(mr_iova, mr_len, va, len), oracle(mr_iova, mr_len, va, len));
        }

        /// Near-boundary cases are rare under uniform inputs: derive va/len from the region.
        #[test]
        fn range_check_near_region(mr_iova in edgy(), mr_len in 0u64..64, dva in -70i64..70, len in 0u64..80) {
            let va = mr_iova.wrapping_add_signed(dva);
            prop_assert_eq!(range_within(mr_iova, mr_len, va, len), oracle(mr_iova, mr_len, va, len));
        }

        /// The same through a real region: read succeeds exactly when the oracle allows.
        #[test]
        fn region_read_matches_u128(mr_iova in edgy(), mr_len in 1usize..48, dva in -60i64..60, len in 0usize..56) {
            let end_ok = (mr_iova as u128) + (mr_len as u128) <= 1u128 << 64;
            prop_assume!(end_ok);
            let m = mr(mr_iova, mr_len);
            let va = mr_iova.wrapping_add_signed(dva);
            let mut buf = vec![0u8; len];
            prop_assert_eq!(m.read(va, &mut buf).is_ok(), oracle(mr_iova, mr_len as u64, va, len as u64));
        }
    }
}
