//! Memory registration by UMR the way Linux 6.12 mlx5_ib does it, against the model: a REG_UMR
//! QP (`pd` 0, zero-length RQ), free `umr_en` mkeys (the mkey cache), UMR WQEs hand-built
//! from the firmware-cmd layouts that load a translation in chunks and enable the key, then
//! data moved through the key by our driver's RC QPs and checked byte for byte; revoke,
//! rereg of PD and access, and the errors. The UMR CQ completes into its own completion EQ,
//! as mlx5_ib's `IB_POLL_SOFTIRQ` CQ does, and that EQ's vector fires.

use bareverbs::verbs::*;
use bareverbs::{CmdError, CmdFailure, Config, Device};
use bareverbs_firmware_cmd::commands::*;
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::CmdStatus;
use bareverbs_firmware_cmd::{Layout, View, ViewMut};
use bareverbs_hal::{Hal, SharedDma};
use bareverbs_model::{ModelEvent, SimDma, SimHal};

mod common;
use common::{connect_pair, exec, poll_one, raw_rst2rtr, region, send_wr, sge};

const PAGE: usize = 4096;
/// MSI-X vector of the completion EQ (the driver's own EQ uses vector 0).
const COMP_VECTOR: u16 = 3;
/// The virtual address the UMR gives the key (unlike any IOVA of the model's arena).
const VA: u64 = 0x7000_0000_0000;

/// A command through the driver's `exec`, input and output sized for `C`.
/// The kernel's UMR resources: a completion EQ, a CQ on it, the REG_UMR QP.
struct UmrQp {
    uar: u32,
    eqn: u8,
    cqn: u32,
    qpn: u32,
    eq: SharedDma<SimDma>,
    cq: SharedDma<SimDma>,
    cq_ci: u32,
    sq: SharedDma<SimDma>,
    pi: u16,
}

const LOG_SQ: u8 = 4;

impl UmrQp {
    fn new(hal: &SimHal, dev: &Device<&SimHal>) -> Self {
        let uar = dev.uar().unwrap().index().raw();
        // Completion EQ: no asynchronous events subscribed, its own vector (Linux 6.12
        // creates completion EQs on demand, one MSI-X vector each).
        let eqb = hal.dma_alloc(PAGE, PAGE).unwrap().share();
        eqb.fill(0, PAGE, 0x01).unwrap(); // owner bit 1: nothing posted yet
        let mut i = vec![0u8; CreateEqIn::BYTES + 8];
        {
            let mut v = ViewMut::<CreateEqIn>::zeroed(&mut i).unwrap();
            v.sub(create_eq_in::eq_context_entry)
                .set(eqc::log_eq_size, 6u8)
                .set(eqc::uar_page, uar)
                .set(eqc::intr, COMP_VECTOR);
            v.set_array(create_eq_in::pas, 0, eqb.iova().0).unwrap();
        }
        let o = exec::<CreateEq>(dev, &mut i).unwrap();
        let eqn = View::<CreateEqOut>::new_checked(&o)
            .unwrap()
            .get(create_eq_out::eq_number) as u8;
        // Arm it (mlx5_core `eq_update_ci(eq, 1)`).
        hal.model().with(|h| {
            h.mmio_write32(
                uar as usize * PAGE + uar_offset::EQ_DOORBELL_ARM,
                u32::from(eqn) << 24,
            )
        });

        // CQ of 64 entries on that EQ; its doorbell record after the ring.
        let cq = hal.dma_alloc(2 * PAGE, PAGE).unwrap().share();
        cq.fill(0, PAGE, 0xff).unwrap();
        cq.fill(PAGE, PAGE, 0).unwrap();
        let mut i = vec![0u8; CreateCqIn::BYTES + 8];
        {
            let mut v = ViewMut::<CreateCqIn>::zeroed(&mut i).unwrap();
            v.sub(create_cq_in::cq_context)
                .set(cqc::log_cq_size, 6u8)
                .set(cqc::uar_page, uar)
                .set(cqc::c_eqn_or_apu_element, u32::from(eqn))
                .set(cqc::dbr_addr, cq.iova().0 + PAGE as u64);
            v.set_array(create_cq_in::pas, 0, cq.iova().0).unwrap();
        }
        let o = exec::<CreateCq>(dev, &mut i).unwrap();
        let cqn = View::<CreateCqOut>::new_checked(&o)
            .unwrap()
            .get32(create_cq_out::cqn);

        // The REG_UMR QP as Linux 6.12 qp.c creates it (measured): st 0xc, pd 0, zero-length
        // RQ, so the page list covers the SQ alone; doorbell record after the SQ.
        let sq = hal.dma_alloc(2 * PAGE, PAGE).unwrap().share();
        sq.fill(0, 2 * PAGE, 0).unwrap();
        let mut i = vec![0u8; CreateQpIn::BYTES + 8];
        {
            let mut v = ViewMut::<CreateQpIn>::zeroed(&mut i).unwrap();
            v.sub(create_qp_in::qpc)
                .set(qpc::st, qpc_st::REG_UMR)
                .set(qpc::pm_state, qpc_pm_state::MIGRATED)
                .set(qpc::pd, 0u32)
                .set(qpc::log_sq_size, LOG_SQ)
                .set(qpc::rq_type, qpc_rq_type::ZERO_LEN_RQ)
                .set(qpc::uar_page, uar)
                .set(qpc::fre, 1u8)
                .set(qpc::rlky, 1u8)
                .set(qpc::cqn_snd, cqn)
                .set(qpc::cqn_rcv, cqn)
                .set(qpc::dbr_addr, sq.iova().0 + PAGE as u64);
            v.set_array(create_qp_in::pas, 0, sq.iova().0).unwrap();
        }
        let o = exec::<CreateQp>(dev, &mut i).unwrap();
        let qpn = View::<CreateQpOut>::new_checked(&o)
            .unwrap()
            .get32(create_qp_out::qpn);
        // umr.c `mlx5r_umr_qp_rst2rts`: INIT on port 1, then RTR and RTS with no attributes;
        // qp.c sets MTU 4096 and log_msg_max 12 for the UMR QP in every transition.
        raw_rst2rtr(dev, qpn, |c| {
            c.set(qpc::mtu, qpc_mtu::MTU_4K).set(qpc::log_msg_max, 12u8);
        });
        let mut i = vec![0u8; Rtr2RtsQpIn::BYTES];
        {
            let mut v = ViewMut::<Rtr2RtsQpIn>::zeroed(&mut i).unwrap();
            v.set(rtr2rts_qp_in::qpn, qpn);
            v.sub(rtr2rts_qp_in::qpc)
                .set(qpc::mtu, qpc_mtu::MTU_4K)
                .set(qpc::log_msg_max, 12u8);
        }
        exec::<Rtr2RtsQp>(dev, &mut i).unwrap();
        UmrQp {
            uar,
            eqn,
            cqn,
            qpn,
            eq: eqb,
            cq,
            cq_ci: 0,
            sq,
            pi: 0,
        }
    }

