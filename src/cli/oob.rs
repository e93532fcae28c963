//! The out-of-band TCP connection that rdma-core's examples and perftest use to swap QP
//! addresses before any RoCE packet flows: connect with a bounded retry, accept with an
//! optional bound, and every failure named with the address and the step.

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// What went wrong while setting up the TCP connection.
#[derive(Debug, thiserror::Error)]
pub enum OobError {
    #[error("could not connect to {target} ({addrs}) within {secs} s: {source}")]
    Connect {
        target: String,
        addrs: String,
        secs: f64,
        source: std::io::Error,
    },
    #[error("cannot listen on TCP {addr}: {source} (another server on this port? use -p)")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("no client connected to TCP port {port} within {secs} s")]
    NoClient { port: u16, secs: f64 },
    #[error("accepting a client on TCP port {port}: {source}")]
    Accept { port: u16, source: std::io::Error },
}

/// Where the peer is and which address this NIC takes.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    #[error("cannot resolve the server {server:?}: {source}")]
    Resolve {
        server: String,
        source: std::io::Error,
    },
    #[error(
        "the server {server} is not on this machine: give --bind IP, the address of this \
         machine that the server can reach (its RoCE GID)"
    )]
    BindRequired { server: String },
}

/// The server's addresses (for a client) and this NIC's address: `--bind` if given, else
/// 127.0.0.1 for a server and 127.0.0.2 for a client of a loopback server; ::1 for a client
/// of a server named only by IPv6 loopback addresses (the server's GID is then IPv6, and
/// the GIDs of both sides must be of one family; IPv6 loopback has no second address, so
/// this works only when the server's NIC is on another IPv6 address of this machine); a
/// client of any other server must say which of its addresses the server can reach.
pub fn locate(
    server: Option<&str>,
    port: u16,
    bind: Option<IpAddr>,
) -> Result<(Option<Vec<SocketAddr>>, IpAddr), LocateError> {
    let addrs = match server {
        Some(name) => Some(
            (name, port)
                .to_socket_addrs()
                .map_err(|source| LocateError::Resolve {
                    server: name.to_string(),
                    source,
                })?
                .collect::<Vec<_>>(),
        ),
        None => None,
    };
    let ip = match (bind, &addrs, server) {
        (Some(ip), _, _) => ip,
        // `localhost` may resolve to ::1 and 127.0.0.1: IPv4 then, as before.
        (None, Some(a), _) if !a.is_empty() && a.iter().all(|a| a.ip().is_loopback()) => {
            if a.iter().all(SocketAddr::is_ipv6) {
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            } else {
                IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))
            }
        }
        (None, Some(_), Some(name)) => {
            return Err(LocateError::BindRequired {
                server: name.to_string(),
            })
        }
        (None, _, _) => IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
    };
    Ok((addrs, ip))
}

/// Connects to the first of `addrs` that answers, trying again until `wait` has passed
/// (the server may not be listening yet).
pub fn connect(target: &str, addrs: &[SocketAddr], wait: Duration) -> Result<TcpStream, OobError> {
    let deadline = Instant::now() + wait;
    let mut last = std::io::Error::new(ErrorKind::NotFound, "the name has no address");
    'tries: loop {
        for a in addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break 'tries;
            }
            match TcpStream::connect_timeout(a, left.min(Duration::from_secs(1))) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) => {
                    tracing::trace!("connecting to {a}: {e}");
                    last = e;
                }
            }
        }
        if addrs.is_empty() || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(OobError::Connect {
        target: target.to_string(),
        addrs: addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        secs: wait.as_secs_f64(),
        source: last,
    })
}

/// Listens on `0.0.0.0:port` (as rc_pingpong and perftest do: their first passive address,
/// even for an IPv6 GID; `[::]` where there is no IPv4) and accepts one client, waiting at
/// most `wait` when given. The listener is closed before returning.
pub fn accept(port: u16, wait: Option<Duration>) -> Result<(TcpStream, SocketAddr), OobError> {
    accept_for(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port, wait)
}

/// `accept` for a NIC on `bind`: an IPv6 NIC listens on `[::]:port`, which on Linux also
/// takes IPv4 clients (IPv4-mapped; `bindv6only` is 0 unless the host changed it), so a
/// client that reaches the server only by its IPv6 address (`pingpong ::1`) connects.
/// rc_pingpong's 0.0.0.0 would refuse it, and the one client it accepts is then gone.
pub fn accept_for(
    bind: IpAddr,
    port: u16,
    wait: Option<Duration>,
) -> Result<(TcpStream, SocketAddr), OobError> {
    let v4 = SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
    let v6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, port));
    let (first, second) = if bind.is_ipv6() { (v6, v4) } else { (v4, v6) };
    // The other family only where this one does not exist on the host.
    let listener = TcpListener::bind(first)
        .or_else(|e| match e.kind() {
            ErrorKind::AddrNotAvailable => TcpListener::bind(second),
            _ => Err(e),
        })
        .map_err(|source| OobError::Listen {
            addr: first,
            source,
        })?;
    tracing::debug!(
        "listening on TCP {}",
        listener.local_addr().map_or(first, |a| a)
    );
    let accept_err = |source| OobError::Accept { port, source };
    let (s, peer) = match wait {
        None => listener.accept().map_err(accept_err)?,
        Some(w) => {
            let deadline = Instant::now() + w;
            listener.set_nonblocking(true).map_err(accept_err)?;
            loop {
                match listener.accept() {
                    Ok(c) => break c,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        if Instant::now() >= deadline {
                            return Err(OobError::NoClient {
                                port,
                                secs: w.as_secs_f64(),
                            });
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(accept_err(e)),
                }
            }
        }
    };
    s.set_nonblocking(false).map_err(accept_err)?;
    let _ = s.set_nodelay(true);
    Ok((s, peer))
}
