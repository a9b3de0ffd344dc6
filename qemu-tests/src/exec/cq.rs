//! CREATE/DESTROY/QUERY_CQ and MODIFY_CQ: moderation and resize (mlx5-reference 04 §5).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{CmdStatus, View};

use super::{bad_param, fail, input, output, syndrome, CmdResult};
use crate::cq::{Arm, Cq, CQE_BYTES};
use crate::dma::AddressSpaceExt;
use crate::hca::Hca;
use crate::page_list;

impl Hca {
    pub(super) fn create_cq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateCqIn>(i)?;
        let mut out = output::<CreateCqOut>(o)?;
        self.require_initialized()?;
        let c = v.sub(create_cq_in::cq_context);
        let log_size = c.get(cqc::log_cq_size) as u8;
        if u64::from(log_size) > self.cap(cmd_hca_cap::log_max_cq_sz) {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        if c.get(cqc::cqe_sz) != u64::from(cqc_cqe_sz::BYTES_64)
            || c.get(cqc::cc) != 0
            || c.get(cqc::cqe_comp_en) != 0
        {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let uar = c.get32(cqc::uar_page);
        if !self.objects.uars.contains(&uar) {
            return Err(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT));
        }
        let eqn = c.get32(cqc::c_eqn_or_apu_element);
        if eqn > 0xff || !self.objects.eqs.contains_key(&(eqn as u8)) {
            return Err(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT));
        }
        let log_page = c.get32(cqc::log_page_size);
        if log_page > 20 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let page_size = 4096u64 << log_page;
        let page_offset = page_list::page_offset_bytes(page_size, c.get(cqc::page_offset));
        let npages = page_list::pages_spanned(CQE_BYTES << log_size, page_size, page_offset);
        if v.array_len(create_cq_in::pas) < npages {
            return Err(fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT));
        }
        let pas: Vec<u64> = (0..npages)
            .filter_map(|k| v.array(create_cq_in::pas, k))
            .collect();
        let dbr = c.get(cqc::dbr_addr);
        if pas.iter().any(|a| a % page_size != 0) || dbr % 8 != 0 {
            return Err(bad_param(syndrome::BAD_PAGE));
        }
        let max = 1u32 << self.cap(cmd_hca_cap::log_max_cq);
        let cqn = (1..max)
            .find(|n| !self.objects.cqs.contains_key(n))
            .ok_or(fail(CmdStatus::NoResources, syndrome::EXHAUSTED))?;
        if page_offset != 0 {
            self.counters.offset_queues += 1;
        }
        self.objects.cqs.insert(
            cqn,
            Cq {
                cqn,
                log_size,
                uar,
                eqn: eqn as u8,
                pas,
                page_size,
                page_offset,
                dbr,
                producer: 0,
                arm: Arm::No,
                oi: c.get(cqc::oi) != 0,
                overrun: false,
                users: 0,
            },
        );
        out.set(create_cq_out::cqn, cqn);
        Ok(())
    }

    pub(super) fn destroy_cq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroyCqIn>(i)?;
        output::<DestroyCqOut>(o)?;
        self.require_initialized()?;
        let cqn = v.get32(destroy_cq_in::cqn);
        let cq = self
            .objects
            .cqs
            .get(&cqn)
            .ok_or(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT))?;
        if cq.users > 0 {
            return Err(fail(CmdStatus::BadResourceState, syndrome::IN_USE));
        }
        self.objects.cqs.remove(&cqn);
        Ok(())
    }

    pub(super) fn query_cq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryCqIn>(i)?;
        let mut out = output::<QueryCqOut>(o)?;
        self.require_initialized()?;
        let cqn = v.get32(query_cq_in::cqn);
        let cq = self
            .objects
            .cqs
            .get(&cqn)
            .ok_or(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT))?
            .clone();
        let st = match cq.arm {
            Arm::No => cqc_st::FIRED,
            Arm::Any => cqc_st::NOTIFICATION_REQUEST_ARMED,
            Arm::Solicited => cqc_st::SOLICITED_NOTIFICATION_REQUEST_ARMED,
        };
        let status = if cq.overrun {
            cqc_status::CQ_OVERFLOW
        } else {
            cqc_status::OK
        };
        out.sub(query_cq_out::cq_context)
            .set(cqc::status, status)
            .set(cqc::st, st)
            .set(cqc::log_cq_size, cq.log_size)
            .set(cqc::uar_page, cq.uar)
            .set(cqc::c_eqn_or_apu_element, cq.eqn)
            .set(cqc::oi, cq.oi)
            .set(cqc::producer_counter, cq.producer & 0x00ff_ffff)
            .set(
                cqc::log_page_size,
                (cq.page_size.trailing_zeros() - 12) as u8,
            )
            .set(
                cqc::page_offset,
                cq.page_offset / (cq.page_size / page_list::PAGE_OFFSET_QUANTA),
            )
            .set(cqc::dbr_addr, cq.dbr);
        for (k, a) in cq.pas.iter().enumerate() {
            if out.set_array(query_cq_out::pas, k, *a).is_err() {
                break;
            }
        }
        Ok(())
    }

    pub(super) fn modify_cq(&mut self, op_mod: u16, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<ModifyCqIn>(i)?;
        output::<ModifyCqOut>(o)?;
        self.require_initialized()?;
        let cqn = v.get32(modify_cq_in::cqn);
        if !self.objects.cqs.contains_key(&cqn) {
            return Err(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT));
        }
        match op_mod {
            // Moderation only: the model completes at once, so period and count are accepted
            // and have no effect; oi is honoured.
            modify_cq_op_mod::MODIFY => {
                let select = v.get32(modify_cq_in::modify_field_select_resize_field_select);
                let oi = v.sub(modify_cq_in::cq_context).get(cqc::oi) != 0;
                if let Some(cq) = self.objects.cqs.get_mut(&cqn) {
                    if select & modify_field_select::OI != 0 {
                        cq.oi = oi;
                    }
                }
                Ok(())
            }
            modify_cq_op_mod::RESIZE => self.resize_cq(cqn, &v),
            _ => Err(bad_param(syndrome::BAD_OP_MOD)),
        }
    }

    /// MODIFY_CQ resize: a RESIZE_CQ entry goes into the old ring at the producer index, and
    /// every later CQE into the new ring from the next index on (what Linux's
    /// `copy_resize_cqes` expects). Refused when the waiting entries do not fit the new ring.
    fn resize_cq(&mut self, cqn: u32, v: &View<'_, ModifyCqIn>) -> CmdResult {
        let select = v.get32(modify_cq_in::modify_field_select_resize_field_select);
        let c = v.sub(modify_cq_in::cq_context);
        if select & resize_field_select::LOG_CQ_SIZE == 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let log_size = c.get(cqc::log_cq_size) as u8;
        if u64::from(log_size) > self.cap(cmd_hca_cap::log_max_cq_sz) {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let cq = self
            .objects
            .cqs
            .get(&cqn)
            .ok_or(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT))?
            .clone();
        let page_size = if select & resize_field_select::LOG_PAGE_SIZE != 0 {
            let log_page = c.get32(cqc::log_page_size);
            if log_page > 20 {
                return Err(bad_param(syndrome::OUT_OF_RANGE));
            }
            4096u64 << log_page
        } else {
            cq.page_size
        };
        // The new buffer's offset in its first page (mlx5_ib `resize_user` selects it with
        // the size and page size); without the select bit the new buffer starts its page.
        let page_offset = if select & resize_field_select::PAGE_OFFSET != 0 {
            page_list::page_offset_bytes(page_size, c.get(cqc::page_offset))
        } else {
            0
        };
        let npages = page_list::pages_spanned(CQE_BYTES << log_size, page_size, page_offset);
        if v.array_len(modify_cq_in::pas) < npages {
            return Err(fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT));
        }
        let pas: Vec<u64> = (0..npages)
            .filter_map(|k| v.array(modify_cq_in::pas, k))
            .collect();
        if pas.iter().any(|a| a % page_size != 0) {
            return Err(bad_param(syndrome::BAD_PAGE));
        }
        let ci = self.read_cq_ci(&cq)?;
        let waiting = cq.producer.wrapping_sub(ci) & 0x00ff_ffff;
        // The marker needs a free entry in the old ring; the waiting entries move to the new.
        if waiting >= 1 << cq.log_size || waiting >= 1 << log_size {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let mut marker = [0u8; 64];
        marker[63] = make_op_own(u8::from(CqeOpcode::ResizeCq), 0);
        self.data_path()
            .write_cqe_at(cqn, marker)
            .map_err(|()| fail(CmdStatus::InternalError, syndrome::DMA_FAULT))?;
        if let Some(cq) = self.objects.cqs.get_mut(&cqn) {
            cq.log_size = log_size;
            cq.pas = pas;
            cq.page_size = page_size;
            cq.page_offset = page_offset;
        }
        Ok(())
    }

    /// The consumer index in CQ `cq`'s doorbell record.
    fn read_cq_ci(&mut self, cq: &Cq) -> Result<u32, super::Fail> {
        match self.dma.read_be32(cq.dbr) {
            Ok(v) => Ok(v & 0x00ff_ffff),
            Err(f) => {
                self.record_fault(f);
                Err(super::Fail {
                    status: bareverbs_firmware_cmd::CmdStatus::InternalError,
                    syndrome: syndrome::DMA_FAULT,
                })
            }
        }
    }
}
