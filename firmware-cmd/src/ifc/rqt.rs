//! RQ tables: the indirection table a hashing TIR spreads packets over (mlx5_ifc `rqtc`).

crate::ifc! {
    pub struct Rqtc => rqtc: 0x780 bits {
        0xa5 list_q_type: 3,
        0xb0 rqt_max_size: 16,
        0xc0 rq_vhca_id_format: 1,
        0xd0 rqt_actual_size: 16,
    }
    pub struct CreateRqtIn => create_rqt_in: 0x880 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x100 rqt_context: Rqtc,
        /// `rqt_context.rq_num`: the RQ numbers, `rqt_actual_size` of them.
        0x880 rq_num: [u32],
    }
    pub struct CreateRqtOut => create_rqt_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
        0x48 rqtn: 24,
    }
    pub struct RqtBitmask => rqt_bitmask: 0x40 bits {
        0x3f rqn_list: 1,
    }
    pub struct ModifyRqtIn => modify_rqt_in: 0x880 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 rqtn: 24,
        0x80 bitmask: RqtBitmask,
        0x100 ctx: Rqtc,
        /// `ctx.rq_num`.
        0x880 rq_num: [u32],
    }
    pub struct DestroyRqtIn => destroy_rqt_in: 0x80 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 rqtn: 24,
    }
    pub struct DestroyRqtOut => destroy_rqt_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    pub struct ModifyRqtOut => modify_rqt_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
}
