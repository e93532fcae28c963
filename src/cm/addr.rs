//! Addresses (the kernel's `cma.c`): binding to the port tables, address resolution by
//! the host, RoCE route resolution (`cma_resolve_iboe_route`), listening and finding the
//! listener of a request, rdma_cm's private-data header and flow label.

use super::errno::{err, EINVAL};
use super::id::{Id, RdmaState};
use super::ports::{Binding, EADDRNOTAVAIL};
use super::stats::DropReason;
use super::timers::{self, after_ms, CMA_IBOE_PACKET_LIFETIME};
use super::ucma::{self, EventKind, IdNum, PortSpace, QpType};
use super::{Cm, Resolved};
use crate::engine::Instant;
use crate::wire::cm::cma;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

fn any_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

impl Cm {
    /// `rdma_bind_addr`: an address of the port (or any) and a port (0: ephemeral).
    pub(super) fn bind_id(
        &mut self,
        id: IdNum,
        addr: SocketAddr,
    ) -> Result<SocketAddr, (i32, String)> {
        if !addr.ip().is_unspecified() && !self.is_local(addr.ip()) {
            return err(
                EADDRNOTAVAIL,
                format!("bind: {} is not an address of this device", addr.ip()),
            );
        }
        let i = &self.ids[&id];
        let b = Binding {
            id,
            ip: addr.ip(),
            reuseaddr: i.reuseaddr,
            afonly: i.afonly,
        };
        let ps = i.ps;
        let port = self
            .ports
            .bind(ps, addr.port(), b, &mut self.rng)
            .map_err(|e| (e, format!("bind: port {} of {:?}: in use", addr.port(), ps)))?;
        let a = SocketAddr::new(addr.ip(), port);
        let i = self.ids.get_mut(&id).expect("checked");
        i.src = Some(a);
        i.bound = Some(port);
        i.has_device = !addr.ip().is_unspecified();
        i.state = RdmaState::AddrBound;
        Ok(a)
    }

    pub(super) fn resolve_addr(
        &mut self,
        now: Instant,
        id: IdNum,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: u32,
    ) -> Result<(), (i32, String)> {
        if self.ids[&id].state == RdmaState::Idle {
            let s = src.unwrap_or_else(|| SocketAddr::new(any_of(dst.ip()), 0));
            self.bind_id(id, s)?;
        }
        let i = &self.ids[&id];
        if !matches!(i.state, RdmaState::AddrBound | RdmaState::AddrResolved) {
            return err(EINVAL, "resolve_addr: the id is past address resolution");
        }
        let bound = i.src.map(|s| s.ip());
        if bound.is_some_and(|b| b.is_ipv4() != dst.ip().is_ipv4() && !b.is_unspecified()) {
            return err(
                EINVAL,
                "resolve_addr: source and destination families differ",
            );
        }
        let i = self.ids.get_mut(&id).expect("checked");
        i.state = RdmaState::AddrQuery;
        i.dst = Some(dst);
        if dst.ip().is_unspecified() {
            // cma_resolve_loopback: the device's own address.
            let me = bound
                .filter(|b| !b.is_unspecified())
                .or_else(|| self.cfg.addrs.first().copied());
            let r = me
                .map(|src| Resolved { src, hop_limit: 64 })
                .ok_or(EADDRNOTAVAIL);
            if let Some(i) = self.ids.get_mut(&id) {
                i.dst = Some(SocketAddr::new(me.unwrap_or(dst.ip()), dst.port()));
                i.resolve_deadline = Some(now);
            }
            self.addr_resolved(now, id, r);
            return Ok(());
        }
        i.resolve_deadline = Some(after_ms(now, u64::from(timeout_ms.max(1))));
        let src = bound.filter(|b| !b.is_unspecified());
        self.resolves.push_back((id, src, dst.ip()));
        Ok(())
    }

    /// `addr_handler`: the host's resolution gives ADDR_RESOLVED or ADDR_ERROR.
    pub(super) fn addr_resolved(&mut self, _now: Instant, id: IdNum, r: Result<Resolved, i32>) {
        let waiting = self
            .ids
            .get(&id)
            .is_some_and(|i| i.state == RdmaState::AddrQuery && i.resolve_deadline.is_some());
        if !waiting {
            self.stats.drop(DropReason::StaleResolve);
            return;
        }
        let dst_v4 = self.ids[&id].dst.is_some_and(|d| d.is_ipv4());
        let r = r.and_then(|r| {
            // The route's source: one of the port's addresses, of the destination's family.
            if self.is_local(r.src) && r.src.is_ipv4() == dst_v4 {
                Ok(r)
            } else {
                Err(EADDRNOTAVAIL)
            }
        });
        let i = self.ids.get_mut(&id).expect("checked");
        i.resolve_deadline = None;
        match r {
            Ok(res) => {
                let src = i.src.expect("bound before resolving");
                let src = if src.ip().is_unspecified() {
                    SocketAddr::new(res.src, src.port())
                } else {
                    src
                };
                i.src = Some(src);
                i.hop_limit = res.hop_limit;
                i.has_device = true;
                i.state = RdmaState::AddrResolved;
                let (ps, port) = (i.ps, i.bound);
                if let Some(port) = port {
                    self.ports.update(ps, port, id, |b| b.ip = src.ip());
                }
                self.event(id, EventKind::AddrResolved, 0, None);
            }
            Err(e) => {
                i.state = RdmaState::AddrBound;
                self.event(id, EventKind::AddrError, -e.abs(), None);
            }
        }
    }

