//! The table of protection domains and memory regions, and every check an access goes
//! through.
//!
//! Lookups are the hot path (every RDMA WRITE/READ packet, every SGE): they take one
//! DashMap shard lock for the time it takes to clone an `Arc`, then work on the region
//! without holding any table lock. Registration and deregistration are rare; they
//! serialise on one mutex that owns the index cursor and the key generator.
//!
//! Lock order (no cycles): the `alloc` mutex first, then at most one `mrs` or `pds`
//! shard; no path holds a shard while taking the mutex or another shard.

use super::backing::{AtomicOp, Backing};
use super::key::{is_window_key, Key, KeyGen, Lkey, Rkey, MAX_INDEX, MW_INDEX_BASE};
use super::mr::MemoryRegion;
use super::mw::{MemoryWindow, OnQp};
use super::{Access, MemError, Pd};
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;
use std::sync::{Arc, Mutex, PoisonError};

/// Limits and seed of a [`MrTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrTableConfig {
    /// Seed of the key-byte generator: the same seed and the same sequence of calls give
    /// the same keys.
    pub seed: u64,
    /// MR indices are `1..=max_mrs` (below [`MW_INDEX_BASE`]: the upper half of the 24
    /// bits a key carries names windows). Index 0 is never used, so an all-zero key
    /// names nothing.
    pub max_mrs: u32,
    /// Memory windows: indices `MW_INDEX_BASE + 1..=MW_INDEX_BASE + max_mws`.
    pub max_mws: u32,
    /// Largest region in bytes. Registration allocates (and zeroes) the bytes, the way
    /// `ibv_reg_mr` pins pages, so this bounds what one call can take.
    pub max_mr_len: u64,
}

impl Default for MrTableConfig {
    fn default() -> Self {
        MrTableConfig {
            seed: 0x726f_6365_2d65_6d75, // "roce-emu"
            max_mrs: MW_INDEX_BASE - 1,
            // rxe's RXE_MAX_MW.
            max_mws: 0x4_0000,
            max_mr_len: 1 << 30,
        }
    }
}

/// What registration and deregistration serialise on.
#[derive(Debug)]
struct Alloc {
    next_pd: u32,
    /// Where the search for a free index starts. Indices are handed out cyclically (as
    /// rxe's pool does), so a freed index is reused as late as possible and a stale key
    /// rarely finds its slot occupied at all.
    next_index: u32,
    keys: KeyGen,
    /// The key byte each index had last (grown on demand, at most `max_mrs + 1` bytes),
    /// so that a reused index always gets a different one.
    last_key: Vec<u8>,
    /// The same two for windows (their index less [`MW_INDEX_BASE`]).
    next_mw: u32,
    mw_last_key: Vec<u8>,
}

/// Protection domains and memory regions of one NIC.
#[derive(Debug)]
pub struct MrTable {
    cfg: MrTableConfig,
    /// Keyed by L_Key/R_Key. FxHash: the keys are ours (a packet can look one up, never
    /// insert one), and SipHash was a tenth of a ping-pong's user time across the NIC's maps.
    mrs: DashMap<u32, Arc<MemoryRegion>, FxBuildHasher>,
    /// Memory windows, keyed by index (above [`MW_INDEX_BASE`]).
    mws: DashMap<u32, Arc<MemoryWindow>, FxBuildHasher>,
    /// PD -> number of MRs and MWs allocated in it.
    pds: DashMap<u32, usize, FxBuildHasher>,
    alloc: Mutex<Alloc>,
}

impl Default for MrTable {
    fn default() -> Self {
        MrTable::new()
    }
}

impl MrTable {
    /// A table with the default limits and seed.
    pub fn new() -> MrTable {
        MrTable::with_config(MrTableConfig::default())
    }

