//! UD and GSI behaviours over the simulator, one per behaviour: a datagram and its
//! completions (source QP, the 40-byte network header slot byte for byte, IPv4 with a
//! valid checksum and IPv6), the Q_Key check, no receive WQE, a message longer than the
//! port MTU (C10-93.1.1) or than the receive buffer, no retransmission of a lost
//! datagram, the operations and transitions UD refuses, and QP1 (GSI).

mod common;

use common::ud::{Ud, QKEY};
use roce_emu::engine::*;
use roce_emu::sim::rule::DropNth;
use roce_emu::wire::opcode::op;
use roce_emu::wire::{RocePacket, RoceRepr};

const A: usize = 0;
const B: usize = 1;

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| seed.wrapping_add((i as u8).wrapping_mul(7)))
        .collect()
}

/// The IPv4 header checksum, computed here independently of the crate (RFC 1071).
fn sum16(h: &[u8]) -> u16 {
    let mut s: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

#[test]
fn a_datagram_arrives_once_with_its_source_qp_and_an_ipv4_header_slot() {
    let mut u = Ud::new(2);
    let data = pattern(3, 300);
    u.write_mem(A, 0, &data);
    u.post_recv(B, 9, 0, 1024);
    u.send(A, 1, B, 0, 300);
    u.settle();
    // One packet, UD SEND only, with a DETH: our QPN and the receiver's Q_Key.
    let tr = u.net.trace.clone().unwrap();
    assert_eq!(tr.len(), 1, "one packet, no ACK");
    let pkt = RocePacket::new_checked(&tr[0].bytes[..]).unwrap();
    let r = RoceRepr::parse(&pkt).unwrap();
    assert_eq!(r.bth.opcode, op::UD_SEND_ONLY);
    assert_eq!(r.bth.dqpn, u.ends[B].qpn);
    assert!(!r.bth.ack_req);
    let deth = r.deth.unwrap();
    assert_eq!((deth.qkey, deth.src_qpn), (QKEY, u.ends[A].qpn));

    let ca = u.completions(A);
    assert_eq!(ca.len(), 1);
    assert_eq!((ca[0].wr_id, ca[0].status), (1, WcStatus::Success));
    let cb = u.completions(B);
    assert_eq!(cb.len(), 1);
    let c = cb[0];
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (9, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(c.byte_len, 40 + 300, "the 40-byte slot counts");
    assert_eq!(c.src_qp, u.ends[A].qpn);
    assert_eq!(c.network_hdr, Some(NetworkHdr::Ipv4));
    assert_eq!(u.read_mem(B, 40, 300), data);

    // The slot, byte for byte: 20 zero bytes, then the IPv4 header rxe copies.
    let g = u.read_mem(B, 0, 40);
    let udp_payload = tr[0].bytes.len();
    let mut want = vec![0u8; 20];
    want.extend_from_slice(&[0x45, 0]);
    want.extend_from_slice(&((20 + 8 + udp_payload) as u16).to_be_bytes());
    want.extend_from_slice(&[0, 0, 0x40, 0, 64, 17]);
    let mut ip = want[20..].to_vec();
    ip.extend_from_slice(&[0, 0, 198, 18, 0, 1, 198, 18, 0, 2]);
    let check = !sum16(&ip);
    want.extend_from_slice(&check.to_be_bytes());
    want.extend_from_slice(&[198, 18, 0, 1, 198, 18, 0, 2]);
    assert_eq!(g, want);
    assert_eq!(sum16(&g[20..40]), 0xffff, "the IPv4 checksum is valid");
    assert_eq!(u.counter(B, Counter::RdmaRecvs), 1);
}

#[test]
fn ipv6_receives_get_the_ipv6_header_in_the_slot() {
    let mut u = Ud::v6(2);
    u.write_mem(A, 0, &pattern(1, 64));
    u.post_recv(B, 1, 0, 256);
    let d = u.dest(B, QKEY);
    u.send_to(A, 1, SendOp::SendWithImm { imm: 0xabcd }, 0, 64, &d)
        .unwrap();
    u.settle();
    let udp_payload = u.net.trace.as_ref().unwrap()[0].bytes.len();
    let c = u.completions(B)[0];
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!((c.imm, c.byte_len), (Some(0xabcd), 40 + 64));
    assert_eq!(c.network_hdr, Some(NetworkHdr::Ipv6));
    let g = u.read_mem(B, 0, 40);
    let mut want = vec![0x60, 0, 0, 0];
    want.extend_from_slice(&((8 + udp_payload) as u16).to_be_bytes());
    want.extend_from_slice(&[17, 64]);
    want.extend_from_slice(&"fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    want.extend_from_slice(&"fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
    assert_eq!(g, want);
    assert_eq!(u.read_mem(B, 40, 64), pattern(1, 64));
}

#[test]
fn a_wrong_qkey_is_a_counted_drop_and_the_wqe_stays() {
    let mut u = Ud::new(2);
    u.post_recv(B, 5, 0, 256);
    let bad = u.dest(B, QKEY ^ 1);
    u.send_to(A, 1, SendOp::Send, 0, 16, &bad).unwrap();
    u.settle();
    assert_eq!(u.completions(B), [], "not delivered");
    assert_eq!(u.counter(B, Counter::QkeyViolation), 1);
    // The sender cannot tell: its send completed when the packet left.
    assert_eq!(u.completions(A)[0].status, WcStatus::Success);
    // The WQE is still there for the next good datagram.
    u.send(A, 2, B, 0, 16);
    u.settle();
    let c = u.completions(B);
    assert_eq!((c.len(), c[0].wr_id), (1, 5));
}

#[test]
fn no_receive_wqe_is_a_counted_drop_not_an_rnr() {
    let mut u = Ud::new(2);
    u.send(A, 1, B, 0, 16);
    u.settle();
    assert_eq!(u.net.trace.as_ref().unwrap().len(), 1, "no NAK, no retry");
    assert_eq!(u.counter(B, Counter::UdDropNoRecvWqe), 1);
    assert_eq!(u.completions(A)[0].status, WcStatus::Success);
}

#[test]
fn a_message_longer_than_the_port_mtu_completes_without_a_packet() {
    let mut u = Ud::with_mtu(2, Mtu::M1024);
    u.post_recv(B, 1, 0, 4096);
    u.send(A, 1, B, 0, 1025);
    u.send(A, 2, B, 0, 1024);
    u.settle();
    // C10-93.1.1, rxe's "fake a successful UD send": no packet, no error.
    assert_eq!(u.sent(A), 1, "only the 1024-byte datagram left");
    let c: Vec<_> = u
        .completions(A)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(c, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(u.counter(A, Counter::UdSendTooLong), 1);
    let r = u.completions(B);
    assert_eq!((r.len(), r[0].byte_len), (1, 40 + 1024));
}

#[test]
fn a_message_longer_than_the_receive_buffer_is_a_local_length_error() {
    let mut u = Ud::new(2);
    u.post_recv(B, 1, 0, 40 + 99);
    u.post_recv(B, 2, 1024, 40 + 100);
    u.send(A, 1, B, 0, 100);
    u.send(A, 2, B, 0, 100);
    u.settle();
    let c: Vec<_> = u
        .completions(B)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(c, [(1, WcStatus::LocLenErr), (2, WcStatus::Success)]);
    // The QP stays usable: UD has no connection to break.
    assert_eq!(
        u.net.nodes[B].engine.qp(u.ends[B].qpn).unwrap().state,
        QpState::Rts
    );
}

#[test]
fn a_lost_datagram_is_not_retransmitted() {
    let mut u = Ud::new(2);
    u.post_recv(B, 1, 0, 256);
    u.post_recv(B, 2, 256, 256);
    u.net.add_rule(A, B, DropNth::new(&[1]));
    u.send(A, 1, B, 0, 16);
    u.send(A, 2, B, 0, 16);
    u.settle();
    assert_eq!(u.sent(A), 2, "no retry");
    let c: Vec<_> = u
        .completions(A)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(c, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let r = u.completions(B);
    assert_eq!(
        (r.len(), r[0].wr_id),
        (1, 1),
        "the second datagram took the first WQE"
    );
}

#[test]
fn ud_refuses_what_it_lacks() {
    let mut u = Ud::new(2);
    let qpn = u.ends[A].qpn;
    let d = u.dest(B, QKEY);
    let remote = Remote { va: 0, rkey: 0 };
    let e = u.send_to(A, 1, SendOp::Write { remote }, 0, 8, &d);
    assert!(matches!(e, Err(VerbsError::OpNotOnQpType { .. })), "{e:?}");
    let e = u.send_to(A, 1, SendOp::Read { remote }, 0, 8, &d);
    assert!(matches!(e, Err(VerbsError::OpNotOnQpType { .. })), "{e:?}");
    // A UD send needs its destination.
    let sge = u.sge(A, 0, 8);
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Send,
        local: Local::Sges(&[sge]),
        flags: SendFlags::default(),
    };
    let e = u.engine(A).post_send(Instant::ZERO, qpn, &wr);
    assert_eq!(e, Err(VerbsError::UdNeedsDest { qpn }));
    // INIT needs the Q_Key; RTR -> RTS the SQ PSN; connected-QP attributes are refused.
    let e = u.engine(A);
    let cq = e.create_cq(16).unwrap();
    let pd = e.mem().alloc_pd();
    let q = e
        .create_qp(&QpInit {
            qp_type: QpType::Ud,
            ..QpInit::rc(pd, cq, QpCap::default())
        })
        .unwrap();
    let init = QpAttr {
        state: Some(QpState::Init),
        pkey_index: Some(0),
        port: Some(1),
        ..Default::default()
    };
    let r = e.modify_qp(Instant::ZERO, q, &init);
    assert!(
        matches!(
            r,
            Err(VerbsError::MissingAttr {
                attr: "IBV_QP_QKEY",
                ..
            })
        ),
        "{r:?}"
    );
    let r = e.modify_qp(
        Instant::ZERO,
        q,
        &QpAttr {
            access: Some(roce_emu::mem::Access::REMOTE_WRITE),
            qkey: Some(QKEY),
            ..init
        },
    );
    assert!(matches!(r, Err(VerbsError::UnexpectedAttr { .. })), "{r:?}");
}

#[test]
fn gsi_datagrams_go_to_qpn_1_with_the_gsi_qkey() {
    let mut u = Ud::gsi(2);
    assert_eq!((u.ends[A].qpn, u.ends[B].qpn), (GSI_QPN, GSI_QPN));
    // A MAD-sized datagram (256 bytes), as the connection manager sends.
    let mad = pattern(9, 256);
    u.write_mem(A, 0, &mad);
    u.post_recv(B, 1, 0, 40 + 256);
    u.post_recv(B, 2, 512, 40 + 256);
    u.send(A, 1, B, 0, 256);
    // QP1 takes only the GSI Q_Key, whatever its attributes say (rxe `check_keys`).
    let bad = u.dest(B, QKEY);
    u.send_to(A, 2, SendOp::Send, 0, 256, &bad).unwrap();
    u.settle();
    let deth = {
        let tr = u.net.trace.as_ref().unwrap();
        let pkt = RocePacket::new_checked(&tr[0].bytes[..]).unwrap();
        RoceRepr::parse(&pkt).unwrap().deth.unwrap()
    };
    assert_eq!((deth.qkey, deth.src_qpn), (GSI_QKEY, 1));
    let c = u.completions(B);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].wr_id, c[0].src_qp, c[0].byte_len), (1, 1, 40 + 256));
    assert_eq!(u.read_mem(B, 40, 256), mad);
    assert_eq!(u.counter(B, Counter::QkeyViolation), 1);
    // One GSI QP per NIC.
    let e = u.engine(A);
    let cq = e.create_cq(16).unwrap();
    let pd = e.mem().alloc_pd();
    let init = QpInit {
        qp_type: QpType::Ud,
        ..QpInit::rc(pd, cq, QpCap::default())
    };
    assert_eq!(e.create_gsi_qp(&init), Err(VerbsError::GsiExists));
}

#[test]
fn error_state_flushes_both_queues_and_reset_brings_the_qp_back() {
    let mut u = Ud::new(2);
    u.post_recv(B, 1, 0, 256);
    u.post_recv(B, 2, 256, 256);
    let qb = u.ends[B].qpn;
    let now = u.net.now;
    let err = QpAttr {
        state: Some(QpState::Err),
        ..Default::default()
    };
    u.engine(B).modify_qp(now, qb, &err).unwrap();
    let c: Vec<_> = u
        .completions(B)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(c, [(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]);
    // A datagram for a QP in ERR is dropped (counted), never delivered.
    u.send(A, 1, B, 0, 16);
    u.settle();
    assert_eq!(u.completions(B), []);
    assert_eq!(u.counter(B, Counter::DropBadState), 1);
    // A send posted in ERR completes at once, flushed.
    let d = u.dest(A, QKEY);
    u.send_to(B, 9, SendOp::Send, 0, 8, &d).unwrap();
    let c = u.completions(B);
    assert_eq!((c[0].wr_id, c[0].status), (9, WcStatus::WrFlushErr));
    // RESET, then the UD bring-up again: it receives.
    let reset = QpAttr {
        state: Some(QpState::Reset),
        ..Default::default()
    };
    u.engine(B).modify_qp(now, qb, &reset).unwrap();
    let e = u.engine(B);
    e.modify_qp(
        now,
        qb,
        &QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            qkey: Some(QKEY),
            ..Default::default()
        },
    )
    .unwrap();
    e.modify_qp(
        now,
        qb,
        &QpAttr {
            state: Some(QpState::Rtr),
            ..Default::default()
        },
    )
    .unwrap();
    u.post_recv(B, 3, 0, 256);
    u.send(A, 2, B, 0, 16);
    u.settle();
    let c = u.completions(B);
    assert_eq!(
        (c.len(), c[0].wr_id, c[0].status),
        (1, 3, WcStatus::Success)
    );
}
