//! `roce-emu daemon` (one port shared by the programs of a machine) and `roce-emu
//! counters` (what it has moved, per port and per process).

use crate::daemon::control::{self, ToDaemon, ToProcess};
use crate::daemon::port::PortSpec;
use crate::daemon::server::{self, Config, Daemon};
use crate::daemon::{lease, report};
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
    /// A file of `key = value` lines (port, socket, quarantine, pcap, fault,
    /// neigh_timeout); options given here win (fault lines add to --fault).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Write every frame of the port, in and out, to FILE (pcapng, one interface block for
    /// the port; a UDP port gets one synthesised frame per datagram).
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// A fault rule from the start (repeatable), e.g. `drop 5% in`, `delay 10ms 5% out`,
    /// `corrupt 1% opcode=RC_SEND_ONLY`; see `roce-emu fault --help`.
    #[arg(long = "fault", value_name = "RULE")]
    pub faults: Vec<String>,
    /// How long an ARP or ND entry stays REACHABLE on a tap: or afpacket: port (default
    /// 60); then it is STALE: still used at once, and re-validated by unicast probes on
    /// its first use (removed, and resolved again, if 3 go unanswered).
    #[arg(long, value_name = "SECS", value_parser = super::seconds)]
    pub neigh_timeout: Option<Duration>,
    /// Longest time the idle daemon polls its port and rings (yielding the CPU each turn)
    /// before it sleeps on them (0: always sleep, which leaves the CPU to the programs).
    #[arg(long = "spin-us", value_name = "MICROSECONDS", default_value_t = crate::verbs::DEFAULT_SPIN_US)]
    pub spin_us: u64,
}

#[derive(clap::Args, Debug)]
#[command(after_help = RULES_HELP)]
pub struct FaultArgs {
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
    /// The rule, as words (`drop 5% in`); several rules separated by `;`. `list` shows the
    /// rules with their counters, `clear` removes them all.
    #[arg(value_name = "RULE", required = true, num_args = 1.., allow_hyphen_values = true)]
    pub rule: Vec<String>,
}

const RULES_HELP: &str = "Rules:
  drop P% [in|out] [opcode=NAME|NUM] [qpn=N] [seed=S]
  duplicate P% [filters]
  reorder P% [depth=N] [filters]   held until N later packets went by (default 4)
  delay TIME [P%] [filters]        TIME: 10ms, 500us, 1s
  corrupt P% [filters]             one byte changed: the receiver's ICRC check catches it
  clear | list
The rate defaults to 100%; without in/out a rule acts both ways. Rules apply at the port to
RoCE datagrams (never to ARP, ND or ICMP), each seeded (the same seed and packets give the
same choices).";

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

/// The config file's settings: `port = ...`, `socket = ...`, `quarantine = SECS`,
/// `pcap = FILE`, `fault = RULE`, `neigh_timeout = SECS`; `#` starts a comment.
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
            "pcap" if args.pcap.is_none() => args.pcap = Some(PathBuf::from(v)),
            "fault" => args.faults.push(v.to_string()),
            "neigh_timeout" if args.neigh_timeout.is_none() => {
                args.neigh_timeout = Some(super::seconds(v).map_err(at)?)
            }
            "port" | "socket" | "quarantine" | "pcap" | "neigh_timeout" => {}
            _ => {
                return Err(at(format!(
                    "no setting {k:?} (port, socket, quarantine, pcap, fault, neigh_timeout)"
                )))
            }
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
        pcap: args.pcap.clone(),
        faults: args.faults.clone(),
        neigh_timeout: args.neigh_timeout,
        spin_us: args.spin_us,
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
    cfg.pcap = a.pcap.clone();
    cfg.neigh_timeout = a.neigh_timeout;
    cfg.spin = Duration::from_micros(a.spin_us);
    for text in &a.faults {
        match crate::daemon::fault::parse(text) {
            Ok(crate::daemon::fault::Command::Add(r)) => cfg.faults.push(r),
            Ok(_) => {
                eprintln!("roce-emu daemon: --fault {text:?}: give a rule (clear and list are for `roce-emu fault`)");
                return 2;
            }
            Err(e) => {
                eprintln!("roce-emu daemon: --fault {text:?}: {e}");
                return 2;
            }
        }
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
                "roce-emu daemon: stopped; {} packets received, {} sent, {} processes served{}",
                s.port.rcvd_pkts,
                s.port.sent_pkts,
                s.processes.len(),
                a.pcap
                    .as_ref()
                    .map(|p| format!("; capture {}", p.display()))
                    .unwrap_or_default()
            );
            0
        }
        Err(e) => {
            eprintln!("roce-emu daemon: {e}");
            1
        }
    }
}

