//! A deterministic network of engines for tests, fuzzing and the demo: a virtual clock,
//! a delivery queue with per-link latency, and fault [`rule`]s per direction that can be
//! changed mid-run. Built after quinn-proto's test `Pair` (step to the next wake-up,
//! bounded drive) with turmoil-style rules.
//!
//! Every packet carries the IPv4 identification the sender's engine used, so the receiver
//! checks the whole ICRC: a corrupted packet is caught and counted, never delivered.

pub mod direct;
pub mod rule;

use crate::engine::{Datagram, Engine, EngineConfig, Instant};
use crate::mem::MrTable;
use core::time::Duration;
use rule::{Rule, Verdict};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

/// One packet on the wire, for traces.
#[derive(Debug, Clone)]
pub struct Traced {
    pub at: Instant,
    pub from: usize,
    pub to: usize,
    pub bytes: Vec<u8>,
    pub verdict: Verdict,
    /// The ECN codepoint it was delivered with: the sender's, or CE after a
    /// [`Verdict::MarkCe`] on an ECN-capable packet.
    pub ecn: crate::wire::Ecn,
}

#[derive(Debug)]
struct InFlight {
    at: Instant,
    seq: u64,
    to: usize,
    src: SocketAddr,
    dst: SocketAddr,
    ecn: crate::wire::Ecn,
    data: Vec<u8>,
}

impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> core::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// A NIC in the simulation.
pub struct Node {
    pub engine: Engine,
    pub ip: IpAddr,
}

/// The simulated network.
pub struct Net {
    pub nodes: Vec<Node>,
    pub now: Instant,
    /// One-way delay of every link.
    pub latency: Duration,
    queue: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    /// Rules by (from, to) node index.
    rules: Vec<(usize, usize, Box<dyn Rule>)>,
    /// Every packet sent, when tracing is on.
    pub trace: Option<Vec<Traced>>,
    buf: Vec<u8>,
}

/// A simulation that did not settle within its step budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("simulation did not converge in {steps} steps (virtual time {at_ns} ns)")]
pub struct NotConverged {
    pub steps: usize,
    pub at_ns: u64,
}

/// Largest packet an engine emits: 4096-byte MTU plus headers, pad and ICRC.
pub const MAX_PACKET: usize = 4096 + 128;

impl Net {
    /// `n` NICs at 198.18.0.1, .2, ... (the benchmarking range: no real network).
    pub fn new(n: usize) -> Net {
        Net::with_config(n, |_| {})
    }

