//! QPN blocks leased to attached processes, and the quarantine a block serves after its
//! owner leaves.
//!
//! A QPN is 24 bits; its top byte names one of 256 blocks of 2^16 QPNs. Each attached
//! process gets one block, and its engine hands out QPNs only from it
//! (`EngineConfig::qpn_lo..=qpn_hi`), so a received packet's BTH DestQP names its owner.
//! Block 0 holds the special QPs 0 and 1 (SMI, GSI; IBA 3.5.1) and is never leased: the
//! communication manager of a later issue will own it.
//!
//! A block whose process exited (or died mid-transfer) is quarantined before it is leased
//! again: a late packet for one of its old QPs (a retransmission, a duplicate, a READ
//! response in flight) must not reach a QP of the next owner, which could have the same
//! QPN and accept a packet whose PSN happens to fit. RC gives up on a peer after
//! retry_cnt (at most 7) local ACK timeouts; at perftest's and rc_pingpong's timeout 14
//! (67 ms) that is half a second, at the longest finite timeout (30: 73 minutes) far
//! longer, so the quarantine is a setting ([`DEFAULT_QUARANTINE`]), and among free blocks
//! the one that has been free longest goes first, so a block comes back as late as the
//! pool allows.

use std::time::Duration;

/// Blocks of QPNs (the top byte of a 24-bit QPN).
pub const BLOCKS: usize = 256;
/// How long a block stays unleased after its owner left, by default.
pub const DEFAULT_QUARANTINE: Duration = Duration::from_secs(60);

/// An attached process, as the daemon numbers them.
pub type Owner = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    /// Never leased here (block 0).
    Reserved,
    /// Free since `since` (None: never used), leasable once the quarantine has passed.
    Free { since: Option<Duration> },
    Leased {
        owner: Owner,
        /// Its owner created a QP (`mark_used`): its QPNs may be known to peers, so the
        /// block goes into quarantine when the owner leaves. A block whose owner never
        /// made one (`ibv_devinfo`, a program that only lists devices) comes back at once,
        /// as it was before (`before`).
        used: bool,
        before: Option<Duration>,
    },
}

/// The QPN ranges `[lo, hi]` of block `b`; block 0 starts above the special QPs.
pub fn range(b: u8) -> (u32, u32) {
    let lo = u32::from(b) << 16;
    (lo, lo | 0xffff)
}

/// The block of a QPN.
pub fn block_of(qpn: u32) -> u8 {
    (qpn >> 16) as u8
}

#[derive(Debug, Clone)]
pub struct Leases {
    blocks: [Block; BLOCKS],
    quarantine: Duration,
}

/// What the table holds, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct LeaseCounts {
    pub leased: usize,
    /// Free, but still in quarantine at the time asked.
    pub quarantined: usize,
    pub free: usize,
}

impl Leases {
    pub fn new(quarantine: Duration) -> Leases {
        let mut blocks = [Block::Free { since: None }; BLOCKS];
        blocks[0] = Block::Reserved;
        Leases { blocks, quarantine }
    }

    fn leasable(&self, b: usize, now: Duration) -> Option<Option<Duration>> {
        match self.blocks[b] {
            Block::Free { since: None } => Some(None),
            Block::Free { since: Some(t) }
                if t.checked_add(self.quarantine).is_some_and(|end| now >= end) =>
            {
                Some(Some(t))
            }
            _ => None,
        }
    }

    /// A block for `owner`: a never-used one first (lowest number), else the one free the
    /// longest whose quarantine has passed; `None` when none is.
    pub fn lease(&mut self, now: Duration, owner: Owner) -> Option<u8> {
        let mut best: Option<(usize, Option<Duration>)> = None;
        for b in 0..BLOCKS {
            let Some(since) = self.leasable(b, now) else {
                continue;
            };
            let better = match (best, since) {
                (None, _) => true,
                (Some((_, Some(_))), None) => true,
                (Some((_, Some(t0))), Some(t)) => t < t0,
                (Some((_, None)), _) => false,
            };
            if better {
                best = Some((b, since));
            }
        }
        let (b, before) = best?;
        self.blocks[b] = Block::Leased {
            owner,
            used: false,
            before,
        };
        Some(b as u8)
    }

    /// `owner` created a QP: its blocks will be quarantined when it leaves.
    pub fn mark_used(&mut self, owner: Owner) {
        for b in self.blocks.iter_mut() {
            if let Block::Leased { owner: o, used, .. } = b {
                if *o == owner {
                    *used = true;
                }
            }
        }
    }

