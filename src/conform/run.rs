//! Plays one script against one target: the peer's packets over UDP, the target's side
//! through its agent.

use super::agent::{Agent, Reply};
use super::cm::{self, CmCtx};
use super::packet::{self, Got, Qpns};
use super::peer::Peer;
use super::script::{Action, Expect, Fields, QpRef, Script, Step, CC_COUNTERS, COUNTERS};
use super::value::{hex, to_hex, MrInfo, Mrs, Num};
use std::time::{Duration, Instant};

/// How a script ended on a target.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Outcome {
    Pass,
    /// An expectation did not hold: the line, what it wanted, what came instead.
    Fail {
        line: usize,
        statement: String,
        why: String,
        /// The packets that arrived instead (decoded), when the expectation was a packet.
        got: Vec<String>,
    },
    /// The target's agent lacks something the script needs.
    NotApplicable {
        line: usize,
        why: String,
    },
    /// The run itself broke (agent unreachable, a script error found while running).
    Error {
        line: usize,
        why: String,
    },
}

/// Default bounds (ms) before `--time-scale`.
const PACKET_MS: u64 = 1000;
const SILENCE_MS: u64 = 300;

/// The peer's QPN for the `n`th script: a fresh one each time, so a late packet of an
/// earlier script's QP is recognised as such and set aside.
pub fn peer_qpn(n: usize) -> u32 {
    0x00c0_0000 | (n as u32 & 0xffff)
}

pub struct Run<'a> {
    pub agent: &'a mut Agent,
    pub peer: &'a mut Peer,
    pub scale: f64,
    pub peer_qpn: u32,
}

enum Stop {
    Fail(String, Vec<String>),
    Na(String),
    Error(String),
}

