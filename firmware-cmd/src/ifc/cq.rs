//! Completion queues: the CQ context `cqc`, CREATE/DESTROY/QUERY/MODIFY_CQ, the CQ doorbell
//! record and the arm doorbell (mlx5-reference 04 §5, §8).

crate::ifc! {
    /// Completion queue context (PRM "CQ Context").
    pub struct Cqc => cqc: 0x200 bits {
        /// See [`cqc_status`].
        0x000 status: 4,
        0x006 dbr_umem_valid: 1,
        0x007 apu_cq: 1,
        /// CQE size, see [`cqc_cqe_sz`].
        0x008 cqe_sz: 3,
        /// Collapsed CQ: every CQE is written to entry 0.
        0x00b cc: 1,
        0x00d scqe_break_moderation_en: 1,
        /// Overrun ignore.
        0x00e oi: 1,
        /// See [`cq_period_mode`](mod@cq_period_mode).
        0x00f cq_period_mode: 2,
        0x011 cqe_comp_en: 1,
        0x012 mini_cqe_res_format: 2,
        /// Arm state, see [`cqc_st`].
        0x014 st: 4,
        0x01e cqe_compression_layout: 2,
        0x054 page_offset: 6,
        /// log2 of the number of CQEs.
        0x063 log_cq_size: 5,
        /// UAR page whose CQ doorbell (UAR + 0x20) arms this CQ.
        0x068 uar_page: 24,
        /// Moderation period (0 = off).
        0x084 cq_period: 12,
        /// Moderation count (0 = off).
        0x090 cq_max_count: 16,
        /// EQ number for completion events (older headers: 8-bit `c_eqn` in bits 7:0).
        0x0a0 c_eqn_or_apu_element: 32,
        /// log2 of the buffer page size **relative to 4 KiB** (0 for 4 KiB pages).
        0x0c3 log_page_size: 5,
        0x108 last_notified_index: 24,
        0x128 last_solicit_index: 24,
        0x148 consumer_counter: 24,
        0x168 producer_counter: 24,
        /// Device address of the 8-byte doorbell record ([`cq_dbr`]).
        0x1c0 dbr_addr: 64,
    }
    /// CREATE_CQ input: context, then the page addresses of the CQE buffer from byte 0x110.
    pub struct CreateCqIn => create_cq_in: 0x880 bits {
        0x000 opcode: 16,
        0x010 uid: 16,
        0x030 op_mod: 16,
        0x080 cq_context: Cqc,
        0x2e0 cq_umem_valid: 1,
        0x880 pas: [u64],
    }
    /// CREATE_CQ output: the 24-bit CQ number.
    pub struct CreateCqOut => create_cq_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x48 cqn: 24,
    }
    /// DESTROY_CQ input.
    pub struct DestroyCqIn => destroy_cq_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 cqn: 24,
    }
    /// DESTROY_CQ output.
    pub struct DestroyCqOut => destroy_cq_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// QUERY_CQ input.
    pub struct QueryCqIn => query_cq_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x48 cqn: 24,
    }
    /// QUERY_CQ output.
    pub struct QueryCqOut => query_cq_out: 0x880 bits {
        0x000 status: 8,
        0x020 syndrome: 32,
        0x080 cq_context: Cqc,
        0x880 pas: [u64],
    }
    /// MODIFY_CQ input; `op_mod` is one of [`modify_cq_op_mod`] and the field-select word holds
    /// [`modify_field_select`] (op_mod 0) or [`resize_field_select`] (op_mod 1) bits.
    pub struct ModifyCqIn => modify_cq_in: 0x880 bits {
        0x000 opcode: 16,
        0x010 uid: 16,
        0x030 op_mod: 16,
        0x048 cqn: 24,
        /// The mlx5_ifc union of `modify_field_select` and `resize_field_select` (one dword).
        0x060 modify_field_select_resize_field_select: 32,
        0x080 cq_context: Cqc,
        0x2e0 cq_umem_valid: 1,
        /// New buffer pages (resize).
        0x880 pas: [u64],
    }
    /// MODIFY_CQ output.
    pub struct ModifyCqOut => modify_cq_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
}

