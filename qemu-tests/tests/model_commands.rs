//! The model's command interface driven by hand-built commands (no bareverbs driver): state
//! rules, page accounting, mailbox chains, delivery status checks, EQEs and DMA faults.

use std::time::Duration;

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::{Layout, View, ViewMut};
use bareverbs_firmware_cmd::{CmdStatus, DeliveryStatus};
use bareverbs_hal::{BarOffset, Hal, Mmio};
use bareverbs_model::{Drive, HcaState, ModelConfig};

mod common;

use common::*;

#[test]
fn life_cycle_with_page_accounting_and_long_chains() {
    for drive in [Drive::Synchronous, Drive::Background] {
        let raw = Raw::new(drive);
        let model = raw.hal.model();
        // Nothing but ENABLE_HCA before ENABLE_HCA.
        let out = raw.cmd(&header(0x10a, 0, 16), 112);
        assert_eq!(Raw::status(&out).0, CmdStatus::BadSystemState);
        assert_eq!(
            Raw::status(&raw.cmd(&header(0x104, 0, 16), 12)).0,
            CmdStatus::Ok
        );
        let out = raw.cmd(&header(0x10a, 0, 16), 112);
        let v = View::<QueryIssiOut>::new_checked(&out).unwrap();
        assert_eq!(v.get(query_issi_out::supported_issi_dw0), 0b11);

        let out = raw.cmd(&header(0x107, query_pages_op_mod::BOOT, 16), 16);
        assert_eq!(
            View::<QueryPagesOut>::new_checked(&out)
                .unwrap()
                .get(query_pages_out::num_pages),
            16
        );
        // Capabilities need the boot pages.
        let out = raw.cmd(&header(0x100, 1, 16), 4112);
        assert_eq!(Raw::status(&out).0, CmdStatus::NoResources);
        let mut pages = give_pages(&raw, 16);
        let out = raw.cmd(&header(0x100, 1, 16), 4112);
        assert_eq!(Raw::status(&out).0, CmdStatus::Ok);
        let caps = View::<QueryHcaCapOut>::new_checked(&out).unwrap();
        let caps = caps
            .sub(query_hca_cap_out::capability)
            .sub(hca_cap_union::cmd_hca_cap);
        // One port per PCI function, as a ConnectX-5 (ModelConfig's default).
        assert_eq!(caps.get(cmd_hca_cap::num_ports), 1);
        assert_eq!(
            caps.get(cmd_hca_cap::log_bf_reg_size),
            9,
            "value in the last output block"
        );

        // INIT_HCA is refused until firmware has its init pages too.
        let out = raw.cmd(&header(0x102, 0, 32), 16);
        assert_eq!(Raw::status(&out).0, CmdStatus::NoResources);
        let out = raw.cmd(&header(0x107, query_pages_op_mod::INIT, 16), 16);
        assert_eq!(
            View::<QueryPagesOut>::new_checked(&out)
                .unwrap()
                .get(query_pages_out::num_pages),
            128
        );
        pages.extend(give_pages(&raw, 128)); // 16 + 1024 input bytes: three input blocks
        assert_eq!(
            Raw::status(&raw.cmd(&header(0x102, 0, 32), 16)).0,
            CmdStatus::Ok
        );
        assert_eq!(model.state(), HcaState::Initialized);

        // While initialized, firmware keeps every page it needs.
        let mut take = header(0x108, manage_pages_op_mod::TAKE, 16);
        take[12..16].copy_from_slice(&200u32.to_be_bytes());
        let out = raw.cmd(&take, 16 + 8 * 200);
        assert_eq!(
            View::<ManagePagesOut>::new_checked(&out)
                .unwrap()
                .get(manage_pages_out::output_num_entries),
            0
        );

        assert_eq!(
            Raw::status(&raw.cmd(&header(0x103, 0, 16), 16)).0,
            CmdStatus::Ok
        );
        let out = raw.cmd(&take, 16 + 8 * 200);
        let v = View::<ManagePagesOut>::new_checked(&out).unwrap();
        assert_eq!(v.get(manage_pages_out::output_num_entries), 144);
        let mut back: Vec<u64> = (0..144)
            .map(|k| v.array(manage_pages_out::pas, k).unwrap())
            .collect();
        let mut given: Vec<u64> = pages.iter().map(|p| p.iova().0).collect();
        back.sort_unstable();
        given.sort_unstable();
        assert_eq!(back, given);
        assert_eq!(model.pages_held(), 0);
        assert_eq!(
            Raw::status(&raw.cmd(&header(0x105, 0, 16), 16)).0,
            CmdStatus::Ok
        );
        assert_eq!(model.state(), HcaState::Disabled);
        assert!(model.dma_faults().is_empty());
    }
}

