//! The fatal asynchronous events against the model: `IBV_EVENT_QP_FATAL`, `IBV_EVENT_SRQ_ERR`
//! and `IBV_EVENT_DEVICE_FATAL` (seed 001 `ibv_get_async_event`), raised where IBA places the
//! errors (11.6.3.1: a CQ error, then a local work queue catastrophic error for each queue
//! that next uses that CQ; a queue whose WQEs cannot be accessed) and where Linux 6.12's
//! health poll finds a fatal sensor.

use bareverbs::verbs::*;
use bareverbs::HEALTH_POLL_INTERVAL;
use bareverbs::{AsyncEvent, Config, Device, Error, FatalSensor};
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;

mod common;
use common::{cap, connect_pair, region, send_wr, sge, with_rc_pair, PairAttr, RcPair};

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
    let attr = PairAttr {
        send_cqe: 1,
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        ..PairAttr::new(cap(16, 1, 0))
    };
    with_rc_pair(&dev, attr, |RcPair { a, b, scq, mr, .. }| {
        let s = [sge(mr, 0, 8)];
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
        assert_eq!(state(a), QpState::Err);
        // The completions written before the overrun are still there; nothing after.
        let mut wc = [Wc::EMPTY; 64];
        let n = scq.poll(&mut wc);
        assert_eq!(n as u64, room);
        assert!(wc[..n].iter().all(|w| w.status == WcStatus::Success));
        // The other QP is untouched.
        assert_eq!(state(b), QpState::Rts);
        // Recovery is the application's: the QP goes back through RESET, the CQ is replaced.
        a.modify(&QpAttr::default(), QpAttrMask::STATE).unwrap();
        assert_eq!(state(a), QpState::Reset);
    });
}

#[test]
fn a_qp_whose_send_queue_cannot_be_read_is_fatal() {
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    let attr = PairAttr {
        send_cqe: 16,
        recv_cqe: 16,
        access: AccessFlags::LOCAL_WRITE,
        ..PairAttr::new(cap(16, 1, 0))
    };
    with_rc_pair(&dev, attr, |RcPair { a, mr, .. }| {
        let qpn = a.qpn().raw();
        // The QP's buffer leaves the device's reach (an IOMMU mapping taken away): the device
        // cannot fetch the WQE the doorbell announces.
        let pages = hal.model().with(|h| h.qp(qpn).unwrap().pas.clone());
        for &p in pages.iter() {
            hal.model().memory().revoke(p, 4096);
        }
        let s = [sge(mr, 0, 8)];
        a.post_send(&[send_wr(1, &s, SendOp::Send)]).unwrap();
        assert_eq!(drain(&dev), [AsyncEvent::QpFatal { qpn }]);
        assert!(
            !hal.model().dma_faults().is_empty(),
            "the fetch is a recorded DMA fault"
        );
        assert_eq!(state(a), QpState::Err);
    });
}

#[test]
fn a_responder_whose_receive_queue_cannot_be_read_is_fatal_and_answers_nothing() {
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    let attr = PairAttr {
        send_cqe: 16,
        recv_cqe: 16,
        access: AccessFlags::LOCAL_WRITE,
        ..PairAttr::new(cap(16, 1, 0))
    };
    with_rc_pair(&dev, attr, |RcPair { a, b, scq, mr, .. }| {
        let bqpn = b.qpn().raw();
        let dbr = hal.model().with(|h| h.qp(bqpn).unwrap().dbr);
        hal.model().memory().revoke(dbr, 8);
        let s = [sge(mr, 0, 8)];
        a.post_send(&[send_wr(1, &s, SendOp::Send)]).unwrap();
        assert_eq!(drain(&dev), [AsyncEvent::QpFatal { qpn: bqpn }]);
        assert_eq!(state(b), QpState::Err);
        // No RNR NAK from a QP in ERR: the requester hears nothing (it waits for its ACK
        // timeout) and has nothing completed yet.
        let aqp = hal.model().with(|h| h.qp(a.qpn().raw()).unwrap().clone());
        assert_eq!(aqp.rnr_tries, 0, "no RNR NAK");
        assert!(aqp.ack_pending, "waiting for a response that does not come");
        assert_eq!(scq.poll(&mut [Wc::EMPTY; 4]), 0);
    });
}

#[test]
fn an_srq_that_cannot_be_read_raises_srq_err_and_its_qps_go_to_err() {
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
    let srq = pd
        .create_srq(&SrqInitAttr::new(SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        }))
        .unwrap();
    let plain = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(16, 1, 0));
    let mut on_srq = plain;
    on_srq.srq = Some(&srq);
    let mut a = pd.create_qp(&plain).unwrap();
    let mut b = pd.create_qp(&on_srq).unwrap();
    let mut c = pd.create_qp(&on_srq).unwrap();
    let access = AccessFlags::LOCAL_WRITE;
    connect_pair(&mut a, &mut b, access, Mtu::Mtu1024);
    let mr = region(&pd, 4096, access);
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

/// A receive request over `sg`.
fn recv(id: u64, sg: &[Sge]) -> RecvWr<'_> {
    RecvWr {
        wr_id: id,
        sg_list: sg,
    }
}

