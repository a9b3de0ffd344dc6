//! Memory keys: the mkey context `mkc`, CREATE/DESTROY/QUERY_MKEY, access modes and key
//! formation (mlx5-reference 06 §4).

use crate::layout::ViewMut;

crate::ifc! {
    /// Memory key context (PRM "MKey Context").
    pub struct Mkc => mkc: 0x200 bits {
        /// 1: create the key in the free state (to be filled by a later UMR).
        0x001 free: 1,
        /// Bits 4:2 of the access mode (see [`mkc_access_mode`], [`set_access_mode`]).
        0x003 access_mode_4_2: 3,
        0x00d relaxed_ordering_write: 1,
        0x00f small_fence_on_rdma_read_response: 1,
        /// Allow later UMR modification.
        0x010 umr_en: 1,
        /// Remote atomic.
        0x011 a: 1,
        /// Remote write.
        0x012 rw: 1,
        /// Remote read.
        0x013 rr: 1,
        /// Local write.
        0x014 lw: 1,
        /// Local read (Linux and rdma-core always set it).
        0x015 lr: 1,
        /// Bits 1:0 of the access mode.
        0x016 access_mode_1_0: 2,
        0x01a ma_translation_mode: 2,
        /// QP the key is bound to; 0xFFFFFF = none.
        0x020 qpn: 24,
        /// Low 8 bits ("variant") of the key, chosen by software.
        0x038 mkey_7_0: 8,
        /// 1: the key covers the whole 64-bit address space (`len` ignored).
        0x060 length64: 1,
        0x061 bsf_en: 1,
        0x062 sync_umr: 1,
        0x065 expected_sigerr_count: 1,
        0x067 en_rinval: 1,
        /// Protection domain.
        0x068 pd: 24,
        /// First (virtual / IO) address the key covers.
        0x080 start_addr: 64,
        /// Length in bytes.
        0x0c0 len: 64,
        0x100 bsf_octword_size: 32,
        0x180 crossing_target_vhca_id: 16,
        /// Size of the translation table in 16-byte octwords (MTT: (pages + 1) / 2).
        0x1a0 translations_octword_size: 32,
        0x1d9 relaxed_ordering_read: 1,
        /// log2 of the translation page size, **absolute** (12 for 4 KiB), unlike
        /// eqc/cqc/qpc where it is relative to 4 KiB.
        0x1da log_page_size: 6,
    }
    /// CREATE_MKEY input: context, then the translation table (MTT / KLM / PAS) from byte 0x110.
    pub struct CreateMkeyIn => create_mkey_in: 0x880 bits {
        0x000 opcode: 16,
        0x010 uid: 16,
        0x030 op_mod: 16,
        /// Set by rdma-core; meaning not documented in public sources.
        0x060 pg_access: 1,
        0x061 mkey_umem_valid: 1,
        0x062 data_direct: 1,
        0x080 memory_key_mkey_entry: Mkc,
        /// Same value as `mkc.translations_octword_size`.
        0x300 translations_octword_actual_size: 32,
        /// Translation entries. mlx5_ifc declares 32-bit units (`klm_pas_mtt[][0x20]`); they are
        /// addressed here as 64-bit big-endian words: one MTT entry each, or two per KLM entry
        /// (see [`klm_entry`]).
        0x880 klm_pas_mtt: [u64],
    }
    /// CREATE_MKEY output: the 24-bit key index; the key is [`idx_to_mkey`]`(index, mkey_7_0)`.
    pub struct CreateMkeyOut => create_mkey_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x48 mkey_index: 24,
    }
    /// DESTROY_MKEY input; `mkey_index` = key >> 8.
    pub struct DestroyMkeyIn => destroy_mkey_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 mkey_index: 24,
    }
    /// DESTROY_MKEY output.
    pub struct DestroyMkeyOut => destroy_mkey_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// QUERY_MKEY input; `mkey_index` = key >> 8.
    pub struct QueryMkeyIn => query_mkey_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x48 mkey_index: 24,
        0x60 pg_access: 1,
    }
    /// QUERY_MKEY output: the context and the first translation entries.
    pub struct QueryMkeyOut => query_mkey_out: 0x980 bits {
        0x000 status: 8,
        0x020 syndrome: 32,
        0x080 memory_key_mkey_entry: Mkc,
        0x880 bsf0_klm0_pas_mtt0_1: [u8; 16],
        0x900 bsf1_klm1_pas_mtt2_3: [u8; 16],
    }
}

