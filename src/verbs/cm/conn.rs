//! One process's connection to one daemon's connection manager (contract §3): a
//! `SOCK_SEQPACKET` to the daemon's control socket, `CmHello` / `CmWelcome`, then JSON
//! `ucma::Request`s out and `ucma::ToLibrary` in.
//!
//! Commands are synchronous and may come from any thread: each carries a sequence number
//! and waits for the reply with that number. One dispatcher thread reads the socket: a
//! reply wakes its waiter, an event goes to the channel of its id (a connect request to
//! its listener's, and the new id is routed there too, as the kernel queues the child's
//! events on the listener's file until a migrate). The daemon going away fails every
//! waiting and later command with [`CmError::Gone`] and gives each of its ids a
//! DEVICE_REMOVAL event.

use super::channel::{Delivered, EventChannel};
use super::CmError;
use crate::cm::ucma::{self, Command, EventKind, IdNum, Reply, Request, ToLibrary};
use crate::daemon::client::{AttachError, ATTACH_TIMEOUT};
use crate::daemon::control::{self, ControlError, ToDaemon, ToProcess};
use socket2::{Domain, SockAddr, Socket, Type};
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Longest wait for a command's reply: the manager answers at once (the slow parts are
/// events), so a silent one is broken.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// What the daemon said about its port in `CmWelcome`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    pub node_guid: u64,
    pub addrs: Vec<IpAddr>,
    pub mtu: u32,
}

#[derive(Default)]
struct State {
    replies: HashMap<u64, Reply>,
    /// Why the connection ended (the daemon closed it, or a message that does not parse).
    gone: Option<String>,
    routes: HashMap<IdNum, EventChannel>,
}

/// A connection to one daemon's connection manager.
pub struct Conn {
    path: PathBuf,
    sock: Socket,
    welcome: Welcome,
    seq: AtomicU64,
    state: Mutex<State>,
    cond: Condvar,
    /// Events for an id with no channel (destroyed meanwhile): dropped, counted.
    pub dropped_events: AtomicU64,
}

