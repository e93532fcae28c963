//! The words of one statement: the tokenizer (quoted strings, `#` comments) and [`Args`],
//! which hands out bare words and `key=value` pairs by type (numbers, references, byte
//! specs, header fields) and refuses what no one took; opcode and syndrome names.

use super::{Fields, QpRef, SyndromeSpec, MAX_QPS};
use crate::conform::value::{ByteSpec, Num, Payload, Ref};
use crate::wire::Opcode;

/// Splits a line into words; a quoted string (`"..."`, no escapes) is one word. A `#`
/// outside quotes ends the line.
pub(super) fn tokenize(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            '#' if !quoted => break,
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if quoted {
        return Err("unterminated quote".into());
    }
    if any {
        out.push(cur);
    }
    Ok(out)
}

/// The arguments of one statement: bare words in order and `key=value` pairs, each taken
/// at most once; `finish` refuses what no one took.
pub(super) struct Args<'a> {
    words: Vec<&'a str>,
    pairs: Vec<(&'a str, &'a str, bool)>,
}

impl<'a> Args<'a> {
    pub(super) fn new(toks: &'a [String]) -> Args<'a> {
        let mut words = Vec::new();
        let mut pairs = Vec::new();
        for t in toks {
            match t.split_once('=') {
                Some((k, v)) if !k.is_empty() && !k.contains(' ') => pairs.push((k, v, false)),
                _ => words.push(t.as_str()),
            }
        }
        words.reverse();
        Args { words, pairs }
    }

    pub(super) fn push_back(&mut self, w: &'a str) {
        self.words.push(w);
    }

    pub(super) fn word(&mut self, what: &str) -> Result<&'a str, String> {
        self.words.pop().ok_or_else(|| format!("missing {what}"))
    }

    pub(super) fn text(&mut self, what: &str) -> Result<&'a str, String> {
        self.word(what)
    }

    pub(super) fn word_in(&mut self, set: &[&str]) -> Option<&'a str> {
        let w = *self.words.last()?;
        set.contains(&w).then(|| self.words.pop()).flatten()
    }

    pub(super) fn flag(&mut self, f: &str) -> bool {
        match self.words.iter().position(|w| *w == f) {
            Some(i) => {
                self.words.remove(i);
                true
            }
            None => false,
        }
    }

    pub(super) fn has(&self, key: &str) -> bool {
        self.pairs.iter().any(|p| p.0 == key)
    }

    pub(super) fn take(&mut self, key: &str) -> Result<Option<&'a str>, String> {
        let mut found = None;
        for (k, v, used) in &mut self.pairs {
            if *k == key {
                if found.is_some() {
                    return Err(format!("{key}= given twice"));
                }
                *used = true;
                found = Some(*v);
            }
        }
        Ok(found)
    }

    pub(super) fn all(&mut self, key: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (k, v, used) in &mut self.pairs {
            if *k == key {
                *used = true;
                out.push(v.to_string());
            }
        }
        out
    }

    pub(super) fn num(&mut self, key: &str) -> Result<Option<u64>, String> {
        self.take(key)?
            .map(|v| {
                Num::parse(v)
                    .map(|n| n.0)
                    .map_err(|e| format!("{key}={v}: {e}"))
            })
            .transpose()
    }

    pub(super) fn num_as<T: TryFrom<u64>>(
        &mut self,
        key: &str,
        max: u64,
    ) -> Result<Option<T>, String> {
        match self.num(key)? {
            None => Ok(None),
            Some(n) if n <= max => Ok(T::try_from(n).ok()),
            Some(n) => Err(format!("{key}={n:#x}: at most {max:#x}")),
        }
    }

    pub(super) fn reference(&mut self, key: &str) -> Result<Option<Ref>, String> {
        self.take(key)?
            .map(|v| Ref::parse(v).map_err(|e| format!("{key}={v}: {e}")))
            .transpose()
    }

    pub(super) fn choice(
        &mut self,
        key: &str,
        set: &[&'static str],
    ) -> Result<Option<&'static str>, String> {
        match self.take(key)? {
            None => Ok(None),
            Some(v) => set
                .iter()
                .find(|s| s.eq_ignore_ascii_case(v))
                .map(|s| Some(*s))
                .ok_or_else(|| format!("{key}={v}: one of {}", set.join(" "))),
        }
    }

    pub(super) fn list(&mut self, key: &str, set: &[&str]) -> Result<Option<String>, String> {
        let Some(v) = self.take(key)? else {
            return Ok(None);
        };
        for item in v.split(',').filter(|s| !s.is_empty()) {
            if !set.contains(&item) {
                return Err(format!("{key}: {item:?} is not one of {}", set.join(",")));
            }
        }
        Ok(Some(v.to_string()))
    }

    pub(super) fn byte_spec(&mut self, key: &str) -> Result<Option<ByteSpec>, String> {
        self.take(key)?
            .map(|v| ByteSpec::parse(v).map_err(|e| format!("{key}={v}: {e}")))
            .transpose()
    }

    /// `len=` with `fill=`, or `data=`.
    pub(super) fn payload(&mut self) -> Result<Option<Payload>, String> {
        let len = self.num("len")?;
        let fill = self.byte_spec("fill")?;
        let data = self.take("data")?;
        Payload::from_parts(len, fill, data)
    }

    pub(super) fn fields(&mut self, sending: bool) -> Result<Fields, String> {
        let mut f = Fields::default();
        if let Some(v) = self.take("opcode")? {
            f.opcode = Some(Opcode(
                u8::try_from(Num::parse(v)?.0).map_err(|_| format!("opcode={v}: one byte"))?,
            ));
        } else {
            let name = self.word("an opcode (SEND_ONLY, ACKNOWLEDGE, ...)")?;
            f.opcode = Some(opcode_by_name(name)?);
        }
        f.psn = self.num_as("psn", 0xff_ffff)?;
        for (name, slot) in [
            ("ackreq", &mut f.ackreq),
            ("se", &mut f.se),
            ("migreq", &mut f.migreq),
            ("fecn", &mut f.fecn),
            ("becn", &mut f.becn),
        ] {
            if self.flag(name) {
                *slot = Some(true);
            } else if self.flag(&format!("no_{name}")) {
                *slot = Some(false);
            }
        }
        f.pad = self.num_as("pad", 3)?;
        f.pkey = self.num_as("pkey", 0xffff)?;
        f.tver = self.num_as("tver", 15)?;
        f.qpn = self.num_as("qpn", 0xff_ffff)?;
        f.va = self.reference("va")?;
        f.rkey = self.reference("rkey")?;
        f.dmalen = self.num_as("dmalen", u64::from(u32::MAX))?;
        f.compare = self.num("compare")?;
        f.swap = self.num("swap")?;
        f.add = self.num("add")?;
        f.syndrome = self
            .take("syndrome")?
            .map(|v| syndrome(v, sending))
            .transpose()?;
        f.msn = self.num_as("msn", 0xff_ffff)?;
        f.orig = self.num("orig")?;
        f.imm = self.num_as("imm", u64::from(u32::MAX))?;
        f.inv = self.reference("inv")?;
        f.qkey = self.num_as("qkey", u64::from(u32::MAX))?;
        f.src_qp = self.take("src_qp")?.map(QpRef::parse).transpose()?;
        f.to = match self.num("to")? {
            None => None,
            Some(n) if sending && (1..=MAX_QPS as u64).contains(&n) => Some(n as usize - 1),
            Some(n) => return Err(format!("to={n}: only on send, 1 to {MAX_QPS}")),
        };
        f.ecn = match self.take("ecn")? {
            None => None,
            Some("not_ect") => Some(crate::wire::Ecn::NotEct),
            Some("ect0") => Some(crate::wire::Ecn::Ect0),
            Some("ect1") => Some(crate::wire::Ecn::Ect1),
            Some("ce") => Some(crate::wire::Ecn::Ce),
            Some(v) => return Err(format!("ecn={v}: not_ect, ect0, ect1 or ce")),
        };
        f.payload = self.payload()?;
        f.bad_icrc = match self.take("icrc")? {
            None | Some("good") => false,
            Some("bad") if sending => true,
            Some(v) => return Err(format!("icrc={v}: only `send ... icrc=bad`")),
        };
        Ok(f)
    }

    /// Every `key=value` no one took yet, in order (taken now).
    pub(super) fn rest(&mut self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (k, v, used) in &mut self.pairs {
            if !*used {
                *used = true;
                out.push((k.to_string(), v.to_string()));
            }
        }
        out
    }

    pub(super) fn finish(self, kw: &str) -> Result<(), String> {
        if let Some(w) = self.words.last() {
            return Err(format!("{kw}: unexpected {w:?}"));
        }
        if let Some((k, _, _)) = self.pairs.iter().find(|p| !p.2) {
            return Err(format!("{kw}: unknown key {k}="));
        }
        Ok(())
    }
}

