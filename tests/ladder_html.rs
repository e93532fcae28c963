//! The ladder's HTML page (`roce-emu ladder --html`, `roce_emu::ladder::html::page`):
//!
//! - parsed as XML (roxmltree): one `<g class="pkt">` arrow per packet, in order, with its
//!   `data-frame`, `data-psn`, `data-opcode`, `data-from`, `data-fate`, its label as text,
//!   a `<title>` holding every field under Wireshark's name, dashed retransmissions, a
//!   cross on dropped packets, a bracket on what an ACK covers, gap and wait rows;
//! - self-contained: nothing that loads anything (no `src`/`href` but `data:` and `#`, no
//!   `http:`/`https:` URL, no `<link>`, `<img>`, `@import`), and a Content-Security-Policy
//!   that forbids every load;
//! - escaped: a label, a CM summary, a field value and the title with `<&>"'` and a
//!   `<script>` in them stay text;
//! - in a real browser (Debian's headless Chromium, installed here when missing and
//!   running as root with apt-get; CI installs it too): a screenshot that is not blank,
//!   with a coloured stroke where each arrow crosses the requester's side, saved as
//!   `target/tmp/ladder_html/ladder.png`; and the DOM after the script ran
//!   (`--dump-dom`) holding one arrow per packet with the right labels.
//!
//! Without Chromium (and no way to install it) that test prints SKIPPED loudly and
//! passes, unless `CI` is set, where it fails.

use roce_emu::ladder::html::page;
use roce_emu::ladder::model::{Aeth, Fate, Flow, FlowKind, Ladder, Packet, Row, Side, Stats};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[path = "common/browser.rs"]
mod browser;
use browser::{decode_png, dom_arrows, find_or_install_chromium, run_chromium, skip};

#[path = "common/ladder_sample.rs"]
mod ladder_sample;
use ladder_sample::{ack, ep, req, row, sample, NASTY};

/// What an arrow shows of a label: the page cuts one longer than 62 characters.
fn shown(label: &str) -> String {
    if label.chars().count() <= 62 {
        return label.to_string();
    }
    let mut s: String = label.chars().take(61).collect();
    s.push('\u{2026}');
    s
}

/// Every packet of the ladder, in drawing order.
fn packets(l: &Ladder) -> Vec<&Packet> {
    l.flows
        .iter()
        .flat_map(|f| f.rows.iter())
        .filter_map(|r| match r {
            Row::Packet(p) => Some(&**p),
            _ => None,
        })
        .collect()
}

fn parse(html: &str) -> roxmltree::Document<'_> {
    let opt = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    roxmltree::Document::parse_with_options(html, opt)
        .unwrap_or_else(|e| panic!("the page is not well-formed XML: {e}"))
}

fn has_class(n: &roxmltree::Node, c: &str) -> bool {
    n.attribute("class")
        .is_some_and(|v| v.split_whitespace().any(|t| t == c))
}

fn child_with_class<'a, 'i>(
    n: roxmltree::Node<'a, 'i>,
    tag: &str,
    c: &str,
) -> Option<roxmltree::Node<'a, 'i>> {
    n.children()
        .find(|k| k.tag_name().name() == tag && has_class(k, c))
}

fn side(s: Side) -> &'static str {
    match s {
        Side::Requester => "requester",
        Side::Responder => "responder",
    }
}

