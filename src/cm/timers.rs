//! The kernel's CM timer arithmetic and rdma_cm's constants (`drivers/infiniband/core/cm.c`
//! `cm_convert_to_ms`, `cm_ack_timeout`; `core/cma.c` `CMA_*`), with the values the Debian 12
//! kernel (6.1) puts on the wire (tests/data/cm/rping_cm_s64.pcap).

use crate::engine::Instant;
use core::time::Duration;

/// `CMA_CM_RESPONSE_TIMEOUT`: the REQ's local and remote CM response timeouts
/// (4.096 µs · 2^20 ≈ 4.3 s).
pub const CMA_CM_RESPONSE_TIMEOUT: u8 = 20;
/// `CMA_MAX_CM_RETRIES`: retries of a REQ, REP, DREQ or SIDR_REQ.
pub const CMA_MAX_CM_RETRIES: u8 = 15;
/// `CMA_IBOE_PACKET_LIFETIME` of kernel 6.1: the capture's REQ says Local ACK Timeout 19 =
/// `cm_ack_timeout(15, 18)` (16, the newer kernels' value, would give 17).
pub const CMA_IBOE_PACKET_LIFETIME: u8 = 18;
/// `CMA_CM_MRA_SETTING` without `IB_CM_MRA_FLAG_DELAY`: the service timeout of the MRAs
/// rdma_cm sends (only in answer to a duplicate REQ or REP: the flag delays them).
pub const CMA_CM_MRA_SETTING: u8 = 24;
/// rxe's `local_ca_ack_delay` (the REP's Target ACK Delay in the capture).
pub const CA_ACK_DELAY: u8 = 15;
/// `RDMA_UDP_QKEY`: the Q_Key of rdma_cm's UDP port space.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
/// The P_Key every path uses (the default partition).
pub const DEFAULT_PKEY: u16 = 0xffff;
/// `ip_local_port_range`'s default: where ephemeral ports come from (`cma_alloc_any_port`).
pub const EPHEMERAL_PORTS: core::ops::RangeInclusive<u16> = 32768..=60999;
/// ucma's `max_backlog` default: a listen backlog of 0 or more than this means this.
pub const MAX_BACKLOG: u32 = 1024;

/// `cm_convert_to_ms`: 4.096 µs · 2^t, approximated as 2^(t-8) ms.
pub fn convert_to_ms(t: u8) -> u64 {
    1u64 << u32::from(t.saturating_sub(8).min(31))
}

/// `cm_ack_timeout`: 4.096 · 2^ack = 4.096 · 2^ack_delay + 2 · 4.096 · 2^life, rounded as
/// the kernel rounds it.
pub fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let mut t = i32::from(packet_life_time) + 1;
    let d = i32::from(ca_ack_delay);
    if t >= d {
        t += i32::from(d >= t - 1);
    } else {
        t = d + i32::from(t >= d - 1);
    }
    t.min(31) as u8
}

/// `now` plus `ms` milliseconds.
pub fn after_ms(now: Instant, ms: u64) -> Instant {
    now.saturating_add(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_arithmetic() {
        assert_eq!(ack_timeout(CA_ACK_DELAY, CMA_IBOE_PACKET_LIFETIME), 19);
        assert_eq!(ack_timeout(15, 16), 17);
        assert_eq!(ack_timeout(15, 10), 15, "the CA ACK delay dominates");
        assert_eq!(ack_timeout(15, 13), 16, "within 50%: rounded up");
        // REQ retransmit: 2 * 2^(18-8) + 2^(20-8) ms.
        let req = 2 * convert_to_ms(CMA_IBOE_PACKET_LIFETIME) + convert_to_ms(20);
        assert_eq!(req, 6144);
        assert_eq!(convert_to_ms(3), 1);
        // MRA(24) wait: 2^16 ms + the path's 2^(19-8).
        assert_eq!(convert_to_ms(24) + convert_to_ms(19), 65536 + 2048);
    }
}
