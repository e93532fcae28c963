//! The script format of `spec/FORMAT.md`: a line-oriented text a person writes, parsed into
//! [`Script`]. Hand-written rather than TOML or YAML because a conformance case reads as a
//! packet trace (`send SEND_ONLY psn=5 ackreq len=64`), one line per packet, which those
//! formats would turn into nested tables; the grammar is a dozen keywords of `key=value`s.
//!
//! A script is a user's input: every mistake is a [`ScriptError`] naming the line, the key
//! and what would be accepted.

use super::value::{ByteSpec, Num, Payload, Ref};
use crate::wire::Opcode;
use std::collections::BTreeMap;

mod args;
mod cm;
pub use args::opcode_by_name;
use args::{tokenize, Args};
pub use cm::MadSpec;

/// One script, as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    /// The file name without `.rc` (or what the caller named it).
    pub name: String,
    pub title: String,
    pub cites: Vec<Cite>,
    pub role: Role,
    /// Known deviations by target label (`note rxe "..."`).
    pub notes: BTreeMap<String, String>,
    pub steps: Vec<Step>,
}

/// A compliance statement and the section it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cite {
    /// `C9-104`, `o9-20`, or `-` for a section's unnumbered text.
    pub clause: String,
    pub section: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Responder,
    Requester,
    /// The target is the passive side of the connection manager (it listens; the peer
    /// sends REQ, SIDR_REQ, ...): its MADs on QP1, its rdma_cm events through the agent.
    #[serde(rename = "cm_passive")]
    CmPassive,
}

/// A statement with the line it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub line: usize,
    pub text: String,
    pub action: Action,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Mr(MrSpec),
    Qp(QpSpec),
    /// A shared receive queue (`srq depth=N limit=M`), before the QPs that use it.
    Srq {
        depth: u64,
        limit: u64,
    },
    /// `modify srq limit=M`: arms the SRQ's limit again.
    ModifySrq {
        limit: u64,
    },
    /// `post recv ... srq` posts to the shared receive queue.
    PostRecv {
        wr: u64,
        sges: Vec<String>,
        srq: bool,
    },
    PostSend(SendWrSpec),
    Modify {
        state: String,
    },
    Send(Fields),
    Expect(Expect),
    Wait {
        ms: u64,
    },
    /// `listen port=N [ps=tcp|udp]`: the target listens on rdma_cm's port N (its own
    /// address) in that port space.
    Listen {
        ps: &'static str,
        port: u16,
    },
    /// `accept`, `reject`, `disconnect`, `destroy`: the target's rdma_accept (with a new
    /// QP), rdma_reject, rdma_disconnect and rdma_destroy_qp + rdma_destroy_id on the
    /// connection its last CONNECT_REQUEST made.
    CmCall(&'static str),
    /// `send mad NAME field=value ...`: a CM MAD from the peer's QP1.
    SendMad(MadSpec),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MrSpec {
    pub name: String,
    pub len: u64,
    pub access: String,
    pub fill: ByteSpec,
}

/// The QP's attributes, each the agent's key and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpSpec {
    pub attrs: Vec<(&'static str, String)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SendWrSpec {
    pub wr: u64,
    pub op: String,
    pub sges: Vec<String>,
    /// `va`, `rkey`, `imm`, `inv`, `compare`, `swap`, `add`, and for UD `qkey`, `qpn`
    /// (the remote QP; the peer's by default): references resolved when run.
    pub values: Vec<(&'static str, Ref)>,
    pub flags: Vec<&'static str>,
}

/// The fields of a packet: what `send` builds, or what `expect` checks (only those given).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Fields {
    pub opcode: Option<Opcode>,
    pub psn: Option<u32>,
    pub ackreq: Option<bool>,
    pub se: Option<bool>,
    pub migreq: Option<bool>,
    pub pad: Option<u8>,
    pub pkey: Option<u16>,
    pub tver: Option<u8>,
    pub qpn: Option<u32>,
    pub va: Option<Ref>,
    pub rkey: Option<Ref>,
    pub dmalen: Option<u32>,
    pub compare: Option<u64>,
    pub swap: Option<u64>,
    pub add: Option<u64>,
    pub syndrome: Option<SyndromeSpec>,
    pub msn: Option<u32>,
    pub orig: Option<u64>,
    pub imm: Option<u32>,
    pub inv: Option<Ref>,
    /// DETH (UD): `qkey=` (default: the target QP's Q_Key from its `qp` line) and
    /// `src_qp=` (default: the peer's QPN).
    pub qkey: Option<u32>,
    pub src_qp: Option<QpRef>,
    /// `to=N`: the packet goes to the script's Nth QP (1 = the first, the default).
    pub to: Option<usize>,
    pub payload: Option<Payload>,
    pub bad_icrc: bool,
    /// BTH FECN and BECN bits (`becn`/`no_becn`; a CNP sets BECN, IBA A17.9.3).
    pub fecn: Option<bool>,
    pub becn: Option<bool>,
    /// The IP header's ECN codepoint (`ecn=not_ect|ect0|ect1|ce`): what the peer sends
    /// with, or what the target's packet arrived with.
    pub ecn: Option<crate::wire::Ecn>,
}

/// A QP number as a script names it: a number, `peer` (the runner's QP) or `target`,
/// `target2`, ... (the script's QPs on the target, in the order of their `qp` lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpRef {
    Lit(u32),
    Peer,
    Target(usize),
}

