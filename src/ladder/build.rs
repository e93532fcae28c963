//! The builder: [`Observed`] packets in, one [`Flow`] per QP pair out, with what a
//! teaching ladder must show worked out from the PSNs (design wave3 §B2).
//!
//! Grouping: RC and UC packets by QP pair (a packet names only its destination QP, so
//! the two directions of a pair are joined when the reverse direction is first seen: the
//! flow between the same two addresses whose QPN on the sending side is still unknown);
//! UD packets by address pair; MADs to QP1 (the GSI, IBA ch. 13) into a `Cm` flow by
//! address pair, with the CM message's summary (`wire::pretty::MadDecode`, what
//! `roce-emu pcap` prints).
//!
//! Per flow and per direction of requests (a ping-pong sends requests both ways):
//! - a request whose PSN is before the next new PSN its sender would use is a
//!   retransmission. The first of a run of them (a PSN that does not follow the previous
//!   request) starts a round, and the round's reason is: an RNR NAK since the last round
//!   (`AfterRnr`; it wins over a sequence NAK for the same PSN, which rxe's responder also
//!   sends when a request arrives during its RNR wait, as send_bw_rnr.pcap shows: the
//!   requester resends when its RNR timer ends, IBA 9.7.5.2.8), else a sequence NAK since
//!   the last round (`AfterNak`, go-back-N, 9.7.5.2.1; a READ response that arrives
//!   with PSNs missing before it counts as that NAK: rxe's requester asks again at
//!   once), else the local ACK timeout
//!   (`AfterTimeout`, 9.7.6.1.3). The rest of the round inherits its reason;
//! - `Wait` rows: an RNR wait from the RNR NAK to the retransmission it caused; an ACK
//!   timeout from the last request its requester sent, or answer to its requests it
//!   received, before the retransmission (sending a request arms the requester's retry
//!   timer and an answer that makes progress re-arms it, rxe's `retrans_timer`; an answer
//!   dropped on its way, or the other side's requests, re-arm nothing): the latest moment
//!   the timer can have started, so the bar is the shortest timeout consistent with what
//!   was seen);
//! - a `Gap` when a new PSN jumps over PSNs (lost before the capture point, or on UC);
//!   a READ request consumes ceil(len/MTU) PSNs (IBA 9.7.5.1.2); while the flow has not
//!   shown its MTU (no FIRST/MIDDLE payload yet, e.g. READs pipelined before any
//!   response), the next PSN may be anywhere the READ can have reached (ceil(len/4096)
//!   to ceil(len/256) PSNs): neither a gap nor a retransmission is drawn there;
//! - duplicates, the responder's view: a request before the PSN the responder expects
//!   (which advances with each in-order request and is reset by its NAKs, RNR NAKs and
//!   ACKs);
//! - `covers`: an ACK covers the request PSNs it newly acknowledges (all up to its PSN:
//!   a coalesced ACK covers several, 9.7.5.1.1); a NAK or RNR NAK those before its PSN
//!   (the implicit acknowledgement of 9.7.5.1.4), `None` when nothing is new; a READ
//!   response the READ request it answers, `ceil(len/MTU)` PSNs from the request's
//!   (MTU inferred: the largest FIRST/MIDDLE payload of the flow rounded up to a power of
//!   two in 256..4096, else 1024 or the largest ONLY/LAST payload rounded up); an atomic
//!   ACK its atomic request.
//!
//! Dropped packets (the simulator's) are rows; a dropped response changes nothing on the
//! requester's side (it never arrived), a dropped request nothing on the responder's.
//! Nothing here panics on any bytes: a packet that does not parse is counted in
//! `Stats::malformed` and left out.

mod packet;

use super::model::{
    Aeth, Covers, Endpoint, Fate, Filter, Flow, FlowKind, Ladder, Observed, Packet, Retransmit,
    Row, Side, Stats, WaitKind,
};
use crate::wire::opcode::{Flags, Transport};
use crate::wire::pretty::GSI_QPN;
use crate::wire::{Psn, RocePacket, RoceRepr};
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

pub use packet::{nak_name, rnr_ms, short_name};

/// READ and atomic requests remembered per direction, to match their responses (rxe's
/// default `max_rd_atomic` is far below this; older ones are forgotten).
const MAX_OUTSTANDING: usize = 1024;

