//! A deterministic virtual-time network of connection managers (`roce_emu::cm::Cm`), one
//! per "host", for the CM tests: MADs go from a host's `poll_transmit` to the host owning
//! `peer.remote` (itself for loopback) after a fixed delay, through an optional fault
//! function (drop, duplicate); address resolutions are answered at once from the hosts'
//! addresses; events are collected per host. No clock: time moves to the next delivery or
//! deadline.

use roce_emu::cm::ucma::{
    Command, ConnParam, Event, EventKind, IdNum, PortSpace, QpAttrs, QpState, QpType, Reply,
};
use roce_emu::cm::{Cm, CmConfig, MadPeer, Owner, Resolved};
use roce_emu::engine::Instant;
use roce_emu::wire::cm::CmMad;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// What happens to one MAD on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Deliver,
    Drop,
    Duplicate,
}

/// One MAD seen on the wire.
#[derive(Debug, Clone)]
pub struct Wire {
    pub at: Instant,
    pub from: usize,
    pub to: usize,
    pub mad: CmMad,
    pub bytes: [u8; 256],
    pub fate: Fate,
}

pub type Fault = Box<dyn FnMut(&Wire) -> Fate>;

pub struct Net {
    pub now: Instant,
    pub hosts: Vec<Cm>,
    pub addrs: Vec<IpAddr>,
    /// More addresses: (address, host).
    pub extra: Vec<(IpAddr, usize)>,
    pub delay: Duration,
    flight: Vec<(Instant, u64, usize, MadPeer, [u8; 256])>,
    seq: u64,
    pub fault: Option<Fault>,
    /// Every event, in order: (host, owner, event, time).
    pub events: Vec<(usize, Owner, Event, Instant)>,
    /// Every MAD sent.
    pub wire: Vec<Wire>,
}

pub fn v4(a: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 18, 0, a))
}

pub fn guid(h: usize) -> u64 {
    0x5054_00ff_fe4c_ab00 | (h as u64 + 1)
}

impl Net {
    /// Hosts at 198.18.0.11, .12, ... with the capture's node GUIDs.
    pub fn new(n: usize, seed: u64) -> Net {
        let addrs: Vec<IpAddr> = (0..n).map(|i| v4(11 + i as u8)).collect();
        let hosts = (0..n)
            .map(|i| {
                Cm::new(CmConfig {
                    node_guid: guid(i),
                    addrs: vec![addrs[i]],
                    mtu: 1024,
                    seed: seed.wrapping_mul(31).wrapping_add(i as u64),
                })
            })
            .collect();
        Net {
            now: Instant::from_nanos(1_000_000_000),
            hosts,
            addrs,
            extra: Vec::new(),
            delay: Duration::from_micros(100),
            flight: Vec::new(),
            seq: 0,
            fault: None,
            events: Vec::new(),
            wire: Vec::new(),
        }
    }

    pub fn cmd(&mut self, h: usize, owner: Owner, c: Command) -> Reply {
        let r = self.hosts[h].command(self.now, owner, c);
        self.pump();
        r
    }

