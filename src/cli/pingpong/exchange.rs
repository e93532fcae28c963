//! The TCP exchange of address records, as rc_pingpong does it.

use super::*;

// ---- the exchange -----------------------------------------------------------------------

/// Classifies an I/O error of the exchange: `doing` says what we were doing, `role` what
/// the peer should be, `hint` what a closed connection probably means.
pub(super) fn io_step(
    peer: SocketAddr,
    doing: &'static str,
    secs: f64,
    role: &'static str,
    hint: &'static str,
) -> impl FnOnce(std::io::Error) -> PingpongError {
    move |source| match source.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => PingpongError::ExchangeTimeout {
            peer,
            doing,
            secs,
            role,
        },
        ErrorKind::UnexpectedEof
        | ErrorKind::ConnectionReset
        | ErrorKind::BrokenPipe
        | ErrorKind::ConnectionAborted => PingpongError::ExchangeClosed { peer, doing, hint },
        _ => PingpongError::Exchange {
            peer,
            doing,
            source,
        },
    }
}

pub(super) fn parse_record(peer: SocketAddr, rec: &[u8; RECORD_LEN]) -> Result<Dest> {
    Dest::from_record(rec).map_err(|source| PingpongError::Record {
        peer,
        source,
        text: String::from_utf8_lossy(rec).into_owned(),
    })
}

/// The client's side: connect (retrying until `wait` has passed), write our record, read
/// the server's, write `done\0`.
pub(super) fn client_exchange(
    target: &str,
    addrs: &[SocketAddr],
    wait: Duration,
    timeout: Duration,
    my: &Dest,
) -> Result<(Dest, SocketAddr)> {
    let mut s = oob::connect(target, addrs, wait).map_err(|e| match e {
        OobError::Connect {
            target,
            addrs,
            secs,
            source,
        } => PingpongError::Connect {
            target,
            addrs,
            secs,
            source,
        },
        other => PingpongError::Oob(other),
    })?;
    let peer = s.peer_addr().unwrap_or(addrs[0]);
    tracing::debug!(%peer, "connected to the server");
    let secs = timeout.as_secs_f64();
    let set = s
        .set_read_timeout(Some(timeout))
        .and_then(|()| s.set_write_timeout(Some(timeout)));
    set.map_err(io_step(peer, "setting socket timeouts", secs, "server", ""))?;
    s.write_all(&my.to_record()).map_err(io_step(
        peer,
        "sending our address",
        secs,
        "server",
        "",
    ))?;
    tracing::debug!(?my, "sent our address record");
    let mut rec = [0u8; RECORD_LEN];
    s.read_exact(&mut rec).map_err(io_step(
        peer,
        "reading its address",
        secs,
        "server",
        " (it could not connect its QP to ours? see its output)",
    ))?;
    let rem = parse_record(peer, &rec)?;
    tracing::debug!(?rem, "read the server's address record");
    s.write_all(DONE)
        .map_err(io_step(peer, "sending \"done\"", secs, "server", ""))?;
    tracing::debug!("sent \"done\": exchange finished");
    Ok((rem, peer))
}

/// The server's side: accept one client (within `wait` if given), read its record, connect
/// the QP (`connect`), then answer with our record and read the client's `done\0`.
pub(super) fn server_exchange(
    bind: IpAddr,
    port: u16,
    wait: Option<Duration>,
    timeout: Duration,
    my: &Dest,
    connect: impl FnOnce(&Dest, SocketAddr) -> Result<()>,
) -> Result<Dest> {
    let (mut s, peer) = oob::accept_for(bind, port, wait)?;
    tracing::debug!(%peer, "client connected");
    let secs = timeout.as_secs_f64();
    let set = s
        .set_read_timeout(Some(timeout))
        .and_then(|()| s.set_write_timeout(Some(timeout)));
    set.map_err(io_step(peer, "setting socket timeouts", secs, "client", ""))?;
    let mut rec = [0u8; RECORD_LEN];
    s.read_exact(&mut rec)
        .map_err(io_step(peer, "reading its address", secs, "client", ""))?;
    let rem = parse_record(peer, &rec)?;
    tracing::debug!(?rem, "read the client's address record");
    connect(&rem, peer)?;
    s.write_all(&my.to_record()).map_err(io_step(
        peer,
        "sending our address",
        secs,
        "client",
        "",
    ))?;
    let mut done = [0u8; DONE.len()];
    s.read_exact(&mut done).map_err(io_step(
        peer,
        "reading its \"done\"",
        secs,
        "client",
        " (it could not use our address? see its output)",
    ))?;
    if &done != DONE {
        return Err(PingpongError::NotDone {
            peer,
            got: String::from_utf8_lossy(&done).into_owned(),
        });
    }
    tracing::debug!("read \"done\": exchange finished");
    Ok(rem)
}
