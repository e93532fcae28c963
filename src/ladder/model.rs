//! The ladder's event model: what happened between two queue pairs, one row per packet or
//! timer, in time order. One model, several renderers (terminal text, an HTML page), and
//! several sources (a pcap/pcapng file, a daemon's live capture, the in-process simulator
//! of the lessons, a conformance run): every source turns what it saw into [`Observed`]
//! packets, [`super::build::Builder`] turns those into [`Ladder`] rows.
//!
//! What a teaching ladder must show (design wave3/congestion-teaching-k8s.md §B2): the
//! requester left, the responder right, time down; one arrow per packet labelled with the
//! opcode, PSN, AckReq and length; AETH kinds (ACK with credits and MSN, RNR NAK with its
//! timer, NAK with its code, IBA §9.7.5.1.4 Table 45); READ responses against the request
//! they answer (§9.7.5.1.2: a READ request consumes one PSN per response packet); what an
//! ACK acknowledges (coalesced ACKs, §9.7.5.1.1); retransmissions and why (a sequence NAK,
//! the local ACK timeout, an RNR NAK); PSNs that never arrived; the RNR wait and the ACK
//! timeout as intervals. Field names are Wireshark's (`infiniband.bth.psn`), so a user can
//! move between the two.

use std::net::{IpAddr, SocketAddr};

/// One packet as a source saw it: the input of the builder.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// tshark's frame number (1-based) for a capture; the packet's index in other sources.
    pub frame: usize,
    /// Nanoseconds since the source's first packet (captures: since the first frame of
    /// the file, as tshark's `frame.time_relative`).
    pub t_ns: i128,
    /// The IP addresses and UDP ports.
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The IP header's ECN bits (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE).
    pub ecn: u8,
    /// The RoCE packet: BTH through ICRC.
    pub roce: &'a [u8],
    /// What became of it (a capture sees only what passed; the simulator also drops).
    pub fate: Fate,
    /// Whether the ICRC verified, when the source could check it (it covers the IP and
    /// UDP headers, which `roce` does not hold: a capture's source checks it, the
    /// simulator's trace does not). Added by h-build for `Stats::bad_icrc`.
    pub icrc_ok: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Delivered,
    /// Lost on the wire (a fault rule); drawn as an arrow that ends in a cross.
    Dropped,
}

/// The whole ladder: one [`Flow`] per QP pair (and one per CM exchange), in order of
/// their first packet.
#[derive(Debug, Clone, Default)]
pub struct Ladder {
    pub flows: Vec<Flow>,
    pub stats: Stats,
}

/// What the builder read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets given to the builder.
    pub packets: usize,
    /// Of those, not RoCE or not parseable (left out of every flow, counted).
    pub malformed: usize,
    /// Of those, whose ICRC did not verify (kept, marked `icrc_ok: Some(false)`).
    pub bad_icrc: usize,
}

/// Who is in a column: an address and a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub ip: IpAddr,
    /// The QPN packets *to* this side carry (BTH DestQP of the other side's packets);
    /// `None` until one is seen (a capture that starts with one direction only).
    pub qpn: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowKind {
    /// Reliable connection: requests, ACKs, NAKs, READ and atomic responses.
    Rc,
    /// Unreliable connection: requests only, PSN gaps still drawn.
    Uc,
    /// Datagrams between two addresses (each arrow names its QPs).
    Ud,
    /// Connection management MADs on QP1 (REQ, REP, RTU, DREQ, ...: IBA chapter 12).
    Cm,
}

/// One QP pair over time. The requester is the side that sent the first request (for a
/// flow whose requests go both ways, e.g. a SEND ping-pong, the side whose packet came
/// first); every packet row says which side sent it.
#[derive(Debug, Clone)]
pub struct Flow {
    pub kind: FlowKind,
    pub requester: Endpoint,
    pub responder: Endpoint,
    pub rows: Vec<Row>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Requester,
    Responder,
}

