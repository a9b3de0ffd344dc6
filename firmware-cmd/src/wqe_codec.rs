//! The data-path codec: send WQE segments and CQEs as the big-endian 64-bit words a poster
//! stores and a device (or the model) loads, every field placed by its `ifc!` layout
//! ([`crate::ifc::wqe`], [`crate::ifc::cqe`]).
//!
//! A [`Word`] is a field seen inside the 64-bit word that holds it: the word's byte offset in
//! its segment and the field's shift. The driver builds each word from its fields and stores
//! it at that offset; the model loads the word and takes the fields out again. All of it is
//! constant (the shifts and offsets are evaluated at compile time), so a store through the
//! codec is the same instruction as a hand-written one — and no one writes a shift by hand.
//!
//! A word is big-endian in memory: its most significant byte is the segment's byte
//! `byte()`, which is how [`Slot::write64`](bareverbs_hal::Slot) and the model's `be64` read
//! and write them.

use crate::ifc::{
    cqe64, err_cqe, wqe_atomic_seg, wqe_ctrl_seg, wqe_data_seg, wqe_datagram_seg, wqe_eth_seg,
    wqe_inline_seg, wqe_raddr_seg, wqe_xrc_seg,
};
use crate::layout::Field;

/// A field of a segment inside the big-endian 64-bit word that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Word {
    byte: usize,
    shift: u32,
    mask: u64,
}

impl Word {
    /// Where layout field `f` sits; a compile error if it crosses a 64-bit boundary.
    pub const fn of<L>(f: Field<L>) -> Word {
        let first = f.bit / 64;
        let end = f.bit + f.width;
        assert!(end <= (first + 1) * 64, "field crosses a 64-bit word");
        Word {
            byte: first * 8,
            shift: ((first + 1) * 64 - end) as u32,
            mask: f.max(),
        }
    }

    /// A field of `width` bits at MSB-first bit `bit` that the layout declares as bytes (the
    /// Ethernet segment's first inline header bytes); a compile error if it crosses a word.
    pub const fn at(bit: usize, width: usize) -> Word {
        let first = bit / 64;
        assert!(
            bit + width <= (first + 1) * 64,
            "field crosses a 64-bit word"
        );
        Word {
            byte: first * 8,
            shift: ((first + 1) * 64 - bit - width) as u32,
            mask: if width >= 64 {
                u64::MAX
            } else {
                (1 << width) - 1
            },
        }
    }

    /// Byte offset, in its segment, of the word holding the field.
    #[inline(always)]
    pub const fn byte(self) -> usize {
        self.byte
    }

    /// `v` in the field's place. `v` must fit the field (the callers' types see to it: a `u16`
    /// index into a 16-bit field); [`Word::put_masked`] cuts it to size.
    #[inline(always)]
    pub const fn put(self, v: u64) -> u64 {
        v << self.shift
    }

    /// `v` cut to the field's width, in its place.
    #[inline(always)]
    pub const fn put_masked(self, v: u64) -> u64 {
        (v & self.mask) << self.shift
    }

    /// The field's value in word `w`.
    #[inline(always)]
    pub const fn get(self, w: u64) -> u64 {
        (w >> self.shift) & self.mask
    }
}

/// The control segment (`mlx5_wqe_ctrl_seg`): word 0 holds index, opcode, QPN and size;
/// word 1 the stream, `fm_ce_se` and the immediate.
pub mod ctrl {
    use super::*;
    /// Opcode modifier.
    pub const OPMOD: Word = Word::of(wqe_ctrl_seg::opmod);
    /// WQEBB index of the WQE (16 bits).
    pub const WQE_INDEX: Word = Word::of(wqe_ctrl_seg::wqe_index);
    /// Send opcode ([`wqe_opcode`](crate::ifc::wqe_opcode)).
    pub const OPCODE: Word = Word::of(wqe_ctrl_seg::opcode);
    /// QP number.
    pub const QPN: Word = Word::of(wqe_ctrl_seg::qpn);
    /// WQE size in 16-byte units.
    pub const DS: Word = Word::of(wqe_ctrl_seg::ds);
    /// DCI stream.
    pub const STREAM: Word = Word::of(wqe_ctrl_seg::dci_stream_channel_id);
    /// Fence mode, completion and solicited flags ([`fm_ce_se`](crate::ifc::fm_ce_se)).
    pub const FM_CE_SE: Word = Word::of(wqe_ctrl_seg::fm_ce_se);
    /// Immediate data (or invalidated key).
    pub const IMM: Word = Word::of(wqe_ctrl_seg::imm);

