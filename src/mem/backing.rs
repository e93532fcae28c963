//! The bytes behind a memory region: a buffer this module allocates ("owned", for the
//! tools and tests) or memory the caller already has ("foreign", what `ibv_reg_mr(pd,
//! addr, len, access)` hands the C ABI). Both are a raw pointer and a length, reached by
//! one code path, so the data path takes no lock and does not care which kind it has.
//!
//! This module (with its submodule `fault`) is the only one of `mem` with `unsafe` code
//! (`tests/layering.rs` checks it), and its safe functions are sound for every input: each access checks its own bounds
//! here, whatever the caller checked before. The range, key, PD and access checks of
//! the table still come first; the checks here are the last line, not the policy.
//!
//! Concurrency. The program may read and write a registered buffer while the NIC does
//! (it can on real hardware, and perftest does). So no Rust reference (`&[u8]`,
//! `&mut [u8]`) to region memory is ever created: copies are memmoves on raw pointers,
//! and atomics are `lock`ed read-modify-writes of the aligned word. What a copy
//! racing with another writer of the same bytes sees is unspecified, as on hardware
//! (IBA 10.6: RDMA operations are not atomic with respect to each other or to the
//! host); an ATOMIC is atomic against every other atomic on the same word, the program's
//! own `AtomicU64`/`__atomic` operations included.
//!
//! Memory that goes bad. Foreign memory's copies and atomics run in `fault`'s routines:
//! if the program unmapped it, made it read-only or inaccessible, or truncated the file it
//! maps after registering it, the access returns [`Faulted`] (a SIGSEGV/SIGBUS caught by
//! an exception table) instead of killing the program, and the region's callers turn it
//! into an access error ([`MemError::Fault`]). x86_64 only for now (see `fault`).

use super::MemError;
use core::fmt;
use core::ptr::NonNull;
#[cfg(test)]
use core::sync::atomic::AtomicU64;
use std::alloc::{self, Layout};

// Copies and atomics on foreign memory that fail cleanly when the program has unmapped or
// write-protected it since registration (a SIGSEGV/SIGBUS handler and an exception table).
mod fault;
pub use fault::{caught as faults_caught, Faulted};

/// An ATOMIC's operation on a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// Fetch-and-add (wrapping).
    FetchAdd(u64),
    /// Compare-and-swap: the word becomes `swap` if it equals `compare`.
    CompareSwap { compare: u64, swap: u64 },
}

/// Alignment of owned buffers: a cache line (it also satisfies `AtomicU64`'s 8).
const OWNED_ALIGN: usize = 64;

/// The bytes of one memory region: `len` bytes at `ptr`.
pub struct Backing {
    ptr: NonNull<u8>,
    len: usize,
    /// For an owned buffer, the allocation to free on drop (its start and layout; `ptr`
    /// may lie a few bytes into it, see [`Backing::owned_at`]). `None` for foreign memory.
    alloc: Option<(NonNull<u8>, Layout)>,
}

// SAFETY: a `Backing` is a pointer and a length with no thread affinity. An owned buffer
// comes from the global allocator, which may free it on any thread; foreign memory's
// validity is the obligation of `Backing::foreign`'s caller, for as long as the
// `Backing` lives, whichever thread holds it.
unsafe impl Send for Backing {}

// SAFETY: shared access (`&Backing`) only does raw copies and `AtomicU64` operations
// through the pointer, bounds-checked against `len`; it never hands out a Rust
// reference to the bytes, so no `&`/`&mut` aliasing rule is at stake when two threads
// use the same region. Byte races between two writers give unspecified bytes, which is
// the NIC semantics the module documents (above).
unsafe impl Sync for Backing {}

impl Backing {
    /// `length` zeroed bytes this module allocates and frees, starting on a cache line.
    /// Refused: `length == 0` ([`MemError::ZeroLengthMr`]) and a length no allocator can
    /// provide ([`MemError::OutOfMemory`]: an error, not an abort).
    pub fn owned(length: u64) -> Result<Backing, MemError> {
        Backing::owned_at(0, length)
    }

