//! Shared receive queues through the driver's verbs (`ibv_create_srq`, `ibv_modify_srq`,
//! `ibv_query_srq`, `ibv_post_srq_recv`, `ibv_destroy_srq`, the `srq` of
//! `ibv_qp_init_attr`), against the model: seed 001's text for each, Linux 6.12 mlx5_ib
//! srq.c for what mlx5 refuses (resize), the limit event armed once
//! (`IBV_EVENT_SRQ_LIMIT_REACHED`) and the last-WQE event.

use bareverbs::verbs::*;
use bareverbs::{AsyncEvent, Config, Device, Error};
use bareverbs::{Invalid, Limit};
use bareverbs_model::SimHal;

mod common;
use common::{cap, connect_pair, region, send_wr, sge, with};

fn up(hal: &SimHal) -> Device<&SimHal> {
    Device::bring_up(hal, Config::default()).unwrap()
}

fn srq_attr(max_wr: u32, max_sge: u32, srq_limit: u32) -> SrqInitAttr {
    with(
        SrqInitAttr::new(SrqAttr {
            max_wr,
            max_sge,
            srq_limit,
        }),
        |a| a.srq_context = 0x5e,
    )
}

/// Events of the device since the last call that `want` picks.
fn events(dev: &Device<&SimHal>, want: impl Fn(AsyncEvent) -> bool) -> usize {
    dev.poll_events();
    std::iter::from_fn(|| dev.next_event())
        .filter(|e| want(*e))
        .count()
}

