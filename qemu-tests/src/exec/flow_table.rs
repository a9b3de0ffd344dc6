//! NIC receive flow steering commands: CREATE/MODIFY/DESTROY_FLOW_TABLE, SET_FLOW_TABLE_ROOT,
//! CREATE/DESTROY_FLOW_GROUP, SET/DELETE_FLOW_TABLE_ENTRY and the flow counters (Linux
//! fs_cmd.c; mlx5_ifc `create_flow_table_in` …). Only the NIC receive table type exists
//! (the caps offer no other). What the tables do with a frame is `eth/steering.rs`.

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::{Layout, View};
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, input, output, syndrome, CmdResult, Fail};
use crate::eth::steering::{Dest, FlowCounter, Fte, Group, Table, MATCH_BYTES};
use crate::eth::Eth;
use crate::hca::Hca;

/// `modify_flow_table_in.modify_field_select`: the miss table.
const MODIFY_MISS_TABLE_ID: u64 = 1 << 0;
/// Levels below the root the caps offer (`max_ft_level`).
const MAX_FT_LEVEL: u64 = 64;
/// log2 of the largest table the caps offer (`log_max_ft_size`).
const LOG_MAX_FT_SIZE: u64 = 20;
/// Byte offset of the destination list in SET_FLOW_TABLE_ENTRY: after `flow_context`.
const DEST_LIST_AT: usize = (set_fte_in::flow_context.bit + FlowContext::BITS) / 8;

fn nic_rx(table_type: u64, other_vport: u64) -> CmdResult {
    if table_type != u64::from(flow_table_type::NIC_RX) || other_vport != 0 {
        return Err(bad_param(syndrome::OUT_OF_RANGE));
    }
    Ok(())
}

impl Eth {
    fn table(&mut self, id: u32) -> Result<&mut Table, Fail> {
        self.steering
            .tables
            .get_mut(&id)
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))
    }

    /// The miss of a `flow_table_context`: FWD needs an existing table.
    fn miss_of(&self, c: &View<'_, FlowTableContext>) -> Result<Option<u32>, Fail> {
        match c.get(flow_table_context::table_miss_action) as u8 {
            table_miss_action::DEF => Ok(None),
            table_miss_action::FWD => {
                let t = c.get32(flow_table_context::table_miss_id);
                if self.steering.tables.contains_key(&t) {
                    Ok(Some(t))
                } else {
                    Err(bad_param(syndrome::NO_SUCH_OBJECT))
                }
            }
            _ => Err(bad_param(syndrome::OUT_OF_RANGE)),
        }
    }
}

