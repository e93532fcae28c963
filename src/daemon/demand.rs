//! The daemon started on demand: a program that finds no daemon for its UDP address starts
//! one (design wave3.md §1: the daemon is the only owner of a port).
//!
//! [`ensure_udp`] finds the daemon of `udp:IP` at its default socket
//! (`backend::daemon_path::udp_socket`: `$XDG_RUNTIME_DIR/roce-emu/udp-IP.sock`, or
//! `/run/roce-emu/` as root) or starts one and waits for it to answer:
//!
//! - **network namespaces**: `127.0.0.1` in a namespace is another port than the
//!   machine's, but the socket folder is one file system for both. A daemon whose network
//!   namespace (`/proc/PID/ns/net` of the peer, `SO_PEERCRED`) is not ours is not ours:
//!   we then use `udp-IP-netns-INODE.sock` beside it.
//!
//! - **which binary**: this code is a library inside someone else's program (`rping` with
//!   the drop-in), so the current executable is not roce-emu. In order:
//!   `ROCE_EMU_BIN` (`roce-emu run` and `roce-emu env` set it to themselves); then a
//!   `roce-emu` beside the object this code runs from (found in `/proc/self/maps`: the
//!   drop-in's `libibverbs.so.1`, a test binary, or roce-emu itself), in its folder, the
//!   folder above (the build tree: `target/debug/dropin/..`, `target/debug/deps/..`) and
//!   `../../bin` (an install: `PREFIX/lib/roce-emu/../../bin`); then `PATH`. Always an
//!   exec: a library never forks without one.
//! - **detached**: `roce-emu daemon --port udp:IP --socket S --idle-exit I --quarantine Q`
//!   in a session of its own (`setsid`: the program's ^C and its terminal's hang-up do not
//!   reach it), stdin from /dev/null, stdout and stderr appended to `udp-IP.log` beside the
//!   socket. The starter reaps it from a thread, so its exit leaves no zombie.
//! - **racing starters** end with one daemon: UDP IP:4791 is bound exclusively and the
//!   control socket after it (`open::listen` refuses a socket a live daemon answers on),
//!   so a second daemon fails to start, and its starter attaches to the first.
//! - **bounded**: each start waits at most [`START_WAIT`] for the socket to answer, and a
//!   daemon that exits without answering is retried once (an idle daemon may have been
//!   on its way out, still holding the port); the errors name the log to read.
//! - **leaving**: an on-demand daemon exits [`Settings::idle`] after its last client left
//!   and its last QPN block's quarantine ended (`server::Config::idle_exit`); one started
//!   by hand (`roce-emu daemon`) runs until signalled.

use super::client::{self, AttachError};
use crate::backend::daemon_path;
use std::io::{Read, Seek, SeekFrom};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for a started daemon to answer on its socket.
pub const START_WAIT: Duration = Duration::from_secs(5);
/// How long an on-demand daemon stays with no client and no block in quarantine, by
/// default: long enough for a script's next program (ibv_rc_pingpong's server, then its
/// client; a test suite's next case) to find it up instead of paying another start, short
/// enough that nothing holds the address long after the last program.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(2);
/// How long a departed process's QPN block stays unleased in an on-demand daemon (and
/// so how long the daemon stays after its last client), by default. Shorter than a
/// daemon started by hand (`lease::DEFAULT_QUARANTINE`, 60 s): this daemon outlives
/// the programs, so a script that runs a ping-pong pair after another quarantines two
/// blocks a run, and the 255 blocks must last (at 10 s, 25 programs a second); and it
/// still covers RC giving up on a peer at the timeouts programs use (retry_cnt 7 at
/// timeout 14, rc_pingpong's and perftest's: 8 x 67 ms, half a second; at timeout 18:
/// 8.6 s). Longer needs: `ROCE_EMU_DAEMON_QUARANTINE`.
pub const DEFAULT_QUARANTINE: Duration = Duration::from_secs(10);
/// Sets [`Settings::idle`] (seconds, e.g. `2` or `0.5`).
pub const IDLE_VAR: &str = "ROCE_EMU_DAEMON_IDLE";
/// Sets [`Settings::quarantine`] (seconds; `0` for none).
pub const QUARANTINE_VAR: &str = "ROCE_EMU_DAEMON_QUARANTINE";
/// The roce-emu binary to start (`roce-emu run` sets it).
pub const BIN_VAR: &str = "ROCE_EMU_BIN";
/// Wait for an answer after our daemon exited: a daemon that won the race answers
/// within microseconds of binding the port our daemon found taken.
const AFTER_EXIT: Duration = Duration::from_millis(300);
/// Starts tried before giving up (see the module docs: a daemon on its way out).
const STARTS: usize = 2;
/// Each look at the socket waits at most this for an answer.
const ASK: Duration = Duration::from_millis(500);
/// Pause between two looks.
const POLL: Duration = Duration::from_millis(10);

