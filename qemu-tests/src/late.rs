//! Late completions and events (injected faults): CQEs and EQEs the device writes only some
//! time after it produced them, as a slow PCIe write or a busy device would. Order is kept:
//! hardware writes a queue's entries in order, so once one entry of a CQ (or an EQ) is held,
//! the entries after it wait behind it, and all are written once due (`Hca::run_due`, on the
//! model's clock). Counts and the delay come from `Faults::late_cqes`, `late_eqes`,
//! `late_by`: deterministic, so a test or a seeded soak reproduces exactly.

use std::collections::VecDeque;

use crate::hca::Hca;

/// One held entry: when it is due, and what to write.
#[derive(Clone, Debug)]
pub(crate) enum Held {
    Cqe {
        due_ns: u64,
        cqn: u32,
        cqe: [u8; 64],
        solicited: bool,
    },
    Eqe {
        due_ns: u64,
        eqn: u8,
        ty: u8,
        sub_type: u8,
        data: [u8; 28],
    },
}

impl Held {
    fn due_ns(&self) -> u64 {
        match self {
            Held::Cqe { due_ns, .. } | Held::Eqe { due_ns, .. } => *due_ns,
        }
    }
}

/// Entries held back, oldest first.
#[derive(Clone, Debug, Default)]
pub(crate) struct LateQueue {
    held: VecDeque<Held>,
}

impl Hca {
    /// Whether the CQE for `cqn` is held instead of written now: an injected late CQE, or
    /// one behind an earlier held CQE of the same CQ.
    pub(crate) fn hold_cqe(&mut self, cqn: u32, cqe: [u8; 64], solicited: bool) -> bool {
        let same = |h: &Held| matches!(h, Held::Cqe { cqn: c, .. } if *c == cqn);
        let Some(due_ns) = self.hold_until(same, |f| &mut f.late_cqes) else {
            return false;
        };
        log::warn!("model: a CQE for CQ {cqn:#x} held back");
        self.late.held.push_back(Held::Cqe {
            due_ns,
            cqn,
            cqe,
            solicited,
        });
        true
    }

    /// As [`Hca::hold_cqe`] for an EQE of EQ `eqn`.
    pub(crate) fn hold_eqe(&mut self, eqn: u8, ty: u8, sub_type: u8, data: [u8; 28]) -> bool {
        let same = |h: &Held| matches!(h, Held::Eqe { eqn: e, .. } if *e == eqn);
        let Some(due_ns) = self.hold_until(same, |f| &mut f.late_eqes) else {
            return false;
        };
        log::warn!("model: an EQE ({ty:#x}) for EQ {eqn} held back");
        self.late.held.push_back(Held::Eqe {
            due_ns,
            eqn,
            ty,
            sub_type,
            data,
        });
        true
    }

    /// When an entry of a queue is due if it is held: behind the queue's last held entry
    /// (`same` picks them), or late by `Faults::late_by` when `armed` counts one more late
    /// entry (taking it); `None` to write it now.
    fn hold_until(
        &mut self,
        same: impl Fn(&Held) -> bool,
        armed: impl FnOnce(&mut crate::config::Faults) -> &mut u32,
    ) -> Option<u64> {
        if let Some(h) = self.late.held.iter().rev().find(|h| same(h)) {
            return Some(h.due_ns());
        }
        let left = armed(&mut self.cfg.faults);
        if *left == 0 {
            return None;
        }
        *left -= 1;
        Some(self.now_ns().saturating_add(self.late_by_ns()))
    }

    /// Writes the held entries that are due, in the order they were produced.
    pub(crate) fn release_late(&mut self) {
        let now = self.now_ns();
        while self.late.held.front().is_some_and(|h| h.due_ns() <= now) {
            let Some(h) = self.late.held.pop_front() else {
                break;
            };
            match h {
                Held::Cqe {
                    cqn,
                    cqe,
                    solicited,
                    ..
                } => {
                    self.write_cqe(cqn, cqe, solicited);
                }
                Held::Eqe {
                    eqn,
                    ty,
                    sub_type,
                    data,
                    ..
                } => {
                    self.write_eqe(eqn, ty, sub_type, data);
                }
            }
        }
    }

    /// Entries held now.
    pub fn late_entries(&self) -> usize {
        self.late.held.len()
    }

    fn late_by_ns(&self) -> u64 {
        u64::try_from(self.cfg.faults.late_by.as_nanos()).unwrap_or(u64::MAX)
    }
}
