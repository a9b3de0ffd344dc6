//! The command trace: every command the model executed, with its result, in order. Printing it
//! gives the same view as Linux's `mlx5_core` command tracing, for side-by-side comparison.

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