    /// `cma_resolve_iboe_route`: the path from the resolved addresses, at once.
    pub(super) fn resolve_route(&mut self, id: IdNum) -> Result<(), (i32, String)> {
        let mtu = self.mtu_code();
        let i = self.ids.get_mut(&id).expect("checked");
        if i.state != RdmaState::AddrResolved {
            return err(EINVAL, "resolve_route: the address is not resolved");
        }
        let (src, dst) = (i.src.expect("resolved"), i.dst.expect("resolved"));
        i.path = Some(ucma::Path {
            sgid: ucma::ip_gid(src.ip()),
            dgid: ucma::ip_gid(dst.ip()),
            pkey: timers::DEFAULT_PKEY,
            mtu,
            hop_limit: i.hop_limit,
            traffic_class: i.tos.unwrap_or(0),
            sl: 0,
            flow_label: flow_label(src.port(), dst.port()),
            rate: 0,
            packet_life_time: CMA_IBOE_PACKET_LIFETIME,
        });
        i.state = RdmaState::RouteResolved;
        self.event(id, EventKind::RouteResolved, 0, None);
        Ok(())
    }

    /// `rdma_listen`: an unbound id binds to any IPv4 address and an ephemeral port first.
    pub(super) fn listen(&mut self, id: IdNum, backlog: u32) -> Result<(), (i32, String)> {
        if self.ids[&id].state == RdmaState::Idle {
            self.bind_id(id, SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0))?;
        }
        let backlog = if backlog == 0 || backlog > timers::MAX_BACKLOG {
            timers::MAX_BACKLOG
        } else {
            backlog
        };
        let i = &self.ids[&id];
        match i.state {
            RdmaState::Listen => {
                self.ids.get_mut(&id).expect("checked").backlog = backlog;
                return Ok(());
            }
            RdmaState::AddrBound => {}
            _ => return err(EINVAL, "listen: the id is not bound"),
        }
        if i.reuseaddr {
            let b = Binding {
                id,
                ip: i.src.expect("bound").ip(),
                reuseaddr: false,
                afonly: i.afonly,
            };
            let (ps, port) = (i.ps, i.bound.expect("bound"));
            self.ports
                .check(ps, port, &b, false)
                .map_err(|e| (e, format!("listen: port {port} is shared")))?;
            self.ports.update(ps, port, id, |b| b.reuseaddr = false);
            self.ids.get_mut(&id).expect("checked").reuseaddr = false;
        }
        let i = self.ids.get_mut(&id).expect("checked");
        i.state = RdmaState::Listen;
        i.backlog = backlog;
        Ok(())
    }

    /// The listening id a request for `(ps, port)` at `dst` goes to (`cma_find_listener`):
    /// bound to that address or to any address of a family that takes it.
    pub(super) fn find_listener(
        &self,
        ps: PortSpace,
        port: u16,
        dst: IpAddr,
        qp_type: Option<QpType>,
    ) -> Option<IdNum> {
        let ok = |i: &Id| {
            let ip = i.src.map(|s| s.ip());
            i.state == RdmaState::Listen
                && match ip {
                    Some(ip) if ip == dst => true,
                    Some(IpAddr::V4(v4)) => v4.is_unspecified() && dst.is_ipv4(),
                    Some(IpAddr::V6(v6)) => v6.is_unspecified() && (dst.is_ipv6() || !i.afonly),
                    None => false,
                }
                && match qp_type {
                    Some(t) => i.qp_type == t,
                    None => true,
                }
        };
        let cands: Vec<IdNum> = self
            .ports
            .ids(ps, port)
            .filter(|n| self.ids.get(n).is_some_and(ok))
            .collect();
        // A listener on the very address wins over one on any address.
        cands
            .iter()
            .copied()
            .find(|n| self.ids[n].src.is_some_and(|s| s.ip() == dst))
            .or_else(|| cands.first().copied())
    }

    pub(super) fn backlog_room(&self, listener: IdNum) -> bool {
        let pending = self
            .ids
            .values()
            .filter(|i| i.parent == Some(listener))
            .count();
        self.ids
            .get(&listener)
            .is_some_and(|l| (pending as u32) < l.backlog)
    }

    /// A connect request's new id (`cma_ib_new_conn_id`): the listener's owner and port
    /// space, state CONNECT.
    pub(super) fn new_child(&mut self, listener: IdNum, qp_type: QpType) -> IdNum {
        let num = self.next_id;
        // Ids are never reused (the counter saturates after 2^32 ids in one daemon).
        self.next_id = self.next_id.saturating_add(1);
        let (owner, ps) = {
            let l = &self.ids[&listener];
            (l.owner, l.ps)
        };
        let mut c = Id::new(num, owner, ps, qp_type, 0);
        c.state = RdmaState::Connect;
        c.has_device = true;
        c.parent = Some(listener);
        self.ids.insert(num, c);
        num
    }
}

/// rdma_cm's header of a REQ/SIDR_REQ from `src` to `dst`.
pub(super) fn cma_header(src: SocketAddr, dst: SocketAddr) -> cma::Repr {
    let addrs = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => cma::Addrs::V4 { src: s, dst: d },
        (s, d) => cma::Addrs::V6 {
            src: to_v6(s),
            dst: to_v6(d),
        },
    };
    cma::Repr {
        src_port: src.port(),
        addrs,
    }
}

fn to_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// `cma_get_roce_udp_flow_label` for an address without a flow label of its own:
/// `(sport * 31 + dport) & 0xfffff` (the capture's 0xfbb82 = 33028 * 31 + 7174).
pub(super) fn flow_label(sport: u16, dport: u16) -> u32 {
    (u32::from(sport) * 31 + u32::from(dport)) & 0x000f_ffff
}
