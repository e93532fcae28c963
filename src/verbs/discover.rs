//! Which devices a program sees, as `ibv_get_device_list` lists them.
//!
//! Zero set-up: one device per interface of this machine that is up and has an address, as
//! rxe would be added on each (`rdma link add rxe0 type rxe netdev eth0`): its port serves
//! the interface's IPv4 address (or, without one, its first global IPv6 address), its GID
//! table is rxe's for the interface (`verbs::gids`: the link-local default GID at index 0,
//! that address at 1, the interface's others after it) and its active MTU follows the
//! interface's MTU. Interfaces other than loopback come first (`rxe0`,
//! `rxe1`, ...: the names scripts written for rxe expect); loopback is `rxe_lo`.
//!
//! Configuration overrides it: `ROCE_EMU_DEVICES` (or a file named by `ROCE_EMU_CONFIG`,
//! one entry per line, `#` comments) lists `NAME=[udp:]ADDR[@MTU]` entries separated by
//! commas, spaces or new lines, e.g. `rxe0=10.0.0.1@4096,rxe_lo=127.0.0.1`.
//!
//! `NAME=daemon:SOCKET[@MTU]` is a `roce-emu daemon`'s port: the device's address, MAC,
//! MTU and interface come from the daemon at discovery time (`daemon::client::info`), and
//! opening the device attaches to it.

use crate::backend::ifaddrs::{self, Interface};
use crate::engine::Mtu;
use std::net::IpAddr;
use std::path::PathBuf;

/// Bytes of headers a RoCEv2 packet adds to its payload in the interface's MTU, as rxe
/// counts them (`RXE_MAX_HDR_LENGTH`, drivers/infiniband/sw/rxe/rxe_param.h): the active
/// MTU is the largest IB MTU that fits in what remains.
const RXE_MAX_HDR_LENGTH: u32 = 80;

/// One device: a name, the address its port serves, its MTU and its interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// The device name (`ibv_get_device_name`).
    pub name: String,
    /// The port's address: its GID (`::ffff:a.b.c.d` for IPv4).
    pub ip: IpAddr,
    /// The active MTU (`ibv_port_attr::active_mtu`).
    pub mtu: Mtu,
    /// The interface, when known (zero set-up, or an address found on one).
    pub ifname: Option<String>,
    /// The interface's MAC address (the node GUID is its EUI-64, as rxe's).
    pub mac: [u8; 6],
    /// The `roce-emu daemon` whose port this is (`NAME=daemon:SOCKET`): opening the device
    /// attaches to it (`verbs::Device::daemon`).
    pub daemon: Option<PathBuf>,
    /// The addresses of its interface (getifaddrs order) or of the daemon's port: the GID
    /// table lists them all, as rxe's (`verbs::gids`).
    pub addrs: Vec<IpAddr>,
    /// The addresses are a kernel interface's, and the GID table follows them as they
    /// change (a daemon's TAP or AF_PACKET port has addresses of its own).
    pub follow: bool,
}

impl PortConfig {
    /// The node GUID: the MAC's modified EUI-64 (`addrconf_addr_eui48`, as rxe).
    pub fn node_guid(&self) -> u64 {
        let m = self.mac;
        u64::from_be_bytes([m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
    }

    /// The GID of its address: IPv4 as `::ffff:a.b.c.d` (RoCEv2, IBA A17.8).
    pub fn gid(&self) -> [u8; 16] {
        super::gids::gid_of(self.ip)
    }

    /// Its GID table, as rxe's on the same interface (`verbs::gids`).
    pub fn gid_table(&self) -> super::gids::GidTable {
        super::gids::GidTable::new(
            &self.name,
            self.mac,
            self.ip,
            self.ifname.clone(),
            &self.addrs,
            self.follow,
        )
    }
}

/// A configuration entry that cannot be used; names the entry and what to fix.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("device entry {0:?}: write NAME=ADDR or NAME=ADDR@MTU (e.g. rxe0=10.0.0.1@1024)")]
    Syntax(String),
    #[error("device entry {entry:?}: {addr:?} is not an IPv4 or IPv6 address")]
    Addr { entry: String, addr: String },
    #[error("device entry {entry:?}: MTU {mtu:?} is not 256, 512, 1024, 2048 or 4096")]
    Mtu { entry: String, mtu: String },
    #[error("device entry {0:?}: only udp: and daemon: ports exist so far")]
    Port(String),
    /// A `daemon:` entry whose daemon did not answer (the error names its socket).
    #[error("device entry {entry:?}: {err}")]
    Daemon { entry: String, err: String },
    #[error("device {0:?} is listed twice")]
    Duplicate(String),
    #[error("cannot read {path}: {err}")]
    File { path: String, err: String },
}

/// The devices this process sees: the configuration's, or this machine's interfaces.
pub fn devices() -> Result<Vec<PortConfig>, ConfigError> {
    if let Ok(v) = std::env::var("ROCE_EMU_DEVICES") {
        return parse(&v);
    }
    if let Ok(path) = std::env::var("ROCE_EMU_CONFIG") {
        let text = std::fs::read_to_string(&path).map_err(|e| ConfigError::File {
            path: path.clone(),
            err: e.to_string(),
        })?;
        let lines: Vec<&str> = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or(""))
            .collect();
        return parse(&lines.join("\n"));
    }
    Ok(interfaces())
}

