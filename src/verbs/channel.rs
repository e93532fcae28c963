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
        // Outside the lock: a `wait_pop` may hold this event's count and need the lock to
        // hand it back.
        drop(q);
        self.take_count();
        Some(ev)
    }

    /// Reads the count of an event just taken, so the fd stays readable exactly while
    /// events remain. It comes at once, or in a moment: `push` writes it right after
    /// queueing, and a `wait_pop` that read it hands it back. Bounded by those two steps;
    /// EAGAIN (a program's `O_NONBLOCK`) and EINTR cannot leave a stray count behind.
    fn take_count(&self) {
        loop {
            match self.fd.read() {
                Err(nix::errno::Errno::EAGAIN) => std::thread::yield_now(),
                Err(nix::errno::Errno::EINTR) => {}
                _ => return,
            }
        }
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

    /// The oldest event, waiting for one as the kernel's `read(2)` of the program's fd
    /// waits, because the wait is that read: a signal whose handler was installed without
    /// `SA_RESTART` ends it with `Interrupted` (EINTR; qperf's SIGALRM ends its test loop
    /// this way, blocked in `ibv_get_cq_event`), one with `SA_RESTART` does not, and a fd the
    /// program made `O_NONBLOCK` gives `WouldBlock` (EAGAIN).
    pub(crate) fn wait_pop(&self) -> std::io::Result<T> {
        // Bounded by the events other readers take from under us: each round hands back
        // one count that belonged to such an event.
        loop {
            if let Some(ev) = self.try_pop() {
                return Ok(ev);
            }
            // Takes one count: `push` queues its event before writing its count, so the
            // event is queued, or another reader took it and is about to read this count.
            self.fd.read().map_err(std::io::Error::from)?;
            let mut q = self.q.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(ev) = q.pop_front() {
                self.len.store(q.len(), Ordering::Release);
                return Ok(ev);
            }
            drop(q);
            // That reader waits in its read for the count we took: give it back.
            let _ = self.fd.write(1);
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

    /// `ibv_get_cq_event` as the kernel's: waits for the next event in a `read(2)` of
    /// [`CompChannel::fd`], so signals and `O_NONBLOCK` act on it as on rdma-core's
    /// (`EINTR` unless the handler has `SA_RESTART`, `EAGAIN`).
    pub fn wait_event(&self) -> std::io::Result<u32> {
        self.q.wait_pop()
    }
}
