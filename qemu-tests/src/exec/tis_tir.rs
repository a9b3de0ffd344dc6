//! CREATE/MODIFY/DESTROY_TIS, _TIR and _RQT: the transport objects of the Ethernet NIC
//! (Linux transobj.c; mlx5_ifc `tisc`, `tirc`, `rqtc`). A TIR delivers to one RQ or spreads
//! over an RQT by hash; its transport domain, RQ and RQT must exist when it is made.

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::View;
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, input, output, syndrome, CmdResult, Fail};
use crate::eth::{Rqt, Tir, TirDispatch, Tis};
use crate::hca::Hca;

impl Hca {
    pub(super) fn create_tis(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateTisIn>(i)?;
        let mut out = output::<CreateTisOut>(o)?;
        self.eth_mut()?;
        let c = v.sub(create_tis_in::ctx);
        let td = c.get32(tisc::transport_domain);
        if !self.objects.tds.contains(&td) {
            return Err(bad_param(syndrome::NO_SUCH_OBJECT));
        }
        let max = 1usize << self.cap(cmd_hca_cap::log_max_tis);
        let e = self.eth_mut()?;
        if e.tises.len() >= max {
            return Err(fail(CmdStatus::NoResources, syndrome::EXHAUSTED));
        }
        let n = e.next_object();
        e.tises.insert(
            n,
            Tis {
                prio: c.get(tisc::prio) as u8,
            },
        );
        out.set(create_tis_out::tisn, n);
        Ok(())
    }

