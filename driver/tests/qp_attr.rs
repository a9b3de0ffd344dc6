//! `ibv_query_qp` with a mask and the init attributes (seed 001), the QP's user context, the
//! alternate path attributes refused on a device without automatic path migration
//! (`cmd_hca_cap.apm`, Linux mlx5_ib's IB_DEVICE_AUTO_PATH_MIG), and work posted to a QP the
//! device already moved to ERR completing with WR_FLUSH_ERR (IBA 10.3.1: every WR posted in
//! the error state is completed in error).

use bareverbs::verbs::*;
use bareverbs::Invalid;
use bareverbs::{AsyncEvent, Config, Device, Error};
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;

mod common;
use common::{cap, connect_pair, region, send_wr, sge, with, with_rc_pair, PairAttr, RcPair};

#[test]
fn query_qp_returns_the_attributes_and_how_the_qp_was_created() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(8).unwrap(), dev.create_cq(8).unwrap());
    let mut init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(8, 1, 0));
    init.sq_sig_all = true;
    init.qp_context = 0xfeed;
    let mut a = pd.create_qp(&init).unwrap();
    let mut b = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(8, 1, 0)))
        .unwrap();
    assert_eq!(a.context(), 0xfeed);
    assert_eq!(b.context(), 0);
    let (attr, info) = a.query_qp(QpAttrMask::STATE).unwrap();
    assert_eq!(attr.qp_state, QpState::Reset);
    assert_eq!(
        info,
        QpInitInfo {
            qp_type: QpType::Rc,
            cap: a.cap(),
            sq_sig_all: true,
            send_cqn: scq.cqn().raw(),
            recv_cqn: rcq.cqn().raw(),
            srqn: None,
            qp_context: 0xfeed,
        }
    );
    connect_pair(&mut a, &mut b, AccessFlags::LOCAL_WRITE, Mtu::Mtu1024);
    let (attr, _) = a
        .query_qp(QpAttrMask::STATE | QpAttrMask::DEST_QPN | QpAttrMask::AV)
        .unwrap();
    assert_eq!(attr.qp_state, QpState::Rts);
    assert_eq!(attr.dest_qp_num, b.qpn().raw());
    assert_eq!(attr.ah_attr.dlid, 1);
    assert_eq!(attr.path_mig_state, MigState::Migrated);
    assert_eq!(
        a.query_qp(QpAttrMask::empty()).err(),
        Some(Error::InvalidArgument {
            what: Invalid::QueryMask
        })
    );
}

#[test]
fn alternate_paths_are_refused_without_path_migration() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    assert!(!dev.info().caps.apm, "the model reports no APM");
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8).unwrap();
    let init = QpInitAttr::new(QpType::Rc, &cq, &cq, cap(8, 1, 0));
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    let path = AhAttr {
        dlid: 1,
        port_num: 1,
        ..AhAttr::default()
    };
    a.to_init(1, 0, AccessFlags::LOCAL_WRITE, 0).unwrap();
    b.to_init(1, 0, AccessFlags::LOCAL_WRITE, 0).unwrap();
    a.to_rtr(b.qpn().raw(), 0, path, Mtu::Mtu1024).unwrap();
    let no_apm = Err(Error::InvalidArgument {
        what: Invalid::NoPathMigration,
    });
    let rts = QpAttrMask::STATE
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::SQ_PSN
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    let mut to_rts = QpAttr::default();
    to_rts.qp_state = QpState::Rts;
    to_rts.timeout = 14;
    to_rts.retry_cnt = 7;
    to_rts.rnr_retry = 7;
    to_rts.alt_ah_attr = path;
    to_rts.alt_port_num = 1;
    to_rts.alt_timeout = 14;
    // Before: accepted, and an all-zero alternate path went to the device.
    assert_eq!(a.modify(&to_rts, rts | QpAttrMask::ALT_PATH), no_apm);
    let mut armed = to_rts;
    armed.path_mig_state = MigState::Armed;
    assert_eq!(a.modify(&armed, rts | QpAttrMask::PATH_MIG_STATE), no_apm);
    assert_eq!(a.state(), QpState::Rtr, "nothing sent");
    // The state QPs are created with is accepted and read back.
    a.modify(&to_rts, rts | QpAttrMask::PATH_MIG_STATE).unwrap();
    assert_eq!(a.query().unwrap().qp_state, QpState::Rts);
}

