//! Memory windows and re-registration in the table: every bind rule, the lookups through
//! a window's key, and the property that no byte outside a bound window is ever reached.

use super::*;
use crate::mem::key::{is_window_key, MW_INDEX_BASE};
use crate::mem::mw::{MwBind, MwState, MwType, OnQp};
use crate::mem::{range_within, Rereg};
use proptest::prelude::*;

const RW: Access = Access::REMOTE_READ.union(Access::REMOTE_WRITE);
const MR_IOVA: u64 = 0x10_0000;
const MR_LEN: u64 = 4096;

fn setup(access: Access) -> (MrTable, Pd, Arc<MemoryRegion>) {
    let t = MrTable::new();
    let pd = t.alloc_pd();
    let mr = t.reg_mr(pd, MR_IOVA, MR_LEN, access).unwrap();
    (t, pd, mr)
}

fn bind(mr: &MemoryRegion, va: u64, length: u64, access: Access) -> MwBind {
    MwBind {
        mr_lkey: mr.lkey(),
        va,
        length,
        access,
        zero_based: false,
    }
}

fn why(e: MemError) -> &'static str {
    match e {
        MemError::BindRefused { why, .. } => why,
        e => panic!("not a bind refusal: {e}"),
    }
}

#[test]
fn alloc_keys_are_in_the_window_range() {
    let (t, pd, mr) = setup(Access::ALL | Access::MW_BIND);
    let a = t.alloc_mw(pd, MwType::Type1).unwrap();
    let b = t.alloc_mw(pd, MwType::Type2).unwrap();
    assert!(is_window_key(a.rkey().0) && is_window_key(b.rkey().0));
    assert!(!is_window_key(mr.rkey().0));
    assert_eq!(a.rkey().index(), MW_INDEX_BASE + 1);
    assert_ne!(a.rkey().index(), b.rkey().index());
    assert_eq!((a.state(), b.state()), (MwState::Valid, MwState::Free));
    assert_eq!(t.windows_len(), 2);
    // Windows count in their PD.
    t.dereg_mr(mr.lkey()).unwrap();
    assert_eq!(t.dealloc_pd(pd), Err(MemError::PdInUse { pd, mrs: 2 }));
    t.dealloc_mw(&a).unwrap();
    t.dealloc_mw(&b).unwrap();
    assert!(matches!(t.dealloc_mw(&b), Err(MemError::NoSuchMr { .. })));
    assert_eq!(a.state(), MwState::Invalid);
    t.dealloc_pd(pd).unwrap();
    assert_eq!(
        t.alloc_mw(pd, MwType::Type1).unwrap_err(),
        MemError::NoSuchPd { pd }
    );
}

