//! MAD and CM message wire views (`wire::mad`, `wire::cm`): the five CM MADs of a real
//! rping connection (kernel rxe on both sides, `tests/data/cm/rping_cm_s64.pcap`) parse
//! to what tshark decodes and re-emit byte for byte; every message round-trips
//! (Repr -> emit -> parse), LAP, APR and ClassPortInfo included, and every length short of
//! a message is a `Truncated` error.

use proptest::prelude::*;
use roce_emu::cli::pcap::for_each_record;
use roce_emu::wire::cm::{
    apr, cma, cpi, drep, dreq, lap, mra, rej, rep, req, rtu, service_id, sidr_rep, sidr_req, CmMad,
    Message, RejReason, MSG_LEN,
};
use roce_emu::wire::mad::{self, attr, MAD_LEN};
use roce_emu::wire::opcode::op;
use roce_emu::wire::{Header, RoceFrame, WireError};
use std::net::Ipv4Addr;

const CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/cm/rping_cm_s64.pcap"
);

/// (frame number, MAD bytes) of every UD SEND ONLY to QP 1 in the capture.
fn capture_mads() -> Vec<(usize, Vec<u8>)> {
    let bytes = std::fs::read(CAPTURE).unwrap();
    let mut out = Vec::new();
    for_each_record(&bytes, |r| {
        let frame = RoceFrame::parse_ethernet(r.data).unwrap();
        let p = frame.packet().unwrap();
        if p.opcode() == op::UD_SEND_ONLY && p.bth().dqpn() == 1 {
            let deth = p.deth().unwrap();
            assert_eq!(deth.qkey(), 0x8001_0000, "frame {}: GSI Q_Key", r.n);
            assert_eq!(deth.src_qpn(), 1, "frame {}", r.n);
            out.push((r.n, p.payload().to_vec()));
        }
    })
    .unwrap();
    out
}

fn mapped(a: Ipv4Addr) -> [u8; 16] {
    a.to_ipv6_mapped().octets()
}

const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 12);
const SERVER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 11);
const TID: u64 = 0x0000_0002_68da_d047;
const CLIENT_COMM: u32 = 0x47d0_da68;
const SERVER_COMM: u32 = 0x271e_fc26;

#[test]
fn capture_cm_mads_match_tshark_and_reemit_byte_exact() {
    let mads = capture_mads();
    let frames: Vec<usize> = mads.iter().map(|(n, _)| *n).collect();
    assert_eq!(frames, [1, 2, 3, 40, 41]);
    for (n, bytes) in &mads {
        assert_eq!(bytes.len(), MAD_LEN, "frame {n}");
        let m = CmMad::parse(bytes).unwrap_or_else(|e| panic!("frame {n}: {e}"));
        // tshark: Base Version 0x01, Class 0x07, Class Version 0x02, Send(), TID
        // 0x0000000268dad047 on all five, Status/ClassSpecific/AttributeModifier 0.
        let h = m.header;
        assert_eq!(
            (h.base_version, h.mgmt_class, h.class_version, h.method),
            (1, 7, 2, 3),
            "frame {n}"
        );
        assert_eq!(
            (h.status, h.class_specific, h.tid, h.attr_mod),
            (0, 0, TID, 0)
        );
        assert_eq!(h.attr_id, m.msg.attr_id());

        match (*n, m.msg) {
            (1, Message::Req(r)) => {
                check_req(&r);
                assert_eq!(
                    m.msg.to_string(),
                    "CM REQ lcid=0x47d0da68 sid=0x0000000001061c06 (TCP port 7174) qpn=0x11 \
                     psn=0x297dc6 mtu=3 cma_hdr 198.18.0.12:33028 -> 198.18.0.11"
                );
            }
            (2, Message::Rep(r)) => check_rep(&r),
            (3, Message::Rtu(r)) => {
                assert_eq!(
                    (r.local_comm_id, r.remote_comm_id),
                    (CLIENT_COMM, SERVER_COMM)
                );
                assert_eq!(r.private_data, [0; rtu::PRIVATE_DATA_LEN]);
            }
            (40, Message::Dreq(r)) => {
                assert_eq!(
                    (r.local_comm_id, r.remote_comm_id),
                    (CLIENT_COMM, SERVER_COMM)
                );
                assert_eq!(r.remote_qpn, 0x11);
            }
            (41, Message::Drep(r)) => {
                assert_eq!(
                    (r.local_comm_id, r.remote_comm_id),
                    (SERVER_COMM, CLIENT_COMM)
                );
            }
            (n, msg) => panic!("frame {n}: unexpected {msg:?}"),
        }

        // Re-emit, into a dirty buffer: every byte is written.
        let mut out = [0xa5u8; MAD_LEN];
        m.emit(&mut out);
        assert_eq!(&out[..], &bytes[..], "frame {n} re-emitted");
        assert_eq!(CmMad::new(TID, 0, m.msg), m, "frame {n}: CmMad::new");
        let line = m.to_string();
        assert!(
            line.starts_with("CM ") && line.ends_with("tid=0x268dad047"),
            "{line}"
        );
    }
}

