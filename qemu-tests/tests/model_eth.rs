//! The Ethernet NIC's commands driven by hand-built messages: caps, the NIC vport context,
//! TIS/TIR/RQT, the SQ and RQ state machines, flow tables, groups and entries, and the port
//! registers — each refusal checked as well as each success.

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::{Layout, View, ViewMut};
use bareverbs_firmware_cmd::CmdStatus;
use bareverbs_hal::{Hal, SharedDma};
use bareverbs_model::{Drive, ModelConfig, SimDma};

mod common;
use common::header;

struct Nic {
    raw: common::Raw,
    pages: Vec<SharedDma<SimDma>>,
    uar: u32,
    pd: u32,
    td: u32,
    cqn: u32,
}

type Reply = (CmdStatus, Vec<u8>);

impl Nic {
    fn up(eth: bool) -> Nic {
        let cfg = ModelConfig {
            port_type_eth: eth,
            ..ModelConfig::default()
        };
        let raw = common::Raw::with(cfg, Drive::Synchronous);
        let pages = common::bring_up(&raw);
        let uar = common::alloc_uar(&raw);
        let mut n = Nic {
            raw,
            pages,
            uar,
            pd: 0,
            td: 0,
            cqn: 0,
        };
        let eq_buf = n.page();
        let eqn = {
            let mut b = header(0x301, 0, CreateEqIn::BYTES + 8);
            let mut v = ViewMut::<CreateEqIn>::new_checked(&mut b).unwrap();
            v.sub(create_eq_in::eq_context_entry)
                .set(eqc::log_eq_size, 6u8)
                .set(eqc::uar_page, uar);
            v.set_array(create_eq_in::pas, 0, eq_buf).unwrap();
            let r = n.cmd(&b, 16);
            assert_eq!(r.0, CmdStatus::Ok);
            View::<CreateEqOut>::new_checked(&r.1)
                .unwrap()
                .get32(create_eq_out::eq_number)
        };
        n.pd = num(n.cmd(&header(0x800, 0, 16), 16));
        n.td = num(n.cmd(&header(0x816, 0, 16), 16));
        let (buf, dbr) = (n.page(), n.page());
        let mut b = header(0x400, 0, CreateCqIn::BYTES + 8);
        let mut v = ViewMut::<CreateCqIn>::new_checked(&mut b).unwrap();
        v.sub(create_cq_in::cq_context)
            .set(cqc::log_cq_size, 6u8)
            .set(cqc::uar_page, uar)
            .set(cqc::c_eqn_or_apu_element, eqn)
            .set(cqc::dbr_addr, dbr);
        v.set_array(create_cq_in::pas, 0, buf).unwrap();
        n.cqn = num(n.cmd(&b, 16));
        n
    }

    fn page(&mut self) -> u64 {
        let p = self.raw.hal.dma_alloc(4096, 4096).unwrap().share();
        let a = p.iova().0;
        self.pages.push(p);
        a
    }

    fn cmd(&self, input: &[u8], outlen: usize) -> Reply {
        let out = self.raw.cmd(input, outlen);
        (common::Raw::status(&out).0, out)
    }

    fn tis(&self) -> u32 {
        let mut b = header(0x912, 0, CreateTisIn::BYTES);
        ViewMut::<CreateTisIn>::new_checked(&mut b)
            .unwrap()
            .sub(create_tis_in::ctx)
            .set(tisc::transport_domain, self.td);
        num(self.cmd(&b, 16))
    }

    /// CREATE_SQ (`sq` true) or CREATE_RQ with a 64-entry ring.
    fn queue(&mut self, sq: bool, tis: Option<u32>, state: u8) -> Reply {
        let (ring, dbr) = (self.page(), self.page());
        let opcode = if sq { 0x904 } else { 0x908 };
        let mut b = header(opcode, 0, CreateSqIn::BYTES + 8);
        {
            let mut v = ViewMut::<CreateSqIn>::new_checked(&mut b).unwrap();
            let mut c = v.sub(create_sq_in::ctx);
            c.set(sqc::state, state).set(sqc::cqn, self.cqn);
            if let Some(t) = tis {
                c.set(sqc::tis_lst_sz, 1u8).set(sqc::tis_num_0, t);
            }
            c.sub(sqc::wq)
                .set(wq::wq_type, wq_type::CYCLIC)
                .set(wq::pd, self.pd)
                .set(wq::uar_page, self.uar)
                .set(wq::dbr_addr, dbr)
                .set(wq::log_wq_stride, if sq { 6u8 } else { 4 })
                .set(wq::log_wq_sz, 6u8);
            v.set_array(create_sq_in::pas, 0, ring).unwrap();
        }
        self.cmd(&b, 16)
    }

