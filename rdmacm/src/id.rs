//! `rdma_cm_id`s: what the library keeps for each (librdmacm's `cma_id_private`), the
//! table that maps a manager's id back to it, and the calls that make, bind, resolve,
//! listen on, move and destroy ids.
//!
//! An id lives on one device's connection manager from its first bind or resolve (the
//! kernel's `rdma_create_id` has no device yet either); a wildcard bind makes one
//! manager id on every device, so `rdma_listen` on `INADDR_ANY` listens everywhere.

use crate::addr;
use crate::channel::Channel;
use crate::errno::{cm as cm_err, err};
use crate::ffi::*;
use crate::ibv;
use roce_emu::cm::ucma::{self, CmOption, Command, IdNum, PortSpace, QpType, Reply};
use roce_emu::verbs::cm::{self as vcm, CmError, Conn, EventChannel};
use std::cell::UnsafeCell;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard};

/// One manager id of a library id: the connection (daemon), its number, the device.
#[derive(Clone)]
pub struct Handle {
    pub conn: Arc<Conn>,
    pub num: IdNum,
    pub dev: usize,
}

impl Handle {
    pub fn command(&self, cmd: Command) -> Result<Reply, CmError> {
        crate::ibv::send_held();
        self.conn.command(cmd)
    }
}

#[derive(Default)]
pub struct IdState {
    pub handles: Vec<Handle>,
    /// Made with a NULL channel: the calls wait for their own events (`ucma_complete`).
    pub sync: bool,
    /// Events handed to the program and acked (`events_completed`): destroy and migrate
    /// wait until every one handed out is acked.
    pub delivered: u64,
    pub completed: u64,
    /// Options set before the id had a manager id.
    pub options: Vec<CmOption>,
    /// `rdma_create_ep`'s QP attributes for requests (`rdma_get_request`).
    pub qp_init_attr: Option<ibv_qp_init_attr>,
    pub initiator_depth: u8,
    pub responder_resources: u8,
    /// CONNECT_RESPONSE failed: the REJECTED/DISCONNECTED that follow are swallowed.
    pub connect_error: bool,
    /// The device `id->verbs` is (set once).
    pub dev: Option<usize>,
    /// `route.path_rec`, ours.
    pub path: Option<Box<ibv_sa_path_rec>>,
}

/// A `struct rdma_cm_id` at the front of ours (programs see only the C part).
#[repr(C)]
pub struct CmId {
    pub c: UnsafeCell<rdma_cm_id>,
    pub st: Mutex<IdState>,
    pub cond: Condvar,
}

// SAFETY: the C part is the program's to read; the library writes it under the calls'
// own serialisation (as librdmacm); the rest is behind the mutex.
unsafe impl Sync for CmId {}
// SAFETY: as above.
unsafe impl Send for CmId {}

impl CmId {
    pub fn lock(&self) -> MutexGuard<'_, IdState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The C struct.
    pub fn c(&self) -> *mut rdma_cm_id {
        self.c.get()
    }

    /// The id's channel (ours: every `rdma_event_channel` is a `Channel`).
    pub fn channel(&self) -> &Channel {
        // SAFETY: id->channel is always a Channel this library made.
        unsafe { &*((*self.c()).channel as *const Channel) }
    }

    pub fn handles(&self) -> Vec<Handle> {
        self.lock().handles.clone()
    }

    /// The first manager id (EINVAL when the id has none yet).
    pub fn handle(&self) -> Result<Handle, i32> {
        self.lock().handles.first().cloned().ok_or(libc::EINVAL)
    }

    pub fn ps(&self) -> PortSpace {
        // SAFETY: the id's own field.
        let ps = unsafe { (*self.c()).ps };
        PortSpace::from_raw(ps).unwrap_or(PortSpace::Tcp)
    }

    pub fn qp_type(&self) -> QpType {
        // SAFETY: the id's own field.
        match unsafe { (*self.c()).qp_type } {
            ibv_qp_type::IBV_QPT_UD => QpType::Ud,
            ibv_qp_type::IBV_QPT_UC => QpType::Uc,
            _ => QpType::Rc,
        }
    }

    pub fn is_ud(&self) -> bool {
        self.qp_type() == QpType::Ud
    }

