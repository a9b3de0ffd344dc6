//! ALLOC/DEALLOC_XRCD: XRC domains, numbered from the same 24-bit space as PDs (Linux 6.12
//! mlx5_ifc.h `alloc_xrcd_in/out`, `dealloc_xrcd_in/out`; mlx5_ib main.c
//! `mlx5_ib_dev_res_init` allocates two at probe).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::CmdStatus;

use super::{fail, input, output, syndrome, CmdResult};
use crate::hca::Hca;

impl Hca {
    pub(super) fn alloc_xrcd(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        input::<AllocXrcdIn>(i)?;
        let mut out = output::<AllocXrcdOut>(o)?;
        self.require_initialized()?;
        if self.cap(cmd_hca_cap::xrc) == 0 {
            return Err(fail(CmdStatus::BadOperation, syndrome::BAD_OPCODE));
        }
        if self.objects.xrcds.len() as u64 >= 1u64 << self.cap(cmd_hca_cap::log_max_xrcd) {
            return Err(fail(CmdStatus::NoResources, syndrome::EXHAUSTED));
        }
        let xrcd = self.objects.next_object();
        self.objects.xrcds.insert(xrcd);
        out.set(alloc_xrcd_out::xrcd, xrcd);
        Ok(())
    }

    /// Refused while an XRC SRQ, an SRQ or a QP receiving from one names the domain.
    pub(super) fn dealloc_xrcd(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DeallocXrcdIn>(i)?;
        output::<DeallocXrcdOut>(o)?;
        self.require_initialized()?;
        let xrcd = v.get32(dealloc_xrcd_in::xrcd);
        if !self.objects.xrcds.contains(&xrcd) {
            return Err(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT));
        }
        if self.objects.srqs.values().any(|s| s.xrcd == Some(xrcd))
            || self.objects.qp_srqs.values().any(|&(_, x)| x == xrcd)
        {
            return Err(fail(CmdStatus::ResourceBusy, syndrome::IN_USE));
        }
        self.objects.xrcds.remove(&xrcd);
        Ok(())
    }
}
