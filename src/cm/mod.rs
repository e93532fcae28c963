//! The connection manager: the IB CM (IBA chapter 12; Linux `drivers/infiniband/core/cm.c`)
//! with rdma_cm (`core/cma.c`, its service IDs and private-data header) on top, for one
//! device, sans-IO like the engine: commands from owners (processes), MADs from QP1 and
//! time in; MADs, events and deadlines out. It runs in the daemon, which owns the device's
//! QP1 (design wave3.md §3; docs/internals.md has its API).
//!
//! - [`ucma`]: the commands and events between a program's librdmacm and the manager.
//! - `id`: an rdma_cm id and its IB CM connection; `ports`: the bind tables; `addr`:
//!   binding, address and route resolution, listeners; `cmd`: the other commands;
//!   `conn`: the IB CM connection state machine (messages in, events out); `msgs`: the
//!   messages it sends; `sidr`: UD's service ID resolution; `qp_attr`: INIT_QP_ATTR;
//!   `timers`: the kernel's timer arithmetic; `stats`: counters; `errno`: the errors
//!   commands answer with (a leaf, so no module imports another's constants in a cycle).
//!
//! MADs are routed as quinn-proto's endpoint routes datagrams: by the communication ID the
//! message names (our Local Communication ID in the peer's Remote Communication ID field),
//! a REQ by its service ID to a listener, a SIDR_REP by its request ID.

mod addr;
mod cmd;
mod conn;
mod errno;
mod id;
mod msgs;
mod ports;
mod qp_attr;
mod relisten;
mod sidr;
mod stats;
pub mod timers;
pub mod ucma;

pub use stats::{CmStats, Drops, PerMsg};

/// The engine's time, the one time type of the sans-IO cores (a host of the manager
/// gives it `now` in it).
pub use crate::engine::Instant;
use crate::rng::Rng;
use crate::wire::cm::CmMad;
use id::{Id, RdmaState};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use ucma::{ConnParam, Event, EventKind, IdNum};

/// What the manager needs to know of its port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmConfig {
    /// The port's EUI-64 (REQ/REP Local CA GUID).
    pub node_guid: u64,
    /// The port's addresses (first = the one it sends from).
    pub addrs: Vec<IpAddr>,
    /// The port's IB path MTU in bytes (1024 for a 1500 link, 4096 for 9000).
    pub mtu: u32,
    /// PSNs, comm IDs, TIDs, ephemeral ports (deterministic for a seed).
    pub seed: u64,
}

/// One per CM client connection (a process), chosen by the host.
pub type Owner = u64;

/// QP1 at `remote`; `local` = our address it came to / leaves from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MadPeer {
    pub remote: IpAddr,
    pub local: IpAddr,
}

/// The host's answer to an address resolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub src: IpAddr,
    pub hop_limit: u8,
}

/// The high 32 bits of the TIDs we start (the kernel's MAD agent `hi_tid`).
const HI_TID: u64 = 1;

/// The connection manager of one device.
pub struct Cm {
    cfg: CmConfig,
    rng: Rng,
    ids: BTreeMap<IdNum, Id>,
    next_id: IdNum,
    /// Local communication ID -> id.
    by_comm: HashMap<u32, IdNum>,
    /// (remote communication ID, remote CA GUID) -> id: duplicate REQ and REP detection
    /// (`cm.remote_id_table`).
    remote_ids: HashMap<(u32, u64), IdNum>,
    /// (remote QPN, remote CA GUID) -> id: stale connection detection
    /// (`cm.remote_qp_table`).
    remote_qps: HashMap<(u32, u64), IdNum>,
    /// (request ID, peer address) -> id of a SIDR_REQ being answered (`remote_sidr_table`).
    sidr_remote: HashMap<(u32, IpAddr), IdNum>,
    ports: ports::Ports,
    next_comm: u32,
    comm_operand: u32,
    tx: VecDeque<(MadPeer, [u8; 256])>,
    events: VecDeque<(Owner, Event)>,
    resolves: VecDeque<(IdNum, Option<IpAddr>, IpAddr)>,
    stats: CmStats,
    /// REQs waiting for a listener that is about to come back (`relisten`).
    relisten: relisten::Relisten,
}

