//! How the tools behave as programs in a shell: bounded options are clap errors, a closed
//! stdout ends them quietly (`roce-emu demo | head -1`), the demo shows its rows as they
//! finish and stops cleanly on Ctrl-C.
//!
//! Each test uses its own 127.0.0.x addresses, so they run in parallel with the others.

mod common;

use common::proc::{finish, text, BIN};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `-n` beyond the bound is a usage error, before any NIC opens (it used to abort on a
/// 64 GiB allocation).
#[test]
fn demo_iters_is_bounded() {
    for n in ["4294967296", "1000001", "0"] {
        let out = Command::new(BIN)
            .args(["demo", "--a", "127.0.0.71", "--b", "127.0.0.72", "-n", n])
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(
            out.status.code(),
            Some(2),
            "-n {n}: {:?}\n{stdout}\n{stderr}",
            out.status
        );
        assert!(
            stderr.contains("--iters") && stderr.contains("1..=1000000"),
            "-n {n}: {stderr}"
        );
        assert!(!stderr.contains("memory allocation"), "{stderr}");
    }
}

/// Reads the first line of `cmd`'s stdout, closes the pipe, and checks the program ends
/// quietly: status 0 or killed by SIGPIPE, and no panic message.
fn first_line_then_close(mut cmd: Command, who: &str) -> String {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // The reader is dropped here: the pipe has no reader left.
    let out = finish(child, Duration::from_secs(60), who);
    let (_, stderr) = text(&out);
    assert!(
        out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
        "{who} exited {:?} after its reader left\nstderr:\n{stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{who}: {stderr}");
    line
}

#[test]
fn closed_stdout_ends_the_tools_quietly() {
    let mut demo = Command::new(BIN);
    demo.args(["demo", "-n", "2", "--a", "127.0.0.73", "--b", "127.0.0.74"]);
    let line = first_line_then_close(demo, "demo | head -1");
    assert!(line.starts_with("roce-emu demo:"), "{line:?}");

    // A capture whose listing is far larger than a pipe's buffer, so writes meet the
    // closed pipe.
    let frames = common::frames(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/write_bw_s4096.pcap"),
    );
    let big = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli_output_big.pcap");
    {
        let file = std::fs::File::create(&big).unwrap();
        let mut w = pcap_file::pcap::PcapWriter::new(file).unwrap();
        for (i, f) in frames.iter().cycle().take(20_000).enumerate() {
            let p = pcap_file::pcap::PcapPacket::new(
                Duration::from_micros(i as u64),
                f.len() as u32,
                f,
            );
            w.write_packet(&p).unwrap();
        }
    }
    let mut help = Command::new(BIN);
    help.args(["pcap", "--json"]).arg(&big);
    first_line_then_close(help, "pcap | head -1");
}

/// Rows appear as each operation and size finishes, the header first; SIGINT prints what
/// finished and exits 130 (128 + SIGINT), with the partial table and an "interrupted"
/// line.
#[test]
fn demo_shows_progress_and_stops_on_sigint() {
    let mut child = Command::new(BIN)
        .args(["demo", "-n", "30", "--loss", "0.3", "--seed", "3"])
        .args(["--a", "127.0.0.75", "--b", "127.0.0.76"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Wait (bounded) for the header and the first finished row.
    let start = Instant::now();
    let mut seen = Vec::new();
    let limit = Duration::from_secs(60);
    while !seen.iter().any(|l: &String| l.starts_with("SEND ")) {
        let left = limit.saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok(l) => seen.push(l),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "no finished row within {limit:?} (--loss 0.3): the demo shows no progress; \
                     output so far: {seen:#?}"
                );
            }
        }
    }
    let header = seen.iter().position(|l| l.starts_with("operation"));
    let row = seen.iter().position(|l| l.starts_with("SEND "));
    assert!(header < row && header.is_some(), "{seen:#?}");
    let at_sigint = start.elapsed();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = finish(child, Duration::from_secs(30), "demo after SIGINT");
    reader.join().unwrap();
    seen.extend(rx.try_iter());
    let all = seen.join("\n");
    let (_, stderr) = text(&out);
    eprintln!("{all}\n{stderr}\n(SIGINT after {at_sigint:?})");
    assert_eq!(out.status.code(), Some(130), "{:?}: {stderr}", out.status);
    assert!(all.contains("interrupted"), "{all}");
    assert!(!all.contains("PASS"), "{all}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
