//! The subnet management agent behind MAD_IFC: answers the SMPs Linux mlx5_ib sends
//! (NodeInfo, NodeDescription, PortInfo, GUIDInfo, P_KeyTable, Mellanox ExtendedPortInfo)
//! from the model's own port state, which QUERY_HCA_VPORT_CONTEXT reports too
//! (IBA 14.2.5 as Linux `include/rdma/ib_smi.h`, `ib_mad.h` lay it out; mlx5_ib `mad.c`).
//!
//! Facts that are the model's, not hardware's: the capability mask, the VL capability, the
//! node description text, and that a Set is refused (nothing in the model plays a subnet
//! manager; LIDs come from [`ModelConfig`](crate::config::ModelConfig)).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::{View, ViewMut};

use crate::hca::Hca;

/// IEEE vendor id (Mellanox OUI), as QUERY_ADAPTER `ieee_vendor_id` reports it.
pub const IEEE_VENDOR_ID: u32 = 0x0002c9;
/// Default GID prefix (IBA 4.1.1; the model's ports are on the default subnet).
pub const GID_PREFIX: u64 = 0xfe80_0000_0000_0000;
/// The subnet manager's LID the ports report.
pub const SM_LID: u16 = 1;
/// Subnet timeout the ports report (4.096 µs × 2^18).
pub const SUBNET_TIMEOUT: u8 = 18;

/// PortInfo CapabilityMask bits (Linux `enum ib_port_capability_mask_bits`, ib_verbs.h).
pub mod port_cap {
    /// IsSystemImageGUIDSupported.
    pub const SYS_IMAGE_GUID_SUP: u32 = 1 << 11;
    /// IsExtendedSpeedsSupported: LinkSpeedExt* are valid (how mlx5_ib finds EDR).
    pub const EXTENDED_SPEEDS_SUP: u32 = 1 << 14;
}

/// The CapabilityMask the ports advertise, in PortInfo and in `hca_vport_context.cap_mask1`.
pub const CAP_MASK: u32 = port_cap::SYS_IMAGE_GUID_SUP | port_cap::EXTENDED_SPEEDS_SUP;

/// IB link widths (`enum ib_port_width`): 1x and 4x.
pub mod width {
    /// 1x.
    pub const X1: u8 = 1;
    /// 4x.
    pub const X4: u8 = 2;
}

/// IB MTU enum value for 4096 bytes (`IB_MTU_4096`).
pub const MTU_4096: u8 = 5;

/// PortPhysicalState values (IBA 14.2.5.6; what `ibv_devinfo` prints as phys_state).
pub mod phys_state {
    /// Disabled.
    pub const DISABLED: u8 = 3;
    /// LinkUp.
    pub const LINK_UP: u8 = 5;
}

/// Everything the model says about one IB port, in whichever interface it is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttrs {
    /// 1-based port number.
    pub port: u8,
    /// `ib_port_state`: Active when the link is up, Down otherwise.
    pub state: u8,
    /// PortPhysicalState: LinkUp or Disabled.
    pub phys_state: u8,
    /// Base LID.
    pub lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Subnet manager LID.
    pub sm_lid: u16,
    /// Subnet manager SL.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// CapabilityMask.
    pub cap_mask: u32,
    /// GID prefix.
    pub gid_prefix: u64,
    /// Port GUID (GID table entry 0).
    pub port_guid: u64,
    /// Node GUID.
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// GID table entries (`mlx5_get_gid_table_len` of `gid_table_size`).
    pub gid_tbl_len: usize,
    /// P_Key table entries (`mlx5_to_sw_pkey_sz` of `pkey_table_size`).
    pub pkey_tbl_len: usize,
}

impl Hca {
    /// The attributes of port `port` (1-based), or `None` when there is no such port.
    pub(crate) fn port_attrs(&self, port: u8) -> Option<PortAttrs> {
        let p = self.ports.get(usize::from(port).checked_sub(1)?)?;
        let (state, phys) = if p.up {
            (ib_port_state::ACTIVE, phys_state::LINK_UP)
        } else {
            (ib_port_state::DOWN, phys_state::DISABLED)
        };
        // Linux mlx5 driver.h mlx5_get_gid_table_len: 8 << gid_table_size (0 past 4);
        // device.h mlx5_to_sw_pkey_sz: 128 << pkey_table_size (0 past 5).
        let gid_sz = self.cap(cmd_hca_cap::gid_table_size);
        let pkey_sz = self.cap(cmd_hca_cap::pkey_table_size);
        Some(PortAttrs {
            port,
            state,
            phys_state: phys,
            lid: p.lid,
            lmc: self.cfg.lmc,
            sm_lid: SM_LID,
            sm_sl: 0,
            subnet_timeout: SUBNET_TIMEOUT,
            cap_mask: CAP_MASK,
            gid_prefix: GID_PREFIX,
            port_guid: self.cfg.node_guid + u64::from(port),
            node_guid: self.cfg.node_guid,
            sys_image_guid: self.cfg.node_guid,
            gid_tbl_len: if gid_sz > 4 { 0 } else { 8 << gid_sz },
            pkey_tbl_len: if pkey_sz > 5 { 0 } else { 128 << pkey_sz },
        })
    }

