//! DC targets: the DCT context `dctc` and CREATE/DESTROY/DRAIN/QUERY_DCT,
//! ARM_DCT_FOR_KEY_VIOLATION (Linux 6.12 include/linux/mlx5/mlx5_ifc.h `mlx5_ifc_dctc_bits`,
//! `create_dct_in`…; drivers/infiniband/hw/mlx5/qpc.c `mlx5_core_create_dct`,
//! `mlx5_core_destroy_dct`).
//!
//! A DCT is not a QP to the device: it has its own context and commands, and its number comes
//! back from CREATE_DCT. Linux creates it only when the verbs object reaches RTR
//! (`mlx5_ib_modify_dct`), drains it before destroying it and waits for the DCT_DRAINED event
//! in between.

crate::ifc! {
    /// DCT context.
    pub struct Dctc => dctc: 0x200 bits {
        /// See [`dctc_state`].
        0x004 state: 4,
        0x028 user_index: 24,
        0x048 cqn: 24,
        0x060 counter_set_id: 8,
        0x068 atomic_mode: 4,
        /// Remote read, write and atomic enables.
        0x06c rre: 1,
        0x06d rwe: 1,
        0x06e rae: 1,
        0x06f atomic_like_write_en: 1,
        0x070 latency_sensitive: 1,
        0x071 rlky: 1,
        0x072 free_ar: 1,
        /// Responder scatter to CQE (see [`dctc_cs_res`]).
        0x088 cs_res: 8,
        0x093 min_rnr_nak: 5,
        0x0a8 srqn_xrqn: 24,
        0x0c8 pd: 24,
        0x0e0 tclass: 8,
        0x0ec flow_label: 20,
        /// The key every request to this DCT must carry.
        0x100 dc_access_key: 64,
        0x145 mtu: 3,
        0x148 port: 8,
        0x150 pkey_index: 16,
        0x168 my_addr_index: 8,
        0x178 hop_limit: 8,
        /// Requests refused for a wrong access key.
        0x180 dc_access_key_violation_count: 32,
        0x1e0 ece: 32,
    }
    /// CREATE_DCT input.
    pub struct CreateDctIn => create_dct_in: 0x400 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x80 dct_context_entry: Dctc,
    }
    /// CREATE_DCT output.
    pub struct CreateDctOut => create_dct_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x48 dctn: 24,
        0x60 ece: 32,
    }
    /// DESTROY_DCT input.
    pub struct DestroyDctIn => destroy_dct_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 dctn: 24,
    }
    /// DESTROY_DCT output.
    pub struct DestroyDctOut => destroy_dct_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// DRAIN_DCT input.
    pub struct DrainDctIn => drain_dct_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 dctn: 24,
    }
    /// DRAIN_DCT output.
    pub struct DrainDctOut => drain_dct_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// QUERY_DCT input.
    pub struct QueryDctIn => query_dct_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x48 dctn: 24,
    }
    /// QUERY_DCT output.
    pub struct QueryDctOut => query_dct_out: 0x280 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x80 dct_context_entry: Dctc,
    }
    /// ARM_DCT_FOR_KEY_VIOLATION input.
    pub struct ArmDctIn => arm_dct_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x48 dct_number: 24,
    }
    /// ARM_DCT_FOR_KEY_VIOLATION output.
    pub struct ArmDctOut => arm_dct_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
}

/// `dctc.state` (`MLX5_DCTC_STATE_*`).
pub mod dctc_state {
    /// Answering requests.
    pub const ACTIVE: u8 = 0x0;
    /// DRAIN_DCT ran; requests in flight are finishing.
    pub const DRAINING: u8 = 0x1;
    /// Drained: DESTROY_DCT may run.
    pub const DRAINED: u8 = 0x2;
}

/// `dctc.cs_res` (`MLX5_DCTC_CS_RES_*`): a DCT scatters to the CQE only with 128-byte CQEs.
pub mod dctc_cs_res {
    /// Off.
    pub const DISABLE: u8 = 0x0;
    /// Up to 64 bytes in a 128-byte CQE.
    pub const UP_TO_64B: u8 = 0x2;
}

/// The DCT EQE's data (`struct mlx5_eqe_dct`): six reserved dwords, then the DCT number.
pub const EQE_DCT_DCTN: usize = 0x18;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;

    #[test]
    fn dct_layouts_have_the_kernel_sizes() {
        assert_eq!(Dctc::BYTES, 64);
        assert_eq!(CreateDctIn::BYTES, 128);
        assert_eq!(QueryDctOut::BYTES, 80);
        for b in [
            CreateDctOut::BYTES,
            DestroyDctIn::BYTES,
            DrainDctIn::BYTES,
            QueryDctIn::BYTES,
            ArmDctIn::BYTES,
        ] {
            assert_eq!(b, 16);
        }
    }
}
