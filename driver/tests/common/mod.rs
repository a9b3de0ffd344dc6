//! Helpers the data-path tests share: registered regions, connected RC pairs,
//! scatter/gather entries, signaled send requests, and polling exactly one completion.

// Each test crate uses its own subset.
#![allow(dead_code)]

use bareverbs::verbs::*;
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;

/// `len` bytes of fresh DMA memory registered with `access`.
pub fn region<'p, 'd, 'h>(
    hal: &SimHal,
    pd: &'p Pd<'d, &'h SimHal>,
    len: usize,
    access: AccessFlags,
) -> Mr<'p, 'd, &'h SimHal> {
    pd.reg_mr(hal.dma_alloc(len, 4096).unwrap().share(), access)
        .map_err(|(e, _)| e)
        .unwrap()
}

/// Two RC (or UC) QPs brought to RTS towards each other through port 1 (LID 1), PSNs 0,
/// with `access` for remote operations.
pub fn connect_pair<'p, 'd, H: Hal>(
    a: &mut Qp<'p, 'd, H>,
    b: &mut Qp<'p, 'd, H>,
    access: AccessFlags,
    mtu: Mtu,
) {
    let (an, bn) = (a.qpn().raw(), b.qpn().raw());
    for (q, peer) in [(a, bn), (b, an)] {
        q.to_init(1, 0, access, 0).unwrap();
        let path = AhAttr {
            dlid: 1,
            port_num: 1,
            ..AhAttr::default()
        };
        q.to_rtr(peer, 0, path, mtu).unwrap();
        q.to_rts(0).unwrap();
    }
}

/// The key of a region registered and deregistered again: a key the device no longer knows
/// (the way to a bad key now that only `Mr::lkey` makes one).
#[allow(dead_code)]
pub fn stale_lkey<'d>(hal: &SimHal, pd: &Pd<'d, &SimHal>) -> Lkey {
    let mr = region(hal, pd, 4096, AccessFlags::LOCAL_WRITE);
    let k = mr.lkey();
    assert!(mr.dereg().is_ok());
    k
}

/// A UD destination `ah`, `qpn`, `qkey` through a throwaway AH (a `UdDest` only comes from
/// `Ah::dest`, after `create_ah`'s checks).
#[allow(dead_code)]
pub fn ud_dest<H: Hal>(pd: &Pd<'_, H>, ah: AhAttr, qpn: u32, qkey: u32) -> UdDest {
    pd.create_ah(ah).unwrap().dest(qpn, qkey).unwrap()
}

/// QP sizes: `wr` work requests and `sge` entries each way, `inline` bytes of inline data.
#[allow(dead_code)]
pub fn cap_with(wr: u32, sge: u32, inline: u32) -> QpCap {
    QpCap {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: sge,
        max_recv_sge: sge,
        max_inline_data: inline,
    }
}

/// An RC QP's INIT → RTR attributes to `dest_qpn` over `path` (MTU 1024, one RDMA read
/// served, RNR timer 12, PSN 0) and their mask.
#[allow(dead_code)]
pub fn rc_rtr(dest_qpn: u32, path: AhAttr) -> (QpAttr, QpAttrMask) {
    let a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: dest_qpn,
        ah_attr: path,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    (a, m)
}

/// An RC QP's RTR → RTS attributes (IB's defaults: timeout 14, retries 7, one RDMA read in
/// flight, PSN 0) and their mask.
#[allow(dead_code)]
pub fn rc_rts() -> (QpAttr, QpAttrMask) {
    let a = QpAttr {
        qp_state: QpState::Rts,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: 0,
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::SQ_PSN
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    (a, m)
}

/// `len` bytes at `off` in `mr`.
pub fn sge<H: Hal>(mr: &Mr<'_, '_, H>, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr() + off,
        length: len,
        lkey: mr.lkey(),
    }
}

/// A signaled send request of `op` over `sg`.
pub fn send_wr<'a>(wr_id: u64, sg: &'a [Sge], op: SendOp) -> SendWr<'a> {
    SendWr {
        wr_id,
        sg_list: sg,
        inline_data: &[],
        op,
        flags: SendFlags::SIGNALED,
        ud: None,
    }
}

/// The one completion `cq` must hold now.
pub fn poll_one<H: Hal>(cq: &mut Cq<'_, H>) -> Wc {
    let mut wc = [Wc::EMPTY; 1];
    assert_eq!(cq.poll(&mut wc), 1, "expected a completion");
    wc[0]
}

/// Runs command `C` with the hand-built input `i` through the driver's `exec_raw`; its
/// output. For tests that build objects of their own next to the driver's.
pub fn exec<C: bareverbs_firmware_cmd::commands::Command>(
    dev: &bareverbs::Device<&SimHal>,
    i: &mut [u8],
) -> Result<Vec<u8>, bareverbs::Error> {
    use bareverbs_firmware_cmd::Layout;
    let mut o = vec![0u8; <C::Out as Layout>::BYTES];
    // SAFETY: the tests' raw commands create, change and destroy objects of their own (and
    // query the driver's), point the device at memory they keep until the end of the test,
    // and never change the device's global state.
    // SAFETY: the tests' raw commands make objects of their own next to the driver's and
    // destroy them; they touch nothing the driver made.
    let promise = unsafe { bareverbs_hal::RawCommands::promise() };
    dev.exec_raw::<C>(&promise, i, &mut o).map(|()| o)
}

