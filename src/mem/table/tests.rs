use super::*;

const ALL: Access = Access::ALL;

fn table() -> (MrTable, Pd) {
    let t = MrTable::new();
    let pd = t.alloc_pd();
    (t, pd)
}

#[test]
fn pd_lifecycle() {
    let t = MrTable::new();
    let a = t.alloc_pd();
    let b = t.alloc_pd();
    assert_ne!(a, b);
    assert_ne!(a.raw(), 0);
    t.check_pd(a).unwrap();
    let mr = t.reg_mr(a, 0x1000, 64, Access::LOCAL_WRITE).unwrap();
    let mr2 = t.reg_mr(a, 0x2000, 64, Access::empty()).unwrap();
    assert_eq!(t.dealloc_pd(a), Err(MemError::PdInUse { pd: a, mrs: 2 }));
    t.dereg_mr(mr.lkey()).unwrap();
    assert_eq!(t.dealloc_pd(a), Err(MemError::PdInUse { pd: a, mrs: 1 }));
    t.dereg_mr(mr2.lkey()).unwrap();
    t.dealloc_pd(a).unwrap();
    assert_eq!(t.dealloc_pd(a), Err(MemError::NoSuchPd { pd: a }));
    assert_eq!(t.check_pd(a), Err(MemError::NoSuchPd { pd: a }));
    assert_eq!(
        t.reg_mr(a, 0, 8, Access::empty()).unwrap_err(),
        MemError::NoSuchPd { pd: a }
    );
    t.dealloc_pd(b).unwrap();
    assert!(t.is_empty());
}

#[test]
fn reg_mr_refusals() {
    let t = MrTable::with_config(MrTableConfig {
        max_mr_len: 4096,
        max_mrs: 2,
        ..MrTableConfig::default()
    });
    let pd = t.alloc_pd();
    for bad in [
        Access::REMOTE_WRITE,
        Access::REMOTE_ATOMIC,
        Access::REMOTE_READ | Access::REMOTE_WRITE,
    ] {
        assert_eq!(
            t.reg_mr(pd, 0, 8, bad).unwrap_err(),
            MemError::InvalidAccess { access: bad }
        );
    }
    assert_eq!(
        t.reg_mr(pd, 7, 0, ALL).unwrap_err(),
        MemError::ZeroLengthMr { iova: 7 }
    );
    assert_eq!(
        t.reg_mr(pd, u64::MAX - 6, 8, ALL).unwrap_err(),
        MemError::MrWraps {
            iova: u64::MAX - 6,
            length: 8
        }
    );
    assert_eq!(
        t.reg_mr(pd, 0, 4097, ALL).unwrap_err(),
        MemError::MrTooLarge {
            length: 4097,
            max: 4096
        }
    );
    // A region may end exactly at 2^64.
    let top = t.reg_mr(pd, u64::MAX - 7, 8, ALL).unwrap();
    assert_eq!(top.iova(), u64::MAX - 7);
    t.reg_mr(pd, 0, 4096, ALL).unwrap();
    assert_eq!(
        t.reg_mr(pd, 0, 1, ALL).unwrap_err(),
        MemError::TableFull { max: 2 }
    );
    // Refused registrations leave no count behind in the PD.
    assert_eq!(t.dealloc_pd(pd), Err(MemError::PdInUse { pd, mrs: 2 }));
}

#[test]
fn absurd_length_is_an_error_not_an_abort() {
    let t = MrTable::with_config(MrTableConfig {
        max_mr_len: u64::MAX,
        ..MrTableConfig::default()
    });
    let pd = t.alloc_pd();
    // More than isize::MAX bytes: no allocator can provide it.
    assert_eq!(
        t.reg_mr(pd, 0, 1 << 63, Access::empty()).unwrap_err(),
        MemError::OutOfMemory { length: 1 << 63 }
    );
    t.dealloc_pd(pd).unwrap();
}

