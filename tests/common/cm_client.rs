//! A test CM client: speaks the daemon's CM protocol directly on its control socket
//! (`ToDaemon::CmHello`, then JSON `cm::ucma::Request`s answered by `ToLibrary::Reply`,
//! events interleaved), as the drop-in librdmacm does, without it. Every wait is bounded.

use roce_emu::cm::ucma::{self, Command, ConnParam, Event, EventKind, Reply, Request, ToLibrary};
use roce_emu::daemon::control::{self, ToDaemon, ToProcess};
use socket2::{Domain, SockAddr, Socket, Type};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long any one answer or event is waited for.
pub const WAIT: Duration = Duration::from_secs(10);

pub struct CmClient {
    pub sock: Socket,
    seq: u64,
    /// Events that came while a reply was awaited.
    events: VecDeque<Event>,
    pub name: &'static str,
}

/// A fresh connection to the daemon's control socket.
pub fn connect_raw(socket: &Path) -> Socket {
    let s = Socket::new(Domain::UNIX, Type::SEQPACKET, None).unwrap();
    s.connect(&SockAddr::unix(socket).unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s
}

impl CmClient {
    /// Connects and says `CmHello`; the welcome.
    pub fn connect(socket: &Path, name: &'static str) -> (CmClient, ToProcess) {
        let sock = connect_raw(socket);
        let hello = ToDaemon::CmHello {
            version: ucma::VERSION,
            pid: std::process::id(),
        };
        control::send(sock.as_fd(), &hello, &[]).unwrap();
        let c = CmClient {
            sock,
            seq: 0,
            events: VecDeque::new(),
            name,
        };
        let welcome: ToProcess = c.recv_within(WAIT).expect("no CmWelcome");
        (c, welcome)
    }

    /// One message, waiting at most `d`.
    fn recv_within<T: for<'de> serde::Deserialize<'de>>(&self, d: Duration) -> Option<T> {
        let deadline = Instant::now() + d;
        loop {
            match control::recv::<T>(self.sock.as_fd()) {
                Ok((m, _)) => return Some(m),
                Err(control::ControlError::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("{}: {e}", self.name),
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }

    /// Sends bytes as one message (garbage, or a hand-made request).
    pub fn send_raw(&self, bytes: &[u8]) {
        control::try_send_bytes(self.sock.as_fd(), bytes).unwrap();
    }

    /// The reply of sequence number `seq` (events that come first are kept).
    pub fn reply_of(&mut self, seq: u64) -> Reply {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.recv_within::<ToLibrary>(left) {
                Some(ToLibrary::Reply { seq: s, reply }) => {
                    assert_eq!(s, seq, "{}: replies come in order", self.name);
                    return reply;
                }
                Some(ToLibrary::Event(e)) => self.events.push_back(e),
                None => panic!("{}: no reply to request {seq}", self.name),
            }
        }
    }

    /// One command; its reply.
    pub fn cmd(&mut self, command: Command) -> Reply {
        self.seq += 1;
        let req = Request {
            seq: self.seq,
            command,
        };
        self.send_raw(&serde_json::to_vec(&req).unwrap());
        self.reply_of(self.seq)
    }

    /// One command that must succeed.
    pub fn ok(&mut self, command: Command) -> Reply {
        let what = format!("{command:?}");
        let r = self.cmd(command);
        assert!(
            !matches!(r, Reply::Errno { .. }),
            "{}: {what} -> {r:?}",
            self.name
        );
        r
    }

    /// The next event, if one comes within `d`.
    pub fn event_within(&mut self, d: Duration) -> Option<Event> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        match self.recv_within::<ToLibrary>(d)? {
            ToLibrary::Event(e) => Some(e),
            ToLibrary::Reply { seq, .. } => panic!("{}: a reply {seq} nobody asked", self.name),
        }
    }

    /// The next event, which must be of `kind`.
    pub fn expect(&mut self, kind: EventKind) -> Event {
        let e = self
            .event_within(WAIT)
            .unwrap_or_else(|| panic!("{}: no event (wanted {kind:?})", self.name));
        assert_eq!(e.kind, kind, "{}: {e:?}", self.name);
        e
    }

    /// No event comes within `d`.
    pub fn quiet(&mut self, d: Duration) {
        if let Some(e) = self.event_within(d) {
            panic!("{}: unexpected event {e:?}", self.name);
        }
    }

    /// CREATE_ID for RC in the TCP port space; the id.
    pub fn create_id(&mut self) -> ucma::IdNum {
        match self.ok(Command::CreateId {
            ps: ucma::PortSpace::Tcp,
            qp_type: ucma::QpType::Rc,
        }) {
            Reply::Id { id } => id,
            r => panic!("{}: CreateId -> {r:?}", self.name),
        }
    }

    /// An id bound to `addr` and listening.
    pub fn listen(&mut self, addr: SocketAddr) -> ucma::IdNum {
        let id = self.create_id();
        self.ok(Command::Bind { id, addr });
        self.ok(Command::Listen { id, backlog: 8 });
        id
    }

    /// An id with `dst` resolved (address, then route), as `rdma_resolve_addr` and
    /// `rdma_resolve_route` with their events.
    pub fn resolved(&mut self, dst: SocketAddr) -> ucma::IdNum {
        let id = self.create_id();
        self.ok(Command::ResolveAddr {
            id,
            src: None,
            dst,
            timeout_ms: 2000,
        });
        let e = self.expect(EventKind::AddrResolved);
        assert_eq!((e.id, e.status), (id, 0));
        self.ok(Command::ResolveRoute {
            id,
            timeout_ms: 2000,
        });
        let e = self.expect(EventKind::RouteResolved);
        assert_eq!((e.id, e.status), (id, 0));
        id
    }
}

/// Connection parameters with a QPN and private data.
pub fn param(qp_num: u32, private: &[u8]) -> ConnParam {
    ConnParam {
        private_data: private.to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        qp_num,
        qkey: 0,
    }
}
