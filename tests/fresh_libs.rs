//! Every library a fetched Debian program loads comes from the fetched tree, the drop-in's
//! folder, or a package a fresh machine has (tests/data/fresh-base.txt): the README's first
//! command must pass where nothing was installed before.
//!
//! Why a test: Debian 12's libnl-3-200 puts libnl-3.so.200 under lib/, not usr/lib/, and the
//! library path once named only usr/lib/ of the tree. Every machine that ran the tests had
//! libnl from tshark's install, so the programs found the system's copy and nothing showed
//! that a fresh machine fails (`ib_write_bw: error while loading shared libraries:
//! libnl-3.so.200`). So a library that resolves outside the tree fails here unless its
//! package is on the fresh list, whether or not this machine has it installed.
//!
//! The loader itself answers (ldd: the dependencies as the loader resolves them with the
//! tests' own LD_LIBRARY_PATH, `dropin::Env::library_path`), and `dpkg -S` names the owner.

mod common;

use common::dropin;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The packages of tests/data/fresh-base.txt (first word of each line, `#` comments).
fn fresh_base() -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fresh-base.txt");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter_map(|l| l.split('#').next()?.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

fn is_elf(p: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// Every ELF file of the tree (programs, libraries, pyverbs' modules), rdma-core's test
/// suite aside (Python), and the stock libibverbs aside (never loaded: the drop-in is).
fn elf_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            elf_files(&p, out);
        } else if t.is_file() && !p.to_string_lossy().ends_with(".stock") && is_elf(&p) {
            out.push(p);
        }
    }
}

/// (soname, where it resolved) per `ldd` line; `None` for "not found".
fn ldd(file: &Path, library_path: &str) -> Vec<(String, Option<PathBuf>)> {
    let out = Command::new("ldd")
        .arg(file)
        .env("LD_LIBRARY_PATH", library_path)
        .output()
        .expect("ldd (libc-bin)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some((name, rest)) = line.split_once("=>") {
            let rest = rest.trim();
            let at = (!rest.starts_with("not found"))
                .then(|| rest.split_whitespace().next().map(PathBuf::from))
                .flatten();
            libs.push((name.trim().to_string(), at));
        } else if line.starts_with('/') {
            // The loader itself: `/lib64/ld-linux-x86-64.so.2 (0x...)`.
            let p = line.split_whitespace().next().unwrap_or(line);
            libs.push((p.to_string(), Some(PathBuf::from(p))));
        }
        // linux-vdso.so.1 is the kernel's, no file.
    }
    libs
}

/// The Debian package that owns `lib`, by `dpkg -S` (Debian 12 merges /lib into /usr/lib, and
/// a package registers one of the two spellings).
fn owner(lib: &Path, cache: &mut BTreeMap<PathBuf, Option<String>>) -> Option<String> {
    if let Some(o) = cache.get(lib) {
        return o.clone();
    }
    let real = std::fs::canonicalize(lib).unwrap_or_else(|_| lib.to_path_buf());
    let mut tries = vec![lib.to_path_buf(), real.clone()];
    for p in [lib, real.as_path()] {
        let s = p.to_string_lossy();
        match s.strip_prefix("/usr") {
            Some(rest) => tries.push(PathBuf::from(rest)),
            None => tries.push(PathBuf::from(format!("/usr{s}"))),
        }
    }
    let found = tries.iter().find_map(|t| {
        let out = Command::new("dpkg").arg("-S").arg(t).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let first = text.lines().next()?;
        // `zlib1g:amd64: /lib/x86_64-linux-gnu/libz.so.1`
        let pkg = first.split(": ").next()?.split(',').next()?.trim();
        let pkg = pkg.split(':').next()?.to_string();
        (out.status.success() && !pkg.is_empty()).then_some(pkg)
    });
    cache.insert(lib.to_path_buf(), found.clone());
    found
}

