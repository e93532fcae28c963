//! The daemon's control channel: messages on a Unix `SOCK_SEQPACKET` socket (one message
//! per `send`, boundaries kept, EOF when the other side goes), with file descriptors passed
//! as `SCM_RIGHTS` (the shared-memory rings and their doorbells).
//!
//! Messages are JSON: control is rare (attach, detach, counters, fault rules), and JSON
//! keeps the protocol readable and open to new fields. Every message comes from another
//! process and is untrusted: its size is bounded by the receive buffer ([`MAX_MSG`]), a
//! message that does not parse is an error the caller counts, never a panic, and at most
//! [`MAX_FDS`] descriptors are taken from one message (any more are closed unread).

use nix::sys::socket::{
    getsockopt, recvmsg, sendmsg, sockopt, ControlMessage, ControlMessageOwned, MsgFlags,
};
use serde::{Deserialize, Serialize};
use std::io::{IoSlice, IoSliceMut};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// Protocol version: a process and a daemon of different versions refuse each other.
/// 2: doorbells are socket pairs; `Using`.
pub const VERSION: u32 = 2;
/// Largest control message.
pub const MAX_MSG: usize = 64 * 1024;
/// Most descriptors one message carries (rings, two doorbells, spare).
pub const MAX_FDS: usize = 4;

/// What a process (or `roce-emu counters` / `roce-emu fault`) asks of the daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum ToDaemon {
    /// Attach: lease a QPN block and set up the rings. The daemon answers `Welcome` and
    /// then sends the rings' descriptors (`ring::LinkFds::send`), or `Refused`. `pid` is
    /// what the process says; the daemon shows the one the kernel says (`SO_PEERCRED`).
    Hello { version: u32, pid: u32 },
    /// The attached process made its first QP: its block's QPNs may now be known to
    /// peers, so the block is quarantined when the process leaves (`lease::Leases`). No
    /// answer.
    Using,
    /// What port the daemon has (for a device list), without attaching: `Info`.
    Info,
    /// The port's and every process's counters.
    Counters,
    /// Change the fault rules at run time (`roce-emu fault ...`).
    Fault { rule: String },
    /// Set, clear or show the port's egress queue at run time (`roce-emu queue ...`:
    /// `set KEY=VALUE...`, `clear`, `show`).
    Queue { command: String },
    /// An attached process's engine counters, the NIC's and per QP, sent now and then and
    /// as it leaves (`daemon::report`); no answer. Checked field by field by the daemon
    /// (a bad report is counted, not the end of the attachment).
    QpCounters {
        #[serde(default)]
        report: serde_json::Value,
    },
    /// Makes this connection a CM client (a program's librdmacm, `crate::cm::ucma`): the
    /// daemon answers `CmWelcome` (or `Refused` for another `version`); after that every
    /// message from the process is a `ucma::Request` and every one to it a
    /// `ucma::ToLibrary`. The connection is one `cm::Owner`: its end is `Cm::owner_gone`.
    CmHello { version: u32, pid: u32 },
}

/// What the daemon answers or announces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum ToProcess {
    /// Attached: the QPN block leased and the port; the message carries the ring memory
    /// and the two doorbells (daemon to process, process to daemon).
    Welcome {
        version: u32,
        block: u8,
        port: PortInfo,
        /// The UDP source port every packet must carry (a UDP port sends from its one
        /// socket; the ICRC covers the port: `EngineConfig::udp_src_port`); `None` on a
        /// port that owns its frames, where each QP uses its own.
        src_port: Option<u16>,
        /// The congestion-control settings the daemon gives its processes (`--cc`, the
        /// `engine::CcConfig` key=value syntax), laid over the defaults before the
        /// process's own (`ROCE_EMU_CC`); `None`: the defaults.
        #[serde(default)]
        cc: Option<String>,
    },
    /// The answer to `Info`.
    Info { version: u32, port: PortInfo },
    /// Not attached (another version, no free block, not allowed): the reason.
    Refused { why: String },
    /// The port went down (the daemon stops): every QP of the process sees it.
    PortDown { why: String },
    /// The answer to `Counters`. When the processes do not fit in one message its
    /// `more` field says how many `CountersMore` follow (`daemon::report::counters_answer`).
    Counters { json: serde_json::Value },
    /// The rest of a `Counters` answer: more processes (an entry with `"continued": true`
    /// carries more QPs of the entry before it).
    CountersMore { processes: Vec<serde_json::Value> },
    /// The answer to `Fault`: empty when the rule was taken, else why not.
    FaultSet { error: Option<String> },
    /// The answer to `Queue`: the queue's report (`backend::queue::QueueReport`), or why
    /// the command was refused.
    QueueSet {
        error: Option<String>,
        #[serde(default)]
        report: serde_json::Value,
    },
    /// The answer to `CmHello`: the CM protocol version, and the device as the CM sees it
    /// (its node GUID, the port's addresses, its IB MTU in bytes).
    CmWelcome {
        version: u32,
        node_guid: u64,
        addrs: Vec<IpAddr>,
        mtu: u32,
    },
}

/// The port as the attached process's device shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortInfo {
    /// `udp`, `tap` or `afpacket`.
    pub kind: String,
    /// The interface (TAP or AF_PACKET), or the address (UDP).
    pub name: String,
    /// The addresses the port serves (its GIDs).
    pub addrs: Vec<IpAddr>,
    /// A frame port's prefix length of each of `addrs` (its subnets: where its own L2
    /// reaches, which the machine's routes know nothing of); empty on a UDP port, whose
    /// reach the kernel's routes decide.
    #[serde(default)]
    pub prefixes: Vec<u8>,
    pub mac: [u8; 6],
    /// The IP MTU of the link.
    pub mtu: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("control socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("the other side closed the control socket")]
    Closed,
    #[error("a control message that does not parse ({0})")]
    Malformed(String),
    #[error("a control message larger than {MAX_MSG} bytes")]
    TooLarge,
}

