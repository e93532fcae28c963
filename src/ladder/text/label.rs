//! What an arrow's label says and how it shortens to fit: the AETH in words, the notes
//! (retransmitted and why, duplicate, covers, CE, BECN, bad ICRC), opcode abbreviations,
//! and the order in which parts give way on a narrow terminal.

use super::{fit, width, Glyphs};
use crate::ladder::model::{Aeth, Packet, Retransmit};

/// `1.28 ms`, `655.36 ms` (Table 45's values as they are written).
pub(super) fn ms_text(ms: f64) -> String {
    format!("{ms} ms")
}

/// A measured interval: `850 µs`, `1.302 ms`, `2.500 s`.
pub(super) fn duration(ns: i128, gl: &Glyphs) -> String {
    let ns = ns.max(0);
    if ns < 1_000_000 {
        format!("{} {}", ns / 1_000, gl.micro)
    } else if ns < 1_000_000_000 {
        format!("{}.{:03} ms", ns / 1_000_000, (ns / 1_000) % 1_000)
    } else {
        format!("{}.{:03} s", ns / 1_000_000_000, (ns / 1_000_000) % 1_000)
    }
}

/// The AETH as the label says it: `ACK msn=3`, `RNR NAK 1.28ms`, `NAK seq-err`.
fn aeth_text(a: &Aeth) -> String {
    match a {
        Aeth::Ack { msn, .. } => format!("ACK msn={msn}"),
        Aeth::Rnr { ms, msn, .. } => format!("RNR NAK {ms}ms msn={msn}"),
        Aeth::Nak { code, msn } => {
            let what = match code {
                0 => "seq-err".to_string(),
                1 => "inv-req".to_string(),
                2 => "rem-access".to_string(),
                3 => "rem-op".to_string(),
                4 => "inv-rd".to_string(),
                c => format!("code={c}"),
            };
            format!("NAK {what} msn={msn}")
        }
    }
}

/// The label when the builder left none: `name psn=N [A] [len=N]`, the RETH's length,
/// the immediate and the AETH.
fn composed_label(p: &Packet) -> String {
    if let Some(cm) = &p.cm {
        return cm.clone();
    }
    let mut s = format!("{} psn={}", p.name, p.psn);
    if p.ack_req {
        s.push_str(" A");
    }
    if p.payload_len > 0 {
        s.push_str(&format!(" len={}", p.payload_len));
    }
    if let Some((_, rkey, dlen)) = p.reth {
        s.push_str(&format!(" rkey={rkey:#x} dlen={dlen}"));
    }
    if let Some(imm) = p.imm {
        s.push_str(&format!(" imm={imm:#x}"));
    }
    if let Some(a) = &p.aeth {
        s.push(' ');
        s.push_str(&aeth_text(a));
    }
    s
}

/// The arrow's label and its notes (retransmission, duplicate, coverage, marks), full
/// and compact.
fn label_parts(p: &Packet, gl: &Glyphs) -> (String, Vec<(String, String)>) {
    let base = if p.label.is_empty() {
        composed_label(p)
    } else {
        let mut s = p.label.clone();
        // A builder label without the AETH still shows its kind.
        if let Some(a) = &p.aeth {
            if !s.contains("msn=") && !s.contains("NAK") {
                s.push(' ');
                s.push_str(&aeth_text(a));
            }
        }
        s
    };
    let mut notes = Vec::new();
    if let Some(r) = p.retransmit {
        let (full, short) = match r {
            Retransmit::AfterNak { nak_frame } => (
                format!("{} after NAK #{nak_frame}", gl.retx),
                format!("{}NAK#{nak_frame}", gl.retx_short),
            ),
            Retransmit::AfterRnr { rnr_frame } => (
                format!("{} after RNR #{rnr_frame}", gl.retx),
                format!("{}RNR#{rnr_frame}", gl.retx_short),
            ),
            Retransmit::AfterTimeout => (
                format!("{} timeout", gl.retx),
                format!("{}t/o", gl.retx_short),
            ),
        };
        notes.push((full, short));
    }
    if p.duplicate && !base.contains("dup") {
        notes.push(("dup".into(), "dup".into()));
    }
    if let Some(c) = p.covers {
        if !base.contains("covers") {
            let range = if c.first_psn == c.last_psn {
                c.first_psn.to_string()
            } else {
                format!("{}-{}", c.first_psn, c.last_psn)
            };
            let full = match c.request_frame {
                Some(f) => format!("covers {range} of #{f}"),
                None => format!("covers {range}"),
            };
            notes.push((full, format!("cov {range}")));
        }
    }
    if p.ecn == 3 && !base.split(' ').any(|w| w == "CE") {
        notes.push(("CE".into(), "CE".into()));
    }
    if p.becn && !base.split(' ').any(|w| w == "BECN") {
        notes.push(("BECN".into(), "BECN".into()));
    }
    if p.icrc_ok == Some(false) {
        notes.push(("bad ICRC".into(), "!ICRC".into()));
    }
    (base, notes)
}

