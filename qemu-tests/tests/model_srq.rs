//! XRC domains, SRQs, XRC SRQs and RMPs driven by hand-built commands: the objects Linux 6.12
//! mlx5_ib makes at probe (`mlx5_ib_dev_res_init`: ALLOC_XRCD ×2; `mlx5_ib_dev_res_srq_init`:
//! CREATE_XRC_SRQ on xrcd 0, a basic SRQ as CREATE_RMP), their queries, references, number
//! space and page offsets, and CREATE_QP naming them.

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::{Layout, View, ViewMut};
use bareverbs_firmware_cmd::CmdStatus;
use bareverbs_hal::{Hal, SharedDma};
use bareverbs_model::srq::SrqKind;
use bareverbs_model::{Drive, SimDma, SimHal};

mod common;

/// An initialized HCA behind the shared command poster, and the pages the tests hand it.
struct Raw {
    raw: common::Raw,
    _pages: Vec<SharedDma<SimDma>>,
}

type Reply = (CmdStatus, Vec<u8>);

impl Raw {
    /// An initialized HCA (ENABLE_HCA, boot and init pages, INIT_HCA).
    fn up() -> Self {
        let raw = common::Raw::new(Drive::Synchronous);
        let pages = common::bring_up(&raw);
        Raw { raw, _pages: pages }
    }

    /// The model under test.
    fn hal(&self) -> &SimHal {
        &self.raw.hal
    }

    /// A fresh 4 KiB DMA page, kept alive as long as the HCA.
    fn page(&mut self) -> u64 {
        let p = self.raw.hal.dma_alloc(4096, 4096).unwrap().share();
        let a = p.iova().0;
        self._pages.push(p);
        a
    }

    /// Posts `input` expecting `outlen` output bytes; returns the command status and output.
    fn cmd(&self, input: &[u8], outlen: usize) -> Reply {
        let out = self.raw.cmd(input, outlen);
        (common::Raw::status(&out).0, out)
    }

    /// A command with a 16-byte input whose object number sits at byte 9 (DW2 [23:0]).
    fn on(&self, opcode: u16, op_mod: u16, n: u32, outlen: usize) -> Reply {
        let mut b = header(opcode, op_mod, 16);
        b[9..12].copy_from_slice(&n.to_be_bytes()[1..]);
        self.cmd(&b, outlen)
    }

    /// The 24-bit number a create/alloc command returned at byte 9, after checking success.
    fn number(r: Reply) -> u32 {
        assert_eq!(r.0, CmdStatus::Ok, "command failed: {:?}", r.0);
        u32::from_be_bytes([0, r.1[9], r.1[10], r.1[11]])
    }
}

use common::header;

/// The objects every test needs: a PD, and a CQ on a UAR and an EQ.
struct Base {
    pd: u32,
    cqn: u32,
    uar: u32,
}

fn base(raw: &mut Raw) -> Base {
    let uar = Raw::number(raw.cmd(&header(0x802, 0, 16), 16));
    let eq_buf = raw.page();
    let mut b = header(0x301, 0, CreateEqIn::BYTES + 8);
    let mut v = ViewMut::<CreateEqIn>::new_checked(&mut b).unwrap();
    v.sub(create_eq_in::eq_context_entry)
        .set(eqc::log_eq_size, 6u8)
        .set(eqc::uar_page, uar);
    v.set_array(create_eq_in::pas, 0, eq_buf).unwrap();
    let r = raw.cmd(&b, 16);
    assert_eq!(r.0, CmdStatus::Ok);
    let eqn = View::<CreateEqOut>::new_checked(&r.1)
        .unwrap()
        .get32(create_eq_out::eq_number);
    let pd = Raw::number(raw.cmd(&header(0x800, 0, 16), 16));
    let (cq_buf, cq_dbr) = (raw.page(), raw.page());
    let mut b = header(0x400, 0, CreateCqIn::BYTES + 8);
    let mut v = ViewMut::<CreateCqIn>::new_checked(&mut b).unwrap();
    v.sub(create_cq_in::cq_context)
        .set(cqc::log_cq_size, 6u8)
        .set(cqc::uar_page, uar)
        .set(cqc::c_eqn_or_apu_element, eqn)
        .set(cqc::dbr_addr, cq_dbr);
    v.set_array(create_cq_in::pas, 0, cq_buf).unwrap();
    let cqn = Raw::number(raw.cmd(&b, 16));
    Base { pd, cqn, uar }
}

