//! The objects firmware keeps, each table by number: UARs, EQs, PDs, transport domains,
//! memory keys, CQs, QPs and DCTs, XRC domains, shared receive queues, which QP receives from
//! which SRQ, and multicast groups (mlx5-reference 04–05). Commands (`exec/`) create and
//! destroy them; the data path looks them up and moves their counters.

use std::collections::{BTreeMap, BTreeSet};

use crate::cq::Cq;
use crate::eq::Eq;
use crate::mkey::Mkey;
use crate::num_table::NumTable;
use crate::qp::Qp;
use crate::srq::Srq;

/// The object tables of one device.
#[derive(Default)]
pub(crate) struct Objects {
    pub(crate) uars: BTreeSet<u32>,
    pub(crate) eqs: BTreeMap<u8, Eq>,
    pub(crate) pds: BTreeSet<u32>,
    pub(crate) tds: BTreeSet<u32>,
    pub(crate) mkeys: NumTable<Mkey>,
    pub(crate) cqs: NumTable<Cq>,
    /// QPs and DCTs (one number space).
    pub(crate) qps: NumTable<Qp>,
    pub(crate) xrcds: BTreeSet<u32>,
    /// SRQs, XRC SRQs and RMPs: one number space.
    pub(crate) srqs: BTreeMap<u32, Srq>,
    /// QPs receiving from a shared receive queue: QPN → (SRQ number, XRC domain).
    pub(crate) qp_srqs: BTreeMap<u32, (u32, u32)>,
    /// Multicast groups: the UD QPs attached to each MGID (ATTACH_TO_MCG).
    pub(crate) mcgs: BTreeMap<[u8; 16], BTreeSet<u32>>,
    /// The last number given to a PD, transport domain or XRC domain.
    next_object: u32,
}

impl Objects {
    /// A fresh 24-bit number for a PD, transport domain or XRC domain (never 0).
    pub(crate) fn next_object(&mut self) -> u32 {
        self.next_object = (self.next_object % 0x00ff_fffe) + 1;
        self.next_object
    }

    /// A shared receive queue of any kind.
    pub(crate) fn srq(&self, srqn: u32) -> Option<&Srq> {
        self.srqs.get(&srqn)
    }

    /// The shared receive queue (and XRC domain) a QP receives from, if it has one.
    pub(crate) fn qp_srq(&self, qpn: u32) -> Option<(u32, u32)> {
        self.qp_srqs.get(&qpn).copied()
    }

    /// The QPs attached to multicast group `mgid`.
    pub(crate) fn mcg_members(&self, mgid: &[u8; 16]) -> Vec<u32> {
        self.mcgs
            .get(mgid)
            .map(|m| m.iter().copied().collect())
            .unwrap_or_default()
    }
}
