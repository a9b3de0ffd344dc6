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
    /// Indirect (`MLX5_MKC_ACCESS_MODE_KLMS`): the key's bytes are the entries' ranges, one
    /// after the other, each through another key. Loaded by UMR (`umr.rs`).
    Klm(Vec<Klm>),
    /// Indirect, interleaved (a UMR repeat block on a KLM key, rdma-core
    /// `mlx5dv_wr_mr_interleaved`): `repeat_count` rounds, each taking `byte_count` bytes
    /// from every entry in turn, the entry's address moving by its stride each round.
    Interleaved {
        /// Rounds.
        repeat_count: u32,
        /// Entries.
        entries: Vec<RepeatEnt>,
    },
}

/// A KLM entry: `len` bytes at `addr` through key `key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Klm {
    /// Bytes.
    pub len: u32,
    /// Key the range is reached through.
    pub key: u32,
    /// Address in that key.
    pub addr: u64,
}

/// A repeat-block entry (`struct mlx5_wqe_umr_repeat_ent_seg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepeatEnt {
    /// Bytes taken per round.
    pub byte_count: u16,
    /// How far the address moves each round.
    pub stride: u16,
    /// Key the bytes are reached through.
    pub key: u32,
    /// Address of the first round's bytes.
    pub va: u64,
}

/// `(key, address, bytes)`: a piece of an indirect key's bytes, in another key.
pub type KeyPiece = (u32, u64, u64);

/// `(device address, bytes)` pieces of a translated range, merged where they touch; the first
/// four are kept without allocating.
pub(crate) type Pieces = crate::small_list::SmallList<(u64, u64), 4>;

impl Translation {
    /// Whether the key's bytes are other keys' ranges (KLM, interleaved), not memory.
    pub fn is_indirect(&self) -> bool {
        matches!(self, Translation::Klm(_) | Translation::Interleaved { .. })
    }

    /// The `(key, address, bytes)` pieces of an indirect key's bytes `off..off + len` (from
    /// the key's start), or `None` for a direct translation.
    pub fn indirect_pieces(&self, off: u64, len: u64) -> Option<Result<Vec<KeyPiece>, KeyFault>> {
        let mut out = Vec::new();
        let (mut at, end) = (off, off.checked_add(len)?);
        match self {
            Translation::Physical | Translation::Mtt { .. } => return None,
            Translation::Klm(list) => {
                let mut base = 0u64;
                for e in list {
                    let top = base + u64::from(e.len);
                    if at < end && at < top {
                        let n = top.min(end) - at;
                        out.push((e.key, e.addr + (at - base), n));
                        at += n;
                    }
                    base = top;
                }
            }
            Translation::Interleaved {
                repeat_count,
                entries,
            } => {
                let round: u64 = entries.iter().map(|e| u64::from(e.byte_count)).sum();
                if round == 0 {
                    return Some(Err(KeyFault::Bounds));
                }
                while at < end {
                    let (r, mut within) = (at / round, at % round);
                    if r >= u64::from(*repeat_count) {
                        break;
                    }
                    for e in entries {
                        let b = u64::from(e.byte_count);
                        if within < b {
                            let n = (b - within).min(end - at);
                            let addr = e.va + r * u64::from(e.stride) + within;
                            out.push((e.key, addr, n));
                            at += n;
                            break;
                        }
                        within -= b;
                    }
                }
            }
        }
        Some(if at == end {
            Ok(out)
        } else {
            Err(KeyFault::Bounds)
        })
    }
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
    /// An indirect key's pieces are other keys' ranges: [`Translation::indirect_pieces`],
    /// resolved by the caller (`Hca::key_range`); here it is a bounds fault.
    pub fn translate(&self, va: u64, len: u64) -> Result<Vec<(u64, u64)>, KeyFault> {
        let mut out = Pieces::new();
        self.translate_into(va, len, &mut out)?;
        Ok(out.to_vec())
    }

    /// [`Mkey::translate`], appending the pieces to `out`.
    pub(crate) fn translate_into(
        &self,
        va: u64,
        len: u64,
        out: &mut Pieces,
    ) -> Result<(), KeyFault> {
        let end = va.checked_add(len).ok_or(KeyFault::Bounds)?;
        if va < self.start || end > self.start.saturating_add(self.len) {
            return Err(KeyFault::Bounds);
        }
        match &self.translation {
            Translation::Klm(_) | Translation::Interleaved { .. } => Err(KeyFault::Bounds),
            Translation::Physical => {
                out.push((va, len));
                Ok(())
            }
            Translation::Mtt { log_page, pages } => {
                let page = 1u64 << log_page;
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
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tr(k: &Mkey, va: u64, len: u64) -> Result<Vec<(u64, u64)>, KeyFault> {
        k.translate(va, len)
    }

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
        assert_eq!(tr(&k, 0x7000_0800, 0x10), Ok(vec![(0xa800, 0x10)]));
        assert_eq!(
            tr(&k, 0x7000_0ff0, 0x20),
            Ok(vec![(0xaff0, 0x10), (0x5000, 0x10)])
        );
        // Pages 1 and 2 are contiguous: one piece.
        assert_eq!(tr(&k, 0x7000_1ff0, 0x20), Ok(vec![(0x5ff0, 0x20)]));
        assert_eq!(tr(&k, 0x7000_07ff, 1), Err(KeyFault::Bounds));
        assert_eq!(tr(&k, 0x7000_2800, 1), Err(KeyFault::Bounds));
        // A page whose entry is not present faults even inside the key's range.
        let k = Mkey { len: 0x4000, ..k };
        assert_eq!(tr(&k, 0x7000_2800, 1), Ok(vec![(0x6800, 1)]));
        assert_eq!(tr(&k, 0x7000_3800, 1), Err(KeyFault::Bounds));
    }
}
