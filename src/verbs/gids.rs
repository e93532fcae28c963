//! A device's GID table, laid out as rxe's (the kernel's RoCE GID cache,
//! `drivers/infiniband/core/roce_gid_mgmt.c` + `cache.c`, for a port whose only GID type
//! is RoCE v2: rxe's `rxe_port_immutable` gives `RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP`).
//!
//! - Index 0 is the default GID: `fe80::` and the modified EUI-64 of the interface's MAC
//!   (`make_default_gid`), whether or not the interface has that link-local address.
//! - Then one GID per address of the interface: IPv4 first as `::ffff:a.b.c.d`, then IPv6
//!   as is, in the order the kernel lists them (`enum_netdev_ipv4_ips`, then
//!   `enum_netdev_ipv6_ips`); an address whose GID is already there (the EUI-64
//!   link-local address is the default GID) is not listed twice (`__ib_cache_gid_add`).
//! - An address that goes leaves its slot empty (a zero GID); a new one takes the first
//!   empty slot (`find_gid`'s `empty`): the indices of the others never move.
//! - 1024 slots (`RXE_PORT_GID_TBL_LEN`), empty ones read as zero GIDs.
//!
//! No "IB/RoCE v1" entries: rxe lists none, and our NIC speaks only RoCE v2. The lab's rxe
//! on Debian 12 (kernel 6.1; `tools/lab/interop.sh` test `dropin-gid-table` compares it
//! with ours) shows for eth0 52:54:00:4c:ee:01 with 198.18.0.11/24 and
//! 2001:db8:4791::11/64: 0 `fe80::5054:ff:fe4c:ee01`, 1 `::ffff:198.18.0.11`, 2
//! `2001:db8:4791::11`, `RoCE v2` all, ndev eth0; 1024 `gids/N` files, an empty slot's
//! GID zeros and its type unreadable (EINVAL). So `-g 1` is the IPv4 GID here as on rxe (`-g 3` is
//! mlx5's IPv4 RoCE v2 index, where v1 and v2 entries alternate).
//!
//! One difference: a device serves one address (its port's socket), and that address
//! comes right after the default GID, before the interface's others, so that `-g 1` is
//! the device's address whichever of the interface's addresses it was given (zero set-up
//! gives it the first IPv4 address: the same table as rxe's). The other GIDs are listed,
//! as rxe lists them, but a QP cannot send from them: [`GidTable::source`] says so.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;

/// Slots in the table (`ibv_port_attr::gid_tbl_len`), as rxe's `RXE_PORT_GID_TBL_LEN`.
pub const GID_TBL_LEN: u32 = 1024;

/// The default GID of an interface with this MAC: `fe80::` + its modified EUI-64
/// (`make_default_gid` / `addrconf_ifid_eui48`).
pub fn default_gid(mac: [u8; 6]) -> Ipv6Addr {
    let m = mac;
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8..].copy_from_slice(&[m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]);
    Ipv6Addr::from(g)
}