/// An opcode by the wire layer's name: RC's with or without `RC_`, UC's and UD's with
/// their prefix (`UC_SEND_FIRST`, `UD_SEND_ONLY`), and `CNP` (0x81).
pub fn opcode_by_name(name: &str) -> Result<Opcode, String> {
    let want = name.to_ascii_uppercase();
    if want == "CNP" {
        // RoCEv2's Congestion Notification Packet (annex A17.9.3).
        return Ok(crate::wire::opcode::op::CNP);
    }
    if want.starts_with("UC_") || want.starts_with("UD_") {
        return (0x20..=0x7fu8)
            .map(Opcode)
            .find(|op| op.info().is_some_and(|i| i.name == want))
            .ok_or_else(|| format!("{name:?} is not a UC or UD opcode name (IBA table 38)"));
    }
    let want = want.strip_prefix("RC_").unwrap_or(&want);
    (0..=0x1fu8)
        .map(Opcode)
        .find(|op| op.info().is_some_and(|i| &i.name[3..] == want))
        .ok_or_else(|| {
            format!("{name:?} is not an RC opcode name (IBA table 38): use opcode=0xNN for others")
        })
}

fn syndrome(v: &str, sending: bool) -> Result<SyndromeSpec, String> {
    const NAKS: &[(&str, u8)] = &[
        ("seq", 0),
        ("inv", 1),
        ("rae", 2),
        ("rop", 3),
        ("inv_rd", 4),
    ];
    let (kind, arg) = match v.split_once(':') {
        Some((k, a)) => (k, Some(a)),
        None => (v, None),
    };
    let bad = || format!("syndrome={v}: ack, rnr:TIMER, nak:seq|inv|rae|rop|inv_rd or raw:0xNN");
    let s = match (kind, arg) {
        ("ack", None) => SyndromeSpec::Ack,
        ("rnr", None) if !sending => SyndromeSpec::Rnr(None),
        ("rnr", Some(t)) => SyndromeSpec::Rnr(Some(
            Num::parse(t)?
                .0
                .try_into()
                .ok()
                .filter(|t| *t < 32)
                .ok_or_else(bad)?,
        )),
        ("nak", None) if !sending => SyndromeSpec::Nak(None),
        ("nak", Some(c)) => {
            SyndromeSpec::Nak(Some(NAKS.iter().find(|n| n.0 == c).ok_or_else(bad)?.1))
        }
        ("raw", Some(r)) => SyndromeSpec::Raw(Num::parse(r)?.0.try_into().map_err(|_| bad())?),
        _ => return Err(bad()),
    };
    Ok(s)
}
