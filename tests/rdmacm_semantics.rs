//! librdmacm's semantics through its C API, on the drop-in librdmacm.so.1 attached to a
//! `roce-emu daemon --port udp:127.0.63.25`: a probe (tests/data/rdmacm/semantics.c)
//! compiled against Debian 12's rdma_cma.h checks O_NONBLOCK (EAGAIN) and poll on the
//! channel fd, the id's device after ADDR_RESOLVED, rdma_migrate_id and rdma_destroy_id
//! each waiting for the ack of an event handed out, events following a migrated id to its
//! new channel, the route, and the synchronous mode of a NULL channel (a connect to a
//! port nobody listens on fails with ECONNREFUSED, the REJ's meaning), rdma_getaddrinfo
//! (RAI_PASSIVE, RAI_NUMERICHOST, port services, the wildcard), and a signal in a blocking
//! rdma_get_cm_event (EINTR without SA_RESTART; with it the wait goes on).

mod common;

use common::daemon::Daemon;
use common::dropin;
use std::process::Command;
use std::time::Duration;

#[test]
fn the_c_api_behaves_as_librdmacm() {
    let Some(env) = dropin::setup("rdmacm_semantics") else {
        return;
    };
    if Command::new("cc")
        .arg("--version")
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        common::netns::skip("rdmacm_semantics", "no C compiler (cc)");
        return;
    }
    let src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/rdmacm/semantics.c");
    let exe = std::env::temp_dir().join(format!("roce-emu-rdmacm-sem.{}", std::process::id()));
    let build = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg(format!("-I{}", env.root.join("usr/include").display()))
        .arg(format!("-L{}", env.lib.display()))
        .args(["-l:librdmacm.so.1", "-l:libibverbs.so.1", "-lpthread"])
        .output()
        .unwrap();
    assert!(build.status.success(), "{}", dropin::show(&build));
    let d = Daemon::start(
        None,
        "udp:127.0.63.25",
        "rdmacm_semantics",
        &["--spin-us", "0"],
    );
    let child = Command::new(&exe)
        .arg("127.0.63.25")
        .env("LD_LIBRARY_PATH", env.library_path())
        .env(
            "ROCE_EMU_DEVICES",
            format!("rxe0=daemon:{}", d.socket.display()),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = dropin::finish(child, Duration::from_secs(60), "semantics probe");
    let _ = std::fs::remove_file(&exe);
    let text = dropin::stdout(&out);
    assert!(
        out.status.success() && text.ends_with("OK\n"),
        "{}",
        dropin::show(&out)
    );
    for line in [
        "signals: EINTR without SA_RESTART, restarted with it",
        "nonblocking empty channel: EAGAIN",
        "RDMA_CM_EVENT_ADDR_RESOLVED: verbs rxe0",
        "RDMA_CM_EVENT_ROUTE_RESOLVED: num_paths 1",
        "sync connect to an empty port: ECONNREFUSED",
        "rdma_getaddrinfo: passive, active, wildcard, numeric-only",
    ] {
        assert!(text.contains(line), "{text}");
    }
}