#[test]
fn bad_commands_get_firmware_statuses() {
    let raw = Raw::new(Drive::Synchronous);
    let out = raw.cmd(&header(0x0fff, 0, 16), 16);
    assert_eq!(Raw::status(&out).0, CmdStatus::BadOperation);
    // ENABLE_HCA needs 16 input bytes and 12 output bytes.
    assert_eq!(
        Raw::status(&raw.cmd(&header(0x104, 0, 8), 12)).0,
        CmdStatus::BadInputLength
    );
    assert_eq!(
        Raw::status(&raw.cmd(&header(0x104, 0, 16), 8)).0,
        CmdStatus::BadOutputLength
    );
    assert_eq!(
        Raw::status(&raw.cmd(&header(0x104, 0, 16), 12)).0,
        CmdStatus::Ok
    );
    let out = raw.cmd(&header(0x104, 0, 16), 12);
    assert_eq!(
        Raw::status(&out).0,
        CmdStatus::BadSystemState,
        "ENABLE_HCA twice"
    );
    let out = raw.cmd(&header(0x107, 9, 16), 16);
    assert_eq!(
        Raw::status(&out).0,
        CmdStatus::BadParameter,
        "unknown QUERY_PAGES op_mod"
    );
    let mut set = header(0x10b, 0, 16);
    set[11] = 5;
    assert_eq!(
        Raw::status(&raw.cmd(&set, 16)).0,
        CmdStatus::BadParameter,
        "unsupported ISSI"
    );

    // A page that is misaligned or given twice is refused; nothing is taken.
    let p = raw.hal.dma_alloc(8192, 4096).unwrap().share();
    let mut give = header(0x108, manage_pages_op_mod::GIVE, 32);
    give[12..16].copy_from_slice(&2u32.to_be_bytes());
    give[16..24].copy_from_slice(&(p.iova().0 + 8).to_be_bytes());
    give[24..32].copy_from_slice(&(p.iova().0 + 4096).to_be_bytes());
    assert_eq!(Raw::status(&raw.cmd(&give, 16)).0, CmdStatus::BadParameter);
    give[16..24].copy_from_slice(&(p.iova().0 + 4096).to_be_bytes());
    assert_eq!(Raw::status(&raw.cmd(&give, 16)).0, CmdStatus::BadParameter);
    assert_eq!(raw.hal.model().pages_held(), 0);
}

#[test]
fn delivery_errors_in_entry_and_mailboxes() {
    let raw = Raw::new(Drive::Synchronous);
    let cap = header(0x100, 1, 16);
    let bad = |tweak: &dyn Fn(&Raw)| raw.post(&cap, 4112, tweak).0;
    assert_eq!(bad(&|r| r.cmdq.write8(0, 3)), DeliveryStatus::BadDescriptor);
    assert_eq!(
        bad(&|r| r.boxes.write8(OUT_BOXES + 1024 + 0x23d, 0x11)),
        DeliveryStatus::TokenError
    );
    assert_eq!(
        bad(&|r| r.boxes.write32(OUT_BOXES + 2048 + 0x238, 7)),
        DeliveryStatus::BadBlockNumber
    );
    assert_eq!(
        bad(&|r| r.cmdq.write64(0x30, r.boxes.iova().0 + 512)),
        DeliveryStatus::OutputPointerAlignment
    );
    assert_eq!(
        bad(&|r| r.boxes.write64(OUT_BOXES + 0x230, 0)),
        DeliveryStatus::OutputLength
    );
    let give = header(0x108, 1, 16 + 8 * 100);
    assert_eq!(
        raw.post(&give, 16, |r| r.cmdq.write64(8, r.boxes.iova().0 + 100))
            .0,
        DeliveryStatus::InputPointerAlignment
    );
    assert_eq!(
        raw.post(&give, 16, |r| r.cmdq.write64(8, 0)).0,
        DeliveryStatus::InputLength
    );
    // Pointer into unmapped memory: a fault the model reports, not a crash.
    assert_eq!(
        raw.post(&give, 16, |r| r.cmdq.write64(8, 0x7_0000_0000)).0,
        DeliveryStatus::FirmwareError
    );
    let faults = raw.hal.model().dma_faults();
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].iova, 0x7_0000_0000);
    // The command interface still works afterwards.
    assert_eq!(
        Raw::status(&raw.cmd(&header(0x104, 0, 16), 12)).0,
        CmdStatus::Ok
    );
}