    /// A UMR that sets only the FREE bit of `key` (umr.c `get_umr_disable_mr_mask`): the key
    /// keeps its PD, range and pages and grants nothing.
    fn disable(&mut self, hal: &SimHal, key: u32) {
        self.post(
            hal,
            key,
            umr_flags::INLINE,
            mkey_mask::FREE,
            0,
            0,
            |m| {
                m.set(mkc::free, 1u8);
            },
            None,
            &[],
        );
    }

    /// Posts one UMR WQE for `key` and rings the doorbell; `xlt` is the data segment
    /// (lkey, address, bytes) of a translation in host memory, `inline` entries carried in
    /// the WQE itself.
    #[allow(clippy::too_many_arguments)]
    fn post(
        &mut self,
        hal: &SimHal,
        key: u32,
        flags: u8,
        mask: u64,
        octowords: u16,
        offset: u64,
        seg: impl FnOnce(&mut ViewMut<'_, Mkc>),
        xlt: Option<(u32, u64, u32)>,
        inline: &[u64],
    ) {
        // Control, UMR control and mkey segments, then the data segment or the entries.
        let xlt_bytes = if xlt.is_some() { WqeDataSeg::BYTES } else { 0 };
        let xlt_bytes = xlt_bytes.max(Mtt::BYTES * inline.len());
        let ds = (UmrWqe::BYTES + xlt_bytes).div_ceil(SEND_WQE_DS);
        let mut w = vec![0u8; ds * SEND_WQE_DS];
        let (head, tail) = w.split_at_mut(UmrWqe::BYTES);
        let mut v = ViewMut::<UmrWqe>::zeroed(head).unwrap();
        v.sub(umr_wqe::ctrl_seg)
            .set(wqe_ctrl_seg::wqe_index, self.pi)
            .set(wqe_ctrl_seg::opcode, wqe_opcode::UMR)
            .set(wqe_ctrl_seg::qpn, self.qpn)
            .set(wqe_ctrl_seg::ds, ds as u8)
            .set(
                wqe_ctrl_seg::fm_ce_se,
                fm_ce_se::CQ_UPDATE | fm_ce_se::FENCE_MODE_INITIATOR_SMALL,
            )
            .set(wqe_ctrl_seg::imm, key);
        v.sub(umr_wqe::umr_ctrl_seg)
            .set(wqe_umr_ctrl_seg::flags, flags)
            .set(wqe_umr_ctrl_seg::xlt_octowords, octowords)
            .set(wqe_umr_ctrl_seg::xlt_offset, offset as u16)
            .set(wqe_umr_ctrl_seg::mkey_mask, mask)
            .set(wqe_umr_ctrl_seg::xlt_offset_47_16, (offset >> 16) as u32);
        {
            let mut m = v.sub(umr_wqe::mkey_seg);
            m.set(mkc::qpn, MKC_QPN_NONE).set(mkc::mkey_7_0, key as u8);
            seg(&mut m);
        }
        if let Some((lkey, addr, bytes)) = xlt {
            ViewMut::<WqeDataSeg>::new_checked(tail)
                .unwrap()
                .set(wqe_data_seg::byte_count, bytes)
                .set(wqe_data_seg::lkey, lkey)
                .set(wqe_data_seg::addr, addr);
        }
        // Entries as mlx5_ib writes them: the page address | MLX5_IB_MTT_PRESENT.
        for (&e, m) in inline.iter().zip(tail.chunks_exact_mut(Mtt::BYTES)) {
            let mut m = ViewMut::<Mtt>::new_checked(m).unwrap();
            set_mtt_ptag(&mut m, e);
            m.set(mtt::rd_en, u8::from(e & mtt_perm::READ != 0))
                .set(mtt::wr_en, u8::from(e & mtt_perm::WRITE != 0));
        }
        let bbs = w.len().div_ceil(64) as u16;
        w.resize(usize::from(bbs) * 64, 0);
        for (k, bb) in w.chunks(64).enumerate() {
            let slot = usize::from(self.pi.wrapping_add(k as u16) & ((1 << LOG_SQ) - 1));
            self.sq.write_bytes(slot * 64, bb).unwrap();
        }
        let first = u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
        self.pi = self.pi.wrapping_add(bbs);
        // WQE, then the doorbell record's send counter, then the BlueFlame doorbell.
        self.sq
            .write_bytes(PAGE + 4, &u32::from(self.pi).to_be_bytes())
            .unwrap();
        let db = (first << 32) | u64::from((self.qpn << 8) | ds as u32);
        hal.model()
            .with(|h| h.mmio_write64(self.uar as usize * PAGE + uar_offset::BF, db));
    }

    /// Arms the UMR CQ for any completion (CQ doorbell: `sn << 28 | cmd | ci`, then the CQN).
    fn arm_cq(&self, hal: &SimHal) {
        let db = (u64::from(self.cq_ci & 0xff_ffff) << 32) | u64::from(self.cqn);
        hal.model()
            .with(|h| h.mmio_write64(self.uar as usize * PAGE + uar_offset::CQ_DOORBELL, db));
    }

    /// The next completion of the UMR CQ: (CQE opcode, syndrome, QPN), consumed.
    fn poll(&mut self) -> Option<(u8, u8, u32)> {
        let at = (self.cq_ci as usize % 64) * 64;
        let mut c = [0u8; 64];
        self.cq.read_bytes(at, &mut c).unwrap();
        let owner = (self.cq_ci / 64) as u8 & 1;
        if c[63] >> 4 == 0xf || c[63] & 1 != owner {
            return None;
        }
        self.cq_ci += 1;
        self.cq
            .write_bytes(PAGE, &self.cq_ci.to_be_bytes())
            .unwrap();
        let qpn = u32::from_be_bytes([c[0x38], c[0x39], c[0x3a], c[0x3b]]) & 0xff_ffff;
        Some((c[63] >> 4, c[0x37], qpn))
    }
}

/// A free, `umr_en` MTT key as Linux 6.12 mr.c `set_cache_mkc` makes them: the UMR QP's PD
/// (here `pdn`), no translation yet, `translations_octword_size` reserved, 4 KiB pages.
fn free_mkey(dev: &Device<&SimHal>, pdn: u32, octowords: u32, umr_en: bool) -> u32 {
    let mut i = vec![0u8; CreateMkeyIn::BYTES];
    {
        let mut v = ViewMut::<CreateMkeyIn>::zeroed(&mut i).unwrap();
        let mut c = v.sub(create_mkey_in::memory_key_mkey_entry);
        c.set(mkc::free, 1u8)
            .set(mkc::umr_en, umr_en)
            .set(mkc::lr, 1u8)
            .set(mkc::qpn, MKC_QPN_NONE)
            .set(mkc::mkey_7_0, 0x5au8)
            .set(mkc::pd, pdn)
            .set(mkc::translations_octword_size, octowords)
            .set(mkc::log_page_size, 12u8);
        set_access_mode(&mut c, mkc_access_mode::MTT);
    }
    let o = exec::<CreateMkey>(dev, &mut i).unwrap();
    let index = View::<CreateMkeyOut>::new_checked(&o)
        .unwrap()
        .get32(create_mkey_out::mkey_index);
    idx_to_mkey(index, 0x5a)
}

/// QUERY_MKEY's context of `key`.
fn query_mkey(dev: &Device<&SimHal>, key: u32) -> Vec<u8> {
    let mut i = vec![0u8; QueryMkeyIn::BYTES];
    ViewMut::<QueryMkeyIn>::zeroed(&mut i)
        .unwrap()
        .set(query_mkey_in::mkey_index, mkey_to_idx(key));
    let o = exec::<QueryMkey>(dev, &mut i).unwrap();
    o[0x10..0x50].to_vec()
}

/// The mask Linux 6.12 umr.c puts on the last chunk of `mlx5r_umr_update_mr_pas` with
/// MLX5_IB_UPD_XLT_ENABLE: enable (KEY, FREE), access (LR, LW, RR, RW, A with the `atomic`
/// cap), PD, translation (LEN, PAGE_SIZE, START_ADDR).
const ENABLE_MASK: u64 = mkey_mask::KEY
    | mkey_mask::FREE
    | mkey_mask::LR
    | mkey_mask::LW
    | mkey_mask::RR
    | mkey_mask::RW
    | mkey_mask::A
    | mkey_mask::PD
    | mkey_mask::LEN
    | mkey_mask::PAGE_SIZE
    | mkey_mask::START_ADDR;

/// Mlx5_ib `MLX5_IB_MTT_PRESENT` (read | write) on a page address.
fn mtt(addr: u64) -> u64 {
    addr | mtt_perm::RW
}

#[test]
fn umr_fills_a_free_key_in_chunks_then_rdma_moves_data_through_it() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    // The UMR QP's PD (umrc.pd) and the user's.
    let (upd, pd) = (dev.alloc_pd().unwrap(), dev.alloc_pd().unwrap());
    let mut umr = UmrQp::new(&hal, &dev);
    assert_eq!(
        hal.model().with(|h| h.qp(umr.qpn).map(|q| q.sq_offset())),
        Some(0),
        "a zero-length RQ takes no room in the work buffer"
    );

