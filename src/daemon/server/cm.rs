//! The server loop's side of the connection manager (`super::super::cm_host`): CM
//! clients' hellos and requests, QP1 packets from the port, and each turn the CM's
//! timers, address resolutions, MADs and events.

use super::clients::Leave;
use super::*;
use crate::daemon::cm_host;
use crate::daemon::qp1::Net;

impl Daemon {
    pub(super) fn cm_now(&self) -> crate::engine::Instant {
        cm_host::instant(self.now())
    }

    /// `CmHello` on client `k`'s connection: it becomes a CM client (or is refused).
    pub(super) fn cm_hello(&mut self, k: usize, version: u32) -> Result<(), Leave> {
        let c = &self.clients[k];
        let refuse = |why: Leave| {
            let m = ToProcess::Refused {
                why: why.to_string(),
            };
            let _ = control::send(c.sock.as_fd(), &m, &[]);
            Err(why)
        };
        if c.link.is_some() || c.cm {
            return refuse(Leave::AlreadyAttached);
        }
        let Some(welcome) = self.cm.hello(version, &self.info.addrs) else {
            return refuse(Leave::CmVersion { theirs: version });
        };
        let c = &mut self.clients[k];
        c.cm = true;
        tracing::info!(pid = c.counters.pid, owner = c.id, "CM client connected");
        c.queue(&welcome)
    }

    /// One message on CM client `k`'s connection, if one is waiting: `Ok(true)` if one
    /// was served, `Ok(false)` if none was waiting, `Err` when the connection ended.
    pub(super) fn serve_cm(&mut self, k: usize) -> Result<bool, String> {
        let msg = match control::recv::<serde_json::Value>(self.clients[k].sock.as_fd()) {
            Ok((v, _fds)) => Ok(v),
            Err(ControlError::Closed) => return Err("it closed its socket".into()),
            Err(ControlError::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Ok(false)
            }
            Err(ControlError::Io(e)) => return Err(format!("its socket failed: {e}")),
            // Not JSON, or too large: answered EINVAL and counted, the connection stays.
            Err(e) => Err(e),
        };
        let now = self.cm_now();
        let owner = self.clients[k].id;
        let reply = self.cm.request(now, owner, msg);
        self.clients[k].queue(&reply).map_err(|e| e.to_string())?;
        Ok(true)
    }

    /// A packet for QP1 from the port.
    pub(super) fn qp1_received(&mut self, now: crate::engine::Instant, r: &Received, pkt: &[u8]) {
        self.counters.rcvd_pkts += 1;
        let net = Net {
            src: r.src,
            dst: r.dst,
            ipv4_id: r.ipv4_id,
        };
        self.cm.receive(now, &net, pkt);
    }

    /// CM client `id` left (its connection is already removed).
    pub(super) fn cm_gone(&mut self, id: u64) {
        let now = self.cm_now();
        self.cm.gone(now, id);
        tracing::info!(owner = id, "CM client gone");
        // The DREQs and REJs of its connections leave now; a port error shows next turn.
        let _ = self.cm_turn();
    }

    /// How long the loop may sleep for the CM's next deadline.
    pub(super) fn cm_wait(&self) -> Duration {
        self.cm.wait(self.cm_now()).unwrap_or(MAX_SLEEP)
    }

    /// The CM's work of a turn: due timers, address resolutions, MADs out (and back, for
    /// our own addresses), events to their clients. Each bounded; a few rounds, since a
    /// hairpinned MAD makes more work at once. Whether anything moved.
    pub(super) fn cm_turn(&mut self) -> Result<bool, ServerError> {
        // Idle (nothing called the CM, no deadline): no clock read, nothing to walk.
        if !self.cm.dirty && self.cm.deadline.is_none() {
            return Ok(false);
        }
        if !self.cm.due(self.cm_now()) {
            return Ok(false);
        }
        let mut moved = false;
        let mut more = false;
        for _ in 0..4 {
            let now = self.cm_now();
            self.cm.timers(now);
            let mut n = self.cm.resolve(now);
            let before = self.cm.qp1.hairpin_pkts;
            let sent = self.cm.transmit(
                now,
                &mut *self.port,
                &self.info.addrs,
                self.src_port,
                self.capture.is_some(),
            )?;
            self.counters.sent_pkts += sent as u64;
            n += sent + (self.cm.qp1.hairpin_pkts - before) as usize;
            n += self.cm_events();
            more = n > 0;
            if n == 0 {
                break;
            }
            moved = true;
        }
        self.cm.turn_done(more);
        Ok(moved)
    }

    /// Hands the CM's events to their clients; how many. A client whose outbox
    /// overflows is shut down (detached at its next look, as a corrupt ring).
    fn cm_events(&mut self) -> usize {
        let mut n = 0;
        while n < cm_host::EVENTS_PER_TURN {
            let Some((owner, ev)) = self.cm.cm.poll_event() else {
                break;
            };
            n += 1;
            let Some(c) = self.clients.iter_mut().find(|c| c.cm && c.id == owner) else {
                self.cm.clients.events_unowned += 1;
                continue;
            };
            self.cm.clients.events += 1;
            // Sent now if its socket takes it (the outbox is otherwise drained when the
            // loop next looks at the control sockets).
            let sent = c
                .queue(&crate::cm::ucma::ToLibrary::Event(ev))
                .map_err(|e| e.to_string())
                .and_then(|()| c.send_queued_answers().map_err(|e| e.to_string()));
            if let Err(why) = sent {
                c.counters.left = Some(why);
                let _ = c.sock.shutdown(std::net::Shutdown::Both);
            }
        }
        n
    }
}