#[test]
fn work_posted_after_the_device_moved_the_qp_to_err_is_flushed() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let attr = PairAttr {
        send_cqe: 16,
        recv_cqe: 16,
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        ..PairAttr::new(cap(8, 1, 0))
    };
    with_rc_pair(
        &dev,
        attr,
        |RcPair {
             a, b, scq, rcq, mr, ..
         }| {
            let s = [sge(mr, 0, 8)];
            // An RDMA WRITE with a wrong rkey: remote access error, the requester's QP to ERR.
            let bad = send_wr(
                1,
                &s,
                SendOp::RdmaWrite {
                    remote_addr: mr.addr(),
                    rkey: mr.rkey().raw() ^ 0x100,
                },
            );
            a.post_send(&[bad]).unwrap();
            let mut wc = [Wc::EMPTY; 4];
            assert_eq!(scq.poll(&mut wc), 1);
            assert_eq!(wc[0].status, WcStatus::RemAccessErr);
            // The driver still believes RTS; the device says ERR. Posting is accepted and each
            // request completes, flushed, send and receive queue alike.
            a.post_send(&[send_wr(2, &s, SendOp::Send)]).unwrap();
            assert_eq!(scq.poll(&mut wc), 1);
            assert_eq!((wc[0].wr_id, wc[0].status), (2, WcStatus::WrFlushErr));
            let r = [sge(mr, 1024, 64)];
            a.post_recv(&[RecvWr {
                wr_id: 3,
                sg_list: &r,
            }])
            .unwrap();
            // The device notices receives posted in ERR when it next looks at the doorbell record
            // (on a timer tick here), not at once: nothing rings for receives.
            hal.delay(std::time::Duration::from_micros(1));
            assert_eq!(rcq.poll(&mut wc), 1);
            assert_eq!((wc[0].wr_id, wc[0].status), (3, WcStatus::WrFlushErr));
            assert_eq!(a.query().unwrap().qp_state, QpState::Err);
            // The responder went to ERR too and said so on the QP (IBA 9.9.3.1 class C; mlx5
            // WQ_ACCESS_ERROR: IBV_EVENT_QP_ACCESS_ERR).
            assert_eq!(b.query().unwrap().qp_state, QpState::Err);
            dev.poll_events();
            let events: Vec<_> = std::iter::from_fn(|| dev.next_event()).collect();
            assert!(
                events.contains(&AsyncEvent::QpAccessErr { qpn: b.qpn().raw() }),
                "{events:?}"
            );
        },
    );
}

#[test]
fn an_invalid_request_puts_the_responder_in_err_with_its_event() {
    // RDMA READ to a QP that allows no remote read: NAK invalid request (IBA 9.7.5.2.4), the
    // responder to ERR with WQ_INVAL_REQ_ERROR (IBV_EVENT_QP_REQ_ERR).
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, rcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
    let mut init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(8, 1, 0));
    init.cap = QpCap {
        max_send_wr: 4,
        ..cap(8, 1, 0)
    };
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    let (an, bn) = (a.qpn().raw(), b.qpn().raw());
    let path = AhAttr {
        dlid: 1,
        port_num: 1,
        ..AhAttr::default()
    };
    a.to_init(1, 0, AccessFlags::LOCAL_WRITE, 0).unwrap();
    b.to_init(1, 0, AccessFlags::LOCAL_WRITE, 0).unwrap();
    let (rtr, m) = common::rc_rtr(0, path);
    a.modify(&with(rtr, |a| a.dest_qp_num = bn), m).unwrap();
    b.modify(&with(rtr, |a| a.dest_qp_num = an), m).unwrap();
    let (rts, rm) = common::rc_rts();
    a.modify(&rts, rm).unwrap();
    b.modify(&rts, rm).unwrap();
    let mr = region(
        &pd,
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    );
    let s = [sge(&mr, 0, 8)];
    a.post_send(&[send_wr(
        1,
        &s,
        SendOp::RdmaRead {
            remote_addr: mr.addr(),
            rkey: mr.rkey().raw(),
        },
    )])
    .unwrap();
    let mut wc = [Wc::EMPTY; 2];
    assert_eq!(scq.poll(&mut wc), 1);
    assert_eq!(wc[0].status, WcStatus::RemInvReqErr);
    assert_eq!(b.query().unwrap().qp_state, QpState::Err);
    dev.poll_events();
    let events: Vec<_> = std::iter::from_fn(|| dev.next_event()).collect();
    assert!(
        events.contains(&AsyncEvent::QpReqErr { qpn: bn }),
        "{events:?}"
    );
}
