//! CREATE/DESTROY/QUERY_MKEY (mlx5-reference 06 §4): keys with PD, rights, range and a
//! physical or MTT translation.

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, input, output, syndrome, CmdResult, Fail};
use crate::hca::Hca;
use crate::mkey::{Mkey, Rights, Translation, NOT_PRESENT};

/// First key index handed out: below it sit the special keys (QUERY_SPECIAL_CONTEXTS).
pub const FIRST_MKEY_INDEX: u32 = 0x10;

/// The page of one MTT entry (mlx5_ifc `mtt`: `ptag_63_32`, `ptag_31_8`, six reserved bits,
/// `wr_en` = bit 1, `rd_en` = bit 0). Without `pg_access` the enable bits are not part of the
/// entry and are ignored (Linux mlx5_ib `reg_create`: "The pg_access bit allows setting the
/// access flags in the page list"; it sends them as 0 unless the `pg` capability is set).
/// With it (rdma-core `mlx5_vfio_reg_mr` always, Linux with `pg`: `MLX5_MTT_PRESENT`) an entry
/// with neither enable is a page that is not present: accepted, and any access through it
/// faults, as for a UMR-loaded entry ([`NOT_PRESENT`]). The address must be aligned to the
/// key's page size and the reserved bits zero.
fn mtt_page(entry: u64, page: u64, pg_access: bool) -> Result<u64, Fail> {
    let addr = entry & !0xff;
    if entry & 0xfc != 0 || addr % page != 0 {
        return Err(bad_param(syndrome::BAD_PAGE));
    }
    if pg_access && entry & mtt_perm::RW == 0 {
        return Ok(NOT_PRESENT);
    }
    Ok(addr)
}

