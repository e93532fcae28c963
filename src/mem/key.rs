//! Memory keys (IBA 10.6, Memory Management: L_Key and R_Key) and the generator of
//! their key bytes.
//!
//! A key is `index << 8 | key byte`, as in rxe: the upper 24 bits name a slot in the
//! [`MrTable`](super::MrTable), the low 8 bits are a tag that changes each time the slot
//! is reused. A stale key (one kept by a peer after the region was deregistered and the
//! slot given to a new region) then fails the key-byte comparison instead of reaching
//! the new region's memory.
//!
//! L_Keys and R_Keys are separate types so that a key received from the network can
//! never be passed where a local key is expected, and vice versa.

use crate::rng::Rng;
use core::fmt;

/// Bits of the key byte.
pub const KEY_BITS: u32 = 8;
/// Largest index a key can carry (24 bits).
pub const MAX_INDEX: u32 = (1 << (32 - KEY_BITS)) - 1;
/// Indices above this one name memory windows, at and below it memory regions: a key
/// says by its index alone which table it is in (rxe splits its index space the same
/// way, `rkey_is_mw`).
pub const MW_INDEX_BASE: u32 = 1 << 23;

/// Whether `raw`, a key's 32 bits, names a memory window's index.
pub const fn is_window_key(raw: u32) -> bool {
    raw >> KEY_BITS > MW_INDEX_BASE
}

macro_rules! key_type {
    ($(#[$doc:meta])* $name:ident, $label:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub u32);

        impl $name {
            /// The key for slot `index` (24 bits; higher bits are dropped) with tag `key`.
            pub const fn new(index: u32, key: u8) -> $name {
                $name(((index & MAX_INDEX) << KEY_BITS) | key as u32)
            }

            /// The table slot (upper 24 bits).
            pub const fn index(self) -> u32 {
                self.0 >> KEY_BITS
            }

            /// The tag (low 8 bits).
            pub const fn key(self) -> u8 {
                self.0 as u8
            }
        }

        impl From<u32> for $name {
            fn from(raw: u32) -> $name {
                $name(raw)
            }
        }

        impl From<$name> for u32 {
            fn from(k: $name) -> u32 {
                k.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($label, " {:#010x}"), self.0)
            }
        }
    };
}

key_type!(
    /// A local key: names a region in work requests of the QPs of its PD (SGEs).
    Lkey,
    "lkey"
);
key_type!(
    /// A remote key: the peer names a region with it in RETH, AtomicETH and IETH.
    Rkey,
    "rkey"
);

/// A key as presented to a lookup: local or remote. Errors carry it so the caller knows
/// which kind of check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    Local(Lkey),
    Remote(Rkey),
}

impl Key {
    /// The 32-bit key.
    pub const fn raw(self) -> u32 {
        match self {
            Key::Local(k) => k.0,
            Key::Remote(k) => k.0,
        }
    }

    /// The table slot.
    pub const fn index(self) -> u32 {
        self.raw() >> KEY_BITS
    }

    /// The tag byte.
    pub const fn key(self) -> u8 {
        self.raw() as u8
    }

    /// The same kind of key with another value (the region's key, in mismatch errors).
    pub const fn with_raw(self, raw: u32) -> Key {
        match self {
            Key::Local(_) => Key::Local(Lkey(raw)),
            Key::Remote(_) => Key::Remote(Rkey(raw)),
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Local(k) => k.fmt(f),
            Key::Remote(k) => k.fmt(f),
        }
    }
}

/// Deterministic generator of key bytes, drawn from the crate's seeded [`Rng`].
///
/// rxe draws key bytes from `get_random_bytes`; the emulator must replay the same run
/// from the same inputs, so the bytes come from a seeded generator instead. Keys are
/// tags against stale use, not secrets: predictability is acceptable, repeatability is
/// required.
#[derive(Debug, Clone)]
pub struct KeyGen {
    rng: Rng,
}

impl KeyGen {
    /// A generator whose sequence depends only on `seed`.
    pub const fn new(seed: u64) -> KeyGen {
        KeyGen {
            rng: Rng::new(seed),
        }
    }

    /// The next key byte, different from `previous` (the tag the slot had last time, as
    /// rxe's `rxe_get_next_key(last_key)`), so re-registering a slot always changes it.
    pub fn next_key(&mut self, previous: Option<u8>) -> u8 {
        loop {
            let k = (self.rng.next_u64() >> 56) as u8;
            if Some(k) != previous {
                return k;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_layout_is_index_then_tag() {
        let l = Lkey::new(0x12_3456, 0x78);
        assert_eq!(l.0, 0x1234_5678);
        assert_eq!(l.index(), 0x12_3456);
        assert_eq!(l.key(), 0x78);
        let r = Rkey(0xffff_ffff);
        assert_eq!(r.index(), MAX_INDEX);
        assert_eq!(r.key(), 0xff);
        // Index bits above 24 cannot leak into the tag or wrap into a small index.
        assert_eq!(Lkey::new(0x0100_0001, 2), Lkey(0x0000_0102));
        assert_eq!(u32::from(Rkey::from(7)), 7);
        assert_eq!(r.to_string(), "rkey 0xffffffff");
        assert_eq!(Key::Local(l).to_string(), "lkey 0x12345678");
    }

    #[test]
    fn key_enum_accessors() {
        let k = Key::Remote(Rkey::new(5, 9));
        assert_eq!(k.raw(), 0x509);
        assert_eq!(k.index(), 5);
        assert_eq!(k.key(), 9);
        assert_eq!(k.with_raw(0x50a), Key::Remote(Rkey(0x50a)));
        assert_eq!(Key::Local(Lkey(1)).with_raw(0x50a), Key::Local(Lkey(0x50a)));
    }

    #[test]
    fn keygen_is_deterministic_per_seed() {
        let mut a = KeyGen::new(42);
        let mut b = KeyGen::new(42);
        let mut c = KeyGen::new(43);
        let sa: Vec<u8> = (0..64).map(|_| a.next_key(None)).collect();
        let sb: Vec<u8> = (0..64).map(|_| b.next_key(None)).collect();
        let sc: Vec<u8> = (0..64).map(|_| c.next_key(None)).collect();
        assert_eq!(sa, sb);
        assert_ne!(sa, sc);
        // Not degenerate: a 64-byte draw covers many distinct values.
        let mut seen = [false; 256];
        for k in &sa {
            seen[*k as usize] = true;
        }
        assert!(seen.iter().filter(|s| **s).count() > 40);
    }

    /// Key bytes are the top byte of the crate's splitmix64 outputs, so a seed gives the
    /// same keys as before `KeyGen` shared [`Rng`] (reference value for seed 0).
    #[test]
    fn keygen_draws_the_top_byte_of_the_seeded_rng() {
        assert_eq!(KeyGen::new(0).next_key(None), 0xe2);
    }

    #[test]
    fn keygen_never_repeats_the_previous_tag() {
        let mut g = KeyGen::new(0);
        let mut prev = 0u8;
        for _ in 0..10_000 {
            let k = g.next_key(Some(prev));
            assert_ne!(k, prev);
            prev = k;
        }
    }
}
