//! ALLOC_UAR / DEALLOC_UAR (mlx5-reference 06 §2).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::CmdStatus;

use super::{fail, input, output, syndrome, CmdResult};
use crate::hca::{Hca, FIRST_UAR};

impl Hca {
    fn last_uar(&self) -> u32 {
        (self.cfg.bar0_size / UAR_PAGE_SIZE) as u32 - 1
    }

    pub(super) fn alloc_uar(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        input::<AllocUarIn>(i)?;
        let mut out = output::<AllocUarOut>(o)?;
        self.require_initialized()?;
        let idx = (FIRST_UAR..=self.last_uar())
            .find(|u| !self.objects.uars.contains(u))
            .ok_or(fail(CmdStatus::NoResources, syndrome::EXHAUSTED))?;
        self.objects.uars.insert(idx);
        out.set(alloc_uar_out::uar, idx);
        Ok(())
    }

    pub(super) fn dealloc_uar(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DeallocUarIn>(i)?;
        output::<DeallocUarOut>(o)?;
        self.require_initialized()?;
        let idx = v.get32(dealloc_uar_in::uar);
        if !self.objects.uars.contains(&idx) {
            return Err(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT));
        }
        if self.objects.eqs.values().any(|e| e.uar == idx) {
            return Err(fail(CmdStatus::ResourceBusy, syndrome::IN_USE));
        }
        self.objects.uars.remove(&idx);
        Ok(())
    }
}
