//! The driver: the only layer that reads the real clock (and, later, spawns threads).
//! It feeds an engine the datagrams a backend receives and the timeouts that come due,
//! sends what the engine produces, and sleeps until the next datagram or deadline.

mod spin;
pub use spin::{Spin, DEFAULT_SPIN_US};

use crate::backend::udp::{UdpBackend, RX_BATCH, RX_SLOT, TX_BATCH};
use crate::backend::{Backend, BackendError, Outgoing, Received};
use crate::engine::{Datagram, Engine, Instant};
use crate::wire::Ecn;
use std::time::Duration;

/// Engine time from the real clock: nanoseconds since the clock was made.
#[derive(Debug, Clone, Copy)]
pub struct Clock(std::time::Instant);

impl Default for Clock {
    fn default() -> Self {
        Clock(std::time::Instant::now())
    }
}

impl Clock {
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.0.elapsed().as_nanos() as u64)
    }
}

/// Counters of the I/O path (the engine counts protocol events).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoStats {
    pub rx_datagrams: u64,
    pub tx_datagrams: u64,
}

/// One engine on one backend (UDP unless said otherwise; fault injection and capture are
/// backends wrapping another, `backend::fault` and `backend::capture`).
pub struct Driver<B: Backend = UdpBackend> {
    pub engine: Engine,
    pub backend: B,
    pub clock: Clock,
    pub io: IoStats,
    /// Transmit pool: `TX_BATCH` slots of `BUF` bytes, sent by one `sendmmsg`.
    buf: Vec<u8>,
    /// Receive pool: `RX_BATCH` slots of `RX_SLOT` bytes, filled by one `recvmmsg`.
    pool: Vec<u8>,
    /// Metadata of the datagrams in `pool` and `buf`, kept between calls: an idle NIC
    /// is polled in a loop, and rebuilding them each time was a measurable share of it.
    got: Box<[Received; RX_BATCH]>,
    out: Box<[Outgoing; TX_BATCH]>,
    /// `receive` calls in a row that received nothing (see there).
    idle_receives: u32,
    /// The clock's last reading by this driver (see `recent_now`).
    last_now: Instant,
    /// The port had no room for all the engine had to send (`Backend::send_room`): the
    /// rest waits in the engine, and the next sleep is at most `TX_RETRY`.
    tx_blocked: bool,
}

/// How long a driver whose port had no room sleeps before it looks again: the daemon
/// draining a ring rings no bell for the producer (it polls while busy), and a few
/// microseconds of its turns free room for a batch.
const TX_RETRY: Duration = Duration::from_micros(50);

/// An idle `receive` looks at the timers on its first call and every this many after, and
/// after `until_deadline`. Reading the clock on every call was a fifth of a polling loop's
/// user time; a poll is about a microsecond and timers are milliseconds (an ACK timeout is
/// 67 ms at code 14, rc_pingpong's and perftest's; 8 µs at code 1, the shortest).
const TIMER_CHECK_EVERY: u32 = 8;

/// Largest datagram handled: a 4096-byte MTU packet and headers.
const BUF: usize = 4096 + 256;

impl<B: Backend> Driver<B> {
    pub fn new(engine: Engine, backend: B, clock: Clock) -> Driver<B> {
        let local = backend.local();
        Driver {
            engine,
            backend,
            clock,
            io: IoStats::default(),
            buf: vec![0; BUF * TX_BATCH],
            pool: vec![0; RX_SLOT * RX_BATCH],
            got: Box::new(
                [Received {
                    src: local,
                    dst: local,
                    offset: 0,
                    len: 0,
                    segment: None,
                    ipv4_id: None,
                    ecn: Ecn::NotEct,
                }; RX_BATCH],
            ),
            out: Box::new(
                [Outgoing {
                    src: local,
                    dst: local,
                    len: 0,
                    ecn: Ecn::NotEct,
                }; TX_BATCH],
            ),
            idle_receives: 0,
            last_now: Instant::ZERO,
            tx_blocked: false,
        }
    }

    /// The time of the driver's last clock reading: for engine commands on a polling
    /// program's data path (`post_send`, `post_recv`), which use `now` only to complete or
    /// flush work requests and never to arm a timer, so a reading a few microseconds old
    /// serves and saves a clock read per post.
    pub fn recent_now(&self) -> Instant {
        self.last_now
    }

    /// Does everything that can be done now without waiting: receives what is queued,
    /// runs due timers, sends what the engine has. Returns whether anything happened.
    pub fn poll(&mut self) -> Result<bool, BackendError> {
        let rx = self.receive()?;
        Ok(self.transmit()? || rx)
    }

