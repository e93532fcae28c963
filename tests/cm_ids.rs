//! The connection manager's ids and tables (tests/common/cm.rs's virtual net and bare
//! managers): owners that die mid-connect or connected, the bind tables (EADDRINUSE,
//! ephemeral ports, SO_REUSEADDR), loopback inside one manager, address resolution
//! errors, stale connections.

mod common;

use common::cm::*;
use roce_emu::cm::ucma::{
    CmOption, Command, ConnParam, EventKind, IdNum, PortSpace, QpState, QpType, Reply,
};
use roce_emu::wire::mad::attr;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

#[test]
fn owner_gone_mid_connect_and_connected() {
    // The client dies before the REP: REJ(TIMEOUT) with its GUID; the server's request
    // is REJECTED with reason 4 and its ACCEPT fails.
    let mut net = Net::new(2, 16);
    let (_, _c, s) = request(&mut net, b"");
    net.hosts[CLIENT].owner_gone(net.now, CO);
    net.pump();
    net.settle(Duration::from_secs(60));
    assert_eq!(net.event(SERVER, s, EventKind::Rejected).unwrap().status, 4);
    assert_eq!(
        errno(net.cmd(
            SERVER,
            SO,
            Command::Accept {
                id: s,
                param: rping_param(0x22, b"")
            }
        )),
        22
    );
    assert_eq!(net.hosts[CLIENT].id_count(), 0);

    // The server dies with the request pending: REJ(consumer defined) -> REJECTED 28.
    let mut net = Net::new(2, 17);
    let (_, c, _s) = request(&mut net, b"");
    net.hosts[SERVER].owner_gone(net.now, SO);
    net.pump();
    net.settle(Duration::from_secs(60));
    assert_eq!(
        net.event(CLIENT, c, EventKind::Rejected).unwrap().status,
        28
    );
    assert_eq!(net.hosts[SERVER].id_count(), 0);

    // Connected, the server dies: DREQ, the client is DISCONNECTED; the server's state is
    // gone and a new listener on the same port serves the next connection.
    let mut net = Net::new(2, 18);
    let (c, _s) = establish(&mut net);
    net.hosts[SERVER].owner_gone(net.now, SO);
    net.pump();
    net.advance(Duration::from_millis(5));
    assert_eq!(
        net.event(CLIENT, c, EventKind::Disconnected)
            .unwrap()
            .status,
        0
    );
    assert_eq!(net.hosts[SERVER].id_count(), 0);
    net.cmd(CLIENT, CO, Command::Disconnect { id: c });
    net.settle(Duration::from_secs(60));
    assert_eq!(net.count(CLIENT, c, EventKind::TimewaitExit), 1);
    let (c2, s2) = establish(&mut net);
    assert_eq!(net.count(SERVER, s2, EventKind::Established), 1);
    assert!(c2 != c);
    // Events of a dead owner are not delivered, and its ids are nobody's now.
    assert_eq!(
        errno(net.cmd(SERVER, SO + 1, Command::Query { id: s2 })),
        22
    );
    assert_eq!(errno(net.cmd(SERVER, SO, Command::Query { id: 999 })), 2);
}

fn bind(net: &mut Net, h: usize, id: IdNum, ip: IpAddr, port: u16) -> Reply {
    net.cmd(
        h,
        SO,
        Command::Bind {
            id,
            addr: SocketAddr::new(ip, port),
        },
    )
}

