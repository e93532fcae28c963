//! The daemon's control side: the processes' control sockets (attach, counters, fault
//! rules, reports, `Using`), new connections, departures. Every send is non-blocking:
//! answers wait in the client's outbox until its socket takes them.

use super::*;

/// Why the daemon ends a process's connection (shown as its `left` in `counters`).
#[derive(Debug, thiserror::Error)]
pub(super) enum Leave {
    #[error("it left more than {} MiB of answers unread", MAX_OUTBOX >> 20)]
    Unread,
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("already attached")]
    AlreadyAttached,
    #[error("protocol version {theirs}; this daemon speaks {}", control::VERSION)]
    Version { theirs: u32 },
    #[error("no free QPN block (255 processes attached or in quarantine)")]
    NoBlock,
    #[error("cannot create the rings: {0}")]
    Rings(crate::ring::LinkError),
    #[error("cannot send the rings: {0}")]
    SendRings(crate::ring::LinkError),
    #[error(
        "CM protocol version {theirs}; this daemon speaks {}",
        crate::cm::ucma::VERSION
    )]
    CmVersion { theirs: u32 },
}

impl Client {
    /// Queues an answer; `Err` when the process has left too many unread.
    pub(super) fn queue(&mut self, msg: &impl Serialize) -> Result<(), Leave> {
        let bytes = control::encode(msg)?;
        self.outbox_bytes += bytes.len();
        self.outbox.push_back(bytes);
        if self.outbox_bytes > MAX_OUTBOX {
            return Err(Leave::Unread);
        }
        Ok(())
    }