    /// `owner` left: its blocks go into quarantine from `now` (those it never made a QP
    /// in come back as they were). How many it held.
    pub fn release(&mut self, now: Duration, owner: Owner) -> usize {
        let mut n = 0;
        for b in self.blocks.iter_mut() {
            if let Block::Leased {
                owner: o,
                used,
                before,
            } = *b
            {
                if o == owner {
                    let since = if used { Some(now) } else { before };
                    *b = Block::Free { since };
                    n += 1;
                }
            }
        }
        n
    }

    /// Who holds the block of `qpn`, if anyone.
    pub fn owner(&self, qpn: u32) -> Option<Owner> {
        match self.blocks[usize::from(block_of(qpn))] {
            Block::Leased { owner, .. } => Some(owner),
            _ => None,
        }
    }

    pub fn counts(&self, now: Duration) -> LeaseCounts {
        let mut c = LeaseCounts::default();
        for (i, b) in self.blocks.iter().enumerate() {
            match b {
                Block::Leased { .. } => c.leased += 1,
                Block::Free { .. } if self.leasable(i, now).is_some() => c.free += 1,
                Block::Free { .. } => c.quarantined += 1,
                Block::Reserved => {}
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn blocks_are_leased_lowest_first_and_never_block_0() {
        let mut l = Leases::new(S);
        assert_eq!(l.lease(Duration::ZERO, 7), Some(1));
        assert_eq!(l.lease(Duration::ZERO, 8), Some(2));
        assert_eq!(l.owner(0x01_0011), Some(7));
        assert_eq!(l.owner(0x02_ffff), Some(8));
        assert_eq!(l.owner(0x00_0001), None);
        assert_eq!(l.owner(0x03_0000), None);
        assert_eq!(range(2), (0x2_0000, 0x2_ffff));
    }

    #[test]
    fn a_released_block_waits_out_its_quarantine() {
        let mut l = Leases::new(S);
        for owner in 1..=255 {
            assert!(l.lease(Duration::ZERO, owner).is_some());
            l.mark_used(owner);
        }
        assert_eq!(l.lease(Duration::ZERO, 999), None, "all 255 leased");
        assert_eq!(l.release(Duration::from_millis(10), 5), 1);
        assert_eq!(l.owner(0x05_0000), None, "its packets go nowhere");
        let c = l.counts(Duration::from_millis(500));
        assert_eq!((c.leased, c.quarantined, c.free), (254, 1, 0));
        assert_eq!(l.lease(Duration::from_millis(500), 999), None);
        assert_eq!(l.lease(Duration::from_millis(1010), 999), Some(5));
    }

    #[test]
    fn never_used_blocks_go_before_quarantined_ones_and_the_oldest_freed_first() {
        let mut l = Leases::new(Duration::ZERO);
        let a = l.lease(Duration::ZERO, 1).unwrap();
        let b = l.lease(Duration::ZERO, 2).unwrap();
        l.mark_used(1);
        l.mark_used(2);
        l.release(Duration::from_secs(5), 2);
        l.release(Duration::from_secs(6), 1);
        // Blocks 3.. were never used: they come first.
        assert_eq!(l.lease(Duration::from_secs(7), 3), Some(3));
        for owner in 4..=255 {
            l.lease(Duration::from_secs(7), owner).unwrap();
        }
        // Then b (freed at 5 s) before a (freed at 6 s).
        assert_eq!(l.lease(Duration::from_secs(7), 300), Some(b));
        assert_eq!(l.lease(Duration::from_secs(7), 301), Some(a));
    }

    /// 255 programs that only open the device (`ibv_devinfo` in a loop) lock nobody out:
    /// a block whose owner made no QP needs no quarantine (no peer knows its QPNs).
    #[test]
    fn a_block_never_used_for_a_qp_comes_back_at_once() {
        let mut l = Leases::new(Duration::from_secs(60));
        for owner in 1..=1000u64 {
            let now = Duration::from_millis(owner);
            assert!(l.lease(now, owner).is_some(), "open number {owner}");
            assert_eq!(l.release(now, owner), 1);
        }
        // One that made a QP is quarantined; the next gets another block.
        let b = l.lease(Duration::from_secs(2), 2000).unwrap();
        l.mark_used(2000);
        l.release(Duration::from_secs(2), 2000);
        assert_ne!(l.lease(Duration::from_secs(2), 2001), Some(b));
        assert_eq!(l.counts(Duration::from_secs(2)).quarantined, 1);
    }

    /// A quarantine as long as a `Duration` allows overflows nothing.
    #[test]
    fn a_huge_quarantine_never_overflows() {
        let mut l = Leases::new(Duration::MAX);
        let b = l.lease(Duration::from_secs(1), 1).unwrap();
        l.mark_used(1);
        l.release(Duration::from_secs(5), 1);
        assert_ne!(l.lease(Duration::from_secs(9), 2), Some(b));
        assert_eq!(l.counts(Duration::from_secs(9)).quarantined, 1);
    }
}
