//! People-facing tools: `roce-emu <command>`.

pub mod demo;
pub mod oob;
pub mod pcap;
pub mod perf;
pub mod pingpong;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "roce-emu",
    version,
    about = "A user-space RoCEv2 software NIC and its tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Two NICs on loopback doing every RC operation; every byte verified.
    Demo(demo::Args),
    /// Decode the RoCEv2 frames of a pcap or pcapng file, one line (or JSON object) per frame.
    Pcap(pcap::Args),
    /// RC ping-pong with ibv_rc_pingpong's exchange and output; either side may be the real tool.
    Pingpong(pingpong::Args),
    /// RC bandwidth test with perftest's exchange and table (ib_write_bw, ib_read_bw,
    /// ib_send_bw, ib_atomic_bw); either side may be the real tool.
    Perf(perf::Args),
}

/// A `SECS` option: a positive, finite number of seconds (fractions allowed).
fn seconds(s: &str) -> Result<std::time::Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(std::time::Duration::from_secs_f64(v)),
        _ => Err(format!("{s} is not a positive number of seconds")),
    }
}

/// Runs the command line; returns the process exit status.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match cli.command {
        Command::Pcap(args) => pcap::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Pingpong(args) => pingpong::run(&args),
        Command::Perf(args) => perf::run(&args),
    }
}
