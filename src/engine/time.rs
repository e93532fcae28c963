//! Engine time: an `Instant` the caller supplies (nanoseconds from an arbitrary zero), and
//! the IBA timer encodings. The engine never reads a clock.

use core::time::Duration;

/// A point in time, in nanoseconds since an arbitrary `ZERO` chosen by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);

    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating at the end of time.
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// Largest Local ACK Timeout code: the attribute is 5 bits (IBA 9.7.6.1.3).
pub const MAX_ACK_TIMEOUT: u8 = 31;
/// Largest minimum RNR NAK timer code: the AETH field is 5 bits (IBA 9.7.5.2.8, Table 45).
pub const MAX_RNR_TIMER: u8 = 31;

/// Local ACK timeout (IBA 9.7.6.1.3): 4.096 µs * 2^code; code 0 means the
/// timer is disabled (infinite). Codes above [`MAX_ACK_TIMEOUT`] are invalid and rejected
/// at modify time.
pub fn ack_timeout(code: u8) -> Option<Duration> {
    const UNIT_NS: u64 = 4096;
    (code != 0 && code <= MAX_ACK_TIMEOUT).then(|| Duration::from_nanos(UNIT_NS << code))
}

/// Minimum RNR NAK timer field encodings (IBA Table 45), in microseconds, by 5-bit code.
/// Code 0 is the longest (655.36 ms).
pub const RNR_TIMER_US: [u32; MAX_RNR_TIMER as usize + 1] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The RNR wait for a 5-bit timer code.
pub fn rnr_timer(code: u8) -> Duration {
    // The largest 5-bit code is also the mask of the field.
    Duration::from_micros(u64::from(RNR_TIMER_US[usize::from(code & MAX_RNR_TIMER)]))
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn timer_tables() {
        assert_eq!(ack_timeout(0), None);
        assert_eq!(ack_timeout(14), Some(Duration::from_nanos(4096 * 16384))); // ~67 ms
        assert_eq!(ack_timeout(32), None);
        // shared/captures/send_bw_rnr.txt: timer 12 = 0.64 ms.
        assert_eq!(rnr_timer(12), Duration::from_micros(640));
        assert_eq!(
            rnr_timer(0),
            Duration::from_millis(655) + Duration::from_micros(360)
        );
        // Strictly increasing from code 1 to 31.
        assert!(RNR_TIMER_US[1..].windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn instant_arithmetic_saturates() {
        let t = Instant::from_nanos(u64::MAX - 1);
        assert_eq!(
            t.saturating_add(Duration::from_secs(1)).as_nanos(),
            u64::MAX
        );
        assert_eq!(Instant::ZERO.since(t), Duration::ZERO);
        assert_eq!(t.since(Instant::ZERO).as_nanos(), u128::from(u64::MAX - 1));
    }
}
