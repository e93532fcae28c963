//! A REQ that finds no listener on a port whose listener its owner destroyed a moment ago
//! waits a little for the next `rdma_listen` there, instead of REJ(invalid service ID)
//! at once. A deliberate difference from the kernel (`cm_match_req` rejects at once),
//! because a listen here is slower than there:
//!
//! Servers that listen again between connections (perftest `-R`: the exchange's
//! connection, then `rdma_destroy_id` of its listener, an exchange, and a new listener
//! for the data connection, while its client connects the moment the exchange ends)
//! race their own clients. In the kernel a listen is a few system calls and the client's
//! resolve and connect are slower, so the server nearly always wins; here each step of
//! both is a round trip to the daemon, and on a loaded machine the client won one time
//! in five (perftest 4.5 then crashes: its retry reuses the ids it destroyed).
//!
//! So a REQ for a port that had a listener destroyed by its owner within [`WINDOW`] is
//! held for at most [`HOLD`]: a listen on the port in time takes it as if it had just
//! arrived; otherwise it gets its REJ then (200 ms late at most, against the active
//! side's CM response timeout of 4.3 s). A port never listened on, or whose listener
//! went with its process, still gets the kernel's immediate REJ. Held REQs are bounded
//! ([`MAX_HELD`]: beyond, the REJ is immediate) and counted (`reqs_held`).

use super::ucma::PortSpace;
use super::MadPeer;
use crate::engine::Instant;
use core::time::Duration;
use std::collections::HashMap;

/// How long after its listener's destroy a port counts as about to be listened on again.
/// perftest `-R`'s two listeners are a second apart (measured: 1.02 to 1.04 s between
/// the first's destroy and the second's listen, idle or loaded): 1 s lost one run in
/// twelve on a loaded machine.
pub const WINDOW: Duration = Duration::from_secs(10);
/// Longest a REQ waits for the listen.
pub const HOLD: Duration = Duration::from_millis(200);
/// Most REQs held at once.
pub const MAX_HELD: usize = 32;

/// A REQ waiting for a listener.
#[derive(Debug, Clone)]
pub struct Held {
    pub port: (PortSpace, u16),
    pub until: Instant,
    pub peer: MadPeer,
    /// The whole MAD, as received.
    pub mad: [u8; 256],
    /// The active side's (local comm ID, CA GUID): a retransmission of a held REQ.
    pub remote: (u32, u64),
}

#[derive(Debug, Default)]
pub struct Relisten {
    /// Ports whose listener its owner destroyed, until when they count.
    recent: HashMap<(PortSpace, u16), Instant>,
    held: Vec<Held>,
}

impl Relisten {
    /// `port`'s listener was destroyed by its owner at `now`.
    pub fn unlistened(&mut self, now: Instant, port: (PortSpace, u16)) {
        self.recent.retain(|_, until| *until > now);
        self.recent.insert(port, now.saturating_add(WINDOW));
    }

    /// Whether a REQ for `port` at `now` should wait for a listener.
    pub fn expects_listen(&self, now: Instant, port: (PortSpace, u16)) -> bool {
        self.held.len() < MAX_HELD && self.recent.get(&port).is_some_and(|until| *until > now)
    }

    /// Whether this REQ (by its sender's comm ID and CA GUID) already waits.
    pub fn holds(&self, remote: (u32, u64)) -> bool {
        self.held.iter().any(|h| h.remote == remote)
    }

    pub fn hold(&mut self, h: Held) {
        self.held.push(h);
    }

    /// The REQs waiting for `port` (it has a listener now), oldest first.
    pub fn take_port(&mut self, port: (PortSpace, u16)) -> Vec<Held> {
        self.recent.remove(&port);
        let (take, keep) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.port == port);
        self.held = keep;
        take
    }

    /// The REQs whose wait is over at `now`, oldest first.
    pub fn take_due(&mut self, now: Instant) -> Vec<Held> {
        let (due, keep) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.until <= now);
        self.held = keep;
        due
    }

    /// The earliest end of a wait.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.held.iter().map(|h| h.until).min()
    }
}
