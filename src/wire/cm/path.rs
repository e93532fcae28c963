//! The path of a REQ (primary at CM offset 52, alternate at 96): a leaf below `req` and
//! the field macros.

use crate::wire::field::*;

/// Bytes of one path (primary or alternate) in a REQ.
pub const PATH_LEN: usize = 44;

/// One path of a REQ (CM offsets 52-95 primary, 96-139 alternate). On RoCE the LIDs are
/// 0xffff (or 0) and the GIDs are the IP addresses (IPv4 mapped into `::ffff:a.b.c.d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Path {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: [u8; 16],
    pub remote_gid: [u8; 16],
    /// 20 bits.
    pub flow_label: u32,
    /// IB static rate enum, 6 bits.
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// Service level, 4 bits.
    pub sl: u8,
    pub subnet_local: bool,
    /// Local ACK timeout, 5 bits: 4.096 µs · 2^t.
    pub local_ack_timeout: u8,
}

impl Path {
    /// Reads the path from its 44 bytes (`b.len() >= PATH_LEN`, proven by the message's
    /// `check_len`).
    pub fn read(b: &[u8]) -> Path {
        let mut local_gid = [0u8; 16];
        let mut remote_gid = [0u8; 16];
        local_gid.copy_from_slice(&b[4..20]);
        remote_gid.copy_from_slice(&b[20..36]);
        Path {
            local_lid: u16_at(b, 0..2),
            remote_lid: u16_at(b, 2..4),
            local_gid,
            remote_gid,
            flow_label: u32_at(b, 36..40) >> 12,
            packet_rate: b[39] & 0x3f,
            traffic_class: b[40],
            hop_limit: b[41],
            sl: b[42] >> 4,
            subnet_local: b[42] & 0x08 != 0,
            local_ack_timeout: b[43] >> 3,
        }
    }

    /// Writes the 44 bytes but the low 3 bits of the last (see below); the message's
    /// `emit` zeroes those first.
    pub fn write(&self, b: &mut [u8]) {
        set_u16(b, 0..2, self.local_lid);
        set_u16(b, 2..4, self.remote_lid);
        b[4..20].copy_from_slice(&self.local_gid);
        b[20..36].copy_from_slice(&self.remote_gid);
        set_u32(
            b,
            36..40,
            ((self.flow_label & 0x000f_ffff) << 12) | u32::from(self.packet_rate & 0x3f),
        );
        b[40] = self.traffic_class;
        b[41] = self.hop_limit;
        b[42] = ((self.sl & 0x0f) << 4) | if self.subnet_local { 0x08 } else { 0 };
        // The low 3 bits of the last byte are reserved in the primary path and hold the
        // REQ's SAP Supported bit (0x04) in the alternate one: kept, for that setter.
        b[43] = (b[43] & 0x07) | ((self.local_ack_timeout & 0x1f) << 3);
    }
}
