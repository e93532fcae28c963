//! This machine's network interfaces, as getifaddrs(3) lists them: the one walk behind
//! device discovery (`verbs::discover`), the MTU of an address's interface
//! ([`super::udp::link_mtu`]) and an AF_PACKET port's address (`daemon::server`).

use nix::net::if_::InterfaceFlags as F;
use std::net::IpAddr;

/// One address of an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfAddr {
    pub ip: IpAddr,
    /// The prefix length of its netmask, when getifaddrs gives one.
    pub prefix: Option<u8>,
}

impl IfAddr {
    /// True when `ip` is in this address's subnet (without a netmask: is this address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.ip, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let m = self.prefix.map_or(u32::MAX, |p| {
                    u32::MAX.checked_shl(32 - u32::from(p)).unwrap_or(0)
                });
                u32::from(a) & m == u32::from(b) & m
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let m = self.prefix.map_or(u128::MAX, |p| {
                    u128::MAX.checked_shl(128 - u32::from(p)).unwrap_or(0)
                });
                u128::from(a) & m == u128::from(b) & m
            }
            _ => false,
        }
    }
}

/// One interface: its name, flags, addresses (IPv4 and IPv6, in getifaddrs order) and MAC.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    /// Up and running (`IFF_UP` and `IFF_RUNNING`: administratively up, with a carrier).
    pub up: bool,
    pub loopback: bool,
    pub addrs: Vec<IfAddr>,
    /// Its link-layer address (zeros when it has none).
    pub mac: [u8; 6],
}

impl Interface {
    /// The interface's MTU, as `/sys/class/net/NAME/mtu` gives it.
    pub fn mtu(&self) -> Option<u32> {
        let path = format!("/sys/class/net/{}/mtu", self.name);
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    }

    /// True when `ip` is one of its addresses.
    pub fn has(&self, ip: IpAddr) -> bool {
        self.addrs.iter().any(|a| a.ip == ip)
    }
}

/// The interfaces in the order getifaddrs first names them (none when it fails).
pub fn interfaces() -> Vec<Interface> {
    let Ok(entries) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut out: Vec<Interface> = Vec::new();
    for e in entries {
        let at = match out.iter().position(|i| i.name == e.interface_name) {
            Some(at) => at,
            None => {
                out.push(Interface {
                    name: e.interface_name.clone(),
                    ..Interface::default()
                });
                out.len() - 1
            }
        };
        let i = &mut out[at];
        i.up |= e.flags.contains(F::IFF_UP) && e.flags.contains(F::IFF_RUNNING);
        i.loopback |= e.flags.contains(F::IFF_LOOPBACK);
        let Some(addr) = e.address else { continue };
        let mask = e.netmask;
        if let Some(s) = addr.as_sockaddr_in() {
            let prefix =
                mask.and_then(|m| m.as_sockaddr_in().map(|m| u32::from(m.ip()).count_ones()));
            i.addrs.push(IfAddr {
                ip: IpAddr::V4(s.ip()),
                prefix: prefix.map(|p| p as u8),
            });
        } else if let Some(s) = addr.as_sockaddr_in6() {
            let prefix =
                mask.and_then(|m| m.as_sockaddr_in6().map(|m| u128::from(m.ip()).count_ones()));
            i.addrs.push(IfAddr {
                ip: IpAddr::V6(s.ip()),
                prefix: prefix.map(|p| p as u8),
            });
        } else if let Some(mac) = addr.as_link_addr().and_then(|l| l.addr()) {
            i.mac = mac;
        }
    }
    out
}

/// The interface named `name`, if there is one.
pub fn interface(name: &str) -> Option<Interface> {
    interfaces().into_iter().find(|i| i.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(ip: &str, prefix: Option<u8>) -> IfAddr {
        IfAddr {
            ip: ip.parse().unwrap(),
            prefix,
        }
    }

    #[test]
    fn a_subnet_contains_its_addresses_and_no_others() {
        let lo = addr("127.0.0.1", Some(8));
        assert!(lo.contains("127.0.0.2".parse().unwrap()));
        assert!(!lo.contains("128.0.0.1".parse().unwrap()));
        assert!(!lo.contains("::1".parse().unwrap()));
        let one = addr("10.0.0.1", None);
        assert!(one.contains("10.0.0.1".parse().unwrap()));
        assert!(!one.contains("10.0.0.2".parse().unwrap()));
        assert!(addr("10.0.0.1", Some(0)).contains("192.168.1.1".parse().unwrap()));
        let v6 = addr("fd00::1", Some(64));
        assert!(v6.contains("fd00::ffff".parse().unwrap()));
        assert!(!v6.contains("fd01::1".parse().unwrap()));
        assert!(addr("::1", Some(128)).contains("::1".parse().unwrap()));
    }

    #[test]
    fn loopback_is_listed_up_with_its_address_and_mtu() {
        let lo = interface("lo").expect("lo");
        assert!(lo.up && lo.loopback, "{lo:?}");
        assert!(
            lo.addrs.contains(&addr("127.0.0.1", Some(8))),
            "{:?}",
            lo.addrs
        );
        assert!(lo.has("127.0.0.1".parse().unwrap()));
        assert!(lo.mtu().is_some_and(|m| m >= 1500), "{:?}", lo.mtu());
        assert!(interface("no-such-interface0").is_none());
    }
}
