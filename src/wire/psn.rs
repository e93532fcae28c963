//! Packet sequence numbers: 24-bit serial numbers (IBA 9.7.1).

use core::fmt;

/// A 24-bit PSN. Arithmetic wraps at 2^24; ordering is serial-number ordering over a
/// window of 2^23 (rxe's `psn_compare`), as IBA 9.7.1 defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// The 24 bits a PSN occupies.
    pub const MASK: u32 = 0x00ff_ffff;
    /// Half the PSN space: a PSN further than this "ahead" is behind.
    pub const HALF: u32 = 0x0080_0000;

    /// A PSN from the low 24 bits of `v`.
    #[inline]
    pub const fn new(v: u32) -> Psn {
        Psn(v & Psn::MASK)
    }

    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n`, modulo 2^24.
    #[inline]
    pub const fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }

    /// `self - n`, modulo 2^24.
    #[inline]
    pub const fn sub(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_sub(n))
    }

    /// The signed distance from `other` to `self` in the serial sense: positive when
    /// `self` is after `other`. Range -2^23 ..= 2^23 - 1.
    #[inline]
    pub const fn diff(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 so the sign bit is bit 23.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Serial comparison (rxe `psn_compare`).
    #[inline]
    pub fn cmp_serial(self, other: Psn) -> core::cmp::Ordering {
        self.diff(other).cmp(&0)
    }

    #[inline]
    pub fn is_before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    #[inline]
    pub fn is_after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps() {
        let p = Psn::new(Psn::MASK);
        assert_eq!(p.add(1), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), p);
        assert!(Psn::new(0).is_after(p));
        assert_eq!(Psn::new(2).diff(Psn::new(Psn::MASK - 1)), 4);
        assert_eq!(Psn::new(Psn::MASK - 1).diff(Psn::new(2)), -4);
        assert_eq!(Psn::new(0x800000).diff(Psn::new(0)), -0x800000);
    }

    proptest! {
        #[test]
        fn add_then_diff(a in 0u32..=Psn::MASK, n in 0u32..Psn::HALF) {
            let p = Psn::new(a);
            prop_assert_eq!(p.add(n).diff(p), n as i32);
            prop_assert_eq!(p.diff(p.add(n)), -(n as i32));
            prop_assert_eq!(p.add(n).sub(n), p);
        }
    }
}
