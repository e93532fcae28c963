//! Counters: every packet sent or received, every drop by reason, every retry. Names are
//! rxe's (`rxe_hw_counters.c`) where the meaning matches, so the two can be compared.

use core::fmt;

macro_rules! counters {
    ($( $(#[doc = $doc:literal])* $variant:ident => $name:literal, )*) => {
        /// One counter. `name()` is the stable name printed by tools.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum Counter {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl Counter {
            /// Every counter, in declaration order.
            pub const ALL: &'static [Counter] = &[$(Counter::$variant),*];

            pub const fn name(self) -> &'static str {
                match self { $(Counter::$variant => $name,)* }
            }
        }
    };
}

counters! {
    /// RoCE packets handed to the caller for transmission.
    SentPkts => "sent_pkts",
    /// RoCE packets accepted into the QP pipeline.
    RcvdPkts => "rcvd_pkts",
    /// Bytes of the packets of `sent_pkts`: each RoCE packet whole, BTH through ICRC (the
    /// UDP payload), for rates (`roce-emu counters --watch`).
    SentBytes => "sent_bytes",
    /// Bytes of the packets of `rcvd_pkts`, counted as `sent_bytes`.
    RcvdBytes => "rcvd_bytes",
    /// Requests whose PSN was already seen (C9-105): re-acknowledged or replayed.
    DuplicateRequest => "duplicate_request",
    /// Requests ahead of the expected PSN: sequence NAK (once per gap) and drop.
    OutOfSeqRequest => "out_of_seq_request",
    /// Sequence-error NAKs received by the requester.
    RcvdSeqErr => "rcvd_seq_err",
    /// RNR NAKs received by the requester.
    RcvdRnrErr => "rcvd_rnr_err",
    /// RNR NAKs sent by the responder (no receive WQE posted).
    SendRnrErr => "send_rnr_err",
    /// Work requests failed after the retry count ran out.
    RetryExceededErr => "retry_exceeded_err",
    /// Work requests failed after the RNR retry count ran out.
    RetryRnrExceededErr => "retry_rnr_exceeded_err",
    /// Go-back-N retransmissions started by the completer (timeout, NAK or lost response).
    CompleterRetryErr => "completer_retry_err",
    /// Retransmit timer expiries.
    RetransmitTimeouts => "retransmit_timeouts",
    /// SEND messages started by the requester.
    RdmaSends => "rdma_sends",
    /// SEND messages received completely by the responder.
    RdmaRecvs => "rdma_recvs",
    /// ACKs sent.
    AcksSent => "acks_sent",
    /// ACK requests answered by a later ACK (coalesced).
    AcksCoalesced => "acks_coalesced",
    /// NAKs sent (all kinds but RNR).
    NaksSent => "naks_sent",
    /// Dropped: the ICRC did not match.
    DropBadIcrc => "drop_bad_icrc",
    /// IPv4 ICRC checked with the identification solved from it (a UDP socket never sees
    /// the ID): a damaged packet passes with probability 2^-16 (`wire::icrc::Ipv4IdSolver`).
    IcrcIdSolved => "icrc_id_solved",
    /// Dropped: the packet could not be parsed (truncated, unknown opcode, bad pad, ...).
    DropMalformed => "drop_malformed",
    /// Dropped: transport header version is not 0 (IBA 9.2.4).
    DropBadTver => "drop_bad_tver",
    /// Dropped: no QP with the destination QPN.
    DropUnknownQp => "drop_unknown_qp",
    /// Dropped: the opcode's transport does not match the QP type.
    DropWrongTransport => "drop_wrong_transport",
    /// Dropped: the QP's state does not accept this packet.
    DropBadState => "drop_bad_state",
    /// Dropped: the P_Key does not match the QP's.
    DropPkeyMismatch => "drop_pkey_mismatch",
    /// Dropped: the packet does not come from the QP's connected peer.
    DropWrongSource => "drop_wrong_source",
    /// Dropped: a response (ACK, read response, atomic ACK) the requester did not expect or
    /// already had (ghost or duplicate).
    DropUnexpectedResponse => "drop_unexpected_response",
    /// Dropped: a duplicate READ or atomic request older than the replay ring.
    DropReplayMissing => "drop_replay_missing",
    /// UC packets dropped by the responder for a PSN gap or an opcode out of sequence (a
    /// MIDDLE or LAST with no message in progress), and every later packet of a message
    /// already being dropped, until the next FIRST or ONLY (IBA 9.8, UC; rxe `check_psn`,
    /// `check_op_seq` UC branches, `drop_msg`).
    UcDropOutOfSeq => "uc_drop_out_of_seq",
    /// UC messages dropped for want of a receive WQE (UC has no RNR NAK; rxe
    /// RESPST_ERR_RNR, class D).
    UcDropNoRecvWqe => "uc_drop_no_recv_wqe",
    /// UC messages dropped for what RC would NAK: QP rights, R_Key, range, length (rxe
    /// RESPST_ERR_RKEY_VIOLATION / RESPST_ERR_LENGTH on UC without SRQ: drop the message).
    UcDropInvalid => "uc_drop_invalid",
    /// UC messages the responder had begun (some data placed) and gave up: their end was
    /// lost or refused. Nothing completes for them; a SEND's receive WQE is used again.
    UcMsgAbandoned => "uc_msg_abandoned",
    /// Completions that did not fit in their CQ (reported as a CQ error).
    CqOverrun => "cq_overrun",
    /// Accesses to registered memory that faulted: the program unmapped or protected it
    /// after registering it (`MemError::Fault`). Each failed as an access error (a NAK
    /// to the peer, or a local protection error), the program unharmed.
    MemFaults => "mem_faults",
    /// Dropped: a UD or GSI packet whose DETH Q_Key is not the QP's (rxe counts these in
    /// the port's `qkey_viol_cntr`, `rxe_recv.c check_keys`; IBA 10.2.4).
    QkeyViolation => "qkey_viol_cntr",
    /// Dropped: a UD or GSI packet arrived with no receive WQE posted (UD has no RNR:
    /// rxe's class D drop, `RESPST_ERR_RNR` for a non-RC QP).
    UdDropNoRecvWqe => "ud_drop_no_recv_wqe",
    /// UD sends longer than the port MTU, completed successfully without a packet
    /// (IBA C10-93.1.1; rxe_req.c "fake a successful UD send").
    UdSendTooLong => "ud_send_too_long",
    /// CE-marked RoCE packets received (mlx5 hw_counters; IBA A17.9 notification point).
    NpEcnMarkedRocePackets => "np_ecn_marked_roce_packets",
    /// CNPs sent in answer to CE-marked packets (mlx5 hw_counters).
    NpCnpSent => "np_cnp_sent",
    /// CNPs the reaction point acted on: each cut the QP's rate (mlx5 hw_counters).
    RpCnpHandled => "rp_cnp_handled",
    /// CNPs the reaction point ignored: within `rate_reduce_monitor_period` of the last
    /// cut, `rp_enable` off, or a QP not sending (mlx5 hw_counters).
    RpCnpIgnored => "rp_cnp_ignored",
    /// DCQCN rate cuts.
    RpRateDecreases => "rp_rate_decreases",
    /// DCQCN rate-increase events (timer or byte counter; MANA `rate_inc_events`).
    RpRateIncreases => "rp_rate_increases",
}