/// Everything `cq` hands back now, polled four at a time.
fn poll_all(cq: &mut Cq<'_, &SimHal>) -> Vec<Wc> {
    let mut out = Vec::new();
    let mut wc = [Wc::EMPTY; 4];
    loop {
        match cq.poll(&mut wc) {
            0 => return out,
            n => out.extend_from_slice(&wc[..n]),
        }
    }
}

#[test]
fn after_a_fatal_error_every_outstanding_request_completes_once_flushed_and_a_reset_recovers() {
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    assert_eq!(drain(&dev), []);
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(16, 1, 0));
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    connect_pair(&mut a, &mut b, access, Mtu::Mtu1024);
    let mr = region(&pd, 4096, access);
    let srq = pd
        .create_srq(&SrqInitAttr::new(SrqAttr {
            max_wr: 4,
            max_sge: 1,
            srq_limit: 0,
        }))
        .unwrap();
    let s = [sge(&mr, 0, 8)];
    let r = [sge(&mr, 1024, 64)];
    for id in 100..106 {
        b.post_recv(&[recv(id, &r)]).unwrap();
    }
    a.post_recv(&[recv(200, &r)]).unwrap();
    srq.post_recv(&[recv(300, &r)]).unwrap();
    // Sends 1 and 2 complete and are polled (receives 100 and 101 too).
    for id in 1..3 {
        a.post_send(&[send_wr(id, &s, SendOp::Send)]).unwrap();
    }
    assert_eq!(poll_all(&mut scq).len(), 2);
    assert_eq!(poll_all(&mut rcq).len(), 2);
    // Send 3 completes on the device (and takes receive 102) but is not polled yet.
    a.post_send(&[send_wr(3, &s, SendOp::Send)]).unwrap();
    // The device fails: firmware asks for a reset; it executes no more work.
    hal.model().set_health(0x1, true);
    // Posted before the driver knows: an unsignaled send and a signaled one; the device
    // never runs them.
    let unsignaled = SendWr {
        flags: SendFlags::empty(),
        ..send_wr(4, &s, SendOp::Send)
    };
    a.post_send(&[unsignaled, send_wr(5, &s, SendOp::Send)])
        .unwrap();
    b.post_recv(&[recv(106, &r)]).unwrap();
    hal.delay(HEALTH_POLL_INTERVAL);
    assert_eq!(drain(&dev), [AsyncEvent::DeviceFatal]);
    assert!(dev.is_fatal());

    // Every request not yet polled completes once, flushed, in its queue's order: the one
    // the device completed too (its CQE is no longer trusted), and the unsignaled one.
    let (an, bn) = (a.qpn().raw(), b.qpn().raw());
    let sends = poll_all(&mut scq);
    assert_eq!(
        sends
            .iter()
            .map(|w| (w.wr_id, w.qp_num))
            .collect::<Vec<_>>(),
        [(3, an), (4, an), (5, an)]
    );
    let recvs = poll_all(&mut rcq);
    let mut got: Vec<_> = recvs.iter().map(|w| (w.qp_num, w.wr_id)).collect();
    got.sort_unstable();
    let mut want: Vec<_> = (102..107).map(|id| (bn, id)).collect();
    want.push((an, 200));
    want.sort_unstable();
    assert_eq!(got, want, "the SRQ's receive stays with the SRQ");
    for w in sends.iter().chain(&recvs) {
        assert_eq!((w.status, w.vendor_err), (WcStatus::WrFlushErr, 0x05));
    }
    assert_eq!(poll_all(&mut scq), [], "each once");
    assert_eq!(poll_all(&mut rcq), []);

    // Nothing more is posted (mlx5_ib: -EIO).
    let fatal = |r: Result<(), PostError>| assert_eq!(r.unwrap_err().error, Error::DeviceFatal);
    fatal(a.post_send(&[send_wr(6, &s, SendOp::Send)]));
    fatal(b.post_recv(&[recv(107, &r)]));
    fatal(srq.post_recv(&[recv(301, &r)]));
    // A CQ made now flushes too (nothing is outstanding on it).
    let mut late = dev.create_cq(4).unwrap();
    assert_eq!(poll_all(&mut late), []);

    // Recovery: everything goes, the function is reset, the device comes up again and works.
    drop((late, a, b, srq));
    drop(mr);
    drop((scq, rcq));
    drop(pd);
    dev.teardown().unwrap();
    bareverbs_hal::Hal::function_reset(&&hal).unwrap();
    let dev = up(&hal);
    assert!(!dev.is_fatal());
    let pd = dev.alloc_pd().unwrap();
    let mut scq = dev.create_cq(4).unwrap();
    let rcq = dev.create_cq(4).unwrap();
    let init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(4, 1, 0));
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect_pair(&mut a, &mut b, access, Mtu::Mtu1024);
    let mr = region(&pd, 4096, access);
    let s = [sge(&mr, 0, 8)];
    let write = SendWr {
        op: SendOp::RdmaWrite {
            remote_addr: mr.addr() + 2048,
            rkey: mr.rkey().raw(),
        },
        ..send_wr(9, &s, SendOp::Send)
    };
    a.post_send(&[write]).unwrap();
    let w = common::poll_one(&mut scq);
    assert_eq!((w.wr_id, w.status), (9, WcStatus::Success));
}
