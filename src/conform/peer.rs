//! The scripted peer's port: UDP 4791 on an address of its own, packets in and out one at
//! a time (a script is a trace, not a stream), ICRCs computed and checked.

use super::packet::Got;
use crate::backend::udp::{wait_readable, RX_SLOT};
use crate::backend::{Backend, Outgoing, Received};
use crate::wire::icrc::{self, Ipv4IdSolver, PseudoHeaders};
use crate::wire::{Ecn, ROCE_UDP_PORT};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

pub struct Peer {
    udp: crate::backend::udp::UdpBackend,
    pool: Vec<u8>,
    queue: VecDeque<Got>,
    solver: Ipv4IdSolver,
    /// Every packet sent and received since the last `drain`, for the run's ladder.
    trace: Vec<Seen>,
    /// The ECN codepoint of the packet being sent (`send_ecn`).
    ecn: Ecn,
}

/// One packet of the exchange as the peer saw it (sent or received).
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// BTH through ICRC.
    pub bytes: Vec<u8>,
    pub icrc_ok: bool,
}

/// A bound on one script's trace (a script is tens of packets; a target flooding the peer
/// must not grow it without end).
const MAX_TRACE: usize = 4096;

/// How long the peer waits for a daemon holding its address to leave: an on-demand
/// daemon (a tool or program run just before, `daemon::demand`) exits after its idle
/// time and its last QPN block's quarantine; a margin on top for its exit itself.
const DAEMON_LEAVES: Duration = Duration::from_secs(
    crate::daemon::demand::DEFAULT_IDLE.as_secs()
        + crate::daemon::demand::DEFAULT_QUARANTINE.as_secs()
        + 3,
);

/// Binds the peer's port. The peer writes packets byte by byte, so it cannot share a
/// daemon's port: while a daemon holds the address (the message says so), wait for it to
/// go, saying so once, at most [`DAEMON_LEAVES`]; then the daemon's own error.
fn bind_waiting(ip: IpAddr) -> Result<crate::backend::udp::UdpBackend, String> {
    use crate::backend::BackendError;
    let start = Instant::now();
    let mut said = false;
    loop {
        match crate::backend::udp::UdpBackend::bind(ip) {
            Ok(u) => return Ok(u),
            Err(BackendError::Bind { source, .. })
                if source.get_ref().is_some() && start.elapsed() < DAEMON_LEAVES =>
            {
                if !said {
                    tracing::warn!(
                        "{source}; waiting up to {} s for it to exit (a daemon started on \
                         demand leaves on its own)",
                        DAEMON_LEAVES.as_secs()
                    );
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

impl Peer {
    pub fn bind(ip: IpAddr) -> Result<Peer, String> {
        let mut udp = bind_waiting(ip)?;
        // One datagram per packet, exactly as the script wrote them.
        udp.set_gso(false);
        Ok(Peer {
            udp,
            pool: vec![0; RX_SLOT * 8],
            queue: VecDeque::new(),
            solver: Ipv4IdSolver::new(),
            ecn: Ecn::NotEct,
            trace: Vec::new(),
        })
    }

    pub fn local(&self) -> SocketAddr {
        Backend::local(&self.udp)
    }

    /// Sends `roce` (BTH through ICRC) to `to`:4791 with its ICRC filled in (inverted
    /// when `bad_icrc`).
    /// Sends `roce` (BTH through ICRC) to `to`:4791 with its ICRC filled in (inverted
    /// when `bad_icrc`) and the ECN codepoint `ecn` in its IP header.
    pub fn send_ecn(
        &mut self,
        to: IpAddr,
        roce: Vec<u8>,
        bad_icrc: bool,
        ecn: Ecn,
    ) -> Result<(), String> {
        self.ecn = ecn;
        let r = self.send(to, roce, bad_icrc);
        self.ecn = Ecn::NotEct;
        r
    }

    pub fn send(&mut self, to: IpAddr, mut roce: Vec<u8>, bad_icrc: bool) -> Result<(), String> {
        let src = self.local();
        let dst = SocketAddr::new(to, ROCE_UDP_PORT);
        // The IPv4 identification is 0: the UDP backend sends with DF from an
        // unconnected socket (see backend::udp).
        let ph = PseudoHeaders::new(src, dst, 0, roce.len());
        icrc::fill(ph.ip(), ph.udp(), &mut roce).map_err(|e| e.to_string())?;
        if bad_icrc {
            let n = roce.len();
            for b in &mut roce[n - 4..] {
                *b = !*b;
            }
        }
        let len = roce.len();
        if len > RX_SLOT {
            return Err(format!("a {len}-byte packet is larger than a datagram"));
        }
        self.record(src, dst, &roce, !bad_icrc);
        self.pool[..len].copy_from_slice(&roce);
        let out = [Outgoing {
            src,
            dst,
            len,
            ecn: self.ecn,
        }];
        self.udp
            .send_batch(&mut self.pool, RX_SLOT, &out)
            .map_err(|e| e.to_string())
    }

    /// The next packet before `deadline`, or `None`.
    pub fn next(&mut self, deadline: Instant) -> Option<Got> {
        loop {
            self.pump();
            if let Some(g) = self.queue.pop_front() {
                return Some(g);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            if left.is_zero() {
                return None;
            }
            wait_readable(&[self.udp.rx_fd()], left.min(Duration::from_millis(50)));
        }
    }

    /// Forgets what has arrived (between scripts), and the trace.
    pub fn drain(&mut self) {
        self.pump();
        self.queue.clear();
        self.trace.clear();
    }

    /// The packets sent and received since the last `drain`, in order.
    pub fn trace(&self) -> &[Seen] {
        &self.trace
    }

    fn record(&mut self, src: SocketAddr, dst: SocketAddr, bytes: &[u8], icrc_ok: bool) {
        if self.trace.len() < MAX_TRACE {
            self.trace.push(Seen {
                at: Instant::now(),
                src,
                dst,
                bytes: bytes.to_vec(),
                icrc_ok,
            });
        }
    }

    fn pump(&mut self) {
        let mut rx = [Received {
            src: self.local(),
            dst: self.local(),
            offset: 0,
            len: 0,
            segment: None,
            ipv4_id: None,
            ecn: Ecn::NotEct,
        }; 8];
        loop {
            let n = match self.udp.recv_batch(&mut self.pool, &mut rx) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!("conform peer: {e}");
                    0
                }
            };
            if n == 0 {
                return;
            }
            for r in &rx[..n] {
                let data = &self.pool[r.offset..r.offset + r.len];
                let seg = r.segment.unwrap_or(r.len).max(1);
                for d in data.chunks(seg) {
                    let ph = PseudoHeaders::new(r.src, r.dst, 0, d.len());
                    let icrc_ok = match r.src.ip() {
                        IpAddr::V4(_) => self.solver.solve(ph.ip(), ph.udp(), d).is_ok(),
                        IpAddr::V6(_) => icrc::verify(ph.ip(), ph.udp(), d).is_ok(),
                    };
                    if self.trace.len() < MAX_TRACE {
                        self.trace.push(Seen {
                            at: Instant::now(),
                            src: r.src,
                            dst: r.dst,
                            bytes: d.to_vec(),
                            icrc_ok,
                        });
                    }
                    self.queue.push_back(Got {
                        bytes: d.to_vec(),
                        icrc_ok,
                        ecn: r.ecn,
                    });
                }
            }
        }
    }
}
