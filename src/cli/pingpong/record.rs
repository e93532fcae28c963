//! The address record of the exchange (rc_pingpong's `struct pingpong_dest` as text), and
//! GIDs as addresses. Every byte of a peer's record is untrusted.

use super::*;

// ---- the address record ---------------------------------------------------------------

/// One side's address, as the exchange carries it (rc_pingpong's `struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// 0 on RoCE.
    pub lid: u16,
    /// 24 bits.
    pub qpn: u32,
    /// 24 bits.
    pub psn: u32,
    /// The 16 raw GID bytes.
    pub gid: [u8; 16],
}

/// Why a received record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("it is {0} bytes long, not {RECORD_LEN}")]
    Length(usize),
    #[error("it is not NUL-terminated")]
    NoNul,
    #[error("its {field} field has the byte {byte:#04x} at offset {at}, which is not ASCII text")]
    NotAscii {
        field: &'static str,
        at: usize,
        byte: u8,
    },
    #[error("it has {0} ':'-separated fields, not 4 (lid:qpn:psn:gid)")]
    Fields(usize),
    #[error("its {field} field {text:?} is not hexadecimal")]
    Hex { field: &'static str, text: String },
    #[error("its {field} {value:#x} does not fit in {bits} bits")]
    Range {
        field: &'static str,
        value: u64,
        bits: u32,
    },
    #[error("its GID has {0} hex digits, not 32")]
    GidLength(usize),
}

impl Dest {
    /// The record rc_pingpong writes: `sprintf("%04x:%06x:%06x:%s")` and its NUL.
    pub fn to_record(&self) -> [u8; RECORD_LEN] {
        let mut s = String::with_capacity(RECORD_LEN);
        let _ = write!(
            s,
            "{:04x}:{:06x}:{:06x}:",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff
        );
        for b in self.gid {
            let _ = write!(s, "{b:02x}");
        }
        let mut rec = [0u8; RECORD_LEN];
        rec[..s.len()].copy_from_slice(s.as_bytes());
        rec
    }

    /// Reads a record: the text up to its NUL, four hexadecimal fields. Every byte comes
    /// from the peer, so every check works on bytes (never on `str` offsets, which may fall
    /// inside a multibyte character) and any input gives a value or an error, never a panic.
    pub fn from_record(rec: &[u8]) -> Result<Dest, RecordError> {
        if rec.len() != RECORD_LEN {
            return Err(RecordError::Length(rec.len()));
        }
        let end = rec.iter().position(|&b| b == 0).ok_or(RecordError::NoNul)?;
        let text = &rec[..end];
        if let Some(at) = text.iter().position(|b| !b.is_ascii()) {
            let colons = text[..at].iter().filter(|&&b| b == b':').count();
            return Err(RecordError::NotAscii {
                field: FIELDS.get(colons).copied().unwrap_or("text after the GID"),
                at,
                byte: text[at],
            });
        }
        let fields: Vec<&[u8]> = text.split(|&b| b == b':').collect();
        let [lid, qpn, psn, gid] = fields[..] else {
            return Err(RecordError::Fields(fields.len()));
        };
        let num = |field: &'static str, t: &[u8], bits: u32| -> Result<u32, RecordError> {
            let v = hex(t).ok_or_else(|| RecordError::Hex {
                field,
                text: String::from_utf8_lossy(t).into_owned(),
            })?;
            if v >> bits != 0 {
                return Err(RecordError::Range {
                    field,
                    value: v,
                    bits,
                });
            }
            Ok(v as u32)
        };
        let lid = num("LID", lid, 16)? as u16;
        let qpn = num("QPN", qpn, 24)?;
        let psn = num("PSN", psn, 24)?;
        if gid.len() != 32 {
            return Err(RecordError::GidLength(gid.len()));
        }
        let mut g = [0u8; 16];
        for (b, pair) in g.iter_mut().zip(gid.chunks_exact(2)) {
            *b = hex(pair).ok_or_else(|| RecordError::Hex {
                field: "GID",
                text: String::from_utf8_lossy(gid).into_owned(),
            })? as u8;
        }
        Ok(Dest {
            lid,
            qpn,
            psn,
            gid: g,
        })
    }

    /// The GID as an address, printed as rc_pingpong's `inet_ntop(AF_INET6)` prints it.
    pub fn gid_v6(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.gid)
    }
}

/// The record's fields in order, to name where a bad byte sits.
const FIELDS: [&str; 4] = ["LID", "QPN", "PSN", "GID"];

/// Hexadecimal digits only (no sign, prefix or spaces), at most 16 of them.
fn hex(t: &[u8]) -> Option<u64> {
    if t.is_empty() || t.len() > 16 {
        return None;
    }
    // Digit by digit: `from_str_radix` would also take a leading '+'.
    t.iter().try_fold(0u64, |v, &b| {
        let d = char::from(b).to_digit(16)?;
        Some(v << 4 | u64::from(d))
    })
}

/// The GID of a NIC whose address is `ip`: IPv4 as IPv4-mapped (rxe's GID for an IPv4
/// address), IPv6 as is.
pub fn ip_to_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The address a GID names: IPv4-mapped as IPv4, anything else as IPv6. `None` for the
/// zero GID (rc_pingpong without `-g` sends it: no GRH, which RoCE cannot do without).
pub fn gid_to_ip(gid: [u8; 16]) -> Option<IpAddr> {
    let v6 = Ipv6Addr::from(gid);
    if v6.is_unspecified() {
        return None;
    }
    Some(match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    })
}
