//! Send and receive work-queue elements: segment layouts, send opcodes, the `fm_ce_se` flags
//! and the QP doorbell record (mlx5-reference 05 §3–§7; Linux qp.h `struct mlx5_wqe_*_seg`,
//! rdma-core mlx5dv.h).
//!
//! Segments are C structs of big-endian words, declared here by bit offset (byte offset × 8).
//! The control segment's packed words are split into their named parts so no caller shifts.

crate::ifc! {
    /// Control segment, first 16 bytes of every send WQE (`struct mlx5_wqe_ctrl_seg`).
    pub struct WqeCtrlSeg => wqe_ctrl_seg: 0x80 bits {
        /// Opcode modifier (`opmod_idx_opcode` bits 31:24).
        0x00 opmod: 8,
        /// SQ producer counter in WQEBBs, modulo 2^16 (`opmod_idx_opcode` bits 23:8).
        0x08 wqe_index: 16,
        /// Send opcode, one of [`wqe_opcode`] (`opmod_idx_opcode` bits 7:0).
        0x18 opcode: 8,
        /// QP (or SQ) number (`qpn_ds` bits 31:8).
        0x20 qpn: 24,
        /// WQE size in 16-byte units including this segment (`qpn_ds` bits 5:0,
        /// `MLX5_WQE_CTRL_DS_MASK`).
        0x3a ds: 6,
        /// WQE signature (only with `qpc.wq_signature`).
        0x40 signature: 8,
        /// DCI stream channel (rdma-core; reserved in Linux).
        0x48 dci_stream_channel_id: 16,
        /// Fence mode, completion and solicited flags, see [`fm_ce_se`](mod@fm_ce_se).
        0x58 fm_ce_se: 8,
        /// Immediate data (SEND_IMM, RDMA_WRITE_IMM), rkey to invalidate (SEND_INVAL), or
        /// `tis_tir_num` / `umr_mkey` / `general_id` (Linux union).
        0x60 imm: 32,
    }
    /// Remote address segment for RDMA READ / WRITE and atomics (`struct mlx5_wqe_raddr_seg`).
    /// Ethernet segment (`struct mlx5_wqe_eth_seg`), after the control segment of an
    /// Ethernet send: checksum offload flags, the LSO segment size and the inline headers,
    /// whose first two bytes sit in `inline_hdr_start` and the rest in the 16-byte units after.
    pub struct WqeEthSeg => wqe_eth_seg: 0x80 bits {
        0x00 swp_outer_l4_offset: 8,
        0x08 swp_outer_l3_offset: 8,
        0x10 swp_inner_l4_offset: 8,
        0x18 swp_inner_l3_offset: 8,
        /// See [`eth_cs_flags`](mod@eth_cs_flags).
        0x20 cs_flags: 8,
        0x28 swp_flags: 8,
        /// LSO: the payload bytes of each segment.
        0x30 mss: 16,
        0x40 flow_table_metadata: 32,
        /// Bytes of headers inlined from `inline_hdr_start` on; or, with
        /// [`ETH_WQE_INSERT_VLAN`] set, the insert type, `inline_hdr_start` then holding the
        /// VLAN TCI to insert (the `insert` union of `struct mlx5_wqe_eth_seg`).
        0x60 inline_hdr_sz: 16,
        0x70 inline_hdr_start: [u8; 2],
    }
    pub struct WqeRaddrSeg => wqe_raddr_seg: 0x80 bits {
        0x00 raddr: 64,
        0x40 rkey: 32,
    }
    /// Atomic segment (`struct mlx5_wqe_atomic_seg`); the data segment after it points at the
    /// 8-byte local result buffer ([`ATOMIC_SIZE`]).
    pub struct WqeAtomicSeg => wqe_atomic_seg: 0x80 bits {
        /// Swap value (compare & swap) or add value (fetch & add).
        0x00 swap_add: 64,
        /// Compare value (compare & swap only).
        0x40 compare: 64,
    }
    /// Scatter / gather entry (`struct mlx5_wqe_data_seg`), in send WQEs and receive WQEs.
    pub struct WqeDataSeg => wqe_data_seg: 0x80 bits {
        /// Length in bytes; bit 31 must be 0.
        0x00 byte_count: 32,
        0x20 lkey: 32,
        0x40 addr: 64,
    }
    /// First 16 bytes of every SRQ / RMP receive WQE (rdma-core 56 mlx5dv.h
    /// `struct mlx5_wqe_srq_next_seg`): the link of the queue's linked list; data segments
    /// follow.
    pub struct WqeSrqNextSeg => wqe_srq_next_seg: 0x80 bits {
        /// Index of the WQE after this one in the list.
        0x10 next_wqe_index: 16,
        0x20 signature: 8,
    }
    /// XRC segment, after the control segment of every send WQE on an XRC initiator QP (Linux
    /// qp.h and rdma-core 56 wqe.h `struct mlx5_wqe_xrc_seg`: `__be32 xrc_srqn`, 12 reserved
    /// bytes): the XRC SRQ at the target that receives the message.
    pub struct WqeXrcSeg => wqe_xrc_seg: 0x80 bits {
        0x00 xrc_srqn: 32,
    }
    /// Inline data header (`struct mlx5_wqe_inline_seg`): data bytes follow, padded to 16.
    pub struct WqeInlineSeg => wqe_inline_seg: 0x20 bits {
        /// Length | [`INLINE_SEG`] ([`inline_seg_byte_count`]).
        0x00 byte_count: 32,
    }
    /// Datagram segment = address vector for UD (and DC) sends (`struct mlx5_wqe_datagram_seg`,
    /// `struct mlx5_av`, 48 bytes).
    pub struct WqeDatagramSeg => wqe_datagram_seg: 0x180 bits {
        /// Remote Q_Key (`key.qkey.qkey`); for DC the 8-byte `dc_key` occupies bytes 0–7.
        0x000 qkey: 32,
        /// Bits 23:0 destination QPN; bit 31 [`EXTENDED_UD_AV`].
        0x040 dqp_dct: 32,
        /// Bits 7:4 static rate; IB: bits 3:0 SL; RoCE: SL in bits 3:1.
        0x060 stat_rate_sl: 8,
        /// Bit 7 `fl`, bits 6:0 source path bits.
        0x068 fl_mlid: 8,
        /// Destination LID (IB) or UDP source port.
        0x070 rlid: 16,
        /// Destination MAC (RoCE).
        0x0a0 rmac: [u8; 6],
        0x0d0 tclass: 8,
        0x0d8 hop_limit: 8,
        /// Bit 30 GRH present (IB only), bits 27:20 SGID index, bits 19:0 flow label
        /// ([`av_grh_gid_fl`]).
        0x0e0 grh_gid_fl: 32,
        /// Destination GID.
        0x100 rgid: [u8; 16],
    }
}

