//! What the conformance peer reads from a target: arbitrary bytes as the target's packet,
//! checked against every expectation of a script and described for the report, and
//! arbitrary text as an agent's reply line.
//!
//! Properties: no panic on any input; a packet with a wrong ICRC never matches.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_emu::conform::agent::Reply;
use roce_emu::conform::packet::{check, Got, Qpns};
use roce_emu::conform::script::{Action, Expect};
use roce_emu::conform::value::{ByteSpec, MrInfo, Mrs};
use std::sync::OnceLock;

const SCRIPT: &str = r#"title "fuzz"
cite - "-"
role responder
qp
expect ACKNOWLEDGE psn=5 syndrome=nak:seq msn=3
expect ACKNOWLEDGE syndrome=rnr
expect RDMA_READ_RESPONSE_FIRST psn=1 len=1024 data=mr:buf:0
expect RDMA_WRITE_ONLY va=buf+8 rkey=buf dmalen=4 data=hex:01020304 ackreq
expect ATOMIC_ACKNOWLEDGE orig=7
expect COMPARE_SWAP compare=1 swap=2 va=0x10
expect SEND_LAST_WITH_IMMEDIATE imm=9 pad=3 se
expect SEND_ONLY_WITH_INVALIDATE inv=buf
expect opcode=0x1f psn=0
expect UD_SEND_ONLY qkey=0x11111111 src_qp=target len=16
expect UC_SEND_FIRST psn=3 no_ackreq
"#;

fuzz_target!(|data: &[u8]| {
    static S: OnceLock<Vec<roce_emu::conform::script::Fields>> = OnceLock::new();
    let fields = S.get_or_init(|| {
        roce_emu::conform::parse("fuzz", "fuzz", SCRIPT)
            .unwrap()
            .steps
            .into_iter()
            .filter_map(|s| match s.action {
                Action::Expect(Expect::Packet { fields, .. }) => Some(fields),
                _ => None,
            })
            .collect()
    });
    let mut mrs = Mrs::default();
    mrs.0.insert(
        "buf".into(),
        MrInfo {
            addr: 0x1000,
            rkey: 0x42,
            len: 4096,
            fill: ByteSpec::Index,
        },
    );
    let q = Qpns {
        target: 0x11,
        peer: 0x22,
        targets: [0x11, 0, 0, 0],
        count: 1,
        qkey: 0x1111_1111,
    };
    for icrc_ok in [true, false] {
        let g = Got {
            bytes: data.to_vec(),
            icrc_ok,
            ecn: roce_emu::wire::Ecn::from_tos(data.first().copied().unwrap_or(0)),
        };
        let _ = g.describe();
        let _ = g.is_plain_ack();
        for f in fields {
            let r = check(f, &g, q, &mrs);
            assert!(icrc_ok || r.is_err());
        }
    }
    let _ = Reply::parse(&String::from_utf8_lossy(data));
});
