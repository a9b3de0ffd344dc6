//! The command trace: every command the model executed, with its result, in order. Printing it
//! gives the same view as Linux's `mlx5_core` command tracing, for side-by-side comparison.
//! And the event log: what the model observed or did (register writes, EQEs, interrupts, DMA
//! faults). Each keeps its most recent [`LOG_LIMIT`] entries.

use std::collections::VecDeque;
use std::fmt;

use bareverbs_firmware_cmd::{CmdStatus, DeliveryStatus, Opcode};

/// One executed command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    /// Command queue slot.
    pub slot: u32,
    /// Opcode.
    pub opcode: Opcode,
    /// Opcode modifier.
    pub op_mod: u16,
    /// Delivery status.
    pub delivery: DeliveryStatus,
    /// Command status (meaningful when delivery is OK).
    pub status: CmdStatus,
    /// Syndrome.
    pub syndrome: u32,
}

impl fmt::Display for TraceEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "slot {:2} {:<24} op_mod {:#06x} ",
            self.slot, self.opcode, self.op_mod
        )?;
        if self.delivery != DeliveryStatus::Ok {
            write!(f, "delivery error: {}", self.delivery)
        } else if self.status == CmdStatus::Ok {
            f.write_str("OK")
        } else {
            write!(f, "{} syndrome {:#010x}", self.status, self.syndrome)
        }
    }
}

/// Something the model observed or did, in order: for asserting the order of events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelEvent {
    /// The driver wrote a BAR register.
    MmioWrite {
        /// BAR0 offset.
        offset: usize,
        /// Value in host order.
        value: u64,
        /// Width in bytes.
        width: u8,
    },
    /// A command completed.
    Command(TraceEntry),
    /// The model wrote an EQE.
    Eqe {
        /// EQ number.
        eqn: u8,
        /// Event type.
        event_type: u8,
    },
    /// The model raised an MSI-X vector.
    Interrupt(u16),
    /// A DMA access faulted.
    DmaFault(crate::dma::DmaFault),
}

/// How many entries each of the model's logs keeps (commands, events, DMA faults): every
/// doorbell is an event, and a driver under test may fault or issue commands without end, so a
/// model that runs for long (behind its vfio-user server, a benchmark) would otherwise grow
/// without bound.
pub const LOG_LIMIT: usize = 1 << 16;

/// A log of the model's most recent entries, oldest first: at most [`LOG_LIMIT`], the oldest
/// dropped (and counted) to make room. Entries are numbered from 0 in the order they were
/// recorded, dropped ones included, so a reader can ask for what came after the last entry
/// it saw ([`Self::since`]).
#[derive(Clone, Debug)]
pub(crate) struct RecentLog<T> {
    kept: VecDeque<T>,
    dropped: u64,
}

impl<T> Default for RecentLog<T> {
    fn default() -> Self {
        RecentLog {
            kept: VecDeque::new(),
            dropped: 0,
        }
    }
}

impl<T: Clone> RecentLog<T> {
    /// Records `e`, dropping the oldest entry when the log is full.
    pub(crate) fn push(&mut self, e: T) {
        if self.kept.len() >= LOG_LIMIT {
            self.kept.pop_front();
            self.dropped += 1;
        }
        self.kept.push_back(e);
    }

    /// The entries kept, oldest first.
    pub(crate) fn to_vec(&self) -> Vec<T> {
        self.kept.iter().cloned().collect()
    }

    /// Entries dropped to keep the log bounded.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Entries recorded so far, dropped ones included: the number the next one gets.
    pub(crate) fn recorded(&self) -> u64 {
        self.dropped + self.kept.len() as u64
    }

    /// The entries kept that were recorded as number `n` or later, oldest first (those
    /// already dropped are gone).
    pub(crate) fn since(&self, n: u64) -> impl Iterator<Item = &T> {
        let skip = n.saturating_sub(self.dropped);
        self.kept
            .iter()
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
    }
}

/// What the model records as it runs.
#[derive(Default)]
pub(crate) struct Logs {
    /// Every command executed, with its result.
    pub(crate) trace: RecentLog<TraceEntry>,
    /// What the model observed or did, in order.
    pub(crate) events: RecentLog<ModelEvent>,
    /// DMA accesses that faulted.
    pub(crate) dma_faults: RecentLog<crate::dma::DmaFault>,
}

impl Logs {
    /// Records a DMA fault, in the fault log and the event log, with a warning.
    pub(crate) fn dma_fault(&mut self, f: crate::dma::DmaFault) {
        log::warn!("model: {f}");
        self.dma_faults.push(f);
        self.events.push(ModelEvent::DmaFault(f));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_keeps_the_most_recent_entries_and_counts_the_rest() {
        let mut log = RecentLog::default();
        let total = LOG_LIMIT + 10;
        for v in 0..total {
            log.push(ModelEvent::Interrupt(v as u16));
        }
        let kept = log.to_vec();
        assert_eq!(kept.len(), LOG_LIMIT);
        assert_eq!(log.dropped(), 10);
        assert_eq!(log.recorded(), total as u64);
        assert_eq!(kept.first(), Some(&ModelEvent::Interrupt(10)));
        assert_eq!(
            kept.last(),
            Some(&ModelEvent::Interrupt((total - 1) as u16))
        );
    }

    #[test]
    fn a_reader_gets_what_came_after_the_last_entry_it_saw() {
        let mut log = RecentLog::default();
        log.push(1u32);
        log.push(2);
        let seen = log.recorded();
        assert_eq!(log.since(seen).count(), 0);
        log.push(3);
        assert_eq!(log.since(seen).copied().collect::<Vec<_>>(), [3]);
        assert_eq!(log.since(0).copied().collect::<Vec<_>>(), [1, 2, 3]);
        // Past the end (a log that a reset emptied): nothing.
        assert_eq!(log.since(10).count(), 0);
        // Once entries are dropped, numbering goes on where it was.
        for v in 4..(LOG_LIMIT as u32 + 8) {
            log.push(v);
        }
        let n = log.recorded();
        assert_eq!(log.dropped(), 7);
        assert_eq!(
            log.since(n - 2).copied().collect::<Vec<_>>(),
            [n as u32 - 1, n as u32]
        );
        assert_eq!(log.since(0).next(), Some(&8));
    }
}