    // The user's memory: three pages, mapped in the key in the order 2, 0, 1.
    let tgt = hal.dma_alloc(3 * PAGE, PAGE).unwrap().share();
    tgt.fill(0, 3 * PAGE, 0).unwrap();
    let base = tgt.iova().0;
    let pages = [base + 2 * PAGE as u64, base, base + PAGE as u64];
    // 4 entries reserved (2 octowords), as mlx5_ib rounds tables up.
    let key = free_mkey(&dev, upd.pdn().raw(), 2, true);
    let c = query_mkey(&dev, key);
    let c = View::<Mkc>::new_checked(&c).unwrap();
    assert_eq!((c.get(mkc::free), c.get(mkc::umr_en)), (1, 1));
    assert_eq!(c.get(mkc::translations_octword_size), 2);

    // The entry list in host memory, read through a key of the UMR PD (mlx5_ib: the PD's
    // local DMA key).
    let xlt = region(&upd, PAGE, AccessFlags::LOCAL_WRITE);
    let list: Vec<u64> = pages.iter().map(|&p| mtt(p)).chain([0]).collect();
    xlt.buf().write_be64s(0, &list).unwrap();

    // RC pairs: `a` writes into `b`'s memory through the key (one pair for the refused
    // write, which moves its QP to ERR).
    let (mut scq, rcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
    let (mut a0, _b0) = rc_pair(&pd, &scq, &rcq);
    let (mut a, _b) = rc_pair(&pd, &scq, &rcq);
    let src = region(&pd, 3 * PAGE, AccessFlags::LOCAL_WRITE);
    let pattern: Vec<u8> = (0..3 * PAGE).map(|k| (k * 7 + k / 4096) as u8).collect();
    src.buf().write_bytes(0, &pattern).unwrap();
    let write = |a: &mut Qp<'_, '_, &SimHal>, rkey: u32, len: u32| {
        let sg = [sge(&src, 0, len)];
        a.post_send(&[send_wr(
            1,
            &sg,
            SendOp::RdmaWrite {
                remote_addr: VA,
                rkey,
            },
        )])
        .unwrap();
    };

    // A free key grants nothing: the write is a remote access error.
    write(&mut a0, key, 16);
    assert_eq!(poll_one(&mut scq).status, WcStatus::RemAccessErr);

    // Chunk 1 (umr.c `_mlx5r_umr_update_mr_pas`): entries 0–1, no offset, "fail if not
    // free", no mask: the key stays free.
    umr.post(
        &hal,
        key,
        umr_flags::CHECK_NOT_FREE,
        0,
        1,
        0,
        |_| {},
        Some((xlt.lkey().raw(), xlt.addr(), 16)),
        &[],
    );
    assert_eq!(umr.poll(), Some((u8::from(CqeOpcode::Req), 0, umr.qpn)));
    assert!(hal.model().with(|h| h.mkey(mkey_to_idx(key)).unwrap().free));
    // Chunk 2: entries 2–3 at octoword 1 (TRANSLATION_OFFSET_EN), with the enabling mask.
    let len = 3 * PAGE as u64;
    let pdn = pd.pdn().raw();
    umr.post(
        &hal,
        key,
        umr_flags::CHECK_NOT_FREE | umr_flags::TRANSLATION_OFFSET_EN,
        ENABLE_MASK,
        1,
        1,
        |m| {
            m.set(mkc::free, 0u8)
                .set(mkc::lr, 1u8)
                .set(mkc::lw, 1u8)
                .set(mkc::rw, 1u8)
                .set(mkc::pd, pdn)
                .set(mkc::start_addr, VA)
                .set(mkc::len, len)
                .set(mkc::log_page_size, 12u8);
        },
        Some((xlt.lkey().raw(), xlt.addr() + 16, 16)),
        &[],
    );
    assert_eq!(umr.poll(), Some((u8::from(CqeOpcode::Req), 0, umr.qpn)));
    let c = query_mkey(&dev, key);
    let c = View::<Mkc>::new_checked(&c).unwrap();
    assert_eq!(c.get(mkc::free), 0);
    assert_eq!(
        (c.get32(mkc::pd), c.get(mkc::start_addr), c.get(mkc::len)),
        (pdn, VA, len)
    );
    assert_eq!((c.get(mkc::rw), c.get(mkc::rr), c.get(mkc::lw)), (1, 0, 1));

    // Data through the key, byte for byte, in the pages the MTT names.
    write(&mut a, key, 3 * PAGE as u32);
    assert_eq!(poll_one(&mut scq).status, WcStatus::Success);
    let mut got = vec![0u8; 3 * PAGE];
    tgt.read_bytes(0, &mut got).unwrap();
    for (k, &p) in pages.iter().enumerate() {
        let off = (p - base) as usize;
        assert_eq!(
            got[off..off + PAGE],
            pattern[k * PAGE..(k + 1) * PAGE],
            "page {k}"
        );
    }

    // A one-page MR as Linux 6.12 registers it outside the cache: `reg_create` reserves
    // get_octo_len = 1 octoword, `_mlx5r_umr_update_mr_pas` sends its one entry padded with
    // zeros to 64 bytes (4 octowords) in a single enabling chunk.
    let one = free_mkey(&dev, upd.pdn().raw(), 1, true);
    let padded: Vec<u64> = [mtt(base + PAGE as u64)]
        .into_iter()
        .chain([0; 7])
        .collect();
    xlt.buf().write_be64s(64, &padded).unwrap();
    umr.post(
        &hal,
        one,
        umr_flags::CHECK_NOT_FREE,
        ENABLE_MASK,
        4,
        0,
        |m| {
            m.set(mkc::lr, 1u8)
                .set(mkc::lw, 1u8)
                .set(mkc::rw, 1u8)
                .set(mkc::pd, pdn)
                .set(mkc::start_addr, VA)
                .set(mkc::len, PAGE as u64)
                .set(mkc::log_page_size, 12u8);
        },
        Some((xlt.lkey().raw(), xlt.addr() + 64, 64)),
        &[],
    );
    assert_eq!(umr.poll(), Some((u8::from(CqeOpcode::Req), 0, umr.qpn)));
    src.buf().write_bytes(0, &[0xc3; 64]).unwrap();
    write(&mut a, one, 64);
    assert_eq!(poll_one(&mut scq).status, WcStatus::Success);
    let mut got = [0u8; 64];
    tgt.read_bytes(PAGE, &mut got).unwrap();
    assert_eq!(got, [0xc3; 64]);
}

/// The command status of a refused command.
fn refused<T: std::fmt::Debug>(r: Result<T, bareverbs::Error>) -> CmdStatus {
    match r {
        Err(bareverbs::Error::Command(CmdError {
            failure: CmdFailure::Status { status, .. },
            ..
        })) => status,
        other => panic!("expected a refused command, got {other:?}"),
    }
}

/// Two RC QPs of `pd` connected through port 1, remote write allowed.
fn rc_pair<'p, 'd, 'h>(
    pd: &'p Pd<'d, &'h SimHal>,
    scq: &Cq<'d, &'h SimHal>,
    rcq: &Cq<'d, &'h SimHal>,
) -> (Qp<'p, 'd, &'h SimHal>, Qp<'p, 'd, &'h SimHal>) {
    let attr = QpInitAttr::new(
        QpType::Rc,
        scq,
        rcq,
        QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        },
    );
    let mut a = pd.create_qp(&attr).unwrap();
    let mut b = pd.create_qp(&attr).unwrap();
    connect_pair(
        &mut a,
        &mut b,
        AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE,
        Mtu::Mtu4096,
    );
    (a, b)
}