/// An XRC SRQ context as Linux 6.12 srq_cmd.c `set_srqc` fills it.
#[derive(Clone)]
struct Xrc {
    pd: u32,
    xrcd: u32,
    cqn: u32,
    log_size: u8,
    log_rq_stride: u8,
    log_page: u8,
    page_offset: u8,
    lwm: u16,
    dbr: u64,
    pas: Vec<u64>,
}

fn create_xrc_srq(raw: &Raw, x: &Xrc) -> Reply {
    let mut b = header(0x705, 0, CreateXrcSrqIn::BYTES + 8 * x.pas.len());
    let mut v = ViewMut::<CreateXrcSrqIn>::new_checked(&mut b).unwrap();
    v.sub(create_xrc_srq_in::xrc_srq_context_entry)
        .set(xrc_srqc::log_xrc_srq_size, x.log_size)
        .set(xrc_srqc::log_rq_stride, x.log_rq_stride)
        .set(xrc_srqc::xrcd, x.xrcd)
        .set(xrc_srqc::page_offset, x.page_offset)
        .set(xrc_srqc::cqn, x.cqn)
        .set(xrc_srqc::log_page_size, x.log_page)
        .set(xrc_srqc::user_index, 0xff_ffffu32)
        .set(xrc_srqc::pd, x.pd)
        .set(xrc_srqc::lwm, x.lwm)
        .set(xrc_srqc::db_record_addr_h, x.dbr >> 32)
        .set(xrc_srqc::db_record_addr_l, (x.dbr & 0xffff_ffff) >> 2);
    for (k, a) in x.pas.iter().enumerate() {
        v.set_array(create_xrc_srq_in::pas, k, *a).unwrap();
    }
    raw.cmd(&b, 16)
}

/// An RMP as Linux 6.12 srq_cmd.c `create_rmp_cmd` / `set_wq` fill it (state RDY, linked
/// list WQEs, `log_wq_stride` in bytes).
#[derive(Clone)]
struct Rmp {
    state: u8,
    pd: u32,
    log_size: u8,
    log_stride: u8,
    log_page: u8,
    page_offset: u8,
    dbr: u64,
    pas: Vec<u64>,
}

fn create_rmp(raw: &Raw, r: &Rmp) -> Reply {
    let mut b = header(0x90c, 0, CreateRmpIn::BYTES + 8 * r.pas.len());
    let mut v = ViewMut::<CreateRmpIn>::new_checked(&mut b).unwrap();
    let mut c = v.sub(create_rmp_in::ctx);
    c.set(rmpc::state, r.state);
    c.sub(rmpc::wq)
        .set(wq::log_wq_pg_sz, r.log_page)
        .set(wq::log_wq_stride, r.log_stride)
        .set(wq::log_wq_sz, r.log_size)
        .set(wq::page_offset, r.page_offset)
        .set(wq::pd, r.pd)
        .set(wq::dbr_addr, r.dbr);
    for (k, a) in r.pas.iter().enumerate() {
        v.set_array(create_rmp_in::pas, k, *a).unwrap();
    }
    raw.cmd(&b, 16)
}

/// The mlx5_ib default SRQs (srq.c with max_wr 1, max_sge 1: 2 WQEs of 32 bytes in one
/// kernel page, offset 0) on `b`, with `xrcd` for the XRC one: (XRC SRQ, RMP).
fn default_srqs(raw: &mut Raw, b: &Base, xrcd: u32) -> (Xrc, Rmp) {
    let x = Xrc {
        pd: b.pd,
        xrcd,
        cqn: b.cqn,
        log_size: 1,
        log_rq_stride: 1,
        log_page: 0,
        page_offset: 0,
        lwm: 0,
        dbr: raw.page() + 0x40,
        pas: vec![raw.page()],
    };
    let r = Rmp {
        state: rmpc_state::RDY,
        pd: b.pd,
        log_size: 1,
        log_stride: 5,
        log_page: 0,
        page_offset: 0,
        dbr: raw.page() + 0x80,
        pas: vec![raw.page()],
    };
    (x, r)
}

