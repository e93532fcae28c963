//! `roce-emu ladder --live`: a capture drawn as it grows (a file still being written, or
//! standard input), each row as soon as it is complete. The rows equal the finished
//! drawing's; only the flow's header may name a QP as `?` (its QPN is on the wire only in
//! packets *to* it, which may come later).

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_roce-emu");

fn capture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// The finished drawing of `name`, at 100 columns.
fn whole(name: &str) -> String {
    let out = Command::new(BIN)
        .args(["ladder", "--width", "100"])
        .arg(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR")))
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// The drawing's rows: every line but a flow's header (its title and column lines).
fn rows(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with("══") && !l.contains("time   frame"))
        .collect()
}

/// A capture written in two halves: the first half's complete rows are drawn before the
/// second half exists, the rest after; together, the finished drawing's rows.
#[test]
fn a_growing_file_is_drawn_as_it_grows() {
    let name = "rc_pingpong_loss_seqnak.pcap";
    let bytes = capture(name);
    let dir = std::env::temp_dir().join(format!("roce-emu-ladder-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("growing.pcap");
    let half = bytes.len() / 2;
    std::fs::write(&path, &bytes[..half]).unwrap();
    let mut child = Command::new(BIN)
        .args(["ladder", "--live", "--idle-exit", "1.5", "--width", "100"])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The drawing's lines as they come.
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    // Rows of the first half, drawn while the second does not exist yet.
    let mut lines = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while rows(&lines.join("\n")).len() < 10 && Instant::now() < until {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
            lines.push(l);
        }
    }
    let early = rows(&lines.join("\n")).len();
    assert!(early >= 10, "only {early} rows drawn from the first half");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(&bytes[half..]).unwrap();
    drop(f);
    let start = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "--idle-exit did not end it"
    );
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    let stdout = lines.join("\n") + "\n";
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let want = whole(name);
    assert_eq!(
        rows(&stdout),
        rows(&want),
        "live:\n{stdout}\nwhole:\n{want}"
    );
    assert!(rows(&want).len() > 30, "{want}");
    assert!(
        stderr.contains("51 frames, 40 RoCEv2 packets in 1 flows"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Standard input, in small pieces (as `tcpdump -U -w -` writes): the same rows; the
/// drawing ends with the input.
#[test]
fn standard_input_is_drawn_as_it_comes() {
    let name = "send_bw_rnr.pcap";
    let bytes = capture(name);
    let mut child = Command::new(BIN)
        .args(["ladder", "--live", "-", "--width", "100"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for piece in bytes.chunks(700) {
        stdin.write_all(piece).unwrap();
        stdin.flush().unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = common::proc::text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let want = whole(name);
    assert_eq!(
        rows(&stdout),
        rows(&want),
        "live:\n{stdout}\nwhole:\n{want}"
    );
    assert!(stdout.contains("RNR wait"), "{stdout}");
}

/// What --live cannot do is a clear error, exit 2.
#[test]
fn live_refuses_the_whole_capture_options() {
    let out = Command::new(BIN)
        .args(["ladder", "--live", "-", "--psn", "1-2"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (_, stderr) = common::proc::text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--live draws rows as they come"),
        "{stderr}"
    );
    let out = Command::new(BIN)
        .args(["ladder", "-", "--idle-exit", "1"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Attached to a daemon: its `--pcap` file followed while a ping-pong crosses it. The
/// daemon writes its capture out as it goes idle, so every packet is drawn while the
/// daemon still runs (before, the last ones waited in its buffer for the next burst).
/// Address 127.0.79.1, TCP port 18992.
#[test]
fn a_daemons_capture_is_drawn_while_it_runs() {
    use common::daemon::Daemon;
    use common::proc::{finish, spawn, strings};
    let dir = std::env::temp_dir().join(format!("roce-emu-ladder-daemon-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("port.pcapng");
    let d = Daemon::start(
        None,
        "udp:127.0.79.1",
        "ladder-live",
        &["--pcap", pcap.to_str().unwrap()],
    );
    let ladder = Command::new(BIN)
        .args(["ladder", "--live", "--idle-exit", "2", "--width", "100"])
        .arg(&pcap)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pp = |server: bool| {
        let mut a = strings(&["-p", "18992", "--bind", "127.0.79.1", "-n", "3", "-s", "64"]);
        a.extend(["--daemon".to_string(), d.socket.display().to_string()]);
        if !server {
            a.push("127.0.79.1".to_string());
        }
        spawn("pingpong", &a)
    };
    let s = pp(true);
    std::thread::sleep(Duration::from_millis(500));
    let c = pp(false);
    assert!(finish(c, Duration::from_secs(20), "pingpong client")
        .status
        .success());
    assert!(finish(s, Duration::from_secs(20), "pingpong server")
        .status
        .success());
    // The daemon still runs: the ladder must have had every packet from the file.
    let out = finish(ladder, Duration::from_secs(30), "ladder --live");
    let (stdout, stderr) = common::proc::text(&out);
    assert!(out.status.success(), "{stderr}");
    let sends = stdout.matches("SEND_ONLY").count();
    let acks = stdout.matches("ACK psn=").count();
    assert_eq!(
        (sends, acks),
        (6, 6),
        "three round trips, each SEND acknowledged:\n{stdout}"
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}