#[test]
fn lookup_checks_in_rxe_order() {
    let (t, pd) = table();
    let pd2 = t.alloc_pd();
    let mr = t
        .reg_mr(pd, 0x1000, 0x100, Access::LOCAL_WRITE | Access::REMOTE_READ)
        .unwrap();
    let (lk, rk) = (mr.lkey(), mr.rkey());
    assert_eq!(lk.0, rk.0);
    let wrong_tag = Rkey::new(rk.index(), rk.key().wrapping_add(1));
    let nowhere = Rkey::new(rk.index() + 1, rk.key());

    // Every fault at once: the first check in the order is reported.
    assert_eq!(
        t.lookup_remote(pd2, nowhere, 0, u64::MAX, Access::REMOTE_WRITE)
            .unwrap_err(),
        MemError::NoSuchMr {
            key: Key::Remote(nowhere)
        }
    );
    assert_eq!(
        t.lookup_remote(pd2, wrong_tag, 0, u64::MAX, Access::REMOTE_WRITE)
            .unwrap_err(),
        MemError::KeyMismatch {
            asked: Key::Remote(wrong_tag),
            found: Key::Remote(rk)
        }
    );
    assert_eq!(
        t.lookup_remote(pd2, rk, 0, u64::MAX, Access::REMOTE_WRITE)
            .unwrap_err(),
        MemError::PdMismatch {
            key: Key::Remote(rk),
            asked: pd2,
            found: pd
        }
    );
    assert_eq!(
        t.lookup_remote(pd, rk, 0, u64::MAX, Access::REMOTE_WRITE)
            .unwrap_err(),
        MemError::AccessDenied {
            key: Key::Remote(rk),
            need: Access::REMOTE_WRITE,
            have: Access::LOCAL_WRITE | Access::REMOTE_READ
        }
    );
    assert_eq!(
        t.lookup_remote(pd, rk, 0x10ff, 2, Access::REMOTE_READ)
            .unwrap_err(),
        MemError::OutOfRange {
            key: Key::Remote(rk),
            va: 0x10ff,
            len: 2,
            mr_iova: 0x1000,
            mr_len: 0x100
        }
    );
    let got = t
        .lookup_remote(pd, rk, 0x10ff, 1, Access::REMOTE_READ)
        .unwrap();
    assert!(Arc::ptr_eq(&got, &mr));
    // Invalid comes before access and range.
    t.invalidate(pd, rk).unwrap();
    assert_eq!(
        t.lookup_remote(pd, rk, 0, u64::MAX, Access::REMOTE_WRITE)
            .unwrap_err(),
        MemError::MrInvalid {
            key: Key::Remote(rk)
        }
    );
    // ... and after PD.
    assert!(matches!(
        t.lookup_remote(pd2, rk, 0, 0, Access::empty()),
        Err(MemError::PdMismatch { .. })
    ));
    // Local keys see the invalidation too.
    assert_eq!(
        t.lookup_local(pd, lk, 0x1000, 1, Access::empty())
            .unwrap_err(),
        MemError::MrInvalid {
            key: Key::Local(lk)
        }
    );
}

#[test]
fn local_read_needs_no_right_local_write_does() {
    let (t, pd) = table();
    let ro = t.reg_mr(pd, 0, 16, Access::REMOTE_READ).unwrap();
    t.lookup_local(pd, ro.lkey(), 0, 16, Access::empty())
        .unwrap();
    assert_eq!(
        t.lookup_local(pd, ro.lkey(), 0, 16, Access::LOCAL_WRITE)
            .unwrap_err(),
        MemError::AccessDenied {
            key: Key::Local(ro.lkey()),
            need: Access::LOCAL_WRITE,
            have: Access::REMOTE_READ
        }
    );
    // A region without remote rights still has its R_Key (the lkey's value, as rxe after
    // Linux 6.1 and mlx5), but every remote access through it is refused by the rights
    // check, whatever it asks; rkey 0 names nothing.
    let norem = t.reg_mr(pd, 0, 16, Access::LOCAL_WRITE).unwrap();
    let as_rkey = Rkey(norem.lkey().0);
    assert_eq!(norem.rkey(), as_rkey);
    assert!(matches!(
        t.read_remote(pd, as_rkey, 0, &mut [0; 4]),
        Err(MemError::AccessDenied { .. })
    ));
    assert_eq!(
        t.read_remote(pd, Rkey(0), 0, &mut [0; 4]),
        Err(MemError::NoSuchMr {
            key: Key::Remote(Rkey(0))
        })
    );
    for need in [
        Access::REMOTE_READ,
        Access::REMOTE_WRITE,
        Access::REMOTE_ATOMIC,
    ] {
        assert!(matches!(
            t.lookup_remote(pd, as_rkey, 0, 8, need),
            Err(MemError::AccessDenied { .. })
        ));
    }
    // The lkey works locally as before; any one remote right gives that right alone.
    t.lookup_local(pd, norem.lkey(), 0, 16, Access::LOCAL_WRITE)
        .unwrap();
    let rr = t.reg_mr(pd, 0, 16, Access::REMOTE_READ).unwrap();
    assert_eq!(rr.rkey().0, rr.lkey().0);
    // Invalidation goes by the region's one key (rxe_invalidate_mr).
    assert!(matches!(
        t.invalidate(pd, Rkey(0)),
        Err(MemError::NoSuchMr { .. })
    ));
    t.invalidate(pd, as_rkey).unwrap();
    assert!(!norem.is_valid());
}