    /// Word 0 without its QPN (the poster keeps `QPN.put(qpn)` per QP).
    #[inline(always)]
    pub const fn word0(wqe_index: u16, opcode: u8, ds: u8) -> u64 {
        WQE_INDEX.put(wqe_index as u64) | OPCODE.put(opcode as u64) | DS.put(ds as u64)
    }

    /// Word 1.
    #[inline(always)]
    pub const fn word1(stream: u16, fm_ce_se: u8, imm: u32) -> u64 {
        STREAM.put(stream as u64) | FM_CE_SE.put(fm_ce_se as u64) | IMM.put(imm as u64)
    }
}

/// The remote address segment (`mlx5_wqe_raddr_seg`).
pub mod raddr {
    use super::*;
    /// Remote virtual address: all of word 0.
    pub const RADDR: Word = Word::of(wqe_raddr_seg::raddr);
    /// Remote key.
    pub const RKEY: Word = Word::of(wqe_raddr_seg::rkey);
}

/// The atomic segment (`mlx5_wqe_atomic_seg`).
pub mod atomic {
    use super::*;
    /// Swap or add operand: word 0.
    pub const SWAP_ADD: Word = Word::of(wqe_atomic_seg::swap_add);
    /// Compare operand: word 1.
    pub const COMPARE: Word = Word::of(wqe_atomic_seg::compare);
}

/// A data segment (`mlx5_wqe_data_seg`).
pub mod data {
    use super::*;
    /// Length in bytes (bit 31 would mean inline data: [`INLINE_SEG`](crate::ifc::INLINE_SEG)).
    pub const BYTE_COUNT: Word = Word::of(wqe_data_seg::byte_count);
    /// Local key.
    pub const LKEY: Word = Word::of(wqe_data_seg::lkey);
    /// Address: word 1.
    pub const ADDR: Word = Word::of(wqe_data_seg::addr);

    /// Word 0.
    #[inline(always)]
    pub const fn word0(byte_count: u32, lkey: u32) -> u64 {
        BYTE_COUNT.put(byte_count as u64) | LKEY.put(lkey as u64)
    }
}

/// The Ethernet segment (`mlx5_wqe_eth_seg`).
pub mod eth {
    use super::*;
    /// Checksum offload flags ([`eth_cs_flags`](crate::ifc::eth_cs_flags)).
    pub const CS_FLAGS: Word = Word::of(wqe_eth_seg::cs_flags);
    /// LSO segment size.
    pub const MSS: Word = Word::of(wqe_eth_seg::mss);
    /// Inline header bytes, or [`ETH_WQE_INSERT_VLAN`](crate::ifc::ETH_WQE_INSERT_VLAN) (the
    /// `insert.type` of the same union).
    pub const INLINE_HDR_SZ: Word = Word::of(wqe_eth_seg::inline_hdr_sz);
    /// The first two inline header bytes, or the TCI to insert (`insert.vlan_tci`).
    pub const INLINE_HDR_START: Word = Word::at(wqe_eth_seg::inline_hdr_start.bit, 16);
}

/// The inline data header (`mlx5_wqe_inline_seg`), the first 4 bytes of its word.
pub mod inline {
    use super::*;
    /// Length | [`INLINE_SEG`](crate::ifc::INLINE_SEG).
    pub const BYTE_COUNT: Word = Word::of(wqe_inline_seg::byte_count);
}

/// The XRC segment (`mlx5_wqe_xrc_seg`).
pub mod xrc {
    use super::*;
    /// The remote XRC SRQ.
    pub const XRC_SRQN: Word = Word::of(wqe_xrc_seg::xrc_srqn);
}

