//! Listeners (tests/common/cm.rs's virtual net and bare managers): on an address or on
//! any, IPv6 and dual stack with AF_ONLY, a full backlog, a listener destroyed with
//! requests its program never read.

mod common;

use common::cm::*;
use roce_emu::cm::ucma::{CmOption, Command, EventKind, PortSpace, QpType, Reply};
use roce_emu::wire::mad::attr;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

#[test]
fn listen_on_an_address_or_on_any() {
    let mut net = Net::new(2, 20);
    let other = v4(21);
    net.add_addr(SERVER, other);
    // On .11 only: a request for .21 finds the service ID but no rdma_cm listener: REJ 28.
    let l = net.listen(SERVER, SO, PortSpace::Tcp, Some(v4(11)), PORT);
    let c1 = net.connect(
        CLIENT,
        CO,
        PortSpace::Tcp,
        SocketAddr::new(other, PORT),
        rping_param(1, b""),
    );
    let c2 = net.connect(CLIENT, CO, PortSpace::Tcp, dst(), rping_param(2, b""));
    net.advance(Duration::from_millis(10));
    assert_eq!(
        net.event(CLIENT, c1, EventKind::Rejected).unwrap().status,
        28
    );
    assert!(net.request(SERVER, l).is_some());
    assert!(net.event(CLIENT, c2, EventKind::Rejected).is_none());
    // A second program on another port of the same device.
    let l2 = net.listen(SERVER, SO + 1, PortSpace::Tcp, None, PORT + 1);
    let c3 = net.connect(
        CLIENT,
        CO,
        PortSpace::Tcp,
        SocketAddr::new(other, PORT + 1),
        rping_param(3, b""),
    );
    net.advance(Duration::from_millis(10));
    let r = net.request(SERVER, l2).unwrap();
    assert_eq!(
        net.events.iter().find(|e| e.2.id == r.id).unwrap().1,
        SO + 1,
        "the listener's owner"
    );
    let Reply::Info(i) = net.cmd(SERVER, SO + 1, Command::Query { id: r.id }) else {
        panic!()
    };
    assert_eq!(i.src, Some(SocketAddr::new(other, PORT + 1)));
    assert!(net.event(CLIENT, c3, EventKind::Rejected).is_none());
}

#[test]
fn ipv6_and_dual_stack_listeners() {
    use roce_emu::wire::cm::{cma, Message};
    let a6: IpAddr = "2001:db8:4791::11".parse().unwrap();
    let b6: IpAddr = "2001:db8:4791::12".parse().unwrap();
    let any6: IpAddr = "::".parse().unwrap();
    let mut net = Net::new(2, 23);
    net.add_addr(SERVER, a6);
    net.add_addr(CLIENT, b6);
    let l = net.listen(SERVER, SO, PortSpace::Tcp, Some(any6), PORT);
    let c = net.connect(
        CLIENT,
        CO,
        PortSpace::Tcp,
        SocketAddr::new(a6, PORT),
        rping_param(7, b"six"),
    );
    net.advance(Duration::from_millis(5));
    let r = net.request(SERVER, l).expect("an IPv6 request").clone();
    let Reply::Info(i) = net.cmd(SERVER, SO, Command::Query { id: r.id }) else {
        panic!()
    };
    assert_eq!(i.src, Some(SocketAddr::new(a6, PORT)));
    assert_eq!(i.dst.unwrap().ip(), b6);
    let req = net.sent(CLIENT, attr::REQ)[0].mad;
    let Message::Req(q) = req.msg else { panic!() };
    let h = cma::Repr::parse(&cma::Packet::new_checked(&q.private_data[..]).unwrap()).unwrap();
    assert!(matches!(h.addrs, cma::Addrs::V6 { .. }));
    assert_eq!(q.primary_path.local_gid, roce_emu::cm::ucma::ip_gid(b6));
    net.cmd(
        SERVER,
        SO,
        Command::Accept {
            id: r.id,
            param: rping_param(8, b""),
        },
    );
    net.advance(Duration::from_millis(5));
    assert!(net.event(CLIENT, c, EventKind::ConnectResponse).is_some());
    // An IPv4 request reaches the "::" listener too, unless it is AF_ONLY.
    let c4 = net.connect(CLIENT, CO, PortSpace::Tcp, dst(), rping_param(9, b""));
    net.advance(Duration::from_millis(5));
    assert!(net.event(CLIENT, c4, EventKind::Rejected).is_none());
    assert_eq!(net.request(SERVER, l).unwrap().listen_id, Some(l));
    let id = net.create(SERVER, SO, PortSpace::Tcp);
    net.cmd(
        SERVER,
        SO,
        Command::SetOption {
            id,
            option: CmOption::AfOnly(true),
        },
    );
    net.cmd(
        SERVER,
        SO,
        Command::Bind {
            id,
            addr: SocketAddr::new(any6, PORT + 2),
        },
    );
    net.cmd(SERVER, SO, Command::Listen { id, backlog: 1 });
    let c5 = net.connect(
        CLIENT,
        CO,
        PortSpace::Tcp,
        SocketAddr::new(v4(11), PORT + 2),
        rping_param(10, b""),
    );
    net.advance(Duration::from_millis(5));
    assert_eq!(
        net.event(CLIENT, c5, EventKind::Rejected).unwrap().status,
        28
    );
}

