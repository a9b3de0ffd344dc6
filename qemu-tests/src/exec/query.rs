//! QUERY_SPECIAL_CONTEXTS, QUERY_VPORT_STATE, QUERY_HCA_VPORT_CONTEXT (mlx5-reference 06 §5–6).

use bareverbs_firmware_cmd::ifc::*;

use super::{bad_param, input, output, syndrome, CmdResult};
use crate::hca::Hca;

/// The reserved lkey the model reports.
pub const RESD_LKEY: u32 = 0x0000_0200;
/// Special mkeys the model reports; 0x100 is also Linux's fallback terminator lkey.
pub const TERMINATE_SCATTER_LIST_MKEY: u32 = 0x0000_0100;
/// Dump-fill mkey.
pub const DUMP_FILL_MKEY: u32 = 0x0000_0300;
/// Null mkey.
pub const NULL_MKEY: u32 = 0x0000_0400;

impl Hca {
    pub(super) fn query_special_contexts(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        input::<QuerySpecialContextsIn>(i)?;
        let mut out = output::<QuerySpecialContextsOut>(o)?;
        self.require_enabled()?;
        out.set(query_special_contexts_out::dump_fill_mkey, DUMP_FILL_MKEY)
            .set(query_special_contexts_out::resd_lkey, RESD_LKEY)
            .set(query_special_contexts_out::null_mkey, NULL_MKEY)
            .set(
                query_special_contexts_out::terminate_scatter_list_mkey,
                TERMINATE_SCATTER_LIST_MKEY,
            );
        Ok(())
    }

    pub(super) fn query_vport_state(&mut self, op_mod: u16, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryVportStateIn>(i)?;
        let mut out = output::<QueryVportStateOut>(o)?;
        self.require_initialized()?;
        if v.get(query_vport_state_in::other_vport) != 0 || op_mod > 2 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let up = if self.eth.is_some() {
            self.eth_oper_up()
        } else {
            self.ports.first().is_some_and(|p| p.up)
        };
        out.set(query_vport_state_out::admin_state, vport_state::UP)
            .set(
                query_vport_state_out::state,
                if up {
                    vport_state::UP
                } else {
                    vport_state::DOWN
                },
            );
        Ok(())
    }

    pub(super) fn query_hca_vport_context(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryHcaVportContextIn>(i)?;
        let mut out = output::<QueryHcaVportContextOut>(o)?;
        self.require_initialized()?;
        // Linux (vport.c `mlx5_query_hca_vport_context`) names the port only when the function
        // has two (`num_ports == 2`); otherwise port_num is 0: the function's own port.
        let port = match v.get(query_hca_vport_context_in::port_num) as u8 {
            0 if self.ports.len() == 1 => 1,
            n => n,
        };
        if v.get(query_hca_vport_context_in::other_vport) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        // The same port attributes the subnet management agent answers with (MAD_IFC).
        let Some(p) = self.port_attrs(port) else {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        };
        out.sub(query_hca_vport_context_out::hca_vport_context)
            .set(hca_vport_context::has_smi, 1u8)
            .set(hca_vport_context::port_physical_state, p.phys_state)
            .set(hca_vport_context::port_state, p.state)
            .set(hca_vport_context::vport_state, p.state)
            .set(hca_vport_context::system_image_guid, p.sys_image_guid)
            .set(hca_vport_context::port_guid, p.port_guid)
            .set(hca_vport_context::node_guid, p.node_guid)
            .set(hca_vport_context::cap_mask1, p.cap_mask)
            .set(hca_vport_context::lid, p.lid)
            .set(hca_vport_context::lmc, p.lmc)
            .set(hca_vport_context::sm_lid, p.sm_lid)
            .set(hca_vport_context::sm_sl, p.sm_sl)
            .set(hca_vport_context::subnet_timeout, p.subnet_timeout);
        Ok(())
    }
    /// QUERY_HCA_VPORT_GID (Linux vport.c `mlx5_query_hca_vport_gid`): the port's GID table of
    /// `8 << cmd_hca_cap.gid_table_size` entries. Entry 0 is the port's GID (the subnet
    /// prefix and port GUID the subnet management agent reports, the source GID of the GRHs
    /// the model sends); the others are empty (zero). Index 0xffff asks for the whole table:
    /// as many entries as the output holds.
    pub(super) fn query_hca_vport_gid(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryHcaVportGidIn>(i)?;
        self.require_initialized()?;
        let port = match v.get(query_hca_vport_gid_in::port_num) as u8 {
            0 if self.ports.len() == 1 => 1,
            n => n,
        };
        if v.get(query_hca_vport_gid_in::other_vport) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let Some(p) = self.port_attrs(port) else {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        };
        let table = 8u64 << self.cap(cmd_hca_cap::gid_table_size).min(4);
        let index = v.get(query_hca_vport_gid_in::gid_index);
        let (first, count) = match index {
            0xffff => (0, table),
            n if n < table => (n, 1),
            _ => return Err(bad_param(syndrome::OUT_OF_RANGE)),
        };
        {
            output::<QueryHcaVportGidOut>(o)?.set(query_hca_vport_gid_out::gids_num, count);
        }
        for k in 0..count {
            let at = 16 + 16 * k as usize;
            let Some(slot) = o.get_mut(at..at + 16) else {
                break;
            };
            // The port GUID at 0, then the alias GUIDs an SM assigned; unassigned entries 0.
            let guid = self.gid_guid(port, (first + k) as u16);
            if guid == 0 {
                slot.fill(0);
            } else {
                slot[..8].copy_from_slice(&p.gid_prefix.to_be_bytes());
                slot[8..].copy_from_slice(&guid.to_be_bytes());
            }
        }
        Ok(())
    }
}