#[test]
fn qps_share_an_srq_and_its_receives_complete_with_their_wr_ids() {
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    let pd = dev.alloc_pd().unwrap();
    let mut scq = dev.create_cq(32).unwrap();
    let mut rcq = dev.create_cq(32).unwrap();
    let srq = pd.create_srq(&srq_attr(7, 2, 0)).unwrap();
    assert_eq!(srq.context(), 0x5e);
    // Sizes at least those asked for: 8 WQEs (the tail stays linked in), 3 SGEs by stride.
    assert_eq!(srq.attr().max_wr, 7);
    assert!(srq.attr().max_sge >= 2);
    let mut on_srq = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(8, 1, 0));
    on_srq.srq = Some(&srq);
    let plain = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(8, 1, 0));
    let (mut a1, mut b1) = (
        pd.create_qp(&plain).unwrap(),
        pd.create_qp(&on_srq).unwrap(),
    );
    let (mut a2, mut b2) = (
        pd.create_qp(&plain).unwrap(),
        pd.create_qp(&on_srq).unwrap(),
    );
    assert_eq!(b1.cap().max_recv_wr, 0, "no receive queue of its own");
    assert_eq!(srq.qp_users(), 2);
    let access = AccessFlags::LOCAL_WRITE;
    connect_pair(&mut a1, &mut b1, access, Mtu::Mtu1024);
    connect_pair(&mut a2, &mut b2, access, Mtu::Mtu1024);
    let mr = region(&pd, 8192, access);
    // A QP on an SRQ has no receive queue to post to.
    let s0 = [sge(&mr, 4096, 64)];
    let err = b1
        .post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &s0,
        }])
        .unwrap_err();
    assert_eq!(
        err.error,
        Error::InvalidArgument {
            what: Invalid::NoReceiveQueue
        }
    );

    // Four receives into distinct buffers, wr_ids 100..104.
    let bufs: Vec<[Sge; 1]> = (0..4).map(|k| [sge(&mr, 4096 + 256 * k, 256)]).collect();
    let wrs: Vec<RecvWr<'_>> = bufs
        .iter()
        .enumerate()
        .map(|(k, s)| RecvWr {
            wr_id: 100 + k as u64,
            sg_list: s,
        })
        .collect();
    srq.post_recv(&wrs).unwrap();
    // Messages from both senders land in the SRQ's receives in the order posted.
    for (k, first) in [true, false, false, true].into_iter().enumerate() {
        mr.buf().fill(0, 64, 0x10 + k as u8).unwrap();
        let s = [sge(&mr, 0, 64)];
        let a = if first { &mut a1 } else { &mut a2 };
        a.post_send(&[send_wr(k as u64, &s, SendOp::Send)]).unwrap();
    }
    let mut wc = [Wc::EMPTY; 8];
    assert_eq!(scq.poll(&mut wc), 4);
    assert!(wc[..4].iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(rcq.poll(&mut wc), 4);
    let got: Vec<_> = wc[..4].iter().map(|w| (w.wr_id, w.qp_num)).collect();
    let (q1, q2) = (b1.qpn().raw(), b2.qpn().raw());
    assert_eq!(got, [(100, q1), (101, q2), (102, q2), (103, q1)]);
    for k in 0..4 {
        let mut b = [0u8; 64];
        mr.buf().read_bytes(4096 + 256 * k, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0x10 + k as u8), "receive {k}");
    }

    // A QP on an SRQ sends as any other (its send queue starts the work buffer: it has no
    // receive queue before it).
    let back = [sge(&mr, 2048, 64)];
    a1.post_recv(&[RecvWr {
        wr_id: 900,
        sg_list: &back,
    }])
    .unwrap();
    let s = [sge(&mr, 0, 64)];
    b1.post_send(&[send_wr(901, &s, SendOp::Send)]).unwrap();
    assert_eq!(scq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (901, WcStatus::Success));
    assert_eq!(rcq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].qp_num), (900, a1.qpn().raw()));

    // The WQEs come back to the SRQ as their completions are polled: 7 more fit, not 8.
    let s = [sge(&mr, 4096, 64)];
    let more: Vec<_> = (0..8)
        .map(|k| RecvWr {
            wr_id: 200 + k,
            sg_list: &s,
        })
        .collect();
    let e = srq.post_recv(&more).unwrap_err();
    assert_eq!((e.index, e.error), (7, Error::QueueFull));

    // An SRQ in use is not destroyed.
    let (e, back) = srq.destroy().err().unwrap();
    assert_eq!(e, Error::Busy);
    let srq = back;
    drop((a1, b1, a2, b2));
    assert_eq!(srq.qp_users(), 0);
    srq.destroy().map_err(|(e, _)| e).unwrap();
    drop(mr);
    drop((scq, rcq));
    drop(pd);
    assert_eq!(hal.model().with(|h| h.object_counts()), (0, 0, 0));
}