/// What is wrong with the libraries the tree's programs load with `library_path`: one line
/// per (program, library) that is not found or comes from a package outside `base`.
fn problems(
    tree: &Path,
    ours: &Path,
    library_path: &str,
    base: &BTreeSet<String>,
) -> (usize, Vec<String>) {
    let mut files = Vec::new();
    for top in ["usr/bin", "usr/sbin", "usr/lib", "lib"] {
        elf_files(&tree.join(top), &mut files);
    }
    files.sort();
    let tree = std::fs::canonicalize(tree).expect("the tree");
    let ours = std::fs::canonicalize(ours).expect("the drop-in's folder");
    let mut owners = BTreeMap::new();
    let mut bad = Vec::new();
    for f in &files {
        let short = f.strip_prefix(&tree).unwrap_or(f).display().to_string();
        for (name, at) in ldd(f, library_path) {
            let Some(at) = at else {
                bad.push(format!("{short}: {name} not found"));
                continue;
            };
            let real = std::fs::canonicalize(&at).unwrap_or(at.clone());
            if real.starts_with(&tree) || real.starts_with(&ours) {
                continue;
            }
            match owner(&at, &mut owners) {
                Some(pkg) if base.contains(&pkg) => {}
                Some(pkg) => bad.push(format!(
                    "{short}: {name} => {} (package {pkg}: not on a fresh machine, \
                     tests/data/fresh-base.txt)",
                    at.display()
                )),
                None => bad.push(format!(
                    "{short}: {name} => {} (no Debian package owns it)",
                    at.display()
                )),
            }
        }
    }
    (files.len(), bad)
}

#[test]
fn fetched_programs_load_only_the_tree_and_a_fresh_machines_libraries() {
    let Some(env) = dropin::setup("fresh_libs") else {
        return;
    };
    if Command::new("dpkg").arg("--version").output().is_err() {
        common::netns::skip("fresh_libs", "no dpkg to name a library's package");
        return;
    }
    let base = fresh_base();
    assert!(
        base.contains("libc6"),
        "tests/data/fresh-base.txt: {base:?}"
    );
    let (checked, bad) = problems(&env.root, &env.lib, &env.library_path(), &base);
    // The programs the README and the tests run, at least, were among those checked.
    assert!(
        checked >= 40,
        "only {checked} ELF files in {}",
        env.root.display()
    );
    assert!(
        bad.is_empty(),
        "{} of the libraries the fetched programs load would be missing on a fresh machine \
         (library path {}):\n{}",
        bad.len(),
        env.library_path(),
        bad.join("\n")
    );
    eprintln!("fresh_libs: {checked} ELF files of the tree, every library from the tree, the drop-in or {} fresh packages", base.len());
}

/// The check itself catches what it is for: with only usr/lib of the tree on the path (the
/// old setup), librdmacm's libnl-3.so.200 is either not found (a fresh machine) or the
/// system's (a machine with tshark installed), and both are reported.
#[test]
fn a_library_path_without_lib_is_caught() {
    let Some(env) = dropin::setup("fresh_libs_negative") else {
        return;
    };
    if Command::new("dpkg").arg("--version").output().is_err() {
        common::netns::skip("fresh_libs_negative", "no dpkg to name a library's package");
        return;
    }
    let old = format!(
        "{}:{}",
        env.lib.display(),
        env.root.join("usr/lib/x86_64-linux-gnu").display()
    );
    let (_, bad) = problems(&env.root, &env.lib, &old, &fresh_base());
    assert!(
        bad.iter()
            .any(|b| b.contains("librdmacm.so.1") && b.contains("libnl-3.so.200")),
        "the usr/lib-only path was not caught: {bad:?}"
    );
    // Programs load the drop-in librdmacm.so.1 (first on the path), which needs no
    // libnl-3: ib_write_bw's libraries are all found even on that path.
    assert!(
        !bad.iter().any(|b| b.starts_with("usr/bin/ib_write_bw:")),
        "ib_write_bw loads Debian's librdmacm instead of the drop-in: {bad:?}"
    );
    // A library that resolves on this system from a package outside the fresh list is
    // caught as well (what libnl-3 does on a machine where tshark brought it): zlib1g,
    // present everywhere, struck from the list.
    let mut without_zlib = fresh_base();
    without_zlib.remove("zlib1g");
    let (_, bad) = problems(&env.root, &env.lib, &env.library_path(), &without_zlib);
    assert!(
        bad.iter()
            .any(|b| b.contains("libz.so.1 =>") && b.contains("(package zlib1g:")),
        "a system library from a package outside the list was not caught: {bad:?}"
    );
}
