//! MAD_IFC: a management datagram handed to the device's own agents (mlx5_ifc `mad_ifc_in`,
//! `mad_ifc_out`), and the InfiniBand subnet management packet inside it, at the byte offsets
//! Linux decodes (`include/rdma/ib_smi.h` `struct ib_smp`, `struct ib_node_info`,
//! `struct ib_port_info`; `ib_mad.h`; the PortInfo tail and Mellanox ExtendedPortInfo as
//! OpenSM's `ib_types.h` lays them out; mlx5_ib `mad.c` `mlx5_query_mad_ifc_*`).
//!
//! The IBA layouts are declared with the same bit codec as the firmware ones: absolute
//! MSB-first bit offsets inside big-endian dwords, which is how IBA draws its packets. Their
//! names are Linux's (`ib_smp`, `ib_port_info` …), not mlx5_ifc's.

crate::ifc! {
    /// MAD_IFC input: the 256-byte MAD and the port it arrived on.
    pub struct MadIfcIn => mad_ifc_in: 0x880 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x40 remote_lid: 16,
        /// Plane of a multi-plane port (Linux sets it for SMI devices only).
        0x50 plane_index: 8,
        0x58 port: 8,
        0x80 mad: [u8; 256],
    }
    /// MAD_IFC output: the response MAD.
    pub struct MadIfcOut => mad_ifc_out: 0x880 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x80 response_mad_packet: [u8; 256],
    }
    /// A subnet management packet (Linux `struct ib_smp`; IBA 14.2.1.1 / 14.2.1.2): the common
    /// MAD header, the directed-route fields and the 64-byte attribute data. (An IBA layout,
    /// not mlx5_ifc.)
    pub struct Smp => ib_smp: 0x800 bits {
        0x000 base_version: 8,
        0x008 mgmt_class: 8,
        0x010 class_version: 8,
        0x018 method: 8,
        /// MAD status; bit 15 is the direction bit of a directed-route SMP.
        0x020 status: 16,
        0x030 hop_ptr: 8,
        0x038 hop_cnt: 8,
        0x040 tid: 64,
        0x080 attr_id: 16,
        0x0a0 attr_mod: 32,
        0x0c0 mkey: 64,
        0x100 dr_slid: 16,
        0x110 dr_dlid: 16,
        0x200 data: [u8; 64],
        0x400 initial_path: [u8; 64],
        0x600 return_path: [u8; 64],
    }
    /// NodeInfo attribute data (Linux `struct ib_node_info`; IBA 14.2.5.3). mlx5_ib reads
    /// `sys_guid` at data+4, `node_guid` at data+12, `partition_cap` at data+28 and the vendor
    /// id as the low 16 bits of the dword at data+36. (An IBA layout, not mlx5_ifc.)
    pub struct NodeInfo => ib_node_info: 0x140 bits {
        0x000 base_version: 8,
        0x008 class_version: 8,
        0x010 node_type: 8,
        0x018 num_ports: 8,
        0x020 sys_guid: 64,
        0x060 node_guid: 64,
        0x0a0 port_guid: 64,
        0x0e0 partition_cap: 16,
        0x0f0 device_id: 16,
        0x100 revision: 32,
        0x120 local_port_num: 8,
        0x128 vendor_id: 24,
    }
    /// PortInfo attribute data (Linux `struct ib_port_info`, OpenSM `ib_port_info_t` for the
    /// tail from `capability_mask2`; IBA 14.2.5.6), nibbles split into named fields at the
    /// byte offsets mlx5_ib `mlx5_query_mad_ifc_port` reads. (An IBA layout, not mlx5_ifc.)
    pub struct PortInfo => ib_port_info: 0x200 bits {
        0x000 mkey: 64,
        0x040 gid_prefix: 64,
        0x080 lid: 16,
        0x090 sm_lid: 16,
        0x0a0 cap_mask: 32,
        0x0c0 diag_code: 16,
        0x0d0 mkey_lease_period: 16,
        0x0e0 local_port_num: 8,
        0x0e8 link_width_enabled: 8,
        0x0f0 link_width_supported: 8,
        0x0f8 link_width_active: 8,
        0x100 link_speed_supported: 4,
        0x104 port_state: 4,
        0x108 port_phys_state: 4,
        0x10c link_down_default_state: 4,
        0x110 mkey_protect_bits: 2,
        0x115 lmc: 3,
        0x118 link_speed_active: 4,
        0x11c link_speed_enabled: 4,
        0x120 neighbor_mtu: 4,
        0x124 master_sm_sl: 4,
        0x128 vl_cap: 4,
        0x12c init_type: 4,
        0x130 vl_high_limit: 8,
        0x138 vl_arb_high_cap: 8,
        0x140 vl_arb_low_cap: 8,
        0x148 init_type_reply: 4,
        0x14c mtu_cap: 4,
        0x150 vl_stall_count: 3,
        0x153 hoq_life: 5,
        0x158 operational_vls: 4,
        0x160 mkey_violations: 16,
        0x170 pkey_violations: 16,
        0x180 qkey_violations: 16,
        0x190 guid_cap: 8,
        0x198 client_reregister: 1,
        0x19b subnet_timeout: 5,
        0x1a3 resp_time_value: 5,
        0x1a8 local_phy_errors: 4,
        0x1ac overrun_errors: 4,
        0x1b0 max_credit_hint: 16,
        0x1c8 link_round_trip_latency: 24,
        0x1e0 capability_mask2: 16,
        0x1f0 link_speed_ext_active: 4,
        0x1f4 link_speed_ext_supported: 4,
        0x1fb link_speed_ext_enabled: 5,
    }
    /// Mellanox ExtendedPortInfo attribute data (vendor attribute 0xff90; OpenSM
    /// `ib_mlnx_ext_port_info_t`). mlx5_ib reads `link_speed_active` bit 0 (FDR10) at data+15.
    /// (A vendor layout, not mlx5_ifc.)
    pub struct MlnxExtPortInfo => ib_mlnx_ext_port_info: 0x200 bits {
        0x018 state_change_enable: 8,
        0x038 link_speed_supported: 8,
        0x058 link_speed_enabled: 8,
        0x078 link_speed_active: 8,
    }
    /// A performance management MAD (Linux `struct ib_pma_mad`, `include/rdma/ib_pma.h`; IBA
    /// 16.1.1): the common MAD header, 40 reserved bytes, then the 192-byte attribute data.
    /// (An IBA layout, not mlx5_ifc.)
    pub struct PmaMad => ib_pma_mad: 0x800 bits {
        0x000 base_version: 8,
        0x008 mgmt_class: 8,
        0x010 class_version: 8,
        0x018 method: 8,
        0x020 status: 16,
        0x040 tid: 64,
        0x080 attr_id: 16,
        0x0a0 attr_mod: 32,
        0x200 data: [u8; 192],
    }
    /// ClassPortInfo attribute data, the part an agent without redirection fills (Linux
    /// `struct ib_class_port_info`, ib_mad.h; IBA 13.4.8.1). Linux ib_core reads
    /// `capability_mask` to choose the counters it shows (sysfs.c `get_counter_table`).
    pub struct ClassPortInfo => ib_class_port_info: 0x240 bits {
        0x000 base_version: 8,
        0x008 class_version: 8,
        0x010 capability_mask: 16,
        0x020 cap_mask2: 27,
        0x03b resp_time_value: 5,
    }
    /// PortCounters attribute data (Linux `struct ib_pma_portcounters`, ib_pma.h; IBA
    /// 16.1.3.5): 32-bit data and packet counters, data in units of 4 octets.
    pub struct PmaPortCounters => ib_pma_portcounters: 0x160 bits {
        0x008 port_select: 8,
        0x010 counter_select: 16,
        0x020 symbol_error_counter: 16,
        0x030 link_error_recovery_counter: 8,
        0x038 link_downed_counter: 8,
        0x040 port_rcv_errors: 16,
        0x050 port_rcv_remphys_errors: 16,
        0x060 port_rcv_switch_relay_errors: 16,
        0x070 port_xmit_discards: 16,
        0x080 port_xmit_constraint_errors: 8,
        0x088 port_rcv_constraint_errors: 8,
        0x098 link_overrun_errors: 8,
        0x0b0 vl15_dropped: 16,
        0x0c0 port_xmit_data: 32,
        0x0e0 port_rcv_data: 32,
        0x100 port_xmit_packets: 32,
        0x120 port_rcv_packets: 32,
        0x140 port_xmit_wait: 32,
    }
    /// PortCountersExtended attribute data (Linux `struct ib_pma_portcounters_ext`,
    /// ib_pma.h; IBA 16.1.4.11): the 64-bit counters.
    pub struct PmaPortCountersExt => ib_pma_portcounters_ext: 0x240 bits {
        0x008 port_select: 8,
        0x010 counter_select: 16,
        0x040 port_xmit_data: 64,
        0x080 port_rcv_data: 64,
        0x0c0 port_xmit_packets: 64,
        0x100 port_rcv_packets: 64,
        0x140 port_unicast_xmit_packets: 64,
        0x180 port_unicast_rcv_packets: 64,
        0x1c0 port_multicast_xmit_packets: 64,
        0x200 port_multicast_rcv_packets: 64,
    }
}

