//! The connection manager against the kernel's own MADs (tests/data/cm/rping_cm_s64.pcap,
//! Debian 12 kernel rxe): the capture's REQ replayed gives the CONNECT_REQUEST and a REP
//! of the kernel's shape; the REQ we send is the kernel's field by field.

mod common;

use common::cm::*;
use roce_emu::cm::ucma::{Command, EventKind, PortSpace, QpState, QpType, Reply};
use roce_emu::wire::cm::Message;
use std::net::{Ipv4Addr, SocketAddr};

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