    /// `n` NICs whose configuration `tweak` may change.
    pub fn with_config(n: usize, mut tweak: impl FnMut(&mut EngineConfig)) -> Net {
        let nodes = (0..n)
            .map(|i| {
                let ip = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1 + i as u8));
                let mut cfg = EngineConfig::new(ip);
                tweak(&mut cfg);
                Node {
                    engine: Engine::new(cfg, Arc::new(MrTable::new())),
                    ip,
                }
            })
            .collect();
        Net::with_nodes(nodes)
    }

    pub fn with_nodes(nodes: Vec<Node>) -> Net {
        Net {
            nodes,
            now: Instant::ZERO,
            latency: Duration::from_micros(5),
            queue: BinaryHeap::new(),
            seq: 0,
            rules: Vec::new(),
            trace: None,
            buf: vec![0; MAX_PACKET],
        }
    }

    /// Adds a rule for packets from node `from` to node `to`.
    pub fn add_rule(&mut self, from: usize, to: usize, rule: impl Rule + 'static) {
        self.rules.push((from, to, Box::new(rule)));
    }

    pub fn clear_rules(&mut self) {
        self.rules.clear();
    }

    fn node_of(&self, ip: IpAddr) -> Option<usize> {
        self.nodes.iter().position(|n| n.ip == ip)
    }

    /// Moves every packet the engines want to send onto the wire, through the rules.
    fn collect(&mut self) {
        for from in 0..self.nodes.len() {
            loop {
                let now = self.now;
                let Some(t) = self.nodes[from].engine.poll_transmit(now, &mut self.buf) else {
                    break;
                };
                let Some(to) = self.node_of(t.dst.ip()) else {
                    continue; // nobody there
                };
                let mut data = self.buf[..t.len].to_vec();
                let mut verdict = Verdict::Pass;
                for (f, tt, r) in self.rules.iter_mut() {
                    if *f == from && *tt == to {
                        verdict = r.on_packet(now, &data);
                        if verdict != Verdict::Pass {
                            break;
                        }
                    }
                }
                // A switch marks only ECN-capable packets (RFC 3168 5).
                let ecn = if verdict == Verdict::MarkCe && t.ecn.capable() {
                    crate::wire::Ecn::Ce
                } else {
                    t.ecn
                };
                if let Some(tr) = &mut self.trace {
                    tr.push(Traced {
                        at: now,
                        from,
                        to,
                        bytes: data.clone(),
                        verdict,
                        ecn,
                    });
                }
                let at = now.saturating_add(self.latency);
                match verdict {
                    Verdict::Drop => continue,
                    Verdict::Pass => self.enqueue(at, to, (t.src, t.dst, t.ecn), data),
                    Verdict::Duplicate => {
                        self.enqueue(at, to, (t.src, t.dst, t.ecn), data.clone());
                        self.enqueue(at, to, (t.src, t.dst, t.ecn), data);
                    }
                    Verdict::Delay(d) => {
                        self.enqueue(at.saturating_add(d), to, (t.src, t.dst, t.ecn), data)
                    }
                    Verdict::MarkCe => self.enqueue(at, to, (t.src, t.dst, ecn), data),
                    Verdict::Corrupt { at: i, xor } => {
                        if let Some(b) = data.get_mut(i) {
                            *b ^= xor;
                        }
                        self.enqueue(at, to, (t.src, t.dst, t.ecn), data)
                    }
                }
            }
        }
    }

    fn enqueue(
        &mut self,
        at: Instant,
        to: usize,
        (src, dst, ecn): (SocketAddr, SocketAddr, crate::wire::Ecn),
        data: Vec<u8>,
    ) {
        self.seq += 1;
        self.queue.push(Reverse(InFlight {
            at,
            seq: self.seq,
            to,
            src,
            dst,
            ecn,
            data,
        }));
    }

    /// Delivers what is due, runs due timers, sends what that produced. Returns false
    /// when nothing is in flight and no timer is armed (the network is idle).
    pub fn step(&mut self) -> bool {
        self.collect();
        let next_pkt = self.queue.peek().map(|r| r.0.at);
        let next_timer = self
            .nodes
            .iter()
            .filter_map(|n| n.engine.poll_timeout())
            .min();
        let Some(next) = [next_pkt, next_timer].into_iter().flatten().min() else {
            return false;
        };
        if next > self.now {
            self.now = next;
        }
        while self.queue.peek().is_some_and(|r| r.0.at <= self.now) {
            let Reverse(p) = self.queue.pop().expect("peeked");
            // The sender's engine chose the IPv4 ID the ICRC covers.
            let id = self
                .nodes
                .iter()
                .find(|n| n.ip == p.src.ip())
                .map(|n| n.engine.config().tx_ipv4_id);
            self.nodes[p.to].engine.handle_datagram(
                self.now,
                Datagram {
                    src: p.src,
                    dst: p.dst,
                    ipv4_id: id,
                    ecn: p.ecn,
                    data: &p.data,
                },
            );
        }
        for n in &mut self.nodes {
            if n.engine.poll_timeout().is_some_and(|t| t <= self.now) {
                n.engine.handle_timeout(self.now);
            }
        }
        self.collect();
        true
    }

    /// Steps until `done` holds or the network is idle, at most `max_steps` steps.
    pub fn run_until(
        &mut self,
        max_steps: usize,
        mut done: impl FnMut(&mut Net) -> bool,
    ) -> Result<usize, NotConverged> {
        for i in 0..max_steps {
            if done(self) {
                return Ok(i);
            }
            if !self.step() && done(self) {
                return Ok(i);
            }
        }
        Err(NotConverged {
            steps: max_steps,
            at_ns: self.now.as_nanos(),
        })
    }

    /// Steps until nothing is in flight and no timer is armed.
    pub fn run_idle(&mut self, max_steps: usize) -> Result<usize, NotConverged> {
        for i in 0..max_steps {
            if !self.step() {
                return Ok(i);
            }
        }
        Err(NotConverged {
            steps: max_steps,
            at_ns: self.now.as_nanos(),
        })
    }
}