/// An address's GID (RoCE v2, IBA A17.8): IPv4 as `::ffff:a.b.c.d`, IPv6 as is.
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The address a GID stands for (`::ffff:a.b.c.d` is IPv4).
pub fn ip_of(gid: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The table rxe would show on an interface with `mac` and `addrs` (getifaddrs order),
/// the device's own address `port_ip` first after the default GID: the addresses, slot by
/// slot.
pub fn layout(mac: [u8; 6], port_ip: IpAddr, addrs: &[IpAddr]) -> Vec<IpAddr> {
    let mut out = vec![IpAddr::V6(default_gid(mac))];
    let v4 = addrs.iter().filter(|a| a.is_ipv4());
    let v6 = addrs.iter().filter(|a| a.is_ipv6());
    for &a in std::iter::once(&port_ip).chain(v4).chain(v6) {
        if !out.iter().any(|&o| gid_of(o) == gid_of(a)) {
            out.push(a);
        }
    }
    out
}

/// A device's GID table: the slots and whose addresses they follow.
#[derive(Debug)]
pub struct GidTable {
    /// The device name, for messages.
    name: String,
    mac: [u8; 6],
    /// The address the device's port sends from: the one GID a QP may use.
    port_ip: IpAddr,
    /// The interface whose addresses the table follows (`gid_attrs/ndevs/N`).
    ifname: Option<String>,
    /// Follow the interface's addresses as they change (a port on a kernel interface's
    /// address); off for a port whose addresses are its own (a daemon's TAP/AF_PACKET).
    watch: bool,
    /// The slots (None: empty) and a count of changes.
    slots: Mutex<(Vec<Option<IpAddr>>, u64)>,
}

impl GidTable {
    /// The table of a device with `mac` whose port serves `port_ip`, on the interface
    /// `ifname` whose addresses are `addrs`; `watch`: follow the interface's addresses.
    pub fn new(
        name: &str,
        mac: [u8; 6],
        port_ip: IpAddr,
        ifname: Option<String>,
        addrs: &[IpAddr],
        watch: bool,
    ) -> GidTable {
        let slots = layout(mac, port_ip, addrs)
            .into_iter()
            .take(GID_TBL_LEN as usize)
            .map(Some)
            .collect();
        GidTable {
            name: name.into(),
            mac,
            port_ip,
            ifname,
            watch: watch && addrs.contains(&port_ip),
            slots: Mutex::new((slots, 0)),
        }
    }

    /// The interface the GIDs belong to.
    pub fn ifname(&self) -> Option<&str> {
        self.ifname.as_deref()
    }

    /// True when the table follows a kernel interface's addresses ([`GidTable::refresh`]).
    pub fn watched(&self) -> bool {
        self.watch && self.ifname.is_some()
    }

    /// The address at `index`, if the slot is in use.
    pub fn get(&self, index: u32) -> Option<IpAddr> {
        let s = self.slots.lock().unwrap();
        s.0.get(index as usize).copied().flatten()
    }

    /// The slots in use: (index, address).
    pub fn entries(&self) -> Vec<(u32, IpAddr)> {
        let s = self.slots.lock().unwrap();
        s.0.iter()
            .enumerate()
            .filter_map(|(i, a)| a.map(|a| (i as u32, a)))
            .collect()
    }

    /// How many times the table changed.
    pub fn generation(&self) -> u64 {
        self.slots.lock().unwrap().1
    }

    /// The table as a line for messages: `0 fe80::..., 1 ::ffff:10.0.0.1 (its address)`.
    pub fn describe(&self) -> String {
        self.entries()
            .into_iter()
            .map(|(i, a)| {
                let own = if a == self.port_ip {
                    " (the device's address)"
                } else {
                    ""
                };
                format!("GID[{i}] = {}{own}", Ipv6Addr::from(gid_of(a)))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The index of the device's own address, if it is in the table.
    pub fn own_index(&self) -> Option<u32> {
        self.entries()
            .into_iter()
            .find(|&(_, a)| a == self.port_ip)
            .map(|(i, _)| i)
    }

    /// The index of `gid`, if the table holds it (`ibv_find_gid_index`; what
    /// `ibv_init_ah_from_wc` and rdma_cm look up for a received or bound address).
    pub fn index_of(&self, gid: [u8; 16]) -> Option<u32> {
        self.entries()
            .into_iter()
            .find(|&(_, a)| gid_of(a) == gid)
            .map(|(i, _)| i)
    }

    /// The source address of a QP or AH whose `sgid_index` is `index`: only the device's
    /// own address can be sent from (its port's socket is bound to it). Otherwise the
    /// error says which GIDs there are and which index to use.
    pub fn source(&self, index: u32) -> Result<IpAddr, String> {
        let hint = || match self.own_index() {
            Some(i) => format!("use GID index {i} (-g {i})"),
            None => format!("the device's address {} has left it", self.port_ip),
        };
        match self.get(index) {
            Some(a) if a == self.port_ip => Ok(a),
            Some(a) => Err(format!(
                "{}: GID index {index} is {}, an address the device does not send from \
                 (it serves {} alone: {}); {}",
                self.name,
                Ipv6Addr::from(gid_of(a)),
                self.port_ip,
                self.describe(),
                hint()
            )),
            None => Err(format!(
                "{}: no GID at index {index}: {}; {}",
                self.name,
                self.describe(),
                hint()
            )),
        }
    }

    /// Follows the interface's addresses now `addrs`: a gone address empties its slot, a
    /// new one takes the first empty slot. True when anything changed.
    pub fn update(&self, addrs: &[IpAddr]) -> bool {
        let want = layout(self.mac, self.port_ip, addrs);
        let mut s = self.slots.lock().unwrap();
        let mut changed = false;
        // Index 0, the default GID, stays (it follows the MAC, not an address).
        for slot in s.0.iter_mut().skip(1) {
            if slot.is_some_and(|a| !want.contains(&a) || !addrs.contains(&a)) {
                *slot = None;
                changed = true;
            }
        }
        for a in want.into_iter().skip(1) {
            if !addrs.contains(&a) || s.0.contains(&Some(a)) {
                continue;
            }
            match s.0.iter().skip(1).position(Option::is_none) {
                Some(i) => s.0[i + 1] = Some(a),
                None if s.0.len() < GID_TBL_LEN as usize => s.0.push(Some(a)),
                None => continue,
            }
            changed = true;
        }
        if changed {
            s.1 += 1;
        }
        changed
    }

    /// Reads the interface's addresses again (getifaddrs) when the table follows them;
    /// true when the table changed. A gone interface has no addresses.
    pub fn refresh(&self) -> bool {
        if !self.watched() {
            return false;
        }
        let name = self.ifname.as_deref().unwrap_or_default();
        let addrs: Vec<IpAddr> = crate::backend::ifaddrs::interface(name)
            .map(|i| i.addrs.iter().map(|a| a.ip).collect())
            .unwrap_or_default();
        self.update(&addrs)
    }
}

/// How often the progress thread reads a followed interface's addresses again: a GID
/// change is rare, and getifaddrs is a netlink dump (rtnetlink notifications would need a
/// socket of their own on the thread; the kernel's own GID cache runs from its
/// notifiers).
pub const WATCH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The progress thread's watch on a table: when it looked last and which change it saw.
#[derive(Debug)]
pub struct Watch {
    pub table: std::sync::Arc<GidTable>,
    last: Mutex<(Option<std::time::Instant>, u64)>,
}

impl Watch {
    pub fn new(table: std::sync::Arc<GidTable>) -> Watch {
        let seen = table.generation();
        Watch {
            table,
            last: Mutex::new((None, seen)),
        }
    }

    /// Reads the addresses again when `WATCH_INTERVAL` has passed since the last look;
    /// true when the table changed since the last call that said so (a sysfs read or a
    /// query may have refreshed it in between: the change is still reported once).
    pub fn due(&self, now: std::time::Instant) -> bool {
        let mut l = self.last.lock().unwrap();
        if l.0
            .is_some_and(|at| now.saturating_duration_since(at) < WATCH_INTERVAL)
        {
            return false;
        }
        l.0 = Some(now);
        self.table.refresh();
        let g = self.table.generation();
        let changed = g != l.1;
        l.1 = g;
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(s: &[&str]) -> Vec<IpAddr> {
        s.iter().map(|a| a.parse().unwrap()).collect()
    }

    fn strs(t: &GidTable) -> Vec<(u32, String)> {
        t.entries()
            .into_iter()
            .map(|(i, a)| (i, Ipv6Addr::from(gid_of(a)).to_string()))
            .collect()
    }

    /// The lab's rxe0 on Debian 12 (kernel 6.1): eth0 52:54:00:4c:ab:01 with 198.18.0.11,
    /// 2001:db8:4791::11 and its EUI-64 link-local address. rxe shows (sysfs gids/N,
    /// gid_attrs/types/N all "RoCE v2"): 0 the link-local, 1 the IPv4, 2 the IPv6 address
    /// (captures/README.md: `-g 1` IPv4, `-g 2` IPv6).
    #[test]
    fn the_lab_interface_gives_rxes_table() {
        let mac = [0x52, 0x54, 0x00, 0x4c, 0xab, 0x01];
        let addrs = ips(&[
            "198.18.0.11",
            "2001:db8:4791::11",
            "fe80::5054:ff:fe4c:ab01",
        ]);
        let t = GidTable::new("rxe0", mac, addrs[0], Some("eth0".into()), &addrs, false);
        assert_eq!(
            strs(&t),
            [
                (0, "fe80::5054:ff:fe4c:ab01".to_string()),
                (1, "::ffff:198.18.0.11".to_string()),
                (2, "2001:db8:4791::11".to_string()),
            ]
        );
        assert_eq!(t.source(1), Ok("198.18.0.11".parse().unwrap()));
        let e = t.source(0).unwrap_err();
        assert!(e.contains("GID index 0 is fe80::5054:ff:fe4c:ab01"), "{e}");
        assert!(e.contains("use GID index 1 (-g 1)"), "{e}");
        let e = t.source(3).unwrap_err();
        assert!(e.contains("no GID at index 3") && e.contains("GID[2] = 2001:db8:4791::11"));
        assert!(t.source(2).is_err());
        assert_eq!(t.index_of(gid_of(addrs[1])), Some(2));
        assert_eq!(t.index_of(gid_of("198.18.0.12".parse().unwrap())), None);
        assert_eq!(ip_of(gid_of(addrs[0])), addrs[0]);
    }

    /// A link-local address that is not the MAC's EUI-64 (stable-privacy addresses) is a
    /// GID of its own after the default one, as in rxe; IPv4 before IPv6 whatever the
    /// getifaddrs order.
    #[test]
    fn other_link_local_addresses_and_the_family_order() {
        let mac = [0x02, 0, 0, 0, 0, 0x01];
        let addrs = ips(&["fd00::2", "fe80::1234", "192.0.2.2", "192.0.2.3"]);
        let t = GidTable::new("rxe0", mac, addrs[2], None, &addrs, false);
        assert_eq!(
            strs(&t).into_iter().map(|(_, s)| s).collect::<Vec<_>>(),
            [
                "fe80::ff:fe00:1",
                "::ffff:192.0.2.2",
                "::ffff:192.0.2.3",
                "fd00::2",
                "fe80::1234"
            ]
        );
    }

    /// The device's own address comes first after the default GID, so `-g 1` is it.
    #[test]
    fn the_ports_own_address_is_index_1() {
        let addrs = ips(&["192.0.2.2", "192.0.2.3", "fd00::2"]);
        let t = GidTable::new("x", [0; 6], addrs[1], None, &addrs, false);
        assert_eq!(t.get(1), Some(addrs[1]));
        assert_eq!(t.get(2), Some(addrs[0]));
        assert_eq!(t.own_index(), Some(1));
        // An IPv6 device: its address at 1, the interface's IPv4 after it.
        let t = GidTable::new("x", [0; 6], addrs[2], None, &addrs, false);
        assert_eq!(t.source(1), Ok(addrs[2]));
        assert_eq!(t.get(2), Some(addrs[0]));
        // An address on no interface: the default GID and it.
        let one: IpAddr = "127.0.55.1".parse().unwrap();
        let t = GidTable::new("x", [0; 6], one, None, &[], false);
        assert_eq!(strs(&t)[0].1, "fe80::200:ff:fe00:0");
        assert_eq!(strs(&t)[1].1, "::ffff:127.0.55.1");
        assert_eq!(t.entries().len(), 2);
    }

    /// rxe's cache: a gone address empties its slot and the others keep theirs; a new one
    /// fills the first empty slot; nothing changed, no change.
    #[test]
    fn removed_addresses_leave_holes_and_new_ones_fill_them() {
        let addrs = ips(&["10.0.0.1", "10.0.0.2", "fd00::1"]);
        let t = GidTable::new("x", [0; 6], addrs[0], None, &addrs, false);
        assert!(!t.update(&addrs));
        assert_eq!(t.generation(), 0);
        assert!(t.update(&ips(&["10.0.0.1", "fd00::1"])));
        assert_eq!(t.get(2), None);
        assert_eq!(t.get(3), Some(addrs[2]));
        assert_eq!(t.generation(), 1);
        assert!(t.update(&ips(&["10.0.0.1", "fd00::1", "10.0.0.9"])));
        assert_eq!(t.get(2), Some("10.0.0.9".parse().unwrap()));
        // The device's own address goes: its slot empties, nothing can be sent from.
        assert!(t.update(&ips(&["fd00::1"])));
        assert_eq!(t.get(1), None);
        let e = t.source(1).unwrap_err();
        assert!(e.contains("has left it"), "{e}");
        // It comes back: the first empty slot.
        assert!(t.update(&ips(&["fd00::1", "10.0.0.1"])));
        assert_eq!(t.own_index(), Some(1));
        assert_eq!(t.get(0), Some(IpAddr::V6(default_gid([0; 6]))));
    }
}
