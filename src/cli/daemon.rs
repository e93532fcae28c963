//! `roce-emu daemon` (one port shared by the programs of a machine) and `roce-emu fault`
//! (its fault rules at run time), `roce-emu queue` (its egress queue at run time); `roce-emu counters` is in [`super::counters`].

use crate::daemon::control::{self, ToDaemon, ToProcess};
use crate::daemon::port::{PortSpec, PortSpecError};
use crate::daemon::report;
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
    /// A file of `key = value` lines (port, socket, quarantine, pcap, fault, queue, cc,
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
    /// A switch egress queue on the port's transmit side (the congestion point): line
    /// rate, buffer, RED/ECN marking, tail drop, e.g. `rate=1gbit buffer=2MB kmin=40KB
    /// kmax=200KB pmax=0.2 seed=1`; see `roce-emu queue --help`.
    #[arg(long, value_name = "SETTINGS")]
    pub queue: Option<String>,
    /// Congestion-control knobs for every process attached to this daemon (their
    /// engines' DCQCN reaction point and CNP-sending notification point), as mlx5 names
    /// them: `key=value` pairs, e.g. `rp_enable=0` or `min_time_between_cnps=0,
    /// rpg_ai_rate=10mbit`. A program's own (`ROCE_EMU_CC`, a tool's `--cc`) win.
    #[arg(long, value_name = "KNOBS", value_parser = super::cc_knobs)]
    pub cc: Option<String>,
    /// How long an ARP or ND entry stays REACHABLE on a tap: or afpacket: port (default
    /// 60); then it is STALE: still used at once, and re-validated by unicast probes on
    /// its first use (removed, and resolved again, if 3 go unanswered).
    #[arg(long, value_name = "SECS", value_parser = super::seconds)]
    pub neigh_timeout: Option<Duration>,
    /// Longest time the idle daemon polls its port and rings (yielding the CPU each turn)
    /// before it sleeps on them (0: always sleep, which leaves the CPU to the programs).
    #[arg(long = "spin-us", value_name = "MICROSECONDS", default_value_t = crate::verbs::DEFAULT_SPIN_US)]
    pub spin_us: u64,
    /// Exit once no process has been connected, and no QPN block has been leased or in
    /// quarantine, for SECS (what a daemon started on demand does: `daemon::demand`).
    /// Without it the daemon runs until signalled.
    #[arg(long, value_name = "SECS", value_parser = super::seconds)]
    pub idle_exit: Option<Duration>,
}

#[derive(clap::Args, Debug)]
#[command(after_help = RULES_HELP)]
pub struct FaultArgs {
    /// The daemon's control socket (default: the one daemon running at the default
    /// path, $XDG_RUNTIME_DIR/roce-emu/ or /run/roce-emu/).
    #[arg(long = "daemon", alias = "socket", value_name = "SOCKET")]
    pub daemon: Option<PathBuf>,
    /// The rule, as words (`drop 5% in`); several rules separated by `;`. `list` shows the
    /// rules with their counters, `clear` removes them all.
    #[arg(value_name = "RULE", required = true, num_args = 1.., allow_hyphen_values = true)]
    pub rule: Vec<String>,
}

#[derive(clap::Args, Debug)]
#[command(after_help = QUEUE_HELP)]
pub struct QueueArgs {
    /// The daemon's control socket (default: the one daemon running at the default
    /// path, $XDG_RUNTIME_DIR/roce-emu/ or /run/roce-emu/).
    #[arg(long = "daemon", alias = "socket", value_name = "SOCKET")]
    pub daemon: Option<PathBuf>,
    /// `set KEY=VALUE...`, `clear` or `show`.
    #[arg(value_name = "COMMAND", required = true, num_args = 1.., allow_hyphen_values = true)]
    pub command: Vec<String>,
    /// Print the queue's report as JSON.
    #[arg(long)]
    pub json: bool,
}

const QUEUE_HELP: &str = "Commands:
  set KEY=VALUE...   turn the queue on, or change what is given (the rest stays)
  clear              no queue: what is queued leaves at once
  show               the settings and counters
Settings (defaults in brackets):
  rate=RATE     line rate: bits/s or 100mbit, 1gbit, ... [10gbit]
  buffer=SIZE   bytes or 40KB, 2MB (10^3, 10^6), 64KiB, 1MiB [2MB]; a packet that does
                not fit is dropped (tail drop)
  kmin=SIZE kmax=SIZE pmax=P   RED/ECN marking by the depth q an arriving packet sees:
                none up to kmin, probability pmax*(q-kmin)/(kmax-kmin) up to kmax, every
                packet above [5KB, 200KB, 0.01]; only ECN-capable (ECT) packets are marked
                CE, Not-ECT ones are only ever tail-dropped (no WRED drop)
  seed=N        the marking draws' seed [1]