impl Hca {
    pub(super) fn create_flow_table(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateFlowTableIn>(i)?;
        let mut out = output::<CreateFlowTableOut>(o)?;
        nic_rx(
            v.get(create_flow_table_in::table_type),
            v.get(create_flow_table_in::other_vport),
        )?;
        let c = v.sub(create_flow_table_in::flow_table_context);
        let level = c.get(flow_table_context::level);
        let log_size = c.get(flow_table_context::log_size);
        if level >= MAX_FT_LEVEL || log_size > LOG_MAX_FT_SIZE {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let e = self.eth_mut()?;
        let miss = e.miss_of(&c)?;
        let id = e.next_object();
        e.steering.tables.insert(
            id,
            Table {
                level: level as u8,
                log_size: log_size as u8,
                miss,
                groups: Default::default(),
                ftes: Default::default(),
            },
        );
        out.set(create_flow_table_out::table_id, id);
        Ok(())
    }

    pub(super) fn modify_flow_table(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<ModifyFlowTableIn>(i)?;
        output::<ModifyFlowTableOut>(o)?;
        nic_rx(
            v.get(modify_flow_table_in::table_type),
            v.get(modify_flow_table_in::other_vport),
        )?;
        let id = v.get32(modify_flow_table_in::table_id);
        let e = self.eth_mut()?;
        e.table(id)?;
        if v.get(modify_flow_table_in::modify_field_select) & MODIFY_MISS_TABLE_ID != 0 {
            let miss = e.miss_of(&v.sub(modify_flow_table_in::flow_table_context))?;
            e.table(id)?.miss = miss;
        }
        Ok(())
    }

    /// Linux destroys tables that others' misses still point to (fs_core unlinks them
    /// afterwards): allowed; a frame sent to a missing table is dropped. The root is unset.
    pub(super) fn destroy_flow_table(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroyFlowTableIn>(i)?;
        output::<DestroyFlowTableOut>(o)?;
        nic_rx(
            v.get(destroy_flow_table_in::table_type),
            v.get(destroy_flow_table_in::other_vport),
        )?;
        let id = v.get32(destroy_flow_table_in::table_id);
        let e = self.eth_mut()?;
        e.table(id)?;
        if e.steering.root == Some(id) {
            e.steering.root = None;
        }
        e.steering.tables.remove(&id);
        Ok(())
    }

    /// Table 0 sets no root: every frame is dropped.
    pub(super) fn set_flow_table_root(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<SetFlowTableRootIn>(i)?;
        output::<SetFlowTableRootOut>(o)?;
        nic_rx(
            v.get(set_flow_table_root_in::table_type),
            v.get(set_flow_table_root_in::other_vport),
        )?;
        let id = v.get32(set_flow_table_root_in::table_id);
        let e = self.eth_mut()?;
        if id == 0 {
            e.steering.root = None;
            return Ok(());
        }
        e.table(id)?;
        e.steering.root = Some(id);
        Ok(())
    }

    /// The group's range must fit the table and overlap no other group; only the header
    /// parts `match_criteria_enable` names count in its mask.
    pub(super) fn create_flow_group(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateFlowGroupIn>(i)?;
        let mut out = output::<CreateFlowGroupOut>(o)?;
        nic_rx(
            v.get(create_flow_group_in::table_type),
            v.get(create_flow_group_in::other_vport),
        )?;
        let id = v.get32(create_flow_group_in::table_id);
        let start = v.get32(create_flow_group_in::start_flow_index);
        let end = v.get32(create_flow_group_in::end_flow_index);
        let enable = v.get(create_flow_group_in::match_criteria_enable) as u8;
        let criteria = match_bytes(
            v.as_bytes(),
            create_flow_group_in::match_criteria.bit,
            enable,
        );
        let e = self.eth_mut()?;
        let t = e.table(id)?;
        if start > end
            || u64::from(end) >= 1u64 << t.log_size
            || t.groups.values().any(|g| start <= g.end && g.start <= end)
        {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let g = e.next_object();
        e.table(id)?.groups.insert(
            g,
            Group {
                start,
                end,
                criteria,
            },
        );
        out.set(create_flow_group_out::group_id, g);
        Ok(())
    }

    /// A group with entries cannot go.
    pub(super) fn destroy_flow_group(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroyFlowGroupIn>(i)?;
        output::<DestroyFlowGroupOut>(o)?;
        nic_rx(
            v.get(destroy_flow_group_in::table_type),
            v.get(destroy_flow_group_in::other_vport),
        )?;
        let id = v.get32(destroy_flow_group_in::table_id);
        let g = v.get32(destroy_flow_group_in::group_id);
        let t = self.eth_mut()?.table(id)?;
        if !t.groups.contains_key(&g) {
            return Err(bad_param(syndrome::NO_SUCH_OBJECT));
        }
        if t.ftes.values().any(|f| f.group == g) {
            return Err(fail(CmdStatus::BadResourceState, syndrome::IN_USE));
        }
        t.groups.remove(&g);
        Ok(())
    }

    /// op_mod 0 sets a new entry, 1 replaces an existing one. The index must lie in the
    /// named group; destinations are TIRs or deeper tables; counters must exist.
    pub(super) fn set_flow_table_entry(
        &mut self,
        op_mod: u16,
        i: &[u8],
        o: &mut [u8],
    ) -> CmdResult {
        let v = input::<SetFteIn>(i)?;
        output::<SetFteOut>(o)?;
        nic_rx(
            v.get(set_fte_in::table_type),
            v.get(set_fte_in::other_vport),
        )?;
        if op_mod > 1 {
            return Err(bad_param(syndrome::BAD_OP_MOD));
        }
        let id = v.get32(set_fte_in::table_id);
        let index = v.get32(set_fte_in::flow_index);
        let ignore_level = v.get(set_fte_in::ignore_flow_level) != 0;
        let c = v.sub(set_fte_in::flow_context);
        let group = c.get32(flow_context::group_id);
        let action = c.get(flow_context::action) as u16;
        let n_dest = c.get(flow_context::destination_list_size) as usize;
        let n_count = c.get(flow_context::flow_counter_list_size) as usize;
        if c.get(flow_context::extended_destination) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        use flow_action as a;
        if action & !(a::ALLOW | a::DROP | a::FWD_DEST | a::COUNT) != 0
            || (action & a::DROP != 0 && action & a::FWD_DEST != 0)
        {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let list = i
            .get(DEST_LIST_AT..DEST_LIST_AT + 8 * (n_dest + n_count))
            .ok_or(fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT))?;
        let value = match_bytes(
            v.as_bytes(),
            set_fte_in::flow_context.bit + flow_context::match_value.bit,
            0xff,
        );
        let flow_tag = c.get32(flow_context::flow_tag);
        let e = self.eth_mut()?;
        let level = e.table(id)?.level;
        let mut dests = Vec::with_capacity(n_dest);
        for k in 0..n_dest {
            let d = View::<DestFormat>::new_checked(&list[8 * k..8 * k + 8])
                .unwrap_or_else(|_| unreachable!("8 bytes hold a destination"));
            let n = d.get32(dest_format_struct::destination_id);
            match d.get(dest_format_struct::destination_type) as u8 {
                flow_destination_type::TIR if e.tirs.contains_key(&n) => dests.push(Dest::Tir(n)),
                flow_destination_type::FLOW_TABLE => {
                    let t = e
                        .steering
                        .tables
                        .get(&n)
                        .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))?;
                    if t.level <= level && !ignore_level {
                        return Err(bad_param(syndrome::OUT_OF_RANGE));
                    }
                    dests.push(Dest::Table(n));
                }
                ty => {
                    log::info!("model: flow table entry destination type {ty} id {n:#x} refused");
                    return Err(bad_param(syndrome::NO_SUCH_OBJECT));
                }
            }
        }
        if action & a::FWD_DEST != 0 && dests.is_empty() {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let counters: Vec<u32> = (n_dest..n_dest + n_count)
            .map(|k| {
                u32::from_be_bytes([
                    list[8 * k],
                    list[8 * k + 1],
                    list[8 * k + 2],
                    list[8 * k + 3],
                ])
            })
            .collect();
        if counters
            .iter()
            .any(|c| !e.steering.counters.contains_key(c))
        {
            log::info!("model: flow table entry counters {counters:?}: not all exist");
            return Err(bad_param(syndrome::NO_SUCH_OBJECT));
        }
        let t = e.table(id)?;
        let g = t
            .groups
            .get(&group)
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))?;
        if index < g.start || index > g.end {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let exists = t.ftes.contains_key(&index);
        if exists != (op_mod == 1) {
            return Err(fail(CmdStatus::BadResourceState, syndrome::WRONG_STATE));
        }
        t.ftes.insert(
            index,
            Fte {
                group,
                value,
                action,
                flow_tag,
                dests,
                counters,
            },
        );
        Ok(())
    }

