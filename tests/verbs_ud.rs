//! UD and QP1 through the verbs layer over real UDP sockets on loopback: two NICs, a
//! datagram each way between UD QPs (the IPv4 identification solved from the ICRC, as a
//! UDP socket never shows it, ends up in the 40-byte header slot with a valid checksum),
//! and a management datagram between the two GSI QPs (QPN 1, the GSI Q_Key). Addresses
//! 127.0.9.60 and .61, each a private port.

mod common;

use common::nic::{Nic, IOVA, WAIT};
use roce_emu::verbs::*;
use std::time::{Duration, Instant};

const QKEY: u32 = 0x1ee7_a330;

fn ud_qp(n: &Nic, gsi: bool) -> u32 {
    let init = QpInit {
        qp_type: QpType::Ud,
        ..QpInit::rc(n.pd, n.cq, QpCap::default())
    };
    let qpn = if gsi {
        n.ctx.create_gsi_qp(&init).unwrap()
    } else {
        n.ctx.create_qp(&init).unwrap()
    };
    let steps = [
        QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            qkey: Some(if gsi { GSI_QKEY } else { QKEY }),
            ..Default::default()
        },
        QpAttr {
            state: Some(QpState::Rtr),
            ..Default::default()
        },
        QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(Psn::new(7)),
            ..Default::default()
        },
    ];
    for a in &steps {
        n.ctx.modify_qp(qpn, a).unwrap();
    }
    qpn
}

/// The next completion of `n`'s CQ with this wr_id (others are the sends').
fn wait_for(n: &Nic, wr_id: u64) -> Completion {
    let deadline = Instant::now() + WAIT;
    let mut c = [Completion::default()];
    loop {
        if n.ctx.poll_cq(n.cq, &mut c).unwrap() == 1 && c[0].wr_id == wr_id {
            return c[0];
        }
        assert!(Instant::now() < deadline, "{}: no completion {wr_id}", n.ip);
        n.ctx.wait(Duration::from_millis(1)).unwrap();
    }
}

fn exchange(a: &Nic, b: &Nic, qa: u32, qb: u32, qkey: u32, len: u32) -> Completion {
    b.mr.write(IOVA, &[0; 64]).unwrap();
    b.ctx
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 100,
                sges: &[b.sge(0, 40 + 1024)],
            },
        )
        .unwrap();
    let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
    a.mr.write(IOVA + 0x8000, &data).unwrap();
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Send,
        local: Local::Sges(&[a.sge(0x8000, len)]),
        flags: SendFlags {
            signaled: true,
            ..Default::default()
        },
    };
    let dest = UdDest {
        dest_ip: b.ip,
        remote_qpn: qb,
        remote_qkey: qkey,
    };
    a.ctx.post_send_ud(qa, &wr, &dest).unwrap();
    assert_eq!(wait_for(a, 1).status, WcStatus::Success);
    let c = wait_for(b, 100);
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!((c.src_qp, c.byte_len), (qa, 40 + len));
    assert_eq!(b.bytes(40, len), data);
    c
}

/// A NIC on a port of its own (`share` off): QP1 of a port attached to a daemon is the
/// daemon's (DestQP 1 never reaches a program's engine there), so the engine's own GSI QP
/// is tested on a private port.
fn private(addr: &str) -> Nic {
    let mut d = Device::new(addr.parse().unwrap());
    d.share = false;
    Nic::new(d.open().expect("open the NIC"), None)
}

#[test]
fn datagrams_and_management_datagrams_over_udp() {
    let a = private("127.0.9.60");
    let b = private("127.0.9.61");
    let (qa, qb) = (ud_qp(&a, false), ud_qp(&b, false));
    let c = exchange(&a, &b, qa, qb, QKEY, 200);
    assert_eq!(c.network_hdr, Some(NetworkHdr::Ipv4));
    let g = b.bytes(0, 40);
    assert_eq!(g[..20], [0; 20]);
    assert_eq!((g[20], g[29]), (0x45, 17));
    assert_eq!(g[32..40], [127, 0, 9, 60, 127, 0, 9, 61]);
    let mut sum: u32 = g[20..40]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    assert_eq!(sum, 0xffff, "the IPv4 checksum is valid");
    exchange(&b, &a, qb, qa, QKEY, 1);

    // QP1 on both NICs: a 256-byte MAD to QPN 1 with the GSI Q_Key.
    let (ga, gb) = (ud_qp(&a, true), ud_qp(&b, true));
    assert_eq!((ga, gb), (GSI_QPN, GSI_QPN));
    let c = exchange(&a, &b, ga, gb, GSI_QKEY, 256);
    assert_eq!(c.src_qp, 1);
}