/// A key enabled by one inline UMR (entries in the WQE, MLX5_UMR_INLINE) over `pages`.
fn enable_inline(hal: &SimHal, umr: &mut UmrQp, key: u32, pdn: u32, pages: &[u64], rw: bool) {
    let entries: Vec<u64> = pages.iter().map(|&p| mtt(p)).collect();
    let len = (pages.len() * PAGE) as u64;
    umr.post(
        hal,
        key,
        umr_flags::CHECK_NOT_FREE | umr_flags::INLINE,
        ENABLE_MASK,
        entries.len().div_ceil(2) as u16,
        0,
        |m| {
            m.set(mkc::lr, 1u8)
                .set(mkc::lw, 1u8)
                .set(mkc::rw, rw)
                .set(mkc::rr, 1u8)
                .set(mkc::pd, pdn)
                .set(mkc::start_addr, VA)
                .set(mkc::len, len)
                .set(mkc::log_page_size, 12u8);
        },
        None,
        &entries,
    );
}

#[test]
fn umr_completions_raise_the_interrupt_of_the_cqs_eq_when_armed() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let upd = dev.alloc_pd().unwrap();
    let mut umr = UmrQp::new(&hal, &dev);
    let key = free_mkey(&dev, upd.pdn().raw(), 1, true);
    let irqs = || hal.model().interrupts(COMP_VECTOR);
    let comp_eqes = || {
        hal.model()
            .events()
            .into_iter()
            .filter(|e| matches!(e, ModelEvent::Eqe { event_type: 0, .. }))
            .count()
    };
    // Not armed: the completion is written, no event, no interrupt.
    let page = hal.dma_alloc(PAGE, PAGE).unwrap().share();
    enable_inline(&hal, &mut umr, key, upd.pdn().raw(), &[page.iova().0], true);
    assert!(umr.poll().is_some());
    assert_eq!((comp_eqes(), irqs()), (0, 0));
    // Armed (mlx5_ib's IB_POLL_SOFTIRQ CQ re-arms after each poll): one completion EQE in the
    // CQ's `c_eqn` EQ carrying the CQN (EQE data 0x18), and that EQ's MSI-X vector.
    umr.arm_cq(&hal);
    let revoke = |umr: &mut UmrQp| umr.disable(&hal, key);
    revoke(&mut umr);
    assert!(umr.poll().is_some());
    assert_eq!(irqs(), 1);
    let evs = hal.model().events();
    assert!(evs.contains(&ModelEvent::Eqe {
        eqn: umr.eqn,
        event_type: event_type::COMP
    }));
    let mut eqe = [0u8; 64];
    umr.eq.read_bytes(0, &mut eqe).unwrap();
    assert_eq!(eqe[1], event_type::COMP);
    assert_eq!(
        u32::from_be_bytes([eqe[0x38], eqe[0x39], eqe[0x3a], eqe[0x3b]]),
        umr.cqn
    );
    assert_eq!(eqe[63] & 1, 0, "owner bit of the first pass");
    // The CQ fired once: it is not armed any more until the next arm doorbell. The EQ was
    // armed once too: re-arm it (consumer index 1) before the next event.
    enable_inline(&hal, &mut umr, key, upd.pdn().raw(), &[page.iova().0], true);
    assert!(umr.poll().is_some());
    assert_eq!(irqs(), 1);
    hal.model().with(|h| {
        h.mmio_write32(
            umr.uar as usize * PAGE + uar_offset::EQ_DOORBELL_ARM,
            (u32::from(umr.eqn) << 24) | 1,
        )
    });
    umr.arm_cq(&hal);
    revoke(&mut umr);
    assert!(umr.poll().is_some());
    assert_eq!(irqs(), 2);
}

