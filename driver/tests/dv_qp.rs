//! `Pd::create_qp_dv` (seed 004) beyond DC: every `comp_mask` bit and create flag either
//! carried out or refused by name, and scatter to CQE — small messages and READ/atomic
//! results the device puts inside the completion, copied by the poll into the buffers —
//! around its 32-byte threshold, against the model.

use bareverbs::verbs::*;
use bareverbs::Invalid;
use bareverbs::{Config, Device, Error};
use bareverbs_model::SimHal;

mod common;
use common::{all_access, cap, connect_pair, poll_one, region, sge, with};

fn flags(f: DvQpCreateFlags) -> DvQpInitAttr {
    with(DvQpInitAttr::default(), |a| {
        a.comp_mask = DvQpInitAttrMask::QP_CREATE_FLAGS;
        a.create_flags = f;
    })
}

fn scattered(hal: &SimHal) -> u64 {
    hal.model().with(|h| h.scattered_to_cqe())
}

/// What `create_qp_dv` said: `Ok` or the refused feature and the kind of refusal.
#[derive(Debug, PartialEq)]
enum Said {
    Made,
    Refused(DvFeature, &'static str),
    Invalid(Invalid),
}

fn said<T>(r: Result<T, Error>) -> Said {
    match r {
        Ok(_) => Said::Made,
        Err(Error::DvRefused { feature, why }) => Said::Refused(
            feature,
            match why {
                DvRefusal::Unknown => "unknown",
                DvRefusal::NoDeviceCap { .. } => "cap",
                DvRefusal::QpType { .. } => "type",
                DvRefusal::Conflicts { .. } => "conflict",
                DvRefusal::ExceedsCap { .. } => "exceeds",
                DvRefusal::NotInDriver { .. } => "driver",
                _ => "other",
            },
        ),
        Err(Error::InvalidArgument { what }) => Said::Invalid(what),
        Err(e) => panic!("unexpected {e}"),
    }
}

#[test]
fn every_mask_bit_and_flag_is_carried_out_or_refused_by_name() {
    use DvFeature as F;
    use DvQpCreateFlags as C;
    let cfg = bareverbs_model::ModelConfig {
        qp_packet_based: true,
        ..bareverbs_model::ModelConfig::default()
    };
    let hal = SimHal::new(cfg, bareverbs_model::Drive::Synchronous);
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let srq = common::srq(&pd, 4, 1);
    let dci = |streams: Option<DciStreams>| {
        let mut a = with(DvQpInitAttr::default(), |x| {
            x.comp_mask = DvQpInitAttrMask::DC;
            x.dc_init_attr.dc_type = DcType::Dci;
        });
        if let Some(s) = streams {
            a.comp_mask |= DvQpInitAttrMask::DCI_STREAMS;
            a.dc_init_attr.dci_streams = s;
        }
        a
    };
    let mut dct = DvQpInitAttr::default();
    dct.comp_mask = DvQpInitAttrMask::DC;
    dct.dc_init_attr.dc_type = DcType::Dct;
    dct.dc_init_attr.dct_access_key = 1;
    let ops = |o: DvSendOpsFlags| {
        with(DvQpInitAttr::default(), |a| {
            a.comp_mask = DvQpInitAttrMask::SEND_OPS_FLAGS;
            a.send_ops_flags = o;
        })
    };
    let raw = "RAW_PACKET";
    let _ = raw;
    let cases: Vec<(QpType, bool, DvQpInitAttr, Said)> = vec![
        (QpType::Rc, false, DvQpInitAttr::default(), Said::Made),
        (
            QpType::Rc,
            false,
            with(DvQpInitAttr::default(), |a| {
                a.comp_mask = DvQpInitAttrMask::from_bits_retain(1 << 9)
            }),
            Said::Refused(F::UnknownCompMask(1 << 9), "unknown"),
        ),
        (
            QpType::Rc,
            false,
            flags(C::from_bits_retain(1 << 12)),
            Said::Refused(F::UnknownCreateFlags(1 << 12), "unknown"),
        ),
        // Raw packet only (Linux process_vendor_flags).
        (
            QpType::Rc,
            false,
            flags(C::TUNNEL_OFFLOADS),
            Said::Refused(F::TunnelOffloads, "type"),
        ),
        (
            QpType::Ud,
            false,
            flags(C::TIR_ALLOW_SELF_LOOPBACK_UC),
            Said::Refused(F::TirAllowSelfLoopbackUc, "type"),
        ),
        (
            QpType::Ud,
            false,
            flags(C::TIR_ALLOW_SELF_LOOPBACK_MC),
            Said::Refused(F::TirAllowSelfLoopbackMc, "type"),
        ),
        (
            QpType::Rc,
            false,
            flags(C::DISABLE_SCATTER_TO_CQE),
            Said::Made,
        ),
        (
            QpType::Ud,
            false,
            flags(C::DISABLE_SCATTER_TO_CQE),
            Said::Made,
        ),
        (
            QpType::Rc,
            false,
            flags(C::ALLOW_SCATTER_TO_CQE),
            Said::Made,
        ),
        (
            QpType::Rc,
            false,
            flags(C::ALLOW_SCATTER_TO_CQE | C::DISABLE_SCATTER_TO_CQE),
            Said::Refused(F::DisableScatterToCqe, "conflict"),
        ),
        (
            QpType::Uc,
            false,
            flags(C::ALLOW_SCATTER_TO_CQE),
            Said::Refused(F::AllowScatterToCqe, "type"),
        ),
        (
            QpType::Rc,
            false,
            flags(C::PACKET_BASED_CREDIT_MODE),
            Said::Made,
        ),
        (
            QpType::Uc,
            false,
            flags(C::PACKET_BASED_CREDIT_MODE),
            Said::Refused(F::PacketBasedCreditMode, "type"),
        ),
        (
            QpType::Rc,
            false,
            flags(C::SIG_PIPELINING),
            Said::Refused(F::SigPipelining, "driver"),
        ),
        // DC needs the driver type, and the driver type needs DC.
        (QpType::Rc, false, dci(None), Said::Refused(F::Dc, "type")),
        (
            QpType::Driver,
            false,
            DvQpInitAttr::default(),
            Said::Invalid(Invalid::UnsupportedQpType),
        ),
        (QpType::Driver, false, dci(None), Said::Made),
        (
            QpType::Driver,
            true,
            dci(None),
            Said::Invalid(Invalid::NoReceiveQueue),
        ),
        (
            QpType::Driver,
            false,
            dci(Some(DciStreams {
                log_num_concurent: 4,
                log_num_errored: 2,
            })),
            Said::Made,
        ),
        (
            QpType::Driver,
            false,
            dci(Some(DciStreams {
                log_num_concurent: 5,
                log_num_errored: 0,
            })),
            Said::Refused(F::DciStreams, "exceeds"),
        ),
        (
            QpType::Driver,
            false,
            dci(Some(DciStreams {
                log_num_concurent: 1,
                log_num_errored: 3,
            })),
            Said::Refused(F::DciStreams, "exceeds"),
        ),
        (QpType::Driver, true, dct, Said::Made),
        (
            QpType::Driver,
            false,
            dct,
            Said::Invalid(Invalid::DctWithoutSrq),
        ),
        (
            QpType::Driver,
            true,
            with(dct, |a| {
                a.comp_mask = DvQpInitAttrMask::DC | DvQpInitAttrMask::DCI_STREAMS
            }),
            Said::Refused(F::DciStreams, "type"),
        ),
        (
            QpType::Driver,
            true,
            with(dct, |a| {
                a.comp_mask = DvQpInitAttrMask::DC | DvQpInitAttrMask::SEND_OPS_FLAGS
            }),
            Said::Refused(F::SendOpsFlags, "type"),
        ),
        (
            QpType::Driver,
            true,
            with(dct, |a| {
                a.comp_mask = DvQpInitAttrMask::DC | DvQpInitAttrMask::QP_CREATE_FLAGS;
                a.create_flags = C::ALLOW_SCATTER_TO_CQE;
            }),
            Said::Refused(F::AllowScatterToCqe, "type"),
        ),
        (
            QpType::Rc,
            false,
            ops(DvSendOpsFlags::from_bits_retain(1 << 7)),
            Said::Refused(F::UnknownSendOps(1 << 7), "unknown"),
        ),
        (QpType::Rc, false, ops(DvSendOpsFlags::empty()), Said::Made),
        (QpType::Rc, false, ops(DvSendOpsFlags::MR_LIST), Said::Made),
        (
            QpType::Rc,
            false,
            ops(DvSendOpsFlags::MR_INTERLEAVED),
            Said::Made,
        ),
        (
            QpType::Rc,
            false,
            ops(DvSendOpsFlags::MKEY_CONFIGURE),
            Said::Made,
        ),
        (
            QpType::Ud,
            false,
            ops(DvSendOpsFlags::MR_LIST),
            Said::Refused(F::MrList, "type"),
        ),
        (
            QpType::Driver,
            false,
            with(dci(None), |a| {
                a.comp_mask = DvQpInitAttrMask::DC | DvQpInitAttrMask::SEND_OPS_FLAGS;
                a.send_ops_flags = DvSendOpsFlags::MKEY_CONFIGURE;
            }),
            Said::Refused(F::MkeyConfigure, "type"),
        ),
    ];
    for (k, (t, with_srq, dv, want)) in cases.into_iter().enumerate() {
        let mut attr = QpInitAttr::new(t, &cq, &cq, cap(16, 2, 64));
        attr.srq = with_srq.then_some(&srq);
        let got = said(pd.create_qp_dv(&attr, &dv));
        assert_eq!(got, want, "case {k}: {t:?} {dv:?}");
    }
    // Refusals send nothing: the model saw no CREATE_QP fail.
    assert!(hal
        .model()
        .trace()
        .iter()
        .all(|t| t.status == bareverbs_firmware_cmd::CmdStatus::Ok));
}

#[test]
fn without_the_device_caps_dc_streams_and_packet_credits_are_refused_by_cap_name() {
    let cfg = bareverbs_model::ModelConfig {
        dc: false,
        ..bareverbs_model::ModelConfig::default()
    };
    let hal = SimHal::new(cfg, bareverbs_model::Drive::Synchronous);
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    assert!(!dev.info().caps.dc);
    assert!(!dev.info().caps.qp_packet_based);
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let mut dci = DvQpInitAttr::default();
    dci.comp_mask = DvQpInitAttrMask::DC;
    dci.dc_init_attr.dc_type = DcType::Dci;
    let r = pd.create_qp_dv(
        &QpInitAttr::new(QpType::Driver, &cq, &cq, cap(16, 2, 64)),
        &dci,
    );
    assert!(matches!(
        r,
        Err(Error::DvRefused {
            feature: DvFeature::Dc,
            why: DvRefusal::NoDeviceCap { cap: "dct" }
        })
    ));
    let r = pd.create_qp_dv(
        &QpInitAttr::new(QpType::Rc, &cq, &cq, cap(16, 2, 64)),
        &flags(DvQpCreateFlags::PACKET_BASED_CREDIT_MODE),
    );
    assert!(matches!(
        r,
        Err(Error::DvRefused {
            feature: DvFeature::PacketBasedCreditMode,
            why: DvRefusal::NoDeviceCap {
                cap: "qp_packet_based"
            }
        })
    ));
}

#[test]
fn packet_based_credits_reach_the_qp_context() {
    let cfg = bareverbs_model::ModelConfig {
        qp_packet_based: true,
        ..bareverbs_model::ModelConfig::default()
    };
    let hal = SimHal::new(cfg, bareverbs_model::Drive::Synchronous);
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let qp = pd
        .create_qp_dv(
            &QpInitAttr::new(QpType::Rc, &cq, &cq, cap(16, 2, 64)),
            &flags(DvQpCreateFlags::PACKET_BASED_CREDIT_MODE),
        )
        .unwrap()
        .into_qp()
        .unwrap();
    let plain = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq, cap(16, 2, 64)))
        .unwrap();
    let mode = |qpn: u32| hal.model().with(|h| h.qp_e2e_credit_mode(qpn));
    assert_eq!(mode(qp.qpn().raw()), Some(1));
    assert_eq!(mode(plain.qpn().raw()), Some(0));
}

