//! Bad inputs as one table per verb: every case is refused with its typed error, before any
//! command reaches the device (the command count does not move), and nothing panics. Field
//! widths are IBA's (24-bit PSNs and QP numbers, 3-bit retry counts, 5-bit timers, 4-bit SL);
//! limits are the device's (P_Key and GID tables, ports, RDMA read/atomic resources); static
//! rates are `enum ib_rate` as Linux 6.12 `ib_rate_to_mlx5` accepts them.

use bareverbs::verbs::*;
use bareverbs::Invalid;
use bareverbs::{Config, Device, Error};
use bareverbs_model::SimHal;

mod common;
use common::{cap, region, sge, with};

fn invalid(what: Invalid) -> Error {
    Error::InvalidArgument { what }
}

fn path() -> AhAttr {
    AhAttr {
        dlid: 1,
        port_num: 1,
        ..AhAttr::default()
    }
}

#[test]
fn modify_qp_refuses_every_out_of_range_attribute_before_any_command() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let caps = dev.info().caps;
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8).unwrap();
    let mut qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq, cap(8, 2, 64)))
        .unwrap();
    qp.to_init(1, 0, AccessFlags::LOCAL_WRITE, 0).unwrap();
    let (rtr, rtr_mask) = common::rc_rtr(5, path());
    let av = |f: fn(&mut AhAttr)| {
        let mut a = rtr;
        f(&mut a.ah_attr);
        a
    };
    let gids = caps.gid_table_len;
    let cases: Vec<(&str, QpAttr, QpAttrMask, Invalid)> = vec![
        (
            "rq_psn 2^24",
            with(rtr, |a| a.rq_psn = 1 << 24),
            rtr_mask,
            Invalid::Psn,
        ),
        (
            "rq_psn max",
            with(rtr, |a| a.rq_psn = u32::MAX),
            rtr_mask,
            Invalid::Psn,
        ),
        (
            "dest_qp_num 2^24",
            with(rtr, |a| a.dest_qp_num = 1 << 24),
            rtr_mask,
            Invalid::DestQpn,
        ),
        (
            "min_rnr_timer 32",
            with(rtr, |a| a.min_rnr_timer = 32),
            rtr_mask,
            Invalid::MinRnrTimer,
        ),
        (
            "min_rnr_timer 255",
            with(rtr, |a| a.min_rnr_timer = 255),
            rtr_mask,
            Invalid::MinRnrTimer,
        ),
        (
            "max_dest_rd_atomic past the device",
            with(rtr, |a| {
                a.max_dest_rd_atomic = (caps.max_qp_rd_atom + 1).min(255) as u8
            }),
            rtr_mask,
            Invalid::MaxDestRdAtomic,
        ),
        ("sl 16", av(|a| a.sl = 16), rtr_mask, Invalid::Sl),
        ("sl 255", av(|a| a.sl = 255), rtr_mask, Invalid::Sl),
        ("av port 0", av(|a| a.port_num = 0), rtr_mask, Invalid::Port),
        ("av port 9", av(|a| a.port_num = 9), rtr_mask, Invalid::Port),
        (
            "static rate 1",
            av(|a| a.static_rate = 1),
            rtr_mask,
            Invalid::StaticRate,
        ),
        (
            "static rate 23",
            av(|a| a.static_rate = 23),
            rtr_mask,
            Invalid::StaticRate,
        ),
        (
            "static rate 255",
            av(|a| a.static_rate = 255),
            rtr_mask,
            Invalid::StaticRate,
        ),
        (
            "dlid 0 without GRH",
            av(|a| a.dlid = 0),
            rtr_mask,
            Invalid::Dlid,
        ),
        (
            "sgid index past the table",
            av(|a| {
                a.is_global = true;
                a.grh.sgid_index = 255;
            }),
            rtr_mask,
            Invalid::SgidIndex,
        ),
    ];
    let mut n = 0;
    let before = dev.trace().total();
    for (name, attr, mask, what) in &cases {
        assert_eq!(qp.modify(attr, *mask), Err(invalid(*what)), "{name}");
        n += 1;
    }
    assert_eq!(
        dev.trace().total(),
        before,
        "no command for a refused attribute"
    );
    assert!(gids <= 255, "the GID case needs a table under 255 entries");
    // The RTS attributes, from a QP in RTR.
    qp.modify(&rtr, rtr_mask).unwrap();
    let (rts, rts_mask) = common::rc_rts();
    let rts_cases: Vec<(&str, QpAttr, Invalid)> = vec![
        (
            "sq_psn 2^24",
            with(rts, |a| a.sq_psn = 1 << 24),
            Invalid::Psn,
        ),
        (
            "timeout 32",
            with(rts, |a| a.timeout = 32),
            Invalid::Timeout,
        ),
        (
            "timeout 255",
            with(rts, |a| a.timeout = 255),
            Invalid::Timeout,
        ),
        (
            "retry_cnt 8",
            with(rts, |a| a.retry_cnt = 8),
            Invalid::RetryCount,
        ),
        (
            "rnr_retry 8",
            with(rts, |a| a.rnr_retry = 8),
            Invalid::RnrRetry,
        ),
        (
            "max_rd_atomic past the device",
            with(rts, |a| {
                a.max_rd_atomic = (caps.max_qp_init_rd_atom + 1).min(255) as u8
            }),
            Invalid::MaxRdAtomic,
        ),
    ];
    let before_rts = dev.trace().total();
    for (name, attr, what) in &rts_cases {
        assert_eq!(qp.modify(attr, rts_mask), Err(invalid(*what)), "{name}");
        n += 1;
    }
    assert_eq!(
        dev.trace().total(),
        before_rts,
        "no command for a refused attribute"
    );
    // From RESET: the INIT attributes.
    let mut fresh = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq, cap(8, 2, 64)))
        .unwrap();
    let mut init = QpAttr::default();
    init.qp_state = QpState::Init;
    init.port_num = 1;
    init.pkey_index = 0;
    let init_mask =
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::ACCESS_FLAGS;
    let init_cases: Vec<(&str, QpAttr, Invalid)> = vec![
        ("port 0", with(init, |a| a.port_num = 0), Invalid::Port),
        ("port 9", with(init, |a| a.port_num = 9), Invalid::Port),
        (
            "pkey_index past the table",
            with(init, |a| a.pkey_index = caps.pkey_table_len as u16),
            Invalid::PkeyIndex,
        ),
        (
            "pkey_index max",
            with(init, |a| a.pkey_index = u16::MAX),
            Invalid::PkeyIndex,
        ),
    ];
    let before_init = dev.trace().total();
    for (name, attr, what) in &init_cases {
        assert_eq!(fresh.modify(attr, init_mask), Err(invalid(*what)), "{name}");
        n += 1;
    }
    assert_eq!(dev.trace().total(), before_init);
    assert_eq!(n, cases.len() + rts_cases.len() + init_cases.len());
}