/// Performance management attributes (`IB_PMA_*`, ib_pma.h).
pub mod pma_attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// PortCounters.
    pub const PORT_COUNTERS: u16 = 0x0012;
    /// PortCountersExtended.
    pub const PORT_COUNTERS_EXT: u16 = 0x001d;
}

/// ClassPortInfo `capability_mask` bits of the performance management class
/// (`IB_PMA_CLASS_CAP_*`, ib_pma.h).
pub mod pma_cap {
    /// PortCountersExtended has every counter, unicast and multicast included.
    pub const EXT_WIDTH: u16 = 1 << 9;
}

/// MAD_IFC `op_mod` bits (Linux mlx5_ib `mlx5_MAD_IFC`).
pub mod mad_ifc_op_mod {
    /// Do not check the M_Key.
    pub const IGNORE_MKEY: u16 = 0x1;
    /// Do not check the B_Key.
    pub const IGNORE_BKEY: u16 = 0x2;
}

/// Bytes of a MAD (`IB_MGMT_MAD_SIZE` + header).
pub const MAD_BYTES: usize = 256;

/// `ib_smp.status` direction bit of a directed-route response (`IB_SMP_DIRECTION`).
pub const SMP_DIRECTION: u16 = 0x8000;

/// Management classes (`IB_MGMT_CLASS_*`, ib_mad.h).
pub mod mgmt_class {
    /// Subnet management, LID routed.
    pub const SUBN_LID_ROUTED: u8 = 0x01;
    /// Subnet management, directed route.
    pub const SUBN_DIRECTED_ROUTE: u8 = 0x81;
    /// Performance management.
    pub const PERF_MGMT: u8 = 0x04;
}