#[test]
fn bind_table_rules() {
    let mut net = Net::new(1, 19);
    let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    let mk = |net: &mut Net| net.create(0, SO, PortSpace::Tcp);
    let (a, b, c, d) = (mk(&mut net), mk(&mut net), mk(&mut net), mk(&mut net));
    assert!(matches!(
        bind(&mut net, 0, a, v4(11), 5000),
        Reply::Bound { .. }
    ));
    assert_eq!(errno(bind(&mut net, 0, b, v4(11), 5000)), 98, "EADDRINUSE");
    assert_eq!(
        errno(bind(&mut net, 0, b, any, 5000)),
        99,
        "any vs an address: EADDRNOTAVAIL"
    );
    assert_eq!(
        errno(bind(&mut net, 0, b, v4(99), 5001)),
        99,
        "not our address"
    );
    assert_eq!(errno(bind(&mut net, 0, a, v4(11), 5002)), 22, "bound twice");
    // The UDP port space is another table.
    let u = net.create(0, SO, PortSpace::Udp);
    assert!(matches!(
        bind(&mut net, 0, u, v4(11), 5000),
        Reply::Bound { .. }
    ));
    // Ephemeral ports: in 32768..=60999, all different.
    let mut seen = Vec::new();
    for _ in 0..20 {
        let e = mk(&mut net);
        let Reply::Bound { addr } = bind(&mut net, 0, e, any, 0) else {
            panic!()
        };
        assert!((32768..=60999).contains(&addr.port()));
        assert!(!seen.contains(&addr.port()));
        seen.push(addr.port());
    }
    // SO_REUSEADDR on both: shared; a listener cannot keep sharing.
    for id in [c, d] {
        assert_eq!(
            net.cmd(
                0,
                SO,
                Command::SetOption {
                    id,
                    option: CmOption::ReuseAddr(true)
                }
            ),
            Reply::Done
        );
    }
    assert!(matches!(
        bind(&mut net, 0, c, v4(11), 6000),
        Reply::Bound { .. }
    ));
    assert!(matches!(
        bind(&mut net, 0, d, v4(11), 6000),
        Reply::Bound { .. }
    ));
    assert_eq!(
        errno(net.cmd(0, SO, Command::Listen { id: c, backlog: 1 })),
        98
    );
    net.cmd(0, SO, Command::DestroyId { id: d });
    assert_eq!(
        net.cmd(0, SO, Command::Listen { id: c, backlog: 1 }),
        Reply::Done
    );
    // Destroy frees the port.
    net.cmd(0, SO, Command::DestroyId { id: a });
    assert!(matches!(
        bind(&mut net, 0, b, v4(11), 5000),
        Reply::Bound { .. }
    ));
    // Listen without bind: any address, an ephemeral port.
    let l = mk(&mut net);
    assert_eq!(
        net.cmd(0, SO, Command::Listen { id: l, backlog: 0 }),
        Reply::Done
    );
    let Reply::Info(i) = net.cmd(0, SO, Command::Query { id: l }) else {
        panic!()
    };
    assert!(i.src.unwrap().ip().is_unspecified() && i.src.unwrap().port() >= 32768);
    assert_eq!(
        i.node_guid, 0,
        "no device for an id on any address (librdmacm: no verbs)"
    );
    // Options in the wrong state.
    assert_eq!(
        errno(net.cmd(
            0,
            SO,
            Command::SetOption {
                id: l,
                option: CmOption::AfOnly(true)
            }
        )),
        22
    );
}

#[test]
fn loopback_in_one_manager() {
    let mut net = Net::new(1, 21);
    let l = net.listen(0, SO, PortSpace::Tcp, None, PORT);
    let c = net.connect(0, CO, PortSpace::Tcp, dst(), rping_param(0x11, b"me"));
    assert!(net.run_until(Duration::from_secs(1), |n| n.request(0, l).is_some()));
    let s = net.request(0, l).unwrap().id;
    net.cmd(
        0,
        SO,
        Command::Accept {
            id: s,
            param: rping_param(0x12, b""),
        },
    );
    assert!(net.run_until(Duration::from_secs(1), |n| n
        .event(0, c, EventKind::ConnectResponse)
        .is_some()));
    net.cmd(
        0,
        CO,
        Command::Accept {
            id: c,
            param: ConnParam::default(),
        },
    );
    net.settle(Duration::from_secs(10));
    assert_eq!(net.count(0, s, EventKind::Established), 1);
    let a = attrs(&mut net, 0, CO, c, QpState::Rtr);
    assert_eq!(a.dest_qp_num, 0x12);
    // Every MAD went from the host to itself.
    assert!(net.wire.iter().all(|w| w.from == 0 && w.to == 0));
    // Events went to the right owners.
    assert!(net.events.iter().filter(|e| e.2.id == c).all(|e| e.1 == CO));
    assert!(net.events.iter().filter(|e| e.2.id == s).all(|e| e.1 == SO));
    // Address resolution to an unreachable address is ADDR_ERROR.
    let x = net.create(0, CO, PortSpace::Tcp);
    net.cmd(
        0,
        CO,
        Command::ResolveAddr {
            id: x,
            src: None,
            dst: SocketAddr::new(v4(99), 1),
            timeout_ms: 100,
        },
    );
    assert_eq!(net.event(0, x, EventKind::AddrError).unwrap().status, -101);
    assert_eq!(
        errno(net.cmd(
            0,
            CO,
            Command::ResolveRoute {
                id: x,
                timeout_ms: 1
            }
        )),
        22
    );
    let _ = QpType::Rc;
}

