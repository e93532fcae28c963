//! ConnectRequest (REQ, attribute 0x0010; IBA 12.6.5, Table 106; Linux
//! `CM_REQ_*` in `include/rdma/ibta_vol1_c12.h`).

pub use super::path::{Path, PATH_LEN};

/// Where the private data starts.
pub const PRIVATE_DATA_OFFSET: usize = 140;
/// Bytes of private data: a [`super::cma`] header (36) and up to 56 bytes of the user's.
pub const PRIVATE_DATA_LEN: usize = 92;

super::fields::cm_message! {
    /// The meaningful fields of a REQ.
    fields:
    local_comm_id / set_local_comm_id: u32 = u32(0),
    /// ECE vendor ID, 24 bits (byte 4 is reserved).
    vendor_id / set_vendor_id: u32 = u24(5),
    service_id / set_service_id: u64 = u64(8),
    /// The active side's node GUID.
    local_ca_guid / set_local_ca_guid: u64 = u64(16),
    /// Bytes 24-27 are reserved.
    local_qkey / set_local_qkey: u32 = u32(28),
    /// 24 bits.
    local_qpn / set_local_qpn: u32 = u24(32),
    responder_resources / set_responder_resources: u8 = u8(35),
    /// 24 bits.
    local_eecn / set_local_eecn: u32 = u24(36),
    initiator_depth / set_initiator_depth: u8 = u8(39),
    /// 24 bits.
    remote_eecn / set_remote_eecn: u32 = u24(40),
    /// 5 bits: 4.096 µs · 2^t.
    remote_cm_response_timeout / set_remote_cm_response_timeout: u8 = bits(43, 3, 5),
    /// 2 bits: RC 0, UC 1, RD 2, XRC 3.
    transport_service_type / set_transport_service_type: u8 = bits(43, 1, 2),
    e2e_flow_control / set_e2e_flow_control: bool = flag(43, 0),
    /// 24 bits: the passive side's send PSN.
    starting_psn / set_starting_psn: u32 = u24(44),
    /// 5 bits.
    local_cm_response_timeout / set_local_cm_response_timeout: u8 = bits(47, 3, 5),
    /// 3 bits.
    retry_count / set_retry_count: u8 = bits(47, 0, 3),
    pkey / set_pkey: u16 = u16(48),
    /// IB MTU enum, 4 bits (1 = 256 ... 5 = 4096).
    path_mtu / set_path_mtu: u8 = bits(50, 4, 4),
    rdc_exists / set_rdc_exists: bool = flag(50, 3),
    /// 3 bits.
    rnr_retry_count / set_rnr_retry_count: u8 = bits(50, 0, 3),
    /// 4 bits.
    max_cm_retries / set_max_cm_retries: u8 = bits(51, 4, 4),
    srq / set_srq: bool = flag(51, 3),
    /// 3 bits (1 = XRC).
    extended_transport_type / set_extended_transport_type: u8 = bits(51, 0, 3),
    primary_path / set_primary_path: Path = path(52),
    alternate_path / set_alternate_path: Path = path(96),
    /// SAP Supported (byte 139, bit 2, after the alternate path's local ACK timeout).
    sap_supported / set_sap_supported: bool = flag(139, 2),
    private_data / set_private_data: [u8; PRIVATE_DATA_LEN] = bytes(PRIVATE_DATA_OFFSET, PRIVATE_DATA_LEN),
}
