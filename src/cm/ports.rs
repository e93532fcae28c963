//! The bind table of each port space (`cma_ps_find`, `cma_alloc_port`, `cma_check_port`,
//! `cma_alloc_any_port` in the kernel's `cma.c`): who holds which port, ephemeral ports,
//! SO_REUSEADDR and AFONLY rules, EADDRINUSE.

use super::timers::EPHEMERAL_PORTS;
use super::ucma::{IdNum, PortSpace};
use crate::rng::Rng;
use std::collections::HashMap;
use std::net::IpAddr;

pub use super::errno::{EADDRINUSE, EADDRNOTAVAIL};

/// One id's claim on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    pub id: IdNum,
    pub ip: IpAddr,
    pub reuseaddr: bool,
    pub afonly: bool,
}

/// The ports of every port space of one manager.
#[derive(Debug, Default)]
pub struct Ports {
    map: HashMap<(PortSpace, u16), Vec<Binding>>,
}

impl Ports {
    /// `cma_check_port`: may `me` join the ids already on its port? `reuse` is `me`'s
    /// SO_REUSEADDR as the caller wants it checked (listen checks without it).
    pub fn check(&self, ps: PortSpace, port: u16, me: &Binding, reuse: bool) -> Result<(), i32> {
        let Some(list) = self.map.get(&(ps, port)) else {
            return Ok(());
        };
        for cur in list {
            if cur.id == me.id || (reuse && cur.reuseaddr) {
                continue;
            }
            if me.afonly && cur.afonly && me.ip.is_ipv4() != cur.ip.is_ipv4() {
                continue;
            }
            if me.ip.is_unspecified() || cur.ip.is_unspecified() {
                return Err(EADDRNOTAVAIL);
            }
            if me.ip == cur.ip {
                return Err(EADDRINUSE);
            }
        }
        Ok(())
    }

    /// Binds `b` to `port`, or to a free ephemeral port if `port` is 0 (a random start, then
    /// upwards, as `cma_alloc_any_port`). Returns the port.
    pub fn bind(
        &mut self,
        ps: PortSpace,
        port: u16,
        b: Binding,
        rng: &mut Rng,
    ) -> Result<u16, i32> {
        let port = if port == 0 {
            let (lo, hi) = (*EPHEMERAL_PORTS.start(), *EPHEMERAL_PORTS.end());
            let n = u32::from(hi - lo) + 1;
            let start = rng.below(u64::from(n)) as u32;
            (0..n)
                .map(|i| lo + ((start + i) % n) as u16)
                .find(|p| !self.map.contains_key(&(ps, *p)))
                .ok_or(EADDRNOTAVAIL)?
        } else {
            self.check(ps, port, &b, b.reuseaddr)?;
            port
        };
        self.map.entry((ps, port)).or_default().push(b);
        Ok(port)
    }

    pub fn unbind(&mut self, ps: PortSpace, port: u16, id: IdNum) {
        if let Some(list) = self.map.get_mut(&(ps, port)) {
            list.retain(|b| b.id != id);
            if list.is_empty() {
                self.map.remove(&(ps, port));
            }
        }
    }

    /// Updates `id`'s entry (its address after a resolution, its options).
    pub fn update(&mut self, ps: PortSpace, port: u16, id: IdNum, f: impl FnOnce(&mut Binding)) {
        if let Some(b) = self
            .map
            .get_mut(&(ps, port))
            .and_then(|l| l.iter_mut().find(|b| b.id == id))
        {
            f(b);
        }
    }

    /// The ids on `(ps, port)`.
    pub fn ids(&self, ps: PortSpace, port: u16) -> impl Iterator<Item = IdNum> + '_ {
        self.map
            .get(&(ps, port))
            .into_iter()
            .flat_map(|l| l.iter().map(|b| b.id))
    }
}
