//! NIC flow steering: flow tables, flow groups, flow table entries and flow counters
//! (mlx5_ifc `create_flow_table_in` … `query_flow_counter_out`; Linux fs_cmd.c).

crate::ifc! {
    /// The table's attributes; the software-steering roots (`sws`) and the hardware-steering
    /// RTC ids (`hws`) share its last 0x80 bits (an anonymous union in mlx5_ifc).
    pub struct FlowTableContext => flow_table_context: 0x140 bits {
        0x0 reformat_en: 1,
        0x1 decap_en: 1,
        0x2 sw_owner: 1,
        0x3 termination_table: 1,
        0x4 table_miss_action: 4,
        0x8 level: 8,
        0x10 rtc_valid: 1,
        0x18 log_size: 8,
        0x28 table_miss_id: 24,
        0x48 lag_master_next_table_id: 24,
        0xc0 sw_owner_icm_root_1: 64,
        0x100 sw_owner_icm_root_0: 64,
    }
    pub struct CreateFlowTableIn => create_flow_table_in: 0x200 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x50 vport_number: 16,
        0x80 table_type: 8,
        0xc0 flow_table_context: FlowTableContext,
    }
    pub struct CreateFlowTableOut => create_flow_table_out: 0x80 bits {
        0x0 status: 8,
        0x8 icm_address_63_40: 24,
        0x20 syndrome: 32,
        0x40 icm_address_39_32: 8,
        0x48 table_id: 24,
        0x60 icm_address_31_0: 32,
    }
    pub struct DestroyFlowTableIn => destroy_flow_table_in: 0x200 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x50 vport_number: 16,
        0x80 table_type: 8,
        0xa8 table_id: 24,
    }
    pub struct ModifyFlowTableIn => modify_flow_table_in: 0x200 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x50 vport_number: 16,
        0x70 modify_field_select: 16,
        0x80 table_type: 8,
        0xa8 table_id: 24,
        0xc0 flow_table_context: FlowTableContext,
    }
    pub struct SetFlowTableRootIn => set_flow_table_root_in: 0x200 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x50 vport_number: 16,
        0x80 table_type: 8,
        0x8f table_of_other_vport: 1,
        0x90 table_vport_number: 16,
        0xa8 table_id: 24,
        0xc8 underlay_qpn: 24,
        0xe0 table_eswitch_owner_vhca_id_valid: 1,
        0xf0 table_eswitch_owner_vhca_id: 16,
    }
    pub struct FteMatchSetLyr24 => fte_match_set_lyr_2_4: 0x200 bits {
        0x0 smac_47_16: 32,
        0x20 smac_15_0: 16,
        0x30 ethertype: 16,
        0x40 dmac_47_16: 32,
        0x60 dmac_15_0: 16,
        0x70 first_prio: 3,
        0x73 first_cfi: 1,
        0x74 first_vid: 12,
        0x80 ip_protocol: 8,
        0x88 ip_dscp: 6,
        0x8e ip_ecn: 2,
        0x90 cvlan_tag: 1,
        0x91 svlan_tag: 1,
        0x92 frag: 1,
        0x93 ip_version: 4,
        0x97 tcp_flags: 9,
        0xa0 tcp_sport: 16,
        0xb0 tcp_dport: 16,
        0xc0 l4_type: 2,
        0xd0 ipv4_ihl: 4,
        0xd8 ttl_hoplimit: 8,
        0xe0 udp_sport: 16,
        0xf0 udp_dport: 16,
        0x100 src_ipv4_src_ipv6: [u8; 16],
        0x180 dst_ipv4_dst_ipv6: [u8; 16],
    }
    pub struct FteMatchParam => fte_match_param: 0x1000 bits {
        0x0 outer_headers: FteMatchSetLyr24,
        0x200 misc_parameters: [u8; 64],
        0x400 inner_headers: FteMatchSetLyr24,
    }
    pub struct CreateFlowGroupIn => create_flow_group_in: 0x2000 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x50 vport_number: 16,
        0x80 table_type: 8,
        0x8c group_type: 4,
        0xa8 table_id: 24,
        0xc0 source_eswitch_owner_vhca_id_valid: 1,
        0xe0 start_flow_index: 32,
        0x120 end_flow_index: 32,
        0x150 match_definer_id: 16,
        0x1f8 match_criteria_enable: 8,
        0x200 match_criteria: FteMatchParam,
    }
    pub struct CreateFlowGroupOut => create_flow_group_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
        0x48 group_id: 24,
    }
    pub struct DestroyFlowGroupIn => destroy_flow_group_in: 0x200 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x50 vport_number: 16,
        0x80 table_type: 8,
        0xa8 table_id: 24,
        0xc0 group_id: 32,
    }
    /// An entry's action, destinations and match value; the destination and counter list
    /// (`dest_format_struct`, `flow_counter_list`, 8 bytes each) follows it.
    pub struct FlowContext => flow_context: 0x1800 bits {
        0x20 group_id: 32,
        0x48 flow_tag: 24,
        0x70 action: 16,
        0x80 extended_destination: 1,
        0x88 destination_list_size: 24,
        0xa8 flow_counter_list_size: 24,
        0xc0 packet_reformat_id: 32,
        0xe0 modify_header_id: 32,
        0x200 match_value: FteMatchParam,
    }
    pub struct SetFteIn => set_fte_in: 0x1a00 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x50 vport_number: 16,
        0x80 table_type: 8,
        0xa8 table_id: 24,
        0xc0 ignore_flow_level: 1,
        0xd8 modify_enable_mask: 8,
        0x100 flow_index: 32,
        0x200 flow_context: FlowContext,
    }
    pub struct DeleteFteIn => delete_fte_in: 0x200 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x50 vport_number: 16,
        0x80 table_type: 8,
        0xa8 table_id: 24,
        0x100 flow_index: 32,
    }
    pub struct DestFormat => dest_format_struct: 0x40 bits {
        0x0 destination_type: 8,
        0x8 destination_id: 24,
        0x20 destination_eswitch_owner_vhca_id_valid: 1,
        0x21 packet_reformat: 1,
        0x28 destination_table_type: 8,
        0x30 destination_eswitch_owner_vhca_id: 16,
    }
    pub struct AllocFlowCounterIn => alloc_flow_counter_in: 0x80 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0x73 flow_counter_bulk_log_size: 5,
        0x78 flow_counter_bulk: 8,
    }
    pub struct AllocFlowCounterOut => alloc_flow_counter_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
        0x40 flow_counter_id: 32,
    }
    pub struct DeallocFlowCounterIn => dealloc_flow_counter_in: 0x80 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0x40 flow_counter_id: 32,
    }
    pub struct QueryFlowCounterIn => query_flow_counter_in: 0x100 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0xc0 clear: 1,
        0xd0 num_of_counters: 16,
        0xe0 flow_counter_id: 32,
    }
    pub struct QueryFlowCounterOut => query_flow_counter_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    pub struct TrafficCounter => traffic_counter: 0x80 bits {
        0x0 packets: 64,
        0x40 octets: 64,
    }
    pub struct DestroyFlowTableOut => destroy_flow_table_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    pub struct ModifyFlowTableOut => modify_flow_table_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    pub struct SetFlowTableRootOut => set_flow_table_root_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    pub struct DestroyFlowGroupOut => destroy_flow_group_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    pub struct SetFteOut => set_fte_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    pub struct DeleteFteOut => delete_fte_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    pub struct DeallocFlowCounterOut => dealloc_flow_counter_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
}

