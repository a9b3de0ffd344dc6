//! The NIC vport: the Ethernet view of the function — MAC addresses, MTU, promiscuous modes,
//! minimum send inline (mlx5_ifc `nic_vport_context`; Linux vport.c).

use super::TrafficCounter;

crate::ifc! {
    pub struct MacAddressLayout => mac_address_layout: 0x40 bits {
        0x10 mac_addr_47_32: 16,
        0x20 mac_addr_31_0: 32,
    }
    pub struct NicVportContext => nic_vport_context: 0x800 bits {
        0x5 min_wqe_inline_mode: 3,
        0x1d disable_mc_local_lb: 1,
        0x1e disable_uc_local_lb: 1,
        0x1f roce_en: 1,
        0x20 arm_change_event: 1,
        0x3b event_on_mtu: 1,
        0x3c event_on_promisc_change: 1,
        0x3d event_on_vlan_change: 1,
        0x3e event_on_mc_address_change: 1,
        0x3f event_on_uc_address_change: 1,
        0x40 vhca_id_type: 1,
        0x4c affiliation_criteria: 4,
        0x50 affiliated_vhca_id: 16,
        0x101 sd_group: 3,
        0x130 mtu: 16,
        0x140 system_image_guid: 64,
        0x180 port_guid: 64,
        0x1c0 node_guid: 64,
        0x340 qkey_violation_counter: 16,
        0x780 promisc_uc: 1,
        0x781 promisc_mc: 1,
        0x782 promisc_all: 1,
        0x785 allowed_list_type: 3,
        0x794 allowed_list_size: 12,
        0x7a0 permanent_address: MacAddressLayout,
    }
    pub struct QueryNicVportContextIn => query_nic_vport_context_in: 0x80 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x50 vport_number: 16,
        0x65 allowed_list_type: 3,
    }
    pub struct QueryNicVportContextOut => query_nic_vport_context_out: 0x880 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
        0x80 nic_vport_context: NicVportContext,
        /// `nic_vport_context.current_uc_mac_address`.
        0x880 current_uc_mac_address: [u64],
    }
    pub struct ModifyNicVportFieldSelect => modify_nic_vport_field_select: 0x20 bits {
        0x12 affiliation: 1,
        0x14 disable_uc_local_lb: 1,
        0x15 disable_mc_local_lb: 1,
        0x16 node_guid: 1,
        0x17 port_guid: 1,
        0x18 min_inline: 1,
        0x19 mtu: 1,
        0x1a change_event: 1,
        0x1b promisc: 1,
        0x1c permanent_address: 1,
        0x1d addresses_list: 1,
        0x1e roce_en: 1,
    }
    pub struct ModifyNicVportContextIn => modify_nic_vport_context_in: 0x1000 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x50 vport_number: 16,
        0x60 field_select: ModifyNicVportFieldSelect,
        0x800 nic_vport_context: NicVportContext,
        /// `nic_vport_context.current_uc_mac_address`: MAC addresses in `mac_address_layout`.
        0x1000 current_uc_mac_address: [u64],
    }
    pub struct ModifyNicVportContextOut => modify_nic_vport_context_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    /// QUERY_VPORT_COUNTER input.
    pub struct QueryVportCounterIn => query_vport_counter_in: 0x100 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x4c port_num: 4,
        0x50 vport_number: 16,
        0xc0 clear: 1,
    }
    /// QUERY_VPORT_COUNTER output: packets and octets by kind.
    pub struct QueryVportCounterOut => query_vport_counter_out: 0x1080 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
        0x80 received_errors: TrafficCounter,
        0x100 transmit_errors: TrafficCounter,
        0x180 received_ib_unicast: TrafficCounter,
        0x200 transmitted_ib_unicast: TrafficCounter,
        0x280 received_ib_multicast: TrafficCounter,
        0x300 transmitted_ib_multicast: TrafficCounter,
        0x380 received_eth_broadcast: TrafficCounter,
        0x400 transmitted_eth_broadcast: TrafficCounter,
        0x480 received_eth_unicast: TrafficCounter,
        0x500 transmitted_eth_unicast: TrafficCounter,
        0x580 received_eth_multicast: TrafficCounter,
        0x600 transmitted_eth_multicast: TrafficCounter,
        0x680 local_loopback: TrafficCounter,
    }
}