/// Send WQE basic block size in bytes (`MLX5_SEND_WQE_BB`); the SQ ring index counts these.
pub const SEND_WQE_BB: usize = 64;
/// WQE size unit (DS) in bytes (`MLX5_SEND_WQE_DS`).
pub const SEND_WQE_DS: usize = 16;
/// DS units per WQEBB (`MLX5_SEND_WQEBB_NUM_DS`).
pub const SEND_WQEBB_NUM_DS: usize = SEND_WQE_BB / SEND_WQE_DS;
/// Largest send WQE in WQEBBs (`MLX5_SEND_WQE_MAX_WQEBBS`).
pub const SEND_WQE_MAX_WQEBBS: usize = 16;
/// `wqe_eth_seg.cs_flags` bits (`MLX5_ETH_WQE_*_CSUM`).
pub mod eth_cs_flags {
    /// Inner (tunnelled) IPv4 header checksum.
    pub const L3_INNER_CSUM: u8 = 1 << 4;
    /// Inner TCP/UDP checksum.
    pub const L4_INNER_CSUM: u8 = 1 << 5;
    /// IPv4 header checksum.
    pub const L3_CSUM: u8 = 1 << 6;
    /// TCP/UDP checksum.
    pub const L4_CSUM: u8 = 1 << 7;
}