/// The datagram segment / address vector (`mlx5_wqe_datagram_seg`, `mlx5_av`).
pub mod datagram {
    use super::*;
    /// Q_Key (UD); a DCI's 8-byte access key fills all of word 0 instead.
    pub const QKEY: Word = Word::of(wqe_datagram_seg::qkey);
    /// Destination QPN or DCT number, with [`EXTENDED_UD_AV`](crate::ifc::EXTENDED_UD_AV).
    pub const DQP_DCT: Word = Word::of(wqe_datagram_seg::dqp_dct);
    /// Static rate and SL.
    pub const STAT_RATE_SL: Word = Word::of(wqe_datagram_seg::stat_rate_sl);
    /// `fl` and the source path bits.
    pub const FL_MLID: Word = Word::of(wqe_datagram_seg::fl_mlid);
    /// Destination LID.
    pub const RLID: Word = Word::of(wqe_datagram_seg::rlid);
    /// Traffic class.
    pub const TCLASS: Word = Word::of(wqe_datagram_seg::tclass);
    /// Hop limit.
    pub const HOP_LIMIT: Word = Word::of(wqe_datagram_seg::hop_limit);
    /// GRH flag, SGID index and flow label.
    pub const GRH_GID_FL: Word = Word::of(wqe_datagram_seg::grh_gid_fl);
    /// Byte offset of the destination GID.
    pub const RGID_BYTE: usize = wqe_datagram_seg::rgid.bit / 8;
}

/// The 64-byte CQE (`mlx5_cqe64`) and the error CQE (`mlx5_err_cqe`): the fields the data
/// path writes (model) and reads (driver).
pub mod cqe {
    use super::*;
    /// Path bits of the DLID.
    pub const ML_PATH: Word = Word::of(cqe64::ml_path);
    /// Source LID.
    pub const SLID: Word = Word::of(cqe64::slid);
    /// GRH, SL and source QPN.
    pub const FLAGS_RQPN: Word = Word::of(cqe64::flags_rqpn);
    /// SRQ number or user index.
    pub const SRQN: Word = Word::of(cqe64::srqn);
    /// Immediate, invalidated key or P_Key index.
    pub const IMM_INVAL_PKEY: Word = Word::of(cqe64::imm_inval_pkey);
    /// Bytes.
    pub const BYTE_CNT: Word = Word::of(cqe64::byte_cnt);
    /// WQE opcode (requester) and QPN.
    pub const SOP_DROP_QPN: Word = Word::of(cqe64::sop_drop_qpn);
    /// WQE counter.
    pub const WQE_COUNTER: Word = Word::of(cqe64::wqe_counter);
    /// Opcode, format, solicited and owner bits.
    pub const OP_OWN: Word = Word::of(cqe64::op_own);
    /// Error syndrome (error CQEs).
    pub const SYNDROME: Word = Word::of(err_cqe::syndrome);
    /// Vendor syndrome (error CQEs).
    pub const VENDOR_ERR_SYND: Word = Word::of(err_cqe::vendor_err_synd);
    /// RSS hash (Ethernet receive).
    pub const RSS_HASH_RESULT: Word = Word::of(cqe64::rss_hash_result);
    /// RSS hash type (Ethernet receive).
    pub const RSS_HASH_TYPE: Word = Word::of(cqe64::rss_hash_type);
    /// Checksum-OK bits (Ethernet receive).
    pub const HDS_IP_EXT: Word = Word::of(cqe64::hds_ip_ext);
    /// L4/L3 header types and VLAN present (Ethernet receive).
    pub const L4_L3_HDR_TYPE: Word = Word::of(cqe64::l4_l3_hdr_type);
    /// The stripped VLAN tag (Ethernet receive).
    pub const VLAN_INFO: Word = Word::of(cqe64::vlan_info);
    /// The packet's checksum (Ethernet receive).
    pub const CHECK_SUM: Word = Word::of(cqe64::check_sum);
    /// The completion's timestamp (good CQEs).
    pub const TIMESTAMP: Word = Word::of(cqe64::timestamp);

    /// Word 7 (bytes 56–63) of a CQE: QPN word, WQE counter, signature 0, `op_own`.
    #[inline(always)]
    pub const fn last_word(sop_drop_qpn: u32, wqe_counter: u16, op_own: u8) -> u64 {
        SOP_DROP_QPN.put(sop_drop_qpn as u64)
            | WQE_COUNTER.put(wqe_counter as u64)
            | OP_OWN.put(op_own as u64)
    }
}

/// Stores word `w` big-endian at byte `at` of `buf` (for software that builds segments or
/// CQEs in ordinary memory, as the model does).
///
/// # Panics
/// When `buf` is shorter than `at + 8`.
#[inline(always)]
pub fn store(buf: &mut [u8], at: usize, w: u64) {
    buf[at..at + 8].copy_from_slice(&w.to_be_bytes());
}

