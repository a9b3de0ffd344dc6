//! CREATE/MODIFY/DESTROY_SQ and _RQ: the Ethernet send and receive queues (Linux en_main.c
//! `mlx5e_create_sq`, `mlx5e_modify_rq_state`; mlx5_ifc `sqc`, `rqc`, `wq`). Both are created
//! in RST and move RST → RDY → ERR → RST (RDY → RST too); `sq_state`/`rq_state` must name
//! the current state. A queue that goes to RST forgets its counters, as hardware does.
//! SQ and RQ numbers come from the QP number space: the send doorbell carries one.

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::View;
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, input, output, syndrome, CmdResult, Fail, FIRST_QPN};
use crate::eth::{Ring, Rq, Sq, WqState};
use crate::hca::Hca;

/// `rqc.mem_rq_type`: the RQ's own buffer (not an RMP).
const MEM_RQ_TYPE_INLINE: u64 = 0;
/// `modify_rq_in.modify_bitmask` bits (`MLX5_MODIFY_RQ_IN_MODIFY_BITMASK_*`).
const RQ_BITMASK_VSD: u64 = 1 << 1;
const RQ_BITMASK_SCATTER_FCS: u64 = 1 << 2;
const RQ_BITMASK_COUNTER_SET_ID: u64 = 1 << 3;

impl Hca {
    /// A number no QP, SQ or RQ has.
    fn free_queue_number(&self) -> Result<u32, Fail> {
        let max = 1u32 << self.cap(cmd_hca_cap::log_max_qp);
        let e = self.eth.as_ref();
        (FIRST_QPN..FIRST_QPN + max)
            .find(|n| {
                !self.objects.qps.contains_key(n)
                    && !e.is_some_and(|e| e.sqs.contains_key(n) || e.rqs.contains_key(n))
            })
            .ok_or(fail(CmdStatus::NoResources, syndrome::EXHAUSTED))
    }

    /// Whether `n` is an Ethernet SQ or RQ (QP creation skips those numbers).
    pub(crate) fn is_eth_queue(&self, n: u32) -> bool {
        self.eth
            .as_ref()
            .is_some_and(|e| e.sqs.contains_key(&n) || e.rqs.contains_key(&n))
    }

    /// The ring a `wq` describes: cyclic, an existing UAR (SQs), a page list long enough.
    fn eth_ring(
        &self,
        w: &View<'_, Wq>,
        pas_len: usize,
        pas: impl Fn(usize) -> Option<u64>,
        uar_needed: bool,
    ) -> Result<Ring, Fail> {
        if w.get(wq::wq_type) as u8 != wq_type::CYCLIC {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        // The PD is not checked here: Linux mlx5e's drop RQ names none (en_main.c
        // `mlx5e_build_drop_rq_param`); buffer accesses check it.
        let pd = w.get32(wq::pd);
        let uar = w.get32(wq::uar_page);
        if uar_needed && !self.objects.uars.contains(&uar) {
            return Err(bad_param(syndrome::NO_SUCH_OBJECT));
        }
        let log_size = w.get(wq::log_wq_sz) as u8;
        let log_stride = w.get(wq::log_wq_stride) as u8;
        if log_size > self.cap(cmd_hca_cap::log_max_wq_sz) as u8 || !(4..=11).contains(&log_stride)
        {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let page_size = 4096u64 << w.get(wq::log_wq_pg_sz);
        let page_offset = crate::page_list::page_offset_bytes(page_size, w.get(wq::page_offset));
        let mut ring = Ring {
            pd,
            uar,
            dbr: w.get(wq::dbr_addr),
            log_stride,
            log_size,
            page_size,
            page_offset,
            pas: Vec::new(),
        };
        let pages = crate::page_list::pages_spanned(ring.bytes(), page_size, page_offset);
        if pas_len < pages {
            return Err(fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT));
        }
        ring.pas = (0..pages).filter_map(pas).collect();
        if ring.pas.iter().any(|p| p % page_size != 0) || ring.dbr % 4 != 0 {
            return Err(bad_param(syndrome::BAD_PAGE));
        }
        Ok(ring)
    }

    pub(super) fn create_sq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateSqIn>(i)?;
        let mut out = output::<CreateSqOut>(o)?;
        self.eth_mut()?;
        let c = v.sub(create_sq_in::ctx);
        if c.get(sqc::state) != u64::from(wq_state::RST) || c.get(sqc::hairpin) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let cqn = c.get32(sqc::cqn);
        let tis = c.get32(sqc::tis_num_0);
        let e = self.eth.as_ref().ok_or(bad_param(syndrome::BAD_OPCODE))?;
        // No TIS: an SQ that sends no frames (mlx5e's ICOSQ posts only NOPs and UMRs).
        let tis = match c.get(sqc::tis_lst_sz) {
            0 => None,
            1 if e.tises.contains_key(&tis) => Some(tis),
            1 => return Err(bad_param(syndrome::NO_SUCH_OBJECT)),
            _ => return Err(bad_param(syndrome::OUT_OF_RANGE)),
        };
        if !self.objects.cqs.contains_key(&cqn) {
            return Err(bad_param(syndrome::NO_SUCH_OBJECT));
        }
        let ring = self.eth_ring(
            &c.sub(sqc::wq),
            v.array_len(create_sq_in::pas),
            |k| v.array(create_sq_in::pas, k),
            true,
        )?;
        let sqn = self.free_queue_number()?;
        let sq = Sq {
            state: WqState::Rst,
            cqn,
            tis,
            user_index: c.get32(sqc::user_index),
            min_inline: c.get(sqc::min_wqe_inline_mode) as u8,
            ring,
            consumed: 0,
        };
        if let Some(cq) = self.objects.cqs.get_mut(&cqn) {
            cq.users += 1;
        }
        self.eth_mut()?.sqs.insert(sqn, sq);
        out.set(create_sq_out::sqn, sqn);
        Ok(())
    }