fn check_req(r: &req::Repr) {
    // tshark's "CM ConnectRequest" of frame 1.
    assert_eq!(r.local_comm_id, CLIENT_COMM);
    assert_eq!(r.vendor_id, 0);
    assert_eq!(r.service_id, 0x0000_0000_0106_1c06);
    assert_eq!(r.service_id, service_id::new(service_id::PS_TCP, 7174));
    assert_eq!(
        service_id::split(r.service_id),
        Some((service_id::PS_TCP, 7174))
    );
    assert_eq!(r.local_ca_guid, 0x5054_00ff_fe4c_ab02);
    assert_eq!(r.local_qkey, 0);
    assert_eq!(r.local_qpn, 0x11);
    assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
    assert_eq!((r.local_eecn, r.remote_eecn), (0, 0));
    assert_eq!(r.remote_cm_response_timeout, 0x14);
    assert_eq!(r.transport_service_type, 0);
    assert!(!r.e2e_flow_control);
    assert_eq!(r.starting_psn, 0x29_7dc6);
    assert_eq!(r.local_cm_response_timeout, 0x14);
    assert_eq!(r.retry_count, 7);
    assert_eq!(r.pkey, 0xffff);
    assert_eq!(r.path_mtu, 3); // 1024, the 1500-byte Ethernet MTU
    assert!(!r.rdc_exists);
    assert_eq!(r.rnr_retry_count, 7);
    assert_eq!(r.max_cm_retries, 15);
    assert!(!r.srq);
    assert_eq!(r.extended_transport_type, 0);
    let p = r.primary_path;
    assert_eq!((p.local_lid, p.remote_lid), (0xffff, 0xffff));
    assert_eq!(p.local_gid, mapped(CLIENT));
    assert_eq!(p.remote_gid, mapped(SERVER));
    // Bytes 88-91 are fb b8 20 00: flow label = bits 31-12 (IBA Table 99,
    // CM_REQ_PRIMARY_FLOW_LABEL), packet rate = the low 6 bits of byte 91. tshark 4.0
    // prints "Flow Label 0x00fbb, Packet Rate 0x3b", reading them from the wrong bits.
    assert_eq!(p.flow_label, 0xf_bb82);
    assert_eq!(p.packet_rate, 0);
    assert_eq!((p.traffic_class, p.hop_limit), (0, 0x40));
    assert_eq!((p.sl, p.subnet_local), (0, false));
    assert_eq!(p.local_ack_timeout, 0x13);
    assert_eq!(r.alternate_path, req::Path::default());

    // IP CM private data: version 0, IPv4, source port 0x8104, 198.18.0.12 -> .11.
    let h = cma::Repr::parse(&cma::Packet::new_checked(&r.private_data[..]).unwrap()).unwrap();
    assert_eq!(h.src_port, 0x8104);
    assert_eq!(
        h.addrs,
        cma::Addrs::V4 {
            src: CLIENT,
            dst: SERVER
        }
    );
    assert!(r.private_data[cma::HEADER_LEN..].iter().all(|&b| b == 0));
    let mut hdr = [0xffu8; cma::HEADER_LEN];
    h.emit(&mut cma::Packet::new_unchecked(&mut hdr[..]));
    assert_eq!(hdr, r.private_data[..cma::HEADER_LEN]);
}