/// Parses `NAME=[udp:]ADDR[@MTU]` entries.
pub fn parse(spec: &str) -> Result<Vec<PortConfig>, ConfigError> {
    let mut out: Vec<PortConfig> = Vec::new();
    for entry in spec.split([',', ' ', '\n', '\t']).filter(|e| !e.is_empty()) {
        let (name, rest) = entry
            .split_once('=')
            .filter(|(n, r)| !n.is_empty() && !r.is_empty())
            .ok_or_else(|| ConfigError::Syntax(entry.into()))?;
        if out.iter().any(|p| p.name == name) {
            return Err(ConfigError::Duplicate(name.into()));
        }
        if let Some(path) = rest.strip_prefix("daemon:") {
            out.push(daemon_entry(entry, name, path)?);
            continue;
        }
        let rest = rest.strip_prefix("udp:").unwrap_or(rest);
        let (addr, mtu) = match rest.split_once('@') {
            Some((a, m)) => (a, Some(m)),
            None => (rest, None),
        };
        // `tap:`, `afpacket:`: ports only a daemon opens (`roce-emu daemon`, then `daemon:`).
        if let Some((kind, _)) = addr.split_once(':') {
            if addr.parse::<IpAddr>().is_err() && kind.len() > 4 || kind == "tap" {
                return Err(ConfigError::Port(entry.into()));
            }
        }
        let ip: IpAddr = addr.parse().map_err(|_| ConfigError::Addr {
            entry: entry.into(),
            addr: addr.into(),
        })?;
        let found = interface_of(ip);
        let mtu = match mtu {
            Some(m) => parse_mtu(entry, m)?,
            // An address of an interface, or one in an interface's subnet (127.0.0.2 on
            // lo): that interface's MTU, as rxe's port MTU follows its netdev.
            None => found
                .as_ref()
                .map(if_mtu)
                .or_else(|| crate::backend::udp::link_mtu(ip))
                .map_or(Mtu::M1024, active_mtu),
        };
        out.push(PortConfig {
            name: name.into(),
            ip,
            mtu,
            ifname: found.as_ref().map(|f| f.name.clone()),
            mac: found.as_ref().map_or([0; 6], |f| f.mac),
            daemon: None,
            addrs: found.as_ref().map_or_else(Vec::new, addrs_of),
            follow: found.is_some(),
        });
    }
    Ok(out)
}

/// Parses an MTU option (`@MTU`) of `entry`.
fn parse_mtu(entry: &str, m: &str) -> Result<Mtu, ConfigError> {
    m.parse()
        .ok()
        .and_then(Mtu::from_bytes)
        .ok_or_else(|| ConfigError::Mtu {
            entry: entry.into(),
            mtu: m.into(),
        })
}

/// A `NAME=daemon:SOCKET[@MTU]` entry: the daemon says what its port is.
fn daemon_entry(entry: &str, name: &str, spec: &str) -> Result<PortConfig, ConfigError> {
    // `@MTU` only when what follows the last `@` is a number: a socket path may hold `@`.
    let (path, mtu) = match spec.rsplit_once('@') {
        Some((p, m)) if !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()) => {
            (p, Some(parse_mtu(entry, m)?))
        }
        _ => (spec, None),
    };
    if path.is_empty() {
        return Err(ConfigError::Syntax(entry.into()));
    }
    let daemon_err = |err: String| ConfigError::Daemon {
        entry: entry.into(),
        err,
    };
    let port = crate::daemon::client::info(path).map_err(|e| daemon_err(e.to_string()))?;
    let Some(&ip) = port.addrs.first() else {
        return Err(daemon_err(format!(
            "the roce-emu daemon at {path} has no address on its port"
        )));
    };
    // A UDP port is an address of some interface, whose addresses are the GIDs; a TAP or
    // AF_PACKET port is an interface, with addresses of its own (the daemon's).
    let (ifname, addrs, follow) = if port.kind == "udp" {
        let found = interface_of(ip);
        let addrs = found.as_ref().map_or_else(|| port.addrs.clone(), addrs_of);
        (found.map(|f| f.name), addrs, true)
    } else {
        (Some(port.name.clone()), port.addrs.clone(), false)
    };
    Ok(PortConfig {
        name: name.into(),
        ip,
        mtu: mtu.unwrap_or_else(|| active_mtu(port.mtu)),
        ifname,
        mac: port.mac,
        daemon: Some(PathBuf::from(path)),
        follow: follow && !addrs.is_empty(),
        addrs,
    })
}

