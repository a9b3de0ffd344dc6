//! Memory keys in the model: what an lkey/rkey grants (PD, rights, range) and how a virtual
//! address is translated through its MTT or physical mode (mlx5-reference 06 §4).

/// Access a memory key grants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rights {
    /// Local read (always granted by hardware; kept for completeness).
    pub local_read: bool,
    /// Local write.
    pub local_write: bool,
    /// Remote read.
    pub remote_read: bool,
    /// Remote write.
    pub remote_write: bool,
    /// Remote atomic.
    pub atomic: bool,
}

/// How addresses are translated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Translation {
    /// Virtual address = device address.
    Physical,
    /// Page table: entry n is the device address of page n of the region.
    Mtt {
        /// log2 of the page size.
        log_page: u32,
        /// Page addresses.
        pages: Vec<u64>,
    },
}

/// One memory key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mkey {
    /// Full key (index << 8 | key byte).
    pub key: u32,
    /// Protection domain.
    pub pd: u32,
    /// First virtual address.
    pub start: u64,
    /// Length in bytes (`length64`: the whole address space).
    pub len: u64,
    /// Rights.
    pub rights: Rights,
    /// Translation.
    pub translation: Translation,
    /// Free (`mkc.free`): the key exists but grants nothing until a UMR enables it.
    pub free: bool,
    /// UMR may change the key (`mkc.umr_en`).
    pub umr_en: bool,
    /// Size of the key's translation table in 16-byte octowords
    /// (`mkc.translations_octword_size`): how far a UMR may write entries.
    pub xlt_octowords: u32,
}

/// A page-table entry a UMR loaded without its present bits (Linux mlx5_ib
/// `MLX5_IB_MTT_PRESENT` = read | write; a zapped entry is 0): any access through it faults.
pub const NOT_PRESENT: u64 = u64::MAX;

/// Why an access through a key was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFault {
    /// The range is outside the key.
    Bounds,
    /// The key does not grant the access.
    Rights,
    /// The key belongs to another PD.
    Pd,
}

impl Mkey {
    /// Device-address pieces of `va..va + len`, checking bounds; rights and PD are the
    /// caller's to check.
    pub fn translate(&self, va: u64, len: u64) -> Result<Vec<(u64, u64)>, KeyFault> {
        let end = va.checked_add(len).ok_or(KeyFault::Bounds)?;
        if va < self.start || end > self.start.saturating_add(self.len) {
            return Err(KeyFault::Bounds);
        }
        match &self.translation {
            Translation::Physical => Ok(vec![(va, len)]),
            Translation::Mtt { log_page, pages } => {
                let page = 1u64 << log_page;
                let mut out: Vec<(u64, u64)> = Vec::new();
                let mut at = va - self.start + (self.start & (page - 1));
                let mut left = len;
                while left > 0 {
                    let idx = (at >> log_page) as usize;
                    let base = *pages
                        .get(idx)
                        .filter(|&&b| b != NOT_PRESENT)
                        .ok_or(KeyFault::Bounds)?;
                    let off = at & (page - 1);
                    let n = (page - off).min(left);
                    // Entries come from the guest (aligned, any value): a piece ending at the
                    // top of the address space does not continue into the next.
                    let here = base.checked_add(off).ok_or(KeyFault::Bounds)?;
                    match out.last_mut() {
                        Some((a, l)) if a.checked_add(*l) == Some(here) => *l += n,
                        _ => out.push((here, n)),
                    }
                    at += n;
                    left -= n;
                }
                Ok(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtt_translation_splits_at_pages_and_checks_bounds() {
        let k = Mkey {
            key: 0x1000,
            pd: 1,
            start: 0x7000_0800,
            len: 0x2000,
            rights: Rights::default(),
            translation: Translation::Mtt {
                log_page: 12,
                pages: vec![0xa000, 0x5000, 0x6000, NOT_PRESENT],
            },
            free: false,
            umr_en: false,
            xlt_octowords: 2,
        };
        // 0x7000_0800 is offset 0x800 in page 0.
        assert_eq!(k.translate(0x7000_0800, 0x10), Ok(vec![(0xa800, 0x10)]));
        assert_eq!(
            k.translate(0x7000_0ff0, 0x20),
            Ok(vec![(0xaff0, 0x10), (0x5000, 0x10)])
        );
        // Pages 1 and 2 are contiguous: one piece.
        assert_eq!(k.translate(0x7000_1ff0, 0x20), Ok(vec![(0x5ff0, 0x20)]));
        assert_eq!(k.translate(0x7000_07ff, 1), Err(KeyFault::Bounds));
        assert_eq!(k.translate(0x7000_2800, 1), Err(KeyFault::Bounds));
        // A page whose entry is not present faults even inside the key's range.
        let k = Mkey { len: 0x4000, ..k };
        assert_eq!(k.translate(0x7000_2800, 1), Ok(vec![(0x6800, 1)]));
        assert_eq!(k.translate(0x7000_3800, 1), Err(KeyFault::Bounds));
    }
}