/// The send and the receive completion of one message, in either order.
fn send_and_recv<H: bareverbs_hal::Hal>(cq: &mut Cq<'_, H>) -> (Wc, Wc) {
    let (x, y) = (poll_one(cq), poll_one(cq));
    if x.opcode == WcOpcode::Recv {
        (y, x)
    } else {
        (x, y)
    }
}

/// An RC pair on one HCA made with `create_qp_dv(dv)`, `sig_all` on the requester side.
macro_rules! rc_dv_pair {
    ($dv:expr, $sig_all:expr => $hal:ident, $pd:ident, $cq:ident, $a:ident, $b:ident, $mr:ident) => {
        let $hal = SimHal::synchronous();
        let dev = Device::bring_up(&$hal, Config::default()).unwrap();
        let $pd = dev.alloc_pd().unwrap();
        let mut $cq = dev.create_cq(64).unwrap();
        let make = |sig_all| {
            $pd.create_qp_dv(
                &with(
                    QpInitAttr::new(QpType::Rc, &$cq, &$cq, cap(16, 2, 64)),
                    |a| a.sq_sig_all = sig_all,
                ),
                &$dv,
            )
            .unwrap()
            .into_qp()
            .unwrap()
        };
        let (mut $a, mut $b) = (make($sig_all), make(false));
        connect_pair(&mut $a, &mut $b, all_access(), Mtu::Mtu1024);
        let $mr = region(&$pd, 8192, all_access());
    };
}

