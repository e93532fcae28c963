//! Field ranges and big-endian accessors shared by every header.
//!
//! Accessors index with ranges, so they panic on short buffers: callers prove the length
//! first (`check_len`), which is the contract of [`crate::wire`].

/// A field: a byte range within a header.
pub type Field = core::ops::Range<usize>;

#[inline]
pub fn u16_at(b: &[u8], f: Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}

/// A 24-bit big-endian field (QPN, PSN, MSN).
#[inline]
pub fn u24_at(b: &[u8], f: Field) -> u32 {
    u32::from_be_bytes([0, b[f.start], b[f.start + 1], b[f.start + 2]])
}

#[inline]
pub fn u32_at(b: &[u8], f: Field) -> u32 {
    let s = f.start;
    u32::from_be_bytes([b[s], b[s + 1], b[s + 2], b[s + 3]])
}

#[inline]
pub fn u64_at(b: &[u8], f: Field) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[f.start..f.start + 8]);
    u64::from_be_bytes(a)
}

#[inline]
pub fn set_u16(b: &mut [u8], f: Field, v: u16) {
    b[f.start..f.start + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes the low 24 bits of `v`.
#[inline]
pub fn set_u24(b: &mut [u8], f: Field, v: u32) {
    b[f.start..f.start + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

#[inline]
pub fn set_u32(b: &mut [u8], f: Field, v: u32) {
    b[f.start..f.start + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub fn set_u64(b: &mut [u8], f: Field, v: u64) {
    b[f.start..f.start + 8].copy_from_slice(&v.to_be_bytes());
}

/// A big-endian integer field as wide as its type, read and written by type, so a macro
/// can generate the accessors of a header from its field list (`view::plain_fields!`).
pub trait BeInt: Sized {
    fn get(b: &[u8], f: Field) -> Self;
    fn set(b: &mut [u8], f: Field, v: Self);
}

impl BeInt for u32 {
    #[inline]
    fn get(b: &[u8], f: Field) -> u32 {
        u32_at(b, f)
    }
    #[inline]
    fn set(b: &mut [u8], f: Field, v: u32) {
        set_u32(b, f, v)
    }
}

impl BeInt for u64 {
    #[inline]
    fn get(b: &[u8], f: Field) -> u64 {
        u64_at(b, f)
    }
    #[inline]
    fn set(b: &mut [u8], f: Field, v: u64) {
        set_u64(b, f, v)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn be_round_trips() {
        let mut b = [0xa5u8; 16];
        set_u16(&mut b, 0..2, 0x1234);
        set_u24(&mut b, 2..5, 0xfe_dcba);
        set_u32(&mut b, 5..9, 0xdead_beef);
        set_u64(&mut b, 8..16, 0x0102_0304_0506_0708);
        assert_eq!(u16_at(&b, 0..2), 0x1234);
        assert_eq!(u24_at(&b, 2..5), 0xfe_dcba);
        assert_eq!(b[..5], [0x12, 0x34, 0xfe, 0xdc, 0xba]);
        assert_eq!(u64_at(&b, 8..16), 0x0102_0304_0506_0708);
        // set_u64 overwrote the last byte of the u32
        assert_eq!(u32_at(&b, 5..9), 0xdead_be01);
    }
}
