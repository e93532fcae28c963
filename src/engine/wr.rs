//! Work requests in, completions out: the verbs vocabulary (ibv_send_wr, ibv_recv_wr,
//! ibv_wc), typed so that an operation carries exactly the fields it needs.

use crate::mem::Sge;
use core::fmt;

/// A remote buffer: virtual address and R_Key as the peer advertised them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Remote {
    pub va: u64,
    pub rkey: u32,
}

/// What a send work request does (IBA 10.8.2.3; ibv_wr_opcode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendOp {
    Send,
    SendWithImm {
        imm: u32,
    },
    SendWithInv {
        rkey: u32,
    },
    Write {
        remote: Remote,
    },
    WriteWithImm {
        remote: Remote,
        imm: u32,
    },
    Read {
        remote: Remote,
    },
    /// 64-bit compare and swap at `remote.va` (8-byte aligned); the original value lands
    /// in the 8-byte local buffer.
    CompareSwap {
        remote: Remote,
        compare: u64,
        swap: u64,
    },
    FetchAdd {
        remote: Remote,
        add: u64,
    },
    /// Bind the memory window whose R_Key is `mw_rkey` (IBA 10.6.7; type 1 through
    /// `ibv_bind_mw`, type 2 as IBV_WR_BIND_MW), its new R_Key becoming `new_rkey` (only
    /// the key byte is taken, as rxe). Executed by the requester in send-queue order,
    /// no packet (rxe `rxe_do_local_ops`).
    BindMw {
        mw_rkey: u32,
        new_rkey: u32,
        bind: crate::mem::MwBind,
    },
    /// Local Invalidate (IBV_WR_LOCAL_INV) of the type 2 window `rkey` names; local, no
    /// packet.
    LocalInv {
        rkey: u32,
    },
}

impl SendOp {
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }
    /// Executed by the requester alone, without a packet (BIND_MW, LOCAL_INV).
    pub fn is_local(&self) -> bool {
        matches!(self, SendOp::BindMw { .. } | SendOp::LocalInv { .. })
    }
    pub fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
    /// The operation's name in messages.
    pub const fn name(&self) -> &'static str {
        match self {
            SendOp::Send => "SEND",
            SendOp::SendWithImm { .. } => "SEND with immediate",
            SendOp::SendWithInv { .. } => "SEND with invalidate",
            SendOp::Write { .. } => "RDMA WRITE",
            SendOp::WriteWithImm { .. } => "RDMA WRITE with immediate",
            SendOp::Read { .. } => "RDMA READ",
            SendOp::CompareSwap { .. } => "atomic compare and swap",
            SendOp::FetchAdd { .. } => "atomic fetch and add",
            SendOp::BindMw { .. } => "BIND_MW",
            SendOp::LocalInv { .. } => "LOCAL_INV",
        }
    }
    /// The completion opcode this operation reports.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => {
                WcOpcode::Send
            }
            SendOp::Write { .. } | SendOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::Read { .. } => WcOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
            SendOp::BindMw { .. } => WcOpcode::BindMw,
            SendOp::LocalInv { .. } => WcOpcode::LocalInv,
        }
    }
}

/// Send flags (ibv_send_flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SendFlags {
    /// Generate a completion on success (errors always complete).
    pub signaled: bool,
    /// Wait for every earlier READ and atomic to complete first (IBA 10.8.3.3).
    pub fence: bool,
    /// Set the solicited-event bit on the last packet.
    pub solicited: bool,
}

/// Where the local data of a send work request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local<'a> {
    /// Gather from (or, for READ and atomics, scatter into) registered memory.
    Sges(&'a [Sge]),
    /// Copy these bytes at post time (ibv IBV_SEND_INLINE): no memory registration needed.
    Inline(&'a [u8]),
}

/// A send work request, borrowed for the duration of `post_send`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub op: SendOp,
    pub local: Local<'a>,
    pub flags: SendFlags,
}

/// A receive work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr<'a> {
    pub wr_id: u64,
    pub sges: &'a [Sge],
}

/// Completion status (ibv_wc_status; IBA 11.6.2 completion status).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    Success,
    /// Local length error: a received message did not fit the receive buffers.
    LocLenErr,
    /// Local QP operation error: an internal consistency error.
    LocQpOpErr,
    /// Local protection error: a local SGE's key, PD, access or range was refused.
    LocProtErr,
    /// Flushed: the QP was in (or went to) the error state before this WR completed.
    WrFlushErr,
    /// Bad response: a response that does not fit the request.
    BadRespErr,
    /// Remote invalid request: the responder NAKed with Invalid Request.
    RemInvReqErr,
    /// Remote access error: the responder NAKed with Remote Access Error.
    RemAccessErr,
    /// Remote operational error: the responder NAKed with Remote Operational Error.
    RemOpErr,
    /// The transport retry counter ran out (timeouts or sequence NAKs).
    RetryExcErr,
    /// The RNR retry counter ran out.
    RnrRetryExcErr,
    /// A memory window bind was refused (IBV_WC_MW_BIND_ERR).
    MwBindErr,
}

impl WcStatus {
    /// ibverbs' name (`ibv_wc_status_str`).
    pub const fn name(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::MwBindErr => "memory management operation error",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Completion opcode (ibv_wc_opcode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    CompSwap,
    FetchAdd,
    Recv,
    RecvRdmaWithImm,
    /// A BIND_MW work request (IBV_WC_BIND_MW).
    BindMw,
    /// A LOCAL_INV work request (IBV_WC_LOCAL_INV).
    LocalInv,
}

/// What a UD receive's 40-byte header slot holds (rxe `RDMA_NETWORK_IPV4`/`IPV6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetworkHdr {
    /// 20 zero bytes, then the IPv4 header.
    Ipv4,
    /// The IPv6 header.
    Ipv6,
}

/// A work completion (ibv_wc). `Default` is an empty slot for `poll_cq` buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Completion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub qpn: u32,
    /// Bytes received (receive completions; for RECV_RDMA_WITH_IMM the WRITE's length).
    pub byte_len: u32,
    pub imm: Option<u32>,
    /// The R_Key a SEND with invalidate invalidated.
    pub invalidated_rkey: Option<u32>,
    /// The peer's QP (receive completions).
    pub src_qp: u32,
    /// UD and GSI receives: the first 40 bytes of the receive buffer hold the packet's
    /// network header, of this kind (`IBV_WC_GRH`; the kernel's `wc->network_hdr_type`).
    pub network_hdr: Option<NetworkHdr>,
    /// The service level (0: RoCE carries none; rxe reports 0).
    pub sl: u8,
}

impl Default for Completion {
    fn default() -> Self {
        Completion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            qpn: 0,
            byte_len: 0,
            imm: None,
            invalidated_rkey: None,
            src_qp: 0,
            network_hdr: None,
            sl: 0,
        }
    }
}
