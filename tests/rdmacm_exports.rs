//! The drop-in librdmacm.so.1's ABI: every (name, version node) Debian 12's librdmacm.so.1
//! (rdma-core 44) exports is exported with that version, nothing else leaks, the nodes
//! RDMACM_1.0..1.3 each inherit the previous one, the SONAME is librdmacm.so.1 and it
//! NEEDs libibverbs.so.1 (ours). The public structs' layouts, measured by a C probe
//! against Debian's librdmacm-dev headers, are the ones recorded in
//! tests/data/abi/rdmacm44_layouts.txt (the crate's structs are bindgen's from the same
//! headers, checked by tools/dropin/bindgen.sh --check). Every `extern "C"` entry of
//! rdmacm/ runs under a panic guard.

mod common;

use common::dropin;
use std::collections::BTreeSet;
use std::process::Command;

fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn data(name: &str) -> String {
    std::fs::read_to_string(repo().join("tests/data/abi").join(name)).unwrap()
}

/// `name@version` of every defined dynamic symbol.
fn exported(lib: &std::path::Path) -> BTreeSet<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .expect("nm (binutils)");
    assert!(out.status.success(), "{}", dropin::show(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(|s| s.replace("@@", "@"))
        // A version node's own symbol has no version suffix: NODE -> NODE@NODE.
        .map(|s| {
            if s.contains('@') {
                s
            } else {
                format!("{s}@{s}")
            }
        })
        .collect()
}

#[test]
fn every_symbol_and_version_node_of_debians_librdmacm() {
    let Some(env) = dropin::setup("rdmacm_exports") else {
        return;
    };
    let lib = env.lib.join("librdmacm.so.1");
    let have = exported(&lib);
    // "NODE NAME" lines; a node's own name is listed as "NODE NODE".
    let want: BTreeSet<String> = data("librdmacm44_exports.txt")
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .map(|(node, name)| format!("{name}@{node}"))
        .collect();
    assert_eq!(want.len(), 68 + 4, "68 functions and 4 version nodes");
    let missing: Vec<&String> = want.difference(&have).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
    let extra: Vec<&String> = have.difference(&want).collect();
    assert!(extra.is_empty(), "exported beyond Debian's: {extra:?}");

    let v = Command::new("readelf")
        .arg("-V")
        .arg(&lib)
        .output()
        .expect("readelf");
    let text = String::from_utf8_lossy(&v.stdout);
    for (node, parent) in [
        ("RDMACM_1.1", "RDMACM_1.0"),
        ("RDMACM_1.2", "RDMACM_1.1"),
        ("RDMACM_1.3", "RDMACM_1.2"),
    ] {
        let at = text
            .find(&format!("Name: {node}"))
            .unwrap_or_else(|| panic!("no node {node}: {text}"));
        let next = text[at..].lines().nth(1).unwrap_or("");
        assert!(
            next.contains(&format!("Parent 1: {parent}")),
            "{node} does not inherit {parent}: {next}"
        );
    }

    let d = Command::new("readelf")
        .arg("-d")
        .arg(&lib)
        .output()
        .expect("readelf");
    let text = String::from_utf8_lossy(&d.stdout);
    assert!(text.contains("Library soname: [librdmacm.so.1]"), "{text}");
    assert!(text.contains("Shared library: [libibverbs.so.1]"), "{text}");
    // Its libibverbs is ours, beside it (and every ibv_* it calls resolves there).
    let out = Command::new("ldd")
        .arg("-r")
        .arg(&lib)
        .env("LD_LIBRARY_PATH", env.library_path())
        .output()
        .expect("ldd");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!text.contains("undefined symbol"), "{text}");
    assert!(
        text.contains(&env.lib.join("libibverbs.so.1").display().to_string()),
        "librdmacm.so.1 did not bind to our libibverbs: {text}"
    );
}

