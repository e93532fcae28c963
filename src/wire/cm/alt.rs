//! Alternate path messages: LAP (0x0019) and APR (0x001A) (IBA 12.8, Tables 115 and 116;
//! Linux `CM_LAP_*`, `CM_APR_*` in `include/rdma/ibta_vol1_c12.h`). On RoCE the kernel's
//! CM drops both on receipt (`cm_lap_handler`, `cm_apr_handler`: "Alternate path messages
//! are not supported for RoCE link layer"); they are read here so that a capture holding
//! one decodes, and so that a CM can recognise and drop them by name.

/// LoadAlternatePath: the active side proposes a new alternate path.
pub mod lap {
    pub const PRIVATE_DATA_OFFSET: usize = 64;
    pub const PRIVATE_DATA_LEN: usize = 168;

    crate::wire::cm::fields::cm_message! {
        /// The meaningful fields of a LAP. Bytes 8-11 and 16-19 are reserved.
        fields:
        local_comm_id / set_local_comm_id: u32 = u32(0),
        remote_comm_id / set_remote_comm_id: u32 = u32(4),
        /// 24 bits: the receiver's QPN (or EECN).
        remote_qpn / set_remote_qpn: u32 = u24(12),
        /// 5 bits (byte 15, bits 7-3): 4.096 µs · 2^t.
        remote_cm_response_timeout / set_remote_cm_response_timeout: u8 = bits(15, 3, 5),
        alt_local_lid / set_alt_local_lid: u16 = u16(20),
        alt_remote_lid / set_alt_remote_lid: u16 = u16(22),
        alt_local_gid / set_alt_local_gid: [u8; 16] = bytes(24, 16),
        alt_remote_gid / set_alt_remote_gid: [u8; 16] = bytes(40, 16),
        /// 20 bits: the top of bytes 56-58 (the low nibble of 58 is reserved).
        alt_flow_label / set_alt_flow_label: u32 = u32bits(56, 12, 20),
        alt_traffic_class / set_alt_traffic_class: u8 = u8(59),
        alt_hop_limit / set_alt_hop_limit: u8 = u8(60),
        /// IB static rate enum, 6 bits (byte 61, bits 5-0).
        alt_packet_rate / set_alt_packet_rate: u8 = bits(61, 0, 6),
        /// 4 bits.
        alt_sl / set_alt_sl: u8 = bits(62, 4, 4),
        alt_subnet_local / set_alt_subnet_local: bool = flag(62, 3),
        /// 5 bits: 4.096 µs · 2^t.
        alt_local_ack_timeout / set_alt_local_ack_timeout: u8 = bits(63, 3, 5),
        private_data / set_private_data: [u8; PRIVATE_DATA_LEN] = bytes(PRIVATE_DATA_OFFSET, PRIVATE_DATA_LEN),
    }
}

/// AlternatePathResponse: the passive side's answer to a LAP.
pub mod apr {
    use core::fmt;

    pub const INFO_OFFSET: usize = 12;
    /// Bytes of additional information.
    pub const INFO_LEN: usize = 72;
    pub const PRIVATE_DATA_OFFSET: usize = 84;
    pub const PRIVATE_DATA_LEN: usize = 148;

    crate::wire::cm::fields::cm_message! {
        /// The meaningful fields of an APR. Bytes 10-11 are reserved.
        fields:
        local_comm_id / set_local_comm_id: u32 = u32(0),
        remote_comm_id / set_remote_comm_id: u32 = u32(4),
        /// How many `additional_info` bytes are meaningful.
        additional_info_length / set_additional_info_length: u8 = u8(8),
        /// AP Status ([`Status`]).
        ap_status / set_ap_status: u8 = u8(9),
        additional_info / set_additional_info: [u8; INFO_LEN] = bytes(INFO_OFFSET, INFO_LEN),
        private_data / set_private_data: [u8; PRIVATE_DATA_LEN] = bytes(PRIVATE_DATA_OFFSET, PRIVATE_DATA_LEN),
    }

    /// AP Status values (IBA Table 117; Linux `enum ib_cm_apr_status`), by name.
    pub struct Status(pub u8);

    impl Status {
        /// The kernel's name without its `IB_CM_APR_` prefix, lower case; `None` past the
        /// table.
        pub const fn name(&self) -> Option<&'static str> {
            Some(match self.0 {
                0 => "success",
                1 => "invalid comm ID",
                2 => "unsupported",
                3 => "reject",
                4 => "redirect",
                5 => "is current",
                6 => "invalid QPN/EECN",
                7 => "invalid LID",
                8 => "invalid GID",
                9 => "invalid flow label",
                10 => "invalid traffic class",
                11 => "invalid hop limit",
                12 => "invalid packet rate",
                13 => "invalid SL",
                _ => return None,
            })
        }
    }

    impl fmt::Display for Status {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self.name() {
                Some(n) => write!(f, "{n} ({})", self.0),
                None => write!(f, "status {}", self.0),
            }
        }
    }
}
