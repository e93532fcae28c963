//! Unmodified Debian 12 programs (ibverbs-utils, perftest, pyverbs) run on the drop-in
//! libibverbs.so.1: the library is built by tools/dropin/build.sh, the programs are fetched
//! by tools/dropin/debian.sh into a cache (never installed).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The drop-in (debug build, linked once per test binary) and the Debian tree; `None`
/// (after a loud skip, or a failure under CI) when the packages cannot be fetched.
pub fn setup(test: &str) -> Option<&'static Env> {
    static ENV: OnceLock<Result<Env, String>> = OnceLock::new();
    let env = ENV.get_or_init(|| {
        let build = Command::new(repo().join("tools/dropin/build.sh"))
            .arg("--debug")
            .output()
            .map_err(|e| format!("tools/dropin/build.sh: {e}"))?;
        if !build.status.success() {
            panic!(
                "tools/dropin/build.sh failed:\n{}",
                String::from_utf8_lossy(&build.stderr)
            );
        }
        let deb = Command::new(repo().join("tools/dropin/debian.sh"))
            .output()
            .map_err(|e| format!("tools/dropin/debian.sh: {e}"))?;
        if !deb.status.success() {
            return Err(format!(
                "Debian 12's RDMA packages could not be fetched (apt-get download): {}",
                String::from_utf8_lossy(&deb.stderr).trim()
            ));
        }
        let cache = PathBuf::from(String::from_utf8_lossy(&deb.stdout).trim());
        // debian.sh lists the tree's library folders (lib/ and usr/lib/ ...): one source
        // of that path for the scripts and the tests.
        let libs = std::fs::read_to_string(cache.join("libpath"))
            .map_err(|e| format!("{}: {e}", cache.join("libpath").display()))?;
        Ok(Env {
            lib: repo().join("target/debug/dropin"),
            root: cache.join("tree"),
            tree_libs: libs.trim().to_string(),
        })
    });
    match env {
        Ok(e) => Some(e),
        Err(why) => {
            super::netns::skip(test, why);
            None
        }
    }
}

pub struct Env {
    /// The folder of our libibverbs.so.1.
    pub lib: PathBuf,
    /// The unpacked Debian packages.
    pub root: PathBuf,
    /// Every library folder of `root` (colon-separated), as tools/dropin/debian.sh lists
    /// them in its cache's `libpath`.
    pub tree_libs: String,
}

impl Env {
    pub fn bin(&self, name: &str) -> PathBuf {
        self.root.join("usr/bin").join(name)
    }

    /// Our library first, then every library folder of the tree: Debian's other
    /// libraries (libmlx5, libefa, librdmacm, libibumad, libpci) that perftest links, and
    /// theirs (libnl-3, under lib/).
    pub fn library_path(&self) -> String {
        format!("{}:{}", self.lib.display(), self.tree_libs)
    }

    /// `program ARGS` with the drop-in active and `devices` as its device list.
    pub fn cmd(&self, program: &str, devices: &str, args: &[&str]) -> Command {
        let mut c = Command::new(self.bin(program));
        c.args(args)
            .env("LD_LIBRARY_PATH", self.library_path())
            .env("ROCE_EMU_DEVICES", devices)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
}

/// Waits until something listens on TCP `port` (from /proc/net/tcp and tcp6), at most
/// `limit`: a probe connection would be taken by the server as its client.
pub fn wait_listening(port: u16, limit: Duration) -> bool {
    wait_listening_in(None, port, limit)
}

/// [`wait_listening`] in the network namespace of process `pid` (its /proc/PID/net view).
pub fn wait_listening_in(pid: Option<u32>, port: u16, limit: Duration) -> bool {
    let base = pid.map_or("/proc".to_string(), |p| format!("/proc/{p}"));
    let deadline = Instant::now() + limit;
    let needle = format!(":{port:04X} ");
    while Instant::now() < deadline {
        for f in ["net/tcp", "net/tcp6"] {
            let text = std::fs::read_to_string(format!("{base}/{f}")).unwrap_or_default();
            // Column 2 is local_address (ADDR:PORT), column 4 the state (0A: LISTEN).
            if text.lines().any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3
                    && format!("{} ", &cols[1][cols[1].len() - 5..]) == needle
                    && cols[3] == "0A"
            }) {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Waits for `child` at most `limit` (killed and reported if still running).
pub fn finish(child: Child, limit: Duration, who: &str) -> Output {
    super::proc::finish(child, limit, who)
}

/// Runs a server and then its client (once the server listens on `tcp_port`); both
/// outputs, after checking both exited 0.
pub fn pair(
    server: &mut Command,
    client: &mut Command,
    tcp_port: u16,
    limit: Duration,
    what: &str,
) -> (Output, Output) {
    let (sout, cout) = run_pair(server, client, tcp_port, limit, what);
    assert!(
        cout.status.success() && sout.status.success(),
        "{what}\n--- server: {}\n--- client: {}",
        show(&sout),
        show(&cout)
    );
    (sout, cout)
}

/// [`pair`] without the check: the server's and the client's outputs, whatever their
/// status.
pub fn run_pair(
    server: &mut Command,
    client: &mut Command,
    tcp_port: u16,
    limit: Duration,
    what: &str,
) -> (Output, Output) {
    let s = server
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: server: {e}"));
    if !wait_listening(tcp_port, Duration::from_secs(20)) {
        let out = finish(s, Duration::from_secs(1), what);
        panic!(
            "{what}: the server never listened on {tcp_port}: {}",
            show(&out)
        );
    }
    let c = client
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: client: {e}"));
    let cout = finish(c, limit, &format!("{what} client"));
    let sout = finish(s, limit, &format!("{what} server"));
    (sout, cout)
}

/// Exit status and both outputs, for failure messages.
pub fn show(o: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// One of Debian's pingpongs with zero set-up: no ROCE_EMU_DEVICES, in a network namespace
/// of its own (named `ns`), where the machine is `lo` alone and the device rxe_lo on
/// 127.0.0.1. Server, then client, 100 iterations with `-g 1` and the program's default TCP
/// port; both must report them. Root only (a loud skip otherwise).
pub fn pingpong_with_zero_set_up(tag: &str, ns: &str, program: &str, limit: Duration) {
    if !nix::unistd::geteuid().is_root() {
        super::netns::skip(tag, "needs root for a network namespace");
        return;
    }
    let Some(env) = setup(tag) else {
        return;
    };
    let ns = super::netns::Netns::new(ns);
    let run = |args: &[&str]| {
        let mut c = ns.cmd(env.bin(program).to_str().unwrap());
        c.args(args)
            .env("LD_LIBRARY_PATH", env.library_path())
            .env_remove("ROCE_EMU_DEVICES")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let server = run(&["-g", "1", "-n", "100"]).spawn().unwrap();
    // The pingpongs' default TCP port, in the namespace's table (the server's view).
    assert!(
        wait_listening_in(Some(server.id()), 18515, Duration::from_secs(20)),
        "{tag}: the server never listened"
    );
    let client = run(&["-g", "1", "-n", "100", "127.0.0.1"]).spawn().unwrap();
    let c = finish(client, limit, &format!("{tag} client"));
    let s = finish(server, limit, &format!("{tag} server"));
    assert!(
        c.status.success() && s.status.success(),
        "{}\n{}",
        show(&s),
        show(&c)
    );
    assert!(stdout(&c).contains("100 iters in"), "{}", show(&c));
    assert!(stdout(&s).contains("100 iters in"), "{}", show(&s));
}
