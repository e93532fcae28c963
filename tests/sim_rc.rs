//! RC scenarios over the simulator: each test reads like a protocol trace (opcodes, PSNs,
//! syndromes in order) and checks completions, memory and counters.

mod common;

use common::rc::{pattern, Opts, Pair};
use roce_emu::engine::*;

const A: usize = 0;
const B: usize = 1;

fn ops(p: &Pair) -> Vec<String> {
    p.opcodes(None)
}

#[test]
fn send_only_is_acked_and_received() {
    let mut p = Pair::new(Opts::default());
    p.write_mem(A, 0, &pattern(1, 64));
    p.post_recv(B, 7, 0, 4096);
    p.send(A, 1, SendOp::Send, 0, 64);
    p.settle();
    p.print_trace();
    assert_eq!(ops(&p), ["RC_SEND_ONLY", "RC_ACKNOWLEDGE"]);
    let ca = p.completions(A);
    assert_eq!(ca.len(), 1);
    assert_eq!(
        (ca[0].wr_id, ca[0].status, ca[0].opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
    let cb = p.completions(B);
    assert_eq!(cb.len(), 1);
    assert_eq!(
        (cb[0].wr_id, cb[0].status, cb[0].byte_len),
        (7, WcStatus::Success, 64)
    );
    assert_eq!(cb[0].opcode, WcOpcode::Recv);
    assert_eq!(p.read_mem(B, 0, 64), pattern(1, 64));
}

#[test]
fn long_send_is_segmented_by_mtu_with_one_ack() {
    // As rc_pingpong_s5000_m1024.pcap: FIRST, 3 MIDDLE, LAST (904 bytes), one ACK.
    let mut p = Pair::new(Opts::default());
    p.write_mem(A, 0, &pattern(2, 5000));
    p.post_recv(B, 7, 0, 8192);
    p.send(A, 1, SendOp::Send, 0, 5000);
    p.settle();
    p.print_trace();
    assert_eq!(
        ops(&p),
        [
            "RC_SEND_FIRST",
            "RC_SEND_MIDDLE",
            "RC_SEND_MIDDLE",
            "RC_SEND_MIDDLE",
            "RC_SEND_LAST",
            "RC_ACKNOWLEDGE"
        ]
    );
    assert_eq!(p.read_mem(B, 0, 5000), pattern(2, 5000));
    assert_eq!(p.completions(B)[0].byte_len, 5000);
}

#[test]
fn write_read_and_atomics_move_the_right_bytes() {
    let mut p = Pair::new(Opts::default());
    p.write_mem(A, 0, &pattern(3, 3000));
    p.write_mem(B, 8192, &pattern(4, 2500));
    p.write_mem(B, 16384, &7u64.to_ne_bytes());
    let rb = |off| p.end(B).remote(off);
    let (w, r, at) = (rb(0), rb(8192), rb(16384));
    p.send(A, 1, SendOp::Write { remote: w }, 0, 3000);
    p.send(A, 2, SendOp::Read { remote: r }, 4096, 2500);
    p.send(
        A,
        3,
        SendOp::CompareSwap {
            remote: at,
            compare: 7,
            swap: 99,
        },
        8000,
        8,
    );
    p.send(A, 4, SendOp::FetchAdd { remote: at, add: 5 }, 8008, 8);
    p.settle();
    p.print_trace();
    let c = p.completions(A);
    let got: Vec<_> = c.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (4, WcStatus::Success)
        ]
    );
    assert_eq!(p.read_mem(B, 0, 3000), pattern(3, 3000));
    assert_eq!(p.read_mem(A, 4096, 2500), pattern(4, 2500));
    assert_eq!(p.read_mem(A, 8000, 8), 7u64.to_ne_bytes());
    assert_eq!(p.read_mem(A, 8008, 8), 99u64.to_ne_bytes());
    assert_eq!(p.read_mem(B, 16384, 8), 104u64.to_ne_bytes());
    assert!(
        p.completions(B).is_empty(),
        "WRITE without immediate consumes no receive"
    );
}
