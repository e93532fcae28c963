//! The out-of-band exchange with the peer, as perftest does it: address records, the
//! reports, and the TCP connection that runs the NIC while it waits.

use super::*;

// ---- the address record -----------------------------------------------------------------

/// One side's record (perftest's `struct pingpong_dest`, as `ethernet_write_keys` prints it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub lid: u16,
    pub out_reads: u16,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    pub vaddr: u64,
    pub gid: [u8; 16],
    pub srqn: u32,
}

impl Record {
    /// `"%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 x "%02x:" + "%08x:"` and a NUL.
    pub fn to_bytes(self) -> [u8; RECORD_LEN] {
        let mut s = String::with_capacity(RECORD_LEN);
        let _ = write!(
            s,
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        for b in self.gid {
            let _ = write!(s, "{b:02x}:");
        }
        let _ = write!(s, "{:08x}:", self.srqn);
        let mut rec = [0u8; RECORD_LEN];
        rec[..s.len()].copy_from_slice(s.as_bytes());
        rec
    }

    /// Reads a record: 23 colon-terminated hexadecimal fields before the NUL.
    pub fn parse(rec: &[u8]) -> Option<Record> {
        let end = rec.iter().position(|&b| b == 0)?;
        let text = std::str::from_utf8(&rec[..end]).ok()?;
        let f: Vec<&str> = text.split(':').collect();
        if f.len() != 24 || !f[23].is_empty() {
            return None;
        }
        let h = |t: &str, bits: u32| {
            let v = u64::from_str_radix(t, 16).ok()?;
            (t.len() <= 16 && (bits == 64 || v >> bits == 0)).then_some(v)
        };
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = h(f[6 + i], 8)? as u8;
        }
        Some(Record {
            lid: h(f[0], 16)? as u16,
            out_reads: h(f[1], 16)? as u16,
            qpn: h(f[2], 24)? as u32,
            psn: h(f[3], 24)? as u32,
            rkey: h(f[4], 32)? as u32,
            vaddr: h(f[5], 64)?,
            gid,
            srqn: h(f[22], 32)? as u32,
        })
    }

    pub(super) fn gid_v6(&self) -> std::net::Ipv6Addr {
        std::net::Ipv6Addr::from(self.gid)
    }
}

/// The figures perftest exchanges after a test (`struct bw_report_data`, the first five).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Report {
    pub size: u64,
    pub iters: u64,
    pub bw_peak: f64,
    pub bw_avg: f64,
    pub msg_rate: f64,
}

// ---- the out-of-band connection, with the NIC running -----------------------------------

/// The TCP connection of the exchange. Reads keep the NIC running: once the QP is up, the
/// peer may be sending while we wait for its next record.
pub(super) struct Oob {
    pub(super) s: TcpStream,
    pub(super) peer: SocketAddr,
    pub(super) client: bool,
    pub(super) timeout: Duration,
    pub(super) tool: &'static str,
}

