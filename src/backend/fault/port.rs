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
//! wakes the daemon, so `rx_fd` is an epoll set of the inner backend's descriptor and a
//! timer armed for the next release: the daemon then calls `recv_batch`, which releases
//! what is due both ways.

use super::rule::{Dir, Faults, REORDER_MAX_HOLD};
use crate::backend::udp::TX_BATCH;
use crate::backend::{Backend, BackendError, Outgoing, PortStats, Received};
use crate::wire::Ecn;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The rules a [`Faulty`] port applies, shared with whoever changes them.
pub type FaultHandle = Arc<Mutex<Faults>>;

/// A datagram the wrapper holds (queued for the caller, or held back by a rule).
#[derive(Debug, Clone)]
struct Pkt {
    src: SocketAddr,
    dst: SocketAddr,
    ipv4_id: Option<u16>,
    ecn: Ecn,
    bytes: Vec<u8>,
}

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
    wake: Epoll,
    timer: TimerFd,
    /// The timer is set (so the next turn must look at it).
    armed: bool,
    rx: Way,
    tx: Way,
    /// Received packets waiting for room in the caller's pool.
    rx_ready: VecDeque<Pkt>,
    rx_pool: Vec<u8>,
    rx_meta: Vec<Received>,
    /// Our own transmit batch, `slot` bytes a datagram.
    tx_pool: Vec<u8>,
    tx_meta: Vec<Outgoing>,
    slot: usize,
    dropped: u64,
}

fn io_err(e: nix::Error) -> BackendError {
    BackendError::link("set up fault timers for", "port", std::io::Error::from(e))
}

impl<B: Backend> Faulty<B> {
    pub fn new(inner: B, faults: FaultHandle) -> Result<Faulty<B>, BackendError> {
        let wake = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(io_err)?;
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(io_err)?;
        wake.add(inner.rx_fd(), EpollEvent::new(EpollFlags::EPOLLIN, 0))
            .map_err(io_err)?;
        wake.add(timer.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, 1))
            .map_err(io_err)?;
        let slot = crate::backend::udp::RX_SLOT;
        Ok(Faulty {
            inner,
            faults,
            wake,
            timer,
            armed: false,
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
            tx_pool: Vec::new(),
            tx_meta: Vec::with_capacity(TX_BATCH),
            slot: 0,
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
            for _ in 0..copies {
                way.held.push(Held {
                    pkt: pkt.clone(),
                    due,
                    after,
                });
            }
            return;
        }
        for _ in 0..copies {
            ready.push_back(pkt.clone());
            way.passed += 1;
            way.release(now, ready);
        }
    }

    /// Sends `pkts` in batches of our own pool.
    fn send_all(&mut self, pkts: &mut VecDeque<Pkt>) -> Result<(), BackendError> {
        while !pkts.is_empty() {
            self.tx_meta.clear();
            let n = pkts.len().min(TX_BATCH);
            let slot = pkts
                .iter()
                .take(n)
                .map(|p| p.bytes.len())
                .max()
                .unwrap_or(0);
            self.slot = self.slot.max(slot);
            if self.tx_pool.len() < self.slot * TX_BATCH {
                self.tx_pool.resize(self.slot * TX_BATCH, 0);
            }
            for (i, p) in pkts.drain(..n).enumerate() {
                self.tx_pool[i * self.slot..][..p.bytes.len()].copy_from_slice(&p.bytes);
                self.tx_meta.push(Outgoing {
                    src: p.src,
                    dst: p.dst,
                    len: p.bytes.len(),
                    ecn: p.ecn,
                });
            }
            self.inner
                .send_batch(&mut self.tx_pool, self.slot, &self.tx_meta)?;
        }
        Ok(())
    }

    /// Sends the held outgoing packets that are due.
    fn release_tx(&mut self, now: Instant) -> Result<(), BackendError> {
        if self.tx.held.is_empty() {
            return Ok(());
        }
        let mut due = VecDeque::new();
        self.tx.release(now, &mut due);
        self.send_all(&mut due)
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
        match next {
            Some(t) => {
                // A zero expiration would disarm the timer: at least 1 ns.
                let d = t
                    .saturating_duration_since(now)
                    .max(Duration::from_nanos(1));
                let _ = self.timer.set(
                    Expiration::OneShot(TimeSpec::from_duration(d)),
                    TimerSetTimeFlags::empty(),
                );
                self.armed = true;
            }
            None if self.armed => {
                let _ = self.timer.unset();
                self.armed = false;
            }
            None => {}
        }
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
            if self.armed {
                let _ = self.timer.unset();
                self.armed = false;
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
                    let pkt = Pkt {
                        src: r.src,
                        dst: r.dst,
                        ipv4_id: r.ipv4_id,
                        ecn: r.ecn,
                        bytes: self.rx_pool[at..at + len].to_vec(),
                    };
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
            let pkt = Pkt {
                src: o.src,
                dst: o.dst,
                ipv4_id: None,
                ecn: o.ecn,
                bytes: pool[i * slot..i * slot + o.len].to_vec(),
            };
            self.admit(Dir::Out, pkt, now, &mut ready);
        }
        self.send_all(&mut ready)?;
        self.rearm(now);
        Ok(())
    }

    fn send_room(&mut self, largest: usize) -> usize {
        self.inner.send_room(largest)
    }
    fn rx_fd(&self) -> BorrowedFd<'_> {
        self.wake.0.as_fd()
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