    /// Counts an acked event (`ucma_complete_event`).
    pub fn complete_event(&self) {
        self.lock().completed += 1;
        self.cond.notify_all();
    }

    /// Waits until every event handed out was acked.
    pub fn wait_acked(&self) {
        let mut st = self.lock();
        while st.completed < st.delivered {
            st = self.cond.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// The program's pointer as ours.
///
/// # Safety
/// `p` is an `rdma_cm_id*` this library returned and the program has not destroyed.
pub unsafe fn from_c<'a>(p: *mut rdma_cm_id) -> Option<&'a CmId> {
    // A pointer this library never made or has freed (perftest 4.5 calls
    // rdma_resolve_addr on such a one after a REJECTED connect) is EINVAL, as the
    // kernel answers a handle it does not know, not a read of whatever is there.
    if p.is_null() || !live().contains(&(p as usize)) {
        None
    } else {
        // SAFETY: the caller's promise: the C part is the front of a CmId.
        Some(unsafe { &*(p as *const CmId) })
    }
}

/// The ids made by [`alloc`] and not yet [`free`]d (their addresses).
fn live() -> MutexGuard<'static, HashSet<usize>> {
    static L: LazyLock<Mutex<HashSet<usize>>> = LazyLock::new(Default::default);
    L.lock().unwrap_or_else(|p| p.into_inner())
}

/// Manager ids to library ids: (connection, number) -> `CmId*`.
fn table() -> MutexGuard<'static, HashMap<(usize, IdNum), usize>> {
    static T: LazyLock<Mutex<HashMap<(usize, IdNum), usize>>> = LazyLock::new(Default::default);
    T.lock().unwrap_or_else(|p| p.into_inner())
}

fn key(conn: &Arc<Conn>, num: IdNum) -> (usize, IdNum) {
    (Arc::as_ptr(conn) as usize, num)
}

/// The library id of a manager id.
pub fn lookup(conn: &Arc<Conn>, num: IdNum) -> Option<&'static CmId> {
    let p = *table().get(&key(conn, num))?;
    // SAFETY: entries are removed before their id is freed (destroy).
    Some(unsafe { &*(p as *const CmId) })
}

/// Makes a library id on `channel` (`ucma_alloc_id`); a NULL channel makes a private one.
pub fn alloc(
    channel: *mut rdma_event_channel,
    context: *mut libc::c_void,
    ps: u32,
    qp_type: u32,
) -> Result<*mut CmId, i32> {
    let (channel, sync) = if channel.is_null() {
        (Channel::create()?, true)
    } else {
        (channel, false)
    };
    // SAFETY: rdma_cm_id is plain C data; all-zero is its "nothing yet" state.
    let mut c: rdma_cm_id = unsafe { std::mem::zeroed() };
    c.channel = channel;
    c.context = context;
    c.ps = ps;
    c.qp_type = qp_type;
    let id = Box::new(CmId {
        c: UnsafeCell::new(c),
        st: Mutex::new(IdState {
            sync,
            ..Default::default()
        }),
        cond: Condvar::new(),
    });
    let p = Box::into_raw(id);
    live().insert(p as usize);
    Ok(p)
}

/// Adds a manager id for `id` on device `dev` (CREATE_ID), routed to the id's channel,
/// with the options set so far.
pub fn attach(id: &CmId, dev: usize) -> Result<Handle, CmError> {
    let devs = ibv::devs()?;
    let path = vcm::daemon_of(&devs.list[dev].cm)?;
    let conn = vcm::connect(&path)?;
    let num = match conn.command(Command::CreateId {
        ps: id.ps(),
        qp_type: id.qp_type(),
    })? {
        Reply::Id { id } => id,
        r => return Err(unexpected(r)),
    };
    conn.route(num, &id.channel().ch);
    let h = Handle { conn, num, dev };
    table().insert(key(&h.conn, num), id as *const CmId as usize);
    let options = id.lock().options.clone();
    for option in options {
        h.command(Command::SetOption { id: num, option })?;
    }
    id.lock().handles.push(h.clone());
    Ok(h)
}

