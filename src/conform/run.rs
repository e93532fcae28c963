//! Plays one script against one target: the peer's packets over UDP, the target's side
//! through its agent.

use super::agent::{Agent, Reply};
use super::packet::{self, Got, Qpns};
use super::peer::Peer;
use super::script::{Action, Expect, Fields, Script, Step};
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
                target: 0,
                peer: self.peer_qpn,
            },
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
                st.qpns.target = r
                    .get("qpn")
                    .and_then(|v| Num::parse(v).ok())
                    .map(|n| n.0 as u32)
                    .ok_or_else(|| Stop::Error("agent's qp reply lacks qpn=".into()))?;
            }
            Action::PostRecv { wr, sges } => {
                let mut line = format!("post_recv wr={wr}");
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
                        "rkey" | "inv" => v.key(&st.mrs).map(u64::from),
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
                self.peer
                    .send(to, b, f.bad_icrc)
                    .map_err(|e| Stop::Error(format!("peer: {e}")))?;
            }
            Action::Wait { ms } => std::thread::sleep(self.ms(Some(*ms), 0)),
            Action::Expect(e) => self.expect(e, st)?,
        }
        Ok(())
    }

    /// The next packet for this script's peer QP before `deadline`; packets for an
    /// earlier script's QPN are set aside.
    fn next(&mut self, deadline: Instant, qpns: Qpns) -> Option<Got> {
        loop {
            let g = self.peer.next(deadline)?;
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
                    "completion wr={} status={} op={} len={}{}",
                    have("wr"),
                    have("status"),
                    have("op"),
                    have("len"),
                    r.get("imm")
                        .map(|i| format!(" imm={i}"))
                        .unwrap_or_default()
                );
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
                } else {
                    None
                };
                match mism {
                    None => Ok(()),
                    Some(k) => Err(Stop::Fail(format!("{k} differs"), vec![desc])),
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
    mrs: Mrs,
    qpns: Qpns,
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
