//! The conformance runner against roce-emu in this process: every script in spec/ passes,
//! and the runner fails what it should (a wrong expectation, a script error, a silent
//! target), so a pass means something.

mod common;

use roce_emu::conform::{self, Outcome, Target, TargetSpec};
use std::path::PathBuf;

fn spec_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("spec")
}

fn target(last: u8) -> Target {
    Target::open(&TargetSpec::Emu {
        ip: [127, 0, 78, last].into(),
        peer_ip: [127, 0, 78, last + 1].into(),
        daemon: None,
    })
    .expect("in-process target")
}

fn play_all(t: &mut Target) {
    let scripts = conform::load(&[spec_dir()]).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    assert!(!scripts.is_empty(), "no scripts in spec/");
    let mut bad = Vec::new();
    for (n, s) in scripts.iter().enumerate() {
        let o = t.play(s, n, 1.0);
        if o != Outcome::Pass && !matches!(o, Outcome::NotApplicable { .. }) {
            bad.push(format!("{}: {o:?}", s.name));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} scripts did not pass on {}:\n{}",
        bad.len(),
        scripts.len(),
        t.label,
        bad.join("\n")
    );
}

fn script(text: &str) -> conform::Script {
    conform::parse("inline", "inline", text).expect("script parses")
}

#[test]
fn every_spec_script_passes_on_roce_emu() {
    play_all(&mut target(1));
}

/// The same through a `roce-emu daemon`'s UDP port: the peer's packets cross the daemon's
/// routing by DestQP to the agent's process, and its answers leave from the daemon's port.
#[test]
fn every_spec_script_passes_through_a_daemon() {
    let d = common::daemon::Daemon::start(None, "udp:127.0.78.20", "conform", &[]);
    let mut t = Target::open(&TargetSpec::Emu {
        ip: [127, 0, 78, 20].into(),
        peer_ip: [127, 0, 78, 21].into(),
        daemon: Some(d.socket.clone()),
    })
    .expect("target attached to the daemon");
    play_all(&mut t);
    // Every packet the scripts' peer sent crossed the daemon, and the target's answers
    // left through it.
    let sends: usize = conform::load(&[spec_dir()])
        .unwrap()
        .iter()
        .map(|s| {
            s.steps
                .iter()
                .filter(|st| matches!(st.action, conform::script::Action::Send(_)))
                .count()
        })
        .sum();
    let c = d.counters();
    let n = |k: &str| {
        c["counters"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("no {k} in {c}"))
    };
    assert!(
        n("rcvd_pkts") >= sends as u64,
        "the daemon received {} packets for {sends} sent: {c}",
        n("rcvd_pkts")
    );
    assert!(n("sent_pkts") > 0, "{c}");
    // The CM scripts' MADs crossed the daemon's QP1 (the agent is a CM client of its CM).
    let mads: usize = conform::load(&[spec_dir()])
        .unwrap()
        .iter()
        .map(|s| {
            s.steps
                .iter()
                .filter(|st| matches!(st.action, conform::script::Action::SendMad(_)))
                .count()
        })
        .sum();
    let qp1 = |k: &str| c["qp1"][k].as_u64().unwrap_or(0);
    assert!(
        mads > 0 && qp1("rcvd_pkts") >= mads as u64 && qp1("sent_pkts") > 0,
        "{mads} MADs sent, the daemon's QP1: {c}"
    );
}

const HEAD: &str = "title \"t\"\ncite C9-104 \"9.7.5.1.1\"\nrole responder\n";

#[test]
fn a_wrong_expectation_fails_with_the_packet_that_came() {
    let s = script(&format!(
        "{HEAD}mr buf len=4096 access=local_write\nqp peer_psn=10\npost recv wr=1 sge=buf:0:64\n\
         send SEND_ONLY psn=10 ackreq len=8\nexpect ACKNOWLEDGE psn=11 syndrome=ack\n"
    ));
    let mut t = target(3);
    match t.play(&s, 0, 1.0) {
        Outcome::Fail { line, why, got, .. } => {
            assert_eq!(line, 8);
            assert!(why.contains("psn: expected 0xb, got 0xa"), "{why}");
            assert_eq!(got.len(), 1);
            assert!(got[0].contains("RC_ACKNOWLEDGE"), "{got:?}");
        }
        o => panic!("expected a failure, got {o:?}"),
    }
}