#[test]
fn one_arrow_per_packet_with_its_label_fields_and_marks() {
    let l = sample();
    let html = page(&l, "sample ladder");
    let doc = parse(&html);
    let arrows: Vec<_> = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "g" && has_class(n, "pkt"))
        .collect();
    let want = packets(&l);
    assert_eq!(arrows.len(), want.len(), "one arrow per packet");
    for (g, p) in arrows.iter().zip(&want) {
        let at = |a: &str| g.attribute(a).unwrap_or_else(|| panic!("no {a} on {p:?}"));
        assert_eq!(at("data-frame"), p.frame.to_string());
        assert_eq!(at("data-psn"), p.psn.to_string());
        assert_eq!(at("data-opcode"), p.opcode.to_string());
        assert_eq!(at("data-from"), side(p.from));
        let dropped = p.fate == Fate::Dropped;
        assert_eq!(
            at("data-fate"),
            if dropped { "dropped" } else { "delivered" }
        );
        let lbl = child_with_class(*g, "text", "lbl").expect("a label");
        assert_eq!(lbl.text(), Some(&*shown(&p.label)), "frame {}", p.frame);
        assert_eq!(at("data-label"), p.label);
        // Every field, by Wireshark's name, in the no-JS tooltip.
        let title = g
            .children()
            .find(|k| k.tag_name().name() == "title")
            .and_then(|t| t.text())
            .expect("a <title>");
        for fl in &p.fields {
            let line = format!("{} = {}", fl.name, fl.value);
            assert!(
                title.lines().any(|l| l == line),
                "frame {}: {line:?} not in {title:?}",
                p.frame
            );
        }
        assert!(title.contains(&p.label));
        // Retransmissions dashed (the class) and said so; dropped ones end in a cross.
        assert_eq!(has_class(g, "retx"), p.retransmit.is_some(), "{}", p.frame);
        if p.retransmit.is_some() {
            assert!(title.contains("retransmitted after"), "{title}");
        }
        assert_eq!(
            child_with_class(*g, "path", "cross").is_some(),
            dropped,
            "frame {}",
            p.frame
        );
        assert_eq!(
            child_with_class(*g, "polygon", "head").is_some(),
            !dropped,
            "frame {}",
            p.frame
        );
        assert!(child_with_class(*g, "line", "arrow").is_some());
    }
    // What the ACKs and the READ response cover: a bracket with a tick per request seen.
    let bracket = |frame: &str| {
        let g = arrows
            .iter()
            .find(|g| g.attribute("data-frame") == Some(frame))
            .unwrap();
        child_with_class(*g, "path", "covers")
            .and_then(|p| p.attribute("d"))
            .map(|d| d.matches('M').count())
    };
    // Frame 9 covers PSNs 100-102: their latest copies (frames 3, 7, 8) get ticks.
    assert_eq!(bracket("9"), Some(1 + 3));
    assert_eq!(bracket("13"), Some(1 + 1));
    assert_eq!(bracket("15"), Some(1 + 1));
    // One bracket per READ request, on its first response (frame 16 answers 14 too).
    assert_eq!(bracket("16"), None);
    assert_eq!(bracket("3"), None);
    // The gap and the two timers.
    let gaps: Vec<_> = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "g" && has_class(n, "gap"))
        .collect();
    assert_eq!(gaps.len(), 1);
    assert_eq!(gaps[0].attribute("data-first-psn"), Some("104"));
    assert_eq!(gaps[0].attribute("data-count"), Some("2"));
    let waits: Vec<_> = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "g" && has_class(n, "wait"))
        .collect();
    assert_eq!(waits.len(), 2);
    assert!(has_class(&waits[0], "rnr") && has_class(&waits[1], "timeout"));
    for w in &waits {
        let h: f64 = w
            .descendants()
            .find(|n| n.tag_name().name() == "rect")
            .and_then(|r| r.attribute("height"))
            .unwrap()
            .parse()
            .unwrap();
        assert!(h >= 20.0, "a wait's bar spans rows: {h}");
    }
    let rnr_title = waits[0]
        .children()
        .find(|k| k.tag_name().name() == "title")
        .and_then(|t| t.text())
        .unwrap();
    assert!(
        rnr_title.contains("timer 12 means 0.64 ms (IBA Table 45)"),
        "{rnr_title}"
    );
    // One section (and one diagram) per flow.
    let flows: Vec<_> = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "section" && has_class(n, "flow"))
        .collect();
    assert_eq!(flows.len(), 2);
    assert_eq!(flows[1].attribute("data-kind"), Some("cm"));
}

