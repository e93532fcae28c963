//! Who runs the NIC and when (see the module docs of `verbs`): the state shared between
//! the program's calls and the progress thread, and the thread itself.

use super::channel::EventQueue;
use super::{Error, Event};
use crate::backend::udp::wait_readable;
use crate::backend::Backend;
use crate::driver::{Clock, Driver};
use crate::engine::Instant;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use rustc_hash::FxHashMap;
use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Duration;

/// How long after a program's last `poll_cq` the progress thread leaves the NIC to it.
/// Long against a polling loop's period (a microsecond or so), short against the ACK
/// timeouts programs choose (67 ms at rc_pingpong's and perftest's timeout 14).
const HANDOFF: Duration = Duration::from_millis(2);
/// While the program keeps polling, the thread looks again after `HANDOFF`, then after
/// twice that, up to this: each look wakes a thread on a CPU that a polling program (and on
/// two cores, its peer) is using. Twice this bounds how late the thread takes over from a
/// program that stops polling without arming a CQ (16 ms, against ACK timeouts of 67 ms
/// at rc_pingpong's and perftest's timeout 14; a late takeover costs a retransmission at
/// worst, never a lost message).
const MAX_RECHECK: Duration = Duration::from_millis(8);
/// Longest sleep of the progress thread with no deadline armed (it then re-checks
/// whether the program still polls).
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// The NIC and what hangs off it, under the one lock.
pub(crate) struct Nic {
    pub(crate) driver: Driver<Box<dyn Backend>>,
    /// Completion channels by CQ.
    pub(crate) channels: FxHashMap<u32, Arc<EventQueue<u32>>>,
    /// Why the port failed, once it has.
    failed: Option<String>,
    /// When the progress thread, asleep, will next look at the NIC (None: awake, or
    /// leaving the NIC to the program).
    thread_wake: Option<Instant>,
    /// Publishes the engine's counters to the daemon whose port this is.
    pub(crate) reporter: Option<crate::daemon::report::Reporter>,
}

impl Nic {
    pub(crate) fn new(driver: Driver<Box<dyn Backend>>) -> Nic {
        Nic {
            driver,
            channels: FxHashMap::default(),
            failed: None,
            thread_wake: None,
            reporter: None,
        }
    }

    /// Publishes the counters to the daemon if it is time (`daemon::report`), by the
    /// driver's last clock reading or `now`.
    fn report_tick(&mut self, now: Option<Instant>) {
        let d = &self.driver;
        if let Some(r) = &mut self.reporter {
            let recent = now.unwrap_or_else(|| d.recent_now());
            if let Some(at) = r.due(recent, || d.clock.now()) {
                r.publish(at, &d.engine, &d.backend.stats());
            }
        }
    }

    /// Publishes the counters to the daemon now (a QP is about to go, the NIC closes).
    pub(crate) fn report_now(&mut self) {
        if let Some(r) = &mut self.reporter {
            let d = &self.driver;
            r.publish(d.clock.now(), &d.engine, &d.backend.stats());
        }
    }

    fn check(&self) -> Result<(), Error> {
        match &self.failed {
            Some(why) => Err(Error::PortDown(why.clone())),
            None => Ok(()),
        }
    }

    fn port_failed(&mut self, shared: &Shared, e: crate::backend::BackendError) -> Error {
        let why = e.to_string();
        if self.failed.is_none() {
            self.failed = Some(why.clone());
            shared.events.push(Event::PortError(why));
        }
        Error::Port(e)
    }

    /// Sends what is queued, then receives what waits and runs due timers.
    pub(crate) fn drive(&mut self, shared: &Shared) -> Result<bool, Error> {
        self.check()?;
        let r = self
            .driver
            .transmit()
            .and_then(|tx| Ok(self.driver.receive()? || tx));
        self.report_tick(None);
        r.map_err(|e| self.port_failed(shared, e))
    }