#[test]
fn unmapped_command_queue_is_a_fault_not_a_crash() {
    let raw = Raw::new(Drive::Synchronous);
    let bar = raw.hal.bar0();
    bar.write32(BarOffset(0x10), 0x9);
    bar.write32(BarOffset(0x14), 0);
    bar.write32(BarOffset(0x18), 0xffff_ffff);
    assert_eq!(raw.hal.model().dma_faults().len(), 32);
    assert_eq!(raw.hal.model().dma_faults_recorded(), 32);
    assert!(raw.hal.model().trace().is_empty());
}

#[test]
fn eqes_carry_the_owner_bit_of_their_pass_and_interrupt_when_armed() {
    let raw = Raw::new(Drive::Synchronous);
    let _pages = bring_up(&raw);
    let model = raw.hal.model();
    let uar = alloc_uar(&raw);
    assert!(uar >= 8, "UARs sit past the init segment and MSI-X pages");
    let buf = raw.hal.dma_alloc(4096, 4096).unwrap().share();
    buf.fill(0, 4096, 0).unwrap();
    for i in 0..4 {
        buf.write8(i * 64 + 63, EQE_OWNER_INIT_VAL);
    }
    // 4 entries; page requests only.
    let eqn = create_eq(&raw, &buf, 2, uar, 1 << event_type::PAGE_REQUEST);
    let db = |ci: u32, arm: bool| {
        let off = uar as usize * 4096 + if arm { 0x40 } else { 0x48 };
        raw.hal
            .bar0()
            .write32(BarOffset(off), (u32::from(eqn) << 24) | ci);
    };
    db(0, true);
    model.request_pages(5);
    assert_eq!(buf.read8(1), event_type::PAGE_REQUEST);
    assert_eq!(buf.read32(0x24), 5);
    assert_eq!(buf.read8(63) & 1, 0, "first pass writes owner 0");
    assert_eq!(model.interrupts(3), 1);
    // Not armed: no interrupt.
    model.request_pages(-2);
    assert_eq!(buf.read32(64 + 0x24) as i32, -2);
    assert_eq!(model.interrupts(3), 1);
    // Two more fill the queue; a fifth overruns and is dropped.
    model.request_pages(1);
    model.request_pages(1);
    model.request_pages(1);
    assert_eq!(buf.read8(3 * 64 + 63) & 1, 0);
    assert!(model.with(|h| h.eq(eqn).unwrap().overrun));
    // Consume all four; the next EQE goes to slot 0 with owner 1 (second pass).
    db(4, true);
    model.request_pages(7);
    assert_eq!(buf.read32(0x24), 7);
    assert_eq!(buf.read8(63) & 1, 1);
    assert_eq!(model.interrupts(3), 2);
    // Arming with an unconsumed EQE interrupts at once.
    db(4, true);
    assert_eq!(model.interrupts(3), 3);
    // A doorbell through another UAR is ignored.
    let other = alloc_uar(&raw);
    raw.hal.bar0().write32(
        BarOffset(other as usize * 4096 + 0x40),
        (u32::from(eqn) << 24) | 5,
    );
    assert_eq!(model.with(|h| h.eq(eqn).unwrap().consumer), 4);
    // The EQ's UAR cannot go while the EQ lives.
    let mut d = header(0x803, 0, 16);
    d[9..12].copy_from_slice(&uar.to_be_bytes()[1..]);
    assert_eq!(Raw::status(&raw.cmd(&d, 16)).0, CmdStatus::ResourceBusy);
}