fn check_rep(r: &rep::Repr) {
    // tshark's "CM ConnectReply" of frame 2.
    assert_eq!(
        (r.local_comm_id, r.remote_comm_id),
        (SERVER_COMM, CLIENT_COMM)
    );
    assert_eq!(r.local_qkey, 0);
    assert_eq!(r.local_qpn, 0x11);
    assert_eq!(r.local_eecn, 0);
    assert_eq!(r.vendor_id(), 0);
    assert_eq!(r.starting_psn, 0xd2_cf1b);
    assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
    assert_eq!(r.target_ack_delay, 0x0f);
    assert_eq!(r.failover_accepted, 0);
    assert!(!r.e2e_flow_control);
    assert_eq!(r.rnr_retry_count, 7);
    assert!(!r.srq);
    assert_eq!(r.local_ca_guid, 0x5054_00ff_fe4c_ab01);
    assert_eq!(r.private_data, [0; rep::PRIVATE_DATA_LEN]);
}

#[test]
fn capture_mad_header_view() {
    let (_, bytes) = &capture_mads()[0];
    let p = mad::Packet::new_checked(&bytes[..]).unwrap();
    assert_eq!(p.attr_id(), attr::REQ);
    assert_eq!(p.tid(), TID);
    let r = mad::Repr::parse(&p).unwrap();
    assert_eq!(r, mad::Repr::cm_send(TID, attr::REQ, 0));
    let mut out = [0xffu8; mad::HEADER_LEN];
    r.emit(&mut mad::Packet::new_unchecked(&mut out[..]));
    assert_eq!(out, bytes[..mad::HEADER_LEN]);
}

fn trunc(header: Header, need: usize, have: usize) -> WireError {
    WireError::Truncated {
        header,
        offset: 0,
        need,
        have,
    }
}

#[test]
fn every_short_length_is_truncated() {
    let buf = [0u8; MAD_LEN];
    for len in 0..MSG_LEN {
        let b = &buf[..len];
        let e = trunc(Header::Cm, MSG_LEN, len);
        assert_eq!(req::Packet::new_checked(b).unwrap_err(), e);
        assert_eq!(rep::Packet::new_checked(b).unwrap_err(), e);
        assert_eq!(rtu::Packet::new_checked(b).unwrap_err(), e);
        assert_eq!(rej::Packet::new_checked(b).unwrap_err(), e);
        assert_eq!(mra::Packet::new_checked(b).unwrap_err(), e);
        assert_eq!(dreq::Packet::new_checked(b).unwrap_err(), e);
        assert_eq!(drep::Packet::new_checked(b).unwrap_err(), e);
        assert_eq!(sidr_req::Packet::new_checked(b).unwrap_err(), e);
        assert_eq!(sidr_rep::Packet::new_checked(b).unwrap_err(), e);
        assert_eq!(lap::Packet::new_checked(b).unwrap_err(), e);
        assert_eq!(apr::Packet::new_checked(b).unwrap_err(), e);
        assert_eq!(cpi::Packet::new_checked(b).unwrap_err(), e);
        assert_eq!(
            req::Repr::parse(&req::Packet::new_unchecked(b)).unwrap_err(),
            e
        );
        for id in [
            attr::REQ,
            attr::MRA,
            attr::REJ,
            attr::REP,
            attr::RTU,
            attr::DREQ,
            attr::DREP,
            attr::SIDR_REQ,
            attr::SIDR_REP,
            attr::LAP,
            attr::APR,
            attr::CLASS_PORT_INFO,
        ] {
            assert_eq!(Message::parse(id, b).unwrap_err(), e);
        }
    }
    for len in 0..MAD_LEN {
        assert_eq!(
            CmMad::parse(&buf[..len]).unwrap_err(),
            trunc(Header::Mad, MAD_LEN, len)
        );
    }
    for len in 0..mad::HEADER_LEN {
        assert_eq!(
            mad::Packet::new_checked(&buf[..len]).unwrap_err(),
            trunc(Header::Mad, mad::HEADER_LEN, len)
        );
    }
    for len in 0..cma::HEADER_LEN {
        assert_eq!(
            cma::Packet::new_checked(&buf[..len]).unwrap_err(),
            trunc(Header::CmaHdr, cma::HEADER_LEN, len)
        );
    }
}

