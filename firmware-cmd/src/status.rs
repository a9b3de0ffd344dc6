//! Command results: delivery status (could firmware take the command at all), command status
//! (did it succeed) and the 32-bit syndrome (mlx5-reference 02 §7.1, §8, §9).

use core::fmt;

crate::enum_with_unknown! {
    /// Command status, output byte 0 (Linux `MLX5_CMD_STAT_*`).
    pub enum CmdStatus(u8) {
        /// Success.
        Ok = 0x00 => "OK",
        /// Firmware internal error.
        InternalError = 0x01 => "internal error",
        /// Unknown or unsupported opcode / op_mod.
        BadOperation = 0x02 => "bad operation",
        /// A parameter is out of range or inconsistent.
        BadParameter = 0x03 => "bad parameter",
        /// The device is not in a state that allows the command.
        BadSystemState = 0x04 => "bad system state",
        /// A named resource does not exist.
        BadResource = 0x05 => "bad resource",
        /// The resource is in use.
        ResourceBusy = 0x06 => "resource busy",
        /// Firmware is not ready.
        NotReady = 0x07 => "FW not ready",
        /// A limit was exceeded.
        LimitsExceeded = 0x08 => "limits exceeded",
        /// The resource is in the wrong state for the command.
        BadResourceState = 0x09 => "bad resource state",
        /// An index is out of range.
        BadIndex = 0x0a => "bad index",
        /// Firmware has no resources left (often: it needs more pages).
        NoResources = 0x0f => "no resources",
        /// The QP is in the wrong state.
        BadQpState = 0x10 => "bad QP state",
        /// Bad packet (discarded).
        BadPacket = 0x30 => "bad packet (discarded)",
        /// Too many outstanding CQEs for the new size.
        BadSizeOutstandingCqes = 0x40 => "bad size too many outstanding CQEs",
        /// The input length is too short for the command.
        BadInputLength = 0x50 => "bad input length",
        /// The output length is too short for the command.
        BadOutputLength = 0x51 => "bad output length",
    }
}

crate::enum_with_unknown! {
    /// Delivery status, command entry byte 0x3f bits 7:1 (Linux `MLX5_CMD_DELIVERY_STAT_*`).
    pub enum DeliveryStatus(u8) {
        /// Delivered.
        Ok = 0x0 => "no errors",
        /// Signature mismatch.
        SignatureError = 0x1 => "signature error",
        /// Token mismatch between entry and mailboxes.
        TokenError = 0x2 => "token error",
        /// Mailbox block numbers out of sequence.
        BadBlockNumber = 0x3 => "bad block number",
        /// Output mailbox pointer misaligned.
        OutputPointerAlignment = 0x4 => "output pointer not aligned to block size",
        /// Input mailbox pointer misaligned.
        InputPointerAlignment = 0x5 => "input pointer not aligned to block size",
        /// Firmware internal error.
        FirmwareError = 0x6 => "firmware internal error",
        /// Input length inconsistent with the mailbox chain.
        InputLength = 0x7 => "command input length error",
        /// Output length inconsistent with the mailbox chain.
        OutputLength = 0x8 => "command output length error",
        /// Reserved fields not cleared.
        ReservedNotCleared = 0x9 => "reserved fields not cleared",
        /// Bad command descriptor type.
        BadDescriptor = 0x10 => "bad command descriptor type",
    }
}

/// The 32-bit firmware syndrome of a failed command (output bytes 4–7).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Syndrome(pub u32);

impl fmt::Debug for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Syndrome({:#010x})", self.0)
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_values_survive_a_round_trip() {
        assert_eq!(CmdStatus::from(0x51), CmdStatus::BadOutputLength);
        assert_eq!(CmdStatus::from(0x77), CmdStatus::Unknown(0x77));
        assert_eq!(u8::from(CmdStatus::Unknown(0x77)), 0x77);
        assert_eq!(DeliveryStatus::from(0x10), DeliveryStatus::BadDescriptor);
        assert_eq!(
            std::format!("{}", CmdStatus::BadParameter),
            "bad parameter (0x3)"
        );
    }
}