impl QpRef {
    pub fn parse(v: &str) -> Result<QpRef, String> {
        if v == "peer" {
            return Ok(QpRef::Peer);
        }
        if let Some(n) = v.strip_prefix("target") {
            let i = if n.is_empty() {
                1
            } else {
                n.parse().unwrap_or(0)
            };
            if (1..=MAX_QPS).contains(&i) {
                return Ok(QpRef::Target(i - 1));
            }
        }
        match Num::parse(v) {
            Ok(Num(n)) if n <= 0xff_ffff => Ok(QpRef::Lit(n as u32)),
            _ => Err(format!(
                "{v:?}: a QPN (24 bits), peer, or target, target2 .. target{MAX_QPS}"
            )),
        }
    }
}

/// The most QPs a script may create (`qp` lines).
pub const MAX_QPS: usize = 4;

/// An AETH syndrome as a script names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyndromeSpec {
    Ack,
    /// `rnr` (any timer) or `rnr:T`.
    Rnr(Option<u8>),
    /// `nak` (any code) or `nak:seq` ... (the 5-bit NAK code).
    Nak(Option<u8>),
    Raw(u8),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    Packet {
        fields: Fields,
        within: Option<u64>,
        skip_acks: bool,
    },
    Silence {
        within: Option<u64>,
    },
    Completion {
        wr: Option<u64>,
        status: Option<String>,
        op: Option<String>,
        len: Option<u64>,
        imm: Option<u64>,
        /// UD: the sender's QPN (`src_qp=`), and whether IBV_WC_GRH is set (`grh`/`no_grh`).
        src_qp: Option<QpRef>,
        grh: Option<bool>,
        /// Which of the script's QPs it is on (`qp=N`, 1-based; several QPs on one SRQ).
        qp: Option<usize>,
        within: Option<u64>,
    },
    /// No asynchronous event for the whole bound.
    NoEvent {
        within: Option<u64>,
    },
    /// No packet and no completion for the whole bound (UC and UD: nothing is owed).
    Nothing {
        within: Option<u64>,
    },
    /// The 40-byte GRH slot a UD receive starts with, read back from the region: for an
    /// IPv4 packet 20 zero bytes, then its IPv4 header (version 4, IHL 5, protocol UDP,
    /// the peer's and the target's addresses, a valid header checksum).
    Grh {
        mr: String,
        off: u64,
        /// The IPv4 total length, when given.
        ip_len: Option<u64>,
    },
    /// A port counter of the target (`qkey_viol`, `bad_pkey`, or a congestion counter of
    /// `CC_COUNTERS`) has grown by `delta` since the script's `qp` line.
    Counter {
        name: String,
        delta: u64,
    },
    NoCompletion {
        within: Option<u64>,
    },
    State(String),
    /// An asynchronous event on the target (ibv_get_async_event).
    Event {
        name: String,
        within: Option<u64>,
    },
    Memory {
        mr: String,
        off: u64,
        bytes: Payload,
    },
    /// `expect mad NAME field=value ...`: the next CM MAD the target sends.
    Mad {
        spec: MadSpec,
        within: Option<u64>,
    },
    /// `expect cm_event NAME [status=N]`: the target's next rdma_cm event.
    CmEvent {
        name: String,
        status: Option<i64>,
        within: Option<u64>,
    },
    /// `expect no_cm_event within=MS`.
    NoCmEvent {
        within: Option<u64>,
    },
}

/// What is wrong with a script, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {what}")]
pub struct ScriptError {
    pub file: String,
    pub line: usize,
    pub what: String,
}