#[test]
fn revoke_frees_the_key_and_rereg_changes_pd_and_access() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let (upd, pd, pd2) = (
        dev.alloc_pd().unwrap(),
        dev.alloc_pd().unwrap(),
        dev.alloc_pd().unwrap(),
    );
    let mut umr = UmrQp::new(&hal, &dev);
    let tgt = hal.dma_alloc(PAGE, PAGE).unwrap().share();
    tgt.fill(0, PAGE, 0).unwrap();
    let key = free_mkey(&dev, upd.pdn().raw(), 1, true);
    // Enabled without remote write.
    enable_inline(&hal, &mut umr, key, pd.pdn().raw(), &[tgt.iova().0], false);
    assert_eq!(umr.poll(), Some((u8::from(CqeOpcode::Req), 0, umr.qpn)));

    let (mut scq, rcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
    let (mut denied, _b1) = rc_pair(&pd, &scq, &rcq);
    let (mut old_pd, _b2) = rc_pair(&pd, &scq, &rcq);
    let (mut new_pd, _b3) = rc_pair(&pd2, &scq, &rcq);
    let (mut revoked, _b4) = rc_pair(&pd2, &scq, &rcq);
    let (mut disabled, _b5) = rc_pair(&pd2, &scq, &rcq);
    let write = |a: &mut Qp<'_, '_, &SimHal>, data: &[u8]| {
        a.post_send(&[SendWr {
            wr_id: 7,
            sg_list: &[],
            inline_data: data,
            op: SendOp::RdmaWrite {
                remote_addr: VA + 8,
                rkey: key,
            },
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            ud: None,
        }])
        .unwrap();
    };
    write(&mut denied, b"denied");
    assert_eq!(poll_one(&mut scq).status, WcStatus::RemAccessErr);
    // umr.c `mlx5r_umr_rereg_pd_access`: access and PD mask, "fail if free", inline, no
    // translation: now remote write in PD 2.
    let rereg = |umr: &mut UmrQp, pdn: u32| {
        umr.post(
            &hal,
            key,
            umr_flags::CHECK_FREE | umr_flags::INLINE,
            mkey_mask::LR
                | mkey_mask::LW
                | mkey_mask::RR
                | mkey_mask::RW
                | mkey_mask::A
                | mkey_mask::PD,
            0,
            0,
            |m| {
                m.set(mkc::lr, 1u8)
                    .set(mkc::lw, 1u8)
                    .set(mkc::rw, 1u8)
                    .set(mkc::pd, pdn);
            },
            None,
            &[],
        )
    };
    rereg(&mut umr, pd2.pdn().raw());
    assert_eq!(umr.poll(), Some((u8::from(CqeOpcode::Req), 0, umr.qpn)));
    // The old PD's QPs no longer reach it; the new PD's do.
    write(&mut old_pd, b"old pd");
    assert_eq!(poll_one(&mut scq).status, WcStatus::RemAccessErr);
    write(&mut new_pd, b"granted");
    assert_eq!(poll_one(&mut scq).status, WcStatus::Success);
    let mut got = [0u8; 7];
    tgt.read_bytes(8, &mut got).unwrap();
    assert_eq!(&got, b"granted");
    // The FREE mask bit alone (umr.c `get_umr_disable_mr_mask`): the key keeps its PD,
    // range and pages, and still grants nothing.
    umr.disable(&hal, key);
    assert_eq!(umr.poll(), Some((u8::from(CqeOpcode::Req), 0, umr.qpn)));
    let c = query_mkey(&dev, key);
    let c = View::<Mkc>::new_checked(&c).unwrap();
    assert_eq!((c.get(mkc::free), c.get32(mkc::pd)), (1, pd2.pdn().raw()));
    write(&mut disabled, b"disabled");
    assert_eq!(poll_one(&mut scq).status, WcStatus::RemAccessErr);
    // umr.c `mlx5r_umr_revoke_mr`: PD back to the UMR PD, free, inline.
    umr.post(
        &hal,
        key,
        umr_flags::INLINE,
        mkey_mask::PD | mkey_mask::FREE,
        0,
        0,
        |m| {
            m.set(mkc::free, 1u8).set(mkc::pd, upd.pdn().raw());
        },
        None,
        &[],
    );
    assert_eq!(umr.poll(), Some((u8::from(CqeOpcode::Req), 0, umr.qpn)));
    let c = query_mkey(&dev, key);
    let c = View::<Mkc>::new_checked(&c).unwrap();
    assert_eq!((c.get(mkc::free), c.get32(mkc::pd)), (1, upd.pdn().raw()));
    write(&mut revoked, b"revoked");
    assert_eq!(poll_one(&mut scq).status, WcStatus::RemAccessErr);
    // Rereg on a free key ("fail if free"): a local protection error, and the QP is in ERR.
    rereg(&mut umr, pd2.pdn().raw());
    assert_eq!(
        umr.poll(),
        Some((u8::from(CqeOpcode::ReqErr), 0x04, umr.qpn))
    );
}

