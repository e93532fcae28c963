//! The connection manager core (`roce_emu::cm`) between two (or one) virtual hosts on a
//! deterministic virtual-time network (tests/common/cm.rs): RC connect / accept /
//! establish / disconnect as the kernel's IB CM and rdma_cm do it, with rejects, retries,
//! MRAs, lost messages, DREQ in each state, SIDR, dead owners, the bind tables, loopback.

mod common;

use common::cm::{rping_param, v4, Fate, Net};
use roce_emu::cm::ucma::{
    CmOption, Command, ConnParam, EventKind, IdNum, PortSpace, QpAttrs, QpState, QpType, Reply,
};
use roce_emu::wire::cm::{mra, Message};
use roce_emu::wire::mad::attr;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

const SERVER: usize = 0;
const CLIENT: usize = 1;
const SO: u64 = 100; // server owner
const CO: u64 = 200; // client owner
const PORT: u16 = 7174;

fn dst() -> SocketAddr {
    SocketAddr::new(v4(11), PORT)
}

fn attrs(net: &mut Net, h: usize, owner: u64, id: IdNum, state: QpState) -> QpAttrs {
    match net.cmd(h, owner, Command::InitQpAttr { id, state }) {
        Reply::QpAttrs(a) => a,
        r => panic!("init_qp_attr {state:?}: {r:?}"),
    }
}

fn errno(r: Reply) -> i32 {
    match r {
        Reply::Errno { errno, .. } => errno,
        r => panic!("expected an error, got {r:?}"),
    }
}

/// Listener on the server, client connect; returns (listener, client id, server child).
fn request(net: &mut Net, pd: &[u8]) -> (IdNum, IdNum, IdNum) {
    let l = net.listen(SERVER, SO, PortSpace::Tcp, None, PORT);
    let c = net.connect(CLIENT, CO, PortSpace::Tcp, dst(), rping_param(0x11, pd));
    assert!(net.run_until(Duration::from_secs(1), |n| n.request(SERVER, l).is_some()));
    let child = net.request(SERVER, l).unwrap().id;
    (l, c, child)
}

/// The whole handshake, as librdmacm drives it; returns (client id, server child).
fn establish(net: &mut Net) -> (IdNum, IdNum) {
    let (_, c, s) = request(net, b"req");
    net.cmd(
        SERVER,
        SO,
        Command::Accept {
            id: s,
            param: rping_param(0x22, b"rep"),
        },
    );
    assert!(net.run_until(Duration::from_secs(30), |n| n
        .event(CLIENT, c, EventKind::ConnectResponse)
        .is_some()));
    assert_eq!(
        net.cmd(
            CLIENT,
            CO,
            Command::Accept {
                id: c,
                param: ConnParam::default()
            }
        ),
        Reply::Done
    );
    assert!(net.run_until(Duration::from_secs(30), |n| n
        .event(SERVER, s, EventKind::Established)
        .is_some()));
    (c, s)
}