#[test]
fn xrc_domains_come_from_the_pd_number_space_and_are_freed_once() {
    // mlx5_ifc alloc_xrcd_out.xrcd / dealloc_xrcd_in.xrcd: 24-bit numbers; the model draws
    // them from the space PDs and transport domains use, so none collide.
    let raw = Raw::up();
    let x0 = Raw::number(raw.on(0x80e, 0, 0, 16));
    let pd = Raw::number(raw.cmd(&header(0x800, 0, 16), 16));
    let x1 = Raw::number(raw.on(0x80e, 0, 0, 16));
    assert!(x0 != 0 && x0 != x1 && pd != x0 && pd != x1);
    assert!(x0 < 1 << 24 && x1 < 1 << 24);
    assert!(raw.hal().model().with(|h| h.xrcd_exists(x1)));
    assert_eq!(raw.on(0x80f, 0, x1, 16).0, CmdStatus::Ok);
    assert!(!raw.hal().model().with(|h| h.xrcd_exists(x1)));
    assert_eq!(raw.on(0x80f, 0, x1, 16).0, CmdStatus::BadResource);
    assert_eq!(raw.on(0x80f, 0, 0x77_7777, 16).0, CmdStatus::BadResource);
}

#[test]
fn xrc_srq_round_trip_returns_what_was_created() {
    // Linux 6.12 mlx5_ib main.c mlx5_ib_dev_res_srq_init: s0 is an XRC SRQ on xrcdn0 and c0;
    // srq_cmd.c query_xrc_srq_cmd reads it back with get_srqc.
    let mut raw = Raw::up();
    let b = base(&mut raw);
    let xrcd = Raw::number(raw.on(0x80e, 0, 0, 16));
    let (mut x, _) = default_srqs(&mut raw, &b, xrcd);
    x.lwm = 1;
    let n = Raw::number(create_xrc_srq(&raw, &x));

    let (st, out) = raw.on(0x707, 0, n, QueryXrcSrqOut::BYTES + 8);
    assert_eq!(st, CmdStatus::Ok);
    let v = View::<QueryXrcSrqOut>::new_checked(&out).unwrap();
    let c = v.sub(query_xrc_srq_out::xrc_srq_context_entry);
    assert_eq!(c.get(xrc_srqc::state), u64::from(srqc_state::GOOD));
    assert_eq!(c.get(xrc_srqc::log_xrc_srq_size), 1);
    assert_eq!(c.get(xrc_srqc::log_rq_stride), 1);
    assert_eq!(c.get32(xrc_srqc::xrcd), xrcd);
    assert_eq!(c.get32(xrc_srqc::cqn), b.cqn);
    assert_eq!(c.get32(xrc_srqc::pd), b.pd);
    assert_eq!(c.get32(xrc_srqc::user_index), 0xff_ffff);
    assert_eq!(c.get(xrc_srqc::lwm), 1);
    let dbr = (c.get(xrc_srqc::db_record_addr_h) << 32) | (c.get(xrc_srqc::db_record_addr_l) << 2);
    assert_eq!(dbr, x.dbr);
    assert_eq!(v.array(query_xrc_srq_out::pas, 0), Some(x.pas[0]));

    // ARM_XRC_SRQ (op_mod 1, srq_cmd.c arm_xrc_srq_cmd) changes the limit.
    let mut arm = header(0x708, arm_xrc_srq_op_mod::XRC_SRQ, 16);
    ViewMut::<ArmXrcSrqIn>::new_checked(&mut arm)
        .unwrap()
        .set(arm_xrc_srq_in::xrc_srqn, n)
        .set(arm_xrc_srq_in::lwm, 0u16);
    assert_eq!(raw.cmd(&arm, 16).0, CmdStatus::Ok);
    assert_eq!(raw.hal().model().with(|h| h.srq(n).unwrap().lwm), 0);

    assert_eq!(raw.on(0x706, 0, n, 16).0, CmdStatus::Ok);
    assert_eq!(raw.on(0x707, 0, n, 272).0, CmdStatus::BadResource);
    assert_eq!(raw.on(0x706, 0, n, 16).0, CmdStatus::BadResource);
}