#[test]
fn disable_hca_straight_from_initialized_like_linux_error_paths() {
    // Linux's mlx5_function_setup error path after INIT_HCA calls DISABLE_HCA without
    // TEARDOWN_HCA; firmware must accept it.
    let raw = Raw::new(Drive::Synchronous);
    let _pages = bring_up(&raw);
    assert_eq!(
        Raw::status(&raw.cmd(&header(0x105, 0, 16), 16)).0,
        CmdStatus::Ok
    );
    assert_eq!(raw.hal.model().state(), HcaState::Disabled);
}

#[test]
fn issi_is_fixed_once_initialized() {
    let raw = Raw::new(Drive::Synchronous);
    let _pages = bring_up(&raw);
    let mut set = header(0x10b, 0, 16);
    set[11] = 1;
    assert_eq!(
        Raw::status(&raw.cmd(&set, 16)).0,
        CmdStatus::BadResourceState
    );
}

#[test]
fn command_completion_events_when_subscribed() {
    let raw = Raw::new(Drive::Synchronous);
    let _pages = bring_up(&raw);
    let uar = alloc_uar(&raw);
    let buf = raw.hal.dma_alloc(4096, 4096).unwrap().share();
    for i in 0..64 {
        buf.write8(i * 64 + 63, 1);
    }
    let eqn = create_eq(&raw, &buf, 6, uar, 1 << event_type::CMD);
    // Linux polls for the CREATE_EQ of its command EQ: no event for it.
    assert_eq!(
        buf.read8(63),
        1,
        "no EQE for the command that created the EQ"
    );
    let mut q = header(0x303, 0, 16);
    q[11] = eqn;
    let out = raw.cmd(&q, QueryEqOut::BYTES + 8);
    assert_eq!(buf.read8(1), event_type::CMD);
    assert_eq!(buf.read8(63) & 1, 0);
    assert_eq!(buf.read32(0x20), 1, "slot 0 in the vector");
    let ctx = View::<QueryEqOut>::new_checked(&out).unwrap();
    assert_eq!(
        ctx.sub(query_eq_out::eq_context_entry)
            .get(eqc::log_eq_size),
        6
    );
    assert_eq!(ctx.get(query_eq_out::event_bitmask), 1 << event_type::CMD);
    assert_eq!(ctx.array(query_eq_out::pas, 0), Some(buf.iova().0));
}

#[test]
fn init_segment_registers_and_removal() {
    let raw = Raw::new(Drive::Synchronous);
    let bar = raw.hal.bar0();
    assert_eq!(bar.read32(BarOffset(0)), 0x0023_0010);
    assert_eq!(bar.read32(BarOffset(4)), 0x0005_07d0);
    assert_eq!(bar.read32(BarOffset(0x14)) & 0xff, 0x56);
    assert_eq!(
        bar.read32(BarOffset(0x14)) & !0xfff,
        raw.cmdq.iova().0 as u32
    );
    let h1 = bar.read32(BarOffset(0x1010));
    raw.hal.delay(Duration::from_millis(100));
    assert!(
        bar.read32(BarOffset(0x1010)) > h1,
        "health counter advances"
    );
    raw.hal.model().set_faults(|f| f.health_stalled = true);
    let h2 = bar.read32(BarOffset(0x1010));
    raw.hal.delay(Duration::from_millis(100));
    assert_eq!(bar.read32(BarOffset(0x1010)), h2);
    raw.hal.model().set_health(0x08, true);
    assert_eq!(bar.read32(BarOffset(0x23c)) >> 16 & 0xff, 0x08);
    assert_eq!(bar.read32(BarOffset(0x238)) >> 31, 1);
    raw.hal.model().set_faults(|f| f.removed = true);
    assert_eq!(bar.read32(BarOffset(0x230)), u32::MAX);
    assert_eq!(bar.read32(BarOffset(0)), u32::MAX);
}

