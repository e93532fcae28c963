//! `rdma_get_cm_event` / `rdma_ack_cm_event` and what librdmacm does to an event before
//! the program sees it (`cma.c`): ADDR/ROUTE_RESOLVED query the id (its device, `verbs`,
//! `pd`, route); CONNECT_REQUEST makes the new id; CONNECT_RESPONSE on an id with a QP
//! moves it to RTR and RTS and sends the RTU (ACCEPT), so the program sees ESTABLISHED;
//! REJECTED moves the QP to ERR.

use crate::channel::Channel;
use crate::errno::err;
use crate::evt::{ack, Evt};
use crate::ffi::*;
use crate::guard;
use crate::id::{self, CmId, Handle};
use crate::qpstate::{modify_qp_err, process_conn_resp};
use libc::{c_char, c_int};
use roce_emu::cm::ucma::{self, Command, EventKind};
use roce_emu::verbs::cm::Delivered;
use std::sync::Arc;

fn kind_raw(k: EventKind) -> u32 {
    k as u32
}

/// Copies the peer's connection parameters (`ucma_copy_conn_event`).
fn copy_conn(e: &mut Evt, p: &Option<ucma::ConnParam>) {
    let Some(p) = p else { return };
    let n = p.private_data.len().min(e.private_data.len());
    e.private_data[..n].copy_from_slice(&p.private_data[..n]);
    // SAFETY: writing the conn member of the param union (plain data).
    let c = unsafe { &mut e.c.param.conn };
    c.private_data_len = n as u8;
    c.private_data = if n > 0 {
        e.private_data.as_ptr() as *const _
    } else {
        std::ptr::null()
    };
    c.responder_resources = p.responder_resources;
    c.initiator_depth = p.initiator_depth;
    c.flow_control = p.flow_control;
    c.retry_count = p.retry_count;
    c.rnr_retry_count = p.rnr_retry_count;
    c.srq = p.srq as u8;
    c.qp_num = p.qp_num;
}

/// Copies a UD event's parameters (`ucma_copy_ud_event`): the peer's QPN, Q_Key and the
/// address vector to reach it.
fn copy_ud(e: &mut Evt, p: &Option<ucma::ConnParam>, av: &Option<ucma::Av>) {
    let (pd, qpn, qkey) = match p {
        Some(p) => (p.private_data.as_slice(), p.qp_num, p.qkey),
        None => (&[][..], 0, 0),
    };
    let n = pd.len().min(e.private_data.len());
    e.private_data[..n].copy_from_slice(&pd[..n]);
    let ptr = e.private_data.as_ptr();
    // SAFETY: writing the ud member of the param union (plain data).
    let u = unsafe { &mut e.c.param.ud };
    u.private_data_len = n as u8;
    u.private_data = if n > 0 {
        ptr as *const _
    } else {
        std::ptr::null()
    };
    u.qp_num = qpn;
    u.qkey = qkey;
    if let Some(av) = av {
        u.ah_attr.is_global = 1;
        u.ah_attr.grh.dgid.raw = av.dgid;
        u.ah_attr.grh.sgid_index = av.sgid_index;
        u.ah_attr.grh.flow_label = av.flow_label;
        u.ah_attr.grh.hop_limit = av.hop_limit;
        u.ah_attr.grh.traffic_class = av.traffic_class;
        u.ah_attr.sl = av.sl;
        u.ah_attr.port_num = av.port_num.max(1);
    }
}

/// The library id an event belongs to (the listener's for a request).
fn owner_of(d: &Delivered) -> Option<&'static CmId> {
    let num = match (d.event.kind, d.event.listen_id) {
        (EventKind::ConnectRequest, Some(l)) => l,
        _ => d.event.id,
    };
    id::lookup(&d.conn, num)
}