#[test]
fn the_limit_event_fires_once_and_last_wqe_is_announced() {
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    let pd = dev.alloc_pd().unwrap();
    let (scq, mut rcq) = (dev.create_cq(32).unwrap(), dev.create_cq(32).unwrap());
    let mut srq = pd.create_srq(&srq_attr(15, 1, 0)).unwrap();
    let mut on_srq = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(8, 1, 0));
    on_srq.srq = Some(&srq);
    let mut a = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(8, 1, 0)))
        .unwrap();
    let mut b = pd.create_qp(&on_srq).unwrap();
    let access = AccessFlags::LOCAL_WRITE;
    connect_pair(&mut a, &mut b, access, Mtu::Mtu1024);
    let mr = region(&pd, 8192, access);
    let s = [sge(&mr, 4096, 64)];
    let recvs: Vec<_> = (0..4)
        .map(|k| RecvWr {
            wr_id: k,
            sg_list: &s,
        })
        .collect();
    srq.post_recv(&recvs).unwrap();
    let srqn = srq.srqn();
    let limit = |e| e == AsyncEvent::SrqLimitReached { srqn };

    // Resize is refused (Linux mlx5_ib_modify_srq: EINVAL); a limit past max_wr too.
    let a15 = SrqAttr {
        srq_limit: 16,
        ..srq.attr()
    };
    assert_eq!(
        srq.modify(&a15, SrqAttrMask::MAX_WR),
        Err(Error::InvalidArgument {
            what: Invalid::UnsupportedTransition
        })
    );
    assert!(matches!(
        srq.modify(&a15, SrqAttrMask::LIMIT),
        Err(Error::ExceedsLimit {
            limit: Limit::QpWr,
            ..
        })
    ));
    // Armed at 3 with 4 posted: nothing yet; at 2 left it fires, once.
    let a3 = SrqAttr {
        srq_limit: 3,
        ..srq.attr()
    };
    srq.modify(&a3, SrqAttrMask::LIMIT).unwrap();
    assert_eq!(srq.query().unwrap().srq_limit, 3);
    let send = |a: &mut Qp<'_, '_, &SimHal>| {
        let s = [sge(&mr, 0, 8)];
        a.post_send(&[send_wr(9, &s, SendOp::Send)]).unwrap();
    };
    send(&mut a);
    assert_eq!(events(&dev, limit), 0, "3 left: not below 3");
    send(&mut a);
    assert_eq!(events(&dev, limit), 1, "2 left");
    // ibv_query_srq: the limit reads 0 once the event fired ("no longer armed").
    assert_eq!(srq.query().unwrap().srq_limit, 0);
    send(&mut a);
    assert_eq!(events(&dev, limit), 0, "disarmed");
    let mut wc = [Wc::EMPTY; 8];
    assert_eq!(rcq.poll(&mut wc), 3);
    assert_eq!(
        wc[..3].iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [0, 1, 2]
    );

    // The QP to ERR: it announces its last WQE (IBV_EVENT_QP_LAST_WQE_REACHED).
    let qpn = b.qpn().raw();
    let mut err = QpAttr::default();
    err.qp_state = QpState::Err;
    b.modify(&err, QpAttrMask::STATE).unwrap();
    assert_eq!(
        events(&dev, |e| e == AsyncEvent::QpLastWqeReached { qpn }),
        1
    );
}

#[test]
fn bad_srq_arguments_are_refused_by_name() {
    let (hal, other) = (SimHal::synchronous(), SimHal::synchronous());
    let dev = up(&hal);
    let pd = dev.alloc_pd().unwrap();
    let caps = dev.info().caps;
    assert_eq!(
        pd.create_srq(&srq_attr(0, 1, 0)).err(),
        Some(Error::InvalidArgument {
            what: Invalid::ZeroEntries
        })
    );
    assert!(matches!(
        pd.create_srq(&srq_attr(caps.max_srq_wr + 1, 1, 0)).err(),
        Some(Error::ExceedsLimit {
            limit: Limit::QpWr,
            ..
        })
    ));
    assert!(matches!(
        pd.create_srq(&srq_attr(4, 1000, 0)).err(),
        Some(Error::ExceedsLimit {
            limit: Limit::Sge,
            ..
        })
    ));
    assert!(matches!(
        pd.create_srq(&srq_attr(4, 1, 5)).err(),
        Some(Error::ExceedsLimit {
            limit: Limit::QpWr,
            ..
        })
    ));
    // More SGEs than the SRQ takes: the first bad request is named, those before posted.
    let srq = pd.create_srq(&srq_attr(4, 1, 0)).unwrap();
    let mr = region(&pd, 4096, AccessFlags::LOCAL_WRITE);
    let one = [sge(&mr, 0, 8)];
    let many = vec![sge(&mr, 0, 8); srq.attr().max_sge as usize + 1];
    let e = srq
        .post_recv(&[
            RecvWr {
                wr_id: 1,
                sg_list: &one,
            },
            RecvWr {
                wr_id: 2,
                sg_list: &many,
            },
        ])
        .unwrap_err();
    assert_eq!(
        (e.index, e.error),
        (
            1,
            Error::InvalidArgument {
                what: Invalid::TooManySge
            }
        )
    );
    // An SRQ of another device is refused at QP creation.
    let dev2 = up(&other);
    let cq2 = dev2.create_cq(4).unwrap();
    let pd2 = dev2.alloc_pd().unwrap();
    let r = pd2.create_qp(&with(
        QpInitAttr::new(QpType::Rc, &cq2, &cq2, cap(8, 1, 0)),
        |a| a.srq = Some(&srq),
    ));
    assert!(matches!(
        r.err(),
        Some(Error::InvalidArgument {
            what: Invalid::ForeignObject
        })
    ));
}