    /// Like [`Backing::owned`], placed so that the host address of every byte has the
    /// same remainder modulo 64 as its iova when the region is registered at `iova`.
    /// Then every 8-byte-aligned va of the region is an 8-byte-aligned host address, so
    /// ATOMICs never meet a misaligned host word (the table's `reg_mr` uses this).
    pub fn owned_at(iova: u64, length: u64) -> Result<Backing, MemError> {
        if length == 0 {
            return Err(MemError::ZeroLengthMr { iova });
        }
        let phase = (iova % OWNED_ALIGN as u64) as usize;
        let layout = usize::try_from(length)
            .ok()
            .and_then(|n| n.checked_add(phase))
            .and_then(|size| Layout::from_size_align(size, OWNED_ALIGN).ok())
            .ok_or(MemError::OutOfMemory { length })?;
        // SAFETY: `layout` has a non-zero size (length >= 1), as `alloc_zeroed` requires.
        let base = unsafe { alloc::alloc_zeroed(layout) };
        let base = NonNull::new(base).ok_or(MemError::OutOfMemory { length })?;
        // `phase < layout.size()`, so the start stays inside the allocation; the safe
        // `wrapping_add` is exact here and keeps this free of another unsafe block.
        let ptr = NonNull::new(base.as_ptr().wrapping_add(phase))
            .ok_or(MemError::OutOfMemory { length })?;
        Ok(Backing {
            ptr,
            len: length as usize,
            alloc: Some((base, layout)),
        })
    }

    /// Memory the caller owns: `length` bytes at `addr`, as `ibv_reg_mr(pd, addr,
    /// length, access)` gives them. The region's iova is chosen at registration;
    /// `ibv_reg_mr` uses the address ([`Backing::addr`]).
    ///
    /// Refused without touching the memory: a null `addr` ([`MemError::NullAddress`]),
    /// `length == 0` ([`MemError::ZeroLengthMr`]), a range that wraps the address space
    /// ([`MemError::MrWraps`]) or is longer than `isize::MAX` ([`MemError::MrTooLarge`];
    /// no object can be).
    ///
    /// # Safety
    ///
    /// The caller promises that:
    /// - `[addr, addr + length)` is memory of this process that stays allocated, mapped,
    ///   readable and writable for as long as the returned `Backing` exists: that is,
    ///   after deregistration, until the last `Arc<MemoryRegion>` holding it has been
    ///   dropped (an operation that looked the region up before `dereg_mr` finishes on
    ///   its `Arc`; once the table no longer has the region, the count only falls, so
    ///   `Arc::strong_count(&mr) == 1` on the registration's own `Arc` means the memory
    ///   is free to go);
    /// - nothing else frees, unmaps or remaps it (`munmap`, `mremap`, `madvise(DONTNEED)`
    ///   of a file mapping, ...) during that time. (On x86_64 an access to memory unmapped
    ///   or protected since is caught and fails cleanly, see `fault`; but an address the
    ///   program maps again for something else meanwhile is written as the region, as
    ///   with any use after free);
    /// - the program's own accesses meanwhile are through raw pointers or atomics, or do
    ///   not overlap the NIC's in time: the NIC writes the bytes behind any `&[u8]` the
    ///   program holds, exactly as a hardware NIC would (this is the program's affair,
    ///   as with `ibv_reg_mr`; this module itself never forms a reference to the bytes).
    ///
    /// Concurrent access by the program is allowed in that sense: a racing byte is
    /// unspecified, never out of range.
    pub unsafe fn foreign(addr: *mut u8, length: usize) -> Result<Backing, MemError> {
        let ptr = NonNull::new(addr).ok_or(MemError::NullAddress)?;
        // From now on a fault in our accesses to foreign memory is an error, not a crash.
        fault::install();
        if length == 0 {
            return Err(MemError::ZeroLengthMr { iova: addr as u64 });
        }
        if (addr as usize).checked_add(length - 1).is_none() {
            return Err(MemError::MrWraps {
                iova: addr as u64,
                length: length as u64,
            });
        }
        if length > isize::MAX as usize {
            return Err(MemError::MrTooLarge {
                length: length as u64,
                max: isize::MAX as u64,
            });
        }
        Ok(Backing {
            ptr,
            len: length,
            alloc: None,
        })
    }