#[test]
fn rmp_round_trip_and_modify_sets_the_limit() {
    // Linux 6.12 srq_cmd.c: create_rmp_cmd (state RDY, set_wq), arm_rmp_cmd = MODIFY_RMP with
    // rmp_state RDY, bitmask.lwm and wq.lwm; query_rmp_cmd reads the wq back (get_wq).
    let mut raw = Raw::up();
    let b = base(&mut raw);
    let (_, r) = default_srqs(&mut raw, &b, 0);
    let n = Raw::number(create_rmp(&raw, &r));

    let modify = |raw: &Raw, cur: u8, to: u8, lwm: u16, select: bool| {
        let mut m = header(0x90d, 0, ModifyRmpIn::BYTES);
        let mut v = ViewMut::<ModifyRmpIn>::new_checked(&mut m).unwrap();
        v.set(modify_rmp_in::rmp_state, cur)
            .set(modify_rmp_in::rmpn, n);
        v.sub(modify_rmp_in::bitmask).set(rmp_bitmask::lwm, select);
        let mut c = v.sub(modify_rmp_in::ctx);
        c.set(rmpc::state, to);
        c.sub(rmpc::wq).set(wq::lwm, lwm);
        raw.cmd(&m, 16).0
    };
    assert_eq!(
        modify(&raw, rmpc_state::RDY, rmpc_state::RDY, 1, true),
        CmdStatus::Ok
    );
    // Without the bitmask bit the context's lwm is not taken.
    assert_eq!(
        modify(&raw, rmpc_state::RDY, rmpc_state::RDY, 0, false),
        CmdStatus::Ok
    );

    let (st, out) = raw.on(0x90f, 0, n, QueryRmpOut::BYTES + 8);
    assert_eq!(st, CmdStatus::Ok);
    let v = View::<QueryRmpOut>::new_checked(&out).unwrap();
    let c = v.sub(query_rmp_out::rmp_context);
    assert_eq!(c.get(rmpc::state), u64::from(rmpc_state::RDY));
    let w = c.sub(rmpc::wq);
    assert_eq!(w.get(wq::wq_type), u64::from(wq_type::LINKED_LIST));
    assert_eq!(w.get(wq::lwm), 1);
    assert_eq!(w.get32(wq::pd), b.pd);
    assert_eq!(w.get(wq::dbr_addr), r.dbr);
    assert_eq!(w.get(wq::log_wq_stride), 5);
    assert_eq!(w.get(wq::log_wq_pg_sz), 0);
    assert_eq!(w.get(wq::log_wq_sz), 1);
    assert_eq!(v.array(query_rmp_out::pas, 0), Some(r.pas[0]));

    // The stated current state must be the RMP's; a limit of the queue size or more is refused
    // (mlx5_ib_modify_srq never asks for one: srq_limit >= max is EINVAL); to error and no way
    // back.
    assert_eq!(
        modify(&raw, rmpc_state::ERR, rmpc_state::RDY, 0, false),
        CmdStatus::BadResourceState
    );
    assert_eq!(
        modify(&raw, rmpc_state::RDY, rmpc_state::RDY, 2, true),
        CmdStatus::BadParameter
    );
    assert_eq!(
        modify(&raw, rmpc_state::RDY, rmpc_state::ERR, 0, false),
        CmdStatus::Ok
    );
    let (_, out) = raw.on(0x90f, 0, n, QueryRmpOut::BYTES);
    let v = View::<QueryRmpOut>::new_checked(&out).unwrap();
    assert_eq!(
        v.sub(query_rmp_out::rmp_context).get(rmpc::state),
        u64::from(rmpc_state::ERR)
    );
    assert_eq!(
        modify(&raw, rmpc_state::ERR, rmpc_state::RDY, 0, false),
        CmdStatus::BadParameter
    );

    assert_eq!(raw.on(0x90e, 0, n, 16).0, CmdStatus::Ok);
    assert_eq!(raw.on(0x90f, 0, n, 272).0, CmdStatus::BadResource);
}