    /// Sends what is queued until the socket is full; `Err` if the socket failed.
    pub(super) fn send_queued_answers(&mut self) -> Result<(), ControlError> {
        while let Some(m) = self.outbox.front() {
            match control::try_send_bytes(self.sock.as_fd(), m) {
                Ok(()) => {
                    self.outbox_bytes -= m.len();
                    self.outbox.pop_front();
                }
                Err(ControlError::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Daemon {
    /// Serves every control message waiting; detaches processes whose socket ended.
    pub(super) fn control(&mut self) {
        let mut k = 0;
        while k < self.clients.len() {
            let mut gone: Option<String> = None;
            for _ in 0..CONTROL_MSGS {
                if self.clients[k].cm {
                    // A CM client's messages are `ucma::Request`s (`server::cm`).
                    match self.serve_cm(k) {
                        Ok(true) => continue,
                        Ok(false) => break,
                        Err(why) => {
                            gone = Some(why);
                            break;
                        }
                    }
                }
                let sock = self.clients[k].sock.as_fd();
                let mut pfd = [PollFd::new(sock, PollFlags::POLLIN)];
                if poll(&mut pfd, PollTimeout::ZERO).unwrap_or(0) == 0 {
                    break;
                }
                match control::recv::<ToDaemon>(sock) {
                    Ok((msg, _fds)) => {
                        if let Err(why) = self.serve(k, msg) {
                            gone = Some(why.to_string());
                            break;
                        }
                    }
                    // A reset is a close with our answers unread: not a bad message.
                    Err(ControlError::Closed) => {
                        gone = Some("it closed its socket".into());
                        break;
                    }
                    Err(ControlError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                        gone = Some("it closed its socket with answers unread".into());
                        break;
                    }
                    Err(ControlError::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        self.counters.control_errors += 1;
                        gone = Some(format!("bad control message: {e}"));
                        break;
                    }
                }
            }
            if gone.is_none() {
                if let Err(why) = self.clients[k].send_queued_answers() {
                    gone = Some(format!("its socket failed: {why}"));
                }
            }
            if gone.is_none()
                && self.clients[k].link.is_none()
                && !self.clients[k].cm
                && self.clients[k].since.elapsed() > UNATTACHED_TTL
            {
                gone = Some(format!(
                    "connected {} s ago and never attached",
                    UNATTACHED_TTL.as_secs()
                ));
            }
            match gone {
                Some(why) => self.detach(k, why),
                None => k += 1,
            }
        }
    }

    /// One control message of client `k`; `Err` ends its attachment.
    pub(super) fn serve(&mut self, k: usize, msg: ToDaemon) -> Result<(), Leave> {
        match msg {
            ToDaemon::Info => {
                let m = ToProcess::Info {
                    version: control::VERSION,
                    port: self.info.clone(),
                };
                self.clients[k].queue(&m)
            }
            ToDaemon::Using => {
                let id = self.clients[k].id;
                self.leases.mark_used(id);
                Ok(())
            }
            ToDaemon::QpCounters { report } => {
                let c = &mut self.clients[k];
                let block = c.link.as_ref().map(|_| c.counters.block);
                c.counters.engine.apply(&report, block);
                Ok(())
            }
            ToDaemon::Counters => {
                let processes = self.summary().processes;
                let processes = processes
                    .iter()
                    .filter_map(|p| serde_json::to_value(p).ok());
                let json = serde_json::json!({
                    "port": self.info,
                    "counters": self.counters,
                    "leases": self.leases.counts(self.now()),
                    "port_stats": self.port.stats(),
                    "l2": self.port.l2_stats(),
                    "qp1": self.cm.qp1,
                    "cm": self.cm.cm.stats(),
                    "cm_clients": self.cm.client_counters(),
                    "faults": self.fault_report(),
                    "queue": self.queue_report(),
                    // What attached processes' engines are given (`--cc`).
                    "cc": self.cfg.cc,
                    "capture": self.capture.as_ref().map(|c| serde_json::json!({
                        "file": self.cfg.pcap,
                        "frames": c.frames.load(Ordering::Relaxed),
                        "errors": c.errors.load(Ordering::Relaxed),
                    })),
                });
                crate::daemon::report::counters_answer(json, processes.collect())
                    .iter()
                    .try_for_each(|m| self.clients[k].queue(m))
            }
            ToDaemon::Fault { rule } => {
                let error = match crate::daemon::fault::parse(&rule) {
                    Ok(cmd) => {
                        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
                        match cmd {
                            FaultCommand::Add(r) => {
                                tracing::info!(rule = %r, "fault rule added");
                                f.add(r);
                            }
                            FaultCommand::Clear => {
                                tracing::info!("fault rules cleared");
                                f.clear();
                            }
                            // The rules are in the counters: nothing changes.
                            FaultCommand::List => {}
                        }
                        None
                    }
                    Err(e) => Some(e.to_string()),
                };
                let m = ToProcess::FaultSet { error };
                self.clients[k].queue(&m)
            }
            ToDaemon::Queue { command } => {
                let error = self.queue_command(&command).err();
                let m = ToProcess::QueueSet {
                    error,
                    report: self.queue_report(),
                };
                self.clients[k].queue(&m)
            }
            ToDaemon::CmHello { version, pid: _ } => self.cm_hello(k, version),
            ToDaemon::Hello {
                version,
                pid: claimed,
            } => {
                let sock = self.clients[k].sock.as_fd();
                let refuse = |why: Leave| {
                    let m = ToProcess::Refused {
                        why: why.to_string(),
                    };
                    let _ = control::send(sock, &m, &[]);
                    Err(why)
                };
                if self.clients[k].link.is_some() || self.clients[k].cm {
                    return refuse(Leave::AlreadyAttached);
                }
                if version != control::VERSION {
                    self.counters.refused += 1;
                    return refuse(Leave::Version { theirs: version });
                }
                let now = self.now();
                let id = self.clients[k].id;
                let Some(block) = self.leases.lease(now, id) else {
                    self.counters.refused += 1;
                    return refuse(Leave::NoBlock);
                };
                let (end, fds) = match Link::create(self.cfg.ring_bytes) {
                    Ok(x) => x,
                    Err(e) => {
                        self.leases.release(now, id);
                        return refuse(Leave::Rings(e));
                    }
                };
                let welcome = ToProcess::Welcome {
                    version: control::VERSION,
                    block,
                    port: self.info.clone(),
                    src_port: self.src_port,
                    cc: self.cfg.cc.clone(),
                };
                control::send(sock, &welcome, &[])?;
                fds.send(sock).map_err(Leave::SendRings)?;
                let c = &mut self.clients[k];
                c.counters.block = block;
                c.link = Some(end);
                self.counters.attached += 1;
                // The pid shown is the kernel's (`accept`), not the one it claims.
                let pid = c.counters.pid;
                if claimed != pid {
                    tracing::debug!(pid, claimed, "a process claims another pid");
                }
                tracing::info!(pid, block, "process attached");
                Ok(())
            }
        }
    }

    /// The fault rules in force and those cleared, with their counters.
    pub(super) fn fault_report(&self) -> serde_json::Value {
        let f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        serde_json::json!({ "rules": f.report(), "cleared": f.cleared() })
    }

    /// The port's egress queue: settings, whether on, counters.
    pub(super) fn queue_report(&self) -> serde_json::Value {
        let q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        serde_json::to_value(q.report(Instant::now())).unwrap_or_default()
    }

    /// `set KEY=VALUE...`, `clear` or `show` (`roce-emu queue`); an error names the word
    /// to fix.
    fn queue_command(&mut self, command: &str) -> Result<(), String> {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let command = command.trim();
        let (verb, rest) = command
            .split_once(char::is_whitespace)
            .unwrap_or((command, ""));
        match verb {
            "set" => {
                q.set(rest).map_err(|e| e.to_string())?;
                tracing::info!(queue = %rest, "queue set");
            }
            "clear" | "show" if !rest.trim().is_empty() => {
                return Err(format!(
                    "`{verb}` takes nothing after it (found `{}`)",
                    rest.trim()
                ))
            }
            "clear" => {
                tracing::info!("queue cleared");
                q.clear();
            }
            "show" => {}
            _ => {
                return Err(format!(
                    "no queue command `{verb}`: use set KEY=VALUE..., clear or show"
                ))
            }
        }
        Ok(())
    }

    pub(super) fn detach(&mut self, k: usize, why: String) {
        // What it queued before it went (the ACK of its last message, as a NIC closing
        // sends) leaves first: it may have come after this turn's `send_queued`. A port
        // error here shows again on the next turn.
        let _ = self.send_queued();
        let mut c = self.clients.swap_remove(k);
        if c.link.is_some() {
            let n = self.leases.release(self.now(), c.id);
            self.counters.detached += 1;
            tracing::info!(pid = c.counters.pid, blocks = n, "process detached: {why}");
            c.counters.left.get_or_insert(why);
            if self.departed.len() >= crate::daemon::report::MAX_DEPARTED {
                self.departed.remove(0);
            }
            self.departed.push(c.counters.clone());
        }
        if c.cm {
            self.cm_gone(c.id);
        }
        // Dropping `c` unmaps its rings and closes its socket.
    }

    /// Takes new connections (a few per turn, a bounded number in all): only the daemon's
    /// own user (and root) may attach. Each socket is non-blocking from here on: an answer
    /// the process does not read fails, it never waits.
    pub(super) fn accept(&mut self) {
        // Refused ones: discard what they send; drop them at their EOF or after a second.
        self.refused.retain(|(s, since)| {
            use std::io::Read;
            let mut buf = [0u8; 256];
            let gone = matches!((&*s).read(&mut buf), Ok(0));
            !gone && since.elapsed() < Duration::from_secs(1)
        });
        for _ in 0..ACCEPT_PER_TURN {
            let Ok((sock, _)) = self.listener.accept() else {
                break;
            };
            let (uid, pid) = control::peer(sock.as_fd()).unwrap_or((u32::MAX, 0));
            let _ = sock.set_nonblocking(true);
            if self.clients.len() >= MAX_CLIENTS {
                self.counters.refused += 1;
                let why = format!("{MAX_CLIENTS} connections already");
                let _ = control::send(sock.as_fd(), &ToProcess::Refused { why }, &[]);
                continue;
            }
            if uid != self.uid && uid != 0 {
                self.counters.refused += 1;
                let why = format!(
                    "user {uid} may not use this daemon (it runs as user {})",
                    self.uid
                );
                let _ = control::send(sock.as_fd(), &ToProcess::Refused { why }, &[]);
                // Closed only once the other side has read the refusal (its EOF) or after
                // a moment: closing on an unread request of theirs would reset their
                // socket (ECONNRESET) before they read why.
                let _ = sock.shutdown(std::net::Shutdown::Write);
                if self.refused.len() < MAX_CLIENTS {
                    self.refused.push((sock, Instant::now()));
                }
                continue;
            }
            let _ = sock.set_send_buffer_size(CONTROL_SNDBUF);
            let id = self.next_id;
            self.next_id += 1;
            self.clients.push(Client {
                id,
                sock,
                since: Instant::now(),
                link: None,
                counters: ProcessCounters {
                    uid,
                    pid,
                    ..ProcessCounters::default()
                },
                dirty: false,
                outbox: Default::default(),
                outbox_bytes: 0,
                cm: false,
                held_since: None,
            });
        }
    }
}
