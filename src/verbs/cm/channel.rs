//! An event channel (`struct rdma_event_channel`): a queue of events and a file
//! descriptor that is readable while the queue holds one, as the kernel's rdma_cm fd.
//!
//! The fd is one end of a `socketpair(AF_UNIX, SOCK_SEQPACKET)`; whoever queues an event
//! (the connection's dispatcher thread) writes one token byte on the other end. Taking an
//! event reads one token from the program's end, so it blocks, or fails with `EAGAIN`, as
//! the program set `O_NONBLOCK` on the fd, and `poll`/`epoll` on the fd see POLLIN exactly
//! while events wait: UCX and libfabric poll it, rping blocks on it.
//!
//! Tokens and events are counted the same, but not atomically together: a migrate or a
//! destroy that removes an event may find its token already read by a thread about to
//! take one; that thread then finds the queue short and reads again. A token that cannot
//! be written (the socket buffer full: hundreds of events nobody takes) is owed and
//! written when an event is taken.

use super::conn::Conn;
use crate::cm::ucma::{Event, IdNum};
use nix::sys::socket::{recv, send, socketpair, AddressFamily, MsgFlags, SockFlag, SockType};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};

/// One event as the channel holds it: the connection (daemon) it came from and the
/// manager's event.
#[derive(Clone)]
pub struct Delivered {
    pub conn: Arc<Conn>,
    pub event: Event,
}

impl std::fmt::Debug for Delivered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivered")
            .field("daemon", &self.conn.path())
            .field("event", &self.event)
            .finish()
    }
}

impl Delivered {
    /// Whether the event is for `id` of `conn` (a connect request is its listener's).
    fn is_for(&self, conn: &Arc<Conn>, id: IdNum) -> bool {
        Arc::ptr_eq(&self.conn, conn)
            && (self.event.id == id
                || (self.event.kind == crate::cm::ucma::EventKind::ConnectRequest
                    && self.event.listen_id == Some(id)))
    }
}

struct Inner {
    /// The program's end (`rdma_event_channel.fd`).
    app: OwnedFd,
    /// The dispatcher's end: one token per queued event.
    feed: OwnedFd,
    queue: Mutex<Queue>,
    /// Threads inside [`EventChannel::get`] (blocked on a token, most likely).
    readers: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct Queue {
    events: VecDeque<Delivered>,
    /// Tokens not written yet (the socket was full).
    owed: usize,
}

/// An event channel; clones share it.
#[derive(Clone)]
pub struct EventChannel {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EventChannel(fd {})", self.fd())
    }
}

impl EventChannel {
    pub fn new() -> io::Result<EventChannel> {
        let (app, feed) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        Ok(EventChannel {
            inner: Arc::new(Inner {
                app,
                feed,
                queue: Mutex::new(Queue::default()),
                readers: std::sync::atomic::AtomicUsize::new(0),
            }),
        })
    }

    /// The descriptor a program polls (readable while an event waits).
    pub fn fd(&self) -> RawFd {
        self.inner.app.as_raw_fd()
    }

    /// The descriptor, borrowed (poll it: readable while an event waits).
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.inner.app)
    }

    /// Whether two handles are the same channel.
    pub fn same(&self, other: &EventChannel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.inner.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes one token, or owes it when the socket is full.
    fn token(&self, q: &mut Queue) {
        let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
        if send(self.inner.feed.as_raw_fd(), &[1u8], flags).is_err() {
            q.owed += 1;
        }
    }

    /// Queues an event (and its token).
    pub fn push(&self, d: Delivered) {
        let mut q = self.lock();
        q.events.push_back(d);
        self.token(&mut q);
    }

    /// Queues events moved from another channel.
    pub fn push_all(&self, ds: Vec<Delivered>) {
        for d in ds {
            self.push(d);
        }
    }

    /// Takes the next event: reads a token first, so this blocks, or fails with
    /// `WouldBlock`, as the fd's `O_NONBLOCK` says. A signal acts on the wait as on the
    /// kernel's (`ucma_get_event` sleeps interruptibly): a handler without `SA_RESTART`
    /// ends it with `Interrupted` (EINTR), one with it restarts the read.
    pub fn get(&self) -> io::Result<Delivered> {
        use std::sync::atomic::Ordering::SeqCst;
        self.inner.readers.fetch_add(1, SeqCst);
        let r = self.get_counted();
        self.inner.readers.fetch_sub(1, SeqCst);
        r
    }

    /// Whether a thread is inside [`EventChannel::get`]: the kernel's rdma_cm file stays
    /// open while a thread is blocked in GET_EVENT on it, even after the program closed
    /// the fd (rping closes its channel while its event thread still waits), so such a
    /// channel must not be closed under the thread (it would see EOF: an error).
    pub fn busy(&self) -> bool {
        self.inner.readers.load(std::sync::atomic::Ordering::SeqCst) > 0
    }

    fn get_counted(&self) -> io::Result<Delivered> {
        // Bounded by the events that can be taken from under us (see the module comment):
        // each extra token read stands for one such event.
        loop {
            let mut b = [0u8; 1];
            match recv(self.fd(), &mut b, MsgFlags::empty()) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                Ok(_) => {}
                Err(e) => return Err(io::Error::from(e)),
            }
            let mut q = self.lock();
            if q.owed > 0 {
                q.owed -= 1;
                self.token(&mut q);
            }
            if let Some(d) = q.events.pop_front() {
                return Ok(d);
            }
        }
    }

    /// Removes the queued events of `id` of `conn` (with their tokens, when still
    /// there): for a migrate (they go to the other channel) or a destroy (they go).
    pub fn take_for(&self, conn: &Arc<Conn>, id: IdNum) -> Vec<Delivered> {
        let mut q = self.lock();
        let (mine, rest): (VecDeque<_>, VecDeque<_>) =
            q.events.drain(..).partition(|d| d.is_for(conn, id));
        q.events = rest;
        for _ in 0..mine.len() {
            if q.owed > 0 {
                q.owed -= 1;
                continue;
            }
            let mut b = [0u8; 1];
            let _ = recv(self.fd(), &mut b, MsgFlags::MSG_DONTWAIT);
        }
        mine.into()
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