    /// MODIFY_SQ/RQ from `from` to `to`.
    fn modify(&self, sq: bool, n: u32, from: u8, to: u8) -> CmdStatus {
        let mut b = header(if sq { 0x905 } else { 0x909 }, 0, ModifySqIn::BYTES);
        {
            let mut v = ViewMut::<ModifySqIn>::new_checked(&mut b).unwrap();
            v.set(modify_sq_in::sq_state, from)
                .set(modify_sq_in::sqn, n);
            v.sub(modify_sq_in::ctx).set(sqc::state, to);
        }
        self.cmd(&b, 16).0
    }

    fn table(&self, level: u8, log_size: u8) -> Reply {
        let mut b = header(0x930, 0, CreateFlowTableIn::BYTES);
        ViewMut::<CreateFlowTableIn>::new_checked(&mut b)
            .unwrap()
            .sub(create_flow_table_in::flow_table_context)
            .set(flow_table_context::level, level)
            .set(flow_table_context::log_size, log_size);
        self.cmd(&b, 16)
    }

    fn group(&self, table: u32, start: u32, end: u32) -> Reply {
        let mut b = header(0x933, 0, CreateFlowGroupIn::BYTES);
        let mut v = ViewMut::<CreateFlowGroupIn>::new_checked(&mut b).unwrap();
        v.set(create_flow_group_in::table_id, table)
            .set(create_flow_group_in::start_flow_index, start)
            .set(create_flow_group_in::end_flow_index, end)
            .set(create_flow_group_in::match_criteria_enable, 1u8);
        v.sub(create_flow_group_in::match_criteria)
            .sub(fte_match_param::outer_headers)
            .set(fte_match_set_lyr_2_4::ethertype, 0xffffu16);
        self.cmd(&b, 16)
    }

    /// SET_FLOW_TABLE_ENTRY forwarding to `dest` (type, id), op_mod `op_mod`.
    fn entry(&self, op_mod: u16, table: u32, group: u32, index: u32, dest: (u8, u32)) -> CmdStatus {
        let at = SetFteIn::BYTES;
        let mut b = header(0x936, op_mod, at + 8);
        {
            let mut v = ViewMut::<SetFteIn>::new_checked(&mut b[..at]).unwrap();
            v.set(set_fte_in::table_id, table)
                .set(set_fte_in::flow_index, index);
            v.sub(set_fte_in::flow_context)
                .set(flow_context::group_id, group)
                .set(flow_context::action, flow_action::FWD_DEST)
                .set(flow_context::destination_list_size, 1u8);
        }
        b[at] = dest.0;
        b[at + 1..at + 4].copy_from_slice(&dest.1.to_be_bytes()[1..]);
        self.cmd(&b, 16).0
    }

    fn on(&self, opcode: u16, n: u32) -> CmdStatus {
        let mut b = header(opcode, 0, 16);
        b[9..12].copy_from_slice(&n.to_be_bytes()[1..]);
        self.cmd(&b, 16).0
    }

    fn tir_direct(&self, rqn: u32) -> Reply {
        let mut b = header(0x900, 0, CreateTirIn::BYTES);
        ViewMut::<CreateTirIn>::new_checked(&mut b)
            .unwrap()
            .sub(create_tir_in::ctx)
            .set(tirc::disp_type, tir_disp_type::DIRECT)
            .set(tirc::inline_rqn, rqn)
            .set(tirc::transport_domain, self.td);
        self.cmd(&b, 16)
    }
}

fn num(r: Reply) -> u32 {
    assert_eq!(r.0, CmdStatus::Ok, "command failed: {:?}", r.0);
    u32::from_be_bytes([0, r.1[9], r.1[10], r.1[11]])
}

#[test]
fn an_infiniband_port_has_no_ethernet_objects_or_caps() {
    let n = Nic::up(false);
    assert_eq!(
        n.cmd(&header(0x912, 0, CreateTisIn::BYTES), 16).0,
        CmdStatus::BadOperation
    );
    assert_eq!(n.table(0, 4).0, CmdStatus::BadOperation);
    let q = header(
        0x100,
        hca_cap_op_mod::query(hca_cap_op_mod::ETHERNET_OFFLOADS, 1),
        16,
    );
    assert_eq!(n.cmd(&q, QueryHcaCapOut::BYTES).0, CmdStatus::BadParameter);
}