    /// The NodeDescription text (up to 64 bytes, NUL-padded).
    pub(crate) fn node_description(&self) -> String {
        format!("MT{} bareverbs model HCA", self.cfg.device_id)
    }

    /// Runs the SMP `mad` arriving on `port` (valid, 1-based) through the agent. Returns the
    /// response MAD, an all-zero MAD when the method wants none (TrapRepress), or [`Discard`]
    /// when the MAD is discarded (not a MAD this agent takes: base version, class, or a
    /// response method).
    pub(crate) fn sma(&self, port: u8, mad: &[u8]) -> Result<[u8; MAD_BYTES], Discard> {
        let smp = View::<Smp>::new_checked(mad).map_err(|_| Discard)?;
        let class = smp.get(ib_smp::mgmt_class) as u8;
        let method = smp.get(ib_smp::method) as u8;
        if smp.get(ib_smp::base_version) != 1
            || (class != mgmt_class::SUBN_LID_ROUTED && class != mgmt_class::SUBN_DIRECTED_ROUTE)
            || method & mgmt_method::RESP != 0
        {
            return Err(Discard);
        }
        let mut resp = [0u8; MAD_BYTES];
        if method == mgmt_method::TRAP_REPRESS {
            // The agent sends no traps, so there is nothing to repress and no response.
            return Ok(resp);
        }
        resp.copy_from_slice(&mad[..MAD_BYTES]);
        let status = {
            let mut r = ViewMut::<Smp>::new_checked(&mut resp).map_err(|_| Discard)?;
            r.bytes_mut(ib_smp::data).fill(0);
            let data = r.bytes_mut(ib_smp::data);
            if smp.get(ib_smp::class_version) != 1 {
                mad_status::BAD_VERSION
            } else if method == mgmt_method::GET {
                self.subn_get(
                    port,
                    smp.get32(ib_smp::attr_id) as u16,
                    smp.get32(ib_smp::attr_mod),
                    data,
                )
            } else if method == mgmt_method::SET {
                // A Set is answered with the attribute as it stays, and refused.
                let st = self.subn_get(
                    port,
                    smp.get32(ib_smp::attr_id) as u16,
                    smp.get32(ib_smp::attr_mod),
                    data,
                );
                if st == mad_status::SUCCESS {
                    mad_status::UNSUPPORTED_METHOD_ATTRIB
                } else {
                    st
                }
            } else {
                mad_status::UNSUPPORTED_METHOD
            }
        };
        let dir = if class == mgmt_class::SUBN_DIRECTED_ROUTE {
            SMP_DIRECTION
        } else {
            0
        };
        ViewMut::<Smp>::new_checked(&mut resp)
            .map_err(|_| Discard)?
            .set(ib_smp::method, mgmt_method::GET_RESP)
            .set(ib_smp::status, status | dir);
        Ok(resp)
    }

    /// SubnGet(`attr`, `attr_mod`) into the zeroed 64-byte `data`; returns the MAD status.
    fn subn_get(&self, port: u8, attr: u16, attr_mod: u32, data: &mut [u8]) -> u16 {
        // PortInfo and ExtendedPortInfo name a port; 0 means the port the SMP arrived on (as
        // Linux's own software agents, qib `subn_get_portinfo`, read IBA 14.2.5.6).
        let named_port = || match attr_mod {
            0 => self.port_attrs(port),
            n => u8::try_from(n).ok().and_then(|n| self.port_attrs(n)),
        };
        let Some(here) = self.port_attrs(port) else {
            return mad_status::INVALID_ATTRIB_VALUE;
        };
        match attr {
            smp_attr::NODE_DESC if attr_mod == 0 => {
                let text = self.node_description();
                let n = text.len().min(data.len());
                data[..n].copy_from_slice(&text.as_bytes()[..n]);
                mad_status::SUCCESS
            }
            smp_attr::NODE_INFO if attr_mod == 0 => {
                self.fill_node_info(&here, data);
                mad_status::SUCCESS
            }
            smp_attr::PORT_INFO => match named_port() {
                Some(p) => {
                    fill_port_info(&p, port, data);
                    mad_status::SUCCESS
                }
                None => mad_status::INVALID_ATTRIB_VALUE,
            },
            smp_attr::EXTENDED_PORT_INFO => match named_port() {
                // No FDR10 (a ConnectX-3 era speed) on the model's EDR ports: all zero.
                Some(_) => mad_status::SUCCESS,
                None => mad_status::INVALID_ATTRIB_VALUE,
            },
            smp_attr::GUID_INFO => {
                let block = attr_mod as usize;
                if block >= here.gid_tbl_len.div_ceil(GUIDS_PER_BLOCK) {
                    return mad_status::INVALID_ATTRIB_VALUE;
                }
                // The port has one GID: entry 0 is the port GUID, the rest are unassigned.
                if block == 0 {
                    data[..8].copy_from_slice(&here.port_guid.to_be_bytes());
                }
                mad_status::SUCCESS
            }
            smp_attr::PKEY_TABLE => {
                let block = attr_mod as usize;
                if block >= here.pkey_tbl_len.div_ceil(PKEYS_PER_BLOCK) {
                    return mad_status::INVALID_ATTRIB_VALUE;
                }
                // Entry 0 is the default P_Key, full member; the rest are invalid (0).
                if block == 0 {
                    data[..2].copy_from_slice(&0xffffu16.to_be_bytes());
                }
                mad_status::SUCCESS
            }
            smp_attr::NODE_DESC | smp_attr::NODE_INFO => mad_status::INVALID_ATTRIB_VALUE,
            _ => mad_status::UNSUPPORTED_METHOD_ATTRIB,
        }
    }

