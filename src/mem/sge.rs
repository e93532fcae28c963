//! Scatter/gather lists and the cursor the transport walks them with.
//!
//! A work request names its local memory as a list of SGEs (IBA chapter 10, Software
//! Transport Interface, work requests: address, length, L_Key). A message is the concatenation of the SGEs' bytes; packets
//! carry it MTU by MTU, so the transport copies it in pieces, remembering where it is
//! with a [`SgeCursor`] (rxe's `cur_sge`, `sge_offset`, `resid` in `copy_data`).
//!
//! Each SGE is validated when the cursor uses it ([`MrTable::lookup_local`]: key, PD,
//! state, access, and the SGE's whole range): an SGE that is not touched is not checked,
//! as in rxe, and an SGE is re-checked by every piece that touches it, so a region
//! deregistered or invalidated between two packets stops the copy. Nothing here
//! allocates.

use super::key::{Key, Lkey};
use super::mr::MemoryRegion;
use super::table::MrTable;
use super::{Access, MemError, Pd};
use core::ops::Range;

/// One scatter/gather element (`struct ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    /// First address, in the region's iova space.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// The region's local key.
    pub lkey: Lkey,
}

/// Total bytes of an SGE list, refused past u32 (a message length in a WR and a
/// completion is a u32).
pub fn total_len(sges: &[Sge]) -> Result<u32, MemError> {
    sges.iter()
        .try_fold(0u32, |acc, s| acc.checked_add(s.length))
        .ok_or(MemError::SgeTotalOverflow { sges: sges.len() })
}

/// A position in an SGE list: the current SGE, the offset inside it, and the bytes left
/// in the whole list from here (rxe's `cur_sge`, `sge_offset`, `resid`).
///
/// A cursor belongs to the list it was made for; used with another list it may report
/// [`MemError::LocalLengthError`] but never reads or writes outside what the lookups
/// allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SgeCursor {
    sge: usize,
    offset: u32,
    resid: u32,
}

impl SgeCursor {
    /// The start of `sges`.
    pub fn new(sges: &[Sge]) -> Result<SgeCursor, MemError> {
        Ok(SgeCursor {
            sge: 0,
            offset: 0,
            resid: total_len(sges)?,
        })
    }

    /// The position `offset` bytes into `sges` (to resume after a retry rewinds the
    /// send queue, or to place a READ response by its offset). `offset` may equal the
    /// total (an exhausted cursor) but not exceed it.
    pub fn at(sges: &[Sge], offset: u64) -> Result<SgeCursor, MemError> {
        let total = total_len(sges)?;
        if offset > u64::from(total) {
            return Err(MemError::LocalLengthError {
                need: offset,
                have: u64::from(total),
            });
        }
        let mut rest = offset as u32; // <= total, a u32
        let mut sge = 0;
        while sge < sges.len() && rest >= sges[sge].length {
            rest -= sges[sge].length;
            sge += 1;
        }
        Ok(SgeCursor {
            sge,
            offset: rest,
            resid: total - offset as u32,
        })
    }

    /// Index of the current SGE.
    pub fn sge(&self) -> usize {
        self.sge
    }

    /// Offset inside the current SGE.
    pub fn offset(&self) -> u32 {
        self.offset
    }

    /// Bytes left in the list from the cursor.
    pub fn resid(&self) -> u32 {
        self.resid
    }

    /// Whether the whole list has been consumed.
    pub fn is_done(&self) -> bool {
        self.resid == 0
    }
}

/// Walks `len` bytes from `cursor`, validating each SGE it touches with `need`, and
/// calls `f(region, key, va, range in the caller's buffer)` per piece. The cursor moves
/// only if every piece succeeded.
fn walk(
    table: &MrTable,
    pd: Pd,
    sges: &[Sge],
    cursor: &mut SgeCursor,
    len: usize,
    need: Access,
    mut f: impl FnMut(&MemoryRegion, Key, u64, Range<usize>) -> Result<(), MemError>,
) -> Result<(), MemError> {
    // The data does not fit what is left of the list: the work request completes with
    // a Local Length Error (ibverbs IBV_WC_LOC_LEN_ERR).
    if len as u64 > u64::from(cursor.resid) {
        return Err(MemError::LocalLengthError {
            need: len as u64,
            have: u64::from(cursor.resid),
        });
    }
    let mut c = *cursor;
    let mut done = 0usize;
    while done < len {
        let Some(sge) = sges.get(c.sge) else {
            // Only with a cursor made for a longer list.
            return Err(MemError::LocalLengthError {
                need: (len - done) as u64,
                have: 0,
            });
        };
        if c.offset >= sge.length {
            // Also skips zero-length SGEs without looking them up (as rxe).
            c.sge += 1;
            c.offset = 0;
            continue;
        }
        let n = ((sge.length - c.offset) as usize).min(len - done);
        let mr = table.lookup_local(pd, sge.lkey, sge.addr, u64::from(sge.length), need)?;
        // No overflow: [addr, addr + length) lies in the region, which ends by 2^64, and
        // offset < length.
        let va = sge.addr + u64::from(c.offset);
        f(&mr, Key::Local(sge.lkey), va, done..done + n)?;
        done += n;
        c.offset += n as u32;
        c.resid -= n as u32;
    }
    *cursor = c;
    Ok(())
}

