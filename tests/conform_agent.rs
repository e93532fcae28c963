//! The conformance agent for real rdma-core devices (tools/conform/agent/, built by
//! tools/conform/build-agent.sh against Debian 12's libibverbs), checked without the lab:
//! two agents run on roce-emu's drop-in libibverbs.so.1 (`roce-emu run --`), each on a
//! loopback address of its own (127.0.41.x), and this test speaks spec/FORMAT.md's agent
//! protocol to both over TCP: a region and an RC QP on each, pointed at the other, then
//! SEND, WRITE with immediate, READ, CMP_SWAP and FETCH_ADD with their completions and the
//! memory they leave, a remote access error, and the error replies to bad requests. Then
//! `roce-emu conform` plays scripts against roce-emu twice, through its own in-process agent
//! and through this one: the two columns of the matrix must agree.

mod common;

use common::dropin::{self, show};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// target/conform/agent, built once per test binary; `None` after a loud skip when there is
/// no C compiler (a failure under CI).
fn agent_binary(test: &str) -> Option<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        if Command::new("gcc").arg("--version").output().is_err() {
            return Err("no gcc to build tools/conform/agent/".into());
        }
        let out = Command::new(repo().join("tools/conform/build-agent.sh"))
            .output()
            .expect("run tools/conform/build-agent.sh");
        assert!(
            out.status.success(),
            "tools/conform/build-agent.sh failed: {}",
            show(&out)
        );
        Ok(PathBuf::from(
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        ))
    });
    match built {
        Ok(p) => Some(p.clone()),
        Err(why) => {
            common::netns::skip(test, why);
            None
        }
    }
}

/// One agent process on the drop-in, device `rxe0` on `ip`; killed when dropped.
struct Agent {
    child: Child,
    port: u16,
    ip: String,
}

