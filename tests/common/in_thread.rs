//! A daemon (`daemon::server::Daemon`) run on a thread of the test process, for tests that
//! attach hand-driven processes to it or read its counters; stopped and joined when
//! dropped, its socket removed.

use roce_emu::daemon::server::{Config, Daemon};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub socket: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Opens the daemon `cfg` describes and runs it until dropped.
pub fn start(cfg: Config) -> Running {
    let socket = cfg.socket.clone();
    let d = Daemon::open(cfg).expect("daemon");
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = Arc::clone(&stop);
    let thread = std::thread::spawn(move || d.run(&s2).map(drop).unwrap());
    Running {
        stop,
        thread: Some(thread),
        socket,
    }
}
