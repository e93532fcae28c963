//! The values a script writes: numbers, references to the target's regions, fill patterns
//! and payloads.

use std::collections::HashMap;

/// A number, decimal or `0x` hex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Num(pub u64);

impl Num {
    pub fn parse(s: &str) -> Result<Num, String> {
        let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(h) => u64::from_str_radix(&h.replace('_', ""), 16),
            None => s.replace('_', "").parse(),
        };
        r.map(Num)
            .map_err(|_| format!("{s:?} is not a number (decimal or 0x hex, up to 64 bits)"))
    }
}

/// A number, or a target region by name (`buf`, `buf+64`): its address for `va`, its
/// rkey for `rkey` and `inv`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ref {
    Lit(u64),
    Mr { name: String, off: u64 },
}

impl Ref {
    pub fn parse(s: &str) -> Result<Ref, String> {
        if s.starts_with(|c: char| c.is_ascii_digit()) {
            return Num::parse(s).map(|n| Ref::Lit(n.0));
        }
        let (name, off) = match s.split_once('+') {
            Some((n, o)) => (n, Num::parse(o)?.0),
            None => (s, 0),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err("a number or a region's name (NAME or NAME+OFFSET)".into());
        }
        Ok(Ref::Mr {
            name: name.to_string(),
            off,
        })
    }

    /// The value as an address.
    pub fn addr(&self, mrs: &Mrs) -> Result<u64, String> {
        match self {
            Ref::Lit(v) => Ok(*v),
            Ref::Mr { name, off } => Ok(mrs.get(name)?.addr.wrapping_add(*off)),
        }
    }

    /// The value as a key: a region's rkey (an offset makes no sense and is refused).
    pub fn key(&self, mrs: &Mrs) -> Result<u32, String> {
        match self {
            Ref::Lit(v) => u32::try_from(*v).map_err(|_| format!("{v:#x} is not a 32-bit key")),
            Ref::Mr { name, off: 0 } => Ok(mrs.get(name)?.rkey),
            Ref::Mr { name, .. } => Err(format!("{name}+OFF is an address, not a key")),
        }
    }
}

/// How a region or a payload is filled: every byte the same, or byte *i* = *i* mod 256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteSpec {
    Byte(u8),
    Index,
}

impl ByteSpec {
    pub fn parse(s: &str) -> Result<ByteSpec, String> {
        if s == "index" {
            return Ok(ByteSpec::Index);
        }
        let n = Num::parse(s)?.0;
        u8::try_from(n)
            .map(ByteSpec::Byte)
            .map_err(|_| "a byte (0..255) or `index`".to_string())
    }

    /// The byte at `i` of what this fills.
    pub fn at(self, i: u64) -> u8 {
        match self {
            ByteSpec::Byte(b) => b,
            ByteSpec::Index => i as u8,
        }
    }

    /// The agent protocol's spelling.
    pub fn to_agent(self) -> String {
        match self {
            ByteSpec::Byte(b) => format!("{b:#04x}"),
            ByteSpec::Index => "index".into(),
        }
    }
}

/// Payload bytes, or (in an `expect`) only a length to check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// `len=N` alone: sent as byte *i* = *i* mod 256; expected: only the length.
    Len(u64),
    Fill {
        len: u64,
        fill: ByteSpec,
    },
    Bytes(Vec<u8>),
    /// `data=mr:NAME:OFF` with `len=`: the region's bytes as set up (its fill).
    Mr {
        name: String,
        off: u64,
        len: u64,
    },
}

/// The longest payload a script may name: an IBA message in one packet is at most 4 KiB,
/// a region here at most a few.
const MAX_LEN: u64 = 1 << 20;

impl Payload {
    pub fn from_parts(
        len: Option<u64>,
        fill: Option<ByteSpec>,
        data: Option<&str>,
    ) -> Result<Option<Payload>, String> {
        if len.is_some_and(|l| l > MAX_LEN) {
            return Err(format!("len: at most {MAX_LEN}"));
        }
        let p = match (len, fill, data) {
            (None, None, None) => return Ok(None),
            (_, Some(_), Some(_)) => return Err("fill= and data= together: give one".into()),
            (Some(len), None, None) => Payload::Len(len),
            (Some(len), Some(fill), None) => Payload::Fill { len, fill },
            (None, Some(_), None) => return Err("fill= needs len=".into()),
            (len, None, Some(d)) => {
                if let Some(h) = d.strip_prefix("hex:") {
                    let b = hex(h)?;
                    if len.is_some_and(|l| l != b.len() as u64) {
                        return Err(format!("len= differs from data='s {} bytes", b.len()));
                    }
                    Payload::Bytes(b)
                } else if let Some(m) = d.strip_prefix("mr:") {
                    let (name, off) = m.split_once(':').unwrap_or((m, "0"));
                    Payload::Mr {
                        name: name.to_string(),
                        off: Num::parse(off)?.0,
                        len: len.ok_or("data=mr:... needs len=")?,
                    }
                } else {
                    return Err("data= takes hex:BYTES or mr:NAME:OFFSET".into());
                }
            }
        };
        Ok(Some(p))
    }

    /// The bytes, or `None` for a bare length.
    pub fn bytes(&self, mrs: &Mrs) -> Result<Option<Vec<u8>>, String> {
        Ok(Some(match self {
            Payload::Len(_) => return Ok(None),
            Payload::Fill { len, fill } => (0..*len).map(|i| fill.at(i)).collect(),
            Payload::Bytes(b) => b.clone(),
            Payload::Mr { name, off, len } => {
                let m = mrs.get(name)?;
                if off.checked_add(*len).is_none_or(|e| e > m.len) {
                    return Err(format!(
                        "{name} has {} bytes: {off}+{len} is past its end",
                        m.len
                    ));
                }
                (*off..off + len).map(|i| m.fill.at(i)).collect()
            }
        }))
    }

    /// The bytes to send: a bare length is byte *i* = *i* mod 256.
    pub fn to_send(&self, mrs: &Mrs) -> Result<Vec<u8>, String> {
        match self {
            Payload::Len(len) => Ok((0..*len).map(|i| i as u8).collect()),
            p => Ok(p.bytes(mrs)?.unwrap_or_default()),
        }
    }

    pub fn byte_len(&self) -> u64 {
        match self {
            Payload::Len(l) | Payload::Fill { len: l, .. } | Payload::Mr { len: l, .. } => *l,
            Payload::Bytes(b) => b.len() as u64,
        }
    }
}

pub fn hex(s: &str) -> Result<Vec<u8>, String> {
    let s: String = s.chars().filter(|c| *c != '_' && *c != ':').collect();
    if s.len() % 2 != 0 || s.len() as u64 > 2 * MAX_LEN {
        return Err("hex: an even number of hex digits".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| format!("hex: {:?}", &s[i..i + 2]))
        })
        .collect()
}

pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A region the agent registered for this script.
#[derive(Debug, Clone)]
pub struct MrInfo {
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
    pub fill: ByteSpec,
}

/// The script's regions by name.
#[derive(Debug, Default)]
pub struct Mrs(pub HashMap<String, MrInfo>);

impl Mrs {
    pub fn get(&self, name: &str) -> Result<&MrInfo, String> {
        self.0
            .get(name)
            .ok_or_else(|| format!("no region named {name:?} (an `mr {name} ...` line first)"))
    }
}