#[test]
fn ud_destinations_and_messages_are_checked() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8).unwrap();
    // create_ah: what a hand-built UdDest used to carry to the ring.
    for (attr, e) in [
        (AhAttr { sl: 16, ..path() }, invalid(Invalid::AddressVector)),
        (
            AhAttr { dlid: 0, ..path() },
            invalid(Invalid::AddressVector),
        ),
        (
            AhAttr {
                port_num: 9,
                ..path()
            },
            Error::NoSuchPort { port: 9 },
        ),
        (
            AhAttr {
                static_rate: 1,
                ..path()
            },
            invalid(Invalid::StaticRate),
        ),
    ] {
        assert_eq!(pd.create_ah(attr).map(|_| ()), Err(e), "{attr:?}");
    }
    let ah = pd.create_ah(path()).unwrap();
    assert_eq!(
        ah.dest(1 << 24, 1).map(|_| ()),
        Err(invalid(Invalid::DestQpn))
    );
    // A UD message longer than one 4 KiB MTU, by SGEs or inline.
    let mut ud = pd
        .create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq, cap(8, 2, 64)))
        .unwrap();
    ud.to_init(1, 0, AccessFlags::empty(), 0x11).unwrap();
    ud.to_rtr(0, 0, AhAttr::default(), Mtu::Mtu4096).unwrap();
    ud.to_rts(0).unwrap();
    let mr = region(&pd, 8192, AccessFlags::LOCAL_WRITE);
    let dest = ah.dest(5, 0x11).unwrap();
    let long = [sge(&mr, 0, 4096), sge(&mr, 4096, 1)];
    let wr = SendWr {
        wr_id: 1,
        sg_list: &long,
        inline_data: &[],
        op: SendOp::Send,
        flags: SendFlags::SIGNALED,
        ud: Some(dest),
    };
    assert_eq!(
        ud.post_send(&[wr]).unwrap_err().error,
        invalid(Invalid::UdMessageTooLong)
    );
    let fits = [sge(&mr, 0, 4096)];
    assert!(ud
        .post_send(&[SendWr {
            sg_list: &fits,
            ..wr
        }])
        .is_ok());
}

