//! ConnectReply (REP, attribute 0x0013; IBA 12.6.8, Table 110; Linux `CM_REP_*`).

/// Where the private data starts.
pub const PRIVATE_DATA_OFFSET: usize = 36;
/// Bytes of private data (the user's, no header).
pub const PRIVATE_DATA_LEN: usize = 196;

super::fields::cm_message! {
    /// The meaningful fields of a REP.
    fields:
    local_comm_id / set_local_comm_id: u32 = u32(0),
    remote_comm_id / set_remote_comm_id: u32 = u32(4),
    local_qkey / set_local_qkey: u32 = u32(8),
    /// 24 bits.
    local_qpn / set_local_qpn: u32 = u24(12),
    /// ECE vendor ID, bits 23-16 (byte 15).
    vendor_id_h / set_vendor_id_h: u8 = u8(15),
    /// 24 bits.
    local_eecn / set_local_eecn: u32 = u24(16),
    /// ECE vendor ID, bits 15-8 (byte 19).
    vendor_id_m / set_vendor_id_m: u8 = u8(19),
    /// 24 bits: the active side's send PSN.
    starting_psn / set_starting_psn: u32 = u24(20),
    /// ECE vendor ID, bits 7-0 (byte 23).
    vendor_id_l / set_vendor_id_l: u8 = u8(23),
    responder_resources / set_responder_resources: u8 = u8(24),
    initiator_depth / set_initiator_depth: u8 = u8(25),
    /// 5 bits.
    target_ack_delay / set_target_ack_delay: u8 = bits(26, 3, 5),
    /// 2 bits: 0 accepted, 1 alternate path rejected, 2 not supported.
    failover_accepted / set_failover_accepted: u8 = bits(26, 1, 2),
    e2e_flow_control / set_e2e_flow_control: bool = flag(26, 0),
    /// 3 bits.
    rnr_retry_count / set_rnr_retry_count: u8 = bits(27, 5, 3),
    srq / set_srq: bool = flag(27, 4),
    local_ca_guid / set_local_ca_guid: u64 = u64(28),
    private_data / set_private_data: [u8; PRIVATE_DATA_LEN] = bytes(PRIVATE_DATA_OFFSET, PRIVATE_DATA_LEN),
}

impl Repr {
    /// The 24-bit ECE vendor ID from its three bytes.
    pub const fn vendor_id(&self) -> u32 {
        ((self.vendor_id_h as u32) << 16)
            | ((self.vendor_id_m as u32) << 8)
            | self.vendor_id_l as u32
    }
}
