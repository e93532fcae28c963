//! The agent's reading of a request's arguments and its names for completion statuses
//! and opcodes (spec/FORMAT.md).

use crate::conform::value::Num;
use crate::verbs::{Access, WcOpcode, WcStatus};
use std::collections::HashMap;

/// A request's `key=value` arguments.
pub(super) struct A<'a>(pub(super) HashMap<&'a str, &'a str>);

impl A<'_> {
    pub(super) fn opt(&self, k: &str) -> Option<&str> {
        self.0.get(k).copied()
    }
    pub(super) fn s(&self, k: &str) -> Result<&str, String> {
        self.opt(k).ok_or_else(|| format!("missing {k}="))
    }
    pub(super) fn n(&self, k: &str) -> Result<u64, String> {
        Num::parse(self.s(k)?)
            .map(|n| n.0)
            .map_err(|e| format!("{k}: {e}"))
    }
    pub(super) fn u8_or(&self, k: &str, d: u8) -> Result<u8, String> {
        let v = self.n_or(k, d.into())?;
        u8::try_from(v).map_err(|_| format!("{k}={v}: at most 255"))
    }
    pub(super) fn n_or(&self, k: &str, d: u64) -> Result<u64, String> {
        match self.opt(k) {
            Some(_) => self.n(k),
            None => Ok(d),
        }
    }
}

pub(super) fn access(list: &str) -> Result<Access, String> {
    let mut a = Access::empty();
    for f in list.split(',').filter(|s| !s.is_empty()) {
        a = a.union(match f {
            "local_write" => Access::LOCAL_WRITE,
            "remote_write" => Access::REMOTE_WRITE,
            "remote_read" => Access::REMOTE_READ,
            "remote_atomic" => Access::REMOTE_ATOMIC,
            o => return Err(format!("access flag {o:?}")),
        });
    }
    Ok(a)
}

pub fn status_name(s: WcStatus) -> &'static str {
    match s {
        WcStatus::Success => "SUCCESS",
        WcStatus::LocLenErr => "LOC_LEN_ERR",
        WcStatus::LocQpOpErr => "LOC_QP_OP_ERR",
        WcStatus::LocProtErr => "LOC_PROT_ERR",
        WcStatus::WrFlushErr => "WR_FLUSH_ERR",
        WcStatus::BadRespErr => "BAD_RESP_ERR",
        WcStatus::RemInvReqErr => "REM_INV_REQ_ERR",
        WcStatus::RemAccessErr => "REM_ACCESS_ERR",
        WcStatus::RemOpErr => "REM_OP_ERR",
        WcStatus::RetryExcErr => "RETRY_EXC_ERR",
        WcStatus::RnrRetryExcErr => "RNR_RETRY_EXC_ERR",
        WcStatus::MwBindErr => "MW_BIND_ERR",
    }
}

pub fn op_name(o: WcOpcode) -> &'static str {
    match o {
        WcOpcode::Send => "SEND",
        WcOpcode::RdmaWrite => "RDMA_WRITE",
        WcOpcode::RdmaRead => "RDMA_READ",
        WcOpcode::CompSwap => "COMP_SWAP",
        WcOpcode::FetchAdd => "FETCH_ADD",
        WcOpcode::Recv => "RECV",
        WcOpcode::RecvRdmaWithImm => "RECV_RDMA_WITH_IMM",
        WcOpcode::BindMw => "BIND_MW",
        WcOpcode::LocalInv => "LOCAL_INV",
    }
}
