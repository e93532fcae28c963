//! `roce-emu demo` over real UDP sockets on loopback: every RC operation, every byte
//! verified, without loss and with 5% loss each way. One test, so the runs never compete
//! for the same addresses.

use std::process::Command;

fn demo(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_roce-emu"))
        .arg("demo")
        .args(args)
        .output()
        .expect("run roce-emu demo");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "demo {args:?} exited {:?}",
        out.status
    );
    text
}

#[test]
fn demo_verifies_every_operation_with_and_without_loss() {
    for args in [
        &["-n", "20"][..],
        &["-n", "20", "--loss", "0.05", "--seed", "7"][..],
        &[
            "-n",
            "10",
            "-m",
            "4096",
            "--a",
            "127.0.0.3",
            "--b",
            "127.0.0.4",
        ][..],
    ] {
        let text = demo(args);
        assert!(text.contains("PASS:"), "no PASS line for {args:?}");
        assert!(!text.contains("FAILED"));
        for op in [
            "SEND ",
            "SEND_WITH_IMM",
            "RDMA_WRITE ",
            "RDMA_WRITE_WITH_IMM",
            "RDMA_READ",
            "COMPARE_SWAP",
            "FETCH_ADD",
        ] {
            assert!(text.contains(op), "{op} missing from the table");
        }
    }
    // A bad argument is a clear error, not a panic.
    let out = Command::new(env!("CARGO_BIN_EXE_roce-emu"))
        .args(["demo", "-m", "1500"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a path MTU"));
}
