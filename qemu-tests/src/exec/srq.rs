//! CREATE/DESTROY/QUERY_SRQ, ARM_RQ (SRQ) and CREATE/DESTROY/QUERY/ARM_XRC_SRQ, and the checks
//! every shared receive queue passes, RMPs included (Linux 6.12 mlx5_ifc.h `srqc`, `xrc_srqc`;
//! srq_cmd.c `get_pas_size`, `set_srqc`; srq.c `mlx5_ib_create_srq`).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::View;
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, input, output, syndrome, CmdResult, Fail};
use crate::hca::Hca;
use crate::srq::{Srq, SrqKind};

/// What a create command asks for, in the model's units.
pub(super) struct NewSrq {
    pub kind: SrqKind,
    pub pd: u32,
    pub xrcd: Option<u32>,
    pub cqn: Option<u32>,
    pub user_index: u32,
    pub log_size: u32,
    /// log2 of the stride in bytes.
    pub wqe_shift: u32,
    /// log2 of the page size relative to 4 KiB.
    pub log_page: u32,
    /// 64ths of a page.
    pub page_offset: u32,
    pub dbr: u64,
    pub lwm: u32,
    pub wq_type: u8,
    pub wq_signature: bool,
}

/// A context field that names an object, 0 meaning none (the model never hands out 0).
fn named(n: u32) -> Option<u32> {
    (n != 0).then_some(n)
}