#[derive(Debug, Clone, Copy)]
struct ReqRec {
    psn: Psn,
    /// DMA length (READ) or 0 (atomic).
    len: u32,
    read: bool,
    frame: usize,
}

/// What one side's requests and the other side's answers to them have shown.
#[derive(Debug, Default)]
struct Dir {
    /// The first request PSN seen.
    first: Option<Psn>,
    /// The next new PSN the sender would use.
    next: Option<Psn>,
    /// The last request, when it was a new READ: its PSN and DMA length.
    last_read: Option<(Psn, u32)>,
    /// The current retransmission round: its reason and the PSN that continues it.
    round: Option<(Retransmit, Psn)>,
    /// An RNR NAK (frame, time, timer) not yet followed by a retransmission.
    rnr: Option<(usize, i128, u8)>,
    /// A sequence NAK (frame) not yet followed by a retransmission.
    nak: Option<usize>,
    /// The responder's expected PSN.
    epsn: Option<Psn>,
    /// The last PSN acknowledged (as the requester saw it).
    acked: Option<Psn>,
    reqs: VecDeque<ReqRec>,
    /// The next READ response PSN within a multi-packet response: sent, and arrived.
    resp_next: Option<Psn>,
    resp_seen: Option<Psn>,
    /// The last request sent or answer received: when the retry timer last (re)started.
    last_t: Option<i128>,
}

#[derive(Debug, Default)]
struct FlowState {
    dirs: [Dir; 2],
    /// Largest FIRST/MIDDLE payload, largest other payload (MTU inference).
    max_mid: usize,
    max_end: usize,
}

impl FlowState {
    fn mtu(&self) -> u32 {
        let p2 = |n: usize| (n.clamp(256, 4096) as u32).next_power_of_two();
        if self.max_mid > 0 {
            p2(self.max_mid)
        } else {
            p2(self.max_end).max(1024)
        }
    }
}

fn idx(s: Side) -> usize {
    match s {
        Side::Requester => 0,
        Side::Responder => 1,
    }
}

fn other(s: Side) -> Side {
    match s {
        Side::Requester => Side::Responder,
        Side::Responder => Side::Requester,
    }
}

fn ceil_div(a: u32, b: u32) -> u32 {
    a.div_ceil(b.max(1)).max(1)
}

/// `lo <= p <= hi` in serial order.
fn within(p: Psn, lo: Psn, hi: Psn) -> bool {
    p.diff(lo) >= 0 && hi.diff(p) >= 0
}

/// A key for flows found by address pair (UD, CM).
fn pair_key(a: IpAddr, b: IpAddr) -> (IpAddr, IpAddr) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

/// Builds a [`Ladder`] from packets given in time order.
#[derive(Debug, Default)]
pub struct Builder {
    flows: Vec<Flow>,
    state: Vec<FlowState>,
    stats: Stats,
    last_t: Option<i128>,
    /// RC/UC: (to ip, dest QPN, from ip) -> (flow, the receiving side).
    by_qp: HashMap<(IpAddr, u32, IpAddr), (usize, Side)>,
    /// UD and CM: (kind is CM, address pair) -> flow.
    by_pair: HashMap<(bool, (IpAddr, IpAddr)), usize>,
}