#[test]
fn the_page_loads_nothing() {
    let html = page(&sample(), "sample");
    for bad in [
        "http:", "https:", "ftp:", "file:", "@import", "<link", "<img", "<iframe",
    ] {
        assert!(
            !html.to_ascii_lowercase().contains(bad),
            "the page holds {bad:?}"
        );
    }
    let doc = parse(&html);
    for n in doc.descendants().filter(|n| n.is_element()) {
        for a in n.attributes() {
            let name = a.name().to_ascii_lowercase();
            if name == "src" || name == "href" || name.ends_with(":href") {
                let v = a.value();
                assert!(
                    v.starts_with('#') || v.starts_with("data:"),
                    "<{}> loads {v:?}",
                    n.tag_name().name()
                );
            }
        }
        assert!(
            !matches!(
                n.tag_name().name(),
                "link" | "img" | "iframe" | "object" | "embed" | "image" | "use"
            ),
            "a <{}> element",
            n.tag_name().name()
        );
    }
    let css: String = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "style")
        .filter_map(|n| n.text())
        .collect();
    assert!(!css.contains("url("), "CSS loads nothing");
    let csp = doc
        .descendants()
        .find(|n| n.attribute("http-equiv") == Some("Content-Security-Policy"))
        .and_then(|n| n.attribute("content"))
        .expect("a Content-Security-Policy");
    assert!(csp.contains("default-src 'none'"), "{csp}");
}

#[test]
fn every_string_is_escaped() {
    let title = "a <b>&amp;</b> \"t\"";
    let html = page(&sample(), title);
    // Never raw in the markup...
    assert!(!html.contains("<&>"));
    assert!(!html.contains("<x&y>"));
    assert!(!html.contains("<b>"));
    assert!(html.contains("&lt;&amp;&gt;"));
    // ...and the same text once parsed: labels, CM summaries, fields, the title.
    let doc = parse(&html);
    let scripts = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "script")
        .count();
    assert_eq!(scripts, 1, "only the page's own script");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| has_class(n, "lbl"))
        .filter_map(|n| n.text())
        .collect();
    assert!(texts.contains(&NASTY), "{texts:?}");
    let all: String = doc
        .descendants()
        .filter(|n| n.is_text())
        .filter_map(|n| n.text())
        .collect();
    assert!(all.contains("infiniband.immdt = <&>\"'"));
    assert!(all.contains("REQ lcid=0x1 sid=0x0000000001060000 <x&y>"));
    let h1 = doc
        .descendants()
        .find(|n| n.tag_name().name() == "h1")
        .and_then(|n| n.text());
    assert_eq!(h1, Some(title));
    // Control characters (not allowed in XML) become U+FFFD, and the page still parses.
    let mut l = sample();
    if let Row::Packet(p) = &mut l.flows[0].rows[0] {
        p.label = "bell \u{7} nul \u{0} esc \u{1b}".into();
    }
    let html = page(&l, "ctl");
    let doc = parse(&html);
    let lbl = doc.descendants().find(|n| has_class(n, "lbl")).unwrap();
    assert_eq!(lbl.text(), Some("bell \u{fffd} nul \u{fffd} esc \u{fffd}"));
}

#[test]
fn an_empty_ladder_is_a_page_too() {
    let html = page(&Ladder::default(), "nothing");
    let doc = parse(&html);
    assert!(html.contains("No RoCE packets."));
    assert_eq!(doc.descendants().filter(|n| has_class(n, "pkt")).count(), 0);
}