/// Ends one manager id: DESTROY_ID, no more routing, its queued events dropped; a
/// connect request never handed out takes its new id with it (the kernel's
/// `ucma_destroy_private_ctx` destroys the id of each such event).
pub fn detach(h: &Handle, channel: &EventChannel) {
    let _ = h.command(Command::DestroyId { id: h.num });
    h.conn.unroute(h.num);
    for d in channel.take_for(&h.conn, h.num) {
        if d.event.kind == ucma::EventKind::ConnectRequest && d.event.id != h.num {
            let _ = h.command(Command::DestroyId { id: d.event.id });
            h.conn.unroute(d.event.id);
        }
    }
    table().remove(&key(&h.conn, h.num));
}

pub fn unexpected(r: Reply) -> CmError {
    CmError::Errno {
        errno: libc::EPROTO,
        what: format!("unexpected reply {r:?}"),
    }
}

/// Fills the id's addresses, device and route from QUERY (`ucma_query_route`): sets
/// `verbs`/`pd`/`port_num` the first time the id has a device.
pub fn query(id: &CmId, h: &Handle) -> Result<(), i32> {
    let info = match h.command(Command::Query { id: h.num }) {
        Ok(Reply::Info(i)) => i,
        Ok(r) => return Err(unexpected(r).errno()),
        Err(e) => return Err(e.errno()),
    };
    let c = id.c();
    // SAFETY: the id's own C struct (route.addr's unions are 128-byte storages).
    unsafe {
        addr::write_to(&mut (*c).route.addr.__bindgen_anon_1, info.src);
        addr::write_to(&mut (*c).route.addr.__bindgen_anon_2, info.dst);
        let ib = &mut (*c).route.addr.addr.ibaddr;
        ib.sgid.raw = info.src.map(|a| ucma::ip_gid(a.ip())).unwrap_or([0; 16]);
        ib.dgid.raw = info.dst.map(|a| ucma::ip_gid(a.ip())).unwrap_or([0; 16]);
        ib.pkey = info.pkey.to_be();
    }
    let mut st = id.lock();
    if let Some(p) = info.path {
        let rec = st.path.get_or_insert_with(|| {
            // SAFETY: ibv_sa_path_rec is plain C data.
            Box::new(unsafe { std::mem::zeroed() })
        });
        fill_path(rec, &p);
        let ptr: *mut ibv_sa_path_rec = &mut **rec;
        // SAFETY: the id's own C struct; the record lives as long as the id.
        unsafe {
            (*c).route.path_rec = ptr;
            (*c).route.num_paths = 1;
        }
    }
    if st.dev.is_none() && info.node_guid != 0 {
        let devs = ibv::devs().map_err(|e| e.errno())?;
        let o = devs.list[h.dev].open()?;
        st.dev = Some(h.dev);
        // SAFETY: the id's own C struct.
        unsafe {
            (*c).verbs = o.ctx;
            (*c).pd = o.pd;
            (*c).port_num = info.port_num.max(1);
        }
    }
    Ok(())
}

/// `ucma_convert_path`: the manager's path as `struct ibv_sa_path_rec` (network order).
fn fill_path(r: &mut ibv_sa_path_rec, p: &ucma::Path) {
    r.dgid.raw = p.dgid;
    r.sgid.raw = p.sgid;
    r.flow_label = p.flow_label.to_be();
    r.hop_limit = p.hop_limit;
    r.traffic_class = p.traffic_class;
    r.reversible = 1;
    r.numb_path = 1;
    r.pkey = p.pkey.to_be();
    r.sl = p.sl;
    r.mtu_selector = 2;
    r.mtu = p.mtu;
    r.rate_selector = 2;
    r.rate = p.rate;
    r.packet_life_time_selector = 2;
    r.packet_life_time = p.packet_life_time;
}

/// A loopback address no device holds stands for the first device's address (of its
/// family), as the kernel's rdma_cm binds and resolves loopback on the first active device
/// (`cma_bind_loopback`, `cma_resolve_loopback`): libfabric binds 127.0.0.1.
pub fn unloop(a: SocketAddr) -> SocketAddr {
    let Ok(devs) = ibv::devs() else {
        return a;
    };
    if !a.ip().is_loopback() || devs.list.iter().any(|d| d.cm.addrs.contains(&a.ip())) {
        return a;
    }
    devs.list
        .iter()
        .flat_map(|d| d.cm.addrs.iter())
        .find(|ip| ip.is_ipv4() == a.is_ipv4())
        .map(|ip| SocketAddr::new(*ip, a.port()))
        .unwrap_or(a)
}

