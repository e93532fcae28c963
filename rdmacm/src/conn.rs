//! rdma_connect, rdma_accept, rdma_reject(_ece), rdma_disconnect, rdma_establish,
//! rdma_init_qp_attr, rdma_notify and the QP moves librdmacm makes for the program:
//! INIT at create, RTR and RTS before ACCEPT (passive) or on CONNECT_RESPONSE (active),
//! ERR on disconnect and on a reject (`cma.c`).

use crate::errno::{cm as cm_err, err};
use crate::event::complete;
use crate::evt::ack;
use crate::ffi::*;
use crate::guard;
use crate::ibv;
use crate::id::CmId;
use crate::lifecycle::id_or_einval;
use crate::qpstate::{
    init_qp_attr, modify_qp_err, modify_qp_rtr, modify_qp_rts, process_conn_resp, MAX_INIT_DEPTH,
    MAX_RESP_RES,
};
use libc::{c_int, c_void};
use roce_emu::cm::ucma::{self, Command, ConnParam, QpState};

/// The device's limits (`cma_dev->max_initiator_depth`, `max_responder_resources`).
fn dev_limits(id: &CmId) -> (u8, u8) {
    let dev = id.lock().dev;
    match (dev, ibv::devs()) {
        (Some(d), Ok(devs)) => devs.list[d]
            .open()
            .map(|o| (o.max_initiator_depth, o.max_responder_resources))
            .unwrap_or((16, 16)),
        _ => (16, 16),
    }
}

/// `ucma_valid_param`.
fn valid_param(id: &CmId, p: Option<&rdma_conn_param>) -> Result<(), i32> {
    if id.ps() != ucma::PortSpace::Tcp {
        return Ok(());
    }
    // SAFETY: the id's own C struct.
    let qp = unsafe { (*id.c()).qp };
    let Some(p) = p else {
        return if qp.is_null() {
            Err(libc::EINVAL)
        } else {
            Ok(())
        };
    };
    let (init, resp) = dev_limits(id);
    if (p.responder_resources != MAX_RESP_RES && p.responder_resources > resp)
        || (p.initiator_depth != MAX_INIT_DEPTH && p.initiator_depth > init)
    {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// `ucma_copy_conn_param_to_kern`.
fn to_param(id: &CmId, p: Option<&rdma_conn_param>, qp_num: u32, srq: bool) -> ConnParam {
    let st = id.lock();
    let mut out = ConnParam {
        qp_num,
        srq,
        responder_resources: st.responder_resources,
        initiator_depth: st.initiator_depth,
        ..Default::default()
    };
    match p {
        Some(p) => {
            out.flow_control = p.flow_control;
            out.retry_count = p.retry_count;
            out.rnr_retry_count = p.rnr_retry_count;
            if !p.private_data.is_null() && p.private_data_len > 0 {
                // SAFETY: rdma_conn_param's contract: private_data_len readable bytes.
                out.private_data = unsafe {
                    std::slice::from_raw_parts(
                        p.private_data as *const u8,
                        p.private_data_len.into(),
                    )
                }
                .to_vec();
            }
        }
        None => {
            out.retry_count = 7;
            out.rnr_retry_count = 7;
        }
    }
    out
}

/// The id's QP number and whether it uses an SRQ (`id->qp`), else the parameter's.
fn qp_of(id: &CmId, p: Option<&rdma_conn_param>) -> (u32, bool) {
    // SAFETY: the id's own C struct; a QP there is the program's live QP.
    let qp = unsafe { (*id.c()).qp };
    if !qp.is_null() {
        // SAFETY: as above.
        return unsafe { ((*qp).qp_num, !(*qp).srq.is_null()) };
    }
    p.map(|p| (p.qp_num, p.srq != 0)).unwrap_or((0, false))
}

/// # Safety
/// `id` live; `param` NULL or a valid `rdma_conn_param`.
#[no_mangle]
pub unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    guard::minus_one("rdma_connect", || {
        let id = id_or_einval!(id);
        // SAFETY: the caller's promise.
        let p = unsafe { param.as_ref() };
        if let Err(e) = valid_param(id, p) {
            return err(e);
        }
        let (init, resp) = dev_limits(id);
        {
            let mut st = id.lock();
            st.initiator_depth = match p {
                Some(p) if p.initiator_depth != MAX_INIT_DEPTH => p.initiator_depth,
                _ => init,
            };
            st.responder_resources = match p {
                Some(p) if p.responder_resources != MAX_RESP_RES => p.responder_resources,
                _ => resp,
            };
        }
        let (qp_num, srq) = qp_of(id, p);
        let param = to_param(id, p, qp_num, srq);
        let h = match id.handle() {
            Ok(h) => h,
            Err(e) => return err(e),
        };
        if let Err(e) = h.command(Command::Connect { id: h.num, param }) {
            return cm_err("rdma_connect", &e);
        }
        complete(id)
    })
}

/// # Safety
/// `id` live (a connect request's); `param` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    guard::minus_one("rdma_accept", || {
        let id = id_or_einval!(id);
        // SAFETY: the caller's promise.
        let p = unsafe { param.as_ref() };
        if let Err(e) = valid_param(id, p) {
            return err(e);
        }
        let (init, resp) = dev_limits(id);
        let (init_depth, resp_res) = {
            let mut st = id.lock();
            st.initiator_depth = match p {
                Some(p) if p.initiator_depth != MAX_INIT_DEPTH => p.initiator_depth,
                _ => st.initiator_depth.min(init),
            };
            st.responder_resources = match p {
                Some(p) if p.responder_resources != MAX_RESP_RES => p.responder_resources,
                _ => st.responder_resources.min(resp),
            };
            (st.initiator_depth, st.responder_resources)
        };
        if !id.is_ud() {
            if let Err(e) = modify_qp_rtr(id, resp_res).and_then(|()| modify_qp_rts(id, init_depth))
            {
                return err(e);
            }
        }
        let (qp_num, srq) = qp_of(id, p);
        let param = to_param(id, p, qp_num, srq);
        let h = match id.handle() {
            Ok(h) => h,
            Err(e) => return err(e),
        };
        if let Err(e) = h.command(Command::Accept { id: h.num, param }) {
            modify_qp_err(id);
            return cm_err("rdma_accept", &e);
        }
        if id.is_ud() {
            let c = id.c();
            // SAFETY: the id's own C struct.
            let ev = unsafe { (*c).event };
            if id.lock().sync && !ev.is_null() {
                ack(ev);
                // SAFETY: as above.
                unsafe { (*c).event = std::ptr::null_mut() };
            }
            return 0;
        }
        complete(id)
    })
}