/// An erroneous UMR: what it is, key, flags, mask, inline entries, expected CQE syndrome.
type Case<'a> = (&'a str, u32, u8, u64, &'a [u64], u8);

#[test]
fn umr_errors_complete_with_a_syndrome_and_stop_the_umr_qp() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let upd = dev.alloc_pd().unwrap();
    let pdn = upd.pdn().raw();
    let page = hal.dma_alloc(PAGE, PAGE).unwrap().share();
    let p = page.iova().0;
    let key = free_mkey(&dev, pdn, 1, true);
    let locked = free_mkey(&dev, pdn, 1, false);
    let before = |k: u32| hal.model().with(|h| h.mkey(mkey_to_idx(k)).cloned());
    // Each error: error CQE with the syndrome, nothing changed, the QP in ERR; a fresh QP for
    // the next case (Linux resets its UMR QP after a failure, umr.c `mlx5r_umr_recover`).
    let cases: [Case; 6] = [
        (
            "no such key",
            0x00ff_ff5a,
            umr_flags::CHECK_NOT_FREE | umr_flags::INLINE,
            ENABLE_MASK,
            &[p, p],
            0x04,
        ),
        (
            "key without umr_en",
            locked,
            umr_flags::CHECK_NOT_FREE | umr_flags::INLINE,
            ENABLE_MASK,
            &[p, p],
            0x04,
        ),
        (
            "enable a key that is not free",
            key,
            umr_flags::CHECK_FREE | umr_flags::INLINE,
            ENABLE_MASK,
            &[p, p],
            0x04,
        ),
        (
            "a mask bit the model lacks (BSF_EN)",
            key,
            umr_flags::INLINE,
            mkey_mask::BSF_EN,
            &[],
            0x02,
        ),
        (
            "relaxed ordering without relaxed_ordering_write_umr",
            key,
            umr_flags::INLINE,
            mkey_mask::RELAXED_ORDERING_WRITE,
            &[],
            0x02,
        ),
        (
            "entries past the key's table (1 octoword, held as one 64-byte unit of 8)",
            key,
            umr_flags::CHECK_NOT_FREE | umr_flags::INLINE,
            ENABLE_MASK,
            &[p; 10],
            0x02,
        ),
    ];
    for (what, k, flags, mask, entries, synd) in cases {
        let mut umr = UmrQp::new(&hal, &dev);
        let was = before(key);
        let list: Vec<u64> = entries.iter().map(|&e| mtt(e)).collect();
        umr.post(
            &hal,
            k,
            flags,
            mask,
            list.len().div_ceil(2) as u16,
            0,
            |m| {
                m.set(mkc::lr, 1u8)
                    .set(mkc::pd, pdn)
                    .set(mkc::start_addr, VA)
                    .set(mkc::len, PAGE as u64)
                    .set(mkc::log_page_size, 12u8);
            },
            None,
            &list,
        );
        assert_eq!(
            umr.poll(),
            Some((u8::from(CqeOpcode::ReqErr), synd, umr.qpn)),
            "{what}"
        );
        assert_eq!(before(key), was, "{what}: the key is unchanged");
        assert_eq!(
            hal.model().with(|h| h.qp(umr.qpn).map(|q| q.state)),
            Some(bareverbs_model::qp::QpState::Err),
            "{what}"
        );
        // A later UMR on that QP is flushed.
        enable_inline(&hal, &mut umr, key, pdn, &[p], true);
        assert_eq!(
            umr.poll(),
            Some((u8::from(CqeOpcode::ReqErr), 0x05, umr.qpn)),
            "{what}"
        );
    }
    // After all that the key still works once enabled properly.
    let mut umr = UmrQp::new(&hal, &dev);
    enable_inline(&hal, &mut umr, key, pdn, &[p], true);
    assert_eq!(umr.poll(), Some((u8::from(CqeOpcode::Req), 0, umr.qpn)));
}