/// `wqe_eth_seg.inline_hdr_sz` as the insert type: insert a C-tag (`MLX5_ETH_WQE_INSERT_VLAN`).
pub const ETH_WQE_INSERT_VLAN: u16 = 1 << 15;

/// Flag OR-ed into `wqe_inline_seg.byte_count` (`MLX5_INLINE_SEG`).
pub const INLINE_SEG: u32 = 0x8000_0000;
/// Length bits of an inline byte count (`MLX5_WQE_INLINE_SEG_BYTE_COUNT_MASK`).
pub const INLINE_SEG_BYTE_COUNT_MASK: u32 = 0x3ff;
/// `dqp_dct` flag for a full 48-byte address vector (`MLX5_EXTENDED_UD_AV`).
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;
/// Lkey of the data segment that ends a short receive scatter list (rdma-core
/// `MLX5_INVALID_LKEY`, Linux `MLX5_TERMINATE_SCATTER_LIST_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;
/// Byte count of the data segment after an atomic segment (rdma-core `MLX5_ATOMIC_SIZE`).
pub const ATOMIC_SIZE: u32 = 8;

/// Send opcodes, control segment bits 7:0 (device.h / mlx5dv.h `MLX5_OPCODE_*`).
pub mod wqe_opcode {
    /// No operation.
    pub const NOP: u8 = 0x00;
    /// SEND with invalidate.
    pub const SEND_INVAL: u8 = 0x01;
    /// RDMA WRITE.
    pub const RDMA_WRITE: u8 = 0x08;
    /// RDMA WRITE with immediate.
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    /// SEND.
    pub const SEND: u8 = 0x0a;
    /// SEND with immediate.
    pub const SEND_IMM: u8 = 0x0b;
    /// Large send offload (rdma-core `MLX5_OPCODE_TSO`).
    pub const LSO: u8 = 0x0e;
    /// RDMA READ.
    pub const RDMA_READ: u8 = 0x10;
    /// Atomic compare & swap.
    pub const ATOMIC_CS: u8 = 0x11;
    /// Atomic fetch & add.
    pub const ATOMIC_FA: u8 = 0x12;
    /// Masked compare & swap.
    pub const ATOMIC_MASKED_CS: u8 = 0x14;
    /// Masked fetch & add.
    pub const ATOMIC_MASKED_FA: u8 = 0x15;
    /// Bind memory window.
    pub const BIND_MW: u8 = 0x18;
    /// Fast memory registration (rdma-core).
    pub const FMR: u8 = 0x19;
    /// Local invalidate (rdma-core).
    pub const LOCAL_INVAL: u8 = 0x1b;
    /// Configuration command.
    pub const CONFIG_CMD: u8 = 0x1f;
    /// Set PSV.
    pub const SET_PSV: u8 = 0x20;
    /// Get PSV.
    pub const GET_PSV: u8 = 0x21;
    /// Check PSV.
    pub const CHECK_PSV: u8 = 0x22;
    /// User-mode memory registration.
    pub const UMR: u8 = 0x25;
    /// Tag matching (rdma-core).
    pub const TAG_MATCHING: u8 = 0x28;
    /// Enhanced multi-packet send.
    pub const ENHANCED_MPSW: u8 = 0x29;
    /// Flow table access.
    pub const FLOW_TBL_ACCESS: u8 = 0x2c;
    /// ASO access.
    pub const ACCESS_ASO: u8 = 0x2d;
}