/// RST2INIT of QP `qpn` on port 1, then INIT2RTR with the context `rtr` fills in, sent as
/// hand-built commands (for QPs our driver does not own: REG_UMR, SRQ-fed).
pub fn raw_rst2rtr(
    dev: &bareverbs::Device<&SimHal>,
    qpn: u32,
    rtr: impl FnOnce(&mut bareverbs_firmware_cmd::ViewMut<'_, bareverbs_firmware_cmd::ifc::Qpc>),
) {
    use bareverbs_firmware_cmd::commands::{Init2RtrQp, Rst2InitQp};
    use bareverbs_firmware_cmd::ifc::*;
    use bareverbs_firmware_cmd::{Layout, ViewMut};
    let mut i = vec![0u8; Rst2InitQpIn::BYTES];
    {
        let mut v = ViewMut::<Rst2InitQpIn>::zeroed(&mut i).unwrap();
        v.set(rst2init_qp_in::qpn, qpn);
        v.sub(rst2init_qp_in::qpc)
            .sub(qpc::primary_address_path)
            .set(ads::vhca_port_num, 1u8);
    }
    exec::<Rst2InitQp>(dev, &mut i).unwrap();
    let mut i = vec![0u8; Init2RtrQpIn::BYTES];
    {
        let mut v = ViewMut::<Init2RtrQpIn>::zeroed(&mut i).unwrap();
        v.set(init2rtr_qp_in::qpn, qpn);
        rtr(&mut v.sub(init2rtr_qp_in::qpc));
    }
    exec::<Init2RtrQp>(dev, &mut i).unwrap();
}

/// Two model HCAs joined by one fabric, driven synchronously: LIDs 1 and 17, node GUIDs 0x10
/// and 0x20.
pub fn two_hcas() -> (SimHal, SimHal) {
    use bareverbs_model::{Drive, Fabric, ModelConfig};
    let fabric = Fabric::new();
    let cfg = |lid, guid| ModelConfig {
        base_lid: lid,
        node_guid: guid,
        ..ModelConfig::default()
    };
    (
        SimHal::on_fabric(cfg(1, 0x10), Drive::Synchronous, &fabric),
        SimHal::on_fabric(cfg(17, 0x20), Drive::Synchronous, &fabric),
    )
}

/// An SRQ of `pd` holding `max_wr` receives of `max_sge` entries, no limit armed.
pub fn srq<'p, 'd, H: Hal>(pd: &'p Pd<'d, H>, max_wr: u32, max_sge: u32) -> Srq<'p, 'd, H> {
    pd.create_srq(&SrqInitAttr {
        attr: SrqAttr {
            max_wr,
            max_sge,
            srq_limit: 0,
        },
        srq_context: 0,
    })
    .unwrap()
}

/// Every access right a region or QP can grant.
pub fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// What [`with_rc_pair`] hands its closure: two RC QPs `a` and `b` of one model HCA, connected
/// to each other (port 1, MTU 1024, every access right), sharing the send CQ `scq` and the
/// receive CQ `rcq`, and one region `mr` with every access right.
pub struct RcPair<'p, 'd, 'h> {
    pub a: Qp<'p, 'd, &'h SimHal>,
    pub b: Qp<'p, 'd, &'h SimHal>,
    pub scq: Cq<'d, &'h SimHal>,
    pub rcq: Cq<'d, &'h SimHal>,
    pub mr: Mr<'p, 'd, &'h SimHal>,
    pub pd: &'p Pd<'d, &'h SimHal>,
    pub hal: &'h SimHal,
}

impl RcPair<'_, '_, '_> {
    /// `len` bytes at `off` of the pair's region.
    pub fn sge(&self, off: u64, len: u32) -> Sge {
        sge(&self.mr, off, len)
    }

    /// The region's remote address at `off`, and its rkey.
    pub fn remote(&self, off: u64) -> (u64, u32) {
        (self.mr.addr() + off, self.mr.rkey().raw())
    }
}

/// Runs `f` with a fresh [`RcPair`] (QPs of `cap`, CQs of 64 entries, a region of
/// `region_len` bytes) on a synchronous model HCA, and tears it all down after: a test states
/// only what it checks.
pub fn with_rc_pair<R>(
    cap: QpCap,
    region_len: usize,
    f: impl FnOnce(&mut RcPair<'_, '_, '_>) -> R,
) -> R {
    let hal = SimHal::synchronous();
    let dev = bareverbs::Device::bring_up(&hal, bareverbs::Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap);
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect_pair(&mut a, &mut b, all_access(), Mtu::Mtu1024);
    let mr = region(&hal, &pd, region_len, all_access());
    let mut pair = RcPair {
        a,
        b,
        scq,
        rcq,
        mr,
        pd: &pd,
        hal: &hal,
    };
    let r = f(&mut pair);
    // QPs first, then the region and the CQs, then the PD and the device.
    drop(pair);
    r
}