/// `ucma_process_conn_req`: the new id, on the listener's channel (a private one for a
/// synchronous listener), queried for its device and route.
fn conn_req(listener: &CmId, d: &Delivered) -> Result<*mut CmId, i32> {
    let lc = listener.c();
    // SAFETY: the listener's own C struct.
    let (channel, context, ps, qp_type) =
        unsafe { ((*lc).channel, (*lc).context, (*lc).ps, (*lc).qp_type) };
    let dev = listener
        .handles()
        .iter()
        .find(|h| Arc::ptr_eq(&h.conn, &d.conn))
        .map(|h| h.dev)
        .unwrap_or(0);
    let h = Handle {
        conn: d.conn.clone(),
        num: d.event.id,
        dev,
    };
    let child = match id::alloc(channel, context, ps, qp_type) {
        Ok(c) => c,
        Err(e) => {
            let _ = h.command(Command::DestroyId { id: h.num });
            h.conn.unroute(h.num);
            return Err(e);
        }
    };
    // SAFETY: just made.
    let cid = unsafe { &*child };
    id::adopt(cid, h.clone());
    {
        let mut st = cid.lock();
        if let Some(p) = &d.event.param {
            st.initiator_depth = p.initiator_depth;
            st.responder_resources = p.responder_resources;
        }
    }
    let sync = listener.lock().sync;
    let r = if sync {
        crate::teardown::migrate(cid, std::ptr::null_mut())
    } else {
        Ok(())
    }
    .and_then(|()| id::query(cid, &h));
    if let Err(e) = r {
        crate::teardown::destroy(child);
        return Err(e);
    }
    Ok(child)
}

/// Takes the next event of `channel` and processes it as librdmacm does.
fn next(ch: &Channel) -> Result<*mut rdma_cm_event, i32> {
    loop {
        let d = ch.ch.get().map_err(|e| {
            tracing::debug!("rdma_get_cm_event: {e}");
            e.raw_os_error().unwrap_or(libc::EIO)
        })?;
        let Some(owner) = owner_of(&d) else {
            // An id destroyed meanwhile; a request for a listener that went: end the new id.
            if d.event.kind == EventKind::ConnectRequest {
                let _ = d.conn.command(Command::DestroyId { id: d.event.id });
                d.conn.unroute(d.event.id);
            }
            continue;
        };
        owner.lock().delivered += 1;
        let mut e = Box::new(Evt {
            // SAFETY: rdma_cm_event is plain C data; all-zero is its empty state.
            c: unsafe { std::mem::zeroed() },
            owner,
            private_data: [0; ucma::MAX_PRIVATE_DATA],
        });
        e.c.id = owner.c();
        e.c.event = kind_raw(d.event.kind);
        e.c.status = d.event.status;
        let ud = owner.is_ud();
        match d.event.kind {
            EventKind::AddrResolved | EventKind::RouteResolved => {
                let r = owner.handle().and_then(|h| id::query(owner, &h));
                // SAFETY: the owner's C struct.
                if r.is_ok() && unsafe { (*owner.c()).verbs }.is_null() {
                    e.c.status = -libc::ENODEV;
                    e.c.event = kind_raw(error_of(d.event.kind));
                } else if let Err(x) = r {
                    e.c.status = -x;
                    e.c.event = kind_raw(error_of(d.event.kind));
                }
            }
            EventKind::ConnectRequest => {
                if ud {
                    copy_ud(&mut e, &d.event.param, &d.event.ah);
                } else {
                    copy_conn(&mut e, &d.event.param);
                }
                match conn_req(owner, &d) {
                    Ok(child) => {
                        e.c.listen_id = owner.c();
                        // SAFETY: just made.
                        e.c.id = unsafe { (*child).c() };
                    }
                    Err(_) => {
                        owner.complete_event();
                        continue;
                    }
                }
            }
            EventKind::ConnectResponse => {
                copy_conn(&mut e, &d.event.param);
                // SAFETY: the owner's C struct.
                if !unsafe { (*owner.c()).qp }.is_null() {
                    match process_conn_resp(owner) {
                        Ok(()) => e.c.event = kind_raw(EventKind::Established),
                        Err(x) => {
                            e.c.status = -x;
                            e.c.event = kind_raw(EventKind::ConnectError);
                            owner.lock().connect_error = true;
                        }
                    }
                }
            }
            EventKind::Established if ud => copy_ud(&mut e, &d.event.param, &d.event.ah),
            EventKind::Rejected | EventKind::Disconnected => {
                if owner.lock().connect_error {
                    owner.complete_event();
                    continue;
                }
                copy_conn(&mut e, &d.event.param);
                if d.event.kind == EventKind::Rejected {
                    modify_qp_err(owner);
                }
            }
            _ if ud => copy_ud(&mut e, &d.event.param, &d.event.ah),
            _ => copy_conn(&mut e, &d.event.param),
        }
        return Ok(Box::into_raw(e) as *mut rdma_cm_event);
    }
}