#[test]
fn bad_class_attribute_and_cma_header_are_errors() {
    let (_, bytes) = &capture_mads()[0];
    let mut b = bytes.clone();
    b[1] = 0x03; // SA class
    assert!(matches!(
        CmMad::parse(&b),
        Err(WireError::Reserved {
            header: Header::Mad,
            field: "management class",
            value: 3
        })
    ));
    let mut b = bytes.clone();
    b[17] = 0x1b; // past APR: not a CM attribute
    assert!(matches!(
        CmMad::parse(&b),
        Err(WireError::Reserved {
            header: Header::Mad,
            field: "attribute ID",
            value: 0x1b
        })
    ));
    let pd = mad::HEADER_LEN + req::PRIVATE_DATA_OFFSET;
    let mut h = bytes[pd..pd + cma::HEADER_LEN].to_vec();
    h[1] = 0x50;
    assert!(matches!(
        cma::Repr::parse(&cma::Packet::new_checked(&h[..]).unwrap()),
        Err(WireError::Reserved {
            header: Header::CmaHdr,
            field: "ip_version",
            value: 5
        })
    ));
    h[1] = 0x40;
    h[0] = 1;
    assert!(matches!(
        cma::Repr::parse(&cma::Packet::new_checked(&h[..]).unwrap()),
        Err(WireError::Reserved {
            header: Header::CmaHdr,
            field: "cma_version",
            value: 1
        })
    ));
}

#[test]
fn bitfields_are_msb_first() {
    // REQ byte 43: [7:3] remote CM response timeout, [2:1] transport, [0] E2E.
    let mut b = [0u8; MSG_LEN];
    let mut p = req::Packet::new_unchecked(&mut b[..]);
    p.set_remote_cm_response_timeout(0x1f);
    assert_eq!(p.as_bytes()[43], 0xf8);
    p.set_transport_service_type(3);
    p.set_e2e_flow_control(true);
    assert_eq!(p.as_bytes()[43], 0xff);
    p.set_remote_cm_response_timeout(0);
    assert_eq!(p.as_bytes()[43], 0x07);
    // 24-bit fields leave their neighbours alone.
    p.set_responder_resources(0xaa);
    p.set_local_qpn(0xff_ffff);
    assert_eq!(p.as_bytes()[32..36], [0xff, 0xff, 0xff, 0xaa]);
    // REJ: message rejected [7:6] of byte 8, reject info length [7:1] of byte 9.
    let mut b = [0u8; MSG_LEN];
    let mut p = rej::Packet::new_unchecked(&mut b[..]);
    p.set_message_rejected(rej::REJECTED_OTHER);
    p.set_reject_info_length(0x7f);
    p.set_reason(RejReason::ConsumerDefined);
    assert_eq!(p.as_bytes()[8..12], [0x80, 0xfe, 0, 28]);
    // MRA: message MRAed [7:6] of byte 8, service timeout [7:3] of byte 9.
    let mut b = [0u8; MSG_LEN];
    let mut p = mra::Packet::new_unchecked(&mut b[..]);
    p.set_message_mraed(mra::MRAED_REP);
    p.set_service_timeout(24);
    assert_eq!(p.as_bytes()[8..10], [0x40, 0xc0]);
}