    /// The first half of `poll`: receives what is queued and runs due timers. A caller
    /// that reacts to the completions before `transmit` gets its new work requests and
    /// the ACKs of what just arrived out in one `sendmmsg`.
    pub fn receive(&mut self) -> Result<bool, BackendError> {
        let mut did = false;
        // Bounded batches, so a flood cannot starve transmission.
        for _ in 0..8 {
            let n = self.backend.recv_batch(&mut self.pool, &mut self.got[..])?;
            if n == 0 {
                break;
            }
            did = true;
            let now = self.clock.now();
            self.last_now = now;
            self.last_now = now;
            for r in &self.got[..n] {
                // A coalesced (GRO) datagram is several RoCE packets back to back. An
                // empty datagram still goes to the engine, which counts it as a drop.
                let seg = r.segment.unwrap_or(r.len);
                let mut rest = &self.pool[r.offset..r.offset + r.len];
                loop {
                    let (data, tail) = rest.split_at(seg.min(rest.len()));
                    self.io.rx_datagrams += 1;
                    self.engine.handle_datagram(
                        now,
                        Datagram {
                            src: r.src,
                            dst: r.dst,
                            ipv4_id: r.ipv4_id,
                            ecn: r.ecn,
                            data,
                        },
                    );
                    rest = tail;
                    if rest.is_empty() {
                        break;
                    }
                }
            }
            if n < RX_BATCH {
                break;
            }
        }
        // The clock only when a timer is armed and, while idle, every few calls: an idle NIC
        // is polled in a loop.
        if did {
            self.idle_receives = 0;
        } else {
            let check = self.idle_receives % TIMER_CHECK_EVERY == 0;
            self.idle_receives = self.idle_receives.wrapping_add(1);
            if !check {
                return Ok(false);
            }
        }
        if let Some(deadline) = self.engine.poll_timeout() {
            let now = self.clock.now();
            self.last_now = now;
            self.last_now = now;
            if deadline <= now {
                self.engine.handle_timeout(now);
                did = true;
            }
        }
        Ok(did)
    }

    /// The second half of `poll`: sends everything the engine has, in batches.
    pub fn transmit(&mut self) -> Result<bool, BackendError> {
        let mut did = false;
        self.tx_blocked = false;
        if !self.engine.may_transmit() {
            return Ok(false);
        }
        let now = self.clock.now();
        self.last_now = now;
        loop {
            // No more than the port takes: what it has no room for stays in the engine
            // (unsent, so not yet complete, and never lost).
            let room = self.backend.send_room(BUF);
            let batch = TX_BATCH.min(room);
            let mut n = 0;
            while n < batch {
                let Some(t) = self
                    .engine
                    .poll_transmit(now, &mut self.buf[n * BUF..(n + 1) * BUF])
                else {
                    break;
                };
                did = true;
                self.out[n] = Outgoing {
                    src: t.src,
                    dst: t.dst,
                    len: t.len,
                    ecn: t.ecn,
                };
                n += 1;
            }
            if n > 0 {
                self.backend
                    .send_batch(&mut self.buf, BUF, &self.out[..n])?;
                self.io.tx_datagrams += n as u64;
            }
            if n < batch {
                break;
            }
            if batch < TX_BATCH {
                self.tx_blocked = self.engine.may_transmit();
                break;
            }
        }
        Ok(did)
    }

    /// Time until the engine's next deadline, at most `max`; zero if packets already wait.
    /// The next `receive` looks at the timers whatever it finds. A caller asks this before
    /// every sleep on the port's fd: it arms a port that must be asked to wake us
    /// ([`Backend::prepare_sleep`]).
    pub fn until_deadline(&mut self, max: Duration) -> Duration {
        self.idle_receives = 0;
        if self.backend.prepare_sleep() {
            // Packets wait already (they landed after the last receive).
            return Duration::ZERO;
        }
        let max = if self.tx_blocked {
            max.min(TX_RETRY)
        } else {
            max
        };
        match self.engine.poll_timeout() {
            Some(t) => t.since(self.clock.now()).min(max),
            None => max,
        }
    }
}

impl<B: Backend> Drop for Driver<B> {
    /// Whatever the engine still has to send leaves before the NIC goes away: a caller
    /// that stops on an error (a QP in ERR, a timeout) still tells the peer what the
    /// engine produced for it (a NAK, the ACK of its last message).
    fn drop(&mut self) {
        let _ = self.transmit();
    }
}