#[test]
fn the_vport_context_reports_the_mac_mtu_and_inline_mode_and_takes_changes() {
    let n = Nic::up(true);
    let r = n.cmd(&header(0x754, 0, 16), QueryNicVportContextOut::BYTES);
    assert_eq!(r.0, CmdStatus::Ok);
    let v = View::<QueryNicVportContextOut>::new_checked(&r.1).unwrap();
    let c = v.sub(query_nic_vport_context_out::nic_vport_context);
    assert_eq!(c.get(nic_vport_context::mtu), 1522);
    assert_eq!(c.get(nic_vport_context::min_wqe_inline_mode), 1);
    let a = c.sub(nic_vport_context::permanent_address);
    assert_eq!(
        a.get(mac_address_layout::mac_addr_47_32) >> 8,
        0x02,
        "locally administered"
    );
    // MTU and a unicast list; a list past log_max_current_uc_list (10) is refused.
    let mut b = header(0x755, 0, ModifyNicVportContextIn::BYTES + 8 * 2);
    {
        let mut m = ViewMut::<ModifyNicVportContextIn>::new_checked(&mut b).unwrap();
        m.sub(modify_nic_vport_context_in::field_select)
            .set(modify_nic_vport_field_select::mtu, 1u8)
            .set(modify_nic_vport_field_select::addresses_list, 1u8);
        m.sub(modify_nic_vport_context_in::nic_vport_context)
            .set(nic_vport_context::mtu, 9000u16)
            .set(nic_vport_context::allowed_list_size, 2u16);
        m.set_array(
            modify_nic_vport_context_in::current_uc_mac_address,
            0,
            0x0000_0200_0000_0001,
        )
        .unwrap();
        m.set_array(
            modify_nic_vport_context_in::current_uc_mac_address,
            1,
            0x0000_0200_0000_0002,
        )
        .unwrap();
    }
    assert_eq!(n.cmd(&b, 16).0, CmdStatus::Ok);
    let r = n.cmd(&header(0x754, 0, 16), QueryNicVportContextOut::BYTES + 16);
    let v = View::<QueryNicVportContextOut>::new_checked(&r.1).unwrap();
    let c = v.sub(query_nic_vport_context_out::nic_vport_context);
    assert_eq!(c.get(nic_vport_context::mtu), 9000);
    assert_eq!(c.get(nic_vport_context::allowed_list_size), 2);
    assert_eq!(
        v.array(query_nic_vport_context_out::current_uc_mac_address, 1),
        Some(0x0200_0000_0002)
    );
    ViewMut::<ModifyNicVportContextIn>::new_checked(&mut b)
        .unwrap()
        .sub(modify_nic_vport_context_in::nic_vport_context)
        .set(nic_vport_context::allowed_list_size, 2000u16);
    assert_eq!(n.cmd(&b, 16).0, CmdStatus::BadParameter);
}

