//! Network namespaces a test makes for itself (root only), deleted when dropped; and the
//! loud skip a test prints without root (a failure under CI, which has root).

use std::process::Command;

/// Says loudly that `test` did not run, and why; under CI that is a failure.
pub fn skip(test: &str, why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{why}: CI must run this test");
    }
    eprintln!("\n*** SKIPPED {test}: {why} ***\n");
}

/// A network namespace this test made, with `lo` up; deleted when dropped.
pub struct Netns(pub String);

impl Netns {
    /// `roceemu-PREFIX-PID`, so parallel tests and stale runs never collide.
    pub fn new(prefix: &str) -> Netns {
        let ns = Netns(format!("roceemu-{prefix}-{}", std::process::id()));
        run(&["netns", "add", &ns.0]);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NS ARGS`, which must succeed.
    pub fn ip(&self, args: &[&str]) {
        let mut a = vec!["-n", self.0.as_str()];
        a.extend_from_slice(args);
        run(&a);
    }

    /// `program` run inside the namespace.
    pub fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0, program]);
        c
    }
}

fn run(args: &[&str]) {
    let ok = Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "ip {}", args.join(" "));
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}
