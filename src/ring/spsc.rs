//! The two ends of one ring: [`Producer`] and [`Consumer`], each over its own mapping of
//! the ring's memfd (the layout and the ordering argument are in the module above).

use super::shm::Shm;
use super::*;
use core::sync::atomic::{fence, AtomicU64, Ordering};
use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// Why a ring's memfd could not be created or attached.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("ring memory: {0}")]
    Io(#[from] std::io::Error),
    #[error("ring memory is not sealed against shrinking")]
    NotSealed,
    #[error("ring memory of {0} bytes does not match its header")]
    BadSize(u64),
    #[error("not a ring (bad magic)")]
    BadMagic,
    #[error("ring version {0}, this side speaks {VERSION}")]
    BadVersion(u32),
    #[error("ring capacity {0} is not a power of two in 4 KiB ..= 1 GiB")]
    BadCapacity(u64),
    #[error("ring indices: {0}")]
    BadIndex(Corrupt),
}

impl From<nix::Error> for AttachError {
    fn from(e: nix::Error) -> AttachError {
        AttachError::Io(e.into())
    }
}

/// A new ring of `capacity` data bytes (a power of two, [`MIN_CAPACITY`] ..=
/// [`MAX_CAPACITY`]): a memfd with its header written, indices 0, sealed so that neither
/// side can shrink it under the other's mapping (or grow it: the size is the contract).
pub fn create_region(capacity: usize) -> Result<OwnedFd, AttachError> {
    if !capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
        return Err(AttachError::BadCapacity(capacity as u64));
    }
    let fd = memfd_create(
        c"roce-emu-ring",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )?;
    let size = HEADER_LEN + capacity;
    nix::unistd::ftruncate(&fd, size as i64)?;
    {
        let shm = Shm::map(fd.as_fd(), size)?;
        let mut h = [0u8; 24];
        h[OFF_MAGIC..8].copy_from_slice(&MAGIC.to_le_bytes());
        h[OFF_VERSION..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        h[OFF_CAPACITY..24].copy_from_slice(&(capacity as u64).to_le_bytes());
        shm.write(0, &h);
    }
    fcntl(
        &fd,
        FcntlArg::F_ADD_SEALS(
            SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL,
        ),
    )?;
    Ok(fd)
}

/// A validated mapping of a ring: the capacity is read once, here, and never again.
struct Mapped {
    shm: Shm,
    cap: usize,
}

impl Mapped {
    fn attach(fd: BorrowedFd<'_>) -> Result<Mapped, AttachError> {
        let seals = SealFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GET_SEALS)?);
        if !seals.contains(SealFlag::F_SEAL_SHRINK) {
            return Err(AttachError::NotSealed);
        }
        let size = nix::sys::stat::fstat(fd)?.st_size as u64;
        if size < (HEADER_LEN + MIN_CAPACITY) as u64 || size > (HEADER_LEN + MAX_CAPACITY) as u64 {
            return Err(AttachError::BadSize(size));
        }
        let shm = Shm::map(fd, size as usize)?;
        let word = |off| shm.read_u64(off).unwrap_or(0);
        if word(OFF_MAGIC) != MAGIC {
            return Err(AttachError::BadMagic);
        }
        let v = word(OFF_VERSION);
        if v as u32 != VERSION || (v >> 32) as usize != HEADER_LEN {
            return Err(AttachError::BadVersion(v as u32));
        }
        let cap = word(OFF_CAPACITY);
        let ok =
            cap.is_power_of_two() && (MIN_CAPACITY as u64..=MAX_CAPACITY as u64).contains(&cap);
        if !ok {
            return Err(AttachError::BadCapacity(cap));
        }
        if HEADER_LEN as u64 + cap != size {
            return Err(AttachError::BadSize(size));
        }
        Ok(Mapped {
            shm,
            cap: cap as usize,
        })
    }

    /// An index word of the header (always inside the mapping, which is at least a
    /// header long; `None` cannot happen and reads as a broken ring).
    fn index(&self, off: usize) -> Result<&AtomicU64, Corrupt> {
        self.shm.atomic_u64(off).ok_or(Corrupt::OutOfRange)
    }

    /// Whether `len` bytes at `at` lie in the data area.
    fn shm_fits(&self, at: usize, len: usize) -> bool {
        at >= HEADER_LEN
            && at
                .checked_add(len)
                .is_some_and(|end| end <= HEADER_LEN + self.cap)
    }

    fn offset(&self, pos: u64) -> usize {
        (pos & (self.cap as u64 - 1)) as usize
    }
}