/// Shorter opcode names, for narrow lines.
fn abbreviate(s: &str) -> String {
    const ABBR: &[(&str, &str)] = &[
        ("RDMA_READ_RESPONSE_", "READ_RESP_"),
        ("RDMA_READ_REQUEST", "READ_REQ"),
        ("RDMA_WRITE_", "WRITE_"),
        ("_WITH_IMMEDIATE", "_IMM"),
        ("_WITH_INVALIDATE", "_INV"),
        ("ATOMIC_ACKNOWLEDGE", "ATOMIC_ACK"),
        ("ACKNOWLEDGE", "ACK"),
        ("COMPARE_SWAP", "CMP_SWAP"),
        // The builder's AETH words (IBA Table 44's NAK codes).
        ("PSN-sequence-error", "seq-err"),
        ("invalid-request", "inv-req"),
        ("remote-access-error", "rem-access"),
        ("remote-operational-error", "rem-op"),
        ("invalid-RD-request", "inv-RD"),
    ];
    let mut s = s.to_string();
    for (long, short) in ABBR {
        if s.contains(long) {
            s = s.replace(long, short);
        }
    }
    s
}

fn join(base: &str, notes: &[&str]) -> String {
    let mut s = base.to_string();
    for n in notes {
        s.push(' ');
        s.push_str(n);
    }
    s
}

/// The label in at most `n` columns: in full if it fits, else with abbreviated opcode
/// names, then compact notes, then without the coverage note, then the label's last words
/// cut (at least the opcode and PSN kept, the notes after them), then all of it cut.
pub(super) fn fit_label(p: &Packet, n: usize, gl: &Glyphs) -> String {
    let (base, notes) = label_parts(p, gl);
    let full: Vec<&str> = notes.iter().map(|(f, _)| f.as_str()).collect();
    let short: Vec<&str> = notes.iter().map(|(_, s)| s.as_str()).collect();
    let few: Vec<&str> = notes
        .iter()
        .filter(|(f, _)| !f.starts_with("covers"))
        .map(|(_, s)| s.as_str())
        .collect();
    let full_label = join(&base, &full);
    if width(&full_label) <= n {
        return full_label;
    }
    // The AETH's credit count goes first: least read, and ACKs of a stream all carry it.
    let abbr: String = abbreviate(&base)
        .split(' ')
        .filter(|w| !w.starts_with("credits="))
        .collect::<Vec<_>>()
        .join(" ");
    for cand in [join(&abbr, &full), join(&abbr, &short), join(&abbr, &few)] {
        if width(&cand) <= n {
            return cand;
        }
    }
    let tail = join("", &few);
    let words: Vec<&str> = abbr.split(' ').collect();
    let room = n.saturating_sub(width(&tail) + width(gl.ellipsis));
    let mut kept = String::new();
    for (i, w) in words.iter().enumerate() {
        let next = if i == 0 {
            w.to_string()
        } else {
            format!("{kept} {w}")
        };
        if width(&next) > room {
            break;
        }
        kept = next;
        if i + 1 == words.len() {
            break;
        }
    }
    if words.len() > 2 && width(&kept) >= width(words[0]) + 1 + width(words[1]) {
        return format!("{kept}{}{tail}", gl.ellipsis);
    }
    fit(&join(&abbr, &few), n, gl)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abbreviations() {
        assert_eq!(
            abbreviate("RDMA_READ_RESPONSE_FIRST psn=3"),
            "READ_RESP_FIRST psn=3"
        );
        assert_eq!(
            abbreviate("RDMA_WRITE_ONLY_WITH_IMMEDIATE"),
            "WRITE_ONLY_IMM"
        );
        assert_eq!(abbreviate("ATOMIC_ACKNOWLEDGE"), "ATOMIC_ACK");
    }
}
