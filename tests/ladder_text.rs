//! The terminal ladder (`ladder::text`) and `roce-emu ladder`.
//!
//! Golden outputs: a hand-built ladder with every kind of row (packets both ways, a lost
//! one each way, a coalesced ACK, a sequence NAK and the go-back-N after it, READ responses
//! covering their request, an RNR NAK, its wait and the retransmission, an ACK timeout,
//! a duplicate, PSN gaps, one wrapping past 2^24, CE, BECN, a bad ICRC, a CM exchange, a
//! UD flow between IPv6 addresses, a UC flow with an unknown QPN) drawn at 80 and 120
//! columns, Unicode and ASCII, and in colour, against the files in tests/data/ladder/.
//! After a deliberate change to the drawing, regenerate them with
//!
//!     LADDER_GOLDEN=write cargo test --test ladder_text
//!
//! and read the diff (`git diff tests/data/ladder`) before committing it.
//!
//! Also: every line fits the width at every width from 60 to 130 columns; ASCII output is
//! ASCII; colour output is the plain output plus escapes; 10,000 packets draw well under
//! a second; the tool's argument errors are clear; the tool end to end on real rxe
//! captures.

#[path = "ladder_text/sample.rs"]
mod sample;

use roce_emu::ladder::model::Ladder;
use roce_emu::ladder::text::{self, TextOpts};
use sample::{big, sample};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_roce-emu");

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ladder")
}

/// Compares `got` with the golden file `name`, or writes it with LADDER_GOLDEN=write.
fn golden(name: &str, got: &str) {
    let path = golden_dir().join(name);
    if std::env::var("LADDER_GOLDEN").as_deref() == Ok("write") {
        std::fs::create_dir_all(golden_dir()).unwrap();
        std::fs::write(&path, got).unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; write it with LADDER_GOLDEN=write cargo test --test ladder_text",
            path.display()
        )
    });
    if want != got {
        let first = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(got.lines().count()));
        panic!(
            "{} differs from the drawing, first at line {}:\nwant: {:?}\ngot:  {:?}\n\
             whole drawing:\n{got}\n(if the change is meant: LADDER_GOLDEN=write cargo test \
             --test ladder_text, then read git diff tests/data/ladder)",
            path.display(),
            first + 1,
            want.lines().nth(first),
            got.lines().nth(first)
        );
    }
}

