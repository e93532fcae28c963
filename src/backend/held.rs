//! What the port wrappers that hold packets share: `fault::port::Faulty` holds them for
//! its rules (delay, reorder), `queue::port::Queued` for its line rate.
//!
//! - A held packet is a copy of its bytes out of the caller's batch, in a buffer that
//!   comes back once the packet is sent or handed on ([`Held::copy`], [`Held::recycle`]):
//!   no allocation per packet once the wrapper is warm.
//! - Held packets must leave on time even when nothing else wakes the daemon, so the
//!   wrapper's `rx_fd` is an epoll set of the inner port's descriptor and a timer armed
//!   for the next release ([`Held::set_timer`]); the daemon then calls `recv_batch`,
//!   which releases what is due.
//! - What is released goes out in batches of the wrapper's own pool ([`Held::send`]).

use super::udp::TX_BATCH;
use super::{Backend, BackendError, Outgoing};
use crate::wire::Ecn;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

/// Buffers kept for later copies, at most: what a burst of held packets leaves behind
/// beyond this goes back to the allocator.
const MAX_SPARE: usize = 4096;

/// A datagram a wrapper holds.
#[derive(Debug)]
pub(crate) struct Pkt {
    pub(crate) src: SocketAddr,
    pub(crate) dst: SocketAddr,
    /// As received (`Received::ipv4_id`); None for a packet to send.
    pub(crate) ipv4_id: Option<u16>,
    pub(crate) ecn: Ecn,
    pub(crate) bytes: Vec<u8>,
}

pub(crate) struct Held {
    wake: Epoll,
    timer: TimerFd,
    /// The timer is set (so the next turn must look at it).
    armed: bool,
    spare: Vec<Vec<u8>>,
    /// The send batch: `slot` bytes a datagram.
    pool: Vec<u8>,
    meta: Vec<Outgoing>,
    batch: Vec<Pkt>,
}

impl Held {
    /// A wake-up set of `inner` (the wrapped port's `rx_fd`) and a timer; `what` names
    /// the wrapper in the error (`"set up fault timers for"`).
    pub(crate) fn new(inner: BorrowedFd<'_>, what: &'static str) -> Result<Held, BackendError> {
        let err = |e: nix::Error| BackendError::link(what, "port", std::io::Error::from(e));
        let wake = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(err)?;
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(err)?;
        wake.add(inner, EpollEvent::new(EpollFlags::EPOLLIN, 0))
            .map_err(err)?;
        wake.add(timer.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, 1))
            .map_err(err)?;
        Ok(Held {
            wake,
            timer,
            armed: false,
            spare: Vec::new(),
            pool: Vec::new(),
            meta: Vec::with_capacity(TX_BATCH),
            batch: Vec::with_capacity(TX_BATCH),
        })
    }

    /// What the wrapper's `rx_fd` is.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.wake.0.as_fd()
    }

    pub(crate) fn armed(&self) -> bool {
        self.armed
    }

    /// Sets the timer for `next` (at the earliest 1 ns from `now`: a zero expiration would
    /// disarm it), or unsets it.
    pub(crate) fn set_timer(&mut self, now: Instant, next: Option<Instant>) {
        match next {
            Some(t) => {
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

    /// A held packet with a copy of `bytes`, in a buffer used before when there is one.
    pub(crate) fn copy(
        &mut self,
        (src, dst): (SocketAddr, SocketAddr),
        ipv4_id: Option<u16>,
        ecn: Ecn,
        bytes: &[u8],
    ) -> Pkt {
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(bytes);
        Pkt {
            src,
            dst,
            ipv4_id,
            ecn,
            bytes: b,
        }
    }

    /// Gives a packet's buffer back for later copies.
    pub(crate) fn recycle(&mut self, p: Pkt) {
        if self.spare.len() < MAX_SPARE {
            self.spare.push(p.bytes);
        }
    }

    /// Sends `pkts` through `inner` in batches of our own pool, and keeps their buffers.
    /// On an error the packets of the failed batch and those after it are gone.
    pub(crate) fn send<B: Backend + ?Sized>(
        &mut self,
        inner: &mut B,
        pkts: impl IntoIterator<Item = Pkt>,
    ) -> Result<(), BackendError> {
        let mut pkts = pkts.into_iter().peekable();
        while pkts.peek().is_some() {
            self.batch.extend(pkts.by_ref().take(TX_BATCH));
            let slot = self.batch.iter().map(|p| p.bytes.len()).max().unwrap_or(0);
            if self.pool.len() < slot * self.batch.len() {
                self.pool.resize(slot * self.batch.len(), 0);
            }
            self.meta.clear();
            for (i, p) in self.batch.iter().enumerate() {
                self.pool[i * slot..][..p.bytes.len()].copy_from_slice(&p.bytes);
                self.meta.push(Outgoing {
                    src: p.src,
                    dst: p.dst,
                    len: p.bytes.len(),
                    ecn: p.ecn,
                });
            }
            let r = inner.send_batch(&mut self.pool, slot, &self.meta);
            let mut batch = std::mem::take(&mut self.batch);
            for p in batch.drain(..) {
                self.recycle(p);
            }
            self.batch = batch;
            r?;
        }
        Ok(())
    }
}