impl Hca {
    /// Checks `n` and its page list (`pas(k)` for entry `k` of `pas_len`), gives it the lowest
    /// free number of the shared SRQ/XRC SRQ/RMP space and takes its references.
    pub(super) fn add_srq(
        &mut self,
        n: NewSrq,
        pas_len: usize,
        pas: impl Fn(usize) -> Option<u64>,
    ) -> Result<u32, Fail> {
        if u64::from(n.log_size) > self.cap(cmd_hca_cap::log_max_srq_sz)
            || n.wqe_shift < 4
            || 1u64 << n.wqe_shift > self.cap(cmd_hca_cap::max_wqe_sz_rq)
            || n.log_page > 20
            || n.lwm >= 1 << n.log_size
        {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let xrcd_ok = n.xrcd.is_none_or(|x| self.objects.xrcds.contains(&x));
        let cq_ok = n.cqn.is_none_or(|c| self.objects.cqs.contains_key(&c));
        if !self.objects.pds.contains(&n.pd) || !xrcd_ok || !cq_ok {
            return Err(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT));
        }
        let pages = srq_pages(n.log_size, n.wqe_shift, n.log_page, n.page_offset) as usize;
        if pas_len < pages {
            return Err(fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT));
        }
        let page_size = 4096u64 << n.log_page;
        let list: Vec<u64> = (0..pages).filter_map(pas).collect();
        // The doorbell record is one dword (srq.c: `*srq->db.db = cpu_to_be32(wqe_ctr)`);
        // `xrc_srqc.db_record_addr_l` cannot hold address bits 1:0.
        if list.iter().any(|a| a % page_size != 0) || n.dbr % 4 != 0 {
            return Err(bad_param(syndrome::BAD_PAGE));
        }
        let max = 1u32 << self.cap(cmd_hca_cap::log_max_srq);
        let srqn = (1..max)
            .find(|k| !self.objects.srqs.contains_key(k))
            .ok_or(fail(CmdStatus::NoResources, syndrome::EXHAUSTED))?;
        let mut srq = Srq {
            srqn,
            kind: n.kind,
            good: true,
            pd: n.pd,
            xrcd: n.xrcd,
            cqn: n.cqn,
            user_index: n.user_index,
            log_size: n.log_size as u8,
            wqe_shift: n.wqe_shift as u8,
            wq_type: n.wq_type,
            wq_signature: n.wq_signature,
            pas: list,
            page_size,
            page_offset: n.page_offset as u8,
            start: 0,
            dbr: n.dbr,
            lwm: n.lwm as u16,
            hw_head: 0,
            taken: 0,
            qp_users: 0,
        };
        srq.start = srq.wqe_iova(0);
        if let Some(cq) = n.cqn.and_then(|c| self.objects.cqs.get_mut(&c)) {
            cq.users += 1;
        }
        if srq.page_offset != 0 {
            self.counters.offset_queues += 1;
        }
        self.objects.srqs.insert(srqn, srq);
        Ok(srqn)
    }

    /// The shared receive queue `srqn` if it was made by a `kind` command.
    pub(super) fn srq_of(&self, srqn: u32, kind: SrqKind) -> Result<&Srq, Fail> {
        self.objects
            .srqs
            .get(&srqn)
            .filter(|s| s.kind == kind)
            .ok_or(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT))
    }

    /// Destroys `srqn` (made by a `kind` command) unless a QP still receives from it; its CQ
    /// reference goes with it.
    pub(super) fn remove_srq(&mut self, srqn: u32, kind: SrqKind) -> CmdResult {
        if self.srq_of(srqn, kind)?.qp_users > 0 {
            return Err(fail(CmdStatus::BadResourceState, syndrome::IN_USE));
        }
        if let Some(srq) = self.objects.srqs.remove(&srqn) {
            if let Some(cq) = srq.cqn.and_then(|c| self.objects.cqs.get_mut(&c)) {
                cq.users = cq.users.saturating_sub(1);
            }
        }
        Ok(())
    }

    /// Sets the limit watermark of `srqn` (made by a `kind` command); it must be below the
    /// queue size (mlx5_ib_modify_srq never asks for more: `srq_limit >= max` is EINVAL).
    pub(super) fn set_srq_lwm(&mut self, srqn: u32, kind: SrqKind, lwm: u32) -> CmdResult {
        let nent = self.srq_of(srqn, kind)?.nent();
        if lwm >= nent {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        if let Some(s) = self.objects.srqs.get_mut(&srqn) {
            s.lwm = lwm as u16;
        }
        Ok(())
    }

    pub(super) fn create_srq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateSrqIn>(i)?;
        let mut out = output::<CreateSrqOut>(o)?;
        self.require_initialized()?;
        let c = v.sub(create_srq_in::srq_context_entry);
        let n = NewSrq {
            kind: SrqKind::Srq,
            pd: c.get32(srqc::pd),
            xrcd: named(c.get32(srqc::xrcd)),
            cqn: named(c.get32(srqc::cqn)),
            user_index: 0,
            log_size: c.get32(srqc::log_srq_size),
            wqe_shift: c.get32(srqc::log_rq_stride) + 4,
            log_page: c.get32(srqc::log_page_size),
            page_offset: c.get32(srqc::page_offset),
            dbr: c.get(srqc::dbr_addr),
            lwm: c.get32(srqc::lwm),
            wq_type: wq_type::LINKED_LIST,
            wq_signature: c.get(srqc::wq_signature) != 0,
        };
        let srqn = self.add_srq(n, v.array_len(create_srq_in::pas), |k| {
            v.array(create_srq_in::pas, k)
        })?;
        out.set(create_srq_out::srqn, srqn);
        Ok(())
    }

    pub(super) fn destroy_srq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroySrqIn>(i)?;
        output::<DestroySrqOut>(o)?;
        self.require_initialized()?;
        self.remove_srq(v.get32(destroy_srq_in::srqn), SrqKind::Srq)
    }

    pub(super) fn query_srq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QuerySrqIn>(i)?;
        let mut out = output::<QuerySrqOut>(o)?;
        self.require_initialized()?;
        let s = self
            .srq_of(v.get32(query_srq_in::srqn), SrqKind::Srq)?
            .clone();
        let state = if s.good {
            srqc_state::GOOD
        } else {
            srqc_state::ERROR
        };
        out.sub(query_srq_out::srq_context_entry)
            .set(srqc::state, state)
            .set(srqc::log_srq_size, s.log_size)
            .set(srqc::wq_signature, s.wq_signature)
            .set(srqc::log_rq_stride, s.wqe_shift - 4)
            .set(srqc::xrcd, s.xrcd.unwrap_or(0))
            .set(srqc::page_offset, s.page_offset)
            .set(srqc::cqn, s.cqn.unwrap_or(0))
            .set(
                srqc::log_page_size,
                (s.page_size.trailing_zeros() - 12) as u8,
            )
            .set(srqc::pd, s.pd)
            .set(srqc::lwm, s.lwm)
            .set(srqc::dbr_addr, s.dbr);
        for (k, a) in s.pas.iter().enumerate() {
            if out.set_array(query_srq_out::pas, k, *a).is_err() {
                break;
            }
        }
        Ok(())
    }

    /// ARM_RQ with `op_mod` SRQ; XRQs are not modelled.
    pub(super) fn arm_rq(&mut self, op_mod: u16, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<ArmRqIn>(i)?;
        output::<ArmRqOut>(o)?;
        self.require_initialized()?;
        if op_mod != arm_rq_op_mod::SRQ {
            return Err(bad_param(syndrome::BAD_OP_MOD));
        }
        let srqn = v.get32(arm_rq_in::srq_number);
        self.set_srq_lwm(srqn, SrqKind::Srq, v.get32(arm_rq_in::lwm))
    }

    pub(super) fn create_xrc_srq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateXrcSrqIn>(i)?;
        let mut out = output::<CreateXrcSrqOut>(o)?;
        self.require_initialized()?;
        if self.cap(cmd_hca_cap::xrc) == 0 {
            return Err(fail(CmdStatus::BadOperation, syndrome::BAD_OPCODE));
        }
        let c = v.sub(create_xrc_srq_in::xrc_srq_context_entry);
        // An XRC SRQ always belongs to a domain and completes into a CQ: both must exist.
        let n = NewSrq {
            kind: SrqKind::XrcSrq,
            pd: c.get32(xrc_srqc::pd),
            xrcd: Some(c.get32(xrc_srqc::xrcd)),
            cqn: Some(c.get32(xrc_srqc::cqn)),
            user_index: c.get32(xrc_srqc::user_index),
            log_size: c.get32(xrc_srqc::log_xrc_srq_size),
            wqe_shift: c.get32(xrc_srqc::log_rq_stride) + 4,
            log_page: c.get32(xrc_srqc::log_page_size),
            page_offset: c.get32(xrc_srqc::page_offset),
            dbr: (c.get(xrc_srqc::db_record_addr_h) << 32)
                | (c.get(xrc_srqc::db_record_addr_l) << 2),
            lwm: c.get32(xrc_srqc::lwm),
            wq_type: wq_type::LINKED_LIST,
            wq_signature: c.get(xrc_srqc::wq_signature) != 0,
        };
        let srqn = self.add_srq(n, v.array_len(create_xrc_srq_in::pas), |k| {
            v.array(create_xrc_srq_in::pas, k)
        })?;
        out.set(create_xrc_srq_out::xrc_srqn, srqn);
        Ok(())
    }

    pub(super) fn destroy_xrc_srq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroyXrcSrqIn>(i)?;
        output::<DestroyXrcSrqOut>(o)?;
        self.require_initialized()?;
        self.remove_srq(v.get32(destroy_xrc_srq_in::xrc_srqn), SrqKind::XrcSrq)
    }

    pub(super) fn query_xrc_srq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryXrcSrqIn>(i)?;
        let mut out = output::<QueryXrcSrqOut>(o)?;
        self.require_initialized()?;
        let s = self
            .srq_of(v.get32(query_xrc_srq_in::xrc_srqn), SrqKind::XrcSrq)?
            .clone();
        let state = if s.good {
            srqc_state::GOOD
        } else {
            srqc_state::ERROR
        };
        out.sub(query_xrc_srq_out::xrc_srq_context_entry)
            .set(xrc_srqc::state, state)
            .set(xrc_srqc::log_xrc_srq_size, s.log_size)
            .set(xrc_srqc::wq_signature, s.wq_signature)
            .set(xrc_srqc::log_rq_stride, s.wqe_shift - 4)
            .set(xrc_srqc::xrcd, s.xrcd.unwrap_or(0))
            .set(xrc_srqc::page_offset, s.page_offset)
            .set(xrc_srqc::cqn, s.cqn.unwrap_or(0))
            .set(
                xrc_srqc::log_page_size,
                (s.page_size.trailing_zeros() - 12) as u8,
            )
            .set(xrc_srqc::user_index, s.user_index)
            .set(xrc_srqc::pd, s.pd)
            .set(xrc_srqc::lwm, s.lwm)
            .set(xrc_srqc::db_record_addr_h, s.dbr >> 32)
            .set(xrc_srqc::db_record_addr_l, (s.dbr & 0xffff_ffff) >> 2);
        for (k, a) in s.pas.iter().enumerate() {
            if out.set_array(query_xrc_srq_out::pas, k, *a).is_err() {
                break;
            }
        }
        Ok(())
    }

    pub(super) fn arm_xrc_srq(&mut self, op_mod: u16, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<ArmXrcSrqIn>(i)?;
        output::<ArmXrcSrqOut>(o)?;
        self.require_initialized()?;
        if op_mod != arm_xrc_srq_op_mod::XRC_SRQ {
            return Err(bad_param(syndrome::BAD_OP_MOD));
        }
        let srqn = v.get32(arm_xrc_srq_in::xrc_srqn);
        self.set_srq_lwm(srqn, SrqKind::XrcSrq, v.get32(arm_xrc_srq_in::lwm))
    }
}

