//! The fatal asynchronous events against the model: `IBV_EVENT_QP_FATAL`, `IBV_EVENT_SRQ_ERR`
//! and `IBV_EVENT_DEVICE_FATAL` (seed 001 `ibv_get_async_event`), raised where IBA places the
//! errors (11.6.3.1: a CQ error, then a local work queue catastrophic error for each queue
//! that next uses that CQ; a queue whose WQEs cannot be accessed) and where Linux 6.12's
//! health poll finds a fatal sensor.

use bareverbs::health::HEALTH_POLL_INTERVAL;
use bareverbs::verbs::*;
use bareverbs::{AsyncEvent, Config, Device, FatalSensor};
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;

mod common;
use common::{connect_pair, region, send_wr, sge};

fn up(hal: &SimHal) -> Device<&SimHal> {
    Device::bring_up(hal, Config::default()).unwrap()
}

fn drain(dev: &Device<&SimHal>) -> Vec<AsyncEvent> {
    dev.poll_events();
    std::iter::from_fn(|| dev.next_event()).collect()
}

fn state<H: bareverbs_hal::Hal>(q: &mut Qp<'_, '_, H>) -> QpState {
    q.query_qp(QpAttrMask::STATE).unwrap().0.qp_state
}

#[test]
fn a_qp_that_completes_into_an_overrun_cq_is_fatal_once() {
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    let pd = dev.alloc_pd().unwrap();
    let mut scq = dev.create_cq(1).unwrap();
    let rcq = dev.create_cq(64).unwrap();
    let init = QpInitAttr::new(QpType::Rc, &scq, &rcq, common::cap_with(16, 1, 0));
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    connect_pair(&mut a, &mut b, access, Mtu::Mtu1024);
    let mr = region(&hal, &pd, 4096, access);
    let s = [sge(&mr, 0, 8)];
    let write = |id| SendWr {
        op: SendOp::RdmaWrite {
            remote_addr: mr.addr() + 2048,
            rkey: mr.rkey().raw(),
        },
        ..send_wr(id, &s, SendOp::Send)
    };
    let room = scq.capacity() as u64;
    // Fill the send CQ, then one completion more: the CQ overruns (CQ error) and the QP that
    // tried to complete into it is fatal; what it still had posted is not completed anywhere.
    for id in 0..room + 3 {
        a.post_send(&[write(id)]).unwrap();
    }
    let (cqn, qpn) = (scq.cqn().raw(), a.qpn().raw());
    assert_eq!(
        drain(&dev),
        [
            AsyncEvent::CqErr { cqn, syndrome: 1 },
            AsyncEvent::QpFatal { qpn }
        ],
        "one CQ error, one QP fatal, however many completions were refused"
    );
    assert_eq!(state(&mut a), QpState::Err);
    // The completions written before the overrun are still there; nothing after.
    let mut wc = [Wc::EMPTY; 64];
    let n = scq.poll(&mut wc);
    assert_eq!(n as u64, room);
    assert!(wc[..n].iter().all(|w| w.status == WcStatus::Success));
    // The other QP is untouched.
    assert_eq!(state(&mut b), QpState::Rts);
    // Recovery is the application's: the QP goes back through RESET, the CQ is replaced.
    a.modify(&QpAttr::default(), QpAttrMask::STATE).unwrap();
    assert_eq!(state(&mut a), QpState::Reset);
}

#[test]
fn a_qp_whose_send_queue_cannot_be_read_is_fatal() {
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
    let init = QpInitAttr::new(QpType::Rc, &scq, &rcq, common::cap_with(16, 1, 0));
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    let access = AccessFlags::LOCAL_WRITE;
    connect_pair(&mut a, &mut b, access, Mtu::Mtu1024);
    let mr = region(&hal, &pd, 4096, access);
    let qpn = a.qpn().raw();
    // The QP's buffer leaves the device's reach (an IOMMU mapping taken away): the device
    // cannot fetch the WQE the doorbell announces.
    let pages = hal.model().with(|h| h.qp(qpn).unwrap().pas.clone());
    for p in pages {
        hal.model().memory().revoke(p, 4096);
    }
    let s = [sge(&mr, 0, 8)];
    a.post_send(&[send_wr(1, &s, SendOp::Send)]).unwrap();
    assert_eq!(drain(&dev), [AsyncEvent::QpFatal { qpn }]);
    assert!(
        !hal.model().dma_faults().is_empty(),
        "the fetch is a recorded DMA fault"
    );
    assert_eq!(state(&mut a), QpState::Err);
}

