//! The string and rate helpers, with rdma-core 44's exact strings (libibverbs/verbs.c,
//! enum_strs.c): programs print them and scripts parse the output.

use crate::ffi;
use libc::{c_char, c_int};

macro_rules! cstr {
    ($s:literal) => {
        concat!($s, "\0").as_ptr() as *const c_char
    };
}

#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: ffi::ibv_wc_status::Type) -> *const c_char {
    use ffi::ibv_wc_status as s;
    match status {
        s::IBV_WC_SUCCESS => cstr!("success"),
        s::IBV_WC_LOC_LEN_ERR => cstr!("local length error"),
        s::IBV_WC_LOC_QP_OP_ERR => cstr!("local QP operation error"),
        s::IBV_WC_LOC_EEC_OP_ERR => cstr!("local EE context operation error"),
        s::IBV_WC_LOC_PROT_ERR => cstr!("local protection error"),
        s::IBV_WC_WR_FLUSH_ERR => cstr!("Work Request Flushed Error"),
        s::IBV_WC_MW_BIND_ERR => cstr!("memory management operation error"),
        s::IBV_WC_BAD_RESP_ERR => cstr!("bad response error"),
        s::IBV_WC_LOC_ACCESS_ERR => cstr!("local access error"),
        s::IBV_WC_REM_INV_REQ_ERR => cstr!("remote invalid request error"),
        s::IBV_WC_REM_ACCESS_ERR => cstr!("remote access error"),
        s::IBV_WC_REM_OP_ERR => cstr!("remote operation error"),
        s::IBV_WC_RETRY_EXC_ERR => cstr!("transport retry counter exceeded"),
        s::IBV_WC_RNR_RETRY_EXC_ERR => cstr!("RNR retry counter exceeded"),
        s::IBV_WC_LOC_RDD_VIOL_ERR => cstr!("local RDD violation error"),
        s::IBV_WC_REM_INV_RD_REQ_ERR => cstr!("remote invalid RD request"),
        s::IBV_WC_REM_ABORT_ERR => cstr!("aborted error"),
        s::IBV_WC_INV_EECN_ERR => cstr!("invalid EE context number"),
        s::IBV_WC_INV_EEC_STATE_ERR => cstr!("invalid EE context state"),
        s::IBV_WC_FATAL_ERR => cstr!("fatal error"),
        s::IBV_WC_RESP_TIMEOUT_ERR => cstr!("response timeout error"),
        s::IBV_WC_GENERAL_ERR => cstr!("general error"),
        s::IBV_WC_TM_ERR => cstr!("TM error"),
        s::IBV_WC_TM_RNDV_INCOMPLETE => cstr!("TM software rendezvous"),
        _ => cstr!("unknown"),
    }
}

#[no_mangle]
pub extern "C" fn ibv_event_type_str(ev: ffi::ibv_event_type::Type) -> *const c_char {
    use ffi::ibv_event_type as e;
    match ev {
        e::IBV_EVENT_CQ_ERR => cstr!("CQ error"),
        e::IBV_EVENT_QP_FATAL => cstr!("local work queue catastrophic error"),
        e::IBV_EVENT_QP_REQ_ERR => cstr!("invalid request local work queue error"),
        e::IBV_EVENT_QP_ACCESS_ERR => cstr!("local access violation work queue error"),
        e::IBV_EVENT_COMM_EST => cstr!("communication established"),
        e::IBV_EVENT_SQ_DRAINED => cstr!("send queue drained"),
        e::IBV_EVENT_PATH_MIG => cstr!("path migrated"),
        e::IBV_EVENT_PATH_MIG_ERR => cstr!("path migration request error"),
        e::IBV_EVENT_DEVICE_FATAL => cstr!("local catastrophic error"),
        e::IBV_EVENT_PORT_ACTIVE => cstr!("port active"),
        e::IBV_EVENT_PORT_ERR => cstr!("port error"),
        e::IBV_EVENT_LID_CHANGE => cstr!("LID change"),
        e::IBV_EVENT_PKEY_CHANGE => cstr!("P_Key change"),
        e::IBV_EVENT_SM_CHANGE => cstr!("SM change"),
        e::IBV_EVENT_SRQ_ERR => cstr!("SRQ catastrophic error"),
        e::IBV_EVENT_SRQ_LIMIT_REACHED => cstr!("SRQ limit reached"),
        e::IBV_EVENT_QP_LAST_WQE_REACHED => cstr!("last WQE reached"),
        e::IBV_EVENT_CLIENT_REREGISTER => cstr!("client reregistration"),
        e::IBV_EVENT_GID_CHANGE => cstr!("GID table change"),
        e::IBV_EVENT_WQ_FATAL => cstr!("WQ fatal"),
        _ => cstr!("unknown"),
    }
}

