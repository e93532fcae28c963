//! Engine configuration: fixed at creation, deterministic.

use std::net::IpAddr;

/// What the engine needs to know about its NIC.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The NIC's address (its GID, in RoCEv2 an IP address).
    pub local_ip: IpAddr,
    /// IPv4 identification the transmit path will put on packets: the ICRC covers it.
    /// Linux writes 0 on an unconnected UDP socket with DF set (IP_PMTUDISC_DO).
    pub tx_ipv4_id: u16,
    /// Accept IPv4 packets whose identification is unknown (UDP socket receive path) when
    /// their ICRC is valid for some ID (solved from the CRC, counted as `icrc_id_solved`).
    /// When false they are dropped.
    pub accept_unverified_icrc: bool,
    /// Most PSNs a requester may have sent and not seen acknowledged (rxe: 128 unacked
    /// PSNs); bounds the retransmission window well inside the 2^23 PSN half-space.
    pub max_inflight_psns: u32,
    /// Largest number of SGEs in one work request.
    pub max_sge: usize,
    /// Largest inline send.
    pub max_inline_data: usize,
    /// Largest queue depth a QP or CQ may ask for.
    pub max_queue_depth: usize,
    /// Most outstanding READ/atomic requests per QP (either direction); rxe's
    /// `RXE_MAX_QP_RD_ATOM` is 128, and perftest asks for the device maximum.
    pub max_rd_atomic: u8,
    /// Treat a transport `retry_cnt` of 7 as "retry forever", as rxe does
    /// (`rxe_comp.c`: `if (qp->comp.retry_cnt != 7) qp->comp.retry_cnt--`). The IBA makes
    /// only the RNR retry count 7 infinite (9.7.5.2.8); off by default.
    pub retry_cnt_7_infinite: bool,
    /// A requester asks for an ACK at least every this many packets of a long message
    /// (rxe: RXE_MAX_PKT_PER_ACK = 64), so retransmission does not wait for the message end.
    pub ack_req_every: u32,
    /// The QPNs this engine hands out: `qpn_lo..=qpn_hi` (clamped to 2..=2^24-1; 0 and 1
    /// are the special QPs), the first from `FIRST_QPN` when the range holds it. NICs that
    /// share one port (attached to its daemon) each own a disjoint block, so a packet's BTH
    /// DestQP names the NIC it is for (`daemon::lease`). Default: the whole space.
    pub qpn_lo: u32,
    pub qpn_hi: u32,
    /// The UDP source port of every packet of every QP. `None` (default): rxe's per-QP port
    /// (`qp::udp_sport`). A NIC on a shared address sends all its packets from one socket
    /// bound to a port the kernel picked, and the ICRC covers the port, so the engine must
    /// know it.
    pub udp_src_port: Option<u16>,
    /// The port's active MTU in bytes (`ibv_port_attr::active_mtu`: 256 to 4096): UD and
    /// GSI QPs send and accept messages up to it (rxe `get_mtu`: RC/UC use the path MTU,
    /// UD/GSI `port.mtu_cap`).
    pub port_mtu: u32,
    /// Congestion control: the notification and reaction points (`cc::CcConfig`).
    pub cc: super::cc::CcConfig,
}

impl EngineConfig {
    pub fn new(local_ip: IpAddr) -> EngineConfig {
        EngineConfig {
            local_ip,
            tx_ipv4_id: 0,
            accept_unverified_icrc: true,
            max_inflight_psns: 128,
            max_sge: MAX_SGE,
            max_inline_data: MAX_INLINE,
            max_queue_depth: 16_384,
            max_rd_atomic: 128,
            retry_cnt_7_infinite: false,
            ack_req_every: 64,
            qpn_lo: 2,
            qpn_hi: crate::wire::bth::QPN_MASK,
            udp_src_port: None,
            port_mtu: 4096,
            cc: super::cc::CcConfig::default(),
        }
    }
}

/// Capacity of the fixed SGE array in a work request (no allocation per WR).
pub const MAX_SGE: usize = 8;
/// Capacity of the inline-data array in a send work request.
pub const MAX_INLINE: usize = 256;
