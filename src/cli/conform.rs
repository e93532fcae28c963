//! `roce-emu conform`: plays the scripts of spec/ against targets, says each script's
//! results on stderr as it finishes, and prints the matrix.

use crate::conform::{self, report, TargetSpec};
use std::net::IpAddr;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A target: `roce-emu` (this process, on loopback), or an agent as HOST:PORT or
    /// LABEL=HOST:PORT (tools/conform/agent/ beside real rxe, say). Repeat for a column
    /// each; default roce-emu.
    #[arg(long = "target", value_name = "TARGET")]
    targets: Vec<String>,
    /// The peer's address for agent targets (one the target can reach; UDP 4791 on it
    /// must be free).
    #[arg(long = "peer-ip", value_name = "IP")]
    peer_ip: Option<IpAddr>,
    /// The in-process roce-emu target's address and its peer's.
    #[arg(
        long = "emu-ips",
        value_name = "IP,IP",
        default_value = "127.0.77.1,127.0.77.2"
    )]
    emu_ips: String,
    /// Attach the in-process roce-emu target to this `roce-emu daemon` (its port's
    /// address is then the target's): the scripts cross the daemon's routing.
    #[arg(long = "daemon", alias = "emu-daemon", value_name = "SOCKET")]
    emu_daemon: Option<PathBuf>,
    /// Multiply every time bound of the scripts (a slow target: rxe in a TCG guest).
    #[arg(long = "time-scale", value_name = "K", default_value_t = 1.0)]
    time_scale: f64,
    /// Also write the matrix as JSON here.
    #[arg(long = "json", value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also write the whole run as one page: each script's exchange with each target as
    /// a ladder (`roce-emu ladder`'s page), under the script's name and result.
    #[arg(long = "html", value_name = "FILE")]
    html: Option<PathBuf>,
    /// Columns of the ladder drawn under a failing script (on stderr).
    #[arg(long = "ladder-width", value_name = "N", default_value_t = 100)]
    ladder_width: usize,
    /// Serve the roce-emu agent on this TCP address instead (with --agent-ip), for a
    /// runner elsewhere.
    #[arg(long = "serve-agent", value_name = "ADDR:PORT")]
    serve_agent: Option<String>,
    /// The NIC address of the agent --serve-agent runs.
    #[arg(long = "agent-ip", value_name = "IP")]
    agent_ip: Option<IpAddr>,
    /// Scripts, or folders of them (*.rc); default spec/.
    paths: Vec<PathBuf>,
}

pub fn run(a: &Args) -> i32 {
    match go(a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roce-emu conform: {e}");
            2
        }
    }
}