impl Run<'_> {
    pub fn play(&mut self, s: &Script) -> Outcome {
        self.peer.drain();
        let mut st = Ctx {
            mrs: Mrs::default(),
            qpns: Qpns {
                peer: self.peer_qpn,
                ..Default::default()
            },
            counters: Vec::new(),
            wants_counters: s
                .steps
                .iter()
                .any(|s| matches!(s.action, Action::Expect(Expect::Counter { .. }))),
            cm: CmCtx::new(self.peer_qpn & 0xffff, self.peer_qpn),
        };
        let mut outcome = Outcome::Pass;
        for step in &s.steps {
            match self.step(step, &mut st) {
                Ok(()) => {}
                Err(stop) => {
                    let line = step.line;
                    outcome = match stop {
                        Stop::Fail(why, got) => Outcome::Fail {
                            line,
                            statement: step.text.clone(),
                            why,
                            got,
                        },
                        Stop::Na(why) => Outcome::NotApplicable { line, why },
                        Stop::Error(why) => Outcome::Error { line, why },
                    };
                    break;
                }
            }
        }
        if let Err(e) = self.agent.call("reset", Duration::ZERO) {
            if outcome == Outcome::Pass {
                outcome = Outcome::Error { line: 0, why: e };
            }
        }
        outcome
    }

    fn ms(&self, given: Option<u64>, default: u64) -> Duration {
        Duration::from_millis((given.unwrap_or(default) as f64 * self.scale) as u64)
    }

    /// Calls the agent; `err` and `unsupported` end the script.
    fn call(&mut self, line: &str, wait: Duration) -> Result<Reply, Stop> {
        match self.agent.call(line, wait) {
            Ok(Reply::Err(e)) => Err(Stop::Error(format!("agent: {e} (request: {line})"))),
            Ok(Reply::Unsupported(e)) => Err(Stop::Na(e)),
            Ok(r) => Ok(r),
            Err(e) => Err(Stop::Error(e)),
        }
    }

    fn step(&mut self, step: &Step, st: &mut Ctx) -> Result<(), Stop> {
        let script_err = |e: String| Stop::Error(e);
        match &step.action {
            Action::Mr(m) => {
                let r = self.call(
                    &format!(
                        "mr name={} len={} access={} fill={}",
                        m.name,
                        m.len,
                        m.access,
                        m.fill.to_agent()
                    ),
                    Duration::ZERO,
                )?;
                let num = |k: &str| {
                    r.get(k)
                        .and_then(|v| Num::parse(v).ok())
                        .map(|n| n.0)
                        .ok_or_else(|| Stop::Error(format!("agent's mr reply lacks {k}=")))
                };
                st.mrs.0.insert(
                    m.name.clone(),
                    MrInfo {
                        addr: num("addr")?,
                        rkey: num("rkey")? as u32,
                        len: m.len,
                        fill: m.fill,
                    },
                );
            }
            Action::Qp(q) => {
                let mut line = format!(
                    "qp peer_qpn={:#x} peer_ip={}",
                    st.qpns.peer,
                    self.peer.local().ip()
                );
                for (k, v) in &q.attrs {
                    line.push_str(&format!(" {k}={v}"));
                }
                let r = self.call(&line, Duration::ZERO)?;
                let qpn = r
                    .get("qpn")
                    .and_then(|v| Num::parse(v).ok())
                    .map(|n| n.0 as u32)
                    .ok_or_else(|| Stop::Error("agent's qp reply lacks qpn=".into()))?;
                let qkey = q
                    .attrs
                    .iter()
                    .find(|(k, _)| *k == "qkey")
                    .and_then(|(_, v)| Num::parse(v).ok())
                    .map_or(0, |n| n.0 as u32);
                let first = st.qpns.count == 0;
                if first {
                    st.qpns.target = qpn;
                    st.qpns.qkey = qkey;
                    if st.wants_counters {
                        st.counters = self.counters()?;
                    }
                }
                let i = st.qpns.count;
                st.qpns.targets[i] = qpn;
                st.qpns.count += 1;
            }
            Action::Srq { depth, limit } => {
                self.call(&format!("srq max_wr={depth} limit={limit}"), Duration::ZERO)?;
            }
            Action::ModifySrq { limit } => {
                self.call(&format!("modify_srq limit={limit}"), Duration::ZERO)?;
            }
            Action::PostRecv { wr, sges, srq } => {
                let cmd = if *srq { "post_srq_recv" } else { "post_recv" };
                let mut line = format!("{cmd} wr={wr}");
                if !sges.is_empty() {
                    line.push_str(&format!(" sge={}", sges.join(",")));
                }
                self.call(&line, Duration::ZERO)?;
            }
            Action::PostSend(w) => {
                let mut line = format!("post_send wr={} op={}", w.wr, w.op);
                if !w.sges.is_empty() {
                    line.push_str(&format!(" sge={}", w.sges.join(",")));
                }
                for (k, v) in &w.values {
                    let n = match *k {
                        "va" => v.addr(&st.mrs),
                        "rkey" | "inv" | "qkey" | "qpn" => v.key(&st.mrs).map(u64::from),
                        _ => v.addr(&st.mrs),
                    }
                    .map_err(script_err)?;
                    line.push_str(&format!(" {k}={n:#x}"));
                }
                line.push_str(&format!(" flags={}", w.flags.join(",")));
                self.call(&line, Duration::ZERO)?;
            }
            Action::Modify { state } => {
                self.call(&format!("modify state={state}"), Duration::ZERO)?;
            }
            Action::Send(f) => {
                let b = packet::build(f, st.qpns, &st.mrs).map_err(script_err)?;
                let to = self.agent.ip;
                let ecn = f.ecn.unwrap_or(crate::wire::Ecn::NotEct);
                self.peer
                    .send_ecn(to, b, f.bad_icrc, ecn)
                    .map_err(|e| Stop::Error(format!("peer: {e}")))?;
            }
            Action::Wait { ms } => std::thread::sleep(self.ms(Some(*ms), 0)),
            Action::Expect(Expect::Mad { spec, within }) => self.expect_mad(spec, *within, st)?,
            Action::Expect(e) => self.expect(e, st)?,
            Action::Listen { ps, port } => {
                self.call(&format!("cm_listen ps={ps} port={port}"), Duration::ZERO)?;
            }
            Action::CmCall(what) => {
                let r = self.call(&format!("cm_{what}"), Duration::ZERO)?;
                let num = |k: &str| {
                    r.get(k)
                        .and_then(|v| Num::parse(v).ok())
                        .map(|n| n.0 as u32)
                };
                if let Some(q) = num("qpn") {
                    st.cm.target_qpn = q;
                }
                if let Some(p) = num("rq_psn") {
                    st.cm.target_psn = p;
                }
            }
            Action::SendMad(m) => {
                let b = cm::build(
                    m.attr,
                    &m.fields,
                    &mut st.cm,
                    self.peer.local().ip(),
                    self.agent.ip,
                )
                .map_err(script_err)?;
                let to = self.agent.ip;
                self.peer
                    .send(to, b, false)
                    .map_err(|e| Stop::Error(format!("peer: {e}")))?;
            }
        }
        Ok(())
    }

    /// The next packet for this script's peer QP before `deadline`; packets for an
    /// earlier script's QPN are set aside.
    fn next(&mut self, deadline: Instant, qpns: Qpns) -> Option<Got> {
        self.next_cm(deadline, qpns, None)
    }

    /// As `next`, and a CM MAD addressed to another script's comm ID is set aside too
    /// (`cm`: this script's; none for a script that is not the CM's: every such MAD).
    fn next_cm(&mut self, deadline: Instant, qpns: Qpns, cm: Option<&CmCtx>) -> Option<Got> {
        loop {
            let g = self.peer.next(deadline)?;
            if let Some(to) = cm::mad_of(&g).as_ref().and_then(cm::addressed_to) {
                if cm.is_none_or(|c| c.foreign(to)) && to & 0xff00_0000 == 0x5c00_0000 {
                    continue;
                }
            }
            if let Ok(r) = g.repr() {
                let old = r.bth.dqpn & 0xff_0000 == 0xc0_0000 && r.bth.dqpn != qpns.peer;
                if old {
                    continue;
                }
            }
            return Some(g);
        }
    }

    fn expect(&mut self, e: &Expect, st: &mut Ctx) -> Result<(), Stop> {
        match e {
            Expect::Packet {
                fields,
                within,
                skip_acks,
            } => {
                let deadline = Instant::now() + self.ms(*within, PACKET_MS);
                let mut seen = Vec::new();
                loop {
                    let Some(g) = self.next(deadline, st.qpns) else {
                        let why = if seen.is_empty() {
                            format!(
                                "no packet within {} ms",
                                self.ms(*within, PACKET_MS).as_millis()
                            )
                        } else {
                            "only skipped ACKs arrived".into()
                        };
                        return Err(Stop::Fail(why, seen));
                    };
                    if *skip_acks && g.is_plain_ack() && before(&g, fields) {
                        seen.push(format!("(skipped) {}", g.describe()));
                        continue;
                    }
                    return match packet::check(fields, &g, st.qpns, &st.mrs) {
                        Ok(()) => Ok(()),
                        Err(why) => {
                            seen.push(g.describe());
                            Err(Stop::Fail(why, seen))
                        }
                    };
                }
            }
            Expect::Silence { within } => {
                let deadline = Instant::now() + self.ms(*within, SILENCE_MS);
                match self.next(deadline, st.qpns) {
                    None => Ok(()),
                    Some(g) => Err(Stop::Fail(
                        "a packet arrived where silence was expected".into(),
                        vec![g.describe()],
                    )),
                }
            }
            Expect::Completion {
                wr,
                status,
                op,
                len,
                imm,
                src_qp,
                grh,
                qp,
                within,
            } => {
                let t = self.ms(*within, PACKET_MS);
                let r = self.call(&format!("poll ms={}", t.as_millis()), t)?;
                if r.get("none").is_some() {
                    return Err(Stop::Fail(
                        format!("no completion within {} ms", t.as_millis()),
                        vec![],
                    ));
                }
                let have = |k: &str| r.get(k).unwrap_or("-").to_string();
                let desc = format!(
                    "completion wr={} status={} op={} len={}{}{}{}{}",
                    have("wr"),
                    have("status"),
                    have("op"),
                    have("len"),
                    r.get("imm")
                        .map(|i| format!(" imm={i}"))
                        .unwrap_or_default(),
                    r.get("src_qp")
                        .map(|i| format!(" src_qp={i}"))
                        .unwrap_or_default(),
                    r.get("qpn")
                        .map(|i| format!(" qpn={i}"))
                        .unwrap_or_default(),
                    if r.get("grh").is_some() { " grh" } else { "" },
                );
                let want_src = src_qp
                    .map(|s| st.qpns.resolve(s))
                    .transpose()
                    .map_err(Stop::Error)?;
                let want_qp = qp
                    .map(|i| st.qpns.resolve(QpRef::Target(i)))
                    .transpose()
                    .map_err(Stop::Error)?;
                let num = |k: &str| r.get(k).and_then(|v| Num::parse(v).ok()).map(|n| n.0);
                let mism = if wr.is_some() && num("wr") != *wr {
                    Some("wr")
                } else if status
                    .as_deref()
                    .is_some_and(|s| Some(s) != r.get("status"))
                {
                    Some("status")
                } else if op.as_deref().is_some_and(|s| Some(s) != r.get("op")) {
                    Some("op")
                } else if len.is_some() && num("len") != *len {
                    Some("len")
                } else if imm.is_some() && num("imm") != *imm {
                    Some("imm")
                } else if want_src.is_some() && num("src_qp") != want_src.map(u64::from) {
                    Some("src_qp")
                } else if grh.is_some_and(|g| g != r.get("grh").is_some()) {
                    Some("grh (IBV_WC_GRH)")
                } else if want_qp.is_some() && num("qpn") != want_qp.map(u64::from) {
                    Some("qp")
                } else {
                    None
                };
                match mism {
                    None => Ok(()),
                    Some(k) => Err(Stop::Fail(format!("{k} differs"), vec![desc])),
                }
            }
            Expect::Nothing { within } => {
                let deadline = Instant::now() + self.ms(*within, SILENCE_MS);
                if let Some(g) = self.next(deadline, st.qpns) {
                    return Err(Stop::Fail(
                        "a packet arrived where nothing was expected".into(),
                        vec![g.describe()],
                    ));
                }
                let r = self.call("poll ms=0", Duration::ZERO)?;
                if r.get("none").is_some() {
                    Ok(())
                } else {
                    Err(Stop::Fail(
                        "a completion arrived where nothing was expected".into(),
                        vec![format!("{r:?}")],
                    ))
                }
            }
            Expect::NoEvent { within } => {
                let t = self.ms(*within, SILENCE_MS);
                let r = self.call(&format!("event ms={}", t.as_millis()), t)?;
                match r.get("event") {
                    None => Ok(()),
                    Some(e) => Err(Stop::Fail(
                        format!("an asynchronous event ({e}) arrived where none was expected"),
                        vec![],
                    )),
                }
            }
            Expect::Grh { mr, off, ip_len } => {
                let r = self.call(&format!("read name={mr} off={off} len=40"), Duration::ZERO)?;
                let have = hex(r.get("hex").unwrap_or("")).map_err(Stop::Error)?;
                let peer = self.peer.local().ip();
                let target = self.agent.ip;
                check_grh(&have, peer, target, *ip_len).map_err(|why| {
                    Stop::Fail(why, vec![format!("{mr}[{off}..+40]: {}", to_hex(&have))])
                })
            }
            Expect::Counter { name, delta } => {
                let now = self.counters()?;
                let i = COUNTERS.iter().position(|c| c == name).unwrap_or(0);
                let (Some(before), Some(after)) = (st.counters.get(i), now.get(i)) else {
                    return Err(Stop::Error("no counters read".into()));
                };
                let (Some(before), Some(after)) = (before, after) else {
                    // Only the congestion counters may be missing (`counters`).
                    return Err(Stop::Na(format!(
                        "the target reports no {name} counter: it has no congestion control \
                         (Linux rxe implements no NP or RP, IBA annex A17.9)"
                    )));
                };
                if after.wrapping_sub(*before) == *delta {
                    Ok(())
                } else {
                    Err(Stop::Fail(
                        format!(
                            "counter {name}: expected +{delta}, got +{} ({before} -> {after})",
                            after.wrapping_sub(*before)
                        ),
                        vec![],
                    ))
                }
            }
            Expect::NoCompletion { within } => {
                let t = self.ms(*within, SILENCE_MS);
                let r = self.call(&format!("poll ms={}", t.as_millis()), t)?;
                if r.get("none").is_some() {
                    Ok(())
                } else {
                    Err(Stop::Fail(
                        "a completion arrived where none was expected".into(),
                        vec![format!("{r:?}")],
                    ))
                }
            }
            Expect::State(want) => {
                let r = self.call("state", Duration::ZERO)?;
                match r.get("state") {
                    Some(s) if s == want => Ok(()),
                    s => Err(Stop::Fail(
                        format!("state: expected {want}, got {}", s.unwrap_or("?")),
                        vec![],
                    )),
                }
            }
            Expect::Event { name, within } => {
                let t = self.ms(*within, PACKET_MS);
                let r = self.call(&format!("event ms={}", t.as_millis()), t)?;
                match r.get("event") {
                    Some(e) if e == name => Ok(()),
                    Some(e) => Err(Stop::Fail(
                        format!("event: expected {name}, got {e}"),
                        vec![],
                    )),
                    None => Err(Stop::Fail(
                        format!("no asynchronous event within {} ms", t.as_millis()),
                        vec![],
                    )),
                }
            }
            Expect::CmEvent { .. } | Expect::NoCmEvent { .. } => self.cm_event(e),
            Expect::Mad { spec, within } => self.expect_mad(spec, *within, st),
            Expect::Memory { mr, off, bytes } => {
                let want = bytes.bytes(&st.mrs).map_err(Stop::Error)?.ok_or_else(|| {
                    Stop::Error("expect memory needs the bytes (fill= or data=)".into())
                })?;
                let r = self.call(
                    &format!("read name={mr} off={off} len={}", want.len()),
                    Duration::ZERO,
                )?;
                let have = hex(r.get("hex").unwrap_or("")).map_err(Stop::Error)?;
                if have == want {
                    return Ok(());
                }
                let i = want
                    .iter()
                    .zip(&have)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                Err(Stop::Fail(
                    format!(
                        "{mr}[{}]: expected {:#04x}, got {}",
                        off + i as u64,
                        want.get(i).copied().unwrap_or(0),
                        have.get(i)
                            .map(|b| format!("{b:#04x}"))
                            .unwrap_or("nothing".into())
                    ),
                    vec![format!(
                        "{mr}[{off}..]: {}",
                        to_hex(&have[..have.len().min(64)])
                    )],
                ))
            }
        }
    }
}