#[test]
fn rc_connect_accept_establish_disconnect() {
    let mut net = Net::new(2, 1);
    let (l, c, s) = request(&mut net, b"hello from the client");
    let req = net.request(SERVER, l).unwrap().clone();
    let p = req.param.clone().unwrap();
    assert_eq!(&p.private_data[..21], b"hello from the client");
    assert_eq!(
        p.private_data.len(),
        56,
        "REQ private data after the 36-byte cma_hdr"
    );
    assert_eq!(
        (p.qp_num, p.responder_resources, p.initiator_depth),
        (0x11, 1, 1)
    );
    assert_eq!((p.retry_count, p.rnr_retry_count), (7, 7));
    // The child's addresses come from the cma_hdr.
    let Reply::Info(info) = net.cmd(SERVER, SO, Command::Query { id: s }) else {
        panic!()
    };
    let Reply::Info(cinfo) = net.cmd(CLIENT, CO, Command::Query { id: c }) else {
        panic!()
    };
    assert_eq!(info.src, Some(dst()));
    assert_eq!(info.dst, cinfo.src);
    assert_eq!(info.node_guid, common::cm::guid(SERVER));

    // Passive side: INIT, RTR, RTS, then ACCEPT (REP).
    let s_init = attrs(&mut net, SERVER, SO, s, QpState::Init);
    let s_rtr = attrs(&mut net, SERVER, SO, s, QpState::Rtr);
    let s_rts = attrs(&mut net, SERVER, SO, s, QpState::Rts);
    let r = net.cmd(
        SERVER,
        SO,
        Command::Accept {
            id: s,
            param: rping_param(0x22, b"hello from the server"),
        },
    );
    assert_eq!(r, Reply::Done);
    assert!(net.run_until(Duration::from_secs(1), |n| n
        .event(CLIENT, c, EventKind::ConnectResponse)
        .is_some()));
    let resp = net
        .event(CLIENT, c, EventKind::ConnectResponse)
        .unwrap()
        .clone();
    let rp = resp.param.unwrap();
    assert_eq!(&rp.private_data[..21], b"hello from the server");
    assert_eq!(rp.private_data.len(), 196);
    assert_eq!(rp.qp_num, 0x22);
    // Active side: INIT, RTR, RTS, then ACCEPT = rdma_establish (RTU).
    let c_init = attrs(&mut net, CLIENT, CO, c, QpState::Init);
    let c_rtr = attrs(&mut net, CLIENT, CO, c, QpState::Rtr);
    let c_rts = attrs(&mut net, CLIENT, CO, c, QpState::Rts);
    assert_eq!(
        net.cmd(
            CLIENT,
            CO,
            Command::Accept {
                id: c,
                param: ConnParam::default()
            }
        ),
        Reply::Done
    );
    assert!(net.run_until(Duration::from_secs(1), |n| n
        .event(SERVER, s, EventKind::Established)
        .is_some()));
    // librdmacm reports ESTABLISHED on the active side itself; the kernel sends none.
    assert_eq!(net.count(CLIENT, c, EventKind::Established), 0);
    assert_eq!(net.count(SERVER, s, EventKind::Established), 1);

    // The attributes agree crosswise.
    for a in [&s_init, &c_init] {
        assert_eq!(a.mask, 1 | 8 | 16 | 32, "INIT: STATE|ACCESS|PKEY|PORT");
        assert_eq!(a.qp_access_flags, 2 | 4 | 8, "REMOTE_WRITE|READ|ATOMIC");
        assert_eq!((a.qp_state, a.port_num, a.pkey_index), (1, 1, 0));
    }
    for a in [&s_rtr, &c_rtr] {
        assert_eq!(
            a.mask,
            1 | (1 << 7) | (1 << 8) | (1 << 20) | (1 << 12) | (1 << 17) | (1 << 15)
        );
        assert_eq!(
            (
                a.qp_state,
                a.path_mtu,
                a.max_dest_rd_atomic,
                a.min_rnr_timer
            ),
            (2, 3, 1, 0)
        );
    }
    for a in [&s_rts, &c_rts] {
        assert_eq!(
            a.mask,
            1 | (1 << 16) | (1 << 10) | (1 << 11) | (1 << 13) | (1 << 9)
        );
        assert_eq!(
            (
                a.qp_state,
                a.retry_cnt,
                a.rnr_retry,
                a.max_rd_atomic,
                a.timeout
            ),
            (3, 7, 7, 1, 19)
        );
    }
    assert_eq!(c_rtr.dest_qp_num, 0x22);
    assert_eq!(s_rtr.dest_qp_num, 0x11);
    assert_eq!(
        c_rts.sq_psn, s_rtr.rq_psn,
        "client sends with the server's receive PSN"
    );
    assert_eq!(
        s_rts.sq_psn, c_rtr.rq_psn,
        "server sends with the client's receive PSN"
    );
    assert_ne!(s_rtr.rq_psn, c_rtr.rq_psn);
    let (cah, sah) = (c_rtr.ah.unwrap(), s_rtr.ah.unwrap());
    assert_eq!(
        cah.dgid,
        v4(11)
            .to_canonical()
            .to_string()
            .parse::<Ipv4Addr>()
            .unwrap()
            .to_ipv6_mapped()
            .octets()
    );
    assert_eq!(
        sah.dgid,
        Ipv4Addr::new(198, 18, 0, 12).to_ipv6_mapped().octets()
    );
    assert_eq!(
        (cah.hop_limit, sah.hop_limit, cah.flow_label),
        (64, 64, sah.flow_label)
    );
    assert_eq!((cah.sgid_index, sah.sgid_index), (1, 1));

    // The wire: REQ, REP, RTU and no MRA (the delayed MRAs answer only duplicates).
    assert_eq!(net.sent(CLIENT, attr::REQ).len(), 1);
    assert_eq!(net.sent(SERVER, attr::REP).len(), 1);
    assert_eq!(net.sent(CLIENT, attr::RTU).len(), 1);
    assert!(net.sent(SERVER, attr::MRA).is_empty() && net.sent(CLIENT, attr::MRA).is_empty());

    // Disconnect: client DREQ, server DISCONNECTED; server DISCONNECT = DREP; client
    // DISCONNECTED; both in timewait, then TIMEWAIT_EXIT.
    assert_eq!(
        net.cmd(CLIENT, CO, Command::Disconnect { id: c }),
        Reply::Done
    );
    assert!(net.run_until(Duration::from_secs(1), |n| n
        .event(SERVER, s, EventKind::Disconnected)
        .is_some()));
    assert_eq!(
        net.cmd(SERVER, SO, Command::Disconnect { id: s }),
        Reply::Done
    );
    net.settle(Duration::from_secs(30));
    assert_eq!(
        net.kinds(CLIENT, c)[2..],
        [
            EventKind::ConnectResponse,
            EventKind::Disconnected,
            EventKind::TimewaitExit
        ]
    );
    assert_eq!(
        net.kinds(SERVER, s),
        [
            EventKind::ConnectRequest,
            EventKind::Established,
            EventKind::Disconnected,
            EventKind::TimewaitExit
        ]
    );
    assert_eq!(net.sent(CLIENT, attr::DREQ).len(), 1);
    assert_eq!(net.sent(SERVER, attr::DREP).len(), 1);
    assert_eq!(net.hosts[SERVER].stats().dropped(), 0);
    assert_eq!(net.hosts[CLIENT].stats().dropped(), 0);
}

