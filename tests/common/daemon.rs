//! `roce-emu daemon` as a child process of a test (in the test's namespace or not), with
//! its counters over the control socket; stopped by SIGTERM (by PID) when dropped, killed
//! if it does not stop within 5 s.

use super::netns::Netns;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_roce-emu");

pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
}

impl Daemon {
    /// `roce-emu daemon --port PORT EXTRA...`, in `ns` if given; waits (bounded) for its
    /// socket.
    pub fn start(ns: Option<&Netns>, port: &str, tag: &str, extra: &[&str]) -> Daemon {
        let socket =
            std::env::temp_dir().join(format!("roce-emu-{tag}-{}.sock", std::process::id()));
        let mut cmd = match ns {
            Some(ns) => ns.cmd(BIN),
            None => Command::new(BIN),
        };
        let child = cmd
            .args(["daemon", "--port", port, "--socket"])
            .arg(&socket)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        wait_for_socket(&socket, tag);
        Daemon { child, socket }
    }

    /// `roce-emu counters --json`.
    pub fn counters(&self) -> serde_json::Value {
        let out = Command::new(BIN)
            .args(["counters", "--json", "--daemon"])
            .arg(&self.socket)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// `roce-emu fault --daemon SOCKET RULE...`, which must be taken.
    pub fn fault(&self, rule: &[&str]) {
        let out = Command::new(BIN)
            .args(["fault", "--daemon"])
            .arg(&self.socket)
            .args(rule)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Resident memory (kB) of the daemon process.
    pub fn rss_kb(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `roce-emu TOOL ARGS --daemon SOCKET` in the namespace, attached to `d`, both outputs
/// piped.
pub fn tool_in(ns: &Netns, d: &Daemon, args: &[&str]) -> Child {
    ns.cmd(BIN)
        .args(args)
        .arg("--daemon")
        .arg(&d.socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (at most `secs`) for a tool that must succeed; its stdout.
pub fn finish_ok_within(secs: u64, c: Child, who: &str) -> String {
    let o = super::proc::finish(c, Duration::from_secs(secs), who);
    let (out, err) = super::proc::text(&o);
    assert!(o.status.success(), "{who}: {}\n{out}\n{err}", o.status);
    out
}

/// Waits (at most 10 s) for a starting daemon's control socket.
pub fn wait_for_socket(socket: &std::path::Path, tag: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "daemon {tag} never made its socket"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