#[test]
fn type1_bind_rules_and_access() {
    let (t, pd, mr) = setup(Access::ALL | Access::MW_BIND);
    let mw = t.alloc_mw(pd, MwType::Type1).unwrap();
    let k = mw.rkey();
    let w = bind(&mr, MR_IOVA + 0x100, 0x100, RW);
    let who = OnQp::from(pd);
    // Before a bind, the window names nothing.
    assert_eq!(
        t.read_remote(pd, k, MR_IOVA + 0x100, &mut [0; 1]),
        Err(MemError::MrInvalid {
            key: Key::Remote(k)
        })
    );
    let k2 = t.bind_mw(who, k, k.key().wrapping_add(1), &w).unwrap();
    assert_eq!(k2, Rkey::new(k.index(), k.key().wrapping_add(1)));
    assert_eq!(mr.windows(), 1);
    // The old key byte is stale now.
    assert!(matches!(
        t.read_remote(pd, k, MR_IOVA + 0x100, &mut [0; 1]),
        Err(MemError::KeyMismatch { .. })
    ));
    t.write_remote(pd, k2, MR_IOVA + 0x1f8, &[7; 8]).unwrap();
    let mut b = [0; 8];
    t.read_remote(pd, k2, MR_IOVA + 0x1f8, &mut b).unwrap();
    assert_eq!(b, [7; 8]);
    // One byte out of the window on either side, though inside the region.
    assert!(matches!(
        t.write_remote(pd, k2, MR_IOVA + 0x1f9, &[1; 8]),
        Err(MemError::OutOfRange { .. })
    ));
    assert!(matches!(
        t.read_remote(pd, k2, MR_IOVA + 0xff, &mut [0; 2]),
        Err(MemError::OutOfRange { .. })
    ));
    // Rights are the window's, not the region's.
    assert!(matches!(
        t.fetch_add(pd, k2, MR_IOVA + 0x100, 1),
        Err(MemError::AccessDenied { .. })
    ));
    // Another PD: refused.
    let other = t.alloc_pd();
    assert!(matches!(
        t.read_remote(other, k2, MR_IOVA + 0x100, &mut [0; 1]),
        Err(MemError::PdMismatch { .. })
    ));
    // A type 1 window cannot be invalidated remotely or locally.
    assert_eq!(
        t.invalidate_remote(OnQp::new(pd, 1), k2),
        Err(MemError::NotInvalidatable {
            key: Key::Remote(k2)
        })
    );
    // The region cannot go while the window is bound.
    assert_eq!(
        t.dereg_mr(mr.lkey()),
        Err(MemError::MrHasWindows {
            lkey: mr.lkey(),
            windows: 1
        })
    );
    assert!(matches!(
        t.rereg_mr(
            mr.lkey(),
            Rereg {
                access: Some(Access::LOCAL_WRITE),
                ..Rereg::default()
            }
        ),
        Err(MemError::MrHasWindows { .. })
    ));
    // Rebinding with length 0 unbinds (type 1).
    let k3 = t
        .bind_mw(who, k2, k2.key().wrapping_add(1), &bind(&mr, 0, 0, RW))
        .unwrap();
    assert_eq!(mr.windows(), 0);
    assert_eq!(
        t.read_remote(pd, k3, MR_IOVA + 0x100, &mut [0; 1]),
        Err(MemError::MrInvalid {
            key: Key::Remote(k3)
        })
    );
    t.dereg_mr(mr.lkey()).unwrap();
}

#[test]
fn bind_refusals_name_the_rule() {
    let (t, pd, plain) = setup(Access::LOCAL_WRITE | Access::REMOTE_READ);
    let ro = t
        .reg_mr(pd, 0x20_0000, 64, Access::MW_BIND | Access::REMOTE_READ)
        .unwrap();
    let good = t
        .reg_mr(pd, 0x30_0000, 64, Access::ALL | Access::MW_BIND)
        .unwrap();
    let mw = t.alloc_mw(pd, MwType::Type1).unwrap();
    let k = mw.rkey();
    let who = OnQp::from(pd);
    let e = |w: &MwBind| why(t.bind_mw(who, k, 1, w).unwrap_err());
    assert!(e(&bind(&plain, MR_IOVA, 8, RW)).contains("C10-73"));
    assert!(e(&bind(&ro, 0x20_0000, 8, RW)).contains("C10-74"));
    assert!(e(&bind(&good, 0x30_0000 + 1, 64, RW)).contains("C10-75"));
    assert!(e(&bind(&good, 0x2f_ffff, 2, RW)).contains("C10-75"));
    assert!(e(&MwBind {
        zero_based: true,
        ..bind(&good, 0x30_0000, 8, RW)
    })
    .contains("zero-based"));
    assert!(e(&bind(&good, 0x30_0000, 8, Access::MW_BIND)).contains("rights"));
    let stale = MwBind {
        mr_lkey: Lkey(good.lkey().0 ^ 1),
        ..bind(&good, 0x30_0000, 8, RW)
    };
    assert!(e(&stale).contains("names no memory region"));
    let other = t.alloc_pd();
    let w = bind(&good, 0x30_0000, 8, RW);
    assert!(why(t.bind_mw(OnQp::from(other), k, 1, &w).unwrap_err()).contains("another PD"));
    assert!(why(t.bind_mw(who, Rkey(k.0 ^ 1), 1, &w).unwrap_err()).contains("stale"));
    assert!(why(t.bind_mw(who, good.rkey(), 1, &w).unwrap_err()).contains("no memory window"));
    // Nothing changed by the refusals.
    assert_eq!(mw.rkey(), k);
    assert_eq!(good.windows(), 0);
    // Type 2: only from a QP, never with length 0.
    let t2 = t.alloc_mw(pd, MwType::Type2).unwrap();
    assert!(why(t.bind_mw(who, t2.rkey(), 1, &w).unwrap_err()).contains("on a QP"));
    let q = OnQp::new(pd, 17);
    assert!(why(t
        .bind_mw(q, t2.rkey(), 1, &bind(&good, 0, 0, RW))
        .unwrap_err())
    .contains("o10-37.2.40"));
}

