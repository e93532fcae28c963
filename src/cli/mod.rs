//! People-facing tools: `roce-emu <command>`.

pub mod conform;
pub mod counters;
pub mod daemon;
pub mod demo;
pub mod dropin;
pub mod find_daemon;
pub mod install;
pub mod ladder;
pub mod ladder_live;
pub mod learn;
pub mod oob;
pub mod pcap;
pub mod perf;
pub mod pingpong;
pub mod plot;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "roce-emu",
    version,
    about = "A user-space RoCEv2 software NIC and its tools"
)]
struct Cli {
    /// More log lines on stderr: -v info, -vv debug (the exchange steps), -vvv trace.
    /// RUST_LOG, when set, takes precedence (e.g. RUST_LOG=roce_emu::cli=debug).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Two NICs on loopback doing every RC operation; every byte verified.
    Demo(demo::Args),
    /// Decode the RoCEv2 frames of a pcap or pcapng file, one line (or JSON object) per frame.
    Pcap(pcap::Args),
    /// Draw a capture as a ladder per QP pair (requester left, responder right, time down):
    /// PSNs, ACKs and NAKs, retransmissions and why, lost PSNs, RNR and ACK-timeout waits;
    /// `--html FILE` also writes it as a page.
    Ladder(ladder::Args),
    /// RC ping-pong with ibv_rc_pingpong's exchange and output; either side may be the real tool.
    Pingpong(pingpong::Args),
    /// RC bandwidth test with perftest's exchange and table (ib_write_bw, ib_read_bw,
    /// ib_send_bw, ib_atomic_bw); either side may be the real tool.
    Perf(perf::Args),
    /// Print the shell lines that make unmodified RDMA programs use roce-emu
    /// (LD_LIBRARY_PATH to the drop-in libibverbs.so.1).
    Env(dropin::EnvArgs),
    /// Run an unmodified RDMA program on roce-emu: `roce-emu run -- ib_write_bw`.
    Run(dropin::RunArgs),
    /// List the devices programs see through the drop-in, as ibv_devinfo does.
    Devinfo(dropin::DevinfoArgs),
    /// Own one port (UDP, TAP, AF_PACKET) and share it among the programs of this machine.
    Daemon(daemon::DaemonArgs),
    /// A daemon's counters: the port's and each process's.
    Counters(counters::CountersArgs),
    /// Set, list or clear a daemon's fault rules at run time: `roce-emu fault [--daemon
    /// SOCKET] drop 5% in`.
    Fault(daemon::FaultArgs),
    /// Set, show or clear a daemon's egress queue (the congestion point: line rate,
    /// buffer, RED/ECN marking) at run time: `roce-emu queue set rate=1gbit kmin=40KB`.
    Queue(daemon::QueueArgs),
    /// Draw a record of `roce-emu counters --watch SECS --record FILE` as SVG: each
    /// flow's rate and the port's queue depth over time.
    Plot(plot::Args),
    /// Lessons: a scripted exchange between two simulated NICs (a lost packet, an RNR
    /// NAK, a lost ACK, ...) drawn as a ladder and explained; `--list` names them.
    Learn(learn::Args),
    /// Play the conformance scripts of spec/ against roce-emu and other NICs' agents
    /// (real rxe in the lab), packet by packet; print the matrix.
    Conform(conform::Args),
    /// Write the man pages and shell completions (for tools/install.sh).
    #[command(hide = true)]
    GenDocs(install::GenDocsArgs),
}

/// The options of every command that opens a NIC.
#[derive(clap::Args, Debug, Clone)]
pub struct NicArgs {
    /// Longest time the NIC polls for the next packet before it sleeps on the socket
    /// (0: always sleep, which leaves the CPU to a peer on the same machine).
    #[arg(long = "spin-us", value_name = "MICROSECONDS", default_value_t = crate::verbs::DEFAULT_SPIN_US)]
    pub spin_us: u64,
    /// Write every packet the NIC sends and receives to a pcap file, one frame per packet
    /// (decodable by tshark and `roce-emu pcap`); the demo writes one per NIC, the NIC's
    /// address added to the name.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<std::path::PathBuf>,
    /// One UDP datagram per packet (no GSO trains; a private port's: a daemon's port sends
    /// as its daemon does).
    #[arg(long)]
    pub no_gso: bool,
    /// Open UDP port 4791 on the address in this process alone, instead of attaching to
    /// the address's daemon (started on demand if none runs): no other NIC may use the
    /// address meanwhile, and each QP sends from its own source port as rxe's do.
    #[arg(long, conflicts_with = "daemon")]
    pub private_port: bool,
    /// Attach to the `roce-emu daemon` listening on this Unix socket instead of opening a
    /// port: the NIC's address (its GID) is the daemon's port's, --bind is then only the
    /// TCP exchange's address, and its QPs are numbered in the block the daemon leases.
    /// Not for the demo.
    #[arg(long, value_name = "SOCKET")]
    pub daemon: Option<std::path::PathBuf>,
    /// Congestion control (DCQCN's reaction point, the CNP-sending notification point),
    /// as mlx5 names its knobs: `key=value` pairs, e.g. `rp_enable=0` (no rate control),
    /// `min_time_between_cnps=0,rpg_ai_rate=10mbit`; laid over the attached daemon's
    /// `--cc` and the defaults (both points on, line rate 100 Gbit/s).
    #[arg(long, value_name = "KNOBS", value_parser = cc_knobs)]
    pub cc: Option<String>,
}