#[test]
fn sq_and_rq_states_move_only_along_the_state_machine() {
    let mut n = Nic::up(true);
    let tis = n.tis();
    // Created in RST only; an SQ names an existing TIS.
    assert_eq!(
        n.queue(true, Some(tis), wq_state::RDY).0,
        CmdStatus::BadParameter
    );
    assert_eq!(
        n.queue(true, Some(tis + 100), wq_state::RST).0,
        CmdStatus::BadParameter
    );
    let sqn = num(n.queue(true, Some(tis), wq_state::RST));
    let rqn = num(n.queue(false, None, wq_state::RST));
    assert_ne!(sqn, rqn, "one number space");
    for sq in [true, false] {
        let q = if sq { sqn } else { rqn };
        use wq_state::*;
        assert_eq!(
            n.modify(sq, q, RDY, RDY),
            CmdStatus::BadResourceState,
            "from must be current"
        );
        assert_eq!(n.modify(sq, q, RST, ERR), CmdStatus::BadResourceState);
        assert_eq!(n.modify(sq, q, RST, RDY), CmdStatus::Ok);
        assert_eq!(n.modify(sq, q, RDY, ERR), CmdStatus::Ok);
        assert_eq!(n.modify(sq, q, ERR, RDY), CmdStatus::BadResourceState);
        assert_eq!(n.modify(sq, q, ERR, RST), CmdStatus::Ok);
        assert_eq!(
            n.modify(sq, q, RST, 2),
            CmdStatus::BadParameter,
            "no state 2"
        );
    }
    // A TIS an SQ uses stays; the SQ goes first.
    assert_eq!(n.on(0x914, tis), CmdStatus::BadResourceState);
    assert_eq!(n.on(0x906, sqn), CmdStatus::Ok);
    assert_eq!(n.on(0x914, tis), CmdStatus::Ok);
    // A TIR needs its RQ; an RQT its RQs.
    assert_eq!(n.tir_direct(rqn + 1000).0, CmdStatus::BadParameter);
    let tir = num(n.tir_direct(rqn));
    let mut b = header(0x916, 0, CreateRqtIn::BYTES + 8);
    {
        let mut v = ViewMut::<CreateRqtIn>::new_checked(&mut b).unwrap();
        v.sub(create_rqt_in::rqt_context)
            .set(rqtc::rqt_max_size, 2u16)
            .set(rqtc::rqt_actual_size, 2u16);
        v.set_array(create_rqt_in::rq_num, 0, u64::from(rqn))
            .unwrap();
        v.set_array(create_rqt_in::rq_num, 1, u64::from(rqn + 7))
            .unwrap();
    }
    assert_eq!(n.cmd(&b, 16).0, CmdStatus::BadParameter);
    ViewMut::<CreateRqtIn>::new_checked(&mut b)
        .unwrap()
        .set_array(create_rqt_in::rq_num, 1, u64::from(rqn))
        .unwrap();
    let rqt = num(n.cmd(&b, 16));
    assert_eq!(n.on(0x902, tir), CmdStatus::Ok);
    assert_eq!(n.on(0x918, rqt), CmdStatus::Ok);
    assert_eq!(n.on(0x90a, rqn), CmdStatus::Ok);
    assert_eq!(n.on(0x90a, rqn), CmdStatus::BadParameter, "gone");
}

#[test]
fn flow_groups_partition_their_table_and_entries_live_in_their_group() {
    let mut n = Nic::up(true);
    let rqn = num(n.queue(false, None, wq_state::RST));
    let tir = num(n.tir_direct(rqn));
    assert_eq!(
        n.table(64, 4).0,
        CmdStatus::BadParameter,
        "past max_ft_level"
    );
    let t = num(n.table(0, 4));
    let deeper = num(n.table(1, 2));
    let g = num(n.group(t, 0, 7));
    assert_eq!(n.group(t, 7, 9).0, CmdStatus::BadParameter, "overlaps");
    assert_eq!(
        n.group(t, 8, 16).0,
        CmdStatus::BadParameter,
        "past the table's 16 entries"
    );
    let g2 = num(n.group(t, 8, 15));
    use flow_destination_type::{FLOW_TABLE, TIR};
    assert_eq!(
        n.entry(0, t, g, 8, (TIR, tir)),
        CmdStatus::BadParameter,
        "index of another group"
    );
    assert_eq!(
        n.entry(0, t, g, 0, (TIR, tir + 50)),
        CmdStatus::BadParameter,
        "no such TIR"
    );
    assert_eq!(
        n.entry(1, t, g, 0, (TIR, tir)),
        CmdStatus::BadResourceState,
        "nothing to modify"
    );
    assert_eq!(n.entry(0, t, g, 0, (TIR, tir)), CmdStatus::Ok);
    assert_eq!(
        n.entry(0, t, g, 0, (TIR, tir)),
        CmdStatus::BadResourceState,
        "already set"
    );
    assert_eq!(n.entry(1, t, g, 0, (FLOW_TABLE, deeper)), CmdStatus::Ok);
    assert_eq!(
        n.entry(0, deeper, num(n.group(deeper, 0, 3)), 0, (FLOW_TABLE, t)),
        CmdStatus::BadParameter,
        "forwarding to a shallower table"
    );
    // A group with entries stays until they go.
    assert_eq!(n.on2(0x934, t, g), CmdStatus::BadResourceState);
    let mut b = header(0x938, 0, DeleteFteIn::BYTES);
    ViewMut::<DeleteFteIn>::new_checked(&mut b)
        .unwrap()
        .set(delete_fte_in::table_id, t)
        .set(delete_fte_in::flow_index, 0u32);
    assert_eq!(n.cmd(&b, 16).0, CmdStatus::Ok);
    assert_eq!(n.cmd(&b, 16).0, CmdStatus::BadParameter, "gone");
    assert_eq!(n.on2(0x934, t, g), CmdStatus::Ok);
    assert_eq!(n.on2(0x934, t, g2), CmdStatus::Ok);
    // The root: set, then unset with table 0.
    let mut b = header(0x92f, 0, SetFlowTableRootIn::BYTES);
    ViewMut::<SetFlowTableRootIn>::new_checked(&mut b)
        .unwrap()
        .set(set_flow_table_root_in::table_id, t);
    assert_eq!(n.cmd(&b, 16).0, CmdStatus::Ok);
    let o = n.raw.hal.model().with(|h| h.eth_objects()).unwrap();
    assert!(o.root);
    assert_eq!((o.flow_tables, o.flow_groups), (2, 1));
}

