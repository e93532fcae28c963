//! Work queue entries as the engine keeps them: fixed-size (no allocation per WR), with
//! the progress the roles record on them.

use crate::engine::config::{MAX_INLINE, MAX_SGE};
use crate::engine::wr::{SendFlags, SendOp, WcStatus};
use crate::mem::{MemError, MrTable, Pd, Sge};
use crate::wire::Psn;

/// Up to `MAX_SGE` SGEs, inline.
#[derive(Debug, Clone, Copy)]
pub struct SgeList {
    sges: [Sge; MAX_SGE],
    n: usize,
}

impl SgeList {
    /// Callers check `sges.len() <= MAX_SGE`.
    pub fn new(sges: &[Sge]) -> SgeList {
        let mut a = [Sge::default(); MAX_SGE];
        a[..sges.len()].copy_from_slice(sges);
        SgeList {
            sges: a,
            n: sges.len(),
        }
    }
    pub fn as_slice(&self) -> &[Sge] {
        &self.sges[..self.n]
    }
    /// Total bytes, or `None` past u32 (checked at post time).
    pub fn total(&self) -> Option<u32> {
        self.as_slice()
            .iter()
            .try_fold(0u32, |acc, s| acc.checked_add(s.length))
    }
}

/// Where a send WQE's local bytes are.
#[derive(Debug, Clone, Copy)]
pub enum LocalData {
    Sges(SgeList),
    Inline { buf: [u8; MAX_INLINE], len: usize },
}

impl LocalData {
    /// Copies `out.len()` bytes starting `offset` bytes into the local data.
    pub fn gather(
        &self,
        mem: &MrTable,
        pd: Pd,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), MemError> {
        match self {
            LocalData::Sges(l) => crate::mem::gather(mem, pd, l.as_slice(), offset, out),
            LocalData::Inline { buf, .. } => {
                let o = offset as usize;
                out.copy_from_slice(&buf[o..o + out.len()]);
                Ok(())
            }
        }
    }

    /// Writes `data` starting `offset` bytes into the local buffers (READ responses,
    /// atomic results). Inline data has no buffer to write to: callers never ask.
    pub fn scatter(&self, mem: &MrTable, pd: Pd, offset: u64, data: &[u8]) -> Result<(), MemError> {
        match self {
            LocalData::Sges(l) => crate::mem::scatter(mem, pd, l.as_slice(), offset, data),
            LocalData::Inline { .. } => Ok(()),
        }
    }
}

/// A send WQE.
#[derive(Debug, Clone, Copy)]
pub struct SendWqe {
    pub wr_id: u64,
    pub op: SendOp,
    pub flags: SendFlags,
    pub local: LocalData,
    /// Message length in bytes.
    pub len: u32,
    /// Sent at least once: `first_psn..=last_psn` are fixed.
    pub started: bool,
    pub first_psn: Psn,
    pub last_psn: Psn,
    /// READ: response bytes received so far.
    pub read_done: u32,
    /// An error found before the WQE could complete normally (local protection): it
    /// completes with this status when the QP flushes.
    pub error: Option<WcStatus>,
    /// UD: where the datagram goes (`None` for connected QPs).
    pub ud: Option<super::ud::UdDest>,
}

impl SendWqe {
    /// Packets the message takes at this MTU (at least one: zero-length messages too).
    pub fn npkts(len: u32, mtu: u32) -> u32 {
        len.div_ceil(mtu).max(1)
    }

    /// Whether `psn` is one of this WQE's PSNs.
    pub fn contains(&self, psn: Psn) -> bool {
        self.started && psn.diff(self.first_psn) >= 0 && psn.diff(self.last_psn) <= 0
    }
}

/// A receive WQE.
#[derive(Debug, Clone, Copy)]
pub struct RecvWqe {
    pub wr_id: u64,
    pub sges: SgeList,
    pub len: u32,
}
