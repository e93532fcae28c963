//! Property tests of `Psn` arithmetic over the whole 24-bit space.

mod common;

use proptest::prelude::*;
use roce_emu::wire::Psn;

fn config() -> ProptestConfig {
    common::wire_gen::config("proptest-regressions/psn_props.txt")
}

// ---------------------------------------------------------------------------------------
// 5. PSN arithmetic over the whole 24-bit space (src/wire/psn.rs tests the window
//    0..2^23 of `add` then `diff`; these cover every u32 operand and the wrap)
// ---------------------------------------------------------------------------------------

const PSN_SPACE: u64 = 1 << 24;

fn arb_psn() -> impl Strategy<Value = Psn> {
    // Bias towards the wrap and the half-way points.
    prop_oneof![
        (0u32..=Psn::MASK),
        (Psn::MASK - 8..=Psn::MASK),
        (0u32..8),
        (Psn::HALF - 8..Psn::HALF + 8),
    ]
    .prop_map(Psn::new)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn psn_new_keeps_24_bits(v in any::<u32>()) {
        let p = Psn::new(v);
        prop_assert_eq!(p.value(), v & 0x00ff_ffff);
        prop_assert_eq!(Psn::new(p.value()), p);
    }

    #[test]
    fn psn_add_sub_are_modular(p in arb_psn(), n in any::<u32>(), m in any::<u32>()) {
        let a = u64::from(p.value());
        prop_assert_eq!(u64::from(p.add(n).value()), (a + u64::from(n)) % PSN_SPACE);
        prop_assert_eq!(
            u64::from(p.sub(n).value()),
            (a + PSN_SPACE - u64::from(n) % PSN_SPACE) % PSN_SPACE
        );
        prop_assert_eq!(p.add(n).sub(n), p);
        prop_assert_eq!(p.sub(n).add(n), p);
        prop_assert_eq!(p.add(n).add(m), p.add(n.wrapping_add(m)));
        prop_assert_eq!(p.add(n), p.sub(n.wrapping_neg()));
        // Adding the whole space is the identity.
        prop_assert_eq!(p.add(n).add(1 << 24), p.add(n));
    }

    /// `diff` is the unique representative of `a - b` mod 2^24 in -2^23..2^23.
    #[test]
    fn psn_diff_whole_range(a in arb_psn(), b in arb_psn()) {
        let d = a.diff(b);
        prop_assert!((-(Psn::HALF as i32)..Psn::HALF as i32).contains(&d));
        prop_assert_eq!(b.add(d as u32), a);
        let raw = (u64::from(a.value()) + PSN_SPACE - u64::from(b.value())) % PSN_SPACE;
        let want = if raw >= u64::from(Psn::HALF) {
            raw as i64 - PSN_SPACE as i64
        } else {
            raw as i64
        };
        prop_assert_eq!(i64::from(d), want);

        // Ordering: exactly one of before/equal/after, consistent with cmp_serial.
        let ord = a.cmp_serial(b);
        prop_assert_eq!(ord, d.cmp(&0));
        prop_assert_eq!(a.is_before(b), ord.is_lt());
        prop_assert_eq!(a.is_after(b), ord.is_gt());
        prop_assert_eq!(ord.is_eq(), a == b);
        // Antisymmetric except exactly half the space apart, where serial order is
        // undefined and both sides say "before" (as rxe's psn_compare does).
        if d == -(Psn::HALF as i32) {
            prop_assert_eq!(b.diff(a), d);
            prop_assert!(a.is_before(b) && b.is_before(a));
        } else {
            prop_assert_eq!(b.diff(a), -d);
            prop_assert_eq!(a.is_before(b), b.is_after(a));
        }
    }

    /// Across the wrap: `n` steps ahead (n < 2^23) is after, more than 2^23 is before.
    #[test]
    fn psn_order_across_wrap(p in arb_psn(), n in 1u32..Psn::HALF) {
        prop_assert!(p.add(n).is_after(p));
        prop_assert!(p.is_before(p.add(n)));
        prop_assert!(p.sub(n).is_before(p));
        prop_assert_eq!(p.add(Psn::HALF + n).diff(p), n as i32 - Psn::HALF as i32);
        prop_assert!(p.add(Psn::HALF + n).is_before(p));
    }
}
