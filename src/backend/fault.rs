//! Fault injection around any backend: the driver knows nothing of it.
//!
//! [`Lossy`] is the simple seeded transmit loss of `demo --loss` and `perf --loss`;
//! [`port::Faulty`] applies the daemon's rules ([`rule::Rule`]: drop, duplicate, reorder,
//! delay, corrupt; by direction, opcode and QPN), which can change at run time.

pub mod port;
pub mod rule;

pub use port::{FaultHandle, Faulty};
pub use rule::{Action, Dir, Faults, Rule, RuleReport};

use super::{Backend, BackendError, Outgoing, PortStats, Received};
use crate::rng::Rng;
use crate::wire::Ecn;
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
    fn send_room(&mut self, largest: usize) -> usize {
        self.inner.send_room(largest)
    }
    fn rx_fd(&self) -> BorrowedFd<'_> {
        self.inner.rx_fd()
    }
    fn flush_held(&mut self) {
        self.inner.flush_held()
    }
    fn prepare_sleep(&mut self) -> bool {
        self.inner.prepare_sleep()
    }
    fn stats(&self) -> PortStats {
        PortStats {
            fault_dropped: self.dropped,
            ..self.inner.stats()
        }
    }
    fn mark_used(&mut self) {
        self.inner.mark_used()
    }
    fn observe_hairpin(&mut self, src: SocketAddr, dst: SocketAddr, ecn: Ecn, packet: &[u8]) {
        self.inner.observe_hairpin(src, dst, ecn, packet)
    }
    fn l2_stats(&self) -> Option<crate::iface::IfaceStats> {
        self.inner.l2_stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::fake::Fake;

    /// Sends batches of 32 numbered datagrams of different lengths through `Lossy`.
    fn run(p: f64, seed: u64) -> (Vec<Vec<u8>>, u64) {
        const SLOT: usize = 64;
        let mut l = Lossy::new(Fake::new(), p, seed);
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        for batch in 0..100u32 {
            let mut pool = vec![0u8; 32 * SLOT];
            let mut out = Vec::new();
            for i in 0..32u32 {
                let n = batch * 32 + i;
                let len = 4 + (n % 50) as usize;
                pool[i as usize * SLOT..][..4].copy_from_slice(&n.to_be_bytes());
                out.push(Outgoing {
                    src: a,
                    dst: a,
                    len,
                    ecn: Ecn::NotEct,
                });
            }
            l.send_batch(&mut pool, SLOT, &out).unwrap();
        }
        let dropped = l.stats().fault_dropped;
        (l.inner.sent, dropped)
    }

    /// What is kept arrives intact and in order (the compaction moves whole datagrams),
    /// drops and deliveries add up, the share is near p, and a seed repeats its pattern.
    #[test]
    fn drops_a_seeded_share_and_keeps_the_rest_intact() {
        let (sent, dropped) = run(0.3, 7);
        assert_eq!(sent.len() as u64 + dropped, 3200);
        assert!(
            (800..1120).contains(&dropped),
            "{dropped} of 3200 at p = 0.3"
        );
        let mut last = None;
        for d in &sent {
            let n = u32::from_be_bytes(d[..4].try_into().unwrap());
            assert_eq!(
                d.len(),
                4 + (n % 50) as usize,
                "datagram {n} kept its length"
            );
            assert!(last < Some(n), "order kept");
            last = Some(n);
        }
        assert_eq!(run(0.3, 7), (sent, dropped), "same seed, same drops");
        assert_ne!(run(0.3, 8).1, 0);
        assert_eq!(run(0.0, 7).1, 0);
        assert_eq!(run(1.0, 7).0.len(), 0);
    }
}