    pub(super) fn delete_flow_table_entry(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DeleteFteIn>(i)?;
        output::<DeleteFteOut>(o)?;
        nic_rx(
            v.get(delete_fte_in::table_type),
            v.get(delete_fte_in::other_vport),
        )?;
        let id = v.get32(delete_fte_in::table_id);
        let index = v.get32(delete_fte_in::flow_index);
        self.eth_mut()?
            .table(id)?
            .ftes
            .remove(&index)
            .map(|_| ())
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))
    }

    /// One counter, or a bulk of `2^flow_counter_bulk_log_size` (or `128 ×
    /// flow_counter_bulk`) consecutive ones; the first id is returned.
    pub(super) fn alloc_flow_counter(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<AllocFlowCounterIn>(i)?;
        let mut out = output::<AllocFlowCounterOut>(o)?;
        let log = v.get(alloc_flow_counter_in::flow_counter_bulk_log_size);
        let bulk = v.get(alloc_flow_counter_in::flow_counter_bulk);
        let n: u32 = match (log, bulk) {
            (0, 0) => 1,
            (0, b) => 128 * b as u32,
            (l, _) if l <= 16 => 1 << l,
            _ => return Err(bad_param(syndrome::OUT_OF_RANGE)),
        };
        let e = self.eth_mut()?;
        let c = &mut e.steering.counters;
        if c.len() + n as usize > 1 << 16 {
            return Err(fail(CmdStatus::NoResources, syndrome::EXHAUSTED));
        }
        let first = c.keys().next_back().map_or(1, |k| k + 1);
        for k in first..first + n {
            c.insert(k, FlowCounter::default());
        }
        out.set(alloc_flow_counter_out::flow_counter_id, first);
        Ok(())
    }

    pub(super) fn dealloc_flow_counter(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DeallocFlowCounterIn>(i)?;
        output::<DeallocFlowCounterOut>(o)?;
        let id = v.get32(dealloc_flow_counter_in::flow_counter_id);
        let e = self.eth_mut()?;
        let used = e
            .steering
            .tables
            .values()
            .any(|t| t.ftes.values().any(|f| f.counters.contains(&id)));
        if used {
            return Err(fail(CmdStatus::BadResourceState, syndrome::IN_USE));
        }
        e.steering
            .counters
            .remove(&id)
            .map(|_| ())
            .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))
    }

    /// `num_of_counters` counters from `flow_counter_id` (0: one), each a
    /// `traffic_counter` after the header.
    pub(super) fn query_flow_counter(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryFlowCounterIn>(i)?;
        output::<QueryFlowCounterOut>(o)?;
        let id = v.get32(query_flow_counter_in::flow_counter_id);
        let n = v.get32(query_flow_counter_in::num_of_counters).max(1);
        let clear = v.get(query_flow_counter_in::clear) != 0;
        let at = QueryFlowCounterOut::BYTES;
        if o.len() < at + 16 * n as usize {
            return Err(fail(CmdStatus::BadOutputLength, syndrome::SHORT_OUTPUT));
        }
        let e = self.eth_mut()?;
        for k in 0..n {
            let c = e
                .steering
                .counters
                .get_mut(&(id + k))
                .ok_or(bad_param(syndrome::NO_SUCH_OBJECT))?;
            let slot = at + 16 * k as usize;
            o[slot..slot + 8].copy_from_slice(&c.packets.to_be_bytes());
            o[slot + 8..slot + 16].copy_from_slice(&c.octets.to_be_bytes());
            if clear {
                *c = FlowCounter::default();
            }
        }
        Ok(())
    }
}

/// The `fte_match_param` at bit `bit` of `msg`, with the parts `enable` does not name zeroed.
fn match_bytes(msg: &[u8], bit: usize, enable: u8) -> Vec<u8> {
    let at = bit / 8;
    let mut m = msg
        .get(at..at + MATCH_BYTES)
        .map_or_else(|| vec![0; MATCH_BYTES], <[u8]>::to_vec);
    for (part, flag) in [
        (
            fte_match_param::outer_headers.bit,
            match_criteria_enable::OUTER_HEADERS,
        ),
        (
            fte_match_param::misc_parameters.bit,
            match_criteria_enable::MISC_PARAMETERS,
        ),
        (
            fte_match_param::inner_headers.bit,
            match_criteria_enable::INNER_HEADERS,
        ),
    ] {
        if enable & flag == 0 {
            m[part / 8..part / 8 + 64].fill(0);
        }
    }
    // misc_parameters_2 and later: the model matches none of them.
    m[0xc0..].fill(0);
    m
}