/// The initial indices of an attach, validated like any later load.
fn check_pair(head: u64, tail: u64, cap: usize) -> Result<(), Corrupt> {
    if head % 8 != 0 || tail % 8 != 0 {
        return Err(Corrupt::Misaligned);
    }
    if tail < head || tail - head > cap as u64 {
        return Err(Corrupt::OutOfRange);
    }
    Ok(())
}

/// Marks a ring broken (sticky). A free function over the one field, so it can run while
/// the mapping is borrowed.
fn broke(broken: &mut Option<Corrupt>, c: Corrupt) -> Corrupt {
    *broken = Some(c);
    c
}

fn ring_bell(bell: &OwnedFd) {
    super::link::ring(bell);
}

/// What a producer counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ProducerStats {
    pub pushed: u64,
    /// Packets refused because the ring was full (the caller dropped them).
    pub full: u64,
    /// Packets refused as longer than the ring can carry.
    pub too_large: u64,
    /// Doorbell writes (one system call each: one per consumer sleep, not per packet).
    pub doorbells: u64,
}

/// The writing end of a ring. `try_push` stages entries; `flush` publishes them all with
/// one store and rings the doorbell if the consumer sleeps.
pub struct Producer {
    m: Mapped,
    /// Our own index, staged (written, not yet published) and published.
    tail: u64,
    published: u64,
    /// The consumer's head as last loaded and validated.
    head: u64,
    bell: OwnedFd,
    broken: Option<Corrupt>,
    stats: ProducerStats,
}

impl Producer {
    #[cfg(test)]
    pub(super) fn bell_for_tests(&self) -> &OwnedFd {
        &self.bell
    }

    /// Maps the ring in `mem`; `bell` is the producer's end of the doorbell (`link::bell_pair`).
    pub fn attach(mem: BorrowedFd<'_>, bell: OwnedFd) -> Result<Producer, AttachError> {
        let m = Mapped::attach(mem)?;
        let tail = m
            .index(OFF_TAIL)
            .map_err(AttachError::BadIndex)?
            .load(Ordering::Acquire);
        let head = m
            .index(OFF_HEAD)
            .map_err(AttachError::BadIndex)?
            .load(Ordering::Acquire);
        check_pair(head, tail, m.cap).map_err(AttachError::BadIndex)?;
        Ok(Producer {
            m,
            tail,
            published: tail,
            head,
            bell,
            broken: None,
            stats: ProducerStats::default(),
        })
    }

    pub fn stats(&self) -> ProducerStats {
        self.stats
    }

    /// The data area's size.
    pub fn capacity(&self) -> usize {
        self.m.cap
    }

    /// Loads the consumer's head (Acquire: its reads of the space it frees happened before
    /// we overwrite it) and checks it lies in [our last view, our published tail].
    fn load_head(&mut self) -> Result<(), Corrupt> {
        let h = self.m.index(OFF_HEAD)?.load(Ordering::Acquire);
        if h % 8 != 0 {
            return Err(Corrupt::Misaligned);
        }
        if h < self.head {
            return Err(Corrupt::Backwards);
        }
        if h > self.published {
            return Err(Corrupt::OutOfRange);
        }
        self.head = h;
        Ok(())
    }

    fn fail(&mut self, c: Corrupt) -> PushError {
        PushError::Broken(broke(&mut self.broken, c))
    }

    /// The ring's breakage, if it broke.
    pub fn broken(&self) -> Option<Corrupt> {
        self.broken
    }

    /// How many more packets of up to `largest` bytes `try_push` surely takes now: the
    /// free space (the consumer's head loaded afresh) less one pad at the wrap, in
    /// records of the largest size. 0 for a broken ring (its `try_push` says why).
    pub fn room(&mut self, largest: usize) -> usize {
        if self.broken.is_some() {
            return 0;
        }
        if let Err(c) = self.load_head() {
            broke(&mut self.broken, c);
            return 0;
        }
        let rec = record_len(largest.min(MAX_PACKET)) as u64;
        let free = self.m.cap as u64 - (self.tail - self.head);
        (free.saturating_sub(rec) / rec) as usize
    }

