//! `roce-emu daemon` (one port shared by the programs of a machine) and `roce-emu
//! counters` (what it has moved, per port and per process).

use crate::daemon::control::{self, ToDaemon, ToProcess};
use crate::daemon::port::PortSpec;
use crate::daemon::server::{self, Config, Daemon};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct DaemonArgs {
    /// The port: udp:ADDR | tap:NAME,ADDR/PREFIX[,ADDR6/PREFIX] | afpacket:IFACE[,ADDR].
    #[arg(long, value_name = "PORT")]
    pub port: Option<PortSpec>,
    /// The control socket (default: $XDG_RUNTIME_DIR/roce-emu/KIND-NAME.sock, or under
    /// /run/roce-emu).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// How long a departed process's QPN block stays unleased.
    #[arg(long, value_name = "SECS", value_parser = super::seconds)]
    pub quarantine: Option<Duration>,
    /// A file of `key = value` lines (port, socket, quarantine); options given here win.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct CountersArgs {
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Print again every SECS seconds until interrupted.
    #[arg(long, value_name = "SECS", value_parser = super::seconds)]
    pub watch: Option<Duration>,
}

/// The config file's settings: `port = ...`, `socket = ...`, `quarantine = SECS`; `#`
/// starts a comment.
fn read_config(path: &PathBuf, args: &mut DaemonArgs) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim()))
            .ok_or_else(|| format!("{}:{}: write key = value", path.display(), i + 1))?;
        let at = |e: String| format!("{}:{}: {e}", path.display(), i + 1);
        match k {
            "port" if args.port.is_none() => args.port = Some(v.parse().map_err(at)?),
            "socket" if args.socket.is_none() => args.socket = Some(PathBuf::from(v)),
            "quarantine" if args.quarantine.is_none() => {
                args.quarantine = Some(super::seconds(v).map_err(at)?)
            }
            "port" | "socket" | "quarantine" => {}
            _ => return Err(at(format!("no setting {k:?} (port, socket, quarantine)"))),
        }
    }
    Ok(())
}

pub fn run(args: &DaemonArgs) -> i32 {
    let mut a = DaemonArgs {
        port: args.port.clone(),
        socket: args.socket.clone(),
        quarantine: args.quarantine,
        config: None,
    };
    if let Some(path) = &args.config {
        if let Err(e) = read_config(path, &mut a) {
            eprintln!("roce-emu daemon: {e}");
            return 2;
        }
    }
    let Some(port) = a.port else {
        eprintln!("roce-emu daemon: give --port (udp:ADDR, tap:NAME,ADDR/PREFIX or afpacket:IFACE) or a --config with a port line");
        return 2;
    };
    let socket = a.socket.unwrap_or_else(|| server::default_socket(&port));
    let mut cfg = Config::new(port, socket.clone());
    if let Some(q) = a.quarantine {
        cfg.quarantine = q;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("roce-emu daemon: cannot handle signal {sig}: {e}");
            return 1;
        }
    }
    let daemon = match Daemon::open(cfg) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("roce-emu daemon: {e}");
            return 1;
        }
    };
    let info = daemon.info().clone();
    let addrs: Vec<String> = info.addrs.iter().map(|a| a.to_string()).collect();
    println!(
        "roce-emu daemon: {} port {} ({}), socket {}",
        info.kind,
        info.name,
        addrs.join(", "),
        socket.display()
    );
    match daemon.run(&stop) {
        Ok(s) => {
            println!(
                "roce-emu daemon: stopped; {} packets received, {} sent, {} processes served",
                s.port.rcvd_pkts,
                s.port.sent_pkts,
                s.processes.len()
            );
            0
        }
        Err(e) => {
            eprintln!("roce-emu daemon: {e}");
            1
        }
    }
}

fn fetch(socket: &PathBuf) -> Result<serde_json::Value, String> {
    let s = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::SEQPACKET, None)
        .map_err(|e| e.to_string())?;
    let addr = socket2::SockAddr::unix(socket).map_err(|e| e.to_string())?;
    s.connect(&addr)
        .map_err(|e| format!("{}: {e} (is a daemon running there?)", socket.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    use std::os::fd::AsFd;
    // A daemon that refuses us (another user) says why and closes at once: our request
    // then fails, and its answer is still there to read.
    let sent = control::send(s.as_fd(), &ToDaemon::Counters, &[]);
    match control::recv::<ToProcess>(s.as_fd()) {
        Ok((ToProcess::Counters { json }, _)) => Ok(json),
        Ok((ToProcess::Refused { why }, _)) => Err(format!("refused: {why}")),
        Ok((other, _)) => Err(format!("unexpected answer {other:?}")),
        Err(e) => Err(sent.err().map_or(e.to_string(), |s| s.to_string())),
    }
}

fn print_table(v: &serde_json::Value) {
    let c = &v["counters"];
    println!(
        "port {} {}",
        v["port"]["kind"].as_str().unwrap_or("?"),
        v["port"]["name"].as_str().unwrap_or("?")
    );
    if let Some(obj) = c.as_object() {
        for (k, val) in obj {
            println!("  {k:<16} {val}");
        }
    }
    let l = &v["leases"];
    println!(
        "  leases           {} leased, {} in quarantine, {} free",
        l["leased"], l["quarantined"], l["free"]
    );
    println!("processes");
    println!(
        "  {:>8} {:>6} {:>6} {:>12} {:>12} {:>10}  left",
        "pid", "uid", "block", "rcvd_pkts", "sent_pkts", "ring_full"
    );
    for p in v["processes"].as_array().into_iter().flatten() {
        println!(
            "  {:>8} {:>6} {:>6} {:>12} {:>12} {:>10}  {}",
            p["pid"],
            p["uid"],
            p["block"],
            p["rcvd_pkts"],
            p["sent_pkts"],
            p["ring_full"],
            p["left"].as_str().unwrap_or("")
        );
    }
}

pub fn counters(args: &CountersArgs) -> i32 {
    loop {
        match fetch(&args.socket) {
            Ok(v) if args.json => println!("{v}"),
            Ok(v) => print_table(&v),
            Err(e) => {
                eprintln!("roce-emu counters: {e}");
                return 1;
            }
        }
        match args.watch {
            Some(d) => std::thread::sleep(d),
            None => return 0,
        }
    }
}
