//! The command trace: every command the model executed, with its result, in order. Printing it
//! gives the same view as Linux's `mlx5_core` command tracing, for side-by-side comparison.
//! And the event log: what the model observed or did (register writes, EQEs, interrupts, DMA
//! faults), the most recent [`EVENT_LOG_LIMIT`] of them.

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

/// How many events the model keeps ([`Model::events`](crate::sim_hal::Model::events)): every doorbell is one, so a
/// model that runs for long (behind its vfio-user server, a benchmark) would otherwise grow
/// without bound.
pub const EVENT_LOG_LIMIT: usize = 1 << 16;

/// The model's recent events, oldest first: at most [`EVENT_LOG_LIMIT`], the oldest dropped
/// (and counted) to make room.
#[derive(Clone, Debug, Default)]
pub(crate) struct EventLog {
    kept: VecDeque<ModelEvent>,
    dropped: u64,
}

impl EventLog {
    /// Records `e`, dropping the oldest event when the log is full.
    pub(crate) fn push(&mut self, e: ModelEvent) {
        if self.kept.len() >= EVENT_LOG_LIMIT {
            self.kept.pop_front();
            self.dropped += 1;
        }
        self.kept.push_back(e);
    }

    /// The events kept, oldest first.
    pub(crate) fn to_vec(&self) -> Vec<ModelEvent> {
        self.kept.iter().cloned().collect()
    }

    /// Events dropped to keep the log bounded.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_log_keeps_the_most_recent_events_and_counts_the_rest() {
        let mut log = EventLog::default();
        let total = EVENT_LOG_LIMIT + 10;
        for v in 0..total {
            log.push(ModelEvent::Interrupt(v as u16));
        }
        let kept = log.to_vec();
        assert_eq!(kept.len(), EVENT_LOG_LIMIT);
        assert_eq!(log.dropped(), 10);
        assert_eq!(kept.first(), Some(&ModelEvent::Interrupt(10)));
        assert_eq!(
            kept.last(),
            Some(&ModelEvent::Interrupt((total - 1) as u16))
        );
    }
}