#[test]
fn a_responder_whose_receive_queue_cannot_be_read_is_fatal_and_answers_nothing() {
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, rcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
    let init = QpInitAttr::new(QpType::Rc, &scq, &rcq, common::cap_with(16, 1, 0));
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    let access = AccessFlags::LOCAL_WRITE;
    connect_pair(&mut a, &mut b, access, Mtu::Mtu1024);
    let mr = region(&hal, &pd, 4096, access);
    let bqpn = b.qpn().raw();
    let dbr = hal.model().with(|h| h.qp(bqpn).unwrap().dbr);
    hal.model().memory().revoke(dbr, 8);
    let s = [sge(&mr, 0, 8)];
    a.post_send(&[send_wr(1, &s, SendOp::Send)]).unwrap();
    assert_eq!(drain(&dev), [AsyncEvent::QpFatal { qpn: bqpn }]);
    assert_eq!(state(&mut b), QpState::Err);
    // No RNR NAK from a QP in ERR: the requester hears nothing (it waits for its ACK
    // timeout) and has nothing completed yet.
    let aqp = hal.model().with(|h| h.qp(a.qpn().raw()).unwrap().clone());
    assert_eq!(aqp.rnr_tries, 0, "no RNR NAK");
    assert!(aqp.ack_pending, "waiting for a response that does not come");
    assert_eq!(scq.poll(&mut [Wc::EMPTY; 4]), 0);
}

#[test]
fn an_srq_that_cannot_be_read_raises_srq_err_and_its_qps_go_to_err() {
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
    let srq = pd
        .create_srq(&SrqInitAttr {
            attr: SrqAttr {
                max_wr: 8,
                max_sge: 1,
                srq_limit: 0,
            },
            srq_context: 0,
        })
        .unwrap();
    let plain = QpInitAttr::new(QpType::Rc, &scq, &rcq, common::cap_with(16, 1, 0));
    let on_srq = QpInitAttr {
        srq: Some(&srq),
        ..plain
    };
    let mut a = pd.create_qp(&plain).unwrap();
    let mut b = pd.create_qp(&on_srq).unwrap();
    let mut c = pd.create_qp(&on_srq).unwrap();
    let access = AccessFlags::LOCAL_WRITE;
    connect_pair(&mut a, &mut b, access, Mtu::Mtu1024);
    let mr = region(&hal, &pd, 4096, access);
    let r = [sge(&mr, 1024, 64)];
    srq.post_recv(&[RecvWr {
        wr_id: 7,
        sg_list: &r,
    }])
    .unwrap();
    let srqn = srq.srqn();
    let dbr = hal.model().with(|h| h.srq(srqn).unwrap().dbr);
    hal.model().memory().revoke(dbr, 4);
    let s = [sge(&mr, 0, 8)];
    a.post_send(&[send_wr(1, &s, SendOp::Send)]).unwrap();
    let ev = drain(&dev);
    assert_eq!(ev[0], AsyncEvent::SrqErr { srqn });
    let (bq, cq) = (b.qpn().raw(), c.qpn().raw());
    let mut last: Vec<u32> = ev[1..]
        .iter()
        .map(|e| match e {
            AsyncEvent::QpLastWqeReached { qpn } => *qpn,
            other => panic!("unexpected event {other:?}"),
        })
        .collect();
    last.sort_unstable();
    assert_eq!(
        last,
        [bq.min(cq), bq.max(cq)],
        "each QP on the SRQ reports its last WQE"
    );
    assert_eq!(state(&mut b), QpState::Err);
    assert_eq!(state(&mut c), QpState::Err);
    assert_eq!(state(&mut a), QpState::Rts);
}

#[test]
fn a_fatal_health_sensor_is_a_device_fatal_event_once() {
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    assert_eq!(drain(&dev), [], "the first poll reads the sensors: healthy");
    // Firmware asks for a reset with a syndrome (Linux `mlx5_health_check_fatal_sensors`:
    // `rfr` and a non-zero `synd`); the next health poll, 2 s after the last as Linux's,
    // reports it, once.
    hal.model().set_health(0x1, true);
    assert_eq!(drain(&dev), [], "the sensors are not read again before 2 s");
    hal.delay(HEALTH_POLL_INTERVAL);
    assert_eq!(drain(&dev), [AsyncEvent::DeviceFatal]);
    hal.delay(HEALTH_POLL_INTERVAL);
    assert_eq!(drain(&dev), []);
    let report = dev.check_health();
    assert_eq!(report.fatal, Some(FatalSensor::FwSyndromeRfr));
    assert_eq!(
        drain(&dev),
        [],
        "an explicit check does not report it again"
    );

    // The same through an explicit check first.
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    hal.model().set_health(0x1, true);
    assert_eq!(dev.check_health().fatal, Some(FatalSensor::FwSyndromeRfr));
    assert_eq!(drain(&dev), [AsyncEvent::DeviceFatal]);
}