fn reject(id: &CmId, pd: *const c_void, len: u8, reason: Option<u16>) -> c_int {
    let private_data = if pd.is_null() || len == 0 {
        Vec::new()
    } else {
        // SAFETY: rdma_reject's contract: len readable bytes.
        unsafe { std::slice::from_raw_parts(pd as *const u8, len.into()) }.to_vec()
    };
    let h = match id.handle() {
        Ok(h) => h,
        Err(e) => return err(e),
    };
    match h.command(Command::Reject {
        id: h.num,
        private_data,
        reason,
    }) {
        Ok(_) => 0,
        Err(e) => cm_err("rdma_reject", &e),
    }
}

/// # Safety
/// `id` live; `private_data` NULL or `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    len: u8,
) -> c_int {
    guard::minus_one("rdma_reject", || {
        let id = id_or_einval!(id);
        reject(id, private_data, len, None)
    })
}

/// IBA: REJ reason 35, vendor option not supported (librdmacm's rdma_reject_ece).
///
/// # Safety
/// As `rdma_reject`.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject_ece(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    len: u8,
) -> c_int {
    guard::minus_one("rdma_reject_ece", || {
        let id = id_or_einval!(id);
        reject(id, private_data, len, Some(35))
    })
}

/// `rdma_disconnect`: the QP to ERR (`ucma_shutdown`, IB transport), then DREQ (or DREP).
///
/// # Safety
/// `id` live.
#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    guard::minus_one("rdma_disconnect", || {
        let id = id_or_einval!(id);
        // SAFETY: the id's own C struct.
        if unsafe { (*id.c()).verbs }.is_null() {
            return err(libc::EINVAL);
        }
        modify_qp_err(id);
        let h = match id.handle() {
            Ok(h) => h,
            Err(e) => return err(e),
        };
        if let Err(e) = h.command(Command::Disconnect { id: h.num }) {
            return cm_err("rdma_disconnect", &e);
        }
        complete(id)
    })
}

/// `rdma_establish`: the active side without `id->qp` finishes the handshake (RTU) after
/// moving its QP itself.
///
/// # Safety
/// `id` live.
#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    guard::minus_one("rdma_establish", || {
        let id = id_or_einval!(id);
        // SAFETY: the id's own C struct.
        if !unsafe { (*id.c()).qp }.is_null() {
            return err(libc::EINVAL);
        }
        match process_conn_resp(id) {
            Ok(()) => 0,
            Err(e) => err(e),
        }
    })
}

/// # Safety
/// `id` live; `attr` and `mask` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    guard::minus_one("rdma_init_qp_attr", || {
        let id = id_or_einval!(id);
        if attr.is_null() || mask.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the caller's promise.
        let attr = unsafe { &mut *attr };
        let state = match attr.qp_state {
            ibv_qp_state::IBV_QPS_INIT => QpState::Init,
            ibv_qp_state::IBV_QPS_RTR => QpState::Rtr,
            ibv_qp_state::IBV_QPS_RTS => QpState::Rts,
            _ => return err(libc::EINVAL),
        };
        match init_qp_attr(id, state, attr) {
            Ok(m) => {
                // SAFETY: the caller's promise.
                unsafe { *mask = m };
                0
            }
            Err(e) => err(e),
        }
    })
}

/// # Safety
/// `id` live.
#[no_mangle]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: u32) -> c_int {
    guard::minus_one("rdma_notify", || {
        let id = id_or_einval!(id);
        let h = match id.handle() {
            Ok(h) => h,
            Err(e) => return err(e),
        };
        match h.command(Command::Notify { id: h.num, event }) {
            Ok(_) => 0,
            Err(e) => cm_err("rdma_notify", &e),
        }
    })
}
