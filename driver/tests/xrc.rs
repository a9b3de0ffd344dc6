//! XRC through the driver, against the model: domains (`ibv_open_xrcd`), XRC initiator and
//! target QPs and their transitions (Linux ib_core `qp_state_table`, XRC_INI and XRC_TGT
//! columns), the XRC segment of send requests (rdma-core 56 providers/mlx5/qp.c
//! `_mlx5_post_send`), XRC SRQs and the target QPs a domain shares (seed 001
//! `ibv_*_xrc_rcv_qp`).

use bareverbs::verbs::*;
use bareverbs::Invalid;
use bareverbs::{CmdFailure, Config, Device, Error};
use bareverbs_firmware_cmd::commands::DeallocXrcd;
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{CmdStatus, Layout, Qpn, ViewMut};
use bareverbs_model::SimHal;

mod common;
use common::{exec, rc_rts};

const CAP: QpCap = QpCap {
    max_send_wr: 8,
    max_recv_wr: 8,
    max_send_sge: 2,
    max_recv_sge: 2,
    max_inline_data: 64,
};

/// Port 1's LID (the model's default).
fn path() -> AhAttr {
    AhAttr {
        dlid: 1,
        port_num: 1,
        ..AhAttr::default()
    }
}

fn invalid(what: Invalid) -> Error {
    Error::InvalidArgument { what }
}

fn model_state(hal: &SimHal, qpn: Qpn) -> Option<bareverbs_model::qp::QpState> {
    hal.model().with(|h| h.qp(qpn.raw()).map(|q| q.state))
}

/// DEALLOC_XRCD of `xrcdn` sent by hand: the command status.
fn raw_dealloc(dev: &Device<&SimHal>, xrcdn: u32) -> Result<(), Error> {
    let mut i = vec![0u8; DeallocXrcdIn::BYTES];
    ViewMut::<DeallocXrcdIn>::zeroed(&mut i)
        .unwrap()
        .set(dealloc_xrcd_in::xrcd, xrcdn);
    exec::<DeallocXrcd>(dev, &mut i).map(|_| ())
}

/// QPs the model holds (numbers from 0x100, the model's first).
fn qp_count(hal: &SimHal) -> usize {
    hal.model()
        .with(|h| (0x100..0x1100).filter(|&n| h.qp(n).is_some()).count())
}

fn command_status(e: Error) -> Option<CmdStatus> {
    match e {
        Error::Command(c) => match c.failure {
            CmdFailure::Status { status, .. } => Some(status),
            CmdFailure::Delivery(_) => None,
        },
        _ => None,
    }
}

#[test]
fn a_domain_is_allocated_and_deallocated_by_destroy_and_by_drop() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let x = dev.alloc_xrcd().unwrap();
    let y = dev.alloc_xrcd().unwrap();
    assert_ne!(x.xrcdn(), y.xrcdn());
    let (xn, yn) = (x.xrcdn(), y.xrcdn());
    x.destroy().map_err(|(e, _)| e).unwrap();
    drop(y);
    // Both gone from the device: a second DEALLOC_XRCD names no domain (mlx5 BAD_RESOURCE).
    for n in [xn, yn] {
        let e = raw_dealloc(&dev, n).unwrap_err();
        assert_eq!(command_status(e), Some(CmdStatus::BadResource));
    }
}

