//! A port of the model HCA: its link, its LID, and the traffic through it that the performance
//! management agent (`pma.rs`) reports.

/// Per-port state.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Port {
    pub up: bool,
    pub lid: u16,
    /// Traffic through the port, as the performance management agent reports it.
    pub counters: PortCounters,
}

/// Traffic through one port since the device started (or since a Set cleared it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Payload octets sent.
    pub xmit_bytes: u64,
    /// Payload octets received.
    pub rcv_bytes: u64,
    /// Packets sent.
    pub xmit_packets: u64,
    /// Packets received.
    pub rcv_packets: u64,
}

/// Which way traffic went through a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Traffic {
    /// Sent.
    Xmit,
    /// Received.
    Rcv,
}

impl PortCounters {
    /// Counts `bytes` of payload in `pkts` packets that went `dir`.
    pub(crate) fn count(&mut self, dir: Traffic, bytes: u64, pkts: u32) {
        match dir {
            Traffic::Xmit => {
                self.xmit_bytes = self.xmit_bytes.saturating_add(bytes);
                self.xmit_packets = self.xmit_packets.saturating_add(u64::from(pkts));
            }
            Traffic::Rcv => {
                self.rcv_bytes = self.rcv_bytes.saturating_add(bytes);
                self.rcv_packets = self.rcv_packets.saturating_add(u64::from(pkts));
            }
        }
    }
}
