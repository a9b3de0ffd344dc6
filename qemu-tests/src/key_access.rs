//! Where a request's addresses meet memory keys: an lkey or rkey checked (validity, PD,
//! rights, bounds), translated through its MTT or indirect entries, and the data gathered
//! from or scattered to what it names.

use crate::cqe_write::synd;
use crate::data_path::DataPath;
use crate::mkey::{KeyFault, Pieces};
use crate::sge::Sge;

impl DataPath<'_> {
    /// Checks key `key` for PD `pd` and the rights `need` asks, and appends the device-address
    /// pieces of `len` bytes at `addr` through it to `out`.
    pub(crate) fn key_range(
        &self,
        key: u32,
        pd: u32,
        addr: u64,
        len: u64,
        need: impl Fn(&crate::mkey::Rights) -> bool,
        out: &mut Pieces,
    ) -> Result<(), KeyFault> {
        let k = self
            .objects
            .mkeys
            .get(&(key >> 8))
            // A free key grants nothing until a UMR enables it (mkc.free).
            .filter(|k| k.key == key && !k.free)
            .ok_or(KeyFault::Rights)?;
        if k.pd != pd {
            return Err(KeyFault::Pd);
        }
        if !need(&k.rights) {
            return Err(KeyFault::Rights);
        }
        self.resolve_into(k, addr, len, 0, out)
    }

    /// The device-address pieces of `addr..addr + len` through `k`, following an indirect
    /// key's entries into the keys they name, at most `max_indirection` levels deep
    /// (`cmd_hca_cap.max_indirection`). The entries' keys must be live and of the same PD;
    /// the rights checked are the outer key's (the indirect key is what the request names).
    pub(crate) fn resolve_into(
        &self,
        k: &crate::mkey::Mkey,
        addr: u64,
        len: u64,
        depth: u64,
        out: &mut Pieces,
    ) -> Result<(), KeyFault> {
        if !k.translation.is_indirect() {
            return k.translate_into(addr, len, out);
        }
        let end = addr.checked_add(len).ok_or(KeyFault::Bounds)?;
        if addr < k.start || end > k.start.saturating_add(k.len) {
            return Err(KeyFault::Bounds);
        }
        let Some(pieces) = k.translation.indirect_pieces(addr - k.start, len) else {
            return k.translate_into(addr, len, out);
        };
        if depth >= self.cap(bareverbs_firmware_cmd::ifc::cmd_hca_cap::max_indirection) {
            return Err(KeyFault::Bounds);
        }
        for (key, a, n) in pieces? {
            let inner = self
                .objects
                .mkeys
                .get(&(key >> 8))
                .filter(|i| i.key == key && !i.free)
                .ok_or(KeyFault::Rights)?;
            if inner.pd != k.pd {
                return Err(KeyFault::Pd);
            }
            self.resolve_into(inner, a, n, depth + 1, out)?;
        }
        Ok(())
    }

    /// Appends the bytes `sges` name (through their lkeys, in PD `pd`) to `out`; a DMA fault
    /// is recorded.
    pub(crate) fn gather_sges(
        &mut self,
        pd: u32,
        sges: &[Sge],
        out: &mut Vec<u8>,
    ) -> Result<(), u8> {
        self.read_sges(pd, sges, out).map_err(|(syndrome, fault)| {
            if let Some(f) = fault {
                self.record_fault(f);
            }
            syndrome
        })
    }

    /// [`Self::gather_sges`] through a shared borrow, so the requester can gather while it
    /// holds its QP: Err carries the syndrome and the DMA fault, if one, for the caller to
    /// record.
    pub(crate) fn read_sges(
        &self,
        pd: u32,
        sges: &[Sge],
        out: &mut Vec<u8>,
    ) -> Result<(), (u8, Option<crate::dma::DmaFault>)> {
        let mut pieces = Pieces::new();
        for s in sges {
            pieces.clear();
            self.key_range(s.lkey, pd, s.addr, s.len.into(), |_| true, &mut pieces)
                .map_err(|_| (synd::LOCAL_PROT, None))?;
            for &(a, n) in &pieces {
                self.dma
                    .read_append(a, n as usize, out)
                    .map_err(|f| (synd::LOCAL_PROT, Some(f)))?;
            }
        }
        Ok(())
    }

    /// Scatters `data` over `sges` (local write required). Err(LOCAL_LENGTH) when it does not
    /// fit, Err(LOCAL_PROT) on a key problem.
    pub(crate) fn scatter(&self, pd: u32, sges: &[Sge], skip: u64, data: &[u8]) -> Result<(), u8> {
        let room: u64 = sges.iter().map(|s| u64::from(s.len)).sum();
        if skip + data.len() as u64 > room {
            return Err(synd::LOCAL_LENGTH);
        }
        let mut at = 0usize;
        let mut skip = skip;
        for s in sges {
            let len = u64::from(s.len);
            if skip >= len {
                skip -= len;
                continue;
            }
            let n = ((len - skip) as usize).min(data.len() - at);
            if n == 0 {
                break;
            }
            let mut pieces = Pieces::new();
            let at_addr = s.addr.checked_add(skip).ok_or(synd::LOCAL_PROT)?;
            self.key_range(
                s.lkey,
                pd,
                at_addr,
                n as u64,
                |r| r.local_write,
                &mut pieces,
            )
            .map_err(|_| synd::LOCAL_PROT)?;
            for &(a, l) in &pieces {
                self.dma
                    .write(a, &data[at..at + l as usize])
                    .map_err(|_| synd::LOCAL_PROT)?;
                at += l as usize;
            }
            skip = 0;
        }
        Ok(())
    }
}