/// The byte where quantized `page_offset` q puts a buffer in its first 4 KiB page: the
/// contexts take the offset in 64ths of a page (Linux 6.12 mlx5_ib.h
/// `__mlx5_umem_find_best_quantized_pgoff`: `page_offset_quantized * (page_size / 64)`).
const fn offset_in_4k(q: u64) -> usize {
    (q * 4096 / 64) as usize
}

/// A CQ of 16 CQEs in the page at `page`, its doorbell record at `dbr`, starting at quantized
/// `page_offset`; its number.
fn create_cq16(raw: &Raw, uar: u32, eqn: u8, page: u64, dbr: u64, page_offset: u8) -> u32 {
    let mut b = header(0x400, 0, CreateCqIn::BYTES + 8);
    let mut v = ViewMut::<CreateCqIn>::new_checked(&mut b).unwrap();
    v.sub(create_cq_in::cq_context)
        .set(cqc::log_cq_size, 4u8)
        .set(cqc::uar_page, uar)
        .set(cqc::c_eqn_or_apu_element, u32::from(eqn))
        .set(cqc::page_offset, page_offset)
        .set(cqc::dbr_addr, dbr);
    v.set_array(create_cq_in::pas, 0, page).unwrap();
    let out = raw.cmd(&b, 16);
    assert_eq!(Raw::status(&out), (CmdStatus::Ok, 0));
    View::<CreateCqOut>::new_checked(&out)
        .unwrap()
        .get32(create_cq_out::cqn)
}

#[test]
fn eq_buffer_starts_at_its_page_offset() {
    let raw = Raw::new(Drive::Synchronous);
    let _pages = bring_up(&raw);
    let uar = alloc_uar(&raw);
    let p0 = raw.hal.dma_alloc(4096, 4096).unwrap().share();
    let p1 = raw.hal.dma_alloc(4096, 4096).unwrap().share();
    // 64 EQEs (4 KiB) starting half-way into the first page need two pages.
    let build = |npas: usize| {
        let mut b = header(0x301, 0, CreateEqIn::BYTES + 8 * npas);
        let mut v = ViewMut::<CreateEqIn>::new_checked(&mut b).unwrap();
        v.sub(create_eq_in::eq_context_entry)
            .set(eqc::log_eq_size, 6u8)
            .set(eqc::uar_page, uar)
            .set(eqc::page_offset, 32u8);
        set_event_bitmask(&mut v, 0, 1 << event_type::CMD);
        for (k, p) in [&p0, &p1].into_iter().take(npas).enumerate() {
            v.set_array(create_eq_in::pas, k, p.iova().0).unwrap();
        }
        b
    };
    let short = raw.cmd(&build(1), 16);
    assert_eq!(
        Raw::status(&short).0,
        CmdStatus::BadInputLength,
        "one page cannot hold 4 KiB that start 2 KiB into it"
    );
    for p in [&p0, &p1] {
        for i in 0..64 {
            p.write8(i * 64 + 63, 1);
        }
    }
    let out = raw.cmd(&build(2), 16);
    assert_eq!(Raw::status(&out), (CmdStatus::Ok, 0));
    let eqn = View::<CreateEqOut>::new_checked(&out)
        .unwrap()
        .get(create_eq_out::eq_number) as u8;
    let at = offset_in_4k(32);
    for k in 0..33u8 {
        let mut q = header(0x303, 0, 16);
        q[11] = eqn;
        let out = raw.cmd(&q, QueryEqOut::BYTES + 16);
        if k == 0 {
            let ctx = View::<QueryEqOut>::new_checked(&out).unwrap();
            assert_eq!(
                ctx.sub(query_eq_out::eq_context_entry)
                    .get(eqc::page_offset),
                32,
                "QUERY_EQ reports the offset it was given"
            );
        }
    }
    assert_eq!(p0.read8(1), 0, "nothing before the offset");
    assert_eq!(p0.read8(at + 1), event_type::CMD, "EQE 0 at the offset");
    assert_eq!(p0.read8(4095) & 1, 0, "EQE 31 ends the first page");
    assert_eq!(p1.read8(1), event_type::CMD, "EQE 32 opens the second page");
}

