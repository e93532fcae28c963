//! A NIC that owns its frames: a verbs context on a TAP port (`backend::l2::L2Backend` over
//! `TapLink`, the L2 of `iface`), with its own MAC and address 10.98.0.2, in a namespace of
//! the test's own; the kernel holds 10.98.0.1 on the other side of the TAP. The kernel's
//! `ping` reaches the NIC (ARP and ICMP echo answered by `iface`), and an RC connection to
//! a UDP NIC on the kernel's address carries SEND, WRITE and READ with every byte checked:
//! ARP resolution before the first packet, every IPv4 ICRC checked in full on receive.
//! Root only (loud skip otherwise).

mod common;
#[path = "common/frames.rs"]
mod frames;

use common::netns::{skip, Netns};
use frames::in_netns;
use roce_emu::backend::l2::{iface_config, L2Backend};
use roce_emu::backend::TapLink;
use roce_emu::engine::{
    Completion, Local, Mtu, QpAttr, QpCap, QpInit, RecvWr, Remote, SendFlags, SendOp, SendWr,
    WcStatus,
};
use roce_emu::mem::{Access, MemoryRegion, Pd, Sge};
use roce_emu::verbs::{self, Context, Device};
use roce_emu::verbs::{DEFAULT_MIN_RNR_TIMER, DEFAULT_TIMEOUT, MAX_RETRY_CNT, RNR_RETRY_INFINITE};
use roce_emu::wire::Psn;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

const IOVA: u64 = 0x4000_0000;
const LEN: u64 = 1 << 17;
const WAIT: Duration = Duration::from_secs(10);

struct End {
    ctx: Context,
    _pd: Pd,
    mr: Arc<MemoryRegion>,
    cq: u32,
    qpn: u32,
    ip: IpAddr,
}

fn end(ctx: Context, ip: IpAddr) -> End {
    let pd = ctx.alloc_pd();
    let mr = ctx.reg_mr(pd, IOVA, LEN, Access::ALL).unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qpn = ctx
        .create_qp(&QpInit {
            sq_sig_all: true,
            ..QpInit::rc(pd, cq, cap)
        })
        .unwrap();
    End {
        ctx,
        _pd: pd,
        mr,
        cq,
        qpn,
        ip,
    }
}

fn connect(a: &End, b: &End) {
    let remote = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    for (me, peer, my_psn, peer_psn) in [(a, b, 10, 20), (b, a, 20, 10)] {
        let rtr = QpAttr::rtr(
            peer.ip,
            Mtu::M1024,
            peer.qpn,
            Psn::new(peer_psn),
            4,
            DEFAULT_MIN_RNR_TIMER,
        );
        let rts = QpAttr::rts(
            Psn::new(my_psn),
            DEFAULT_TIMEOUT,
            MAX_RETRY_CNT,
            RNR_RETRY_INFINITE,
            4,
        );
        verbs::connect_rc(&me.ctx, me.qpn, remote, &rtr, &rts).unwrap();
    }
}

fn sge(e: &End, off: u64, len: u32) -> Sge {
    Sge {
        addr: IOVA + off,
        length: len,
        lkey: e.mr.lkey(),
    }
}

fn post(e: &End, wr_id: u64, op: SendOp, off: u64, len: u32) {
    let s = [sge(e, off, len)];
    let wr = SendWr {
        wr_id,
        op,
        local: Local::Sges(&s),
        flags: SendFlags {
            signaled: true,
            ..Default::default()
        },
    };
    e.ctx.post_send(e.qpn, &wr).unwrap();
}

/// The next completion of `e` (polling drives its NIC), within `WAIT`.
fn completion(e: &End) -> Completion {
    let deadline = Instant::now() + WAIT;
    let mut c = [Completion::default()];
    loop {
        if e.ctx.poll_cq(e.cq, &mut c).unwrap() == 1 {
            return c[0];
        }
        assert!(Instant::now() < deadline, "no completion within {WAIT:?}");
        e.ctx.wait(Duration::from_millis(1)).unwrap();
    }
}

#[test]
fn a_nic_on_a_tap_answers_ping_and_carries_rc_traffic_to_the_kernels_address() {
    if !nix::unistd::geteuid().is_root() {
        skip("tap_port", "needs root for a network namespace and a TAP");
        return;
    }
    if std::process::Command::new("ping")
        .arg("-V")
        .output()
        .is_err()
    {
        skip("tap_port", "needs ping (iputils-ping)");
        return;
    }
    let ns = Netns::new("tapport");
    in_netns(&ns.0, || {
        let link = TapLink::create("rport0").expect("create TAP");
        ns.ip(&["addr", "add", "10.98.0.1/24", "dev", "rport0"]);
        let us = Ipv4Addr::new(10, 98, 0, 2);
        let cfg = iface_config(&link, Some((us, 24)), None);
        let port = L2Backend::new(link, cfg).unwrap();
        let a = end(
            Device::new(IpAddr::V4(us)).open_on(Box::new(port)).unwrap(),
            IpAddr::V4(us),
        );
        let kernel: IpAddr = "10.98.0.1".parse().unwrap();
        let mut dev = Device::new(kernel);
        dev.share = false;
        let b = end(dev.open().unwrap(), kernel);

        // The kernel pings the NIC: ARP then ICMP echo, answered by its progress thread.
        let ping = ns
            .cmd("ping")
            .args(["-c", "3", "-i", "0.2", "-W", "2", "10.98.0.2"])
            .output()
            .unwrap();
        assert!(
            ping.status.success(),
            "ping: {}",
            String::from_utf8_lossy(&ping.stdout)
        );
        assert!(String::from_utf8_lossy(&ping.stdout).contains("3 received"));

        connect(&a, &b);
        // SEND b -> a (a's receive first), WRITE a -> b (64 KiB), READ a <- b (32 KiB).
        a.ctx
            .post_recv(
                a.qpn,
                &RecvWr {
                    wr_id: 1,
                    sges: &[sge(&a, 0, 4096)],
                },
            )
            .unwrap();
        b.mr.write(IOVA + 100, b"over the tap").unwrap();
        post(&b, 2, SendOp::Send, 100, 12);
        let c = completion(&a);
        assert_eq!((c.wr_id, c.status, c.byte_len), (1, WcStatus::Success, 12));
        assert_eq!(completion(&b).status, WcStatus::Success);
        assert_eq!(a.mr.to_vec()[..12], *b"over the tap");

        let pattern: Vec<u8> = (0..65536u32).map(|i| (i * 7 + 3) as u8).collect();
        a.mr.write(IOVA + 65536, &pattern).unwrap();
        let remote = Remote {
            va: IOVA,
            rkey: b.mr.rkey().0,
        };
        post(&a, 3, SendOp::Write { remote }, 65536, 65536);
        assert_eq!(completion(&a).status, WcStatus::Success);
        assert_eq!(b.mr.to_vec()[..65536], pattern[..]);

        b.mr.write(IOVA + 70000, &pattern[..32768]).unwrap();
        let remote = Remote {
            va: IOVA + 70000,
            rkey: b.mr.rkey().0,
        };
        post(&a, 4, SendOp::Read { remote }, 0, 32768);
        assert_eq!(completion(&a).status, WcStatus::Success);
        assert_eq!(a.mr.to_vec()[..32768], pattern[..32768]);

        // The NIC on the TAP checked every IPv4 ICRC in full (it sees the IP ID), solved
        // none: the counters tell.
        let ca = a.ctx.counters();
        assert_eq!(ca.get(roce_emu::engine::Counter::IcrcIdSolved), 0, "{ca:?}");
    });
}
