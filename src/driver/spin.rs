//! When an idle NIC should poll and when it should sleep (see `Spin`).

use std::time::{Duration, Instant};

/// Most time the data loop polls an idle NIC before it sleeps on the socket, by default
/// (`--spin-us`).
pub const DEFAULT_SPIN_US: u64 = 1000;
/// Every this many sleeps the full budget is tried again.
const SPIN_PROBE: u32 = 64;

/// Poll or sleep? rc_pingpong busy-polls its CQ. Here the NIC itself runs in the loop, and
/// sleeping until a datagram costs a wake-up, measured at 100-300 µs per round trip on an
/// idle virtual machine against 30 µs when polling. But polling for a peer that needs this
/// very CPU to answer only delays it (two processes on one loaded CPU). So: poll up to a
/// budget after the NIC goes idle; an answer within the budget doubles it (to `max`),
/// a sleep halves it, and every `SPIN_PROBE` sleeps it starts again from `max`. `max` 0
/// never polls an idle NIC: for machines whose CPUs the peer needs (a qemu guest under TCG
/// on the same two cores runs measurably slower against a polling NIC).
pub struct Spin {
    max: Duration,
    budget: Duration,
    idle_since: Option<Instant>,
    /// Idle polls since `idle_since`: the clock is read every `CLOCK_EVERY` of them.
    polls: u32,
    sleeps: u32,
}

/// An idle poll (one receive syscall) takes about a microsecond; reading the clock on
/// each was a fifth of the loop's user time. The budget may overrun by this many polls.
const CLOCK_EVERY: u32 = 8;

impl Spin {
    pub fn new(max: Duration) -> Spin {
        Spin {
            max,
            budget: max,
            idle_since: None,
            polls: 0,
            sleeps: 0,
        }
    }

    /// The NIC did something.
    pub fn active(&mut self) {
        if let Some(t) = self.idle_since.take() {
            self.budget = if t.elapsed() <= self.budget {
                (self.budget * 2).min(self.max)
            } else {
                self.budget / 2
            };
        }
    }

    /// The NIC is idle: poll again (true) or sleep?
    pub fn keep_polling(&mut self) -> bool {
        if self.budget.is_zero() {
            return false;
        }
        let Some(t) = self.idle_since else {
            self.idle_since = Some(Instant::now());
            self.polls = 0;
            return true;
        };
        self.polls += 1;
        self.polls % CLOCK_EVERY != 0 || t.elapsed() < self.budget
    }

    pub fn slept(&mut self) {
        self.sleeps = self.sleeps.wrapping_add(1);
        if self.sleeps % SPIN_PROBE == 0 {
            self.budget = self.max;
        }
    }
}