fn go(a: &Args) -> Result<i32, String> {
    if let Some(addr) = &a.serve_agent {
        let ip = a
            .agent_ip
            .ok_or("--serve-agent needs --agent-ip (the NIC's address)")?;
        let l = std::net::TcpListener::bind(addr).map_err(|e| format!("{addr}: {e}"))?;
        eprintln!("roce-emu conform: agent on {addr}, NIC on {ip}");
        conform::emu_agent::serve(l, ip, None)?;
        return Ok(0);
    }
    if !(a.time_scale > 0.0 && a.time_scale <= 1000.0) {
        return Err(format!("--time-scale {}: from 0 to 1000", a.time_scale));
    }
    let paths = if a.paths.is_empty() {
        vec![PathBuf::from("spec")]
    } else {
        a.paths.clone()
    };
    let scripts = conform::load(&paths).map_err(|errs| errs.join("\n"))?;
    if scripts.is_empty() {
        return Err(format!("no scripts (*.rc) in {paths:?}"));
    }
    let specs = targets(a)?;
    let mut targets = Vec::new();
    for s in &specs {
        targets.push(conform::Target::open(s)?);
    }
    let labels: Vec<String> = targets.iter().map(|t| t.label.clone()).collect();
    let mut rows = Vec::new();
    // Each script's exchange with each target, for the failing ones' drawing and --html.
    let mut ladders: Vec<(String, crate::ladder::model::Ladder)> = Vec::new();
    for (n, s) in scripts.iter().enumerate() {
        let mut times = Vec::with_capacity(targets.len());
        let mut exchanges = Vec::with_capacity(targets.len());
        let results = targets
            .iter_mut()
            .map(|t| {
                let start = std::time::Instant::now();
                let o = t.play(s, n, a.time_scale);
                times.push(start.elapsed());
                exchanges.push(t.ladder());
                (t.label.clone(), o)
            })
            .collect();
        let row = report::row(s, results);
        // Progress on stderr as each script finishes (the matrix, on stdout, comes at the
        // end): a run of many scripts against a slow target is not silent.
        eprintln!("{}", report::progress_line(n, scripts.len(), &row, &times));
        for (cell, ladder) in row.results.iter().zip(exchanges) {
            if cell.mark() == "FAIL" {
                // What came, as a ladder: the expectation and the first differing field are
                // in the matrix; this is the exchange around it.
                eprintln!(
                    "  the exchange with {} (the scripted peer's view):",
                    cell.target
                );
                let o = crate::ladder::text::TextOpts {
                    width: a.ladder_width.max(crate::ladder::text::MIN_WIDTH),
                    color: false,
                    ascii: false,
                };
                eprint!("{}", crate::ladder::text::render(&ladder, &o));
            }
            if a.html.is_some() {
                ladders.push((
                    format!("{} on {}: {}", s.name, cell.target, cell.mark()),
                    ladder,
                ));
            }
        }
        tracing::info!(script = %s.name, marks = ?row.results.iter().map(|c| c.mark()).collect::<Vec<_>>());
        rows.push(row);
    }
    print!("{}", report::text(&rows, &labels));
    if let Some(path) = &a.html {
        let parts: Vec<(&str, &crate::ladder::model::Ladder)> =
            ladders.iter().map(|(n, l)| (n.as_str(), l)).collect();
        let page = crate::ladder::html::page_parts(&parts, "roce-emu conform: the run's exchanges");
        std::fs::write(path, page).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(j) = &a.json {
        let body = serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?;
        std::fs::write(j, body).map_err(|e| format!("{}: {e}", j.display()))?;
    }
    let ok = rows
        .iter()
        .all(|r| r.results.iter().all(|c| c.acceptable()));
    Ok(if ok { 0 } else { 1 })
}

fn targets(a: &Args) -> Result<Vec<TargetSpec>, String> {
    let (ip, peer_ip) = a
        .emu_ips
        .split_once(',')
        .and_then(|(x, y)| Some((x.parse().ok()?, y.parse().ok()?)))
        .ok_or_else(|| format!("--emu-ips {}: two addresses, IP,IP", a.emu_ips))?;
    let list = if a.targets.is_empty() {
        vec!["roce-emu".to_string()]
    } else {
        a.targets.clone()
    };
    list.iter()
        .map(|t| {
            if t == "roce-emu" {
                return Ok(TargetSpec::Emu {
                    ip,
                    peer_ip,
                    daemon: a.emu_daemon.clone(),
                });
            }
            if t == "rxe" {
                return Err(
                    "rxe runs in the lab's guest: `tools/lab/interop.sh conform-rxe` boots \
                     it and its agent, or name a running agent as --target rxe=HOST:PORT"
                        .into(),
                );
            }
            let (label, addr) = match t.split_once('=') {
                Some((l, ad)) => (Some(l.to_string()), ad.to_string()),
                None => (None, t.clone()),
            };
            let peer_ip = a.peer_ip.ok_or_else(|| {
                format!(
                    "--target {t} needs --peer-ip (the peer's address, reachable from the target)"
                )
            })?;
            Ok(TargetSpec::Remote {
                label,
                addr,
                peer_ip,
            })
        })
        .collect()
}