#[test]
fn an_initiator_sends_only_and_a_target_has_no_queues() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let xrcd = dev.alloc_xrcd().unwrap();
    // XRC_TGT belongs to a domain: not created through a PD.
    let tgt_attr = QpInitAttr::new(QpType::XrcTgt, &cq, &cq, CAP);
    assert_eq!(
        pd.create_qp(&tgt_attr).err(),
        Some(invalid(Invalid::UnsupportedQpType))
    );
    let mut ini = pd
        .create_qp(&QpInitAttr::new(QpType::XrcIni, &cq, &cq, CAP))
        .unwrap();
    assert_eq!(ini.qp_type(), QpType::XrcIni);
    // No receive queue (Linux 6.12 qp.c: no RQ for IB_QPT_XRC_INI).
    assert_eq!((ini.cap().max_recv_wr, ini.cap().max_recv_sge), (0, 0));
    assert!(ini.cap().max_send_wr >= 8);
    let mut tgt = xrcd.create_tgt_qp().unwrap();
    assert_eq!(tgt.qp_type(), QpType::XrcTgt);
    assert_eq!(tgt.cap(), QpCap::default());
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    for q in [&mut ini, &mut tgt] {
        q.to_init(1, 0, access, 0).unwrap();
        let empty = [RecvWr {
            wr_id: 1,
            sg_list: &[],
        }];
        assert_eq!(
            q.post_recv(&empty).unwrap_err().error,
            invalid(Invalid::NoReceiveQueue)
        );
    }
    let (i, t) = (ini.qpn(), tgt.qpn());
    ini.to_rtr(t.raw(), 0, path(), Mtu::Mtu1024).unwrap();
    tgt.to_rtr(i.raw(), 0, path(), Mtu::Mtu1024).unwrap();
    ini.to_rts(0).unwrap();
    tgt.to_rts(0).unwrap();
    use bareverbs_model::qp::QpState as M;
    assert_eq!(model_state(&hal, i), Some(M::Rts));
    assert_eq!(model_state(&hal, t), Some(M::Rts));
    // A target has no send queue.
    assert_eq!(
        tgt.send_batch(|_| ()).err(),
        Some(invalid(Invalid::OpcodeForQpType))
    );
    // An initiator's request names its XRC SRQ (seed 001 `xrc_remote_srq_num`): refused
    // without, in a plain batch or post_send, and in an XRC batch before it is set.
    let xrc = Err(invalid(Invalid::XrcRemoteSrq));
    assert_eq!(ini.send_batch(|_| ()).map(|_| ()), xrc);
    let wr = common::send_wr(1, &[], SendOp::Send);
    assert_eq!(ini.post_send(&[wr]).map_err(|e| e.error), xrc);
    let r = ini
        .send_batch_xrc(|b| b.send(1, SendFlags::SIGNALED, &[]))
        .unwrap();
    assert_eq!(r, xrc);
    // Only an XRC initiator takes one.
    assert_eq!(tgt.send_batch_xrc(|_| ()).map(|_| ()), xrc);
    assert_eq!(tgt.post_send_xrc(5, &[wr]).map_err(|e| e.error), xrc);
    ini.destroy().map_err(|(e, _)| e).unwrap();
    tgt.destroy().map_err(|(e, _)| e).unwrap();
    assert_eq!(model_state(&hal, i), None);
    assert_eq!(model_state(&hal, t), None);
    // Nothing of the initiator's or target's is left naming the domain, nor the CQ.
    xrcd.destroy().map_err(|(e, _)| e).unwrap();
    cq.destroy().map_err(|(e, _)| e).unwrap();
}

