use std::sync::atomic::AtomicBool;
use std::sync::Arc;

fn main() {
    // A closed stdout (`roce-emu demo | head -1`) must end the tool quietly, as it ends
    // `cat`: Rust starts programs with SIGPIPE ignored, so the write fails with EPIPE and
    // `println!` panics. The usual cure, SIGPIPE back to SIG_DFL, is an unsafe call
    // (libc::signal, nix's signal/sigaction) and this crate keeps unsafe code to two fenced
    // modules; signal-hook's safe `register_conditional_default` installs a handler that
    // runs the default action (terminate, status 128 + 13) while the flag is true, which is
    // the same for us. Done here, once, it covers every command, perf's output included.
    // Sockets are unaffected: std writes TCP with MSG_NOSIGNAL (a peer that closes the
    // exchange is still an EPIPE error), and UDP never raises SIGPIPE.
    if let Err(e) = signal_hook::flag::register_conditional_default(
        signal_hook::consts::SIGPIPE,
        Arc::new(AtomicBool::new(true)),
    ) {
        eprintln!("roce-emu: cannot restore SIGPIPE's default action: {e}");
    }
    std::process::exit(roce_emu::cli::main());
}
