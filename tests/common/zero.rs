//! Debian's programs with zero configuration: `roce-emu run -- PROGRAM` (no `--devices`,
//! no ROCE_EMU_DEVICES) in a network namespace of the test's own, where the machine is
//! `lo` alone and the device rxe_lo on 127.0.0.1; the first verbs or rdma_cm call starts
//! the on-demand daemon of udp:127.0.0.1 (`daemon::demand`). Root only (a loud skip
//! otherwise).

use super::daemon::BIN;
use super::dropin::{self, Env};
use super::netns::Netns;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub struct Zero {
    pub env: &'static Env,
    pub ns: Netns,
}

impl Zero {
    /// The drop-in, the Debian tree and a fresh namespace; `None` after a loud skip.
    pub fn new(test: &str, prefix: &str) -> Option<Zero> {
        if !nix::unistd::geteuid().is_root() {
            super::netns::skip(test, "needs root for a network namespace");
            return None;
        }
        let env = dropin::setup(test)?;
        Some(Zero {
            env,
            ns: Netns::new(prefix),
        })
    }

    /// `roce-emu run -- PROGRAM ARGS` in the namespace, Debian's libraries after ours.
    pub fn run(&self, program: &str, args: &[&str]) -> Command {
        self.run_under(None, program, args)
    }

    /// [`Zero::run`] with `wrapper PROGRAM ARGS` (tools/dropin/devnodes.sh for UCX).
    pub fn run_under(&self, wrapper: Option<&Path>, program: &str, args: &[&str]) -> Command {
        let mut c = self.ns.cmd(BIN);
        c.arg("run").arg("--");
        if let Some(w) = wrapper {
            c.arg(w);
        }
        c.arg(self.env.bin(program))
            .args(args)
            .env("LD_LIBRARY_PATH", &self.env.tree_libs)
            .env_remove("ROCE_EMU_DEVICES")
            // One daemon for the whole test (its counters are read between programs):
            // it stays 10 s after its last client (default 2 s), then goes.
            .env("ROCE_EMU_DAEMON_IDLE", "10")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// The on-demand daemon's socket: `udp-127.0.0.1-netns-INODE.sock` when another
    /// namespace's daemon held the plain name (`daemon::demand`), else the plain one.
    pub fn socket(&self) -> Option<PathBuf> {
        let out = self
            .ns
            .cmd("stat")
            .args(["-L", "-c", "%i", "/proc/self/ns/net"])
            .output()
            .ok()?;
        let inode = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let dir = std::env::var_os("XDG_RUNTIME_DIR")
            .map_or_else(|| PathBuf::from("/run"), PathBuf::from)
            .join("roce-emu");
        let tagged = dir.join(format!("udp-127.0.0.1-netns-{inode}.sock"));
        let plain = dir.join("udp-127.0.0.1.sock");
        // A stale socket (a namespace gone, its inode reused) answers nothing: the one
        // that answers.
        [tagged, plain].into_iter().find(|p| answers(p))
    }

    /// `roce-emu counters --json` of the namespace's on-demand daemon (Null if none).
    pub fn counters(&self) -> Value {
        let Some(sock) = self.socket() else {
            return Value::Null;
        };
        let out = self
            .ns
            .cmd(BIN)
            .args(["counters", "--json", "--daemon"])
            .arg(&sock)
            .output()
            .expect("roce-emu counters");
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    }

    /// The daemon's CM id count (`cm_clients.ids`), 0 without a daemon.
    pub fn ids(&self) -> u64 {
        self.counters()["cm_clients"]["ids"].as_u64().unwrap_or(0)
    }

    /// Waits (bounded) until the CM holds at least `n` ids (a server bound and listening),
    /// then a little more for its listen to follow its bind.
    pub fn wait_ids(&self, n: u64, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.ids() >= n {
                std::thread::sleep(Duration::from_millis(300));
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

/// Something listens on the daemon socket `p` (a SOCK_SEQPACKET socket).
fn answers(p: &std::path::Path) -> bool {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let Ok(addr) = UnixAddr::new(p) else {
        return false;
    };
    let Ok(fd) = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    ) else {
        return false;
    };
    use std::os::fd::AsRawFd;
    connect(fd.as_raw_fd(), &addr).is_ok()
}