#[test]
fn xrc_transitions_follow_the_kernel_table() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let xrcd = dev.alloc_xrcd().unwrap();
    let mut ini = pd
        .create_qp(&QpInitAttr::new(QpType::XrcIni, &cq, &cq, CAP))
        .unwrap();
    let mut tgt = xrcd.create_tgt_qp().unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    ini.to_init(1, 0, access, 0).unwrap();
    tgt.to_init(1, 0, access, 0).unwrap();
    // INIT → RTR: XRC_INI allows no responder resources (the kernel's table: AV, MTU,
    // DEST_QPN, RQ_PSN required; ALT_PATH, ACCESS_FLAGS, PKEY_INDEX optional) …
    let mut rtr = QpAttr::default();
    rtr.qp_state = QpState::Rtr;
    rtr.dest_qp_num = tgt.qpn().raw();
    rtr.ah_attr = path();
    rtr.path_mtu = Mtu::Mtu1024;
    rtr.max_dest_rd_atomic = 1;
    rtr.min_rnr_timer = 12;
    let base = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN;
    let resp = QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
    assert!(matches!(
        ini.modify(&rtr, base | resp),
        Err(Error::ModifyQp(_))
    ));
    // … XRC_TGT requires them.
    assert!(matches!(tgt.modify(&rtr, base), Err(Error::ModifyQp(_))));
    ini.modify(&rtr, base).unwrap();
    tgt.modify(&rtr, base | resp).unwrap();
    // RTR → RTS: XRC_TGT requires TIMEOUT and SQ_PSN only, XRC_INI as RC.
    let (rts, _) = rc_rts();
    let tgt_rts = QpAttrMask::STATE | QpAttrMask::TIMEOUT | QpAttrMask::SQ_PSN;
    assert!(matches!(ini.modify(&rts, tgt_rts), Err(Error::ModifyQp(_))));
    assert!(matches!(
        tgt.modify(&rts, tgt_rts | QpAttrMask::RETRY_CNT),
        Err(Error::ModifyQp(_))
    ));
    tgt.modify(&rts, tgt_rts).unwrap();
    ini.to_rts(0).unwrap();
    assert_eq!(tgt.query().unwrap().qp_state, QpState::Rts);
    assert_eq!(ini.query().unwrap().qp_state, QpState::Rts);
}

#[test]
fn a_shared_target_qp_lives_until_its_last_user_unregisters() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let xrcd = dev.alloc_xrcd().unwrap();
    let other = dev.alloc_xrcd().unwrap();
    // Created and registered once (seed 001 `ibv_create_xrc_rcv_qp`).
    let qpn = xrcd.create_xrc_rcv_qp().unwrap();
    assert_eq!(xrcd.xrc_rcv_qp_users(qpn), Ok(1));
    // Another process opens it by number (`ibv_reg_xrc_rcv_qp`); another domain does not
    // know it.
    xrcd.reg_xrc_rcv_qp(qpn).unwrap();
    assert_eq!(xrcd.xrc_rcv_qp_users(qpn), Ok(2));
    let unknown = Err(invalid(Invalid::UnknownXrcQp));
    assert_eq!(other.reg_xrc_rcv_qp(qpn), unknown);
    assert_eq!(other.unreg_xrc_rcv_qp(qpn).map(|_| ()), unknown);
    assert_eq!(other.query_xrc_rcv_qp(qpn).map(|_| ()), unknown);

    // Modified through the domain (`ibv_modify_xrc_rcv_qp`), with XRC_TGT's rules.
    let mut init = QpAttr::default();
    init.qp_state = QpState::Init;
    init.port_num = 1;
    init.qp_access_flags = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let init_mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
    assert!(matches!(
        xrcd.modify_xrc_rcv_qp(qpn, &init, init_mask),
        Err(Error::ModifyQp(_))
    ));
    xrcd.modify_xrc_rcv_qp(qpn, &init, init_mask | QpAttrMask::ACCESS_FLAGS)
        .unwrap();
    let mut rtr = QpAttr::default();
    rtr.qp_state = QpState::Rtr;
    rtr.dest_qp_num = 0x1234;
    rtr.rq_psn = 0x55;
    rtr.ah_attr = path();
    rtr.path_mtu = Mtu::Mtu2048;
    rtr.max_dest_rd_atomic = 1;
    rtr.min_rnr_timer = 12;
    xrcd.modify_xrc_rcv_qp(
        qpn,
        &rtr,
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )
    .unwrap();
    // Queried (`ibv_query_xrc_rcv_qp`): the device's state and attributes, and the init
    // attributes of an XRC receive QP of this domain.
    let (a, ia) = xrcd.query_xrc_rcv_qp(qpn).unwrap();
    assert_eq!(a.qp_state, QpState::Rtr);
    assert_eq!((a.dest_qp_num, a.rq_psn), (0x1234, 0x55));
    assert_eq!(a.ah_attr.dlid, 1);
    assert!(a.qp_access_flags.contains(AccessFlags::REMOTE_WRITE));
    assert_eq!(
        ia,
        XrcRcvQpInitAttr {
            qp_type: QpType::XrcTgt,
            cap: QpCap::default(),
            sq_sig_all: false,
            xrcdn: xrcd.xrcdn(),
        }
    );
    use bareverbs_model::qp::QpState as M;
    assert_eq!(model_state(&hal, qpn), Some(M::Rtr));

    // The domain refuses to go while the QP is registered.
    let (e, xrcd) = xrcd.destroy().unwrap_err();
    assert_eq!(e, Error::Busy);
    // The first unregistration leaves it; the last destroys it.
    xrcd.unreg_xrc_rcv_qp(qpn).unwrap();
    assert_eq!(model_state(&hal, qpn), Some(M::Rtr));
    xrcd.unreg_xrc_rcv_qp(qpn).unwrap();
    assert_eq!(model_state(&hal, qpn), None);
    assert_eq!(xrcd.unreg_xrc_rcv_qp(qpn), unknown);
    xrcd.destroy().map_err(|(e, _)| e).unwrap();
}

