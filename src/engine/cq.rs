//! Completion queues: bounded, as a NIC's are. A completion that does not fit is never
//! dropped silently: the CQ goes to error, an asynchronous event says so (IBA 11.4.2.1,
//! CQ overrun), and the QPs using it go to the error state.

use super::wr::Completion;
use std::collections::VecDeque;

#[derive(Debug)]
pub struct Cq {
    ring: VecDeque<Completion>,
    depth: usize,
    /// Completions lost to overrun since the CQ was created.
    pub lost: u64,
    /// Set at the first overrun; an overrun CQ stays in error until destroyed.
    pub in_error: bool,
    /// Armed by `req_notify_cq`: the next completion that qualifies raises one event.
    armed: Option<Notify>,
}

/// Which completions raise the completion event an armed CQ waits for
/// (`ibv_req_notify_cq`'s `solicited_only`; IBA 11.4.2.2, C11-22..24).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// Any next completion.
    Next,
    /// Only a receive completion of a request that had the Solicited Event bit, or a
    /// completion in error (rxe's `rxe_cq_post`: errors are solicited).
    Solicited,
}

impl Cq {
    pub fn new(depth: usize) -> Cq {
        Cq {
            ring: VecDeque::with_capacity(depth),
            depth,
            lost: 0,
            in_error: false,
            armed: None,
        }
    }

    pub fn depth(&self) -> usize {
        self.depth
    }

    pub fn len(&self) -> usize {
        self.ring.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Adds a completion; `false` if the CQ is full (overrun) or already in error.
    pub fn push(&mut self, c: Completion) -> bool {
        if self.in_error || self.ring.len() >= self.depth {
            self.in_error = true;
            self.lost += 1;
            return false;
        }
        self.ring.push_back(c);
        true
    }

    /// Arms the CQ (one-shot; arming again only widens `Solicited` to `Next`).
    pub fn arm(&mut self, how: Notify) {
        self.armed = match (self.armed, how) {
            (Some(Notify::Next), _) | (_, Notify::Next) => Some(Notify::Next),
            _ => Some(Notify::Solicited),
        };
    }

    /// Whether a just-pushed completion (`solicited`: it carried the SE bit, or failed)
    /// fires the armed event; disarms the CQ when it does.
    pub fn fire(&mut self, solicited: bool) -> bool {
        let fires = match self.armed {
            Some(Notify::Next) => true,
            Some(Notify::Solicited) => solicited,
            None => false,
        };
        if fires {
            self.armed = None;
        }
        fires
    }

    pub fn pop(&mut self) -> Option<Completion> {
        self.ring.pop_front()
    }
}
