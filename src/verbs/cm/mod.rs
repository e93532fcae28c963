//! The library side of rdma_cm (design wave3.md §3, contract §3): event channels, the
//! connection to each device's connection manager (the daemon's), and which device an
//! address belongs to. The drop-in `librdmacm.so.1` (`rdmacm/`) is a C skin over this;
//! the state machine itself is the daemon's (`crate::cm`).
//!
//! - [`EventChannel`]: a queue of events with a pollable fd (one token per event);
//! - [`Conn`]: one connection per daemon per process ([`connect`] shares them), synchronous
//!   commands from any thread, a dispatcher thread routing events to their id's channel;
//! - [`CmDevice`], [`devices`], [`by_src`], [`by_dst`]: the devices with a connection
//!   manager and the device an address resolves to (the one holding the source, or the
//!   one the kernel routes the destination through).

mod channel;
mod conn;

pub use channel::{Delivered, EventChannel};
pub use conn::{Conn, Welcome, COMMAND_TIMEOUT};

use crate::daemon::client::AttachError;
use crate::daemon::demand;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

/// Why an rdma_cm call failed; [`CmError::errno`] is what librdmacm sets.
#[derive(Debug, thiserror::Error)]
pub enum CmError {
    /// The daemon could not be reached, or refused the connection manager hello.
    #[error(transparent)]
    Daemon(AttachError),
    /// No daemon could be found or started for a zero-configuration device.
    #[error(transparent)]
    Demand(#[from] demand::DaemonError),
    /// The manager refused the command (the kernel's errno for the same case).
    #[error("{what}")]
    Errno { errno: i32, what: String },
    /// The daemon went away.
    #[error("the connection manager at {path} went away: {why}")]
    Gone { path: PathBuf, why: String },
    /// No device holds or routes the address.
    #[error("no roce-emu device {what} {ip} (ROCE_EMU_DEVICES lists the devices)")]
    NoDevice { what: &'static str, ip: IpAddr },
    /// No usable device (the device list failed, or names none of roce-emu's).
    #[error("device {device}: {why}")]
    NoDaemon { device: String, why: String },
    #[error("device list: {0}")]
    Config(#[from] crate::verbs::discover::ConfigError),
}

impl CmError {
    /// The errno librdmacm sets for it (the kernel's for the same failure).
    pub fn errno(&self) -> i32 {
        match self {
            CmError::Daemon(_)
            | CmError::Demand(_)
            | CmError::NoDaemon { .. }
            | CmError::Config(_) => libc::ENODEV,
            CmError::Errno { errno, .. } => *errno,
            CmError::Gone { .. } => libc::ENODEV,
            CmError::NoDevice { what, .. } => {
                if *what == "holds" {
                    libc::EADDRNOTAVAIL
                } else {
                    libc::ENETUNREACH
                }
            }
        }
    }
}

/// A device a connection manager serves: its name (`ibv_get_device_name`), addresses and
/// daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmDevice {
    pub name: String,
    /// The device's own address (its GID; the on-demand daemon's port).
    pub ip: IpAddr,
    pub addrs: Vec<IpAddr>,
    pub node_guid: u64,
    /// `NAME=daemon:SOCK`; `None`: a zero-configuration device, whose daemon is started
    /// on demand ([`daemon_of`]).
    pub daemon: Option<PathBuf>,
}

/// The devices, in `ibv_get_device_list` order.
pub fn devices() -> Result<Vec<CmDevice>, CmError> {
    Ok(crate::verbs::discover::devices()?
        .into_iter()
        .map(|p| CmDevice {
            node_guid: p.node_guid(),
            ip: p.ip,
            name: p.name,
            // A device on an address no interface holds (127.0.41.5, in lo's subnet) has
            // no interface addresses: its own address is still its (its UDP port binds
            // it), so a bind to it is not EADDRNOTAVAIL (found by spec/cm on the C agent).
            addrs: if p.addrs.is_empty() {
                vec![p.ip]
            } else {
                p.addrs
            },
            daemon: p.daemon,
        })
        .collect())
}

/// The device holding `ip` (a bind, or a resolve with a source address).
pub fn by_src(devs: &[CmDevice], ip: IpAddr) -> Result<usize, CmError> {
    devs.iter()
        .position(|d| d.addrs.contains(&ip))
        .ok_or(CmError::NoDevice { what: "holds", ip })
}

/// The device the destination is reached through: the one holding it (loopback), else a
/// daemon's frame port (TAP, AF_PACKET) whose subnet holds it (its own L2 reaches it, and
/// the machine's routes know nothing of that port), else the one holding the source
/// address the kernel's route to it gives (a UDP socket `connect`ed to it: no packet
/// leaves).
pub fn by_dst(devs: &[CmDevice], dst: IpAddr) -> Result<usize, CmError> {
    if let Ok(i) = by_src(devs, dst) {
        return Ok(i);
    }
    if let Some(i) = devs.iter().position(|d| frame_port_reaches(d, dst)) {
        return Ok(i);
    }
    let unreachable = CmError::NoDevice {
        what: "routes to",
        ip: dst,
    };
    let any: SocketAddr = match dst {
        IpAddr::V4(_) => "0.0.0.0:0".parse().expect("literal"),
        IpAddr::V6(_) => "[::]:0".parse().expect("literal"),
    };
    let s = UdpSocket::bind(any).map_err(|_| CmError::NoDevice {
        what: "routes to",
        ip: dst,
    })?;
    if s.connect(SocketAddr::new(dst, 9)).is_err() {
        return Err(unreachable);
    }
    match s.local_addr() {
        Ok(a) => by_src(devs, a.ip()).map_err(|_| unreachable),
        Err(_) => Err(unreachable),
    }
}

/// Whether `dev` is a daemon's frame port with `dst` in one of its subnets (asked of the
/// daemon: `Info` carries the prefixes; a UDP port has none).
fn frame_port_reaches(dev: &CmDevice, dst: IpAddr) -> bool {
    let Some(path) = &dev.daemon else {
        return false;
    };
    let Ok(port) = crate::daemon::client::info(path) else {
        return false;
    };
    port.addrs
        .iter()
        .zip(&port.prefixes)
        .any(|(a, &p)| in_subnet(*a, p, dst))
}

/// `dst` is in `addr`/`prefix`.
fn in_subnet(addr: IpAddr, prefix: u8, dst: IpAddr) -> bool {
    match (addr, dst) {
        (IpAddr::V4(a), IpAddr::V4(d)) if prefix <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(d) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(d)) if prefix <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(d) & mask
        }
        _ => false,
    }
}

