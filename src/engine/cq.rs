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
}

impl Cq {
    pub fn new(depth: usize) -> Cq {
        Cq {
            ring: VecDeque::with_capacity(depth),
            depth,
            lost: 0,
            in_error: false,
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

    pub fn pop(&mut self) -> Option<Completion> {
        self.ring.pop_front()
    }
}