struct Ctx {
    cm: CmCtx,
    mrs: Mrs,
    qpns: Qpns,
    /// The port counters (in COUNTERS' order) when the first QP was made, if the script
    /// checks any.
    counters: Vec<Option<u64>>,
    wants_counters: bool,
}

impl Run<'_> {
    /// `expect mad`: the next packet is the target's CM MAD with the fields named.
    fn expect_mad(
        &mut self,
        spec: &super::script::MadSpec,
        within: Option<u64>,
        st: &mut Ctx,
    ) -> Result<(), Stop> {
        let t = self.ms(within, PACKET_MS);
        let Some(g) = self.next_cm(Instant::now() + t, st.qpns, Some(&st.cm)) else {
            return Err(Stop::Fail(
                format!("no {} within {} ms", spec.name, t.as_millis()),
                vec![],
            ));
        };
        let Some(m) = cm::mad_of(&g) else {
            return Err(Stop::Fail("not a CM MAD".into(), vec![g.describe()]));
        };
        let r = cm::check(spec.attr, &spec.fields, &m, &st.cm);
        cm::learn(&m, &mut st.cm);
        r.map_err(|why| Stop::Fail(why, vec![format!("{}", m)]))
    }

    /// `expect cm_event` and `expect no_cm_event`: the agent's next rdma_cm event.
    fn cm_event(&mut self, e: &Expect) -> Result<(), Stop> {
        let (want, status, within, default) = match e {
            Expect::CmEvent {
                name,
                status,
                within,
            } => (Some(name), *status, *within, PACKET_MS),
            Expect::NoCmEvent { within } => (None, None, *within, SILENCE_MS),
            _ => return Ok(()),
        };
        let t = self.ms(within, default);
        let r = self.call(&format!("cm_event ms={}", t.as_millis()), t)?;
        let got = r.get("event").map(str::to_string);
        let got_status = r.get("status").and_then(|v| v.parse::<i64>().ok());
        match (want, got) {
            (None, None) => Ok(()),
            (None, Some(g)) => Err(Stop::Fail(
                format!("an rdma_cm event ({g}) where none was expected"),
                vec![],
            )),
            (Some(w), None) => Err(Stop::Fail(
                format!("no rdma_cm event {w} within {} ms", t.as_millis()),
                vec![],
            )),
            (Some(w), Some(g)) if *w != g => Err(Stop::Fail(
                format!(
                    "rdma_cm event: expected {w}, got {g} (status {})",
                    got_status.unwrap_or(0)
                ),
                vec![],
            )),
            (Some(w), Some(_)) => match status {
                Some(s) if Some(s) != got_status => Err(Stop::Fail(
                    format!("{w}: status expected {s}, got {}", got_status.unwrap_or(0)),
                    vec![],
                )),
                _ => Ok(()),
            },
        }
    }

    /// The target's port counters, in COUNTERS' order (`port` request); `None` for a
    /// congestion counter the agent does not report (rxe's has none).
    fn counters(&mut self) -> Result<Vec<Option<u64>>, Stop> {
        let r = self.call("port", Duration::ZERO)?;
        COUNTERS
            .iter()
            .map(|c| {
                let v = r.get(c).and_then(|v| Num::parse(v).ok()).map(|n| n.0);
                match v {
                    None if !CC_COUNTERS.contains(c) => {
                        Err(Stop::Error(format!("the agent's port reply lacks {c}=")))
                    }
                    v => Ok(v),
                }
            })
            .collect()
    }
}