/// Bits of `wqe_ctrl_seg.fm_ce_se`: fence mode 7:5, completion 3:2, solicited 1
/// (qp.h `MLX5_WQE_CTRL_*`, `MLX5_FENCE_MODE_*`).
pub mod fm_ce_se {
    /// CE = 2: always generate a CQE (`MLX5_WQE_CTRL_CQ_UPDATE`). CE = 0: a CQE only on error.
    pub const CQ_UPDATE: u8 = 2 << 2;
    /// CE = 3: CQE and EQE (`MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE`).
    pub const CQ_UPDATE_AND_EQE: u8 = 3 << 2;
    /// Solicited event (`MLX5_WQE_CTRL_SOLICITED`).
    pub const SOLICITED: u8 = 1 << 1;
    /// No fence.
    pub const FENCE_MODE_NONE: u8 = 0 << 5;
    /// Initiator small fence.
    pub const FENCE_MODE_INITIATOR_SMALL: u8 = 1 << 5;
    /// Fence.
    pub const FENCE_MODE_FENCE: u8 = 2 << 5;
    /// Strong ordering.
    pub const FENCE_MODE_STRONG_ORDERING: u8 = 3 << 5;
    /// Small and fence (rdma-core calls this `MLX5_WQE_CTRL_FENCE`).
    pub const FENCE_MODE_SMALL_AND_FENCE: u8 = 4 << 5;
}

/// Byte offsets in the 8-byte QP (and SQ/RQ object) doorbell record at `qpc.dbr_addr`
/// (qp.h `MLX5_RCV_DBR` = dword 0, `MLX5_SND_DBR` = dword 1). Both hold big-endian dwords.
pub mod qp_dbr {
    /// Receive counter: receive WQEs posted, modulo 2^16.
    pub const RCV: usize = 0;
    /// Send counter: WQEBBs posted, modulo 2^16.
    pub const SND: usize = 4;
}

/// `wqe_inline_seg.byte_count` for `len` inline bytes.
pub const fn inline_seg_byte_count(len: u32) -> u32 {
    INLINE_SEG | len
}

/// DS units an inline segment of `len` bytes takes: `align(4 + len, 16) / 16`.
pub const fn inline_seg_ds(len: usize) -> usize {
    (4 + len).div_ceil(SEND_WQE_DS)
}

/// WQEBBs a WQE of `ds` 16-byte units occupies.
pub const fn ds_to_wqebbs(ds: usize) -> usize {
    ds.div_ceil(SEND_WQEBB_NUM_DS)
}

