//! Multicast (`ibv_attach_mcast`, `ibv_detach_mcast`): ATTACH_TO_MCG / DETACH_FROM_MCG for UD
//! QPs, with the checks Linux 6.12 ib_core `ib_attach_mcast` makes before any command (a UD
//! QP, a multicast GID, a multicast LID on InfiniBand).

use bareverbs_firmware_cmd::commands::{AttachToMcg, DetachFromMcg};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::Layout;
use bareverbs_hal::Hal;

use crate::device::input;
use crate::error::{Error, Invalid, Limit};
use crate::verbs::qp::Qp;
use crate::verbs::qp_state::QpType;

/// Multicast groups one QP can be attached to at once.
pub const MAX_QP_MCGS: usize = 8;

/// IBA 4.1.1: multicast LIDs are 0xC000–0xFFFE (0xFFFF is the permissive LID).
fn is_multicast_lid(lid: u16) -> bool {
    (0xc000..0xffff).contains(&lid)
}

impl<H: Hal> Qp<'_, '_, H> {
    fn check_mcast(&self, gid: &[u8; 16], lid: u16) -> Result<(), Error> {
        let what = if self.qp_type() != QpType::Ud {
            Invalid::MulticastQpType
        } else if gid[0] != 0xff {
            Invalid::MulticastGid
        } else if !is_multicast_lid(lid) {
            Invalid::MulticastLid
        } else {
            return Ok(());
        };
        Err(Error::InvalidArgument { what })
    }

    /// Attaches this UD QP to the multicast group `gid` / `lid` (`ibv_attach_mcast`): it gets
    /// one copy of each datagram sent to the group, however often it is attached. A QP
    /// attached to a group cannot be destroyed ([`Qp::destroy`] refuses; dropping it detaches
    /// first).
    ///
    /// # Errors
    /// [`Invalid::MulticastQpType`] for a QP that is not UD, [`Invalid::MulticastGid`] for a GID
    /// without the multicast prefix 0xff, [`Invalid::MulticastLid`] for a LID outside
    /// 0xC000–0xFFFE; [`Error::ExceedsLimit`] past [`MAX_QP_MCGS`] groups; a command error.
    pub fn attach_mcast(&mut self, gid: &[u8; 16], lid: u16) -> Result<(), Error> {
        self.check_mcast(gid, lid)?;
        if self.mcgs.contains(gid) {
            return Ok(());
        }
        if self.mcgs.is_full() {
            return Err(Error::ExceedsLimit {
                limit: Limit::MulticastGroups,
                requested: MAX_QP_MCGS as u64 + 1,
                max: MAX_QP_MCGS as u64,
            });
        }
        let mut i = [0u8; AttachToMcgIn::BYTES];
        {
            let mut v = input::<AttachToMcg>(&mut i)?;
            v.set(attach_to_mcg_in::qpn, self.qpn().raw());
            v.bytes_mut(attach_to_mcg_in::multicast_gid)
                .copy_from_slice(gid);
        }
        let mut o = [0u8; AttachToMcgOut::BYTES];
        self.device().exec::<AttachToMcg>(&mut i, &mut o)?;
        // Room was checked above.
        let _ = self.mcgs.push(*gid);
        Ok(())
    }

    /// Detaches this QP from the multicast group `gid` / `lid` (`ibv_detach_mcast`).
    ///
    /// # Errors
    /// As [`Qp::attach_mcast`]; [`Invalid::NotAttached`] for a group the QP is not in; a
    /// command error.
    pub fn detach_mcast(&mut self, gid: &[u8; 16], lid: u16) -> Result<(), Error> {
        self.check_mcast(gid, lid)?;
        let Some(k) = self.mcgs.iter().position(|g| g == gid) else {
            return Err(Error::InvalidArgument {
                what: Invalid::NotAttached,
            });
        };
        self.detach_cmd(gid)?;
        self.mcgs.swap_remove(k);
        Ok(())
    }

    fn detach_cmd(&self, gid: &[u8; 16]) -> Result<(), Error> {
        let mut i = [0u8; DetachFromMcgIn::BYTES];
        {
            let mut v = input::<DetachFromMcg>(&mut i)?;
            v.set(detach_from_mcg_in::qpn, self.qpn().raw());
            v.bytes_mut(detach_from_mcg_in::multicast_gid)
                .copy_from_slice(gid);
        }
        let mut o = [0u8; DetachFromMcgOut::BYTES];
        self.device().exec::<DetachFromMcg>(&mut i, &mut o)
    }

    /// Multicast groups the QP is attached to.
    pub fn mcast_groups(&self) -> &[[u8; 16]] {
        &self.mcgs
    }

    /// Detaches from every group (before the QP is dropped).
    pub(crate) fn detach_all(&mut self) {
        while let Some(gid) = self.mcgs.pop() {
            if let Err(e) = self.detach_cmd(&gid) {
                warn!("DETACH_FROM_MCG {}: {}", self.qpn(), e);
            }
        }
    }
}
