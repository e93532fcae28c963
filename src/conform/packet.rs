//! A script's packets: the peer's built from [`Fields`], the target's checked against them.

use super::script::{Fields, QpRef, SyndromeSpec, MAX_QPS};
use super::value::{to_hex, Mrs};
use crate::wire::aeth::Syndrome;
use crate::wire::opcode::Headers;
use crate::wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, IethRepr, ImmDtRepr, Psn,
    RethRepr, RocePacket, RoceRepr, ICRC_LEN,
};

/// What the script's QPs are called on the wire.
#[derive(Debug, Clone, Copy, Default)]
pub struct Qpns {
    /// The first QP's number (what `send` addresses by default).
    pub target: u32,
    pub peer: u32,
    /// Every QP of the script in the order of its `qp` lines (the first is `target`).
    pub targets: [u32; MAX_QPS],
    pub count: usize,
    /// The Q_Key of the first `qp` line (UD), the default for a DETH the peer sends.
    pub qkey: u32,
}

impl Qpns {
    /// The number a [`QpRef`] names.
    pub fn resolve(&self, r: QpRef) -> Result<u32, String> {
        match r {
            QpRef::Lit(n) => Ok(n),
            QpRef::Peer => Ok(self.peer),
            QpRef::Target(i) if i < self.count => Ok(self.targets[i]),
            QpRef::Target(i) => Err(format!(
                "target{}: the script has {} qp lines",
                i + 1,
                self.count
            )),
        }
    }
}

/// The AETH credit field the peer sends: "invalid" (no end-to-end credits, IBA 9.7.7.2),
/// as a responder without credit accounting does.
const CREDITS_NONE: u8 = crate::wire::aeth::CREDITS_INVALID;

/// Builds the peer's packet, BTH through a zero ICRC (the peer fills it in).
pub fn build(f: &Fields, q: Qpns, mrs: &Mrs) -> Result<Vec<u8>, String> {
    let opcode = f.opcode.ok_or("send needs an opcode")?;
    let payload = match &f.payload {
        Some(p) => p.to_send(mrs)?,
        None => Vec::new(),
    };
    let pad = f.pad.unwrap_or(RoceRepr::pad_for(payload.len()));
    let bth = BthRepr {
        opcode,
        solicited: f.se.unwrap_or(false),
        migreq: f.migreq.unwrap_or(false),
        pad,
        tver: f.tver.unwrap_or(0),
        pkey: f.pkey.unwrap_or(0xffff),
        fecn: f.fecn.unwrap_or(false),
        becn: f.becn.unwrap_or(false),
        dqpn: match (f.qpn, f.to) {
            (Some(n), _) => n,
            (None, Some(i)) => q.resolve(QpRef::Target(i))?,
            (None, None) => q.target,
        },
        ack_req: f.ackreq.unwrap_or(false),
        psn: Psn::new(f.psn.unwrap_or(0)),
    };
    let Some(info) = opcode.info() else {
        // A reserved opcode: a BTH, the payload and pad, and the ICRC, as a peer that
        // does not know better would send it.
        let mut b =
            vec![0u8; crate::wire::bth::HEADER_LEN + payload.len() + usize::from(pad) + ICRC_LEN];
        bth.emit(&mut crate::wire::bth::Packet::new_unchecked(
            &mut b[..crate::wire::bth::HEADER_LEN],
        ));
        b[crate::wire::bth::HEADER_LEN..][..payload.len()].copy_from_slice(&payload);
        return Ok(b);
    };
    let has = |h| info.has(h);
    let va = f.va.as_ref().map(|r| r.addr(mrs)).transpose()?.unwrap_or(0);
    let rkey = f
        .rkey
        .as_ref()
        .map(|r| r.key(mrs))
        .transpose()?
        .unwrap_or(0);
    let raw_syndrome = match f.syndrome {
        Some(SyndromeSpec::Raw(r)) => Some(r),
        _ => None,
    };
    let syndrome = match f.syndrome {
        None | Some(SyndromeSpec::Ack) | Some(SyndromeSpec::Raw(_)) => Syndrome::Ack {
            credits: CREDITS_NONE,
        },
        Some(SyndromeSpec::Rnr(t)) => Syndrome::RnrNak {
            timer: t.unwrap_or(0),
        },
        Some(SyndromeSpec::Nak(c)) => Syndrome::Nak(
            crate::wire::NakCode::from_u8(c.unwrap_or(0)).ok_or("a NAK code from 0 to 4")?,
        ),
    };
    let repr = RoceRepr {
        bth,
        deth: has(Headers::DETH)
            .then(|| -> Result<DethRepr, String> {
                Ok(DethRepr {
                    qkey: f.qkey.unwrap_or(q.qkey),
                    src_qpn: q.resolve(f.src_qp.unwrap_or(QpRef::Peer))?,
                })
            })
            .transpose()?,
        reth: has(Headers::RETH).then_some(RethRepr {
            va,
            rkey,
            dma_len: f.dmalen.unwrap_or(payload.len() as u32),
        }),
        atomic_eth: has(Headers::ATOMIC_ETH).then_some(AtomicEthRepr {
            va,
            rkey,
            swap_add: f.swap.or(f.add).unwrap_or(0),
            compare: f.compare.unwrap_or(0),
        }),
        aeth: has(Headers::AETH).then_some(AethRepr {
            syndrome,
            msn: f.msn.unwrap_or(0),
        }),
        atomic_ack_eth: has(Headers::ATOMIC_ACK_ETH).then_some(AtomicAckEthRepr {
            orig: f.orig.unwrap_or(0),
        }),
        immdt: has(Headers::IMMDT).then_some(ImmDtRepr {
            imm: f.imm.unwrap_or(0),
        }),
        ieth: has(Headers::IETH)
            .then(|| f.inv.as_ref().map(|r| r.key(mrs)).transpose())
            .transpose()?
            .map(|k| IethRepr {
                rkey: k.unwrap_or(0),
            }),
        payload_len: payload.len(),
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&mut b, &payload)
        .map_err(|e| format!("cannot build {}: {e}", opcode.name()))?;
    if let (Some(raw), Some(at)) = (raw_syndrome, info.offset_of(Headers::AETH)) {
        b[at] = raw;
    }
    Ok(b)
}

