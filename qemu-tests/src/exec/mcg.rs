//! Multicast groups: ATTACH_TO_MCG, DETACH_FROM_MCG (mlx5_ifc `attach_to_mcg_in`,
//! `detach_from_mcg_in`; Linux 6.12 mlx5_ib `mlx5_ib_mcg_attach` / `mlx5_ib_mcg_detach`).
//! The groups are per HCA; delivery across the fabric is in `requester.rs`.

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, input, output, syndrome, CmdResult};
use crate::hca::Hca;
use crate::qp::ServiceType;

impl Hca {
    /// The QP and group a multicast command names: a UD QP of this HCA and a multicast GID
    /// (first byte 0xff, IBA 4.1.1).
    fn mcg_args(&self, qpn: u32, gid: &[u8]) -> Result<[u8; 16], crate::exec::Fail> {
        let qp = self
            .objects
            .qps
            .get(&qpn)
            .ok_or(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT))?;
        if qp.st != ServiceType::Ud || gid.first() != Some(&0xff) {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let mut mgid = [0u8; 16];
        mgid.copy_from_slice(gid);
        Ok(mgid)
    }

    /// ATTACH_TO_MCG: QP `qpn` joins group `multicast_gid` (attaching twice keeps one
    /// membership: one copy per message, seed 001 `ibv_attach_mcast`).
    pub(super) fn attach_to_mcg(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<AttachToMcgIn>(i)?;
        output::<AttachToMcgOut>(o)?;
        self.require_initialized()?;
        let qpn = v.get32(attach_to_mcg_in::qpn);
        let mgid = self.mcg_args(qpn, v.bytes(attach_to_mcg_in::multicast_gid))?;
        self.objects.mcgs.entry(mgid).or_default().insert(qpn);
        Ok(())
    }

    /// DETACH_FROM_MCG: QP `qpn` leaves group `multicast_gid`; a QP not in it is refused.
    pub(super) fn detach_from_mcg(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DetachFromMcgIn>(i)?;
        output::<DetachFromMcgOut>(o)?;
        self.require_initialized()?;
        let qpn = v.get32(detach_from_mcg_in::qpn);
        let mgid = self.mcg_args(qpn, v.bytes(detach_from_mcg_in::multicast_gid))?;
        let members = self
            .objects
            .mcgs
            .get_mut(&mgid)
            .ok_or(bad_param(syndrome::OUT_OF_RANGE))?;
        if !members.remove(&qpn) {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        if members.is_empty() {
            self.objects.mcgs.remove(&mgid);
        }
        Ok(())
    }

    /// A destroyed QP leaves every group.
    pub(super) fn detach_qp_mcgs(&mut self, qpn: u32) {
        self.objects.mcgs.retain(|_, m| {
            m.remove(&qpn);
            !m.is_empty()
        });
    }
}
