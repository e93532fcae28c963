//! Service ID resolution for UD: SIDR_REQ (0x0017) and SIDR_REP (0x0018) (IBA 12.11;
//! Linux `CM_SIDR_REQ_*`, `CM_SIDR_REP_*`).

/// ServiceIDResolutionRequest.
pub mod sidr_req {
    pub const PRIVATE_DATA_OFFSET: usize = 16;
    /// Bytes of private data: a [`crate::wire::cm::cma`] header and up to 180 bytes.
    pub const PRIVATE_DATA_LEN: usize = 216;

    crate::wire::cm::fields::cm_message! {
        /// The meaningful fields of a SIDR_REQ.
        fields:
        request_id / set_request_id: u32 = u32(0),
        /// Bytes 6-7 are reserved.
        pkey / set_pkey: u16 = u16(4),
        service_id / set_service_id: u64 = u64(8),
        private_data / set_private_data: [u8; PRIVATE_DATA_LEN] = bytes(PRIVATE_DATA_OFFSET, PRIVATE_DATA_LEN),
    }
}

/// ServiceIDResolutionResponse.
pub mod sidr_rep {
    pub const ADD_INFO_OFFSET: usize = 24;
    pub const ADD_INFO_LEN: usize = 72;
    pub const PRIVATE_DATA_OFFSET: usize = 96;
    pub const PRIVATE_DATA_LEN: usize = 136;
    /// `status` values (IBA 12.11.2; Linux `enum ib_cm_sidr_status`).
    pub const STATUS_SUCCESS: u8 = 0;
    pub const STATUS_UNSUPPORTED: u8 = 1;
    pub const STATUS_REJECT: u8 = 2;
    pub const STATUS_NO_QP: u8 = 3;
    pub const STATUS_REDIRECT: u8 = 4;
    pub const STATUS_UNSUPPORTED_VERSION: u8 = 5;

    crate::wire::cm::fields::cm_message! {
        /// The meaningful fields of a SIDR_REP.
        fields:
        request_id / set_request_id: u32 = u32(0),
        status / set_status: u8 = u8(4),
        additional_info_length / set_additional_info_length: u8 = u8(5),
        /// ECE vendor ID, bits 23-8.
        vendor_id_h / set_vendor_id_h: u16 = u16(6),
        /// 24 bits.
        qpn / set_qpn: u32 = u24(8),
        /// ECE vendor ID, bits 7-0.
        vendor_id_l / set_vendor_id_l: u8 = u8(11),
        service_id / set_service_id: u64 = u64(12),
        /// rdma_cm's UDP port space uses 0x01234567 (`RDMA_UDP_QKEY`).
        qkey / set_qkey: u32 = u32(20),
        additional_info / set_additional_info: [u8; ADD_INFO_LEN] = bytes(ADD_INFO_OFFSET, ADD_INFO_LEN),
        private_data / set_private_data: [u8; PRIVATE_DATA_LEN] = bytes(PRIVATE_DATA_OFFSET, PRIVATE_DATA_LEN),
    }
}