#[test]
fn full_backlog_drops_the_request_without_a_rej() {
    use roce_emu::cm::{Cm, CmConfig, MadPeer, Resolved};
    use roce_emu::engine::Instant;
    let now = Instant::from_nanos(1);
    let mk = |g, ip| {
        Cm::new(CmConfig {
            node_guid: g,
            addrs: vec![ip],
            mtu: 1024,
            seed: g,
        })
    };
    let (mut s, mut c) = (mk(1, v4(11)), mk(2, v4(12)));
    let Reply::Id { id: l } = s.command(
        now,
        1,
        Command::CreateId {
            ps: PortSpace::Tcp,
            qp_type: QpType::Rc,
        },
    ) else {
        panic!()
    };
    s.command(now, 1, Command::Bind { id: l, addr: dst() });
    s.command(now, 1, Command::Listen { id: l, backlog: 1 });
    let mut reqs = Vec::new();
    for qpn in [1, 2] {
        let Reply::Id { id } = c.command(
            now,
            2,
            Command::CreateId {
                ps: PortSpace::Tcp,
                qp_type: QpType::Rc,
            },
        ) else {
            panic!()
        };
        c.command(
            now,
            2,
            Command::ResolveAddr {
                id,
                src: None,
                dst: dst(),
                timeout_ms: 9,
            },
        );
        c.poll_resolve().unwrap();
        c.resolved(
            now,
            id,
            Ok(Resolved {
                src: v4(12),
                hop_limit: 64,
            }),
        );
        c.command(now, 2, Command::ResolveRoute { id, timeout_ms: 9 });
        c.command(
            now,
            2,
            Command::Connect {
                id,
                param: rping_param(qpn, b""),
            },
        );
        reqs.push(c.poll_transmit().unwrap().1);
    }
    let peer = MadPeer {
        remote: v4(12),
        local: v4(11),
    };
    s.handle_mad(now, peer, &reqs[0]);
    s.handle_mad(now, peer, &reqs[1]);
    assert!(s.poll_transmit().is_none(), "no REJ: the client will retry");
    assert_eq!(s.stats().drops.backlog, 1);
    // The program takes the first request: room again for the retried second.
    let (_, e) = s.poll_event().unwrap();
    assert_eq!(
        (e.kind, e.param.unwrap().qp_num),
        (EventKind::ConnectRequest, 1)
    );
    assert!(s.poll_event().is_none());
    s.handle_mad(now, peer, &reqs[1]);
    let (_, e) = s.poll_event().unwrap();
    assert_eq!(
        (e.kind, e.param.unwrap().qp_num),
        (EventKind::ConnectRequest, 2)
    );
}

#[test]
fn destroyed_listener_takes_its_unseen_requests_along() {
    use roce_emu::cm::{Cm, CmConfig, MadPeer, Resolved};
    use roce_emu::engine::Instant;
    use roce_emu::wire::cm::{CmMad, Message};
    let now = Instant::from_nanos(1);
    let mk = |g, ip| {
        Cm::new(CmConfig {
            node_guid: g,
            addrs: vec![ip],
            mtu: 1024,
            seed: g,
        })
    };
    let (mut s, mut c) = (mk(1, v4(11)), mk(2, v4(12)));
    let Reply::Id { id: l } = s.command(
        now,
        1,
        Command::CreateId {
            ps: PortSpace::Tcp,
            qp_type: QpType::Rc,
        },
    ) else {
        panic!()
    };
    s.command(now, 1, Command::Listen { id: l, backlog: 4 });
    let Reply::Info(i) = s.command(now, 1, Command::Query { id: l }) else {
        panic!()
    };
    let to = SocketAddr::new(v4(11), i.src.unwrap().port());
    let Reply::Id { id } = c.command(
        now,
        2,
        Command::CreateId {
            ps: PortSpace::Tcp,
            qp_type: QpType::Rc,
        },
    ) else {
        panic!()
    };
    c.command(
        now,
        2,
        Command::ResolveAddr {
            id,
            src: None,
            dst: to,
            timeout_ms: 9,
        },
    );
    c.poll_resolve().unwrap();
    c.resolved(
        now,
        id,
        Ok(Resolved {
            src: v4(12),
            hop_limit: 64,
        }),
    );
    c.command(now, 2, Command::ResolveRoute { id, timeout_ms: 9 });
    c.command(
        now,
        2,
        Command::Connect {
            id,
            param: rping_param(5, b""),
        },
    );
    let req = c.poll_transmit().unwrap().1;
    s.handle_mad(
        now,
        MadPeer {
            remote: v4(12),
            local: v4(11),
        },
        &req,
    );
    assert_eq!(s.id_count(), 2, "the listener and the request's id");
    // The program closes the listener before reading the request (ucma_cleanup_ctx_events).
    assert_eq!(s.command(now, 1, Command::DestroyId { id: l }), Reply::Done);
    assert!(s.poll_event().is_none());
    assert_eq!(s.id_count(), 0);
    let rej = CmMad::parse(&s.poll_transmit().unwrap().1).unwrap();
    let Message::Rej(r) = rej.msg else {
        panic!("{rej}")
    };
    assert_eq!(r.reason.code(), 28);
}

