//! Transport interface objects: the TIS a send queue transmits through and the TIR that
//! receives into one RQ or spreads over an RQT by hash (mlx5_ifc `tisc`, `tirc`).

crate::ifc! {
    pub struct Tisc => tisc: 0x500 bits {
        0x0 strict_lag_tx_port_affinity: 1,
        0x1 tls_en: 1,
        0x4 lag_tx_port_affinity: 4,
        0xc prio: 4,
        0x128 transport_domain: 24,
        0x148 underlay_qpn: 24,
        0x168 pd: 24,
    }
    pub struct CreateTisIn => create_tis_in: 0x600 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x100 ctx: Tisc,
    }
    pub struct CreateTisOut => create_tis_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
        0x48 tisn: 24,
    }
    pub struct DestroyTisIn => destroy_tis_in: 0x80 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 tisn: 24,
    }
    pub struct ModifyTisBitmask => modify_tis_bitmask: 0x40 bits {
        0x3d lag_tx_port_affinity: 1,
        0x3e strict_lag_tx_port_affinity: 1,
        0x3f prio: 1,
    }
    pub struct ModifyTisIn => modify_tis_in: 0x600 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 tisn: 24,
        0x80 bitmask: ModifyTisBitmask,
        0x100 ctx: Tisc,
    }
    pub struct RxHashFieldSelect => rx_hash_field_select: 0x20 bits {
        0x0 l3_prot_type: 1,
        0x1 l4_prot_type: 1,
        0x2 selected_fields: 30,
    }
    pub struct Tirc => tirc: 0x780 bits {
        0x20 disp_type: 4,
        0x24 tls_en: 1,
        0x84 lro_timeout_period_usecs: 16,
        0x94 packet_merge_mask: 4,
        0x98 lro_max_ip_payload_size: 8,
        0xe8 inline_rqn: 24,
        0x100 rx_hash_symmetric: 1,
        0x102 tunneled_offload_en: 1,
        0x108 indirect_table: 24,
        0x120 rx_hash_fn: 4,
        0x126 self_lb_block: 2,
        0x128 transport_domain: 24,
        0x140 rx_hash_toeplitz_key: [u8; 40],
        0x280 rx_hash_field_selector_outer: RxHashFieldSelect,
        0x2a0 rx_hash_field_selector_inner: RxHashFieldSelect,
    }
    pub struct CreateTirIn => create_tir_in: 0x880 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x100 ctx: Tirc,
    }
    pub struct CreateTirOut => create_tir_out: 0x80 bits {
        0x0 status: 8,
        0x8 icm_address_63_40: 24,
        0x20 syndrome: 32,
        0x40 icm_address_39_32: 8,
        0x48 tirn: 24,
        0x60 icm_address_31_0: 32,
    }
    pub struct DestroyTirIn => destroy_tir_in: 0x80 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 tirn: 24,
    }
    pub struct ModifyTirBitmask => modify_tir_bitmask: 0x40 bits {
        0x3b self_lb_en: 1,
        0x3d hash: 1,
        0x3f packet_merge: 1,
    }
    pub struct ModifyTirIn => modify_tir_in: 0x880 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 tirn: 24,
        0x80 bitmask: ModifyTirBitmask,
        0x100 ctx: Tirc,
    }
    pub struct DestroyTisOut => destroy_tis_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    pub struct ModifyTisOut => modify_tis_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    pub struct DestroyTirOut => destroy_tir_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    pub struct ModifyTirOut => modify_tir_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
}

/// `tirc.disp_type` values.
pub mod tir_disp_type {
    /// To the one RQ `inline_rqn`.
    pub const DIRECT: u8 = 0;
    /// Spread over the RQT `indirect_table` by hash.
    pub const INDIRECT: u8 = 1;
}

/// `tirc.rx_hash_fn` values.
pub mod rx_hash_fn {
    /// No hash: the first RQ of the table.
    pub const NONE: u8 = 0;
    /// Inverted XOR of the selected bytes.
    pub const INVERTED_XOR8: u8 = 1;
    /// Toeplitz over the selected fields with `rx_hash_toeplitz_key`.
    pub const TOEPLITZ: u8 = 2;
}

/// `rx_hash_field_select.selected_fields` bits (`MLX5_HASH_FIELD_SEL_*`).
pub mod rx_hash_fields {
    /// Source IP address.
    pub const SRC_IP: u32 = 1 << 0;
    /// Destination IP address.
    pub const DST_IP: u32 = 1 << 1;
    /// L4 source port.
    pub const L4_SPORT: u32 = 1 << 2;
    /// L4 destination port.
    pub const L4_DPORT: u32 = 1 << 3;
    /// IPsec SPI.
    pub const IPSEC_SPI: u32 = 1 << 4;
}

/// `tirc.self_lb_block` bits.
pub mod self_lb_block {
    /// Unicast packets this function sent are not received back.
    pub const UNICAST: u8 = 1 << 0;
    /// Multicast packets this function sent are not received back.
    pub const MULTICAST: u8 = 1 << 1;
}
