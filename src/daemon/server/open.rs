//! Opening the daemon's port (UDP, TAP, AF_PACKET; with its capture) and its control
//! socket.

use super::ServerError;
use crate::backend::capture::Capture;
use crate::backend::l2::{iface_config, L2Backend};
use crate::backend::pcapng::{CaptureLink, CaptureStats, PcapngFile};
use crate::backend::udp::UdpBackend;
use crate::backend::{Backend, FrameLink, PacketLink, TapLink};
use crate::daemon::control::PortInfo;
use crate::daemon::port::PortSpec;
use crate::wire::ROCE_UDP_PORT;
use socket2::{Domain, SockAddr, Socket, Type};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The first IPv4 address of interface `name`, with its prefix (24 when it has no netmask).
fn first_v4(name: &str) -> Option<(std::net::Ipv4Addr, u8)> {
    crate::backend::ifaddrs::interface(name)?
        .addrs
        .iter()
        .find_map(|a| match a.ip {
            IpAddr::V4(v4) => Some((v4, a.prefix.unwrap_or(24))),
            IpAddr::V6(_) => None,
        })
}

/// An open port: the backend, what processes are told about it, and the source port their
/// packets must carry (UDP: the socket's own).
pub(super) type OpenPort = (Box<dyn Backend>, PortInfo, Option<u16>);

/// The capture file for `--pcap`, with the port's interface block.
fn pcapng(path: &Path, name: &str, mac: Option<[u8; 6]>) -> Result<PcapngFile, ServerError> {
    Ok(PcapngFile::create(path, name, mac)?)
}

/// A frame port: the L2 over `link`, recording its frames (ARP, ND, ICMP included) when
/// there is a capture.
fn l2_port<L: FrameLink + 'static>(
    link: L,
    cfg: crate::iface::IfaceConfig,
    capture: Option<PcapngFile>,
) -> Result<Box<dyn Backend>, ServerError> {
    Ok(match capture {
        Some(f) => Box::new(L2Backend::new(CaptureLink::new(link, f), cfg)?),
        None => Box::new(L2Backend::new(link, cfg)?),
    })
}

/// Opens the port, with its capture (the counters' handle returned) when `pcap` names a
/// file, and its neighbour entries living `neigh_timeout` (a frame port's; a UDP port has
/// the kernel's).
pub(super) fn open_port(
    spec: &PortSpec,
    pcap: Option<&Path>,
    neigh_timeout: Option<std::time::Duration>,
) -> Result<(OpenPort, Option<Arc<CaptureStats>>), ServerError> {
    let with_ttl = |mut cfg: crate::iface::IfaceConfig| {
        if let Some(t) = neigh_timeout {
            cfg.neighbor_ttl = t;
        }
        cfg
    };
    let mut stats = None;
    let mut capture = |name: &str, mac: Option<[u8; 6]>| -> Result<_, ServerError> {
        let Some(path) = pcap else { return Ok(None) };
        let f = pcapng(path, name, mac)?;
        stats = Some(f.stats());
        Ok(Some(f))
    };
    let port = match spec {
        PortSpec::Udp(ip) => {
            if neigh_timeout.is_some() {
                return Err(ServerError::NeighTimeoutOnUdp);
            }
            let b = UdpBackend::bind(*ip)?;
            let mtu = crate::backend::udp::link_mtu(*ip).unwrap_or(1500);
            let info = PortInfo {
                kind: "udp".into(),
                name: ip.to_string(),
                addrs: vec![*ip],
                mac: [0; 6],
                mtu,
            };
            // No frames on a UDP port: one synthesised frame per datagram.
            let b: Box<dyn Backend> = match capture(&format!("udp:{ip}"), None)? {
                Some(f) => Box::new(Capture::pcapng(b, f)),
                None => Box::new(b),
            };
            (b, info, Some(ROCE_UDP_PORT))
        }
        PortSpec::Tap { name, v4, v6 } => {
            // An existing (persistent) TAP of that name is attached to; otherwise created.
            let link = TapLink::create(name).or_else(|_| TapLink::attach(name))?;
            let info = frame_port_info("tap", name, *v4, *v6, &link);
            let cfg = with_ttl(iface_config(&link, *v4, *v6));
            let f = capture(name, Some(link.mac()))?;
            (l2_port(link, cfg, f)?, info, None)
        }
        PortSpec::AfPacket { iface, addr } => {
            let link = PacketLink::open(iface)?;
            let v4 = match addr {
                Some(IpAddr::V4(a)) => Some((*a, first_v4(iface).map_or(24, |(_, p)| p))),
                Some(IpAddr::V6(_)) => None,
                None => first_v4(iface),
            };
            let v6 = match addr {
                Some(IpAddr::V6(a)) => Some((*a, 64)),
                _ => None,
            };
            if v4.is_none() && v6.is_none() {
                return Err(ServerError::NoAddress {
                    iface: iface.clone(),
                });
            }
            let info = frame_port_info("afpacket", iface, v4, v6, &link);
            let cfg = with_ttl(iface_config(&link, v4, v6));
            let f = capture(iface, Some(link.mac()))?;
            (l2_port(link, cfg, f)?, info, None)
        }
    };
    Ok((port, stats))
}

/// Binds the control socket at `path` (0660). A leftover socket file of a daemon that is
/// gone is replaced; one a live daemon answers on is an error.
pub(super) fn listen(path: &Path) -> Result<Socket, ServerError> {
    let err = |source| ServerError::Socket {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let addr = SockAddr::unix(path).map_err(err)?;
    if path.exists() {
        let probe = Socket::new(Domain::UNIX, Type::SEQPACKET, None).map_err(err)?;
        if probe.connect(&addr).is_ok() {
            return Err(err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "a daemon is already running on it",
            )));
        }
        std::fs::remove_file(path).map_err(err)?;
    }
    let s = Socket::new(Domain::UNIX, Type::SEQPACKET.cloexec(), None).map_err(err)?;
    s.bind(&addr).map_err(err)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(err)?;
    s.listen(64).map_err(err)?;
    s.set_nonblocking(true).map_err(err)?;
    Ok(s)
}

/// For the socket path's default: `$XDG_RUNTIME_DIR/roce-emu/PORT.sock` or
/// `/run/roce-emu/PORT.sock` (root), naming the port so several daemons coexist.
pub fn default_socket(spec: &PortSpec) -> PathBuf {
    let name = match spec {
        PortSpec::Udp(ip) => return crate::backend::daemon_path::udp_socket(*ip),
        PortSpec::Tap { name, .. } => format!("tap-{name}"),
        PortSpec::AfPacket { iface, .. } => format!("afpacket-{iface}"),
    };
    crate::backend::daemon_path::socket_dir().join(format!("{name}.sock"))
}

/// What a frame port (TAP, AF_PACKET) reports of itself: its kind, name, addresses, MAC
/// and MTU.
fn frame_port_info(
    kind: &str,
    name: &str,
    v4: Option<(std::net::Ipv4Addr, u8)>,
    v6: Option<(std::net::Ipv6Addr, u8)>,
    link: &impl FrameLink,
) -> PortInfo {
    PortInfo {
        kind: kind.into(),
        name: name.into(),
        addrs: v4
            .map(|(a, _)| IpAddr::V4(a))
            .into_iter()
            .chain(v6.map(|(a, _)| IpAddr::V6(a)))
            .collect(),
        mac: link.mac(),
        mtu: link.mtu() as u32,
    }
}