#[test]
fn type2_belongs_to_its_qp_and_is_invalidated() {
    let (t, pd, mr) = setup(Access::ALL | Access::MW_BIND);
    let mw = t.alloc_mw(pd, MwType::Type2).unwrap();
    let (q5, q6) = (OnQp::new(pd, 5), OnQp::new(pd, 6));
    let k = t
        .bind_mw(q5, mw.rkey(), 0x42, &bind(&mr, MR_IOVA, MR_LEN, RW))
        .unwrap();
    assert_eq!(mw.qpn(), Some(5));
    t.write_remote(q5, k, MR_IOVA, &[1]).unwrap();
    assert!(matches!(
        t.write_remote(q6, k, MR_IOVA, &[1]),
        Err(MemError::QpMismatch { .. })
    ));
    assert!(matches!(
        t.write_remote(pd, k, MR_IOVA, &[1]),
        Err(MemError::QpMismatch { .. })
    ));
    // Bound: not bindable again until invalidated.
    assert!(why(t.bind_mw(q5, k, 1, &bind(&mr, MR_IOVA, 8, RW)).unwrap_err()).contains("free"));
    // Invalidation from another QP or with a stale key is refused.
    assert!(matches!(
        t.invalidate_mw(q6, k),
        Err(MemError::QpMismatch { .. })
    ));
    assert!(matches!(
        t.invalidate_mw(q5, Rkey(k.0 ^ 1)),
        Err(MemError::KeyMismatch { .. })
    ));
    t.invalidate_remote(q5, k).unwrap();
    assert_eq!(mw.state(), MwState::Free);
    assert_eq!(mr.windows(), 0);
    assert_eq!(
        t.write_remote(q5, k, MR_IOVA, &[1]),
        Err(MemError::MrInvalid {
            key: Key::Remote(k)
        })
    );
    assert_eq!(
        t.invalidate_mw(q5, k),
        Err(MemError::MrInvalid {
            key: Key::Remote(k)
        })
    );
    // Free again: bindable, by another QP this time; zero-based.
    let zb = MwBind {
        zero_based: true,
        ..bind(&mr, MR_IOVA + 0x800, 0x10, RW)
    };
    let k2 = t.bind_mw(q6, k, 0x43, &zb).unwrap();
    t.write_remote(q6, k2, 0x8, &[9; 8]).unwrap();
    let mut b = [0; 1];
    mr.read(MR_IOVA + 0x808, &mut b).unwrap();
    assert_eq!(b, [9]);
    assert!(matches!(
        t.write_remote(q6, k2, 0x9, &[9; 8]),
        Err(MemError::OutOfRange { .. })
    ));
    assert!(matches!(
        t.read_remote(q6, k2, u64::MAX, &mut [0; 1]),
        Err(MemError::OutOfRange { .. })
    ));
    // Deallocating the window frees the region.
    t.dealloc_mw(&mw).unwrap();
    assert_eq!(mr.windows(), 0);
    t.dereg_mr(mr.lkey()).unwrap();
}

