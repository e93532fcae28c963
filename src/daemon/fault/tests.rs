use super::*;
use proptest::prelude::*;

fn rule(text: &str) -> Rule {
    match parse(text) {
        Ok(Command::Add(r)) => r,
        other => panic!("{text}: {other:?}"),
    }
}

fn error(text: &str) -> String {
    parse(text).expect_err(text).to_string()
}

#[test]
fn each_action_with_its_settings() {
    let r = rule("drop 5% in opcode=RC_SEND_ONLY qpn=0x11 seed=9");
    assert_eq!(r.action, Action::Drop);
    assert_eq!(r.percent, 5.0);
    assert_eq!(r.dir, Some(Dir::In));
    assert_eq!(r.opcode, Some(0x04));
    assert_eq!(r.qpn, Some(0x11));
    assert_eq!(r.seed, 9);

    assert_eq!(rule("duplicate 1%").action, Action::Duplicate);
    assert_eq!(rule("dup 1% out").dir, Some(Dir::Out));
    assert_eq!(rule("reorder 2%").action, Action::Reorder { depth: 4 });
    assert_eq!(
        rule("reorder 2% depth=8").action,
        Action::Reorder { depth: 8 }
    );
    let d = rule("delay 10ms 5%");
    assert_eq!(d.action, Action::Delay(Duration::from_millis(10)));
    assert_eq!(d.percent, 5.0);
    assert_eq!(
        rule("delay 1.5ms").percent,
        100.0,
        "the rate defaults to 100%"
    );
    assert_eq!(
        rule("delay 250us").action,
        Action::Delay(Duration::from_micros(250))
    );
    assert_eq!(rule("corrupt 0.5%").percent, 0.5);
    assert_eq!(parse("clear"), Ok(Command::Clear));
    assert_eq!(parse("  LIST "), Ok(Command::List));
}

#[test]
fn opcodes_by_name_or_number() {
    assert_eq!(rule("drop opcode=rc_acknowledge").opcode, Some(0x11));
    assert_eq!(
        rule("drop opcode=IB_OPCODE_RC_ACKNOWLEDGE").opcode,
        Some(0x11)
    );
    assert_eq!(rule("drop opcode=17").opcode, Some(17));
    assert_eq!(rule("drop op=0x0a").opcode, Some(0x0a));
}

#[test]
fn errors_name_what_to_fix() {
    let cases = [
        ("", "empty rule"),
        ("explode 5%", "no action `explode`"),
        ("drop 5", "unknown word `5`"),
        ("drop 150%", "not between 0% and 100%"),
        ("drop x%", "not a number"),
        ("drop 5% 6%", "two rates"),
        ("drop in out", "two directions"),
        (
            "drop opcode=RC_SEND_NEVER",
            "no opcode named `RC_SEND_NEVER`",
        ),
        ("drop opcode=300", "over 255"),
        ("drop qpn=0x1000000", "over 24 bits"),
        ("drop qpn=abc", "qpn=abc is not a number"),
        ("drop depth=3", "for reorder rules only"),
        ("reorder depth=0", "give 1 to"),
        ("delay", "needs a time first"),
        ("delay 5%", "`5%` is not a time"),
        ("delay 1e300s", "longer than"),
        ("drop 10ms", "for delay rules only"),
        ("drop color=red", "unknown setting `color=`"),
        ("clear now", "takes nothing after it"),
    ];
    for (text, want) in cases {
        let e = error(text);
        assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
    }
    assert!(error(&"drop ".repeat(200)).contains("at most"));
}

fn arb_rule() -> impl Strategy<Value = Rule> {
    let action = prop_oneof![
        Just(Action::Drop),
        Just(Action::Duplicate),
        Just(Action::Corrupt),
        (1u32..=1024).prop_map(|depth| Action::Reorder { depth }),
        (0u64..10_000_000).prop_map(|us| Action::Delay(Duration::from_micros(us))),
    ];
    (
        action,
        0.0f64..=100.0,
        prop::option::of(prop_oneof![Just(Dir::In), Just(Dir::Out)]),
        prop::option::of(any::<u8>()),
        prop::option::of(0u32..=0x00ff_ffff),
        any::<u64>(),
    )
        .prop_map(|(action, percent, dir, opcode, qpn, seed)| Rule {
            action,
            percent,
            dir,
            opcode,
            qpn,
            seed,
        })
}

proptest! {
    /// What `list` shows reads back as the same rule (seed included).
    #[test]
    fn display_parses_back_to_the_rule(r in arb_rule()) {
        let text = r.to_string();
        prop_assert_eq!(parse(&text), Ok(Command::Add(r)), "{}", text);
    }

    /// Any text: a rule or an error message, never a panic.
    #[test]
    fn any_text_is_a_rule_or_an_error(s in "\\PC{0,80}") {
        let _ = parse(&s);
    }

    /// Words of the syntax in any order and number: never a panic.
    #[test]
    fn syntax_words_in_any_order(words in prop::collection::vec(prop_oneof![
        Just("drop"), Just("delay"), Just("reorder"), Just("5%"), Just("in"), Just("out"),
        Just("10ms"), Just("depth=3"), Just("seed=1"), Just("qpn=7"), Just("opcode=4"),
        Just("clear"), Just("1e400%"), Just("-3%"), Just("NaN%"),
    ], 0..8)) {
        let _ = parse(&words.join(" "));
    }
}
