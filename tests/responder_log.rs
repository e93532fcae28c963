//! The responder's debug line for a refused R_Key or range (NAK Remote Access Error): the
//! QP, the R_Key, the VA, the length and the region's bounds, so the side that refused can
//! say why its peer saw `RemAccessErr`. Two verbs contexts on 127.0.56.1 and .2, a
//! tracing subscriber of the test's own.

mod common;

use common::log::Log;

use common::nic::{connect, End, Nic, IOVA, LEN};
use roce_emu::engine::{Remote, SendOp, WcStatus};

#[test]
fn a_write_outside_the_region_is_logged_with_key_range_and_bounds() {
    let log = Log::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_env_filter("roce_emu::engine=debug")
        .with_ansi(false)
        .init();
    let a = End::new(Nic::open("127.0.56.1"));
    let b = End::new(Nic::open("127.0.56.2"));
    connect(a.ep(), b.ep());
    // 4096 bytes from 100 bytes before the end of b's region.
    let va = IOVA + LEN - 100;
    let rkey = b.mr.rkey().0;
    let remote = Remote { va, rkey };
    a.ep()
        .post_wr(7, SendOp::Write { remote }, 0, 4096, false)
        .unwrap();
    let c = a.nic.poll_one();
    assert_eq!((c.wr_id, c.status), (7, WcStatus::RemAccessErr));
    let text = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains("refused (NAK remote access error)"))
        .unwrap_or_else(|| panic!("no refusal line in:\n{text}"));
    for want in [
        format!("QP {:#x}: WRITE PSN", b.qpn),
        format!("rkey {rkey:#x}"),
        format!("VA {va:#x}"),
        "length 4096".to_string(),
        format!("outside the region [{IOVA:#x}, +{LEN})"),
    ] {
        assert!(line.contains(&want), "{want:?} missing: {line}");
    }
    assert!(line.contains("DEBUG"), "{line}");
}