pub const STATES: &[&str] = &["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"];
pub const SEND_OPS: &[&str] = &[
    "SEND",
    "SEND_IMM",
    "SEND_INV",
    "WRITE",
    "WRITE_IMM",
    "READ",
    "CMP_SWAP",
    "FETCH_ADD",
];
pub const WC_STATUSES: &[&str] = &[
    "SUCCESS",
    "LOC_LEN_ERR",
    "LOC_QP_OP_ERR",
    "LOC_PROT_ERR",
    "WR_FLUSH_ERR",
    "BAD_RESP_ERR",
    "REM_INV_REQ_ERR",
    "REM_ACCESS_ERR",
    "REM_OP_ERR",
    "RETRY_EXC_ERR",
    "RNR_RETRY_EXC_ERR",
    "LOC_ACCESS_ERR",
    "REM_ABORT_ERR",
    "GENERAL_ERR",
    "FATAL_ERR",
];
/// ibv_event_type's names without the prefix: those a QP or CQ of a script can see.
pub const EVENTS: &[&str] = &[
    "QP_FATAL",
    "QP_REQ_ERR",
    "QP_ACCESS_ERR",
    "COMM_EST",
    "SQ_DRAINED",
    "LAST_WQE_REACHED",
    "CQ_ERR",
    "PORT_ACTIVE",
    "PORT_ERR",
    "SRQ_LIMIT_REACHED",
    "SRQ_ERR",
];
/// The port counters `expect counter` reads (ibv_query_port's qkey_viol_cntr,
/// bad_pkey_cntr), then the congestion-control ones ([`CC_COUNTERS`]).
pub const COUNTERS: &[&str] = &[
    "qkey_viol",
    "bad_pkey",
    "np_ecn_marked_roce_packets",
    "np_cnp_sent",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "rp_rate_decreases",
];
/// The congestion-control counters (mlx5's hw_counters names, IBA A17.9): a target
/// whose agent does not report them (rxe: no congestion control at all) makes a script
/// that checks one not applicable.
pub const CC_COUNTERS: &[&str] = COUNTERS.split_at(2).1;
/// QP types (`qp type=`).
pub const QP_TYPES: &[&str] = &["rc", "uc", "ud"];
pub const WC_OPS: &[&str] = &[
    "SEND",
    "RDMA_WRITE",
    "RDMA_READ",
    "COMP_SWAP",
    "FETCH_ADD",
    "RECV",
    "RECV_RDMA_WITH_IMM",
];
const ACCESS: &[&str] = &[
    "local_write",
    "remote_write",
    "remote_read",
    "remote_atomic",
];
/// The `qp` keys and the agent's names for them.
const QP_KEYS: &[&str] = &[
    "mtu",
    "psn",
    "peer_psn",
    "access",
    "max_rd_atomic",
    "max_dest_rd_atomic",
    "timeout",
    "retry",
    "rnr_retry",
    "min_rnr_timer",
    "sq",
    "rq",
    "state",
    "type",
    "qkey",
];

/// Parses `text` (from `file`, named `name` in reports).
pub fn parse(file: &str, name: &str, text: &str) -> Result<Script, ScriptError> {
    let mut s = Script {
        name: name.to_string(),
        title: String::new(),
        cites: Vec::new(),
        role: Role::Responder,
        notes: BTreeMap::new(),
        steps: Vec::new(),
    };
    let mut role = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let step = statement(raw, &mut s, &mut role).map_err(|what| ScriptError {
            file: file.to_string(),
            line,
            what,
        })?;
        if let Some(action) = step {
            s.steps.push(Step {
                line,
                text: raw.trim().to_string(),
                action,
            });
        }
    }
    let err = |what: &str| ScriptError {
        file: file.to_string(),
        line: 0,
        what: what.to_string(),
    };
    if s.title.is_empty() {
        return Err(err("no title line"));
    }
    if s.cites.is_empty() {
        return Err(err("no cite line: name the compliance statement checked"));
    }
    s.role = role.ok_or_else(|| err("no role line (responder or requester)"))?;
    if s.role != Role::CmPassive && !s.steps.iter().any(|s| matches!(s.action, Action::Qp(_))) {
        return Err(err("no qp line"));
    }
    Ok(s)
}

