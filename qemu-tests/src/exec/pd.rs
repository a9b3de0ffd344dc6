//! ALLOC/DEALLOC_PD and ALLOC/DEALLOC_TRANSPORT_DOMAIN (mlx5-reference 06 §1, §3).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::CmdStatus;

use super::{fail, input, output, syndrome, CmdResult};
use crate::hca::Hca;

impl Hca {
    pub(super) fn alloc_pd(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        input::<AllocPdIn>(i)?;
        let mut out = output::<AllocPdOut>(o)?;
        self.require_initialized()?;
        let pd = self.objects.next_object();
        self.objects.pds.insert(pd);
        out.set(alloc_pd_out::pd, pd);
        Ok(())
    }

    pub(super) fn dealloc_pd(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DeallocPdIn>(i)?;
        output::<DeallocPdOut>(o)?;
        self.require_initialized()?;
        let pd = v.get32(dealloc_pd_in::pd);
        if !self.objects.pds.contains(&pd) {
            return Err(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT));
        }
        if self.objects.mkeys.values().any(|k| k.pd == pd)
            || self.objects.srqs.values().any(|s| s.pd == pd)
        {
            return Err(fail(CmdStatus::ResourceBusy, syndrome::IN_USE));
        }
        self.objects.pds.remove(&pd);
        Ok(())
    }

    pub(super) fn alloc_transport_domain(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        input::<AllocTransportDomainIn>(i)?;
        let mut out = output::<AllocTransportDomainOut>(o)?;
        self.require_initialized()?;
        let td = self.objects.next_object();
        self.objects.tds.insert(td);
        out.set(alloc_transport_domain_out::transport_domain, td);
        Ok(())
    }

    pub(super) fn dealloc_transport_domain(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DeallocTransportDomainIn>(i)?;
        output::<DeallocTransportDomainOut>(o)?;
        self.require_initialized()?;
        let td = v.get32(dealloc_transport_domain_in::transport_domain);
        if !self.objects.tds.remove(&td) {
            return Err(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT));
        }
        Ok(())
    }
}
