//! Queue pair control path against the model: creation and sizes, the CQ-in-use rule,
//! transitions through RTS for RC and UD, query, and refused transitions that send nothing.

use bareverbs::testing::cap;
use bareverbs::verbs::ModifyError;
use bareverbs::verbs::{
    AccessFlags, AhAttr, Mtu, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType,
};
use bareverbs::{Config, Device, Error};
use bareverbs_model::{Drive, ModelConfig, SimHal};

mod common;
use common::with;

/// Uneven sizes, so a mix-up of the send and receive queue's shows.
const CAP: QpCap = QpCap {
    max_recv_wr: 100,
    max_recv_sge: 3,
    ..cap(64, 2, 64)
};

#[test]
fn rc_qp_lifecycle_and_cq_in_use() {
    let hal = SimHal::synchronous();
    let m = hal.model();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let scq = dev.create_cq(64).unwrap();
    let rcq = dev.create_cq(128).unwrap();
    let mut qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &rcq, CAP))
        .unwrap();
    let got = qp.cap();
    assert!(
        got.max_send_wr >= 64
            && got.max_recv_wr >= 100
            && got.max_recv_sge >= 3
            && got.max_inline_data >= 64
    );
    let qpn = qp.qpn().raw();
    assert_eq!(
        m.with(|h| h.qp(qpn).unwrap().state),
        bareverbs_model::qp::QpState::Rst
    );

    // RESET -> RTR directly is not in the table: nothing is sent.
    let before = m.trace().len();
    let mut bad = QpAttr::default();
    bad.qp_state = QpState::Rtr;
    assert!(matches!(
        qp.modify(&bad, QpAttrMask::STATE),
        Err(Error::ModifyQp(ModifyError::InvalidTransition { .. }))
    ));
    // INIT needs PKEY_INDEX | PORT | ACCESS_FLAGS for RC: the missing ones are named.
    let mut init = QpAttr::default();
    init.qp_state = QpState::Init;
    init.port_num = 1;
    match qp.modify(&init, QpAttrMask::STATE | QpAttrMask::PORT) {
        Err(Error::ModifyQp(ModifyError::Missing { attrs })) => {
            assert_eq!(attrs, QpAttrMask::PKEY_INDEX | QpAttrMask::ACCESS_FLAGS)
        }
        other => panic!("{other:?}"),
    }
    // QKEY is not an RC attribute at RESET -> INIT.
    let with_qkey = QpAttrMask::STATE
        | QpAttrMask::PORT
        | QpAttrMask::PKEY_INDEX
        | QpAttrMask::ACCESS_FLAGS
        | QpAttrMask::QKEY;
    assert!(
        matches!(qp.modify(&init, with_qkey), Err(Error::ModifyQp(ModifyError::NotAllowed { attrs })) if attrs == QpAttrMask::QKEY)
    );
    assert_eq!(
        m.trace().len(),
        before,
        "refused transitions send no command"
    );

    qp.to_init(
        1,
        0,
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        0,
    )
    .unwrap();
    let ah = AhAttr {
        dlid: 2,
        sl: 3,
        port_num: 1,
        ..AhAttr::default()
    };
    qp.to_rtr(0x1234, 100, ah, Mtu::Mtu2048).unwrap();
    qp.to_rts(200).unwrap();
    assert_eq!(qp.state(), QpState::Rts);
    // Each transition went out as its own command.
    let ops: Vec<u16> = m.trace().iter().rev().take(3).map(|t| t.opcode.0).collect();
    assert_eq!(ops, [0x504, 0x503, 0x502]);
    let q = m.with(|h| h.qp(qpn).cloned()).unwrap();
    assert_eq!(
        (
            q.remote_qpn,
            q.next_rcv_psn,
            q.next_send_psn,
            q.rlid,
            q.sl,
            q.mtu
        ),
        (0x1234, 100, 200, 2, 3, 4)
    );
    assert!(q.rre && q.rwe && !q.rae);
    let a = qp.query().unwrap();
    assert_eq!(a.qp_state, QpState::Rts);
    assert_eq!(
        (a.dest_qp_num, a.rq_psn, a.sq_psn, a.retry_cnt, a.rnr_retry),
        (0x1234, 100, 200, 7, 7)
    );
    assert_eq!(
        a.qp_access_flags,
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
    );

    // A CQ a QP completes into cannot be destroyed.
    let (e, scq) = scq.destroy().err().unwrap();
    assert_eq!(e, Error::Busy);
    // Any state -> ERR -> RESET.
    qp.modify(
        &with(QpAttr::default(), |a| a.qp_state = QpState::Err),
        QpAttrMask::STATE,
    )
    .unwrap();
    assert_eq!(qp.query().unwrap().qp_state, QpState::Err);
    qp.modify(
        &with(QpAttr::default(), |a| a.qp_state = QpState::Reset),
        QpAttrMask::STATE,
    )
    .unwrap();
    qp.destroy().map_err(|(e, _)| e).unwrap();
    scq.destroy().map_err(|(e, _)| e).unwrap();
    drop(rcq);
    drop(pd);
    assert_eq!(m.with(|h| h.object_counts()), (0, 0, 0));
    dev.teardown().unwrap();
}

