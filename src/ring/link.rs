//! A link between the daemon and one attached process: two rings and their doorbells.
//! The daemon creates everything ([`Link::create`]) and sends the four descriptors over
//! the process's Unix socket ([`LinkFds::send`]); the process receives them
//! ([`LinkFds::recv`]) and maps them ([`Link::attach`]), checking sizes, seals, magic and
//! version, since a descriptor could be anything.

use super::shm::adopt_received;
use super::spsc::{create_region, AttachError, Consumer, Producer};
use nix::sys::socket::{
    recv, recvmsg, send, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned,
    MsgFlags, SockFlag, SockType,
};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// The message that carries a link's descriptors: a tag and the version.
const LINK_MSG: [u8; 8] = *b"RLNK\x01\0\0\0";

/// Why a link could not be made, passed or attached.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error(transparent)]
    Ring(#[from] AttachError),
    #[error("link socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("link message malformed: {0}")]
    Message(&'static str),
}

impl From<nix::Error> for LinkError {
    fn from(e: nix::Error) -> LinkError {
        LinkError::Io(e.into())
    }
}

/// The descriptors of a link, in the order they travel: rx is daemon -> process, tx is
/// process -> daemon; each bell is the process's end of its ring's doorbell ([`bell_pair`]).
#[derive(Debug)]
pub struct LinkFds {
    pub rx_mem: OwnedFd,
    pub tx_mem: OwnedFd,
    pub rx_bell: OwnedFd,
    pub tx_bell: OwnedFd,
}

/// The daemon's end: it produces into rx and consumes tx.
pub struct DaemonEnd {
    pub rx: Producer,
    pub tx: Consumer,
}

/// The process's end: it consumes rx and produces into tx.
pub struct ProcessEnd {
    pub rx: Consumer,
    pub tx: Producer,
}

pub struct Link;

/// A new doorbell: the two ends of a Unix socket pair, one for the producer (it rings by
/// sending a byte) and one for the consumer (it sleeps until its end is readable).
///
/// Why not an eventfd, which is cheaper: an eventfd passed to another process is the same
/// open file there, O_NONBLOCK included, so the other process could clear O_NONBLOCK (one
/// `fcntl`) or fill the counter and make the daemon's next read or write block forever.
/// A socket pair gives each side its own open file, and every call here says
/// `MSG_DONTWAIT` itself: nothing the other side does can make it block. When one side
/// goes, the other's end reads EOF, so a consumer asleep on it wakes.
pub fn bell_pair() -> Result<(OwnedFd, OwnedFd), LinkError> {
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    Ok(socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        flags,
    )?)
}

/// Rings a doorbell (the producer's end). A full socket means the consumer has rings
/// waiting already; an error means the other side is gone, which the control socket
/// reports: neither is ours to handle here.
pub(super) fn ring(bell: &OwnedFd) {
    let _ = send(
        bell.as_raw_fd(),
        &[1],
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
    );
}

/// Takes the rings waiting on a doorbell (the consumer's end), at most a few: a peer
/// that rings without end costs a bounded amount of work per call.
pub(super) fn drain(bell: &OwnedFd) {
    let mut b = [0u8; 8];
    for _ in 0..16 {
        match recv(bell.as_raw_fd(), &mut b, MsgFlags::MSG_DONTWAIT) {
            Ok(n) if n > 0 => {}
            _ => return,
        }
    }
}

impl Link {
    /// Creates both rings (`capacity` data bytes each) and both doorbells, maps the
    /// daemon's end, and returns it with the descriptors to send to the process.
    pub fn create(capacity: usize) -> Result<(DaemonEnd, LinkFds), LinkError> {
        let (rx_ours, rx_bell) = bell_pair()?;
        let (tx_ours, tx_bell) = bell_pair()?;
        let fds = LinkFds {
            rx_mem: create_region(capacity)?,
            tx_mem: create_region(capacity)?,
            rx_bell,
            tx_bell,
        };
        let end = DaemonEnd {
            rx: Producer::attach(fds.rx_mem.as_fd(), rx_ours)?,
            tx: Consumer::attach(fds.tx_mem.as_fd(), tx_ours)?,
        };
        Ok((end, fds))
    }

    /// Maps the descriptors the daemon sent. The memory descriptors are not needed once
    /// mapped and close when `fds` drops.
    pub fn attach(fds: LinkFds) -> Result<ProcessEnd, LinkError> {
        Ok(ProcessEnd {
            rx: Consumer::attach(fds.rx_mem.as_fd(), fds.rx_bell)?,
            tx: Producer::attach(fds.tx_mem.as_fd(), fds.tx_bell)?,
        })
    }
}

impl LinkFds {
    /// Sends the four descriptors over a connected Unix socket (`SCM_RIGHTS`).
    pub fn send(&self, sock: BorrowedFd<'_>) -> Result<(), LinkError> {
        let raw: [RawFd; 4] = [
            self.rx_mem.as_raw_fd(),
            self.tx_mem.as_raw_fd(),
            self.rx_bell.as_raw_fd(),
            self.tx_bell.as_raw_fd(),
        ];
        let iov = [IoSlice::new(&LINK_MSG)];
        let cmsg = [ControlMessage::ScmRights(&raw)];
        // Never waits: a process that does not read its socket is not served (the daemon
        // gives up on it), it does not stop the daemon.
        let flags = MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT;
        let n = sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsg, flags, None)?;
        if n != LINK_MSG.len() {
            return Err(LinkError::Message("short send"));
        }
        Ok(())
    }

    /// Receives a link's descriptors. Every descriptor that arrives is owned at once, so
    /// a malformed message leaks none.
    pub fn recv(sock: BorrowedFd<'_>) -> Result<LinkFds, LinkError> {
        let mut msg = [0u8; 16];
        // Room for more descriptors than we expect: extra ones arrive and are closed
        // instead of being cut off (MSG_CTRUNC) and leaked by the kernel's truncation.
        let mut space = nix::cmsg_space!([RawFd; 16]);
        let (bytes, flags, raw) = {
            let mut iov = [IoSliceMut::new(&mut msg)];
            let r = recvmsg::<()>(
                sock.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )?;
            let mut raw = Vec::new();
            for c in r.cmsgs()? {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    raw.extend(fds);
                }
            }
            (r.bytes, r.flags, raw)
        };
        let owned = adopt_received(&raw);
        if flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC) {
            return Err(LinkError::Message("truncated"));
        }
        if msg[..bytes] != LINK_MSG {
            return Err(LinkError::Message("not a link message of this version"));
        }
        let Ok([rx_mem, tx_mem, rx_bell, tx_bell]) = <[OwnedFd; 4]>::try_from(owned) else {
            return Err(LinkError::Message("not four descriptors"));
        };
        Ok(LinkFds {
            rx_mem,
            tx_mem,
            rx_bell,
            tx_bell,
        })
    }
}