    /// Bytes (never zero).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a backing has at least one byte); for clippy's `len` rule.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The host address of the first byte, as a number (the default iova of a foreign
    /// region, and `ibv_mr.addr`).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as usize as u64
    }

    /// The host pointer to the first byte. Holding or printing it is safe; using it is
    /// the caller's `unsafe` business.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Whether this module allocated the bytes (and frees them on drop).
    pub fn is_owned(&self) -> bool {
        self.alloc.is_some()
    }

    /// Panics unless `[offset, offset + n)` is inside the backing. The callers checked
    /// the range against the region already (MrTable's lookups); this keeps the unsafe
    /// blocks below sound even if one of them had a bug: a panic, never a stray byte.
    #[inline]
    fn bounds(&self, offset: usize, n: usize) {
        assert!(
            offset <= self.len && n <= self.len - offset,
            "backing access [{offset}, +{n}) outside its {} bytes",
            self.len
        );
    }

    /// Copies `out.len()` bytes at `offset` into `out`. `Err(Faulted)`: foreign memory the
    /// program unmapped or made unreadable since registration (`out` is then partly
    /// written).
    pub(super) fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), Faulted> {
        self.bounds(offset, out.len());
        let src = self.ptr.as_ptr().wrapping_add(offset);
        if self.is_owned() {
            // SAFETY: `[offset, offset + out.len())` is inside the backing (checked just
            // above), our live allocation. `out` is valid for writes of its length. `copy`
            // (memmove) is correct even if `out` overlaps, and no reference to the
            // region's bytes is created.
            unsafe { core::ptr::copy(src, out.as_mut_ptr(), out.len()) };
            return Ok(());
        }
        // SAFETY: as above, for foreign memory: inside the backing, valid for reads by the
        // constructor's contract, except that the program may have unmapped or protected
        // it since: the fault-safe copy returns `Faulted` then (its handler was installed
        // by `foreign`). A memmove too.
        unsafe { fault::copy(out.as_mut_ptr(), src, out.len()) }
    }

    /// Copies `data` to `offset`. `Err(Faulted)`: foreign memory the program unmapped or
    /// made read-only since registration (some bytes may have been written).
    pub(super) fn write(&self, offset: usize, data: &[u8]) -> Result<(), Faulted> {
        self.bounds(offset, data.len());
        let dst = self.ptr.as_ptr().wrapping_add(offset);
        if self.is_owned() {
            // SAFETY: as in `read`, with the directions swapped: the destination range is
            // inside our live allocation; `data` is valid for reads.
            unsafe { core::ptr::copy(data.as_ptr(), dst, data.len()) };
            return Ok(());
        }
        // SAFETY: as in `read` (foreign memory, the fault-safe copy), directions swapped.
        unsafe { fault::copy(dst, data.as_ptr(), data.len()) }
    }

    /// Sets every byte to `byte`.
    pub(super) fn fill(&self, byte: u8) -> Result<(), Faulted> {
        if self.is_owned() {
            // SAFETY: exactly the backing's `len` bytes from its start, our allocation.
            unsafe { core::ptr::write_bytes(self.ptr.as_ptr(), byte, self.len) };
            return Ok(());
        }
        let chunk = [byte; 4096];
        let mut at = 0;
        while at < self.len {
            let n = (self.len - at).min(chunk.len());
            self.write(at, &chunk[..n])?;
            at += n;
        }
        Ok(())
    }

    /// An ATOMIC on the 8-byte word at `offset`, in host byte order: the original value.
    /// `None` if the word's host address is not 8-byte aligned (possible for foreign
    /// memory registered at an iova whose remainder mod 8 differs from the address's: the
    /// atomic is refused as misaligned rather than done non-atomically); `Some(Err)` if
    /// the foreign memory faulted (unmapped, or read-only, since registration).
    pub(super) fn atomic(&self, offset: usize, op: AtomicOp) -> Option<Result<u64, Faulted>> {
        self.bounds(offset, 8);
        let p = self.ptr.as_ptr().wrapping_add(offset).cast::<u64>();
        if p as usize % 8 != 0 {
            return None;
        }
        // SAFETY: `p` is 8-byte aligned (checked), its 8 bytes are inside the backing
        // (checked), valid for atomic read-modify-write (owned: our allocation; foreign:
        // the constructor's contract, and a fault there is caught). The routines are
        // `lock`ed instructions: atomic against the program's own atomics on the word.
        Some(unsafe {
            match op {
                AtomicOp::FetchAdd(add) => fault::fetch_add(p, add),
                AtomicOp::CompareSwap { compare, swap } => fault::compare_swap(p, compare, swap),
            }
        })
    }

    /// The 8-byte word at `offset` as an `AtomicU64` (tests: the program's view of a word).
    #[cfg(test)]
    pub(super) fn atomic_u64(&self, offset: usize) -> Option<&AtomicU64> {
        self.bounds(offset, 8);
        let p = self.ptr.as_ptr().wrapping_add(offset);
        if p as usize % core::mem::align_of::<AtomicU64>() != 0 {
            return None;
        }
        // SAFETY: `p` is 8-byte aligned (checked), its 8 bytes are inside the backing
        // (checked), and they stay valid for the returned borrow of `self` (owned: freed
        // only on drop; foreign: the constructor's contract). Other accesses to the word
        // are atomics (ours, the program's) or the racy copies the module documents.
        Some(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        if let Some((base, layout)) = self.alloc {
            // SAFETY: `base` came from `alloc_zeroed(layout)` in `owned_at` and is freed
            // only here, once; no borrow of `self` outlives the drop.
            unsafe { alloc::dealloc(base.as_ptr(), layout) };
        }
    }
}