    /// A table with these limits; `max_mrs` is clamped to `1..MW_INDEX_BASE`, `max_mws`
    /// to `1..=MAX_INDEX - MW_INDEX_BASE`.
    pub fn with_config(cfg: MrTableConfig) -> MrTable {
        let cfg = MrTableConfig {
            max_mrs: cfg.max_mrs.clamp(1, MW_INDEX_BASE - 1),
            max_mws: cfg.max_mws.clamp(1, MAX_INDEX - MW_INDEX_BASE),
            ..cfg
        };
        MrTable {
            cfg,
            mrs: DashMap::with_hasher(FxBuildHasher),
            mws: DashMap::with_hasher(FxBuildHasher),
            pds: DashMap::with_hasher(FxBuildHasher),
            alloc: Mutex::new(Alloc {
                next_pd: 1,
                next_index: 1,
                keys: KeyGen::new(cfg.seed),
                last_key: Vec::new(),
                next_mw: 1,
                mw_last_key: Vec::new(),
            }),
        }
    }

    /// The limits in force.
    pub fn config(&self) -> MrTableConfig {
        self.cfg
    }

    /// Registered regions.
    pub fn len(&self) -> usize {
        self.mrs.len()
    }

    /// Whether no region is registered.
    pub fn is_empty(&self) -> bool {
        self.mrs.is_empty()
    }

    // The allocation state has no invariant a panic could break half-way (each field is
    // updated in one statement), so a poisoned lock is still usable.
    fn alloc(&self) -> std::sync::MutexGuard<'_, Alloc> {
        self.alloc.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new protection domain (`ibv_alloc_pd`). Handles are never 0 and are not reused
    /// until the 32-bit counter wraps.
    pub fn alloc_pd(&self) -> Pd {
        let mut a = self.alloc();
        loop {
            let pd = a.next_pd;
            a.next_pd = a.next_pd.wrapping_add(1).max(1);
            if let dashmap::Entry::Vacant(v) = self.pds.entry(pd) {
                v.insert(0);
                return Pd(pd);
            }
        }
    }

    /// Frees a protection domain (`ibv_dealloc_pd`). Refused while regions or windows
    /// are allocated in it, as ibverbs returns `EBUSY`: the regions would otherwise belong
    /// to a PD whose handle could be handed out again.
    pub fn dealloc_pd(&self, pd: Pd) -> Result<(), MemError> {
        if self.pds.remove_if(&pd.0, |_, n| *n == 0).is_some() {
            return Ok(());
        }
        match self.pds.get(&pd.0) {
            Some(n) => Err(MemError::PdInUse { pd, mrs: *n }),
            None => Err(MemError::NoSuchPd { pd }),
        }
    }

    /// Whether `pd` is allocated (for the engine's `create_qp`).
    pub fn check_pd(&self, pd: Pd) -> Result<(), MemError> {
        if self.pds.contains_key(&pd.0) {
            Ok(())
        } else {
            Err(MemError::NoSuchPd { pd })
        }
    }

    /// Registers a region of `length` zeroed bytes at `iova` in `pd` (`ibv_reg_mr`),
    /// in a buffer the region owns ([`Backing::owned_at`]); the application reaches the
    /// bytes through [`MemoryRegion::read`], [`MemoryRegion::write`] and friends.
    ///
    /// Refused: REMOTE_WRITE/REMOTE_ATOMIC without LOCAL_WRITE ([`MemError::InvalidAccess`],
    /// ibverbs `EINVAL`); `length == 0` ([`MemError::ZeroLengthMr`]: rxe refuses it too,
    /// since `ib_umem_get` pins no page, and it keeps "every region has a first byte"
    /// true); a range past 2^64 ([`MemError::MrWraps`]; a region may end exactly at
    /// 2^64); more than `max_mr_len` bytes; an unknown PD; a full table.
    ///
    /// The lkey and rkey have the same value (as rxe) if `access` has a remote right;
    /// otherwise the rkey is 0 and names nothing ([`MemoryRegion::rkey`]).
    pub fn reg_mr(
        &self,
        pd: Pd,
        iova: u64,
        length: u64,
        access: Access,
    ) -> Result<Arc<MemoryRegion>, MemError> {
        self.check_reg(iova, length, access)?;
        // The PD and a full table are refused before allocating: no allocation for
        // nothing, and an unknown PD is reported as such whatever the length.
        self.check_pd(pd)?;
        self.check_room()?;
        self.reg_mr_backing(pd, iova, Backing::owned_at(iova, length)?, access)
    }