    /// Drains every host's outputs (MADs onto the wire, resolutions answered, events
    /// collected) until nothing moves at this instant.
    pub fn pump(&mut self) {
        loop {
            let mut moved = false;
            for h in 0..self.hosts.len() {
                while let Some((peer, bytes)) = self.hosts[h].poll_transmit() {
                    moved = true;
                    let to = self
                        .host_of(peer.remote)
                        .expect("a MAD to a host of the net");
                    let mad = CmMad::parse(&bytes).expect("the manager emits valid MADs");
                    let mut w = Wire {
                        at: self.now,
                        from: h,
                        to,
                        mad,
                        bytes,
                        fate: Fate::Deliver,
                    };
                    if let Some(f) = self.fault.as_mut() {
                        w.fate = f(&w);
                    }
                    let back = MadPeer {
                        remote: peer.local,
                        local: peer.remote,
                    };
                    let copies = match w.fate {
                        Fate::Deliver => 1,
                        Fate::Drop => 0,
                        Fate::Duplicate => 2,
                    };
                    for _ in 0..copies {
                        self.seq += 1;
                        self.flight.push((
                            self.now.saturating_add(self.delay),
                            self.seq,
                            to,
                            back,
                            bytes,
                        ));
                    }
                    self.wire.push(w);
                }
                while let Some((id, src, dst)) = self.hosts[h].poll_resolve() {
                    moved = true;
                    let r = if self.host_of(dst).is_some() {
                        Ok(Resolved {
                            src: src.unwrap_or(if self.host_of(dst) == Some(h) {
                                dst
                            } else {
                                self.addr_like(h, dst)
                            }),
                            hop_limit: 64,
                        })
                    } else {
                        Err(101) // ENETUNREACH
                    };
                    self.hosts[h].resolved(self.now, id, r);
                }
                while let Some((o, e)) = self.hosts[h].poll_event() {
                    moved = true;
                    self.events.push((h, o, e, self.now));
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// The host an address belongs to (its first address, or one in `extra`).
    pub fn host_of(&self, ip: IpAddr) -> Option<usize> {
        self.addrs
            .iter()
            .position(|&a| a == ip)
            .or_else(|| self.extra.iter().find(|e| e.0 == ip).map(|e| e.1))
    }

    /// Host `h`'s first address of `like`'s family (the route's source).
    pub fn addr_like(&self, h: usize, like: IpAddr) -> IpAddr {
        std::iter::once(self.addrs[h])
            .chain(self.extra.iter().filter(|e| e.1 == h).map(|e| e.0))
            .find(|a| a.is_ipv4() == like.is_ipv4())
            .unwrap_or(self.addrs[h])
    }

    /// Gives host `h` a second address (a new manager with both; before any id exists).
    pub fn add_addr(&mut self, h: usize, ip: IpAddr) {
        self.extra.push((ip, h));
        let mut addrs = vec![self.addrs[h]];
        addrs.extend(self.extra.iter().filter(|e| e.1 == h).map(|e| e.0));
        self.hosts[h] = Cm::new(CmConfig {
            node_guid: guid(h),
            addrs,
            mtu: 1024,
            seed: h as u64 + 7,
        });
    }

    /// The next instant something happens (a delivery or a deadline).
    pub fn next_at(&self) -> Option<Instant> {
        let d = self.flight.iter().map(|f| f.0).min();
        let t = self.hosts.iter().filter_map(|h| h.poll_timeout()).min();
        [d, t].into_iter().flatten().min()
    }

    /// Moves time to the next happening and runs it. False if nothing is left.
    pub fn step(&mut self) -> bool {
        self.pump();
        let Some(at) = self.next_at() else {
            return false;
        };
        self.now = self.now.max(at);
        let now = self.now;
        let mut due: Vec<_> = Vec::new();
        self.flight.retain(|f| {
            if f.0 <= now {
                due.push(*f);
                false
            } else {
                true
            }
        });
        due.sort_by_key(|f| (f.0, f.1));
        for (_, _, to, peer, bytes) in due {
            self.hosts[to].handle_mad(now, peer, &bytes);
            self.pump();
        }
        for h in 0..self.hosts.len() {
            if self.hosts[h].poll_timeout().is_some_and(|t| t <= now) {
                self.hosts[h].handle_timeout(now);
                assert!(
                    self.hosts[h].poll_timeout().is_none_or(|t| t > now),
                    "host {h}: a passed deadline is left after handle_timeout"
                );
            }
        }
        self.pump();
        true
    }

    /// Steps until `done` or `limit` of virtual time passes; true if `done`.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Net) -> bool) -> bool {
        let end = self.now.saturating_add(limit);
        for _ in 0..1_000_000 {
            if done(self) {
                return true;
            }
            match self.next_at() {
                Some(t) if t <= end => {
                    self.step();
                }
                _ => {
                    self.now = self.now.max(end);
                    return done(self);
                }
            }
        }
        panic!("run_until: a million steps");
    }

    /// Runs until no MAD is in flight and no deadline is left (or `limit` passes).
    pub fn settle(&mut self, limit: Duration) {
        self.run_until(limit, |n| n.next_at().is_none());
    }

    pub fn advance(&mut self, d: Duration) {
        let end = self.now.saturating_add(d);
        self.run_until(d, |n| n.now >= end);
    }

    /// The first event of `kind` for `id` on host `h`.
    pub fn event(&self, h: usize, id: IdNum, kind: EventKind) -> Option<&Event> {
        self.events
            .iter()
            .find(|(hh, _, e, _)| *hh == h && e.id == id && e.kind == kind)
            .map(|(_, _, e, _)| e)
    }

    pub fn count(&self, h: usize, id: IdNum, kind: EventKind) -> usize {
        self.events
            .iter()
            .filter(|(hh, _, e, _)| *hh == h && e.id == id && e.kind == kind)
            .count()
    }

    /// Every event kind of `id` on `h`, in order.
    pub fn kinds(&self, h: usize, id: IdNum) -> Vec<EventKind> {
        self.events
            .iter()
            .filter(|(hh, _, e, _)| *hh == h && e.id == id)
            .map(|(_, _, e, _)| e.kind)
            .collect()
    }

    /// The MADs of one message kind (attribute ID) sent by `from`.
    pub fn sent(&self, from: usize, attr: u16) -> Vec<&Wire> {
        self.wire
            .iter()
            .filter(|w| w.from == from && w.mad.header.attr_id == attr)
            .collect()
    }

    pub fn create(&mut self, h: usize, owner: Owner, ps: PortSpace) -> IdNum {
        match self.cmd(
            h,
            owner,
            Command::CreateId {
                ps,
                qp_type: QpType::Rc,
            },
        ) {
            Reply::Id { id } => id,
            r => panic!("create_id: {r:?}"),
        }
    }

    /// A listener of `owner` on host `h`, `ip` (None: any) and `port`.
    pub fn listen(
        &mut self,
        h: usize,
        owner: Owner,
        ps: PortSpace,
        ip: Option<IpAddr>,
        port: u16,
    ) -> IdNum {
        let id = self.create(h, owner, ps);
        let ip = ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let r = self.cmd(
            h,
            owner,
            Command::Bind {
                id,
                addr: SocketAddr::new(ip, port),
            },
        );
        assert!(matches!(r, Reply::Bound { .. }), "bind: {r:?}");
        let r = self.cmd(h, owner, Command::Listen { id, backlog: 8 });
        assert_eq!(r, Reply::Done);
        id
    }

    /// An id of `owner` on `h` resolved (address and route) towards `dst`.
    pub fn resolved_id(&mut self, h: usize, owner: Owner, ps: PortSpace, dst: SocketAddr) -> IdNum {
        let id = self.create(h, owner, ps);
        let r = self.cmd(
            h,
            owner,
            Command::ResolveAddr {
                id,
                src: None,
                dst,
                timeout_ms: 2000,
            },
        );
        assert_eq!(r, Reply::Done);
        assert!(
            self.event(h, id, EventKind::AddrResolved).is_some(),
            "{:?}",
            self.kinds(h, id)
        );
        let r = self.cmd(
            h,
            owner,
            Command::ResolveRoute {
                id,
                timeout_ms: 2000,
            },
        );
        assert_eq!(r, Reply::Done);
        assert!(self.event(h, id, EventKind::RouteResolved).is_some());
        id
    }

    /// Connects a new id of `owner` on `h` to `dst` with `param`; returns the id.
    pub fn connect(
        &mut self,
        h: usize,
        owner: Owner,
        ps: PortSpace,
        dst: SocketAddr,
        param: ConnParam,
    ) -> IdNum {
        let id = self.resolved_id(h, owner, ps, dst);
        let r = self.cmd(h, owner, Command::Connect { id, param });
        assert_eq!(r, Reply::Done);
        id
    }

    /// The CONNECT_REQUEST event on `h` for `listener`, if any (the newest).
    pub fn request(&self, h: usize, listener: IdNum) -> Option<&Event> {
        self.events
            .iter()
            .rev()
            .find(|(hh, _, e, _)| {
                *hh == h && e.kind == EventKind::ConnectRequest && e.listen_id == Some(listener)
            })
            .map(|(_, _, e, _)| e)
    }
}

/// The parameters rping gives (responder resources / initiator depth 1, retries 7).
pub fn rping_param(qp_num: u32, pd: &[u8]) -> ConnParam {
    ConnParam {
        private_data: pd.to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        qp_num,
        qkey: 0,
    }
}

// ---- the usual two hosts: a server (host 0, 198.18.0.11) and a client (host 1) ----

pub const SERVER: usize = 0;
pub const CLIENT: usize = 1;
pub const SO: u64 = 100; // server owner
pub const CO: u64 = 200; // client owner
pub const PORT: u16 = 7174;

pub fn dst() -> SocketAddr {
    SocketAddr::new(v4(11), PORT)
}

pub fn attrs(net: &mut Net, h: usize, owner: u64, id: IdNum, state: QpState) -> QpAttrs {
    match net.cmd(h, owner, Command::InitQpAttr { id, state }) {
        Reply::QpAttrs(a) => a,
        r => panic!("init_qp_attr {state:?}: {r:?}"),
    }
}

pub fn errno(r: Reply) -> i32 {
    match r {
        Reply::Errno { errno, .. } => errno,
        r => panic!("expected an error, got {r:?}"),
    }
}

/// Listener on the server, client connect; returns (listener, client id, server child).
pub fn request(net: &mut Net, pd: &[u8]) -> (IdNum, IdNum, IdNum) {
    let l = net.listen(SERVER, SO, PortSpace::Tcp, None, PORT);
    let c = net.connect(CLIENT, CO, PortSpace::Tcp, dst(), rping_param(0x11, pd));
    assert!(net.run_until(Duration::from_secs(1), |n| n.request(SERVER, l).is_some()));
    let child = net.request(SERVER, l).unwrap().id;
    (l, c, child)
}

/// The whole handshake, as librdmacm drives it; returns (client id, server child).
pub fn establish(net: &mut Net) -> (IdNum, IdNum) {
    let (_, c, s) = request(net, b"req");
    net.cmd(
        SERVER,
        SO,
        Command::Accept {
            id: s,
            param: rping_param(0x22, b"rep"),
        },
    );
    assert!(net.run_until(Duration::from_secs(30), |n| n
        .event(CLIENT, c, EventKind::ConnectResponse)
        .is_some()));
    assert_eq!(
        net.cmd(
            CLIENT,
            CO,
            Command::Accept {
                id: c,
                param: ConnParam::default()
            }
        ),
        Reply::Done
    );
    assert!(net.run_until(Duration::from_secs(30), |n| n
        .event(SERVER, s, EventKind::Established)
        .is_some()));
    (c, s)
}
