//! Port state as ibverbs reports it, from QUERY_HCA_VPORT_CONTEXT (InfiniBand) or
//! QUERY_VPORT_STATE (Ethernet) (mlx5-reference 06 §6).

use core::fmt;

use crate::caps::LinkLayer;

/// Logical port state (`enum ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PortState {
    /// No state change.
    Nop,
    /// Link down.
    Down,
    /// Link up, not configured.
    Init,
    /// Configured, not yet active.
    Armed,
    /// Active.
    Active,
    /// Active, deferred.
    ActiveDefer,
    /// A value this build does not know.
    Unknown(u8),
}

impl From<u8> for PortState {
    fn from(v: u8) -> Self {
        match v {
            0 => PortState::Nop,
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            n => PortState::Unknown(n),
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, n) = match *self {
            PortState::Nop => ("PORT_NOP", 0),
            PortState::Down => ("PORT_DOWN", 1),
            PortState::Init => ("PORT_INIT", 2),
            PortState::Armed => ("PORT_ARMED", 3),
            PortState::Active => ("PORT_ACTIVE", 4),
            PortState::ActiveDefer => ("PORT_ACTIVE_DEFER", 5),
            PortState::Unknown(n) => ("PORT_UNKNOWN", n),
        };
        write!(f, "{name} ({n})")
    }
}

/// One port's state and addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PortInfo {
    /// Port number (1-based).
    pub port: u8,
    /// Logical state.
    pub state: PortState,
    /// Physical state (IB PortPhysicalState: 5 = LinkUp).
    pub phys_state: u8,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// LID (InfiniBand).
    pub lid: u16,
    /// Subnet manager LID.
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Subnet manager SL.
    pub sm_sl: u8,
    /// Port GUID.
    pub port_guid: u64,
    /// Node GUID.
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// PortInfo CapabilityMask.
    pub cap_mask: u32,
}