/// Scatters `data` into the SGE list from `cursor` (a receive buffer, a READ response,
/// an atomic result): every SGE touched needs LOCAL_WRITE. On error the cursor does not
/// move; SGEs before the failing one may already hold their part of `data`, as on a
/// real HCA, and the work request completes in error anyway.
pub fn copy_in(
    table: &MrTable,
    pd: Pd,
    sges: &[Sge],
    cursor: &mut SgeCursor,
    data: &[u8],
) -> Result<(), MemError> {
    walk(
        table,
        pd,
        sges,
        cursor,
        data.len(),
        Access::LOCAL_WRITE,
        |mr, key, va, r| mr.write_for(key, va, &data[r]),
    )
}

/// Gathers `out.len()` bytes from the SGE list at `cursor` (the payload of a send or
/// write). Local read needs no access right; key, PD, state and range are still checked.
pub fn copy_out(
    table: &MrTable,
    pd: Pd,
    sges: &[Sge],
    cursor: &mut SgeCursor,
    out: &mut [u8],
) -> Result<(), MemError> {
    let len = out.len();
    walk(
        table,
        pd,
        sges,
        cursor,
        len,
        Access::empty(),
        |mr, key, va, r| mr.read_for(key, va, &mut out[r]),
    )
}

/// [`copy_in`] at `offset` bytes into the list, without a stored cursor.
pub fn scatter(
    table: &MrTable,
    pd: Pd,
    sges: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), MemError> {
    copy_in(table, pd, sges, &mut SgeCursor::at(sges, offset)?, data)
}

