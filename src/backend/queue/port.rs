//! [`Queued`]: a backend whose transmit side goes through a switch egress queue
//! ([`QueueModel`]): what the daemon sends to the wire (its processes' packets and its
//! own QP1's) leaves at the line rate, ECN-capable packets marked CE by RED, tail-dropped
//! when the buffer is full. The receive side is untouched. A packet one process sends to
//! another of the same daemon (a hairpin) never reaches the port, so never the queue: the
//! queue models the port's egress link, which a hairpin does not cross.
//!
//! The queue is shared ([`QueueHandle`]): the daemon sets and clears it at run time and
//! reads its counters. Disabled and empty, calls go straight to the inner backend.
//!
//! Queued packets must leave on time even when nothing else wakes the daemon: the timer
//! of `backend::held` is armed for the next departure, and the daemon's `recv_batch`
//! sends what is due. A departure is released at its time or a
//! little after (timer slack, the daemon's turn): late packets go out together, so the
//! rate over any interval longer than that slack is the line rate.

use super::model::{Admit, QueueConfig, QueueConfigError, QueueModel, QueueStats};
use crate::backend::held::{Held, Pkt};
use crate::backend::{Backend, BackendError, Outgoing, PortStats, Received};
use crate::wire::Ecn;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Flows counted apart at most (the first seen; later ones are counted in the totals
/// only): a bound on what a peer's QPNs can make the daemon keep.
pub const MAX_FLOWS: usize = 256;

/// One flow through the queue: the packets to one destination address and QP (the BTH
/// DestQP), so a rate per flow can be read at the congestion point itself, at any
/// interval (the engines' own counters reach the daemon only every 500 ms).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FlowStats {
    pub dst: String,
    pub qpn: u32,
    pub tx_pkts: u64,
    pub tx_bytes: u64,
    pub ecn_marked: u64,
    pub dropped: u64,
}

/// The queue of a port, shared between the port and whoever sets it.
#[derive(Debug)]
pub struct QueueState {
    model: QueueModel<Pkt>,
    enabled: bool,
    flows: Vec<FlowStats>,
}

impl QueueState {
    /// The flow of a datagram to `dst` (BTH DestQP in bytes 5..8), if counted apart.
    fn flow(&mut self, dst: SocketAddr, bytes: &[u8]) -> Option<&mut FlowStats> {
        let qpn = u32::from_be_bytes([0, *bytes.get(5)?, *bytes.get(6)?, *bytes.get(7)?]);
        let ip = dst.ip().to_string();
        let k = match self.flows.iter().position(|f| f.qpn == qpn && f.dst == ip) {
            Some(k) => k,
            None if self.flows.len() < MAX_FLOWS => {
                self.flows.push(FlowStats {
                    dst: ip,
                    qpn,
                    ..FlowStats::default()
                });
                self.flows.len() - 1
            }
            None => return None,
        };
        Some(&mut self.flows[k])
    }
}

/// What `roce-emu counters` shows of the queue.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QueueReport {
    pub enabled: bool,
    /// The settings (in force, or last in force when disabled).
    pub config: String,
    #[serde(flatten)]
    pub stats: QueueStats,
    /// Per destination QP (at most [`MAX_FLOWS`]).
    #[serde(default)]
    pub flows: Vec<FlowStats>,
}

impl QueueState {
    /// A queue with `cfg` in force, or none (`None`: passes everything through).
    pub fn new(cfg: Option<QueueConfig>) -> QueueState {
        QueueState {
            enabled: cfg.is_some(),
            model: QueueModel::new(cfg.unwrap_or_default()),
            flows: Vec::new(),
        }
    }

    /// Applies `key=value` settings to those in force (the defaults the first time) and
    /// enables the queue.
    pub fn set(&mut self, text: &str) -> Result<(), QueueConfigError> {
        let base = if self.enabled {
            self.model.config().clone()
        } else {
            QueueConfig::default()
        };
        let c = base.with(text)?;
        self.model.reconfigure(c);
        self.enabled = true;
        Ok(())
    }

