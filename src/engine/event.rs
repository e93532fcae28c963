//! What crosses the engine boundary besides work requests: datagrams in, transmits and
//! asynchronous events out.

use crate::wire::Ecn;
use std::net::SocketAddr;

/// A received RoCEv2 datagram: the UDP payload (BTH through ICRC) and what the receive
/// path knows of the headers around it.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    /// Sender's address and UDP source port.
    pub src: SocketAddr,
    /// Our address and UDP port (4791).
    pub dst: SocketAddr,
    /// The IPv4 identification, when the receive path saw the IP header (TAP, AF_PACKET,
    /// simulation). Without it an IPv4 ICRC cannot be checked (it covers the ID).
    pub ipv4_id: Option<u16>,
    /// The ECN codepoint it arrived with: CE is a congestion notification (IBA A17.9).
    pub ecn: Ecn,
    /// BTH through ICRC.
    pub data: &'a [u8],
}

/// A packet the engine wrote into the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Transmit {
    /// Our address and the QP's UDP source port (the ICRC covers both).
    pub src: SocketAddr,
    /// The peer's address and port 4791.
    pub dst: SocketAddr,
    /// Bytes written at the start of the buffer (BTH through ICRC).
    pub len: usize,
    /// The ECN codepoint to send it with: ECT(0) from a QP with congestion control on.
    pub ecn: Ecn,
}

/// Asynchronous events (IBA 11.6.3; ibv_event_type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A QP went to the error state on its own (completion error, protocol violation).
    QpFatal { qpn: u32 },
    /// The responder received a request it found invalid and NAKed it.
    QpRequestError { qpn: u32 },
    /// The responder refused a remote access (bad R_Key, PD, rights or range).
    QpAccessError { qpn: u32 },
    /// A completion did not fit in the CQ: the CQ is in error and its QPs went to ERR.
    CqError { cq: u32, lost: u64 },
    /// The QP reached SQD with the send queue drained (if asked for).
    SqDrained { qpn: u32 },
    /// An SRQ's armed limit was crossed: fewer than `srq_limit` WQEs are left after a QP
    /// took one. One-shot: the limit is 0 again until re-armed (rxe `get_srq_wqe`;
    /// IBV_EVENT_SRQ_LIMIT_REACHED).
    SrqLimitReached { srq: u32 },
    /// A QP on an SRQ went to ERR and will take no more WQEs from it (IBA o11-5.2.5; rxe
    /// `flush_recv_queue`): the program may now destroy it without losing a receive.
    QpLastWqeReached { qpn: u32 },
}