#[test]
fn reject_with_private_data() {
    let mut net = Net::new(2, 2);
    let (_, c, s) = request(&mut net, b"");
    let r = net.cmd(
        SERVER,
        SO,
        Command::Reject {
            id: s,
            private_data: b"go away".to_vec(),
            reason: None,
        },
    );
    assert_eq!(r, Reply::Done);
    net.settle(Duration::from_secs(60));
    let e = net
        .event(CLIENT, c, EventKind::Rejected)
        .expect("REJECTED")
        .clone();
    assert_eq!(e.status, 28);
    let pd = e.param.unwrap().private_data;
    assert_eq!((&pd[..7], pd.len()), (&b"go away"[..], 148));
    assert_eq!(net.kinds(CLIENT, c)[2..], [EventKind::Rejected]);
    assert_eq!(
        net.sent(CLIENT, attr::REQ).len(),
        1,
        "no retry after the REJ"
    );
    // A bad reason is the user's mistake.
    let mut net = Net::new(2, 2);
    let (_, _, s2) = request(&mut net, b"");
    let r = net.cmd(
        SERVER,
        SO,
        Command::Reject {
            id: s2,
            private_data: vec![],
            reason: Some(8),
        },
    );
    assert_eq!(errno(r), 22);
}

#[test]
fn no_listener_is_rej_invalid_service_id() {
    let mut net = Net::new(2, 3);
    let c = net.connect(CLIENT, CO, PortSpace::Tcp, dst(), rping_param(0x11, b""));
    net.settle(Duration::from_secs(60));
    let e = net.event(CLIENT, c, EventKind::Rejected).expect("REJECTED");
    assert_eq!(e.status, 8);
    let rej = net.sent(SERVER, attr::REJ);
    assert_eq!(rej.len(), 1);
    let req = net.sent(CLIENT, attr::REQ)[0].mad;
    assert_eq!(
        rej[0].mad.header.tid, req.header.tid,
        "the REJ echoes the REQ's TID"
    );
}

