//! Shared receive queues: the SRQ context `srqc` (CREATE/DESTROY/QUERY_SRQ, ARM_RQ), the XRC
//! SRQ context `xrc_srqc` (CREATE/DESTROY/QUERY/ARM_XRC_SRQ) and the receive memory pool
//! `rmpc` (CREATE/DESTROY/QUERY/MODIFY_RMP), which Linux mlx5_ib uses for basic SRQs once ISSI
//! is 1 (Linux 6.12 include/linux/mlx5/mlx5_ifc.h; drivers/infiniband/hw/mlx5/srq_cmd.c).

use super::work_queue::Wq;

crate::ifc! {
    /// SRQ context (PRM "SRQ Context"), for CREATE_SRQ / QUERY_SRQ.
    pub struct Srqc => srqc: 0x200 bits {
        /// See [`srqc_state`].
        0x000 state: 4,
        /// log2 of the number of WQEs.
        0x004 log_srq_size: 4,
        0x020 wq_signature: 1,
        0x021 cont_srq: 1,
        0x023 rlky: 1,
        /// log2 of the WQE stride in 16-byte units (stride = 16 << log_rq_stride).
        0x025 log_rq_stride: 3,
        0x028 xrcd: 24,
        /// Offset of the queue in its first page, in 64ths of a page.
        0x040 page_offset: 6,
        0x048 cqn: 24,
        /// log2 of the page size relative to 4 KiB.
        0x082 log_page_size: 6,
        0x0c8 pd: 24,
        /// Limit watermark.
        0x0e0 lwm: 16,
        0x0f0 wqe_cnt: 16,
        /// Doorbell record address.
        0x140 dbr_addr: 64,
    }
    /// XRC SRQ context (PRM "XRC SRQ Context"), for CREATE_XRC_SRQ / QUERY_XRC_SRQ.
    pub struct XrcSrqc => xrc_srqc: 0x200 bits {
        /// See [`srqc_state`].
        0x000 state: 4,
        /// log2 of the number of WQEs.
        0x004 log_xrc_srq_size: 4,
        0x020 wq_signature: 1,
        0x021 cont_srq: 1,
        0x023 rlky: 1,
        0x024 basic_cyclic_rcv_wqe: 1,
        /// log2 of the WQE stride in 16-byte units (stride = 16 << log_rq_stride).
        0x025 log_rq_stride: 3,
        0x028 xrcd: 24,
        /// Offset of the queue in its first page, in 64ths of a page.
        0x040 page_offset: 6,
        0x047 dbr_umem_valid: 1,
        0x048 cqn: 24,
        0x080 user_index_equal_xrc_srqn: 1,
        /// log2 of the page size relative to 4 KiB.
        0x082 log_page_size: 6,
        /// Reported in the CQEs of receives from this SRQ (CQE version 1).
        0x088 user_index: 24,
        0x0c8 pd: 24,
        /// Limit watermark.
        0x0e0 lwm: 16,
        0x0f0 wqe_cnt: 16,
        /// Doorbell record address bits 63:32.
        0x140 db_record_addr_h: 32,
        /// Doorbell record address bits 31:2 (the record is dword aligned).
        0x160 db_record_addr_l: 30,
    }
    /// Receive memory pool context (PRM "RMP Context"): a state and a work queue.
    pub struct Rmpc => rmpc: 0x780 bits {
        /// See [`rmpc_state`].
        0x008 state: 4,
        0x020 basic_cyclic_rcv_wqe: 1,
        0x180 wq: Wq,
    }

    /// CREATE_SRQ input: context, then the page list from byte 0x110.
    pub struct CreateSrqIn => create_srq_in: 0x880 bits {
        0x000 opcode: 16,
        0x010 uid: 16,
        0x030 op_mod: 16,
        0x080 srq_context_entry: Srqc,
        0x880 pas: [u64],
    }
    /// CREATE_SRQ output: the SRQ number.
    pub struct CreateSrqOut => create_srq_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x48 srqn: 24,
    }
    /// DESTROY_SRQ input.
    pub struct DestroySrqIn => destroy_srq_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 srqn: 24,
    }
    /// DESTROY_SRQ output.
    pub struct DestroySrqOut => destroy_srq_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// QUERY_SRQ input.
    pub struct QuerySrqIn => query_srq_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x48 srqn: 24,
    }
    /// QUERY_SRQ output: context and page list.
    pub struct QuerySrqOut => query_srq_out: 0x880 bits {
        0x000 status: 8,
        0x020 syndrome: 32,
        0x080 srq_context_entry: Srqc,
        0x880 pas: [u64],
    }
    /// ARM_RQ input: sets the limit watermark of an SRQ (`op_mod` [`arm_rq_op_mod`]).
    pub struct ArmRqIn => arm_rq_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 srq_number: 24,
        0x70 lwm: 16,
    }
    /// ARM_RQ output.
    pub struct ArmRqOut => arm_rq_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }

    /// CREATE_XRC_SRQ input: context, then the page list from byte 0x110.
    pub struct CreateXrcSrqIn => create_xrc_srq_in: 0x880 bits {
        0x000 opcode: 16,
        0x010 uid: 16,
        0x030 op_mod: 16,
        0x080 xrc_srq_context_entry: XrcSrqc,
        0x2e0 xrc_srq_umem_valid: 1,
        0x880 pas: [u64],
    }
    /// CREATE_XRC_SRQ output: the XRC SRQ number.
    pub struct CreateXrcSrqOut => create_xrc_srq_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x48 xrc_srqn: 24,
    }
    /// DESTROY_XRC_SRQ input.
    pub struct DestroyXrcSrqIn => destroy_xrc_srq_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 xrc_srqn: 24,
    }
    /// DESTROY_XRC_SRQ output.
    pub struct DestroyXrcSrqOut => destroy_xrc_srq_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// QUERY_XRC_SRQ input.
    pub struct QueryXrcSrqIn => query_xrc_srq_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x48 xrc_srqn: 24,
    }
    /// QUERY_XRC_SRQ output: context and page list.
    pub struct QueryXrcSrqOut => query_xrc_srq_out: 0x880 bits {
        0x000 status: 8,
        0x020 syndrome: 32,
        0x080 xrc_srq_context_entry: XrcSrqc,
        0x880 pas: [u64],
    }
    /// ARM_XRC_SRQ input: sets the limit watermark (`op_mod` [`arm_xrc_srq_op_mod`]).
    pub struct ArmXrcSrqIn => arm_xrc_srq_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 xrc_srqn: 24,
        0x70 lwm: 16,
    }
    /// ARM_XRC_SRQ output.
    pub struct ArmXrcSrqOut => arm_xrc_srq_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }

    /// CREATE_RMP input: the RMP context at byte 0x20; its page list (`ctx.wq.pas`) from byte
    /// 0x110.
    pub struct CreateRmpIn => create_rmp_in: 0x880 bits {
        0x000 opcode: 16,
        0x010 uid: 16,
        0x030 op_mod: 16,
        0x100 ctx: Rmpc,
        /// `ctx.wq.pas`.
        0x880 pas: [u64],
    }
    /// CREATE_RMP output: the RMP number.
    pub struct CreateRmpOut => create_rmp_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x48 rmpn: 24,
    }
    /// DESTROY_RMP input.
    pub struct DestroyRmpIn => destroy_rmp_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 rmpn: 24,
    }
    /// DESTROY_RMP output.
    pub struct DestroyRmpOut => destroy_rmp_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// QUERY_RMP input.
    pub struct QueryRmpIn => query_rmp_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x48 rmpn: 24,
    }
    /// QUERY_RMP output: the RMP context, then its page list (`rmp_context.wq.pas`) as far as
    /// the output reaches.
    pub struct QueryRmpOut => query_rmp_out: 0x880 bits {
        0x000 status: 8,
        0x020 syndrome: 32,
        0x100 rmp_context: Rmpc,
        /// `rmp_context.wq.pas`.
        0x880 pas: [u64],
    }
    /// MODIFY_RMP field select (`rmp_bitmask`).
    pub struct RmpBitmask => rmp_bitmask: 0x40 bits {
        /// Take `ctx.wq.lwm`.
        0x3f lwm: 1,
    }
    /// MODIFY_RMP input: the current state, the RMP, which fields to take, the new context.
    pub struct ModifyRmpIn => modify_rmp_in: 0x880 bits {
        0x000 opcode: 16,
        0x010 uid: 16,
        0x030 op_mod: 16,
        /// The RMP's current state ([`rmpc_state`]).
        0x040 rmp_state: 4,
        0x048 rmpn: 24,
        0x080 bitmask: RmpBitmask,
        0x100 ctx: Rmpc,
    }
    /// MODIFY_RMP output.
    pub struct ModifyRmpOut => modify_rmp_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
}

