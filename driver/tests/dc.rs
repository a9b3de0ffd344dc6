//! DC transport through `Pd::create_qp_dv` (seed 004, `mlx5dv_create_qp` with
//! `MLX5DV_QP_INIT_ATTR_MASK_DC`): a DC initiator on one model HCA addressing DC targets on
//! another per request, the target's access key, its SRQ and CQ, its state rules, DCI
//! streams; checked against the data that lands.

use bareverbs::verbs::*;
use bareverbs::Invalid;
use bareverbs::{AsyncEvent, Config, Device, Error};
use bareverbs_model::SimHal;

mod common;
use common::{all_access, cap, poll_one, region, sge, two_hcas, with};

const KEY: u64 = 0x0123_4567_89ab_cdef;

/// Sends only: a DCI has no receive queue, a DCT takes its receives from an SRQ.
const CAP: QpCap = QpCap {
    max_recv_wr: 0,
    max_recv_sge: 0,
    ..cap(16, 2, 64)
};

fn dc(dc_type: DcType, key: u64) -> DvQpInitAttr {
    with(DvQpInitAttr::default(), |x| {
        x.comp_mask = DvQpInitAttrMask::DC;
        x.dc_init_attr.dc_type = dc_type;
        x.dc_init_attr.dct_access_key = key;
    })
}

/// A DCI brought to RTS on port 1 (rdma-core dcping's masks).
fn dci_to_rts<H: bareverbs_hal::Hal>(q: &mut Qp<'_, '_, H>, retry_cnt: u8) {
    let mut a = QpAttr::default();
    a.qp_state = QpState::Init;
    a.pkey_index = 0;
    a.port_num = 1;
    q.modify(
        &a,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT,
    )
    .unwrap();
    let mut a = QpAttr::default();
    a.qp_state = QpState::Rtr;
    a.path_mtu = Mtu::Mtu1024;
    a.ah_attr = AhAttr {
        port_num: 1,
        ..AhAttr::default()
    };
    q.modify(
        &a,
        QpAttrMask::STATE | QpAttrMask::PATH_MTU | QpAttrMask::AV,
    )
    .unwrap();
    let mut a = QpAttr::default();
    a.qp_state = QpState::Rts;
    a.timeout = 4;
    a.retry_cnt = retry_cnt;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    q.modify(
        &a,
        QpAttrMask::STATE
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::SQ_PSN
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    )
    .unwrap();
}

/// A DCT brought to RTR (Linux `mlx5_ib_modify_dct`'s masks) with `access`.
fn dct_to_rtr<H: bareverbs_hal::Hal>(t: &mut Dct<'_, '_, H>, access: AccessFlags) {
    let mut a = QpAttr::default();
    a.qp_state = QpState::Init;
    a.qp_access_flags = access;
    a.pkey_index = 0;
    a.port_num = 1;
    t.modify(
        &a,
        QpAttrMask::STATE | QpAttrMask::ACCESS_FLAGS | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT,
    )
    .unwrap();
    let mut a = QpAttr::default();
    a.qp_state = QpState::Rtr;
    a.min_rnr_timer = 1;
    a.path_mtu = Mtu::Mtu1024;
    a.ah_attr = AhAttr {
        port_num: 1,
        ..AhAttr::default()
    };
    t.modify(
        &a,
        QpAttrMask::STATE | QpAttrMask::MIN_RNR_TIMER | QpAttrMask::AV | QpAttrMask::PATH_MTU,
    )
    .unwrap();
}

/// The next completion of `cq`, waiting on the model's clock for retries to run out.
fn wait_one<H: bareverbs_hal::Hal>(hal: &SimHal, cq: &mut Cq<'_, H>) -> Wc {
    use bareverbs_hal::Hal as _;
    let mut wc = [Wc::EMPTY; 1];
    for _ in 0..200 {
        if cq.poll(&mut wc) == 1 {
            return wc[0];
        }
        hal.delay(std::time::Duration::from_micros(100));
    }
    panic!("no completion");
}

