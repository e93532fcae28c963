//! The roce-emu agent's connection manager (`role cm_passive` scripts): the same sans-IO
//! `crate::cm::Cm` the daemon hosts, here on the in-process NIC's own QP1 (a UD QP
//! numbered 1, `Context::create_gsi_qp`), driven by a thread of the agent: received
//! MADs in, its MADs out as UD sends from QP1 to QP1, its timers, its events queued for
//! the agent's `cm_event` request.
//!
//! Attached to a daemon (`--daemon`), the agent is instead a CM client of the daemon's CM
//! (`CmHost::via_daemon`), as a program's librdmacm is: the same scripts then check the
//! daemon's QP1 and its CM protocol too. Why not always the daemon: the agent's NIC is
//! by default a private port in the runner's process, and a second port cannot share its
//! address; the CM core is the same code either way, and its QP1 here is the engine's UD
//! path with the GSI Q_Key check (`Qp::expected_qkey`).

use crate::cm::ucma::{self, Command, Event, Reply};
use crate::cm::{Cm, CmConfig, MadPeer, Resolved};
use crate::verbs::{
    Access, Completion, Context, Local, QpAttr, QpCap, QpInit, QpState, QpType, RecvWr, SendFlags,
    SendOp, SendWr, Sge, UdDest, WcOpcode, GSI_QKEY, GSI_QPN,
};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The one CM client (the agent).
pub const OWNER: u64 = 1;
/// QP1's receive slots: the 40-byte GRH slot and one MAD.
const SLOT: usize = 40 + crate::wire::mad::MAD_LEN;
const SLOTS: usize = 32;
/// The most events kept for the agent (a script reads a few).
const MAX_EVENTS: usize = 256;

/// The CM and what it has said to the agent.
pub struct Shared {
    cm: Cm,
    events: VecDeque<Event>,
    start: std::time::Instant,
    /// Attached to a daemon: its CM, as a program's librdmacm reaches it (a CM client
    /// connection: `CmHello`, then JSON requests, replies and events), instead of `cm`.
    daemon: Option<DaemonCm>,
}

/// A CM client connection to a daemon.
struct DaemonCm {
    sock: socket2::Socket,
    seq: u64,
}

/// How long a daemon's reply is waited for.
const DAEMON_WAIT: Duration = Duration::from_secs(10);

impl DaemonCm {
    fn connect(path: &std::path::Path) -> Result<DaemonCm, String> {
        use crate::daemon::control::{self, ToDaemon, ToProcess};
        use socket2::{Domain, SockAddr, Socket, Type};
        use std::os::fd::AsFd;
        let err = |e: std::io::Error| format!("the daemon's CM at {}: {e}", path.display());
        let sock = Socket::new(Domain::UNIX, Type::SEQPACKET.cloexec(), None).map_err(err)?;
        sock.connect(&SockAddr::unix(path).map_err(err)?)
            .map_err(err)?;
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(err)?;
        let hello = ToDaemon::CmHello {
            version: ucma::VERSION,
            pid: std::process::id(),
        };
        control::send(sock.as_fd(), &hello, &[]).map_err(|e| e.to_string())?;
        let until = std::time::Instant::now() + DAEMON_WAIT;
        loop {
            match control::recv::<ToProcess>(sock.as_fd()) {
                Ok((ToProcess::CmWelcome { .. }, _)) => return Ok(DaemonCm { sock, seq: 0 }),
                Ok((m, _)) => return Err(format!("the daemon answered CmHello with {m:?}")),
                Err(_) if std::time::Instant::now() < until => {}
                Err(e) => return Err(format!("no CmWelcome: {e}")),
            }
        }
    }

    /// One message if one comes within the socket's timeout.
    fn recv(&self) -> Option<ucma::ToLibrary> {
        use std::os::fd::AsFd;
        crate::daemon::control::recv::<ucma::ToLibrary>(self.sock.as_fd())
            .ok()
            .map(|(m, _)| m)
    }
}

impl Shared {
    fn now(&self) -> crate::cm::Instant {
        crate::cm::Instant::from_nanos(self.start.elapsed().as_nanos() as u64)
    }