/// Messages from a plain QP to a QP on each of `srqs`, interleaved, each received into a
/// receive of `wr_id` `base[i] + k`: the completions come back in order, each with its own
/// SRQ's `wr_id`.
fn exchange<'p, 'd, 'h>(
    pd: &'p Pd<'d, &'h SimHal>,
    mr: &Mr<'p, 'd, &'h SimHal>,
    srqs: [&Srq<'p, 'd, &'h SimHal>; 2],
    base: [u64; 2],
    (scq, rcq): (&mut Cq<'d, &'h SimHal>, &mut Cq<'d, &'h SimHal>),
) {
    let mut qps = Vec::new();
    for srq in srqs {
        let plain = QpInitAttr::new(QpType::Rc, &*scq, &*rcq, cap(8, 1, 0));
        let mut on = QpInitAttr::new(QpType::Rc, &*scq, &*rcq, cap(8, 1, 0));
        on.srq = Some(srq);
        let (mut a, mut b) = (pd.create_qp(&plain).unwrap(), pd.create_qp(&on).unwrap());
        connect_pair(&mut a, &mut b, AccessFlags::LOCAL_WRITE, Mtu::Mtu1024);
        qps.push((a, b));
    }
    let s = [sge(mr, 4096, 64)];
    for (i, srq) in srqs.iter().enumerate() {
        let wrs: Vec<_> = (0..3)
            .map(|k| RecvWr {
                wr_id: base[i] + k,
                sg_list: &s,
            })
            .collect();
        srq.post_recv(&wrs).unwrap();
    }
    let s = [sge(mr, 0, 64)];
    let order = [0usize, 1, 1, 0, 1, 0];
    for (k, &i) in order.iter().enumerate() {
        qps[i]
            .0
            .post_send(&[send_wr(k as u64, &s, SendOp::Send)])
            .unwrap();
    }
    let mut wc = [Wc::EMPTY; 8];
    assert_eq!(scq.poll(&mut wc), 6);
    assert_eq!(rcq.poll(&mut wc), 6);
    let mut next = [0u64; 2];
    for (k, &i) in order.iter().enumerate() {
        assert_eq!(wc[k].status, WcStatus::Success);
        let want = (base[i] + next[i], qps[i].1.qpn().raw());
        assert_eq!((wc[k].wr_id, wc[k].qp_num), want, "completion {k}");
        next[i] += 1;
    }
}

/// Receives of two SRQs complete into one CQ, interleaved: each completion carries the
/// `wr_id` of its own SRQ's receive, though the CQ keeps the slot of the SRQ it met last. An
/// SRQ destroyed and another made in its place (its slot reused) changes nothing.
#[test]
fn two_srqs_on_one_cq_hand_back_their_own_wr_ids() {
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    let pd = dev.alloc_pd().unwrap();
    let mut scq = dev.create_cq(32).unwrap();
    let mut rcq = dev.create_cq(32).unwrap();
    let mr = region(&pd, 8192, AccessFlags::LOCAL_WRITE);
    let one = pd.create_srq(&srq_attr(7, 1, 0)).unwrap();
    let two = pd.create_srq(&srq_attr(7, 1, 0)).unwrap();
    exchange(&pd, &mr, [&one, &two], [100, 200], (&mut scq, &mut rcq));
    one.destroy().map_err(|(e, _)| e).unwrap();
    let three = pd.create_srq(&srq_attr(7, 1, 0)).unwrap();
    exchange(&pd, &mr, [&three, &two], [300, 400], (&mut scq, &mut rcq));
}