#[test]
fn ud_qp_takes_a_qkey_and_no_path() {
    // A two-port function, so the port the QP is bound to is seen to reach the model.
    let hal = SimHal::new(
        ModelConfig {
            num_ports: 2,
            ..ModelConfig::default()
        },
        Drive::Synchronous,
    );
    let m = hal.model();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let mut qp = pd
        .create_qp(&with(QpInitAttr::new(QpType::Ud, &cq, &cq, CAP), |a| {
            a.sq_sig_all = true
        }))
        .unwrap();
    // ACCESS_FLAGS is refused for UD at RESET -> INIT; QKEY is required.
    let mut a = QpAttr::default();
    a.qp_state = QpState::Init;
    a.port_num = 2;
    a.qkey = 0x1111_2222;
    let rc_mask =
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::ACCESS_FLAGS;
    assert!(matches!(qp.modify(&a, rc_mask), Err(Error::ModifyQp(_))));
    qp.to_init(2, 0, AccessFlags::empty(), 0x1111_2222).unwrap();
    qp.to_rtr(0, 0, AhAttr::default(), Mtu::Mtu4096).unwrap();
    qp.to_rts(7).unwrap();
    let q = m.with(|h| h.qp(qp.qpn().raw()).cloned()).unwrap();
    assert_eq!((q.qkey, q.port, q.next_send_psn), (0x1111_2222, 2, 7));
    assert_eq!(qp.query().unwrap().qkey, 0x1111_2222);
}

#[test]
fn sizes_past_the_device_limits_are_refused() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let big = QpCap {
        max_send_wr: 1 << 20,
        ..CAP
    };
    let r = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq, big));
    assert!(matches!(r, Err(Error::ExceedsLimit { .. })));
    let inline = QpCap {
        max_inline_data: 4096,
        ..CAP
    };
    let r = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq, inline));
    assert!(matches!(r, Err(Error::ExceedsLimit { .. })));
}

#[test]
fn the_qp_table_holds_max_qps_and_cq_uses_come_and_go() {
    use bareverbs::verbs::{Cq, MAX_QPS};
    use bareverbs::Limit;

    let hal = SimHal::synchronous();
    let m = hal.model();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(4).unwrap();
    let small = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    fn init<'c, 'd, 'h>(cq: &'c Cq<'d, &'h SimHal>, cap: QpCap) -> QpInitAttr<'c, 'd, &'h SimHal> {
        QpInitAttr::new(QpType::Rc, cq, cq, cap)
    }
    // Inline tables hold 64 QPs; with `alloc` the table takes as many as the device does.
    let n = MAX_QPS.unwrap_or(300);
    let mut qps: Vec<_> = (0..n)
        .map(|_| pd.create_qp(&init(&cq, small)).unwrap())
        .collect();
    let before = m.trace().len();
    match (MAX_QPS, pd.create_qp(&init(&cq, small))) {
        // One more is refused, before any command.
        (
            Some(limit),
            Err(Error::ExceedsLimit {
                limit: Limit::QpCount,
                max,
                ..
            }),
        ) => {
            assert_eq!(max, limit as u64);
            assert_eq!(m.trace().len(), before);
        }
        (None, Ok(q)) => drop(q),
        (_, Err(e)) => panic!("{e}"),
        (Some(_), Ok(_)) => panic!("QP {} accepted", n + 1),
    }
    // A destroyed QP makes room for another.
    if qps.pop().unwrap().destroy().is_err() {
        panic!("DESTROY_QP failed");
    }
    qps.push(pd.create_qp(&init(&cq, small)).unwrap());
    drop(qps);
    // The table of CQs in use keeps only those in use: more live CQs than it holds, each used
    // by a QP that is then destroyed, never fill it; each CQ can then be destroyed.
    let cqs: Vec<_> = (0..3 * MAX_QPS.unwrap_or(64))
        .map(|_| dev.create_cq(2).unwrap())
        .collect();
    for c in &cqs {
        drop(pd.create_qp(&init(c, small)).unwrap());
    }
    for c in cqs {
        if c.destroy().is_err() {
            panic!("DESTROY_CQ of a CQ no QP uses failed");
        }
    }
    // And a CQ in use is still protected, until its last QP goes.
    let c = dev.create_cq(2).unwrap();
    let (q1, q2) = (
        pd.create_qp(&init(&c, small)).unwrap(),
        pd.create_qp(&init(&c, small)).unwrap(),
    );
    let (e, c) = c.destroy().err().unwrap();
    assert_eq!(e, Error::Busy);
    drop(q1);
    let (e, c) = c.destroy().err().unwrap();
    assert_eq!(e, Error::Busy);
    drop(q2);
    assert!(c.destroy().is_ok());
}
