//! `roce-emu env`, `roce-emu run` and `roce-emu devinfo`: using the drop-in
//! `libibverbs.so.1` (abi/) and `librdmacm.so.1` (rdmacm/), built side by side by
//! tools/dropin/build.sh, with unmodified programs.
//!
//! The libraries are found next to this binary (`target/<profile>/dropin/`, where the build
//! script puts it), in `../lib/roce-emu/` beside it (`PREFIX/bin/roce-emu` and
//! `PREFIX/lib/roce-emu/`, where tools/install.sh puts them) or in `ROCE_EMU_DROPIN_DIR`. `run` puts that folder first on the
//! program's `LD_LIBRARY_PATH` and replaces itself with the program, so the program's exit
//! status and signals are its own.

use crate::verbs::discover::{self, PortConfig};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct EnvArgs {
    /// The devices programs see, as ROCE_EMU_DEVICES takes them: NAME=ADDR[@MTU] (a port
    /// of this NIC's own) or NAME=daemon:SOCKET[@MTU] (a `roce-emu daemon`'s port), comma
    /// separated (default: one per interface of this machine).
    #[arg(long, value_name = "NAME=ADDR[@MTU]|NAME=daemon:SOCKET,...")]
    pub devices: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub env: EnvArgs,
    /// The program and its arguments, after `--`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    pub command: Vec<String>,
}

#[derive(clap::Args, Debug)]
pub struct DevinfoArgs {
    #[command(flatten)]
    pub env: EnvArgs,
}

/// Where the drop-in library is, or what to do to build it.
pub fn library_dir() -> Result<PathBuf, String> {
    let candidates = match std::env::var_os("ROCE_EMU_DROPIN_DIR") {
        Some(d) => vec![PathBuf::from(d)],
        None => {
            let exe = std::env::current_exe()
                .map_err(|e| format!("cannot find this program's own path: {e}"))?;
            let bin = exe.parent().ok_or("this program's path has no folder")?;
            // The build tree's layout first, then an installed one (tools/install.sh).
            vec![bin.join("dropin"), bin.join("../lib/roce-emu")]
        }
    };
    for dir in &candidates {
        if dir.join("libibverbs.so.1").is_file() {
            // Canonical, so the program's library path names no `..`.
            return Ok(std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone()));
        }
    }
    let looked: Vec<String> = candidates.iter().map(|d| d.display().to_string()).collect();
    Err(format!(
        "no libibverbs.so.1 in {}: build it with tools/dropin/build.sh, install it with \
         tools/install.sh (or set ROCE_EMU_DROPIN_DIR to its folder)",
        looked.join(" or ")
    ))
}

/// The device list is checked here so that a bad `--devices` is a clear error now, not
/// "no devices" inside the program.
fn check_devices(devices: Option<&str>) -> Result<Vec<PortConfig>, String> {
    let found = match devices {
        Some(d) => discover::parse(d),
        None => discover::devices(),
    };
    found.map_err(|e| e.to_string())
}

fn library_path(dir: &std::path::Path) -> String {
    match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{}:{old}", dir.display()),
        _ => dir.display().to_string(),
    }
}

/// Single-quoted for a POSIX shell.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

pub fn env(args: &EnvArgs) -> i32 {
    let dir = match library_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("roce-emu env: {e}");
            return 1;
        }
    };
    if let Err(e) = check_devices(args.devices.as_deref()) {
        eprintln!("roce-emu env: {e}");
        return 2;
    }
    println!("export LD_LIBRARY_PATH={}", quoted(&library_path(&dir)));
    if let Ok(me) = std::env::current_exe() {
        // The daemon a program starts on demand is this roce-emu (`daemon::demand`).
        println!(
            "export {}={}",
            crate::daemon::demand::BIN_VAR,
            quoted(&me.display().to_string())
        );
    }
    if let Some(d) = &args.devices {
        println!("export ROCE_EMU_DEVICES={}", quoted(d));
    }
    if dir.join("librdmacm.so.1").is_file() {
        println!(
            "# roce-emu's libibverbs.so.1 and librdmacm.so.1 are now the ones programs of this \
             shell load"
        );
    } else {
        println!("# roce-emu's libibverbs.so.1 is now the one programs of this shell load");
    }
    0
}

pub fn run(args: &RunArgs) -> i32 {
    let dir = match library_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("roce-emu run: {e}");
            return 1;
        }
    };
    if let Err(e) = check_devices(args.env.devices.as_deref()) {
        eprintln!("roce-emu run: {e}");
        return 2;
    }
    let (prog, rest) = args.command.split_first().expect("clap requires PROGRAM");
    let mut cmd = std::process::Command::new(prog);
    cmd.args(rest).env("LD_LIBRARY_PATH", library_path(&dir));
    if let Ok(me) = std::env::current_exe() {
        // The daemon the program starts on demand is this roce-emu (`daemon::demand`).
        cmd.env(crate::daemon::demand::BIN_VAR, me);
    }
    if let Some(d) = &args.env.devices {
        cmd.env("ROCE_EMU_DEVICES", d);
    }
    // Only returns on failure.
    let err = cmd.exec();
    eprintln!("roce-emu run: cannot run {prog}: {err}");
    if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// The devices as `ibv_devinfo` prints them (its summary form), without loading the library.
pub fn devinfo(args: &DevinfoArgs) -> i32 {
    let devs = match check_devices(args.env.devices.as_deref()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("roce-emu devinfo: {e}");
            return 2;
        }
    };
    if devs.is_empty() {
        println!("No IB devices found");
        return 1;
    }
    for p in &devs {
        let g = p.node_guid();
        let guid = format!(
            "{:04x}:{:04x}:{:04x}:{:04x}",
            g >> 48,
            (g >> 32) & 0xffff,
            (g >> 16) & 0xffff,
            g & 0xffff
        );
        println!("hca_id:\t{}", p.name);
        println!("\ttransport:\t\t\tInfiniBand (0)");
        println!("\tnode_guid:\t\t\t{guid}");
        println!("\tvendor_id:\t\t\t0xffffff");
        println!("\tphys_port_cnt:\t\t\t1");
        println!("\t\tport:\t1");
        println!("\t\t\tstate:\t\t\tPORT_ACTIVE (4)");
        println!("\t\t\tmax_mtu:\t\t4096 (5)");
        println!("\t\t\tactive_mtu:\t\t{} ({})", p.mtu.bytes(), p.mtu as u8);
        println!("\t\t\tlink_layer:\t\tEthernet");
        // As ibv_devinfo -v lists the GID table (rxe's layout, `verbs::gids`).
        for (i, ip) in p.gid_table().entries() {
            let gid = std::net::Ipv6Addr::from(crate::verbs::gids::gid_of(ip));
            println!("\t\t\tGID[{i:>3}]:\t\t{gid}, RoCE v2");
        }
        if let Some(i) = &p.ifname {
            println!("\t\t\tnetdev:\t\t\t{i}");
        }
        println!();
    }
    0
}