/// A packet the target sent, as the peer received it.
#[derive(Debug, Clone)]
pub struct Got {
    /// BTH through ICRC.
    pub bytes: Vec<u8>,
    pub icrc_ok: bool,
    /// The ECN codepoint it arrived with.
    pub ecn: crate::wire::Ecn,
}

impl Got {
    pub fn repr(&self) -> Result<RoceRepr, String> {
        let p = RocePacket::new_checked(&self.bytes[..]).map_err(|e| e.to_string())?;
        RoceRepr::parse(&p).map_err(|e| e.to_string())
    }

    pub fn payload(&self) -> &[u8] {
        match RocePacket::new_checked(&self.bytes[..]) {
            Ok(p) => {
                let hl = p.header_len();
                &self.bytes[hl..hl + p.payload_len()]
            }
            Err(_) => &[],
        }
    }

    /// One line for a report: the decoded headers, or why they do not decode.
    pub fn describe(&self) -> String {
        let icrc = if self.icrc_ok { "" } else { " BAD-ICRC" };
        match self.repr() {
            Ok(r) => format!("{r}{icrc}"),
            Err(e) => format!(
                "undecodable ({e}): {}",
                to_hex(&self.bytes[..self.bytes.len().min(64)])
            ),
        }
    }

    pub fn psn(&self) -> Option<u32> {
        self.repr().ok().map(|r| r.bth.psn.value())
    }

    /// A plain ACK (not a NAK, not a response carrying data).
    pub fn is_plain_ack(&self) -> bool {
        self.repr().is_ok_and(|r| {
            r.bth.opcode == crate::wire::opcode::op::RC_ACKNOWLEDGE
                && matches!(r.aeth.map(|a| a.syndrome), Some(Syndrome::Ack { .. }))
        })
    }
}

