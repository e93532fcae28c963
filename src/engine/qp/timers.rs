//! A QP's timers: one deadline per kind, so the next wake-up is a min over one array
//! (quinn-proto's `TimerTable`).

use crate::engine::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpTimer {
    /// Local ACK timeout (IBA 9.7.6.1.3): go back to the oldest unacknowledged PSN.
    Retransmit,
    /// Waiting out an RNR NAK before resending (IBA 9.7.5.2.8).
    RnrWait,
}

impl QpTimer {
    pub const VALUES: [QpTimer; 2] = [QpTimer::Retransmit, QpTimer::RnrWait];
}

#[derive(Debug, Clone, Copy, Default)]
pub struct TimerTable([Option<Instant>; 2]);

impl TimerTable {
    pub fn set(&mut self, t: QpTimer, at: Instant) {
        self.0[t as usize] = Some(at);
    }
    pub fn stop(&mut self, t: QpTimer) {
        self.0[t as usize] = None;
    }
    pub fn get(&self, t: QpTimer) -> Option<Instant> {
        self.0[t as usize]
    }
    pub fn is_armed(&self, t: QpTimer) -> bool {
        self.0[t as usize].is_some()
    }
    pub fn expired(&self, t: QpTimer, now: Instant) -> bool {
        self.0[t as usize].is_some_and(|at| at <= now)
    }
    pub fn next(&self) -> Option<Instant> {
        self.0.iter().flatten().min().copied()
    }
}