#[test]
fn srq_round_trip_and_arm_rq() {
    // mlx5_ifc create_srq_in / query_srq_out (`srqc`, dbr_addr 64-bit) and arm_rq_in with
    // op_mod SRQ (srq_cmd.c create_srq_cmd, query_srq_cmd, arm_srq_cmd: the ISSI 0 forms).
    let mut raw = Raw::up();
    let b = base(&mut raw);
    let (buf, dbr) = (raw.page(), raw.page() + 8);
    let mut c = header(0x700, 0, CreateSrqIn::BYTES + 8);
    let mut v = ViewMut::<CreateSrqIn>::new_checked(&mut c).unwrap();
    v.sub(create_srq_in::srq_context_entry)
        .set(srqc::log_srq_size, 4u8)
        .set(srqc::log_rq_stride, 2u8)
        .set(srqc::pd, b.pd)
        .set(srqc::dbr_addr, dbr);
    v.set_array(create_srq_in::pas, 0, buf).unwrap();
    let n = Raw::number(raw.cmd(&c, 16));

    let mut arm = header(0x703, arm_rq_op_mod::SRQ, 16);
    ViewMut::<ArmRqIn>::new_checked(&mut arm)
        .unwrap()
        .set(arm_rq_in::srq_number, n)
        .set(arm_rq_in::lwm, 15u16);
    assert_eq!(raw.cmd(&arm, 16).0, CmdStatus::Ok);
    let mut bad = arm.clone();
    bad[6..8].copy_from_slice(&arm_rq_op_mod::XRQ.to_be_bytes());
    assert_eq!(raw.cmd(&bad, 16).0, CmdStatus::BadParameter);

    let (st, out) = raw.on(0x702, 0, n, QuerySrqOut::BYTES + 8);
    assert_eq!(st, CmdStatus::Ok);
    let q = View::<QuerySrqOut>::new_checked(&out).unwrap();
    let s = q.sub(query_srq_out::srq_context_entry);
    assert_eq!(
        (
            s.get(srqc::log_srq_size),
            s.get(srqc::log_rq_stride),
            s.get(srqc::lwm)
        ),
        (4, 2, 15)
    );
    assert_eq!((s.get32(srqc::pd), s.get(srqc::dbr_addr)), (b.pd, dbr));
    assert_eq!(q.array(query_srq_out::pas, 0), Some(buf));
    assert_eq!(raw.on(0x701, 0, n, 16).0, CmdStatus::Ok);
    assert_eq!(raw.on(0x702, 0, n, 272).0, CmdStatus::BadResource);
}

#[test]
fn srqs_xrc_srqs_and_rmps_share_one_number_space() {
    // Linux 6.12 srq_cmd.c: mlx5_cmd_create_srq stores every kind in one table keyed by its
    // number, SRQ events carry only that number, and qpc.srqn_rmpn_xrqn names any of them.
    let mut raw = Raw::up();
    let b = base(&mut raw);
    let xrcd = Raw::number(raw.on(0x80e, 0, 0, 16));
    let (x, r) = default_srqs(&mut raw, &b, xrcd);
    let xn = Raw::number(create_xrc_srq(&raw, &x));
    let rn = Raw::number(create_rmp(&raw, &r));
    assert_ne!(xn, rn);
    let kinds = raw
        .hal()
        .model()
        .with(|h| (h.srq(xn).unwrap().kind, h.srq(rn).unwrap().kind));
    assert_eq!(kinds, (SrqKind::XrcSrq, SrqKind::Rmp));
    // Each command family only sees its own kind behind a number.
    assert_eq!(raw.on(0x90f, 0, xn, 272).0, CmdStatus::BadResource);
    assert_eq!(raw.on(0x90e, 0, xn, 16).0, CmdStatus::BadResource);
    assert_eq!(raw.on(0x707, 0, rn, 272).0, CmdStatus::BadResource);
    assert_eq!(raw.on(0x702, 0, rn, 272).0, CmdStatus::BadResource);
    // A freed number is handed out again, to any kind.
    assert_eq!(raw.on(0x706, 0, xn, 16).0, CmdStatus::Ok);
    assert_eq!(Raw::number(create_rmp(&raw, &r)), xn);
}

#[test]
fn page_offset_moves_the_queue_start_in_64ths_of_a_page() {
    // Linux 6.12 srq_cmd.c get_pas_size and mlx5_ib.h __mlx5_umem_find_best_quantized_pgoff
    // (scale 64): the queue starts page_offset * (page_size / 64) bytes into pas[0], and the
    // page list must cover that offset plus the queue.
    let mut raw = Raw::up();
    let b = base(&mut raw);
    let xrcd = Raw::number(raw.on(0x80e, 0, 0, 16));
    let (mut x, mut r) = default_srqs(&mut raw, &b, xrcd);

    // An RMP at 16/64 of a 4 KiB page (wq.page_offset, 5 bits): 1 KiB in.
    r.page_offset = 16;
    let n = Raw::number(create_rmp(&raw, &r));
    let (start, w1) = raw.hal().model().with(|h| {
        let s = h.srq(n).unwrap();
        (s.start, s.wqe_iova(1))
    });
    assert_eq!(start, r.pas[0] + 1024);
    assert_eq!(w1, r.pas[0] + 1024 + 32);

    // An XRC SRQ in 8 KiB pages (log_page_size 1) at 63/64: 63 × 128 bytes in. Its 64 WQEs of
    // 64 bytes (4 KiB) no longer fit the first page: one page is too short, two are enough,
    // and WQE 2 is the first in the second page.
    x.log_page = 1;
    x.page_offset = 63;
    x.log_size = 6;
    x.log_rq_stride = 2;
    let p8k = |raw: &mut Raw| {
        let p = raw.hal().dma_alloc(8192, 8192).unwrap().share();
        let a = p.iova().0;
        raw._pages.push(p);
        a
    };
    x.pas = vec![p8k(&mut raw)];
    assert_eq!(create_xrc_srq(&raw, &x).0, CmdStatus::BadInputLength);
    x.pas.push(p8k(&mut raw));
    let n = Raw::number(create_xrc_srq(&raw, &x));
    let s = raw.hal().model().with(|h| h.srq(n).unwrap().clone());
    assert_eq!(s.start, x.pas[0] + 63 * 128);
    assert_eq!(s.wqe_iova(1), x.pas[0] + 8128);
    assert_eq!(s.wqe_iova(2), x.pas[1]);
    let (_, out) = raw.on(0x707, 0, n, QueryXrcSrqOut::BYTES + 16);
    let q = View::<QueryXrcSrqOut>::new_checked(&out).unwrap();
    assert_eq!(
        q.sub(query_xrc_srq_out::xrc_srq_context_entry)
            .get(xrc_srqc::page_offset),
        63
    );
    assert_eq!(q.array(query_xrc_srq_out::pas, 1), Some(x.pas[1]));
}

