//! [`Faulty`]: a backend that applies the port's fault rules ([`Faults`]) to the RoCE
//! datagrams going through it, both ways. Under an L2 port it sits above the interface,
//! so ARP, ND and ICMP frames are never touched; above a capture, so the capture shows
//! the wire (a packet dropped on the way out is not in it; one dropped on the way in is).
//!
//! The rules are shared (`FaultHandle`): the daemon changes them at run time. With no
//! rule for a direction and nothing held, its calls go straight to the inner backend, no
//! copy.
//!
//! Held packets (delay, reorder) must come out on time even when no other traffic
//! wakes the daemon: the timer of `backend::held` is armed for the next release, and the
//! daemon's `recv_batch` releases what is due both ways.

use super::rule::{Dir, Faults, REORDER_MAX_HOLD};
use crate::backend::held::{Held as HeldPort, Pkt};
use crate::backend::{Backend, BackendError, Outgoing, PortStats, Received};
use crate::wire::Ecn;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// The rules a [`Faulty`] port applies, shared with whoever changes them.
pub type FaultHandle = Arc<Mutex<Faults>>;

#[derive(Debug)]
struct Held {
    pkt: Pkt,
    /// Released at this time...
    due: Instant,
    /// ...or once the direction's packet count reaches this (reorder).
    after: Option<u64>,
}

/// One direction's state.
#[derive(Debug, Default)]
struct Way {
    held: Vec<Held>,
    /// Packets that went by (not held) so far: what reorder depths count.
    passed: u64,
}

impl Way {
    /// Moves what is due at `now` (or by count) to `ready`, in the order it was held.
    fn release(&mut self, now: Instant, ready: &mut VecDeque<Pkt>) {
        let passed = self.passed;
        let mut k = 0;
        while k < self.held.len() {
            let h = &self.held[k];
            if h.due <= now || h.after.is_some_and(|a| passed >= a) {
                ready.push_back(self.held.remove(k).pkt);
            } else {
                k += 1;
            }
        }
    }

    fn next_due(&self) -> Option<Instant> {
        self.held.iter().map(|h| h.due).min()
    }
}

pub struct Faulty<B> {
    inner: B,
    faults: FaultHandle,
    /// The timer, the buffers and the send batch of held packets.
    port: HeldPort,
    rx: Way,
    tx: Way,
    /// Received packets waiting for room in the caller's pool.
    rx_ready: VecDeque<Pkt>,
    rx_pool: Vec<u8>,
    rx_meta: Vec<Received>,
    dropped: u64,
}

impl<B: Backend> Faulty<B> {
    pub fn new(inner: B, faults: FaultHandle) -> Result<Faulty<B>, BackendError> {
        let port = HeldPort::new(inner.rx_fd(), "set up fault timers for")?;
        let slot = crate::backend::udp::RX_SLOT;
        Ok(Faulty {
            inner,
            faults,
            port,
            rx: Way::default(),
            tx: Way::default(),
            rx_ready: VecDeque::new(),
            rx_pool: vec![0; slot * crate::backend::udp::RX_BATCH],
            rx_meta: vec![
                Received {
                    src: any(),
                    dst: any(),
                    offset: 0,
                    len: 0,
                    segment: None,
                    ipv4_id: None,
                    ecn: Ecn::NotEct,
                };
                crate::backend::udp::RX_BATCH
            ],
            dropped: 0,
        })
    }

    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn rules(&self) -> MutexGuard<'_, Faults> {
        // A panic elsewhere while holding the lock leaves the rules usable as they are.
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Nothing to do on receive: no rule for it, nothing held or queued either way.
    fn rx_idle(&self) -> bool {
        self.rx.held.is_empty()
            && self.tx.held.is_empty()
            && self.rx_ready.is_empty()
            && !self.rules().acts_on(Dir::In)
    }

    /// Nothing to do on send: no rule for it, nothing held to go out.
    fn tx_idle(&self) -> bool {
        self.tx.held.is_empty() && !self.rules().acts_on(Dir::Out)
    }

    /// Applies the rules to one packet going `dir`; what goes on is pushed to `ready`.
    fn admit(&mut self, dir: Dir, mut pkt: Pkt, now: Instant, ready: &mut VecDeque<Pkt>) {
        let fate = self
            .faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .decide(dir, &mut pkt.bytes);
        let way = match dir {
            Dir::In => &mut self.rx,
            Dir::Out => &mut self.tx,
        };
        if fate.drop {
            self.dropped += 1;
            self.port.recycle(pkt);
            return;
        }
        let copies = 1 + fate.extra as usize;
        if fate.held() {
            let due = now
                + match (fate.delay, fate.reorder) {
                    (Some(d), _) => d,
                    (None, _) => REORDER_MAX_HOLD,
                };
            // A reorder inside a delay: the delay decides (the longer hold).
            let after = fate
                .reorder
                .filter(|_| fate.delay.is_none())
                .map(|d| way.passed + u64::from(d));
            for _ in 1..copies {
                let copy = self
                    .port
                    .copy((pkt.src, pkt.dst), pkt.ipv4_id, pkt.ecn, &pkt.bytes);
                way.held.push(Held {
                    pkt: copy,
                    due,
                    after,
                });
            }
            way.held.push(Held { pkt, due, after });
            return;
        }
        for _ in 1..copies {
            let copy = self
                .port
                .copy((pkt.src, pkt.dst), pkt.ipv4_id, pkt.ecn, &pkt.bytes);
            ready.push_back(copy);
            way.passed += 1;
            way.release(now, ready);
        }
        ready.push_back(pkt);
        way.passed += 1;
        way.release(now, ready);
    }