/// Why no daemon could be found or started for an address. Each names what to do.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(
        "no roce-emu binary to start a daemon for udp:{ip} (looked at {}): set {BIN_VAR} \
         to its path, put roce-emu on PATH, or start one yourself: roce-emu daemon --port \
         udp:{ip}", looked.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NoBinary { ip: IpAddr, looked: Vec<PathBuf> },
    #[error(
        "cannot use the daemon folder {path}: {source} (as a user other than root, set \
         XDG_RUNTIME_DIR to a folder of yours)"
    )]
    Folder {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start {bin} for udp:{ip}: {source}")]
    Spawn {
        ip: IpAddr,
        bin: PathBuf,
        source: std::io::Error,
    },
    #[error("the roce-emu daemon started for udp:{ip} exited ({status}): {tail} (its log: {log})")]
    Exited {
        ip: IpAddr,
        status: String,
        tail: String,
        log: PathBuf,
    },
    #[error(
        "the roce-emu daemon started for udp:{ip} did not answer on {socket} within {secs} s \
         (its log: {log})"
    )]
    Silent {
        ip: IpAddr,
        socket: PathBuf,
        secs: u64,
        log: PathBuf,
    },
    #[error("{socket} answers for port {kind} {name}, not udp:{ip}: remove the socket or stop that daemon")]
    WrongPort {
        ip: IpAddr,
        socket: PathBuf,
        kind: String,
        name: String,
    },
    #[error(
        "the daemon of udp:{ip} at {socket} is another network namespace's, and so is the \
         one at its namespace name: stop one, or give this program's device a daemon \
         (ROCE_EMU_DEVICES=NAME=daemon:SOCKET)"
    )]
    OtherNamespace { ip: IpAddr, socket: PathBuf },
    /// The socket's daemon refused us (another user's, another version).
    #[error(transparent)]
    Attach(#[from] AttachError),
    #[error("{var}={value:?}: {why}")]
    Setting {
        var: &'static str,
        value: String,
        why: &'static str,
    },
}

/// How an on-demand daemon is started.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// How long it stays once it has no client and no block in quarantine.
    pub idle: Duration,
    /// How long a departed process's QPN block stays unleased (and the daemon up).
    pub quarantine: Duration,
    /// The binary, if not found as the module docs say.
    pub bin: Option<PathBuf>,
    /// The folder of the socket and the log (`daemon_path::socket_dir` by default).
    pub dir: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            idle: DEFAULT_IDLE,
            quarantine: DEFAULT_QUARANTINE,
            bin: None,
            dir: None,
        }
    }
}

fn seconds_var(var: &'static str) -> Result<Option<Duration>, DaemonError> {
    let Some(v) = std::env::var_os(var) else {
        return Ok(None);
    };
    let value = v.to_string_lossy().into_owned();
    let bad = |why| DaemonError::Setting {
        var,
        value: value.clone(),
        why,
    };
    let s: f64 = value
        .trim()
        .parse()
        .map_err(|_| bad("give a number of seconds, e.g. 2 or 0.5"))?;
    if !(0.0..=86_400.0).contains(&s) {
        return Err(bad("give 0 to 86400 seconds"));
    }
    Ok(Some(Duration::from_secs_f64(s)))
}

impl Settings {
    /// The defaults, changed by [`IDLE_VAR`], [`QUARANTINE_VAR`] and [`BIN_VAR`].
    pub fn from_env() -> Result<Settings, DaemonError> {
        let mut s = Settings::default();
        if let Some(d) = seconds_var(IDLE_VAR)? {
            s.idle = d;
        }
        if let Some(d) = seconds_var(QUARANTINE_VAR)? {
            s.quarantine = d;
        }
        s.bin = std::env::var_os(BIN_VAR)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        Ok(s)
    }