#[test]
fn create_qp_refuses_sizes_that_overflowed() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8).unwrap();
    let before = dev.trace().total();
    for inline in [u32::MAX, u32::MAX - 3, 1 << 20] {
        let c = QpCap {
            max_inline_data: inline,
            ..cap(8, 2, 64)
        };
        let r = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq, c));
        assert!(
            matches!(
                r,
                Err(Error::ExceedsLimit {
                    limit: bareverbs::Limit::InlineData,
                    ..
                })
            ),
            "max_inline_data {inline}"
        );
    }
    for wr in [u32::MAX, 1 << 30] {
        let c = QpCap {
            max_send_wr: wr,
            ..cap(8, 2, 64)
        };
        assert!(pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq, c))
            .is_err());
    }
    assert_eq!(dev.trace().total(), before, "no command");
}

#[test]
fn sizes_near_the_integer_limits_are_errors_not_panics() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8).unwrap();
    let before = dev.trace().total();
    for cqe in [u32::MAX, u32::MAX / 2 + 1, 1 << 31] {
        assert!(dev.create_cq(cqe).is_err(), "cqe {cqe}");
    }
    for (max_wr, max_sge) in [
        (u32::MAX, 1),
        (1, u32::MAX),
        (u32::MAX, u32::MAX),
        (1 << 31, 1),
    ] {
        let r = pd.create_srq(&SrqInitAttr::new(SrqAttr {
            max_wr,
            max_sge,
            srq_limit: 0,
        }));
        assert!(r.is_err(), "srq {max_wr} {max_sge}");
    }
    for c in [
        QpCap {
            max_send_sge: u32::MAX,
            ..cap(8, 2, 64)
        },
        QpCap {
            max_recv_sge: u32::MAX,
            ..cap(8, 2, 64)
        },
        QpCap {
            max_recv_wr: u32::MAX,
            ..cap(8, 2, 64)
        },
    ] {
        assert!(pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq, c))
            .is_err());
    }
    assert_eq!(dev.trace().total(), before, "refused before any command");
}

/// A signaled request `op` over `sg`.
fn swr(sg: &[Sge], op: SendOp) -> SendWr<'_> {
    common::send_wr(1, sg, op)
}