#[test]
fn objects_in_use_are_not_freed() {
    // An XRC SRQ names a CQ, a PD and an XRC domain (mlx5_ifc xrc_srqc cqn, pd, xrcd): none of
    // them goes while it exists; all can once it is destroyed.
    let mut raw = Raw::up();
    let b = base(&mut raw);
    let xrcd = Raw::number(raw.on(0x80e, 0, 0, 16));
    let (x, _) = default_srqs(&mut raw, &b, xrcd);
    let n = Raw::number(create_xrc_srq(&raw, &x));
    assert_eq!(raw.on(0x401, 0, b.cqn, 16).0, CmdStatus::BadResourceState);
    assert_eq!(raw.on(0x80f, 0, xrcd, 16).0, CmdStatus::ResourceBusy);
    assert_eq!(raw.on(0x801, 0, b.pd, 16).0, CmdStatus::ResourceBusy);
    assert_eq!(raw.on(0x706, 0, n, 16).0, CmdStatus::Ok);
    assert_eq!(raw.on(0x401, 0, b.cqn, 16).0, CmdStatus::Ok);
    assert_eq!(raw.on(0x80f, 0, xrcd, 16).0, CmdStatus::Ok);
    assert_eq!(raw.on(0x801, 0, b.pd, 16).0, CmdStatus::Ok);
}

#[test]
fn bad_parameters_are_refused() {
    // Limits from the model's caps (log_max_srq_sz 15, max_wqe_sz_rq 512), objects that must
    // exist, page and doorbell alignment, the RMP's initial state (Linux sets RDY) and arm
    // op_mods (mlx5_ifc MLX5_ARM_XRC_SRQ_IN_OP_MOD_XRC_SRQ = 1).
    let mut raw = Raw::up();
    let b = base(&mut raw);
    let xrcd = Raw::number(raw.on(0x80e, 0, 0, 16));
    let (x, r) = default_srqs(&mut raw, &b, xrcd);
    let try_x = |f: &dyn Fn(&mut Xrc)| {
        let mut y = x.clone();
        f(&mut y);
        create_xrc_srq(&raw, &y).0
    };
    assert_eq!(try_x(&|y| y.log_rq_stride = 6), CmdStatus::BadParameter);
    assert_eq!(try_x(&|y| y.lwm = 2), CmdStatus::BadParameter);
    assert_eq!(try_x(&|y| y.pas[0] += 0x800), CmdStatus::BadParameter);
    assert_eq!(try_x(&|y| y.cqn = 0x7777), CmdStatus::BadResource);
    assert_eq!(try_x(&|y| y.pd = 0x7777), CmdStatus::BadResource);
    assert_eq!(try_x(&|y| y.xrcd = 0x7777), CmdStatus::BadResource);
    assert_eq!(try_x(&|y| y.pas.clear()), CmdStatus::BadInputLength);

    let try_r = |f: &dyn Fn(&mut Rmp)| {
        let mut y = r.clone();
        f(&mut y);
        create_rmp(&raw, &y).0
    };
    assert_eq!(try_r(&|y| y.log_size = 16), CmdStatus::BadParameter);
    assert_eq!(try_r(&|y| y.log_stride = 10), CmdStatus::BadParameter);
    assert_eq!(try_r(&|y| y.log_stride = 3), CmdStatus::BadParameter);
    assert_eq!(
        try_r(&|y| y.state = rmpc_state::ERR),
        CmdStatus::BadParameter
    );
    assert_eq!(try_r(&|y| y.dbr += 2), CmdStatus::BadParameter);
    assert_eq!(try_r(&|y| y.pd = 0), CmdStatus::BadResource);

    let n = Raw::number(create_xrc_srq(&raw, &x));
    let mut arm = header(0x708, 0, 16);
    ViewMut::<ArmXrcSrqIn>::new_checked(&mut arm)
        .unwrap()
        .set(arm_xrc_srq_in::xrc_srqn, n);
    assert_eq!(raw.cmd(&arm, 16).0, CmdStatus::BadParameter);
}

