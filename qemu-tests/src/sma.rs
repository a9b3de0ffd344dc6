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
                // Entry 0 is the port GUID, then the alias GUIDs an SM assigned (0: none).
                for (k, e) in data.chunks_exact_mut(8).take(GUIDS_PER_BLOCK).enumerate() {
                    let index = (block * GUIDS_PER_BLOCK + k) as u16;
                    e.copy_from_slice(&self.gid_guid(here.port, index).to_be_bytes());
                }
                mad_status::SUCCESS
            }
            smp_attr::PKEY_TABLE => {
                let block = attr_mod as usize;
                if block >= here.pkey_tbl_len.div_ceil(PKEYS_PER_BLOCK) {
                    return mad_status::INVALID_ATTRIB_VALUE;
                }
                // Entry 0 is the default P_Key, full member, the rest invalid (0), until an SM
                // sets them.
                for (k, e) in data.chunks_exact_mut(2).take(PKEYS_PER_BLOCK).enumerate() {
                    let index = (block * PKEYS_PER_BLOCK + k) as u16;
                    e.copy_from_slice(&self.pkey(here.port, index).to_be_bytes());
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bareverbs_firmware_cmd::layout::Layout;
    use bareverbs_firmware_cmd::CmdStatus;

    use super::*;
    use crate::clock::SimClock;
    use crate::config::ModelConfig;
    use crate::exec::Fail;
    use crate::hca::HcaState;
    use crate::memory::HostMemory;

    fn hca(cfg: ModelConfig) -> Hca {
        let mut h = Hca::new(
            cfg,
            Arc::new(SimClock::virtual_clock()),
            Arc::new(HostMemory::new()),
        );
        h.state = HcaState::Initialized;
        h
    }

    /// An SMP as Linux `ib_init_query_mad` builds it, with a TID to see echoed.
    fn smp(class: u8, method: u8, attr: u16, attr_mod: u32) -> [u8; MAD_BYTES] {
        let mut m = [0u8; MAD_BYTES];
        ViewMut::<Smp>::new_checked(&mut m)
            .unwrap()
            .set(ib_smp::base_version, 1u8)
            .set(ib_smp::mgmt_class, class)
            .set(ib_smp::class_version, 1u8)
            .set(ib_smp::method, method)
            .set(ib_smp::tid, 0x1234_5678_9abc_def0u64)
            .set(ib_smp::attr_id, attr)
            .set(ib_smp::attr_mod, attr_mod);
        m
    }

    /// MAD_IFC with `op_mod` on `port`: the response MAD, or the command's failure.
    fn mad_ifc(h: &mut Hca, op_mod: u16, port: u8, mad: &[u8]) -> Result<Vec<u8>, Fail> {
        let mut i = vec![0u8; MadIfcIn::BYTES];
        {
            let mut v = ViewMut::<MadIfcIn>::new_checked(&mut i).unwrap();
            v.set(mad_ifc_in::opcode, 0x50du16)
                .set(mad_ifc_in::op_mod, op_mod)
                .set(mad_ifc_in::port, port);
            v.bytes_mut(mad_ifc_in::mad).copy_from_slice(mad);
        }
        let mut o = vec![0u8; MadIfcOut::BYTES];
        h.exec(0x50d, op_mod, &i, &mut o)?;
        Ok(View::<MadIfcOut>::new_checked(&o)
            .unwrap()
            .bytes(mad_ifc_out::response_mad_packet)
            .to_vec())
    }

    /// SubnGet, LID routed, op_mod 3, as mlx5_ib `mlx5_MAD_IFC(dev, 1, 1, port, …)` sends it:
    /// (MAD status, 64 bytes of data).
    fn get(h: &mut Hca, port: u8, attr: u16, attr_mod: u32) -> (u16, Vec<u8>) {
        let m = smp(
            mgmt_class::SUBN_LID_ROUTED,
            mgmt_method::GET,
            attr,
            attr_mod,
        );
        let r = mad_ifc(h, 3, port, &m).expect("MAD_IFC succeeds");
        let v = View::<Smp>::new_checked(&r).unwrap();
        // ib_mad.h: a response is GetResp with the request's TID.
        assert_eq!(v.get(ib_smp::method), u64::from(mgmt_method::GET_RESP));
        assert_eq!(v.get(ib_smp::tid), 0x1234_5678_9abc_def0);
        assert_eq!(v.get(ib_smp::attr_id), u64::from(attr));
        (
            v.get32(ib_smp::status) as u16,
            v.bytes(ib_smp::data).to_vec(),
        )
    }

    fn be16(d: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([d[at], d[at + 1]])
    }
    fn be32(d: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
    }
    fn be64(d: &[u8], at: usize) -> u64 {
        u64::from_be_bytes(d[at..at + 8].try_into().unwrap())
    }

    fn two_ports() -> ModelConfig {
        ModelConfig {
            num_ports: 2,
            base_lid: 8,
            lmc: 2,
            ..ModelConfig::default()
        }
    }

    #[test]
    fn node_info_at_the_offsets_mlx5_ib_reads() {
        let cfg = two_ports();
        let guid = cfg.node_guid;
        let mut h = hca(cfg);
        let (st, d) = get(&mut h, 2, smp_attr::NODE_INFO, 0);
        assert_eq!(st, mad_status::SUCCESS);
        // ib_smi.h struct ib_node_info: base/class version, node type CA, NumPorts.
        assert_eq!(d[..4], [1, 1, 1, 2]);
        // mlx5_ib mad.c: mlx5_query_mad_ifc_system_image_guid (data + 4),
        // mlx5_query_mad_ifc_node_guid (data + 12).
        assert_eq!(be64(&d, 4), guid);
        assert_eq!(be64(&d, 12), guid);
        // PortGUID of the port the SMP arrived on.
        assert_eq!(be64(&d, 20), guid + 2);
        // mlx5_query_mad_ifc_max_pkeys (data + 28): 128 << pkey_table_size 0 (device.h
        // mlx5_to_sw_pkey_sz).
        assert_eq!(be16(&d, 28), 128);
        assert_eq!(be16(&d, 30), 0x1017);
        // mlx5_query_mad_ifc_vendor_id: be32(data + 36) & 0xffff; LocalPortNum above it.
        assert_eq!(be32(&d, 36) & 0xffff, 0x02c9);
        assert_eq!(d[36], 2);
        assert_eq!(be32(&d, 36) & 0xff_ffff, IEEE_VENDOR_ID);
    }

    #[test]
    fn port_info_at_the_offsets_mlx5_ib_reads() {
        let mut h = hca(two_ports());
        // mlx5_ib mad.c mlx5_query_mad_ifc_port sends attr_mod = port on that port.
        let (st, d) = get(&mut h, 2, smp_attr::PORT_INFO, 2);
        assert_eq!(st, mad_status::SUCCESS);
        assert_eq!(
            be64(&d, 8),
            GID_PREFIX,
            "gid prefix, mlx5_query_mad_ifc_gids data + 8"
        );
        assert_eq!(
            be16(&d, 16),
            8 + (1 << 2),
            "lid: base 8, port 2 under LMC 2"
        );
        assert_eq!(be16(&d, 18), SM_LID, "sm_lid");
        let cap = be32(&d, 20);
        assert_eq!(cap, CAP_MASK, "port_cap_flags");
        assert_eq!(d[28], 2, "LocalPortNum");
        assert_eq!(d[31] & 0xf, 2, "active_width IB_WIDTH_4X");
        assert_eq!(d[32] & 0xf, 4, "state ACTIVE");
        assert_eq!(d[33] >> 4, 5, "phys_state LinkUp");
        assert_eq!(d[34] & 7, 2, "lmc");
        assert_eq!(d[36] >> 4, 5, "active_mtu 4096");
        assert_eq!(d[36] & 0xf, 0, "sm_sl");
        assert_eq!(d[37] >> 4, 3, "max_vl_num");
        assert_eq!(d[41] & 0xf, 5, "max_mtu 4096");
        assert_eq!(d[41] >> 4, 0, "init_type_reply");
        assert_eq!(be16(&d, 46), 0, "bad_pkey_cntr");
        assert_eq!(be16(&d, 48), 0, "qkey_viol_cntr");
        assert_eq!(
            d[50], 8,
            "gid_tbl_len: 8 << gid_table_size 0 (mlx5_get_gid_table_len)"
        );
        assert_eq!(d[51] & 0x1f, SUBNET_TIMEOUT, "subnet_timeout");
        // EDR, the way mlx5_ib finds it: IB_PORT_EXTENDED_SPEEDS_SUP, then data[62] >> 4 == 2.
        assert_ne!(cap & (1 << 14), 0);
        assert_eq!(d[62] >> 4, 2);
        // Base speed QDR (4): mlx5_ib would look for FDR10 only if the extended speed were
        // not reported; no CapabilityMask2, so data[60] is not read.
        assert_eq!(d[35] >> 4, 4);
        assert_eq!(cap & (1 << 15), 0);
    }

    #[test]
    fn mad_answers_agree_with_query_hca_vport_context() {
        let mut h = hca(two_ports());
        h.set_port(2, false);
        for port in 1..=2u8 {
            let mut i = vec![0u8; QueryHcaVportContextIn::BYTES];
            ViewMut::<QueryHcaVportContextIn>::new_checked(&mut i)
                .unwrap()
                .set(query_hca_vport_context_in::opcode, 0x762u16)
                .set(query_hca_vport_context_in::port_num, port);
            let mut o = vec![0u8; QueryHcaVportContextOut::BYTES];
            h.exec(0x762, 0, &i, &mut o).unwrap();
            let out = View::<QueryHcaVportContextOut>::new_checked(&o).unwrap();
            let c = out.sub(query_hca_vport_context_out::hca_vport_context);
            let (_, pi) = get(&mut h, port, smp_attr::PORT_INFO, u32::from(port));
            let (_, ni) = get(&mut h, port, smp_attr::NODE_INFO, 0);
            let (_, gi) = get(&mut h, port, smp_attr::GUID_INFO, 0);
            assert_eq!(c.get(hca_vport_context::lid), u64::from(be16(&pi, 16)));
            assert_eq!(c.get(hca_vport_context::sm_lid), u64::from(be16(&pi, 18)));
            assert_eq!(c.get32(hca_vport_context::cap_mask1), be32(&pi, 20));
            assert_eq!(
                c.get(hca_vport_context::port_state),
                u64::from(pi[32] & 0xf)
            );
            assert_eq!(
                c.get(hca_vport_context::port_physical_state),
                u64::from(pi[33] >> 4)
            );
            assert_eq!(c.get(hca_vport_context::lmc), u64::from(pi[34] & 7));
            assert_eq!(c.get(hca_vport_context::sm_sl), u64::from(pi[36] & 0xf));
            assert_eq!(
                c.get(hca_vport_context::subnet_timeout),
                u64::from(pi[51] & 0x1f)
            );
            assert_eq!(c.get(hca_vport_context::system_image_guid), be64(&ni, 4));
            assert_eq!(c.get(hca_vport_context::node_guid), be64(&ni, 12));
            assert_eq!(c.get(hca_vport_context::port_guid), be64(&ni, 20));
            assert_eq!(c.get(hca_vport_context::port_guid), be64(&gi, 0));
        }
        // Port 2 went down: both say Down / Disabled, with no active width or speed.
        let (_, pi) = get(&mut h, 2, smp_attr::PORT_INFO, 2);
        assert_eq!((pi[32] & 0xf, pi[33] >> 4), (1, 3));
        assert_eq!((pi[31], pi[62] >> 4), (0, 0));
    }

    #[test]
    fn node_description_guid_info_and_pkey_table() {
        let mut h = hca(two_ports());
        // mlx5_query_mad_ifc_node_desc copies the 64 data bytes.
        let (st, d) = get(&mut h, 1, smp_attr::NODE_DESC, 0);
        assert_eq!(st, mad_status::SUCCESS);
        assert!(d.starts_with(b"MT4119 "));
        assert_eq!(d[63], 0);
        // mlx5_query_mad_ifc_gids: GUIDInfo block index / 8, entry index % 8; 8 GIDs = 1 block.
        let (st, d) = get(&mut h, 2, smp_attr::GUID_INFO, 0);
        assert_eq!(st, mad_status::SUCCESS);
        assert_eq!(be64(&d, 0), h.cfg.node_guid + 2);
        assert!(d[8..].iter().all(|&b| b == 0));
        assert_eq!(
            get(&mut h, 2, smp_attr::GUID_INFO, 1).0,
            mad_status::INVALID_ATTRIB_VALUE
        );
        // mlx5_query_mad_ifc_pkey: block index / 32, entry index % 32; 128 P_Keys = 4 blocks;
        // entry 0 the default full-member 0xffff.
        let (st, d) = get(&mut h, 1, smp_attr::PKEY_TABLE, 0);
        assert_eq!(st, mad_status::SUCCESS);
        assert_eq!(be16(&d, 0), 0xffff);
        assert!(d[2..].iter().all(|&b| b == 0));
        for block in 1..4 {
            let (st, d) = get(&mut h, 1, smp_attr::PKEY_TABLE, block);
            assert_eq!(st, mad_status::SUCCESS);
            assert!(d.iter().all(|&b| b == 0));
        }
        assert_eq!(
            get(&mut h, 1, smp_attr::PKEY_TABLE, 4).0,
            mad_status::INVALID_ATTRIB_VALUE
        );
    }

    #[test]
    fn extended_port_info_per_port_without_fdr10() {
        let mut h = hca(two_ports());
        // mlx5_query_ext_port_caps: command port 1, attr_mod = port; a zero MAD status marks
        // the port MLX_EXT_PORT_CAP_FLAG_EXTENDED_PORT_INFO; data[15] bit 0 would be FDR10.
        for port in 1..=2 {
            let (st, d) = get(&mut h, 1, smp_attr::EXTENDED_PORT_INFO, port);
            assert_eq!(st, mad_status::SUCCESS);
            assert_eq!(d[15] & 1, 0);
        }
        assert_eq!(
            get(&mut h, 1, smp_attr::EXTENDED_PORT_INFO, 3).0,
            mad_status::INVALID_ATTRIB_VALUE
        );
    }

    #[test]
    fn attribute_modifiers_out_of_range() {
        let mut h = hca(two_ports());
        // PortInfo names ports 1..=num_ports; 0 is the receiving port (qib subn_get_portinfo).
        let (st, d) = get(&mut h, 2, smp_attr::PORT_INFO, 0);
        assert_eq!(st, mad_status::SUCCESS);
        assert_eq!(be16(&d, 16), 8 + 4);
        for bad in [3, 0x100, u32::MAX] {
            let (st, d) = get(&mut h, 1, smp_attr::PORT_INFO, bad);
            assert_eq!(st, mad_status::INVALID_ATTRIB_VALUE);
            assert!(d.iter().all(|&b| b == 0));
        }
        // NodeInfo and NodeDescription take no modifier.
        assert_eq!(
            get(&mut h, 1, smp_attr::NODE_INFO, 1).0,
            mad_status::INVALID_ATTRIB_VALUE
        );
        assert_eq!(
            get(&mut h, 1, smp_attr::NODE_DESC, 1).0,
            mad_status::INVALID_ATTRIB_VALUE
        );
        // A one-port function (ConnectX-5, one port per PCI function): port 2 is out of range.
        let mut one = hca(ModelConfig {
            num_ports: 1,
            ..ModelConfig::default()
        });
        let (_, d) = get(&mut one, 1, smp_attr::NODE_INFO, 0);
        assert_eq!(d[3], 1);
        assert_eq!(
            get(&mut one, 1, smp_attr::PORT_INFO, 2).0,
            mad_status::INVALID_ATTRIB_VALUE
        );
        assert_eq!(
            mad_ifc(&mut one, 3, 2, &smp(1, 1, 0x11, 0))
                .unwrap_err()
                .status,
            CmdStatus::BadParameter
        );
    }

    #[test]
    fn unsupported_methods_and_attributes_get_iba_statuses() {
        let mut h = hca(two_ports());
        let status = |h: &mut Hca, class, method, attr, class_version: u8| {
            let mut m = smp(class, method, attr, 1);
            m[2] = class_version;
            let r = mad_ifc(h, 3, 1, &m).expect("answered, not failed");
            assert_eq!(r[3], mgmt_method::GET_RESP);
            be16(&r, 4)
        };
        // ib_mad.h IB_MGMT_MAD_STATUS_*: SMInfo and SL-to-VL are not the CA agent's.
        assert_eq!(status(&mut h, 1, 1, smp_attr::SM_INFO, 1), 0x000c);
        assert_eq!(status(&mut h, 1, 1, 0x0017, 1), 0x000c);
        // Set: the port stays as the model configured it.
        assert_eq!(
            status(&mut h, 1, mgmt_method::SET, smp_attr::PORT_INFO, 1),
            0x000c
        );
        // Trap is not a method an agent takes.
        assert_eq!(
            status(&mut h, 1, mgmt_method::TRAP, smp_attr::PORT_INFO, 1),
            0x0008
        );
        // Class version 2 of subnet management does not exist.
        assert_eq!(status(&mut h, 1, 1, smp_attr::PORT_INFO, 2), 0x0004);
        // Directed route: the response carries the direction bit (IB_SMP_DIRECTION) on top
        // of the status; the path fields come back as sent.
        let mut m = smp(mgmt_class::SUBN_DIRECTED_ROUTE, 1, smp_attr::NODE_INFO, 0);
        m[6] = 1;
        m[7] = 1;
        m[128 + 1] = 1;
        let r = mad_ifc(&mut h, 3, 1, &m).unwrap();
        assert_eq!((r[1], r[3], be16(&r, 4)), (0x81, 0x81, 0x8000));
        assert_eq!((r[6], r[7], r[129]), (1, 1, 1));
        assert_eq!(be64(&r, 64 + 12), h.cfg.node_guid);
        assert_eq!(
            status(&mut h, 0x81, 1, smp_attr::SM_INFO, 1),
            0x8000 | 0x000c
        );
        // TrapRepress: nothing to repress, no response, the command succeeds.
        let r = mad_ifc(&mut h, 3, 1, &smp(1, mgmt_method::TRAP_REPRESS, 1, 0)).unwrap();
        assert!(r.iter().all(|&b| b == 0));
    }

    #[test]
    fn malformed_commands_get_command_statuses() {
        let mut h = hca(two_ports());
        let st = |r: Result<Vec<u8>, Fail>| r.unwrap_err().status;
        // Not a MAD the agent takes: discarded (MLX5_CMD_STAT_BAD_PKT_ERR).
        let mut m = smp(1, 1, smp_attr::NODE_INFO, 0);
        m[0] = 2;
        assert_eq!(st(mad_ifc(&mut h, 3, 1, &m)), CmdStatus::BadPacket);
        let sa = smp(0x03, 1, 0x11, 0);
        assert_eq!(st(mad_ifc(&mut h, 3, 1, &sa)), CmdStatus::BadPacket);
        let resp = smp(1, mgmt_method::GET_RESP, 0x11, 0);
        assert_eq!(st(mad_ifc(&mut h, 3, 1, &resp)), CmdStatus::BadPacket);
        // No such port, an op_mod past the two key bits.
        let ok = smp(1, 1, smp_attr::NODE_INFO, 0);
        assert_eq!(st(mad_ifc(&mut h, 3, 0, &ok)), CmdStatus::BadParameter);
        assert_eq!(st(mad_ifc(&mut h, 3, 3, &ok)), CmdStatus::BadParameter);
        assert_eq!(st(mad_ifc(&mut h, 4, 1, &ok)), CmdStatus::BadParameter);
        // op_mod 0 (keys checked) answers alike: the M_Key is 0.
        assert!(mad_ifc(&mut h, 0, 1, &ok).is_ok());
        // Short input and output.
        let mut o = vec![0u8; MadIfcOut::BYTES];
        let e = h.exec(0x50d, 3, &[0u8; 16], &mut o).unwrap_err();
        assert_eq!(e.status, CmdStatus::BadInputLength);
        let mut i = vec![0u8; MadIfcIn::BYTES];
        i[11] = 1;
        let e = h.exec(0x50d, 3, &i, &mut [0u8; 16]).unwrap_err();
        assert_eq!(e.status, CmdStatus::BadOutputLength);
        // Before INIT_HCA.
        h.state = HcaState::Enabled;
        assert_eq!(st(mad_ifc(&mut h, 3, 1, &ok)), CmdStatus::BadSystemState);
    }

    #[test]
    fn the_tables_show_what_a_subnet_manager_set() {
        let mut h = hca(two_ports());
        // P_KeyTable block 0 (32 entries): the default P_Key, then what the SM set at 1 and 31;
        // block 1 starts at index 32.
        assert!(h.set_pkey(2, 1, 0x8001));
        assert!(h.set_pkey(2, 31, 0x7fff));
        assert!(h.set_pkey(2, 32, 0x1234));
        let (st, d) = get(&mut h, 2, smp_attr::PKEY_TABLE, 0);
        assert_eq!(st, mad_status::SUCCESS);
        assert_eq!(
            (be16(&d, 0), be16(&d, 2), be16(&d, 4), be16(&d, 62)),
            (0xffff, 0x8001, 0, 0x7fff)
        );
        assert_eq!(be16(&get(&mut h, 2, smp_attr::PKEY_TABLE, 1).1, 0), 0x1234);
        // Port 1's table is its own.
        assert_eq!(be16(&get(&mut h, 1, smp_attr::PKEY_TABLE, 0).1, 2), 0);
        // GUIDInfo block 0 (8 entries): the port GUID, then alias GUIDs.
        assert!(h.set_alias_guid(2, 3, 0xfeed));
        let (st, d) = get(&mut h, 2, smp_attr::GUID_INFO, 0);
        assert_eq!(st, mad_status::SUCCESS);
        assert_eq!(be64(&d, 0), two_ports().node_guid + 2);
        assert_eq!((be64(&d, 8), be64(&d, 24)), (0, 0xfeed));
        // New LIDs: port 2 under LMC 2 is base + 4.
        assert!(h.assign_lids(64));
        assert_eq!(be16(&get(&mut h, 2, smp_attr::PORT_INFO, 2).1, 16), 68);
    }
}