    fn socket(&self, ip: IpAddr) -> PathBuf {
        match &self.dir {
            Some(d) => d.join(format!("udp-{ip}.sock")),
            None => daemon_path::udp_socket(ip),
        }
    }
}

/// The socket of the daemon of `udp:IP` for this user, started if none answers (module
/// docs), with the settings of the environment ([`Settings::from_env`]).
pub fn ensure_udp(ip: IpAddr) -> Result<PathBuf, DaemonError> {
    ensure_udp_with(ip, &Settings::from_env()?)
}

/// [`ensure_udp`] with explicit settings.
pub fn ensure_udp_with(ip: IpAddr, s: &Settings) -> Result<PathBuf, DaemonError> {
    let plain = std::path::absolute(s.socket(ip)).map_err(|source| DaemonError::Folder {
        path: s.socket(ip),
        source,
    })?;
    let own = netns_of("self");
    // The folder's name first; another namespace's daemon there sends us to our own name.
    let tagged = own.as_ref().map(|ns| {
        let inode: String = ns
            .to_string_lossy()
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        plain.with_file_name(format!("udp-{ip}-netns-{inode}.sock"))
    });
    // Ours may live at the namespace's name (it went there while another namespace's
    // daemon held the plain one, which has since gone): found there first, or we would
    // start a second daemon at the plain name that cannot bind the address ours holds.
    if let Some(t) = &tagged {
        if look(ip, t, own.as_deref())? == Found::Ours {
            return Ok(t.clone());
        }
    }
    let mut last = None;
    for socket in std::iter::once(plain).chain(tagged) {
        match find_or_start(ip, &socket, own.as_deref(), s) {
            Ok(Some(())) => return Ok(socket),
            Ok(None) => last = Some(socket),
            Err(e) => return Err(e),
        }
    }
    Err(DaemonError::OtherNamespace {
        ip,
        socket: last.unwrap_or_default(),
    })
}

/// What answers at a socket.
#[derive(Debug, PartialEq)]
enum Found {
    /// A daemon of `udp:ip` in our network namespace.
    Ours,
    /// A daemon of `udp:ip` in another network namespace.
    Foreign,
    Nobody,
}

/// `Ok(Some(()))`: a daemon of ours answers at `socket` (found or started);
/// `Ok(None)`: the one there is another namespace's.
fn find_or_start(
    ip: IpAddr,
    socket: &Path,
    own: Option<&Path>,
    s: &Settings,
) -> Result<Option<()>, DaemonError> {
    match look(ip, socket, own)? {
        Found::Ours => return Ok(Some(())),
        Found::Foreign => return Ok(None),
        Found::Nobody => {}
    }
    let bin = find_binary(ip, s.bin.as_deref())?;
    let log = socket.with_extension("log");
    let folder = |source| DaemonError::Folder {
        path: socket.parent().unwrap_or(Path::new("/")).to_path_buf(),
        source,
    };
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).map_err(folder)?;
    }
    let mut last = None;
    for _ in 0..STARTS {
        let from = std::fs::metadata(&log).map_or(0, |m| m.len());
        let child = spawn(ip, &bin, socket, &log, s).map_err(|e| match e {
            Spawned::Log(source) => folder(source),
            Spawned::Exec(source) => DaemonError::Spawn {
                ip,
                bin: bin.clone(),
                source,
            },
        })?;
        match wait_up(ip, socket, own, &log, from, child)? {
            Ok(found) => return Ok((found == Found::Ours).then_some(())),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one start"))
}

/// The network namespace of process `pid` (`self` for ours), if we may read it.
fn netns_of(pid: &str) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()
}

/// Who answers at `socket`: a daemon of `udp:ip` (in our namespace or not), or nobody; a
/// daemon that refuses us, or has another port, is an error (starting another would not
/// help).
fn look(ip: IpAddr, socket: &Path, own: Option<&Path>) -> Result<Found, DaemonError> {
    look_within(ip, socket, own, ASK)
}