    /// Writes one entry into the ring without publishing it (see [`Producer::flush`]).
    /// Never blocks: a full ring is [`PushError::Full`].
    pub fn try_push(&mut self, meta: &Meta, packet: &[u8]) -> Result<(), PushError> {
        self.stage(meta, packet.len(), |shm, at| shm.write(at, packet))
    }

    /// [`Producer::try_push`] of a packet still in another ring, `src`, taken from it with
    /// [`Consumer::take`]: one copy, ring to ring (the daemon's hairpin between two of its
    /// processes). The packet's bytes are whatever `src`'s producer left there.
    pub fn try_push_from(
        &mut self,
        meta: &Meta,
        src: &Consumer,
        e: &Entry,
    ) -> Result<(), PushError> {
        if !src.m.shm_fits(e.at, e.len) {
            // An entry of another ring than `src`: nothing to copy from here.
            return Err(PushError::TooLarge);
        }
        self.stage(meta, e.len, |shm, at| {
            shm.copy_from(at, &src.m.shm, e.at, e.len)
        })
    }

    /// Stages one entry of a `len`-byte packet whose bytes `fill` writes at the offset it
    /// is given.
    fn stage(
        &mut self,
        meta: &Meta,
        len: usize,
        fill: impl FnOnce(&Shm, usize) -> bool,
    ) -> Result<(), PushError> {
        if let Some(c) = self.broken {
            return Err(PushError::Broken(c));
        }
        let cap = self.m.cap;
        let rec = record_len(len);
        if len > MAX_PACKET || rec > cap {
            self.stats.too_large += 1;
            return Err(PushError::TooLarge);
        }
        let mut off = self.m.offset(self.tail);
        let pad = if off + rec > cap { cap - off } else { 0 };
        let need = (pad + rec) as u64;
        // The indices only grow; a region that starts with a tail a capacity short of
        // 2^64 (written by a hostile process before we attached) would wrap it.
        let Some(new_tail) = self.tail.checked_add(need) else {
            return Err(self.fail(Corrupt::OutOfRange));
        };
        if cap as u64 - (self.tail - self.head) < need {
            self.load_head().map_err(|c| broke(&mut self.broken, c))?;
            if cap as u64 - (self.tail - self.head) < need {
                self.stats.full += 1;
                return Err(PushError::Full);
            }
        }
        let shm = &self.m.shm;
        let mut ok = true;
        if pad > 0 {
            let word = pad as u64 | u64::from(KIND_PAD) << 32;
            ok &= shm.write(HEADER_LEN + off, &word.to_le_bytes());
            off = 0;
        }
        ok &= shm.write(HEADER_LEN + off, &encode_entry(meta, len));
        ok &= fill(shm, HEADER_LEN + off + ENTRY_HEADER);
        if !ok {
            // Offsets are below the capacity read at attach, so this cannot happen.
            return Err(self.fail(Corrupt::OutOfRange));
        }
        self.tail = new_tail;
        self.stats.pushed += 1;
        Ok(())
    }

    /// Publishes what `try_push` staged (one Release store) and, if the consumer said it
    /// is going to sleep, wakes it (one doorbell send). `true` if it rang.
    pub fn flush(&mut self) -> Result<bool, PushError> {
        if let Some(c) = self.broken {
            return Err(PushError::Broken(c));
        }
        if self.tail == self.published {
            return Ok(false);
        }
        let tail = self
            .m
            .index(OFF_TAIL)
            .map_err(|c| broke(&mut self.broken, c))?;
        tail.store(self.tail, Ordering::Release);
        self.published = self.tail;
        // Pairs with the consumer's fence between `waiting = 1` and its re-load of tail.
        fence(Ordering::SeqCst);
        let waiting = self
            .m
            .index(OFF_WAITING)
            .map_err(|c| broke(&mut self.broken, c))?;
        if waiting.load(Ordering::Relaxed) != 0 && waiting.swap(0, Ordering::Relaxed) != 0 {
            ring_bell(&self.bell);
            self.stats.doorbells += 1;
            return Ok(true);
        }
        Ok(false)
    }

    /// `try_push` then `flush`: one packet, published at once.
    pub fn push(&mut self, meta: &Meta, packet: &[u8]) -> Result<(), PushError> {
        self.try_push(meta, packet)?;
        self.flush().map(|_| ())
    }

