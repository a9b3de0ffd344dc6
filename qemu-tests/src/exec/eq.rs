//! CREATE_EQ / DESTROY_EQ / QUERY_EQ (mlx5-reference 04 §1).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, input, output, syndrome, CmdResult};
use crate::eq::{Eq, EQE_BYTES};
use crate::hca::Hca;
use crate::page_list;

impl Hca {
    pub(super) fn create_eq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateEqIn>(i)?;
        let mut out = output::<CreateEqOut>(o)?;
        self.require_initialized()?;
        let ctx = v.sub(create_eq_in::eq_context_entry);
        let log_size = ctx.get(eqc::log_eq_size) as u8;
        let uar = ctx.get32(eqc::uar_page);
        let intr = ctx.get(eqc::intr) as u16;
        let log_page = ctx.get(eqc::log_page_size) as u32;
        if u64::from(log_size) > self.cap(cmd_hca_cap::log_max_eq_sz) || log_page > 20 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        if intr >= self.cfg.msix_vectors {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        if !self.objects.uars.contains(&uar) {
            return Err(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT));
        }
        let page_size = 4096u64 << log_page;
        let page_offset = page_list::page_offset_bytes(page_size, ctx.get(eqc::page_offset));
        let npages = page_list::pages_spanned(EQE_BYTES << log_size, page_size, page_offset);
        if v.array_len(create_eq_in::pas) < npages {
            return Err(fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT));
        }
        let pas: Vec<u64> = (0..npages)
            .filter_map(|k| v.array(create_eq_in::pas, k))
            .collect();
        if pas.iter().any(|a| a % page_size != 0) {
            return Err(bad_param(syndrome::BAD_PAGE));
        }
        let max_eqs = 1u32 << self.cap(cmd_hca_cap::log_max_eq);
        let eqn = (0..max_eqs.min(256) as u16)
            .map(|n| n as u8)
            .find(|n| !self.objects.eqs.contains_key(n))
            .ok_or(fail(CmdStatus::NoResources, syndrome::EXHAUSTED))?;
        let mut mask = [0u64; 4];
        for (k, m) in mask.iter_mut().enumerate() {
            *m = event_bitmask(&v, k);
        }
        self.objects.eqs.insert(
            eqn,
            Eq {
                eqn,
                log_size,
                uar,
                intr,
                pas,
                page_size,
                page_offset,
                mask,
                producer: 0,
                consumer: 0,
                armed: false,
                overrun: false,
            },
        );
        out.set(create_eq_out::eq_number, eqn);
        Ok(())
    }

    pub(super) fn destroy_eq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroyEqIn>(i)?;
        output::<DestroyEqOut>(o)?;
        self.require_initialized()?;
        let eqn = v.get(destroy_eq_in::eq_number) as u8;
        self.objects
            .eqs
            .remove(&eqn)
            .ok_or(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT))?;
        Ok(())
    }

    pub(super) fn query_eq(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryEqIn>(i)?;
        let mut out = output::<QueryEqOut>(o)?;
        self.require_initialized()?;
        let eqn = v.get(query_eq_in::eq_number) as u8;
        let eq = self
            .objects
            .eqs
            .get(&eqn)
            .ok_or(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT))?;
        let st = if eq.armed {
            eqc_st::ARMED
        } else {
            eqc_st::FIRED
        };
        out.sub(query_eq_out::eq_context_entry)
            .set(eqc::log_eq_size, eq.log_size)
            .set(eqc::uar_page, eq.uar)
            .set(eqc::intr, eq.intr)
            .set(eqc::st, st)
            .set(
                eqc::log_page_size,
                (eq.page_size.trailing_zeros() - 12) as u8,
            )
            .set(
                eqc::page_offset,
                eq.page_offset / (eq.page_size / page_list::PAGE_OFFSET_QUANTA),
            )
            .set(eqc::consumer_counter, eq.consumer)
            .set(eqc::producer_counter, eq.producer & 0x00ff_ffff);
        out.set(query_eq_out::event_bitmask, eq.mask[0]);
        let pas = eq.pas.clone();
        for (k, a) in pas.into_iter().enumerate() {
            if out.set_array(query_eq_out::pas, k, a).is_err() {
                break;
            }
        }
        Ok(())
    }
}
