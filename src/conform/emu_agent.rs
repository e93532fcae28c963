//! The roce-emu agent: the agent protocol (spec/FORMAT.md) served over the verbs layer, in
//! the runner's process (`--target roce-emu`) or on its own (`roce-emu conform --agent`).

mod args;

use super::agent::Reply;
use super::script::CC_COUNTERS;
use super::value::{to_hex, ByteSpec, Num};
use crate::verbs::{
    AsyncEvent, Completion, Context, Counter, Device, Event, Local, MemoryRegion, Mtu, Pd, Psn,
    QpAttr, QpCap, QpInit, QpState, QpType, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge,
    SrqInit, UdDest,
};
use args::{access, op_name, status_name, A};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest request line: anything longer is refused unread.
const MAX_LINE: usize = 4096;
/// The most QPs a script may create (`qp` lines).
const MAX_QPS: usize = crate::conform::script::MAX_QPS;
/// The largest region a script may register.
const MAX_MR: u64 = 16 << 20;
/// The deepest queue a script may ask for.
const MAX_WR: u64 = 4096;
/// Regions are placed at these iovas, one slot apart, like a program's heap addresses.
const IOVA_BASE: u64 = 0x7f00_0000_0000;
const IOVA_STRIDE: u64 = 1 << 32;

/// Serves connections on `listener`, one at a time, with a NIC on `ip`, or attached to the
/// daemon listening on `daemon`.
pub fn serve(listener: TcpListener, ip: IpAddr, daemon: Option<PathBuf>) -> Result<(), String> {
    let mut dev = Device::new(ip);
    // A port of its own: the peer's packets come to this address alone.
    dev.share = false;
    dev.daemon = daemon;
    let ctx = dev.open().map_err(|e| match &dev.daemon {
        Some(d) => format!("cannot attach to the daemon at {}: {e}", d.display()),
        None => format!("cannot open a NIC on {ip}: {e}"),
    })?;
    // The connection manager on the NIC's QP1, for `role cm_passive` scripts
    // (`super::emu_cm`); its thread lives as long as the agent.
    // Attached to a daemon, QP1 is the daemon's: the agent is a CM client of its CM, as a
    // program's librdmacm is.
    let host = match &dev.daemon {
        Some(d) => super::emu_cm::CmHost::via_daemon(&ctx, d)?,
        None => super::emu_cm::CmHost::new(&ctx),
    };
    std::thread::scope(|scope| {
        let h = &host;
        let c = &ctx;
        scope.spawn(move || {
            if let Err(e) = h.run(c) {
                tracing::error!("conform agent: the CM's QP1: {e}");
            }
        });
        host.wait_ready();
        let r = serve_on(&listener, &ctx, &host);
        host.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    })
}

fn serve_on(
    listener: &TcpListener,
    ctx: &Context,
    host: &super::emu_cm::CmHost,
) -> Result<(), String> {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let _ = conn.set_nodelay(true);
        let mut st = State::new(ctx, host);
        let Ok(w) = conn.try_clone() else { continue };
        let mut w = std::io::BufWriter::new(w);
        let mut r = std::io::Read::take(BufReader::new(conn), u64::MAX);
        let mut line = String::new();
        loop {
            line.clear();
            r.set_limit(MAX_LINE as u64);
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) if !line.ends_with('\n') => {
                    let _ = writeln!(w, "err request line longer than {MAX_LINE} bytes");
                    break;
                }
                Ok(_) => {}
            }
            let reply = st.handle(line.trim());
            if writeln!(w, "{}", render(&reply))
                .and_then(|_| w.flush())
                .is_err()
            {
                break;
            }
        }
        st.reset();
    }
    Ok(())
}