#[test]
fn thousands_of_packets_draw_fast() {
    let rows: Vec<Row> = (0..10_000u32)
        .map(|i| {
            if i % 4 == 3 {
                row(ack(
                    i as usize + 1,
                    i - 1,
                    Aeth::Ack {
                        credits: 31,
                        msn: i,
                    },
                    Some((i - 3, i - 1)),
                ))
            } else {
                row(req(i as usize + 1, "RDMA_WRITE_MIDDLE", 0x07, i))
            }
        })
        .collect();
    let l = Ladder {
        flows: vec![Flow {
            kind: FlowKind::Rc,
            requester: ep(1, 0x11),
            responder: ep(2, 0x12),
            rows,
        }],
        stats: Stats::default(),
    };
    let t = Instant::now();
    let html = page(&l, "big");
    let took = t.elapsed();
    eprintln!(
        "10000 packets: {} bytes in {:?} ({} bytes a packet)",
        html.len(),
        took,
        html.len() / 10_000
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(html.matches("class=\"pkt ").count(), 10_000);
}

// ---- the real browser ----

/// The page's x of the requester's column: the diagram starts 10 px from the left
/// (`main`'s padding, `body` has no margin) and the column is at x = 190 in it.
const REQUESTER_X: usize = 10 + 190;

#[test]
fn a_real_browser_draws_the_page() {
    let bin = match find_or_install_chromium() {
        Ok(b) => b,
        Err(why) => return skip(&why),
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ladder_html");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let l = sample();
    let html_path = dir.join("ladder.html");
    std::fs::write(&html_path, page(&l, "ladder_html: the sample ladder")).unwrap();
    let url = format!("file://{}", html_path.display());
    let png_path = dir.join("ladder.png");
    let profile = dir.join("profile");

    // The screenshot: not blank, and a coloured stroke where each arrow crosses the
    // requester's side (just right of its column, where nothing else is coloured).
    run_chromium(
        &bin,
        &profile,
        &[&format!("--screenshot={}", png_path.display())],
        &url,
    );
    println!("ladder_html: screenshot {}", png_path.display());
    eprintln!("ladder_html: screenshot {}", png_path.display());
    let (w, h, px) = decode_png(&png_path);
    assert_eq!((w, h), (1400, 2000), "the window's size");
    let lum = |p: &[u8; 3]| (p[0] as u32 * 299 + p[1] as u32 * 587 + p[2] as u32 * 114) / 1000;
    let first = px[0];
    assert!(
        px.iter().any(|p| *p != first),
        "the screenshot is one colour"
    );
    let dark = px.iter().filter(|p| lum(p) < 100).count();
    assert!(dark > 2_000, "only {dark} dark pixels");
    let coloured = |p: &[u8; 3]| {
        let (mx, mn) = (*p.iter().max().unwrap(), *p.iter().min().unwrap());
        mx - mn > 50 && lum(p) < 200
    };
    let mut runs: Vec<(usize, usize, u32)> = Vec::new(); // (first y, last y, darkest)
    for y in 0..h {
        let on: Vec<&[u8; 3]> = (REQUESTER_X + 11..=REQUESTER_X + 14)
            .map(|x| &px[y * w + x])
            .filter(|p| coloured(p))
            .collect();
        if on.is_empty() {
            continue;
        }
        let d = on.iter().map(|p| lum(p)).min().unwrap();
        match runs.last_mut() {
            Some(r) if r.1 + 1 == y => {
                r.1 = y;
                r.2 = r.2.min(d);
            }
            _ => runs.push((y, y, d)),
        }
    }
    // Every packet the requester sent starts there; every delivered one it got ends there.
    let want = packets(&l)
        .iter()
        .filter(|p| p.from == Side::Requester || p.fate == Fate::Delivered)
        .count();
    eprintln!("ladder_html: arrow strokes at x={REQUESTER_X}+11..14: {runs:?}");
    assert_eq!(runs.len(), want, "one stroke per arrow: {runs:?}");
    for r in &runs {
        assert!(r.2 < 170, "an arrow's stroke is dark: {r:?}");
        assert!(r.1 - r.0 < 8, "a stroke, not a block: {r:?}");
    }

    // The DOM once the script ran: one arrow per packet, in order, with its label.
    let dom = run_chromium(
        &bin,
        &profile,
        &["--dump-dom", "--virtual-time-budget=2000"],
        &url,
    );
    let dom = String::from_utf8(dom).unwrap();
    std::fs::write(dir.join("dom.html"), &dom).unwrap();
    assert!(
        dom.contains("<html lang=\"en\" class=\"js\">"),
        "the page's script ran: {}",
        &dom[..dom.len().min(300)]
    );
    let arrows = dom_arrows(&dom);
    let want = packets(&l);
    assert_eq!(arrows.len(), want.len(), "one arrow per packet in the DOM");
    for ((attrs, label), p) in arrows.iter().zip(&want) {
        let at = |n: &str| {
            attrs
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
                .unwrap_or_else(|| panic!("no {n}: {attrs:?}"))
        };
        assert_eq!(at("data-frame"), p.frame.to_string());
        assert_eq!(at("data-psn"), p.psn.to_string());
        assert_eq!(at("data-opcode"), p.opcode.to_string());
        assert_eq!(label, &shown(&p.label));
        assert_eq!(at("data-label"), p.label);
    }
    // The nasty label stayed text: no second script, no element from it.
    assert_eq!(dom.matches("<script").count(), 1);

    // Without JavaScript the page is the same drawing: every arrow, its label and its
    // title (the tooltip), only no details panel. (Chromium's --dump-dom needs script
    // itself, so the page's own script is taken out of a copy instead.)
    let html = std::fs::read_to_string(&html_path).unwrap();
    let (a, b) = (
        html.find("<script>").unwrap(),
        html.find("</script>").unwrap(),
    );
    let nojs_path = dir.join("ladder-nojs.html");
    std::fs::write(&nojs_path, format!("{}{}", &html[..a], &html[b + 9..])).unwrap();
    let dom = run_chromium(
        &bin,
        &profile,
        &["--dump-dom"],
        &format!("file://{}", nojs_path.display()),
    );
    let dom = String::from_utf8(dom).unwrap();
    assert!(dom.contains("<html lang=\"en\">"), "no script ran");
    assert!(!dom.contains("<script"));
    let arrows = dom_arrows(&dom);
    assert_eq!(arrows.len(), want.len(), "one arrow per packet without JS");
    for ((_, label), p) in arrows.iter().zip(&want) {
        assert_eq!(label, &shown(&p.label));
    }
    assert_eq!(dom.matches("<title>").count(), 1 + want.len() + 3);

    // The details panel, filled by the script: `#frame-9` opens on frame 9 (the ACK that
    // covers PSNs 100-102), its fields under Wireshark's names.
    let dom = run_chromium(
        &bin,
        &profile,
        &["--dump-dom", "--virtual-time-budget=2000"],
        &format!("{url}#frame-9"),
    );
    let dom = String::from_utf8(dom).unwrap();
    let panel = &dom[dom.find("<section id=\"details\"").expect("the panel")..];
    let panel = &panel[..panel.find("</section>").unwrap()];
    eprintln!("ladder_html: the details panel of #frame-9: {panel}");
    assert!(panel.contains("<h2>Packet #9</h2>"), "{panel}");
    assert!(panel.contains("ACKNOWLEDGE psn=102 ACK msn=1"), "{panel}");
    for (name, value) in [
        ("infiniband.bth.opcode", "17"),
        ("infiniband.bth.psn", "102"),
        ("infiniband.aeth.syndrome", "0x1f"),
        ("infiniband.aeth.msn", "1"),
    ] {
        let row = format!("<tr><td>{name}</td><td>{value}</td></tr>");
        assert!(panel.contains(&row), "{row} not in {panel}");
    }
    let chosen: Vec<_> = dom_arrows(&dom)
        .into_iter()
        .filter(|(a, _)| a.iter().any(|(k, v)| k == "class" && v.contains("sel")))
        .map(|(_, label)| label)
        .collect();
    assert_eq!(chosen, ["ACKNOWLEDGE psn=102 ACK msn=1"]);

    // The same as a picture, for a person to look at (the panel on the right).
    let shot = dir.join("ladder-frame-9.png");
    run_chromium(
        &bin,
        &profile,
        &[
            &format!("--screenshot={}", shot.display()),
            "--virtual-time-budget=2000",
        ],
        &format!("{url}#frame-9"),
    );
    let (w, h, px) = decode_png(&shot);
    assert_eq!((w, h), (1400, 2000));
    assert!(px.iter().any(|p| *p != px[0]));
    println!(
        "ladder_html: screenshot with frame 9 chosen {}",
        shot.display()
    );
    eprintln!(
        "ladder_html: screenshot with frame 9 chosen {}",
        shot.display()
    );
}
