//! MAD_IFC: a management datagram handed to the device's subnet management agent
//! ([`crate::sma`]) as if it had arrived on a port (mlx5_ifc `mad_ifc_in`/`mad_ifc_out`;
//! Linux mlx5_ib `cmd.c` `mlx5_cmd_mad_ifc`, `mad.c`).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, input, output, syndrome, CmdResult};
use crate::hca::Hca;

/// Syndrome of a MAD the agent discards (command status BAD_PKT).
pub const MAD_DISCARDED: u32 = 0x0ade_050d;

impl Hca {
    pub(super) fn mad_ifc(&mut self, op_mod: u16, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<MadIfcIn>(i)?;
        let mut out = output::<MadIfcOut>(o)?;
        self.require_initialized()?;
        // op_mod: bit 0 ignore M_Key, bit 1 ignore B_Key (mlx5_ib mlx5_MAD_IFC); the model's
        // M_Key is 0, which IBA never checks, so both settings answer alike.
        if op_mod & !(mad_ifc_op_mod::IGNORE_MKEY | mad_ifc_op_mod::IGNORE_BKEY) != 0 {
            return Err(bad_param(syndrome::BAD_OP_MOD));
        }
        let port = v.get(mad_ifc_in::port) as u8;
        // The model's ports are single-plane: no plane index.
        if self.port_attrs(port).is_none() || v.get(mad_ifc_in::plane_index) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let mad = v.bytes(mad_ifc_in::mad);
        // Byte 1 of every MAD is its management class: performance management goes to its
        // agent, everything else to the subnet management agent (which discards what it
        // does not take).
        let resp = if mad[1] == mgmt_class::PERF_MGMT {
            self.pma(port, mad)
        } else {
            self.sma(port, mad)
        }
        .map_err(|_| fail(CmdStatus::BadPacket, MAD_DISCARDED))?;
        out.bytes_mut(mad_ifc_out::response_mad_packet)
            .copy_from_slice(&resp);
        Ok(())
    }
}
