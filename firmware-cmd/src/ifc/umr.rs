//! The UMR work request (send opcode `MLX5_OPCODE_UMR`): its UMR control segment, the mkey
//! segment, and the translation it carries — MTT or KLM entries, or a repeat block and its
//! entries (mlx5-reference 05 §4–§5, 06 §4; Linux qp.h `struct mlx5_wqe_umr_ctrl_seg`,
//! `struct mlx5_klm`, `struct mlx5_stride_block_*`, device.h `struct mlx5_mkey_seg`,
//! `MLX5_MKEY_MASK_*`, `MLX5_UMR_*`, mlx5_ifc `klm`, `mtt`; rdma-core 56 mlx5dv.h
//! `struct mlx5_wqe_umr_*`).
//!
//! A UMR WQE is, in this order: the control segment ([`WqeCtrlSeg`], the target key in `imm`),
//! the UMR control segment ([`WqeUmrCtrlSeg`]), the mkey segment, then the translation — the
//! entries themselves with [`umr_flags::INLINE`], else a [`WqeDataSeg`](crate::ifc::WqeDataSeg)
//! pointing at them in memory. [`UmrWqe`] declares the three fixed parts; the translation
//! starts at its end, [`UmrWqe::BYTES`](crate::layout::Layout::BYTES).
//!
//! The mkey segment is the mkey context [`Mkc`]: Linux declares `struct mlx5_mkey_seg` but
//! writes it with `MLX5_SET(mkc, seg, …)` (mlx5_ib `umr.c`, `wr.c`), and rdma-core's
//! `struct mlx5_wqe_mkey_context_seg` has the same bytes (golden test below).

use crate::ifc::{Mkc, WqeCtrlSeg};
use crate::layout::{View, ViewMut};

crate::ifc! {
    /// UMR control segment, after the control segment of a UMR WQE (Linux qp.h
    /// `struct mlx5_wqe_umr_ctrl_seg`, rdma-core mlx5dv.h likewise; 48 bytes).
    pub struct WqeUmrCtrlSeg => wqe_umr_ctrl_seg: 0x180 bits {
        /// See [`umr_flags`].
        0x000 flags: 8,
        /// Translation entries carried, in 16-byte octowords (rdma-core `klm_octowords`).
        0x020 xlt_octowords: 16,
        /// Where in the mkey's table the entries go, in octowords, bits 15:0 (with
        /// [`umr_flags::TRANSLATION_OFFSET_EN`]; rdma-core `translation_offset`, in a union
        /// with `bsf_octowords`).
        0x030 xlt_offset: 16,
        /// Which mkey-segment fields to apply, see [`mkey_mask`](mod@mkey_mask).
        0x040 mkey_mask: 64,
        /// Bits 47:16 of the translation offset (`umr_extended_translation_offset`).
        0x080 xlt_offset_47_16: 32,
    }
    /// The fixed part of a UMR WQE: control segment, UMR control segment, mkey segment, one
    /// after the other (Linux mlx5_ib umr.h `struct mlx5r_umr_wqe` is the last two and the
    /// data segment; rdma-core qp.c `mlx5_send_wr_mkey_configure` places the same). Not a PRM
    /// structure: the WQE's translation follows it.
    pub struct UmrWqe => umr_wqe: 0x400 bits {
        /// The control segment: opcode [`UMR`](crate::ifc::wqe_opcode::UMR), the key in `imm`.
        0x000 ctrl_seg: WqeCtrlSeg,
        /// The UMR control segment.
        0x080 umr_ctrl_seg: WqeUmrCtrlSeg,
        /// The mkey segment (`struct mlx5_mkey_seg`, written as `mkc`).
        0x200 mkey_seg: Mkc,
    }
    /// A KLM entry: `byte_count` bytes at `address` through key `mkey` (mlx5_ifc `klm`; Linux
    /// qp.h `struct mlx5_klm`; rdma-core mlx5dv.h `struct mlx5_wqe_umr_klm_seg`, which qp.c
    /// `umr_sg_list_create` writes as a `struct mlx5_wqe_data_seg`, the same bytes).
    pub struct Klm => klm: 0x80 bits {
        /// Bytes (up to 2 GiB, `MLX5_MAX_KLM_BYTE_COUNT`).
        0x00 byte_count: 32,
        /// Key the bytes are reached through.
        0x20 mkey: 32,
        /// Address in that key.
        0x40 address: 64,
    }
    /// An MTT entry: one page's address and its present bits (mlx5_ifc `mtt`; Linux qp.h
    /// `struct mlx5_mtt` holds it as one `__be64 ptag`, mlx5_ib writing
    /// `address | MLX5_IB_MTT_PRESENT`). See [`mtt_ptag`] and [`set_mtt_ptag`].
    pub struct Mtt => mtt: 0x40 bits {
        /// Bits 63:32 of the page address.
        0x00 ptag_63_32: 32,
        /// Bits 31:8 of the page address.
        0x20 ptag_31_8: 24,
        /// The page may be written ([`mtt_perm::WRITE`](crate::ifc::mtt_perm::WRITE)).
        0x3e wr_en: 1,
        /// The page may be read ([`mtt_perm::READ`](crate::ifc::mtt_perm::READ)).
        0x3f rd_en: 1,
    }
    /// Header of a repeat block, the interleaved layout of an indirect key: `repeat_count`
    /// rounds over `num_ent` [`WqeUmrRepeatEntSeg`] that follow it (rdma-core mlx5dv.h
    /// `struct mlx5_wqe_umr_repeat_block_seg`; Linux qp.h `struct mlx5_stride_block_ctrl_seg`
    /// names them `bcount_per_cycle`, `op`, `repeat_count`, `num_entries`).
    pub struct WqeUmrRepeatBlockSeg => wqe_umr_repeat_block_seg: 0x80 bits {
        /// Bytes one round takes: the sum of the entries' `byte_count`.
        0x00 byte_count: 32,
        /// [`UMR_REPEAT_BLOCK_OP`].
        0x20 op: 32,
        /// Rounds.
        0x40 repeat_count: 32,
        /// Entries after this header.
        0x70 num_ent: 16,
    }
    /// An entry of a repeat block: each round takes `byte_count` bytes at `va` through key
    /// `memkey`, `va` moving by `stride` a round (rdma-core mlx5dv.h
    /// `struct mlx5_wqe_umr_repeat_ent_seg`; Linux qp.h `struct mlx5_stride_block_entry`).
    pub struct WqeUmrRepeatEntSeg => wqe_umr_repeat_ent_seg: 0x80 bits {
        /// How far `va` moves each round (rdma-core: bytes taken plus bytes skipped).
        0x00 stride: 16,
        /// Bytes taken per round.
        0x10 byte_count: 16,
        /// Key the bytes are reached through.
        0x20 memkey: 32,
        /// Address of the first round's bytes.
        0x40 va: 64,
    }
}

