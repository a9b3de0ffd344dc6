//! QUERY_HCA_CAP / SET_HCA_CAP (mlx5-reference 03 §6).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, input, output, syndrome, CmdResult};
use crate::caps::{check_set_general, set_atomic, CAP_BYTES};
use crate::hca::{Hca, HcaState};

impl Hca {
    fn require_boot_pages(&self) -> CmdResult {
        if self.pages.len() < self.cfg.boot_pages as usize {
            return Err(fail(CmdStatus::NoResources, syndrome::MISSING_PAGES));
        }
        Ok(())
    }

    pub(super) fn query_hca_cap(&mut self, op_mod: u16, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryHcaCapIn>(i)?;
        let mut out = output::<QueryHcaCapOut>(o)?;
        self.require_enabled()?;
        self.require_boot_pages()?;
        if v.get(query_hca_cap_in::other_function) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let (cap_type, cur) = (op_mod >> 1, op_mod & 1 == hca_cap_op_mod::CUR);
        let src = match (cap_type, cur) {
            (hca_cap_op_mod::GENERAL, true) => &self.caps.cur,
            (hca_cap_op_mod::GENERAL, false) => &self.caps.max,
            (hca_cap_op_mod::ATOMIC, true) => &self.caps.atomic_cur,
            (hca_cap_op_mod::ATOMIC, false) => &self.caps.atomic_max,
            (hca_cap_op_mod::ETHERNET_OFFLOADS, _) if self.eth.is_some() => {
                self.eth.as_ref().map_or(&self.caps.cur, |e| &e.caps)
            }
            (hca_cap_op_mod::FLOW_TABLE, _) if self.eth.is_some() => {
                self.eth.as_ref().map_or(&self.caps.cur, |e| &e.ft_caps)
            }
            _ => return Err(bad_param(syndrome::BAD_OP_MOD)),
        };
        out.as_bytes_mut()[16..16 + CAP_BYTES].copy_from_slice(src);
        Ok(())
    }

    pub(super) fn set_hca_cap(&mut self, op_mod: u16, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<SetHcaCapIn>(i)?;
        output::<SetHcaCapOut>(o)?;
        self.require_enabled()?;
        self.require_boot_pages()?;
        if self.state == HcaState::Initialized {
            return Err(fail(CmdStatus::BadSystemState, syndrome::WRONG_STATE));
        }
        if v.get(set_hca_cap_in::other_function) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        if op_mod & 1 != 0 {
            return Err(bad_param(syndrome::BAD_OP_MOD));
        }
        let req = &v.as_bytes()[16..16 + CAP_BYTES];
        let done = match op_mod >> 1 {
            hca_cap_op_mod::GENERAL => check_set_general(req, &self.caps.cur, &self.caps.max)
                .map(|()| self.caps.cur.copy_from_slice(req)),
            hca_cap_op_mod::ATOMIC => set_atomic(req, &mut self.caps.atomic_cur),
            _ => return Err(bad_param(syndrome::BAD_OP_MOD)),
        };
        if let Err(field) = done {
            log::warn!("model: SET_HCA_CAP refused: {field}");
            return Err(bad_param(syndrome::READ_ONLY_CAP));
        }
        Ok(())
    }
}