#[test]
fn special_qps_and_rq_types() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let uar = dev.uar().unwrap().index().raw();
    let buf = hal.dma_alloc(2 * PAGE, PAGE).unwrap().share();
    let create = |st: u8, pdn: u32, rq_type: u8| {
        let mut i = vec![0u8; CreateQpIn::BYTES + 8];
        {
            let mut v = ViewMut::<CreateQpIn>::zeroed(&mut i).unwrap();
            v.sub(create_qp_in::qpc)
                .set(qpc::st, st)
                .set(qpc::pd, pdn)
                .set(qpc::log_sq_size, 2u8)
                .set(qpc::log_rq_size, 2u8)
                .set(qpc::log_rq_stride, 2u8)
                .set(qpc::rq_type, rq_type)
                .set(qpc::uar_page, uar)
                .set(qpc::cqn_snd, cq.cqn().raw())
                .set(qpc::cqn_rcv, cq.cqn().raw())
                .set(qpc::dbr_addr, buf.iova().0 + PAGE as u64);
            v.set_array(create_qp_in::pas, 0, buf.iova().0).unwrap();
        }
        exec::<CreateQp>(&dev, &mut i).map(|o| {
            View::<CreateQpOut>::new_checked(&o)
                .unwrap()
                .get32(create_qp_out::qpn)
        })
    };
    let to_init = |qpn: u32| {
        let mut i = vec![0u8; Rst2InitQpIn::BYTES];
        {
            let mut v = ViewMut::<Rst2InitQpIn>::zeroed(&mut i).unwrap();
            v.set(rst2init_qp_in::qpn, qpn);
            let mut c = v.sub(rst2init_qp_in::qpc);
            c.set(qpc::q_key, 0x8001_0000u32);
            c.sub(qpc::primary_address_path)
                .set(ads::vhca_port_num, 1u8);
        }
        exec::<Rst2InitQp>(&dev, &mut i)
    };
    let query = |qpn: u32| {
        let mut i = vec![0u8; QueryQpIn::BYTES];
        ViewMut::<QueryQpIn>::zeroed(&mut i)
            .unwrap()
            .set(query_qp_in::qpn, qpn);
        let o = exec::<QueryQp>(&dev, &mut i).unwrap();
        let v = View::<QueryQpOut>::new_checked(&o).unwrap();
        let c = v.sub(query_qp_out::qpc);
        (
            c.get(qpc::st) as u8,
            c.get(qpc::state) as u8,
            c.get(qpc::rq_type) as u8,
        )
    };
    let pdn = pd.pdn().raw();
    // qp.h: QP0 = 7, QP1 = 8; both have a regular RQ (the MAD layer posts receives).
    let qp0 = create(qpc_st::QP0, pdn, qpc_rq_type::NON_ZERO_RQ).unwrap();
    let qp1 = create(qpc_st::QP1, pdn, qpc_rq_type::NON_ZERO_RQ).unwrap();
    to_init(qp0).unwrap();
    to_init(qp1).unwrap();
    // RTR and RTS with QP0/QP1's MTU 256 and log_msg_max 8 (Linux 6.12 qp.c), nothing else.
    for qpn in [qp0, qp1] {
        let mut i = vec![0u8; Init2RtrQpIn::BYTES];
        {
            let mut v = ViewMut::<Init2RtrQpIn>::zeroed(&mut i).unwrap();
            v.set(init2rtr_qp_in::qpn, qpn);
            v.sub(init2rtr_qp_in::qpc)
                .set(qpc::mtu, qpc_mtu::MTU_256)
                .set(qpc::log_msg_max, 8u8);
        }
        exec::<Init2RtrQp>(&dev, &mut i).unwrap();
        let mut i = vec![0u8; Rtr2RtsQpIn::BYTES];
        ViewMut::<Rtr2RtsQpIn>::zeroed(&mut i)
            .unwrap()
            .set(rtr2rts_qp_in::qpn, qpn);
        exec::<Rtr2RtsQp>(&dev, &mut i).unwrap();
    }
    assert_eq!(query(qp0), (qpc_st::QP0, 3, qpc_rq_type::NON_ZERO_RQ));
    assert_eq!(query(qp1), (qpc_st::QP1, 3, qpc_rq_type::NON_ZERO_RQ));
    // Posting receives (WQEs and the receive counter) changes nothing the model acts on.
    buf.write_bytes(PAGE, &4u32.to_be_bytes()).unwrap();
    assert_eq!(query(qp1).1, 3);
    // A second QP1 on port 1 is created but cannot take the port (IBA: one per port).
    let again = create(qpc_st::QP1, pdn, qpc_rq_type::NON_ZERO_RQ).unwrap();
    assert_eq!(refused(to_init(again)), CmdStatus::BadParameter);
    // pd 0 is the UMR QP's alone; cyclic and undefined RQ types are refused, and an SRQ-fed
    // RQ must name an SRQ that exists (SRQ 0 never does).
    assert_eq!(
        refused(create(qpc_st::UD, 0, qpc_rq_type::NON_ZERO_RQ)),
        CmdStatus::BadResource
    );
    assert_eq!(
        refused(create(qpc_st::UD, pdn, qpc_rq_type::SRQ_RQ)),
        CmdStatus::BadResource
    );
    for rq_type in [qpc_rq_type::CRQ_RQ, 4, 7] {
        let e = refused(create(qpc_st::UD, pdn, rq_type));
        assert_eq!(e, CmdStatus::BadParameter, "rq_type {rq_type}");
    }
    // Unknown service types (raw, sniffer...) stay refused, and so does a DCI with a
    // receive queue of its own (a DCI receives nothing: `rq_type` SRQ).
    for st in [
        qpc_st::XRC,
        qpc_st::MLX,
        qpc_st::DCI,
        qpc_st::SNIFFER,
        qpc_st::SYNC_UMR,
    ] {
        assert!(
            create(st, pdn, qpc_rq_type::NON_ZERO_RQ).is_err(),
            "st {st}"
        );
    }
}