/// The GRH slot of a UD receive (IBA 11.4.1.1: the first 40 bytes of the receive buffer
/// hold the GRH; RoCEv2 over IPv4, annex A17.4.5.1: 20 bytes left over, then the IPv4
/// header, as Linux rxe's `union rdma_network_hdr` lays it out).
fn check_grh(
    b: &[u8],
    peer: std::net::IpAddr,
    target: std::net::IpAddr,
    ip_len: Option<u64>,
) -> Result<(), String> {
    let (std::net::IpAddr::V4(src), std::net::IpAddr::V4(dst)) = (peer, target) else {
        return Err("expect grh checks IPv4 peers only".into());
    };
    if b.len() != 40 {
        return Err(format!("read {} bytes, not 40", b.len()));
    }
    if let Some(i) = b[..20].iter().position(|x| *x != 0) {
        return Err(format!(
            "byte {i} of the GRH slot: expected 0 (unused with IPv4), got {:#04x}",
            b[i]
        ));
    }
    let h = &b[20..40];
    if h[0] != 0x45 {
        return Err(format!(
            "IPv4 version/IHL at +20: expected 0x45, got {:#04x}",
            h[0]
        ));
    }
    if h[9] != 17 {
        return Err(format!(
            "IPv4 protocol at +29: expected 17 (UDP), got {}",
            h[9]
        ));
    }
    if h[12..16] != src.octets() {
        return Err(format!(
            "IPv4 source at +32: expected {src}, got {:?}",
            &h[12..16]
        ));
    }
    if h[16..20] != dst.octets() {
        return Err(format!(
            "IPv4 destination at +36: expected {dst}, got {:?}",
            &h[16..20]
        ));
    }
    let sum: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    let folded = (folded & 0xffff) + (folded >> 16);
    if folded != 0xffff {
        return Err(format!(
            "IPv4 header checksum at +30 does not verify (sum {folded:#06x})"
        ));
    }
    let total = u16::from_be_bytes([h[2], h[3]]);
    if ip_len.is_some_and(|l| l != u64::from(total)) {
        return Err(format!(
            "IPv4 total length at +22: expected {}, got {total}",
            ip_len.unwrap_or(0)
        ));
    }
    Ok(())
}