    /// One command of the agent's: the CM's reply.
    pub fn command(&mut self, cmd: Command) -> Reply {
        let now = self.now();
        let Some(d) = self.daemon.as_mut() else {
            return self.cm.command(now, OWNER, cmd);
        };
        use std::os::fd::AsFd;
        d.seq += 1;
        let seq = d.seq;
        let req = ucma::Request { seq, command: cmd };
        if let Err(e) = crate::daemon::control::send(d.sock.as_fd(), &req, &[]) {
            return Reply::Errno {
                errno: 5,
                what: format!("the daemon's CM: {e}"),
            };
        }
        let until = std::time::Instant::now() + DAEMON_WAIT;
        while std::time::Instant::now() < until {
            match d.recv() {
                Some(ucma::ToLibrary::Reply { seq: s, reply }) if s == seq => return reply,
                Some(ucma::ToLibrary::Event(ev)) if self.events.len() < MAX_EVENTS => {
                    self.events.push_back(ev)
                }
                _ => {}
            }
        }
        Reply::Errno {
            errno: 110,
            what: "no reply from the daemon's CM".into(),
        }
    }

    pub fn pop_event(&mut self) -> Option<Event> {
        if self.events.is_empty() {
            if let Some(ucma::ToLibrary::Event(ev)) = self.daemon.as_ref().and_then(|d| d.recv()) {
                self.events.push_back(ev);
            }
        }
        self.events.pop_front()
    }

    pub fn clear_events(&mut self) {
        self.events.clear();
    }
}

/// The CM on QP1 of `ctx`, and the flag that stops its thread.
pub struct CmHost {
    pub shared: Arc<Mutex<Shared>>,
    pub stop: Arc<AtomicBool>,
    /// The NIC is attached to a daemon, whose QP1 and CM it is: commands go to the
    /// daemon's CM, no QP1 here.
    pub via_daemon: bool,
    /// QP1 is up with its receives posted (set by `run`): the agent serves after it, so a
    /// script's first MAD cannot come before QP1 exists.
    pub ready: AtomicBool,
}

impl CmHost {
    /// The CM of the daemon at `path` (the agent's NIC is attached to it).
    pub fn via_daemon(ctx: &Context, path: &std::path::Path) -> Result<CmHost, String> {
        let h = CmHost::new(ctx);
        h.shared.lock().map_err(|_| "poisoned")?.daemon = Some(DaemonCm::connect(path)?);
        Ok(CmHost {
            via_daemon: true,
            ..h
        })
    }

    pub fn new(ctx: &Context) -> CmHost {
        let ip = ctx.local_ip();
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let cm = Cm::new(CmConfig {
            node_guid: 0x0200_00ff_fe00_0001,
            addrs: vec![ip],
            mtu: 1024,
            seed,
        });
        CmHost {
            shared: Arc::new(Mutex::new(Shared {
                cm,
                events: VecDeque::new(),
                start: std::time::Instant::now(),
                daemon: None,
            })),
            stop: Arc::new(AtomicBool::new(false)),
            via_daemon: false,
            ready: AtomicBool::new(false),
        }
    }