    /// Registers `backing` as a region at `iova` in `pd`: the general form of
    /// [`reg_mr`](Self::reg_mr), for memory the caller owns ([`Backing::foreign`]; pass
    /// `backing.addr()` as the iova for `ibv_reg_mr`'s "iova is the address", or use
    /// [`reg_mr_at_addr`](Self::reg_mr_at_addr)). Same refusals as `reg_mr`, with
    /// `length` the backing's; `max_mr_len` (the device's `max_mr_size`) applies to
    /// foreign memory too. A refused backing is dropped (foreign memory: untouched).
    pub fn reg_mr_backing(
        &self,
        pd: Pd,
        iova: u64,
        backing: Backing,
        access: Access,
    ) -> Result<Arc<MemoryRegion>, MemError> {
        self.check_reg(iova, backing.len() as u64, access)?;
        // Count the region in its PD first, so `dealloc_pd` cannot succeed between this
        // check and the insertion.
        match self.pds.get_mut(&pd.0) {
            Some(mut n) => *n += 1,
            None => return Err(MemError::NoSuchPd { pd }),
        }
        let res = self.reg_counted(pd, iova, backing, access);
        if res.is_err() {
            self.uncount(pd);
        }
        res
    }

    /// [`reg_mr_backing`](Self::reg_mr_backing) at the backing's own host address, what
    /// `ibv_reg_mr(pd, addr, length, access)` does.
    pub fn reg_mr_at_addr(
        &self,
        pd: Pd,
        backing: Backing,
        access: Access,
    ) -> Result<Arc<MemoryRegion>, MemError> {
        let iova = backing.addr();
        self.reg_mr_backing(pd, iova, backing, access)
    }

    /// The argument checks of a registration that need no table state.
    fn check_reg(&self, iova: u64, length: u64, access: Access) -> Result<(), MemError> {
        if !access.is_consistent() {
            return Err(MemError::InvalidAccess { access });
        }
        if length == 0 {
            return Err(MemError::ZeroLengthMr { iova });
        }
        if iova.checked_add(length - 1).is_none() {
            return Err(MemError::MrWraps { iova, length });
        }
        if length > self.cfg.max_mr_len {
            return Err(MemError::MrTooLarge {
                length,
                max: self.cfg.max_mr_len,
            });
        }
        Ok(())
    }

    /// A full table, checked without the lock (again under it when inserting).
    fn check_room(&self) -> Result<(), MemError> {
        let max = self.cfg.max_mrs;
        if self.mrs.len() >= max as usize {
            Err(MemError::TableFull { max })
        } else {
            Ok(())
        }
    }

    fn uncount(&self, pd: Pd) {
        if let Some(mut n) = self.pds.get_mut(&pd.0) {
            *n -= 1;
        }
    }

