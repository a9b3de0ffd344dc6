//! UMR work requests on the REG_UMR QP: an mkey's translation, range, PD, rights, variant and
//! free state changed by a WQE (Linux 6.12 mlx5_ib `umr.c`, qp.h `struct
//! mlx5_wqe_umr_ctrl_seg` / `struct mlx5_mkey_seg`, device.h `MLX5_MKEY_MASK_*`, `MLX5_UMR_*`).
//!
//! A UMR WQE is the control segment (opcode `MLX5_OPCODE_UMR`, the target key in `imm`), the
//! UMR control segment, the mkey segment (the `mkc` layout) and, unless `MLX5_UMR_INLINE`, a
//! data segment pointing at the translation entries in host memory. `xlt_octowords` says how
//! many 16-byte units of entries the WQE carries, `xlt_offset` (with
//! `MLX5_UMR_TRANSLATION_OFFSET_EN`, bits 47:16 in `xlt_offset_47_16`) where in the key's table
//! they go; mlx5_ib loads a large list that way, chunk by chunk, and enables the key with the
//! last chunk (`_mlx5r_umr_update_mr_pas`, `mlx5r_umr_final_update_xlt`).
//!
//! Errors complete with an error CQE and move the QP to ERR (umr.c `mlx5r_umr_recover` sees
//! only flushes after a failed UMR). Which syndrome hardware gives is not in public sources;
//! the model reports a key that is missing, not `umr_en` or in the wrong free state as a local
//! protection error, and a request it cannot carry out (an unsupported mask bit, entries past
//! the key's table, a translation for a key without an MTT) as a local QP operation error.

use bareverbs_firmware_cmd::ifc::{
    cmd_hca_cap, fm_ce_se, klm, mkc, mkey_mask, mtt, mtt_ptag, umr_flags, umr_wqe, wqe_opcode,
    wqe_umr_ctrl_seg, wqe_umr_repeat_block_seg, wqe_umr_repeat_ent_seg, CqeOpcode, Mtt, UmrWqe,
    WqeCtrlSeg, WqeDataSeg, WqeUmrCtrlSeg, WqeUmrRepeatBlockSeg, WqeUmrRepeatEntSeg,
    SEND_WQEBB_NUM_DS, SEND_WQE_BB, SEND_WQE_DS, UMR_MTT_ALIGNMENT, UMR_OCTOWORD,
    UMR_REPEAT_BLOCK_OP,
};
use bareverbs_firmware_cmd::ifc::{wqe_ctrl_seg, wqe_data_seg};
use bareverbs_firmware_cmd::layout::{Layout, TooShort, View};

use crate::cqe_write::synd;
use crate::data_path::DataPath;
use crate::dma::{AddressSpaceExt, DmaFault};
use crate::mkey::{Klm, RepeatEnt, Translation, NOT_PRESENT};
use crate::qp::{Qp, ServiceType};
use crate::requester::Sender;

/// Mask bits the model applies. The relaxed-ordering bits need `relaxed_ordering_*_umr`, which
/// the model does not advertise; signature, BSF, fence, QPN and remote-invalidate are not
/// modelled.
const SUPPORTED_MASK: u64 = mkey_mask::LEN
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

/// Octowords in the 64-byte unit UMR copies translations in (`MLX5_UMR_MTT_ALIGNMENT`).
const UMR_UNIT_OCTOWORDS: usize = UMR_MTT_ALIGNMENT / UMR_OCTOWORD;

/// A UMR WQE's control segment, as its execution needs it.
struct UmrCtrl {
    /// 16-byte units the WQE takes.
    ds: u16,
    /// WQEBBs it takes.
    bbs: u16,
    opcode: u8,
    wqe_index: u16,
    signaled: bool,
    /// The key it rewrites (the control segment's `imm`).
    key: u32,
}