/// One line: header lines fill `s` and give no step.
fn statement(raw: &str, s: &mut Script, role: &mut Option<Role>) -> Result<Option<Action>, String> {
    let toks = tokenize(raw)?;
    let Some((kw, rest)) = toks.split_first() else {
        return Ok(None);
    };
    let mut a = Args::new(rest);
    let action = match kw.as_str() {
        "title" => {
            s.title = a.text("the title")?.to_string();
            None
        }
        "cite" => {
            let clause = a.word("a compliance statement (C9-nn, o9-nn or -)")?;
            let section = a.text("the IBA section, quoted")?;
            s.cites.push(Cite {
                clause: clause.to_string(),
                section: section.to_string(),
            });
            None
        }
        "role" => {
            *role = Some(match a.word("responder, requester or cm_passive")? {
                "responder" => Role::Responder,
                "requester" => Role::Requester,
                "cm_passive" => Role::CmPassive,
                o => return Err(format!("role {o:?}: responder, requester or cm_passive")),
            });
            None
        }
        "note" => {
            let target = a.word("a target label (rxe, roce-emu)")?.to_string();
            let text = a.text("the note, quoted")?;
            s.notes.insert(target, text.to_string());
            None
        }
        "mr" => Some(Action::Mr(MrSpec {
            name: a.word("the region's name")?.to_string(),
            len: a.num("len")?.ok_or_else(|| "mr needs len=".to_string())?,
            access: a.list("access", ACCESS)?.unwrap_or_default(),
            fill: a.byte_spec("fill")?.unwrap_or(ByteSpec::Byte(0)),
        })),
        "qp" => {
            let mut attrs = Vec::new();
            for &k in QP_KEYS {
                let v = match k {
                    "access" => a.list(k, &ACCESS[1..])?,
                    "state" => a.choice(k, &STATES[..4])?.map(str::to_string),
                    "type" => a.choice(k, QP_TYPES)?.map(str::to_string),
                    "qkey" => a
                        .num_as::<u32>(k, u64::from(u32::MAX))?
                        .map(|n| n.to_string()),
                    _ => a.num(k)?.map(|n| n.to_string()),
                };
                if let Some(v) = v {
                    attrs.push((k, v));
                }
            }
            if a.flag("srq") {
                attrs.push(("srq", "1".to_string()));
            }
            if s.steps
                .iter()
                .filter(|s| matches!(s.action, Action::Qp(_)))
                .count()
                >= MAX_QPS
            {
                return Err(format!("at most {MAX_QPS} qp lines"));
            }
            Some(Action::Qp(QpSpec { attrs }))
        }
        "srq" => Some(Action::Srq {
            depth: a.num("depth")?.ok_or("srq needs depth=")?,
            limit: a.num("limit")?.unwrap_or(0),
        }),
        "post" => match a.word("recv or send")? {
            "recv" => Some(Action::PostRecv {
                wr: a.num("wr")?.unwrap_or(0),
                sges: a.all("sge"),
                srq: a.flag("srq"),
            }),
            "send" => {
                let wr = a.num("wr")?.unwrap_or(0);
                let op = a
                    .choice("op", SEND_OPS)?
                    .ok_or_else(|| format!("post send needs op= ({})", SEND_OPS.join(" ")))?
                    .to_string();
                let sges = a.all("sge");
                let mut values = Vec::new();
                for k in [
                    "va", "rkey", "imm", "inv", "compare", "swap", "add", "qkey", "qpn",
                ] {
                    if let Some(v) = a.reference(k)? {
                        values.push((k, v));
                    }
                }
                let mut flags = vec![];
                if !a.flag("unsignaled") {
                    flags.push("signaled");
                }
                for f in ["solicited", "fence", "inline"] {
                    if a.flag(f) {
                        flags.push(f);
                    }
                }
                Some(Action::PostSend(SendWrSpec {
                    wr,
                    op,
                    sges,
                    values,
                    flags,
                }))
            }
            o => return Err(format!("post {o:?}: post recv or post send")),
        },
        "modify" if a.flag("srq") => Some(Action::ModifySrq {
            limit: a.num("limit")?.ok_or("modify srq needs limit=")?,
        }),
        "modify" => Some(Action::Modify {
            state: a
                .choice("state", STATES)?
                .ok_or_else(|| "modify needs state=".to_string())?
                .to_string(),
        }),
        "send" if a.word_in(&["mad"]).is_some() => Some(Action::SendMad(cm::mad_spec(&mut a)?)),
        "send" => {
            let f = a.fields(true)?;
            if f.psn.is_none() {
                return Err("send needs psn=".into());
            }
            Some(Action::Send(f))
        }
        "expect" if a.word_in(&["mad"]).is_some() => Some(Action::Expect(Expect::Mad {
            within: a.num("within")?,
            spec: cm::mad_spec(&mut a)?,
        })),
        "expect" if a.word_in(&["cm_event"]).is_some() => {
            let within = a.num("within")?;
            let name = a
                .word_in(cm::CM_EVENTS)
                .ok_or_else(|| format!("expect cm_event needs one of {}", cm::CM_EVENTS.join(" ")))?
                .to_string();
            let status = match a.take("status")? {
                Some(v) => Some(v.parse::<i64>().map_err(|_| format!("status={v}: an integer"))?),
                None => None,
            };
            Some(Action::Expect(Expect::CmEvent { name, status, within }))
        }
        "expect" if a.word_in(&["no_cm_event"]).is_some() => {
            Some(Action::Expect(Expect::NoCmEvent { within: a.num("within")? }))
        }
        "expect" => Some(Action::Expect(expect(&mut a)?)),
        "listen" => Some(Action::Listen {
            ps: a.choice("ps", &["tcp", "udp"])?.unwrap_or("tcp"),
            port: a
                .num_as::<u16>("port", u64::from(u16::MAX))?
                .ok_or("listen needs port=")?,
        }),
        "accept" => Some(Action::CmCall("accept")),
        "reject" => Some(Action::CmCall("reject")),
        "disconnect" => Some(Action::CmCall("disconnect")),
        "destroy" => Some(Action::CmCall("destroy")),
        "wait" => Some(Action::Wait {
            ms: a
                .word("milliseconds")?
                .parse()
                .map_err(|_| "wait takes milliseconds".to_string())?,
        }),
        o => {
            return Err(format!(
            "unknown statement {o:?}: title cite role note mr srq qp post modify send expect wait listen accept reject \
             disconnect destroy"
        ))
        }
    };
    a.finish(kw)?;
    Ok(action)
}