fn error_of(k: EventKind) -> EventKind {
    match k {
        EventKind::AddrResolved => EventKind::AddrError,
        _ => EventKind::RouteError,
    }
}

/// `ucma_complete`: a synchronous id waits for its own event; a failed one is the call's
/// error (REJECTED: ECONNREFUSED).
pub fn complete(id: &CmId) -> c_int {
    if !id.lock().sync {
        return 0;
    }
    let c = id.c();
    // SAFETY: the id's own C struct.
    let prev = unsafe { (*c).event };
    if !prev.is_null() {
        ack(prev);
        // SAFETY: as above.
        unsafe { (*c).event = std::ptr::null_mut() };
    }
    let ev = match next(id.channel()) {
        Ok(ev) => ev,
        Err(e) => return err(e),
    };
    // SAFETY: as above; ev is the event just made.
    unsafe { (*c).event = ev };
    // SAFETY: ev is ours.
    let (kind, status) = unsafe { ((*ev).event, (*ev).status) };
    if status != 0 {
        if kind == EventKind::Rejected as u32 {
            return err(libc::ECONNREFUSED);
        }
        return err(status.abs());
    }
    0
}

/// # Safety
/// `channel` is a live channel of this library, `event` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    guard::minus_one("rdma_get_cm_event", || {
        if channel.is_null() || event.is_null() {
            return err(libc::EINVAL);
        }
        // The program may sleep here: what its NICs hold back leaves first.
        crate::ibv::send_held();
        // SAFETY: the caller's promise.
        let ch = unsafe { Channel::from_c(channel) };
        match next(ch) {
            Ok(ev) => {
                // SAFETY: the caller's promise.
                unsafe { *event = ev };
                0
            }
            Err(e) => err(e),
        }
    })
}

/// # Safety
/// `event` came from `rdma_get_cm_event` and is acked once.
#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    guard::minus_one("rdma_ack_cm_event", || {
        if event.is_null() {
            return err(libc::EINVAL);
        }
        ack(event);
        0
    })
}

/// The names, as librdmacm 44's (static strings; rdma_cma.h 44 ends at TIMEWAIT_EXIT).
#[no_mangle]
pub extern "C" fn rdma_event_str(event: u32) -> *const c_char {
    guard::null_const("rdma_event_str", || {
        let s: &'static [u8] = match event {
            0 => b"RDMA_CM_EVENT_ADDR_RESOLVED\0",
            1 => b"RDMA_CM_EVENT_ADDR_ERROR\0",
            2 => b"RDMA_CM_EVENT_ROUTE_RESOLVED\0",
            3 => b"RDMA_CM_EVENT_ROUTE_ERROR\0",
            4 => b"RDMA_CM_EVENT_CONNECT_REQUEST\0",
            5 => b"RDMA_CM_EVENT_CONNECT_RESPONSE\0",
            6 => b"RDMA_CM_EVENT_CONNECT_ERROR\0",
            7 => b"RDMA_CM_EVENT_UNREACHABLE\0",
            8 => b"RDMA_CM_EVENT_REJECTED\0",
            9 => b"RDMA_CM_EVENT_ESTABLISHED\0",
            10 => b"RDMA_CM_EVENT_DISCONNECTED\0",
            11 => b"RDMA_CM_EVENT_DEVICE_REMOVAL\0",
            12 => b"RDMA_CM_EVENT_MULTICAST_JOIN\0",
            13 => b"RDMA_CM_EVENT_MULTICAST_ERROR\0",
            14 => b"RDMA_CM_EVENT_ADDR_CHANGE\0",
            15 => b"RDMA_CM_EVENT_TIMEWAIT_EXIT\0",
            _ => b"UNKNOWN EVENT\0",
        };
        s.as_ptr() as *const c_char
    })
}