impl Hca {
    /// CREATE_QP's receive queue source: with `rq_type` SRQ, `srqn_rmpn_xrqn` must name an
    /// existing SRQ, XRC SRQ or RMP and `xrcd` an existing XRC domain (Linux 6.12 qp.c sets
    /// `xrcd` to its default domain `xrcdn0` there); with any other `rq_type` firmware ignores
    /// both (Linux fills them for every QP, pointing at its default SRQ `s1`).
    pub(super) fn qp_rq_srq(&self, c: &View<'_, Qpc>) -> Result<Option<(u32, u32)>, Fail> {
        if c.get(qpc::rq_type) != u64::from(qpc_rq_type::SRQ_RQ) {
            return Ok(None);
        }
        let (srqn, xrcd) = (c.get32(qpc::srqn_rmpn_xrqn), c.get32(qpc::xrcd));
        if !self.objects.srqs.contains_key(&srqn) || !self.objects.xrcds.contains(&xrcd) {
            return Err(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT));
        }
        Ok(Some((srqn, xrcd)))
    }

    /// Records that QP `qpn` receives from `rq_srq`, which may then not be destroyed.
    pub(super) fn attach_qp_srq(&mut self, qpn: u32, rq_srq: Option<(u32, u32)>) {
        if let Some((srqn, xrcd)) = rq_srq {
            if let Some(s) = self.objects.srqs.get_mut(&srqn) {
                s.qp_users += 1;
            }
            self.objects.qp_srqs.insert(qpn, (srqn, xrcd));
        }
    }

    /// Drops QP `qpn`'s SRQ and XRC domain references.
    pub(super) fn detach_qp_srq(&mut self, qpn: u32) {
        if let Some((srqn, _)) = self.objects.qp_srqs.remove(&qpn) {
            if let Some(s) = self.objects.srqs.get_mut(&srqn) {
                s.qp_users = s.qp_users.saturating_sub(1);
            }
        }
    }
}