    /// Sends what is queued.
    pub(crate) fn flush(&mut self, shared: &Shared) -> Result<bool, Error> {
        self.check()?;
        let r = self.driver.transmit();
        r.map_err(|e| self.port_failed(shared, e))
    }

    /// Everything the NIC holds for the network leaves: what its engine queued, what it
    /// received meanwhile and the engine answers to that, and a capture's buffered
    /// frames. When
    /// the NIC closes, or its program exits with no destructor to come.
    pub(crate) fn close_out(&mut self, shared: &Shared) {
        if self.flush(shared).is_ok() {
            let _ = self.drive(shared);
            let _ = self.flush(shared);
        }
        self.driver.backend.flush_held();
        // A daemon keeps the last counters of the NIC and its QPs.
        self.report_now();
    }

    /// Moves fired completion events to their channels and async events to the queue.
    pub(crate) fn dispatch(&mut self, shared: &Shared) {
        while let Some(cq) = self.driver.engine.poll_cq_event() {
            if let Some(ch) = self.channels.get(&cq) {
                ch.push(cq);
            }
        }
        while let Some(ev) = self.driver.engine.poll_event() {
            shared.events.push(Event::Engine(ev));
        }
    }

    /// After a post or a modify: what it produced leaves now unless the program is
    /// polling (its next `poll_cq` sends the batch); an earlier deadline wakes the thread.
    pub(crate) fn after_post(&mut self, shared: &Shared) -> Result<(), Error> {
        if !shared.app_polling() {
            self.flush(shared)?;
        }
        self.dispatch(shared);
        shared.rearm(self);
        Ok(())
    }
}

/// What the program's calls and the progress thread share.
pub(crate) struct Shared {
    nic: Mutex<Nic>,
    pub(crate) local_ip: IpAddr,
    clock: Clock,
    /// The program drives the NIC itself (it polls, or sleeps on the port in `wait`): the
    /// thread keeps away. Set by the program's calls, cleared by the thread when it takes
    /// over. A flag and a counter, not a timestamp: reading the clock on every poll was a
    /// fifth of a polling loop's user time on a virtual machine (see `driver`).
    driving: AtomicBool,
    /// `poll_cq` calls so far: the thread takes over only after a `HANDOFF` with none.
    polls: AtomicU64,
    /// Engine time (ns) until which the program sleeps on the port itself (`wait`).
    waiting_until: AtomicU64,
    /// Wakes the sleeping progress thread (an earlier deadline, shutdown).
    doorbell: EventFd,
    /// The port's receive fd, duplicated so the thread can sleep on it without the lock.
    rx_fd: OwnedFd,
    stop: AtomicBool,
    pub(crate) events: EventQueue<Event>,
    /// The GID table the thread follows (`Device::gids`).
    pub(crate) gids: Option<super::gids::Watch>,
}

