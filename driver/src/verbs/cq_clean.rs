//! Completions of a destroyed or reset QP removed from its CQs, so that a later QP given the
//! same number (the device reuses them) never sees them (rdma-core 56 providers/mlx5
//! `__mlx5_cq_clean`, called on destroy and on the move to RESET).
//!
//! rdma-core walks the CQ ring while holding the CQ's lock. Here a `Qp` does not hold its
//! CQs, so the cleaning is done by the CQ itself, exactly: when the QP goes, QUERY_CQ reads
//! each CQ's `producer_counter` (every CQE of that QP was written before its DESTROY_QP /
//! 2RST_QP completed, so all of them are before that count) and the pair (QPN, count) is
//! handed to the CQ through the device; the CQ's next poll drops that QPN's CQEs before the
//! count, and no other. A device-wide epoch tells a CQ, in one load, that something is
//! waiting for it.

use core::sync::atomic::Ordering;

use bareverbs_firmware_cmd::commands::QueryCq;
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, View};
use bareverbs_hal::Hal;

use crate::device::{input, Device};
use crate::error::Error;

use crate::wq::cq_tables::{add, Purges};

impl<H: Hal> Device<H> {
    /// CQ `cqn`'s producer counter (QUERY_CQ `cq_context.producer_counter`).
    fn cq_producer(&self, cqn: u32) -> Result<u32, Error> {
        let mut i = [0u8; QueryCqIn::BYTES];
        input::<QueryCq>(&mut i)?.set(query_cq_in::cqn, cqn);
        let mut o = [0u8; QueryCqOut::BYTES];
        self.exec::<QueryCq>(&mut i, &mut o)?;
        let v = View::<QueryCqOut>::new_checked(&o)?;
        Ok(v.sub(query_cq_out::cq_context).get32(cqc::producer_counter))
    }

    /// QP `qpn` is gone (destroyed, or moved to RESET): its completions still in `cqns` are
    /// to be dropped by those CQs. Failures are logged: the CQEs then stay (as before).
    pub(crate) fn purge_qp_completions(&self, qpn: u32, cqns: [u32; 2]) {
        let distinct = if cqns[0] == cqns[1] {
            &cqns[..1]
        } else {
            &cqns[..]
        };
        for &cqn in distinct {
            let until = match self.cq_producer(cqn) {
                Ok(p) => p,
                Err(e) => {
                    warn!("QUERY_CQ {}: {}; completions of QP {} stay", cqn, e, qpn);
                    continue;
                }
            };
            let mut ctl = self.ctl.lock();
            let mut list = ctl.cq_purges.remove(&cqn).unwrap_or_default();
            if !add(&mut list, qpn, until) {
                warn!(
                    "CQ {}: too many QPs to clean; completions of QP {} stay",
                    cqn, qpn
                );
            }
            if ctl.cq_purges.insert(cqn, list).is_err() {
                warn!(
                    "CQ table full; completions of QP {} stay in CQ {}",
                    qpn, cqn
                );
            }
        }
        self.purge_epoch.fetch_add(1, Ordering::Release);
    }

    /// Takes what is waiting for CQ `cqn` into `into`.
    pub(crate) fn take_purges(&self, cqn: u32, into: &mut Purges) {
        let Some(list) = self.ctl.lock().cq_purges.remove(&cqn) else {
            return;
        };
        for (qpn, until) in list {
            if !add(into, qpn, until) {
                warn!(
                    "CQ {}: too many QPs to clean; completions of QP {} stay",
                    cqn, qpn
                );
            }
        }
    }
}
