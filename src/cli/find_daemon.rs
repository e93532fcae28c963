//! Which daemon `roce-emu counters` and `roce-emu fault` talk to when no `--daemon` is
//! given: the one answering at the default socket folder (`$XDG_RUNTIME_DIR/roce-emu/`
//! or `/run/roce-emu/`, where `roce-emu daemon` listens by default).

use crate::daemon::client;
use crate::daemon::port::PortSpec;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one daemon may take to say what port it has.
const ASK: Duration = Duration::from_secs(2);

/// The folder `roce-emu daemon` puts its socket in by default here (every port's
/// default socket is in the same one): `$XDG_RUNTIME_DIR/roce-emu`, else `/run/roce-emu`.
fn folders() -> Vec<PathBuf> {
    let any = crate::daemon::server::default_socket(&PortSpec::Udp([127, 0, 0, 1].into()));
    any.parent().map(Path::to_path_buf).into_iter().collect()
}

/// The sockets in `dir` (`*.sock`), sorted.
fn sockets_in(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sock"))
        .collect();
    v.sort();
    v
}

/// A running daemon found at a default path: its socket and what its port is.
#[derive(Debug, Clone)]
pub struct Found {
    pub socket: PathBuf,
    /// `udp 127.0.0.1`, `tap rtap0 (10.9.0.1)`.
    pub port: String,
}

/// Every daemon that answers at the default paths.
pub fn running() -> Vec<Found> {
    let mut found = Vec::new();
    for dir in folders() {
        for socket in sockets_in(&dir) {
            if let Ok(p) = client::info_within(&socket, ASK) {
                let addrs: Vec<String> = p.addrs.iter().map(|a| a.to_string()).collect();
                let port = if p.kind == "udp" {
                    format!("udp {}", addrs.join(", "))
                } else {
                    format!("{} {} ({})", p.kind, p.name, addrs.join(", "))
                };
                found.push(Found { socket, port });
            }
        }
    }
    found
}

/// The socket to use: `given`, or the one daemon answering at the default paths; several
/// or none is an error saying what to do.
pub fn resolve(given: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let found = running();
    match found.len() {
        1 => Ok(found[0].socket.clone()),
        0 => {
            let dirs: Vec<String> = folders().iter().map(|d| d.display().to_string()).collect();
            Err(format!(
                "no roce-emu daemon answers in {}: start one with `roce-emu daemon --port \
                 udp:ADDR` (or tap:NAME,ADDR/PREFIX, afpacket:IFACE), or name its socket \
                 with --daemon SOCKET",
                dirs.join(" or ")
            ))
        }
        _ => {
            let list: Vec<String> = found
                .iter()
                .map(|f| format!("  port {:<28} --daemon {}", f.port, f.socket.display()))
                .collect();
            Err(format!(
                "{} roce-emu daemons are running; choose one with --daemon SOCKET:\n{}",
                found.len(),
                list.join("\n")
            ))
        }
    }
}
