//! The drop-in's exported symbols: every (name, version) pair that a Debian 12 program or
//! library imports from libibverbs.so.1 (ibverbs-utils, rdmacm-utils, perftest, librdmacm,
//! libmlx5, libefa, pyverbs, UCX 1.13's libuct_ib and libucs, qperf:
//! tests/data/abi/needed_by_debian12_all.txt, measured with nm)
//! is defined, with that version; so is every public name rdma-core 44 exports at its
//! default version (tests/data/abi/libibverbs44.defs); and nothing else leaks (no Rust
//! internals). The SONAME is libibverbs.so.1.

mod common;

use common::dropin;
use std::collections::BTreeSet;
use std::process::Command;

fn data(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/data/abi/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// `name@version` of every defined dynamic symbol (nm -D prints `@@` for the default).
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
        .collect()
}

#[test]
fn every_symbol_debian_12_imports_is_exported_with_its_version() {
    let Some(env) = dropin::setup("abi_exports") else {
        return;
    };
    let lib = env.lib.join("libibverbs.so.1");
    let have = exported(&lib);
    let needed: Vec<String> = data("needed_by_debian12_all.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    // 127, and UCX's ibv_event_type_str and ibv_node_type_str (IBVERBS_1.1).
    assert_eq!(needed.len(), 129, "the measured import list");
    let missing: Vec<&String> = needed.iter().filter(|n| !have.contains(*n)).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");

    let public: Vec<String> = data("libibverbs44.defs")
        .lines()
        .filter(|l| l.contains("@@"))
        .map(|l| l.trim().replace("@@", "@"))
        .collect();
    let missing: Vec<&String> = public.iter().filter(|n| !have.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "rdma-core 44 exports these, we do not: {missing:?}"
    );

    // Nothing but the verbs names, and the one call of our own that our librdmacm.so.1
    // makes (roce_emu_send_held, in a node of its own): a Rust symbol here would be a
    // version-script leak.
    let own = "roce_emu_send_held@ROCE_EMU_PRIVATE_1".to_string();
    assert!(have.contains(&own), "{own} missing");
    let leaks: Vec<&String> = have
        .iter()
        .filter(|s| !s.starts_with("IBVERBS_") && !s.starts_with("ROCE_EMU_PRIVATE_") && **s != own)
        .filter(|s| {
            let name = s.split('@').next().unwrap();
            !(name.starts_with("ibv_")
                || name.starts_with("_ibv_")
                || name.starts_with("verbs_")
                || name.starts_with("_verbs_")
                || name.starts_with("__verbs_")
                || name.starts_with("__ioctl_")
                || name.ends_with("_ibv_rate")
                || name == "execute_ioctl")
        })
        .collect();
    assert!(leaks.is_empty(), "unexpected exports: {leaks:?}");
    let unversioned: Vec<&String> = have
        .iter()
        .filter(|s| !s.starts_with("IBVERBS_") && !s.contains("@IBVERBS_") && **s != own)
        .filter(|s| !s.starts_with("ROCE_EMU_PRIVATE_"))
        .collect();
    assert!(
        unversioned.is_empty(),
        "unversioned exports: {unversioned:?}"
    );

    let dynamic = Command::new("readelf")
        .arg("-d")
        .arg(&lib)
        .output()
        .expect("readelf");
    let text = String::from_utf8_lossy(&dynamic.stdout);
    assert!(text.contains("Library soname: [libibverbs.so.1]"), "{text}");
}

#[test]
fn debians_provider_libraries_load_against_it() {
    // libmlx5 and libefa are BIND_NOW and import IBVERBS_PRIVATE_34: `ldd -r` resolves
    // every symbol of theirs against our library and reports any it cannot.
    let Some(env) = dropin::setup("abi_providers") else {
        return;
    };
    for lib in ["libmlx5.so.1", "libefa.so.1", "librdmacm.so.1"] {
        let path = env.root.join("usr/lib/x86_64-linux-gnu").join(lib);
        let out = Command::new("ldd")
            .arg("-r")
            .arg(&path)
            .env("LD_LIBRARY_PATH", env.library_path())
            .output()
            .expect("ldd");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{lib}: {text}");
        assert!(
            !text.contains("undefined symbol") && !text.contains("not found"),
            "{lib}: {text}"
        );
        assert!(
            text.contains(&env.lib.join("libibverbs.so.1").display().to_string()),
            "{lib} did not bind to ours: {text}"
        );
    }
}