#[test]
fn address_resolution_errors() {
    use roce_emu::cm::{Cm, CmConfig, Resolved};
    use roce_emu::engine::Instant;
    let t0 = Instant::from_nanos(5);
    let mut cm = Cm::new(CmConfig {
        node_guid: 9,
        addrs: vec![v4(11)],
        mtu: 4096,
        seed: 1,
    });
    let Reply::Id { id } = cm.command(
        t0,
        1,
        Command::CreateId {
            ps: PortSpace::Tcp,
            qp_type: QpType::Rc,
        },
    ) else {
        panic!()
    };
    let d = SocketAddr::new(v4(12), 1);
    let r = cm.command(
        t0,
        1,
        Command::ResolveAddr {
            id,
            src: None,
            dst: d,
            timeout_ms: 500,
        },
    );
    assert_eq!(r, Reply::Done);
    assert_eq!(
        cm.poll_resolve(),
        Some((id, None, v4(12))),
        "any source: the host picks"
    );
    // No answer within the timeout: ADDR_ERROR -ETIMEDOUT, and the id may try again.
    let at = cm.poll_timeout().unwrap();
    assert_eq!(at.since(t0), Duration::from_millis(500));
    cm.handle_timeout(at);
    let (o, e) = cm.poll_event().unwrap();
    assert_eq!((o, e.kind, e.status), (1, EventKind::AddrError, -110));
    assert_eq!(cm.poll_timeout(), None);
    cm.resolved(
        at,
        id,
        Ok(Resolved {
            src: v4(11),
            hop_limit: 64,
        }),
    );
    assert!(cm.poll_event().is_none());
    assert_eq!(cm.stats().drops.stale_resolve, 1);
    // An answer naming an address that is not the port's: ADDR_ERROR -EADDRNOTAVAIL.
    cm.command(
        at,
        1,
        Command::ResolveAddr {
            id,
            src: None,
            dst: d,
            timeout_ms: 500,
        },
    );
    cm.poll_resolve().unwrap();
    cm.resolved(
        at,
        id,
        Ok(Resolved {
            src: v4(99),
            hop_limit: 64,
        }),
    );
    assert_eq!(cm.poll_event().unwrap().1.status, -99);
    // The host's errno, either sign: ADDR_ERROR with it negated.
    cm.command(
        at,
        1,
        Command::ResolveAddr {
            id,
            src: None,
            dst: d,
            timeout_ms: 500,
        },
    );
    cm.poll_resolve().unwrap();
    cm.resolved(at, id, Err(101));
    assert_eq!(cm.poll_event().unwrap().1.status, -101);
    // And a good one: ADDR_RESOLVED, the source filled in, the device known, the 4096 MTU.
    cm.command(
        at,
        1,
        Command::ResolveAddr {
            id,
            src: None,
            dst: d,
            timeout_ms: 500,
        },
    );
    cm.poll_resolve().unwrap();
    cm.resolved(
        at,
        id,
        Ok(Resolved {
            src: v4(11),
            hop_limit: 3,
        }),
    );
    assert_eq!(cm.poll_event().unwrap().1.kind, EventKind::AddrResolved);
    cm.command(at, 1, Command::ResolveRoute { id, timeout_ms: 0 });
    assert_eq!(cm.poll_event().unwrap().1.kind, EventKind::RouteResolved);
    let Reply::Info(i) = cm.command(at, 1, Command::Query { id }) else {
        panic!()
    };
    assert_eq!(i.src.unwrap().ip(), v4(11));
    assert_eq!(
        (i.node_guid, i.path.unwrap().mtu, i.path.unwrap().hop_limit),
        (9, 5, 3)
    );
    assert_eq!(cm.stats().timeouts, 1);
}

#[test]
fn stale_connection_is_rejected_and_dropped() {
    // The client loses its connection without the server hearing of it (the DREQ of its
    // death is lost); its next REQ from the same QP number finds the old connection:
    // REJ(STALE_CONN = 10) to the REQ and a DREQ for the old one (cm_match_req).
    let mut net = Net::new(2, 22);
    let (_c, s) = establish(&mut net);
    net.fault = Some(Box::new(|w| {
        if w.mad.header.attr_id == attr::DREQ {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    net.hosts[CLIENT].owner_gone(net.now, CO);
    net.pump();
    net.fault = None;
    assert!(
        net.event(SERVER, s, EventKind::Disconnected).is_none(),
        "half-open"
    );
    let c2 = net.connect(CLIENT, CO, PortSpace::Tcp, dst(), rping_param(0x11, b""));
    net.advance(Duration::from_millis(10));
    assert_eq!(
        net.event(CLIENT, c2, EventKind::Rejected).unwrap().status,
        10
    );
    assert_eq!(
        net.event(SERVER, s, EventKind::Disconnected)
            .unwrap()
            .status,
        0
    );
    // The server's program disconnects the old one; the next connect works.
    net.cmd(SERVER, SO, Command::DestroyId { id: s });
    net.settle(Duration::from_secs(60));
    let c3 = net.connect(CLIENT, CO, PortSpace::Tcp, dst(), rping_param(0x11, b""));
    net.advance(Duration::from_millis(10));
    assert!(net.event(CLIENT, c3, EventKind::ConnectResponse).is_none());
    let l = net
        .events
        .iter()
        .rev()
        .find(|e| e.2.kind == EventKind::ConnectRequest)
        .unwrap()
        .2
        .clone();
    assert_ne!(l.id, s, "a new request");
}