#[no_mangle]
pub extern "C" fn ibv_node_type_str(t: ffi::ibv_node_type::Type) -> *const c_char {
    use ffi::ibv_node_type as n;
    match t {
        n::IBV_NODE_CA => cstr!("InfiniBand channel adapter"),
        n::IBV_NODE_SWITCH => cstr!("InfiniBand switch"),
        n::IBV_NODE_ROUTER => cstr!("InfiniBand router"),
        n::IBV_NODE_RNIC => cstr!("iWARP NIC"),
        n::IBV_NODE_USNIC => cstr!("usNIC"),
        n::IBV_NODE_USNIC_UDP => cstr!("usNIC UDP"),
        n::IBV_NODE_UNSPECIFIED => cstr!("unspecified"),
        _ => cstr!("unknown"),
    }
}

#[no_mangle]
pub extern "C" fn ibv_port_state_str(s: ffi::ibv_port_state::Type) -> *const c_char {
    use ffi::ibv_port_state as p;
    match s {
        p::IBV_PORT_NOP => cstr!("no state change (NOP)"),
        p::IBV_PORT_DOWN => cstr!("down"),
        p::IBV_PORT_INIT => cstr!("init"),
        p::IBV_PORT_ARMED => cstr!("armed"),
        p::IBV_PORT_ACTIVE => cstr!("active"),
        p::IBV_PORT_ACTIVE_DEFER => cstr!("active defer"),
        _ => cstr!("unknown"),
    }
}

#[no_mangle]
pub extern "C" fn ibv_wr_opcode_str(op: ffi::ibv_wr_opcode::Type) -> *const c_char {
    use ffi::ibv_wr_opcode as o;
    match op {
        o::IBV_WR_RDMA_WRITE => cstr!("rdma-write"),
        o::IBV_WR_RDMA_WRITE_WITH_IMM => cstr!("rdma-write-with-imm"),
        o::IBV_WR_SEND => cstr!("send"),
        o::IBV_WR_SEND_WITH_IMM => cstr!("send-with-imm"),
        o::IBV_WR_RDMA_READ => cstr!("rdma-read"),
        o::IBV_WR_ATOMIC_CMP_AND_SWP => cstr!("atomic-cmp-and-swp"),
        o::IBV_WR_ATOMIC_FETCH_AND_ADD => cstr!("atomic-fetch-and-add"),
        o::IBV_WR_LOCAL_INV => cstr!("local-inv"),
        o::IBV_WR_BIND_MW => cstr!("bind-mw"),
        o::IBV_WR_SEND_WITH_INV => cstr!("send-with-inv"),
        o::IBV_WR_TSO => cstr!("tso"),
        _ => cstr!("unknown"),
    }
}

/// (ibv_rate, multiple of 2.5 Gb/s, Mb/s), as `ibv_rate_to_mult` and `ibv_rate_to_mbps`.
const RATES: &[(u32, c_int, c_int)] = &[
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, -1, 14062),
    (12, -1, 56250),
    (13, -1, 112500),
    (14, -1, 168750),
    (15, -1, 25781),
    (16, -1, 103125),
    (17, -1, 206250),
    (18, -1, 309375),
    (19, 11, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
];

#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: u32) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> u32 {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult > 0)
        .map_or(0, |r| r.0)
}

#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: u32) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> u32 {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}