/// `cqc.status` values (`MLX5_CQC_STATUS_*`).
pub mod cqc_status {
    /// No error.
    pub const OK: u8 = 0x0;
    /// The CQ overflowed.
    pub const CQ_OVERFLOW: u8 = 0x9;
    /// Writing a CQE failed.
    pub const CQ_WRITE_FAIL: u8 = 0xa;
}

/// `cqc.st` values (`MLX5_CQC_ST_*`).
pub mod cqc_st {
    /// Armed for the next solicited completion.
    pub const SOLICITED_NOTIFICATION_REQUEST_ARMED: u8 = 0x6;
    /// Armed for the next completion.
    pub const NOTIFICATION_REQUEST_ARMED: u8 = 0x9;
    /// An event was generated; re-arm to get another.
    pub const FIRED: u8 = 0xa;
}

/// `cqc.cqe_sz` values (`MLX5_CQC_CQE_SZ_*`; cq.h `CQE_STRIDE_*`).
pub mod cqc_cqe_sz {
    /// 64-byte CQEs.
    pub const BYTES_64: u8 = 0;
    /// 128-byte CQEs; the 64-byte CQE is the second half of each entry.
    pub const BYTES_128: u8 = 1;
    /// 128-byte stride with padding (cq.h `CQE_STRIDE_128_PAD`).
    pub const BYTES_128_PAD: u8 = 2;
}

/// `cqc.cq_period_mode` values (`MLX5_CQ_PERIOD_MODE_*`).
pub mod cq_period_mode {
    /// The moderation timer starts at the EQE.
    pub const START_FROM_EQE: u8 = 0;
    /// The moderation timer starts at the CQE.
    pub const START_FROM_CQE: u8 = 1;
}

/// MODIFY_CQ `op_mod`.
pub mod modify_cq_op_mod {
    /// Modify moderation / EQ fields selected by [`super::modify_field_select`].
    pub const MODIFY: u16 = 0;
    /// Resize, fields selected by [`super::resize_field_select`] (`MLX5_CQ_OPMOD_RESIZE`).
    pub const RESIZE: u16 = 1;
}

/// MODIFY_CQ field select with op_mod 0 (`MLX5_MODIFY_FIELD_SELECT_MODIFY_FIELD_SELECT_*`,
/// cq.h `MLX5_CQ_MODIFY_*`).
pub mod modify_field_select {
    /// `cq_period`.
    pub const CQ_PERIOD: u32 = 0x1;
    /// `cq_max_count`.
    pub const CQ_MAX_COUNT: u32 = 0x2;
    /// `oi` (cq.h `MLX5_CQ_MODIFY_OVERRUN`).
    pub const OI: u32 = 0x4;
    /// `c_eqn_or_apu_element` (mlx5_ifc only).
    pub const C_EQN: u32 = 0x8;
    /// `cq_period_mode` (cq.h `MLX5_CQ_MODIFY_PERIOD_MODE`; not in mlx5_ifc).
    pub const CQ_PERIOD_MODE: u32 = 0x10;
}

/// MODIFY_CQ field select with op_mod 1 (`MLX5_RESIZE_FIELD_SELECT_RESIZE_FIELD_SELECT_*`,
/// cq.h `MLX5_MODIFY_CQ_MASK_*`).
pub mod resize_field_select {
    /// `log_cq_size`.
    pub const LOG_CQ_SIZE: u32 = 0x1;
    /// `page_offset`.
    pub const PAGE_OFFSET: u32 = 0x2;
    /// `log_page_size`.
    pub const LOG_PAGE_SIZE: u32 = 0x4;
}

