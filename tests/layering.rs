//! The layering rules of the design (shared/design/README.md §6.1), checked by reading the
//! sources: `wire` imports nothing else of the crate, `mem` only the seeded `rng` (a leaf),
//! and neither does I/O; `mem` also never spawns threads or reads the clock (the engine above
//! it must stay deterministic).

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// (folder under src, crate modules it may import, forbidden paths)
const RULES: &[(&str, &[&str], &[&str])] = &[
    (
        "wire",
        &["wire"],
        &[
            "std::fs",
            "std::thread",
            "std::time::Instant",
            "std::time::SystemTime",
            "std::net::UdpSocket",
            "std::net::TcpStream",
            "println!",
            "serde",
            "clap",
        ],
    ),
    (
        "mem",
        // The one seeded RNG of the crate draws key bytes (a leaf: it imports nothing).
        &["mem", "rng"],
        &[
            "std::fs",
            "std::thread",
            "std::net",
            "Instant",
            "SystemTime",
            "println!",
        ],
    ),
    // The sans-IO core: no sockets, files, threads, channels, clocks or printing.
    (
        "engine",
        &["engine", "wire", "mem"],
        &[
            "std::fs",
            "std::thread",
            "std::net::UdpSocket",
            "std::net::TcpStream",
            "std::time::Instant",
            "SystemTime",
            "crossbeam",
            "println!",
            "eprintln!",
        ],
    ),
    // The I/O adapters: sockets and files, no protocol state.
    (
        "backend",
        &["backend", "wire", "rng"],
        &["crate::engine", "crate::verbs", "println!"],
    ),
    // The verbs layer owns a NIC: everything below it, nothing of the tools.
    (
        "verbs",
        &["verbs", "backend", "driver", "engine", "mem", "wire", "rng"],
        &["println!", "eprintln!", "clap"],
    ),
    // The simulator drives engines with a virtual clock only.
    (
        "sim",
        &["sim", "engine", "wire", "mem", "rng"],
        &[
            "std::fs",
            "std::thread",
            "std::net::UdpSocket",
            "std::time::Instant",
            "SystemTime",
            "println!",
        ],
    ),
];

#[test]
fn layers_import_only_what_they_may() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut violations = Vec::new();
    let mut scanned = 0;
    for (folder, allowed, forbidden) in RULES {
        let mut files = Vec::new();
        rust_files(&src.join(folder), &mut files);
        assert!(!files.is_empty(), "src/{folder} is empty");
        for f in files {
            scanned += 1;
            let text = std::fs::read_to_string(&f).unwrap();
            // Unit tests at the end of a file may read files; the rules are for the code.
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (i, line) in code.lines().enumerate() {
                let l = line.trim_start();
                if l.starts_with("//") {
                    continue;
                }
                for (pos, _) in l.match_indices("crate::") {
                    let rest = &l[pos + "crate::".len()..];
                    let module: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !allowed.contains(&module.as_str()) {
                        violations.push(format!(
                            "{}:{}: imports crate::{module}",
                            f.display(),
                            i + 1
                        ));
                    }
                }
                for bad in *forbidden {
                    if l.contains(bad) {
                        violations.push(format!("{}:{}: uses {bad}", f.display(), i + 1));
                    }
                }
            }
        }
    }
    assert!(scanned > 10, "scanned only {scanned} files");
    assert!(
        violations.is_empty(),
        "layering violations:\n{}",
        violations.join("\n")
    );
}

/// The modules allowed to hold `unsafe` (design real-programs.md §1.2, §4): the syscall
/// module of the backends and the backing of memory regions (raw copies and atomics on
/// registered memory, foreign memory from the coming C ABI). Each is opted in by one
/// `#[allow(unsafe_code)]` on its `mod` line; the crate root denies it everywhere else.
const UNSAFE_MODULES: &[&str] = &["backend/sys.rs", "mem/backing.rs"];
const UNSAFE_OPT_INS: &[(&str, &str)] = &[
    ("backend/mod.rs", "mod sys;"),
    ("mem/mod.rs", "mod backing;"),
];

/// `unsafe` only in the fenced modules, and there with a SAFETY comment per block and
/// impl and a `# Safety` section on every `unsafe fn`.
#[test]
fn unsafe_only_in_fenced_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    let mut uncommented = Vec::new();
    let mut opt_ins = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let fenced = UNSAFE_MODULES.iter().any(|m| f.ends_with(m));
        for (i, line) in lines.iter().enumerate() {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            if l.contains("allow(unsafe_code)") {
                let next = lines.get(i + 1).map_or("", |n| n.trim());
                let ok = UNSAFE_OPT_INS
                    .iter()
                    .any(|(file, m)| f.ends_with(file) && next.ends_with(m));
                if !ok {
                    opt_ins.push(format!("{}:{}: {l} {next}", f.display(), i + 1));
                }
            }
            if !l.contains("unsafe") {
                continue;
            }
            let is_fn = l.contains("unsafe fn");
            if !(l.contains("unsafe {") || is_fn || l.contains("unsafe impl")) {
                continue;
            }
            if !fenced {
                found.push(format!("{}:{}: {l}", f.display(), i + 1));
                continue;
            }
            let commented = if is_fn {
                // The doc comment right above the fn states the caller's obligations.
                lines[..i]
                    .iter()
                    .rev()
                    .map(|p| p.trim_start())
                    .take_while(|p| p.starts_with("///") || p.starts_with("#["))
                    .any(|p| p.contains("# Safety"))
            } else {
                lines[..i]
                    .iter()
                    .rev()
                    .take(6)
                    .any(|p| p.contains("SAFETY:"))
            };
            if !commented {
                uncommented.push(format!("{}:{}: {l}", f.display(), i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "unsafe outside {UNSAFE_MODULES:?}:\n{}",
        found.join("\n")
    );
    assert!(
        uncommented.is_empty(),
        "unsafe without a SAFETY comment (or an unsafe fn without a # Safety doc):\n{}",
        uncommented.join("\n")
    );
    assert!(
        opt_ins.is_empty(),
        "allow(unsafe_code) other than on the fenced modules {UNSAFE_OPT_INS:?}:\n{}",
        opt_ins.join("\n")
    );
}