/// `srqc.state` and `xrc_srqc.state` values (`MLX5_SRQC_STATE_*`, `MLX5_XRC_SRQC_STATE_*`).
pub mod srqc_state {
    /// Working.
    pub const GOOD: u8 = 0x0;
    /// In error.
    pub const ERROR: u8 = 0x1;
}

/// `rmpc.state` values (`MLX5_RMPC_STATE_*`).
pub mod rmpc_state {
    /// Ready.
    pub const RDY: u8 = 0x1;
    /// In error.
    pub const ERR: u8 = 0x3;
}

/// ARM_RQ `op_mod` (`MLX5_ARM_RQ_IN_OP_MOD_*`).
pub mod arm_rq_op_mod {
    /// The number is an SRQ's.
    pub const SRQ: u16 = 0x1;
    /// The number is an XRQ's.
    pub const XRQ: u16 = 0x2;
}

/// ARM_XRC_SRQ `op_mod` (`MLX5_ARM_XRC_SRQ_IN_OP_MOD_XRC_SRQ`).
pub mod arm_xrc_srq_op_mod {
    /// The only defined value.
    pub const XRC_SRQ: u16 = 0x1;
}

/// The number of 64ths of a page `page_offset` counts in (`srqc`, `xrc_srqc`, `wq`): Linux
/// 6.12 srq_cmd.c quantizes the buffer's offset with scale 64 and `get_pas_size` adds
/// `page_offset << (log_page_size - 6)` bytes before the queue.
pub const PAGE_OFFSET_QUANTA: u64 = 64;