#[test]
fn rej_reason_codes() {
    assert_eq!(RejReason::from_code(8), RejReason::InvalidServiceId);
    assert_eq!(RejReason::ConsumerDefined.code(), 28);
    assert_eq!(RejReason::from_code(34), RejReason::Other(34));
    for c in 0..=u16::MAX {
        assert_eq!(RejReason::from_code(c).code(), c);
    }
}

// ---------------------------------------------------------------------------------------
// Round trips. A Repr is drawn by parsing random bytes: that reaches every value of every
// field (bit fields in range), so Repr -> emit -> parse == Repr covers the whole space.
// ---------------------------------------------------------------------------------------

fn config() -> ProptestConfig {
    ProptestConfig {
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::Direct(
                "proptest-regressions/wire_cm.txt",
            ),
        )),
        ..ProptestConfig::default()
    }
}

fn msg_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), MSG_LEN)
}

macro_rules! round_trip {
    ($name:ident, $m:ident) => {
        proptest! {
            #![proptest_config(config())]
            #[test]
            fn $name(bytes in msg_bytes()) {
                let r = $m::Repr::parse(&$m::Packet::new_checked(&bytes[..]).unwrap()).unwrap();
                let mut out = [0x5au8; MSG_LEN + 3];
                r.emit(&mut $m::Packet::new_unchecked(&mut out[..]));
                prop_assert_eq!(&out[MSG_LEN..], &[0x5a; 3][..], "wrote past the message");
                let back = $m::Repr::parse(&$m::Packet::new_checked(&out[..]).unwrap()).unwrap();
                prop_assert_eq!(back, r);
                // Emit is a fixed point: emitting the re-parsed Repr gives the same bytes.
                let mut again = [0u8; MSG_LEN];
                back.emit(&mut $m::Packet::new_unchecked(&mut again[..]));
                prop_assert_eq!(&again[..], &out[..MSG_LEN]);
            }
        }
    };
}

round_trip!(req_round_trips, req);
round_trip!(rep_round_trips, rep);
round_trip!(rtu_round_trips, rtu);
round_trip!(rej_round_trips, rej);
round_trip!(mra_round_trips, mra);
round_trip!(dreq_round_trips, dreq);
round_trip!(drep_round_trips, drep);
round_trip!(sidr_req_round_trips, sidr_req);
round_trip!(sidr_rep_round_trips, sidr_rep);
round_trip!(lap_round_trips, lap);
round_trip!(apr_round_trips, apr);
round_trip!(class_port_info_round_trips, cpi);

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mad_header_round_trips(
        base_version in any::<u8>(), mgmt_class in any::<u8>(), class_version in any::<u8>(),
        method in any::<u8>(), status in any::<u16>(), class_specific in any::<u16>(),
        tid in any::<u64>(), attr_id in any::<u16>(), attr_mod in any::<u32>(),
    ) {
        let r = mad::Repr {
            base_version, mgmt_class, class_version, method, status, class_specific, tid,
            attr_id, attr_mod,
        };
        let mut out = [0xffu8; mad::HEADER_LEN];
        r.emit(&mut mad::Packet::new_unchecked(&mut out[..]));
        prop_assert_eq!(&out[18..20], &[0, 0][..]);
        prop_assert_eq!(mad::Repr::parse(&mad::Packet::new_checked(&out[..]).unwrap()).unwrap(), r);
    }

    #[test]
    fn cma_hdr_round_trips(
        src_port in any::<u16>(), v6 in any::<bool>(), src in any::<[u8; 16]>(),
        dst in any::<[u8; 16]>(),
    ) {
        let addrs = if v6 {
            cma::Addrs::V6 { src: src.into(), dst: dst.into() }
        } else {
            cma::Addrs::V4 {
                src: Ipv4Addr::new(src[0], src[1], src[2], src[3]),
                dst: Ipv4Addr::new(dst[0], dst[1], dst[2], dst[3]),
            }
        };
        let r = cma::Repr { src_port, addrs };
        let mut out = [0xffu8; cma::HEADER_LEN];
        r.emit(&mut cma::Packet::new_unchecked(&mut out[..]));
        prop_assert_eq!(cma::Repr::parse(&cma::Packet::new_checked(&out[..]).unwrap()).unwrap(), r);
    }

    #[test]
    fn whole_cm_mad_round_trips(
        which in 0usize..12, body in msg_bytes(), tid in any::<u64>(), attr_mod in any::<u32>(),
    ) {
        let id = [
            attr::REQ, attr::MRA, attr::REJ, attr::REP, attr::RTU, attr::DREQ, attr::DREP,
            attr::SIDR_REQ, attr::SIDR_REP, attr::LAP, attr::APR, attr::CLASS_PORT_INFO,
        ][which];
        let msg = Message::parse(id, &body).unwrap();
        let m = CmMad::new(tid, attr_mod, msg);
        let mut out = [0x77u8; MAD_LEN];
        m.emit(&mut out);
        prop_assert_eq!(CmMad::parse(&out).unwrap(), m);
    }

    #[test]
    fn any_bytes_parse_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = CmMad::parse(&bytes);
        for id in 0..0x20u16 {
            let _ = Message::parse(id, &bytes);
        }
        if let Ok(p) = cma::Packet::new_checked(&bytes[..]) {
            let _ = cma::Repr::parse(&p);
        }
    }
}