/// Checks `got` against what the script expects; the error names the first field that
/// differs.
pub fn check(f: &Fields, got: &Got, q: Qpns, mrs: &Mrs) -> Result<(), String> {
    if !got.icrc_ok {
        return Err("its ICRC is wrong".into());
    }
    let r = got.repr()?;
    fn eq<T: PartialEq + std::fmt::LowerHex>(
        what: &str,
        want: Option<T>,
        have: T,
    ) -> Result<(), String> {
        match want {
            Some(w) if w != have => Err(format!("{what}: expected {w:#x}, got {have:#x}")),
            _ => Ok(()),
        }
    }
    fn flag(what: &str, want: Option<bool>, have: bool) -> Result<(), String> {
        match want {
            Some(w) if w != have => Err(format!("{what}: expected {w}, got {have}")),
            _ => Ok(()),
        }
    }
    if let Some(op) = f.opcode {
        if op != r.bth.opcode {
            return Err(format!(
                "opcode: expected {}, got {}",
                op.name(),
                r.bth.opcode.name()
            ));
        }
    }
    eq("dest QP", Some(f.qpn.unwrap_or(q.peer)), r.bth.dqpn)?;
    eq("psn", f.psn, r.bth.psn.value())?;
    flag("ackreq", f.ackreq, r.bth.ack_req)?;
    flag("se", f.se, r.bth.solicited)?;
    flag("migreq", f.migreq, r.bth.migreq)?;
    flag("fecn", f.fecn, r.bth.fecn)?;
    flag("becn", f.becn, r.bth.becn)?;
    if let Some(e) = f.ecn.filter(|e| *e != got.ecn) {
        return Err(format!(
            "ecn: expected {}, got {}",
            e.name(),
            got.ecn.name()
        ));
    }
    eq("pad", f.pad, r.bth.pad)?;
    eq("pkey", f.pkey, r.bth.pkey)?;
    eq("tver", f.tver, r.bth.tver)?;
    let (va, rkey) = match (r.reth, r.atomic_eth) {
        (Some(h), _) => (Some(h.va), Some(h.rkey)),
        (_, Some(h)) => (Some(h.va), Some(h.rkey)),
        _ => (None, None),
    };
    let need = |what: &str, have: Option<u64>| {
        have.ok_or_else(|| format!("{what}: the packet has no header carrying it"))
    };
    if let Some(v) = &f.va {
        eq("va", Some(v.addr(mrs)?), need("va", va)?)?;
    }
    if let Some(k) = &f.rkey {
        eq(
            "rkey",
            Some(k.key(mrs)?),
            need("rkey", rkey.map(u64::from))? as u32,
        )?;
    }
    if f.dmalen.is_some() {
        eq(
            "dmalen",
            f.dmalen,
            need("dmalen", r.reth.map(|h| u64::from(h.dma_len)))? as u32,
        )?;
    }
    if f.compare.is_some() || f.swap.is_some() || f.add.is_some() {
        let a = r
            .atomic_eth
            .ok_or("compare/swap/add: the packet has no AtomicETH")?;
        eq("compare", f.compare, a.compare)?;
        eq("swap/add", f.swap.or(f.add), a.swap_add)?;
    }
    if let Some(s) = f.syndrome {
        let a = r.aeth.ok_or("syndrome: the packet has no AETH")?;
        let ok = match (s, a.syndrome) {
            (SyndromeSpec::Ack, Syndrome::Ack { .. }) => true,
            (SyndromeSpec::Rnr(None), Syndrome::RnrNak { .. }) => true,
            (SyndromeSpec::Rnr(Some(t)), Syndrome::RnrNak { timer }) => t == timer,
            (SyndromeSpec::Nak(None), Syndrome::Nak(_)) => true,
            (SyndromeSpec::Nak(Some(c)), Syndrome::Nak(n)) => c == n as u8,
            (SyndromeSpec::Raw(v), have) => v == have.to_u8(),
            _ => false,
        };
        if !ok {
            return Err(format!(
                "syndrome: expected {}, got {}",
                syndrome_name(s),
                a.syndrome
            ));
        }
    }
    if f.msn.is_some() {
        eq(
            "msn",
            f.msn,
            r.aeth.ok_or("msn: the packet has no AETH")?.msn,
        )?;
    }
    if f.orig.is_some() {
        eq(
            "orig",
            f.orig,
            r.atomic_ack_eth.ok_or("orig: no AtomicAckETH")?.orig,
        )?;
    }
    if f.imm.is_some() {
        eq("imm", f.imm, r.immdt.ok_or("imm: no ImmDt")?.imm)?;
    }
    if let Some(k) = &f.inv {
        eq("inv", Some(k.key(mrs)?), r.ieth.ok_or("inv: no IETH")?.rkey)?;
    }
    if f.qkey.is_some() {
        eq("qkey", f.qkey, r.deth.ok_or("qkey: no DETH")?.qkey)?;
    }
    if let Some(s) = f.src_qp {
        eq(
            "src_qp",
            Some(q.resolve(s)?),
            r.deth.ok_or("src_qp: no DETH")?.src_qpn,
        )?;
    }
    if let Some(p) = &f.payload {
        let have = got.payload();
        if p.byte_len() != have.len() as u64 {
            return Err(format!(
                "payload: expected {} bytes, got {}",
                p.byte_len(),
                have.len()
            ));
        }
        if let Some(want) = p.bytes(mrs)? {
            if let Some(i) = want.iter().zip(have).position(|(a, b)| a != b) {
                return Err(format!(
                    "payload byte {i}: expected {:#04x}, got {:#04x}",
                    want[i], have[i]
                ));
            }
        }
    }
    Ok(())
}

