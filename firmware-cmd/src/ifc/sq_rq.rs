//! Ethernet send and receive queue objects, SQ and RQ (mlx5_ifc `sqc`, `rqc`), each a work
//! queue ([`Wq`](super::Wq)) with its own state machine: RST, RDY, ERR.

use super::Wq;

crate::ifc! {
    pub struct Sqc => sqc: 0x780 bits {
        0x0 rlky: 1,
        0x1 cd_master: 1,
        0x2 fre: 1,
        0x3 flush_in_error_en: 1,
        0x4 allow_multi_pkt_send_wqe: 1,
        0x5 min_wqe_inline_mode: 3,
        0x8 state: 4,
        0xc reg_umr: 1,
        0xd allow_swp: 1,
        0xe hairpin: 1,
        0xf non_wire: 1,
        0x1a ts_format: 2,
        0x28 user_index: 24,
        0x48 cqn: 24,
        0x68 hairpin_peer_rq: 24,
        0x90 hairpin_peer_vhca: 16,
        0xc8 ts_cqe_to_dest_cqn: 24,
        0xf0 packet_pacing_rate_limit_index: 16,
        0x100 tis_lst_sz: 16,
        0x110 qos_queue_group_id: 16,
        0x168 tis_num_0: 24,
        0x180 wq: Wq,
    }
    pub struct CreateSqIn => create_sq_in: 0x880 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x100 ctx: Sqc,
        /// `ctx.wq.pas`.
        0x880 pas: [u64],
    }
    pub struct CreateSqOut => create_sq_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
        0x48 sqn: 24,
    }
    pub struct ModifySqIn => modify_sq_in: 0x880 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x40 sq_state: 4,
        0x48 sqn: 24,
        0x80 modify_bitmask: 64,
        0x100 ctx: Sqc,
    }
    pub struct DestroySqIn => destroy_sq_in: 0x80 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 sqn: 24,
    }
    pub struct Rqc => rqc: 0x780 bits {
        0x0 rlky: 1,
        0x1 delay_drop_en: 1,
        0x2 scatter_fcs: 1,
        0x3 vsd: 1,
        0x4 mem_rq_type: 4,
        0x8 state: 4,
        0xd flush_in_error_en: 1,
        0xe hairpin: 1,
        0x1a ts_format: 2,
        0x28 user_index: 24,
        0x48 cqn: 24,
        0x60 counter_set_id: 8,
        0x88 rmpn: 24,
        0xa8 hairpin_peer_sq: 24,
        0xd0 hairpin_peer_vhca: 16,
        0x126 shampo_no_match_alignment_granularity: 2,
        0x12e shampo_match_criteria_type: 2,
        0x130 reservation_timeout: 16,
        0x180 wq: Wq,
    }
    pub struct CreateRqIn => create_rq_in: 0x880 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x100 ctx: Rqc,
        /// `ctx.wq.pas`.
        0x880 pas: [u64],
    }
    pub struct CreateRqOut => create_rq_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
        0x48 rqn: 24,
    }
    pub struct ModifyRqIn => modify_rq_in: 0x880 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x40 rq_state: 4,
        0x48 rqn: 24,
        0x80 modify_bitmask: 64,
        0x100 ctx: Rqc,
    }
    pub struct DestroyRqIn => destroy_rq_in: 0x80 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 rqn: 24,
    }
    pub struct ModifySqOut => modify_sq_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    pub struct DestroySqOut => destroy_sq_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    pub struct ModifyRqOut => modify_rq_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
    pub struct DestroyRqOut => destroy_rq_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
}

/// SQ and RQ states (`MLX5_SQC_STATE_*`, `MLX5_RQC_STATE_*`).
pub mod wq_state {
    /// Reset.
    pub const RST: u8 = 0;
    /// Ready.
    pub const RDY: u8 = 1;
    /// Error.
    pub const ERR: u8 = 3;
}