    /// Waits until `run` has QP1 up. Bounded: a QP1 that failed to come up (logged)
    /// leaves the CM scripts failing, the others unaffected.
    pub fn wait_ready(&self) {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !self.ready.load(Ordering::Acquire) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Runs QP1 for the CM until `stop` (the agent's thread body).
    pub fn run(&self, ctx: &Context) -> Result<(), String> {
        if self.via_daemon {
            self.ready.store(true, Ordering::Release);
            return Ok(());
        }
        let pd = ctx.alloc_pd();
        let cq = ctx
            .create_cq(SLOTS * 2 + 64, None)
            .map_err(|e| format!("QP1's CQ: {e}"))?;
        let base = 0x6000_0000_0000u64;
        let mr = ctx
            .reg_mr(pd, base, (SLOT * SLOTS) as u64, Access::LOCAL_WRITE)
            .map_err(|e| format!("QP1's region: {e}"))?;
        let cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: SLOTS,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: crate::wire::mad::MAD_LEN,
        };
        let mut init = QpInit::rc(pd, cq, cap);
        init.qp_type = QpType::Ud;
        let qp = ctx
            .create_gsi_qp(&init)
            .map_err(|e| format!("create_gsi_qp: {e}"))?;
        let steps = [
            QpAttr {
                state: Some(QpState::Init),
                pkey_index: Some(0),
                port: Some(1),
                qkey: Some(GSI_QKEY),
                ..Default::default()
            },
            QpAttr {
                state: Some(QpState::Rtr),
                ..Default::default()
            },
            QpAttr {
                state: Some(QpState::Rts),
                sq_psn: Some(crate::verbs::Psn::new(0)),
                ..Default::default()
            },
        ];
        for a in &steps {
            ctx.modify_qp(qp, a)
                .map_err(|e| format!("QP1 modify: {e}"))?;
        }
        let post = |i: usize| {
            let sge = [Sge {
                addr: base + (i * SLOT) as u64,
                length: SLOT as u32,
                lkey: mr.lkey(),
            }];
            ctx.post_recv(
                qp,
                &RecvWr {
                    wr_id: i as u64,
                    sges: &sge,
                },
            )
        };
        for i in 0..SLOTS {
            post(i).map_err(|e| format!("QP1 post_recv: {e}"))?;
        }
        self.ready.store(true, Ordering::Release);
        let local = ctx.local_ip();
        let mut wc = [Completion::default(); 16];
        let mut buf = vec![0u8; SLOT];
        while !self.stop.load(Ordering::Relaxed) {
            let n = ctx.poll_cq(cq, &mut wc).unwrap_or(0);
            let mut sh = self
                .shared
                .lock()
                .map_err(|_| "the CM's lock is poisoned")?;
            let now = sh.now();
            for c in &wc[..n] {
                if c.opcode != WcOpcode::Recv {
                    continue;
                }
                let i = c.wr_id as usize;
                if c.status == crate::verbs::WcStatus::Success
                    && mr.read(base + (i * SLOT) as u64, &mut buf).is_ok()
                {
                    // The GRH slot: an IPv4 packet's source at +32, an IPv6 one's at +8.
                    let remote = match c.network_hdr {
                        Some(crate::verbs::NetworkHdr::Ipv6) => {
                            let mut a = [0u8; 16];
                            a.copy_from_slice(&buf[8..24]);
                            IpAddr::from(a)
                        }
                        _ => IpAddr::from([buf[32], buf[33], buf[34], buf[35]]),
                    };
                    sh.cm
                        .handle_mad(now, MadPeer { remote, local }, &buf[40..SLOT]);
                }
                let _ = post(i);
            }
            if sh.cm.poll_timeout().is_some_and(|t| t <= now) {
                sh.cm.handle_timeout(now);
            }
            while let Some((id, _src, _dst)) = sh.cm.poll_resolve() {
                let r = Ok(Resolved {
                    src: local,
                    hop_limit: 64,
                });
                sh.cm.resolved(now, id, r);
            }
            while let Some((peer, mad)) = sh.cm.poll_transmit() {
                let wr = SendWr {
                    wr_id: 1 << 32,
                    op: SendOp::Send,
                    local: Local::Inline(&mad),
                    flags: SendFlags {
                        signaled: true,
                        fence: false,
                        solicited: false,
                    },
                };
                let dest = UdDest {
                    dest_ip: peer.remote,
                    remote_qpn: GSI_QPN,
                    remote_qkey: GSI_QKEY,
                };
                if let Err(e) = ctx.post_send_ud(qp, &wr, &dest) {
                    tracing::warn!("conform agent: QP1 send: {e}");
                }
            }
            while let Some((_owner, ev)) = sh.cm.poll_event() {
                if sh.events.len() < MAX_EVENTS {
                    sh.events.push_back(ev);
                }
            }
            drop(sh);
            if n == 0 {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
        let _ = ctx.destroy_qp(qp);
        let _ = ctx.destroy_cq(cq);
        let _ = ctx.dereg_mr(mr.lkey());
        Ok(())
    }
}

/// rdma_cm's event name (`RDMA_CM_EVENT_` less the prefix).
pub fn event_name(k: ucma::EventKind) -> &'static str {
    use ucma::EventKind::*;
    match k {
        AddrResolved => "ADDR_RESOLVED",
        AddrError => "ADDR_ERROR",
        RouteResolved => "ROUTE_RESOLVED",
        RouteError => "ROUTE_ERROR",
        ConnectRequest => "CONNECT_REQUEST",
        ConnectResponse => "CONNECT_RESPONSE",
        ConnectError => "CONNECT_ERROR",
        Unreachable => "UNREACHABLE",
        Rejected => "REJECTED",
        Established => "ESTABLISHED",
        Disconnected => "DISCONNECTED",
        DeviceRemoval => "DEVICE_REMOVAL",
        MulticastJoin => "MULTICAST_JOIN",
        MulticastError => "MULTICAST_ERROR",
        AddrChange => "ADDR_CHANGE",
        TimewaitExit => "TIMEWAIT_EXIT",
    }
}

/// The RDMA UD Q_Key of rdma_cm's UDP port space (`RDMA_UDP_QKEY`).
pub const UDP_QKEY: u32 = 0x0123_4567;

/// A script's rdma_cm ids on the agent: its listeners, the connection its last
/// CONNECT_REQUEST made, and the QPs its accepts created.
#[derive(Default)]
pub struct CmIds {
    listen: Vec<(ucma::IdNum, ucma::PortSpace)>,
    conn: Option<(ucma::IdNum, ucma::PortSpace)>,
    pub qps: Vec<u32>,
}

fn errno(r: Reply) -> Result<Reply, String> {
    match r {
        Reply::Errno { errno, what } => Err(format!("rdma_cm: errno {errno}: {what}")),
        r => Ok(r),
    }
}

type Kv = Vec<(&'static str, String)>;

impl CmIds {
    fn cmd(host: &CmHost, c: Command) -> Result<Reply, String> {
        let mut sh = host
            .shared
            .lock()
            .map_err(|_| "the CM's lock is poisoned")?;
        errno(sh.command(c))
    }

    /// `cm_listen ps=tcp|udp port=N`: an id bound to the target's address and port N,
    /// listening.
    pub fn listen(&mut self, host: &CmHost, ip: IpAddr, ps: &str, port: u16) -> Result<Kv, String> {
        let (ps, qp_type) = match ps {
            "tcp" => (ucma::PortSpace::Tcp, ucma::QpType::Rc),
            "udp" => (ucma::PortSpace::Udp, ucma::QpType::Ud),
            o => return Err(format!("ps={o}: tcp or udp")),
        };
        let Reply::Id { id } = Self::cmd(host, Command::CreateId { ps, qp_type })? else {
            return Err("create_id: no id".into());
        };
        self.listen.push((id, ps));
        Self::cmd(
            host,
            Command::Bind {
                id,
                addr: std::net::SocketAddr::new(ip, port),
            },
        )?;
        Self::cmd(host, Command::Listen { id, backlog: 8 })?;
        Ok(vec![])
    }

    /// `cm_event ms=T`: the next event; a CONNECT_REQUEST's id becomes the connection.
    pub fn event(&mut self, host: &CmHost, ms: u64) -> Result<Kv, String> {
        let until = std::time::Instant::now() + Duration::from_millis(ms.min(600_000));
        loop {
            let ev = host
                .shared
                .lock()
                .map_err(|_| "the CM's lock is poisoned")?
                .pop_event();
            if let Some(ev) = ev {
                if ev.kind == ucma::EventKind::ConnectRequest {
                    let ps = ev
                        .listen_id
                        .and_then(|l| self.listen.iter().find(|x| x.0 == l))
                        .map_or(ucma::PortSpace::Tcp, |x| x.1);
                    self.conn = Some((ev.id, ps));
                }
                return Ok(vec![
                    ("event", event_name(ev.kind).into()),
                    ("status", ev.status.to_string()),
                ]);
            }
            if std::time::Instant::now() >= until {
                return Ok(vec![("none", String::new())]);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn conn(&self) -> Result<(ucma::IdNum, ucma::PortSpace), String> {
        self.conn.ok_or_else(|| "no connection request yet".into())
    }

    /// `cm_accept`: a QP (RC, or UD for the UDP port space) on `pd`/`cq`, taken through
    /// INIT, RTR and RTS with the CM's attributes as librdmacm's rdma_accept does, then
    /// the accept. Its QPN and receive PSN (what the REP's Starting PSN announces: Linux
    /// gives the passive QP the REQ's Starting PSN as its send PSN, `cm_init_qp_rts_attr`).
    pub fn accept(
        &mut self,
        host: &CmHost,
        ctx: &Context,
        pd: crate::verbs::Pd,
        cq: u32,
    ) -> Result<Kv, String> {
        let (id, ps) = self.conn()?;
        let ud = ps == ucma::PortSpace::Udp;
        let cap = QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let mut init = QpInit::rc(pd, cq, cap);
        if ud {
            init.qp_type = QpType::Ud;
        }
        let qp = ctx
            .create_qp(&init)
            .map_err(|e| format!("create_qp: {e}"))?;
        self.qps.push(qp);
        let mut psn = 0;
        if ud {
            for a in [
                QpAttr {
                    state: Some(QpState::Init),
                    pkey_index: Some(0),
                    port: Some(1),
                    qkey: Some(UDP_QKEY),
                    ..Default::default()
                },
                QpAttr {
                    state: Some(QpState::Rtr),
                    ..Default::default()
                },
                QpAttr {
                    state: Some(QpState::Rts),
                    sq_psn: Some(crate::verbs::Psn::new(0)),
                    ..Default::default()
                },
            ] {
                ctx.modify_qp(qp, &a)
                    .map_err(|e| format!("modify_qp: {e}"))?;
            }
        } else {
            let attrs = |s| match Self::cmd(host, Command::InitQpAttr { id, state: s }) {
                Ok(Reply::QpAttrs(a)) => Ok(a),
                Ok(r) => Err(format!("init_qp_attr: {r:?}")),
                Err(e) => Err(e),
            };
            let _ = attrs(ucma::QpState::Init)?;
            let rtr = attrs(ucma::QpState::Rtr)?;
            let rts = attrs(ucma::QpState::Rts)?;
            let peer = rtr
                .ah
                .map(|ah| std::net::Ipv6Addr::from(ah.dgid))
                .map(|a| a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4))
                .ok_or("init_qp_attr RTR: no address")?;
            let mtu = crate::verbs::Mtu::from_bytes(128 << rtr.path_mtu.clamp(1, 5))
                .ok_or("init_qp_attr: path MTU")?;
            for a in [
                QpAttr::init(Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE),
                QpAttr::rtr(
                    peer,
                    mtu,
                    rtr.dest_qp_num,
                    crate::verbs::Psn::new(rtr.rq_psn),
                    rtr.max_dest_rd_atomic,
                    rtr.min_rnr_timer,
                ),
                QpAttr::rts(
                    crate::verbs::Psn::new(rts.sq_psn),
                    rts.timeout,
                    rts.retry_cnt,
                    rts.rnr_retry,
                    rts.max_rd_atomic,
                ),
            ] {
                ctx.modify_qp(qp, &a)
                    .map_err(|e| format!("modify_qp: {e}"))?;
            }
            psn = rtr.rq_psn;
        }
        let param = ucma::ConnParam {
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            qp_num: qp,
            qkey: if ud { UDP_QKEY } else { 0 },
            ..Default::default()
        };
        Self::cmd(host, Command::Accept { id, param })?;
        Ok(vec![
            ("qpn", format!("{qp:#x}")),
            ("rq_psn", format!("{psn:#x}")),
        ])
    }

    /// `cm_reject`: rdma_reject, no private data.
    pub fn reject(&mut self, host: &CmHost) -> Result<Kv, String> {
        let (id, _) = self.conn()?;
        Self::cmd(
            host,
            Command::Reject {
                id,
                private_data: vec![],
                reason: None,
            },
        )?;
        Ok(vec![])
    }

    /// `cm_disconnect`: rdma_disconnect (librdmacm first moves the QP to ERR).
    pub fn disconnect(&mut self, host: &CmHost, ctx: &Context) -> Result<Kv, String> {
        let (id, _) = self.conn()?;
        if let Some(&qp) = self.qps.last() {
            let _ = ctx.modify_qp(
                qp,
                &QpAttr {
                    state: Some(QpState::Err),
                    ..Default::default()
                },
            );
        }
        Self::cmd(host, Command::Disconnect { id })?;
        Ok(vec![])
    }

    /// `cm_destroy`: the connection's QP and id go, as when a program exits (its CM
    /// sends what the state calls for: a DREQ when established, a REJ before).
    pub fn destroy(&mut self, host: &CmHost, ctx: &Context) -> Result<Kv, String> {
        let (id, _) = self.conn()?;
        if let Some(qp) = self.qps.pop() {
            let _ = ctx.destroy_qp(qp);
        }
        Self::cmd(host, Command::DestroyId { id })?;
        self.conn = None;
        Ok(vec![])
    }

    /// Destroys the script's ids (as a program that exits: its connection's DREQ or REJ
    /// goes out) and QPs; its events go.
    pub fn reset(&mut self, host: &CmHost, ctx: &Context) {
        let ids: Vec<_> = self
            .conn
            .take()
            .into_iter()
            .chain(self.listen.drain(..))
            .map(|x| x.0)
            .collect();
        for id in ids {
            let _ = Self::cmd(host, Command::DestroyId { id });
        }
        for qp in self.qps.drain(..) {
            let _ = ctx.destroy_qp(qp);
        }
        if let Ok(mut sh) = host.shared.lock() {
            sh.clear_events();
        }
    }
}