fn syndrome_name(s: SyndromeSpec) -> String {
    match s {
        SyndromeSpec::Ack => "ACK".into(),
        SyndromeSpec::Rnr(None) => "RNR-NAK".into(),
        SyndromeSpec::Rnr(Some(t)) => format!("RNR-NAK timer={t}"),
        SyndromeSpec::Nak(None) => "a NAK".into(),
        SyndromeSpec::Nak(Some(c)) => match crate::wire::NakCode::from_u8(c) {
            Some(n) => format!("NAK {}", n.name()),
            None => format!("NAK code {c}"),
        },
        SyndromeSpec::Raw(v) => format!("syndrome byte {v:#04x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conform::script::parse;

    fn send_fields(line: &str) -> Fields {
        let text = format!("title \"t\"\ncite - \"x\"\nrole responder\nqp type=ud\n{line}\n");
        let s = parse("t.rc", "t", &text).unwrap();
        match &s.steps.last().unwrap().action {
            crate::conform::script::Action::Send(f) => f.clone(),
            a => panic!("not a send: {a:?}"),
        }
    }

    fn qpns() -> Qpns {
        Qpns {
            target: 0x11,
            peer: 0xc0_0001,
            targets: [0x11, 0x12, 0, 0],
            count: 2,
            qkey: 0x1111_1111,
        }
    }

    #[test]
    fn a_ud_send_carries_a_deth_with_the_qps_qkey_and_the_peers_qpn() {
        let b = build(
            &send_fields("send UD_SEND_ONLY psn=0 len=8"),
            qpns(),
            &Mrs::default(),
        )
        .unwrap();
        let r = RocePacket::new_checked(&b[..]).unwrap();
        let r = RoceRepr::parse(&r).unwrap();
        assert_eq!(r.bth.dqpn, 0x11);
        let d = r.deth.expect("a DETH");
        assert_eq!((d.qkey, d.src_qpn), (0x1111_1111, 0xc0_0001));
        let f = send_fields("send UD_SEND_ONLY psn=0 to=2 qkey=0x5 src_qp=target2 len=8");
        let b = build(&f, qpns(), &Mrs::default()).unwrap();
        let r = RoceRepr::parse(&RocePacket::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r.bth.dqpn, 0x12);
        assert_eq!(r.deth.map(|d| (d.qkey, d.src_qpn)), Some((5, 0x12)));
    }

    #[test]
    fn a_deth_is_checked_field_by_field() {
        // What the target would send: from target (0x11) to the peer.
        let mut q = qpns();
        let f = send_fields("send UD_SEND_ONLY psn=0 qpn=0xc00001 src_qp=target qkey=7 len=4");
        let mut b = build(&f, q, &Mrs::default()).unwrap();
        let ph = crate::wire::icrc::PseudoHeaders::new(
            "10.0.0.1:4791".parse().unwrap(),
            "10.0.0.2:4791".parse().unwrap(),
            0,
            b.len(),
        );
        crate::wire::icrc::fill(ph.ip(), ph.udp(), &mut b).unwrap();
        let got = Got {
            bytes: b,
            icrc_ok: true,
            ecn: crate::wire::Ecn::NotEct,
        };
        let want = |line: &str| {
            let text = format!("title \"t\"\ncite - \"x\"\nrole responder\nqp\nexpect {line}\n");
            let s = parse("t.rc", "t", &text).unwrap();
            match &s.steps.last().unwrap().action {
                crate::conform::script::Action::Expect(
                    crate::conform::script::Expect::Packet { fields, .. },
                ) => fields.clone(),
                a => panic!("{a:?}"),
            }
        };
        check(
            &want("UD_SEND_ONLY qkey=7 src_qp=target"),
            &got,
            q,
            &Mrs::default(),
        )
        .unwrap();
        let e = check(&want("UD_SEND_ONLY qkey=8"), &got, q, &Mrs::default()).unwrap_err();
        assert!(e.starts_with("qkey"), "{e}");
        q.targets[0] = 0x99;
        let e = check(
            &want("UD_SEND_ONLY src_qp=target"),
            &got,
            q,
            &Mrs::default(),
        )
        .unwrap_err();
        assert!(e.starts_with("src_qp"), "{e}");
    }
}