impl fmt::Debug for Backing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backing")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("owned", &self.is_owned())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::Ordering;

    fn snapshot(b: &Backing) -> Vec<u8> {
        let mut v = vec![0; b.len()];
        b.read(0, &mut v).unwrap();
        v
    }

    #[test]
    fn owned_is_zeroed_and_phase_follows_the_iova() {
        let b = Backing::owned(100).unwrap();
        assert!(b.is_owned());
        assert_eq!(b.len(), 100);
        assert_eq!(b.addr() % OWNED_ALIGN as u64, 0);
        assert!(snapshot(&b).iter().all(|&x| x == 0));
        for iova in [0u64, 1, 7, 8, 63, 64, 0xdead_beef, u64::MAX - 7] {
            let b = Backing::owned_at(iova, 16).unwrap();
            assert_eq!(b.addr() % 64, iova % 64, "iova {iova:#x}");
        }
        assert_eq!(
            Backing::owned(0).unwrap_err(),
            MemError::ZeroLengthMr { iova: 0 }
        );
        // More than isize::MAX: refused, no abort.
        assert_eq!(
            Backing::owned(1 << 63).unwrap_err(),
            MemError::OutOfMemory { length: 1 << 63 }
        );
        assert_eq!(
            Backing::owned(u64::MAX).unwrap_err(),
            MemError::OutOfMemory { length: u64::MAX }
        );
    }

    #[test]
    fn owned_read_write_at_the_edges() {
        let b = Backing::owned_at(5, 32).unwrap();
        b.write(0, &[1, 2, 3]).unwrap();
        b.write(29, &[7, 8, 9]).unwrap();
        b.write(32, &[]).unwrap(); // empty at the very end: fine, touches nothing
        let mut out = [0u8; 3];
        b.read(29, &mut out).unwrap();
        assert_eq!(out, [7, 8, 9]);
        b.read(0, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3]);
        b.fill(0xee).unwrap();
        assert!(snapshot(&b).iter().all(|&x| x == 0xee));
    }

    #[test]
    #[should_panic(expected = "outside its 32 bytes")]
    fn read_past_the_end_panics_rather_than_reads() {
        let b = Backing::owned(32).unwrap();
        let _ = b.read(30, &mut [0u8; 3]);
    }

    #[test]
    #[should_panic(expected = "outside its 32 bytes")]
    fn write_at_a_huge_offset_panics() {
        let b = Backing::owned(32).unwrap();
        b.write(usize::MAX, &[1]).unwrap();
    }

    #[test]
    #[should_panic(expected = "outside its 16 bytes")]
    fn atomic_past_the_end_panics() {
        let b = Backing::owned(16).unwrap();
        b.atomic_u64(9);
    }

    #[test]
    fn foreign_reads_and_writes_the_callers_memory() {
        let mut mine = vec![0u8; 64];
        mine[10] = 0x42;
        let addr = mine.as_mut_ptr();
        // `mine` outlives `b` (dropped at the end of this block) and is only touched
        // through `b` meanwhile: the constructor's contract.
        {
            let b = unsafe_foreign(addr, 64);
            assert!(!b.is_owned());
            assert_eq!(b.addr(), addr as u64);
            let mut one = [0u8];
            b.read(10, &mut one).unwrap();
            assert_eq!(one, [0x42]);
            b.write(60, &[1, 2, 3, 4]).unwrap();
            b.write(0, &[9]).unwrap();
        }
        assert_eq!(&mine[60..], &[1, 2, 3, 4]);
        assert_eq!(mine[0], 9);
        assert_eq!(mine[1..10], [0; 9]);
        // Dropping a foreign backing freed nothing: `mine` is still ours to drop.
        drop(mine);
    }

    /// The one place the tests call the unsafe constructor; the wrapper keeps the
    /// `unsafe` (and its SAFETY comment) out of every test body.
    fn unsafe_foreign(addr: *mut u8, len: usize) -> Backing {
        // SAFETY: every caller passes memory it owns and keeps alive past the Backing.
        unsafe { Backing::foreign(addr, len) }.unwrap()
    }

    #[test]
    fn foreign_refusals() {
        let mut x = [0u8; 8];
        // SAFETY: the constructor refuses before keeping anything (null, empty, wrapping,
        // oversized), and the accepted one lives no longer than `x`.
        unsafe {
            assert_eq!(
                Backing::foreign(core::ptr::null_mut(), 8).unwrap_err(),
                MemError::NullAddress
            );
            assert!(matches!(
                Backing::foreign(x.as_mut_ptr(), 0),
                Err(MemError::ZeroLengthMr { .. })
            ));
            let top = usize::MAX as *mut u8;
            assert!(matches!(
                Backing::foreign(top, 2),
                Err(MemError::MrWraps { length: 2, .. })
            ));
            assert!(matches!(
                Backing::foreign(8 as *mut u8, usize::MAX / 2 + 1),
                Err(MemError::MrTooLarge { .. })
            ));
            assert_eq!(Backing::foreign(x.as_mut_ptr(), 8).unwrap().len(), 8);
        }
    }

    #[test]
    fn atomic_words_are_the_memory_in_host_order() {
        let mut words = vec![0u64; 4];
        words[1] = 41;
        let b = unsafe_foreign(words.as_mut_ptr().cast(), 32);
        let a = b.atomic_u64(8).unwrap();
        assert_eq!(a.fetch_add(1, Ordering::SeqCst), 41);
        assert_eq!(
            a.compare_exchange(42, 7, Ordering::SeqCst, Ordering::SeqCst),
            Ok(42)
        );
        let mut raw = [0u8; 8];
        b.read(8, &mut raw).unwrap();
        assert_eq!(u64::from_ne_bytes(raw), 7);
        // A host address that is not 8-aligned: refused, not done non-atomically.
        assert!(b.atomic_u64(4).is_none());
        assert!(b.atomic_u64(24).is_some());
        drop(b);
        assert_eq!(words, [0, 7, 0, 0]);
    }

    /// Our fetch_add and the program's own `AtomicU64::fetch_add` on the same word, on
    /// several threads at once: every increment counts.
    #[test]
    fn atomics_race_exactly_with_the_programs_own() {
        const N: u64 = 20_000;
        let word = AtomicU64::new(0);
        let b = unsafe_foreign(word.as_ptr().cast(), 8);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..N {
                        b.atomic_u64(0).unwrap().fetch_add(1, Ordering::SeqCst);
                    }
                });
                s.spawn(|| {
                    for _ in 0..N {
                        word.fetch_add(3, Ordering::SeqCst);
                    }
                });
            }
        });
        drop(b);
        assert_eq!(word.load(Ordering::SeqCst), 2 * N + 2 * 3 * N);
    }

    /// Foreign memory made inaccessible after registration: reads, writes and atomics
    /// fail with `Faulted` (the fault handler), and work again once it is accessible.
    #[test]
    fn faults_on_foreign_memory_are_errors() {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: a new private anonymous mapping, the test's own.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let b = unsafe_foreign(p.cast(), page);
        b.write(8, &5u64.to_ne_bytes()).unwrap();
        let before = faults_caught();
        // SAFETY: the test's mapping.
        assert_eq!(unsafe { libc::mprotect(p, page, libc::PROT_READ) }, 0);
        assert_eq!(b.write(0, &[1; 100]), Err(Faulted));
        assert_eq!(b.atomic(8, AtomicOp::FetchAdd(1)), Some(Err(Faulted)));
        let mut w = [0u8; 8];
        b.read(8, &mut w).unwrap();
        assert_eq!(
            u64::from_ne_bytes(w),
            5,
            "read-only: reads work, nothing changed"
        );
        // SAFETY: the test's mapping.
        assert_eq!(unsafe { libc::mprotect(p, page, libc::PROT_NONE) }, 0);
        assert_eq!(b.read(8, &mut w), Err(Faulted));
        let cas = AtomicOp::CompareSwap {
            compare: 5,
            swap: 6,
        };
        assert_eq!(b.atomic(8, cas), Some(Err(Faulted)));
        assert!(faults_caught() - before >= 4);
        // SAFETY: the test's mapping.
        assert_eq!(
            unsafe { libc::mprotect(p, page, libc::PROT_READ | libc::PROT_WRITE) },
            0
        );
        assert_eq!(b.atomic(8, cas), Some(Ok(5)));
        assert_eq!(b.atomic(8, AtomicOp::FetchAdd(10)), Some(Ok(6)));
        b.read(8, &mut w).unwrap();
        assert_eq!(u64::from_ne_bytes(w), 16);
        drop(b);
        // SAFETY: the test's mapping, no backing over it any more.
        unsafe { libc::munmap(p, page) };
    }

    /// The fault-safe copy is a memmove: overlapping ranges either way round.
    #[test]
    fn fault_safe_copy_overlaps_like_memmove() {
        let mut v: Vec<u8> = (0..64).collect();
        let p = v.as_mut_ptr();
        // SAFETY: both ranges inside `v`, which nothing else uses meanwhile.
        unsafe { fault::copy(p.add(4), p, 32) }.unwrap();
        let want: Vec<u8> = (0..4).chain(0..32).chain(36..64).collect();
        assert_eq!(v, want, "forward overlap (dst after src) copied backwards");
        let mut v: Vec<u8> = (0..64).collect();
        let p = v.as_mut_ptr();
        // SAFETY: as above.
        unsafe { fault::copy(p, p.add(4), 32) }.unwrap();
        let want: Vec<u8> = (4..36).chain(32..64).collect();
        assert_eq!(v, want);
        // SAFETY: zero bytes: touches nothing.
        unsafe { fault::copy(p, p.add(1), 0) }.unwrap();
    }
}