    fn reg_counted(
        &self,
        pd: Pd,
        iova: u64,
        bytes: Backing,
        access: Access,
    ) -> Result<Arc<MemoryRegion>, MemError> {
        let max = self.cfg.max_mrs;
        let mut a = self.alloc();
        if self.mrs.len() >= max as usize {
            return Err(MemError::TableFull { max });
        }
        let mut index = a.next_index;
        while self.mrs.contains_key(&index) {
            index = if index >= max { 1 } else { index + 1 };
        }
        a.next_index = if index >= max { 1 } else { index + 1 };
        let previous = a.last_key.get(index as usize).copied();
        let key = a.keys.next_key(previous);
        let slot = index as usize;
        if a.last_key.len() <= slot {
            a.last_key.resize(slot + 1, 0);
        }
        a.last_key[slot] = key;
        // The R_Key is the lkey's value, remote rights or not, as rxe's `rxe_mr_init`
        // since Linux 6.4 and mlx5 do: a program may add a remote right later with
        // ibv_rereg_mr and use the key it already sent (pyverbs' test_mr_rereg_access).
        // A region without the right is refused by the access check instead of by the
        // key lookup: the same NAK (Remote Access Error), no byte touched.
        let rkey = Rkey::new(index, key);
        let mr = Arc::new(MemoryRegion::new(
            pd,
            iova,
            access,
            Lkey::new(index, key),
            rkey,
            bytes,
        ));
        self.mrs.insert(index, Arc::clone(&mr));
        Ok(mr)
    }

    /// Deregisters the region `lkey` names (`ibv_dereg_mr`). Operations that already
    /// looked it up finish on their `Arc`; every later lookup fails with
    /// [`MemError::NoSuchMr`].
    ///
    /// Refused while memory windows are bound to it ([`MemError::MrHasWindows`]: IBA
    /// 10.6.7.2.6, rxe's `rxe_dereg_mr` says EINVAL); binds take the same lock, so none
    /// can slip in between the check and the removal.
    pub fn dereg_mr(&self, lkey: Lkey) -> Result<(), MemError> {
        let removed = {
            let _a = self.alloc();
            if let Some(mr) = self.get(Key::Local(lkey)).filter(|m| m.lkey() == lkey) {
                if mr.windows() > 0 {
                    return Err(MemError::MrHasWindows {
                        lkey,
                        windows: mr.windows(),
                    });
                }
            }
            self.mrs
                .remove_if(&lkey.index(), |_, mr| mr.lkey() == lkey)
                .map(|(_, mr)| mr)
        };
        match removed {
            Some(mr) => {
                self.uncount(mr.pd());
                Ok(())
            }
            None => Err(match self.get(Key::Local(lkey)) {
                Some(mr) => MemError::KeyMismatch {
                    asked: Key::Local(lkey),
                    found: Key::Local(mr.lkey()),
                },
                None => MemError::NoSuchMr {
                    key: Key::Local(lkey),
                },
            }),
        }
    }

    fn get(&self, key: Key) -> Option<Arc<MemoryRegion>> {
        // Clone the Arc and drop the shard guard at once: no table lock is held while
        // the caller works on the region.
        self.mrs.get(&key.index()).map(|r| Arc::clone(r.value()))
    }

    /// Index, key byte, PD: the identity checks shared by lookups and invalidation.
    fn find(&self, pd: Pd, key: Key) -> Result<Arc<MemoryRegion>, MemError> {
        self.find_as(pd, key, |mr| match key {
            Key::Local(_) => mr.lkey().0,
            Key::Remote(_) => mr.rkey().0,
        })
    }

    /// [`find`](Self::find) with the region's key to compare chosen by `region_key`.
    fn find_as(
        &self,
        pd: Pd,
        key: Key,
        region_key: impl FnOnce(&MemoryRegion) -> u32,
    ) -> Result<Arc<MemoryRegion>, MemError> {
        let mr = self.get(key).ok_or(MemError::NoSuchMr { key })?;
        let found = region_key(&mr);
        if found != key.raw() {
            return Err(MemError::KeyMismatch {
                asked: key,
                found: key.with_raw(found),
            });
        }
        if mr.pd() != pd {
            return Err(MemError::PdMismatch {
                key,
                asked: pd,
                found: mr.pd(),
            });
        }
        Ok(mr)
    }