impl Hca {
    pub(super) fn create_mkey(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateMkeyIn>(i)?;
        let mut out = output::<CreateMkeyOut>(o)?;
        self.require_initialized()?;
        let c = v.sub(create_mkey_in::memory_key_mkey_entry);
        let pd = c.get32(mkc::pd);
        if !self.objects.pds.contains(&pd) {
            return Err(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT));
        }
        let mode = ((c.get(mkc::access_mode_4_2) << 2) | c.get(mkc::access_mode_1_0)) as u8;
        let start = c.get(mkc::start_addr);
        let len = if c.get(mkc::length64) != 0 {
            u64::MAX - start
        } else {
            c.get(mkc::len)
        };
        // A free key (the mkey cache, Linux 6.12 mr.c `set_cache_mkc`, and `reg_create` when
        // a UMR loads the pages) reserves `translations_octword_size` entries and carries none.
        let free = c.get(mkc::free) != 0;
        let translation = match mode {
            mkc_access_mode::PA => Translation::Physical,
            mkc_access_mode::MTT => {
                // 4 KiB up to what the 5-bit field holds (2 GiB).
                let log_page = c.get32(mkc::log_page_size);
                if !(12..=31).contains(&log_page) {
                    return Err(bad_param(syndrome::OUT_OF_RANGE));
                }
                let page = 1u64 << log_page;
                let need = if free {
                    0
                } else {
                    // Any 64-bit length: the page count is computed without overflowing.
                    let Some(span) = (start & (page - 1)).checked_add(len) else {
                        return Err(bad_param(syndrome::OUT_OF_RANGE));
                    };
                    span.div_ceil(page) as usize
                };
                let octwords = c.get32(mkc::translations_octword_size) as usize;
                if octwords * 2 < need {
                    return Err(bad_param(syndrome::OUT_OF_RANGE));
                }
                if v.array_len(create_mkey_in::klm_pas_mtt) < need {
                    return Err(fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT));
                }
                let pg_access = v.get(create_mkey_in::pg_access) != 0;
                let pages = (0..need)
                    .filter_map(|k| v.array(create_mkey_in::klm_pas_mtt, k))
                    .map(|e| mtt_page(e, page, pg_access))
                    .collect::<Result<Vec<u64>, Fail>>()?;
                Translation::Mtt { log_page, pages }
            }
            // An indirect key (rdma-core 56 verbs.c `mlx5dv_create_mkey`, Linux mlx5_ib
            // `mlx5_alloc_sg_gaps_descs`): created free, its entries loaded by UMR, at most
            // `translations_octword_size` of them (one octoword each), within
            // `log_max_klm_list_size`.
            mkc_access_mode::KLMS => {
                let entries = u64::from(c.get32(mkc::translations_octword_size));
                if !free
                    || c.get(mkc::umr_en) == 0
                    || self.cap(cmd_hca_cap::umr_indirect_mkey_disabled) != 0
                    || entries > 1u64 << self.cap(cmd_hca_cap::log_max_klm_list_size)
                {
                    return Err(bad_param(syndrome::OUT_OF_RANGE));
                }
                Translation::Klm(Vec::new())
            }
            _ => return Err(bad_param(syndrome::BAD_OP_MOD)),
        };
        let rights = Rights {
            local_read: c.get(mkc::lr) != 0,
            local_write: c.get(mkc::lw) != 0,
            remote_read: c.get(mkc::rr) != 0,
            remote_write: c.get(mkc::rw) != 0,
            atomic: c.get(mkc::a) != 0,
        };
        let limit = 1u32 << self.cap(cmd_hca_cap::log_max_mkey);
        let index = (FIRST_MKEY_INDEX..limit)
            .find(|i| !self.objects.mkeys.contains_key(i))
            .ok_or(fail(CmdStatus::NoResources, syndrome::EXHAUSTED))?;
        let key = idx_to_mkey(index, c.get(mkc::mkey_7_0) as u8);
        self.objects.mkeys.insert(
            index,
            Mkey {
                key,
                pd,
                start,
                len,
                rights,
                translation,
                free,
                umr_en: c.get(mkc::umr_en) != 0,
                xlt_octowords: c.get32(mkc::translations_octword_size),
            },
        );
        out.set(create_mkey_out::mkey_index, index);
        Ok(())
    }

    pub(super) fn destroy_mkey(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroyMkeyIn>(i)?;
        output::<DestroyMkeyOut>(o)?;
        self.require_initialized()?;
        let index = v.get32(destroy_mkey_in::mkey_index);
        self.objects
            .mkeys
            .remove(&index)
            .ok_or(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT))?;
        Ok(())
    }

    pub(super) fn query_mkey(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryMkeyIn>(i)?;
        let mut out = output::<QueryMkeyOut>(o)?;
        self.require_initialized()?;
        let index = v.get32(query_mkey_in::mkey_index);
        let k = self
            .objects
            .mkeys
            .get(&index)
            .ok_or(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT))?
            .clone();
        let (mode, log_page) = match k.translation {
            Translation::Physical => (mkc_access_mode::PA, 0),
            Translation::Mtt { log_page, .. } => (mkc_access_mode::MTT, log_page),
            Translation::Klm(_) | Translation::Interleaved { .. } => (mkc_access_mode::KLMS, 0),
        };
        let mut c = out.sub(query_mkey_out::memory_key_mkey_entry);
        set_access_mode(&mut c, mode);
        c.set(mkc::pd, k.pd)
            .set(mkc::start_addr, k.start)
            .set(mkc::len, k.len)
            .set(mkc::mkey_7_0, k.key as u8)
            .set(mkc::lr, k.rights.local_read)
            .set(mkc::lw, k.rights.local_write)
            .set(mkc::rr, k.rights.remote_read)
            .set(mkc::rw, k.rights.remote_write)
            .set(mkc::a, k.rights.atomic)
            .set(mkc::free, k.free)
            .set(mkc::umr_en, k.umr_en)
            .set(mkc::translations_octword_size, k.xlt_octowords)
            .set(mkc::log_page_size, log_page);
        Ok(())
    }
}
