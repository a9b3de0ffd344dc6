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

/// IB PortInfo CapabilityMask the ports advertise: IsTrapSupported (bit 5),
/// IsAutomaticMigrationSupported (bit 6), IsSLMappingSupported (bit 9).
const CAP_MASK1: u32 = (1 << 5) | (1 << 6) | (1 << 9);

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
        let up = self.ports.first().is_some_and(|p| p.up);
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
        let port = v.get(query_hca_vport_context_in::port_num) as u8;
        if v.get(query_hca_vport_context_in::other_vport) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let Some(p) = self.ports.get(usize::from(port).wrapping_sub(1)).copied() else {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        };
        let guid = self.cfg.node_guid;
        let (state, phys) = if p.up {
            (ib_port_state::ACTIVE, 5u8)
        } else {
            (ib_port_state::DOWN, 3u8)
        };
        out.sub(query_hca_vport_context_out::hca_vport_context)
            .set(hca_vport_context::has_smi, 1u8)
            .set(hca_vport_context::port_physical_state, phys)
            .set(hca_vport_context::port_state, state)
            .set(hca_vport_context::vport_state, state)
            .set(hca_vport_context::system_image_guid, guid)
            .set(hca_vport_context::port_guid, guid + u64::from(port))
            .set(hca_vport_context::node_guid, guid)
            .set(hca_vport_context::cap_mask1, CAP_MASK1)
            .set(hca_vport_context::lid, p.lid)
            .set(hca_vport_context::lmc, self.cfg.lmc)
            .set(hca_vport_context::sm_lid, 1u16)
            .set(hca_vport_context::subnet_timeout, 18u8);
        Ok(())
    }
}