impl Agent {
    fn start(test: &str, ip: &str) -> Option<Agent> {
        let env = dropin::setup(test)?;
        let bin = agent_binary(test)?;
        let mut child = Command::new(env!("CARGO_BIN_EXE_roce-emu"))
            .args(["run", "--devices", &format!("rxe0={ip}"), "--"])
            .arg(&bin)
            .args(["-p", "0", "-l", ip])
            .env("ROCE_EMU_DROPIN_DIR", &env.lib)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the agent");
        // "agent: listening on port PORT (device ...)"
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let n = out.read_line(&mut line).unwrap_or(0);
        if n == 0 {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("the agent on {ip} did not start: {err}");
        }
        let port = line
            .split_whitespace()
            .nth(4)
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("agent on {ip}: {line:?}"));
        assert!(
            line.contains("device rxe0, roce-emu, GID index 1"),
            "{line:?}"
        );
        Some(Agent {
            child,
            port,
            ip: ip.to_string(),
        })
    }

    fn connect(&self) -> Client {
        let s = TcpStream::connect((self.ip.as_str(), self.port)).expect("connect to the agent");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Client {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
            who: self.ip.clone(),
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
    who: String,
}

impl Client {
    /// One request line, its reply line (without the new line).
    fn raw(&mut self, bytes: &[u8]) -> String {
        self.w.write_all(bytes).unwrap();
        let mut line = String::new();
        self.r
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("{}: no reply to {:?}: {e}", self.who, bytes));
        assert!(
            line.ends_with('\n'),
            "{}: reply cut short: {line:?}",
            self.who
        );
        line.trim_end_matches('\n').to_string()
    }

    fn q(&mut self, req: &str) -> String {
        self.raw(format!("{req}\n").as_bytes())
    }

    /// A request that must succeed: its `key=value` results.
    fn ok(&mut self, req: &str) -> HashMap<String, String> {
        let r = self.q(req);
        assert!(
            r == "ok" || r.starts_with("ok "),
            "{}: {req:?} -> {r:?}",
            self.who
        );
        r.split_whitespace()
            .skip(1)
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A request that must fail with `err ...` containing `want`.
    fn err(&mut self, req: &str, want: &str) {
        let r = self.q(req);
        assert!(
            r.starts_with("err ") && r.contains(want),
            "{}: {req:?} -> {r:?}, wanted err ...{want}...",
            self.who
        );
    }

    /// `poll` that must give one completion: its results.
    fn completion(&mut self) -> HashMap<String, String> {
        let c = self.ok("poll ms=5000");
        assert!(c.contains_key("wr"), "{}: no completion: {c:?}", self.who);
        c
    }

    fn read(&mut self, off: u64, len: u64) -> String {
        self.ok(&format!("read name=buf off={off} len={len}"))["hex"].clone()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap(),
    }
}

fn check(c: &HashMap<String, String>, wr: u64, status: &str, op: &str, len: u32) {
    let got = (
        c.get("wr").map(|s| num(s)),
        c.get("status").map(String::as_str),
        c.get("op").map(String::as_str),
        c.get("len").map(|s| num(s)),
    );
    assert_eq!(
        got,
        (Some(wr), Some(status), Some(op), Some(u64::from(len))),
        "completion {c:?}"
    );
}

const ACCESS: &str = "access=local_write,remote_write,remote_read,remote_atomic";

#[test]
fn two_agents_on_the_drop_in_do_every_rc_operation() {
    let tag = "conform_agent_rc";
    let Some(a) = Agent::start(tag, "127.0.41.1") else {
        return;
    };
    let Some(b) = Agent::start(tag, "127.0.41.2") else {
        return;
    };
    let (mut ca, mut cb) = (a.connect(), b.connect());
    let ha = ca.ok("hello");
    let hb = cb.ok("hello");
    assert_eq!(
        (ha["name"].as_str(), ha["ip"].as_str()),
        ("roce-emu", "127.0.41.1")
    );
    assert_eq!(
        (hb["name"].as_str(), hb["ip"].as_str()),
        ("roce-emu", "127.0.41.2")
    );
    ca.ok("reset");

    // A's region: byte i = i mod 256; B's: zeros.
    let ma = ca.ok(&format!("mr name=buf len=8192 {ACCESS} fill=index"));
    let mb = cb.ok(&format!("mr name=buf len=8192 {ACCESS} fill=0x00"));
    assert_eq!(num(&ma["addr"]) % 4096, 0, "{ma:?}");
    assert_eq!(ca.read(250, 8), "fafbfcfdfeff0001");
    assert_eq!(cb.read(0, 4), "00000000");

    // Each QP's number exists only once it does: A stops at INIT, B goes to RTS pointed at
    // A, then A is pointed at B (modify's peer_qpn= peer_ip=) and taken to RTS.
    let qa = ca.ok("qp mtu=1024 psn=0x100 peer_psn=0x200 state=INIT");
    assert_eq!(ca.ok("state")["state"], "INIT");
    let qb = cb.ok(&format!(
        "qp mtu=1024 psn=0x200 peer_psn=0x100 peer_qpn={} peer_ip={} {ACCESS}",
        qa["qpn"], ha["ip"]
    ));
    assert_eq!(cb.ok("state")["state"], "RTS");
    ca.err("modify state=RTR", "needs peer_qpn");
    ca.ok(&format!(
        "modify state=RTR peer_qpn={} peer_ip={}",
        qb["qpn"], hb["ip"]
    ));
    assert_eq!(ca.ok("state")["state"], "RTR");
    ca.ok("modify state=RTS");
    assert_eq!(ca.ok("state")["state"], "RTS");

    // SEND (3 packets at MTU 1024) into two SGEs of B.
    cb.ok("post_recv wr=1 sge=buf:0:2000,buf:4096:2000");
    ca.ok("post_send wr=2 op=SEND sge=buf:0:3000 flags=signaled");
    check(&ca.completion(), 2, "SUCCESS", "SEND", 3000);
    check(&cb.completion(), 1, "SUCCESS", "RECV", 3000);
    let idx = |from: usize, n: usize| hex(&(from..from + n).map(|i| i as u8).collect::<Vec<_>>());
    assert_eq!(cb.read(0, 16), idx(0, 16));
    assert_eq!(cb.read(1990, 10), idx(1990, 10));
    assert_eq!(cb.read(4096, 8), idx(2000, 8));
    assert_eq!(cb.read(4096 + 992, 8), idx(2992, 8));
    assert_eq!(cb.read(4096 + 1000, 4), "00000000");
    assert_eq!(cb.q("poll ms=0"), "ok none", "nothing else");

    // SEND with immediate, solicited, and an unsignaled SEND before it (no completion).
    cb.ok("post_recv wr=3 sge=buf:6000:64");
    cb.ok("post_recv wr=4 sge=buf:6100:64");
    ca.ok("post_send wr=5 op=SEND sge=buf:16:8");
    ca.ok("post_send wr=6 op=SEND_IMM imm=0xdeadbeef sge=buf:32:8 flags=signaled,solicited");
    check(&ca.completion(), 6, "SUCCESS", "SEND", 8);
    check(&cb.completion(), 3, "SUCCESS", "RECV", 8);
    let c = cb.completion();
    check(&c, 4, "SUCCESS", "RECV", 8);
    assert_eq!(c["imm"], "0xdeadbeef");
    assert_eq!(cb.read(6000, 8), idx(16, 8));
    assert_eq!(cb.read(6100, 8), idx(32, 8));

    // WRITE, then WRITE with immediate (consumes a receive, zero-length here).
    let (va_b, rkey_b) = (num(&mb["addr"]), mb["rkey"].clone());
    ca.ok(&format!(
        "post_send wr=7 op=WRITE sge=buf:100:200 va={} rkey={rkey_b} flags=signaled",
        va_b + 7000
    ));
    check(&ca.completion(), 7, "SUCCESS", "RDMA_WRITE", 200);
    assert_eq!(cb.read(7000, 200), idx(100, 200));
    assert_eq!(cb.read(7200, 1), "00");
    cb.ok("post_recv wr=8");
    ca.ok(&format!(
        "post_send wr=9 op=WRITE_IMM imm=0x1234 sge=buf:0:4 va={:#x} rkey={rkey_b} flags=signaled",
        va_b + 7300
    ));
    check(&ca.completion(), 9, "SUCCESS", "RDMA_WRITE", 4);
    let c = cb.completion();
    check(&c, 8, "SUCCESS", "RECV_RDMA_WITH_IMM", 4);
    assert_eq!(c["imm"], "0x1234");
    assert_eq!(cb.read(7300, 4), "00010203");

    // READ: B reads 2500 bytes of A (3 response packets).
    let (va_a, rkey_a) = (num(&ma["addr"]), ma["rkey"].clone());
    cb.ok(&format!(
        "post_send wr=10 op=READ sge=buf:1000:2500 va={} rkey={rkey_a} flags=signaled",
        va_a + 3000
    ));
    check(&cb.completion(), 10, "SUCCESS", "RDMA_READ", 2500);
    assert_eq!(cb.read(1000, 2500), idx(3000, 2500));

    // CMP_SWAP that matches, one that does not, then FETCH_ADD: the original values land
    // in B, the results in A (little-endian in memory, as the host writes them).
    let word = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
    cb.ok(&format!(
        "post_send wr=11 op=CMP_SWAP sge=buf:16:8 va={:#x} rkey={rkey_a} compare={word:#x} swap=0x1122334455667788 flags=signaled",
        va_a + 8
    ));
    check(&cb.completion(), 11, "SUCCESS", "COMP_SWAP", 8);
    assert_eq!(cb.read(16, 8), "08090a0b0c0d0e0f");
    assert_eq!(ca.read(8, 8), "8877665544332211");
    cb.ok(&format!(
        "post_send wr=12 op=CMP_SWAP sge=buf:24:8 va={:#x} rkey={rkey_a} compare=0 swap=1 flags=signaled",
        va_a + 8
    ));
    check(&cb.completion(), 12, "SUCCESS", "COMP_SWAP", 8);
    assert_eq!(cb.read(24, 8), "8877665544332211");
    assert_eq!(ca.read(8, 8), "8877665544332211");
    cb.ok(&format!(
        "post_send wr=13 op=FETCH_ADD sge=buf:32:8 va={:#x} rkey={rkey_a} add=0x10 flags=signaled",
        va_a + 8
    ));
    check(&cb.completion(), 13, "SUCCESS", "FETCH_ADD", 8);
    assert_eq!(cb.read(32, 8), "8877665544332211");
    assert_eq!(ca.read(8, 8), "9877665544332211");

    // A WRITE with a wrong rkey: the responder NAKs, the requester's completion says so
    // and its QP is in ERR; later work requests are flushed.
    ca.ok(&format!(
        "post_send wr=14 op=WRITE sge=buf:0:8 va={va_b} rkey=0x1 flags=signaled"
    ));
    check(&ca.completion(), 14, "REM_ACCESS_ERR", "RDMA_WRITE", 8);
    assert_eq!(ca.ok("state")["state"], "ERR");
    ca.ok("post_recv wr=15 sge=buf:0:8");
    let c = ca.completion();
    assert_eq!(
        (c["wr"].as_str(), c["status"].as_str()),
        ("15", "WR_FLUSH_ERR")
    );
    assert_eq!(ca.q("poll ms=50"), "ok none");

    // Reset, and a new connection starts from nothing.
    ca.ok("reset");
    ca.err("read name=buf off=0 len=1", "no mr buf");
    cb.ok("modify state=ERR");
    assert_eq!(cb.ok("state")["state"], "ERR");
    drop(cb);
    let mut cb = b.connect();
    cb.err("state", "no qp");
    cb.err("read name=buf off=0 len=1", "no mr buf");
}

#[test]
fn the_agent_answers_bad_requests_with_err() {
    let tag = "conform_agent_errors";
    let Some(a) = Agent::start(tag, "127.0.41.3") else {
        return;
    };
    let mut c = a.connect();
    c.err("bogus", "unknown command bogus");
    c.err("", "empty request");
    c.err("hello x", "bad argument x");
    c.err("hello x=1", "unknown key x");
    c.err("poll ms=5", "no qp");
    c.err("state", "no qp");
    c.err("post_recv wr=1", "no qp");
    c.err("mr len=64", "missing name");
    c.err("mr name=buf", "missing len");
    c.err("mr name=buf len=12x", "bad number len=12x");
    c.err("mr name=buf len=-1", "bad number len=-1");
    c.err("mr name=buf len=0x", "bad number len=0x");
    c.err("mr name=buf len=99999999999999999999999", "bad number len");
    c.err(
        "mr name=buf len=64 access=remote_everything",
        "bad access flag",
    );
    c.err("mr name=buf len=64 fill=0x100", "bad fill");
    c.err("mr name=b/uf len=64", "bad name");
    c.err("mr name=buf len=1 len=2", "duplicate key len");
    c.ok(&format!("mr name=buf len=4096 {ACCESS} fill=0xab"));
    c.err("mr name=buf len=64", "mr buf exists");
    assert_eq!(
        c.read(4090, 6),
        "abababababab",
        "the last bytes of the region"
    );
    c.err("read name=buf off=4090 len=7", "outside mr buf");
    c.err("read name=buf off=99999999999 len=1", "outside mr buf");
    c.err("read name=nope off=0 len=1", "no mr nope");
    c.err("qp mtu=1000", "bad mtu=1000");
    c.err("qp psn=0x1000000", "bad number psn");
    c.err("qp state=SQD", "bad state=SQD");
    c.err("qp state=RTR", "needs peer_qpn");
    c.err("qp peer_qpn=5", "go together");
    c.err("qp peer_qpn=5 peer_ip=1.2.3", "bad peer_ip");
    assert!(
        c.q("qp peer_qpn=5 peer_ip=::1").starts_with("unsupported "),
        "IPv6 peer"
    );
    c.err("qp type=xrc", "bad type=xrc");
    c.err("qp srq=1", "needs an srq first");
    c.err("modify_srq limit=1", "no srq");
    c.err("post_srq_recv wr=1", "no srq");
    c.err("srq max_wr=0", "max_wr must be at least 1");
    // Up to four QPs on one CQ (several QPs on one SRQ); the first is the one acted on.
    c.ok("qp state=INIT rq=4 sq=4");
    for _ in 0..3 {
        c.ok("qp state=INIT rq=4 sq=4");
    }
    c.err("qp state=INIT", "4 qps exist");
    // Nothing to complete.
    assert_eq!(c.q("poll ms=0"), "ok none");
    assert_eq!(c.q("poll ms=20"), "ok none");
    c.err("poll ms=abc", "bad number ms=abc");
    // An SGE past its region is the NIC's to refuse (LOC_PROT_ERR when used), not the
    // agent's; inline data, which the library copies from the address, must fit.
    c.ok("post_recv wr=1 sge=buf:4000:200");
    c.err(
        "post_send wr=9 op=SEND sge=buf:4000:200 flags=inline",
        "inline sge buf:4000:200 outside the mr",
    );
    c.err("post_recv wr=1 sge=buf:0", "bad sge");
    c.err("post_recv wr=1 sge=buf:x:1", "bad number in sge");
    c.err("post_recv wr=1 sge=nope:0:1", "no mr nope");
    c.err("post_recv sge=buf:0:1", "missing wr");
    c.err("post_send wr=1 op=NOPE", "bad op=NOPE");
    c.err("post_send wr=1", "missing op");
    c.err("post_send wr=1 op=WRITE sge=buf:0:8", "missing va");
    c.err(
        "post_send wr=1 op=WRITE sge=buf:0:8 va=0x1000",
        "missing rkey",
    );
    c.err(
        "post_send wr=1 op=CMP_SWAP sge=buf:0:8 va=8 rkey=1",
        "missing compare",
    );
    c.err(
        "post_send wr=1 op=FETCH_ADD sge=buf:0:8 va=8 rkey=1",
        "missing add",
    );
    c.err("post_send wr=1 op=SEND flags=loud", "bad flags flag loud");
    c.err("modify state=FOO", "bad state=FOO");
    c.err("modify state=RTS", "ibv_modify_qp INIT->RTS");
    c.ok("modify state=ERR");
    assert_eq!(c.ok("state")["state"], "ERR");
    // A line too long is answered once and skipped; a NUL byte is refused; CR LF is fine.
    let long = format!("hello {}\n", "x".repeat(10000));
    let r = c.raw(long.as_bytes());
    assert!(r.starts_with("err line too long"), "{r}");
    assert!(c.raw(b"hel\0lo\n").starts_with("err NUL byte"));
    assert_eq!(c.raw(b"state\r\n"), "ok state=ERR");
    // Still serving, and a second client after this one gets a fresh agent.
    c.ok("hello");
    drop(c);
    let mut c = a.connect();
    c.err("state", "no qp");
    c.ok("hello");
}

/// A few scripts of this test's own (spec/ may hold none yet), one per kind of step: the
/// target as responder (SEND, WRITE with immediate, READ, atomics, a bad R_Key) and as
/// requester (WRITE, SEND with immediate and READ answered by the peer).
const SCRIPTS: &[(&str, &str)] = &[
    (
        "send-only",
        r#"title "SEND_ONLY"
cite - "9.7.5.1"
role responder
mr   buf len=4096 access=local_write fill=0x00
qp   mtu=1024 psn=0x100 peer_psn=0x500
post recv wr=1 sge=buf:0:1024
send SEND_ONLY psn=0x500 ackreq len=64
expect ACKNOWLEDGE psn=0x500 syndrome=ack
expect completion wr=1 status=SUCCESS op=RECV len=64
expect memory buf off=0 len=64 fill=index
"#,
    ),
    (
        "write-imm",
        r#"title "WRITE, then WRITE with immediate"
cite - "9.4.3"
role responder
mr   buf len=4096 access=local_write,remote_write fill=0x00
qp   mtu=1024 psn=0x100 peer_psn=0x500
post recv wr=7
send RDMA_WRITE_ONLY psn=0x500 va=buf+128 rkey=buf len=32 fill=0xab
send RDMA_WRITE_ONLY_WITH_IMMEDIATE psn=0x501 ackreq va=buf+256 rkey=buf len=8 fill=0xcd imm=0xdeadbeef
expect ACKNOWLEDGE psn=0x501 syndrome=ack skip_acks
expect completion wr=7 status=SUCCESS op=RECV_RDMA_WITH_IMM len=8 imm=0xdeadbeef
expect memory buf off=128 len=32 fill=0xab
expect memory buf off=256 len=8 fill=0xcd
"#,
    ),
    (
        "read",
        r#"title "READ of 2500 bytes in three responses"
cite - "9.7.4.1.3"
role responder
mr   buf len=4096 access=local_write,remote_read fill=index
qp   mtu=1024 psn=0x100 peer_psn=0x500
send RDMA_READ_REQUEST psn=0x500 va=buf rkey=buf dmalen=2500
expect RDMA_READ_RESPONSE_FIRST psn=0x500 syndrome=ack len=1024 data=mr:buf:0
expect RDMA_READ_RESPONSE_MIDDLE psn=0x501 len=1024 data=mr:buf:1024
expect RDMA_READ_RESPONSE_LAST psn=0x502 syndrome=ack len=452 data=mr:buf:2048
"#,
    ),
    (
        "atomics",
        r#"title "COMPARE_SWAP, then FETCH_ADD"
cite - "9.4.5"
role responder
mr   buf len=4096 access=local_write,remote_atomic fill=0x00
qp   mtu=1024 psn=0x100 peer_psn=0x500
send COMPARE_SWAP psn=0x500 va=buf+8 rkey=buf compare=0 swap=0x1122334455667788
expect ATOMIC_ACKNOWLEDGE psn=0x500 syndrome=ack orig=0
expect memory buf off=8 len=8 data=hex:8877665544332211
send FETCH_ADD psn=0x501 va=buf+8 rkey=buf add=1
expect ATOMIC_ACKNOWLEDGE psn=0x501 syndrome=ack orig=0x1122334455667788
expect memory buf off=8 len=8 data=hex:8977665544332211
"#,
    ),
    (
        "bad-rkey",
        r#"title "A WRITE with a wrong R_Key"
cite C9-88 "9.7.5.2.7"
role responder
mr   buf len=4096 access=local_write,remote_write fill=0x00
qp   mtu=1024 psn=0x100 peer_psn=0x500
send RDMA_WRITE_ONLY psn=0x500 ackreq va=buf rkey=0x1 len=8
expect ACKNOWLEDGE psn=0x500 syndrome=nak:rae
expect state ERR
"#,
    ),
    (
        "requester",
        r#"title "The target's WRITE, SEND with immediate and READ"
cite - "9.7.5.1"
role requester
mr   buf len=4096 access=local_write fill=index
qp   mtu=1024 psn=0x100 peer_psn=0x500
post send wr=2 op=WRITE sge=buf:0:64 va=0x10000 rkey=0x1234
expect RDMA_WRITE_ONLY psn=0x100 va=0x10000 rkey=0x1234 len=64 ackreq
send ACKNOWLEDGE psn=0x100 syndrome=ack msn=1
expect completion wr=2 status=SUCCESS op=RDMA_WRITE len=64
post send wr=3 op=SEND_IMM imm=0xdeadbeef sge=buf:0:8
expect SEND_ONLY_WITH_IMMEDIATE psn=0x101 imm=0xdeadbeef len=8
send ACKNOWLEDGE psn=0x101 syndrome=ack msn=2
expect completion wr=3 status=SUCCESS op=SEND len=8
post send wr=4 op=READ sge=buf:16:4 va=0x20000 rkey=0x77
expect RDMA_READ_REQUEST psn=0x102 va=0x20000 rkey=0x77 dmalen=4
send RDMA_READ_RESPONSE_ONLY psn=0x102 syndrome=ack msn=3 data=hex:a0b1c2d3
expect completion wr=4 status=SUCCESS op=RDMA_READ len=4
expect memory buf off=16 len=4 data=hex:a0b1c2d3
"#,
    ),
];

/// `roce-emu conform` with two columns: roce-emu through the runner's own in-process agent,
/// and roce-emu through this C agent on the drop-in. Both must give the same result for
/// every script: this test's own, and spec/'s.
#[test]
fn the_runner_gets_the_same_matrix_through_the_c_agent() {
    let tag = "conform_agent_runner";
    let Some(a) = Agent::start(tag, "127.0.41.5") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("roce-emu-conform-agent.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in SCRIPTS {
        std::fs::write(dir.join(format!("{name}.rc")), text).unwrap();
    }
    let json = dir.join("matrix.json");
    let mut paths = vec![dir.clone()];
    let spec = repo().join("spec");
    if conform_scripts_in(&spec) {
        paths.push(spec);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_roce-emu"))
        .arg("conform")
        .args(["--emu-ips", "127.0.41.7,127.0.41.8"])
        .args(["--target", "roce-emu"])
        .args(["--target", &format!("c-agent={}:{}", a.ip, a.port)])
        .args(["--peer-ip", "127.0.41.6"])
        .arg("--json")
        .arg(&json)
        .args(&paths)
        .output()
        .unwrap();
    let text = show(&out);
    let rows: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_default())
            .unwrap_or_else(|e| panic!("no matrix ({e}):\n{text}"));
    let _ = std::fs::remove_dir_all(&dir);
    let rows = rows.as_array().expect("rows");
    assert!(rows.len() >= SCRIPTS.len(), "{text}");
    for row in rows {
        let r = row["results"].as_array().expect("results");
        let mark = |i: usize| r[i]["result"].as_str().unwrap_or("?").to_string();
        assert_eq!(
            (r[0]["target"].as_str(), r[1]["target"].as_str()),
            (Some("roce-emu"), Some("c-agent"))
        );
        // spec/cc/: the C agent is rdma-core's (rxe's), whose `port` reply has no
        // congestion counters (rxe has no congestion control), so they are not applicable
        // through it, as on rxe, while they pass through the in-process agent.
        if row["name"].as_str().is_some_and(|n| n.starts_with("cc/")) {
            assert_eq!(
                (mark(0), mark(1)),
                ("pass".into(), "not_applicable".into()),
                "{}\n{text}",
                row["name"]
            );
            continue;
        }
        // cm/ too: the C agent's librdmacm calls reach the drop-in librdmacm.so.1, which
        // `roce-emu run` puts next to libibverbs.so.1.
        assert_eq!(
            mark(0),
            mark(1),
            "{}: the two agents disagree\n{text}",
            row["name"]
        );
        if SCRIPTS.iter().any(|(n, _)| row["name"].as_str() == Some(n)) {
            assert_eq!(mark(1), "pass", "{}\n{text}", row["name"]);
        }
    }
}

/// Whether `dir` (spec/) holds any conformance script (*.rc), at any depth.
fn conform_scripts_in(dir: &std::path::Path) -> bool {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return false;
    };
    rd.flatten().any(|e| {
        let p = e.path();
        if p.is_dir() {
            conform_scripts_in(&p)
        } else {
            p.extension().is_some_and(|x| x == "rc")
        }
    })
}
