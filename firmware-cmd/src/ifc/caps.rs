//! QUERY_HCA_CAP / SET_HCA_CAP and the general device capabilities `cmd_hca_cap`
//! (mlx5-reference 03 §6, §6.1).

crate::ifc! {
    /// General device capabilities (capability type 0).
    pub struct CmdHcaCap => cmd_hca_cap: 0x800 bits {
        0x006 page_request_disable: 1,
        0x007 abs_native_port_num: 1,
        0x020 hca_cap_2: 1,
        0x030 vhca_id: 16,
        0x080 log_max_srq_sz: 8,
        0x088 log_max_qp_sz: 8,
        0x090 event_cap: 1,
        0x09b log_max_qp: 5,
        0x0ab log_max_srq: 5,
        0x0c8 log_max_cq_sz: 8,
        0x0db log_max_cq: 5,
        0x0e0 log_max_eq_sz: 8,
        0x0ea log_max_mkey: 6,
        0x0f6 terminate_scatter_list_mkey: 1,
        0x0f7 repeated_mkey: 1,
        0x0f8 dump_fill_mkey: 1,
        0x0fb fast_teardown: 1,
        0x0fc log_max_eq: 4,
        0x100 max_indirection: 8,
        0x109 log_max_mrw_sz: 7,
        0x110 force_teardown: 1,
        /// UMR translation offsets beyond 16 bits (`umr_ctrl_seg.xlt_offset_47_16`).
        0x118 umr_extended_translation_offset: 1,
        0x119 null_mkey: 1,
        0x11a log_max_klm_list_size: 6,
        0x12a log_max_ra_req_dc: 6,
        0x13a log_max_ra_res_dc: 6,
        0x145 release_all_pages: 1,
        0x14a log_max_ra_req_qp: 6,
        0x15a log_max_ra_res_qp: 6,
        0x160 end_pad: 1,
        0x164 cache_line_128byte: 1,
        0x170 gid_table_size: 16,
        0x190 pkey_table_size: 16,
        0x1a0 vport_group_manager: 1,
        0x1a6 nic_flow_table: 1,
        0x1b0 port_module_event: 1,
        0x1b4 disable_link_up: 1,
        0x1b6 port_type: 2,
        0x1b8 num_ports: 8,
        0x1c3 log_max_msg: 5,
        0x1cc max_tc: 4,
        0x1d0 temp_warn_event: 1,
        0x1d2 general_notification_event: 1,
        0x1e0 stat_rate_support: 16,
        0x1fc cqe_version: 4,
        /// Multi-packet (striding) receive queues.
        0x201 striding_rq: 1,
        0x203 ipoib_enhanced_offloads: 1,
        /// UMR may not change an mkey's page size (mlx5_ib then registers with CREATE_MKEY).
        0x207 umr_modify_entity_size_disabled: 1,
        /// UMR may not change an mkey's remote-atomic right.
        0x208 umr_modify_atomic_disabled: 1,
        /// UMR may not make indirect (KLM) mkeys.
        0x209 umr_indirect_mkey_disabled: 1,
        /// The fence a WQE after a UMR needs (`MLX5_CAP_UMR_FENCE_*`).
        0x20a umr_fence: 2,
        /// A DCI may scatter a requester's data to a 64-byte CQE.
        0x20c dc_req_sctr_data_cqe: 1,
        0x20d dc_connect_qp: 1,
        0x20e dc_cnak_trace: 1,
        0x20f drain_sigerr: 1,
        0x210 cmdif_checksum: 2,
        0x212 sigerr_cqe: 1,
        0x214 wq_signature: 1,
        /// Small messages may land in the CQE (`qpc.cs_req`, `qpc.cs_res`).
        0x215 sctr_data_cqe: 1,
        0x21a dct: 1,
        0x21b qos: 1,
        0x21c eth_net_offloads: 1,
        0x21d roce: 1,
        0x21e atomic: 1,
        0x220 cq_oi: 1,
        0x221 cq_resize: 1,
        0x222 cq_moderation: 1,
        0x227 pg: 1,
        0x22a scqe_break_moderation: 1,
        0x22b cq_period_start_from_cqe: 1,
        /// Automatic path migration (alternate paths); Linux mlx5_ib reports
        /// IB_DEVICE_AUTO_PATH_MIG from it.
        0x22e apm: 1,
        /// A UMR's translation pointer may use the reserved lkey.
        0x230 umr_ptr_rlky: 1,
        /// `qpc.deth_sqpn` is honoured (a QP sends as QP1).
        /// `qpc.req_e2e_credit_mode`: packet-based end-to-end credits (RC).
        0x232 qp_packet_based: 1,
        0x238 set_deth_sqpn: 1,
        0x23c xrc: 1,
        0x23d ud: 1,
        0x23e uc: 1,
        0x23f rc: 1,
        0x240 uar_4k: 1,
        0x24a uar_sz: 6,
        0x250 port_selection_cap: 1,
        0x252 umem_uid_0: 1,
        0x258 log_pg_sz: 8,
        0x260 bf: 1,
        0x261 driver_version: 1,
        0x266 mkey_by_name: 1,
        0x26b log_bf_reg_size: 5,
        0x290 max_wqe_sz_sq: 16,
        0x2b0 max_wqe_sz_rq: 16,
        0x2d0 max_wqe_sz_sq_dc: 16,
        0x2e7 max_qp_mcg: 25,
        0x318 log_max_mcg: 8,
        0x323 log_max_transport_domain: 5,
        0x32b log_max_pd: 5,
        0x33b log_max_xrcd: 5,
        0x363 log_max_rq: 5,
        0x36b log_max_sq: 5,
        0x373 log_max_tir: 5,
        0x37b log_max_tis: 5,
        0x383 log_max_rmp: 5,
        0x38b log_max_rqt: 5,
        0x393 log_max_rqt_size: 5,
        0x39b log_max_tis_per_sq: 5,
        0x3db log_max_wq_sz: 5,
        0x3f3 log_max_current_mc_list: 5,
        0x3fb log_max_current_uc_list: 5,
        0x463 log_max_uctx: 5,
        0x470 max_num_eqs: 16,
        0x483 log_max_l2_table: 5,
        0x490 log_uar_page_sz: 16,
        0x4c0 device_frequency_mhz: 32,
        0x4e0 device_frequency_khz: 32,
        0x520 num_of_uars_per_page: 32,
        0x57b log_max_dct_connections: 5,
        /// DCI streams: most concurrent streams and errored streams a DCI may have (log2).
        0x58b log_max_dci_stream_channels: 5,
        0x593 log_max_dci_errored_streams: 5,
        0x5bf cqe_compression: 1,
        0x610 num_vhca_ports: 8,
        0x61e sw_owner_id: 1,
    }

    /// Atomic capabilities (capability type 3, `atomic_caps`), present when the general
    /// `atomic` bit is set.
    pub struct AtomicCaps => atomic_caps: 0x800 bits {
        0x40 atomic_req_8b_endianness_mode: 2,
        0x46 supported_atomic_req_8b_endianness_mode_1: 1,
        0x90 atomic_operations: 16,
        0xb0 atomic_size_qp: 16,
        0xd0 atomic_size_dc: 16,
    }

    /// Ethernet offload capabilities (capability type 1, `per_protocol_networking_offload_caps`),
    /// present when the general `eth_net_offloads` bit is set. Linux `mlx5_eth_supported`
    /// requires `csum_cap`, `max_lso_cap`, `vlan_cap` and `rss_ind_tbl_cap`.
    pub struct EthCaps => per_protocol_networking_offload_caps: 0x800 bits {
        0x0 csum_cap: 1,
        0x1 vlan_cap: 1,
        0x2 lro_cap: 1,
        0x7 wqe_vlan_insert: 1,
        0x8 self_lb_en_modifiable: 1,
        /// log2 of the largest LSO message.
        0xb max_lso_cap: 5,
        0x10 multi_pkt_send_wqe: 2,
        /// How much of a packet a send WQE must inline (see [`wqe_inline_mode`]).
        0x12 wqe_inline_mode: 2,
        /// log2 of the largest RSS indirection table.
        0x14 rss_ind_tbl_cap: 4,
        0x18 reg_umr_sq: 1,
        0x19 scatter_fcs: 1,
        0x1a enhanced_multi_pkt_send_wqe: 1,
        0x20 swp: 1,
        0x23 cqe_checksum_full: 1,
    }

    /// Packet fields a flow table may match (`flow_table_fields_supported`, first dword).
    pub struct FlowTableFieldsSupported => flow_table_fields_supported: 0x80 bits {
        0x0 outer_dmac: 1,
        0x1 outer_smac: 1,
        0x2 outer_ether_type: 1,
        0x3 outer_ip_version: 1,
        0x4 outer_first_prio: 1,
        0x5 outer_first_cfi: 1,
        0x6 outer_first_vid: 1,
        0xc outer_sip: 1,
        0xd outer_dip: 1,
        0xe outer_frag: 1,
        0xf outer_ip_protocol: 1,
        0x12 outer_udp_sport: 1,
        0x13 outer_udp_dport: 1,
        0x14 outer_tcp_sport: 1,
        0x15 outer_tcp_dport: 1,
    }

    /// What the flow tables of one steering domain can do (`flow_table_prop_layout`).
    pub struct FlowTablePropLayout => flow_table_prop_layout: 0x200 bits {
        0x0 ft_support: 1,
        0x2 flow_counter: 1,
        0x3 flow_modify_en: 1,
        0x4 modify_root: 1,
        0x5 identified_miss_table_mode: 1,
        0x6 flow_table_modify: 1,
        0x17 table_miss_action_domain: 1,
        0x22 log_max_ft_size: 6,
        /// Levels of tables below the root; Linux `mlx5_eth_supported` needs 3 on NIC receive.
        0x38 max_ft_level: 8,
        0x78 log_max_ft_num: 8,
        0x90 log_max_flow_counter: 8,
        0x98 log_max_destination: 8,
        0xb8 log_max_flow: 8,
        0x100 ft_field_support: FlowTableFieldsSupported,
        0x180 ft_field_bitmask_support: FlowTableFieldsSupported,
    }

    /// NIC flow table capabilities (capability type 7, `flow_table_nic_cap`), present when the
    /// general `nic_flow_table` bit is set.
    pub struct FlowTableNicCap => flow_table_nic_cap: 0x8000 bits {
        0x200 flow_table_properties_nic_receive: FlowTablePropLayout,
        0x400 flow_table_properties_nic_receive_rdma: FlowTablePropLayout,
        0x800 flow_table_properties_nic_transmit: FlowTablePropLayout,
    }

    /// The 4 KiB capability area of QUERY/SET_HCA_CAP; general caps sit at its start (other
    /// groups, such as [`AtomicCaps`], sit there in their own messages).
    pub struct HcaCapUnion => hca_cap_union: 0x8000 bits {
        0x0 cmd_hca_cap: CmdHcaCap,
    }

    /// QUERY_HCA_CAP input; `op_mod` = (capability type << 1) | mode (see [`hca_cap_op_mod`]).
    pub struct QueryHcaCapIn => query_hca_cap_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_function: 1,
        0x41 ec_vf_function: 1,
        0x43 function_id_type: 1,
        0x50 function_id: 16,
    }
    /// QUERY_HCA_CAP output: header plus the 4 KiB capability area.
    pub struct QueryHcaCapOut => query_hca_cap_out: 0x8080 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x80 capability: HcaCapUnion,
    }
    /// SET_HCA_CAP input; `op_mod` = capability type << 1.
    pub struct SetHcaCapIn => set_hca_cap_in: 0x8080 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_function: 1,
        0x41 ec_vf_function: 1,
        0x43 function_id_type: 1,
        0x50 function_id: 16,
        0x80 capability: HcaCapUnion,
    }
    /// SET_HCA_CAP output.
    pub struct SetHcaCapOut => set_hca_cap_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
}