fn dci_attr(streams: Option<DciStreams>) -> DvQpInitAttr {
    let mut a = dc(DcType::Dci, 0);
    if let Some(s) = streams {
        a.comp_mask |= DvQpInitAttrMask::DCI_STREAMS;
        a.dc_init_attr.dci_streams = s;
    }
    a
}

/// Two HCAs on one fabric; on HCA 1 a DCI (`$streams`, RTS, `$retry` transport retries) with
/// its CQ `$scq` and region `$src`; on HCA 2 an SRQ `$srq` (8 receives), a CQ `$rcq`, a DCT
/// `$dct` at RTR with key `KEY` and every remote right, and region `$dst`; `$to` addresses
/// the DCT through an AH to LID 17.
macro_rules! dc_pair {
    ($streams:expr, $retry:expr => $h1:ident, $d1:ident, $d2:ident, $p1:ident, $p2:ident, $scq:ident,
     $dci:ident, $rcq:ident, $srq:ident, $dct:ident, $src:ident, $dst:ident, $to:ident) => {
        let ($h1, h2) = two_hcas();
        let $d1 = Device::bring_up(&$h1, Config::default()).unwrap();
        let $d2 = Device::bring_up(&h2, Config::default()).unwrap();
        let $p1 = $d1.alloc_pd().unwrap();
        #[allow(unused_mut)]
        let mut $scq = $d1.create_cq(64).unwrap();
        let mut $dci = $p1
            .create_qp_dv(
                &QpInitAttr::new(QpType::Driver, &$scq, &$scq, CAP),
                &dci_attr($streams),
            )
            .unwrap()
            .into_qp()
            .unwrap();
        dci_to_rts(&mut $dci, $retry);
        let $p2 = $d2.alloc_pd().unwrap();
        #[allow(unused_mut)]
        let mut $rcq = $d2.create_cq(64).unwrap();
        let $srq = common::srq(&$p2, 8, 1);
        #[allow(unused_mut)]
        let mut $dct = $p2
            .create_qp_dv(
                &with(QpInitAttr::new(QpType::Driver, &$rcq, &$rcq, CAP), |a| {
                    a.srq = Some(&$srq)
                }),
                &dc(DcType::Dct, KEY),
            )
            .unwrap()
            .into_dct()
            .unwrap();
        dct_to_rtr(&mut $dct, all_access());
        let $src = region(&$p1, 4096, all_access());
        let $dst = region(&$p2, 4096, all_access());
        let ah = $p1
            .create_ah(AhAttr {
                dlid: 17,
                port_num: 1,
                ..AhAttr::default()
            })
            .unwrap();
        let $to = ah.dc_dest($dct.dctn().unwrap().raw(), KEY).unwrap();
    };
}