/// The text without ANSI SGR escapes.
fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\x1b' && it.peek() == Some(&'[') {
            for d in it.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn opts(width: usize, ascii: bool, color: bool) -> TextOpts {
    TextOpts {
        width,
        color,
        ascii,
    }
}

#[test]
fn golden_plain_80_and_120_unicode_and_ascii() {
    let l = sample();
    for width in [80, 120] {
        for ascii in [false, true] {
            let got = text::render(&l, &opts(width, ascii, false));
            assert!(!got.contains('\x1b'), "plain output has escapes");
            let kind = if ascii { "ascii" } else { "unicode" };
            golden(&format!("sample_{width}_{kind}.txt"), &got);
        }
    }
}

#[test]
fn golden_color_is_plain_plus_escapes() {
    let l = sample();
    for width in [80, 120] {
        for ascii in [false, true] {
            let plain = text::render(&l, &opts(width, ascii, false));
            let color = text::render(&l, &opts(width, ascii, true));
            assert!(color.contains("\x1b[") && color.contains("\x1b[0m"));
            assert_eq!(strip_ansi(&color), plain, "width {width} ascii {ascii}");
        }
    }
    golden(
        "sample_120_unicode_color.txt",
        &text::render(&l, &opts(120, false, true)),
    );
}

#[test]
fn every_line_fits_every_width() {
    let l = sample();
    for width in 60..=130 {
        for ascii in [false, true] {
            for color in [false, true] {
                let s = text::render(&l, &opts(width, ascii, color));
                for (i, line) in strip_ansi(&s).lines().enumerate() {
                    let n = line.chars().count();
                    assert!(
                        n <= width,
                        "width {width} ascii {ascii}: line {} has {n} columns: {line:?}",
                        i + 1
                    );
                }
            }
        }
    }
    // Narrower than the least is drawn at the least.
    let s = text::render(&l, &opts(20, false, false));
    assert!(s.lines().all(|l| l.chars().count() <= text::MIN_WIDTH));
}

#[test]
fn ascii_is_ascii_and_unicode_is_not() {
    let l = sample();
    for width in [60, 80, 120] {
        let s = text::render(&l, &opts(width, true, false));
        assert!(s.is_ascii(), "{s}");
        let u = text::render(&l, &opts(width, false, false));
        assert!(!u.is_ascii());
    }
}

/// Each row kind says what it is, in full at 120 columns.
#[test]
fn rows_say_what_happened() {
    let s = text::render(&sample(), &opts(120, false, false));
    for want in [
        "10.0.0.1 QP 0x11",
        "10.0.0.2 QP 0x12",
        "┌ requester",
        "responder ┐",
        "NAK psn=102 PSN-sequence-error msn=0",
        "↻ after NAK #5",
        "covers 100-103",
        "RNR NAK 1.28ms",
        "┃ RNR wait 1.28 ms",
        "┃ waited 1.300 ms",
        "┃ ACK timeout",
        "↻ after RNR #14",
        "↻ timeout dup",
        "… PSN 108-110 never seen",
        "… PSN 16777214-1 never seen",
        "… PSN 111 never seen",
        "covers 112 of #22",
        "RDMA_READ_RESPONSE_FIRST psn=104 len=1024 msn=1 credits=31 covers 104 of #9",
        "NAK rem-access",
        "imm=0xdeadbeef",
        "bad ICRC",
        "CE",
        "BECN",
        "CM REQ lcid=0x47d0da68",
        "CM DREP",
        "fd00:1234:5678:9abc:def0:1234:5678:9abc QP 0x11",
        "QP ?",
        "══ CM",
    ] {
        assert!(s.contains(want), "no {want:?} in\n{s}");
    }
    // Arrows point the way their packet went; lost ones end in a cross.
    let line = |frame: &str| {
        s.lines()
            .find(|l| l.contains(&format!(" {frame} ")))
            .unwrap_or_else(|| panic!("no frame {frame}"))
    };
    assert!(
        line("#1").contains("├─ RDMA_WRITE_FIRST psn=100 len=1024") && line("#1").ends_with(">│")
    );
    assert!(line("#5").ends_with("─┤") && line("#5").contains("│<"));
    assert!(line("#3").contains("✗") && !line("#3").contains(">"));
    assert!(line("#16").contains("✗") && !line("#16").contains("<"));
    assert!(line("#6").contains("╌"), "a retransmission is dashed");
}

/// At 80 columns long labels are shortened, keeping the PSN and the notes.
#[test]
fn narrow_lines_shorten_labels() {
    let s = text::render(&sample(), &opts(80, false, false));
    let l12 = s.lines().find(|l| l.contains(" #12 ")).unwrap();
    assert!(l12.contains("READ_RESP_LAST"), "{l12}");
    assert!(l12.contains("↻NAK#123456"), "{l12}");
    let l10 = s.lines().find(|l| l.contains(" #10 ")).unwrap();
    assert!(
        l10.contains("READ_RESP_FIRST psn=104 len=1024 msn=1 cov 104 "),
        "{l10}"
    );
    let req = s.lines().find(|l| l.contains(" #24 ")).unwrap();
    assert!(req.contains("CM REQ") && req.contains('…'), "{req}");
}

/// `row` and `flow_header` (live drawing) give what `render` gives, row by row.
#[test]
fn live_pieces_make_the_whole() {
    let l = sample();
    let o = opts(100, false, true);
    let mut pieces = String::new();
    for (i, f) in l.flows.iter().enumerate() {
        if i > 0 {
            pieces.push('\n');
        }
        pieces.push_str(&text::flow_header(f, &o));
        for r in &f.rows {
            let one = text::row(f, r, &o);
            assert!(one.ends_with('\n'));
            pieces.push_str(&one);
        }
    }
    assert_eq!(pieces, text::render(&l, &o));
    assert_eq!(text::render(&Ladder::default(), &o), "");
}

#[test]
fn ten_thousand_packets_draw_well_under_a_second() {
    let l = big(10_000);
    for o in [opts(120, false, true), opts(80, true, false)] {
        // The best of three: the machine is shared (other tests, other builds).
        let mut took = Duration::MAX;
        let mut s = String::new();
        for _ in 0..3 {
            let t0 = Instant::now();
            s = text::render(&l, &o);
            took = took.min(t0.elapsed());
        }
        let lines = s.lines().count();
        println!(
            "10000 packets at {} columns (ascii {}, colour {}): {lines} lines, {} bytes in {:.1} ms (best of 3)",
            o.width,
            o.ascii,
            o.color,
            s.len(),
            took.as_secs_f64() * 1e3
        );
        assert!(lines > 10_000);
        assert!(took < Duration::from_secs(1), "took {took:?}");
    }
}

// The tool.

/// `roce-emu ladder ARGS`, waited for at most 60 s.
fn tool(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("ladder")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("NO_COLOR")
        .env_remove("COLUMNS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run roce-emu ladder");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("roce-emu ladder {args:?} still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn data(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
        .display()
        .to_string()
}

fn err_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn tool_argument_errors_are_clear() {
    let cap = data("rc_pingpong_s64.pcap");
    let cap = cap.as_str();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--width", "30"],
            "\"30\" is not a width: a number of columns from 60 to 1000",
        ),
        (&["--width", "wide"], "is not a width"),
        (
            &["--qp", "0x1000000"],
            "\"0x1000000\" is not a QPN: a number below 16777216",
        ),
        (&["--qp", "seven"], "is not a QPN"),
        (&["--psn", "5-x"], "\"5-x\" is not a PSN range: A-B or A"),
        (&["--psn", "16777216"], "is not a PSN range"),
        (&["--from=-1"], "\"-1\" is not a time"),
        (&["--to", "soon"], "is not a time"),
        (&["--color", "sometimes"], "sometimes"),
        (
            &["--from", "2", "--to", "1.5"],
            "--from 2s is after --to 1.5s",
        ),
    ];
    for (args, want) in cases {
        let mut a: Vec<&str> = args.to_vec();
        a.push(cap);
        let o = tool(&a, &[]);
        let e = err_of(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(want), "{args:?}: want {want:?} in {e}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    let o = tool(&["/nonexistent/x.pcap"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err_of(&o).contains("cannot read /nonexistent/x.pcap"),
        "{}",
        err_of(&o)
    );
    let empty = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ladder_empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let o = tool(&[empty.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err_of(&o).contains("is empty: no pcap header"),
        "{}",
        err_of(&o)
    );
    // Good values parse: units, hex, one PSN.
    let o = tool(
        &[
            "--from", "250ms", "--to", "3s", "--qp", "0x11", "--psn", "7", "--width", "60", cap,
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", err_of(&o));
}

/// The builder and the sources are h-build's; until they are in this tree the tool
/// draws nothing, and this test says so.
fn source_is_stub() -> bool {
    include_str!("../src/ladder/source.rs").contains("STUB")
}

#[test]
fn tool_on_real_captures() {
    for (cap, wants) in [
        ("rc_pingpong_loss_seqnak.pcap", &["NAK", "after NAK"][..]),
        ("send_bw_rnr.pcap", &["RNR", "RNR wait", "after RNR"][..]),
        ("read_bw_s2048.pcap", &["READ_RE", "covers"][..]),
        ("rping_cm_s64.pcap", &["REQ", "REP", "RTU"][..]),
    ] {
        let file = data(cap);
        for width in ["80", "120"] {
            for ascii in [false, true] {
                let mut args = vec!["--width", width, file.as_str()];
                if ascii {
                    args.push("--ascii");
                }
                let o = tool(&args, &[]);
                let out = String::from_utf8_lossy(&o.stdout);
                assert_eq!(o.status.code(), Some(0), "{cap}: {}", err_of(&o));
                assert!(err_of(&o).contains(" frames, "), "{}", err_of(&o));
                if !source_is_stub() {
                    assert!(!err_of(&o).contains(" 1 flows"), "{}", err_of(&o));
                }
                assert!(!out.contains('\x1b'), "piped output has no escapes");
                let w: usize = width.parse().unwrap();
                for line in out.lines() {
                    assert!(line.chars().count() <= w, "{cap} at {w}: {line:?}");
                }
                if ascii {
                    assert!(out.is_ascii());
                }
                // In full at 120 columns (at 80 the notes may be compact).
                if source_is_stub() || width != "120" {
                    continue;
                }
                for want in wants {
                    assert!(out.contains(want), "{cap}: no {want:?} in\n{out}");
                }
            }
        }
    }
    if source_is_stub() {
        eprintln!(
            "SKIPPED (in part): src/ladder/source.rs is still the stub, so the captures' \
             ladders are empty; their contents are checked once h-build's source is merged"
        );
    }
}

/// The filters and standard input, end to end (the filtering itself is the builder's,
/// `Ladder::filtered`, tested in tests/ladder_build.rs).
#[test]
fn tool_filters_and_stdin() {
    if source_is_stub() {
        eprintln!("SKIPPED: src/ladder/source.rs is still the stub (no packets to filter)");
        return;
    }
    let cap = data("rc_pingpong_loss_seqnak.pcap");
    let cap = cap.as_str();
    let all = tool(&[cap], &[]);
    let all_out = String::from_utf8_lossy(&all.stdout).into_owned();
    assert!(all_out.contains("psn=1142948") && all_out.contains("psn=4796633"));
    let o = tool(&["--psn", "4796632-4796636", cap], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", err_of(&o));
    assert!(
        out.contains("psn=4796633") && !out.contains("psn=1142948"),
        "{out}"
    );
    assert!(
        err_of(&o).contains("drawn after the filters"),
        "{}",
        err_of(&o)
    );
    let o = tool(&["--qp", "0x99", cap], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty());
    assert!(
        err_of(&o).contains(", 0 drawn after the filters"),
        "{}",
        err_of(&o)
    );
    let o = tool(&["--from", "50ms", "--to", "0.06", cap], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(" #17 ") && !out.contains(" #11 ") && !out.contains(" #21 "),
        "{out}"
    );
    // `-`: the same drawing from standard input.
    let mut child = Command::new(BIN)
        .args(["ladder", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("NO_COLOR")
        .env_remove("COLUMNS")
        .spawn()
        .unwrap();
    let bytes = std::fs::read(cap).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(&bytes);
    });
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), all_out);
    assert!(err_of(&o).starts_with("standard input: "), "{}", err_of(&o));
}

#[test]
fn tool_color_only_when_asked() {
    let cap = data("rc_pingpong_s64.pcap");
    let cap = cap.as_str();
    // Piped: none, whatever NO_COLOR says; `always` colours even with NO_COLOR set.
    let o = tool(&[cap], &[]);
    assert!(!o.stdout.contains(&0x1b));
    let o = tool(&["--color", "never", cap], &[]);
    assert!(!o.stdout.contains(&0x1b));
    if !source_is_stub() {
        let o = tool(&["--color", "always", cap], &[("NO_COLOR", "1")]);
        assert!(o.stdout.contains(&0x1b), "--color always has escapes");
    }
    use roce_emu::cli::ladder::{default_width, use_color, ColorWhen};
    use std::ffi::OsStr;
    assert!(use_color(ColorWhen::Auto, true, None));
    assert!(use_color(ColorWhen::Auto, true, Some(OsStr::new(""))));
    assert!(!use_color(ColorWhen::Auto, true, Some(OsStr::new("1"))));
    assert!(!use_color(ColorWhen::Auto, false, None));
    assert!(use_color(ColorWhen::Always, false, Some(OsStr::new("1"))));
    assert!(!use_color(ColorWhen::Never, true, None));
    assert_eq!(default_width(false, Some("80"), || Some(90)), 100);
    assert_eq!(default_width(true, Some("132"), || Some(90)), 132);
    assert_eq!(default_width(true, Some("x"), || Some(90)), 90);
    assert_eq!(default_width(true, None, || None), 100);
    assert_eq!(default_width(true, Some("20"), || None), 60);
}

#[test]
fn tool_writes_the_page() {
    let cap = data("rc_pingpong_s64.pcap");
    let cap = cap.as_str();
    let page = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ladder_page.html");
    let _ = std::fs::remove_file(&page);
    let o = tool(&["--html", page.to_str().unwrap(), cap], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", err_of(&o));
    let html = std::fs::read_to_string(&page).expect("the page is written");
    assert!(html.contains("<"), "{html}");
    let o = tool(&["--html", "/nonexistent/dir/p.html", cap], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err_of(&o).contains("cannot write /nonexistent/dir/p.html"),
        "{}",
        err_of(&o)
    );
}

/// On a terminal (a pseudo-terminal from util-linux's `script`): colour by default, the
/// width from COLUMNS, none with NO_COLOR.
#[test]
fn tool_on_a_terminal() {
    let have_script = Command::new("script")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have_script {
        eprintln!("SKIPPED: no `script` (util-linux) to give the tool a terminal");
        return;
    }
    if source_is_stub() {
        eprintln!("SKIPPED: src/ladder/source.rs is still the stub (nothing to draw)");
        return;
    }
    let cap = data("rc_pingpong_loss_seqnak.pcap");
    let run = |no_color: bool| {
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &format!("{BIN} ladder {cap}"), "/dev/null"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("COLUMNS", "90")
            .env_remove("NO_COLOR");
        if no_color {
            cmd.env("NO_COLOR", "1");
        }
        let o = cmd.output().expect("script");
        assert!(o.status.success(), "{}", err_of(&o));
        String::from_utf8_lossy(&o.stdout).replace("\r\n", "\n")
    };
    let colour = run(false);
    assert!(colour.contains("\x1b["), "{colour}");
    let drawing: Vec<String> = strip_ansi(&colour)
        .lines()
        .filter(|l| !l.starts_with(&cap))
        .map(str::to_string)
        .collect();
    assert!(drawing.len() > 40, "{colour}");
    assert!(
        drawing.iter().any(|l| l.chars().count() == 90),
        "{drawing:#?}"
    );
    assert!(
        drawing.iter().all(|l| l.chars().count() <= 90),
        "{drawing:#?}"
    );
    let plain = run(true);
    assert!(!plain.contains("\x1b["), "NO_COLOR: {plain}");
}
