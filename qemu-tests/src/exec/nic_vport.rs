//! QUERY/MODIFY_NIC_VPORT_CONTEXT and the queue counter sets (ALLOC/DEALLOC/QUERY_Q_COUNTER)
//! of the Ethernet NIC (Linux vport.c `mlx5_query_nic_vport_*`, `mlx5_modify_nic_vport_*`).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, input, output, syndrome, CmdResult, Fail};
use crate::eth::Eth;
use crate::hca::Hca;

/// `allowed_list_type` values.
const LIST_UC: u64 = 0;
const LIST_MC: u64 = 1;

fn mac_from(hi: u64, lo: u64) -> [u8; 6] {
    let b = ((hi << 32) | lo).to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

fn mac_entry(m: &[u8; 6]) -> u64 {
    m.iter().fold(0u64, |a, b| (a << 8) | u64::from(*b))
}

impl Hca {
    /// The Ethernet state, or BAD_OP for an InfiniBand port.
    pub(crate) fn eth_mut(&mut self) -> Result<&mut Eth, Fail> {
        self.require_initialized()?;
        self.eth
            .as_mut()
            .ok_or(fail(CmdStatus::BadOperation, syndrome::BAD_OPCODE))
    }

    pub(super) fn query_nic_vport_context(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryNicVportContextIn>(i)?;
        let mut out = output::<QueryNicVportContextOut>(o)?;
        // The GUIDs an Ethernet function reports here (Linux `mlx5_query_nic_vport_node_guid`).
        let guids = self
            .port_attrs(1)
            .map(|p| (p.node_guid, p.port_guid, p.sys_image_guid));
        let e = self.eth_mut()?;
        if v.get(query_nic_vport_context_in::other_vport) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let p = &e.vport;
        let list_type = v.get(query_nic_vport_context_in::allowed_list_type);
        let list = match list_type {
            LIST_UC => &p.uc_list,
            LIST_MC => &p.mc_list,
            _ => return Err(bad_param(syndrome::OUT_OF_RANGE)),
        };
        let mac = mac_entry(&p.permanent_mac);
        {
            let mut c = out.sub(query_nic_vport_context_out::nic_vport_context);
            c.set(nic_vport_context::min_wqe_inline_mode, p.min_inline)
                .set(
                    nic_vport_context::disable_mc_local_lb,
                    p.disable_mc_local_lb,
                )
                .set(
                    nic_vport_context::disable_uc_local_lb,
                    p.disable_uc_local_lb,
                )
                .set(nic_vport_context::roce_en, p.roce_en)
                .set(nic_vport_context::mtu, p.mtu)
                .set(nic_vport_context::promisc_uc, p.promisc_uc)
                .set(nic_vport_context::promisc_mc, p.promisc_mc)
                .set(nic_vport_context::promisc_all, p.promisc_all)
                .set(nic_vport_context::allowed_list_type, list_type)
                .set(nic_vport_context::allowed_list_size, list.len() as u64);
            if let Some((node, port, system)) = guids {
                c.set(nic_vport_context::node_guid, node)
                    .set(nic_vport_context::port_guid, port)
                    .set(nic_vport_context::system_image_guid, system);
            }
            c.sub(nic_vport_context::permanent_address)
                .set(mac_address_layout::mac_addr_47_32, mac >> 32)
                .set(mac_address_layout::mac_addr_31_0, mac & 0xffff_ffff);
        }
        for (k, m) in list.clone().iter().enumerate() {
            if out
                .set_array(
                    query_nic_vport_context_out::current_uc_mac_address,
                    k,
                    mac_entry(m),
                )
                .is_err()
            {
                break;
            }
        }
        Ok(())
    }

    /// Applies the fields `field_select` names; an address list longer than the general caps
    /// allow (`log_max_current_uc_list`, `…_mc_list`) is refused.
    pub(super) fn modify_nic_vport_context(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<ModifyNicVportContextIn>(i)?;
        output::<ModifyNicVportContextOut>(o)?;
        let max_uc = 1usize << self.cap(cmd_hca_cap::log_max_current_uc_list);
        let max_mc = 1usize << self.cap(cmd_hca_cap::log_max_current_mc_list);
        let e = self.eth_mut()?;
        if v.get(modify_nic_vport_context_in::other_vport) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let sel = v.sub(modify_nic_vport_context_in::field_select);
        let c = v.sub(modify_nic_vport_context_in::nic_vport_context);
        let f = |x| sel.get(x) != 0;
        use modify_nic_vport_field_select as s;
        use nic_vport_context as n;
        if f(s::addresses_list) {
            let ty = c.get(n::allowed_list_type);
            let size = c.get(n::allowed_list_size) as usize;
            let (max, is_uc) = match ty {
                LIST_UC => (max_uc, true),
                LIST_MC => (max_mc, false),
                _ => return Err(bad_param(syndrome::OUT_OF_RANGE)),
            };
            if size > max || v.array_len(modify_nic_vport_context_in::current_uc_mac_address) < size
            {
                return Err(bad_param(syndrome::OUT_OF_RANGE));
            }
            let list: Vec<[u8; 6]> = (0..size)
                .filter_map(|k| v.array(modify_nic_vport_context_in::current_uc_mac_address, k))
                .map(|m| mac_from(m >> 32, m & 0xffff_ffff))
                .collect();
            if is_uc {
                e.vport.uc_list = list;
            } else {
                e.vport.mc_list = list;
            }
        }
        if f(s::permanent_address) {
            let a = c.sub(n::permanent_address);
            e.vport.permanent_mac = mac_from(
                a.get(mac_address_layout::mac_addr_47_32),
                a.get(mac_address_layout::mac_addr_31_0),
            );
        }
        if f(s::promisc) {
            e.vport.promisc_uc = c.get(n::promisc_uc) != 0;
            e.vport.promisc_mc = c.get(n::promisc_mc) != 0;
            e.vport.promisc_all = c.get(n::promisc_all) != 0;
        }
        if f(s::mtu) {
            e.vport.mtu = c.get(n::mtu) as u16;
        }
        if f(s::min_inline) {
            e.vport.min_inline = c.get(n::min_wqe_inline_mode) as u8;
        }
        if f(s::disable_uc_local_lb) {
            e.vport.disable_uc_local_lb = c.get(n::disable_uc_local_lb) != 0;
        }
        if f(s::disable_mc_local_lb) {
            e.vport.disable_mc_local_lb = c.get(n::disable_mc_local_lb) != 0;
        }
        if f(s::roce_en) {
            e.vport.roce_en = c.get(n::roce_en) != 0;
        }
        Ok(())
    }

    /// A queue counter set: receive queues name it in `rqc.counter_set_id`.
    pub(super) fn alloc_q_counter(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        input::<AllocQCounterIn>(i)?;
        let mut out = output::<AllocQCounterOut>(o)?;
        let e = self.eth_mut()?;
        let id = (1..=u8::MAX)
            .find(|n| !e.q_counters.contains_key(n))
            .ok_or(fail(CmdStatus::NoResources, syndrome::EXHAUSTED))?;
        e.q_counters.insert(id, 0);
        out.set(alloc_q_counter_out::counter_set_id, id);
        Ok(())
    }

    pub(super) fn dealloc_q_counter(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DeallocQCounterIn>(i)?;
        output::<DeallocQCounterOut>(o)?;
        let id = v.get(dealloc_q_counter_in::counter_set_id) as u8;
        self.eth_mut()?
            .q_counters
            .remove(&id)
            .map(|_| ())
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))
    }

    /// `out_of_buffer`: frames that found their RQ without a posted WQE.
    pub(super) fn query_q_counter(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryQCounterIn>(i)?;
        let mut out = output::<QueryQCounterOut>(o)?;
        let id = v.get(query_q_counter_in::counter_set_id) as u8;
        let clear = v.get(query_q_counter_in::clear) != 0;
        let e = self.eth_mut()?;
        let c = e
            .q_counters
            .get_mut(&id)
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))?;
        out.set(query_q_counter_out::out_of_buffer, *c as u32);
        if clear {
            *c = 0;
        }
        Ok(())
    }
}

impl Hca {
    /// Frames and octets by kind, sent and received; errors are none (the model's wire loses
    /// nothing, and what steering drops is not an error).
    pub(super) fn query_vport_counter(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryVportCounterIn>(i)?;
        let mut out = output::<QueryVportCounterOut>(o)?;
        let clear = v.get(query_vport_counter_in::clear) != 0;
        let e = self.eth_mut()?;
        if v.get(query_vport_counter_in::other_vport) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let c = e.counters;
        use query_vport_counter_out as q;
        for (field, t) in [
            (q::received_eth_unicast, c.rx[0]),
            (q::received_eth_multicast, c.rx[1]),
            (q::received_eth_broadcast, c.rx[2]),
            (q::transmitted_eth_unicast, c.tx[0]),
            (q::transmitted_eth_multicast, c.tx[1]),
            (q::transmitted_eth_broadcast, c.tx[2]),
            (q::local_loopback, c.local_loopback),
        ] {
            out.sub(field)
                .set(traffic_counter::packets, t.packets)
                .set(traffic_counter::octets, t.octets);
        }
        if clear {
            e.counters.rx = Default::default();
            e.counters.tx = Default::default();
            e.counters.local_loopback = Default::default();
        }
        Ok(())
    }
}