/// Byte offsets in the 8-byte CQ doorbell record at `cqc.dbr_addr` (`MLX5_CQ_SET_CI` = dword 0,
/// `MLX5_CQ_ARM_DB` = dword 1). Both hold big-endian dwords.
pub mod cq_dbr {
    /// Consumer index, [`super::cq_set_ci_word`].
    pub const SET_CI: usize = 0;
    /// Last arm request, [`super::cq_arm_word`].
    pub const ARM: usize = 4;
}

/// Arm commands (`MLX5_CQ_DB_REQ_NOT*`), already shifted to bits 27:24 of the arm word.
pub mod cq_arm_cmd {
    /// Event on the next completion.
    pub const REQ_NOT: u32 = 0;
    /// Event on the next solicited completion only.
    pub const REQ_NOT_SOL: u32 = 1 << 24;
}

/// The record's consumer-index dword (`mlx5_cq_set_ci`): `ci & 0xFFFFFF`.
pub const fn cq_set_ci_word(ci: u32) -> u32 {
    ci & 0xff_ffff
}

/// The arm word written to the record's `ARM` dword and to UAR + 0x20 (`mlx5_cq_arm`):
/// `(sn & 3) << 28 | cmd | (ci & 0xFFFFFF)`, where `sn` counts completion events of this CQ.
pub const fn cq_arm_word(sn: u32, cmd: u32, ci: u32) -> u32 {
    ((sn & 3) << 28) | cmd | (ci & 0xff_ffff)
}