/// Management methods (`IB_MGMT_METHOD_*`, ib_mad.h).
pub mod mgmt_method {
    /// Get.
    pub const GET: u8 = 0x01;
    /// Set.
    pub const SET: u8 = 0x02;
    /// Response to a Get or Set.
    pub const GET_RESP: u8 = 0x81;
    /// Trap.
    pub const TRAP: u8 = 0x05;
    /// Trap repress.
    pub const TRAP_REPRESS: u8 = 0x07;
    /// The response bit of every method.
    pub const RESP: u8 = 0x80;
}

/// MAD status values (`IB_MGMT_MAD_STATUS_*`, ib_mad.h).
pub mod mad_status {
    /// Success.
    pub const SUCCESS: u16 = 0x0000;
    /// Class version not supported.
    pub const BAD_VERSION: u16 = 0x0004;
    /// Method not supported.
    pub const UNSUPPORTED_METHOD: u16 = 0x0008;
    /// Method/attribute combination not supported.
    pub const UNSUPPORTED_METHOD_ATTRIB: u16 = 0x000c;
    /// Invalid value in the attribute or its modifier.
    pub const INVALID_ATTRIB_VALUE: u16 = 0x001c;
}

/// Subnet management attributes (`IB_SMP_ATTR_*`, ib_smi.h; ExtendedPortInfo is mlx5_ib's
/// `MLX5_ATTR_EXTENDED_PORT_INFO`).
pub mod smp_attr {
    /// NodeDescription.
    pub const NODE_DESC: u16 = 0x0010;
    /// NodeInfo.
    pub const NODE_INFO: u16 = 0x0011;
    /// GUIDInfo.
    pub const GUID_INFO: u16 = 0x0014;
    /// PortInfo.
    pub const PORT_INFO: u16 = 0x0015;
    /// P_Key table.
    pub const PKEY_TABLE: u16 = 0x0016;
    /// SMInfo.
    pub const SM_INFO: u16 = 0x0020;
    /// Mellanox ExtendedPortInfo.
    pub const EXTENDED_PORT_INFO: u16 = 0xff90;
}