impl Builder {
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Adds one packet (sources give them in time order). Returns the rows this packet
    /// completed, each with its flow's index in `flows()`, in the order they are to be
    /// drawn (a `Wait` row comes before the packet that ends it, a `Gap` before the
    /// packet that shows it).
    pub fn push(&mut self, o: &Observed<'_>) -> Vec<(usize, Row)> {
        self.stats.packets += 1;
        let Some(r) = RocePacket::new_checked(o.roce)
            .ok()
            .and_then(|p| RoceRepr::parse(&p).ok())
        else {
            self.stats.malformed += 1;
            return Vec::new();
        };
        let Some(info) = r.bth.opcode.info() else {
            self.stats.malformed += 1;
            return Vec::new();
        };
        if o.icrc_ok == Some(false) {
            self.stats.bad_icrc += 1;
        }
        let (fi, from) = match info.transport {
            Transport::Ud if r.bth.dqpn == GSI_QPN => self.pair_flow(o, FlowKind::Cm),
            Transport::Ud => self.pair_flow(o, FlowKind::Ud),
            Transport::Rc => self.qp_flow(o, &r, FlowKind::Rc),
            Transport::Uc => self.qp_flow(o, &r, FlowKind::Uc),
            Transport::Cnp => self.qp_flow(o, &r, FlowKind::Rc),
            Transport::Rd => {
                // The table has no RD opcode; should one appear, it is not drawn.
                self.stats.malformed += 1;
                return Vec::new();
            }
        };
        let kind = self.flows[fi].kind;
        let mut p = packet::packet(o, &r, from, kind == FlowKind::Cm);
        let mut out = Vec::new();
        let st = &mut self.state[fi];
        if info.is(Flags::START.union(Flags::PAYLOAD)) && !info.is(Flags::END)
            || info.is(Flags::MIDDLE)
        {
            st.max_mid = st.max_mid.max(r.payload_len);
        } else {
            st.max_end = st.max_end.max(r.payload_len);
        }
        if matches!(kind, FlowKind::Rc | FlowKind::Uc) {
            if info.is(Flags::REQ) {
                request(st, kind, &r, o, &mut p, &mut out);
            } else if info.is(Flags::RESP) {
                response(st, &r, o, &mut p, &mut out);
            }
        }
        out.push(Row::Packet(Box::new(p)));
        self.last_t = Some(o.t_ns);
        let rows = &mut self.flows[fi].rows;
        out.into_iter()
            .map(|row| {
                rows.push(row.clone());
                (fi, row)
            })
            .collect()
    }