fn render(r: &Reply) -> String {
    match r {
        Reply::Ok(kv) => {
            let mut s = String::from("ok");
            for (k, v) in kv {
                s.push(' ');
                s.push_str(k);
                if !v.is_empty() {
                    s.push('=');
                    s.push_str(v);
                }
            }
            s
        }
        Reply::Err(e) => format!("err {e}"),
        Reply::Unsupported(e) => format!("unsupported {e}"),
    }
}

struct Mr {
    mr: Arc<MemoryRegion>,
}

struct State<'a> {
    ctx: &'a Context,
    host: &'a super::emu_cm::CmHost,
    cm: super::emu_cm::CmIds,
    pd: Option<Pd>,
    cq: Option<u32>,
    /// The first QP: what modify, state and post act on.
    qpn: Option<u32>,
    /// Every QP of the script (up to MAX_QPS, on one CQ) and its type.
    qps: Vec<(u32, QpType)>,
    srq: Option<u32>,
    mrs: HashMap<String, Mr>,
    /// The `qp` request's arguments, for later bring-up steps (`modify state=RTR`).
    qp_args: HashMap<String, String>,
}

fn ok(kv: &[(&str, String)]) -> Reply {
    Reply::Ok(kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
}

type R = Result<Reply, String>;

impl<'a> State<'a> {
    fn new(ctx: &'a Context, host: &'a super::emu_cm::CmHost) -> State<'a> {
        State {
            ctx,
            host,
            cm: Default::default(),
            pd: None,
            cq: None,
            qpn: None,
            qps: Vec::new(),
            srq: None,
            mrs: HashMap::new(),
            qp_args: HashMap::new(),
        }
    }

    fn handle(&mut self, line: &str) -> Reply {
        let mut words = line.split_whitespace();
        let cmd = words.next().unwrap_or("");
        let mut args = HashMap::new();
        for w in words {
            match w.split_once('=') {
                Some((k, v)) => args.insert(k, v),
                None => return Reply::Err(format!("{w:?} is not key=value")),
            };
        }
        let a = A(args);
        let r = match cmd {
            "hello" => Ok(ok(&[
                ("name", "roce-emu".into()),
                ("ip", self.ctx.local_ip().to_string()),
            ])),
            "reset" => {
                self.reset();
                Ok(ok(&[]))
            }
            "mr" => self.mr(&a),
            "qp" => self.qp(&a),
            "modify" => self.modify(&a),
            "post_recv" => self.post_recv(&a),
            "post_send" => self.post_send(&a),
            "poll" => self.poll(&a),
            "state" => self.state(),
            "read" => self.read(&a),
            "event" => self.event(&a),
            "srq" => self.srq(&a),
            "modify_srq" => self.modify_srq(&a),
            "post_srq_recv" => self.post_srq_recv(&a),
            "port" => self.port(),
            "cm_listen" => (|| {
                let port = u16::try_from(a.n("port")?).map_err(|_| "port: 16 bits")?;
                let ip = self.ctx.local_ip();
                self.cm.listen(self.host, ip, a.s("ps")?, port)
            })()
            .map(|kv| ok(&kv)),
            "cm_event" => a
                .n_or("ms", 0)
                .and_then(|ms| self.cm.event(self.host, ms))
                .map(|kv| ok(&kv)),
            "cm_accept" => self.cm_accept(),
            "cm_reject" => self.cm.reject(self.host).map(|kv| ok(&kv)),
            "cm_disconnect" => self.cm.disconnect(self.host, self.ctx).map(|kv| ok(&kv)),
            "cm_destroy" => self.cm.destroy(self.host, self.ctx).map(|kv| ok(&kv)),
            "" => Err("empty request".into()),
            o => Err(format!("unknown request {o:?}")),
        };
        r.unwrap_or_else(Reply::Err)
    }

    fn pd(&mut self) -> Pd {
        *self.pd.get_or_insert_with(|| self.ctx.alloc_pd())
    }

    /// `cm_accept`: the QP goes on the script's PD and CQ (made now if none).
    fn cm_accept(&mut self) -> R {
        let pd = self.pd();
        let cq = match self.cq {
            Some(c) => c,
            None => self
                .ctx
                .create_cq(64, None)
                .map_err(|e| format!("create_cq: {e}"))?,
        };
        self.cq = Some(cq);
        self.cm
            .accept(self.host, self.ctx, pd, cq)
            .map(|kv| ok(&kv))
    }

    fn reset(&mut self) {
        self.cm.reset(self.host, self.ctx);
        self.qpn = None;
        for (q, _) in self.qps.drain(..) {
            let _ = self.ctx.destroy_qp(q);
        }
        if let Some(s) = self.srq.take() {
            let _ = self.ctx.destroy_srq(s);
        }
        if let Some(c) = self.cq.take() {
            let _ = self.ctx.destroy_cq(c);
        }
        for (_, m) in self.mrs.drain() {
            let _ = self.ctx.dereg_mr(m.mr.lkey());
        }
        if let Some(pd) = self.pd.take() {
            let _ = self.ctx.dealloc_pd(pd);
        }
        // The last script's events are not the next one's (bounded: the queue is).
        while self.ctx.poll_async_event().is_some() {}
    }

    fn mr(&mut self, a: &A) -> R {
        let name = a.s("name")?;
        if self.mrs.contains_key(name) {
            return Err(format!("a region named {name} exists"));
        }
        let len = a.n("len")?;
        if len == 0 || len > MAX_MR {
            return Err(format!("len={len}: 1 to {MAX_MR}"));
        }
        let access = access(a.opt("access").unwrap_or(""))?;
        let fill = ByteSpec::parse(a.opt("fill").unwrap_or("0"))?;
        let iova = IOVA_BASE + IOVA_STRIDE * self.mrs.len() as u64;
        let pd = self.pd();
        let mr = self
            .ctx
            .reg_mr(pd, iova, len, access)
            .map_err(|e| format!("reg_mr: {e}"))?;
        mr.with_bytes_mut(|b| {
            for (i, x) in b.iter_mut().enumerate() {
                *x = fill.at(i as u64);
            }
        });
        let r = ok(&[
            ("addr", format!("{iova:#x}")),
            ("rkey", format!("{:#x}", mr.rkey().0)),
            ("lkey", format!("{:#x}", mr.lkey().0)),
        ]);
        self.mrs.insert(name.to_string(), Mr { mr });
        Ok(r)
    }

    fn qp(&mut self, a: &A) -> R {
        let ty = match a.opt("type").unwrap_or("rc") {
            "rc" => QpType::Rc,
            "uc" => QpType::Uc,
            "ud" => QpType::Ud,
            t => return Err(format!("type={t}: rc uc or ud")),
        };
        let srq = match a.opt("srq") {
            Some(_) => Some(self.srq.ok_or("srq=1 needs an srq first")?),
            None => None,
        };
        if self.qps.len() == MAX_QPS {
            return Err(format!("{MAX_QPS} QPs exist: reset first"));
        }
        let sq = a.n_or("sq", 64)?;
        let rq = a.n_or("rq", 64)?;
        if !(1..=MAX_WR).contains(&sq) || !(1..=MAX_WR).contains(&rq) {
            return Err(format!("sq={sq} rq={rq}: 1 to {MAX_WR} each"));
        }
        let (sq, rq) = (sq as usize, rq as usize);
        let cq = match self.cq {
            Some(c) => c,
            None => self
                .ctx
                .create_cq((sq + rq) * MAX_QPS, None)
                .map_err(|e| format!("create_cq: {e}"))?,
        };
        self.cq = Some(cq);
        let cap = QpCap {
            max_send_wr: sq,
            max_recv_wr: rq,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 256,
        };
        let pd = self.pd();
        let mut init = QpInit::rc(pd, cq, cap);
        init.qp_type = ty;
        init.srq = srq;
        let qpn = match self.ctx.create_qp(&init) {
            Ok(q) => q,
            // A QP type the engine lacks (UC before its branch): not applicable.
            Err(e) if ty != QpType::Rc => {
                return Ok(Reply::Unsupported(format!("create_qp {ty:?}: {e}")))
            }
            Err(e) => return Err(format!("create_qp: {e}")),
        };
        self.qps.push((qpn, ty));
        if self.qpn.is_none() {
            self.qpn = Some(qpn);
            self.qp_args =
                a.0.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
        }
        let steps: &[QpState] = match a.opt("state").unwrap_or("RTS") {
            "RESET" => &[],
            "INIT" => &[QpState::Init],
            "RTR" => &[QpState::Init, QpState::Rtr],
            "RTS" => &[QpState::Init, QpState::Rtr, QpState::Rts],
            o => return Err(format!("state={o}: RESET INIT RTR or RTS")),
        };
        for &s in steps {
            let attr = bring_up(s, ty, a)?;
            self.ctx
                .modify_qp(qpn, &attr)
                .map_err(|e| format!("modify_qp to {s}: {e}"))?;
        }
        Ok(ok(&[("qpn", format!("{qpn:#x}"))]))
    }

    /// `modify state=S`: RESET->INIT, INIT->RTR and RTR->RTS take the `qp` line's
    /// attributes; any other transition (to ERR, RESET, SQD, or SQD->RTS) none.
    fn modify(&mut self, a: &A) -> R {
        let qpn = self.qpn.ok_or("no QP yet")?;
        let to = match a.s("state")? {
            "RESET" => QpState::Reset,
            "INIT" => QpState::Init,
            "RTR" => QpState::Rtr,
            "RTS" => QpState::Rts,
            "SQD" => QpState::Sqd,
            "ERR" => QpState::Err,
            o => return Ok(Reply::Unsupported(format!("modify to {o}"))),
        };
        let from = self
            .ctx
            .qp_state(qpn)
            .map_err(|e| format!("query_qp: {e}"))?;
        let kept = A(self
            .qp_args
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect());
        let attr = match (from, to) {
            (QpState::Reset, QpState::Init)
            | (QpState::Init, QpState::Rtr)
            | (QpState::Rtr, QpState::Rts) => bring_up(to, self.qps[0].1, &kept)?,
            _ => QpAttr {
                state: Some(to),
                ..Default::default()
            },
        };
        self.ctx
            .modify_qp(qpn, &attr)
            .map_err(|e| format!("modify_qp {from} -> {to}: {e}"))?;
        Ok(ok(&[]))
    }

    fn sges(&self, a: &A) -> Result<Vec<Sge>, String> {
        let Some(list) = a.opt("sge") else {
            return Ok(Vec::new());
        };
        list.split(',')
            .map(|s| {
                let mut p = s.split(':');
                let (Some(name), Some(off), Some(len), None) =
                    (p.next(), p.next(), p.next(), p.next())
                else {
                    return Err(format!("sge {s:?}: NAME:OFFSET:LENGTH"));
                };
                let m = self
                    .mrs
                    .get(name)
                    .ok_or_else(|| format!("no region {name}"))?;
                let off = Num::parse(off)?.0;
                let len = u32::try_from(Num::parse(len)?.0).map_err(|_| "sge length: 32 bits")?;
                Ok(Sge {
                    addr: m.mr.iova().wrapping_add(off),
                    length: len,
                    lkey: m.mr.lkey(),
                })
            })
            .collect()
    }

    fn post_recv(&mut self, a: &A) -> R {
        let qpn = self.qpn.ok_or("no QP yet")?;
        let sges = self.sges(a)?;
        let wr = RecvWr {
            wr_id: a.n_or("wr", 0)?,
            sges: &sges,
        };
        self.ctx
            .post_recv(qpn, &wr)
            .map_err(|e| format!("post_recv: {e}"))?;
        Ok(ok(&[]))
    }

    fn post_send(&mut self, a: &A) -> R {
        let qpn = self.qpn.ok_or("no QP yet")?;
        let sges = self.sges(a)?;
        let remote = || -> Result<Remote, String> {
            Ok(Remote {
                va: a.n_or("va", 0)?,
                rkey: a.n_or("rkey", 0)? as u32,
            })
        };
        let op = match a.s("op")? {
            "SEND" => SendOp::Send,
            "SEND_IMM" => SendOp::SendWithImm {
                imm: a.n_or("imm", 0)? as u32,
            },
            "SEND_INV" => SendOp::SendWithInv {
                rkey: a.n_or("inv", 0)? as u32,
            },
            "WRITE" => SendOp::Write { remote: remote()? },
            "WRITE_IMM" => SendOp::WriteWithImm {
                remote: remote()?,
                imm: a.n_or("imm", 0)? as u32,
            },
            "READ" => SendOp::Read { remote: remote()? },
            "CMP_SWAP" => SendOp::CompareSwap {
                remote: remote()?,
                compare: a.n_or("compare", 0)?,
                swap: a.n_or("swap", 0)?,
            },
            "FETCH_ADD" => SendOp::FetchAdd {
                remote: remote()?,
                add: a.n_or("add", 0)?,
            },
            o => return Ok(Reply::Unsupported(format!("op {o}"))),
        };
        let flags_s = a.opt("flags").unwrap_or("");
        let has = |f: &str| flags_s.split(',').any(|x| x == f);
        let flags = SendFlags {
            signaled: has("signaled"),
            fence: has("fence"),
            solicited: has("solicited"),
        };
        let inline: Vec<u8>;
        let local = if has("inline") {
            let mut v = Vec::new();
            for s in &sges {
                let m = self
                    .mrs
                    .values()
                    .find(|m| m.mr.lkey() == s.lkey)
                    .ok_or("inline: no region")?;
                let mut b = vec![0; s.length as usize];
                m.mr.read(s.addr, &mut b)
                    .map_err(|e| format!("inline: {e}"))?;
                v.extend_from_slice(&b);
            }
            inline = v;
            Local::Inline(&inline)
        } else {
            Local::Sges(&sges)
        };
        let wr = SendWr {
            wr_id: a.n_or("wr", 0)?,
            op,
            local,
            flags,
        };
        if self.qps[0].1 == QpType::Ud {
            // To the peer (the qp line's peer_ip), its QP and the QP's own Q_Key unless the
            // request names others: the address handle a program would make.
            let kept = |k: &str| self.qp_args.get(k).map(String::as_str);
            let dest = UdDest {
                dest_ip: kept("peer_ip")
                    .ok_or("a UD send needs the qp line's peer_ip")?
                    .parse()
                    .map_err(|_| "peer_ip: an address")?,
                remote_qpn: match a.opt("qpn").or(kept("peer_qpn")) {
                    Some(v) => Num::parse(v)?.0 as u32,
                    None => 0,
                },
                remote_qkey: match a.opt("qkey").or(kept("qkey")) {
                    Some(v) => Num::parse(v)?.0 as u32,
                    None => 0,
                },
            };
            self.ctx
                .post_send_ud(qpn, &wr, &dest)
                .map_err(|e| format!("post_send: {e}"))?;
            return Ok(ok(&[]));
        }
        self.ctx
            .post_send(qpn, &wr)
            .map_err(|e| format!("post_send: {e}"))?;
        Ok(ok(&[]))
    }

    fn poll(&mut self, a: &A) -> R {
        let cq = self.cq.ok_or("no CQ yet")?;
        let until = Instant::now() + Duration::from_millis(a.n_or("ms", 0)?.min(600_000));
        let mut wc = [Completion::default()];
        loop {
            if self
                .ctx
                .poll_cq(cq, &mut wc)
                .map_err(|e| format!("poll_cq: {e}"))?
                == 1
            {
                let c = wc[0];
                let mut kv = vec![
                    ("wr", c.wr_id.to_string()),
                    ("status", status_name(c.status).into()),
                    ("op", op_name(c.opcode).into()),
                    ("len", c.byte_len.to_string()),
                    ("qpn", format!("{:#x}", c.qpn)),
                ];
                if let Some(i) = c.imm {
                    kv.push(("imm", format!("{i:#x}")));
                }
                if self.qps.contains(&(c.qpn, QpType::Ud)) {
                    kv.push(("src_qp", format!("{:#x}", c.src_qp)));
                }
                if c.network_hdr.is_some() {
                    kv.push(("grh", String::new()));
                }
                return Ok(ok(&kv));
            }
            if Instant::now() >= until {
                return Ok(ok(&[("none", String::new())]));
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    fn event(&self, a: &A) -> R {
        let t = Duration::from_millis(a.n_or("ms", 0)?.min(600_000));
        let name = match self.ctx.get_async_event(t) {
            None => return Ok(ok(&[("none", String::new())])),
            Some(Event::PortError(_)) => "PORT_ERR",
            Some(Event::GidChange) => "GID_CHANGE",
            Some(Event::Engine(e)) => match e {
                AsyncEvent::QpFatal { .. } => "QP_FATAL",
                AsyncEvent::QpRequestError { .. } => "QP_REQ_ERR",
                AsyncEvent::QpAccessError { .. } => "QP_ACCESS_ERR",
                AsyncEvent::CqError { .. } => "CQ_ERR",
                AsyncEvent::SqDrained { .. } => "SQ_DRAINED",
                AsyncEvent::SrqLimitReached { .. } => "SRQ_LIMIT_REACHED",
                // ibv_event_type's IBV_EVENT_QP_LAST_WQE_REACHED, named as the scripts
                // and the rdma-core agent name it.
                AsyncEvent::QpLastWqeReached { .. } => "LAST_WQE_REACHED",
            },
        };
        Ok(ok(&[("event", name.into())]))
    }

    fn srq(&mut self, a: &A) -> R {
        if self.srq.is_some() {
            return Err("an srq exists: reset first".into());
        }
        let max_wr = a.n("max_wr")?;
        if !(1..=MAX_WR).contains(&max_wr) {
            return Err(format!("max_wr={max_wr}: 1 to {MAX_WR}"));
        }
        let pd = self.pd();
        let s = self
            .ctx
            .create_srq(&SrqInit {
                pd,
                max_wr: max_wr as usize,
                max_sge: 4,
                limit: 0,
            })
            .map_err(|e| format!("create_srq: {e}"))?;
        self.srq = Some(s);
        let limit = a.n_or("limit", 0)?;
        if limit > 0 {
            self.ctx
                .modify_srq(s, None, Some(limit as u32))
                .map_err(|e| format!("modify_srq: {e}"))?;
        }
        Ok(ok(&[]))
    }

    fn modify_srq(&mut self, a: &A) -> R {
        let s = self.srq.ok_or("no srq")?;
        self.ctx
            .modify_srq(s, None, Some(a.n("limit")? as u32))
            .map_err(|e| format!("modify_srq: {e}"))?;
        Ok(ok(&[]))
    }

    fn post_srq_recv(&mut self, a: &A) -> R {
        let s = self.srq.ok_or("no srq")?;
        let sges = self.sges(a)?;
        let wr = RecvWr {
            wr_id: a.n_or("wr", 0)?,
            sges: &sges,
        };
        self.ctx
            .post_srq_recv(s, &wr)
            .map_err(|e| format!("post_srq_recv: {e}"))?;
        Ok(ok(&[]))
    }

    /// The port's Q_Key and P_Key violation counts (PortInfo's, as ibv_query_port gives
    /// them): the engine's counters of those drops; and its congestion-control counters
    /// (mlx5's hw_counters names), which rxe's agent does not report.
    fn port(&self) -> R {
        let c = self.ctx.counters();
        let mut kv = vec![
            ("qkey_viol", c.get(Counter::QkeyViolation).to_string()),
            ("bad_pkey", c.get(Counter::DropPkeyMismatch).to_string()),
        ];
        let cc = Counter::ALL
            .iter()
            .filter(|k| CC_COUNTERS.contains(&k.name()));
        kv.extend(cc.map(|k| (k.name(), c.get(*k).to_string())));
        Ok(ok(&kv))
    }

    fn state(&self) -> R {
        let qpn = self.qpn.ok_or("no QP yet")?;
        self.ctx
            .qp_state(qpn)
            .map(|s| ok(&[("state", s.to_string())]))
            .map_err(|e| format!("query_qp: {e}"))
    }

    fn read(&mut self, a: &A) -> R {
        let m = self.mrs.get(a.s("name")?).ok_or("no such region")?;
        let off = a.n("off")?;
        let len = a.n("len")?;
        if off.checked_add(len).is_none_or(|e| e > m.mr.length()) {
            return Err(format!(
                "{off}+{len} is past the region's {} bytes",
                m.mr.length()
            ));
        }
        let mut b = vec![0; len as usize];
        m.mr.read(m.mr.iova() + off, &mut b)
            .map_err(|e| format!("read: {e}"))?;
        Ok(ok(&[("hex", to_hex(&b))]))
    }
}

/// The attributes of the bring-up step to `s` (INIT, RTR or RTS) from a `qp` request, for
/// a QP of type `ty`: UD takes a Q_Key and no path, UC a path without the RDMA READ and
/// retry attributes (IBA 11.2.5.2's table, as the kernel's ib_modify_qp_is_ok has it).
fn bring_up(s: QpState, ty: QpType, a: &A) -> Result<QpAttr, String> {
    let rc = bring_up_rc(s, a)?;
    Ok(match (ty, s) {
        (QpType::Rc, _) => rc,
        (QpType::Ud, QpState::Init) => QpAttr {
            state: Some(s),
            pkey_index: Some(0),
            port: Some(1),
            qkey: Some(a.n_or("qkey", 0)? as u32),
            ..Default::default()
        },
        (QpType::Ud, QpState::Rtr) => QpAttr {
            state: Some(s),
            ..Default::default()
        },
        (QpType::Uc, QpState::Init) => rc,
        (QpType::Uc, QpState::Rtr) => QpAttr {
            max_dest_rd_atomic: None,
            min_rnr_timer: None,
            ..rc
        },
        (_, _) => QpAttr {
            state: Some(s),
            sq_psn: rc.sq_psn,
            ..Default::default()
        },
    })
}

fn bring_up_rc(s: QpState, a: &A) -> Result<QpAttr, String> {
    Ok(match s {
        QpState::Init => QpAttr::init(access(
            a.opt("access")
                .unwrap_or("remote_write,remote_read,remote_atomic"),
        )?),
        QpState::Rtr => QpAttr::rtr(
            a.s("peer_ip")?.parse().map_err(|_| "peer_ip: an address")?,
            Mtu::from_bytes(a.n_or("mtu", 1024)? as u32).ok_or("mtu: 256 to 4096")?,
            a.n("peer_qpn")? as u32,
            Psn::new(a.n_or("peer_psn", 0)? as u32),
            a.u8_or("max_dest_rd_atomic", 4)?,
            a.u8_or("min_rnr_timer", 1)?,
        ),
        _ => QpAttr::rts(
            Psn::new(a.n_or("psn", 0)? as u32),
            a.u8_or("timeout", 14)?,
            a.u8_or("retry", 7)?,
            a.u8_or("rnr_retry", 7)?,
            a.u8_or("max_rd_atomic", 4)?,
        ),
    })
}