impl Cm {
    pub fn new(cfg: CmConfig) -> Cm {
        let mut rng = Rng::new(cfg.seed);
        let comm_operand = rng.next_u64() as u32;
        let next_comm = rng.next_u64() as u32;
        Cm {
            cfg,
            rng,
            ids: BTreeMap::new(),
            next_id: 1,
            by_comm: HashMap::new(),
            remote_ids: HashMap::new(),
            remote_qps: HashMap::new(),
            sidr_remote: HashMap::new(),
            ports: ports::Ports::default(),
            next_comm,
            comm_operand,
            tx: VecDeque::new(),
            events: VecDeque::new(),
            resolves: VecDeque::new(),
            stats: CmStats::default(),
            relisten: relisten::Relisten::default(),
        }
    }

    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }

    /// One command of `owner`; bad input is an `Errno` reply naming what is wrong.
    pub fn command(&mut self, now: Instant, owner: Owner, cmd: ucma::Command) -> ucma::Reply {
        match self.run_command(now, owner, cmd) {
            Ok(r) => r,
            Err((errno, what)) => ucma::Reply::Errno { errno, what },
        }
    }

    /// A 256-byte MAD received on QP1 (after BTH+DETH); bad input is a counted drop.
    pub fn handle_mad(&mut self, now: Instant, peer: MadPeer, mad: &[u8]) {
        self.recv_mad(now, peer, mad);
    }

    /// The process died or closed its connection: everything it had ends as if it had
    /// destroyed each id (DREQ its connections, REJ its pending connects, its listeners go).
    pub fn owner_gone(&mut self, now: Instant, owner: Owner) {
        let mine: Vec<IdNum> = self
            .ids
            .values()
            .filter(|i| i.owner == owner)
            .map(|i| i.num)
            .collect();
        for id in mine {
            self.destroy(now, id);
        }
        self.events.retain(|(o, _)| *o != owner);
    }

    /// The next MAD to send from QP1 to QP1 at `peer.remote`.
    pub fn poll_transmit(&mut self) -> Option<(MadPeer, [u8; 256])> {
        self.tx.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<(Owner, Event)> {
        let e = self.events.pop_front()?;
        // A connect request counts against its listener's backlog until its owner has it.
        if e.1.kind == EventKind::ConnectRequest {
            if let Some(i) = self.ids.get_mut(&e.1.id) {
                i.parent = None;
            }
        }
        self.stats.events += 1;
        Some(e)
    }

    /// An address the host must resolve: (id, the id's bound source if any, destination).
    pub fn poll_resolve(&mut self) -> Option<(IdNum, Option<IpAddr>, IpAddr)> {
        self.resolves.pop_front()
    }

    /// The host's answer for `id`: ADDR_RESOLVED or ADDR_ERROR (`errno` either sign).
    pub fn resolved(&mut self, now: Instant, id: IdNum, r: Result<Resolved, i32>) {
        self.addr_resolved(now, id, r);
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.ids
            .values()
            .flat_map(|i| {
                let c = i.conn.as_ref();
                [
                    i.resolve_deadline,
                    c.and_then(|c| c.msg.as_ref().map(|m| m.deadline)),
                    c.and_then(|c| c.timewait_until),
                ]
            })
            .flatten()
            .chain(self.relisten.next_deadline())
            .min()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<IdNum> = self
            .ids
            .values()
            .filter(|i| {
                let c = i.conn.as_ref();
                i.resolve_deadline.is_some_and(|d| d <= now)
                    || c.and_then(|c| c.msg.as_ref())
                        .is_some_and(|m| m.deadline <= now)
                    || c.and_then(|c| c.timewait_until).is_some_and(|d| d <= now)
            })
            .map(|i| i.num)
            .collect();
        for id in due {
            self.id_timeout(now, id);
        }
        for h in self.relisten.take_due(now) {
            // No listener came back in time: the REJ the REQ would have had at once.
            self.stats.reqs_held_rejected += 1;
            let tid = u64::from_be_bytes(h.mad[8..16].try_into().expect("8 bytes"));
            self.issue_rej(
                h.peer,
                tid,
                &h.mad,
                crate::wire::cm::RejReason::InvalidServiceId,
                crate::wire::cm::rej::REJECTED_REQ,
            );
        }
    }

    pub fn stats(&self) -> &CmStats {
        &self.stats
    }

    /// The rdma_cm and IB CM states of `id` (for tests and `roce-emu` diagnostics).
    pub fn id_state(&self, id: IdNum) -> Option<(String, String)> {
        self.ids
            .get(&id)
            .map(|i| (format!("{:?}", i.state), format!("{:?}", i.cm_state())))
    }

    /// How many ids the manager holds (all owners).
    pub fn id_count(&self) -> usize {
        self.ids.len()
    }

    // ---- shared helpers ----

    /// A fresh local communication ID (`cm_alloc_id_priv`: a cyclic counter XOR a random
    /// operand), never 0 and not in use.
    fn alloc_comm(&mut self) -> u32 {
        loop {
            self.next_comm = self.next_comm.wrapping_add(1);
            let c = self.next_comm ^ self.comm_operand;
            if c != 0 && !self.by_comm.contains_key(&c) {
                return c;
            }
        }
    }

    /// `cm_form_tid`: the agent's high TID and the local ID as the kernel stores it
    /// (big-endian bytes read as a little-endian u32, so the capture's comm ID 0x47d0da68
    /// makes TID ...68dad047).
    fn form_tid(local_id: u32) -> u64 {
        (HI_TID << 32) | u64::from(local_id.swap_bytes())
    }

    fn psn(&mut self) -> u32 {
        self.rng.next_u64() as u32 & 0x00ff_ffff
    }

    fn send(&mut self, peer: MadPeer, mad: &CmMad) -> [u8; 256] {
        let mut b = [0u8; 256];
        mad.emit(&mut b);
        self.stats.mads_out.bump(mad.header.attr_id);
        self.tx.push_back((peer, b));
        b
    }

    fn event(&mut self, id: IdNum, kind: EventKind, status: i32, param: Option<ConnParam>) {
        self.event_ah(id, kind, status, param, None);
    }

    fn event_ah(
        &mut self,
        id: IdNum,
        kind: EventKind,
        status: i32,
        param: Option<ConnParam>,
        ah: Option<ucma::Av>,
    ) {
        let Some(i) = self.ids.get(&id) else { return };
        let listen_id = if kind == EventKind::ConnectRequest {
            i.parent
        } else {
            None
        };
        let ev = Event {
            id,
            listen_id,
            kind,
            status,
            param,
            ah,
        };
        self.events.push_back((i.owner, ev));
    }

    /// Index of `ip`'s GID in the device's table as `verbs::gids::layout` lays it out: the
    /// default GID at 0, the port's address at 1, then the IPv4 and the IPv6 addresses.
    fn sgid_index(&self, ip: IpAddr) -> u8 {
        let a = &self.cfg.addrs;
        let mut order: Vec<IpAddr> = Vec::new();
        let first = a.first().copied();
        for x in first
            .into_iter()
            .chain(a.iter().copied().filter(|x| x.is_ipv4()))
            .chain(a.iter().copied().filter(|x| x.is_ipv6()))
        {
            if !order.contains(&x) {
                order.push(x);
            }
        }
        order
            .iter()
            .position(|&x| x == ip)
            .map_or(1, |p| (p + 1).min(255) as u8)
    }

    fn is_local(&self, ip: IpAddr) -> bool {
        self.cfg.addrs.contains(&ip)
    }

    /// The IB MTU code of the port (`iboe_get_mtu`).
    fn mtu_code(&self) -> u8 {
        match self.cfg.mtu {
            m if m >= 4096 => 5,
            m if m >= 2048 => 4,
            m if m >= 1024 => 3,
            m if m >= 512 => 2,
            _ => 1,
        }
    }

    /// Removes `id`'s connection from the routing tables (`cm_cleanup_timewait`).
    fn unlist_remote(&mut self, id: IdNum) {
        if let Some(c) = self.ids.get_mut(&id).and_then(|i| i.conn.as_mut()) {
            if c.in_remote_table {
                c.in_remote_table = false;
                let key = (c.remote_id, c.remote_guid);
                if self.remote_ids.get(&key) == Some(&id) {
                    self.remote_ids.remove(&key);
                }
                let qkey = (c.remote_qpn, c.remote_guid);
                if self.remote_qps.get(&qkey) == Some(&id) {
                    self.remote_qps.remove(&qkey);
                }
            }
        }
    }
}

/// States of the rdma_cm layer the IB CM events reach (`cma_ib_handler`'s check).
fn cma_takes(state: RdmaState, timewait_exit: bool) -> bool {
    if timewait_exit {
        state == RdmaState::Disconnect
    } else {
        state == RdmaState::Connect
    }
}