#[test]
fn small_sends_land_in_the_cqe_and_the_poll_puts_them_in_the_buffers() {
    rc_dv_pair!(DvQpInitAttr::default(), false => hal, pd, cq, a, b, mr);
    for len in [1usize, 20, 31, 32, 33, 64] {
        let before = scattered(&hal);
        for i in 0..len {
            mr.buf().write8(i, (i as u8).wrapping_mul(7) ^ len as u8);
        }
        mr.buf().fill(4096, 256, 0xee).unwrap();
        // Two entries: 20 bytes, then the rest.
        b.post_recv(&[RecvWr {
            wr_id: len as u64,
            sg_list: &[sge(&mr, 4096, 20), sge(&mr, 4096 + 100, 100)],
        }])
        .unwrap();
        a.post_send(&[common::send_wr(1, &[sge(&mr, 0, len as u32)], SendOp::Send)])
            .unwrap();
        let (s, r) = send_and_recv(&mut cq);
        assert_eq!(s.status, WcStatus::Success);
        assert_eq!(
            (r.wr_id, r.status, r.byte_len),
            (len as u64, WcStatus::Success, len as u32)
        );
        let inside = u64::from(len <= 32);
        assert_eq!(scattered(&hal) - before, inside, "{len} bytes in the CQE");
        for i in 0..len {
            let at = if i < 20 {
                4096 + i
            } else {
                4096 + 100 + i - 20
            };
            assert_eq!(
                mr.buf().read8(at),
                (i as u8).wrapping_mul(7) ^ len as u8,
                "{len}: {i}"
            );
        }
        // Nothing past the message was written.
        let end = if len < 20 {
            4096 + len
        } else {
            4096 + 100 + len - 20
        };
        assert_eq!(mr.buf().read8(end), 0xee, "{len}");
        if len <= 32 {
            assert_eq!(r.src_qp, 0, "the data took the source QP's bytes");
        }
    }
    // A list too short for the message: the poll reports a local length error, the QP goes on.
    b.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: &[sge(&mr, 4096, 8)],
    }])
    .unwrap();
    a.post_send(&[common::send_wr(2, &[sge(&mr, 0, 24)], SendOp::Send)])
        .unwrap();
    let (s, r) = send_and_recv(&mut cq);
    assert_eq!(s.status, WcStatus::Success);
    assert_eq!((r.wr_id, r.status), (9, WcStatus::LocLenErr));
    assert_eq!(b.query().unwrap().qp_state, QpState::Rts);
    let _ = &pd;
}