    /// The checks of rxe's `lookup_mem`, each with its own error, in this order: index
    /// exists, key byte matches, PD matches, region valid, access rights, range. The
    /// order decides which error a request with several faults reports; identity comes
    /// first so that nothing about a region is revealed to a caller that cannot name it.
    ///
    /// An R_Key in the window range goes to the window instead
    /// ([`MemoryWindow::resolve`]: key, PD, QP for type 2, bound, rights, the window's
    /// range), then to the region it is bound to; the address in that region is returned
    /// with it (a zero-based window's addresses start at 0).
    fn lookup_at(
        &self,
        who: OnQp,
        key: Key,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<(Arc<MemoryRegion>, u64), MemError> {
        if let Key::Remote(r) = key {
            if is_window_key(r.0) {
                let mw = self.window(r.index()).ok_or(MemError::NoSuchMr { key })?;
                let (mr, at) = mw.resolve(who, key, va, len, need)?;
                // The region's own range too (a bound window lies inside it; this keeps
                // "never a byte outside a registered region" independent of that).
                mr.check_range_for(key, at, len)?;
                return Ok((mr, at));
            }
        }
        Ok((self.lookup(who.pd, key, va, len, need)?, va))
    }

    fn lookup(
        &self,
        pd: Pd,
        key: Key,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Arc<MemoryRegion>, MemError> {
        let mr = self.find(pd, key)?;
        if !mr.is_valid() {
            return Err(MemError::MrInvalid { key });
        }
        if !mr.access().contains(need) {
            return Err(MemError::AccessDenied {
                key,
                need,
                have: mr.access(),
            });
        }
        mr.check_range_for(key, va, len)?;
        Ok(mr)
    }

    /// Validates a local access (an SGE) of `[va, va + len)` through `lkey` by a QP of
    /// `pd`. `need` is [`Access::LOCAL_WRITE`] when the HCA writes (receive buffers, READ
    /// responses, atomic results) and [`Access::empty`] when it reads: local read needs
    /// no right (IBA 10.6, memory region access rights).
    pub fn lookup_local(
        &self,
        pd: Pd,
        lkey: Lkey,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Arc<MemoryRegion>, MemError> {
        self.lookup(pd, Key::Local(lkey), va, len, need)
    }

    /// Validates a remote access of `[va, va + len)` through `rkey` arriving on a QP of
    /// `pd`; `need` is REMOTE_WRITE, REMOTE_READ or REMOTE_ATOMIC. A failure is an
    /// R_Key violation the responder answers with a Remote Access Error NAK. `who` is the
    /// PD, or the PD and QP ([`OnQp`]: a type 2 window answers only its own QP). For a
    /// window's key, the region it is bound to.
    pub fn lookup_remote(
        &self,
        who: impl Into<OnQp>,
        rkey: Rkey,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Arc<MemoryRegion>, MemError> {
        Ok(self
            .lookup_at(who.into(), Key::Remote(rkey), va, len, need)?
            .0)
    }

    /// Invalidates the region `rkey` names, for SEND with Invalidate (the IETH key) and
    /// Local Invalidate (`invalidate_rkey` of the work request), IBA 10.6, Memory
    /// Management, invalidation. The key must match exactly and the region must be in
    /// the QP's `pd`, otherwise nothing changes. Invalidating an invalid region
    /// succeeds and changes nothing (rxe does the same). Afterwards every lookup of the
    /// region fails with [`MemError::MrInvalid`] until it is deregistered.
    ///
    /// The key to match is the region's one key (its rkey is its lkey's value, remote
    /// rights or not), as rxe's `rxe_invalidate_mr`.
    pub fn invalidate(&self, pd: Pd, rkey: Rkey) -> Result<(), MemError> {
        self.find_as(pd, Key::Remote(rkey), |mr| mr.rkey().0)?
            .set_invalid();
        Ok(())
    }

    /// SEND with Invalidate names `rkey` (IBA 10.6.7.2): a peer may invalidate a memory
    /// window or a region registered for remote invalidation (fast registration, Allocate
    /// L_Key), never a region from Register Memory Region, which is all roce-emu has. So
    /// every such request is refused: an unknown key as any unusable R_Key, a region with
    /// [`MemError::NotInvalidatable`]; the region stays valid. rxe refuses the same
    /// (`rxe_invalidate_mr`: a user region is not IB_MR_TYPE_MEM_REG).
    ///
    /// A type 2 window bound on the QP `who` names is invalidated
    /// ([`invalidate_mw`](Self::invalidate_mw)), as rxe's `invalidate_rkey` does.
    pub fn invalidate_remote(&self, who: impl Into<OnQp>, rkey: Rkey) -> Result<(), MemError> {
        let who = who.into();
        if is_window_key(rkey.0) {
            return self.invalidate_mw(who, rkey);
        }
        let key = Key::Remote(rkey);
        self.find(who.pd, key)?;
        Err(MemError::NotInvalidatable { key })
    }

    /// RDMA WRITE: stores `data` at `va` after [`lookup_remote`](Self::lookup_remote)
    /// with REMOTE_WRITE. All or nothing: a refused write changes no byte.
    pub fn write_remote(
        &self,
        who: impl Into<OnQp>,
        rkey: Rkey,
        va: u64,
        data: &[u8],
    ) -> Result<(), MemError> {
        let key = Key::Remote(rkey);
        let len = data.len() as u64;
        let (mr, at) = self.lookup_at(who.into(), key, va, len, Access::REMOTE_WRITE)?;
        mr.write_for(key, at, data)
    }

    /// RDMA READ: copies the bytes at `va` into `out` after a lookup with REMOTE_READ.
    pub fn read_remote(
        &self,
        who: impl Into<OnQp>,
        rkey: Rkey,
        va: u64,
        out: &mut [u8],
    ) -> Result<(), MemError> {
        let key = Key::Remote(rkey);
        let len = out.len() as u64;
        let (mr, at) = self.lookup_at(who.into(), key, va, len, Access::REMOTE_READ)?;
        mr.read_for(key, at, out)
    }

    /// ATOMIC compare-and-swap on the 8 bytes at `va`: if the u64 there equals
    /// `compare`, it becomes `swap`. Returns the original value either way.
    ///
    /// Needs REMOTE_ATOMIC, `[va, va + 8)` in range, and `va` 8-byte aligned
    /// ([`MemError::MisalignedAtomic`], checked after the key checks as rxe does). The
    /// word is a u64 in host byte order, what the host CPU sees, as a real NIC on x86
    /// operates on little-endian host memory; the engine converts from and to the
    /// big-endian AtomicETH/AtomicAckETH fields. It is an `AtomicU64` compare-exchange
    /// on the memory itself, so it is atomic against other QPs' atomics and against the
    /// program's own atomics on the same word (a foreign region at a host address that
    /// is not 8-aligned where the va is refuses it as misaligned).
    pub fn compare_swap(
        &self,
        who: impl Into<OnQp>,
        rkey: Rkey,
        va: u64,
        compare: u64,
        swap: u64,
    ) -> Result<u64, MemError> {
        let key = Key::Remote(rkey);
        let (mr, at) = self.lookup_at(who.into(), key, va, 8, Access::REMOTE_ATOMIC)?;
        mr.atomic_for(key, at, AtomicOp::CompareSwap { compare, swap })
    }

    /// ATOMIC fetch-and-add on the 8 bytes at `va` (wrapping, like the hardware):
    /// returns the original value. Same checks and byte order as
    /// [`compare_swap`](Self::compare_swap).
    pub fn fetch_add(
        &self,
        who: impl Into<OnQp>,
        rkey: Rkey,
        va: u64,
        add: u64,
    ) -> Result<u64, MemError> {
        let key = Key::Remote(rkey);
        let (mr, at) = self.lookup_at(who.into(), key, va, 8, Access::REMOTE_ATOMIC)?;
        mr.atomic_for(key, at, AtomicOp::FetchAdd(add))
    }
}

mod rereg;
pub use rereg::Rereg;
#[cfg(test)]
mod mw_tests;
#[cfg(test)]
mod tests;
mod windows;
