//! A link between the daemon and one attached process: two rings and their doorbells.
//! The daemon creates everything ([`Link::create`]) and sends the four descriptors over
//! the process's Unix socket ([`LinkFds::send`]); the process receives them
//! ([`LinkFds::recv`]) and maps them ([`Link::attach`]), checking sizes, seals, magic and
//! version, since a descriptor could be anything.

use super::shm::adopt_received;
use super::spsc::{create_region, AttachError, Consumer, Producer};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
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
/// process -> daemon; each bell is the eventfd its ring's consumer sleeps on.
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

/// A new doorbell: an eventfd, counter 0.
pub fn new_bell() -> Result<OwnedFd, LinkError> {
    // Non-blocking: the consumer drains it without ever blocking in read, and a producer's
    // write never blocks (the counter cannot realistically reach its maximum).
    Ok(EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?.into())
}

impl Link {
    /// Creates both rings (`capacity` data bytes each) and both doorbells, maps the
    /// daemon's end, and returns it with the descriptors to send to the process.
    pub fn create(capacity: usize) -> Result<(DaemonEnd, LinkFds), LinkError> {
        let fds = LinkFds {
            rx_mem: create_region(capacity)?,
            tx_mem: create_region(capacity)?,
            rx_bell: new_bell()?,
            tx_bell: new_bell()?,
        };
        let end = DaemonEnd {
            rx: Producer::attach(fds.rx_mem.as_fd(), fds.rx_bell.try_clone()?)?,
            tx: Consumer::attach(fds.tx_mem.as_fd(), fds.tx_bell.try_clone()?)?,
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
        let n = sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None)?;
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
