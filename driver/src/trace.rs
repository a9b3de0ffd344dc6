//! The driver's command trace: the last commands it issued and how each ended, printable for
//! comparison with the model's trace or with Linux's command tracing.

use core::fmt;

use bareverbs_firmware_cmd::Opcode;
use heapless::Deque;

use crate::error::CmdFailure;

/// How many commands the trace keeps.
pub const TRACE_LEN: usize = 128;

/// How a traced command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Outcome {
    /// Success.
    Ok,
    /// Firmware refused it.
    Failed(CmdFailure),
    /// It never completed.
    Timeout,
}

/// One traced command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TraceRecord {
    /// Opcode.
    pub opcode: Opcode,
    /// Opcode modifier.
    pub op_mod: u16,
    /// Result.
    pub outcome: Outcome,
}

impl fmt::Display for TraceRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<24} op_mod {:#06x} ", self.opcode, self.op_mod)?;
        match self.outcome {
            Outcome::Ok => f.write_str("OK"),
            Outcome::Timeout => f.write_str("TIMEOUT"),
            Outcome::Failed(CmdFailure::Delivery(d)) => write!(f, "delivery error: {d}"),
            Outcome::Failed(CmdFailure::Status { status, syndrome }) => {
                write!(f, "{status} syndrome {syndrome:#010x}")
            }
        }
    }
}

/// A ring of the most recent commands.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    records: Deque<TraceRecord, TRACE_LEN>,
    total: u64,
}

impl Trace {
    pub(crate) fn push(&mut self, r: TraceRecord) {
        if self.records.is_full() {
            self.records.pop_front();
        }
        let _ = self.records.push_back(r);
        self.total += 1;
    }

    /// The kept records, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &TraceRecord> {
        self.records.iter()
    }

    /// Commands issued since bring-up began (including those no longer kept).
    pub fn total(&self) -> u64 {
        self.total
    }
}
