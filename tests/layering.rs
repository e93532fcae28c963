//! The layering rules of the design (shared/design/README.md §6.1), checked by reading the
//! sources: `wire` imports nothing else of the crate, `mem` only the seeded `rng` (a leaf),
//! and neither does I/O; `mem` also never spawns threads or reads the clock (the engine above
//! it must stay deterministic).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its inline unit-test module (`#[cfg(test)] mod NAME {`, at
/// the end of the file by convention); a `#[cfg(test)] mod NAME;` line declares a test file
/// and is kept, so the code after it is still checked.
fn without_tests(text: &str) -> &str {
    let mut from = 0;
    while let Some(at) = text[from..].find("#[cfg(test)]") {
        let at = from + at;
        let rest = text[at + "#[cfg(test)]".len()..].trim_start();
        let decl = rest.lines().next().unwrap_or("");
        if decl.starts_with("mod ") && decl.trim_end().ends_with('{') {
            return &text[..at];
        }
        from = at + 1;
    }
    text
}

/// A file that is a `#[cfg(test)] mod NAME;` of its parent (`engine/tests.rs`).
fn is_test_file(f: &Path) -> bool {
    let Some(stem) = f.file_stem().and_then(|s| s.to_str()) else {
        return false;
    };
    let dir = f.parent().unwrap();
    let parent = if dir.join("mod.rs").exists() {
        dir.join("mod.rs")
    } else {
        dir.with_extension("rs")
    };
    let Ok(text) = std::fs::read_to_string(parent) else {
        return false;
    };
    let decl = format!("#[cfg(test)]\nmod {stem};");
    text.contains(&decl)
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
    // The L2 of a NIC that owns its frames (TAP, AF_PACKET): sans-IO like the engine,
    // and below it only `wire` (design §6.1 rule 4).
    (
        "iface",
        &["iface", "wire"],
        &[
            "std::fs",
            "std::thread",
            "std::net::UdpSocket",
            "std::net::TcpStream",
            "std::time::Instant",
            "SystemTime",
            "crossbeam",
            "libc",
            "nix::",
            "println!",
            "eprintln!",
        ],
    ),
    // The I/O adapters: sockets and files, no protocol state.
    (
        "backend",
        &["backend", "wire", "rng", "iface"],
        &["crate::engine", "crate::verbs", "println!"],
    ),
    // The tools are thin clients of the verbs layer: argument parsing, TCP exchanges,
    // printing. `wire` for `pcap`, which decodes captures; `conform` for the runner.
    (
        "cli",
        &[
            "cli", "verbs", "wire", "daemon", "conform", "ladder", "learn",
        ],
        &[
            "Engine::new",
            "Driver::new",
            "UdpBackend",
            "std::thread::spawn",
        ],
    ),
    // The verbs layer owns a NIC: everything below it (a daemon's port through
    // `daemon::client`; the connection manager's protocol types, `cm::ucma`, for
    // `verbs::cm`, the library side of rdma_cm), nothing of the tools.
    (
        "verbs",
        &[
            "verbs", "backend", "daemon", "driver", "engine", "mem", "wire", "rng", "cm",
        ],
        &["println!", "eprintln!", "clap"],
    ),
    // The conformance runner: a scripted peer that builds and checks packets itself
    // (`wire`, a UDP port from `backend`) and drives the target through the verbs layer
    // (its in-process agent); no engine of its own, nothing of the tools. Its roce-emu
    // agent's connection manager for `cm_passive` scripts is the sans-IO `cm` (in-process)
    // or the daemon's, reached over the daemon's control protocol. `ladder` draws a
    // script's exchange (the peer's trace).
    (
        "conform",
        &[
            "conform", "wire", "backend", "verbs", "cm", "daemon", "ladder",
        ],
        &["crate::engine", "crate::driver", "println!", "clap"],
    ),
    // The daemon's shared-memory rings: a leaf (the daemon and the verbs layer both use
    // it), no threads, clocks or printing of its own.
    (
        "ring",
        &["ring"],
        &[
            "std::thread",
            "std::time::Instant",
            "SystemTime",
            "println!",
            "eprintln!",
        ],
    ),
    // The connection manager: sans-IO like the engine (commands, MADs and time in; MADs,
    // events and deadlines out), below the daemon that hosts it and the library that
    // talks to it.
    (
        "cm",
        &["cm", "engine", "wire", "rng"],
        &[
            "std::fs",
            "std::thread",
            "std::net::UdpSocket",
            "std::net::TcpStream",
            "std::time::Instant",
            "SystemTime",
            "crossbeam",
            "libc",
            "nix::",
            "println!",
            "eprintln!",
        ],
    ),
    // Ladders: packets (a capture's, the simulator's trace) in, rows and text out; no
    // files, sockets, threads or clock (the tools read the files and print).
    (
        "ladder",
        &["ladder", "wire", "sim", "engine"],
        &[
            "std::fs",
            "std::thread",
            "std::net::UdpSocket",
            "std::net::TcpStream",
            "std::time::Instant",
            "SystemTime",
            "println!",
            "eprintln!",
        ],
    ),
    // Lessons: scripted exchanges in the simulator drawn as ladders; like `ladder`, no
    // files, sockets, threads or clock (the tool prints and writes the page), and
    // deterministic: the simulator's virtual time, the seeded `rng`.
    (
        "learn",
        &["learn", "ladder", "sim", "engine", "mem", "wire", "rng"],
        &[
            "std::fs",
            "std::thread",
            "std::net::UdpSocket",
            "std::net::TcpStream",
            "std::time::Instant",
            "SystemTime",
            "println!",
            "eprintln!",
        ],
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
            if is_test_file(&f) {
                continue;
            }
            // Unit tests at the end of a file may read files; the rules are for the code.
            let code = without_tests(&text);
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
/// module of the backends, the backing of memory regions (raw copies and atomics on
/// registered memory, foreign memory from the coming C ABI) and the shared mapping of
/// the daemon's packet rings. Each is opted in by one
/// `#[allow(unsafe_code)]` on its `mod` line; the crate root denies it everywhere else.
/// `mem/backing/fault.rs` is a submodule of the backing (opted in with it): the
/// fault-safe copies and atomics on foreign memory and their SIGSEGV/SIGBUS handler.
const UNSAFE_MODULES: &[&str] = &[
    "backend/sys.rs",
    "mem/backing.rs",
    "mem/backing/fault.rs",
    "ring/shm.rs",
];
const UNSAFE_OPT_INS: &[(&str, &str)] = &[
    ("backend/mod.rs", "mod sys;"),
    ("mem/mod.rs", "mod backing;"),
    ("ring/mod.rs", "mod shm;"),
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

/// The module path of a source file under `src`: `engine/qp/mod.rs` is `engine::qp`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut m: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if m.last().is_some_and(|l| l == "mod") || m == ["lib"] {
        m.pop();
    }
    m
}

/// The code with comments removed and string and char literals emptied, so neither a
/// path in a doc comment nor a brace in a format string is mistaken for code.
fn strip(code: &str) -> String {
    let b = code.as_bytes();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            // A char literal ('x', '\n', '{'); a lifetime ('a) has no closing quote.
            b'\'' if b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\') => {
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("' '");
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

fn ident_at(b: &[u8], mut i: usize) -> (String, usize) {
    let start = i;
    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
        i += 1;
    }
    (String::from_utf8_lossy(&b[start..i]).into_owned(), i)
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The paths of a path expression starting at `i` (`a::b::{c, d::e}` gives `a::b::c` and
/// `a::b::d::e`), each as segments after `prefix`.
fn paths_at(b: &[u8], i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut segs = prefix.to_vec();
    let mut i = skip_ws(b, i);
    loop {
        if b.get(i) == Some(&b'{') {
            i += 1;
            loop {
                i = skip_ws(b, i);
                match b.get(i) {
                    Some(b'}') => return i + 1,
                    Some(b',') => i += 1,
                    None => return i,
                    _ => {
                        let before = i;
                        i = paths_at(b, i, &segs, out);
                        if i == before {
                            i += 1;
                        }
                    }
                }
            }
        }
        let (id, next) = ident_at(b, i);
        if id.is_empty() {
            out.push(segs);
            return i;
        }
        segs.push(id);
        i = skip_ws(b, next);
        if b[i..].starts_with(b"::") {
            i = skip_ws(b, i + 2);
        } else {
            out.push(segs);
            return i;
        }
    }
}

/// Every `crate::` and `super::` path of a file, resolved to absolute segments, with the
/// line it is on. `super` counts inline modules (`mod ack { use super::super::x; }`).
fn crate_paths(file_module: &[String], code: &str) -> Vec<(Vec<String>, usize)> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    // Inline modules open at a brace depth: (name, depth inside).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    let line_of = |i: usize| code[..i].matches('\n').count() + 1;
    while i < b.len() {
        let c = b[i];
        if c == b'{' {
            depth += 1;
            i += 1;
            continue;
        }
        if c == b'}' {
            depth -= 1;
            if inline.last().is_some_and(|(_, d)| *d > depth) {
                inline.pop();
            }
            i += 1;
            continue;
        }
        let boundary = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if !boundary || !(c.is_ascii_alphabetic() || c == b'_') {
            i += 1;
            continue;
        }
        let (id, next) = ident_at(b, i);
        if id == "mod" {
            let (name, after) = ident_at(b, skip_ws(b, next));
            let after = skip_ws(b, after);
            if !name.is_empty() && b.get(after) == Some(&b'{') {
                inline.push((name, depth + 1));
            }
            i = next;
            continue;
        }
        if (id == "crate" || id == "super") && b[next..].starts_with(b"::") {
            let mut here: Vec<String> = file_module.to_vec();
            here.extend(inline.iter().map(|(n, _)| n.clone()));
            let mut paths = Vec::new();
            let end = paths_at(b, i, &[], &mut paths);
            for p in paths {
                let mut abs = if p[0] == "crate" {
                    Vec::new()
                } else {
                    here.clone()
                };
                let mut rest = &p[..];
                if rest[0] == "crate" {
                    rest = &rest[1..];
                }
                while rest.first().is_some_and(|s| s == "super") {
                    abs.pop();
                    rest = &rest[1..];
                }
                abs.extend(rest.iter().cloned());
                found.push((abs, line_of(i)));
            }
            i = end.max(next);
            continue;
        }
        i = next;
    }
    found
}

/// Names a `mod.rs` re-exports from its children (`pub use attr::{QpAttr, Mtu as M};`):
/// name -> child module.
fn reexports(code: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for stmt in code.split(';') {
        let Some(rest) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let b = rest.as_bytes();
        let (child, _) = ident_at(b, 0);
        if child == "crate" || child == "super" || child.is_empty() {
            continue;
        }
        let names = rest
            .split(['{', '}', ','])
            .skip(usize::from(rest.contains('{')))
            .map(|s| {
                s.rsplit(" as ")
                    .next()
                    .unwrap()
                    .rsplit("::")
                    .next()
                    .unwrap()
                    .trim()
            })
            .filter(|s| !s.is_empty() && *s != "self")
            .map(str::to_string);
        for n in names {
            map.insert(n, child.clone());
        }
    }
    map
}

/// The folders whose modules must not import each other in a cycle: the layers that
/// import each other's items the most. A module may use its parent's items and its
/// children's (that is how a `mod.rs` re-exports); between siblings, the imports must
/// form no cycle, so one can be understood (and tested) before the other.
const ACYCLIC: &[&str] = &[
    "wire", "mem", "engine", "sim", "iface", "daemon", "driver", "cm", "ladder", "learn",
];

/// The other crates of the workspace whose modules must form no cycle either, each as a
/// whole (`src` under it): the C ABI crates (the drop-in libibverbs.so.1, and the
/// librdmacm.so.1 one once it is there).
const ACYCLIC_CRATES: &[&str] = &["abi", "rdmacm"];

type Graph = BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>;

/// The module graph between siblings of the folders `ACYCLIC` of the core crate.
fn sibling_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    for folder in ACYCLIC {
        rust_files(&src.join(folder), &mut files);
    }
    graph_of(src, &files)
}

/// The module graph between siblings: `a::b::x -> a::c::y` is the edge `a::b -> a::c`,
/// with one file:line that makes it; `files` are under the crate's `src`.
fn graph_of(src: &Path, files: &[PathBuf]) -> Graph {
    let mut modules = BTreeMap::new();
    for f in files {
        if is_test_file(f) {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        let code = strip(without_tests(&text));
        modules.insert(module_of(f.strip_prefix(src).unwrap()), (f.clone(), code));
    }
    let exports: BTreeMap<Vec<String>, BTreeMap<String, String>> = modules
        .iter()
        .filter(|(_, (f, _))| f.ends_with("mod.rs"))
        .map(|(m, (_, code))| (m.clone(), reexports(code)))
        .collect();
    let mut graph: BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>> = BTreeMap::new();
    for (from, (f, code)) in &modules {
        for (path, line) in crate_paths(from, code) {
            // The longest prefix that is a module file, then through a re-export of it.
            let mut target: Vec<String> = (0..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains_key(p))
                .unwrap_or_default();
            if let Some(child) = path
                .get(target.len())
                .and_then(|item| exports.get(&target)?.get(item))
            {
                target.push(child.clone());
            }
            let common = from.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == target.len() {
                continue; // itself, a parent or a child
            }
            let (a, b) = (from[..=common].to_vec(), target[..=common].to_vec());
            let at = format!("{}:{line}: {}", f.display(), path.join("::"));
            graph.entry(a).or_default().entry(b).or_insert(at);
        }
    }
    graph
}

/// The import cycles of `graph`, each as its edges with the file:line that makes each.
fn cycles(graph: &Graph) -> Vec<String> {
    // Depth-first search; a grey node met again closes a cycle.
    fn visit(
        n: &Vec<String>,
        g: &Graph,
        stack: &mut Vec<Vec<String>>,
        done: &mut BTreeSet<Vec<String>>,
        cycles: &mut Vec<String>,
    ) {
        if done.contains(n) {
            return;
        }
        if let Some(at) = stack.iter().position(|s| s == n) {
            let mut loop_ = stack[at..].to_vec();
            loop_.push(n.clone());
            let why: Vec<String> = loop_
                .windows(2)
                .map(|w| {
                    format!(
                        "  {} -> {}: {}",
                        w[0].join("::"),
                        w[1].join("::"),
                        g[&w[0]][&w[1]]
                    )
                })
                .collect();
            cycles.push(why.join("\n"));
            return;
        }
        stack.push(n.clone());
        for next in g.get(n).into_iter().flat_map(|e| e.keys()) {
            visit(next, g, stack, done, cycles);
        }
        stack.pop();
        done.insert(n.clone());
    }
    let (mut stack, mut done, mut found) = (Vec::new(), BTreeSet::new(), Vec::new());
    for n in graph.keys() {
        visit(n, graph, &mut stack, &mut done, &mut found);
    }
    found
}

fn modules(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// No two sibling modules import each other, directly or around a loop (the design's
/// wire::bth <-> wire::opcode, engine::error <-> engine::qp, daemon::server <->
/// daemon::open/route and abi's context <-> cq/qp/device/mr were such loops; a leaf
/// module below both broke each).
#[test]
fn sibling_modules_import_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = sibling_graph(&src);
    assert!(
        graph.len() > 10,
        "only {} modules import a sibling",
        graph.len()
    );
    // The check covers each folder: these edges are real (a folder left out of the graph
    // would have none).
    for (a, b) in [
        (&["daemon", "server"][..], &["daemon", "lease"][..]),
        (&["driver"][..], &["engine"][..]),
    ] {
        assert!(
            graph
                .get(&modules(a))
                .is_some_and(|e| e.contains_key(&modules(b))),
            "{a:?} -> {b:?} not seen"
        );
    }
    let found = cycles(&graph);
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n\n"));
}

/// The same for the ABI crates, each on its own.
#[test]
fn abi_crates_import_no_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for krate in ACYCLIC_CRATES {
        let src = root.join(krate).join("src");
        if !src.is_dir() {
            continue;
        }
        seen += 1;
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let graph = graph_of(&src, &files);
        if *krate == "abi" {
            // The check sees real edges (a crate read wrongly would have none).
            assert!(
                graph.len() > 3,
                "abi: only {} modules import a sibling",
                graph.len()
            );
        }
        let found = cycles(&graph);
        assert!(
            found.is_empty(),
            "{krate}: import cycles:\n{}",
            found.join("\n\n")
        );
    }
    assert!(seen >= 1, "no ABI crate found");
}

/// The cycle check finds a cycle: two sibling modules importing each other.
#[test]
fn a_new_cycle_is_found() {
    let dir = std::env::temp_dir().join(format!("layering-cycle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("x")).unwrap();
    let files = [
        ("x/mod.rs", "mod a;\nmod b;\n"),
        ("x/a.rs", "use super::b::B;\npub struct A;\n"),
        ("x/b.rs", "use crate::x::a::A;\npub struct B;\n"),
    ];
    let mut paths = Vec::new();
    for (f, text) in files {
        std::fs::write(dir.join(f), text).unwrap();
        paths.push(dir.join(f));
    }
    let found = cycles(&graph_of(&dir, &paths));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("x::a -> x::b") && found[0].contains("x::b -> x::a"),
        "{}",
        found[0]
    );
}

/// `wire::layout` is the leaf the header modules and the opcode table share.
#[test]
fn wire_layout_imports_nothing() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = sibling_graph(&src);
    let layout = vec!["wire".to_string(), "layout".to_string()];
    assert!(
        graph.get(&layout).is_none_or(|e| e.is_empty()),
        "wire::layout imports {:?}",
        graph[&layout]
    );
    // And the check sees real edges: the BTH view names the opcode type.
    let bth = vec!["wire".to_string(), "bth".to_string()];
    let opcode = vec!["wire".to_string(), "opcode".to_string()];
    assert!(graph[&bth].contains_key(&opcode));
}

/// The C ABI crates are skins over the verbs layer: abi/ (the drop-in libibverbs.so.1)
/// imports only `roce_emu::verbs` of the core; rdmacm/ (the drop-in librdmacm.so.1) only
/// `roce_emu::verbs` and the protocol types it speaks to the connection manager
/// (`roce_emu::cm::ucma`). Their unsafe blocks each carry a SAFETY comment (their `unsafe
/// extern "C" fn`s are the C API, whose contract the man pages state; any other `unsafe
/// fn` says its own in a `# Safety` section or a SAFETY comment). `ffi.rs` is bindgen's
/// output and exempt.
#[test]
fn abi_uses_only_the_verbs_layer_and_comments_its_unsafe() {
    abi_crate_rules("abi/src", &["roce_emu::verbs"]);
}

#[test]
fn rdmacm_uses_only_the_verbs_layer_and_comments_its_unsafe() {
    abi_crate_rules("rdmacm/src", &["roce_emu::verbs", "roce_emu::cm::ucma"]);
}

fn abi_crate_rules(folder: &str, allowed: &[&str]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(!files.is_empty(), "no sources in {folder}");
    let mut bad = Vec::new();
    for f in files.iter().filter(|f| !f.ends_with("ffi.rs")) {
        let text = std::fs::read_to_string(f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            for (at, _) in l.match_indices("roce_emu::") {
                if !allowed.iter().any(|a| l[at..].starts_with(a)) {
                    bad.push(format!(
                        "{}:{}: imports below verbs: {l}",
                        f.display(),
                        i + 1
                    ));
                }
            }
            let block = l.contains("unsafe {") || l.contains("unsafe impl");
            let inner_fn = l.contains("unsafe fn") && !l.contains("extern \"C\"");
            if !(block || inner_fn) {
                continue;
            }
            // The comment may sit above the statement the block is part of.
            let commented = lines[..i]
                .iter()
                .rev()
                .take(8)
                .any(|p| p.contains("SAFETY:") || p.contains("# Safety"));
            if !commented {
                bad.push(format!(
                    "{}:{}: unsafe without SAFETY: {l}",
                    f.display(),
                    i + 1
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{folder} rules:\n{}", bad.join("\n"));
}