/// One request on a new connection to the daemon, and its answer.
fn ask(socket: &PathBuf, msg: &ToDaemon) -> Result<ToProcess, String> {
    ask_keep(socket, msg).map(|(_, m)| m)
}

/// [`ask`], keeping the connection (for an answer in several messages).
fn ask_keep(socket: &PathBuf, msg: &ToDaemon) -> Result<(socket2::Socket, ToProcess), String> {
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
    let sent = control::send(s.as_fd(), msg, &[]);
    match control::recv::<ToProcess>(s.as_fd()) {
        Ok((ToProcess::Refused { why }, _)) => Err(format!("refused: {why}")),
        Ok((m, _)) => Ok((s, m)),
        Err(e) => Err(sent.err().map_or(e.to_string(), |s| s.to_string())),
    }
}

fn fetch(socket: &PathBuf) -> Result<serde_json::Value, String> {
    use std::os::fd::AsFd;
    match ask_keep(socket, &ToDaemon::Counters)? {
        (s, ToProcess::Counters { json }) => report::collect_answer(s.as_fd(), json),
        (_, other) => Err(format!("unexpected answer {other:?}")),
    }
}

/// `roce-emu fault --socket PATH RULE...`: sets each `;`-separated rule, stopping at the
/// first the daemon refuses; then prints the rules in force with their counters.
pub fn fault(args: &FaultArgs) -> i32 {
    let text = args.rule.join(" ");
    for rule in text.split(';').map(str::trim).filter(|r| !r.is_empty()) {
        match ask(&args.socket, &ToDaemon::Fault { rule: rule.into() }) {
            Ok(ToProcess::FaultSet { error: None }) => {}
            Ok(ToProcess::FaultSet { error: Some(e) }) => {
                eprintln!("roce-emu fault: {rule:?}: {e}");
                return 2;
            }
            Ok(other) => {
                eprintln!("roce-emu fault: unexpected answer {other:?}");
                return 1;
            }
            Err(e) => {
                eprintln!("roce-emu fault: {e}");
                return 1;
            }
        }
    }
    match fetch(&args.socket) {
        Ok(v) => {
            let rules = v["faults"]["rules"].as_array().cloned().unwrap_or_default();
            if rules.is_empty() {
                println!("no fault rules");
            }
            for r in rules {
                println!(
                    "{:<60} matched {:>10}  applied {:>10}",
                    r["rule"].as_str().unwrap_or("?"),
                    r["matched"],
                    r["applied"]
                );
            }
            0
        }
        Err(e) => {
            eprintln!("roce-emu fault: {e}");
            1
        }
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
    if let Some(o) = v["l2"].as_object() {
        let l2: Vec<String> = o
            .iter()
            .filter(|(_, n)| n.as_u64().is_some_and(|n| n > 0))
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        println!("  l2               {}", l2.join(", "));
    }
    let l = &v["leases"];
    println!(
        "  leases           {} leased, {} in quarantine, {} free",
        l["leased"], l["quarantined"], l["free"]
    );
    println!("processes");
    println!(
        "  {:>8} {:>6} {:>6} {:<17} {:>10} {:>12} {:>10} {:>12} {:>9}  left",
        "pid",
        "uid",
        "block",
        "qpns",
        "rcvd_pkts",
        "rcvd_bytes",
        "sent_pkts",
        "sent_bytes",
        "drops"
    );
    for p in v["processes"].as_array().into_iter().flatten() {
        let n = |k: &str| p[k].as_u64().unwrap_or(0);
        let qpns = p["block"]
            .as_u64()
            .and_then(|b| u8::try_from(b).ok())
            .map(|b| {
                let (lo, hi) = lease::range(b);
                format!("{lo:#08x}-{hi:#08x}")
            })
            .unwrap_or_default();
        println!(
            "  {:>8} {:>6} {:>6} {:<17} {:>10} {:>12} {:>10} {:>12} {:>9}  {}",
            n("pid"),
            n("uid"),
            n("block"),
            qpns,
            n("rcvd_pkts"),
            n("rcvd_bytes"),
            n("sent_pkts"),
            n("sent_bytes"),
            n("ring_full") + n("bad_source") + n("tx_dropped"),
            p["left"].as_str().unwrap_or("")
        );
        let line = |c: &serde_json::Value| {
            c.as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| format!("{k} {v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        let nic = line(&p["nic"]);
        if !nic.is_empty() {
            println!("      nic: {nic}");
        }
        for q in p["qps"].as_array().into_iter().flatten() {
            let qpn = q["qpn"].as_u64().unwrap_or(0);
            println!("      qp {qpn:#08x}: {}", line(&q["counters"]));
        }
        if n("report_errors") > 0 {
            println!(
                "      {} bad counter reports (last: {})",
                n("report_errors"),
                p["report_error"].as_str().unwrap_or("?")
            );
        }
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