    /// Sends the held outgoing packets that are due.
    fn release_tx(&mut self, now: Instant) -> Result<(), BackendError> {
        if self.tx.held.is_empty() {
            return Ok(());
        }
        let mut due = VecDeque::new();
        self.tx.release(now, &mut due);
        self.port.send(&mut self.inner, due)
    }

    /// Sets the timer for the next thing due: at once while received packets wait, else
    /// the first release; off when nothing is held.
    fn rearm(&mut self, now: Instant) {
        let next = if self.rx_ready.is_empty() {
            match (self.rx.next_due(), self.tx.next_due()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        } else {
            Some(now)
        };
        self.port.set_timer(now, next);
    }
}

fn any() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 0))
}

impl<B: Backend> Backend for Faulty<B> {
    fn local(&self) -> SocketAddr {
        self.inner.local()
    }

    fn recv_batch(&mut self, pool: &mut [u8], out: &mut [Received]) -> Result<usize, BackendError> {
        if self.rx_idle() {
            if self.port.armed() {
                self.port.set_timer(Instant::now(), None);
            }
            return self.inner.recv_batch(pool, out);
        }
        let now = Instant::now();
        self.release_tx(now)?;
        let mut ready = std::mem::take(&mut self.rx_ready);
        self.rx.release(now, &mut ready);
        // Take more from the wire only when what waits fits: the queue stays bounded.
        if ready.len() < out.len() {
            let n = self
                .inner
                .recv_batch(&mut self.rx_pool, &mut self.rx_meta)?;
            for i in 0..n {
                let r = self.rx_meta[i];
                let seg = r.segment.unwrap_or(r.len).max(1);
                let mut at = r.offset;
                while at < r.offset + r.len {
                    let len = seg.min(r.offset + r.len - at);
                    let bytes = &self.rx_pool[at..at + len];
                    let pkt = self.port.copy((r.src, r.dst), r.ipv4_id, r.ecn, bytes);
                    self.admit(Dir::In, pkt, now, &mut ready);
                    at += len;
                }
            }
        }
        // Hand out what fits, one datagram after another in the caller's pool.
        let mut n = 0;
        let mut off = 0;
        while n < out.len() {
            let Some(p) = ready.front() else { break };
            if off + p.bytes.len() > pool.len() {
                break;
            }
            let p = ready.pop_front().expect("front exists");
            pool[off..off + p.bytes.len()].copy_from_slice(&p.bytes);
            out[n] = Received {
                src: p.src,
                dst: p.dst,
                offset: off,
                len: p.bytes.len(),
                segment: None,
                ipv4_id: p.ipv4_id,
                ecn: p.ecn,
            };
            off += p.bytes.len();
            n += 1;
            self.port.recycle(p);
        }
        self.rx_ready = ready;
        self.rearm(now);
        Ok(n)
    }

    fn send_batch(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &[Outgoing],
    ) -> Result<(), BackendError> {
        if self.tx_idle() {
            return self.inner.send_batch(pool, slot, out);
        }
        let now = Instant::now();
        self.release_tx(now)?;
        let mut ready = VecDeque::with_capacity(out.len());
        for (i, o) in out.iter().enumerate() {
            let bytes = &pool[i * slot..i * slot + o.len];
            let pkt = self.port.copy((o.src, o.dst), None, o.ecn, bytes);
            self.admit(Dir::Out, pkt, now, &mut ready);
        }
        self.port.send(&mut self.inner, ready)?;
        self.rearm(now);
        Ok(())
    }

    fn send_room(&mut self, largest: usize) -> usize {
        self.inner.send_room(largest)
    }
    fn rx_fd(&self) -> BorrowedFd<'_> {
        self.port.fd()
    }

    fn flush_held(&mut self) {
        // What a rule holds back (delayed, reordered) is the fault's to lose.
        self.inner.flush_held()
    }

    fn prepare_sleep(&mut self) -> bool {
        // The epoll set holds the inner port's fd: it must be able to wake us.
        self.inner.prepare_sleep()
    }

    fn stats(&self) -> PortStats {
        let s = self.inner.stats();
        PortStats {
            fault_dropped: s.fault_dropped + self.dropped,
            ..s
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
mod tests;