fn expect(a: &mut Args<'_>) -> Result<Expect, String> {
    let within = a.num("within")?;
    // `expect opcode=0xNN ...` names the opcode by number, with no word first.
    let what = if a.has("opcode") {
        ""
    } else {
        a.word(
            "an opcode, silence, nothing, completion, no_completion, state, event, no_event, \
             memory, grh or counter",
        )?
    };
    Ok(match what {
        "silence" => Expect::Silence { within },
        "nothing" => Expect::Nothing { within },
        "no_event" => Expect::NoEvent { within },
        "no_completion" => Expect::NoCompletion { within },
        "completion" => Expect::Completion {
            wr: a.num("wr")?,
            status: a.choice("status", WC_STATUSES)?.map(str::to_string),
            op: a.choice("op", WC_OPS)?.map(str::to_string),
            len: a.num("len")?,
            imm: a.num("imm")?,
            src_qp: a.take("src_qp")?.map(QpRef::parse).transpose()?,
            grh: if a.flag("grh") {
                Some(true)
            } else if a.flag("no_grh") {
                Some(false)
            } else {
                None
            },
            qp: match a.num("qp")? {
                None => None,
                Some(n) if (1..=MAX_QPS as u64).contains(&n) => Some(n as usize - 1),
                Some(n) => return Err(format!("qp={n}: 1 to {MAX_QPS}")),
            },
            within,
        },
        "grh" => Expect::Grh {
            mr: a.word("the region's name")?.to_string(),
            off: a.num("off")?.unwrap_or(0),
            ip_len: a.num("ip_len")?,
        },
        "counter" => {
            let mut found = None;
            for &c in COUNTERS {
                if let Some(v) = a.take(c)? {
                    let d = v
                        .strip_prefix('+')
                        .ok_or_else(|| format!("{c}={v}: +N, the growth since the qp line"))?;
                    found = Some(Expect::Counter {
                        name: c.to_string(),
                        delta: Num::parse(d)?.0,
                    });
                }
            }
            found
                .ok_or_else(|| format!("expect counter needs one of {}=+N", COUNTERS.join("= ")))?
        }
        "state" => Expect::State(
            a.word_in(STATES)
                .ok_or_else(|| format!("expect state needs one of {}", STATES.join(" ")))?
                .to_string(),
        ),
        "event" => Expect::Event {
            name: a
                .word_in(EVENTS)
                .ok_or_else(|| format!("expect event needs one of {}", EVENTS.join(" ")))?
                .to_string(),
            within,
        },
        "memory" => {
            let mr = a.word("the region's name")?.to_string();
            let off = a.num("off")?.unwrap_or(0);
            let bytes = a
                .payload()?
                .ok_or("expect memory needs len= with fill=, or data=")?;
            Expect::Memory { mr, off, bytes }
        }
        op => {
            if !op.is_empty() {
                a.push_back(op);
            }
            let skip_acks = a.flag("skip_acks");
            Expect::Packet {
                fields: a.fields(false)?,
                within,
                skip_acks,
            }
        }
    })
}