/// The daemon socket of a device: its `daemon:` entry, or the on-demand daemon of its
/// address (`daemon::demand::ensure_udp`: found, or started, as the data path's
/// zero-configuration attach does).
pub fn daemon_of(dev: &CmDevice) -> Result<PathBuf, CmError> {
    if let Some(p) = &dev.daemon {
        return Ok(p.clone());
    }
    // Found once per address while this process's connection to it lives: finding it
    // is a connection, a round trip and /proc reads (a millisecond in a debug build, on
    // every id's bind or resolve: perftest -R's server re-listens against its client's
    // next connect, and lost).
    let pid = std::process::id();
    let found = lock(&FOUND)
        .get(&dev.ip)
        .filter(|f| f.0 == pid)
        .map(|f| f.1.clone());
    if let Some(path) = found.filter(|p| live(p)) {
        return Ok(path);
    }
    let path = demand::ensure_udp(dev.ip)?;
    lock(&FOUND).insert(dev.ip, (pid, path.clone()));
    Ok(path)
}

/// The on-demand daemons found, by address: (pid that found it, socket).
static FOUND: LazyLock<Mutex<HashMap<IpAddr, (u32, PathBuf)>>> = LazyLock::new(Default::default);

type Conns = HashMap<PathBuf, (u32, Arc<Conn>)>;
/// The process's connections to daemons, by socket: (pid that made it, connection).
static CONNS: LazyLock<Mutex<Conns>> = LazyLock::new(Default::default);

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether this process has a connection to the daemon at `path` that still answers.
fn live(path: &Path) -> bool {
    let pid = std::process::id();
    lock(&CONNS)
        .get(path)
        .is_some_and(|(owner, c)| *owner == pid && !c.is_gone())
}

/// The process's connection to the daemon at `path`: made once, shared by every id and
/// thread (one per daemon per process); a connection whose daemon went away is replaced,
/// and so is one a forked child inherited (its dispatcher thread is the parent's: the
/// child gets a connection, and an owner in the manager, of its own; qperf's server
/// forks a child per test).
pub fn connect(path: &Path) -> Result<Arc<Conn>, CmError> {
    let pid = std::process::id();
    let mut map = lock(&CONNS);
    if let Some((owner, c)) = map.get(path) {
        if *owner == pid && !c.is_gone() {
            return Ok(c.clone());
        }
    }
    let c = Conn::connect(path)?;
    if let Some((owner, old)) = map.insert(path.to_path_buf(), (pid, c.clone())) {
        if owner != pid {
            // The parent's: its socket is the parent's connection too; leave it be.
            std::mem::forget(old);
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(in_subnet(ip("10.97.0.2"), 24, ip("10.97.0.3")));
        assert!(!in_subnet(ip("10.97.0.2"), 24, ip("10.97.1.3")));
        assert!(in_subnet(ip("10.97.0.2"), 0, ip("192.0.2.1")));
        assert!(in_subnet(ip("10.97.0.2"), 32, ip("10.97.0.2")));
        assert!(!in_subnet(ip("10.97.0.2"), 32, ip("10.97.0.3")));
        assert!(in_subnet(ip("fd00:97::2"), 64, ip("fd00:97::3")));
        assert!(!in_subnet(ip("fd00:97::2"), 64, ip("fd00:98::3")));
        assert!(!in_subnet(ip("10.97.0.2"), 24, ip("fd00:97::3")));
        assert!(!in_subnet(ip("10.97.0.2"), 33, ip("10.97.0.2")));
    }

    fn dev(name: &str, ip: &str) -> CmDevice {
        CmDevice {
            name: name.into(),
            ip: ip.parse().unwrap(),
            addrs: vec![ip.parse().unwrap()],
            node_guid: 1,
            daemon: None,
        }
    }

    #[test]
    fn the_device_holding_an_address_or_routing_to_it() {
        let devs = [dev("a", "127.0.0.1"), dev("b", "127.0.0.2")];
        assert_eq!(by_src(&devs, "127.0.0.2".parse().unwrap()).unwrap(), 1);
        let e = by_src(&devs, "10.9.9.9".parse().unwrap()).unwrap_err();
        assert_eq!(e.errno(), libc::EADDRNOTAVAIL);
        assert_eq!(by_dst(&devs, "127.0.0.1".parse().unwrap()).unwrap(), 0);
        // 127.0.0.3 routes through lo from 127.0.0.1 (the kernel's choice of source).
        assert_eq!(by_dst(&devs, "127.0.0.3".parse().unwrap()).unwrap(), 0);
        // TEST-NET-3 from no device's address: unreachable (no route, or another source).
        let e = by_dst(&devs, "203.0.113.7".parse().unwrap()).unwrap_err();
        assert_eq!(e.errno(), libc::ENETUNREACH);
    }
}