impl Conn {
    /// Connects to the daemon at `path` and says the CM hello (bounded waits).
    pub fn connect(path: &Path) -> Result<Arc<Conn>, CmError> {
        let daemon = |why: String| {
            CmError::Daemon(AttachError::Protocol {
                path: path.to_path_buf(),
                why,
            })
        };
        let conn_err = |source: std::io::Error| {
            CmError::Daemon(AttachError::Connect {
                path: path.to_path_buf(),
                source,
            })
        };
        let sock = Socket::new(Domain::UNIX, Type::SEQPACKET, None).map_err(conn_err)?;
        sock.set_read_timeout(Some(ATTACH_TIMEOUT))
            .map_err(conn_err)?;
        sock.set_write_timeout(Some(ATTACH_TIMEOUT))
            .map_err(conn_err)?;
        sock.connect(&SockAddr::unix(path).map_err(conn_err)?)
            .map_err(conn_err)?;
        // The daemon must be this user's (or root's): it sees every connection we make.
        let own = nix::unistd::geteuid().as_raw();
        let theirs = control::peer_uid(sock.as_fd()).map_err(|e| daemon(e.to_string()))?;
        if theirs != own && theirs != 0 {
            return Err(CmError::Daemon(AttachError::Untrusted {
                path: path.to_path_buf(),
                why: format!("it runs as user {theirs} and this program as user {own}"),
            }));
        }
        let hello = ToDaemon::CmHello {
            version: ucma::VERSION,
            pid: std::process::id(),
        };
        let sent = control::send(sock.as_fd(), &hello, &[]);
        let (answer, _fds) = control::recv::<ToProcess>(sock.as_fd()).map_err(|e| match e {
            ControlError::Io(io) if io.kind() == std::io::ErrorKind::WouldBlock => {
                CmError::Daemon(AttachError::Silent {
                    path: path.to_path_buf(),
                    secs: ATTACH_TIMEOUT.as_secs(),
                })
            }
            e => daemon(sent.err().unwrap_or(e).to_string()),
        })?;
        let welcome = match answer {
            ToProcess::CmWelcome {
                version,
                node_guid,
                addrs,
                mtu,
            } => {
                if version != ucma::VERSION {
                    return Err(daemon(format!(
                        "its connection manager speaks version {version}, this library {}",
                        ucma::VERSION
                    )));
                }
                Welcome {
                    node_guid,
                    addrs,
                    mtu,
                }
            }
            ToProcess::Refused { why } => {
                return Err(CmError::Daemon(AttachError::Refused {
                    path: path.to_path_buf(),
                    why,
                }))
            }
            m => return Err(daemon(format!("unexpected answer {m:?}"))),
        };
        // The dispatcher blocks in receive for as long as the connection lives.
        sock.set_read_timeout(None).map_err(conn_err)?;
        let conn = Arc::new(Conn {
            path: path.to_path_buf(),
            sock,
            welcome,
            seq: AtomicU64::new(1),
            state: Mutex::new(State::default()),
            cond: Condvar::new(),
            dropped_events: AtomicU64::new(0),
        });
        let c = conn.clone();
        std::thread::Builder::new()
            .name("roce-emu-cm".into())
            .spawn(move || c.dispatch())
            .map_err(conn_err)?;
        Ok(conn)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the daemon went away (a new connection is needed).
    pub fn is_gone(&self) -> bool {
        self.lock().gone.is_some()
    }

    /// Sends one command and waits for its reply; an `Errno` reply is
    /// [`CmError::Errno`].
    pub fn command(&self, cmd: Command) -> Result<Reply, CmError> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let gone = |why: &str| CmError::Gone {
            path: self.path.clone(),
            why: why.to_string(),
        };
        if let Some(why) = &self.lock().gone {
            return Err(gone(why));
        }
        let what = tracing::enabled!(tracing::Level::TRACE).then(|| format!("{cmd:?}"));
        let sent = Instant::now();
        let req = Request { seq, command: cmd };
        control::send(self.sock.as_fd(), &req, &[]).map_err(|e| gone(&e.to_string()))?;
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        let mut st = self.lock();
        loop {
            if let Some(reply) = st.replies.remove(&seq) {
                if let Some(what) = what {
                    tracing::trace!(took = ?sent.elapsed(), ?reply, "{what}");
                }
                return match reply {
                    Reply::Errno { errno, what } => Err(CmError::Errno { errno, what }),
                    r => Ok(r),
                };
            }
            if let Some(why) = &st.gone {
                return Err(gone(why));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(CmError::Errno {
                    errno: libc::ETIMEDOUT,
                    what: format!(
                        "the connection manager at {} did not answer",
                        self.path.display()
                    ),
                });
            }
            st = self
                .cond
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Routes `id`'s events to `channel` (from now on).
    pub fn route(&self, id: IdNum, channel: &EventChannel) {
        self.lock().routes.insert(id, channel.clone());
    }

    /// Stops routing `id`'s events (a destroyed id): later ones are dropped.
    pub fn unroute(&self, id: IdNum) {
        self.lock().routes.remove(&id);
    }

    /// The channel `id`'s events go to.
    pub fn channel_of(&self, id: IdNum) -> Option<EventChannel> {
        self.lock().routes.get(&id).cloned()
    }

    /// Moves `id` to `to`: its queued events (on the channel it had) and its future ones.
    /// Under the state lock, so the dispatcher queues nothing for it meanwhile.
    pub fn migrate(self: &Arc<Self>, id: IdNum, to: &EventChannel) {
        let mut st = self.lock();
        if let Some(from) = st.routes.insert(id, to.clone()) {
            if !from.same(to) {
                to.push_all(from.take_for(self, id));
            }
        }
    }

    /// The dispatcher: replies to their waiters, events to their channels.
    fn dispatch(self: Arc<Self>) {
        let why = loop {
            match control::recv::<ToLibrary>(self.sock.as_fd()) {
                Ok((ToLibrary::Reply { seq, reply }, _)) => {
                    self.lock().replies.insert(seq, reply);
                    self.cond.notify_all();
                }
                Ok((ToLibrary::Event(event), _)) => self.deliver(event),
                Err(ControlError::Closed) => break "it closed the connection".to_string(),
                Err(ControlError::Io(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break e.to_string(),
            }
        };
        tracing::debug!(daemon = %self.path.display(), "connection manager gone: {why}");
        let mut st = self.lock();
        st.gone = Some(why);
        // Every id of the device is gone with it: DEVICE_REMOVAL, as the kernel's rdma_cm
        // tells each id when its device goes (`cma_process_remove`), so a program waiting
        // on its channel learns it instead of waiting for ever.
        let ids: Vec<(IdNum, EventChannel)> = st.routes.drain().collect();
        for (id, ch) in ids {
            ch.push(Delivered {
                conn: self.clone(),
                event: ucma::Event {
                    id,
                    listen_id: None,
                    kind: EventKind::DeviceRemoval,
                    status: 0,
                    param: None,
                    ah: None,
                },
            });
        }
        drop(st);
        self.cond.notify_all();
    }

    fn deliver(self: &Arc<Self>, event: ucma::Event) {
        let mut st = self.lock();
        let channel = match (event.kind, event.listen_id) {
            // The new id's events go where its listener's go until the program migrates it.
            (EventKind::ConnectRequest, Some(listen)) => {
                let ch = st.routes.get(&listen).cloned();
                if let Some(ch) = &ch {
                    st.routes.insert(event.id, ch.clone());
                }
                ch
            }
            _ => st.routes.get(&event.id).cloned(),
        };
        match channel {
            Some(ch) => ch.push(Delivered {
                conn: self.clone(),
                event,
            }),
            None => {
                self.dropped_events.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(?event, "event for an id this process no longer has");
            }
        }
    }
}
