//! A responder that fails a request NAKs it, and the NAK must reach the requester even
//! when the responder's program stops at once on its error completion (rc_pingpong returns
//! from `main` then). The request: a SEND whose packets are larger than the responder's
//! path MTU (requester at MTU 2048, responder at 1024), which the responder NAKs with
//! Invalid Request; the requester must complete with `RemInvReqErr`, never with a retry
//! timeout.
//!
//! - **undriven**: the responder, with no progress thread, polls its error completion and
//!   is never driven again (as a program that exits without closing): the NAK must have
//!   left before the completion was visible.
//! - **dropped**: the responder drops its context right after its error completion, on
//!   two addresses, on one shared address (both attached to the daemon started on demand:
//!   its NAK goes through the daemon's hairpin) and through a `roce-emu daemon`.
//!
//! 20 runs each (about a second in all; `EXIT_NAK_RUNS=N` for another count).
//! Addresses 127.0.51.x (in-process) and 127.0.57.x (the daemon's port).

mod common;

use common::daemon::Daemon;
use common::nic::{Nic, IOVA};
use roce_emu::engine::{Completion, Local, Mtu, QpAttr, RecvWr, SendFlags, SendOp, SendWr};
use roce_emu::mem::{Access, Sge};
use roce_emu::verbs::{self, Context, Device, WcStatus};
use roce_emu::verbs::{DEFAULT_MIN_RNR_TIMER, MAX_RETRY_CNT, RNR_RETRY_INFINITE};
use roce_emu::wire::Psn;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// ACK timeout code of the requester: 4.096 µs * 2^10 = 4 ms, so a lost NAK fails a run in
/// about 8 * 4 ms instead of half a second; a NAK that leaves takes microseconds.
const TIMEOUT: u8 = 10;
const WAIT: Duration = Duration::from_secs(10);

fn runs() -> usize {
    std::env::var("EXIT_NAK_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
}

fn open(ip: &str, thread: bool, daemon: Option<&Path>) -> Nic {
    let ip: IpAddr = ip.parse().unwrap();
    let mut dev = Device::new(ip);
    dev.progress_thread = thread;
    dev.daemon = daemon.map(Path::to_path_buf);
    Nic::new(dev.open().expect("open the NIC"), None)
}

/// QP `qpn` of `nic` to RTS toward `peer`'s QP at `mtu`.
fn connect(nic: &Nic, qpn: u32, peer: (IpAddr, u32), mtu: Mtu) {
    let rtr = QpAttr::rtr(
        peer.0,
        mtu,
        peer.1,
        Psn::new(0x100),
        4,
        DEFAULT_MIN_RNR_TIMER,
    );
    let rts = QpAttr::rts(
        Psn::new(0x100),
        TIMEOUT,
        MAX_RETRY_CNT,
        RNR_RETRY_INFINITE,
        4,
    );
    verbs::connect_rc(&nic.ctx, qpn, Access::ALL, &rtr, &rts).unwrap();
}

/// Polls `ctx`'s CQ `cq` until a completion comes, within `WAIT`.
fn poll(ctx: &Context, cq: u32, who: &str) -> Completion {
    let deadline = Instant::now() + WAIT;
    let mut c = [Completion::default()];
    loop {
        if ctx.poll_cq(cq, &mut c).unwrap() == 1 {
            return c[0];
        }
        assert!(
            Instant::now() < deadline,
            "{who}: no completion in {WAIT:?}"
        );
        ctx.wait(Duration::from_millis(1)).unwrap();
    }
}

/// One run: `resp` (MTU 1024) receives a 4096-byte SEND from `req` (MTU 2048), fails it,
/// and `after_error` does what its program does next (drop it, or nothing). The requester's
/// completion status.
fn run(req: Nic, resp: Nic, after_error: impl FnOnce(Nic)) -> WcStatus {
    let rq = req.qp().qpn;
    let sq = resp.qp().qpn;
    connect(&req, rq, (resp.ip, sq), Mtu::M2048);
    connect(&resp, sq, (req.ip, rq), Mtu::M1024);
    let sge = [Sge {
        addr: IOVA,
        length: 4096,
        lkey: resp.mr.lkey(),
    }];
    resp.ctx
        .post_recv(
            sq,
            &RecvWr {
                wr_id: 1,
                sges: &sge,
            },
        )
        .unwrap();
    let sge = [Sge {
        addr: IOVA,
        length: 4096,
        lkey: req.mr.lkey(),
    }];
    let wr = SendWr {
        wr_id: 2,
        op: SendOp::Send,
        local: Local::Sges(&sge),
        flags: SendFlags {
            signaled: true,
            ..Default::default()
        },
    };
    req.ctx.post_send(rq, &wr).unwrap();
    // The responder's program: polls until its receive fails (flushed by the error).
    let c = poll(&resp.ctx, resp.cq, "responder");
    assert_ne!(c.status, WcStatus::Success, "responder: {c:?}");
    let counters = resp.ctx.counters();
    after_error(resp);
    let c = poll(&req.ctx, req.cq, "requester");
    assert_eq!(c.wr_id, 2);
    if c.status != WcStatus::RemInvReqErr {
        eprintln!("responder's counters at its error: {counters:?}");
    }
    c.status
}

/// `runs()` runs of `one`; every one must end with the requester's `RemInvReqErr`.
fn repeat(what: &str, mut one: impl FnMut() -> WcStatus) {
    let n = runs();
    let got: Vec<WcStatus> = (0..n).map(|_| one()).collect();
    let ok = got.iter().filter(|&&s| s == WcStatus::RemInvReqErr).count();
    eprintln!("{what}: remote invalid request in {ok} of {n} runs");
    assert_eq!(ok, n, "{what}: the requester saw {got:?}");
}

#[test]
fn undriven_responder_has_sent_its_nak_when_its_error_completion_is_seen() {
    repeat("undriven, two addresses", || {
        let req = open("127.0.51.1", true, None);
        let resp = open("127.0.51.2", false, None);
        let mut keep = None;
        // Never driven again until the requester is done: as if its program had exited.
        let s = run(req, resp, |r| keep = Some(r));
        drop(keep);
        s
    });
}

#[test]
fn responder_dropped_at_its_error_completion_two_addresses() {
    repeat("dropped, two addresses", || {
        let req = open("127.0.51.3", true, None);
        let resp = open("127.0.51.4", true, None);
        run(req, resp, drop)
    });
}

#[test]
fn responder_dropped_at_its_error_completion_one_shared_address() {
    repeat("dropped, one shared address (the daemon on demand)", || {
        // Opened first: it starts the address's daemon, which routes for both.
        let resp = open("127.0.51.5", true, None);
        let req = open("127.0.51.5", true, None);
        run(req, resp, drop)
    });
}

#[test]
fn responder_dropped_or_undriven_through_a_daemon() {
    let d = Daemon::start(None, "udp:127.0.57.1", "exit-nak", &[]);
    repeat("dropped, through a daemon", || {
        let req = open("127.0.57.1", true, Some(&d.socket));
        let resp = open("127.0.57.1", true, Some(&d.socket));
        run(req, resp, drop)
    });
    repeat("undriven, through a daemon", || {
        let req = open("127.0.57.1", true, Some(&d.socket));
        let resp = open("127.0.57.1", false, Some(&d.socket));
        let mut keep = None;
        let s = run(req, resp, |r| keep = Some(r));
        drop(keep);
        s
    });
}