    /// The flows so far (their rows: every row returned by `push` so far).
    pub fn flows(&self) -> &[Flow] {
        &self.flows
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The ladder; an RNR wait that no retransmission ended is closed at the last
    /// packet's time.
    pub fn finish(mut self) -> Ladder {
        let end = self.last_t.unwrap_or(0);
        for (f, st) in self.flows.iter_mut().zip(&mut self.state) {
            for (i, d) in st.dirs.iter_mut().enumerate() {
                if let Some((_, t, timer)) = d.rnr.take() {
                    f.rows.push(Row::Wait {
                        side: if i == 0 {
                            Side::Requester
                        } else {
                            Side::Responder
                        },
                        kind: WaitKind::Rnr {
                            timer,
                            ms: rnr_ms(timer),
                        },
                        start_ns: t,
                        end_ns: end.max(t),
                    });
                }
            }
        }
        Ladder {
            flows: self.flows,
            stats: self.stats,
        }
    }

    fn new_flow(&mut self, kind: FlowKind, requester: Endpoint, responder: Endpoint) -> usize {
        self.flows.push(Flow {
            kind,
            requester,
            responder,
            rows: Vec::new(),
        });
        self.state.push(FlowState::default());
        self.flows.len() - 1
    }

    /// UD and CM flows: one per address pair; the requester is the first sender.
    fn pair_flow(&mut self, o: &Observed<'_>, kind: FlowKind) -> (usize, Side) {
        let (s, d) = (o.src.ip(), o.dst.ip());
        let dqpn = RocePacket::new_checked(o.roce).ok().map(|p| p.bth().dqpn());
        let key = (kind == FlowKind::Cm, pair_key(s, d));
        let fi = match self.by_pair.get(&key) {
            Some(&fi) => fi,
            None => {
                let fi = self.new_flow(
                    kind,
                    Endpoint { ip: s, qpn: None },
                    Endpoint { ip: d, qpn: dqpn },
                );
                self.by_pair.insert(key, fi);
                fi
            }
        };
        let f = &mut self.flows[fi];
        // The side that sent: by address; on one address (loopback), the side whose
        // QPN this packet is not addressed to.
        let from = if s != d {
            if f.requester.ip == s {
                Side::Requester
            } else {
                Side::Responder
            }
        } else if f.responder.qpn == dqpn {
            Side::Requester
        } else {
            Side::Responder
        };
        let to = match other(from) {
            Side::Requester => &mut f.requester,
            Side::Responder => &mut f.responder,
        };
        if to.qpn.is_none() {
            to.qpn = dqpn;
        }
        (fi, from)
    }

    /// RC and UC flows: one per QP pair.
    fn qp_flow(&mut self, o: &Observed<'_>, r: &RoceRepr, kind: FlowKind) -> (usize, Side) {
        let (s, d, q) = (o.src.ip(), o.dst.ip(), r.bth.dqpn);
        if let Some(&(fi, to)) = self.by_qp.get(&(d, q, s)) {
            return (fi, other(to));
        }
        let info = r.bth.opcode.info();
        let answer = info.is_some_and(|i| i.is(Flags::RESP) || i.is(Flags::CNP));
        // The reverse direction of a flow seen so far one way only: the receiver's
        // address with its QPN unknown, the sender's with its QPN known. Several (two QP
        // pairs between the same hosts): an answer goes to the one whose requests' PSNs
        // are nearest its PSN.
        let mut best: Option<(usize, Side, u32)> = None;
        for (fi, f) in self.flows.iter().enumerate() {
            let compatible = f.kind == kind || r.bth.opcode.0 == crate::wire::opcode::op::CNP.0;
            if !compatible || !matches!(f.kind, FlowKind::Rc | FlowKind::Uc) {
                continue;
            }
            for to in [Side::Requester, Side::Responder] {
                let (te, fe) = match to {
                    Side::Requester => (&f.requester, &f.responder),
                    Side::Responder => (&f.responder, &f.requester),
                };
                if te.ip == d
                    && te.qpn.is_none()
                    && fe.ip == s
                    && fe.qpn.is_some_and(|x| x != q || s != d)
                {
                    let dist = self.state[fi].dirs[idx(to)]
                        .next
                        .map_or(u32::MAX, |n| r.bth.psn.diff(n).unsigned_abs());
                    let dist = if answer { dist } else { 0 };
                    if best.is_none_or(|(_, _, b)| dist < b) {
                        best = Some((fi, to, dist));
                    }
                }
            }
        }
        let (fi, to) = match best {
            Some((fi, to, _)) => {
                let f = &mut self.flows[fi];
                match to {
                    Side::Requester => f.requester.qpn = Some(q),
                    Side::Responder => f.responder.qpn = Some(q),
                }
                (fi, to)
            }
            None => {
                let sender = Endpoint { ip: s, qpn: None };
                let receiver = Endpoint {
                    ip: d,
                    qpn: Some(q),
                };
                if answer {
                    (self.new_flow(kind, receiver, sender), Side::Requester)
                } else {
                    (self.new_flow(kind, sender, receiver), Side::Responder)
                }
            }
        };
        self.by_qp.insert((d, q, s), (fi, to));
        (fi, other(to))
    }
}

/// A request from `p.from`: retransmission, gap, duplicate, and what it asks for.
fn request(
    st: &mut FlowState,
    kind: FlowKind,
    r: &RoceRepr,
    o: &Observed<'_>,
    p: &mut Packet,
    out: &mut Vec<Row>,
) {
    let (mtu, mtu_known) = (st.mtu(), st.max_mid > 0);
    let d = &mut st.dirs[idx(p.from)];
    let last_t = d.last_t.replace(o.t_ns);
    let psn = r.bth.psn;
    let info = r.bth.opcode.info();
    let read = info.is_some_and(|i| i.is(Flags::READ));
    let atomic = info.is_some_and(|i| i.is(Flags::ATOMIC));
    let len = r.reth.map_or(0, |x| x.dma_len);
    let consumed = if read { ceil_div(len, mtu) } else { 1 };
    // Where the next new PSN may be: [lo, hi], and where a gap would start. After a
    // READ whose extent the flow's MTU does not yet tell (no FIRST/MIDDLE payload seen),
    // anywhere it can have reached.
    let last_read = d.last_read.take();
    let mut new = true;
    if let Some(next) = d.next {
        let (lo, hi, gap_from) = match last_read {
            Some((rp, rl)) if !mtu_known => {
                let hi = rp.add(ceil_div(rl, 256));
                (rp.add(ceil_div(rl, 4096)), hi, hi.add(1))
            }
            Some((rp, rl)) => {
                let e = rp.add(ceil_div(rl, mtu));
                (e, e, e)
            }
            None => (next, next, next),
        };
        if psn.is_after(hi) {
            let count = psn.diff(gap_from);
            if count > 0 {
                out.push(Row::Gap {
                    from: p.from,
                    first_psn: gap_from.value(),
                    count: count as u32,
                    t_ns: o.t_ns,
                });
            }
        } else if psn.is_before(lo) && kind == FlowKind::Rc {
            new = false;
        }
    } else {
        d.first = Some(psn);
    }
    if new {
        d.next = Some(psn.add(consumed));
        d.round = None;
        if read {
            d.last_read = Some((psn, len));
        }
    } else {
        let continues = d.round.filter(|&(_, n)| n == psn).map(|(why, _)| why);
        let why = match continues {
            Some(why) => why,
            None => {
                if let Some((frame, t, timer)) = d.rnr.take() {
                    d.nak = None;
                    out.push(Row::Wait {
                        side: p.from,
                        kind: WaitKind::Rnr {
                            timer,
                            ms: rnr_ms(timer),
                        },
                        start_ns: t,
                        end_ns: o.t_ns.max(t),
                    });
                    Retransmit::AfterRnr { rnr_frame: frame }
                } else if let Some(frame) = d.nak.take() {
                    Retransmit::AfterNak { nak_frame: frame }
                } else {
                    if let Some(t) = last_t {
                        out.push(Row::Wait {
                            side: p.from,
                            kind: WaitKind::AckTimeout,
                            start_ns: t,
                            end_ns: o.t_ns.max(t),
                        });
                    }
                    Retransmit::AfterTimeout
                }
            }
        };
        p.retransmit = Some(why);
        d.round = Some((why, psn.add(consumed)));
    }
    if read || atomic {
        if d.reqs.len() == MAX_OUTSTANDING {
            d.reqs.pop_front();
        }
        d.reqs.push_back(ReqRec {
            psn,
            len,
            read,
            frame: o.frame,
        });
    }
    // The responder's view (RC: UC has no duplicates to answer).
    if kind == FlowKind::Rc && o.fate == Fate::Delivered {
        match d.epsn {
            Some(e) if psn.is_before(e) => p.duplicate = true,
            Some(e) if psn == e => d.epsn = Some(psn.add(consumed)),
            Some(_) => {} // out of sequence: the responder NAKs it
            None => d.epsn = Some(psn.add(consumed)),
        }
    }
}

/// A response from `p.from` to the other side's requests.
fn response(
    st: &mut FlowState,
    r: &RoceRepr,
    o: &Observed<'_>,
    p: &mut Packet,
    out: &mut Vec<Row>,
) {
    let mtu = st.mtu();
    let d = &mut st.dirs[idx(other(p.from))];
    let psn = r.bth.psn;
    let Some(info) = r.bth.opcode.info() else {
        return;
    };
    let arrived = o.fate == Fate::Delivered;
    if arrived {
        d.last_t = Some(o.t_ns);
    }
    // The requests before `upto` (inclusive) not acknowledged before.
    let newly = |d: &Dir, upto: Psn| -> Option<Covers> {
        let first = match (d.acked, d.first) {
            (Some(a), _) => a.add(1),
            (None, Some(f)) => f,
            (None, None) => upto,
        };
        (upto.diff(first) >= 0).then_some(Covers {
            first_psn: first.value(),
            last_psn: upto.value(),
            request_frame: None,
        })
    };
    let ack_to = |d: &mut Dir, upto: Psn| {
        if arrived && d.acked.is_none_or(|a| upto.is_after(a)) {
            d.acked = Some(upto);
        }
    };
    if info.is(Flags::READ) {
        // The READ request this response answers: the latest whose PSNs hold it.
        let req = d
            .reqs
            .iter()
            .rev()
            .find(|q| q.read && within(psn, q.psn, q.psn.add(ceil_div(q.len, 256) - 1)))
            .copied();
        if let Some(q) = req {
            let n = ceil_div(q.len, mtu);
            p.covers = Some(Covers {
                first_psn: q.psn.value(),
                last_psn: q.psn.add(n - 1).value(),
                request_frame: Some(q.frame),
            });
        }
        // Response packets missing within a READ's responses: a gap where they never
        // reached the capture (one the simulator dropped is its own row). The requester,
        // seeing a later PSN arrive, asks again from the first missing one at once (rxe's
        // completer: check_psn, COMPST_ERROR_RETRY): that response is the NAK of the
        // retransmission.
        let start = req.map(|q| q.psn);
        if !info.is(Flags::START) {
            if let Some(n) = d.resp_next.or(start) {
                let count = psn.diff(n);
                if count > 0 {
                    out.push(Row::Gap {
                        from: p.from,
                        first_psn: n.value(),
                        count: count as u32,
                        t_ns: o.t_ns,
                    });
                }
            }
            if arrived && d.resp_seen.or(start).is_some_and(|n| psn.is_after(n)) {
                d.nak = Some(o.frame);
            }
        }
        let after = (!info.is(Flags::END)).then(|| psn.add(1));
        d.resp_next = after;
        if arrived {
            d.resp_seen = after;
        }
        if info.is(Flags::END) {
            ack_to(d, psn);
        }
        if d.epsn.is_none_or(|e| psn.add(1).is_after(e)) {
            d.epsn = Some(psn.add(1));
        }
        return;
    }
    let Some(aeth) = p.aeth else {
        return;
    };
    match aeth {
        Aeth::Ack { .. } => {
            p.covers = if info.is(Flags::ATOMIC) {
                d.reqs
                    .iter()
                    .rev()
                    .find(|q| !q.read && q.psn == psn)
                    .map(|q| Covers {
                        first_psn: psn.value(),
                        last_psn: psn.value(),
                        request_frame: Some(q.frame),
                    })
                    .or_else(|| newly(d, psn))
            } else {
                newly(d, psn)
            };
            ack_to(d, psn);
            if d.epsn.is_none_or(|e| psn.add(1).is_after(e)) {
                d.epsn = Some(psn.add(1));
            }
        }
        Aeth::Rnr { timer, .. } => {
            p.covers = newly(d, psn.sub(1));
            ack_to(d, psn.sub(1));
            if arrived {
                d.rnr = Some((o.frame, o.t_ns, timer));
            }
            d.epsn = Some(psn);
        }
        Aeth::Nak { code, .. } => {
            p.covers = newly(d, psn.sub(1));
            ack_to(d, psn.sub(1));
            if arrived && code == 0 {
                // A second sequence NAK while an RNR NAK for the same PSN waits does
                // not replace it (see the module's comment).
                d.nak = Some(o.frame);
            }
            d.epsn = Some(psn);
        }
    }
}

impl Ladder {
    /// The rows `f` keeps, in flows that keep at least one row (flows with the QPN on
    /// either side; rows in the time window, a wait when it overlaps it; packets with a
    /// PSN in the range, gaps that overlap it, waits that touch a kept packet).
    pub fn filtered(&self, f: &Filter) -> Ladder {
        let in_time = |a: i128, b: i128| {
            f.from_ns.is_none_or(|from| b >= from) && f.to_ns.is_none_or(|to| a <= to)
        };
        let psn_in = |first: u32, last: u32| match f.psn {
            None => true,
            Some((lo, hi)) => {
                let (lo, hi) = (Psn::new(lo), Psn::new(hi));
                // Two inclusive serial ranges overlap.
                within(Psn::new(first), lo, hi)
                    || within(Psn::new(last), lo, hi)
                    || within(lo, Psn::new(first), Psn::new(last))
            }
        };
        let flows = self
            .flows
            .iter()
            .filter(|fl| {
                f.qp.is_none_or(|q| fl.requester.qpn == Some(q) || fl.responder.qpn == Some(q))
            })
            .filter_map(|fl| {
                let kept_t: Vec<i128> = fl
                    .rows
                    .iter()
                    .filter_map(|r| match r {
                        Row::Packet(p) if in_time(p.t_ns, p.t_ns) && psn_in(p.psn, p.psn) => {
                            Some(p.t_ns)
                        }
                        _ => None,
                    })
                    .collect();
                let rows: Vec<Row> = fl
                    .rows
                    .iter()
                    .filter(|r| match r {
                        Row::Packet(p) => in_time(p.t_ns, p.t_ns) && psn_in(p.psn, p.psn),
                        Row::Gap {
                            first_psn,
                            count,
                            t_ns,
                            ..
                        } => {
                            let last = Psn::new(*first_psn).add(count.saturating_sub(1)).value();
                            in_time(*t_ns, *t_ns) && psn_in(*first_psn, last)
                        }
                        Row::Wait {
                            start_ns, end_ns, ..
                        } => {
                            in_time(*start_ns, *end_ns)
                                && (f.psn.is_none()
                                    || kept_t.iter().any(|t| t == start_ns || t == end_ns))
                        }
                    })
                    .cloned()
                    .collect();
                (!rows.is_empty()).then_some(Flow {
                    kind: fl.kind,
                    requester: fl.requester,
                    responder: fl.responder,
                    rows,
                })
            })
            .collect();
        Ladder {
            flows,
            stats: self.stats,
        }
    }
}

/// The ladder of packets given in time order.
pub fn build<'a>(packets: impl IntoIterator<Item = Observed<'a>>) -> Ladder {
    let mut b = Builder::new();
    for o in packets {
        b.push(&o);
    }
    b.finish()
}