/// [`copy_out`] from `offset` bytes into the list, without a stored cursor.
pub fn gather(
    table: &MrTable,
    pd: Pd,
    sges: &[Sge],
    offset: u64,
    out: &mut [u8],
) -> Result<(), MemError> {
    copy_out(table, pd, sges, &mut SgeCursor::at(sges, offset)?, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::Rkey;
    use proptest::prelude::*;
    use std::sync::Arc;

    struct Fixture {
        t: MrTable,
        pd: Pd,
        a: Arc<MemoryRegion>,
        b: Arc<MemoryRegion>,
        sges: [Sge; 3],
    }

    /// Two regions, three SGEs at odd offsets: 5 bytes of A, 7 bytes of B, 4 of A.
    fn fixture() -> Fixture {
        let t = MrTable::new();
        let pd = t.alloc_pd();
        let a = t.reg_mr(pd, 0x1000, 64, Access::LOCAL_WRITE).unwrap();
        let b = t.reg_mr(pd, 0x9000_0000, 32, Access::LOCAL_WRITE).unwrap();
        let sges = [
            Sge {
                addr: 0x1003,
                length: 5,
                lkey: a.lkey(),
            },
            Sge {
                addr: 0x9000_0010,
                length: 7,
                lkey: b.lkey(),
            },
            Sge {
                addr: 0x1020,
                length: 4,
                lkey: a.lkey(),
            },
        ];
        Fixture { t, pd, a, b, sges }
    }

    fn bytes(mr: &MemoryRegion) -> Vec<u8> {
        mr.with_bytes(|b| b.to_vec())
    }

    #[test]
    fn total_len_overflow() {
        let s = |length| Sge {
            addr: 0,
            length,
            lkey: Lkey(0),
        };
        assert_eq!(total_len(&[]), Ok(0));
        assert_eq!(total_len(&[s(1), s(2), s(3)]), Ok(6));
        assert_eq!(total_len(&[s(u32::MAX), s(0)]), Ok(u32::MAX));
        assert_eq!(
            total_len(&[s(u32::MAX - 1), s(1), s(1)]),
            Err(MemError::SgeTotalOverflow { sges: 3 })
        );
        assert_eq!(
            SgeCursor::new(&[s(u32::MAX), s(1)]),
            Err(MemError::SgeTotalOverflow { sges: 2 })
        );
    }

    #[test]
    fn scatter_across_three_sges_in_pieces() {
        let f = fixture();
        let msg: Vec<u8> = (1..=16).collect();
        let mut c = SgeCursor::new(&f.sges).unwrap();
        assert_eq!(c.resid(), 16);
        // Pieces that each cross an SGE boundary: 3 | 6 (2 of sge0, 4 of sge1) | 7.
        copy_in(&f.t, f.pd, &f.sges, &mut c, &msg[..3]).unwrap();
        assert_eq!((c.sge(), c.offset(), c.resid()), (0, 3, 13));
        copy_in(&f.t, f.pd, &f.sges, &mut c, &msg[3..9]).unwrap();
        assert_eq!((c.sge(), c.offset(), c.resid()), (1, 4, 7));
        copy_in(&f.t, f.pd, &f.sges, &mut c, &msg[9..]).unwrap();
        assert_eq!((c.sge(), c.offset(), c.resid()), (2, 4, 0));
        assert!(c.is_done());

        let a = bytes(&f.a);
        assert_eq!(&a[3..8], &[1, 2, 3, 4, 5]);
        assert_eq!(&a[0x20..0x24], &[13, 14, 15, 16]);
        assert!(a[..3]
            .iter()
            .chain(&a[8..0x20])
            .chain(&a[0x24..])
            .all(|&x| x == 0));
        let b = bytes(&f.b);
        assert_eq!(&b[0x10..0x17], &[6, 7, 8, 9, 10, 11, 12]);
        assert!(b[..0x10].iter().chain(&b[0x17..]).all(|&x| x == 0));

        // Gather it back whole, and from an offset in the middle of SGE 1.
        let mut out = [0u8; 16];
        let mut g = SgeCursor::new(&f.sges).unwrap();
        copy_out(&f.t, f.pd, &f.sges, &mut g, &mut out).unwrap();
        assert_eq!(&out[..], &msg[..]);
        let mut mid = [0u8; 8];
        gather(&f.t, f.pd, &f.sges, 6, &mut mid).unwrap();
        assert_eq!(&mid, &msg[6..14]);

        // Nothing left: one more byte is a local length error; zero bytes are fine.
        assert_eq!(
            copy_in(&f.t, f.pd, &f.sges, &mut c, &[0]),
            Err(MemError::LocalLengthError { need: 1, have: 0 })
        );
        copy_in(&f.t, f.pd, &f.sges, &mut c, &[]).unwrap();
    }

    #[test]
    fn cursor_at_offsets() {
        let f = fixture();
        let at = |o| {
            let c = SgeCursor::at(&f.sges, o).unwrap();
            (c.sge(), c.offset(), c.resid())
        };
        assert_eq!(at(0), (0, 0, 16));
        assert_eq!(at(4), (0, 4, 12));
        assert_eq!(at(5), (1, 0, 11));
        assert_eq!(at(11), (1, 6, 5));
        assert_eq!(at(12), (2, 0, 4));
        assert_eq!(at(16), (3, 0, 0));
        assert_eq!(
            SgeCursor::at(&f.sges, 17),
            Err(MemError::LocalLengthError { need: 17, have: 16 })
        );
        // Zero-length SGEs are stepped over.
        let z = [
            Sge {
                length: 0,
                ..f.sges[0]
            },
            f.sges[0],
            Sge {
                length: 0,
                ..f.sges[1]
            },
            f.sges[1],
        ];
        let c = SgeCursor::at(&z, 5).unwrap();
        assert_eq!((c.sge(), c.offset(), c.resid()), (3, 0, 7));
    }

    #[test]
    fn zero_length_sges_are_not_looked_up() {
        let f = fixture();
        let bogus = Sge {
            addr: 0,
            length: 0,
            lkey: Lkey(0xdead_beef),
        };
        let sges = [bogus, f.sges[0], bogus, f.sges[1]];
        scatter(&f.t, f.pd, &sges, 0, &[9; 12]).unwrap();
        assert_eq!(&bytes(&f.b)[0x10..0x17], &[9; 7]);
    }

    #[test]
    fn local_length_error_leaves_memory_and_cursor() {
        let f = fixture();
        let mut c = SgeCursor::at(&f.sges, 10).unwrap();
        let before = c;
        assert_eq!(
            copy_in(&f.t, f.pd, &f.sges, &mut c, &[1; 7]),
            Err(MemError::LocalLengthError { need: 7, have: 6 })
        );
        assert_eq!(c, before);
        assert!(bytes(&f.a).iter().chain(&bytes(&f.b)).all(|&x| x == 0));
        // A cursor from a longer list, used on a shorter one: refused, not a panic.
        let short = &f.sges[..1];
        let mut long = SgeCursor::new(&f.sges).unwrap();
        assert_eq!(
            copy_out(&f.t, f.pd, short, &mut long, &mut [0; 9]),
            Err(MemError::LocalLengthError { need: 4, have: 0 })
        );
    }

    #[test]
    fn protection_errors_per_sge() {
        let f = fixture();
        let pd2 = f.t.alloc_pd();
        let ro = f.t.reg_mr(f.pd, 0x5000, 16, Access::empty()).unwrap();
        let stale = Lkey::new(f.b.lkey().index(), f.b.lkey().key() ^ 0x55);

        // Bad lkey in SGE 1: SGE 0 was written, the cursor did not move.
        let sges = [
            f.sges[0],
            Sge {
                lkey: stale,
                ..f.sges[1]
            },
            f.sges[2],
        ];
        let mut c = SgeCursor::new(&sges).unwrap();
        assert_eq!(
            copy_in(&f.t, f.pd, &sges, &mut c, &[7; 16]),
            Err(MemError::KeyMismatch {
                asked: Key::Local(stale),
                found: Key::Local(f.b.lkey())
            })
        );
        assert_eq!(c, SgeCursor::new(&sges).unwrap());
        assert_eq!(&bytes(&f.a)[3..8], &[7; 5]);

        // Another PD's QP.
        assert!(matches!(
            scatter(&f.t, pd2, &f.sges, 0, &[1]),
            Err(MemError::PdMismatch { .. })
        ));
        // An SGE reaching past its region, even if the piece copied would fit.
        let over = [Sge {
            addr: 0x103c,
            length: 5,
            lkey: f.a.lkey(),
        }];
        assert_eq!(
            scatter(&f.t, f.pd, &over, 0, &[1]),
            Err(MemError::OutOfRange {
                key: Key::Local(f.a.lkey()),
                va: 0x103c,
                len: 5,
                mr_iova: 0x1000,
                mr_len: 64
            })
        );
        // Writing needs LOCAL_WRITE, reading does not.
        let rs = [Sge {
            addr: 0x5000,
            length: 16,
            lkey: ro.lkey(),
        }];
        assert_eq!(
            scatter(&f.t, f.pd, &rs, 0, &[1]),
            Err(MemError::AccessDenied {
                key: Key::Local(ro.lkey()),
                need: Access::LOCAL_WRITE,
                have: Access::empty()
            })
        );
        gather(&f.t, f.pd, &rs, 0, &mut [0; 16]).unwrap();
        // Invalidated, then deregistered, between two pieces of one message.
        let mut c = SgeCursor::new(&f.sges).unwrap();
        copy_out(&f.t, f.pd, &f.sges, &mut c, &mut [0; 6]).unwrap();
        // B has no remote right, so no rkey: invalidated by its lkey, as rxe does.
        f.t.invalidate(f.pd, Rkey(f.b.lkey().0)).unwrap();
        assert_eq!(
            copy_out(&f.t, f.pd, &f.sges, &mut c, &mut [0; 6]),
            Err(MemError::MrInvalid {
                key: Key::Local(f.b.lkey())
            })
        );
        f.t.dereg_mr(f.b.lkey()).unwrap();
        assert_eq!(
            copy_out(&f.t, f.pd, &f.sges, &mut c, &mut [0; 6]),
            Err(MemError::NoSuchMr {
                key: Key::Local(f.b.lkey())
            })
        );
    }

    proptest! {
        /// Scattering a message in arbitrary pieces over arbitrary SGE lengths, then
        /// gathering it whole, gives the message back, and each SGE holds its slice.
        #[test]
        fn scatter_then_gather_round_trips(
            lens in proptest::collection::vec(0u32..20, 1..5),
            cuts in proptest::collection::vec(0usize..100, 0..6),
            seed in any::<u8>(),
        ) {
            let t = MrTable::new();
            let pd = t.alloc_pd();
            let mr = t.reg_mr(pd, 0x7000, 128, Access::LOCAL_WRITE).unwrap();
            // SGEs laid out back to front with a gap, so order matters.
            let mut sges = Vec::new();
            let mut addr = 0x7000 + 120;
            for &l in &lens {
                addr -= u64::from(l) + 3;
                sges.push(Sge { addr, length: l, lkey: mr.lkey() });
            }
            let total = total_len(&sges).unwrap() as usize;
            let msg: Vec<u8> = (0..total).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
            let mut points: Vec<usize> = cuts.iter().map(|c| c % (total + 1)).collect();
            points.push(0);
            points.push(total);
            points.sort_unstable();
            let mut c = SgeCursor::new(&sges).unwrap();
            for w in points.windows(2) {
                copy_in(&t, pd, &sges, &mut c, &msg[w[0]..w[1]]).unwrap();
                prop_assert_eq!(c.resid() as usize, total - w[1]);
            }
            let mut out = vec![0u8; total];
            gather(&t, pd, &sges, 0, &mut out).unwrap();
            prop_assert_eq!(&out, &msg);
            let mut off = 0;
            for s in &sges {
                let mut part = vec![0u8; s.length as usize];
                mr.read(s.addr, &mut part).unwrap();
                prop_assert_eq!(&part[..], &msg[off..off + s.length as usize]);
                off += s.length as usize;
            }
        }
    }
}