#[test]
fn cq_buffer_starts_at_its_page_offset() {
    let raw = Raw::new(Drive::Synchronous);
    let _pages = bring_up(&raw);
    let uar = alloc_uar(&raw);
    let eq_buf = raw.hal.dma_alloc(4096, 4096).unwrap().share();
    let eqn = create_eq(&raw, &eq_buf, 6, uar, 0);
    let page = raw.hal.dma_alloc(4096, 4096).unwrap().share();
    let dbr = raw.hal.dma_alloc(4096, 4096).unwrap().share();
    // 16 CQEs (1 KiB) at quantized offset 24: 1536 bytes into the page (an offset
    // mlx5_ib gave rdma-core's CQs in the guest).
    let cqn = create_cq16(&raw, uar, eqn, page.iova().0, dbr.iova().0, 24);
    let mut cqe = [0u8; 64];
    cqe[63] = 0xa0;
    cqe[0] = 0x5c;
    assert!(raw.hal.model().with(|h| h.post_cqe(cqn, cqe, false)));
    let at = offset_in_4k(24);
    assert_eq!(page.read8(0), 0, "nothing written before the offset");
    assert_eq!(page.read8(at), 0x5c, "CQE 0 at the offset");
    let mut q = header(0x402, 0, 16);
    q[9..12].copy_from_slice(&cqn.to_be_bytes()[1..]);
    let out = raw.cmd(&q, QueryCqOut::BYTES + 8);
    let ctx = View::<QueryCqOut>::new_checked(&out).unwrap();
    assert_eq!(
        ctx.sub(query_cq_out::cq_context).get(cqc::page_offset),
        24,
        "QUERY_CQ reports the offset it was given"
    );
}

#[test]
fn qp_work_buffer_starts_at_its_page_offset() {
    let raw = Raw::new(Drive::Synchronous);
    let _pages = bring_up(&raw);
    let uar = alloc_uar(&raw);
    let eq_buf = raw.hal.dma_alloc(4096, 4096).unwrap().share();
    let eqn = create_eq(&raw, &eq_buf, 6, uar, 0);
    let out = raw.cmd(&header(0x800, 0, 16), 16);
    let pd = View::<AllocPdOut>::new_checked(&out)
        .unwrap()
        .get32(alloc_pd_out::pd);
    let ring = raw.hal.dma_alloc(4096, 4096).unwrap().share();
    let cqn = create_cq16(&raw, uar, eqn, ring.iova().0, ring.iova().0 + 2048, 0);
    // An RQ of 16 × 64 B and an SQ of 16 WQEBBs (2 KiB) at quantized offset 63 of a 4 KiB
    // page (4032 bytes in; rdma-core's QPs were seen with 16, 24 and 63): the SQ starts in
    // the second page.
    let p0 = raw.hal.dma_alloc(4096, 4096).unwrap().share();
    let p1 = raw.hal.dma_alloc(4096, 4096).unwrap().share();
    let create = |npas: usize| {
        let mut b = header(0x500, 0, CreateQpIn::BYTES + 8 * npas);
        let mut v = ViewMut::<CreateQpIn>::new_checked(&mut b).unwrap();
        v.sub(create_qp_in::qpc)
            .set(qpc::st, qpc_st::RC)
            .set(qpc::pd, pd)
            .set(qpc::uar_page, uar)
            .set(qpc::log_rq_stride, 2u8)
            .set(qpc::log_rq_size, 4u8)
            .set(qpc::log_sq_size, 4u8)
            .set(qpc::page_offset, 63u8)
            .set(qpc::cqn_snd, cqn)
            .set(qpc::cqn_rcv, cqn)
            .set(qpc::dbr_addr, ring.iova().0 + 3072);
        for (k, p) in [&p0, &p1].into_iter().take(npas).enumerate() {
            v.set_array(create_qp_in::pas, k, p.iova().0).unwrap();
        }
        b
    };
    let short = raw.cmd(&create(1), 16);
    assert_eq!(Raw::status(&short).0, CmdStatus::BadInputLength);
    let out = raw.cmd(&create(2), 16);
    assert_eq!(Raw::status(&out), (CmdStatus::Ok, 0));
    let qpn = View::<CreateQpOut>::new_checked(&out)
        .unwrap()
        .get32(create_qp_out::qpn);
    let at = offset_in_4k(63) as u64;
    raw.hal.model().with(|h| {
        let qp = h.qp(qpn).expect("created");
        assert_eq!(qp.buf_iova(0), p0.iova().0 + at, "RQ WQE 0 at the offset");
        assert_eq!(qp.buf_iova(64), p1.iova().0, "RQ WQE 1 opens page 2");
        assert_eq!(
            qp.buf_iova(qp.sq_offset()),
            p1.iova().0 + 1024 - (4096 - at),
            "SQ after the RQ, counted from the offset"
        );
    });
}