#[test]
fn sap_supported_shares_the_alternate_paths_last_byte() {
    let mut b = [0u8; MSG_LEN];
    let mut p = req::Packet::new_unchecked(&mut b[..]);
    p.set_sap_supported(true);
    let alt = req::Path {
        local_ack_timeout: 0x1f,
        ..req::Path::default()
    };
    p.set_alternate_path(alt);
    assert_eq!(p.as_bytes()[139], 0xfc);
    assert!(p.sap_supported());
    assert_eq!(p.alternate_path(), alt);
}

/// LAP (IBA Table 115, `CM_LAP_*`): every field at its kernel offset, MSB-first bits.
#[test]
fn lap_fields_sit_where_the_kernel_puts_them() {
    let mut b = [0u8; MSG_LEN];
    let mut p = lap::Packet::new_unchecked(&mut b[..]);
    p.set_local_comm_id(0x1122_3344);
    p.set_remote_comm_id(0x5566_7788);
    p.set_remote_qpn(0xab_cdef);
    p.set_remote_cm_response_timeout(0x1f);
    p.set_alt_local_lid(0xfffe);
    p.set_alt_remote_lid(0x0102);
    p.set_alt_local_gid(mapped(CLIENT));
    p.set_alt_remote_gid(mapped(SERVER));
    p.set_alt_flow_label(0xf_ffff);
    p.set_alt_traffic_class(0x2a);
    p.set_alt_hop_limit(64);
    p.set_alt_packet_rate(0x3f);
    p.set_alt_sl(0xf);
    p.set_alt_subnet_local(true);
    p.set_alt_local_ack_timeout(0x1f);
    let b = p.as_bytes();
    assert_eq!(b[0..8], [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
    assert_eq!(b[8..12], [0; 4], "reserved");
    assert_eq!(b[12..16], [0xab, 0xcd, 0xef, 0xf8]);
    assert_eq!(b[16..20], [0; 4], "reserved");
    assert_eq!(b[20..24], [0xff, 0xfe, 0x01, 0x02]);
    assert_eq!(b[24..40], mapped(CLIENT));
    assert_eq!(b[40..56], mapped(SERVER));
    // Flow label: 20 bits, then 4 reserved, then the traffic class in byte 59.
    assert_eq!(b[56..64], [0xff, 0xff, 0xf0, 0x2a, 64, 0x3f, 0xf8, 0xf8]);
    let r = lap::Repr::parse(&lap::Packet::new_checked(b).unwrap()).unwrap();
    assert_eq!(r.alt_flow_label, 0xf_ffff);
    assert_eq!(r.alt_traffic_class, 0x2a);
    let m = CmMad::new(7, 0, Message::Lap(r));
    assert_eq!(m.header.attr_id, 0x0019);
    assert_eq!(
        m.to_string(),
        "CM LAP lcid=0x11223344 rcid=0x55667788 qpn=0xabcdef tid=0x7"
    );
}

/// APR (IBA Table 116, `CM_APR_*`) and its status names (`enum ib_cm_apr_status`).
#[test]
fn apr_fields_and_status() {
    let mut b = [0u8; MSG_LEN];
    let mut p = apr::Packet::new_unchecked(&mut b[..]);
    p.set_local_comm_id(1);
    p.set_remote_comm_id(2);
    p.set_additional_info_length(72);
    p.set_ap_status(5);
    p.set_additional_info([0xaa; apr::INFO_LEN]);
    p.set_private_data([0xbb; apr::PRIVATE_DATA_LEN]);
    let b = p.as_bytes();
    assert_eq!(b[8..12], [72, 5, 0, 0]);
    assert_eq!(b[12..84], [0xaa; 72]);
    assert_eq!(b[84..232], [0xbb; 148]);
    let r = apr::Repr::parse(&apr::Packet::new_checked(b).unwrap()).unwrap();
    assert_eq!(
        Message::Apr(r).to_string(),
        "CM APR lcid=0x00000001 rcid=0x00000002 status=is current (5)"
    );
    assert_eq!(apr::Status(13).name(), Some("invalid SL"));
    assert_eq!(apr::Status(14).to_string(), "status 14");
}

/// ClassPortInfo (IBA 13.4.8.1; `struct ib_class_port_info`): CapabilityMask2 is the top 27
/// bits of bytes 4-7 and RespTimeValue the low 5; TC, SL and FL share a word.
#[test]
fn class_port_info_fields() {
    let mut b = [0u8; MSG_LEN];
    let mut p = cpi::Packet::new_unchecked(&mut b[..]);
    p.set_base_version(1);
    p.set_class_version(2);
    p.set_capability_mask(0x0100);
    p.set_capability_mask2(0x7ff_ffff);
    p.set_resp_time_value(0x12);
    p.set_redirect_tc(0xab);
    p.set_redirect_sl(0xc);
    p.set_redirect_fl(0xd_ef01);
    p.set_redirect_qp(0x12_3456);
    p.set_trap_hl(0xff);
    p.set_trap_qp(0x00_0001);
    p.set_trap_qkey(0x8001_0000);
    let b = p.as_bytes();
    assert_eq!(b[0..8], [1, 2, 0x01, 0x00, 0xff, 0xff, 0xff, 0xf2]);
    assert_eq!(b[24..28], [0xab, 0xcd, 0xef, 0x01]);
    assert_eq!(b[32..36], [0, 0x12, 0x34, 0x56]);
    assert_eq!(b[64..72], [0xff, 0, 0, 1, 0x80, 0x01, 0, 0]);
    assert_eq!(b[cpi::ATTR_LEN..], [0; MSG_LEN - cpi::ATTR_LEN]);
    let r = cpi::Repr::parse(&cpi::Packet::new_checked(b).unwrap()).unwrap();
    assert_eq!(
        (r.capability_mask2, r.resp_time_value, r.redirect_fl),
        (0x7ff_ffff, 0x12, 0xd_ef01)
    );
    let mut m = CmMad::new(9, 0, Message::ClassPortInfo(r));
    m.header.method = mad::METHOD_GET_RESP;
    let mut out = [0u8; MAD_LEN];
    m.emit(&mut out);
    assert_eq!(out[3], 0x81);
    assert_eq!(u16::from_be_bytes([out[16], out[17]]), 0x0001);
    assert_eq!(CmMad::parse(&out).unwrap(), m);
    assert_eq!(
        m.to_string(),
        "CM ClassPortInfo v2 cap=0x0100 resp_time=18 method=0x81 tid=0x9"
    );
}