/// A `--cc` value: checked here, kept as written (it is laid over other settings).
pub(crate) fn cc_knobs(s: &str) -> Result<String, String> {
    crate::verbs::CcConfig::default()
        .apply(s)
        .map(|()| s.to_string())
        .map_err(|e| e.to_string())
}

impl NicArgs {
    /// The device these options describe on `ip`, with the capture at `pcap`.
    pub fn device(
        &self,
        ip: std::net::IpAddr,
        pcap: Option<std::path::PathBuf>,
    ) -> crate::verbs::Device {
        let mut dev = crate::verbs::Device::new(ip);
        dev.pcap = pcap;
        dev.gso = !self.no_gso;
        dev.share = !self.private_port;
        dev.daemon.clone_from(&self.daemon);
        dev.cc.clone_from(&self.cc);
        dev
    }

    pub fn spin(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.spin_us)
    }
}

/// A `SECS` option: a positive, finite number of seconds (fractions allowed).
fn seconds(s: &str) -> Result<std::time::Duration, String> {
    // Longest accepted: a year, far beyond any timer here, and far from Duration's limits
    // (a time plus it never overflows).
    const MAX: f64 = 365.0 * 24.0 * 3600.0;
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= MAX => Ok(std::time::Duration::from_secs_f64(v)),
        Ok(v) if v.is_finite() && v > MAX => {
            Err(format!("{s} seconds is too long (at most {MAX} s, a year)"))
        }
        _ => Err(format!("{s} is not a positive number of seconds")),
    }
}

/// Logging through `tracing` to stderr (stdout is the tools' output, which scripts parse):
/// warnings only by default, more with each `-v`, or whatever `RUST_LOG` says.
fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let (filter, bad_env) = match from_env.map(|v| EnvFilter::try_new(&v).map_err(|e| (v, e))) {
        Some(Ok(f)) => (f, None),
        Some(Err(bad)) => (EnvFilter::new(level), Some(bad)),
        None => (EnvFilter::new(level), None),
    };
    let stderr = std::io::stderr();
    let ansi = std::io::IsTerminal::is_terminal(&stderr);
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
    if let Some((v, e)) = bad_env {
        tracing::warn!("RUST_LOG={v:?} ignored ({e}); using {level}");
    }
}

/// Runs the command line; returns the process exit status.
pub fn main() -> i32 {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    tracing::debug!(command = ?cli.command, "starting");
    match cli.command {
        Command::Pcap(args) => pcap::run(&args),
        Command::Ladder(args) => ladder::run(&args),
        Command::Demo(args) if args.nic.daemon.is_some() => {
            eprintln!(
                "roce-emu demo: --daemon is not for the demo (it runs two NICs on two \
                 addresses of its own); use pingpong or perf with --daemon"
            );
            2
        }
        Command::Demo(args) => demo::run(&args),
        Command::Pingpong(args) => pingpong::run(&args),
        Command::Perf(args) => perf::run(&args),
        Command::Env(args) => dropin::env(&args),
        Command::Run(args) => dropin::run(&args),
        Command::Devinfo(args) => dropin::devinfo(&args),
        Command::Daemon(args) => daemon::run(&args),
        Command::Counters(args) => counters::counters(&args),
        Command::Fault(args) => daemon::fault(&args),
        Command::Queue(args) => daemon::queue(&args),
        Command::Plot(args) => plot::run(&args),
        Command::Conform(args) => conform::run(&args),
        Command::Learn(args) => learn::run(&args),
        Command::GenDocs(args) => install::run(&args),
    }
}
