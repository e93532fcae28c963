//! The drop-in libibverbs.so.1 seen from C: tests/abi/verbs_paths.c, compiled against
//! Debian 12's libibverbs-dev headers and linked against our library, drives every inline
//! path of verbs.h (ops table, verbs_context, ibv_qp_ex, ibv_cq_ex) and the cases real
//! programs meet: O_NONBLOCK event fds, EOPNOTSUPP features, memory deregistered and
//! unmapped under a peer's WRITEs, fork. Address 127.0.21.1.

mod common;

use common::dropin;
use std::process::Command;
use std::time::Duration;

/// Compiles tests/abi/NAME.c against Debian's headers and our library, runs it with
/// device rxe0 on `addr`, and returns its stdout once it exited 0.
fn run_c(name: &str, addr: &str) -> Option<String> {
    let env = dropin::setup("abi_paths")?;
    let exe = std::env::temp_dir().join(format!("roce-emu-{name}-{}", std::process::id()));
    let src = format!("{}/tests/abi/{name}.c", env!("CARGO_MANIFEST_DIR"));
    let cc = Command::new("cc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(src)
        .arg(format!("-I{}", env.root.join("usr/include").display()))
        .arg(format!("-L{}", env.lib.display()))
        .arg("-libverbs")
        .arg("-pthread")
        .output()
        .expect("cc");
    assert!(cc.status.success(), "cc: {}", dropin::show(&cc));
    let child = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &env.lib)
        .env("ROCE_EMU_DEVICES", format!("rxe0={addr}"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = dropin::finish(child, Duration::from_secs(120), name);
    let _ = std::fs::remove_file(&exe);
    assert!(out.status.success(), "{}", dropin::show(&out));
    Some(dropin::stdout(&out))
}

#[test]
fn a_c_program_drives_every_inline_path() {
    let Some(text) = run_c("verbs_paths", "127.0.21.1") else {
        return;
    };
    assert_eq!(text.matches("PASS ").count(), 10, "{text}");
}

/// tests/abi/hardening.c (address 127.0.21.2): registration refuses memory the NIC cannot
/// use (EFAULT), memory made read-only after registration fails a peer's WRITE cleanly, a
/// forked child destroys what it inherited and closes the device, and three threads post
/// to one QP at once.
#[test]
fn hardening_fork_threads_and_foreign_memory() {
    let Some(text) = run_c("hardening", "127.0.21.2") else {
        return;
    };
    assert_eq!(text.matches("PASS ").count(), 5, "{text}");
}

/// tests/abi/ud.c (address 127.0.21.3): UD QPs, address handles, the GRH slot and the
/// reply's address handle from the completion, from C.
#[test]
fn ud_datagrams_and_address_handles_from_c() {
    let Some(text) = run_c("ud", "127.0.21.3") else {
        return;
    };
    assert_eq!(text.matches("PASS ").count(), 6, "{text}");
}

/// tests/abi/windows.c (address 127.0.21.4): memory windows of type 1 (ibv_bind_mw) and 2
/// (IBV_WR_BIND_MW) let a peer WRITE and READ inside them only, SEND with Invalidate and
/// LOCAL_INV kill a type 2 window's key, a region under a bound window is not
/// deregistered; ibv_rereg_mr (access, translation, PD) keeps the lkey; ibv_resize_cq
/// keeps every completion and refuses to shrink below what the CQ holds; completion
/// timestamps lie between two readings of ibv_query_rt_values_ex around the operation.
#[test]
fn memory_windows_rereg_resize_and_timestamps() {
    let Some(text) = run_c("windows", "127.0.21.4") else {
        return;
    };
    assert_eq!(text.matches("PASS ").count(), 7, "{text}");
}

/// tests/abi/gids.c (address 127.0.21.6, on no interface): the GID table as rxe's through
/// ibv_query_port/gid/gid_ex/gid_table/gid_type and the sysfs files; sgid_index 1 (the
/// device's address) connects, 0 (the link-local default GID) and an empty slot are EINVAL.
#[test]
fn the_gid_table_through_the_c_api_and_sysfs() {
    let Some(text) = run_c("gids", "127.0.21.6") else {
        return;
    };
    assert_eq!(text.matches("PASS ").count(), 6, "{text}");
}

/// tests/abi/signals.c (address 127.0.21.7): a signal handler without SA_RESTART ends a
/// blocking ibv_get_cq_event or ibv_get_async_event with EINTR, one with SA_RESTART does
/// not, as the kernel's read(2) of the fd (qperf's SIGALRM ends its latency loop so).
#[test]
fn signals_interrupt_blocking_event_waits_as_the_kernels() {
    let Some(text) = run_c("signals", "127.0.21.7") else {
        return;
    };
    assert_eq!(text.matches("PASS ").count(), 3, "{text}");
}
