//! Where `roce-emu daemon`s listen by default, so that a NIC refused UDP 4791 on an
//! address can say which daemon holds it and how to attach instead.
//!
//! The daemon's own default (`daemon::server::default_socket`) is built from these, so the
//! two never disagree.

use std::io::ErrorKind;
use std::net::IpAddr;
use std::path::PathBuf;

/// The folder of default daemon sockets: `$XDG_RUNTIME_DIR/roce-emu`, or `/run/roce-emu`
/// (root, or no runtime folder).
pub fn socket_dir() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run"))
        .join("roce-emu")
}

/// The default socket of the daemon of UDP port `ip`: `udp-IP.sock` in [`socket_dir`].
pub fn udp_socket(ip: IpAddr) -> PathBuf {
    socket_dir().join(format!("udp-{ip}.sock"))
}

/// The device name a drop-in user would give the daemon's port in `ROCE_EMU_DEVICES`
/// (the names zero set-up gives: `rxe_lo` for loopback, `rxe0` otherwise).
fn device_name(ip: IpAddr) -> &'static str {
    if ip.is_loopback() {
        "rxe_lo"
    } else {
        "rxe0"
    }
}

/// The error a NIC refused UDP `ip`:4791 gets when a daemon's socket for that address is
/// at its default path: still "address in use" (callers test the kind), saying to attach.
pub fn held_by_daemon(ip: IpAddr) -> Option<std::io::Error> {
    let path = udp_socket(ip);
    use std::os::unix::fs::FileTypeExt;
    if !std::fs::metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
        return None;
    }
    let p = path.display();
    Some(std::io::Error::new(
        ErrorKind::AddrInUse,
        format!(
            "a roce-emu daemon holds {}: attach with --daemon {p} (drop-in: \
             ROCE_EMU_DEVICES={}=daemon:{p})",
            std::net::SocketAddr::new(ip, crate::wire::ROCE_UDP_PORT),
            device_name(ip)
        ),
    ))
}