#[test]
fn a_domain_shares_a_fixed_number_of_target_qps_and_drop_destroys_them() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let xrcd = dev.alloc_xrcd().unwrap();
    let qpns: Vec<Qpn> = (0..MAX_SHARED_XRC_QPS)
        .map(|_| xrcd.create_xrc_rcv_qp().unwrap())
        .collect();
    let before = qp_count(&hal);
    assert_eq!(
        xrcd.create_xrc_rcv_qp(),
        Err(Error::ExceedsLimit {
            limit: bareverbs::Limit::SharedXrcQps,
            requested: MAX_SHARED_XRC_QPS as u64 + 1,
            max: MAX_SHARED_XRC_QPS as u64,
        })
    );
    assert_eq!(qp_count(&hal), before, "nothing created");
    // A slot freed is usable again.
    xrcd.unreg_xrc_rcv_qp(qpns[3]).unwrap();
    let again = xrcd.create_xrc_rcv_qp().unwrap();
    let xn = xrcd.xrcdn();
    drop(xrcd);
    for q in qpns.iter().filter(|&&q| q != qpns[3]).chain([&again]) {
        assert_eq!(model_state(&hal, *q), None);
    }
    let e = raw_dealloc(&dev, xn).unwrap_err();
    assert_eq!(command_status(e), Some(CmdStatus::BadResource));
}

fn wait(cq: &mut Cq<'_, &SimHal>) -> Wc {
    let mut wc = [Wc::EMPTY; 1];
    for _ in 0..100_000 {
        if cq.poll(&mut wc) == 1 {
            return wc[0];
        }
        std::thread::yield_now();
    }
    panic!("no completion");
}

fn recv_wr(wr_id: u64, sg: &[Sge]) -> RecvWr<'_> {
    RecvWr { wr_id, sg_list: sg }
}