#[test]
fn a_dci_sends_writes_reads_and_runs_atomics_at_a_dct_on_another_hca() {
    dc_pair!(None, 3 => h1, d1, d2, p1, p2, scq, dci, rcq, srq, dct, src, dst, to);
    assert!(d1.info().caps.dc && d2.info().caps.dc);
    assert_eq!(dci.qp_type(), QpType::Driver);
    assert_eq!(srq.qp_users(), 1);
    let dctn = dct.dctn().unwrap().raw();
    let st = dct.query().unwrap();
    assert_eq!((st.state, st.key_violations, st.access_key), (0, 0, KEY));
    for (i, b) in (0..64u8).enumerate() {
        src.buf().write8(i, b ^ 0x5a);
    }
    srq.post_recv(&[RecvWr {
        wr_id: 0x77,
        sg_list: &[sge(&dst, 0, 256)],
    }])
    .unwrap();
    dst.buf().write_bytes(1024, &37u64.to_ne_bytes()).unwrap();
    dst.buf().write64(2048, 40);
    let signaled = SendFlags::SIGNALED;
    dci.send_batch_dc(|b| {
        b.set_dc_addr(&to);
        b.send(1, signaled, &[sge(&src, 0, 64)]).unwrap();
        b.rdma_write(
            2,
            signaled,
            dst.addr() + 512,
            dst.rkey().raw(),
            &[sge(&src, 0, 32)],
        )
        .unwrap();
        b.rdma_read(
            3,
            signaled,
            dst.addr() + 2048,
            dst.rkey().raw(),
            &[sge(&src, 128, 8)],
        )
        .unwrap();
        b.post(&SendWr {
            wr_id: 4,
            sg_list: &[sge(&src, 256, 8)],
            inline_data: &[],
            op: SendOp::AtomicFetchAndAdd {
                remote_addr: dst.addr() + 1024,
                rkey: dst.rkey().raw(),
                add: 5,
            },
            flags: signaled,
            ud: None,
        })
        .unwrap();
        b.rdma_write_inline(
            5,
            signaled,
            dst.addr() + 3000,
            dst.rkey().raw(),
            b"inline over DC",
        )
        .unwrap();
    })
    .unwrap();
    for want in 1..=5u64 {
        let wc = poll_one(&mut scq);
        assert_eq!((wc.wr_id, wc.status), (want, WcStatus::Success), "{wc:?}");
    }
    let wc = poll_one(&mut rcq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (0x77, WcStatus::Success, 64)
    );
    assert_eq!(wc.qp_num, dctn, "the receive completes on the DCT");
    assert_eq!(wc.src_qp, dci.qpn().raw(), "from the DCI");
    for i in 0..64 {
        assert_eq!(dst.buf().read8(i), (i as u8) ^ 0x5a);
    }
    for i in 0..32 {
        assert_eq!(dst.buf().read8(512 + i), (i as u8) ^ 0x5a);
    }
    let mut got = [0u8; 14];
    dst.buf().read_bytes(3000, &mut got).unwrap();
    assert_eq!(&got, b"inline over DC");
    assert_eq!(src.buf().read64(128), 40, "READ brought the target's bytes");
    // Atomic operands sit in host byte order (the driver asks for host-endian atomics).
    assert_eq!(
        src.buf().read_ne64(256),
        37,
        "fetch-and-add returned the old value"
    );
    assert_eq!(dst.buf().read_ne64(1024), 42);
    drop(dct);
    assert_eq!(srq.qp_users(), 0, "the DCT let go of its SRQ");
}

#[test]
fn one_dci_reaches_two_dcts_request_by_request() {
    dc_pair!(None, 3 => h1, d1, d2, p1, p2, scq, dci, rcq, srq, dct, src, dst, to);
    // A second DCT on the same HCA with another key and its own SRQ and CQ.
    let mut rcq2 = d2.create_cq(8).unwrap();
    let srq2 = common::srq(&p2, 4, 1);
    let mut dct2 = p2
        .create_qp_dv(
            &with(QpInitAttr::new(QpType::Driver, &rcq2, &rcq2, CAP), |a| {
                a.srq = Some(&srq2)
            }),
            &dc(DcType::Dct, 99),
        )
        .unwrap()
        .into_dct()
        .unwrap();
    dct_to_rtr(&mut dct2, all_access());
    let to2 = p1
        .create_ah(AhAttr {
            dlid: 17,
            port_num: 1,
            ..AhAttr::default()
        })
        .unwrap()
        .dc_dest(dct2.dctn().unwrap().raw(), 99)
        .unwrap();
    for (s, off) in [(&srq, 0u64), (&srq2, 1024)] {
        s.post_recv(&[RecvWr {
            wr_id: off,
            sg_list: &[sge(&dst, off, 64)],
        }])
        .unwrap();
    }
    dci.send_batch_dc(|b| {
        b.set_dc_addr(&to);
        b.send_inline(1, SendFlags::SIGNALED, b"to the first")
            .unwrap();
        b.set_dc_addr(&to2);
        b.send_inline(2, SendFlags::SIGNALED, b"to the second")
            .unwrap();
    })
    .unwrap();
    assert_eq!(poll_one(&mut scq).status, WcStatus::Success);
    assert_eq!(poll_one(&mut scq).status, WcStatus::Success);
    let (a, b) = (poll_one(&mut rcq), poll_one(&mut rcq2));
    assert_eq!(
        (a.wr_id, a.byte_len, a.qp_num),
        (0, 12, dct.dctn().unwrap().raw())
    );
    assert_eq!(
        (b.wr_id, b.byte_len, b.qp_num),
        (1024, 13, dct2.dctn().unwrap().raw())
    );
    let mut got = [0u8; 13];
    dst.buf().read_bytes(1024, &mut got).unwrap();
    assert_eq!(&got, b"to the second");
    let _ = (&d1, &src);
}

