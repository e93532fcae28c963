//! Protocol conformance: scripts in `spec/` (format in `spec/FORMAT.md`) played packet by
//! packet against a target NIC, roce-emu in this process or any NIC with an agent (real
//! rxe in the lab), and the result matrix.
//!
//! The peer is not an engine: it sends exactly the bytes a script names and checks what
//! comes back field by field, so a script can do what no correct NIC would (skip PSNs,
//! repeat requests, answer with responses nobody asked for, corrupt ICRCs).

pub mod agent;
pub mod cm;
pub mod emu_agent;
pub mod emu_cm;
pub mod packet;
pub mod peer;
pub mod report;
pub mod run;
pub mod script;
pub mod value;

pub use run::Outcome;
pub use script::{parse, Script, ScriptError};

use std::net::{IpAddr, TcpListener};
use std::path::{Path, PathBuf};

/// Where a target is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    /// roce-emu in this process: its NIC on `ip` (or attached to the `roce-emu daemon`
    /// listening on `daemon`, whose port it then is), the peer on `peer_ip`.
    Emu {
        ip: IpAddr,
        peer_ip: IpAddr,
        daemon: Option<PathBuf>,
    },
    /// An agent at `addr` (HOST:PORT); the peer on `peer_ip`. `label` names the column
    /// (default: what the agent's hello says).
    Remote {
        label: Option<String>,
        addr: String,
        peer_ip: IpAddr,
    },
}

/// A connected target.
pub struct Target {
    pub label: String,
    agent: agent::Agent,
    peer: peer::Peer,
}

impl Target {
    pub fn open(spec: &TargetSpec) -> Result<Target, String> {
        let (label, addr, peer_ip) = match spec {
            TargetSpec::Emu {
                ip,
                peer_ip,
                daemon,
            } => {
                let l =
                    TcpListener::bind("127.0.0.1:0").map_err(|e| format!("agent socket: {e}"))?;
                let addr = l.local_addr().map_err(|e| e.to_string())?.to_string();
                let (ip, daemon) = (*ip, daemon.clone());
                // The agent thread lives as long as the process: it holds the NIC.
                std::thread::Builder::new()
                    .name("conform-agent".into())
                    .spawn(move || {
                        if let Err(e) = emu_agent::serve(l, ip, daemon) {
                            tracing::error!("conform agent: {e}");
                        }
                    })
                    .map_err(|e| e.to_string())?;
                (Some("roce-emu".to_string()), addr, *peer_ip)
            }
            TargetSpec::Remote {
                label,
                addr,
                peer_ip,
            } => (label.clone(), addr.clone(), *peer_ip),
        };
        let agent = agent::Agent::connect(&addr)?;
        let peer =
            peer::Peer::bind(peer_ip).map_err(|e| format!("the peer's port on {peer_ip}: {e}"))?;
        Ok(Target {
            label: label.unwrap_or_else(|| agent.name.clone()),
            agent,
            peer,
        })
    }

    /// The ladder of the last script played: every packet the peer sent and received,
    /// the target's side left as requester when it sent first.
    pub fn ladder(&self) -> crate::ladder::model::Ladder {
        ladder_of(self.peer.trace())
    }

    /// Plays `script` as the run's `n`th.
    pub fn play(&mut self, script: &Script, n: usize, scale: f64) -> Outcome {
        run::Run {
            agent: &mut self.agent,
            peer: &mut self.peer,
            scale,
            peer_qpn: run::peer_qpn(n),
        }
        .play(script)
    }
}

/// The `.rc` files under each path (a file, or a folder walked in name order), with the
/// names reports use: the path under the folder given, without `.rc`.
pub fn find_scripts(paths: &[PathBuf]) -> Result<Vec<(PathBuf, String)>, String> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found = Vec::new();
            walk(p, &mut found).map_err(|e| format!("{}: {e}", p.display()))?;
            found.sort();
            for f in found {
                let rel = f.strip_prefix(p).unwrap_or(&f).with_extension("");
                out.push((f.clone(), rel.to_string_lossy().into_owned()));
            }
        } else if p.is_file() {
            let name = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            out.push((p.clone(), name));
        } else {
            return Err(format!("{}: no such script or folder", p.display()));
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            walk(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "rc") {
            out.push(p);
        }
    }
    Ok(())
}

/// Reads and parses every script; all errors at once, so a writer fixes them in one go.
pub fn load(paths: &[PathBuf]) -> Result<Vec<Script>, Vec<String>> {
    let files = find_scripts(paths).map_err(|e| vec![e])?;
    let mut scripts = Vec::new();
    let mut errors = Vec::new();
    for (path, name) in files {
        match std::fs::read_to_string(&path) {
            Ok(text) => match parse(&path.display().to_string(), &name, &text) {
                Ok(s) => scripts.push(s),
                Err(e) => errors.push(e.to_string()),
            },
            Err(e) => errors.push(format!("{}: {e}", path.display())),
        }
    }
    if errors.is_empty() {
        Ok(scripts)
    } else {
        Err(errors)
    }
}

/// A peer's trace as a ladder (`ladder::build`): times from its first packet.
pub fn ladder_of(seen: &[peer::Seen]) -> crate::ladder::model::Ladder {
    use crate::ladder::model::{Fate, Observed};
    let t0 = seen.first().map(|s| s.at);
    crate::ladder::build::build(seen.iter().enumerate().map(|(i, s)| Observed {
        frame: i + 1,
        t_ns: t0.map_or(0, |t0| {
            s.at.saturating_duration_since(t0).as_nanos() as i128
        }),
        src: s.src,
        dst: s.dst,
        ecn: 0,
        roce: &s.bytes,
        fate: Fate::Delivered,
        icrc_ok: Some(s.icrc_ok),
    }))
}