    fn fill_node_info(&self, here: &PortAttrs, data: &mut [u8]) {
        if let Ok(mut v) = ViewMut::<NodeInfo>::new_checked(data) {
            v.set(ib_node_info::base_version, 1u8)
                .set(ib_node_info::class_version, 1u8)
                .set(ib_node_info::node_type, NODE_TYPE_CA)
                .set(ib_node_info::num_ports, self.cfg.num_ports)
                .set(ib_node_info::sys_guid, here.sys_image_guid)
                .set(ib_node_info::node_guid, here.node_guid)
                .set(ib_node_info::port_guid, here.port_guid)
                .set(
                    ib_node_info::partition_cap,
                    u16::try_from(here.pkey_tbl_len).unwrap_or(u16::MAX),
                )
                .set(ib_node_info::device_id, self.cfg.device_id)
                .set(ib_node_info::revision, 0u32)
                .set(ib_node_info::local_port_num, here.port)
                .set(ib_node_info::vendor_id, IEEE_VENDOR_ID);
        }
    }
}

/// NodeInfo NodeType of a channel adapter (`RDMA_NODE_IB_CA`).
const NODE_TYPE_CA: u8 = 1;

/// A MAD the agent does not take; firmware discards it (command status BAD_PKT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Discard;

/// PortInfo of `p` as seen by an SMP arriving on `local_port`: a ConnectX-5 EDR port, 4x
/// wide, MTU 4096.
fn fill_port_info(p: &PortAttrs, local_port: u8, data: &mut [u8]) {
    let Ok(mut v) = ViewMut::<PortInfo>::new_checked(data) else {
        return;
    };
    let up = p.state == ib_port_state::ACTIVE;
    v.set(ib_port_info::gid_prefix, p.gid_prefix)
        .set(ib_port_info::lid, p.lid)
        .set(ib_port_info::sm_lid, p.sm_lid)
        .set(ib_port_info::cap_mask, p.cap_mask)
        .set(ib_port_info::local_port_num, local_port)
        .set(ib_port_info::link_width_enabled, width::X1 | width::X4)
        .set(ib_port_info::link_width_supported, width::X1 | width::X4)
        .set(
            ib_port_info::link_width_active,
            if up { width::X4 } else { 0 },
        )
        // SDR, DDR and QDR as base speeds; EDR through the extended speeds (FDR and EDR).
        .set(ib_port_info::link_speed_supported, 7u8)
        .set(ib_port_info::port_state, p.state)
        .set(ib_port_info::port_phys_state, p.phys_state)
        // LinkDownDefaultState 2: Polling.
        .set(ib_port_info::link_down_default_state, 2u8)
        .set(ib_port_info::lmc, p.lmc)
        .set(ib_port_info::link_speed_active, if up { 4u8 } else { 0 })
        .set(ib_port_info::link_speed_enabled, 7u8)
        .set(ib_port_info::neighbor_mtu, MTU_4096)
        .set(ib_port_info::master_sm_sl, p.sm_sl)
        // VLCap 3: VL0–VL3.
        .set(ib_port_info::vl_cap, 3u8)
        .set(ib_port_info::mtu_cap, MTU_4096)
        .set(ib_port_info::operational_vls, 3u8)
        .set(
            ib_port_info::guid_cap,
            u8::try_from(p.gid_tbl_len).unwrap_or(u8::MAX),
        )
        .set(ib_port_info::subnet_timeout, p.subnet_timeout)
        // LinkSpeedExt: 1 = FDR, 2 = EDR (mlx5_ib mlx5_query_mad_ifc_port).
        .set(
            ib_port_info::link_speed_ext_active,
            if up { 2u8 } else { 0 },
        )
        .set(ib_port_info::link_speed_ext_supported, 3u8)
        .set(ib_port_info::link_speed_ext_enabled, 3u8);
}