/// `create_flow_table_in.table_type` values (`enum fs_flow_table_type`).
pub mod flow_table_type {
    /// NIC receive.
    pub const NIC_RX: u8 = 0;
    /// NIC transmit.
    pub const NIC_TX: u8 = 1;
}

/// `flow_table_context.table_miss_action` values (`MLX5_FLOW_TABLE_MISS_ACTION_*`).
pub mod table_miss_action {
    /// The domain's default: on NIC receive, the packet is dropped.
    pub const DEF: u8 = 0;
    /// Go on at `table_miss_id`.
    pub const FWD: u8 = 1;
}

/// `flow_context.action` bits (`MLX5_FLOW_CONTEXT_ACTION_*`).
pub mod flow_action {
    /// Allow (no other effect).
    pub const ALLOW: u16 = 1 << 0;
    /// Drop.
    pub const DROP: u16 = 1 << 1;
    /// Forward to the destination list.
    pub const FWD_DEST: u16 = 1 << 2;
    /// Count in the flow counters of the list.
    pub const COUNT: u16 = 1 << 3;
}

/// `dest_format_struct.destination_type` values (`MLX5_IFC_FLOW_DESTINATION_TYPE_*`).
pub mod flow_destination_type {
    /// A vport.
    pub const VPORT: u8 = 0;
    /// Another flow table.
    pub const FLOW_TABLE: u8 = 1;
    /// A TIR.
    pub const TIR: u8 = 2;
}

/// `create_flow_group_in.match_criteria_enable` bits (`MLX5_MATCH_*`).
pub mod match_criteria_enable {
    /// `outer_headers`.
    pub const OUTER_HEADERS: u8 = 1 << 0;
    /// `misc_parameters`.
    pub const MISC_PARAMETERS: u8 = 1 << 1;
    /// `inner_headers`.
    pub const INNER_HEADERS: u8 = 1 << 2;
}