    /// No queue any more: what is queued leaves at once (the port's next call).
    pub fn clear(&mut self) {
        self.enabled = false;
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn report(&self, now: Instant) -> QueueReport {
        QueueReport {
            enabled: self.enabled,
            config: self.model.config().to_string(),
            stats: self.model.stats(now),
            flows: self.flows.clone(),
        }
    }
}

pub type QueueHandle = Arc<Mutex<QueueState>>;

pub struct Queued<B> {
    inner: B,
    state: QueueHandle,
    held: Held,
    /// What has left the queue, to send now.
    due: Vec<Pkt>,
}

fn lock(h: &QueueHandle) -> MutexGuard<'_, QueueState> {
    // A panic elsewhere while holding the lock leaves the queue usable as it is.
    h.lock().unwrap_or_else(|p| p.into_inner())
}

impl<B: Backend> Queued<B> {
    pub fn new(inner: B, state: QueueHandle) -> Result<Queued<B>, BackendError> {
        let held = Held::new(inner.rx_fd(), "set up the queue's timer for")?;
        Ok(Queued {
            inner,
            state,
            held,
            due: Vec::new(),
        })
    }

    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Sends what has left the queue by `now` (everything, once the queue is cleared) and
    /// sets the timer for the next departure.
    fn release(&mut self, now: Instant) -> Result<(), BackendError> {
        let next = {
            let mut s = lock(&self.state);
            if s.enabled {
                while let Some((mut p, ecn)) = s.model.pop(now) {
                    // The queue's mark, if it made one.
                    p.ecn = ecn;
                    self.due.push(p);
                }
            } else {
                self.due.extend(s.model.drain().map(|(mut p, ecn)| {
                    p.ecn = ecn;
                    p
                }));
            }
            for p in &self.due {
                if let Some(f) = s.flow(p.dst, &p.bytes) {
                    f.tx_pkts += 1;
                    f.tx_bytes += p.bytes.len() as u64;
                }
            }
            s.model.next_departure()
        };
        self.held.set_timer(now, next);
        let mut due = std::mem::take(&mut self.due);
        let r = self.held.send(&mut self.inner, due.drain(..));
        // Its room serves the next release.
        self.due = due;
        r
    }

    /// Disabled with nothing queued: calls pass straight through.
    fn idle(&self) -> bool {
        let s = lock(&self.state);
        !s.enabled && s.model.is_empty()
    }
}

impl<B: Backend> Backend for Queued<B> {
    fn local(&self) -> SocketAddr {
        self.inner.local()
    }

    fn recv_batch(&mut self, pool: &mut [u8], out: &mut [Received]) -> Result<usize, BackendError> {
        if !self.idle() || self.held.armed() {
            self.release(Instant::now())?;
        }
        self.inner.recv_batch(pool, out)
    }

    fn send_batch(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &[Outgoing],
    ) -> Result<(), BackendError> {
        if self.idle() {
            return self.inner.send_batch(pool, slot, out);
        }
        let now = Instant::now();
        {
            let mut s = lock(&self.state);
            if s.enabled {
                for (i, o) in out.iter().enumerate() {
                    let bytes = &pool[i * slot..i * slot + o.len];
                    let pkt = self.held.copy((o.src, o.dst), None, o.ecn, bytes);
                    let (dst, ecn) = (pkt.dst, o.ecn);
                    let head: [u8; 8] = pool[i * slot..][..8.min(o.len)]
                        .try_into()
                        .unwrap_or([0; 8]);
                    let a = s.model.enqueue(now, pkt, o.len, ecn);
                    let marked = matches!(a, Admit::Queued { ecn: Ecn::Ce, .. }) && ecn != Ecn::Ce;
                    if let Some(f) = s.flow(dst, &head) {
                        f.dropped += u64::from(a == Admit::Dropped);
                        f.ecn_marked += u64::from(marked);
                    }
                }
            }
        }
        if !lock(&self.state).enabled {
            // Cleared: what was queued goes first, then this batch as it is.
            self.release(now)?;
            return self.inner.send_batch(pool, slot, out);
        }
        self.release(now)
    }

    fn send_room(&mut self, largest: usize) -> usize {
        self.inner.send_room(largest)
    }
    fn rx_fd(&self) -> BorrowedFd<'_> {
        self.held.fd()
    }

    fn flush_held(&mut self) {
        self.inner.flush_held()
    }

    fn prepare_sleep(&mut self) -> bool {
        // The epoll set holds the inner port's fd: it must be able to wake us.
        self.inner.prepare_sleep()
    }

    fn stats(&self) -> PortStats {
        self.inner.stats()
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