    pub(super) fn modify_tis(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<ModifyTisIn>(i)?;
        output::<ModifyTisOut>(o)?;
        let n = v.get32(modify_tis_in::tisn);
        let prio = v.sub(modify_tis_in::ctx).get(tisc::prio) as u8;
        let set_prio = v.sub(modify_tis_in::bitmask).get(modify_tis_bitmask::prio) != 0;
        let t = self
            .eth_mut()?
            .tises
            .get_mut(&n)
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))?;
        if set_prio {
            t.prio = prio;
        }
        Ok(())
    }

    /// A TIS an SQ still transmits through cannot go.
    pub(super) fn destroy_tis(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroyTisIn>(i)?;
        output::<DestroyTisOut>(o)?;
        let n = v.get32(destroy_tis_in::tisn);
        let e = self.eth_mut()?;
        if !e.tises.contains_key(&n) {
            return Err(bad_param(syndrome::NO_SUCH_OBJECT));
        }
        if e.sqs.values().any(|s| s.tis == Some(n)) {
            return Err(fail(CmdStatus::BadResourceState, syndrome::IN_USE));
        }
        e.tises.remove(&n);
        Ok(())
    }

    /// The dispatch a `tirc` describes, its RQ or RQT checked.
    fn tir_dispatch(&self, c: &View<'_, Tirc>) -> Result<TirDispatch, Fail> {
        let e = self.eth.as_ref().ok_or(bad_param(syndrome::BAD_OPCODE))?;
        match c.get(tirc::disp_type) as u8 {
            tir_disp_type::DIRECT => {
                let rqn = c.get32(tirc::inline_rqn);
                if !e.rqs.contains_key(&rqn) {
                    return Err(bad_param(syndrome::NO_SUCH_OBJECT));
                }
                Ok(TirDispatch::Direct(rqn))
            }
            tir_disp_type::INDIRECT => {
                let rqt = c.get32(tirc::indirect_table);
                if !e.rqts.contains_key(&rqt) {
                    return Err(bad_param(syndrome::NO_SUCH_OBJECT));
                }
                let hash_fn = c.get(tirc::rx_hash_fn) as u8;
                if hash_fn > rx_hash_fn::TOEPLITZ {
                    return Err(bad_param(syndrome::OUT_OF_RANGE));
                }
                let s = c.sub(tirc::rx_hash_field_selector_outer);
                let mut key = [0u8; 40];
                key.copy_from_slice(c.bytes(tirc::rx_hash_toeplitz_key));
                Ok(TirDispatch::Indirect {
                    rqt,
                    hash_fn,
                    key,
                    l3_ipv6: s.get(rx_hash_field_select::l3_prot_type) != 0,
                    l4_udp: s.get(rx_hash_field_select::l4_prot_type) != 0,
                    fields: s.get32(rx_hash_field_select::selected_fields),
                })
            }
            _ => Err(bad_param(syndrome::OUT_OF_RANGE)),
        }
    }

    /// No LRO (`packet_merge_mask` must be clear: the caps offer none).
    pub(super) fn create_tir(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateTirIn>(i)?;
        let mut out = output::<CreateTirOut>(o)?;
        self.eth_mut()?;
        let c = v.sub(create_tir_in::ctx);
        let td = c.get32(tirc::transport_domain);
        if !self.objects.tds.contains(&td) {
            return Err(bad_param(syndrome::NO_SUCH_OBJECT));
        }
        if c.get(tirc::packet_merge_mask) != 0 || c.get(tirc::tunneled_offload_en) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let dispatch = self.tir_dispatch(&c)?;
        let max = 1usize << self.cap(cmd_hca_cap::log_max_tir);
        let e = self.eth_mut()?;
        if e.tirs.len() >= max {
            return Err(fail(CmdStatus::NoResources, syndrome::EXHAUSTED));
        }
        let n = e.next_object();
        e.tirs.insert(
            n,
            Tir {
                dispatch,
                self_lb_block: c.get(tirc::self_lb_block) as u8,
            },
        );
        out.set(create_tir_out::tirn, n);
        Ok(())
    }

    /// `bitmask.self_lb_en` takes `self_lb_block`; `bitmask.hash` the hash function, key,
    /// fields and indirection table.
    pub(super) fn modify_tir(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<ModifyTirIn>(i)?;
        output::<ModifyTirOut>(o)?;
        let n = v.get32(modify_tir_in::tirn);
        let c = v.sub(modify_tir_in::ctx);
        let b = v.sub(modify_tir_in::bitmask);
        if b.get(modify_tir_bitmask::packet_merge) != 0 && c.get(tirc::packet_merge_mask) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let dispatch = if b.get(modify_tir_bitmask::hash) != 0 {
            Some(self.tir_dispatch(&c)?)
        } else {
            None
        };
        let t = self
            .eth_mut()?
            .tirs
            .get_mut(&n)
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))?;
        if b.get(modify_tir_bitmask::self_lb_en) != 0 {
            t.self_lb_block = c.get(tirc::self_lb_block) as u8;
        }
        if let Some(d) = dispatch {
            t.dispatch = d;
        }
        Ok(())
    }

    pub(super) fn destroy_tir(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroyTirIn>(i)?;
        output::<DestroyTirOut>(o)?;
        let n = v.get32(destroy_tir_in::tirn);
        let e = self.eth_mut()?;
        e.tirs
            .remove(&n)
            .map(|_| ())
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))
    }

    /// The RQ list of an RQT command: `size` existing RQs.
    fn rqt_list(
        &self,
        size: usize,
        max: usize,
        at: impl Fn(usize) -> Option<u64>,
    ) -> Result<Vec<u32>, Fail> {
        let e = self.eth.as_ref().ok_or(bad_param(syndrome::BAD_OPCODE))?;
        if size == 0 || size > max {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        (0..size)
            .map(|k| {
                let rqn = at(k).ok_or(fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT))?;
                let rqn = (rqn & 0xff_ffff) as u32;
                if e.rqs.contains_key(&rqn) {
                    Ok(rqn)
                } else {
                    Err(bad_param(syndrome::NO_SUCH_OBJECT))
                }
            })
            .collect()
    }

    pub(super) fn create_rqt(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateRqtIn>(i)?;
        let mut out = output::<CreateRqtOut>(o)?;
        self.eth_mut()?;
        let c = v.sub(create_rqt_in::rqt_context);
        let max = c.get(rqtc::rqt_max_size) as usize;
        if max == 0 || max > 1usize << self.cap(cmd_hca_cap::log_max_rqt_size) {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let size = c.get(rqtc::rqt_actual_size) as usize;
        let rqns = self.rqt_list(size, max, |k| v.array(create_rqt_in::rq_num, k))?;
        let limit = 1usize << self.cap(cmd_hca_cap::log_max_rqt);
        let e = self.eth_mut()?;
        if e.rqts.len() >= limit {
            return Err(fail(CmdStatus::NoResources, syndrome::EXHAUSTED));
        }
        let n = e.next_object();
        e.rqts.insert(
            n,
            Rqt {
                max_size: max as u16,
                rqns,
            },
        );
        out.set(create_rqt_out::rqtn, n);
        Ok(())
    }

    pub(super) fn modify_rqt(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<ModifyRqtIn>(i)?;
        output::<ModifyRqtOut>(o)?;
        let n = v.get32(modify_rqt_in::rqtn);
        let max = self
            .eth_mut()?
            .rqts
            .get(&n)
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))?
            .max_size as usize;
        if v.sub(modify_rqt_in::bitmask).get(rqt_bitmask::rqn_list) == 0 {
            return Ok(());
        }
        let size = v.sub(modify_rqt_in::ctx).get(rqtc::rqt_actual_size) as usize;
        let rqns = self.rqt_list(size, max, |k| v.array(modify_rqt_in::rq_num, k))?;
        if let Some(t) = self.eth_mut()?.rqts.get_mut(&n) {
            t.rqns = rqns;
        }
        Ok(())
    }

    pub(super) fn destroy_rqt(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroyRqtIn>(i)?;
        output::<DestroyRqtOut>(o)?;
        let n = v.get32(destroy_rqt_in::rqtn);
        let e = self.eth_mut()?;
        e.rqts
            .remove(&n)
            .map(|_| ())
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))
    }
}