/// `rdma_bind_addr`: a specific address binds on the device holding it; the wildcard on
/// every device (the first one's port, an ephemeral one for port 0, for the others).
pub fn bind(id: &CmId, a: SocketAddr) -> i32 {
    if !id.lock().handles.is_empty() {
        return err(libc::EINVAL);
    }
    let devs = match ibv::devs() {
        Ok(d) => d,
        Err(e) => return cm_err("rdma_bind_addr", &e),
    };
    let a = unloop(a);
    let targets: Vec<usize> = if addr::is_any(a.ip()) {
        (0..devs.list.len()).collect()
    } else {
        match vcm::by_src(
            &devs.list.iter().map(|d| d.cm.clone()).collect::<Vec<_>>(),
            a.ip(),
        ) {
            Ok(i) => vec![i],
            Err(e) => return cm_err("rdma_bind_addr", &e),
        }
    };
    let mut bound: Option<SocketAddr> = None;
    let mut first_err = None;
    for dev in targets {
        let r = attach(id, dev).and_then(|h| {
            let want = match bound {
                Some(b) if a.port() == 0 => SocketAddr::new(a.ip(), b.port()),
                _ => a,
            };
            match h.command(Command::Bind {
                id: h.num,
                addr: want,
            }) {
                Ok(Reply::Bound { addr }) => Ok(addr),
                Ok(r) => Err(unexpected(r)),
                Err(e) => {
                    detach(&h, &id.channel().ch);
                    id.lock()
                        .handles
                        .retain(|x| x.num != h.num || !Arc::ptr_eq(&x.conn, &h.conn));
                    Err(e)
                }
            }
        });
        match r {
            Ok(b) => bound = bound.or(Some(b)),
            Err(e) => {
                tracing::debug!("rdma_bind_addr on device {dev}: {e}");
                first_err.get_or_insert(e);
            }
        }
    }
    let Some(b) = bound else {
        return cm_err("rdma_bind_addr", &first_err.expect("a device was tried"));
    };
    if addr::is_any(a.ip()) {
        // SAFETY: the id's own C struct.
        unsafe { addr::write_to(&mut (*id.c()).route.addr.__bindgen_anon_1, Some(b)) };
        return 0;
    }
    match id.handle().and_then(|h| query(id, &h)) {
        Ok(()) => 0,
        Err(e) => err(e),
    }
}

/// Gives the id one manager id on the device the destination is reached through (and
/// drops the others of a wildcard bind).
pub fn settle(id: &CmId, src: Option<SocketAddr>, dst: SocketAddr) -> Result<Handle, CmError> {
    let devs = ibv::devs()?;
    let cms: Vec<_> = devs.list.iter().map(|d| d.cm.clone()).collect();
    let dev = match src {
        Some(s) if !addr::is_any(s.ip()) => vcm::by_src(&cms, s.ip())?,
        _ => vcm::by_dst(&cms, dst.ip())?,
    };
    let hs = id.handles();
    if hs.is_empty() {
        return attach(id, dev);
    }
    let keep = hs.iter().find(|h| h.dev == dev).unwrap_or(&hs[0]).clone();
    for h in hs
        .iter()
        .filter(|h| h.num != keep.num || !Arc::ptr_eq(&h.conn, &keep.conn))
    {
        detach(h, &id.channel().ch);
    }
    id.lock().handles = vec![keep.clone()];
    Ok(keep)
}

/// Frees an id (after the manager forgot it and its events were acked).
///
/// # Safety
/// `p` came from [`alloc`] and nothing uses it any more.
pub unsafe fn free(p: *mut CmId) {
    live().remove(&(p as usize));
    // SAFETY: the caller's promise.
    let id = unsafe { Box::from_raw(p) };
    let sync = id.lock().sync;
    if sync {
        // SAFETY: a sync id's channel is its own, made by alloc.
        unsafe { Channel::destroy((*id.c()).channel) };
    }
}

/// Takes a manager id made by the manager (a connect request's) as `id`'s.
pub fn adopt(id: &CmId, h: Handle) {
    table().insert(key(&h.conn, h.num), id as *const CmId as usize);
    id.lock().handles.push(h);
}