The queue is on the port's transmit side: what the daemon sends to the wire (never a
packet between two processes of the same daemon). Bytes are RoCE datagrams' (BTH..ICRC).";

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
            "port" if args.port.is_none() => {
                args.port = Some(v.parse().map_err(|e: PortSpecError| at(e.to_string()))?)
            }
            "socket" if args.socket.is_none() => args.socket = Some(PathBuf::from(v)),
            "quarantine" if args.quarantine.is_none() => {
                args.quarantine = Some(super::seconds(v).map_err(at)?)
            }
            "pcap" if args.pcap.is_none() => args.pcap = Some(PathBuf::from(v)),
            "fault" => args.faults.push(v.to_string()),
            "queue" if args.queue.is_none() => args.queue = Some(v.to_string()),
            "cc" if args.cc.is_none() => {
                args.cc = Some(super::cc_knobs(v).map_err(at)?);
            }
            "neigh_timeout" if args.neigh_timeout.is_none() => {
                args.neigh_timeout = Some(super::seconds(v).map_err(at)?)
            }
            "port" | "socket" | "quarantine" | "pcap" | "neigh_timeout" | "queue" | "cc" => {}
            _ => {
                return Err(at(format!(
                    "no setting {k:?} (port, socket, quarantine, pcap, fault, queue, cc, neigh_timeout)"
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
        queue: args.queue.clone(),
        cc: args.cc.clone(),
        neigh_timeout: args.neigh_timeout,
        spin_us: args.spin_us,
        idle_exit: args.idle_exit,
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
    cfg.idle_exit = a.idle_exit;
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
    cfg.cc.clone_from(&a.cc);
    if let Some(text) = &a.queue {
        match text.parse() {
            Ok(q) => cfg.queue = Some(q),
            Err(e) => {
                eprintln!("roce-emu daemon: --queue {text:?}: {e}");
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
            let why = match (s.idle, a.idle_exit) {
                (true, Some(t)) => format!(
                    ": idle ({} s with no process and no QPN block in quarantine)",
                    t.as_secs_f64()
                ),
                _ => String::new(),
            };
            println!(
                "roce-emu daemon: stopped{why}; {} packets received, {} sent, {} processes served{}",
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

/// The daemon's counters, as `roce-emu counters --json` prints them.
pub(super) fn fetch(socket: &PathBuf) -> Result<serde_json::Value, String> {
    use std::os::fd::AsFd;
    match ask_keep(socket, &ToDaemon::Counters)? {
        (s, ToProcess::Counters { json }) => {
            report::collect_answer(s.as_fd(), json).map_err(|e| e.to_string())
        }
        (_, other) => Err(format!("unexpected answer {other:?}")),
    }
}

/// `roce-emu fault [--daemon SOCKET] RULE...`: sets each `;`-separated rule, stopping at
/// the first the daemon refuses; then prints the rules in force with their counters.
pub fn fault(args: &FaultArgs) -> i32 {
    let socket = match super::find_daemon::resolve(args.daemon.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("roce-emu fault: {e}");
            return 2;
        }
    };
    let text = args.rule.join(" ");
    for rule in text.split(';').map(str::trim).filter(|r| !r.is_empty()) {
        match ask(&socket, &ToDaemon::Fault { rule: rule.into() }) {
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
    match fetch(&socket) {
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

/// `roce-emu queue [--daemon SOCKET] set KEY=VALUE... | clear | show`: changes the port's
/// egress queue, then prints its settings and counters.
pub fn queue(args: &QueueArgs) -> i32 {
    let socket = match super::find_daemon::resolve(args.daemon.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("roce-emu queue: {e}");
            return 2;
        }
    };
    let command = args.command.join(" ");
    match ask(&socket, &ToDaemon::Queue { command }) {
        Ok(ToProcess::QueueSet { error: Some(e), .. }) => {
            eprintln!("roce-emu queue: {e}");
            2
        }
        Ok(ToProcess::QueueSet {
            error: None,
            report,
        }) => {
            if args.json {
                println!("{report}");
            } else {
                print!("{}", super::counters::render_queue(&report));
            }
            0
        }
        Ok(other) => {
            eprintln!("roce-emu queue: unexpected answer {other:?}");
            1
        }
        Err(e) => {
            eprintln!("roce-emu queue: {e}");
            1
        }
    }
}
