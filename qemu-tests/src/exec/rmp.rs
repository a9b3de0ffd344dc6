//! CREATE/DESTROY/QUERY/MODIFY_RMP: receive memory pools, the objects mlx5_core makes for
//! basic SRQs once ISSI is 1 (Linux 6.12 mlx5_ifc.h `rmpc`, `wq`, `modify_rmp_in`; srq_cmd.c
//! `create_rmp_cmd`, `set_wq`, `arm_rmp_cmd`).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::CmdStatus;

use super::srq::NewSrq;
use super::{bad_param, fail, input, output, syndrome, CmdResult};
use crate::hca::Hca;
use crate::srq::SrqKind;

impl Hca {
    /// The RMP starts ready (Linux sets `rmpc.state` RDY); its WQEs are linked or cyclic.
    pub(super) fn create_rmp(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateRmpIn>(i)?;
        let mut out = output::<CreateRmpOut>(o)?;
        self.require_initialized()?;
        let c = v.sub(create_rmp_in::ctx);
        let w = c.sub(rmpc::wq);
        let ty = w.get(wq::wq_type) as u8;
        if c.get(rmpc::state) != u64::from(rmpc_state::RDY)
            || (ty != wq_type::LINKED_LIST && ty != wq_type::CYCLIC)
        {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let n = NewSrq {
            kind: SrqKind::Rmp,
            pd: w.get32(wq::pd),
            xrcd: None,
            cqn: None,
            user_index: 0,
            log_size: w.get32(wq::log_wq_sz),
            wqe_shift: w.get32(wq::log_wq_stride),
            log_page: w.get32(wq::log_wq_pg_sz),
            page_offset: w.get32(wq::page_offset),
            dbr: w.get(wq::dbr_addr),
            lwm: w.get32(wq::lwm),
            wq_type: ty,
            wq_signature: w.get(wq::wq_signature) != 0,
        };
        let rmpn = self.add_srq(n, v.array_len(create_rmp_in::pas), |k| {
            v.array(create_rmp_in::pas, k)
        })?;
        out.set(create_rmp_out::rmpn, rmpn);
        Ok(())
    }

    pub(super) fn destroy_rmp(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroyRmpIn>(i)?;
        output::<DestroyRmpOut>(o)?;
        self.require_initialized()?;
        self.remove_srq(v.get32(destroy_rmp_in::rmpn), SrqKind::Rmp)
    }

    pub(super) fn query_rmp(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryRmpIn>(i)?;
        let mut out = output::<QueryRmpOut>(o)?;
        self.require_initialized()?;
        let s = self
            .srq_of(v.get32(query_rmp_in::rmpn), SrqKind::Rmp)?
            .clone();
        let state = if s.good {
            rmpc_state::RDY
        } else {
            rmpc_state::ERR
        };
        let mut c = out.sub(query_rmp_out::rmp_context);
        c.set(rmpc::state, state);
        c.sub(rmpc::wq)
            .set(wq::wq_type, s.wq_type)
            .set(wq::wq_signature, s.wq_signature)
            .set(wq::page_offset, s.page_offset)
            .set(wq::lwm, s.lwm)
            .set(wq::pd, s.pd)
            .set(wq::dbr_addr, s.dbr)
            .set(wq::log_wq_stride, s.wqe_shift)
            .set(wq::log_wq_pg_sz, (s.page_size.trailing_zeros() - 12) as u8)
            .set(wq::log_wq_sz, s.log_size);
        for (k, a) in s.pas.iter().enumerate() {
            if out.set_array(query_rmp_out::pas, k, *a).is_err() {
                break;
            }
        }
        Ok(())
    }

    /// `rmp_state` must be the RMP's current state; the new state is ready or error (no way
    /// back from error); the bitmask selects `wq.lwm`, the only modifiable field.
    pub(super) fn modify_rmp(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<ModifyRmpIn>(i)?;
        output::<ModifyRmpOut>(o)?;
        self.require_initialized()?;
        let rmpn = v.get32(modify_rmp_in::rmpn);
        let good = self.srq_of(rmpn, SrqKind::Rmp)?.good;
        let cur = if good {
            rmpc_state::RDY
        } else {
            rmpc_state::ERR
        };
        if v.get(modify_rmp_in::rmp_state) != u64::from(cur) {
            return Err(fail(CmdStatus::BadResourceState, syndrome::WRONG_STATE));
        }
        let c = v.sub(modify_rmp_in::ctx);
        let to = c.get(rmpc::state) as u8;
        if (to != rmpc_state::RDY && to != rmpc_state::ERR) || (!good && to == rmpc_state::RDY) {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        if v.sub(modify_rmp_in::bitmask).get(rmp_bitmask::lwm) != 0 {
            let lwm = c.sub(rmpc::wq).get32(wq::lwm);
            self.set_srq_lwm(rmpn, SrqKind::Rmp, lwm)?;
        }
        if let Some(s) = self.objects.srqs.get_mut(&rmpn) {
            s.good = to == rmpc_state::RDY;
        }
        Ok(())
    }
}