/// Building QUERY/SET_HCA_CAP `op_mod` values (`mlx5_core_get_caps_mode`, device.h).
pub mod hca_cap_op_mod {
    /// Capability type 0: general device capabilities.
    pub const GENERAL: u16 = 0;
    /// Capability type 1: Ethernet offloads ([`EthCaps`](super::EthCaps)).
    pub const ETHERNET_OFFLOADS: u16 = 1;
    /// Capability type 3: atomic capabilities.
    pub const ATOMIC: u16 = 3;
    /// Capability type 4: RoCE capabilities.
    pub const ROCE: u16 = 4;
    /// Capability type 7: NIC flow tables ([`FlowTableNicCap`](super::FlowTableNicCap)).
    pub const FLOW_TABLE: u16 = 7;
    /// Mode: maximum (what the device supports).
    pub const MAX: u16 = 0;
    /// Mode: current (what is enabled).
    pub const CUR: u16 = 1;

    /// QUERY_HCA_CAP `op_mod` for `cap_type` in `mode`.
    pub const fn query(cap_type: u16, mode: u16) -> u16 {
        (cap_type << 1) | (mode & 1)
    }

    /// SET_HCA_CAP `op_mod` for `cap_type`.
    pub const fn set(cap_type: u16) -> u16 {
        cap_type << 1
    }
}