#[test]
fn with_every_request_signaled_small_read_and_atomic_results_come_in_the_cqe() {
    rc_dv_pair!(DvQpInitAttr::default(), true => hal, pd, cq, a, b, mr);
    for (k, v) in (0..64u64).enumerate() {
        mr.buf().write8(2048 + k, v as u8 ^ 0x3c);
    }
    mr.buf().write_bytes(3072, &100u64.to_ne_bytes()).unwrap();
    for len in [8u32, 32, 33] {
        let before = scattered(&hal);
        mr.buf().fill(0, 64, 0).unwrap();
        a.post_send(&[common::send_wr(
            u64::from(len),
            &[sge(&mr, 0, 4), sge(&mr, 16, len - 4)],
            SendOp::RdmaRead {
                remote_addr: mr.addr() + 2048,
                rkey: mr.rkey().raw(),
            },
        )])
        .unwrap();
        let wc = poll_one(&mut cq);
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, len));
        assert_eq!(scattered(&hal) - before, u64::from(len <= 32), "{len}");
        for i in 0..len as usize {
            let at = if i < 4 { i } else { 16 + i - 4 };
            assert_eq!(mr.buf().read8(at), (i as u8) ^ 0x3c, "{len}: {i}");
        }
    }
    let before = scattered(&hal);
    a.post_send(&[common::send_wr(
        7,
        &[sge(&mr, 512, 8)],
        SendOp::AtomicFetchAndAdd {
            remote_addr: mr.addr() + 3072,
            rkey: mr.rkey().raw(),
            add: 1,
        },
    )])
    .unwrap();
    let wc = poll_one(&mut cq);
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 8));
    assert_eq!(scattered(&hal) - before, 1);
    assert_eq!(mr.buf().read_ne64(512), 100);
    assert_eq!(mr.buf().read_ne64(3072), 101);
    let _ = (&pd, &b);
}