/// The 64-bit value of the arm doorbell at UAR + 0x20: the arm word in the first
/// (lower-address) dword, the CQN in the second. Store it big-endian in one 64-bit write.
pub const fn cq_arm_doorbell(sn: u32, cmd: u32, ci: u32, cqn: u32) -> u64 {
    ((cq_arm_word(sn, cmd, ci) as u64) << 32) | (cqn & 0xff_ffff) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, View, ViewMut};

    #[test]
    fn golden_create_cq() {
        // 04 §5: cqc at byte 0x10; cqe_sz cqc DW0 [23:21]; log_cq_size cqc byte 0xc [28:24],
        // uar_page [23:0]; c_eqn_or_apu_element cqc 0x14; log_page_size cqc 0x18 [28:24];
        // dbr_addr cqc 0x38; pas[] at 0x110.
        let mut b = [0x6bu8; 0x118];
        let mut v = ViewMut::<CreateCqIn>::zeroed(&mut b).unwrap();
        v.set(create_cq_in::opcode, 0x400u16);
        v.sub(create_cq_in::cq_context)
            .set(cqc::cqe_sz, cqc_cqe_sz::BYTES_128)
            .set(cqc::log_cq_size, 8u8)
            .set(cqc::uar_page, 0x123u32)
            .set(cqc::c_eqn_or_apu_element, 5u32)
            .set(cqc::log_page_size, 2u8)
            .set(cqc::dbr_addr, 0x1_2345_6780u64);
        v.set_array(create_cq_in::pas, 0, 0x2_0000_0000).unwrap();
        let mut want = [0u8; 0x118];
        want[0..2].copy_from_slice(&[0x04, 0x00]);
        want[0x10..0x14].copy_from_slice(&[0x00, 0x20, 0x00, 0x00]);
        want[0x1c..0x20].copy_from_slice(&[0x08, 0x00, 0x01, 0x23]);
        want[0x24..0x28].copy_from_slice(&[0, 0, 0, 5]);
        want[0x28] = 0x02;
        want[0x48..0x50].copy_from_slice(&[0, 0, 0, 1, 0x23, 0x45, 0x67, 0x80]);
        want[0x110..0x118].copy_from_slice(&[0, 0, 0, 2, 0, 0, 0, 0]);
        assert_eq!(b, want);

        // create_cq_out.cqn at byte 0x09 [23:0].
        let out = [0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0, 0x04, 0x01, 0, 0, 0, 0];
        let o = View::<CreateCqOut>::new_checked(&out).unwrap();
        assert_eq!(o.get(create_cq_out::cqn), 0x401);
    }

    #[test]
    fn golden_modify_cq_moderation_and_resize() {
        // 04 §5: MODIFY_CQ 0x403, cqn at 0x09, field select dword at 0x0c (0x1 period,
        // 0x2 max count), cq_period cqc DW4 [27:16], cq_max_count [15:0].
        let mut b = [0xd2u8; 0x110];
        let mut v = ViewMut::<ModifyCqIn>::zeroed(&mut b).unwrap();
        v.set(modify_cq_in::opcode, 0x403u16)
            .set(modify_cq_in::op_mod, modify_cq_op_mod::MODIFY)
            .set(modify_cq_in::cqn, 0x77u32)
            .set(
                modify_cq_in::modify_field_select_resize_field_select,
                modify_field_select::CQ_PERIOD | modify_field_select::CQ_MAX_COUNT,
            );
        v.sub(modify_cq_in::cq_context)
            .set(cqc::cq_period, 16u16)
            .set(cqc::cq_max_count, 32u16);
        let mut want = [0u8; 0x110];
        want[0..2].copy_from_slice(&[0x04, 0x03]);
        want[0x08..0x10].copy_from_slice(&[0, 0, 0, 0x77, 0, 0, 0, 3]);
        want[0x20..0x24].copy_from_slice(&[0x00, 0x10, 0x00, 0x20]);
        assert_eq!(b, want);

        // Resize: op_mod 1, select log_cq_size | log_page_size (0x1 | 0x4).
        let mut b = [0xd2u8; 0x110];
        let mut v = ViewMut::<ModifyCqIn>::zeroed(&mut b).unwrap();
        v.set(modify_cq_in::opcode, 0x403u16)
            .set(modify_cq_in::op_mod, modify_cq_op_mod::RESIZE)
            .set(modify_cq_in::cqn, 0x77u32)
            .set(
                modify_cq_in::modify_field_select_resize_field_select,
                resize_field_select::LOG_CQ_SIZE | resize_field_select::LOG_PAGE_SIZE,
            );
        v.sub(modify_cq_in::cq_context).set(cqc::log_cq_size, 10u8);
        assert_eq!(
            b[..0x10],
            [4, 3, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0x77, 0, 0, 0, 5]
        );
        assert_eq!(b[0x1c..0x20], [0x0a, 0, 0, 0]);
    }

    #[test]
    fn golden_arm_doorbell_and_sizes() {
        // 04 §8: arm word (sn & 3) << 28 | cmd | ci & 0xFFFFFF; doorbell = arm word at UAR+0x20
        // then CQN at UAR+0x24, big-endian.
        assert_eq!(
            cq_arm_word(5, cq_arm_cmd::REQ_NOT_SOL, 0x0100_1234),
            0x1100_1234
        );
        assert_eq!(cq_arm_word(2, cq_arm_cmd::REQ_NOT, 7), 0x2000_0007);
        assert_eq!(
            cq_arm_doorbell(1, cq_arm_cmd::REQ_NOT_SOL, 0x1234, 0x42).to_be_bytes(),
            [0x11, 0x00, 0x12, 0x34, 0x00, 0x00, 0x00, 0x42]
        );
        assert_eq!(cq_set_ci_word(0x0123_4567), 0x23_4567);
        assert_eq!((cq_dbr::SET_CI, cq_dbr::ARM), (0, 4));

        // 04 §5: 272-byte create/query/modify, 16-byte others.
        assert_eq!(Cqc::BYTES, 64);
        assert_eq!(CreateCqIn::BYTES, 272);
        assert_eq!(QueryCqOut::BYTES, 272);
        assert_eq!(ModifyCqIn::BYTES, 272);
        for bytes in [
            CreateCqOut::BYTES,
            DestroyCqIn::BYTES,
            DestroyCqOut::BYTES,
            QueryCqIn::BYTES,
            ModifyCqOut::BYTES,
        ] {
            assert_eq!(bytes, 16);
        }
    }
}