impl Nic {
    /// A command naming a table (DW2) and a group (DW3) as DESTROY_FLOW_GROUP does.
    fn on2(&self, opcode: u16, table: u32, group: u32) -> CmdStatus {
        let mut b = header(opcode, 0, DestroyFlowGroupIn::BYTES);
        ViewMut::<DestroyFlowGroupIn>::new_checked(&mut b)
            .unwrap()
            .set(destroy_flow_group_in::table_id, table)
            .set(destroy_flow_group_in::group_id, group);
        self.cmd(&b, 16).0
    }

    fn reg(&self, id: u16, op_mod: u16, data: &[u8], outlen: usize) -> Reply {
        let mut b = header(0x805, op_mod, AccessRegisterIn::BYTES + data.len());
        ViewMut::<AccessRegisterIn>::new_checked(&mut b[..AccessRegisterIn::BYTES])
            .unwrap()
            .set(access_register_in::register_id, id);
        b[AccessRegisterIn::BYTES..].copy_from_slice(data);
        self.cmd(&b, AccessRegisterOut::BYTES + outlen)
    }
}

#[test]
fn the_port_registers_answer_and_refuse_short_messages() {
    let n = Nic::up(true);
    // PMTU: the maximum, a change, and one past the maximum.
    let mut pmtu = [0u8; 16];
    pmtu[1] = 1;
    let r = n.reg(register_id::PMTU, 1, &pmtu, 16);
    assert_eq!(r.0, CmdStatus::Ok);
    assert_eq!(u16::from_be_bytes([r.1[20], r.1[21]]), 9978);
    pmtu[8..10].copy_from_slice(&4000u16.to_be_bytes());
    assert_eq!(n.reg(register_id::PMTU, 0, &pmtu, 16).0, CmdStatus::Ok);
    assert_eq!(
        u16::from_be_bytes(
            n.reg(register_id::PMTU, 1, &pmtu, 16).1[28..30]
                .try_into()
                .unwrap()
        ),
        4000
    );
    pmtu[8..10].copy_from_slice(&10000u16.to_be_bytes());
    assert_eq!(
        n.reg(register_id::PMTU, 0, &pmtu, 16).0,
        CmdStatus::BadParameter
    );
    // PAOS down then up: the vport state follows, with port-change events.
    let mut paos = [0u8; 16];
    paos[1] = 1;
    paos[2] = 2; // admin down
    paos[4] = 0x80; // ase
    assert_eq!(n.reg(register_id::PAOS, 0, &paos, 16).0, CmdStatus::Ok);
    let st = |n: &Nic| n.cmd(&header(0x750, 0, 16), 16).1[15] & 0xf;
    assert_eq!(st(&n), 0);
    paos[2] = 1;
    assert_eq!(n.reg(register_id::PAOS, 0, &paos, 16).0, CmdStatus::Ok);
    assert_eq!(st(&n), 1);
    // PTYS reads the Ethernet protocols; a short input is refused, not read past.
    let mut ptys = [0u8; 64];
    ptys[3] = 4;
    let r = n.reg(register_id::PTYS, 1, &ptys, 64);
    assert_eq!(r.0, CmdStatus::Ok);
    assert_eq!(
        &r.1[16 + 0x24..16 + 0x28],
        &ETH_PROTO_100GBASE_CR4.to_be_bytes()
    );
    assert_eq!(
        n.reg(register_id::PTYS, 1, &ptys[..16], 64).0,
        CmdStatus::BadInputLength
    );
    // PPCNT: a known group, an unknown one, a short output.
    let mut ppcnt = [0u8; 256];
    ppcnt[1] = 1;
    assert_eq!(n.reg(register_id::PPCNT, 1, &ppcnt, 256).0, CmdStatus::Ok);
    ppcnt[3] = 0x3f;
    assert_eq!(
        n.reg(register_id::PPCNT, 1, &ppcnt, 256).0,
        CmdStatus::BadParameter
    );
    ppcnt[3] = 0;
    assert_eq!(
        n.reg(register_id::PPCNT, 1, &ppcnt, 16).0,
        CmdStatus::BadOutputLength
    );
}