fn io(e: nix::Error) -> ControlError {
    ControlError::Io(std::io::Error::from(e))
}

/// Sends `msg` with `fds` attached.
pub fn send(sock: BorrowedFd<'_>, msg: &impl Serialize, fds: &[RawFd]) -> Result<(), ControlError> {
    let bytes = serde_json::to_vec(msg).map_err(|e| ControlError::Malformed(e.to_string()))?;
    if bytes.len() > MAX_MSG {
        return Err(ControlError::TooLarge);
    }
    let iov = [IoSlice::new(&bytes)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None).map_err(io)?;
    Ok(())
}

/// Sends `msg` without waiting: a full socket is an error (`WouldBlock`), never a block.
pub fn try_send(sock: BorrowedFd<'_>, msg: &impl Serialize) -> Result<(), ControlError> {
    try_send_bytes(sock, &encode(msg)?)
}

/// A message as it travels (checked against [`MAX_MSG`]).
pub fn encode(msg: &impl Serialize) -> Result<Vec<u8>, ControlError> {
    let bytes = serde_json::to_vec(msg).map_err(|e| ControlError::Malformed(e.to_string()))?;
    if bytes.len() > MAX_MSG {
        return Err(ControlError::TooLarge);
    }
    Ok(bytes)
}

/// Sends an [`encode`]d message without waiting (`WouldBlock` when the socket is full).
pub fn try_send_bytes(sock: BorrowedFd<'_>, bytes: &[u8]) -> Result<(), ControlError> {
    let iov = [IoSlice::new(bytes)];
    let flags = MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT;
    sendmsg::<()>(sock.as_raw_fd(), &iov, &[], flags, None).map_err(io)?;
    Ok(())
}

/// Receives one message and the descriptors it carried (at most [`MAX_FDS`]).
pub fn recv<T: for<'de> Deserialize<'de>>(
    sock: BorrowedFd<'_>,
) -> Result<(T, Vec<OwnedFd>), ControlError> {
    let mut buf = vec![0u8; MAX_MSG];
    let mut cbuf = nix::cmsg_space!([RawFd; MAX_FDS]);
    let (len, truncated, fds) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let m = recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cbuf),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(io)?;
        let mut fds = Vec::new();
        for c in m.cmsgs().map_err(io)? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                fds.extend(raw.into_iter().map(crate::backend::adopt_received_fd));
            }
        }
        let truncated =
            m.flags.contains(MsgFlags::MSG_TRUNC) || m.flags.contains(MsgFlags::MSG_CTRUNC);
        (m.bytes, truncated, fds)
    };
    if len == 0 {
        return Err(ControlError::Closed);
    }
    if truncated {
        return Err(ControlError::TooLarge);
    }
    if fds.len() > MAX_FDS {
        return Err(ControlError::Malformed(format!(
            "{} descriptors",
            fds.len()
        )));
    }
    let msg =
        serde_json::from_slice(&buf[..len]).map_err(|e| ControlError::Malformed(e.to_string()))?;
    Ok((msg, fds))
}

/// The user id of the process at the other end (`SO_PEERCRED`): the daemon attaches only
/// its own user's processes (and root's).
pub fn peer_uid(sock: BorrowedFd<'_>) -> Result<u32, ControlError> {
    Ok(peer(sock)?.0)
}

/// The user id and process id at the other end (`SO_PEERCRED`), as the kernel says them.
pub fn peer(sock: BorrowedFd<'_>) -> Result<(u32, u32), ControlError> {
    let cred = getsockopt(&sock, sockopt::PeerCredentials).map_err(io)?;
    Ok((cred.uid(), cred.pid().max(0) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    use std::os::fd::AsFd;

    fn pair() -> (OwnedFd, OwnedFd) {
        socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap()
    }

    #[test]
    fn a_message_and_its_descriptors_cross() {
        let (a, b) = pair();
        let ev = nix::sys::eventfd::EventFd::new().unwrap();
        let hello = ToDaemon::Hello {
            version: VERSION,
            pid: 42,
        };
        send(a.as_fd(), &hello, &[ev.as_fd().as_raw_fd()]).unwrap();
        let (got, fds): (ToDaemon, _) = recv(b.as_fd()).unwrap();
        assert_eq!(got, hello);
        assert_eq!(fds.len(), 1);
        // The received descriptor is the same eventfd: a write on it is read on ours.
        nix::unistd::write(&fds[0], &1u64.to_ne_bytes()).unwrap();
        assert_eq!(ev.read().unwrap(), 1);
        assert_eq!(peer_uid(b.as_fd()).unwrap(), nix::unistd::getuid().as_raw());
    }

    #[test]
    fn garbage_and_eof_are_errors_not_panics() {
        let (a, b) = pair();
        nix::unistd::write(&a, b"{not json").unwrap();
        assert!(matches!(
            recv::<ToDaemon>(b.as_fd()),
            Err(ControlError::Malformed(_))
        ));
        nix::unistd::write(&a, br#"{"msg":"no_such"}"#).unwrap();
        assert!(matches!(
            recv::<ToDaemon>(b.as_fd()),
            Err(ControlError::Malformed(_))
        ));
        drop(a);
        assert!(matches!(
            recv::<ToDaemon>(b.as_fd()),
            Err(ControlError::Closed)
        ));
    }
}