/// Which QP [`create_qp`] builds.
#[derive(Clone, Copy)]
enum QpShape {
    /// An RC QP with a send queue.
    Rc,
    /// An XRC initiator as Linux 6.12 qp.c `create_user_qp` builds it for IB_QPT_XRC_INI: a
    /// send queue, `rq_type` SRQ with the default SRQ and domain.
    XrcInitiator,
    /// An XRC target as `create_xrc_tgt_qp` builds it: `no_sq`, no UAR, no pages.
    XrcTarget,
}

/// CREATE_QP of `shape` on `b` with `rq_type`, `srqn_rmpn_xrqn` and `xrcd`.
fn create_qp(raw: &mut Raw, b: &Base, shape: QpShape, rq_type: u8, srqn: u32, xrcd: u32) -> Reply {
    let (buf, dbr) = (raw.page(), raw.page());
    let target = matches!(shape, QpShape::XrcTarget);
    let mut c = header(0x500, 0, CreateQpIn::BYTES + if target { 0 } else { 8 });
    let mut v = ViewMut::<CreateQpIn>::new_checked(&mut c).unwrap();
    let st = match shape {
        QpShape::Rc => qpc_st::RC,
        QpShape::XrcInitiator | QpShape::XrcTarget => qpc_st::XRC,
    };
    let mut q = v.sub(create_qp_in::qpc);
    q.set(qpc::st, st)
        .set(qpc::pd, b.pd)
        .set(qpc::cqn_snd, b.cqn)
        .set(qpc::cqn_rcv, b.cqn)
        .set(qpc::dbr_addr, dbr)
        .set(qpc::rq_type, rq_type)
        .set(qpc::srqn_rmpn_xrqn, srqn)
        .set(qpc::xrcd, xrcd);
    if target {
        q.set(qpc::no_sq, 1u8);
    } else {
        q.set(qpc::uar_page, b.uar).set(qpc::log_sq_size, 2u8);
        v.set_array(create_qp_in::pas, 0, buf).unwrap();
    }
    raw.cmd(&c, 16)
}

#[test]
fn create_qp_checks_its_srq_only_with_rq_type_srq() {
    // Linux 6.12 qp.c create_user_qp/create_kernel_qp: every QP carries xrcd and
    // srqn_rmpn_xrqn; with an SRQ it is xrcdn0 and that SRQ (rq_type SRQ), else xrcdn1 and the
    // default SRQ s1 with a regular RQ, where firmware ignores them.
    let mut raw = Raw::up();
    let b = base(&mut raw);
    let x0 = Raw::number(raw.on(0x80e, 0, 0, 16));
    let (_, r) = default_srqs(&mut raw, &b, x0);
    let rmpn = Raw::number(create_rmp(&raw, &r));

    let regular = Raw::number(create_qp(
        &mut raw,
        &b,
        QpShape::Rc,
        qpc_rq_type::NON_ZERO_RQ,
        0x7777,
        0x7777,
    ));
    assert_eq!(raw.hal().model().with(|h| h.qp_srq(regular)), None);
    assert_eq!(
        create_qp(&mut raw, &b, QpShape::Rc, qpc_rq_type::SRQ_RQ, 0x7777, x0).0,
        CmdStatus::BadResource
    );
    assert_eq!(
        create_qp(&mut raw, &b, QpShape::Rc, qpc_rq_type::SRQ_RQ, rmpn, 0x7777).0,
        CmdStatus::BadResource
    );
    let qpn = Raw::number(create_qp(
        &mut raw,
        &b,
        QpShape::Rc,
        qpc_rq_type::SRQ_RQ,
        rmpn,
        x0,
    ));
    assert_eq!(raw.hal().model().with(|h| h.qp_srq(qpn)), Some((rmpn, x0)));
    // QUERY_QP reports the SRQ the QP receives from.
    let (st, out) = raw.on(0x50b, 0, qpn, QueryQpOut::BYTES);
    assert_eq!(st, CmdStatus::Ok);
    let q = View::<QueryQpOut>::new_checked(&out).unwrap();
    let c = q.sub(query_qp_out::qpc);
    assert_eq!(c.get(qpc::rq_type), u64::from(qpc_rq_type::SRQ_RQ));
    assert_eq!(
        (c.get32(qpc::srqn_rmpn_xrqn), c.get32(qpc::xrcd)),
        (rmpn, x0)
    );

    // While the QP receives from it, the RMP and its XRC domain stay.
    assert_eq!(raw.on(0x90e, 0, rmpn, 16).0, CmdStatus::BadResourceState);
    assert_eq!(raw.on(0x80f, 0, x0, 16).0, CmdStatus::ResourceBusy);
    assert_eq!(raw.on(0x501, 0, qpn, 16).0, CmdStatus::Ok);
    assert_eq!(raw.on(0x90e, 0, rmpn, 16).0, CmdStatus::Ok);
    assert_eq!(raw.on(0x80f, 0, x0, 16).0, CmdStatus::Ok);
}