/// `wqe_umr_ctrl_seg.flags` (device.h `MLX5_UMR_*`).
pub mod umr_flags {
    /// `xlt_offset` / `xlt_offset_47_16` say where the entries go.
    pub const TRANSLATION_OFFSET_EN: u8 = 1 << 4;
    /// Fail if the mkey is not free (mlx5_ib umr.c: "fail if not free").
    pub const CHECK_NOT_FREE: u8 = 1 << 5;
    /// Fail if the mkey is free (umr.c: "fail if free").
    pub const CHECK_FREE: u8 = 2 << 5;
    /// The WQE carries no data segment (the translation, if any, is inline).
    pub const INLINE: u8 = 1 << 7;
}

/// `wqe_umr_ctrl_seg.mkey_mask` bits: the mkey-segment fields a UMR applies (device.h
/// `MLX5_MKEY_MASK_*`).
pub mod mkey_mask {
    /// `len` (and `length64`).
    pub const LEN: u64 = 1 << 0;
    /// `log_page_size`.
    pub const PAGE_SIZE: u64 = 1 << 1;
    /// `start_addr`.
    pub const START_ADDR: u64 = 1 << 6;
    /// `pd`.
    pub const PD: u64 = 1 << 7;
    /// `en_rinval`.
    pub const EN_RINVAL: u64 = 1 << 8;
    /// Signature error enable.
    pub const EN_SIGERR: u64 = 1 << 9;
    /// `bsf_en`.
    pub const BSF_EN: u64 = 1 << 12;
    /// `mkey_7_0`, the key's variant.
    pub const KEY: u64 = 1 << 13;
    /// `qpn`.
    pub const QPN: u64 = 1 << 14;
    /// Local read.
    pub const LR: u64 = 1 << 17;
    /// Local write.
    pub const LW: u64 = 1 << 18;
    /// Remote read.
    pub const RR: u64 = 1 << 19;
    /// Remote write.
    pub const RW: u64 = 1 << 20;
    /// Remote atomic.
    pub const A: u64 = 1 << 21;
    /// Small fence.
    pub const SMALL_FENCE: u64 = 1 << 23;
    /// `relaxed_ordering_write`.
    pub const RELAXED_ORDERING_WRITE: u64 = 1 << 25;
    /// `free`.
    pub const FREE: u64 = 1 << 29;
    /// `relaxed_ordering_read`.
    pub const RELAXED_ORDERING_READ: u64 = 1 << 47;
}

