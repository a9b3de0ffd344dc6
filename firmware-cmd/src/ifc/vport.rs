//! Vport and port queries: QUERY_VPORT_STATE, QUERY_HCA_VPORT_CONTEXT, QUERY_HCA_VPORT_GID
//! (mlx5-reference 06 §6; mlx5_ifc `hca_vport_context`, `query_hca_vport_gid_in/out`).

crate::ifc! {
    /// QUERY_VPORT_STATE input.
    pub struct QueryVportStateIn => query_vport_state_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x50 vport_number: 16,
    }
    /// QUERY_VPORT_STATE output; states are 0 down, 1 up.
    pub struct QueryVportStateOut => query_vport_state_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x78 admin_state: 4,
        0x7c state: 4,
    }
    /// QUERY_HCA_VPORT_CONTEXT input.
    pub struct QueryHcaVportContextIn => query_hca_vport_context_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x4c port_num: 4,
        0x50 vport_number: 16,
    }
    /// The IB view of a port: state, GUIDs, LIDs.
    pub struct HcaVportContext => hca_vport_context: 0x1000 bits {
        0x000 field_select: 32,
        0x100 sm_virt_aware: 1,
        0x101 has_smi: 1,
        0x102 has_raw: 1,
        0x103 grh_required: 1,
        0x110 port_physical_state: 4,
        0x114 vport_state_policy: 4,
        0x118 port_state: 4,
        0x11c vport_state: 4,
        0x140 system_image_guid: 64,
        0x180 port_guid: 64,
        0x1c0 node_guid: 64,
        0x200 cap_mask1: 32,
        0x220 cap_mask1_field_select: 32,
        0x240 cap_mask2: 32,
        0x260 cap_mask2_field_select: 32,
        0x300 lid: 16,
        0x314 init_type_reply: 4,
        0x318 lmc: 3,
        0x31b subnet_timeout: 5,
        0x320 sm_lid: 16,
        0x330 sm_sl: 4,
        0x340 qkey_violation_counter: 16,
        0x350 pkey_violation_counter: 16,
    }
    /// QUERY_HCA_VPORT_CONTEXT output.
    pub struct QueryHcaVportContextOut => query_hca_vport_context_out: 0x1080 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x80 hca_vport_context: HcaVportContext,
    }
    /// QUERY_HCA_VPORT_GID input: one GID by index (0xffff: the whole table).
    pub struct QueryHcaVportGidIn => query_hca_vport_gid_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x4c port_num: 4,
        0x50 vport_number: 16,
        0x70 gid_index: 16,
    }
    /// QUERY_HCA_VPORT_GID output for one index: the header and that GID (`gid[]`, 16 bytes
    /// each, from byte 0x10).
    pub struct QueryHcaVportGidOut => query_hca_vport_gid_out: 0x100 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x60 gids_num: 16,
        0x80 gid: [u8; 16],
    }
}

/// IB port states (`enum ib_port_state`).
pub mod ib_port_state {
    /// No link.
    pub const DOWN: u8 = 1;
    /// Link up, not configured by the subnet manager.
    pub const INIT: u8 = 2;
    /// Configured, not yet active.
    pub const ARMED: u8 = 3;
    /// Active.
    pub const ACTIVE: u8 = 4;
}

/// Vport states (`VPORT_STATE_*`).
pub mod vport_state {
    /// Down.
    pub const DOWN: u8 = 0;
    /// Up.
    pub const UP: u8 = 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, View};

    #[test]
    fn golden_hca_vport_context() {
        // hca_vport_context: port_state [7:4] of byte 0x23, node_guid at 0x38, lid at 0x60.
        let mut b = [0u8; 528];
        b[0x10 + 0x23] = 0x41;
        b[0x10 + 0x38..0x10 + 0x40].copy_from_slice(&[0, 2, 0xc9, 3, 0, 0, 0, 1]);
        b[0x10 + 0x60..0x10 + 0x62].copy_from_slice(&[0, 7]);
        let v = View::<QueryHcaVportContextOut>::new_checked(&b).unwrap();
        let c = v.sub(query_hca_vport_context_out::hca_vport_context);
        assert_eq!(c.get(hca_vport_context::port_state), 4);
        assert_eq!(c.get(hca_vport_context::vport_state), 1);
        assert_eq!(c.get(hca_vport_context::node_guid), 0x0002_c903_0000_0001);
        assert_eq!(c.get(hca_vport_context::lid), 7);
        assert_eq!(QueryHcaVportContextOut::BYTES, 528);
    }
}
