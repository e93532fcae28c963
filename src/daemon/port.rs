//! Which port a daemon owns: `--port udp:ADDR | tap:NAME,ADDR/PREFIX[,ADDR6/PREFIX] |
//! afpacket:IFACE[,ADDR]` (the same text in a config file's `port =` line).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An interface address with its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Cidr, String> {
        let (a, p) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: write ADDR/PREFIX, e.g. 10.0.0.2/24"))?;
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("{a:?} is not an IPv4 or IPv6 address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = p
            .parse::<u8>()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("{p:?} is not a prefix length of 0 to {max}"))?;
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

fn iface_name(n: &str) -> Result<String, String> {
    // IFNAMSIZ is 16 with the NUL; the kernel refuses '/', ':' and white space in names.
    let ok = !n.is_empty()
        && n.len() < 16
        && n.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':');
    if ok {
        Ok(n.to_string())
    } else {
        Err(format!(
            "{n:?} is not an interface name (1 to 15 characters, no '/' or ':')"
        ))
    }
}

impl FromStr for PortSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<PortSpec, String> {
        let usage = "write udp:ADDR, tap:NAME,ADDR/PREFIX[,ADDR6/PREFIX] or afpacket:IFACE[,ADDR]";
        let (kind, rest) = s.split_once(':').ok_or_else(|| format!("{s:?}: {usage}"))?;
        let parts: Vec<&str> = rest.split(',').collect();
        match kind {
            "udp" => {
                let ip = rest
                    .parse()
                    .map_err(|_| format!("udp:{rest}: {rest:?} is not an IPv4 or IPv6 address"))?;
                Ok(PortSpec::Udp(ip))
            }
            "tap" => {
                if parts.len() < 2 || parts.len() > 3 {
                    return Err(format!("{s:?}: write tap:NAME,ADDR/PREFIX[,ADDR6/PREFIX]"));
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
                            return Err(format!("{s:?}: a second {} address ({c})", family(c.addr)))
                        }
                    }
                }
                Ok(PortSpec::Tap { name, v4, v6 })
            }
            "afpacket" => {
                if parts.len() > 2 {
                    return Err(format!("{s:?}: write afpacket:IFACE[,ADDR]"));
                }
                let iface = iface_name(parts[0])?;
                let addr = match parts.get(1) {
                    Some(a) => Some(
                        a.parse()
                            .map_err(|_| format!("{a:?} is not an IPv4 or IPv6 address"))?,
                    ),
                    None => None,
                };
                Ok(PortSpec::AfPacket { iface, addr })
            }
            _ => Err(format!("{s:?}: no port kind {kind:?}; {usage}")),
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
            let e = s.parse::<PortSpec>().unwrap_err();
            assert!(e.contains(want), "{s}: {e}");
        }
    }
}
