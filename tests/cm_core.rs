//! The connection manager core (`roce_emu::cm`) between two virtual hosts on a
//! deterministic virtual-time network (tests/common/cm.rs): RC connect / accept /
//! establish / disconnect as the kernel's IB CM and rdma_cm do it, with rejects, retries,
//! MRAs, lost messages and DREQ in each state.

mod common;

use common::cm::*;
use roce_emu::cm::ucma::{Command, ConnParam, EventKind, PortSpace, QpState, Reply};
use roce_emu::wire::cm::{mra, Message};
use roce_emu::wire::mad::attr;
use std::net::Ipv4Addr;
use std::time::Duration;

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
fn slow_establish_gets_an_mra_for_the_rep() {
    // The client's program takes 20 s between CONNECT_RESPONSE and its ACCEPT: the REP
    // comes again after 4 s, the client answers with MRA(REP, 24), the server waits.
    let mut net = Net::new(2, 24);
    let (_, c, s) = request(&mut net, b"");
    net.cmd(
        SERVER,
        SO,
        Command::Accept {
            id: s,
            param: rping_param(0x22, b""),
        },
    );
    net.advance(Duration::from_secs(20));
    assert_eq!(net.count(CLIENT, c, EventKind::ConnectResponse), 1);
    let mras = net.sent(CLIENT, attr::MRA);
    assert_eq!(mras.len(), 1);
    let Message::Mra(m) = mras[0].mad.msg else {
        panic!()
    };
    assert_eq!((m.message_mraed, m.service_timeout), (mra::MRAED_REP, 24));
    assert_eq!(net.sent(SERVER, attr::REP).len(), 2);
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
    assert_eq!(net.sent(SERVER, attr::REP).len(), 2);
    assert!(net.event(SERVER, s, EventKind::Unreachable).is_none());
}

#[test]
fn rtu_private_data_and_a_clean_drep() {
    use roce_emu::wire::cm::rtu;
    let mut net = Net::new(2, 25);
    let (_, c, s) = request(&mut net, b"");
    net.cmd(
        SERVER,
        SO,
        Command::Accept {
            id: s,
            param: rping_param(0x22, b""),
        },
    );
    net.advance(Duration::from_millis(5));
    let too_long = ConnParam {
        private_data: vec![0; rtu::PRIVATE_DATA_LEN + 1],
        ..ConnParam::default()
    };
    assert_eq!(
        errno(net.cmd(
            CLIENT,
            CO,
            Command::Accept {
                id: c,
                param: too_long
            }
        )),
        22
    );
    let pd = ConnParam {
        private_data: b"rtu data".to_vec(),
        ..ConnParam::default()
    };
    net.cmd(CLIENT, CO, Command::Accept { id: c, param: pd });
    net.advance(Duration::from_millis(5));
    let Message::Rtu(r) = net.sent(CLIENT, attr::RTU)[0].mad.msg else {
        panic!()
    };
    assert_eq!(&r.private_data[..8], b"rtu data");
    // The server disconnects; the client's DREP carries no private data, not the RTU's.
    net.cmd(SERVER, SO, Command::Disconnect { id: s });
    net.advance(Duration::from_millis(5));
    net.cmd(CLIENT, CO, Command::Disconnect { id: c });
    net.advance(Duration::from_millis(5));
    let Message::Drep(d) = net.sent(CLIENT, attr::DREP)[0].mad.msg else {
        panic!()
    };
    assert!(d.private_data.iter().all(|&b| b == 0));
    assert_eq!(net.count(CLIENT, c, EventKind::Disconnected), 1);
    assert_eq!(net.count(SERVER, s, EventKind::Disconnected), 1);
}
