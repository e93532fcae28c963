//! The short connection messages: RTU, DREQ, DREP, MRA and REJ (IBA 12.6, Tables 107,
//! 108 and 111-113; Linux `CM_RTU_*`, `CM_DREQ_*`, `CM_DREP_*`, `CM_MRA_*`, `CM_REJ_*`).
//! Their private data is the user's, without an rdma_cm header.

/// ReadyToUse (attribute 0x0014).
pub mod rtu {
    pub const PRIVATE_DATA_OFFSET: usize = 8;
    pub const PRIVATE_DATA_LEN: usize = 224;

    crate::wire::cm::fields::cm_message! {
        /// The meaningful fields of an RTU.
        fields:
        local_comm_id / set_local_comm_id: u32 = u32(0),
        remote_comm_id / set_remote_comm_id: u32 = u32(4),
        private_data / set_private_data: [u8; PRIVATE_DATA_LEN] = bytes(PRIVATE_DATA_OFFSET, PRIVATE_DATA_LEN),
    }
}

/// DisconnectRequest (attribute 0x0015).
pub mod dreq {
    pub const PRIVATE_DATA_OFFSET: usize = 12;
    pub const PRIVATE_DATA_LEN: usize = 220;

    crate::wire::cm::fields::cm_message! {
        /// The meaningful fields of a DREQ.
        fields:
        local_comm_id / set_local_comm_id: u32 = u32(0),
        remote_comm_id / set_remote_comm_id: u32 = u32(4),
        /// The receiver's QPN (or EECN), 24 bits; byte 11 is reserved.
        remote_qpn / set_remote_qpn: u32 = u24(8),
        private_data / set_private_data: [u8; PRIVATE_DATA_LEN] = bytes(PRIVATE_DATA_OFFSET, PRIVATE_DATA_LEN),
    }
}

/// DisconnectReply (attribute 0x0016).
pub mod drep {
    pub const PRIVATE_DATA_OFFSET: usize = 8;
    pub const PRIVATE_DATA_LEN: usize = 224;

    crate::wire::cm::fields::cm_message! {
        /// The meaningful fields of a DREP.
        fields:
        local_comm_id / set_local_comm_id: u32 = u32(0),
        remote_comm_id / set_remote_comm_id: u32 = u32(4),
        private_data / set_private_data: [u8; PRIVATE_DATA_LEN] = bytes(PRIVATE_DATA_OFFSET, PRIVATE_DATA_LEN),
    }
}

/// MessageReceiptAcknowledgement (MRA, attribute 0x0011).
pub mod mra {
    pub const PRIVATE_DATA_OFFSET: usize = 10;
    pub const PRIVATE_DATA_LEN: usize = 222;
    /// `message_mraed` values.
    pub const MRAED_REQ: u8 = 0;
    pub const MRAED_REP: u8 = 1;
    pub const MRAED_LAP: u8 = 2;

    crate::wire::cm::fields::cm_message! {
        /// The meaningful fields of an MRA.
        fields:
        local_comm_id / set_local_comm_id: u32 = u32(0),
        remote_comm_id / set_remote_comm_id: u32 = u32(4),
        /// 2 bits: which message this acknowledges (REQ 0, REP 1, LAP 2).
        message_mraed / set_message_mraed: u8 = bits(8, 6, 2),
        /// 5 bits: 4.096 µs · 2^t more to wait.
        service_timeout / set_service_timeout: u8 = bits(9, 3, 5),
        private_data / set_private_data: [u8; PRIVATE_DATA_LEN] = bytes(PRIVATE_DATA_OFFSET, PRIVATE_DATA_LEN),
    }
}

/// ConnectReject (REJ, attribute 0x0012).
pub mod rej {
    use crate::wire::cm::RejReason;

    pub const ARI_OFFSET: usize = 12;
    /// Bytes of additional reject information.
    pub const ARI_LEN: usize = 72;
    pub const PRIVATE_DATA_OFFSET: usize = 84;
    pub const PRIVATE_DATA_LEN: usize = 148;
    /// `message_rejected` values.
    pub const REJECTED_REQ: u8 = 0;
    pub const REJECTED_REP: u8 = 1;
    pub const REJECTED_OTHER: u8 = 2;

    crate::wire::cm::fields::cm_message! {
        /// The meaningful fields of a REJ.
        fields:
        local_comm_id / set_local_comm_id: u32 = u32(0),
        remote_comm_id / set_remote_comm_id: u32 = u32(4),
        /// 2 bits: REQ 0, REP 1, other 2.
        message_rejected / set_message_rejected: u8 = bits(8, 6, 2),
        /// 7 bits: how many ARI bytes are meaningful.
        reject_info_length / set_reject_info_length: u8 = bits(9, 1, 7),
        reason / set_reason: RejReason = reason(10),
        /// Additional reject information.
        ari / set_ari: [u8; ARI_LEN] = bytes(ARI_OFFSET, ARI_LEN),
        private_data / set_private_data: [u8; PRIVATE_DATA_LEN] = bytes(PRIVATE_DATA_OFFSET, PRIVATE_DATA_LEN),
    }
}
