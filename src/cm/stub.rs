//! THROWAWAY: the contract's `Cm` API (i23-contract.md §1) with no behaviour, so the daemon
//! side builds before h-cm's core lands. Deleted at the merge with i23-cm.

use super::ucma;
use crate::engine::Instant;
use std::net::IpAddr;

pub struct CmConfig {
    pub node_guid: u64,
    pub addrs: Vec<IpAddr>,
    pub mtu: u32,
    pub seed: u64,
}
pub type Owner = u64;
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MadPeer {
    pub remote: IpAddr,
    pub local: IpAddr,
}
pub struct Resolved {
    pub src: IpAddr,
    pub hop_limit: u8,
}
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct CmStats {
    pub mads_in: u64,
}
pub struct Cm {
    stats: CmStats,
}
impl Cm {
    pub fn new(_cfg: CmConfig) -> Cm {
        Cm {
            stats: CmStats::default(),
        }
    }
    pub fn command(&mut self, _now: Instant, _owner: Owner, _cmd: ucma::Command) -> ucma::Reply {
        ucma::Reply::Errno {
            errno: 38,
            what: "stub".into(),
        }
    }
    pub fn handle_mad(&mut self, _now: Instant, _peer: MadPeer, _mad: &[u8]) {
        self.stats.mads_in += 1;
    }
    pub fn owner_gone(&mut self, _now: Instant, _owner: Owner) {}
    pub fn poll_transmit(&mut self) -> Option<(MadPeer, [u8; 256])> {
        None
    }
    pub fn poll_event(&mut self) -> Option<(Owner, ucma::Event)> {
        None
    }
    pub fn poll_resolve(&mut self) -> Option<(ucma::IdNum, Option<IpAddr>, IpAddr)> {
        None
    }
    pub fn resolved(&mut self, _now: Instant, _id: ucma::IdNum, _r: Result<Resolved, i32>) {}
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    pub fn handle_timeout(&mut self, _now: Instant) {}
    pub fn stats(&self) -> &CmStats {
        &self.stats
    }
}