#[test]
fn rereg_keeps_the_lkey() {
    let (t, pd, mr) = setup(Access::LOCAL_WRITE);
    assert_eq!(mr.rkey().0, mr.lkey().0);
    mr.write(MR_IOVA, &[5]).unwrap();
    assert!(matches!(
        t.rereg_mr(mr.lkey(), Rereg::default()),
        Err(MemError::BadRereg { .. })
    ));
    let pd2 = t.alloc_pd();
    let m2 = t
        .rereg_mr(
            mr.lkey(),
            Rereg {
                pd: Some(pd2),
                access: Some(Access::LOCAL_WRITE | Access::REMOTE_READ),
                ..Rereg::default()
            },
        )
        .unwrap();
    assert_eq!(m2.lkey(), mr.lkey());
    assert_eq!(
        m2.rkey(),
        mr.rkey(),
        "the R_Key the program sent still names the region"
    );
    assert_eq!(m2.pd(), pd2);
    let mut b = [0; 1];
    t.read_remote(pd2, m2.rkey(), MR_IOVA, &mut b).unwrap();
    assert_eq!(b, [5], "the same bytes");
    assert!(matches!(
        t.read_remote(pd, m2.rkey(), MR_IOVA, &mut b),
        Err(MemError::PdMismatch { .. })
    ));
    t.dealloc_pd(pd).unwrap();
    // New translation: other bytes at another iova.
    let m3 = t
        .rereg_mr(
            mr.lkey(),
            Rereg {
                translation: Some((0x5000, Backing::owned(16).unwrap())),
                ..Rereg::default()
            },
        )
        .unwrap();
    assert_eq!((m3.iova(), m3.length()), (0x5000, 16));
    t.read_remote(pd2, m3.rkey(), 0x5000, &mut b).unwrap();
    assert_eq!(b, [0]);
    assert!(t.read_remote(pd2, m3.rkey(), MR_IOVA, &mut b).is_err());
    // Refusals change nothing.
    let bad = Rereg {
        access: Some(Access::REMOTE_WRITE),
        ..Rereg::default()
    };
    assert!(matches!(
        t.rereg_mr(mr.lkey(), bad),
        Err(MemError::InvalidAccess { .. })
    ));
    let gone = Rereg {
        pd: Some(pd),
        ..Rereg::default()
    };
    assert_eq!(
        t.rereg_mr(mr.lkey(), gone).unwrap_err(),
        MemError::NoSuchPd { pd }
    );
    t.dereg_mr(mr.lkey()).unwrap();
    t.dealloc_pd(pd2).unwrap();
}

proptest! {
    /// Through a bound window, an access succeeds exactly when its range is inside the
    /// window and the window grants the right; a WRITE changes exactly its own bytes,
    /// never one outside the window; once invalidated, nothing gets through.
    #[test]
    fn no_byte_outside_the_window(
        off in 0u64..MR_LEN,
        len in 1u64..MR_LEN,
        grant in 0u32..8,
        dva in -64i64..(MR_LEN as i64 + 64),
        alen in 0u64..96,
        zero_based in any::<bool>(),
    ) {
        let len = len.min(MR_LEN - off);
        let (t, pd, mr) = setup(Access::ALL | Access::MW_BIND);
        let mw = t.alloc_mw(pd, MwType::Type2).unwrap();
        let q = OnQp::new(pd, 3);
        let access = Access::from_bits(grant << 1).unwrap();
        let w = MwBind { zero_based, ..bind(&mr, MR_IOVA + off, len, access) };
        let k = t.bind_mw(q, mw.rkey(), 9, &w).unwrap();
        let base = if zero_based { 0 } else { MR_IOVA + off };
        let va = base.wrapping_add_signed(dva);
        let inside = range_within(base, len, va, alen);
        let data = vec![0xee; alen as usize];
        let r = t.write_remote(q, k, va, &data);
        prop_assert_eq!(r.is_ok(), inside && access.contains(Access::REMOTE_WRITE), "{:?}", r);
        let bytes = mr.to_vec();
        for (i, &b) in bytes.iter().enumerate() {
            let at = i as u64;
            let written = r.is_ok() && at >= off + (va - base) && at < off + (va - base) + alen;
            prop_assert_eq!(b == 0xee, written, "byte {} of the region", i);
        }
        let r = t.read_remote(q, k, va, &mut vec![0; alen as usize]);
        prop_assert_eq!(r.is_ok(), inside && access.contains(Access::REMOTE_READ));
        let r = t.fetch_add(q, k, va & !7, 1);
        let ok = range_within(base, len, va & !7, 8) && access.contains(Access::REMOTE_ATOMIC);
        prop_assert_eq!(r.is_ok(), ok && (MR_IOVA + off + ((va & !7) - base)) % 8 == 0);
        t.invalidate_mw(q, k).unwrap();
        prop_assert!(t.write_remote(q, k, va, &data).is_err());
        prop_assert!(t.read_remote(q, k, va, &mut vec![0; alen as usize]).is_err());
        prop_assert_eq!(mr.windows(), 0);
    }
}
