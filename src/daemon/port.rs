//! Which port a daemon owns: `--port udp:ADDR | tap:NAME,ADDR/PREFIX[,ADDR6/PREFIX] |
//! afpacket:IFACE[,ADDR]` (the same text in a config file's `port =` line).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

const USAGE: &str = "write udp:ADDR, tap:NAME,ADDR/PREFIX[,ADDR6/PREFIX] or afpacket:IFACE[,ADDR]";

/// Why a port text was refused; each says how to write it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortSpecError {
    #[error("{0:?}: {USAGE}")]
    Usage(String),
    #[error("{text:?}: no port kind {kind:?}; {USAGE}")]
    NoKind { text: String, kind: String },
    #[error("{0:?} is not an IPv4 or IPv6 address")]
    NotAddress(String),
    #[error("{0:?}: write ADDR/PREFIX, e.g. 10.0.0.2/24")]
    NotCidr(String),
    #[error("{text:?} is not a prefix length of 0 to {max}")]
    BadPrefix { text: String, max: u8 },
    #[error("{0:?}: write tap:NAME,ADDR/PREFIX[,ADDR6/PREFIX]")]
    TapUsage(String),
    #[error("{0:?}: write afpacket:IFACE[,ADDR]")]
    AfPacketUsage(String),
    #[error("{text:?}: a second {family} address ({cidr})")]
    SecondAddress {
        text: String,
        family: &'static str,
        cidr: String,
    },
    #[error("{0:?} is not an interface name (1 to 15 characters, no '/' or ':')")]
    IfaceName(String),
}

/// An interface address with its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl FromStr for Cidr {
    type Err = PortSpecError;
    fn from_str(s: &str) -> Result<Cidr, PortSpecError> {
        let (a, p) = s
            .split_once('/')
            .ok_or_else(|| PortSpecError::NotCidr(s.into()))?;
        let addr: IpAddr = a.parse().map_err(|_| PortSpecError::NotAddress(a.into()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix =
            p.parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| PortSpecError::BadPrefix {
                    text: p.into(),
                    max,
                })?;
        Ok(Cidr { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortSpec {
    /// UDP port 4791 on an address of this machine (the kernel owns L2).
    Udp(IpAddr),
    /// A TAP interface the daemon creates (or attaches to, if it exists) with its own MAC
    /// and these addresses: an IPv4 one, an IPv6 one, or both.
    Tap {
        name: String,
        v4: Option<(Ipv4Addr, u8)>,
        v6: Option<(Ipv6Addr, u8)>,
    },
    /// AF_PACKET on an existing interface, with its MAC; the address is the interface's
    /// first IPv4 address unless given.
    AfPacket { iface: String, addr: Option<IpAddr> },
}

fn iface_name(n: &str) -> Result<String, PortSpecError> {
    // IFNAMSIZ is 16 with the NUL; the kernel refuses '/', ':' and white space in names.
    let ok = !n.is_empty()
        && n.len() < 16
        && n.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':');
    if ok {
        Ok(n.to_string())
    } else {
        Err(PortSpecError::IfaceName(n.into()))
    }
}

impl FromStr for PortSpec {
    type Err = PortSpecError;
    fn from_str(s: &str) -> Result<PortSpec, PortSpecError> {
        let (kind, rest) = s
            .split_once(':')
            .ok_or_else(|| PortSpecError::Usage(s.into()))?;
        let parts: Vec<&str> = rest.split(',').collect();
        match kind {
            "udp" => {
                let ip = rest
                    .parse()
                    .map_err(|_| PortSpecError::NotAddress(rest.into()))?;
                Ok(PortSpec::Udp(ip))
            }
            "tap" => {
                if parts.len() < 2 || parts.len() > 3 {
                    return Err(PortSpecError::TapUsage(s.into()));
                }
                let name = iface_name(parts[0])?;
                let (mut v4, mut v6) = (None, None);
                for p in &parts[1..] {
                    match p.parse::<Cidr>()? {
                        Cidr {
                            addr: IpAddr::V4(a),
                            prefix,
                        } if v4.is_none() => v4 = Some((a, prefix)),
                        Cidr {
                            addr: IpAddr::V6(a),
                            prefix,
                        } if v6.is_none() => v6 = Some((a, prefix)),
                        c => {
                            return Err(PortSpecError::SecondAddress {
                                text: s.into(),
                                family: family(c.addr),
                                cidr: c.to_string(),
                            })
                        }
                    }
                }
                Ok(PortSpec::Tap { name, v4, v6 })
            }
            "afpacket" => {
                if parts.len() > 2 {
                    return Err(PortSpecError::AfPacketUsage(s.into()));
                }
                let iface = iface_name(parts[0])?;
                let addr = match parts.get(1) {
                    Some(a) => Some(
                        a.parse()
                            .map_err(|_| PortSpecError::NotAddress((*a).into()))?,
                    ),
                    None => None,
                };
                Ok(PortSpec::AfPacket { iface, addr })
            }
            _ => Err(PortSpecError::NoKind {
                text: s.into(),
                kind: kind.into(),
            }),
        }
    }
}

fn family(a: IpAddr) -> &'static str {
    if a.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

impl fmt::Display for PortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortSpec::Udp(ip) => write!(f, "udp:{ip}"),
            PortSpec::Tap { name, v4, v6 } => {
                write!(f, "tap:{name}")?;
                if let Some((a, p)) = v4 {
                    write!(f, ",{a}/{p}")?;
                }
                if let Some((a, p)) = v6 {
                    write!(f, ",{a}/{p}")?;
                }
                Ok(())
            }
            PortSpec::AfPacket { iface, addr } => {
                write!(f, "afpacket:{iface}")?;
                if let Some(a) = addr {
                    write!(f, ",{a}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_parses_and_prints_back() {
        for s in [
            "udp:127.0.0.1",
            "udp:::1",
            "tap:roce0,10.7.0.2/24",
            "tap:roce0,10.7.0.2/24,fd00:7::2/64",
            "tap:r,fd00::2/64",
            "afpacket:veth0",
            "afpacket:eth0,192.0.2.7",
        ] {
            let p: PortSpec = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(p.to_string(), s);
        }
    }

    #[test]
    fn mistakes_name_what_to_fix() {
        for (s, want) in [
            ("udp", "write udp:ADDR"),
            ("udp:10.0.0", "not an IPv4 or IPv6 address"),
            ("tap:roce0", "write tap:NAME"),
            ("tap:roce0,10.0.0.2", "ADDR/PREFIX"),
            ("tap:roce0,10.0.0.2/33", "prefix length of 0 to 32"),
            ("tap:roce0,10.0.0.2/24,10.0.0.3/24", "a second IPv4 address"),
            ("tap:a/b,10.0.0.2/24", "not an interface name"),
            ("tap:abcdefghijklmnop,10.0.0.2/24", "not an interface name"),
            ("afpacket:eth0,x", "not an IPv4 or IPv6 address"),
            ("vxlan:1", "no port kind"),
        ] {
            let e = s.parse::<PortSpec>().unwrap_err().to_string();
            assert!(e.contains(want), "{s}: {e}");
        }
    }
}