/// `atomic_caps` values (device.h `MLX5_ATOMIC_*`, mlx5_ifc.h `MLX5_ATOMIC_CAPS_*`).
pub mod atomic {
    /// `atomic_operations`: 8-byte compare-and-swap.
    pub const OPS_CMP_SWAP: u16 = 1 << 0;
    /// `atomic_operations`: 8-byte fetch-and-add.
    pub const OPS_FETCH_ADD: u16 = 1 << 1;
    /// `atomic_size_qp`: 8-byte operands on QPs.
    pub const SIZE_QP_8_BYTES: u16 = 0x8;
    /// `atomic_req_8b_endianness_mode`: big-endian (the reset value).
    pub const REQ_MODE_BE: u8 = 0;
    /// `atomic_req_8b_endianness_mode`: host endianness. Linux sets it when supported and
    /// otherwise reports no IB-spec atomics (mlx5_ib `get_atomic_caps`).
    pub const REQ_MODE_HOST_ENDIANNESS: u8 = 1;
}

/// `per_protocol_networking_offload_caps.wqe_inline_mode` values (`MLX5_CAP_INLINE_MODE_*`).
pub mod wqe_inline_mode {
    /// The L2 header must be inlined in every send WQE.
    pub const L2: u8 = 0;
    /// The NIC vport context's `min_wqe_inline_mode` says how much.
    pub const VPORT_CONTEXT: u8 = 1;
    /// Nothing need be inlined.
    pub const NOT_REQUIRED: u8 = 2;
}

