//! Helpers the data-path tests share on top of `bareverbs::testing` (re-exported here):
//! signaled send requests, UD destinations, RC transition attributes, SRQs, hand-built
//! commands and two model HCAs on one fabric (InfiniBand or Ethernet).

// Each test crate uses its own subset.
#![allow(dead_code, unused_imports)]

pub use bareverbs::testing::{
    all_access, cap, connect_pair, poll_one, region, sge, with_rc_pair, with_ud_pair,
    with_xrc_pair, PairAttr, RcPair, UdPair, XrcPair,
};
use bareverbs::verbs::*;
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;

/// The key of a region registered and deregistered again: a key the device no longer knows
/// (the way to a bad key now that only `Mr::lkey` makes one).
pub fn stale_lkey<H: Hal>(pd: &Pd<'_, H>) -> Lkey {
    let mr = region(pd, 4096, AccessFlags::LOCAL_WRITE);
    let k = mr.lkey();
    assert!(mr.dereg().is_ok());
    k
}

/// A UD destination `ah`, `qpn`, `qkey` through a throwaway AH (a `UdDest` only comes from
/// `Ah::dest`, after `create_ah`'s checks).
pub fn ud_dest<H: Hal>(pd: &Pd<'_, H>, ah: AhAttr, qpn: u32, qkey: u32) -> UdDest {
    pd.create_ah(ah).unwrap().dest(qpn, qkey).unwrap()
}

/// An RC QP's INIT → RTR attributes to `dest_qpn` over `path` (MTU 1024, one RDMA read
/// served, RNR timer 12, PSN 0) and their mask.
pub fn rc_rtr(dest_qpn: u32, path: AhAttr) -> (QpAttr, QpAttrMask) {
    let mut a = QpAttr::default();
    a.qp_state = QpState::Rtr;
    a.path_mtu = Mtu::Mtu1024;
    a.dest_qp_num = dest_qpn;
    a.ah_attr = path;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
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
pub fn rc_rts() -> (QpAttr, QpAttrMask) {
    let mut a = QpAttr::default();
    a.qp_state = QpState::Rts;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    let m = QpAttrMask::STATE
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::SQ_PSN
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    (a, m)
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

/// The configuration of model HCA number `n` with an Ethernet port: its own node GUID (and so
/// MAC) and LID.
pub fn eth_cfg(n: u64) -> bareverbs_model::ModelConfig {
    use bareverbs_model::ModelConfig;
    ModelConfig {
        port_type_eth: true,
        node_guid: ModelConfig::default().node_guid + (n << 8),
        base_lid: 1 + 16 * n as u16,
        ..ModelConfig::default()
    }
}

/// Two Ethernet HCAs on one wire, driven synchronously.
pub fn two_eth_hcas() -> (SimHal, SimHal) {
    use bareverbs_model::{Drive, Fabric};
    let f = Fabric::new();
    (
        SimHal::on_fabric(eth_cfg(0), Drive::Synchronous, &f),
        SimHal::on_fabric(eth_cfg(1), Drive::Synchronous, &f),
    )
}

/// An SRQ of `pd` holding `max_wr` receives of `max_sge` entries, no limit armed.
pub fn srq<'p, 'd, H: Hal>(pd: &'p Pd<'d, H>, max_wr: u32, max_sge: u32) -> Srq<'p, 'd, H> {
    pd.create_srq(&SrqInitAttr::new(SrqAttr {
        max_wr,
        max_sge,
        srq_limit: 0,
    }))
    .unwrap()
}

/// `base` changed by `f`: a variant of an attribute struct in one expression, for the structs
/// the driver marks `#[non_exhaustive]` (no struct literal or update syntax outside it).
pub fn with<T>(mut base: T, f: impl FnOnce(&mut T)) -> T {
    f(&mut base);
    base
}
