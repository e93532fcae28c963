//! Event file descriptors: the completion channel (`ibv_comp_channel`) and the async
//! event queue (`ibv_context::async_fd`). Each is a real fd a program can `poll(2)`:
//! readable while an event waits, as the kernel's are.

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A queue of events with an eventfd that is readable while the queue is not empty.
#[derive(Debug)]
pub(crate) struct EventQueue<T> {
    fd: EventFd,
    q: Mutex<VecDeque<T>>,
    /// Events queued: a program that looks for one after every poll finds none without
    /// taking the lock.
    len: AtomicUsize,
}

impl<T> EventQueue<T> {
    pub(crate) fn new() -> std::io::Result<EventQueue<T>> {
        // Semaphore-like: each read takes one count, one per event. Blocking (no
        // EFD_NONBLOCK), because the fd is the program's too (`ibv_comp_channel::fd`,
        // `ibv_context::async_fd`): `ibv_get_cq_event` blocks unless the program set
        // O_NONBLOCK on it, which the C ABI can only tell if we did not. Our own reads
        // never wait: `try_pop` reads only after taking an event, whose count `push`
        // writes right after queueing it (at worst that read waits for that write).
        let fd = EventFd::from_flags(EfdFlags::EFD_SEMAPHORE | EfdFlags::EFD_CLOEXEC)?;
        Ok(EventQueue {
            fd,
            q: Mutex::new(VecDeque::new()),
            len: AtomicUsize::new(0),
        })
    }

    pub(crate) fn push(&self, ev: T) {
        let mut q = self.q.lock().unwrap_or_else(PoisonError::into_inner);
        q.push_back(ev);
        self.len.store(q.len(), Ordering::Release);
        drop(q);
        // The counter cannot overflow in practice (2^64 - 2 unread events).
        let _ = self.fd.write(1);
    }

    /// The oldest event, without waiting.
    pub(crate) fn try_pop(&self) -> Option<T> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut q = self.q.lock().unwrap_or_else(PoisonError::into_inner);
        let ev = q.pop_front()?;
        self.len.store(q.len(), Ordering::Release);
        // One count per event: the fd stays readable exactly while events remain.
        let _ = self.fd.read();
        Some(ev)
    }

    /// The oldest event, waiting at most `timeout` for one.
    pub(crate) fn pop(&self, timeout: Duration) -> Option<T> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(ev) = self.try_pop() {
                return Some(ev);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
            let _ = poll(
                &mut fds,
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
            );
        }
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A completion channel (`ibv_create_comp_channel`): CQs created on it report their
/// completion events here once armed with `Context::req_notify_cq`. [`CompChannel::fd`]
/// is readable while an event waits.
#[derive(Debug, Clone)]
pub struct CompChannel {
    pub(crate) q: Arc<EventQueue<u32>>,
}

impl CompChannel {
    pub(crate) fn new() -> std::io::Result<CompChannel> {
        Ok(CompChannel {
            q: Arc::new(EventQueue::new()?),
        })
    }

    /// The fd to `poll(2)`: readable while an event waits.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.q.fd()
    }

    /// `ibv_get_cq_event` without blocking: the CQ whose event fired, if one did.
    pub fn try_get_event(&self) -> Option<u32> {
        self.q.try_pop()
    }

    /// `ibv_get_cq_event`: waits at most `timeout` for the next event.
    pub fn get_event(&self, timeout: Duration) -> Option<u32> {
        self.q.pop(timeout)
    }
}