#[test]
fn xrc_qps_receive_through_srqs_and_hold_their_domain() {
    // Linux 6.12 qp.c `get_rx_type`: XRC initiator and target QPs both have rq_type SRQ;
    // `create_xrc_tgt_qp` names the XRC domain in qpc.xrcd, the default SRQ s0 in
    // srqn_rmpn_xrqn, and gives no uar_page, no_sq and no pages.
    let mut raw = Raw::up();
    let b = base(&mut raw);
    let x0 = Raw::number(raw.on(0x80e, 0, 0, 16));
    let x1 = Raw::number(raw.on(0x80e, 0, 0, 16));
    let (_, r) = default_srqs(&mut raw, &b, x0);
    let s0 = Raw::number(create_rmp(&raw, &r));

    // XRC QPs have no RQ of their own: another rq_type is a bad parameter; the domain and the
    // SRQ must exist.
    for rq_type in [qpc_rq_type::NON_ZERO_RQ, qpc_rq_type::ZERO_LEN_RQ] {
        assert_eq!(
            create_qp(&mut raw, &b, QpShape::XrcTarget, rq_type, s0, x1).0,
            CmdStatus::BadParameter
        );
    }
    assert_eq!(
        create_qp(
            &mut raw,
            &b,
            QpShape::XrcTarget,
            qpc_rq_type::SRQ_RQ,
            s0,
            0x7777
        )
        .0,
        CmdStatus::BadResource
    );
    assert_eq!(
        create_qp(
            &mut raw,
            &b,
            QpShape::XrcTarget,
            qpc_rq_type::SRQ_RQ,
            0x7777,
            x1
        )
        .0,
        CmdStatus::BadResource
    );
    let tgt = Raw::number(create_qp(
        &mut raw,
        &b,
        QpShape::XrcTarget,
        qpc_rq_type::SRQ_RQ,
        s0,
        x1,
    ));
    let ini = Raw::number(create_qp(
        &mut raw,
        &b,
        QpShape::XrcInitiator,
        qpc_rq_type::SRQ_RQ,
        s0,
        x0,
    ));
    let (st, out) = raw.on(0x50b, 0, tgt, QueryQpOut::BYTES);
    assert_eq!(st, CmdStatus::Ok);
    let q = View::<QueryQpOut>::new_checked(&out).unwrap();
    let c = q.sub(query_qp_out::qpc);
    assert_eq!(c.get(qpc::st), u64::from(qpc_st::XRC));
    assert_eq!(c.get(qpc::no_sq), 1);
    assert_eq!(c.get32(qpc::xrcd), x1);

    // The target holds its domain: DEALLOC_XRCD is refused until the QP is gone.
    assert_eq!(raw.on(0x80f, 0, x1, 16).0, CmdStatus::ResourceBusy);
    assert_eq!(raw.on(0x501, 0, tgt, 16).0, CmdStatus::Ok);
    assert_eq!(raw.on(0x80f, 0, x1, 16).0, CmdStatus::Ok);
    assert_eq!(raw.on(0x501, 0, ini, 16).0, CmdStatus::Ok);
}