/// Access modes, `access_mode_4_2 << 2 | access_mode_1_0` (`MLX5_MKC_ACCESS_MODE_*`).
pub mod mkc_access_mode {
    /// Physical addresses, no translation table.
    pub const PA: u8 = 0x0;
    /// Memory translation table: one 64-bit page address per page.
    pub const MTT: u8 = 0x1;
    /// Indirect list of (byte count, key, address) entries (`MLX5_MKC_ACCESS_MODE_KLMS`).
    pub const KLMS: u8 = 0x2;
    /// Fixed-size indirect entries.
    pub const KSM: u8 = 0x3;
    /// Software-owned ICM.
    pub const SW_ICM: u8 = 0x4;
    /// Device memory (MEMIC).
    pub const MEMIC: u8 = 0x5;
    /// Cross-function key.
    pub const CROSSING: u8 = 0x6;
}

/// Permission bits in the low bits of an MTT entry (`MLX5_MTT_PERM_*`; rdma-core
/// `MLX5_MTT_READ`/`MLX5_MTT_WRITE`).
pub mod mtt_perm {
    /// The page may be read.
    pub const READ: u64 = 1 << 0;
    /// The page may be written.
    pub const WRITE: u64 = 1 << 1;
    /// Read and write.
    pub const RW: u64 = READ | WRITE;
}

/// `qpn` value for a key that is not bound to a QP.
pub const MKC_QPN_NONE: u32 = 0xff_ffff;

/// Writes access mode `mode` (one of [`mkc_access_mode`]) into its two split fields.
pub fn set_access_mode(c: &mut ViewMut<'_, Mkc>, mode: u8) {
    c.set(mkc::access_mode_1_0, mode & 0x3)
        .set(mkc::access_mode_4_2, (mode >> 2) & 0x7);
}

/// The key used in WQEs (lkey = rkey) for key index `index` and variant `mkey_7_0`
/// (`mlx5_idx_to_mkey(index) | mkey_7_0`).
pub const fn idx_to_mkey(index: u32, mkey_7_0: u8) -> u32 {
    (index << 8) | mkey_7_0 as u32
}

/// The key index that DESTROY_MKEY / QUERY_MKEY take (`mlx5_mkey_to_idx`).
pub const fn mkey_to_idx(mkey: u32) -> u32 {
    mkey >> 8
}

/// `translations_octword_size` of an MTT table of `pages` entries (`get_octo_len`:
/// two 8-byte entries per 16-byte octword).
pub const fn mtt_octwords(pages: u32) -> u32 {
    pages.div_ceil(2)
}