/// Bytes of the page list an SRQ needs (Linux 6.12 srq_cmd.c `get_pas_size`, in pages): the
/// queue of `1 << log_wqes` WQEs of `1 << log_stride` bytes, starting `page_offset` 64ths into
/// the first page of `4096 << log_page_size` bytes.
pub const fn srq_pages(
    log_wqes: u32,
    log_stride: u32,
    log_page_size: u32,
    page_offset: u32,
) -> u64 {
    let page = 4096u64 << log_page_size;
    let bytes =
        (1u64 << (log_wqes + log_stride)) + page_offset as u64 * (page / PAGE_OFFSET_QUANTA);
    bytes.div_ceil(page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ifc::wq;
    use crate::layout::{Layout, View, ViewMut};

    #[test]
    fn golden_create_xrc_srq() {
        // mlx5_ifc `create_xrc_srq_in`: context at byte 0x10; xrc_srqc log_xrc_srq_size DW0
        // [27:24], log_rq_stride DW1 [26:24], xrcd DW1 [23:0], page_offset DW2 [31:26], cqn
        // DW2 [23:0], log_page_size DW4 [29:24], user_index DW4 [23:0], pd DW6, lwm DW7
        // [31:16], db_record_addr_h/l at context 0x28/0x2c; pas from 0x110.
        let mut b = [0x77u8; 0x118];
        let mut v = ViewMut::<CreateXrcSrqIn>::zeroed(&mut b).unwrap();
        v.set(create_xrc_srq_in::opcode, 0x705u16);
        v.sub(create_xrc_srq_in::xrc_srq_context_entry)
            .set(xrc_srqc::log_xrc_srq_size, 1u8)
            .set(xrc_srqc::log_rq_stride, 1u8)
            .set(xrc_srqc::xrcd, 0x12u32)
            .set(xrc_srqc::page_offset, 0x3fu8)
            .set(xrc_srqc::cqn, 0x34u32)
            .set(xrc_srqc::log_page_size, 2u8)
            .set(xrc_srqc::user_index, 0xff_ffffu32)
            .set(xrc_srqc::pd, 0x56u32)
            .set(xrc_srqc::lwm, 3u16)
            .set(xrc_srqc::db_record_addr_h, 1u32)
            .set(xrc_srqc::db_record_addr_l, 0x2000_0001u32);
        v.set_array(create_xrc_srq_in::pas, 0, 0x9_0000_0000)
            .unwrap();
        let mut want = [0u8; 0x118];
        want[0..2].copy_from_slice(&[0x07, 0x05]);
        want[0x10] = 0x01;
        want[0x14..0x18].copy_from_slice(&[0x01, 0, 0, 0x12]);
        want[0x18..0x1c].copy_from_slice(&[0xfc, 0, 0, 0x34]);
        want[0x20..0x24].copy_from_slice(&[0x02, 0xff, 0xff, 0xff]);
        want[0x28..0x2c].copy_from_slice(&[0, 0, 0, 0x56]);
        want[0x2c..0x30].copy_from_slice(&[0, 3, 0, 0]);
        want[0x38..0x40].copy_from_slice(&[0, 0, 0, 1, 0x80, 0, 0, 0x04]);
        want[0x110..0x118].copy_from_slice(&[0, 0, 0, 9, 0, 0, 0, 0]);
        assert_eq!(b, want);

        let out = [0, 0, 0, 0, 0, 0, 0, 0, 0xee, 0, 0x01, 0x02, 0, 0, 0, 0];
        let o = View::<CreateXrcSrqOut>::new_checked(&out).unwrap();
        assert_eq!(o.get(create_xrc_srq_out::xrc_srqn), 0x102);
    }

    #[test]
    fn golden_create_rmp_and_modify() {
        // mlx5_ifc `create_rmp_in`: ctx at byte 0x20, rmpc.state DW0 [23:20], rmpc.wq at ctx
        // byte 0x30 (so wq.lwm at 0x54, wq.pd at 0x58, wq.log_wq_sz at 0x73), pas from 0x110.
        let mut b = [0x11u8; 0x118];
        let mut v = ViewMut::<CreateRmpIn>::zeroed(&mut b).unwrap();
        v.set(create_rmp_in::opcode, 0x90cu16);
        let mut c = v.sub(create_rmp_in::ctx);
        c.set(rmpc::state, rmpc_state::RDY);
        c.sub(rmpc::wq)
            .set(wq::lwm, 2u16)
            .set(wq::pd, 0x99u32)
            .set(wq::log_wq_stride, 5u8)
            .set(wq::log_wq_sz, 1u8);
        v.set_array(create_rmp_in::pas, 0, 0x4000).unwrap();
        let mut want = [0u8; 0x118];
        want[0..2].copy_from_slice(&[0x09, 0x0c]);
        want[0x21] = 0x10;
        want[0x54..0x58].copy_from_slice(&[0, 0, 0, 2]);
        want[0x58..0x5c].copy_from_slice(&[0, 0, 0, 0x99]);
        want[0x70..0x74].copy_from_slice(&[0, 5, 0, 1]);
        want[0x110..0x118].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0x40, 0]);
        assert_eq!(b, want);

        // modify_rmp_in: rmp_state DW2 [31:28], rmpn DW2 [23:0], bitmask.lwm = bit 0 of the
        // dword at byte 0x14.
        let mut b = [0x22u8; 0x110];
        let mut v = ViewMut::<ModifyRmpIn>::zeroed(&mut b).unwrap();
        v.set(modify_rmp_in::opcode, 0x90du16)
            .set(modify_rmp_in::rmp_state, rmpc_state::RDY)
            .set(modify_rmp_in::rmpn, 0x77u32);
        v.sub(modify_rmp_in::bitmask).set(rmp_bitmask::lwm, 1u8);
        assert_eq!(
            b[..0x18],
            [9, 0xd, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
        );
    }

    #[test]
    fn golden_srqc_and_sizes() {
        // mlx5_ifc `srqc`: same places as xrc_srqc, dbr_addr a 64-bit field at 0x28.
        let mut b = [0x33u8; 0x40];
        ViewMut::<Srqc>::zeroed(&mut b)
            .unwrap()
            .set(srqc::state, srqc_state::ERROR)
            .set(srqc::log_srq_size, 4u8)
            .set(srqc::dbr_addr, 0xdead_beefu64);
        let mut want = [0u8; 0x40];
        want[0] = 0x14;
        want[0x28..0x30].copy_from_slice(&[0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(b, want);

        for bytes in [
            CreateSrqIn::BYTES,
            QuerySrqOut::BYTES,
            CreateXrcSrqIn::BYTES,
            QueryXrcSrqOut::BYTES,
            CreateRmpIn::BYTES,
            QueryRmpOut::BYTES,
            ModifyRmpIn::BYTES,
        ] {
            assert_eq!(bytes, 0x110);
        }
        assert_eq!((Srqc::BYTES, XrcSrqc::BYTES, Rmpc::BYTES), (64, 64, 0xf0));
        for bytes in [
            CreateSrqOut::BYTES,
            DestroySrqIn::BYTES,
            QuerySrqIn::BYTES,
            ArmRqIn::BYTES,
            CreateXrcSrqOut::BYTES,
            DestroyXrcSrqIn::BYTES,
            QueryXrcSrqIn::BYTES,
            ArmXrcSrqIn::BYTES,
            CreateRmpOut::BYTES,
            DestroyRmpIn::BYTES,
            QueryRmpIn::BYTES,
            ModifyRmpOut::BYTES,
        ] {
            assert_eq!(bytes, 16);
        }
    }

    #[test]
    fn page_list_length_follows_get_pas_size() {
        // Linux 6.12 srq_cmd.c get_pas_size: mlx5_ib's default SRQs (2 WQEs of 32 bytes,
        // 4 KiB pages, offset 0) need one page; 64 WQEs of 64 bytes at offset 32/64 of a 4 KiB
        // page need 4096 + 2048 bytes, two pages.
        assert_eq!(srq_pages(1, 5, 0, 0), 1);
        assert_eq!(srq_pages(6, 6, 0, 32), 2);
        assert_eq!(srq_pages(6, 6, 0, 0), 1);
        assert_eq!(srq_pages(10, 6, 4, 0), 1);
        assert_eq!(srq_pages(10, 6, 4, 1), 2);
    }
}