#[test]
fn xrc_traffic_between_two_hcas_lands_in_the_srq_each_request_names() {
    use bareverbs_model::{Drive, Fabric, ModelConfig};
    let fabric = Fabric::new();
    let cfg = |lid, guid| ModelConfig {
        base_lid: lid,
        node_guid: guid,
        ..ModelConfig::default()
    };
    let h1 = SimHal::on_fabric(cfg(1, 0x10), Drive::Synchronous, &fabric);
    let h2 = SimHal::on_fabric(cfg(17, 0x20), Drive::Synchronous, &fabric);
    let d1 = Device::bring_up(&h1, Config::default()).unwrap();
    let d2 = Device::bring_up(&h2, Config::default()).unwrap();
    // Sender: an XRC initiator on HCA 1.
    let p1 = d1.alloc_pd().unwrap();
    let mut scq = d1.create_cq(64).unwrap();
    let mut ini = p1
        .create_qp(&QpInitAttr::new(QpType::XrcIni, &scq, &scq, CAP))
        .unwrap();
    // Receiver: a domain on HCA 2 with two XRC SRQs, each completing on its own CQ, one
    // target QP; and an SRQ of another domain.
    let p2 = d2.alloc_pd().unwrap();
    let xrcd = d2.alloc_xrcd().unwrap();
    let other = d2.alloc_xrcd().unwrap();
    let (mut c1, mut c2, mut c3) = (
        d2.create_cq(16).unwrap(),
        d2.create_cq(16).unwrap(),
        d2.create_cq(16).unwrap(),
    );
    let want = SrqAttr {
        max_wr: 3,
        max_sge: 1,
        srq_limit: 0,
    };
    let s1 = xrcd.create_xrc_srq(&p2, &c1, want).unwrap();
    let s2 = xrcd.create_xrc_srq(&p2, &c2, want).unwrap();
    let s3 = other.create_xrc_srq(&p2, &c3, want).unwrap();
    assert_eq!(s1.attr().max_wr, 3);
    let mut tgt = xrcd.create_tgt_qp().unwrap();
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    ini.to_init(1, 0, all, 0).unwrap();
    tgt.to_init(1, 0, all, 0).unwrap();
    let to = |dlid| AhAttr {
        dlid,
        port_num: 1,
        ..AhAttr::default()
    };
    ini.to_rtr(tgt.qpn().raw(), 0, to(17), Mtu::Mtu1024)
        .unwrap();
    tgt.to_rtr(ini.qpn().raw(), 0, to(1), Mtu::Mtu1024).unwrap();
    ini.to_rts(0).unwrap();

    let src = common::region(&p1, 4096, AccessFlags::LOCAL_WRITE);
    let dst = common::region(&p2, 16 * 256, all);
    // Eight messages, alternating SRQs: each SRQ's three-WQE ring is used past its end, so
    // WQEs come back to the free list as their completions are polled.
    let mut srqs = [(&s1, &mut c1), (&s2, &mut c2)];
    for (k, (s, _)) in srqs.iter().enumerate() {
        for j in 0..2u64 {
            let slot = (k as u64 * 2 + j) % 16;
            s.post_recv(&[recv_wr(
                100 * (k as u64 + 1) + j,
                &[common::sge(&dst, slot * 256, 256)],
            )])
            .unwrap();
        }
    }
    let mut next_id = [2u64, 2u64];
    for m in 0..8u8 {
        let k = usize::from(m % 2);
        let len = 40 + u32::from(m);
        src.buf().fill(0, len as usize, 0xa0 + m).unwrap();
        let (s, cq) = &mut srqs[k];
        ini.post_send_xrc(
            s.srq_num(),
            &[common::send_wr(
                u64::from(m),
                &[common::sge(&src, 0, len)],
                SendOp::Send,
            )],
        )
        .unwrap();
        let sc = wait(&mut scq);
        assert_eq!((sc.wr_id, sc.status), (u64::from(m), WcStatus::Success));
        // The receive completes on the SRQ's CQ with the target QP's number and the wr_id
        // of the SRQ's WQE (Linux 6.12 mlx5_ib cq.c `handle_responder`, XRC: the SRQ from
        // `cqe->srqn`, the WQE by `wqe_counter`).
        let rc = wait(cq);
        assert_eq!(rc.status, WcStatus::Success);
        assert_eq!(rc.opcode, WcOpcode::Recv);
        assert_eq!(rc.qp_num, tgt.qpn().raw());
        assert_eq!(rc.byte_len, len);
        let round = u64::from(m / 2);
        assert_eq!(rc.wr_id, 100 * (k as u64 + 1) + round, "message {m}");
        let slot = (k as u64 * 2 + round) % 16;
        let mut got = vec![0u8; len as usize];
        dst.buf().read_bytes(slot as usize * 256, &mut got).unwrap();
        assert!(got.iter().all(|&b| b == 0xa0 + m), "message {m} data");
        // Refill: the ring wraps through WQEs freed by the polls.
        let id = 100 * (k as u64 + 1) + next_id[k];
        let slot = (k as u64 * 2 + next_id[k]) % 16;
        s.post_recv(&[recv_wr(id, &[common::sge(&dst, slot * 256, 256)])])
            .unwrap();
        next_id[k] += 1;
    }
    // RDMA WRITE through XRC: no receive taken.
    src.buf().fill(0, 64, 0x5a).unwrap();
    ini.post_send_xrc(
        s2.srq_num(),
        &[common::send_wr(
            77,
            &[common::sge(&src, 0, 64)],
            SendOp::RdmaWrite {
                remote_addr: dst.addr() + 15 * 256,
                rkey: dst.rkey().raw(),
            },
        )],
    )
    .unwrap();
    assert_eq!(wait(&mut scq).status, WcStatus::Success);
    let mut got = [0u8; 64];
    dst.buf().read_bytes(15 * 256, &mut got).unwrap();
    assert_eq!(got, [0x5a; 64]);
    let mut none = [Wc::EMPTY; 1];
    assert_eq!(c2.poll(&mut none), 0);

    // A request naming an XRC SRQ of another domain: the model answers remote access error
    // (the IBA's NAK for it is not verified, see the README), nothing lands there, and the
    // initiator goes to ERR.
    s3.post_recv(&[recv_wr(9, &[common::sge(&dst, 0, 256)])])
        .unwrap();
    ini.post_send_xrc(
        s3.srq_num(),
        &[common::send_wr(
            88,
            &[common::sge(&src, 0, 8)],
            SendOp::Send,
        )],
    )
    .unwrap();
    let e = wait(&mut scq);
    assert_eq!((e.wr_id, e.status), (88, WcStatus::RemAccessErr));
    assert_eq!(c3.poll(&mut none), 0);
    assert_eq!(ini.query().unwrap().qp_state, QpState::Err);
}