#[test]
fn disable_keeps_data_out_of_the_cqe_and_allow_scatters_signaled_results_without_sig_all() {
    {
        rc_dv_pair!(flags(DvQpCreateFlags::DISABLE_SCATTER_TO_CQE), true => hal, pd, cq, a, b, mr);
        b.post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &[sge(&mr, 4096, 64)],
        }])
        .unwrap();
        mr.buf().write64(0, 0xfeed);
        a.post_send(&[common::send_wr(1, &[sge(&mr, 0, 8)], SendOp::Send)])
            .unwrap();
        a.post_send(&[common::send_wr(
            2,
            &[sge(&mr, 64, 8)],
            SendOp::RdmaRead {
                remote_addr: mr.addr(),
                rkey: mr.rkey().raw(),
            },
        )])
        .unwrap();
        for _ in 0..3 {
            assert_eq!(poll_one(&mut cq).status, WcStatus::Success);
        }
        assert_eq!(scattered(&hal), 0);
        assert_eq!(mr.buf().read64(4096), 0xfeed);
        assert_eq!(mr.buf().read64(64), 0xfeed);
        let _ = &pd;
    }
    {
        rc_dv_pair!(flags(DvQpCreateFlags::ALLOW_SCATTER_TO_CQE), false => hal, pd, cq, a, b, mr);
        mr.buf().write64(0, 0xbeef);
        let read = |id, f| SendWr {
            flags: f,
            ..common::send_wr(
                id,
                &[],
                SendOp::RdmaRead {
                    remote_addr: mr.addr(),
                    rkey: mr.rkey().raw(),
                },
            )
        };
        let s1 = [sge(&mr, 64, 8)];
        let s2 = [sge(&mr, 128, 8)];
        a.post_send(&[
            SendWr {
                sg_list: &s1,
                ..read(1, SendFlags::empty())
            },
            SendWr {
                sg_list: &s2,
                ..read(2, SendFlags::SIGNALED)
            },
        ])
        .unwrap();
        assert_eq!(poll_one(&mut cq).wr_id, 2);
        assert_eq!(scattered(&hal), 1, "only the signaled READ came in its CQE");
        assert_eq!(mr.buf().read64(64), 0xbeef);
        assert_eq!(mr.buf().read64(128), 0xbeef);
        let _ = (&pd, &b);
    }
}

