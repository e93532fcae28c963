//! The HTML page of real rxe captures (`tests/data/*.pcap`: the loss with its sequence
//! NAK, the RNR NAKs, the READs, the CM exchange), built as `roce-emu ladder --html`
//! builds it (every record through `ladder::source::from_frame`, then `ladder::build`),
//! then `ladder::html::page`:
//!
//! - as XML: one arrow per packet of the ladder, in order, with its frame, PSN, opcode
//!   and label, and every Wireshark field of the packet in its `<title>`;
//! - in Debian's headless Chromium (see tests/common/browser.rs; SKIPPED loudly without
//!   it, a failure under CI): a screenshot that is not blank, saved as
//!   `target/tmp/ladder_html_capture/NAME.png`, and the DOM after the script ran holding
//!   one arrow per packet with the right labels.

use roce_emu::ladder::html::page;
use roce_emu::ladder::model::{Ladder, Packet, Row};
use std::path::{Path, PathBuf};

#[path = "common/browser.rs"]
mod browser;
use browser::{decode_png, dom_arrows, find_or_install_chromium, run_chromium, skip};

const CAPTURES: &[&str] = &[
    "rc_pingpong_loss_seqnak.pcap",
    "send_bw_rnr.pcap",
    "read_bw_s2048.pcap",
    "rping_cm_s64.pcap",
];

fn ladder_of(path: &Path) -> Ladder {
    let bytes = std::fs::read(path).unwrap();
    roce_emu::cli::ladder::ladder_of(&bytes).unwrap().0
}

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

/// The arrow shows the label, or its start and an ellipsis (the page cuts long ones).
fn shows(shown: &str, label: &str) -> bool {
    shown == label
        || shown
            .strip_suffix('\u{2026}')
            .is_some_and(|s| label.starts_with(s) && s.chars().count() >= 40)
}

fn capture(name: &str) -> (Ladder, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    let l = ladder_of(&path);
    assert!(!packets(&l).is_empty(), "{name}: no packets");
    let html = page(&l, &format!("roce-emu ladder {name}"));
    (l, html)
}

#[test]
fn each_capture_page_has_one_arrow_per_packet_with_its_fields() {
    for name in CAPTURES {
        let (l, html) = capture(name);
        let doc = roxmltree::Document::parse_with_options(
            &html,
            roxmltree::ParsingOptions {
                allow_dtd: true,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{name}: not well-formed: {e}"));
        let arrows: Vec<_> = doc
            .descendants()
            .filter(|n| {
                n.tag_name().name() == "g"
                    && n.attribute("class")
                        .is_some_and(|c| c.split_whitespace().any(|t| t == "pkt"))
            })
            .collect();
        let want = packets(&l);
        assert_eq!(arrows.len(), want.len(), "{name}: one arrow per packet");
        for (g, p) in arrows.iter().zip(&want) {
            assert_eq!(g.attribute("data-frame"), Some(&*p.frame.to_string()));
            assert_eq!(g.attribute("data-psn"), Some(&*p.psn.to_string()));
            assert_eq!(g.attribute("data-opcode"), Some(&*p.opcode.to_string()));
            let lbl = g
                .children()
                .find(|k| k.attribute("class") == Some("lbl"))
                .and_then(|k| k.text())
                .unwrap();
            assert!(shows(lbl, &p.label), "{name} frame {}: {lbl}", p.frame);
            assert_eq!(g.attribute("data-label"), Some(p.label.as_str()));
            let title = g
                .children()
                .find(|k| k.tag_name().name() == "title")
                .and_then(|t| t.text())
                .unwrap();
            for f in &p.fields {
                let line = format!("{} = {}", f.name, f.value);
                assert!(
                    title.lines().any(|l| l == line),
                    "{name}: {line} not in {title}"
                );
            }
        }
        eprintln!(
            "{name}: {} flows, {} arrows, {} bytes",
            l.flows.len(),
            arrows.len(),
            html.len()
        );
    }
}

#[test]
fn each_capture_page_in_a_real_browser() {
    let bin = match find_or_install_chromium() {
        Ok(b) => b,
        Err(why) => return skip(&why),
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ladder_html_capture");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("profile");
    for name in CAPTURES {
        let (l, html) = capture(name);
        let stem = name.trim_end_matches(".pcap");
        let html_path = dir.join(format!("{stem}.html"));
        std::fs::write(&html_path, &html).unwrap();
        let url = format!("file://{}", html_path.display());
        let shot = dir.join(format!("{stem}.png"));
        run_chromium(
            &bin,
            &profile,
            &[&format!("--screenshot={}", shot.display())],
            &url,
        );
        let (w, h, px) = decode_png(&shot);
        assert_eq!((w, h), (1400, 2000));
        let lum = |p: &[u8; 3]| (p[0] as u32 * 299 + p[1] as u32 * 587 + p[2] as u32 * 114) / 1000;
        let dark = px.iter().filter(|p| lum(p) < 100).count();
        assert!(px.iter().any(|p| *p != px[0]), "{name}: one colour");
        assert!(dark > 2_000, "{name}: only {dark} dark pixels");
        println!("ladder_html_capture: {name}: screenshot {}", shot.display());
        eprintln!("ladder_html_capture: {name}: screenshot {}", shot.display());

        let dom = run_chromium(
            &bin,
            &profile,
            &["--dump-dom", "--virtual-time-budget=2000"],
            &url,
        );
        let dom = String::from_utf8(dom).unwrap();
        assert!(
            dom.contains("<html lang=\"en\" class=\"js\">"),
            "{name}: script ran"
        );
        let arrows = dom_arrows(&dom);
        let want = packets(&l);
        assert_eq!(
            arrows.len(),
            want.len(),
            "{name}: one arrow per packet in the DOM"
        );
        for ((attrs, label), p) in arrows.iter().zip(&want) {
            let frame = attrs
                .iter()
                .find(|(k, _)| k == "data-frame")
                .map(|(_, v)| v.clone());
            assert_eq!(frame, Some(p.frame.to_string()), "{name}");
            assert!(shows(label, &p.label), "{name} frame {}: {label}", p.frame);
        }
    }
}