/// [`look`], waiting at most `wait` for an answer. A daemon that is there but slow (a
/// loaded machine) is asked again with the attach's own bound before it is called
/// silent: starting another would only fail on its port.
fn look_within(
    ip: IpAddr,
    socket: &Path,
    own: Option<&Path>,
    wait: Duration,
) -> Result<Found, DaemonError> {
    match client::info_within(socket, wait) {
        Ok(p) if p.kind == "udp" && p.addrs.contains(&ip) => {
            let theirs = client::daemon_pid(socket, ASK).and_then(|pid| netns_of(&pid.to_string()));
            // Unknown either side: taken as ours (as before namespaces were looked at).
            Ok(match (own, theirs) {
                (Some(a), Some(b)) if a != b => Found::Foreign,
                _ => Found::Ours,
            })
        }
        Ok(p) => Err(DaemonError::WrongPort {
            ip,
            socket: socket.to_path_buf(),
            kind: p.kind,
            name: p.name,
        }),
        Err(e @ (AttachError::Refused { .. } | AttachError::Untrusted { .. })) => Err(e.into()),
        Err(AttachError::Silent { .. }) if wait < client::ATTACH_TIMEOUT => {
            look_within(ip, socket, own, client::ATTACH_TIMEOUT)
        }
        Err(e @ AttachError::Silent { .. }) => Err(e.into()),
        // Nobody there (no socket, or a stale one), or one on its way out.
        Err(_) => Ok(Found::Nobody),
    }
}

enum Spawned {
    Log(std::io::Error),
    Exec(std::io::Error),
}

fn spawn(
    ip: IpAddr,
    bin: &Path,
    socket: &Path,
    log: &Path,
    s: &Settings,
) -> Result<Child, Spawned> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(Spawned::Log)?;
    let err = out.try_clone().map_err(Spawned::Log)?;
    // `roce-emu daemon` takes positive seconds: "no quarantine" is a microsecond.
    let secs = |d: Duration| format!("{}", d.as_secs_f64().max(1e-6));
    let mut cmd = Command::new(bin);
    cmd.arg("daemon")
        .arg("--port")
        .arg(format!("udp:{ip}"))
        .arg("--socket")
        .arg(socket)
        .arg("--idle-exit")
        .arg(secs(s.idle))
        .arg("--quarantine")
        .arg(secs(s.quarantine))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Not the program's folder: a daemon keeps no file system busy (its paths are
        // absolute: `ensure_udp_with`).
        .current_dir("/")
        // The program's preloads (a sanitizer, the drop-in itself) are not the daemon's.
        .env_remove("LD_PRELOAD");
    crate::backend::new_session_on_exec(&mut cmd);
    let child = cmd.spawn().map_err(Spawned::Exec)?;
    tracing::info!(
        "started a roce-emu daemon for udp:{ip} (pid {}, socket {}, log {})",
        child.id(),
        socket.display(),
        log.display()
    );
    Ok(child)
}

/// Waits for a daemon to answer at `socket` after starting `child`. `Ok(Ok(found))`:
/// one answers (ours, or the one that won a race); `Ok(Err(e))`: ours exited and none
/// answers (worth another start); `Err`: give up.
fn wait_up(
    ip: IpAddr,
    socket: &Path,
    own: Option<&Path>,
    log: &Path,
    from: u64,
    mut child: Child,
) -> Result<Result<Found, DaemonError>, DaemonError> {
    let start = Instant::now();
    let mut exited: Option<(Instant, String)> = None;
    loop {
        match look(ip, socket, own)? {
            Found::Nobody => {}
            found => {
                reap(child);
                return Ok(Ok(found));
            }
        }
        if exited.is_none() {
            if let Ok(Some(st)) = child.try_wait() {
                exited = Some((Instant::now(), st.to_string()));
            }
        }
        if let Some((at, status)) = &exited {
            if at.elapsed() >= AFTER_EXIT {
                return Ok(Err(DaemonError::Exited {
                    ip,
                    status: status.clone(),
                    tail: log_tail(log, from),
                    log: log.to_path_buf(),
                }));
            }
        } else if start.elapsed() >= START_WAIT {
            // Ours, started here, and silent: end it (by its pid) rather than leave it.
            let _ = child.kill();
            let _ = child.wait();
            return Err(DaemonError::Silent {
                ip,
                socket: socket.to_path_buf(),
                secs: START_WAIT.as_secs(),
                log: log.to_path_buf(),
            });
        }
        std::thread::sleep(POLL);
    }
}

