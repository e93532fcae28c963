//! A backend for unit tests of the wrappers (faults, capture): hands out what is queued in
//! `rx` on receive, records what it is asked to send.

use super::{Backend, BackendError, Outgoing, PortStats, Received};
use nix::sys::eventfd::EventFd;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};

/// Hands out what is queued in `rx` on receive; records every send.
pub(crate) struct Fake {
    /// Datagrams for the next receives, each with its source and destination.
    pub(crate) rx: VecDeque<(SocketAddr, SocketAddr, Vec<u8>)>,
    /// The IPv4 ID every received datagram comes with (`None`: unknown, as from a UDP
    /// socket).
    pub(crate) ipv4_id: Option<u16>,
    pub(crate) sent: Vec<Vec<u8>>,
    pub(crate) fd: EventFd,
}

impl Backend for Fake {
    fn local(&self) -> SocketAddr {
        "127.0.0.1:4791".parse().unwrap()
    }
    fn recv_batch(&mut self, pool: &mut [u8], out: &mut [Received]) -> Result<usize, BackendError> {
        let mut n = 0;
        let mut off = 0;
        while n < out.len() {
            let Some((src, dst, d)) = self.rx.pop_front() else {
                break;
            };
            pool[off..off + d.len()].copy_from_slice(&d);
            out[n] = Received {
                src,
                dst,
                offset: off,
                len: d.len(),
                segment: None,
                ipv4_id: self.ipv4_id,
                ecn: Default::default(),
            };
            off += d.len();
            n += 1;
        }
        Ok(n)
    }
    fn send_batch(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &[Outgoing],
    ) -> Result<(), BackendError> {
        for (i, o) in out.iter().enumerate() {
            self.sent.push(pool[i * slot..i * slot + o.len].to_vec());
        }
        Ok(())
    }
    fn rx_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
    fn stats(&self) -> PortStats {
        PortStats::default()
    }
}

impl Fake {
    pub(crate) fn new() -> Fake {
        Fake {
            rx: VecDeque::new(),
            ipv4_id: Some(1),
            sent: Vec::new(),
            fd: EventFd::new().unwrap(),
        }
    }

    /// Queues datagrams from and to the local address.
    pub(crate) fn queue(&mut self, datagrams: impl IntoIterator<Item = Vec<u8>>) {
        let at = self.local();
        self.rx.extend(datagrams.into_iter().map(|d| (at, at, d)));
    }
}