#[test]
fn dereg_then_lookup_fails() {
    let (t, pd) = table();
    let mr = t.reg_mr(pd, 0x4000, 64, ALL).unwrap();
    let (lk, rk) = (mr.lkey(), mr.rkey());
    let wrong = Lkey::new(lk.index(), lk.key() ^ 0x80);
    assert_eq!(
        t.dereg_mr(wrong),
        Err(MemError::KeyMismatch {
            asked: Key::Local(wrong),
            found: Key::Local(lk)
        })
    );
    t.dereg_mr(lk).unwrap();
    assert_eq!(
        t.dereg_mr(lk),
        Err(MemError::NoSuchMr {
            key: Key::Local(lk)
        })
    );
    assert_eq!(
        t.lookup_local(pd, lk, 0x4000, 1, Access::empty())
            .unwrap_err(),
        MemError::NoSuchMr {
            key: Key::Local(lk)
        }
    );
    assert_eq!(
        t.write_remote(pd, rk, 0x4000, &[1]).unwrap_err(),
        MemError::NoSuchMr {
            key: Key::Remote(rk)
        }
    );
    // A holder of the Arc still sees consistent bytes.
    mr.write(0x4000, &[5]).unwrap();
    assert_eq!(t.len(), 0);
    t.dealloc_pd(pd).unwrap();
}

#[test]
fn reregistration_changes_the_key_and_stale_keys_fail() {
    let t = MrTable::with_config(MrTableConfig {
        max_mrs: 1,
        ..MrTableConfig::default()
    });
    let pd = t.alloc_pd();
    let mut prev = t.reg_mr(pd, 0, 8, ALL).unwrap();
    for _ in 0..1000 {
        let old = prev.rkey();
        t.dereg_mr(prev.lkey()).unwrap();
        let next = t.reg_mr(pd, 0, 8, ALL).unwrap();
        assert_eq!(next.rkey().index(), old.index(), "one slot only");
        assert_ne!(next.rkey().key(), old.key());
        // The previous registration's key no longer reaches memory.
        assert_eq!(
            t.write_remote(pd, old, 0, &[1]).unwrap_err(),
            MemError::KeyMismatch {
                asked: Key::Remote(old),
                found: Key::Remote(next.rkey())
            }
        );
        prev = next;
    }
}

#[test]
fn indices_are_cyclic_and_keys_deterministic() {
    let keys = |seed| {
        let t = MrTable::with_config(MrTableConfig {
            seed,
            max_mrs: 4,
            ..MrTableConfig::default()
        });
        let pd = t.alloc_pd();
        let mut out = Vec::new();
        for _ in 0..10 {
            let mr = t.reg_mr(pd, 0, 1, ALL).unwrap();
            out.push(mr.lkey().0);
            t.dereg_mr(mr.lkey()).unwrap();
        }
        out
    };
    let a = keys(1);
    assert_eq!(a, keys(1));
    assert_ne!(a, keys(2));
    let idx: Vec<u32> = a.iter().map(|k| k >> 8).collect();
    assert_eq!(idx, [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]);
}

