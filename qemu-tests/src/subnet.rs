//! What changes on the model's ports — the link going up or down, and what a subnet manager
//! sets — each with the port-change event the HCA raises for it (the SM sets LIDs, P_Key
//! tables and GUIDs with SubnSet(PortInfo, P_KeyTable, GUIDInfo); mlx5 PORT_CHANGE subtypes LID, PKEY, GUID and CLIENT_REREG, which
//! Linux 6.12 mlx5_ib `handle_port_change` reports as IB_EVENT_LID_CHANGE,
//! IB_EVENT_PKEY_CHANGE, IB_EVENT_GID_CHANGE and IB_EVENT_CLIENT_REREGISTER).
//!
//! The model has no SM of its own: a test (or the vfio-user server's owner) plays the SM
//! through these calls. What they change is what the model then reports: PortInfo and
//! QUERY_HCA_VPORT_CONTEXT (LID), the P_KeyTable MAD, the GUIDInfo MAD and
//! QUERY_HCA_VPORT_GID (alias GUIDs after the port GUID), and the fabric's routing by LID.

use bareverbs_firmware_cmd::ifc::{event_type, port_change_subtype};

use crate::hca::Hca;

/// The default P_Key, full member, in entry 0 of every port's table until an SM changes it.
pub const DEFAULT_PKEY: u16 = 0xffff;

impl Hca {
    fn port_change(&mut self, port: u8, subtype: u8) {
        let mut data = [0u8; 28];
        data[8] = port << 4;
        self.post_event(event_type::PORT_CHANGE, subtype, data);
    }

    /// The SM gives the HCA new LIDs: port n gets `base + ((n - 1) << lmc)`, the fabric routes
    /// them here from now on, and each port raises a LID change. `base` must leave room for
    /// the ports' LIDs below the multicast range (0xC000); false (nothing changed) otherwise.
    pub fn assign_lids(&mut self, base: u16) -> bool {
        let shift = self.cfg.lmc.min(7);
        let span = u16::from(self.cfg.num_ports) << shift;
        if base == 0 || base.checked_add(span).is_none_or(|end| end > 0xc000) {
            return false;
        }
        let old = self.ports.first().map(|p| p.lid);
        for (i, p) in self.ports.iter_mut().enumerate() {
            p.lid = base + ((i as u16) << shift);
        }
        if let (Some(f), Some(old)) = (self.fabric.as_ref(), old) {
            f.move_lids(old, base);
        }
        for port in 1..=self.cfg.num_ports {
            self.port_change(port, port_change_subtype::LID);
        }
        true
    }

    /// The SM writes `pkey` into entry `index` of port `port`'s P_Key table (0: invalid
    /// entry); the port raises a P_Key change. False (nothing changed) for a port or an index
    /// the device does not have.
    pub fn set_pkey(&mut self, port: u8, index: u16, pkey: u16) -> bool {
        let Some(len) = self.port_attrs(port).map(|p| p.pkey_tbl_len) else {
            return false;
        };
        if usize::from(index) >= len {
            return false;
        }
        self.pkeys.insert((port, index), pkey);
        self.port_change(port, port_change_subtype::PKEY);
        true
    }

    /// Entry `index` of port `port`'s P_Key table.
    pub fn pkey(&self, port: u8, index: u16) -> u16 {
        match self.pkeys.get(&(port, index)) {
            Some(&k) => k,
            None if index == 0 => DEFAULT_PKEY,
            None => 0,
        }
    }

    /// The SM assigns alias GUID `guid` to GID index `index` (1 or more: entry 0 is the port
    /// GUID) of port `port`; the port raises a GID change. False for a port or an index the
    /// device does not have.
    pub fn set_alias_guid(&mut self, port: u8, index: u16, guid: u64) -> bool {
        let Some(len) = self.port_attrs(port).map(|p| p.gid_tbl_len) else {
            return false;
        };
        if index == 0 || usize::from(index) >= len {
            return false;
        }
        self.alias_guids.insert((port, index), guid);
        self.port_change(port, port_change_subtype::GUID);
        true
    }

    /// The GUID of GID index `index` of port `port`: the port GUID at 0, an alias GUID after
    /// it, 0 where none is assigned.
    pub fn gid_guid(&self, port: u8, index: u16) -> u64 {
        match index {
            0 => self.port_attrs(port).map_or(0, |p| p.port_guid),
            i => self.alias_guids.get(&(port, i)).copied().unwrap_or(0),
        }
    }

    /// The SM asks the port's clients to register again (PortInfo ClientReregister); the port
    /// raises client reregistration. False for a port the device lacks.
    pub fn sm_client_reregister(&mut self, port: u8) -> bool {
        if self.port_attrs(port).is_none() {
            return false;
        }
        self.port_change(port, port_change_subtype::CLIENT_REREG);
        true
    }

    /// Port `port` (1-based) goes up or down, with a port-change EQE.
    pub fn set_port(&mut self, port: u8, up: bool) {
        let Some(p) = self.ports.get_mut(usize::from(port).wrapping_sub(1)) else {
            return;
        };
        p.up = up;
        self.post_port_change(port, up);
    }

    /// A port-change EQE for `port`: ACTIVE or DOWN.
    pub(crate) fn post_port_change(&mut self, port: u8, up: bool) {
        let mut data = [0u8; 28];
        data[8] = port << 4;
        let sub = if up {
            bareverbs_firmware_cmd::ifc::port_change_subtype::ACTIVE
        } else {
            bareverbs_firmware_cmd::ifc::port_change_subtype::DOWN
        };
        self.post_event(event_type::PORT_CHANGE, sub, data);
    }
}