#[test]
fn hca_vport_context_port_zero_is_the_functions_own_port() {
    // Linux 6.12 vport.c mlx5_query_hca_vport_context sets port_num only when
    // cmd_hca_cap.num_ports == 2; mlx5_ib asks with port_num 0 on a one-port function.
    let query = |raw: &Raw, port: u8| {
        let mut q = header(0x762, 0, 16);
        ViewMut::<QueryHcaVportContextIn>::new_checked(&mut q)
            .unwrap()
            .set(query_hca_vport_context_in::port_num, port);
        raw.cmd(&q, QueryHcaVportContextOut::BYTES)
    };
    let lid = |out: &[u8]| {
        View::<QueryHcaVportContextOut>::new_checked(out)
            .unwrap()
            .sub(query_hca_vport_context_out::hca_vport_context)
            .get(hca_vport_context::lid)
    };
    let cfg = ModelConfig {
        base_lid: 5,
        ..ModelConfig::default()
    };
    let one = Raw::with(cfg.clone(), Drive::Synchronous);
    let _p1 = bring_up(&one);
    let out = query(&one, 0);
    assert_eq!(Raw::status(&out), (CmdStatus::Ok, 0));
    assert_eq!(lid(&out), 5);
    assert_eq!(lid(&query(&one, 1)), 5);
    assert_eq!(Raw::status(&query(&one, 2)).0, CmdStatus::BadParameter);
    let two = Raw::with(
        ModelConfig {
            num_ports: 2,
            ..cfg
        },
        Drive::Synchronous,
    );
    let _p2 = bring_up(&two);
    assert_eq!(lid(&query(&two, 2)), 6);
    assert_eq!(
        Raw::status(&query(&two, 0)).0,
        CmdStatus::BadParameter,
        "a two-port function must be told which port"
    );
}