    /// Queues packets until the ring is full, then publishes them with one store. Returns
    /// how many items it took: queued, or dropped as too large (counted); the items after
    /// those did not fit.
    pub fn push_batch<'a, I>(&mut self, items: I) -> Result<usize, PushError>
    where
        I: IntoIterator<Item = (&'a Meta, &'a [u8])>,
    {
        let mut n = 0;
        for (meta, packet) in items {
            match self.try_push(meta, packet) {
                Ok(()) | Err(PushError::TooLarge) => n += 1,
                Err(PushError::Full) => break,
                Err(e) => return Err(e),
            }
        }
        self.flush()?;
        Ok(n)
    }
}

/// What a consumer counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerStats {
    pub popped: u64,
    /// Entries framed correctly whose header says something impossible (dropped).
    pub malformed: u64,
    /// Packets longer than the caller's buffer (dropped).
    pub too_long: u64,
    /// Times the consumer slept on the doorbell.
    pub sleeps: u64,
}

/// One packet of a `pop_batch`: its bytes are in the caller's pool at
/// `offset..offset + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Popped {
    pub meta: Meta,
    pub offset: usize,
    pub len: usize,
}

/// A packet taken from a ring and still in it ([`Consumer::take`]): its metadata, and
/// where its bytes are (only the consumer that took it can reach them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    meta: Meta,
    /// Offset of the packet's bytes in the mapping (inside the data area: checked).
    at: usize,
    len: usize,
}