/// The big-endian word at byte `at` of `buf`, or `None` past its end.
#[inline(always)]
pub fn load(buf: &[u8], at: usize) -> Option<u64> {
    let b: [u8; 8] = buf.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_be_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ifc::{Cqe64, ErrCqe, WqeCtrlSeg, WqeDataSeg, WqeDatagramSeg};
    use crate::layout::{Layout, View, ViewMut};

    /// Each word agrees with the layout's own accessors: set through `ViewMut`, read through
    /// `Word::get`, and built with `Word::put`, read back through `View`.
    fn agrees<L: Layout>(f: Field<L>, w: Word, v: u64) {
        let mut buf = vec![0u8; L::BYTES];
        ViewMut::<L>::new_checked(&mut buf).unwrap().set(f, v);
        assert_eq!(w.get(load(&buf, w.byte()).unwrap()), v, "{f:?}");
        let mut buf = vec![0u8; L::BYTES];
        store(&mut buf, w.byte(), w.put(v));
        assert_eq!(View::<L>::new_checked(&buf).unwrap().get(f), v, "{f:?}");
    }

    #[test]
    fn words_agree_with_the_layouts() {
        agrees::<WqeCtrlSeg>(wqe_ctrl_seg::wqe_index, ctrl::WQE_INDEX, 0xbeef);
        agrees::<WqeCtrlSeg>(wqe_ctrl_seg::opcode, ctrl::OPCODE, 0x0a);
        agrees::<WqeCtrlSeg>(wqe_ctrl_seg::qpn, ctrl::QPN, 0xab_cdef);
        agrees::<WqeCtrlSeg>(wqe_ctrl_seg::ds, ctrl::DS, 0x3f);
        agrees::<WqeCtrlSeg>(wqe_ctrl_seg::dci_stream_channel_id, ctrl::STREAM, 0x1234);
        agrees::<WqeCtrlSeg>(wqe_ctrl_seg::fm_ce_se, ctrl::FM_CE_SE, 0x28);
        agrees::<WqeCtrlSeg>(wqe_ctrl_seg::imm, ctrl::IMM, 0xdead_beef);
        agrees::<WqeDataSeg>(wqe_data_seg::byte_count, data::BYTE_COUNT, 4096);
        agrees::<WqeDataSeg>(wqe_data_seg::lkey, data::LKEY, 0x1234_5678);
        agrees::<WqeDataSeg>(wqe_data_seg::addr, data::ADDR, 0x1_2345_6789);
        agrees::<WqeDatagramSeg>(wqe_datagram_seg::rlid, datagram::RLID, 0xc001);
        agrees::<WqeDatagramSeg>(
            wqe_datagram_seg::grh_gid_fl,
            datagram::GRH_GID_FL,
            0x4012_3456,
        );
        agrees::<WqeDatagramSeg>(wqe_datagram_seg::hop_limit, datagram::HOP_LIMIT, 64);
        agrees::<Cqe64>(cqe64::wqe_counter, cqe::WQE_COUNTER, 0x7777);
        agrees::<Cqe64>(cqe64::op_own, cqe::OP_OWN, 0xd1);
        agrees::<Cqe64>(cqe64::byte_cnt, cqe::BYTE_CNT, 0x8000_0001);
        agrees::<Cqe64>(cqe64::slid, cqe::SLID, 0x11);
        agrees::<ErrCqe>(err_cqe::syndrome, cqe::SYNDROME, 0x15);
        agrees::<crate::ifc::WqeEthSeg>(wqe_eth_seg::cs_flags, eth::CS_FLAGS, 0xc0);
        agrees::<crate::ifc::WqeEthSeg>(wqe_eth_seg::inline_hdr_sz, eth::INLINE_HDR_SZ, 18);
        let mut b = [0u8; 16];
        store(
            &mut b,
            eth::INLINE_HDR_START.byte(),
            eth::INLINE_HDR_START.put(0xabcd),
        );
        assert_eq!(&b[14..16], &[0xab, 0xcd]);
    }

    #[test]
    fn whole_words_are_the_fields_or_ed() {
        let w0 = ctrl::word0(7, 0x08, 3) | ctrl::QPN.put(0x100);
        assert_eq!(w0, 0x0000_0708_0001_0003);
        assert_eq!(ctrl::word1(0, 0x08, 0x55), 0x0000_0008_0000_0055);
        assert_eq!(data::word0(64, 0x1001), 0x0000_0040_0000_1001);
        assert_eq!(cqe::last_word(0x0800_0100, 5, 0x01), 0x0800_0100_0005_0001);
        assert_eq!(load(&[0; 7], 0), None);
        assert_eq!(ctrl::DS.put_masked(0x7f), ctrl::DS.put(0x3f));
    }
}
