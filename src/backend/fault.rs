//! Fault injection around any backend: the driver knows nothing of it.

use super::{Backend, BackendError, Outgoing, PortStats, Received};
use crate::rng::Rng;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;

/// Drops each transmitted datagram with probability `p` (seeded: a seed reproduces the
/// same drop pattern for the same traffic). What `demo --loss` and `perf --loss` use.
pub struct Lossy<B> {
    inner: B,
    p: f64,
    rng: Rng,
    dropped: u64,
    /// The datagrams kept, compacted (slot indices stay those of the caller's pool).
    keep: Vec<Outgoing>,
    slots: Vec<usize>,
}

impl<B: Backend> Lossy<B> {
    pub fn new(inner: B, p: f64, seed: u64) -> Lossy<B> {
        Lossy {
            inner,
            p,
            rng: Rng::new(seed),
            dropped: 0,
            keep: Vec::with_capacity(super::udp::TX_BATCH),
            slots: Vec::with_capacity(super::udp::TX_BATCH),
        }
    }

    pub fn inner(&self) -> &B {
        &self.inner
    }
}

impl<B: Backend> Backend for Lossy<B> {
    fn local(&self) -> SocketAddr {
        self.inner.local()
    }
    fn recv_batch(&mut self, pool: &mut [u8], out: &mut [Received]) -> Result<usize, BackendError> {
        self.inner.recv_batch(pool, out)
    }
    fn send_batch(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &[Outgoing],
    ) -> Result<(), BackendError> {
        self.keep.clear();
        self.slots.clear();
        for (i, o) in out.iter().enumerate() {
            if self.rng.chance(self.p) {
                self.dropped += 1;
            } else {
                self.keep.push(*o);
                self.slots.push(i);
            }
        }
        if self.keep.len() == out.len() {
            return self.inner.send_batch(pool, slot, out);
        }
        // Move the kept datagrams down to consecutive slots (the batch layout the inner
        // backend expects). Slot k <= slots[k], so nothing is overwritten before it moves.
        for (k, &i) in self.slots.iter().enumerate() {
            if k != i {
                let len = self.keep[k].len;
                pool.copy_within(i * slot..i * slot + len, k * slot);
            }
        }
        if self.keep.is_empty() {
            return Ok(());
        }
        self.inner.send_batch(pool, slot, &self.keep)
    }
    fn rx_fd(&self) -> BorrowedFd<'_> {
        self.inner.rx_fd()
    }
    fn stats(&self) -> PortStats {
        PortStats {
            fault_dropped: self.dropped,
            ..self.inner.stats()
        }
    }
}
