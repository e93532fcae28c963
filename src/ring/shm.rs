//! The one file of `ring` with `unsafe` (`tests/layering.rs` checks it): a shared mapping
//! of a memfd, reached only through bounds-checked copies and atomics, and the adoption
//! of file descriptors received over a Unix socket.
//!
//! The bytes are shared with another process that may be buggy or hostile, so no Rust
//! reference (`&[u8]`, `&mut [u8]`) to them is ever created: a reference promises the
//! bytes do not change under it, which the other process can break at any moment.
//! Words are read with `read_volatile`, exactly once each: the compiler may not re-fetch
//! a volatile load, so a value the ring validated is the value it uses (no double fetch,
//! whatever the other process writes in between). Packet bytes are one `memcpy` whose
//! length is a local the caller has already bounded; if the other process rewrites them
//! during the copy, the copy holds unspecified bytes, never bytes from outside the range.
//! The four index words of a ring header are `AtomicU64`s (see [`Shm::atomic_u64`]).
//!
//! Every function here is sound for every argument: each access checks its own range
//! against the mapping's length, whatever the caller checked before.

use core::num::NonZeroUsize;
use core::ptr::NonNull;
use core::sync::atomic::AtomicU64;
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use std::io;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// `len` bytes of a memfd, mapped shared and read-write at `ptr` (page aligned).
pub struct Shm {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a `Shm` is a mapping address and a length with no thread affinity; munmap may
// run on any thread.
unsafe impl Send for Shm {}

// SAFETY: shared access only does bounds-checked raw copies, volatile word reads and
// atomic operations through the pointer, and never hands out a reference to the bytes.
// The ring protocol gives each byte range one writer at a time (the producer owns
// [tail, head + capacity), the consumer [head, tail)); a peer that breaks it makes bytes
// unspecified, not memory unsafe, as the module documentation says.
unsafe impl Sync for Shm {}

impl Shm {
    /// Maps the first `len` bytes of `fd`. The caller has checked that the file is at
    /// least `len` long and sealed against shrinking (a mapped page past the end of a
    /// shrunk file faults with SIGBUS on access).
    pub fn map(fd: BorrowedFd<'_>, len: usize) -> io::Result<Shm> {
        let nz =
            NonZeroUsize::new(len).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: no address is requested, so the kernel picks a fresh range that overlaps
        // no existing Rust object; the mapping is released only by `Drop`, which owns it.
        let ptr = unsafe {
            mmap(
                None,
                nz,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd,
                0,
            )
        }?;
        Ok(Shm {
            ptr: ptr.cast(),
            len,
        })
    }

    fn fits(&self, off: usize, n: usize) -> bool {
        off.checked_add(n).is_some_and(|end| end <= self.len)
    }

    /// The 8-byte word at `off` as an atomic, or `None` if `off` is not 8-aligned or the
    /// word is not inside the mapping.
    ///
    /// Alignment: the mapping starts on a page (mmap returns page-aligned addresses), so
    /// an offset that is a multiple of 8 is an address that is a multiple of 8, which is
    /// `AtomicU64`'s alignment on every 64-bit target Linux runs.
    pub fn atomic_u64(&self, off: usize) -> Option<&AtomicU64> {
        if off % 8 != 0 || !self.fits(off, 8) {
            return None;
        }
        // SAFETY: the word lies inside the live mapping (checked) and is 8-aligned (the
        // argument above); the mapping outlives the returned borrow of `self`. In this
        // process the ring touches its index words only through atomics; another process
        // writing them with plain stores is a hardware-level store to the same word,
        // which an atomic load observes whole (aligned 8-byte accesses are single-copy
        // atomic on x86-64 and AArch64).
        Some(unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(off).cast()) })
    }

    /// The 8-byte word at `off`, read once, or `None` if it is not inside the mapping or
    /// not 8-aligned.
    pub fn read_u64(&self, off: usize) -> Option<u64> {
        if off % 8 != 0 || !self.fits(off, 8) {
            return None;
        }
        // SAFETY: inside the mapping and aligned (checked, as for `atomic_u64`); a volatile
        // read is never repeated or merged by the compiler, and a u64 has no invalid
        // values, so whatever the other process wrote is a valid result.
        Some(unsafe { self.ptr.as_ptr().add(off).cast::<u64>().read_volatile() })
    }

    /// Copies `dst.len()` bytes from `off`; `false` (nothing copied) if the range is not
    /// inside the mapping.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> bool {
        if !self.fits(off, dst.len()) {
            return false;
        }
        // SAFETY: the source range is inside the mapping (checked); `dst` is a distinct
        // Rust buffer (the mapping is never lent out as a slice, so they cannot overlap).
        unsafe {
            core::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        };
        true
    }

    /// Copies `src` to `off`; `false` (nothing written) if the range is not inside the
    /// mapping.
    pub fn write(&self, off: usize, src: &[u8]) -> bool {
        if !self.fits(off, src.len()) {
            return false;
        }
        // SAFETY: the destination range is inside the mapping (checked) and writable
        // (mapped PROT_WRITE); `src` is a distinct Rust buffer, so they do not overlap.
        unsafe {
            core::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        };
        true
    }

    /// Copies `len` bytes from `src` at `src_off` to `self` at `off`: a packet from one
    /// ring straight into another (the daemon's hairpin). `false` (nothing copied) if
    /// either range is not inside its mapping.
    pub fn copy_from(&self, off: usize, src: &Shm, src_off: usize, len: usize) -> bool {
        if !self.fits(off, len) || !src.fits(src_off, len) {
            return false;
        }
        // SAFETY: both ranges are inside their live mappings (checked), the destination is
        // writable (mapped PROT_WRITE). `copy` (memmove) is correct even if the two ranges
        // overlap, as they do if `src` is `self`. No Rust reference to either range exists
        // (the module never lends one), so the copy aliases nothing the compiler relies on;
        // a peer rewriting the source meanwhile only makes the copied bytes unspecified.
        unsafe {
            core::ptr::copy(
                src.ptr.as_ptr().add(src_off),
                self.ptr.as_ptr().add(off),
                len,
            )
        };
        true
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr + len` is the mapping `map` made, unmapped only here; no
        // reference into it exists (the module never creates one) and the atomics
        // `atomic_u64` lent borrow `self`, so they have ended.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

/// Takes ownership of descriptors the kernel just installed in this process for an
/// `SCM_RIGHTS` message, so each is closed exactly once (when its `OwnedFd` drops).
pub fn adopt_received(fds: &[RawFd]) -> Vec<OwnedFd> {
    fds.iter()
        .copied()
        .filter(|fd| *fd >= 0)
        // SAFETY: the kernel created these descriptors for this recvmsg call; nothing else
        // in the process knows their numbers yet, so each has exactly this one owner.
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect()
}
