//! The QP moves librdmacm makes for a program (`cma.c`): the manager's INIT_QP_ATTR into
//! an `ibv_qp_attr`, RTR and RTS before ACCEPT (passive) or on CONNECT_RESPONSE (active,
//! then the RTU), ERR on disconnect and on a reject. Through libibverbs' C symbols.

use crate::ffi::*;
use crate::ibv;
use crate::id::CmId;
use libc::c_int;
use roce_emu::cm::ucma::{Command, ConnParam, QpState, Reply};

pub const MAX_RESP_RES: u8 = 0xFF;
pub const MAX_INIT_DEPTH: u8 = 0xFF;

/// INIT_QP_ATTR for `state` into an `ibv_qp_attr` (`rdma_init_qp_attr`).
pub fn init_qp_attr(id: &CmId, state: QpState, attr: &mut ibv_qp_attr) -> Result<c_int, i32> {
    let h = id.handle()?;
    let a = match h.command(Command::InitQpAttr { id: h.num, state }) {
        Ok(Reply::QpAttrs(a)) => a,
        Ok(r) => return Err(crate::id::unexpected(r).errno()),
        Err(e) => return Err(e.errno()),
    };
    attr.qp_state = a.qp_state;
    attr.qp_access_flags = a.qp_access_flags;
    attr.pkey_index = a.pkey_index;
    attr.port_num = a.port_num;
    attr.qkey = a.qkey;
    attr.path_mtu = a.path_mtu;
    attr.dest_qp_num = a.dest_qp_num;
    attr.rq_psn = a.rq_psn;
    attr.sq_psn = a.sq_psn;
    attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
    attr.max_rd_atomic = a.max_rd_atomic;
    attr.min_rnr_timer = a.min_rnr_timer;
    attr.timeout = a.timeout;
    attr.retry_cnt = a.retry_cnt;
    attr.rnr_retry = a.rnr_retry;
    if let Some(av) = a.ah {
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh.dgid.raw = av.dgid;
        attr.ah_attr.grh.sgid_index = av.sgid_index;
        attr.ah_attr.grh.flow_label = av.flow_label;
        attr.ah_attr.grh.hop_limit = av.hop_limit;
        attr.ah_attr.grh.traffic_class = av.traffic_class;
        attr.ah_attr.sl = av.sl;
        attr.ah_attr.port_num = av.port_num.max(1);
        attr.ah_attr.dlid = 0;
    }
    Ok(a.mask as c_int)
}

fn zeroed_attr() -> ibv_qp_attr {
    // SAFETY: ibv_qp_attr is plain C data.
    unsafe { std::mem::zeroed() }
}

fn modify(qp: *mut ibv_qp, attr: &mut ibv_qp_attr, mask: c_int) -> Result<(), i32> {
    // SAFETY: the id's live QP and our attribute struct.
    match unsafe { ibv::ibv_modify_qp(qp, attr, mask) } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// `ucma_modify_qp_rtr`: INIT (again: the attributes may have changed) then RTR.
pub fn modify_qp_rtr(id: &CmId, resp_res: u8) -> Result<(), i32> {
    // SAFETY: the id's own C struct.
    let qp = unsafe { (*id.c()).qp };
    if qp.is_null() {
        return Ok(());
    }
    let mut a = zeroed_attr();
    let mask = init_qp_attr(id, QpState::Init, &mut a)?;
    modify(qp, &mut a, mask)?;
    let mut a = zeroed_attr();
    let mask = init_qp_attr(id, QpState::Rtr, &mut a)?;
    if resp_res != MAX_RESP_RES {
        a.max_dest_rd_atomic = resp_res;
    }
    modify(qp, &mut a, mask)
}

/// `ucma_modify_qp_rts`.
pub fn modify_qp_rts(id: &CmId, init_depth: u8) -> Result<(), i32> {
    // SAFETY: the id's own C struct.
    let qp = unsafe { (*id.c()).qp };
    if qp.is_null() {
        return Ok(());
    }
    let mut a = zeroed_attr();
    let mask = init_qp_attr(id, QpState::Rts, &mut a)?;
    if init_depth != MAX_INIT_DEPTH {
        a.max_rd_atomic = init_depth;
    }
    modify(qp, &mut a, mask)
}

/// `ucma_modify_qp_err`.
pub fn modify_qp_err(id: &CmId) {
    // SAFETY: the id's own C struct.
    let qp = unsafe { (*id.c()).qp };
    if qp.is_null() {
        return;
    }
    let mut a = zeroed_attr();
    a.qp_state = ibv_qp_state::IBV_QPS_ERR;
    let _ = modify(qp, &mut a, ibv_qp_attr_mask::IBV_QP_STATE as c_int);
}

/// `ucma_process_conn_resp`: RTR, RTS, then ACCEPT (the RTU); the QP to ERR on failure.
pub fn process_conn_resp(id: &CmId) -> Result<(), i32> {
    let r = modify_qp_rtr(id, MAX_RESP_RES)
        .and_then(|()| modify_qp_rts(id, MAX_INIT_DEPTH))
        .and_then(|()| {
            let h = id.handle()?;
            h.command(Command::Accept {
                id: h.num,
                param: ConnParam::default(),
            })
            .map(|_| ())
            .map_err(|e| e.errno())
        });
    if r.is_err() {
        modify_qp_err(id);
    }
    r
}