/// One row of a ladder, in time order.
#[derive(Debug, Clone)]
pub enum Row {
    Packet(Box<Packet>),
    /// PSNs the receiver never saw: the sender's PSNs jumped over them (a capture taken
    /// where the packets had already been lost), drawn where the jump was seen.
    Gap {
        /// The side whose packets are missing.
        from: Side,
        first_psn: u32,
        count: u32,
        t_ns: i128,
    },
    /// A timer that ran: drawn as a bar on `side`'s column from `start_ns` to `end_ns`.
    Wait {
        side: Side,
        kind: WaitKind,
        start_ns: i128,
        end_ns: i128,
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WaitKind {
    /// After an RNR NAK, the requester waits the timer it carried (Table 45), then
    /// retransmits (§9.7.5.2.8).
    Rnr { timer: u8, ms: f64 },
    /// No ACK within the local ACK timeout: the requester retransmits from the oldest
    /// unacknowledged PSN (§9.7.6.1.3). Inferred from the gap before a retransmission
    /// that no NAK explains.
    AckTimeout,
}

/// One packet: an arrow from `from` to the other side.
#[derive(Debug, Clone)]
pub struct Packet {
    pub frame: usize,
    pub t_ns: i128,
    pub from: Side,
    pub fate: Fate,
    pub opcode: u8,
    /// The opcode's name without the transport prefix, as arrows show it
    /// (`RDMA_WRITE_FIRST`, `SEND_ONLY`, `ACKNOWLEDGE`, `RDMA_READ_RESPONSE_LAST`, `CNP`).
    pub name: &'static str,
    pub psn: u32,
    pub ack_req: bool,
    pub solicited: bool,
    pub payload_len: usize,
    /// IP ECN bits and the BTH's BECN (a CNP's).
    pub ecn: u8,
    pub becn: bool,
    /// The AETH, when there is one.
    pub aeth: Option<Aeth>,
    /// RETH (va, rkey, dma length) on WRITE FIRST/ONLY and READ requests.
    pub reth: Option<(u64, u32, u32)>,
    pub imm: Option<u32>,
    /// A request sent again (same PSN as one the requester sent before), and why.
    pub retransmit: Option<Retransmit>,
    /// A request the responder had already seen (its PSN is before the expected PSN when
    /// it arrives), answered from the replay state, not executed again (§9.7.5.1.3).
    pub duplicate: bool,
    /// What an ACK, NAK or READ/atomic response covers: the requests it acknowledges or
    /// answers (a coalesced ACK covers several).
    pub covers: Option<Covers>,
    /// A CM MAD's one-line summary (`REQ lcid=0x... sid=0x...`), for QP1 packets.
    pub cm: Option<String>,
    pub icrc_ok: Option<bool>,
    /// The arrow's label: `RDMA_WRITE_FIRST psn=12 A len=1024` style, the renderers may
    /// shorten it to fit but never reorder it.
    pub label: String,
    /// Every field of the packet with Wireshark's name, in the dissector's order
    /// (`infiniband.bth.opcode`, `infiniband.bth.psn`, `infiniband.aeth.syndrome`, ...),
    /// for the page's details and for tests against tshark.
    pub fields: Vec<Field>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Aeth {
    /// Syndrome 000xxxxx: credits.
    Ack { credits: u8, msn: u32 },
    /// Syndrome 001ttttt: RNR NAK with its timer code and what it means in ms.
    Rnr { timer: u8, ms: f64, msn: u32 },
    /// Syndrome 011xxxxx: NAK, code 0 sequence error, 1 invalid request, 2 remote access
    /// error, 3 remote operational error, 4 invalid RD request.
    Nak { code: u8, msn: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retransmit {
    /// After the NAK (sequence error) in frame `nak_frame`: go back to its PSN.
    AfterNak { nak_frame: usize },
    /// After an RNR NAK in frame `rnr_frame` and its wait.
    AfterRnr { rnr_frame: usize },
    /// No NAK explains it: the local ACK timeout.
    AfterTimeout,
}

/// The requests (by PSN, inclusive, modulo 2^24) a response or acknowledgement covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Covers {
    pub first_psn: u32,
    pub last_psn: u32,
    /// The request's frame, when a READ/atomic response answers one request.
    pub request_frame: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Wireshark's field name (`infiniband.bth.psn`).
    pub name: &'static str,
    /// As tshark prints it with `-T fields` (decimal numbers, `0x` hex where tshark
    /// prints hex).
    pub value: String,
}

/// Which rows to keep (`roce-emu ladder --qp N --from S --to S --psn A-B`).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Flows with this QPN on either side.
    pub qp: Option<u32>,
    /// Rows at or after / before these times (ns since the first packet).
    pub from_ns: Option<i128>,
    pub to_ns: Option<i128>,
    /// Packets with a PSN in this range (inclusive); other rows in it are kept.
    pub psn: Option<(u32, u32)>,
}