#[test]
fn unanswered_req_is_retried_15_times_then_unreachable() {
    let mut net = Net::new(2, 4);
    net.listen(SERVER, SO, PortSpace::Tcp, None, PORT);
    net.fault = Some(Box::new(|w| {
        if w.mad.header.attr_id == attr::REQ {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    let t0 = net.now;
    let c = net.connect(CLIENT, CO, PortSpace::Tcp, dst(), rping_param(0x11, b""));
    net.settle(Duration::from_secs(600));
    let reqs = net.sent(CLIENT, attr::REQ);
    assert_eq!(reqs.len(), 16, "the REQ and 15 retries");
    for w in reqs.windows(2) {
        assert_eq!(
            w[1].at.since(w[0].at),
            Duration::from_millis(6144),
            "2*2^(18-8) + 2^(20-8) ms"
        );
    }
    let e = net
        .event(CLIENT, c, EventKind::Unreachable)
        .expect("UNREACHABLE");
    assert_eq!(e.status, -110);
    let at = net
        .events
        .iter()
        .find(|x| x.2.kind == EventKind::Unreachable)
        .unwrap()
        .3;
    assert_eq!(at.since(t0), Duration::from_millis(16 * 6144));
    assert_eq!(net.hosts[CLIENT].stats().retries.req, 15);
    // Destroying it now sends nothing (the IB CM id is idle).
    let before = net.wire.len();
    net.cmd(CLIENT, CO, Command::DestroyId { id: c });
    assert_eq!(net.wire.len(), before);
}

#[test]
fn slow_accept_gets_an_mra_and_the_active_side_waits() {
    let mut net = Net::new(2, 5);
    let (_, c, s) = request(&mut net, b"");
    // The program takes 20 s: the REQ times out at 6.1 s and is sent again; the duplicate
    // gets the MRA (service timeout 24: 2^16 ms + 2^(19-8) ms more).
    net.advance(Duration::from_secs(20));
    let mras = net.sent(SERVER, attr::MRA);
    assert_eq!(mras.len(), 1);
    let Message::Mra(m) = mras[0].mad.msg else {
        panic!()
    };
    assert_eq!((m.message_mraed, m.service_timeout), (mra::MRAED_REQ, 24));
    assert_eq!(net.sent(CLIENT, attr::REQ).len(), 2);
    assert!(net.event(CLIENT, c, EventKind::Unreachable).is_none());
    net.cmd(
        SERVER,
        SO,
        Command::Accept {
            id: s,
            param: rping_param(0x22, b""),
        },
    );
    assert!(net.run_until(Duration::from_secs(1), |n| n
        .event(CLIENT, c, EventKind::ConnectResponse)
        .is_some()));
    net.cmd(
        CLIENT,
        CO,
        Command::Accept {
            id: c,
            param: ConnParam::default(),
        },
    );
    net.settle(Duration::from_secs(200));
    assert_eq!(net.count(SERVER, s, EventKind::Established), 1);
    assert_eq!(
        net.sent(CLIENT, attr::REQ).len(),
        2,
        "the MRA stopped the retries"
    );

    // Without the MRA the client would have given up: 16 REQs over 98 s, all unanswered.
    let mut net = Net::new(2, 5);
    net.fault = Some(Box::new(|w| {
        if w.mad.header.attr_id == attr::MRA {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    let (_, c, _) = request(&mut net, b"");
    net.settle(Duration::from_secs(200));
    assert_eq!(
        net.event(CLIENT, c, EventKind::Unreachable).unwrap().status,
        -110
    );
}

#[test]
fn lost_rep_is_retransmitted() {
    let mut net = Net::new(2, 6);
    let mut dropped = false;
    net.fault = Some(Box::new(move |w| {
        if w.mad.header.attr_id == attr::REP && !dropped {
            dropped = true;
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    let (c, s) = establish(&mut net);
    let reps = net.sent(SERVER, attr::REP);
    assert_eq!(reps.len(), 2);
    assert_eq!(
        reps[1].at.since(reps[0].at),
        Duration::from_millis(4096),
        "2^(20-8) ms"
    );
    assert_eq!(net.count(CLIENT, c, EventKind::ConnectResponse), 1);
    assert_eq!(net.count(SERVER, s, EventKind::Established), 1);
}

#[test]
fn lost_rtu_is_answered_by_the_rep_retry_or_comm_est() {
    let mut net = Net::new(2, 7);
    let mut dropped = false;
    net.fault = Some(Box::new(move |w| {
        if w.mad.header.attr_id == attr::RTU && !dropped {
            dropped = true;
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    let (c, s) = establish(&mut net);
    // The REP came again after 4 s; the established client answered with the RTU again.
    assert_eq!(net.sent(SERVER, attr::REP).len(), 2);
    assert_eq!(net.sent(CLIENT, attr::RTU).len(), 2);
    assert_eq!(net.count(SERVER, s, EventKind::Established), 1);
    assert_eq!(net.count(CLIENT, c, EventKind::ConnectResponse), 1);

    // The passive QP saw traffic first: NOTIFY(COMM_EST) establishes, the REP stops.
    let mut net = Net::new(2, 8);
    net.fault = Some(Box::new(|w| {
        if w.mad.header.attr_id == attr::RTU {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    let (_, c, s) = request(&mut net, b"");
    net.cmd(
        SERVER,
        SO,
        Command::Accept {
            id: s,
            param: rping_param(0x22, b""),
        },
    );
    assert!(net.run_until(Duration::from_secs(1), |n| n
        .event(CLIENT, c, EventKind::ConnectResponse)
        .is_some()));
    net.cmd(
        CLIENT,
        CO,
        Command::Accept {
            id: c,
            param: ConnParam::default(),
        },
    );
    net.advance(Duration::from_millis(10));
    assert_eq!(
        net.cmd(SERVER, SO, Command::Notify { id: s, event: 4 }),
        Reply::Done
    );
    assert_eq!(net.count(SERVER, s, EventKind::Established), 1);
    assert_eq!(
        errno(net.cmd(SERVER, SO, Command::Notify { id: s, event: 4 })),
        106,
        "EISCONN"
    );
    net.settle(Duration::from_secs(100));
    assert_eq!(net.sent(SERVER, attr::REP).len(), 1);
    assert_eq!(net.count(SERVER, s, EventKind::Established), 1);
}

#[test]
fn dreq_in_each_state() {
    // Unanswered DREQ: 15 retries (the client's REQ timeout apart), then DISCONNECTED
    // with -ETIMEDOUT, timewait, TIMEWAIT_EXIT.
    let mut net = Net::new(2, 9);
    let (c, _s) = establish(&mut net);
    net.fault = Some(Box::new(|w| {
        if w.mad.header.attr_id == attr::DREQ {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    net.cmd(CLIENT, CO, Command::Disconnect { id: c });
    net.settle(Duration::from_secs(600));
    assert_eq!(net.sent(CLIENT, attr::DREQ).len(), 16);
    let e = net.event(CLIENT, c, EventKind::Disconnected).unwrap();
    assert_eq!(e.status, -110);
    assert_eq!(net.kinds(CLIENT, c).last(), Some(&EventKind::TimewaitExit));

    // Crossing DREQs: each side sees the other's in DREQ_SENT, reports DISCONNECTED once;
    // the second DISCONNECT answers with the DREP.
    let mut net = Net::new(2, 10);
    let (c, s) = establish(&mut net);
    net.cmd(CLIENT, CO, Command::Disconnect { id: c });
    net.cmd(SERVER, SO, Command::Disconnect { id: s });
    net.advance(Duration::from_millis(5));
    assert_eq!(net.count(CLIENT, c, EventKind::Disconnected), 1);
    assert_eq!(net.count(SERVER, s, EventKind::Disconnected), 1);
    net.cmd(CLIENT, CO, Command::Disconnect { id: c });
    net.cmd(SERVER, SO, Command::Disconnect { id: s });
    net.settle(Duration::from_secs(60));
    assert_eq!(net.count(CLIENT, c, EventKind::Disconnected), 1);
    assert_eq!(net.count(SERVER, s, EventKind::Disconnected), 1);
    assert_eq!(net.count(CLIENT, c, EventKind::TimewaitExit), 1);
    assert_eq!(net.count(SERVER, s, EventKind::TimewaitExit), 1);
    assert_eq!(
        net.sent(CLIENT, attr::DREQ).len(),
        1,
        "no DREQ retry after the crossing"
    );

    // DREQ while the passive side still waits for the RTU (lost): it is disconnected
    // without ever being established, and its REP stops.
    let mut net = Net::new(2, 11);
    net.fault = Some(Box::new(|w| {
        if w.mad.header.attr_id == attr::RTU {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    let (_, c, s) = request(&mut net, b"");
    net.cmd(
        SERVER,
        SO,
        Command::Accept {
            id: s,
            param: rping_param(0x22, b""),
        },
    );
    assert!(net.run_until(Duration::from_secs(1), |n| n
        .event(CLIENT, c, EventKind::ConnectResponse)
        .is_some()));
    net.cmd(
        CLIENT,
        CO,
        Command::Accept {
            id: c,
            param: ConnParam::default(),
        },
    );
    net.advance(Duration::from_millis(5));
    net.cmd(CLIENT, CO, Command::Disconnect { id: c });
    net.advance(Duration::from_millis(5));
    assert_eq!(
        net.kinds(SERVER, s),
        [EventKind::ConnectRequest, EventKind::Disconnected]
    );
    net.cmd(SERVER, SO, Command::Disconnect { id: s });
    net.settle(Duration::from_secs(60));
    assert_eq!(net.sent(SERVER, attr::REP).len(), 1);
    assert_eq!(net.count(CLIENT, c, EventKind::Disconnected), 1);

    // DREQ for a connection the peer no longer has: answered with a DREP anyway.
    let mut net = Net::new(2, 12);
    let (c, s) = establish(&mut net);
    net.fault = Some(Box::new(|w| {
        if w.mad.header.attr_id == attr::DREQ {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    net.cmd(SERVER, SO, Command::DestroyId { id: s }); // its DREQ is lost
    net.fault = None;
    net.cmd(CLIENT, CO, Command::Disconnect { id: c });
    net.settle(Duration::from_secs(60));
    assert_eq!(net.sent(SERVER, attr::DREP).len(), 1);
    assert_eq!(
        net.event(CLIENT, c, EventKind::Disconnected)
            .unwrap()
            .status,
        0
    );

    // DISCONNECT before any connection is the user's mistake; in REQ_SENT it does nothing.
    let mut net = Net::new(2, 13);
    let id = net.create(CLIENT, CO, PortSpace::Tcp);
    assert_eq!(errno(net.cmd(CLIENT, CO, Command::Disconnect { id })), 22);
    net.listen(SERVER, SO, PortSpace::Tcp, None, PORT);
    let c = net.connect(CLIENT, CO, PortSpace::Tcp, dst(), rping_param(0x11, b""));
    assert_eq!(
        net.cmd(CLIENT, CO, Command::Disconnect { id: c }),
        Reply::Done
    );
    assert!(net.sent(CLIENT, attr::DREQ).is_empty());
}

#[test]
fn sidr_for_the_udp_port_space() {
    let mut net = Net::new(2, 14);
    let l = net.listen(SERVER, SO, PortSpace::Udp, None, 7471);
    let d = SocketAddr::new(v4(11), 7471);
    let c = net.resolved_id(CLIENT, CO, PortSpace::Udp, d);
    // UD INIT attributes: the port space's Q_Key.
    let a = attrs(&mut net, CLIENT, CO, c, QpState::Init);
    assert_eq!((a.mask, a.qkey), (1 | 16 | 32 | 64, 0x0123_4567));
    net.cmd(
        CLIENT,
        CO,
        Command::Connect {
            id: c,
            param: ConnParam {
                private_data: b"udp hello".to_vec(),
                qp_num: 0x44,
                ..ConnParam::default()
            },
        },
    );
    assert!(net.run_until(Duration::from_secs(1), |n| n.request(SERVER, l).is_some()));
    let req = net.request(SERVER, l).unwrap().clone();
    let s = req.id;
    let ah = req.ah.expect("the client's address vector");
    assert_eq!(
        ah.dgid,
        Ipv4Addr::new(198, 18, 0, 12).to_ipv6_mapped().octets()
    );
    let p = req.param.unwrap();
    assert_eq!(
        (&p.private_data[..9], p.private_data.len()),
        (&b"udp hello"[..], 180)
    );
    net.cmd(
        SERVER,
        SO,
        Command::Accept {
            id: s,
            param: ConnParam {
                qp_num: 0x33,
                private_data: b"udp reply".to_vec(),
                ..ConnParam::default()
            },
        },
    );
    net.settle(Duration::from_secs(60));
    let e = net
        .event(CLIENT, c, EventKind::Established)
        .expect("ESTABLISHED")
        .clone();
    let p = e.param.unwrap();
    assert_eq!((p.qp_num, p.qkey), (0x33, 0x0123_4567));
    assert_eq!(&p.private_data[..9], b"udp reply");
    assert_eq!(
        e.ah.unwrap().dgid,
        Ipv4Addr::new(198, 18, 0, 11).to_ipv6_mapped().octets()
    );
    assert_eq!(
        net.kinds(SERVER, s),
        [EventKind::ConnectRequest],
        "the kernel gives the passive UD side no more"
    );
    assert_eq!(
        (
            net.sent(CLIENT, attr::SIDR_REQ).len(),
            net.sent(SERVER, attr::SIDR_REP).len()
        ),
        (1, 1)
    );

    // No listener: UNREACHABLE with the SIDR status (1, unsupported); a reject: 2.
    let c2 = net.resolved_id(CLIENT, CO, PortSpace::Udp, SocketAddr::new(v4(11), 9));
    net.cmd(
        CLIENT,
        CO,
        Command::Connect {
            id: c2,
            param: ConnParam::default(),
        },
    );
    let c3 = net.resolved_id(CLIENT, CO, PortSpace::Udp, d);
    net.cmd(
        CLIENT,
        CO,
        Command::Connect {
            id: c3,
            param: ConnParam::default(),
        },
    );
    net.advance(Duration::from_millis(5));
    let s3 = net.request(SERVER, l).unwrap().id;
    net.cmd(
        SERVER,
        SO,
        Command::Reject {
            id: s3,
            private_data: vec![],
            reason: None,
        },
    );
    net.settle(Duration::from_secs(60));
    assert_eq!(
        net.event(CLIENT, c2, EventKind::Unreachable)
            .unwrap()
            .status,
        1
    );
    assert_eq!(
        net.event(CLIENT, c3, EventKind::Unreachable)
            .unwrap()
            .status,
        2
    );

    // Unanswered: 15 retries 4096 ms apart, then UNREACHABLE -ETIMEDOUT.
    let mut net = Net::new(2, 15);
    net.fault = Some(Box::new(|_| Fate::Drop));
    let c = net.resolved_id(CLIENT, CO, PortSpace::Udp, d);
    net.cmd(
        CLIENT,
        CO,
        Command::Connect {
            id: c,
            param: ConnParam::default(),
        },
    );
    net.settle(Duration::from_secs(600));
    let sent = net.sent(CLIENT, attr::SIDR_REQ);
    assert_eq!(sent.len(), 16);
    assert_eq!(sent[1].at.since(sent[0].at), Duration::from_millis(4096));
    assert_eq!(
        net.event(CLIENT, c, EventKind::Unreachable).unwrap().status,
        -110
    );
}

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

// ---- the kernel's own MADs (tests/data/cm/rping_cm_s64.pcap, Debian 12 rxe) ----

mod capture {
    use super::*;
    use roce_emu::cli::pcap::for_each_record;
    use roce_emu::cm::{Cm, CmConfig, MadPeer, Resolved};
    use roce_emu::engine::Instant;
    use roce_emu::wire::cm::CmMad;
    use roce_emu::wire::opcode::op;
    use roce_emu::wire::RoceFrame;

    const SERVER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 11);
    const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 12);
    const SERVER_GUID: u64 = 0x5054_00ff_fe4c_ab01;
    const CLIENT_GUID: u64 = 0x5054_00ff_fe4c_ab02;

    /// The CM MADs of the capture: REQ, REP, RTU, DREQ, DREP.
    fn mads() -> Vec<CmMad> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/cm/rping_cm_s64.pcap"
        );
        let bytes = std::fs::read(path).unwrap();
        let mut out = Vec::new();
        for_each_record(&bytes, |r| {
            let f = RoceFrame::parse_ethernet(r.data).unwrap();
            let p = f.packet().unwrap();
            if p.opcode() == op::UD_SEND_ONLY && p.bth().dqpn() == 1 {
                out.push(CmMad::parse(p.payload()).unwrap());
            }
        })
        .unwrap();
        assert_eq!(out.len(), 5);
        out
    }

    fn bytes(m: &CmMad) -> [u8; 256] {
        let mut b = [0u8; 256];
        m.emit(&mut b);
        b
    }

    fn cm(guid: u64, ip: Ipv4Addr) -> Cm {
        Cm::new(CmConfig {
            node_guid: guid,
            addrs: vec![ip.into()],
            mtu: 1024,
            seed: 3,
        })
    }

    #[test]
    fn replayed_rping_req_gives_the_request_and_a_kernel_shaped_rep() {
        let m = mads();
        let now = Instant::from_nanos(1);
        let mut s = cm(SERVER_GUID, SERVER_IP);
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
        s.command(
            now,
            1,
            Command::Bind {
                id: l,
                addr: SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 7174),
            },
        );
        assert_eq!(
            s.command(now, 1, Command::Listen { id: l, backlog: 1 }),
            Reply::Done
        );
        let peer = MadPeer {
            remote: CLIENT_IP.into(),
            local: SERVER_IP.into(),
        };
        s.handle_mad(now, peer, &bytes(&m[0]));
        assert!(s.poll_transmit().is_none(), "no MRA until a duplicate REQ");
        let (owner, e) = s.poll_event().expect("CONNECT_REQUEST");
        assert_eq!(
            (owner, e.kind, e.listen_id),
            (1, EventKind::ConnectRequest, Some(l))
        );
        let p = e.param.unwrap();
        assert_eq!(
            (p.qp_num, p.responder_resources, p.initiator_depth),
            (0x11, 1, 1)
        );
        assert_eq!(
            (p.retry_count, p.rnr_retry_count, p.srq, p.flow_control),
            (7, 7, false, 0)
        );
        assert_eq!(p.private_data, vec![0; 56]);
        let c = e.id;
        let Reply::Info(i) = s.command(now, 1, Command::Query { id: c }) else {
            panic!()
        };
        assert_eq!(i.src, Some(SocketAddr::new(SERVER_IP.into(), 7174)));
        assert_eq!(
            i.dst,
            Some(SocketAddr::new(CLIENT_IP.into(), 0x8104)),
            "from the cma_hdr"
        );
        let q = |s: &mut Cm, st| match s.command(now, 1, Command::InitQpAttr { id: c, state: st }) {
            Reply::QpAttrs(a) => a,
            r => panic!("{r:?}"),
        };
        let (rtr, rts) = (q(&mut s, QpState::Rtr), q(&mut s, QpState::Rts));
        assert_eq!(rts.sq_psn, 0x29_7dc6, "the REQ's starting PSN");
        assert_eq!((rtr.dest_qp_num, rtr.path_mtu, rts.timeout), (0x11, 3, 19));
        let ah = rtr.ah.unwrap();
        assert_eq!(
            (ah.flow_label, ah.hop_limit, ah.dgid),
            (0xf_bb82, 64, CLIENT_IP.to_ipv6_mapped().octets())
        );

        assert_eq!(
            s.command(
                now,
                1,
                Command::Accept {
                    id: c,
                    param: rping_param(0x11, b"")
                }
            ),
            Reply::Done
        );
        let (to, rep) = s.poll_transmit().expect("REP");
        assert_eq!(to, peer);
        let ours = CmMad::parse(&rep).unwrap();
        let Message::Rep(mut r) = ours.msg else {
            panic!("{ours}")
        };
        let Message::Rep(k) = m[1].msg else { panic!() };
        assert_eq!(
            ours.header, m[1].header,
            "REP header: the REQ's TID, attribute modifier 0"
        );
        let (our_comm, our_psn) = (r.local_comm_id, r.starting_psn);
        assert!(our_psn < 1 << 24);
        r.local_comm_id = k.local_comm_id;
        r.starting_psn = k.starting_psn;
        assert_eq!(r, k, "the REP is the kernel's but for our comm ID and PSN");
        assert_eq!(
            bytes(&CmMad::new(k_tid(&m), 0, Message::Rep(r)))[..],
            bytes(&m[1])[..]
        );
        let rtr_c = q(&mut s, QpState::Rtr);
        assert_eq!(
            rtr_c.rq_psn, our_psn,
            "the REP's PSN is what the server receives with"
        );

        // The client's RTU, DREQ as the kernel sent them (to our comm ID).
        let mut rtu = m[2];
        if let Message::Rtu(ref mut x) = rtu.msg {
            x.remote_comm_id = our_comm;
        }
        s.handle_mad(now, peer, &bytes(&rtu));
        assert_eq!(s.poll_event().unwrap().1.kind, EventKind::Established);
        let mut dreq = m[3];
        if let Message::Dreq(ref mut x) = dreq.msg {
            x.remote_comm_id = our_comm;
        }
        s.handle_mad(now, peer, &bytes(&dreq));
        assert_eq!(s.poll_event().unwrap().1.kind, EventKind::Disconnected);
        assert_eq!(
            s.command(now, 1, Command::Disconnect { id: c }),
            Reply::Done
        );
        let (_, drep) = s.poll_transmit().expect("DREP");
        let mut drep = CmMad::parse(&drep).unwrap();
        if let Message::Drep(ref mut x) = drep.msg {
            assert_eq!(x.local_comm_id, our_comm);
            x.local_comm_id = match m[4].msg {
                Message::Drep(k) => k.local_comm_id,
                _ => panic!(),
            };
        }
        assert_eq!(
            bytes(&drep)[..],
            bytes(&m[4])[..],
            "DREP as the kernel's, the DREQ's TID"
        );
        assert_eq!(s.stats().dropped(), 0);
    }

    fn k_tid(m: &[CmMad]) -> u64 {
        m[0].header.tid
    }

    #[test]
    fn our_req_is_the_kernels() {
        let m = mads();
        let now = Instant::from_nanos(1);
        let mut c = cm(CLIENT_GUID, CLIENT_IP);
        let Reply::Id { id } = c.command(
            now,
            1,
            Command::CreateId {
                ps: PortSpace::Tcp,
                qp_type: QpType::Rc,
            },
        ) else {
            panic!()
        };
        // The capture's client port, so that the flow label hash is the same.
        c.command(
            now,
            1,
            Command::Bind {
                id,
                addr: SocketAddr::new(CLIENT_IP.into(), 0x8104),
            },
        );
        let dst = SocketAddr::new(SERVER_IP.into(), 7174);
        c.command(
            now,
            1,
            Command::ResolveAddr {
                id,
                src: None,
                dst,
                timeout_ms: 2000,
            },
        );
        let (rid, src, d) = c.poll_resolve().unwrap();
        assert_eq!(
            (rid, src, d),
            (id, Some(CLIENT_IP.into()), SERVER_IP.into())
        );
        c.resolved(
            now,
            id,
            Ok(Resolved {
                src: CLIENT_IP.into(),
                hop_limit: 64,
            }),
        );
        assert_eq!(c.poll_event().unwrap().1.kind, EventKind::AddrResolved);
        c.command(
            now,
            1,
            Command::ResolveRoute {
                id,
                timeout_ms: 2000,
            },
        );
        assert_eq!(c.poll_event().unwrap().1.kind, EventKind::RouteResolved);
        let Reply::Info(i) = c.command(now, 1, Command::Query { id }) else {
            panic!()
        };
        let path = i.path.unwrap();
        assert_eq!(
            (
                path.packet_life_time,
                path.mtu,
                path.flow_label,
                path.hop_limit
            ),
            (18, 3, 0xf_bb82, 64)
        );
        assert_eq!(i.node_guid, CLIENT_GUID);
        // rping connects with QP 0x11, responder resources / initiator depth 1, retries 7.
        c.command(
            now,
            1,
            Command::Connect {
                id,
                param: rping_param(0x11, b""),
            },
        );
        let (to, req) = c.poll_transmit().unwrap();
        assert_eq!(
            to,
            MadPeer {
                remote: SERVER_IP.into(),
                local: CLIENT_IP.into()
            }
        );
        let ours = CmMad::parse(&req).unwrap();
        let Message::Req(mut r) = ours.msg else {
            panic!()
        };
        let Message::Req(k) = m[0].msg else { panic!() };
        assert_eq!(
            ours.header.tid & 0xffff_ffff,
            u64::from(r.local_comm_id.swap_bytes()),
            "cm_form_tid"
        );
        let psn = r.starting_psn;
        r.local_comm_id = k.local_comm_id;
        r.starting_psn = k.starting_psn;
        assert_eq!(
            r, k,
            "every REQ field as the kernel's: timeouts, retries, path, cma_hdr"
        );
        let mut h = ours.header;
        h.tid = m[0].header.tid;
        assert_eq!(h, m[0].header);
        let q = |c: &mut Cm, st| match c.command(now, 1, Command::InitQpAttr { id, state: st }) {
            Reply::QpAttrs(a) => a,
            r => panic!("{r:?}"),
        };
        let init = q(&mut c, QpState::Init);
        assert_eq!(init.qp_access_flags, 2 | 4 | 8);
        // Its RTR receive PSN is the REQ's starting PSN, before any REP.
        assert_eq!(
            errno(c.command(
                now,
                1,
                Command::InitQpAttr {
                    id,
                    state: QpState::Rtr
                }
            )),
            22
        );
        let _ = psn;
    }
}

// ---- lossy wires: a connect establishes on both sides exactly once, or fails cleanly ----

mod lossy {
    use super::*;
    use proptest::prelude::*;
    use roce_emu::rng::Rng;

    #[derive(Debug, PartialEq, Eq)]
    enum Outcome {
        Connected,
        Failed,
    }

    /// Runs one connect where each MAD is lost with `loss` and duplicated with `dup`
    /// (seeded), both programs answering at once as rping does; then every timer runs out.
    fn run(seed: u64, loss: f64, dup: f64) -> (Outcome, Outcome, Net) {
        let mut net = Net::new(2, seed);
        let mut rng = Rng::new(seed ^ 0x5eed);
        net.fault = Some(Box::new(move |_| {
            if rng.chance(loss) {
                Fate::Drop
            } else if rng.chance(dup) {
                Fate::Duplicate
            } else {
                Fate::Deliver
            }
        }));
        let l = net.listen(SERVER, SO, PortSpace::Tcp, None, PORT);
        let c = net.connect(CLIENT, CO, PortSpace::Tcp, dst(), rping_param(0x11, b"p"));
        let mut seen = 0;
        for _ in 0..100_000 {
            // The programs: accept each request and each response as it comes.
            while seen < net.events.len() {
                let (h, _, e, _) = net.events[seen].clone();
                seen += 1;
                match (h, e.kind) {
                    (SERVER, EventKind::ConnectRequest) => {
                        net.cmd(
                            SERVER,
                            SO,
                            Command::Accept {
                                id: e.id,
                                param: rping_param(0x22, b"q"),
                            },
                        );
                    }
                    (CLIENT, EventKind::ConnectResponse) => {
                        net.cmd(
                            CLIENT,
                            CO,
                            Command::Accept {
                                id: e.id,
                                param: ConnParam::default(),
                            },
                        );
                    }
                    _ => {}
                }
            }
            if !net.step() {
                break;
            }
        }
        assert!(net.next_at().is_none(), "every timer ran out");
        let ck = net.kinds(CLIENT, c);
        let once = |k: &[EventKind], e| k.iter().filter(|&&x| x == e).count() <= 1;
        let errs = [EventKind::Rejected, EventKind::Unreachable];
        let client = if ck.contains(&EventKind::ConnectResponse) {
            assert!(
                !ck.iter().any(|k| errs.contains(k)),
                "client both ways: {ck:?}"
            );
            Outcome::Connected
        } else {
            assert!(
                ck.iter().any(|k| errs.contains(k)),
                "client left hanging: {ck:?}"
            );
            Outcome::Failed
        };
        assert!(once(&ck, EventKind::ConnectResponse), "{ck:?}");
        let reqs: Vec<IdNum> = net
            .events
            .iter()
            .filter(|e| {
                e.0 == SERVER && e.2.kind == EventKind::ConnectRequest && e.2.listen_id == Some(l)
            })
            .map(|e| e.2.id)
            .collect();
        assert!(reqs.len() <= 1, "one request per connect: {reqs:?}");
        let server = match reqs.first() {
            None => Outcome::Failed,
            Some(&s) => {
                let sk = net.kinds(SERVER, s);
                assert!(once(&sk, EventKind::Established), "{sk:?}");
                if sk.contains(&EventKind::Established) {
                    assert!(
                        !sk.iter().any(|k| errs.contains(k)),
                        "server both ways: {sk:?}"
                    );
                    Outcome::Connected
                } else {
                    assert!(
                        sk.iter().any(|k| errs.contains(k)),
                        "server left hanging: {sk:?}"
                    );
                    Outcome::Failed
                }
            }
        };
        (client, server, net)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn connect_is_all_or_nothing(seed in any::<u64>(), loss in 0.0f64..0.25, dup in 0.0f64..0.2) {
            let (client, server, _) = run(seed, loss, dup);
            prop_assert_eq!(client, server, "half-open connection");
        }
    }

    #[test]
    fn heavy_loss_still_ends_cleanly() {
        // Some seeds connect, some fail, and no side is left waiting. At 75% loss the IB
        // CM's own limit shows: when the RTU and all 16 REPs are lost the passive side
        // gives up (UNREACHABLE) while the active one has sent its RTU, as with the
        // kernel; never the other way round (the server establishes only on an RTU).
        let mut outcomes = Vec::new();
        for seed in 0..40 {
            let (c, s, _) = run(seed, 0.75, 0.1);
            if s == Outcome::Connected {
                assert_eq!(c, Outcome::Connected, "seed {seed}");
            }
            outcomes.push(c);
        }
        assert!(outcomes.contains(&Outcome::Connected) && outcomes.contains(&Outcome::Failed));
    }
}
