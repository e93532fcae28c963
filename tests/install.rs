//! tools/install.sh into a prefix of the test's own: the binary, the drop-in, man pages and
//! completions land there, and the installed `roce-emu run` finds its library
//! (PREFIX/lib/roce-emu, beside PREFIX/bin) and runs Debian's unmodified ibv_devinfo on it.

mod common;

use common::dropin;
use std::path::Path;
use std::process::{Command, Stdio};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn installed_roce_emu_runs_an_unmodified_program() {
    // The Debian tree (for ibv_devinfo) and the debug drop-in the script installs.
    let Some(env) = dropin::setup("install") else {
        return;
    };
    let prefix = std::env::temp_dir().join(format!("roce-emu-install.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    let out = Command::new(repo().join("tools/install.sh"))
        .arg("--debug")
        .arg(&prefix)
        .stdin(Stdio::null())
        .output()
        .expect("run tools/install.sh");
    assert!(out.status.success(), "install.sh: {}", dropin::show(&out));
    for f in [
        "bin/roce-emu",
        "lib/roce-emu/libibverbs.so.1",
        "lib/roce-emu/librdmacm.so.1",
        "share/man/man1/roce-emu.1",
        "share/man/man1/roce-emu-run.1",
        "share/bash-completion/completions/roce-emu",
        "share/zsh/vendor-completions/_roce-emu",
        "share/fish/vendor_completions.d/roce-emu.fish",
    ] {
        assert!(prefix.join(f).is_file(), "install.sh did not install {f}");
    }
    let page = std::fs::read_to_string(prefix.join("share/man/man1/roce-emu-run.1")).unwrap();
    assert!(page.contains(".TH roce-emu-run"), "{page}");
    let bash =
        std::fs::read_to_string(prefix.join("share/bash-completion/completions/roce-emu")).unwrap();
    assert!(
        bash.contains("conform") && bash.contains("--devices"),
        "{bash}"
    );

    // Nothing points it at the build tree: it must find PREFIX/lib/roce-emu by itself.
    let run = Command::new(prefix.join("bin/roce-emu"))
        .args(["run", "--devices", "rxe0=127.0.0.1", "--"])
        .arg(env.bin("ibv_devinfo"))
        .env_remove("ROCE_EMU_DROPIN_DIR")
        .env("LD_LIBRARY_PATH", &env.tree_libs)
        .stdin(Stdio::null())
        .output()
        .expect("run the installed roce-emu");
    let text = dropin::show(&run);
    assert!(run.status.success(), "{text}");
    assert!(dropin::stdout(&run).contains("hca_id:\trxe0"), "{text}");
    let shell = Command::new(prefix.join("bin/roce-emu"))
        .arg("env")
        .env_remove("ROCE_EMU_DROPIN_DIR")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let lib = std::fs::canonicalize(prefix.join("lib/roce-emu")).unwrap();
    assert!(
        dropin::stdout(&shell).contains(&lib.display().to_string()),
        "{}",
        dropin::show(&shell)
    );
    let _ = std::fs::remove_dir_all(&prefix);
}
