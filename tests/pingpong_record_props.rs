//! The pingpong address record (`%04x:%06x:%06x:%s` and a NUL, 52 bytes) comes from the
//! network: whatever the peer sends, `Dest::from_record` gives a `Dest` or an error that
//! says what was wrong, and never panics. Valid records round-trip.

use proptest::prelude::*;
use roce_emu::cli::pingpong::{Dest, RecordError, RECORD_LEN};

/// The record prefix of a valid LID, QPN and PSN.
const PREFIX: &str = "0000:000011:9e6004:";

/// Characters of 1 to 4 bytes in UTF-8, hex digits among them.
const CHARS: &[char] = &['0', 'a', 'F', ':', 'é', '€', '😀', 'g', ' '];

/// A GID field of exactly 32 bytes built from `picks` (indexes into `CHARS`): characters
/// are taken while they fit and the rest is padded with '0', so multibyte characters sit
/// at every offset, straddling the two-digit boundaries the parser reads.
fn gid_field(picks: &[usize]) -> String {
    let mut s = String::new();
    for &i in picks {
        let c = CHARS[i % CHARS.len()];
        if s.len() + c.len_utf8() > 32 {
            break;
        }
        s.push(c);
    }
    while s.len() < 32 {
        s.push('0');
    }
    s
}

fn record_of(text: &str) -> Vec<u8> {
    let mut rec = vec![0u8; RECORD_LEN];
    rec[..text.len()].copy_from_slice(text.as_bytes());
    rec
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any 52 bytes: a value or an error; a value read back from its own record is equal.
    #[test]
    fn arbitrary_records_never_panic(rec in proptest::collection::vec(any::<u8>(), RECORD_LEN)) {
        if let Ok(d) = Dest::from_record(&rec) {
            prop_assert_eq!(Dest::from_record(&d.to_record()), Ok(d));
        }
    }

    /// Any length: the wrong ones are named.
    #[test]
    fn arbitrary_lengths_never_panic(rec in proptest::collection::vec(any::<u8>(), 0..200)) {
        let r = Dest::from_record(&rec);
        if rec.len() != RECORD_LEN {
            prop_assert_eq!(r, Err(RecordError::Length(rec.len())));
        }
    }

    /// A 32-byte GID field of multibyte UTF-8 (the case that used to panic: a `str` sliced
    /// inside a character) is an error naming the GID field, or, all ASCII, a value or a
    /// hex error.
    #[test]
    fn multibyte_gid_field_is_an_error(picks in proptest::collection::vec(0..CHARS.len(), 0..40)) {
        let gid = gid_field(&picks);
        let rec = record_of(&format!("{PREFIX}{gid}"));
        let r = Dest::from_record(&rec);
        if !gid.is_ascii() {
            let is_gid_error = matches!(r, Err(RecordError::NotAscii { field: "GID", .. }))
                // A ':' before the first non-ASCII byte makes it a fifth field.
                || matches!(r, Err(RecordError::NotAscii { .. }) if gid.contains(':'));
            prop_assert!(is_gid_error, "{:?} for {:?}", r, gid);
            let msg = r.unwrap_err().to_string();
            prop_assert!(msg.contains("not ASCII"), "{}", msg);
        } else if let Ok(d) = r {
            prop_assert_eq!(Dest::from_record(&d.to_record()), Ok(d));
        }
    }

    /// Every valid address survives `to_record` then `from_record`.
    #[test]
    fn valid_records_round_trip(
        lid in any::<u16>(),
        qpn in 0u32..1 << 24,
        psn in 0u32..1 << 24,
        gid in any::<[u8; 16]>(),
    ) {
        let d = Dest { lid, qpn, psn, gid };
        let rec = d.to_record();
        prop_assert_eq!(rec[RECORD_LEN - 1], 0);
        prop_assert_eq!(Dest::from_record(&rec), Ok(d));
    }
}

/// The exact case of the bug report, once, with its message.
#[test]
fn gid_of_two_byte_characters() {
    let rec = record_of(&format!("{PREFIX}{}", "é".repeat(16)));
    let e = Dest::from_record(&rec).unwrap_err();
    assert_eq!(
        e,
        RecordError::NotAscii {
            field: "GID",
            at: PREFIX.len(),
            byte: 0xc3
        }
    );
    assert_eq!(
        e.to_string(),
        "its GID field has the byte 0xc3 at offset 19, which is not ASCII text"
    );
    // A sign is not a hex digit (u64::from_str_radix would take "+1").
    let rec = record_of(&format!("+000:000011:9e6004:{}", "0".repeat(32)));
    assert!(matches!(
        Dest::from_record(&rec),
        Err(RecordError::Hex { field: "LID", .. })
    ));
}
