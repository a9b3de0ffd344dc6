//! Late completions and events (injected faults): CQEs and EQEs the device writes only some
//! time after it produced them, as a slow PCIe write or a busy device would. Order is kept:
//! hardware writes a queue's entries in order, so once one entry of a CQ (or an EQ) is held,
//! the entries after it wait behind it, and all are written once due (`Hca::run_due`, on the
//! model's clock). Counts and the delay come from `Faults::late_cqes`, `late_eqes`,
//! `late_by`: deterministic, so a test or a seeded soak reproduces exactly.

use std::collections::VecDeque;

use crate::clock::SimClock;
use crate::config::Faults;

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

impl LateQueue {
    /// Whether the CQE for `cqn` is held instead of written now: an injected late CQE
    /// (`faults.late_cqes`, taken), or one behind an earlier held CQE of the same CQ.
    pub(crate) fn hold_cqe(
        &mut self,
        faults: &mut Faults,
        clock: &SimClock,
        cqn: u32,
        cqe: [u8; 64],
        solicited: bool,
    ) -> bool {
        let same = |h: &Held| matches!(h, Held::Cqe { cqn: c, .. } if *c == cqn);
        let Some(due_ns) = self.hold_until(same, faults, |f| &mut f.late_cqes, clock) else {
            return false;
        };
        log::warn!("model: a CQE for CQ {cqn:#x} held back");
        self.held.push_back(Held::Cqe {
            due_ns,
            cqn,
            cqe,
            solicited,
        });
        true
    }

    /// As [`LateQueue::hold_cqe`] for an EQE of EQ `eqn` (`faults.late_eqes`).
    pub(crate) fn hold_eqe(
        &mut self,
        faults: &mut Faults,
        clock: &SimClock,
        eqn: u8,
        ty: u8,
        sub_type: u8,
        data: [u8; 28],
    ) -> bool {
        let same = |h: &Held| matches!(h, Held::Eqe { eqn: e, .. } if *e == eqn);
        let Some(due_ns) = self.hold_until(same, faults, |f| &mut f.late_eqes, clock) else {
            return false;
        };
        log::warn!("model: an EQE ({ty:#x}) for EQ {eqn} held back");
        self.held.push_back(Held::Eqe {
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
        faults: &mut Faults,
        armed: impl FnOnce(&mut Faults) -> &mut u32,
        clock: &SimClock,
    ) -> Option<u64> {
        if let Some(h) = self.held.iter().rev().find(|h| same(h)) {
            return Some(h.due_ns());
        }
        let late_by = u64::try_from(faults.late_by.as_nanos()).unwrap_or(u64::MAX);
        let left = armed(faults);
        if *left == 0 {
            return None;
        }
        *left -= 1;
        Some(clock.now_ns().saturating_add(late_by))
    }

    /// The oldest held entry if it is due at `now_ns`, taken off the queue: entries are
    /// written in the order they were produced.
    pub(crate) fn pop_due(&mut self, now_ns: u64) -> Option<Held> {
        if self.held.front().is_some_and(|h| h.due_ns() <= now_ns) {
            self.held.pop_front()
        } else {
            None
        }
    }

    /// Entries held now.
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }
}
