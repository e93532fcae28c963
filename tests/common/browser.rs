//! Debian's headless Chromium for tests of the ladder's HTML page: found, or installed
//! (as root with apt-get, as CI is), run with a bounded wait, its screenshot decoded and
//! its serialized DOM scanned. Used by `tests/ladder_html*.rs` through `#[path]`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn chromium() -> Option<PathBuf> {
    for name in ["chromium", "chromium-browser"] {
        if let Ok(o) = Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
        {
            let p = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if o.status.success() && !p.is_empty() {
                return Some(PathBuf::from(p));
            }
        }
    }
    None
}

/// Debian's chromium, installed when missing and we are root with apt-get (as CI is).
pub fn find_or_install_chromium() -> Result<PathBuf, String> {
    if let Some(p) = chromium() {
        return Ok(p);
    }
    if !nix::unistd::geteuid().is_root() {
        return Err("chromium is missing and we are not root to install it".into());
    }
    if Command::new("apt-get").arg("--version").output().is_err() {
        return Err("chromium is missing and there is no apt-get".into());
    }
    eprintln!("ladder_html: installing chromium (apt-get, about 130 packages)...");
    let install = || {
        Command::new("apt-get")
            .args([
                "install",
                "-y",
                "-qq",
                "--no-install-recommends",
                "chromium",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !install() {
        // Stale or missing package lists: update once and try again.
        let _ = Command::new("apt-get")
            .args(["update", "-qq"])
            .stdout(Stdio::null())
            .status();
        if !install() {
            return Err("apt-get install chromium failed".into());
        }
    }
    chromium().ok_or_else(|| "chromium installed but not on PATH".into())
}

pub fn skip(why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{why}, and CI is set: CI must install chromium");
    }
    eprintln!();
    eprintln!("**************************************************************");
    eprintln!("SKIPPED: {why} (no real-browser check)");
    eprintln!("**************************************************************");
}

/// Runs chromium headless on `url` with `args`, at most 120 s; its stdout.
pub fn run_chromium(bin: &Path, profile: &Path, args: &[&str], url: &str) -> Vec<u8> {
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-dev-shm-usage",
            "--window-size=1400,2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut v).ok();
        v
    });
    let ereader = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut v).ok();
        v
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium {args:?} ran over 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = reader.join().unwrap();
    let stderr = ereader.join().unwrap();
    assert!(
        status.success(),
        "chromium {args:?}: {status}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    stdout
}

/// The screenshot's pixels as RGB, row by row, with its width and height.
pub fn decode_png(path: &Path) -> (usize, usize, Vec<[u8; 3]>) {
    let mut dec = png::Decoder::new(std::fs::File::open(path).unwrap());
    dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = dec.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let (w, h) = (info.width as usize, info.height as usize);
    let ch = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        c => panic!("colour type {c:?}"),
    };
    let px = (0..w * h)
        .map(|i| {
            let row = i / w;
            let s = &buf[row * info.line_size + (i % w) * ch..];
            if ch >= 3 {
                [s[0], s[1], s[2]]
            } else {
                [s[0], s[0], s[0]]
            }
        })
        .collect();
    (w, h, px)
}

/// Undoes the HTML serializer's escapes.
pub fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// From Chromium's serialized DOM: each `<g class="pkt ...">`'s attributes and the text
/// of the `<text class="lbl">` in it.
pub fn dom_arrows(dom: &str) -> Vec<(Vec<(String, String)>, String)> {
    let mut out = Vec::new();
    let mut rest = dom;
    while let Some(i) = rest.find("<g ") {
        rest = &rest[i + 3..];
        let end = rest.find('>').unwrap();
        let tag = &rest[..end];
        let mut attrs = Vec::new();
        let mut t = tag;
        while let Some(eq) = t.find("=\"") {
            let name = t[..eq].trim().to_string();
            let v_end = t[eq + 2..].find('"').unwrap();
            attrs.push((name, unescape(&t[eq + 2..eq + 2 + v_end])));
            t = &t[eq + 2 + v_end + 1..];
        }
        let is_pkt = attrs
            .iter()
            .any(|(n, v)| n == "class" && v.split_whitespace().any(|c| c == "pkt"));
        if !is_pkt {
            continue;
        }
        let l = rest.find("class=\"lbl\"").expect("a label in the arrow");
        let after = &rest[l..];
        let open = after.find('>').unwrap();
        let close = after.find("</text>").unwrap();
        out.push((attrs, unescape(&after[open + 1..close])));
    }
    out
}