/// Waits for the daemon's exit from a thread (all signals blocked: the program's
/// signals are its own), so it leaves no zombie behind in a long-running program.
fn reap(mut child: Child) {
    let spawned = std::thread::Builder::new()
        .name("roce-emu-reaper".into())
        .spawn(move || {
            use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
            let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), None);
            let _ = child.wait();
        });
    if let Err(e) = spawned {
        tracing::debug!("no reaper thread for the daemon ({e}): it stays a zombie at its exit");
    }
}

/// The last line the daemon wrote to its log after byte `from` (what it died of).
fn log_tail(log: &Path, from: u64) -> String {
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(log) {
        let _ = f.seek(SeekFrom::Start(from));
        let _ = f.take(64 * 1024).read_to_string(&mut text);
    }
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("it wrote nothing")
        .trim()
        .to_string()
}

/// The roce-emu binary to start (module docs for the order).
fn find_binary(ip: IpAddr, given: Option<&Path>) -> Result<PathBuf, DaemonError> {
    let mut looked = Vec::new();
    if let Some(p) = given {
        if is_executable(p) {
            return Ok(p.to_path_buf());
        }
        looked.push(p.to_path_buf());
    }
    if let Some(obj) = own_object() {
        if let Some(dir) = obj.parent() {
            for c in [
                dir.join("roce-emu"),
                dir.join("../roce-emu"),
                dir.join("../../bin/roce-emu"),
            ] {
                if is_executable(&c) {
                    return Ok(std::fs::canonicalize(&c).unwrap_or(c));
                }
                looked.push(c);
            }
        }
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let c = dir.join("roce-emu");
        if is_executable(&c) {
            return Ok(c);
        }
    }
    looked.push(PathBuf::from("PATH"));
    Err(DaemonError::NoBinary { ip, looked })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The file this code is mapped from (the drop-in library, a test binary, roce-emu): the
/// line of `/proc/self/maps` whose range holds this function's address.
fn own_object() -> Option<PathBuf> {
    let here = own_object as fn() -> Option<PathBuf> as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|l| object_of(l, here))
}

/// `l` (a `/proc/PID/maps` line: `lo-hi perms offset dev inode path`)'s path, if its range
/// holds `addr`.
fn object_of(l: &str, addr: usize) -> Option<PathBuf> {
    let mut f = l.split_whitespace();
    let (lo, hi) = f.next()?.split_once('-')?;
    let (lo, hi) = (
        usize::from_str_radix(lo, 16).ok()?,
        usize::from_str_radix(hi, 16).ok()?,
    );
    if !(lo..hi).contains(&addr) {
        return None;
    }
    let path = f.nth(4)?;
    path.starts_with('/').then(|| PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_maps_line_gives_its_object() {
        let l = "7f00a000-7f00b000 r-xp 00001000 08:01 1234   /opt/x/lib/libibverbs.so.1";
        assert_eq!(
            object_of(l, 0x7f00_a800),
            Some(PathBuf::from("/opt/x/lib/libibverbs.so.1"))
        );
        assert_eq!(object_of(l, 0x7f00_b000), None);
        assert_eq!(
            object_of("7f00a000-7f00b000 rw-p 0 00:00 0", 0x7f00_a800),
            None
        );
        // This test binary runs from a file.
        assert!(own_object().is_some_and(|p| p.is_file()));
    }

    #[test]
    fn a_missing_binary_says_what_to_set() {
        let ip: IpAddr = "127.0.16.250".parse().unwrap();
        let s = Settings {
            bin: Some(PathBuf::from("/nonexistent/roce-emu")),
            ..Settings::default()
        };
        // Found elsewhere (the build tree) or not: when not, the error says how.
        if let Err(e) = find_binary(ip, s.bin.as_deref()) {
            let m = e.to_string();
            assert!(
                m.contains(BIN_VAR) && m.contains("/nonexistent/roce-emu"),
                "{m}"
            );
        }
    }
}