#[test]
fn posting_and_object_verbs_refuse_what_the_device_cannot_take() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8).unwrap();
    let init = |t| QpInitAttr::new(t, &cq, &cq, cap(8, 2, 64));
    let mut rc = pd.create_qp(&init(QpType::Rc)).unwrap();
    let mut peer = pd.create_qp(&init(QpType::Rc)).unwrap();
    let mut ud = pd.create_qp(&init(QpType::Ud)).unwrap();
    let mr = region(&pd, 8192, AccessFlags::LOCAL_WRITE);
    let one = [sge(&mr, 0, 8)];
    // One entry past the send and receive lists the QP got (requests round up to whole
    // segments, so the QP may hold more than asked).
    let many = |n: u32| {
        (0..=n)
            .map(|k| sge(&mr, 8 * u64::from(k), 8))
            .collect::<Vec<_>>()
    };
    let too_many_send = many(rc.cap().max_send_sge);
    let too_many_recv = many(peer.cap().max_recv_sge);
    // One byte past the inline room the QP got (its request rounded up to whole segments).
    let big = vec![0u8; rc.cap().max_inline_data as usize + 1];
    let write = SendOp::RdmaWrite {
        remote_addr: mr.addr(),
        rkey: mr.rkey().raw(),
    };
    // A send on a QP in RESET: its state is the refusal.
    assert_eq!(
        rc.post_send(&[swr(&one, SendOp::Send)]).unwrap_err().error,
        invalid(Invalid::QpState)
    );
    common::connect_pair(&mut rc, &mut peer, AccessFlags::LOCAL_WRITE, Mtu::Mtu1024);
    ud.to_init(1, 0, AccessFlags::empty(), 1).unwrap();
    ud.to_rtr(0, 0, AhAttr::default(), Mtu::Mtu4096).unwrap();
    ud.to_rts(0).unwrap();
    let ah = pd.create_ah(path()).unwrap();
    let dest = ah.dest(1, 1).unwrap();
    let before = dev.trace().total();
    let inline = SendWr {
        inline_data: &big,
        flags: SendFlags::INLINE,
        ..swr(&[], SendOp::Send)
    };
    // (name, on the UD QP, request, refusal)
    let sends = [
        (
            "an SGE past max_send_sge",
            false,
            swr(&too_many_send, SendOp::Send),
            Invalid::TooManySge,
        ),
        (
            "inline data past the QP's room",
            false,
            inline,
            Invalid::InlineTooLarge,
        ),
        (
            "a destination on a connected QP",
            false,
            SendWr {
                ud: Some(dest),
                ..swr(&one, SendOp::Send)
            },
            Invalid::Destination,
        ),
        (
            "a UD send without a destination",
            true,
            swr(&one, SendOp::Send),
            Invalid::Destination,
        ),
        (
            "an RDMA WRITE on UD",
            true,
            SendWr {
                ud: Some(dest),
                ..swr(&one, write)
            },
            Invalid::OpcodeForQpType,
        ),
    ];
    for (name, on_ud, w, what) in sends {
        let qp = if on_ud { &mut ud } else { &mut rc };
        let r = qp.post_send(&[w]).map_err(|e| e.error);
        assert_eq!(r, Err(invalid(what)), "{name}");
    }
    // A receive with more SGEs than max_recv_sge.
    let e = peer
        .post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &too_many_recv,
        }])
        .unwrap_err();
    assert_eq!(e.error, invalid(Invalid::TooManySge));
    // Multicast on a connected QP, with a unicast GID, with LIDs outside 0xC000-0xFFFE.
    let mgid = [0xff, 0x12, 0x40, 0x1b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let mut ucast = mgid;
    ucast[0] = 0xfe;
    assert_eq!(
        rc.attach_mcast(&mgid, 0xc001),
        Err(invalid(Invalid::MulticastQpType))
    );
    assert_eq!(
        ud.attach_mcast(&ucast, 0xc001),
        Err(invalid(Invalid::MulticastGid))
    );
    for lid in [0x0001, 0xbfff, 0xffff] {
        assert_eq!(
            ud.attach_mcast(&mgid, lid),
            Err(invalid(Invalid::MulticastLid))
        );
    }
    assert_eq!(dev.trace().total(), before, "no command for any of them");
    // Objects: a CQ on a completion vector the channel lacks; an MR with remote write but no
    // local write.
    let ch = dev.create_comp_channel().unwrap();
    let mut with_vector = CqInitAttr::new(8);
    with_vector.channel = Some(&ch);
    with_vector.comp_vector = 1;
    assert_eq!(
        dev.create_cq_with(&with_vector).err(),
        Some(invalid(Invalid::CompVector))
    );
    let Err((e, _)) = pd.reg_mr(
        bareverbs_hal::Hal::dma_alloc(&&hal, 64, 64)
            .unwrap()
            .share(),
        AccessFlags::REMOTE_WRITE,
    ) else {
        panic!("remote write without local write registered");
    };
    assert_eq!(e, invalid(Invalid::RemoteWriteWithoutLocalWrite));
}