/// Whether `g`'s PSN comes before the expected packet's (24-bit serial order), or the
/// expectation names no PSN.
fn before(g: &Got, f: &Fields) -> bool {
    match (g.psn(), f.psn) {
        (Some(have), Some(want)) => {
            crate::wire::Psn::new(have).is_before(crate::wire::Psn::new(want))
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::check_grh;

    /// 20 zero bytes and an IPv4 header from 10.0.0.1 to 10.0.0.2 with its checksum.
    fn slot() -> Vec<u8> {
        let mut h = vec![
            0x45, 0, 0, 116, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let sum: u32 = h
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        let sum = (sum & 0xffff) + (sum >> 16);
        let c = !((sum & 0xffff) + (sum >> 16)) as u16;
        h[10..12].copy_from_slice(&c.to_be_bytes());
        let mut b = vec![0; 20];
        b.extend(h);
        b
    }

    #[test]
    fn the_grh_slot_is_checked_byte_by_byte() {
        let (p, t) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        check_grh(&slot(), p, t, Some(116)).unwrap();
        let e = check_grh(&slot(), p, t, Some(117)).unwrap_err();
        assert!(e.contains("total length"), "{e}");
        let e = check_grh(&slot(), t, p, None).unwrap_err();
        assert!(e.contains("source"), "{e}");
        let mut b = slot();
        b[30] ^= 1;
        assert!(check_grh(&b, p, t, None).unwrap_err().contains("checksum"));
        let mut b = slot();
        b[3] = 1;
        assert!(check_grh(&b, p, t, None).unwrap_err().contains("byte 3"));
    }
}