/// One KLM entry (`struct mlx5_klm`: BE32 byte count, BE32 key, BE64 address) as the two
/// 64-bit words it occupies in `klm_pas_mtt`.
pub const fn klm_entry(byte_count: u32, mkey: u32, va: u64) -> [u64; 2] {
    [((byte_count as u64) << 32) | mkey as u64, va]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, View};

    #[test]
    fn golden_create_mkey_mtt() {
        // 06 §4 / §4.1: mkc at byte 0x10; access bits a/rw/rr/lw/lr at mkc DW0 [14:10],
        // access_mode_1_0 [9:8]; qpn DW1 [31:8], mkey_7_0 [7:0]; pd DW3 [23:0];
        // start_addr mkc 0x10, len mkc 0x18; translations_octword_size mkc 0x34;
        // log_page_size mkc byte 0x3b [5:0]; translations_octword_actual_size at 0x60;
        // klm_pas_mtt[] at 0x110.
        let mut b = [0xa5u8; 0x120];
        let mut v = ViewMut::<CreateMkeyIn>::zeroed(&mut b).unwrap();
        v.set(create_mkey_in::opcode, 0x200u16).set(
            create_mkey_in::translations_octword_actual_size,
            mtt_octwords(2),
        );
        {
            let mut c = v.sub(create_mkey_in::memory_key_mkey_entry);
            c.set(mkc::a, 1u8)
                .set(mkc::rw, 1u8)
                .set(mkc::rr, 1u8)
                .set(mkc::lw, 1u8)
                .set(mkc::lr, 1u8)
                .set(mkc::qpn, MKC_QPN_NONE)
                .set(mkc::mkey_7_0, 0x42u8)
                .set(mkc::pd, 0x123u32)
                .set(mkc::start_addr, 0x7f00_1234_5000u64)
                .set(mkc::len, 0x2000u64)
                .set(mkc::translations_octword_size, mtt_octwords(2))
                .set(mkc::log_page_size, 12u8);
            set_access_mode(&mut c, mkc_access_mode::MTT);
        }
        v.set_array(create_mkey_in::klm_pas_mtt, 0, 0x1_0000_0000 | mtt_perm::RW)
            .unwrap();
        v.set_array(create_mkey_in::klm_pas_mtt, 1, 0x1_0000_1000 | mtt_perm::RW)
            .unwrap();

        let mut want = [0u8; 0x120];
        want[0..2].copy_from_slice(&[0x02, 0x00]);
        want[0x10..0x14].copy_from_slice(&[0x00, 0x00, 0x7d, 0x00]);
        want[0x14..0x18].copy_from_slice(&[0xff, 0xff, 0xff, 0x42]);
        want[0x1c..0x20].copy_from_slice(&[0x00, 0x00, 0x01, 0x23]);
        want[0x20..0x28].copy_from_slice(&[0, 0, 0x7f, 0x00, 0x12, 0x34, 0x50, 0x00]);
        want[0x28..0x30].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0x20, 0x00]);
        want[0x44..0x48].copy_from_slice(&[0, 0, 0, 1]);
        want[0x4b] = 0x0c;
        want[0x60..0x64].copy_from_slice(&[0, 0, 0, 1]);
        want[0x110..0x118].copy_from_slice(&[0, 0, 0, 1, 0, 0, 0, 3]);
        want[0x118..0x120].copy_from_slice(&[0, 0, 0, 1, 0, 0, 0x10, 3]);
        assert_eq!(b, want);
    }

    #[test]
    fn golden_create_mkey_pa_length64() {
        // 06 §4.1 (Linux mlx5e_create_mkey): PA mode, lw = lr = 1, length64 = 1 (mkc DW3 [31]),
        // qpn 0xFFFFFF, pd.
        let mut b = [0x5au8; 0x110];
        let mut v = ViewMut::<CreateMkeyIn>::zeroed(&mut b).unwrap();
        v.set(create_mkey_in::opcode, 0x200u16);
        let mut c = v.sub(create_mkey_in::memory_key_mkey_entry);
        c.set(mkc::lw, 1u8)
            .set(mkc::lr, 1u8)
            .set(mkc::length64, 1u8)
            .set(mkc::qpn, MKC_QPN_NONE)
            .set(mkc::pd, 7u32);
        set_access_mode(&mut c, mkc_access_mode::PA);
        assert_eq!(v.array_len(create_mkey_in::klm_pas_mtt), 0);
        let mut want = [0u8; 0x110];
        want[0..2].copy_from_slice(&[0x02, 0x00]);
        want[0x10..0x14].copy_from_slice(&[0, 0, 0x0c, 0x00]);
        want[0x14..0x18].copy_from_slice(&[0xff, 0xff, 0xff, 0x00]);
        want[0x1c..0x20].copy_from_slice(&[0x80, 0, 0, 7]);
        assert_eq!(b, want);
    }

    #[test]
    fn access_mode_split_and_key_formation() {
        // access_mode_4_2 at mkc DW0 [28:26], access_mode_1_0 at [9:8] (06 §4.1).
        let mut b = [0u8; 64];
        set_access_mode(
            &mut ViewMut::<Mkc>::zeroed(&mut b).unwrap(),
            mkc_access_mode::SW_ICM,
        );
        assert_eq!(b[..4], [0x04, 0, 0, 0]);
        set_access_mode(
            &mut ViewMut::<Mkc>::new_checked(&mut b).unwrap(),
            mkc_access_mode::KLMS,
        );
        assert_eq!(b[..4], [0, 0, 0x02, 0]);

        // 06 §4.2: key = mkey_index << 8 | mkey_7_0; DESTROY takes key >> 8.
        assert_eq!(idx_to_mkey(0x1234, 0x42), 0x0012_3442);
        assert_eq!(mkey_to_idx(0x0012_3442), 0x1234);
        assert_eq!(mtt_octwords(1), 1);
        assert_eq!(mtt_octwords(3), 2);
        assert_eq!(
            klm_entry(0x100, 0x0012_3442, 0x8000),
            [0x100_0012_3442, 0x8000]
        );

        // create_mkey_out.mkey_index at byte 0x09 [23:0].
        let out = [0, 0, 0, 0, 0, 0, 0, 0, 0xee, 0, 0x12, 0x34, 0, 0, 0, 0];
        let o = View::<CreateMkeyOut>::new_checked(&out).unwrap();
        assert_eq!(o.get(create_mkey_out::mkey_index), 0x1234);

        // 06 §4: create_mkey_in 272 bytes, the rest 16; query_mkey_out as in mlx5_ifc (304).
        assert_eq!(CreateMkeyIn::BYTES, 272);
        assert_eq!(CreateMkeyOut::BYTES, 16);
        assert_eq!(DestroyMkeyIn::BYTES, 16);
        assert_eq!(DestroyMkeyOut::BYTES, 16);
        assert_eq!(QueryMkeyIn::BYTES, 16);
        assert_eq!(QueryMkeyOut::BYTES, 304);
        assert_eq!(Mkc::BYTES, 64);
    }
}
