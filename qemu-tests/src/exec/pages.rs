//! QUERY_PAGES and MANAGE_PAGES with real page accounting (mlx5-reference 03 §4).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, input, output, syndrome, CmdResult};
use crate::dma::AddressSpaceExt;
use crate::hca::{Hca, HcaState};

impl Hca {
    pub(super) fn query_pages(&mut self, op_mod: u16, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryPagesIn>(i)?;
        let mut out = output::<QueryPagesOut>(o)?;
        self.require_enabled()?;
        if v.get(query_pages_in::function_id) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let held = self.pages.len() as i64;
        let boot = i64::from(self.cfg.boot_pages);
        let init = i64::from(self.cfg.init_pages);
        let want = match op_mod {
            query_pages_op_mod::BOOT => boot - held,
            query_pages_op_mod::INIT if self.state == HcaState::Initialized => 0,
            query_pages_op_mod::INIT => boot + init - held,
            query_pages_op_mod::REGULAR => self.pages_required() as i64 - held,
            _ => return Err(bad_param(syndrome::BAD_OP_MOD)),
        };
        let want = want.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        let want = if op_mod == query_pages_op_mod::REGULAR {
            want
        } else {
            want.max(0)
        };
        out.set(query_pages_out::function_id, 0u16)
            .set(query_pages_out::num_pages, want as u32);
        Ok(())
    }

    pub(super) fn manage_pages(&mut self, op_mod: u16, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<ManagePagesIn>(i)?;
        let mut out = output::<ManagePagesOut>(o)?;
        self.require_enabled()?;
        if v.get(manage_pages_in::function_id) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let n = v.get(manage_pages_in::input_num_entries) as usize;
        match op_mod {
            manage_pages_op_mod::CANT_GIVE => {
                log::info!("model: driver cannot give pages; dropping the request");
                self.regular_pages = self.regular_pages.min(self.pages.len());
                Ok(())
            }
            manage_pages_op_mod::GIVE => {
                if v.array_len(manage_pages_in::pas) < n {
                    return Err(fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT));
                }
                let mut new = Vec::with_capacity(n);
                for k in 0..n {
                    let addr = v.array(manage_pages_in::pas, k).unwrap_or(0);
                    if addr % ADAPTER_PAGE_SIZE as u64 != 0
                        || self.pages.contains(&addr)
                        || new.contains(&addr)
                    {
                        return Err(bad_param(syndrome::BAD_PAGE));
                    }
                    // Firmware will use the page: it must be reachable.
                    if let Err(f) = self.dma.read_be64(addr) {
                        self.record_fault(f);
                        return Err(bad_param(syndrome::DMA_FAULT));
                    }
                    new.push(addr);
                }
                self.pages.extend(new);
                Ok(())
            }
            manage_pages_op_mod::TAKE => {
                let spare = self.pages.len().saturating_sub(self.pages_required());
                let count = n.min(spare);
                if out.array_len(manage_pages_out::pas) < count {
                    return Err(fail(CmdStatus::BadOutputLength, syndrome::SHORT_OUTPUT));
                }
                let taken: Vec<u64> = self.pages.iter().rev().take(count).copied().collect();
                for (k, addr) in taken.iter().enumerate() {
                    self.pages.remove(addr);
                    let _ = out.set_array(manage_pages_out::pas, k, *addr);
                }
                out.set(manage_pages_out::output_num_entries, count as u32);
                Ok(())
            }
            _ => Err(bad_param(syndrome::BAD_OP_MOD)),
        }
    }

    /// Firmware asks for `n` more pages (or gives `-n` back) with a page-request EQE.
    pub fn request_pages(&mut self, n: i32) {
        if n > 0 {
            self.regular_pages += n as usize;
        } else {
            self.regular_pages = self.regular_pages.saturating_sub(n.unsigned_abs() as usize);
        }
        let mut data = [0u8; 28];
        data[4..8].copy_from_slice(&n.to_be_bytes());
        self.post_event(event_type::PAGE_REQUEST, 0, data);
    }

    /// Pages firmware needs at this moment.
    pub(crate) fn pages_required(&self) -> usize {
        let mut need = self.regular_pages;
        if self.state == HcaState::Initialized {
            need += (self.cfg.boot_pages + self.cfg.init_pages) as usize;
        }
        need
    }
}