#[test]
fn a_wrong_access_key_is_dropped_counted_reported_once_and_fails_the_dci() {
    dc_pair!(None, 2 => h1, d1, d2, p1, p2, scq, dci, rcq, srq, dct, src, dst, to);
    dct.arm_key_violation().unwrap();
    srq.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &[sge(&dst, 0, 64)],
    }])
    .unwrap();
    let bad = p1
        .create_ah(to.ah())
        .unwrap()
        .dc_dest(to.dctn(), KEY ^ 1)
        .unwrap();
    dci.send_batch_dc(|b| {
        b.set_dc_addr(&bad);
        b.send(7, SendFlags::SIGNALED, &[sge(&src, 0, 8)]).unwrap();
        b.send(8, SendFlags::SIGNALED, &[sge(&src, 0, 8)]).unwrap();
    })
    .unwrap();
    // No answer comes: the transport retries run out (ack timeout 4: 65 µs each).
    let wc = wait_one(&h1, &mut scq);
    assert_eq!((wc.wr_id, wc.status), (7, WcStatus::RetryExcErr), "{wc:?}");
    // Without DCI streams, the DCI is one stream: its error is the QP's.
    let wc = wait_one(&h1, &mut scq);
    assert_eq!((wc.wr_id, wc.status), (8, WcStatus::WrFlushErr), "{wc:?}");
    assert_eq!(dci.query().unwrap().qp_state, QpState::Err);
    // Three attempts (the first and two retries), each counted; one event for the armed DCT.
    let st = dct.query().unwrap();
    assert_eq!(st.key_violations, 3);
    d2.poll_events();
    let dctn = dct.dctn().unwrap().raw();
    let events: Vec<_> = std::iter::from_fn(|| d2.next_event()).collect();
    assert_eq!(events, vec![AsyncEvent::DctKeyViolation { dctn }]);
    // Nothing was delivered.
    let mut none = [Wc::EMPTY; 1];
    assert_eq!(rcq.poll(&mut none), 0);
    let _ = &d1;
}