/// What rdma-core 56 `mlx5_vfio` sends that Linux does not: INIT_HCA with the 16-byte
/// `init_hca_in` of rdma-core's mlx5_ifc.h (Linux's has 32, `sw_vhca_id`/`sw_owner_id`
/// added), and MTT entries carrying `MLX5_MTT_PRESENT` (mlx5_ifc `mtt`: `rd_en` bit 0,
/// `wr_en` bit 1, `ptag_31_8` above six reserved bits) with `pg_access` set
/// (`mlx5_vfio_reg_mr`).
#[test]
fn rdma_core_vfio_short_init_hca_and_mtt_enable_bits() {
    let raw = Raw::new(Drive::Synchronous);
    assert_eq!(
        Raw::status(&raw.cmd(&header(0x104, 0, 16), 12)).0,
        CmdStatus::Ok
    );
    let _pages = [give_pages(&raw, 16), give_pages(&raw, 128)];
    assert_eq!(
        Raw::status(&raw.cmd(&header(0x102, 0, 8), 16)).0,
        CmdStatus::BadInputLength,
        "shorter than any init_hca_in"
    );
    assert_eq!(
        Raw::status(&raw.cmd(&header(0x102, 0, 16), 16)).0,
        CmdStatus::Ok,
        "rdma-core's 16-byte INIT_HCA"
    );
    let out = raw.cmd(&header(0x800, 0, 16), 16);
    assert_eq!(Raw::status(&out).0, CmdStatus::Ok);
    let pd = View::<AllocPdOut>::new_checked(&out)
        .unwrap()
        .get32(alloc_pd_out::pd);

    let buf = raw.hal.dma_alloc(8192, 4096).unwrap().share();
    let base = buf.iova().0;
    let mkey_at = |pg_access: bool, start: u64, len: u64, entries: [u64; 2]| {
        let mut b = header(0x200, 0, CreateMkeyIn::BYTES + 16);
        let mut v = ViewMut::<CreateMkeyIn>::new_checked(&mut b).unwrap();
        v.set(create_mkey_in::pg_access, pg_access)
            .set(create_mkey_in::translations_octword_actual_size, 1u32);
        let mut c = v.sub(create_mkey_in::memory_key_mkey_entry);
        set_access_mode(&mut c, mkc_access_mode::MTT);
        c.set(mkc::lr, 1u8)
            .set(mkc::lw, 1u8)
            .set(mkc::pd, pd)
            .set(mkc::qpn, MKC_QPN_NONE)
            .set(mkc::start_addr, start)
            .set(mkc::len, len)
            .set(mkc::translations_octword_size, 1u32)
            .set(mkc::log_page_size, 12u8);
        for (k, e) in entries.into_iter().enumerate() {
            v.set_array(create_mkey_in::klm_pas_mtt, k, e).unwrap();
        }
        let out = raw.cmd(&b, 16);
        let index = View::<CreateMkeyOut>::new_checked(&out)
            .unwrap()
            .get32(create_mkey_out::mkey_index);
        (Raw::status(&out), index)
    };
    let mkey =
        |pg_access: bool, entries: [u64; 2]| mkey_at(pg_access, 0x7f12_3456_0000, 8192, entries);
    let rw = mtt_perm::RW;
    // Present pages: accepted, translated to the addresses without the enable bits.
    let (st, index) = mkey(true, [base | rw, (base + 4096) | rw]);
    assert_eq!(st, (CmdStatus::Ok, 0));
    let k = raw.hal.model().with(|h| h.mkey(index).cloned()).unwrap();
    assert_eq!(
        k.translate(0x7f12_3456_0ff8, 16),
        Ok(vec![(base + 0xff8, 16)])
    );
    assert_eq!(
        k.translate(0x7f12_3456_1000, 8),
        Ok(vec![(base + 0x1000, 8)])
    );
    // Without pg_access the enable bits are not part of the entry (Linux without `pg`
    // sends 0 there): ignored either way.
    assert_eq!(mkey(false, [base | rw, base + 4096]).0 .0, CmdStatus::Ok);
    // Still refused: a truly misaligned page (ptag bits below the page size) and the
    // reserved bits 7:2.
    for bad in [base + 0x100, base | 0x4, base + 0x800] {
        assert_eq!(
            mkey(true, [bad | rw, (base + 4096) | rw]).0 .0,
            CmdStatus::BadParameter,
            "{bad:#x}"
        );
    }
    // Under pg_access an entry with neither enable is a page that is not present: the key is
    // made, and access through that page faults while the other page translates.
    let (st, index) = mkey(true, [base, (base + 4096) | mtt_perm::READ]);
    assert_eq!(st, (CmdStatus::Ok, 0));
    let k = raw.hal.model().with(|h| h.mkey(index).cloned()).unwrap();
    assert!(k.translate(0x7f12_3456_0000, 8).is_err());
    assert_eq!(
        k.translate(0x7f12_3456_1000, 8),
        Ok(vec![(base + 0x1000, 8)])
    );
    // Numbers at the edge of 64 bits: a length that, with the start's offset in its page,
    // overflows is refused (the page count overflowed); a page entry at the top of the
    // address space translates without running past it.
    assert_eq!(
        mkey_at(true, 0x7f12_3456_0ff8, u64::MAX, [base | rw, base | rw])
            .0
             .0,
        CmdStatus::BadParameter
    );
    let top = u64::MAX - 0xfff;
    let (st, index) = mkey_at(true, 0x7f12_3456_0000, 8192, [top | rw, base | rw]);
    assert_eq!(st, (CmdStatus::Ok, 0));
    let k = raw.hal.model().with(|h| h.mkey(index).cloned()).unwrap();
    assert_eq!(
        k.translate(0x7f12_3456_0ff8, 16),
        Ok(vec![(top + 0xff8, 8), (base, 8)])
    );
}