impl DataPath<'_> {
    /// The UMR WQE at the head of `qp`'s send queue, read while the QP is borrowed: its
    /// control segment, its WQEBBs' bytes (at least the first's 64), and a fault that cut it
    /// short (recorded by the caller). Err: its first WQEBB cannot be read.
    fn read_umr_wqe(&self, qp: &Qp) -> Result<(UmrCtrl, Vec<u8>, Option<DmaFault>), ()> {
        let mask = (1u16 << qp.log_sq_size) - 1;
        let bb = |i: u16| qp.buf_iova(qp.sq_offset() + u64::from(i & mask) * SEND_WQE_BB as u64);
        let mut raw = self
            .dma
            .read_vec(bb(qp.sq_consumed), SEND_WQE_BB)
            .map_err(|_| ())?;
        let c = View::<WqeCtrlSeg>::new_checked(&raw).map_err(|_| ())?;
        let ds = c.get(wqe_ctrl_seg::ds) as u16;
        let ctrl = UmrCtrl {
            ds,
            bbs: ds.div_ceil(SEND_WQEBB_NUM_DS as u16).max(1),
            opcode: c.get(wqe_ctrl_seg::opcode) as u8,
            wqe_index: c.get(wqe_ctrl_seg::wqe_index) as u16,
            signaled: c.get(wqe_ctrl_seg::fm_ce_se) as u8 & fm_ce_se::CQ_UPDATE != 0,
            key: c.get32(wqe_ctrl_seg::imm),
        };
        let mut fault = None;
        for k in 1..ctrl.bbs {
            match self
                .dma
                .read_vec(bb(qp.sq_consumed.wrapping_add(k)), SEND_WQE_BB)
            {
                Ok(v) => raw.extend(v),
                Err(f) => {
                    fault = Some(f);
                    break;
                }
            }
        }
        Ok((ctrl, raw, fault))
    }

    /// Executes the UMR WQE at the head of QP `qpn`'s send queue (the REG_UMR QP, or a user
    /// QP's UMR). Returns whether the send queue goes on (false after an error, which moved
    /// the QP to ERR).
    pub(crate) fn step_umr(&mut self, qpn: u32) -> bool {
        // The QP is borrowed while its WQE is read; what the rest needs is copied.
        let Some(qp) = self.objects.qps.get(&qpn) else {
            return false;
        };
        let consumed = qp.sq_consumed;
        let s = Sender::of(qp);
        let Ok((ctrl, mut raw, fault)) = self.read_umr_wqe(qp) else {
            self.complete_send_error(&s, consumed, 0, synd::LOCAL_QP_OP);
            return false;
        };
        if let Some(f) = fault {
            self.record_fault(f);
        }
        let UmrCtrl {
            ds,
            bbs,
            opcode,
            wqe_index,
            signaled,
            key,
        } = ctrl;
        raw.truncate(usize::from(ds) * SEND_WQE_DS);
        if let Some(q) = self.objects.qps.get_mut(&qpn) {
            q.sq_consumed = q.sq_consumed.wrapping_add(bbs);
        }
        // A user QP's UMR changes only keys of its own PD (the REG_UMR QP has none).
        let pd = (s.st != ServiceType::RegUmr).then_some(s.pd);
        let result = if opcode == wqe_opcode::UMR {
            self.execute_umr_for(key, &raw, pd)
        } else {
            Err(synd::LOCAL_QP_OP)
        };
        match result {
            Ok(()) => {
                self.counters.umrs.0 += 1;
                if signaled {
                    let c = crate::cqe_write::ok_cqe(
                        CqeOpcode::Req,
                        &crate::cqe_write::CqeFields {
                            sop_drop_qpn: (u32::from(opcode) << 24) | qpn,
                            wqe_counter: wqe_index,
                            ..Default::default()
                        },
                    );
                    self.post_cqe(s.cqn_snd, c, false);
                }
                true
            }
            Err(e) => {
                self.counters.umrs.1 += 1;
                self.complete_send_error(&s, wqe_index, opcode, e);
                false
            }
        }
    }

    /// Applies the UMR in `raw` (the whole WQE) to key `key`; nothing changes on an error.
    #[cfg(test)]
    fn execute_umr(&mut self, key: u32, raw: &[u8]) -> Result<(), u8> {
        self.execute_umr_for(key, raw, None)
    }

    /// A UMR WQE's key update (`execute_umr` in tests) from a QP of PD `pd` (`None`: the
    /// kernel's REG_UMR QP).
    fn execute_umr_for(&mut self, key: u32, raw: &[u8], pd: Option<u32>) -> Result<(), u8> {
        // The control, UMR control and mkey segments, then the translation.
        let head = View::<UmrWqe>::new_checked(raw).map_err(|_| synd::LOCAL_QP_OP)?;
        let u = head.sub(umr_wqe::umr_ctrl_seg);
        let seg = head.sub(umr_wqe::mkey_seg);
        let xlt = raw.get(UmrWqe::BYTES..).ok_or(synd::LOCAL_QP_OP)?;
        let flags = u.get(wqe_umr_ctrl_seg::flags) as u8;
        let mask = u.get(wqe_umr_ctrl_seg::mkey_mask);
        if mask & !SUPPORTED_MASK != 0
            || (mask & mkey_mask::A != 0 && self.cap(cmd_hca_cap::umr_modify_atomic_disabled) != 0)
            || (mask & mkey_mask::PAGE_SIZE != 0
                && self.cap(cmd_hca_cap::umr_modify_entity_size_disabled) != 0)
        {
            return Err(synd::LOCAL_QP_OP);
        }
        let index = key >> 8;
        let k = self
            .objects
            .mkeys
            .get(&index)
            .filter(|k| k.umr_en && pd.is_none_or(|p| p == k.pd))
            .ok_or(synd::LOCAL_PROT)?
            .clone();
        // MLX5_UMR_CHECK_NOT_FREE: "fail if not free"; MLX5_UMR_CHECK_FREE: "fail if free"
        // (umr.c comments); both bits at once is not a check mlx5_ib makes.
        match flags & (umr_flags::CHECK_NOT_FREE | umr_flags::CHECK_FREE) {
            0 => {}
            umr_flags::CHECK_NOT_FREE if k.free => {}
            umr_flags::CHECK_FREE if !k.free => {}
            umr_flags::CHECK_NOT_FREE | umr_flags::CHECK_FREE => return Err(synd::LOCAL_PROT),
            _ => return Err(synd::LOCAL_QP_OP),
        }
        let pd = seg.get32(mkc::pd);
        if mask & mkey_mask::PD != 0 && !self.objects.pds.contains(&pd) {
            return Err(synd::LOCAL_PROT);
        }
        let log_page = seg.get32(mkc::log_page_size);
        if mask & mkey_mask::PAGE_SIZE != 0 && !(12..=31).contains(&log_page) {
            return Err(synd::LOCAL_QP_OP);
        }
        let mut k = k;
        let indirect = matches!(
            k.translation,
            Translation::Klm(_) | Translation::Interleaved { .. }
        );
        let entries = if indirect {
            if let Some(t) = Self::indirect_entries(&u, xlt, flags, k.xlt_octowords)? {
                k.translation = t;
            }
            None
        } else {
            self.umr_entries(&u, xlt, flags)?
        };
        if let Some((at, list)) = entries {
            let Translation::Mtt { pages, .. } = &mut k.translation else {
                return Err(synd::LOCAL_QP_OP);
            };
            // UMR copies entries in 64-byte units (umr.c: "UMR copies MTTs in units of
            // MLX5_UMR_FLEX_ALIGNMENT bytes"; device.h MLX5_UMR_MTT_ALIGNMENT 0x40), and
            // mlx5_ib pads its last chunk to one while `reg_create` reserves
            // `get_octo_len` = (pages + 1) / 2 octowords: a one-page MR gets one octoword
            // and a four-octoword load. The table therefore holds whole 64-byte units.
            let units = (k.xlt_octowords as usize).next_multiple_of(UMR_UNIT_OCTOWORDS);
            // `at` comes from the WQE: any value.
            let end = at.checked_add(list.len()).ok_or(synd::LOCAL_QP_OP)?;
            if end > units * (UMR_OCTOWORD / Mtt::BYTES) {
                return Err(synd::LOCAL_QP_OP);
            }
            if pages.len() < end {
                pages.resize(end, NOT_PRESENT);
            }
            for (slot, e) in pages[at..].iter_mut().zip(list) {
                *slot = e;
            }
        }
        if mask & mkey_mask::START_ADDR != 0 {
            k.start = seg.get(mkc::start_addr);
        }
        if mask & mkey_mask::LEN != 0 {
            // umr.c `mlx5r_umr_final_update_xlt`: length64 for a zero-length (whole space) MR.
            k.len = if seg.get(mkc::length64) != 0 {
                u64::MAX - k.start
            } else {
                seg.get(mkc::len)
            };
        }
        if mask & mkey_mask::PAGE_SIZE != 0 {
            if let Translation::Mtt { log_page: l, .. } = &mut k.translation {
                *l = log_page;
            }
        }
        if mask & mkey_mask::PD != 0 {
            k.pd = pd;
        }
        let bit = |f| seg.get(f) != 0;
        if mask & mkey_mask::LR != 0 {
            k.rights.local_read = bit(mkc::lr);
        }
        if mask & mkey_mask::LW != 0 {
            k.rights.local_write = bit(mkc::lw);
        }
        if mask & mkey_mask::RR != 0 {
            k.rights.remote_read = bit(mkc::rr);
        }
        if mask & mkey_mask::RW != 0 {
            k.rights.remote_write = bit(mkc::rw);
        }
        if mask & mkey_mask::A != 0 {
            k.rights.atomic = bit(mkc::a);
        }
        if mask & mkey_mask::KEY != 0 {
            k.key = (index << 8) | seg.get32(mkc::mkey_7_0);
        }
        if mask & mkey_mask::FREE != 0 {
            k.free = bit(mkc::free);
        }
        self.objects.mkeys.insert(index, k);
        Ok(())
    }

    /// An indirect key's new entries from a UMR's inline translation `xlt`, if it carries any:
    /// a KLM list (`struct mlx5_klm`; zero entries pad the list to 64 bytes, rdma-core 56 qp.c
    /// `umr_sg_list_create`) or a repeat block (`op` [`UMR_REPEAT_BLOCK_OP`], then `num_ent`
    /// `struct mlx5_wqe_umr_repeat_ent_seg`, `umr_strided_seg_create`). At most the key's
    /// `translations_octword_size` entries, one octoword each (the repeat block's header
    /// counting as one).
    fn indirect_entries(
        u: &View<'_, WqeUmrCtrlSeg>,
        xlt: &[u8],
        flags: u8,
        room: u32,
    ) -> Result<Option<Translation>, u8> {
        let octowords = u.get(wqe_umr_ctrl_seg::xlt_octowords) as usize;
        if octowords == 0 {
            return Ok(None);
        }
        if flags & umr_flags::INLINE == 0 || flags & umr_flags::TRANSLATION_OFFSET_EN != 0 {
            return Err(synd::LOCAL_QP_OP);
        }
        let data = xlt
            .get(..octowords * UMR_OCTOWORD)
            .ok_or(synd::LOCAL_QP_OP)?;
        let block =
            View::<WqeUmrRepeatBlockSeg>::new_checked(data).map_err(|_| synd::LOCAL_QP_OP)?;
        // A KLM's key sits where a repeat block has its `op`.
        let (used, t) = if block.get32(wqe_umr_repeat_block_seg::op) == UMR_REPEAT_BLOCK_OP {
            let n = block.get(wqe_umr_repeat_block_seg::num_ent) as usize;
            if n == 0 || n + 1 > octowords {
                return Err(synd::LOCAL_QP_OP);
            }
            let entries = data[WqeUmrRepeatBlockSeg::BYTES..]
                .chunks_exact(WqeUmrRepeatEntSeg::BYTES)
                .take(n)
                .map(|e| {
                    let e = View::<WqeUmrRepeatEntSeg>::new_checked(e)?;
                    Ok(RepeatEnt {
                        stride: e.get(wqe_umr_repeat_ent_seg::stride) as u16,
                        byte_count: e.get(wqe_umr_repeat_ent_seg::byte_count) as u16,
                        key: e.get32(wqe_umr_repeat_ent_seg::memkey),
                        va: e.get(wqe_umr_repeat_ent_seg::va),
                    })
                })
                .collect::<Result<Vec<_>, TooShort>>()
                .map_err(|_| synd::LOCAL_QP_OP)?;
            let t = Translation::Interleaved {
                repeat_count: block.get32(wqe_umr_repeat_block_seg::repeat_count),
                entries,
            };
            (n + 1, t)
        } else {
            let list = data
                .chunks_exact(bareverbs_firmware_cmd::ifc::Klm::BYTES)
                .map(|e| {
                    let e = View::<bareverbs_firmware_cmd::ifc::Klm>::new_checked(e)?;
                    Ok(Klm {
                        len: e.get32(klm::byte_count),
                        key: e.get32(klm::mkey),
                        addr: e.get(klm::address),
                    })
                })
                .collect::<Result<Vec<Klm>, TooShort>>()
                .map_err(|_| synd::LOCAL_QP_OP)?;
            let zero = Klm {
                len: 0,
                key: 0,
                addr: 0,
            };
            let list: Vec<Klm> = list.into_iter().take_while(|e| *e != zero).collect();
            (list.len(), Translation::Klm(list))
        };
        if used as u64 > u64::from(room) {
            return Err(synd::LOCAL_QP_OP);
        }
        Ok(Some(t))
    }

    /// The translation entries a UMR carries (its inline translation, or the list its data
    /// segment points at, `xlt` either way) as the pages they give ([`NOT_PRESENT`] for an
    /// entry without its present bits), and the table index of the first, if any.
    fn umr_entries(
        &mut self,
        u: &View<'_, WqeUmrCtrlSeg>,
        xlt: &[u8],
        flags: u8,
    ) -> Result<Option<(usize, Vec<u64>)>, u8> {
        let bytes = u.get(wqe_umr_ctrl_seg::xlt_octowords) as usize * UMR_OCTOWORD;
        if bytes == 0 {
            return Ok(None);
        }
        let mut at = 0u64;
        if flags & umr_flags::TRANSLATION_OFFSET_EN != 0 {
            let high = u.get(wqe_umr_ctrl_seg::xlt_offset_47_16);
            if high != 0 && self.cap(cmd_hca_cap::umr_extended_translation_offset) == 0 {
                return Err(synd::LOCAL_QP_OP);
            }
            at = (high << 16) | u.get(wqe_umr_ctrl_seg::xlt_offset);
        }
        let data = if flags & umr_flags::INLINE != 0 {
            xlt.get(..bytes).ok_or(synd::LOCAL_QP_OP)?.to_vec()
        } else {
            let d = View::<WqeDataSeg>::new_checked(xlt).map_err(|_| synd::LOCAL_QP_OP)?;
            let lkey = d.get32(wqe_data_seg::lkey);
            let addr = d.get(wqe_data_seg::addr);
            if (d.get32(wqe_data_seg::byte_count) as usize) < bytes {
                return Err(synd::LOCAL_LENGTH);
            }
            self.read_through_key(lkey, addr, bytes)?
        };
        // Linux mlx5_ib: MLX5_IB_MTT_PRESENT = read | write, the entry's `rd_en` and `wr_en`.
        let list = data
            .chunks_exact(Mtt::BYTES)
            .map(|e| {
                let m = View::<Mtt>::new_checked(e)?;
                Ok(if m.get(mtt::rd_en) | m.get(mtt::wr_en) != 0 {
                    mtt_ptag(&m)
                } else {
                    NOT_PRESENT
                })
            })
            .collect::<Result<Vec<u64>, TooShort>>()
            .map_err(|_| synd::LOCAL_QP_OP)?;
        // Octowords hold two MTT entries each.
        let first = at
            .checked_mul((UMR_OCTOWORD / Mtt::BYTES) as u64)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or(synd::LOCAL_QP_OP)?;
        Ok(Some((first, list)))
    }

    /// Reads `len` bytes at `addr` through local key `lkey`. The REG_UMR QP has no PD (mlx5_ib
    /// creates it with `pd` 0 and points at the list with its PD's local DMA key), so the key's
    /// PD is not checked against the QP's.
    fn read_through_key(&mut self, lkey: u32, addr: u64, len: usize) -> Result<Vec<u8>, u8> {
        let k = self
            .objects
            .mkeys
            .get(&(lkey >> 8))
            .filter(|k| k.key == lkey && !k.free)
            .ok_or(synd::LOCAL_PROT)?;
        let pieces = k
            .translate(addr, len as u64)
            .map_err(|_| synd::LOCAL_PROT)?;
        let mut out = Vec::with_capacity(len);
        for (a, n) in pieces {
            match self.dma.read_vec(a, n as usize) {
                Ok(v) => out.extend(v),
                Err(f) => {
                    self.record_fault(f);
                    return Err(synd::LOCAL_PROT);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mkey::{Mkey, Rights};
    use crate::SimHal;
    use bareverbs_firmware_cmd::ifc::{mtt_perm, set_mtt_ptag};
    use bareverbs_firmware_cmd::layout::{set_bits, ViewMut};

    /// A UMR WQE for `key` carrying `entries` inline at octoword `offset`; each entry is
    /// written as mlx5_ib writes it, the page address with its [`mtt_perm`] bits.
    fn inline_umr(key: u32, offset: u64, entries: &[u64]) -> Vec<u8> {
        // Inline entries fill whole octowords.
        let octowords = entries.len().div_ceil(UMR_OCTOWORD / Mtt::BYTES);
        let mut w = vec![0u8; UmrWqe::BYTES + octowords * UMR_OCTOWORD];
        let (head, xlt) = w.split_at_mut(UmrWqe::BYTES);
        let mut v = ViewMut::<UmrWqe>::zeroed(head).unwrap();
        v.sub(umr_wqe::ctrl_seg)
            .set(wqe_ctrl_seg::opcode, wqe_opcode::UMR)
            .set(wqe_ctrl_seg::imm, key);
        v.sub(umr_wqe::umr_ctrl_seg)
            .set(
                wqe_umr_ctrl_seg::flags,
                umr_flags::INLINE | umr_flags::TRANSLATION_OFFSET_EN,
            )
            .set(wqe_umr_ctrl_seg::xlt_octowords, octowords as u16)
            .set(wqe_umr_ctrl_seg::xlt_offset, offset as u16)
            .set(wqe_umr_ctrl_seg::xlt_offset_47_16, (offset >> 16) as u32);
        for (&e, m) in entries.iter().zip(xlt.chunks_exact_mut(Mtt::BYTES)) {
            let mut m = ViewMut::<Mtt>::new_checked(m).unwrap();
            set_mtt_ptag(&mut m, e);
            m.set(mtt::rd_en, u8::from(e & mtt_perm::READ != 0))
                .set(mtt::wr_en, u8::from(e & mtt_perm::WRITE != 0));
        }
        w
    }

    /// A free MTT key at `index` that a UMR may fill, its table `xlt_octowords` long.
    fn free_mtt_key(index: u32, xlt_octowords: u32) -> Mkey {
        Mkey {
            key: index << 8,
            pd: 0,
            start: 0,
            len: 0,
            rights: Rights::default(),
            translation: Translation::Mtt {
                log_page: 12,
                pages: Vec::new(),
            },
            free: true,
            umr_en: true,
            xlt_octowords,
        }
    }

    #[test]
    fn translation_offsets_past_16_bits_need_the_extended_offset_cap() {
        // mlx5_ifc `umr_extended_translation_offset`; umr.c `mlx5r_umr_update_offset` splits
        // the octoword offset into xlt_offset (15:0) and xlt_offset_47_16.
        let hal = SimHal::synchronous();
        hal.model().with(|h| {
            let index = 0x20;
            h.objects.mkeys.insert(index, free_mtt_key(index, 0x1_0001));
            // Octoword 0x10000 = entries 0x20000 and 0x20001; the second lacks the present
            // bits (a zapped entry).
            let w = inline_umr(index << 8, 0x1_0000, &[0x5000 | mtt_perm::RW, 0x6000]);
            assert_eq!(h.data_path().execute_umr(index << 8, &w), Ok(()));
            let Some(Translation::Mtt { pages, .. }) = h.mkey(index).map(|k| &k.translation) else {
                panic!("an MTT key");
            };
            assert_eq!(pages.len(), 0x2_0002);
            assert_eq!(pages[0x2_0000..], [0x5000, NOT_PRESENT]);
            assert!(pages[..0x2_0000].iter().all(|&p| p == NOT_PRESENT));
            // The table holds whole 64-byte units: 0x10001 octowords are 0x10004; the last
            // octoword of that unit takes entries, the next one is past the table.
            let w = inline_umr(index << 8, 0x1_0003, &[0x8000 | mtt_perm::RW]);
            assert_eq!(h.data_path().execute_umr(index << 8, &w), Ok(()));
            let w = inline_umr(index << 8, 0x1_0004, &[0x7000 | mtt_perm::RW]);
            assert_eq!(
                h.data_path().execute_umr(index << 8, &w),
                Err(synd::LOCAL_QP_OP)
            );
            // Without the capability the high offset bits are refused.
            let f = cmd_hca_cap::umr_extended_translation_offset;
            set_bits(&mut h.caps.cur, f.bit, f.width, 0);
            let w = inline_umr(index << 8, 0x1_0000, &[0x7000 | mtt_perm::RW]);
            assert_eq!(
                h.data_path().execute_umr(index << 8, &w),
                Err(synd::LOCAL_QP_OP)
            );
            let Some(Translation::Mtt { pages, .. }) = h.mkey(index).map(|k| &k.translation) else {
                panic!("an MTT key");
            };
            assert_eq!(pages[0x2_0000], 0x5000, "a refused UMR changes nothing");
        });
    }

    #[test]
    fn an_mtt_entry_gives_its_ptag_when_either_present_bit_is_set() {
        // mlx5_ifc `mtt`: ptag_63_32, ptag_31_8, 6 reserved bits, wr_en, rd_en. Bits 7:2 are
        // not address (an earlier parse kept them in the page address).
        let hal = SimHal::synchronous();
        hal.model().with(|h| {
            let index = 0x21;
            h.objects.mkeys.insert(index, free_mtt_key(index, 2));
            let entries = [
                0x1_0000_5000 | mtt_perm::READ,
                0x6000 | mtt_perm::WRITE,
                0x7000,
            ];
            let mut w = inline_umr(index << 8, 0, &entries);
            for m in w[UmrWqe::BYTES..].chunks_exact_mut(Mtt::BYTES) {
                // The last byte holds the reserved bits 7:2 and the present bits 1:0.
                m[Mtt::BYTES - 1] |= 0xfc;
            }
            assert_eq!(h.data_path().execute_umr(index << 8, &w), Ok(()));
            let Some(Translation::Mtt { pages, .. }) = h.mkey(index).map(|k| &k.translation) else {
                panic!("an MTT key");
            };
            assert_eq!(pages[..3], [0x1_0000_5000, 0x6000, NOT_PRESENT]);
        });
    }
}