    pub(super) fn modify_sq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<ModifySqIn>(i)?;
        output::<ModifySqOut>(o)?;
        let sqn = v.get32(modify_sq_in::sqn);
        let from = v.get(modify_sq_in::sq_state) as u8;
        let to = v.sub(modify_sq_in::ctx).get(sqc::state) as u8;
        let sq = self
            .eth_mut()?
            .sqs
            .get_mut(&sqn)
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))?;
        let to = transition(sq.state, from, to)?;
        if to == WqState::Rst {
            sq.consumed = 0;
        }
        let run = to == WqState::Rdy;
        sq.state = to;
        if run {
            // WQEs posted before the SQ was ready go now.
            self.data_path().run_eth_sq(sqn);
        }
        Ok(())
    }

    pub(super) fn destroy_sq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroySqIn>(i)?;
        output::<DestroySqOut>(o)?;
        let sqn = v.get32(destroy_sq_in::sqn);
        let sq = self
            .eth_mut()?
            .sqs
            .remove(&sqn)
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))?;
        if let Some(cq) = self.objects.cqs.get_mut(&sq.cqn) {
            cq.users = cq.users.saturating_sub(1);
        }
        Ok(())
    }

    /// Only plain cyclic RQs with their own buffer: no RMP, no striding, no hairpin.
    pub(super) fn create_rq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateRqIn>(i)?;
        let mut out = output::<CreateRqOut>(o)?;
        self.eth_mut()?;
        let c = v.sub(create_rq_in::ctx);
        if c.get(rqc::state) != u64::from(wq_state::RST)
            || c.get(rqc::hairpin) != 0
            || c.get(rqc::mem_rq_type) != MEM_RQ_TYPE_INLINE
        {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let cqn = c.get32(rqc::cqn);
        if !self.objects.cqs.contains_key(&cqn) {
            return Err(bad_param(syndrome::NO_SUCH_OBJECT));
        }
        let ring = self.eth_ring(
            &c.sub(rqc::wq),
            v.array_len(create_rq_in::pas),
            |k| v.array(create_rq_in::pas, k),
            false,
        )?;
        let rqn = self.free_queue_number()?;
        let rq = Rq {
            state: WqState::Rst,
            cqn,
            user_index: c.get32(rqc::user_index),
            vsd: c.get(rqc::vsd) != 0,
            scatter_fcs: c.get(rqc::scatter_fcs) != 0,
            counter_set: c.get(rqc::counter_set_id) as u8,
            ring,
            consumed: 0,
        };
        if let Some(cq) = self.objects.cqs.get_mut(&cqn) {
            cq.users += 1;
        }
        self.eth_mut()?.rqs.insert(rqn, rq);
        out.set(create_rq_out::rqn, rqn);
        Ok(())
    }

    /// The state change, and the fields `modify_bitmask` selects: VLAN stripping, FCS
    /// scattering, the counter set.
    pub(super) fn modify_rq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<ModifyRqIn>(i)?;
        output::<ModifyRqOut>(o)?;
        let rqn = v.get32(modify_rq_in::rqn);
        let from = v.get(modify_rq_in::rq_state) as u8;
        let c = v.sub(modify_rq_in::ctx);
        let to = c.get(rqc::state) as u8;
        let mask = v.get(modify_rq_in::modify_bitmask);
        let rq = self
            .eth_mut()?
            .rqs
            .get_mut(&rqn)
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))?;
        let to = transition(rq.state, from, to)?;
        if mask & RQ_BITMASK_VSD != 0 {
            rq.vsd = c.get(rqc::vsd) != 0;
        }
        if mask & RQ_BITMASK_SCATTER_FCS != 0 {
            rq.scatter_fcs = c.get(rqc::scatter_fcs) != 0;
        }
        if mask & RQ_BITMASK_COUNTER_SET_ID != 0 {
            rq.counter_set = c.get(rqc::counter_set_id) as u8;
        }
        if to == WqState::Rst {
            rq.consumed = 0;
        }
        rq.state = to;
        Ok(())
    }

    pub(super) fn destroy_rq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroyRqIn>(i)?;
        output::<DestroyRqOut>(o)?;
        let rqn = v.get32(destroy_rq_in::rqn);
        let rq = self
            .eth_mut()?
            .rqs
            .remove(&rqn)
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))?;
        if let Some(cq) = self.objects.cqs.get_mut(&rq.cqn) {
            cq.users = cq.users.saturating_sub(1);
        }
        Ok(())
    }
}

/// An SQ or RQ state change: `from` must be the current state; RST → RDY, RDY → RDY (a
/// parameter change), RDY → ERR, RDY → RST and ERR → RST are allowed.
fn transition(cur: WqState, from: u8, to: u8) -> Result<WqState, Fail> {
    if from != cur.raw() {
        return Err(fail(CmdStatus::BadResourceState, syndrome::WRONG_STATE));
    }
    let to = WqState::from_raw(to).ok_or(bad_param(syndrome::OUT_OF_RANGE))?;
    use WqState::{Rdy, Rst};
    match (cur, to) {
        (Rst, Rdy) | (Rdy, Rdy) | (Rdy, WqState::Err) | (Rdy, Rst) | (WqState::Err, Rst) => Ok(to),
        _ => Err(fail(CmdStatus::BadResourceState, syndrome::WRONG_STATE)),
    }
}