/// Bytes in a UMR translation octoword (`MLX5_IB_UMR_OCTOWORD`): two MTT entries, or one KLM
/// or repeat-block entry.
pub const UMR_OCTOWORD: usize = 16;

/// A UMR's translation is carried in whole units of this many bytes, zeros after the last
/// entry (device.h `MLX5_UMR_MTT_ALIGNMENT`; rdma-core pads a KLM list or repeat block to it,
/// qp.c `umr_sg_list_create`, `umr_strided_seg_create`).
pub const UMR_MTT_ALIGNMENT: usize = 0x40;

/// `wqe_umr_repeat_block_seg.op` of a repeat block (qp.h `MLX5_STRIDE_BLOCK_OP`; rdma-core
/// qp.c `umr_strided_seg_create`).
pub const UMR_REPEAT_BLOCK_OP: u32 = 0x400;

/// The page address an MTT entry holds: `ptag_63_32` and `ptag_31_8`, bits 7:0 zero.
pub fn mtt_ptag(m: &View<'_, Mtt>) -> u64 {
    (m.get(mtt::ptag_63_32) << 32) | (m.get(mtt::ptag_31_8) << 8)
}

/// Writes page address `ptag` into an MTT entry; its bits 7:0 (not part of `ptag`) are
/// dropped.
pub fn set_mtt_ptag(m: &mut ViewMut<'_, Mtt>, ptag: u64) {
    m.set(mtt::ptag_63_32, ptag >> 32)
        .set(mtt::ptag_31_8, ptag >> 8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ifc::{mkc, mtt_perm, wqe_ctrl_seg, wqe_opcode, MKC_QPN_NONE};
    use crate::layout::{Layout, View, ViewMut};

    #[test]
    fn golden_umr_control_segment() {
        // qp.h struct mlx5_wqe_umr_ctrl_seg: flags u8 at 0, xlt_octowords BE16 at 4,
        // xlt_offset BE16 at 6, mkey_mask BE64 at 8, xlt_offset_47_16 BE32 at 16; 48 bytes.
        // Values as Linux 6.12 umr.c builds the last chunk of an MTT load that enables a key:
        // CHECK_NOT_FREE | TRANSLATION_OFFSET_EN, mask LEN|PAGE_SIZE|START_ADDR|PD|KEY|
        // LR|LW|RR|RW|A|FREE.
        let mut b = [0x77u8; 48];
        let mask = mkey_mask::LEN
            | mkey_mask::PAGE_SIZE
            | mkey_mask::START_ADDR
            | mkey_mask::PD
            | mkey_mask::KEY
            | mkey_mask::LR
            | mkey_mask::LW
            | mkey_mask::RR
            | mkey_mask::RW
            | mkey_mask::A
            | mkey_mask::FREE;
        ViewMut::<WqeUmrCtrlSeg>::zeroed(&mut b)
            .unwrap()
            .set(
                wqe_umr_ctrl_seg::flags,
                umr_flags::CHECK_NOT_FREE | umr_flags::TRANSLATION_OFFSET_EN,
            )
            .set(wqe_umr_ctrl_seg::xlt_octowords, 4u16)
            .set(wqe_umr_ctrl_seg::xlt_offset, 0x1234u16)
            .set(wqe_umr_ctrl_seg::mkey_mask, mask)
            .set(wqe_umr_ctrl_seg::xlt_offset_47_16, 0xabu32);
        let mut want = [0u8; 48];
        want[0] = 0x30;
        want[4..8].copy_from_slice(&[0, 4, 0x12, 0x34]);
        want[8..16].copy_from_slice(&[0, 0, 0, 0, 0x20, 0x3e, 0x20, 0xc3]);
        want[16..20].copy_from_slice(&[0, 0, 0, 0xab]);
        assert_eq!(b, want);
        assert_eq!(WqeUmrCtrlSeg::BYTES, 48);
        // device.h: INLINE 1 << 7, CHECK_FREE 2 << 5, RELAXED_ORDERING_READ 1 << 47.
        assert_eq!(umr_flags::INLINE | umr_flags::CHECK_FREE, 0xc0);
        assert_eq!(mkey_mask::RELAXED_ORDERING_READ, 0x8000_0000_0000);
    }

    #[test]
    fn golden_mkey_segment_is_mlx5_mkey_seg() {
        // device.h struct mlx5_mkey_seg: status u8 at 0 (MLX5_MKEY_STATUS_FREE 1 << 6), flags
        // u8 at 2 (MLX5_PERM_* : atomic 1 << 6, remote write 1 << 5, remote read 1 << 4, local
        // write 1 << 3, local read 1 << 2; access mode 1:0), qpn_mkey7_0 BE32 at 4, flags_pd
        // BE32 at 12 (MLX5_MKEY_LEN64 1 << 31, pd 23:0), start_addr BE64 at 16, len BE64 at
        // 24, xlt_oct_size BE32 at 52, log2_page_size u8 at 59; 64 bytes. rdma-core's
        // mlx5_wqe_mkey_context_seg: free u8 at 0 (1 << 6), access_flags u8 at 2, same rest.
        let mut b = [0x5au8; 64];
        ViewMut::<Mkc>::zeroed(&mut b)
            .unwrap()
            .set(mkc::free, 1u8)
            .set(mkc::a, 1u8)
            .set(mkc::rw, 1u8)
            .set(mkc::rr, 1u8)
            .set(mkc::lw, 1u8)
            .set(mkc::lr, 1u8)
            .set(mkc::qpn, MKC_QPN_NONE)
            .set(mkc::mkey_7_0, 0x42u8)
            .set(mkc::length64, 1u8)
            .set(mkc::pd, 0x12_3456u32)
            .set(mkc::start_addr, 0x0102_0304_0506_0708u64)
            .set(mkc::len, 0x1_0000u64)
            .set(mkc::translations_octword_size, 8u32)
            .set(mkc::log_page_size, 12u8);
        let mut want = [0u8; 64];
        want[0] = 1 << 6;
        want[2] = (1 << 6) | (1 << 5) | (1 << 4) | (1 << 3) | (1 << 2);
        want[4..8].copy_from_slice(&[0xff, 0xff, 0xff, 0x42]);
        want[12..16].copy_from_slice(&[0x80, 0x12, 0x34, 0x56]);
        want[16..24].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        want[24..32].copy_from_slice(&[0, 0, 0, 0, 0, 1, 0, 0]);
        want[52..56].copy_from_slice(&[0, 0, 0, 8]);
        want[59] = 12;
        assert_eq!(b, want);
    }

    #[test]
    fn golden_umr_wqe_head() {
        // The segments back to back: control 0..16, UMR control 16..64, mkey 64..128; the
        // translation from 128 (rdma-core mlx5_send_wr_mkey_configure: cur_size 1 + 3 + 4).
        assert_eq!(UmrWqe::BYTES, 128);
        assert_eq!(umr_wqe::ctrl_seg.bit, 0);
        assert_eq!(umr_wqe::umr_ctrl_seg.bit / 8, WqeCtrlSeg::BYTES);
        assert_eq!(
            umr_wqe::mkey_seg.bit / 8,
            WqeCtrlSeg::BYTES + WqeUmrCtrlSeg::BYTES
        );
        let mut b = [0xeeu8; 128];
        {
            let mut v = ViewMut::<UmrWqe>::zeroed(&mut b).unwrap();
            v.sub(umr_wqe::ctrl_seg)
                .set(wqe_ctrl_seg::opcode, wqe_opcode::UMR)
                .set(wqe_ctrl_seg::imm, 0x0012_3442u32);
            v.sub(umr_wqe::umr_ctrl_seg)
                .set(wqe_umr_ctrl_seg::flags, umr_flags::INLINE)
                .set(wqe_umr_ctrl_seg::mkey_mask, mkey_mask::FREE);
            v.sub(umr_wqe::mkey_seg).set(mkc::mkey_7_0, 0x42u8);
        }
        let mut want = [0u8; 128];
        want[3] = 0x25;
        want[12..16].copy_from_slice(&[0, 0x12, 0x34, 0x42]);
        want[16] = 0x80;
        want[28..32].copy_from_slice(&[0x20, 0, 0, 0]);
        want[64 + 7] = 0x42;
        assert_eq!(b, want);
    }

    #[test]
    fn golden_klm_entry() {
        // mlx5_ifc klm / qp.h struct mlx5_klm: byte_count BE32 at 0, mkey BE32 at 4, address
        // BE64 at 8; 16 bytes.
        let mut b = [0x33u8; 16];
        ViewMut::<Klm>::zeroed(&mut b)
            .unwrap()
            .set(klm::byte_count, 0x100u32)
            .set(klm::mkey, 0x0012_3442u32)
            .set(klm::address, 0x7f00_dead_b000u64);
        assert_eq!(
            b,
            [0, 0, 1, 0, 0, 0x12, 0x34, 0x42, 0, 0, 0x7f, 0, 0xde, 0xad, 0xb0, 0]
        );
        assert_eq!(Klm::BYTES, UMR_OCTOWORD);
    }

    #[test]
    fn golden_mtt_entry() {
        // mlx5_ifc mtt: ptag_63_32 at 0, ptag_31_8 bits 31:8 of dword 1, wr_en bit 1, rd_en
        // bit 0 — the BE64 `address | MLX5_IB_MTT_PRESENT` (read 1 << 0, write 1 << 1) that
        // mlx5_ib writes as struct mlx5_mtt.
        let mut b = [0x99u8; 8];
        {
            let mut m = ViewMut::<Mtt>::zeroed(&mut b).unwrap();
            set_mtt_ptag(&mut m, 0x1_2345_6789_a000);
            m.set(mtt::wr_en, 1u8).set(mtt::rd_en, 1u8);
        }
        assert_eq!(
            u64::from_be_bytes(b),
            0x1_2345_6789_a000 | mtt_perm::RW,
            "struct mlx5_mtt's ptag"
        );
        let m = View::<Mtt>::new_checked(&b).unwrap();
        assert_eq!(mtt_ptag(&m), 0x1_2345_6789_a000);
        // Bits 7:0 are not address: dropped on write, zero on read.
        let mut b = [0u8; 8];
        set_mtt_ptag(&mut ViewMut::<Mtt>::zeroed(&mut b).unwrap(), 0x5000 | 0xff);
        assert_eq!(b, [0, 0, 0, 0, 0, 0, 0x50, 0]);
        assert_eq!(Mtt::BYTES * 2, UMR_OCTOWORD);
    }

    #[test]
    fn golden_repeat_block() {
        // rdma-core mlx5dv.h struct mlx5_wqe_umr_repeat_block_seg: byte_count BE32 at 0, op
        // BE32 at 4, repeat_count BE32 at 8, reserved BE16 at 12, num_ent BE16 at 14; struct
        // mlx5_wqe_umr_repeat_ent_seg: stride BE16 at 0, byte_count BE16 at 2, memkey BE32 at
        // 4, va BE64 at 8. umr_strided_seg_create writes op 0x400.
        let mut b = [0xc5u8; 16];
        ViewMut::<WqeUmrRepeatBlockSeg>::zeroed(&mut b)
            .unwrap()
            .set(wqe_umr_repeat_block_seg::byte_count, 0x30u32)
            .set(wqe_umr_repeat_block_seg::op, UMR_REPEAT_BLOCK_OP)
            .set(wqe_umr_repeat_block_seg::repeat_count, 0x0102_0304u32)
            .set(wqe_umr_repeat_block_seg::num_ent, 2u16);
        assert_eq!(b, [0, 0, 0, 0x30, 0, 0, 4, 0, 1, 2, 3, 4, 0, 0, 0, 2]);
        let mut b = [0xc5u8; 16];
        ViewMut::<WqeUmrRepeatEntSeg>::zeroed(&mut b)
            .unwrap()
            .set(wqe_umr_repeat_ent_seg::stride, 0x1234u16)
            .set(wqe_umr_repeat_ent_seg::byte_count, 0x10u16)
            .set(wqe_umr_repeat_ent_seg::memkey, 0x0012_3442u32)
            .set(wqe_umr_repeat_ent_seg::va, 0x8000u64);
        assert_eq!(
            b,
            [0x12, 0x34, 0, 0x10, 0, 0x12, 0x34, 0x42, 0, 0, 0, 0, 0, 0, 0x80, 0]
        );
        assert_eq!(WqeUmrRepeatBlockSeg::BYTES, UMR_OCTOWORD);
        assert_eq!(WqeUmrRepeatEntSeg::BYTES, UMR_OCTOWORD);
        assert_eq!(UMR_MTT_ALIGNMENT, 4 * UMR_OCTOWORD);
    }
}