#[test]
fn remote_write_and_read() {
    let (t, pd) = table();
    let mr = t
        .reg_mr(
            pd,
            0xdead_0000,
            32,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
    let rk = mr.rkey();
    t.write_remote(pd, rk, 0xdead_0010, b"hello").unwrap();
    let mut b = [0u8; 5];
    mr.read(0xdead_0010, &mut b).unwrap();
    assert_eq!(&b, b"hello");
    assert!(matches!(
        t.read_remote(pd, rk, 0xdead_0010, &mut b),
        Err(MemError::AccessDenied {
            need: Access::REMOTE_READ,
            ..
        })
    ));
    // Out of range by one byte: nothing is written.
    assert!(matches!(
        t.write_remote(pd, rk, 0xdead_001c, &[0xff; 5]),
        Err(MemError::OutOfRange { .. })
    ));
    mr.with_bytes(|bytes| assert!(bytes[0x1c..].iter().all(|&x| x == 0)));
    // Zero-length write at the very end is in range and touches nothing.
    t.write_remote(pd, rk, 0xdead_0020, &[]).unwrap();

    let rd = t.reg_mr(pd, 0, 4, Access::REMOTE_READ).unwrap();
    rd.write(0, &[1, 2, 3, 4]).unwrap();
    let mut four = [0u8; 4];
    t.read_remote(pd, rd.rkey(), 0, &mut four).unwrap();
    assert_eq!(four, [1, 2, 3, 4]);
}

#[test]
fn atomics() {
    let (t, pd) = table();
    let mr = t
        .reg_mr(pd, 0x8000, 64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)
        .unwrap();
    let rk = mr.rkey();
    mr.write(0x8008, &5u64.to_ne_bytes()).unwrap();
    // Compare fails: value unchanged, original returned.
    assert_eq!(t.compare_swap(pd, rk, 0x8008, 4, 99), Ok(5));
    assert_eq!(t.fetch_add(pd, rk, 0x8008, 0), Ok(5));
    // Compare matches: swapped.
    assert_eq!(t.compare_swap(pd, rk, 0x8008, 5, 99), Ok(5));
    assert_eq!(t.fetch_add(pd, rk, 0x8008, 1), Ok(99));
    assert_eq!(t.fetch_add(pd, rk, 0x8008, u64::MAX), Ok(100)); // wraps to 99
    let mut b = [0u8; 8];
    mr.read(0x8008, &mut b).unwrap();
    assert_eq!(u64::from_ne_bytes(b), 99);
    // Host byte order: on a little-endian host the low byte comes first.
    if cfg!(target_endian = "little") {
        assert_eq!(b[0], 99);
    }
    assert_eq!(
        t.fetch_add(pd, rk, 0x8004, 1),
        Err(MemError::MisalignedAtomic { va: 0x8004 })
    );
    assert_eq!(
        t.compare_swap(pd, rk, 0x8001, 0, 0),
        Err(MemError::MisalignedAtomic { va: 0x8001 })
    );
    // Key checks come before alignment (rxe order).
    assert!(matches!(
        t.fetch_add(pd, Rkey(rk.0 ^ 1), 0x8004, 1),
        Err(MemError::KeyMismatch { .. })
    ));
    assert!(matches!(
        t.fetch_add(pd, rk, 0x803c, 1),
        Err(MemError::OutOfRange { len: 8, .. })
    ));
    let plain = t
        .reg_mr(pd, 0, 8, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    assert_eq!(
        t.fetch_add(pd, plain.rkey(), 0, 1),
        Err(MemError::AccessDenied {
            key: Key::Remote(plain.rkey()),
            need: Access::REMOTE_ATOMIC,
            have: Access::LOCAL_WRITE | Access::REMOTE_WRITE
        })
    );
}

#[test]
fn atomics_are_atomic_across_threads() {
    let (t, pd) = table();
    let mr = t.reg_mr(pd, 0, 8, ALL).unwrap();
    let t = Arc::new(t);
    let rk = mr.rkey();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let t = Arc::clone(&t);
            s.spawn(move || {
                for _ in 0..1000 {
                    t.fetch_add(pd, rk, 0, 1).unwrap();
                }
            });
        }
    });
    assert_eq!(t.fetch_add(pd, rk, 0, 0), Ok(4000));
}

#[test]
fn invalidate_refusals() {
    let (t, pd) = table();
    let pd2 = t.alloc_pd();
    let mr = t.reg_mr(pd, 0, 8, ALL).unwrap();
    let rk = mr.rkey();
    let bad = Rkey::new(rk.index(), rk.key().wrapping_sub(1));
    assert_eq!(
        t.invalidate(pd, bad),
        Err(MemError::KeyMismatch {
            asked: Key::Remote(bad),
            found: Key::Remote(rk)
        })
    );
    assert_eq!(
        t.invalidate(pd2, rk),
        Err(MemError::PdMismatch {
            key: Key::Remote(rk),
            asked: pd2,
            found: pd
        })
    );
    let none = Rkey::new(rk.index() + 7, 0);
    assert_eq!(
        t.invalidate(pd, none),
        Err(MemError::NoSuchMr {
            key: Key::Remote(none)
        })
    );
    assert!(mr.is_valid(), "refused invalidations change nothing");
    t.invalidate(pd, rk).unwrap();
    assert!(!mr.is_valid());
    t.invalidate(pd, rk).unwrap(); // idempotent
    assert!(matches!(
        t.compare_swap(pd, rk, 0, 0, 1),
        Err(MemError::MrInvalid { .. })
    ));
    // The application still owns its bytes; deregistration still works.
    mr.write(0, &[1]).unwrap();
    t.dereg_mr(mr.lkey()).unwrap();
}