#[test]
fn an_error_in_one_dci_stream_flushes_that_stream_only_until_it_is_reset() {
    let streams = DciStreams {
        log_num_concurent: 2,
        log_num_errored: 1,
    };
    dc_pair!(Some(streams), 1 => h1, d1, d2, p1, p2, scq, dci, rcq, srq, dct, src, dst, to);
    let bad = p1
        .create_ah(to.ah())
        .unwrap()
        .dc_dest(to.dctn(), 0xbad)
        .unwrap();
    let key = dst.rkey().raw();
    let w = |b: &mut SendBatch<'_, false, true>, id: u64, off: u64| {
        b.rdma_write(
            id,
            SendFlags::SIGNALED,
            dst.addr() + off,
            key,
            &[sge(&src, 0, 8)],
        )
        .unwrap()
    };
    src.buf().write64(0, 0x1122_3344_5566_7788);
    dci.send_batch_dc(|b| {
        // Stream 1 fails (wrong key); its next request is flushed; stream 0 goes on.
        b.set_dc_addr_stream(&bad, 1).unwrap();
        w(b, 1, 0);
        b.set_dc_addr_stream(&to, 1).unwrap();
        w(b, 2, 8);
        b.set_dc_addr_stream(&to, 0).unwrap();
        w(b, 3, 16);
        assert_eq!(
            b.set_dc_addr_stream(&to, 4),
            Err(Error::InvalidArgument {
                what: Invalid::DciStream
            }),
            "four streams: 0 to 3"
        );
    })
    .unwrap();
    let got: Vec<_> = (0..3)
        .map(|_| wait_one(&h1, &mut scq))
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::RetryExcErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::Success)
        ]
    );
    assert_eq!(
        dci.query().unwrap().qp_state,
        QpState::Rts,
        "one errored stream of two"
    );
    assert_eq!(dst.buf().read64(8), 0, "the flushed write did not run");
    assert_eq!(dst.buf().read64(16), 0x1122_3344_5566_7788);
    // Reset: stream 1 runs again.
    dci.dci_stream_id_reset(1).unwrap();
    dci.send_batch_dc(|b| {
        b.set_dc_addr_stream(&to, 1).unwrap();
        w(b, 4, 8);
    })
    .unwrap();
    assert_eq!(wait_one(&h1, &mut scq).status, WcStatus::Success);
    assert_eq!(dst.buf().read64(8), 0x1122_3344_5566_7788);
    assert_eq!(
        dci.dci_stream_id_reset(4),
        Err(Error::InvalidArgument {
            what: Invalid::DciStream
        })
    );
    // A second stream in error reaches the limit (2^1): the DCI goes to ERR.
    dci.send_batch_dc(|b| {
        b.set_dc_addr_stream(&bad, 2).unwrap();
        w(b, 5, 0);
        b.set_dc_addr_stream(&bad, 3).unwrap();
        w(b, 6, 0);
        b.set_dc_addr_stream(&to, 0).unwrap();
        w(b, 7, 24);
    })
    .unwrap();
    let got: Vec<_> = (0..3)
        .map(|_| wait_one(&h1, &mut scq))
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        got,
        vec![
            (5, WcStatus::RetryExcErr),
            (6, WcStatus::RetryExcErr),
            (7, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(dci.query().unwrap().qp_state, QpState::Err);
    let _ = (&d1, &d2, &rcq, &srq, &dct);
}

#[test]
fn a_dct_takes_only_linux_transitions_and_masks() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8).unwrap();
    let srq = common::srq(&pd, 4, 1);
    let mut attr = QpInitAttr::new(QpType::Driver, &cq, &cq, CAP);
    attr.srq = Some(&srq);
    let mut dct = pd
        .create_qp_dv(&attr, &dc(DcType::Dct, 5))
        .unwrap()
        .into_dct()
        .unwrap();
    let bad = Err(Error::InvalidArgument {
        what: Invalid::DctTransition,
    });
    assert_eq!(
        dct.query().err(),
        Some(Error::NotUp),
        "nothing on the device yet"
    );
    assert_eq!(dct.arm_key_violation(), Err(Error::NotUp));
    let mut init = QpAttr::default();
    init.qp_state = QpState::Init;
    init.qp_access_flags = AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE;
    init.port_num = 1;
    let m = QpAttrMask::STATE | QpAttrMask::ACCESS_FLAGS | QpAttrMask::PKEY_INDEX;
    assert_eq!(dct.modify(&init, m), bad, "PORT missing");
    assert_eq!(
        dct.modify(&init, m | QpAttrMask::PORT | QpAttrMask::QKEY),
        bad,
        "QKEY extra"
    );
    let mut rtr = QpAttr::default();
    rtr.qp_state = QpState::Rtr;
    rtr.path_mtu = Mtu::Mtu2048;
    rtr.ah_attr = AhAttr {
        port_num: 1,
        ..AhAttr::default()
    };
    let rm = QpAttrMask::STATE | QpAttrMask::MIN_RNR_TIMER | QpAttrMask::AV | QpAttrMask::PATH_MTU;
    assert_eq!(dct.modify(&rtr, rm), bad, "RESET -> RTR");
    assert_eq!(
        dct.modify(&with(init, |a| a.port_num = 9), m | QpAttrMask::PORT),
        Err(Error::InvalidArgument {
            what: Invalid::Port
        })
    );
    dct.modify(&init, m | QpAttrMask::PORT).unwrap();
    assert_eq!(dct.state(), QpState::Init);
    assert_eq!(dct.dctn(), None);
    dct.modify(&rtr, rm).unwrap();
    assert_eq!(dct.state(), QpState::Rtr);
    let mut rts = QpAttr::default();
    rts.qp_state = QpState::Rts;
    assert_eq!(
        dct.modify(&rts, QpAttrMask::STATE),
        bad,
        "a DCT does not send"
    );
    assert_eq!(dct.query().unwrap().access_key, 5);
    // Its CQ is in use while it lives, its SRQ too.
    assert_eq!(srq.qp_users(), 1);
    dct.destroy().map_err(|(e, _)| e).unwrap();
    assert_eq!(srq.qp_users(), 0);
    cq.destroy().map_err(|(e, _)| e).unwrap();
    // A destroyed DCT's DCT_DRAINED event was taken by the destroy, not left to the user.
    dev.poll_events();
    assert!(std::iter::from_fn(|| dev.next_event())
        .all(|e| !matches!(e, AsyncEvent::DctDrained { .. })));
}