/// GUIDs in one GUIDInfo block (IBA 14.2.5.5; mlx5_ib reads `index / 8`, `index % 8`).
pub const GUIDS_PER_BLOCK: usize = 8;
/// P_Keys in one P_KeyTable block (IBA 14.2.5.7; mlx5_ib reads `index / 32`, `index % 32`).
pub const PKEYS_PER_BLOCK: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, View, ViewMut};

    #[test]
    fn mad_ifc_sizes_and_header() {
        // mlx5_ifc: mad_ifc_in is a 16-byte header and mad[256]; op_mod in bytes 6-7, port in
        // byte 0xb.
        assert_eq!(MadIfcIn::BYTES, 272);
        assert_eq!(MadIfcOut::BYTES, 272);
        assert_eq!(Smp::BYTES, MAD_BYTES);
        let mut b = [0x77u8; 272];
        ViewMut::<MadIfcIn>::zeroed(&mut b)
            .unwrap()
            .set(mad_ifc_in::opcode, 0x50du16)
            .set(mad_ifc_in::op_mod, 3u16)
            .set(mad_ifc_in::port, 2u8);
        assert_eq!(b[..12], [5, 0x0d, 0, 0, 0, 0, 0, 3, 0, 0, 0, 2]);
    }

    #[test]
    fn smp_fields_sit_where_linux_decodes_them() {
        // ib_smi.h struct ib_smp: status at 4, tid at 8, attr_id at 16, attr_mod at 20,
        // data at 64, initial_path at 128, return_path at 192.
        let mut b = [0u8; 256];
        ViewMut::<Smp>::new_checked(&mut b)
            .unwrap()
            .set(ib_smp::status, 0x801cu16)
            .set(ib_smp::tid, 0x0102_0304_0506_0708u64)
            .set(ib_smp::attr_id, 0xff90u16)
            .set(ib_smp::attr_mod, 2u32);
        assert_eq!(b[4..6], [0x80, 0x1c]);
        assert_eq!(b[8..16], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b[16..18], [0xff, 0x90]);
        assert_eq!(b[20..24], [0, 0, 0, 2]);
        let v = View::<Smp>::new_checked(&b).unwrap();
        assert_eq!(ib_smp::data.bit / 8, 64);
        assert_eq!(ib_smp::initial_path.bit / 8, 128);
        assert_eq!(ib_smp::return_path.bit / 8, 192);
        assert_eq!(v.bytes(ib_smp::data).len(), 64);
    }

    #[test]
    fn port_info_nibbles_at_mlx5_ib_offsets() {
        // mlx5_ib mad.c mlx5_query_mad_ifc_port: state = data[32] & 0xf, phys_state =
        // data[33] >> 4, lmc = data[34] & 7, active_speed = data[35] >> 4, active_mtu =
        // data[36] >> 4, sm_sl = data[36] & 0xf, max_vl_num = data[37] >> 4, max_mtu =
        // data[41] & 0xf, gid_tbl_len = data[50], subnet_timeout = data[51] & 0x1f,
        // ext_active_speed = data[62] >> 4.
        let mut d = [0u8; 64];
        ViewMut::<PortInfo>::new_checked(&mut d)
            .unwrap()
            .set(ib_port_info::link_speed_supported, 7u8)
            .set(ib_port_info::port_state, 4u8)
            .set(ib_port_info::port_phys_state, 5u8)
            .set(ib_port_info::link_down_default_state, 2u8)
            .set(ib_port_info::lmc, 3u8)
            .set(ib_port_info::link_speed_active, 4u8)
            .set(ib_port_info::neighbor_mtu, 5u8)
            .set(ib_port_info::master_sm_sl, 1u8)
            .set(ib_port_info::vl_cap, 3u8)
            .set(ib_port_info::init_type_reply, 0u8)
            .set(ib_port_info::mtu_cap, 5u8)
            .set(ib_port_info::guid_cap, 8u8)
            .set(ib_port_info::subnet_timeout, 18u8)
            .set(ib_port_info::link_speed_ext_active, 2u8);
        assert_eq!(d[32], 0x74);
        assert_eq!(d[33], 0x52);
        assert_eq!(d[34] & 7, 3);
        assert_eq!(d[35] >> 4, 4);
        assert_eq!(d[36], 0x51);
        assert_eq!(d[37] >> 4, 3);
        assert_eq!(d[41] & 0xf, 5);
        assert_eq!(d[50], 8);
        assert_eq!(d[51] & 0x1f, 18);
        assert_eq!(d[62] >> 4, 2);
        // ExtendedPortInfo: FDR10 is data[15] bit 0.
        let mut e = [0u8; 64];
        ViewMut::<MlnxExtPortInfo>::new_checked(&mut e)
            .unwrap()
            .set(ib_mlnx_ext_port_info::link_speed_active, 1u8);
        assert_eq!(e[15], 1);
    }

    #[test]
    fn node_info_at_mlx5_ib_offsets() {
        // mlx5_ib mad.c: sys_image_guid data+4, node_guid data+12, max_pkeys data+28,
        // vendor_id = be32(data+36) & 0xffff.
        let mut d = [0u8; 64];
        ViewMut::<NodeInfo>::new_checked(&mut d)
            .unwrap()
            .set(ib_node_info::sys_guid, 0x1111_2222_3333_4444u64)
            .set(ib_node_info::node_guid, 0x5555_6666_7777_8888u64)
            .set(ib_node_info::partition_cap, 128u16)
            .set(ib_node_info::local_port_num, 1u8)
            .set(ib_node_info::vendor_id, 0x0002c9u32);
        assert_eq!(d[4..12], 0x1111_2222_3333_4444u64.to_be_bytes());
        assert_eq!(d[12..20], 0x5555_6666_7777_8888u64.to_be_bytes());
        assert_eq!(d[28..30], [0, 128]);
        assert_eq!(
            u32::from_be_bytes([d[36], d[37], d[38], d[39]]) & 0xffff,
            0x02c9
        );
    }

    #[test]
    fn pma_fields_sit_where_linux_decodes_them() {
        // ib_pma.h: struct ib_pma_mad data at 24 + 40 = 64; ib_core sysfs.c get_perf_mad
        // writes PortSelect to ib_mad.data[41] (byte 65) and reads the attribute from
        // ib_mad.data + 40. ib_class_port_info.capability_mask at byte 2.
        assert_eq!(ib_pma_mad::data.bit / 8, 64);
        assert_eq!(PmaMad::BYTES, MAD_BYTES);
        let mut d = [0u8; 192];
        ViewMut::<ClassPortInfo>::new_checked(&mut d)
            .unwrap()
            .set(ib_class_port_info::capability_mask, pma_cap::EXT_WIDTH)
            .set(ib_class_port_info::resp_time_value, 18u8);
        assert_eq!(d[2..8], [0x02, 0x00, 0, 0, 0, 18]);
        // ib_pma_portcounters: port_select at 1, port_xmit_data at 24 … port_rcv_packets 36.
        let mut c = [0u8; 44];
        ViewMut::<PmaPortCounters>::new_checked(&mut c)
            .unwrap()
            .set(ib_pma_portcounters::port_select, 1u8)
            .set(ib_pma_portcounters::port_xmit_data, 0x0102_0304u32)
            .set(ib_pma_portcounters::port_rcv_packets, 7u32);
        assert_eq!((c[1], c[24..28].to_vec(), c[39]), (1, vec![1, 2, 3, 4], 7));
        // ib_pma_portcounters_ext: port_xmit_data at 8, port_multicast_rcv_packets at 64.
        let mut e = [0u8; 72];
        ViewMut::<PmaPortCountersExt>::new_checked(&mut e)
            .unwrap()
            .set(ib_pma_portcounters_ext::port_xmit_data, 5u64)
            .set(ib_pma_portcounters_ext::port_multicast_rcv_packets, 9u64);
        assert_eq!((e[15], e[71]), (5, 9));
    }
}