/// `cmd_hca_cap.port_type` values (`MLX5_CAP_PORT_TYPE_*`).
pub mod port_type {
    /// InfiniBand.
    pub const IB: u8 = 0;
    /// Ethernet.
    pub const ETH: u8 = 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, View, ViewMut};

    #[test]
    fn golden_query_hca_cap() {
        // opcode 0x100, op_mod (0 << 1) | 1 = current general caps (03 §6).
        let mut b = [0x11u8; 16];
        ViewMut::<QueryHcaCapIn>::zeroed(&mut b)
            .unwrap()
            .set(query_hca_cap_in::opcode, 0x100u16)
            .set(
                query_hca_cap_in::op_mod,
                hca_cap_op_mod::query(0, hca_cap_op_mod::CUR),
            );
        assert_eq!(b, [1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(QueryHcaCapOut::BYTES, 4112);
        assert_eq!(SetHcaCapIn::BYTES, 4112);
    }

    #[test]
    fn cap_fields_sit_where_the_reference_says() {
        // Byte offsets of 03 §6.1, +0x10 inside QUERY_HCA_CAP output.
        let mut out = [0u8; 4112];
        out[0x10 + 0x013] = 0x12; // log_max_qp [4:0]
        out[0x10 + 0x037] = 2; // num_ports
        out[0x10 + 0x036] = 0x01; // port_type [9:8] = 1 (Ethernet)
        out[0x10 + 0x042] = 0xc0; // cmdif_checksum [15:14] = 3
        out[0x10 + 0x04d] = 0x09; // log_bf_reg_size [20:16] = 9
        out[0x10 + 0x01f] = 0x10; // fast_teardown [4]
        let v = View::<QueryHcaCapOut>::new_checked(&out).unwrap();
        let caps = v
            .sub(query_hca_cap_out::capability)
            .sub(hca_cap_union::cmd_hca_cap);
        assert_eq!(caps.get(cmd_hca_cap::log_max_qp), 0x12);
        assert_eq!(caps.get(cmd_hca_cap::num_ports), 2);
        assert_eq!(caps.get(cmd_hca_cap::port_type), 1);
        assert_eq!(caps.get(cmd_hca_cap::cmdif_checksum), 3);
        assert_eq!(caps.get(cmd_hca_cap::log_bf_reg_size), 9);
        assert_eq!(caps.get(cmd_hca_cap::fast_teardown), 1);
        assert_eq!(caps.get(cmd_hca_cap::log_max_eq), 0);
    }

    #[test]
    fn atomic_cap_fields_sit_where_mlx5_ifc_puts_them() {
        // mlx5_ifc.h `atomic_caps`: endianness mode at bit 0x40 (2 bits), its support bit at
        // 0x46, atomic_operations at 0x90, atomic_size_qp at 0xb0 (16 bits each).
        let mut out = [0u8; 4112];
        out[0x10 + 0x08] = 0x42; // mode 1, mode 1 supported
        out[0x10 + 0x13] = 0x03; // compare-and-swap, fetch-and-add
        out[0x10 + 0x17] = 0x08; // 8-byte operands on QPs
        out[0x10 + 0x1b] = 0x08; // 8-byte operands on DCs
        let at = query_hca_cap_out::capability.bit / 8;
        let a = View::<AtomicCaps>::new_checked(&out[at..at + AtomicCaps::BYTES]).unwrap();
        assert_eq!(
            a.get(atomic_caps::atomic_req_8b_endianness_mode),
            u64::from(atomic::REQ_MODE_HOST_ENDIANNESS)
        );
        assert_eq!(
            a.get(atomic_caps::supported_atomic_req_8b_endianness_mode_1),
            1
        );
        assert_eq!(
            a.get(atomic_caps::atomic_operations),
            u64::from(atomic::OPS_CMP_SWAP | atomic::OPS_FETCH_ADD)
        );
        assert_eq!(
            a.get(atomic_caps::atomic_size_qp),
            u64::from(atomic::SIZE_QP_8_BYTES)
        );
        assert_eq!(a.get(atomic_caps::atomic_size_dc), 8);
    }
}