/// rxe's active MTU for an interface MTU (`eth_mtu_int_to_enum`).
pub fn active_mtu(if_mtu: u32) -> Mtu {
    let room = if_mtu.saturating_sub(RXE_MAX_HDR_LENGTH);
    [Mtu::M4096, Mtu::M2048, Mtu::M1024, Mtu::M512]
        .into_iter()
        .find(|m| m.bytes() <= room)
        .unwrap_or(Mtu::M256)
}

/// The addresses of an interface that can be GIDs: IPv4 first, then IPv6 but for
/// link-local addresses (they need a scope: not a GID a peer can reach by address alone).
fn gid_addrs(i: &Interface) -> impl Iterator<Item = IpAddr> + '_ {
    let v4 = i.addrs.iter().map(|a| a.ip).filter(IpAddr::is_ipv4);
    let v6 = i.addrs.iter().map(|a| a.ip).filter(|ip| match ip {
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
        IpAddr::V4(_) => false,
    });
    v4.chain(v6)
}

/// An interface's addresses, as getifaddrs lists them.
fn addrs_of(i: &Interface) -> Vec<IpAddr> {
    i.addrs.iter().map(|a| a.ip).collect()
}

/// The interface's MTU (1500 when it cannot be read).
fn if_mtu(i: &Interface) -> u32 {
    i.mtu().unwrap_or(1500)
}

fn interface_of(ip: IpAddr) -> Option<Interface> {
    ifaddrs::interfaces()
        .into_iter()
        .find(|i| gid_addrs(i).any(|a| a == ip))
}

/// This machine's interfaces as devices (zero set-up).
pub fn interfaces() -> Vec<PortConfig> {
    let mut out = Vec::new();
    let mut n = 0;
    let (lo, others): (Vec<_>, Vec<_>) =
        ifaddrs::interfaces().into_iter().partition(|i| i.loopback);
    for i in others.into_iter().chain(lo) {
        let Some(ip) = gid_addrs(&i).next() else {
            continue;
        };
        if !i.up {
            continue;
        }
        let name = if i.loopback {
            format!("rxe_{}", i.name)
        } else {
            n += 1;
            format!("rxe{}", n - 1)
        };
        out.push(PortConfig {
            name,
            ip,
            mtu: active_mtu(if_mtu(&i)),
            ifname: Some(i.name.clone()),
            mac: i.mac,
            daemon: None,
            addrs: addrs_of(&i),
            follow: true,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_with_and_without_mtu() {
        let d = parse("a=127.0.0.1@4096, b=udp:::1\nc=10.1.2.3").unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!((d[0].name.as_str(), d[0].mtu), ("a", Mtu::M4096));
        assert_eq!(d[1].ip, "::1".parse::<IpAddr>().unwrap());
        assert_eq!(d[2].ip, "10.1.2.3".parse::<IpAddr>().unwrap());
        assert_eq!(
            d[2].gid(),
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3]
        );
    }

    #[test]
    fn bad_entries_name_what_to_fix() {
        assert_eq!(parse("rxe0"), Err(ConfigError::Syntax("rxe0".into())));
        assert!(matches!(parse("x=1.2.3"), Err(ConfigError::Addr { .. })));
        assert!(matches!(
            parse("x=1.2.3.4@1500"),
            Err(ConfigError::Mtu { .. })
        ));
        assert_eq!(
            parse("x=tap:1.2.3.4"),
            Err(ConfigError::Port("x=tap:1.2.3.4".into()))
        );
        assert_eq!(
            parse("x=1.2.3.4 x=1.2.3.5"),
            Err(ConfigError::Duplicate("x".into()))
        );
        // A daemon that is not there: the error names its socket.
        let e = parse("x=daemon:/nonexistent/roce-emu.sock").unwrap_err();
        assert!(matches!(e, ConfigError::Daemon { .. }), "{e:?}");
        assert!(e.to_string().contains("/nonexistent/roce-emu.sock"), "{e}");
        assert_eq!(
            parse("x=daemon:"),
            Err(ConfigError::Syntax("x=daemon:".into()))
        );
    }

    #[test]
    fn active_mtu_is_rxes() {
        assert_eq!(active_mtu(1500), Mtu::M1024);
        assert_eq!(active_mtu(9000), Mtu::M4096);
        assert_eq!(active_mtu(65536), Mtu::M4096);
        assert_eq!(active_mtu(2200), Mtu::M2048);
        assert_eq!(active_mtu(100), Mtu::M256);
    }

    #[test]
    fn node_guid_is_the_mac_eui64() {
        let p = PortConfig {
            name: "x".into(),
            ip: "127.0.0.1".parse().unwrap(),
            mtu: Mtu::M1024,
            ifname: None,
            mac: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
            daemon: None,
            addrs: Vec::new(),
            follow: false,
        };
        assert_eq!(p.node_guid(), 0x5054_00ff_fe12_3456);
    }
}
