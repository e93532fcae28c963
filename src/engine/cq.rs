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

    /// `ibv_resize_cq`: room for `depth` completions from now on, keeping every one it
    /// holds, in order (rxe `rxe_cq_resize_queue` copies them over). Refused, changing
    /// nothing, below the number held (rxe `rxe_cq_chk_attr`: EINVAL); `Err` is that
    /// number.
    ///
    /// `outside` completions the caller took out and still counts as held (the C ABI's
    /// extended polling buffer) must fit as well.
    pub fn resize(&mut self, depth: usize, outside: usize) -> Result<(), usize> {
        let held = self.ring.len() + outside;
        if depth < held {
            return Err(held);
        }
        self.depth = depth;
        self.ring.shrink_to(depth);
        self.ring.reserve(depth.saturating_sub(self.ring.len()));
        Ok(())
    }

    /// Drops the completions of QP `qpn` (the QP was reset).
    pub fn remove_qp(&mut self, qpn: u32) {
        self.ring.retain(|c| c.qpn != qpn);
    }

    pub fn pop(&mut self) -> Option<Completion> {
        self.ring.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(wr_id: u64) -> Completion {
        Completion {
            wr_id,
            ..Completion::default()
        }
    }

    #[test]
    fn resize_keeps_what_it_holds() {
        let mut q = Cq::new(2);
        assert!(q.push(c(1)) && q.push(c(2)));
        assert_eq!(q.resize(1, 0), Err(2), "below what it holds");
        assert_eq!(q.depth(), 2);
        assert_eq!(q.resize(3, 2), Err(4), "two more held outside");
        q.resize(4, 0).unwrap();
        assert!(q.push(c(3)) && q.push(c(4)));
        assert!(!q.push(c(5)), "full at 4");
        let mut q = Cq::new(4);
        assert!(q.push(c(1)) && q.push(c(2)));
        q.resize(2, 0).unwrap();
        assert!(!q.push(c(3)), "full at the new depth");
        assert_eq!((q.pop().unwrap().wr_id, q.pop().unwrap().wr_id), (1, 2));
    }
}
