//! ClassPortInfo (attribute 0x0001; IBA 13.4.8.1, Table 126; Linux `struct
//! ib_class_port_info` in `include/rdma/ib_mad.h`): what a management class at a port
//! supports and where to redirect or send traps. Any class carries it (method Get, GetResp
//! in reply); in a CM MAD it is the first 72 bytes of the data, the rest reserved.

/// Bytes of the attribute proper; the CM message's remaining 160 bytes are reserved.
pub const ATTR_LEN: usize = 72;

super::fields::cm_message! {
    /// The meaningful fields of a ClassPortInfo.
    fields:
    base_version / set_base_version: u8 = u8(0),
    class_version / set_class_version: u8 = u8(1),
    capability_mask / set_capability_mask: u16 = u16(2),
    /// 27 bits (bits 31-5 of bytes 4-7).
    capability_mask2 / set_capability_mask2: u32 = u32bits(4, 5, 27),
    /// 5 bits (byte 7, bits 4-0): 4.096 µs · 2^t.
    resp_time_value / set_resp_time_value: u8 = bits(7, 0, 5),
    redirect_gid / set_redirect_gid: [u8; 16] = bytes(8, 16),
    redirect_tc / set_redirect_tc: u8 = u8(24),
    /// 4 bits.
    redirect_sl / set_redirect_sl: u8 = bits(25, 4, 4),
    /// 20 bits.
    redirect_fl / set_redirect_fl: u32 = u32bits(24, 0, 20),
    redirect_lid / set_redirect_lid: u16 = u16(28),
    redirect_pkey / set_redirect_pkey: u16 = u16(30),
    /// 24 bits; byte 32 is reserved.
    redirect_qp / set_redirect_qp: u32 = u24(33),
    redirect_qkey / set_redirect_qkey: u32 = u32(36),
    trap_gid / set_trap_gid: [u8; 16] = bytes(40, 16),
    trap_tc / set_trap_tc: u8 = u8(56),
    /// 4 bits.
    trap_sl / set_trap_sl: u8 = bits(57, 4, 4),
    /// 20 bits.
    trap_fl / set_trap_fl: u32 = u32bits(56, 0, 20),
    trap_lid / set_trap_lid: u16 = u16(60),
    trap_pkey / set_trap_pkey: u16 = u16(62),
    trap_hl / set_trap_hl: u8 = u8(64),
    /// 24 bits.
    trap_qp / set_trap_qp: u32 = u24(65),
    trap_qkey / set_trap_qkey: u32 = u32(68),
}