/// A set of counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters([u64; Counter::ALL.len()]);

impl Default for Counters {
    fn default() -> Self {
        Counters([0; Counter::ALL.len()])
    }
}

impl Counters {
    /// Counts a memory access that faulted ([`Counter::MemFaults`]); the caller handles
    /// the error as any other of its kind.
    #[inline]
    pub fn note_mem<T>(&mut self, r: &Result<T, crate::mem::MemError>) {
        if let Err(crate::mem::MemError::Fault { .. }) = r {
            self.inc(Counter::MemFaults);
        }
    }

    #[inline]
    pub fn inc(&mut self, c: Counter) {
        self.0[c as usize] += 1;
    }

    #[inline]
    pub fn add(&mut self, c: Counter, n: u64) {
        self.0[c as usize] += n;
    }

    /// Adds every counter of `o` (a QP's into the NIC's totals).
    pub fn merge(&mut self, o: &Counters) {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            *a += b;
        }
    }

    #[inline]
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c as usize]
    }

    /// Non-zero counters with their names.
    pub fn nonzero(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Counter::ALL
            .iter()
            .map(|c| (c.name(), self.get(*c)))
            .filter(|(_, v)| *v != 0)
    }
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, v) in self.nonzero() {
            writeln!(f, "  {name} {v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn names_are_unique_and_indexed() {
        let mut names: Vec<_> = Counter::ALL.iter().map(|c| c.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Counter::ALL.len());
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
        let mut k = Counters::default();
        k.inc(Counter::SendRnrErr);
        k.add(Counter::SentPkts, 3);
        let v: Vec<_> = k.nonzero().collect();
        assert_eq!(v, vec![("sent_pkts", 3), ("send_rnr_err", 1)]);
    }
}