/// `wqe_datagram_seg.grh_gid_fl` from its parts (`mlx5_create_ah`): `grh` only on IB.
pub const fn av_grh_gid_fl(grh: bool, sgid_index: u8, flow_label: u32) -> u32 {
    ((grh as u32) << 30) | ((sgid_index as u32) << 20) | (flow_label & 0xf_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, ViewMut};

    #[test]
    fn golden_control_segment() {
        // 05 §4.1: opmod_idx_opcode = opmod << 24 | wqe_index << 8 | opcode; qpn_ds =
        // qpn << 8 | ds; signature 0x8; fm_ce_se 0xb; imm 0xc (rdma-core mlx5dv_set_ctrl_seg).
        let mut b = [0xeeu8; 16];
        ViewMut::<WqeCtrlSeg>::zeroed(&mut b)
            .unwrap()
            .set(wqe_ctrl_seg::wqe_index, 0x1234u16)
            .set(wqe_ctrl_seg::opcode, wqe_opcode::SEND_IMM)
            .set(wqe_ctrl_seg::qpn, 0xab_cdefu32)
            .set(wqe_ctrl_seg::ds, 3u8)
            .set(
                wqe_ctrl_seg::fm_ce_se,
                fm_ce_se::CQ_UPDATE | fm_ce_se::SOLICITED,
            )
            .set(wqe_ctrl_seg::imm, 0x0102_0304u32);
        assert_eq!(
            b,
            [
                0x00, 0x12, 0x34, 0x0b, 0xab, 0xcd, 0xef, 0x03, //
                0x00, 0x00, 0x00, 0x0a, 0x01, 0x02, 0x03, 0x04
            ]
        );

        // Fence 3 << 5, opmod in the top byte, ds keeps bits 7:6 of byte 7 reserved.
        let mut b = [0xeeu8; 16];
        ViewMut::<WqeCtrlSeg>::zeroed(&mut b)
            .unwrap()
            .set(wqe_ctrl_seg::opmod, 0x5au8)
            .set(wqe_ctrl_seg::opcode, wqe_opcode::NOP)
            .set(wqe_ctrl_seg::ds, 0xffu8)
            .set(
                wqe_ctrl_seg::fm_ce_se,
                fm_ce_se::FENCE_MODE_STRONG_ORDERING | fm_ce_se::CQ_UPDATE,
            );
        assert_eq!(b[..8], [0x5a, 0, 0, 0, 0, 0, 0, 0x3f]);
        assert_eq!(b[0xb], 0x68);
    }

    #[test]
    fn golden_rdma_write_wqe() {
        // 05 §3 segment order: ctrl (16) | raddr (16, §4.2: raddr BE64, rkey BE32) |
        // data (16, §4.4: byte_count, lkey, addr) = 3 DS in one 64-byte WQEBB.
        let mut wqe = [0x99u8; SEND_WQE_BB];
        let (ctrl, rest) = wqe.split_at_mut(16);
        let (raddr, rest) = rest.split_at_mut(16);
        let (data, pad) = rest.split_at_mut(16);
        ViewMut::<WqeCtrlSeg>::zeroed(ctrl)
            .unwrap()
            .set(wqe_ctrl_seg::wqe_index, 7u16)
            .set(wqe_ctrl_seg::opcode, wqe_opcode::RDMA_WRITE)
            .set(wqe_ctrl_seg::qpn, 0x42u32)
            .set(wqe_ctrl_seg::ds, 3u8)
            .set(wqe_ctrl_seg::fm_ce_se, fm_ce_se::CQ_UPDATE);
        ViewMut::<WqeRaddrSeg>::zeroed(raddr)
            .unwrap()
            .set(wqe_raddr_seg::raddr, 0x7f00_dead_b000u64)
            .set(wqe_raddr_seg::rkey, 0x0012_3442u32);
        ViewMut::<WqeDataSeg>::zeroed(data)
            .unwrap()
            .set(wqe_data_seg::byte_count, 4096u32)
            .set(wqe_data_seg::lkey, 0x0012_3442u32)
            .set(wqe_data_seg::addr, 0x1_0000_0000u64);
        pad.fill(0);
        assert_eq!(
            wqe,
            [
                0x00, 0x00, 0x07, 0x08, 0x00, 0x00, 0x42, 0x03, //
                0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, //
                0x00, 0x00, 0x7f, 0x00, 0xde, 0xad, 0xb0, 0x00, //
                0x00, 0x12, 0x34, 0x42, 0x00, 0x00, 0x00, 0x00, //
                0x00, 0x00, 0x10, 0x00, 0x00, 0x12, 0x34, 0x42, //
                0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, //
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
            ]
        );
        assert_eq!(ds_to_wqebbs(3), 1);
        assert_eq!(ds_to_wqebbs(5), 2);
    }

    #[test]
    fn golden_atomic_and_inline() {
        // 05 §4.3: swap_add BE64 at 0, compare BE64 at 8.
        let mut b = [0x11u8; 16];
        ViewMut::<WqeAtomicSeg>::zeroed(&mut b)
            .unwrap()
            .set(wqe_atomic_seg::swap_add, 0x0102_0304_0506_0708u64)
            .set(wqe_atomic_seg::compare, 0xffu64);
        assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0xff]);

        // 05 §4.5: byte_count = len | 0x80000000; DS = align(4 + len, 16) / 16.
        let mut b = [0x11u8; 4];
        ViewMut::<WqeInlineSeg>::zeroed(&mut b)
            .unwrap()
            .set(wqe_inline_seg::byte_count, inline_seg_byte_count(10));
        assert_eq!(b, [0x80, 0, 0, 10]);
        assert_eq!(inline_seg_ds(10), 1);
        assert_eq!(inline_seg_ds(12), 1);
        assert_eq!(inline_seg_ds(13), 2);
    }

    #[test]
    fn golden_srq_next_segment() {
        // rdma-core 56 mlx5dv.h `struct mlx5_wqe_srq_next_seg`: rsvd0[2], __be16
        // next_wqe_index, u8 signature, rsvd1[11]; 16 bytes.
        let mut b = [0xabu8; 16];
        ViewMut::<WqeSrqNextSeg>::zeroed(&mut b)
            .unwrap()
            .set(wqe_srq_next_seg::next_wqe_index, 0x1234u16)
            .set(wqe_srq_next_seg::signature, 0x5au8);
        assert_eq!(b, [0, 0, 0x12, 0x34, 0x5a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn golden_xrc_segment() {
        // rdma-core 56 providers/mlx5/wqe.h `struct mlx5_wqe_xrc_seg`: __be32 xrc_srqn,
        // u8 rsvd[12]; 16 bytes.
        let mut b = [0xabu8; 16];
        ViewMut::<WqeXrcSeg>::zeroed(&mut b)
            .unwrap()
            .set(wqe_xrc_seg::xrc_srqn, 0x0012_3456u32);
        assert_eq!(b, [0, 0x12, 0x34, 0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn golden_datagram_segment() {
        // 05 §4.6: qkey 0x00, dqp_dct 0x08, stat_rate_sl 0x0c, fl_mlid 0x0d, rlid 0x0e,
        // rmac 0x14, tclass 0x1a, hop_limit 0x1b, grh_gid_fl 0x1c, rgid 0x20; 48 bytes.
        let mut b = [0xabu8; 48];
        let mut v = ViewMut::<WqeDatagramSeg>::zeroed(&mut b).unwrap();
        v.set(wqe_datagram_seg::qkey, 0x1111_1111u32)
            .set(wqe_datagram_seg::dqp_dct, EXTENDED_UD_AV | 0x42)
            .set(wqe_datagram_seg::stat_rate_sl, 0x03u8)
            .set(wqe_datagram_seg::fl_mlid, 0x01u8)
            .set(wqe_datagram_seg::rlid, 0x0007u16)
            .set(wqe_datagram_seg::tclass, 0x20u8)
            .set(wqe_datagram_seg::hop_limit, 0xffu8)
            .set(
                wqe_datagram_seg::grh_gid_fl,
                av_grh_gid_fl(true, 3, 0x1_2345),
            );
        v.bytes_mut(wqe_datagram_seg::rmac)
            .copy_from_slice(&[0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
        v.bytes_mut(wqe_datagram_seg::rgid)
            .copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 1]);
        assert_eq!(
            b,
            [
                0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x00, //
                0x80, 0x00, 0x00, 0x42, 0x03, 0x01, 0x00, 0x07, //
                0x00, 0x00, 0x00, 0x00, 0x02, 0x11, 0x22, 0x33, //
                0x44, 0x55, 0x20, 0xff, 0x40, 0x31, 0x23, 0x45, //
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 1
            ]
        );
    }

    #[test]
    fn constants_match_the_reference() {
        // 05 §3, §6: WQEBB 64, DS 16, max 16 WQEBBs; dbrec: receive counter at +0, send at +4.
        assert_eq!(WqeCtrlSeg::BYTES, SEND_WQE_DS);
        assert_eq!(WqeDatagramSeg::BYTES, 48);
        assert_eq!(SEND_WQE_MAX_WQEBBS * SEND_WQE_BB, 1024);
        assert_eq!((qp_dbr::RCV, qp_dbr::SND), (0, 4));
        assert_eq!(fm_ce_se::FENCE_MODE_SMALL_AND_FENCE, 0x80);
    }
}