#[test]
fn receives_through_an_srq_are_scattered_from_the_cqe_too() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mut cq = dev.create_cq(16).unwrap();
    let srq = common::srq(&pd, 4, 2);
    let plain = QpInitAttr::new(QpType::Rc, &cq, &cq, cap(16, 2, 64));
    let mut on_srq = QpInitAttr::new(QpType::Rc, &cq, &cq, cap(16, 2, 64));
    on_srq.srq = Some(&srq);
    let dv = DvQpInitAttr::default();
    let mut a = pd.create_qp_dv(&plain, &dv).unwrap().into_qp().unwrap();
    let mut b = pd.create_qp_dv(&on_srq, &dv).unwrap().into_qp().unwrap();
    connect_pair(&mut a, &mut b, all_access(), Mtu::Mtu1024);
    let mr = region(&pd, 8192, all_access());
    srq.post_recv(&[RecvWr {
        wr_id: 0x51,
        sg_list: &[sge(&mr, 4096, 3), sge(&mr, 5000, 64)],
    }])
    .unwrap();
    mr.buf().write_bytes(0, b"through the SRQ").unwrap();
    a.post_send(&[common::send_wr(1, &[sge(&mr, 0, 15)], SendOp::Send)])
        .unwrap();
    let (s, r) = send_and_recv(&mut cq);
    assert_eq!(s.status, WcStatus::Success);
    assert_eq!(
        (r.wr_id, r.status, r.byte_len),
        (0x51, WcStatus::Success, 15)
    );
    assert_eq!(scattered(&hal), 1);
    let mut got = [0u8; 15];
    mr.buf().read_bytes(4096, &mut got[..3]).unwrap();
    mr.buf().read_bytes(5000, &mut got[3..]).unwrap();
    assert_eq!(&got, b"through the SRQ");
}

#[test]
fn plain_create_qp_never_asks_for_scatter_to_cqe() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mut cq = dev.create_cq(16).unwrap();
    let mut attr = QpInitAttr::new(QpType::Rc, &cq, &cq, cap(16, 2, 64));
    attr.sq_sig_all = true;
    let (mut a, mut b) = (pd.create_qp(&attr).unwrap(), pd.create_qp(&attr).unwrap());
    connect_pair(&mut a, &mut b, all_access(), Mtu::Mtu1024);
    let mr = region(&pd, 4096, all_access());
    b.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &[sge(&mr, 1024, 64)],
    }])
    .unwrap();
    a.post_send(&[common::send_wr(1, &[sge(&mr, 0, 8)], SendOp::Send)])
        .unwrap();
    assert_eq!(poll_one(&mut cq).status, WcStatus::Success);
    assert_eq!(poll_one(&mut cq).status, WcStatus::Success);
    assert_eq!(scattered(&hal), 0);
}