/// `roce-emu conform` draws the exchange of a failing script as a ladder on stderr (the
/// scripted peer's SEND and the ACK that came instead of the one expected), and `--html`
/// writes the whole run as one page, a part per script and target.
#[test]
fn a_failing_script_is_drawn_as_a_ladder_and_the_run_as_a_page() {
    let dir = std::env::temp_dir().join(format!("roce-emu-conform-ladder-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("wrong_psn.rc");
    std::fs::write(
        &script,
        format!(
            "{HEAD}mr buf len=4096 access=local_write\nqp peer_psn=10\npost recv wr=1 sge=buf:0:64\n\
             send SEND_ONLY psn=10 ackreq len=8\nexpect ACKNOWLEDGE psn=11 syndrome=ack\n"
        ),
    )
    .unwrap();
    let page = dir.join("run.html");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_roce-emu"))
        .args(["conform", "--emu-ips", "127.0.78.60,127.0.78.61", "--html"])
        .arg(&page)
        .arg(&script)
        .output()
        .unwrap();
    let (stdout, stderr) = common::proc::text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("the exchange with roce-emu"), "{stderr}");
    let ladder = &stderr[stderr.find("the exchange with").unwrap()..];
    assert!(ladder.contains("SEND_ONLY psn=10 A len=8"), "{ladder}");
    assert!(ladder.contains("ACK psn=10"), "{ladder}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("<h2 class=\"part\">wrong_psn on roce-emu: FAIL</h2>"),
        "{html}"
    );
    assert_eq!(
        html.matches("class=\"pkt").count(),
        2,
        "one arrow per packet"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn silence_and_missing_completions_are_checked() {
    // No receive posted: the SEND is answered (RNR NAK), so silence fails; with the
    // right expectation there is no completion, and expecting one fails.
    let s = script(&format!(
        "{HEAD}qp peer_psn=0\nsend SEND_ONLY psn=0 len=4\nexpect silence within=200\n"
    ));
    let mut t = target(5);
    assert!(matches!(t.play(&s, 0, 1.0), Outcome::Fail { .. }));
    let s = script(&format!(
        "{HEAD}qp peer_psn=0 min_rnr_timer=3\nsend SEND_ONLY psn=0 len=4\nexpect ACKNOWLEDGE psn=0 syndrome=rnr:3\n\
         expect completion within=100\n"
    ));
    match t.play(&s, 1, 1.0) {
        Outcome::Fail { why, .. } => assert!(why.contains("no completion"), "{why}"),
        o => panic!("expected a failure, got {o:?}"),
    }
}

/// `expect nothing` fails on a packet and on a completion; `expect no_event` on an event.
#[test]
fn nothing_and_no_event_are_checked() {
    let mut t = target(9);
    // An ACK comes (a packet), and a completion.
    let s = script(&format!(
        "{HEAD}mr buf len=64 access=local_write\nqp peer_psn=0\npost recv wr=1 sge=buf:0:64\n\
         send SEND_ONLY psn=0 ackreq len=4\nexpect nothing within=200\n"
    ));
    match t.play(&s, 0, 1.0) {
        Outcome::Fail { why, .. } => assert!(why.contains("a packet arrived"), "{why}"),
        o => panic!("expected a failure, got {o:?}"),
    }
    // Only a completion (the ACK taken first).
    let s = script(&format!(
        "{HEAD}mr buf len=64 access=local_write\nqp peer_psn=0\npost recv wr=1 sge=buf:0:64\n\
         send SEND_ONLY psn=0 ackreq len=4\nexpect ACKNOWLEDGE psn=0\nexpect nothing within=200\n"
    ));
    match t.play(&s, 1, 1.0) {
        Outcome::Fail { why, .. } => assert!(why.contains("a completion arrived"), "{why}"),
        o => panic!("expected a failure, got {o:?}"),
    }
    // An R_Key violation raises QP_ACCESS_ERR on roce-emu (spec/events/).
    let s = script(&format!(
        "{HEAD}mr buf len=64 access=local_write,remote_write\nqp peer_psn=0x30\n\
         send RDMA_WRITE_ONLY psn=0x30 ackreq va=buf rkey=0xdead0001 len=8\n\
         expect ACKNOWLEDGE psn=0x30 syndrome=nak:rae\nexpect no_event within=500\n"
    ));
    match t.play(&s, 2, 1.0) {
        Outcome::Fail { why, .. } => assert!(why.contains("QP_ACCESS_ERR"), "{why}"),
        o => panic!("expected a failure, got {o:?}"),
    }
}

#[test]
fn a_bad_icrc_is_dropped_then_the_good_packet_is_taken() {
    let s = script(&format!(
        "{HEAD}mr buf len=64 access=local_write\nqp peer_psn=0x20\npost recv wr=9 sge=buf:0:64\n\
         send SEND_ONLY psn=0x20 ackreq len=16 fill=0x55 icrc=bad\nexpect silence within=200\n\
         send SEND_ONLY psn=0x20 ackreq len=16 fill=0x55\nexpect ACKNOWLEDGE psn=0x20 syndrome=ack\n\
         expect completion wr=9 status=SUCCESS op=RECV len=16\nexpect memory buf len=16 fill=0x55\n"
    ));
    assert_eq!(target(7).play(&s, 0, 1.0), Outcome::Pass);
}

#[test]
fn script_errors_name_the_line_and_the_fix() {
    let cases = [
        ("send SEND_ONLY len=4\n", "send needs psn="),
        ("send SENDONLY psn=1\n", "not an RC opcode name"),
        ("send SEND_ONLY psn=1 colour=red\n", "unknown key colour="),
        (
            "send SEND_ONLY psn=0x1000000\n",
            "psn=0x1000000: at most 0xffffff",
        ),
        (
            "expect completion status=GREAT\n",
            "status=GREAT: one of SUCCESS",
        ),
        ("mr buf access=remote_write\n", "mr needs len="),
        (
            "mr buf len=8 access=remote_flying\n",
            "\"remote_flying\" is not one of",
        ),
        (
            "send ACKNOWLEDGE psn=1 syndrome=nak:huh\n",
            "syndrome=nak:huh",
        ),
        (
            "send SEND_ONLY psn=1 len=4 data=hex:00\n",
            "len= differs from data=",
        ),
        (
            "send SEND_ONLY psn=1 len=4 fill=1 data=hex:00\n",
            "fill= and data= together",
        ),
        ("frobnicate\n", "unknown statement \"frobnicate\""),
        ("qp type=xrc\n", "type=xrc: one of rc uc ud"),
        ("srq limit=2\n", "srq needs depth="),
        (
            "send UD_SEND_ONLY psn=0 to=9\n",
            "to=9: only on send, 1 to 4",
        ),
        (
            "send UC_SEND_EVERYTHING psn=0\n",
            "not a UC or UD opcode name",
        ),
        (
            "expect completion src_qp=someone\n",
            "a QPN (24 bits), peer, or target",
        ),
        (
            "expect counter qkey_viol=1\n",
            "+N, the growth since the qp line",
        ),
        (
            "expect counter rnr=+1\n",
            "expect counter needs one of qkey_viol=",
        ),
        ("modify srq\n", "modify srq needs limit="),
        ("title \"unterminated\n", "unterminated quote"),
    ];
    for (line, want) in cases {
        let text = format!("{HEAD}qp\n{line}");
        let e = conform::parse("f.rc", "f", &text).expect_err(line);
        assert_eq!(e.line, 5, "{line}: {e}");
        assert!(e.to_string().contains(want), "{line}: {e} lacks {want:?}");
    }
    let e = conform::parse("f.rc", "f", "title \"t\"\nrole responder\nqp\n").unwrap_err();
    assert!(e.what.contains("no cite line"), "{e}");
}

/// `roce-emu conform` says each script's result on stderr as it finishes (name, role,
/// result and time per target), in order, before the matrix on stdout.
#[test]
fn conform_prints_a_line_per_script() {
    let dir = spec_dir().join("access");
    let scripts = conform::load(std::slice::from_ref(&dir)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_roce-emu"))
        .args(["conform", "--emu-ips", "127.0.78.40,127.0.78.41"])
        .arg(&dir)
        .output()
        .unwrap();
    let (stdout, stderr) = common::proc::text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(lines.len(), scripts.len(), "{stderr}");
    let total = scripts.len();
    for (k, (l, s)) in lines.iter().zip(&scripts).enumerate() {
        let role = format!("{:?}", s.role).to_lowercase();
        let head = format!(
            "[{:>w$}/{total}] {} ({role}): roce-emu ",
            k + 1,
            s.name,
            w = total.to_string().len()
        );
        assert!(l.starts_with(&head), "{l}\nwant {head}");
        assert!(l.ends_with(" s"), "{l}");
    }
    // The matrix is still on stdout, unchanged in form.
    assert!(stdout.starts_with("script"), "{stdout}");
}

/// A daemon started on demand (by a tool or program run just before) holds the peer's
/// address for its idle time: `roce-emu conform` says so and waits for it to leave
/// instead of failing (the lab's conformance run once followed a tool's run by 0.8 s).
#[test]
fn conform_waits_for_an_on_demand_daemon_to_leave() {
    use roce_emu::daemon::demand::{self, Settings};
    use std::time::{Duration, Instant};
    let run = std::env::temp_dir().join(format!("roce-emu-conform-wait-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&run);
    let s = Settings {
        idle: Duration::from_millis(1500),
        quarantine: Duration::from_millis(100),
        bin: None,
        dir: Some(run.join("roce-emu")),
    };
    let socket = demand::ensure_udp_with([127, 0, 78, 51].into(), &s).expect("daemon starts");
    let start = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_roce-emu"))
        .args(["conform", "--emu-ips", "127.0.78.50,127.0.78.51"])
        .arg(spec_dir().join("access"))
        // The folder where the runner looks for daemons' sockets.
        .env("XDG_RUNTIME_DIR", &run)
        .output()
        .unwrap();
    let (stdout, stderr) = common::proc::text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let said = format!(
        "a roce-emu daemon holds 127.0.78.51:4791: attach with --daemon {}",
        socket.display()
    );
    assert!(stderr.contains(&said), "{stderr}");
    assert!(stderr.contains("waiting up to"), "{stderr}");
    assert!(!socket.exists(), "the daemon left");
    assert!(start.elapsed() < Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&run);
}

const CM_HEAD: &str = "title \"t\"\ncite - \"12.6.7\"\nrole cm_passive\n";

/// A CM script's `expect mad` checks the fields it names: a REQ nobody listens for is
/// rejected with reason 8, so an expectation of 28 fails, naming the field and the MAD.
#[test]
fn a_cm_expectation_fails_with_the_mad_that_came() {
    let s = script(&format!(
        "{CM_HEAD}send mad REQ port=7399\nexpect mad REJ reason=28 remote_comm_id=ours within=3000\n"
    ));
    let mut t = target(11);
    match t.play(&s, 0, 1.0) {
        Outcome::Fail { line, why, got, .. } => {
            assert_eq!(line, 5);
            assert!(why.contains("reason: expected 0x1c, got 0x8"), "{why}");
            assert!(got[0].contains("REJ"), "{got:?}");
        }
        o => panic!("expected a failure, got {o:?}"),
    }
    // The right one passes, and the program saw nothing.
    let s = script(&format!(
        "{CM_HEAD}send mad REQ port=7399\nexpect mad REJ reason=8 remote_comm_id=ours tid=sent within=3000\n\
         expect no_cm_event within=100\n"
    ));
    assert_eq!(t.play(&s, 1, 1.0), Outcome::Pass);
    // A CONNECT_REQUEST expected where none comes fails.
    let s = script(&format!(
        "{CM_HEAD}listen port=7398\nexpect cm_event CONNECT_REQUEST within=200\n"
    ));
    match t.play(&s, 2, 1.0) {
        Outcome::Fail { why, .. } => assert!(why.contains("no rdma_cm event"), "{why}"),
        o => panic!("expected a failure, got {o:?}"),
    }
}

#[test]
fn cm_statement_errors_name_the_fix() {
    let cases = [
        ("send mad REQ colour=1\n", "colour= is not a field of REQ"),
        ("send mad HELLO\n", "mad needs a message: REQ MRA"),
        ("expect mad REP\n", ""),
        ("expect cm_event PARTY\n", "expect cm_event needs one of"),
        ("listen ps=tcp\n", "listen needs port="),
        ("listen port=1 ps=sctp\n", "ps=sctp: one of tcp udp"),
        ("accept now\n", "unexpected \"now\""),
    ];
    for (line, want) in cases {
        let text = format!("{CM_HEAD}{line}");
        match conform::parse("f.rc", "f", &text) {
            Ok(_) => assert!(want.is_empty(), "{line} parsed"),
            Err(e) => {
                assert_eq!(e.line, 4, "{line}: {e}");
                assert!(
                    !want.is_empty() && e.to_string().contains(want),
                    "{line}: {e} lacks {want:?}"
                );
            }
        }
    }
}