#[test]
fn an_xrc_srq_is_queried_armed_and_refuses_what_mlx5_refuses() {
    let (hal, hal2) = (SimHal::synchronous(), SimHal::synchronous());
    let dev2 = Device::bring_up(&hal2, Config::default()).unwrap();
    let pd2 = dev2.alloc_pd().unwrap();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let xrcd = dev.alloc_xrcd().unwrap();
    let zero = SrqAttr::default();
    assert_eq!(
        xrcd.create_xrc_srq(&pd, &cq, zero).err(),
        Some(invalid(Invalid::ZeroEntries))
    );
    let caps = dev.info().caps;
    let huge = SrqAttr {
        max_wr: caps.max_srq_wr + 1,
        max_sge: 1,
        srq_limit: 0,
    };
    assert!(matches!(
        xrcd.create_xrc_srq(&pd, &cq, huge).err(),
        Some(Error::ExceedsLimit { .. })
    ));
    // A PD of another device.
    let ok = SrqAttr {
        max_wr: 5,
        max_sge: 2,
        srq_limit: 0,
    };
    assert_eq!(
        xrcd.create_xrc_srq(&pd2, &cq, ok).err(),
        Some(invalid(Invalid::ForeignObject))
    );
    let mut s = xrcd.create_xrc_srq(&pd, &cq, ok).unwrap();
    // 5 + 1 rounds up to 8 WQEs, 7 usable; 2 SGEs in a 64-byte stride hold 3.
    let a = s.query().unwrap();
    assert_eq!((a.max_wr, a.max_sge, a.srq_limit), (7, 3, 0));
    assert_eq!(s.attr(), a);
    // In the model: an XRC SRQ of this domain on this CQ.
    let m = hal.model().with(|h| h.srq(s.srq_num()).cloned()).unwrap();
    assert_eq!(m.xrcd, Some(xrcd.xrcdn()));
    assert_eq!(m.cqn, Some(cq.cqn().raw()));
    assert_eq!(m.pd, pd.pdn().raw());
    // Resizing: mlx5_ib `mlx5_ib_modify_srq` returns EINVAL for IB_SRQ_MAX_WR.
    assert_eq!(
        s.modify(&a, SrqAttrMask::MAX_WR),
        Err(invalid(Invalid::UnsupportedTransition))
    );
    let mr = common::region(&pd, 4096, AccessFlags::LOCAL_WRITE);
    let sg = [common::sge(&mr, 0, 8); 4];
    assert_eq!(
        s.post_recv(&[recv_wr(1, &sg)]).unwrap_err().error,
        invalid(Invalid::TooManySge)
    );
    // Seven receives fit; the eighth is refused.
    let one = [common::sge(&mr, 0, 8)];
    let wrs: Vec<RecvWr<'_>> = (0..8).map(|i| recv_wr(i, &one)).collect();
    let e = s.post_recv(&wrs).unwrap_err();
    assert_eq!((e.index, e.error), (7, Error::QueueFull));
    // The limit (ARM_XRC_SRQ's `lwm`): past max_wr is refused; armed, the device holds it.
    assert!(matches!(
        s.modify(&SrqAttr { srq_limit: 8, ..a }, SrqAttrMask::LIMIT),
        Err(Error::ExceedsLimit { .. })
    ));
    s.modify(&SrqAttr { srq_limit: 5, ..a }, SrqAttrMask::LIMIT)
        .unwrap();
    assert_eq!(s.query().unwrap().srq_limit, 5);
    assert_eq!(
        hal.model().with(|h| h.srq(s.srq_num()).map(|m| m.lwm)),
        Some(5)
    );
    // Its CQ cannot go while the SRQ completes into it.
    let (e, cq) = cq.destroy().unwrap_err();
    assert_eq!(e, Error::Busy);
    // Messages through a target QP of the domain (initiator on the same HCA, LID 1) take
    // receives; when fewer than 5 remain the limit event fires once and the limit reads 0
    // (seed 001 `ibv_query_srq`: "0 ... no longer armed").
    let mut scq = dev.create_cq(16).unwrap();
    let mut ini = pd
        .create_qp(&QpInitAttr::new(QpType::XrcIni, &scq, &scq, CAP))
        .unwrap();
    let mut tgt = xrcd.create_tgt_qp().unwrap();
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    ini.to_init(1, 0, all, 0).unwrap();
    tgt.to_init(1, 0, all, 0).unwrap();
    ini.to_rtr(tgt.qpn().raw(), 0, path(), Mtu::Mtu1024)
        .unwrap();
    tgt.to_rtr(ini.qpn().raw(), 0, path(), Mtu::Mtu1024)
        .unwrap();
    ini.to_rts(0).unwrap();
    let limit_events = |dev: &Device<&SimHal>| {
        dev.poll_events();
        let mut n = 0;
        while let Some(ev) = dev.next_event() {
            if ev == (bareverbs::AsyncEvent::SrqLimitReached { srqn: s.srq_num() }) {
                n += 1;
            }
        }
        n
    };
    let mut cq = cq;
    for m in 0..3u64 {
        ini.post_send_xrc(
            s.srq_num(),
            &[common::send_wr(m, &[common::sge(&mr, 0, 8)], SendOp::Send)],
        )
        .unwrap();
        assert_eq!(wait(&mut scq).status, WcStatus::Success);
        let rc = wait(&mut cq);
        assert_eq!((rc.wr_id, rc.qp_num), (m, tgt.qpn().raw()));
        // Seven posted: after the third receive four remain, under the limit of 5.
        assert_eq!(limit_events(&dev), usize::from(m == 2), "message {m}");
    }
    assert_eq!(s.query().unwrap().srq_limit, 0);
    drop((ini, tgt));
    s.destroy().unwrap();
    // The initiator's own default domain and SRQ went with it: the model holds only the
    // domain's default SRQ now.
    let srqs = hal
        .model()
        .with(|h| (0..64).filter(|&n| h.srq(n).is_some()).count());
    assert_eq!(srqs, 1);
    cq.destroy().map_err(|(e, _)| e).unwrap();
}