impl Shared {
    pub(crate) fn new(nic: Nic, clock: Clock) -> std::io::Result<Shared> {
        let local_ip = nic.driver.backend.local().ip();
        let rx_fd = nic.driver.backend.rx_fd().try_clone_to_owned()?;
        Ok(Shared {
            nic: Mutex::new(nic),
            local_ip,
            clock,
            driving: AtomicBool::new(false),
            polls: AtomicU64::new(0),
            waiting_until: AtomicU64::new(0),
            doorbell: EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?,
            rx_fd,
            stop: AtomicBool::new(false),
            events: EventQueue::new()?,
            gids: None,
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Nic> {
        // A panic while holding the lock leaves the engine as it was between two calls
        // (its calls do not unwind half-way by design); carry on rather than poison all.
        self.nic.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lock, waiting at most `max` for it: at a program's exit, where the thread that
    /// exits may be the one holding it (exit from a signal handler).
    pub(crate) fn lock_within(&self, max: Duration) -> Option<MutexGuard<'_, Nic>> {
        let end = std::time::Instant::now() + max;
        loop {
            match self.nic.try_lock() {
                Ok(g) => return Some(g),
                Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
                Err(TryLockError::WouldBlock) if std::time::Instant::now() < end => {
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(TryLockError::WouldBlock) => return None,
            }
        }
    }

    /// The lock, for a call that drives the NIC: the thread stays away until a `HANDOFF`
    /// passes without such a call.
    pub(crate) fn lock_polling(&self) -> MutexGuard<'_, Nic> {
        self.polls.fetch_add(1, Ordering::Relaxed);
        if !self.driving.load(Ordering::Relaxed) {
            self.driving.store(true, Ordering::Relaxed);
        }
        self.lock()
    }

    /// The program sleeps on the port itself for up to `d`.
    fn drive_until(&self, d: Duration) {
        let until = self.clock.now().as_nanos() + d.as_nanos() as u64;
        self.waiting_until.store(until, Ordering::Relaxed);
        self.driving.store(true, Ordering::Relaxed);
    }

    pub(crate) fn stop_polling(&self) {
        self.waiting_until.store(0, Ordering::Relaxed);
        self.driving.store(false, Ordering::Relaxed);
    }

    /// The program is about to block elsewhere (on a completion channel): what it posted
    /// since its last poll leaves now, and the thread takes over at once rather than after
    /// its next re-check (up to `MAX_RECHECK` later, per hop of a ping-pong).
    pub(crate) fn release(&self) -> Result<(), Error> {
        self.stop_polling();
        let mut nic = self.lock();
        let r = nic.flush(self);
        nic.dispatch(self);
        drop(nic);
        self.ring();
        r.map(|_| ())
    }

    pub(crate) fn app_polling(&self) -> bool {
        self.driving.load(Ordering::Relaxed)
    }

    fn ring(&self) {
        let _ = self.doorbell.write(1);
    }

    /// Wakes the thread if the engine now has a deadline before the thread's wake-up.
    pub(crate) fn rearm(&self, nic: &mut Nic) {
        if let (Some(wake), Some(t)) = (nic.thread_wake, nic.driver.engine.poll_timeout()) {
            if t < wake {
                nic.thread_wake = None;
                self.ring();
            }
        }
    }

    pub(crate) fn wait(&self, max: Duration) -> Result<(), Error> {
        let w = self.prepare_wait(max)?;
        if !w.is_zero() {
            wait_readable(&[self.rx_fd.as_fd()], w);
        }
        Ok(())
    }

    /// Before the program sleeps on the port itself: it keeps driving (the thread stays
    /// away while it sleeps); returns how long it may sleep. What it posted since its last
    /// poll leaves first: a polling program's posts wait for its next poll, and a sleep
    /// before that poll held a perf --lat turn for the whole sleep (100 ms).
    pub(crate) fn prepare_wait(&self, max: Duration) -> Result<Duration, Error> {
        self.drive_until(max + HANDOFF);
        let mut nic = self.lock();
        nic.flush(self)?;
        nic.dispatch(self);
        Ok(nic.driver.until_deadline(max))
    }

    pub(crate) fn rx_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.rx_fd.as_fd()
    }

    pub(crate) fn linger(&self, quiet: Duration, max: Duration) {
        {
            // No QP left, nothing to answer for (a destroyed QP sent what it owed as it
            // went): what is queued leaves, and no wait (a program that opens and closes
            // contexts by the hundred, as rdma-core's test suite, pays nothing).
            let mut nic = self.lock();
            if nic.driver.engine.qp_count() == 0 {
                let _ = nic.flush(self);
                return;
            }
        }
        let start = std::time::Instant::now();
        let mut last = std::time::Instant::now();
        while start.elapsed() < max && last.elapsed() < quiet {
            self.drive_until(quiet + HANDOFF);
            let w = {
                let mut nic = self.lock();
                match nic.drive(self) {
                    Ok(true) => {
                        let _ = nic.flush(self);
                        nic.dispatch(self);
                        last = std::time::Instant::now();
                        continue;
                    }
                    Ok(false) => nic.driver.until_deadline(Duration::from_millis(5)),
                    Err(_) => break,
                }
            };
            wait_readable(&[self.rx_fd.as_fd()], w);
        }
        self.stop_polling();
    }

    pub(crate) fn shutdown(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.ring();
    }

    /// One turn of the progress thread: drives the NIC if the program does not; returns
    /// how long to sleep and whether the port fd is worth watching. `seen`: the program's
    /// poll count at the previous turn.
    fn turn(&self, seen: &mut u64, recheck: &mut Duration) -> (Duration, bool) {
        if self.driving.load(Ordering::Relaxed) {
            let polls = self.polls.load(Ordering::Relaxed);
            let now = self.clock.now().as_nanos();
            let until = self.waiting_until.load(Ordering::Relaxed);
            if polls != *seen {
                // It polled since the last look: look again later, a little later each
                // time it still does.
                *seen = polls;
                let wait = *recheck;
                *recheck = (*recheck * 2).min(MAX_RECHECK);
                return (wait, false);
            }
            *recheck = HANDOFF;
            if now < until {
                return (Duration::from_nanos(until - now).min(MAX_SLEEP), false);
            }
            // A whole HANDOFF without a poll: the program is busy elsewhere or blocked.
            self.driving.store(false, Ordering::Relaxed);
        }
        let mut nic = self.lock();
        if nic.failed.is_some() {
            return (MAX_SLEEP, false);
        }
        loop {
            match nic.drive(self) {
                Ok(true) => {
                    // ACKs and responses to what was just received.
                    let _ = nic.flush(self);
                    nic.dispatch(self);
                }
                Ok(false) => break,
                Err(_) => return (MAX_SLEEP, false),
            }
            if self.app_polling() || self.stop.load(Ordering::Relaxed) {
                return (Duration::ZERO, false);
            }
        }
        nic.dispatch(self);
        // The program may be idle: the driver's last clock reading is old.
        nic.report_tick(Some(self.clock.now()));
        let w = nic.driver.until_deadline(MAX_SLEEP);
        nic.thread_wake = Some(self.clock.now().saturating_add(w));
        (w, true)
    }

    fn run(&self) {
        let mut seen = self.polls.load(Ordering::Relaxed);
        let mut recheck = HANDOFF;
        while !self.stop.load(Ordering::Relaxed) {
            let (w, watch_port) = self.turn(&mut seen, &mut recheck);
            if w.is_zero() {
                continue;
            }
            // The interface's addresses, at most every WATCH_INTERVAL, before a sleep (of
            // at most MAX_SLEEP): outside the NIC lock, as the engine knows nothing of GIDs.
            if self
                .gids
                .as_ref()
                .is_some_and(|g| g.due(std::time::Instant::now()))
            {
                self.events.push(Event::GidChange);
            }
            let ms = w.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
            let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
            let bell = PollFd::new(self.doorbell.as_fd(), PollFlags::POLLIN);
            if watch_port {
                let port = PollFd::new(self.rx_fd.as_fd(), PollFlags::POLLIN);
                let _ = poll(&mut [bell, port], timeout);
            } else {
                let _ = poll(&mut [bell], timeout);
            }
            let _ = self.doorbell.read();
            self.lock().thread_wake = None;
        }
    }
}

/// Starts the progress thread. It blocks every signal: a program's handlers (perftest's
/// SIGALRM for `-D`) run on its own threads, as with a kernel NIC. Except SIGSEGV and
/// SIGBUS: a fault is delivered to the thread that faults, and one while they are blocked
/// kills the process; mem's fault handler turns a fault on registered memory that the
/// program unmapped or protected into an access error, on this thread too.
pub(crate) fn spawn(shared: Arc<Shared>) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("roce-emu-progress".into())
        .spawn(move || {
            use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
            let mut set = SigSet::all();
            set.remove(Signal::SIGSEGV);
            set.remove(Signal::SIGBUS);
            let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None);
            shared.run();
        })
}