/// Debian's rdma-core programs bind every librdmacm symbol they import to ours.
#[test]
fn debians_rdmacm_programs_load_against_it() {
    let Some(env) = dropin::setup("rdmacm_programs") else {
        return;
    };
    for prog in [
        "rping",
        "ucmatose",
        "udaddy",
        "rdma_server",
        "rdma_client",
        "ib_send_bw",
    ] {
        let out = Command::new("ldd")
            .arg("-r")
            .arg(env.bin(prog))
            .env("LD_LIBRARY_PATH", env.library_path())
            .output()
            .expect("ldd");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(!text.contains("undefined symbol"), "{prog}: {text}");
        assert!(
            text.contains(&env.lib.join("librdmacm.so.1").display().to_string()),
            "{prog} did not bind to our librdmacm: {text}"
        );
    }
}

/// The recorded layouts, measured again from Debian's headers by a C probe.
#[test]
fn the_public_structs_layouts_are_debians() {
    let Some(env) = dropin::setup("rdmacm_layouts") else {
        return;
    };
    let cc = Command::new("cc").arg("--version").output();
    if cc.map(|o| !o.status.success()).unwrap_or(true) {
        common::netns::skip("rdmacm_layouts", "no C compiler (cc)");
        return;
    }
    // struct -> fields recorded (those with an offset line).
    let mut want: Vec<(String, String, usize, usize)> = Vec::new(); // (struct, field, off, size)
    let mut sizes: Vec<(String, usize)> = Vec::new();
    let mut cur = String::new();
    for l in data("rdmacm44_layouts.txt").lines() {
        if let Some(rest) = l.strip_prefix("struct ") {
            let (name, size) = rest.split_once(": size ").unwrap();
            cur = name.to_string();
            if !cur.starts_with("ucma_abi") {
                sizes.push((cur.clone(), size.trim().parse().unwrap()));
            }
        } else if !cur.starts_with("ucma_abi") && l.contains(" off ") {
            let w: Vec<&str> = l.split_whitespace().collect();
            // FIELD off N size M
            want.push((
                cur.clone(),
                w[0].to_string(),
                w[2].parse().unwrap(),
                w[4].parse().unwrap(),
            ));
        }
    }
    assert!(sizes.iter().any(|(s, n)| s == "rdma_cm_id" && *n == 416));
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/rdma_cma.h>\nint main(void){\n",
    );
    for (s, _) in &sizes {
        c += &format!("printf(\"struct {s}: size %zu\\n\", sizeof(struct {s}));\n");
    }
    for (s, f, _, _) in &want {
        c += &format!(
            "printf(\"{s}.{f} off %zu size %zu\\n\", offsetof(struct {s}, {f}), sizeof(((struct {s}*)0)->{f}));\n"
        );
    }
    c += "return 0;}\n";
    let dir = std::env::temp_dir().join(format!("roce-emu-rdmacm-layout.{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("probe.c"), c).unwrap();
    let build = Command::new("cc")
        .arg("-o")
        .arg(dir.join("probe"))
        .arg(dir.join("probe.c"))
        .arg(format!("-I{}", env.root.join("usr/include").display()))
        .output()
        .unwrap();
    assert!(build.status.success(), "{}", dropin::show(&build));
    let out = Command::new(dir.join("probe")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = std::fs::remove_dir_all(&dir);
    for (s, n) in &sizes {
        assert!(
            text.contains(&format!("struct {s}: size {n}\n")),
            "{s}: {text}"
        );
    }
    for (s, f, off, size) in &want {
        assert!(
            text.contains(&format!("{s}.{f} off {off} size {size}\n")),
            "{s}.{f}: {text}"
        );
    }
}

/// Every `extern "C" fn` of rdmacm/src runs its body under `guard::` (as abi's test).
#[test]
fn every_extern_c_entry_of_rdmacm_is_guarded() {
    let dir = repo().join("rdmacm/src");
    let mut missing = Vec::new();
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".rs") || name == "ffi.rs" || name == "guard.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("extern \"C\" fn ") {
            let after = &rest[at..];
            let fname: String = after["extern \"C\" fn ".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
                .collect();
            let open = after.find("{\n").unwrap();
            let first = after[open + 2..].trim_start();
            if !first.starts_with("guard::") {
                missing.push(format!("{name}: {fname}"));
            }
            n += 1;
            rest = &after[open..];
        }
    }
    assert!(n >= 40, "found only {n} entries");
    assert!(
        missing.is_empty(),
        "extern \"C\" fns without a guard: {missing:#?}"
    );
}
