//! CQs dropped while a QP (or an XRC SRQ) still completes into them: the device keeps writing
//! there, so the CQ cannot be destroyed or its memory freed. Instead of leaking it, the driver
//! keeps it, says so (a warning and [`Device::orphaned_cqs`]), and destroys it when its last
//! user goes (ibverbs refuses `ibv_destroy_cq` with EBUSY while a QP uses the CQ; a Rust drop
//! cannot be refused).

use bareverbs_firmware_cmd::commands::DestroyCq;
use bareverbs_firmware_cmd::ifc::{destroy_cq_in, DestroyCqIn, DestroyCqOut};
use bareverbs_firmware_cmd::Layout;
use bareverbs_hal::Hal;

use crate::device::{input, Device};

impl<H: Hal> Device<H> {
    /// CQs dropped while a QP still completed into them, kept until their last user is
    /// destroyed.
    pub fn orphaned_cqs(&self) -> usize {
        self.ctl.lock().cq_orphans.len()
    }

    /// Destroys the orphaned CQs among `cqns` that no QP or XRC SRQ uses any more.
    pub(crate) fn reap_orphan_cqs(&self, cqns: &[u32]) {
        for &cqn in cqns {
            let orphan = {
                let mut ctl = self.ctl.lock();
                if ctl.cq_users.contains_key(&cqn) {
                    continue;
                }
                ctl.cq_orphans.remove(&cqn)
            };
            let Some(orphan) = orphan else {
                continue;
            };
            let mut i = [0u8; DestroyCqIn::BYTES];
            let mut o = [0u8; DestroyCqOut::BYTES];
            let r = input::<DestroyCq>(&mut i)
                .map(|mut v| {
                    v.set(destroy_cq_in::cqn, cqn);
                })
                .and_then(|()| self.exec::<DestroyCq>(&mut i, &mut o));
            self.ctl.lock().cq_purges.remove(&cqn);
            match r {
                // The device no longer writes it: its memory is freed here.
                Ok(()) => drop(orphan),
                Err(e) => {
                    warn!(
                        "DESTROY_CQ {} (dropped while in use): {}; leaking it",
                        cqn, e
                    );
                    orphan.leak();
                }
            }
        }
    }
}