impl Oob {
    pub(super) fn role(&self) -> &'static str {
        if self.client {
            "server"
        } else {
            "client"
        }
    }

    pub(super) fn io_err(&self, doing: &'static str, e: std::io::Error) -> PerfError {
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => PerfError::ExchangeTimeout {
                peer: self.peer,
                doing,
                secs: self.timeout.as_secs_f64(),
                tool: self.tool,
                role: self.role(),
            },
            ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::BrokenPipe
            | ErrorKind::ConnectionAborted => PerfError::ExchangeClosed {
                peer: self.peer,
                doing,
            },
            _ => PerfError::Exchange {
                peer: self.peer,
                doing,
                source: e,
            },
        }
    }

    pub(super) fn send(&mut self, data: &[u8], doing: &'static str) -> Result<()> {
        // A few hundred bytes at most: the socket buffer takes them without blocking.
        self.s.write_all(data).map_err(|e| self.io_err(doing, e))
    }

    /// Reads exactly `buf`, running `nic` meanwhile; gives up after `timeout` without a
    /// byte from the peer or a packet from the NIC.
    pub(super) fn recv(
        &mut self,
        mut nic: Option<&mut Nic>,
        buf: &mut [u8],
        doing: &'static str,
    ) -> Result<()> {
        self.s
            .set_nonblocking(true)
            .map_err(|e| self.io_err(doing, e))?;
        let mut got = 0;
        let mut last = Instant::now();
        let mut spin = Spin::new(nic.as_deref().map_or(Duration::ZERO, |n| n.spin));
        while got < buf.len() {
            match self.s.read(&mut buf[got..]) {
                Ok(0) => return Err(self.io_err(doing, ErrorKind::UnexpectedEof.into())),
                Ok(n) => {
                    got += n;
                    last = Instant::now();
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    let wait = Duration::from_millis(20);
                    if let Some(n) = nic.as_deref_mut() {
                        // The peer's traffic may be running: poll as the data loops do.
                        if n.service()? {
                            spin.active();
                            last = Instant::now();
                            continue;
                        }
                        if spin.keep_polling() {
                            continue;
                        }
                        spin.slept();
                    }
                    if last.elapsed() > self.timeout {
                        return Err(self.io_err(doing, ErrorKind::TimedOut.into()));
                    }
                    match nic.as_deref() {
                        Some(n) => n
                            .ctx
                            .wait_with(&[self.s.as_fd()], wait)
                            .map_err(verbs("waiting for the NIC"))?,
                        None => wait_readable(&[self.s.as_fd()], wait),
                    }
                }
                Err(e) => return Err(self.io_err(doing, e)),
            }
        }
        self.s
            .set_nonblocking(false)
            .map_err(|e| self.io_err(doing, e))
    }

    /// One step: the client writes first, the server reads first.
    pub(super) fn xchg(
        &mut self,
        nic: Option<&mut Nic>,
        my: &[u8],
        rem: &mut [u8],
        doing: &'static str,
    ) -> Result<()> {
        if self.client {
            self.send(my, doing)?;
            self.recv(nic, rem, doing)
        } else {
            self.recv(nic, rem, doing)?;
            self.send(my, doing)
        }
    }

    pub(super) fn hand_shake(
        &mut self,
        nic: Option<&mut Nic>,
        my: &Record,
        doing: &'static str,
    ) -> Result<Record> {
        let mut rem = [0u8; RECORD_LEN];
        self.xchg(nic, &my.to_bytes(), &mut rem, doing)?;
        Record::parse(&rem).ok_or_else(|| PerfError::Record {
            peer: self.peer,
            what: "address record",
            text: String::from_utf8_lossy(&rem).into_owned(),
        })
    }

    pub(super) fn xchg_u64(
        &mut self,
        nic: Option<&mut Nic>,
        v: u64,
        doing: &'static str,
    ) -> Result<u64> {
        let mut rem = [0u8; 8];
        self.xchg(nic, &v.to_be_bytes(), &mut rem, doing)?;
        Ok(u64::from_be_bytes(rem))
    }

    /// perftest's `xchg_bw_reports`: five 8-byte big-endian values, one step each.
    pub(super) fn xchg_reports(
        &mut self,
        mut nic: Option<&mut Nic>,
        my: &Report,
    ) -> Result<Report> {
        const DOING: &str = "exchanging the reports";
        Ok(Report {
            size: self.xchg_u64(nic.as_deref_mut(), my.size, DOING)?,
            iters: self.xchg_u64(nic.as_deref_mut(), my.iters, DOING)?,
            bw_peak: f64::from_bits(self.xchg_u64(
                nic.as_deref_mut(),
                my.bw_peak.to_bits(),
                DOING,
            )?),
            bw_avg: f64::from_bits(self.xchg_u64(
                nic.as_deref_mut(),
                my.bw_avg.to_bits(),
                DOING,
            )?),
            msg_rate: f64::from_bits(self.xchg_u64(nic, my.msg_rate.to_bits(), DOING)?),
        })
    }
}
