//! HCA life-cycle commands: ENABLE/DISABLE_HCA, QUERY/SET_ISSI, INIT_HCA, TEARDOWN_HCA,
//! QUERY_ADAPTER, SET_DRIVER_VERSION (mlx5-reference 03 §3, §7).

crate::ifc! {
    /// ENABLE_HCA input.
    pub struct EnableHcaIn => enable_hca_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x40 embedded_cpu_function: 1,
        0x50 function_id: 16,
    }
    /// ENABLE_HCA output.
    pub struct EnableHcaOut => enable_hca_out: 0x60 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// DISABLE_HCA input.
    pub struct DisableHcaIn => disable_hca_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x40 embedded_cpu_function: 1,
        0x50 function_id: 16,
    }
    /// DISABLE_HCA output.
    pub struct DisableHcaOut => disable_hca_out: 0x60 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// QUERY_ISSI input.
    pub struct QueryIssiIn => query_issi_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
    }
    /// QUERY_ISSI output: bit n of `supported_issi_dw0` = ISSI n supported.
    pub struct QueryIssiOut => query_issi_out: 0x380 bits {
        0x000 status: 8,
        0x020 syndrome: 32,
        0x050 current_issi: 16,
        0x360 supported_issi_dw0: 32,
    }
    /// SET_ISSI input.
    pub struct SetIssiIn => set_issi_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x50 current_issi: 16,
    }
    /// SET_ISSI output.
    pub struct SetIssiOut => set_issi_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// INIT_HCA input.
    pub struct InitHcaIn => init_hca_in: 0x100 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x62 sw_vhca_id: 14,
        0x80 sw_owner_id: [u8; 16],
    }
    /// INIT_HCA output.
    pub struct InitHcaOut => init_hca_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// TEARDOWN_HCA input.
    pub struct TeardownHcaIn => teardown_hca_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x50 profile: 16,
    }
    /// TEARDOWN_HCA output.
    pub struct TeardownHcaOut => teardown_hca_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x7f state: 1,
    }
    /// QUERY_ADAPTER input.
    pub struct QueryAdapterIn => query_adapter_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
    }
    /// Adapter identity block returned by QUERY_ADAPTER.
    pub struct QueryAdapterParamBlock => query_adapter_param_block: 0x800 bits {
        0x0c8 ieee_vendor_id: 24,
        0x0f0 vsd_vendor_id: 16,
        0x100 vsd: [u8; 208],
        0x780 vsd_contd_psid: [u8; 16],
    }
    /// QUERY_ADAPTER output.
    pub struct QueryAdapterOut => query_adapter_out: 0x880 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x80 query_adapter_struct: QueryAdapterParamBlock,
    }
    /// SET_DRIVER_VERSION input.
    pub struct SetDriverVersionIn => set_driver_version_in: 0x280 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x80 driver_version: [u8; 64],
    }
    /// SET_DRIVER_VERSION output.
    pub struct SetDriverVersionOut => set_driver_version_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
}

/// TEARDOWN_HCA profiles (`MLX5_TEARDOWN_HCA_IN_PROFILE_*`).
pub mod teardown_profile {
    /// Normal teardown.
    pub const GRACEFUL_CLOSE: u16 = 0;
    /// Forced teardown (shutdown path).
    pub const FORCE_CLOSE: u16 = 1;
    /// First step of fast teardown.
    pub const PREPARE_FAST_TEARDOWN: u16 = 2;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, View, ViewMut};

    #[test]
    fn golden_enable_hca_and_set_issi() {
        // ENABLE_HCA = 0x104, function_id at byte 0xa (03 §3).
        let mut b = [0xeeu8; 16];
        ViewMut::<EnableHcaIn>::zeroed(&mut b)
            .unwrap()
            .set(enable_hca_in::opcode, 0x104u16)
            .set(enable_hca_in::embedded_cpu_function, 1u8)
            .set(enable_hca_in::function_id, 0x0203u16);
        assert_eq!(b, [1, 4, 0, 0, 0, 0, 0, 0, 0x80, 0, 2, 3, 0, 0, 0, 0]);

        let mut b = [0xeeu8; 16];
        ViewMut::<SetIssiIn>::zeroed(&mut b)
            .unwrap()
            .set(set_issi_in::opcode, 0x10bu16)
            .set(set_issi_in::current_issi, 1u16);
        assert_eq!(b, [1, 0x0b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
    }

    #[test]
    fn golden_query_issi_out_and_teardown() {
        // supported_issi_dw0 at byte 0x6c, total 112 bytes (03 §3).
        assert_eq!(QueryIssiOut::BYTES, 112);
        let mut b = [0u8; 112];
        b[0x6f] = 0b11;
        b[0x0b] = 1;
        let v = View::<QueryIssiOut>::new_checked(&b).unwrap();
        assert_eq!(v.get(query_issi_out::supported_issi_dw0), 3);
        assert_eq!(v.get(query_issi_out::current_issi), 1);

        // teardown_hca_out.state is bit 0 of byte 0xf (03 §7).
        let mut b = [0u8; 16];
        b[0xf] = 1;
        assert_eq!(
            View::<TeardownHcaOut>::new_checked(&b)
                .unwrap()
                .get(teardown_hca_out::state),
            1
        );
        assert_eq!(QueryAdapterOut::BYTES, 272);
    }
}