impl Entry {
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The reading end of a ring. Packets are copied out (the bytes in the ring belong to
/// the producer again as soon as the head moves, and a hostile producer may rewrite them
/// at any time).
pub struct Consumer {
    m: Mapped,
    /// Our own index, advanced and published.
    head: u64,
    published: u64,
    /// The producer's tail as last loaded and validated.
    tail: u64,
    bell: OwnedFd,
    broken: Option<Corrupt>,
    stats: ConsumerStats,
}

impl Consumer {
    #[cfg(test)]
    pub(super) fn bell_for_tests(&self) -> &OwnedFd {
        &self.bell
    }

    /// Maps the ring in `mem`; `bell` is the consumer's end of the doorbell (`link::bell_pair`).
    pub fn attach(mem: BorrowedFd<'_>, bell: OwnedFd) -> Result<Consumer, AttachError> {
        let m = Mapped::attach(mem)?;
        let head = m
            .index(OFF_HEAD)
            .map_err(AttachError::BadIndex)?
            .load(Ordering::Acquire);
        let tail = m
            .index(OFF_TAIL)
            .map_err(AttachError::BadIndex)?
            .load(Ordering::Acquire);
        check_pair(head, tail, m.cap).map_err(AttachError::BadIndex)?;
        Ok(Consumer {
            m,
            head,
            published: head,
            tail,
            bell,
            broken: None,
            stats: ConsumerStats::default(),
        })
    }

    pub fn stats(&self) -> ConsumerStats {
        self.stats
    }

    /// The ring's breakage, if it broke.
    pub fn broken(&self) -> Option<Corrupt> {
        self.broken
    }

    /// The doorbell end that becomes readable when the producer rings (for a poll loop over
    /// many links: see [`Consumer::arm`]).
    pub fn bell_fd(&self) -> BorrowedFd<'_> {
        self.bell.as_fd()
    }

    /// Loads the producer's tail (Acquire: the entries before it are fully written) and
    /// checks it is 8-aligned, not behind our last view and at most a capacity ahead.
    fn load_tail(&mut self) -> Result<(), Corrupt> {
        let t = self.m.index(OFF_TAIL)?.load(Ordering::Acquire);
        self.check_tail(t)
    }

    fn check_tail(&mut self, t: u64) -> Result<(), Corrupt> {
        if t % 8 != 0 {
            return Err(Corrupt::Misaligned);
        }
        if t < self.tail {
            return Err(Corrupt::Backwards);
        }
        if t - self.head > self.m.cap as u64 {
            return Err(Corrupt::OutOfRange);
        }
        self.tail = t;
        Ok(())
    }

    /// The next packet into `buf`, without publishing the head.
    fn next(&mut self, buf: &mut [u8]) -> Result<Option<(Meta, usize)>, Corrupt> {
        loop {
            let Some(e) = self.next_entry()? else {
                return Ok(None);
            };
            let Some(dst) = buf.get_mut(..e.len) else {
                self.stats.too_long += 1;
                continue;
            };
            if !self.m.shm.read(e.at, dst) {
                return Err(Corrupt::OutOfRange);
            }
            self.stats.popped += 1;
            return Ok(Some((e.meta, e.len)));
        }
    }

    /// The next packet's entry, its bytes left in the ring; the head moves past it but is
    /// not published. Each shared word is read once, into a local, and checked before it
    /// is used.
    fn next_entry(&mut self) -> Result<Option<Entry>, Corrupt> {
        loop {
            if self.head == self.tail {
                self.load_tail()?;
                if self.head == self.tail {
                    return Ok(None);
                }
            }
            let cap = self.m.cap;
            let off = self.m.offset(self.head);
            let avail = self.tail - self.head;
            let w0 = self
                .m
                .shm
                .read_u64(HEADER_LEN + off)
                .ok_or(Corrupt::OutOfRange)?;
            let len = (w0 & 0xffff_ffff) as usize;
            match (w0 >> 32) as u16 {
                KIND_PAD => {
                    if len != cap - off || len as u64 > avail {
                        return Err(Corrupt::BadPad);
                    }
                    self.head += len as u64;
                }
                KIND_PACKET => {
                    let rec = record_len(len);
                    if len > MAX_PACKET || off + rec > cap || rec as u64 > avail {
                        return Err(Corrupt::BadLength);
                    }
                    let mut h = [0u8; ENTRY_HEADER];
                    for (i, chunk) in h.chunks_exact_mut(8).enumerate() {
                        let w = if i == 0 {
                            w0
                        } else {
                            let at = HEADER_LEN + off + 8 * i;
                            self.m.shm.read_u64(at).ok_or(Corrupt::OutOfRange)?
                        };
                        chunk.copy_from_slice(&w.to_le_bytes());
                    }
                    self.head += rec as u64;
                    let Some(meta) = decode_meta(&h, len) else {
                        self.stats.malformed += 1;
                        continue;
                    };
                    return Ok(Some(Entry {
                        meta,
                        at: HEADER_LEN + off + ENTRY_HEADER,
                        len,
                    }));
                }
                _ => return Err(Corrupt::BadKind),
            }
        }
    }

    /// The next packet, left in the ring: its bytes are read with [`Consumer::read`] or
    /// copied into another ring with [`Producer::try_push_from`], until
    /// [`Consumer::commit`] hands the space back to the producer (after that they are the
    /// producer's again and read as whatever it writes). No copy, no store to the ring.
    pub fn take(&mut self) -> Result<Option<Entry>, Corrupt> {
        if let Some(c) = self.broken {
            return Err(c);
        }
        let e = self.next_entry().map_err(|c| broke(&mut self.broken, c))?;
        if e.is_some() {
            self.stats.popped += 1;
        }
        Ok(e)
    }

    /// Where the next `take` starts: for [`Consumer::untake`].
    pub fn mark(&self) -> u64 {
        self.head
    }

    /// Puts back the packet taken since `mark` (not yet committed): the next `take`
    /// returns it again, read afresh. For a consumer that takes a packet, finds it cannot
    /// pass it on yet, and must keep it and the packets after it in order. A mark from
    /// before the last commit, or from the future, changes nothing.
    pub fn untake(&mut self, mark: u64) {
        if (self.published..self.head).contains(&mark) {
            self.head = mark;
            self.stats.popped = self.stats.popped.saturating_sub(1);
        }
    }

    /// Copies `dst.len()` bytes of a taken packet, from its byte `skip`; `false` (nothing
    /// copied) if that is past the packet's end.
    pub fn read(&self, e: &Entry, skip: usize, dst: &mut [u8]) -> bool {
        let fits = skip.checked_add(dst.len()).is_some_and(|end| end <= e.len);
        fits && self.m.shm_fits(e.at, e.len) && self.m.shm.read(e.at + skip, dst)
    }

    /// Publishes the head past every packet taken (one store): their space goes back to
    /// the producer.
    pub fn commit(&mut self) -> Result<(), Corrupt> {
        if let Some(c) = self.broken {
            return Err(c);
        }
        self.release().map_err(|c| broke(&mut self.broken, c))
    }

    fn fail(&mut self, c: Corrupt) -> Corrupt {
        broke(&mut self.broken, c)
    }

    /// Publishes the head (Release: our copies out of the freed space happen before the
    /// producer reuses it). One store per batch.
    fn release(&mut self) -> Result<(), Corrupt> {
        if self.head != self.published {
            self.m.index(OFF_HEAD)?.store(self.head, Ordering::Release);
            self.published = self.head;
        }
        Ok(())
    }

    /// The next packet into `buf` (dropped and counted if longer than `buf`), published
    /// at once. For more than one, [`Consumer::pop_batch`] publishes once per batch.
    pub fn pop(&mut self, buf: &mut [u8]) -> Result<Option<(Meta, usize)>, Corrupt> {
        if let Some(c) = self.broken {
            return Err(c);
        }
        let r = self.next(buf).map_err(|c| broke(&mut self.broken, c));
        self.release().map_err(|c| broke(&mut self.broken, c))?;
        r
    }

    /// Up to `out.len()` packets into `pool`, packet `i` in slot `i` of `slot` bytes (a
    /// longer packet is dropped and counted), then one head store. A ring that breaks
    /// after some packets returns those; the next call returns the error.
    pub fn pop_batch(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &mut [Popped],
    ) -> Result<usize, Corrupt> {
        if let Some(c) = self.broken {
            return Err(c);
        }
        let mut n = 0;
        let mut err = None;
        while n < out.len() && slot > 0 {
            let Some(buf) = pool.get_mut(n * slot..(n + 1) * slot) else {
                break;
            };
            match self.next(buf) {
                Ok(Some((meta, len))) => {
                    out[n] = Popped {
                        meta,
                        offset: n * slot,
                        len,
                    };
                    n += 1;
                }
                Ok(None) => break,
                Err(c) => {
                    err = Some(self.fail(c));
                    break;
                }
            }
        }
        self.release().map_err(|c| broke(&mut self.broken, c))?;
        match err {
            Some(c) if n == 0 => Err(c),
            _ => Ok(n),
        }
    }

    /// Says we are about to sleep: sets `waiting`, then (after a SeqCst fence that pairs
    /// with the producer's) looks at the tail once more. `Ok(true)`: entries arrived, do
    /// not sleep (`waiting` is cleared again). `Ok(false)`: sleep until `bell_fd` is
    /// readable, then call [`Consumer::disarm`].
    pub fn arm(&mut self) -> Result<bool, Corrupt> {
        if let Some(c) = self.broken {
            return Err(c);
        }
        if self.head != self.tail {
            return Ok(true);
        }
        let waiting = self
            .m
            .index(OFF_WAITING)
            .map_err(|c| broke(&mut self.broken, c))?;
        waiting.store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let t = self
            .m
            .index(OFF_TAIL)
            .map_err(|c| broke(&mut self.broken, c))?
            .load(Ordering::Acquire);
        self.check_tail(t).map_err(|c| broke(&mut self.broken, c))?;
        if self.head != self.tail {
            self.disarm();
            return Ok(true);
        }
        Ok(false)
    }

    /// After a sleep (or an `arm` that said not to): clears `waiting` and drains the
    /// doorbell so the next sleep waits for a new ring.
    pub fn disarm(&mut self) {
        if let Ok(w) = self.m.index(OFF_WAITING) {
            w.store(0, Ordering::Relaxed);
        }
        super::link::drain(&self.bell);
    }

    /// Sleeps until the ring has entries or `timeout` passes; `Ok(true)` if it has.
    pub fn wait(&mut self, timeout: Duration) -> Result<bool, Corrupt> {
        if self.arm()? {
            return Ok(true);
        }
        self.stats.sleeps += 1;
        let ms = nix::poll::PollTimeout::try_from(timeout).unwrap_or(nix::poll::PollTimeout::MAX);
        let mut fds = [nix::poll::PollFd::new(
            self.bell.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let _ = nix::poll::poll(&mut fds, ms);
        self.disarm();
        if self.head != self.tail {
            return Ok(true);
        }
        self.load_tail().map_err(|c| broke(&mut self.broken, c))?;
        Ok(self.head != self.tail)
    }
}