/// A server that listens on its port again between connections (perftest -R: the
/// exchange's listener destroyed, a new one for the data connection) while its client
/// connects at once: the REQ that finds no listener waits for the new one (`relisten`,
/// a deliberate difference from the kernel's immediate REJ), and is taken by it as if it
/// had just arrived: no REJ, one REQ counted.
#[test]
fn a_request_waits_for_the_listener_its_owner_is_replacing() {
    let mut net = Net::new(2, 31);
    let l = net.listen(SERVER, SO, PortSpace::Tcp, None, PORT);
    assert_eq!(
        net.cmd(SERVER, SO, Command::DestroyId { id: l }),
        Reply::Done
    );
    let c = net.connect(CLIENT, CO, PortSpace::Tcp, dst(), rping_param(1, b""));
    net.advance(Duration::from_millis(5));
    assert!(net.event(CLIENT, c, EventKind::Rejected).is_none());
    assert!(net.sent(SERVER, attr::REJ).is_empty());
    assert_eq!(net.hosts[SERVER].stats().reqs_held, 1);
    let l2 = net.listen(SERVER, SO, PortSpace::Tcp, None, PORT);
    net.advance(Duration::from_millis(5));
    let r = net
        .request(SERVER, l2)
        .expect("the held request, for the new listener");
    let r = r.id;
    net.cmd(
        SERVER,
        SO,
        Command::Accept {
            id: r,
            param: rping_param(2, b""),
        },
    );
    net.advance(Duration::from_millis(5));
    assert!(net.event(CLIENT, c, EventKind::ConnectResponse).is_some());
    let st = net.hosts[SERVER].stats();
    assert_eq!(
        (st.mads_in.req, st.reqs_held_rejected, st.dropped()),
        (1, 0, 0)
    );
    assert!(net.sent(SERVER, attr::REJ).is_empty());
}

/// No listener comes back: the held REQ gets the REJ it would have had (invalid service
/// ID), no sooner than the hold and no later; once the port's window is over, a REQ is
/// rejected at once again.
#[test]
fn a_request_held_in_vain_gets_its_rej_after_the_hold() {
    let mut net = Net::new(2, 32);
    let l = net.listen(SERVER, SO, PortSpace::Tcp, None, PORT);
    net.cmd(SERVER, SO, Command::DestroyId { id: l });
    let c = net.connect(CLIENT, CO, PortSpace::Tcp, dst(), rping_param(1, b""));
    net.advance(Duration::from_millis(190));
    assert!(
        net.event(CLIENT, c, EventKind::Rejected).is_none(),
        "rejected within the hold"
    );
    net.advance(Duration::from_millis(20));
    assert_eq!(
        net.event(CLIENT, c, EventKind::Rejected).map(|e| e.status),
        Some(8)
    );
    let st = net.hosts[SERVER].stats();
    assert_eq!((st.reqs_held, st.reqs_held_rejected), (1, 1));
    net.advance(Duration::from_secs(10));
    let c2 = net.connect(CLIENT, CO, PortSpace::Tcp, dst(), rping_param(3, b""));
    net.advance(Duration::from_millis(2));
    assert_eq!(
        net.event(CLIENT, c2, EventKind::Rejected).map(|e| e.status),
        Some(8)
    );
    assert_eq!(net.hosts[SERVER].stats().reqs_held, 1);
}

/// A listener that went with its program (not destroyed by it) is not coming back: the
/// kernel's immediate REJ; so for a port never listened on.
#[test]
fn a_listener_gone_with_its_program_holds_nothing() {
    let mut net = Net::new(2, 33);
    net.listen(SERVER, SO, PortSpace::Tcp, None, PORT);
    let now = net.now;
    net.hosts[SERVER].owner_gone(now, SO);
    let c = net.connect(CLIENT, CO, PortSpace::Tcp, dst(), rping_param(1, b""));
    let never = net.connect(
        CLIENT,
        CO,
        PortSpace::Tcp,
        SocketAddr::new(dst().ip(), PORT + 9),
        rping_param(2, b""),
    );
    net.advance(Duration::from_millis(2));
    for id in [c, never] {
        assert_eq!(
            net.event(CLIENT, id, EventKind::Rejected).map(|e| e.status),
            Some(8)
        );
    }
    assert_eq!(net.hosts[SERVER].stats().reqs_held, 0);
}
