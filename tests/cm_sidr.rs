//! Service ID resolution for the UDP port space (tests/common/cm.rs's virtual net):
//! SIDR_REQ with rdma_cm's header, the request's AV, SIDR_REP with the QPN and Q_Key
//! 0x01234567, no listener (status 1), reject (status 2), retries then UNREACHABLE.

mod common;

use common::cm::*;
use roce_emu::cm::ucma::{Command, ConnParam, EventKind, PortSpace, QpState};
use roce_emu::wire::mad::attr;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

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