#[test]
fn dci_requests_need_the_dc_batch_and_a_destination() {
    dc_pair!(None, 3 => h1, d1, d2, p1, p2, scq, dci, rcq, srq, dct, src, dst, to);
    let dest = Err(Error::InvalidArgument {
        what: Invalid::DcDestination,
    });
    assert_eq!(
        dci.send_batch(|_| ()),
        dest,
        "a DCI's requests name their DCT"
    );
    let wr = common::send_wr(1, &[], SendOp::Send);
    assert_eq!(
        dci.post_send(&[wr]).map_err(|e| e.error),
        Err(Error::InvalidArgument {
            what: Invalid::DcDestination
        })
    );
    dci.send_batch_dc(|b| {
        assert_eq!(
            b.send_inline(1, SendFlags::SIGNALED, b"x"),
            dest,
            "no set_dc_addr yet"
        );
        b.set_dc_addr(&to);
        let ud = p1.create_ah(to.ah()).unwrap().dest(to.dctn(), 0).unwrap();
        assert_eq!(
            b.post(&SendWr {
                ud: Some(ud),
                ..common::send_wr(2, &[], SendOp::Send)
            }),
            Err(Error::InvalidArgument {
                what: Invalid::Destination
            }),
            "a UD destination on a DCI"
        );
    })
    .unwrap();
    // An RC QP has no DC batch; a DCI no stream reset without streams.
    let mut rc = p1
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &scq, CAP))
        .unwrap();
    assert_eq!(rc.send_batch_dc(|_| ()), dest);
    assert!(matches!(
        dci.dci_stream_id_reset(0),
        Err(Error::DvRefused {
            feature: DvFeature::DciStreams,
            ..
        })
    ));
    assert!(matches!(
        p1.create_ah(to.ah()).unwrap().dc_dest(1 << 24, 0),
        Err(Error::InvalidArgument {
            what: Invalid::DestQpn
        })
    ));
    let _ = (&d1, &d2, &rcq, &srq, &dct, &src, &dst);
}

#[test]
fn a_dci_reads_a_small_result_through_its_cqe() {
    dc_pair!(None, 3 => h1, d1, d2, p1, p2, scq, dci, rcq, srq, dct, src, dst, to);
    // A second DCI that asks for requester scatter to CQE without signaling everything.
    let mut attr = dci_attr(None);
    attr.comp_mask |= DvQpInitAttrMask::QP_CREATE_FLAGS;
    attr.create_flags = DvQpCreateFlags::ALLOW_SCATTER_TO_CQE;
    let mut dci2 = p1
        .create_qp_dv(&QpInitAttr::new(QpType::Driver, &scq, &scq, CAP), &attr)
        .unwrap()
        .into_qp()
        .unwrap();
    dci_to_rts(&mut dci2, 3);
    dst.buf().write_bytes(100, b"sixteen bytes!!!").unwrap();
    let before = h1.model().with(|h| h.scattered_to_cqe());
    dci2.send_batch_dc(|b| {
        b.set_dc_addr(&to);
        b.rdma_read(
            1,
            SendFlags::SIGNALED,
            dst.addr() + 100,
            dst.rkey().raw(),
            &[sge(&src, 200, 10), sge(&src, 300, 6)],
        )
        .unwrap();
    })
    .unwrap();
    let wc = poll_one(&mut scq);
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 16));
    assert_eq!(h1.model().with(|h| h.scattered_to_cqe()) - before, 1);
    let mut got = [0u8; 16];
    src.buf().read_bytes(200, &mut got[..10]).unwrap();
    src.buf().read_bytes(300, &mut got[10..]).unwrap();
    assert_eq!(&got, b"sixteen bytes!!!");
    let _ = (&d1, &d2, &rcq, &srq, &dct, &dci);
}
