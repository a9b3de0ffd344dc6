//! Completion channels and completion events against the model: `ibv_create_comp_channel`,
//! `ibv_create_cq` on a channel with a context, `ibv_req_notify_cq`, `ibv_get_cq_event`,
//! `ibv_ack_cq_events`, `ibv_destroy_cq` refused while events are unacknowledged (seed 002,
//! seed 001 "ibv_get_cq_event"), and no completion event lost however many CQs fire.

use std::time::Duration;

use bareverbs::verbs::*;
use bareverbs::{AsyncEvent, Config, Device, Error};
use bareverbs::{Invalid, Limit};
use bareverbs_hal::{Deadline, Hal};
use bareverbs_model::SimHal;

mod common;
use common::{cap, connect_pair, poll_one, region, send_wr, sge, with};

fn up(hal: &SimHal) -> Device<&SimHal> {
    Device::bring_up(hal, Config::default()).unwrap()
}

/// A requester CQE of QP 1.
fn cqe_bytes() -> [u8; 64] {
    let mut c = [0u8; 64];
    c[0x38..0x3c].copy_from_slice(&((0x0a_u32 << 24) | 1).to_be_bytes());
    c[0x3f] = bareverbs_firmware_cmd::ifc::make_op_own(
        bareverbs_firmware_cmd::ifc::CqeOpcode::Req.into(),
        0,
    );
    c
}

/// A requester CQE of QP 1 written by the model straight into CQ `cqn` (solicited or not).
fn fake_cqe(hal: &SimHal, cqn: u32, solicited: bool) {
    assert!(hal
        .model()
        .with(|h| h.post_cqe(cqn, cqe_bytes(), solicited)));
}

#[test]
fn a_channel_delivers_one_event_per_arm_with_the_cq_context() {
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    let ch = dev.create_comp_channel().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mut scq = dev.create_cq(16).unwrap();
    let mut attr = CqInitAttr::new(16);
    attr.channel = Some(&ch);
    attr.cq_context = 0xc0ffee;
    let mut rcq = dev.create_cq_with(&attr).unwrap();
    assert_eq!(rcq.context(), 0xc0ffee);
    let mut a = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(8, 1, 0)))
        .unwrap();
    let mut b = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(8, 1, 0)))
        .unwrap();
    let access = AccessFlags::LOCAL_WRITE;
    connect_pair(&mut a, &mut b, access, Mtu::Mtu1024);
    let mr = region(&pd, 4096, access);
    let send = |a: &mut Qp<'_, '_, &SimHal>, id: u64| {
        let s = [sge(&mr, 0, 8)];
        a.post_send(&[send_wr(id, &s, SendOp::Send)]).unwrap();
    };
    let recv = |b: &mut Qp<'_, '_, &SimHal>, id: u64| {
        let s = [sge(&mr, 2048, 64)];
        b.post_recv(&[RecvWr {
            wr_id: id,
            sg_list: &s,
        }])
        .unwrap();
    };

    // Not armed: a completion raises no event.
    recv(&mut b, 1);
    send(&mut a, 1);
    assert_eq!(poll_one(&mut scq).status, WcStatus::Success);
    assert_eq!(ch.get_cq_event(), None);
    assert_eq!(poll_one(&mut rcq).wr_id, 1);

    // Armed: the next completion raises exactly one event, with the CQ's context; the CQ
    // is then disarmed (seed 001: "armed for one notification").
    rcq.req_notify(false).unwrap();
    assert_eq!(ch.get_cq_event(), None, "nothing completed yet");
    recv(&mut b, 2);
    recv(&mut b, 3);
    send(&mut a, 2);
    send(&mut a, 3);
    let ev = ch.get_cq_event().expect("an event");
    assert_eq!(
        ev,
        CqEvent {
            cqn: rcq.cqn().raw(),
            cq_context: 0xc0ffee
        }
    );
    assert_eq!(ch.get_cq_event(), None, "one event per arm");
    assert_eq!(rcq.unacked_events(), 1);
    // The send CQ has no channel: its completions raise nothing there.
    assert_eq!(dev.next_event(), None);
    let mut wc = [Wc::EMPTY; 4];
    assert_eq!(rcq.poll(&mut wc), 2);
    assert_eq!(scq.poll(&mut wc), 2);

    // Destroying a CQ with an event read and not acknowledged is refused, never a hang.
    let (e, back) = rcq.destroy().unwrap_err();
    assert_eq!(e, Error::EventsUnacknowledged { count: 1 });
    rcq = back;
    // Acknowledging nothing, or more than was read, is refused.
    let bad = Error::InvalidArgument {
        what: Invalid::AckCount,
    };
    assert_eq!(rcq.ack_events(0), Err(bad));
    assert_eq!(rcq.ack_events(2), Err(bad));
    rcq.ack_events(1).unwrap();
    assert_eq!(rcq.unacked_events(), 0);

    // Solicited only: an unsolicited completion does not fire, a solicited one does.
    rcq.req_notify(true).unwrap();
    recv(&mut b, 4);
    send(&mut a, 4);
    assert_eq!(ch.get_cq_event(), None);
    recv(&mut b, 5);
    let s = [sge(&mr, 0, 8)];
    let mut wr = send_wr(5, &s, SendOp::Send);
    wr.flags |= SendFlags::SOLICITED;
    a.post_send(&[wr]).unwrap();
    assert_eq!(ch.get_cq_event().map(|e| e.cqn), Some(rcq.cqn().raw()));

    // Arming for any completion with completions not yet polled fires at once (mlx5: the
    // arm carries the consumer index; the seed says otherwise, the device decides).
    rcq.ack_events(1).unwrap();
    rcq.req_notify(false).unwrap();
    assert_eq!(ch.get_cq_event().map(|e| e.cqn), Some(rcq.cqn().raw()));
    rcq.ack_events(1).unwrap();
    assert_eq!(rcq.poll(&mut wc), 2);
    assert_eq!(scq.poll(&mut wc), 2);

    // A bounded wait gives up at its deadline when nothing comes.
    let deadline = Deadline::new(hal.now(), Duration::from_millis(2));
    assert_eq!(ch.get_cq_event_until(deadline), None);
    assert!(deadline.expired(hal.now()));

    drop((a, b));
    rcq.destroy().map_err(|(e, _)| e).unwrap();
    scq.destroy().map_err(|(e, _)| e).unwrap();
    ch.destroy().unwrap();
    drop(mr);
    drop(pd);
    assert_eq!(hal.model().with(|h| h.object_counts()), (0, 0, 0));
}

#[test]
fn bad_channel_arguments_are_refused() {
    let (hal, other) = (SimHal::synchronous(), SimHal::synchronous());
    let dev = up(&hal);
    let dev2 = up(&other);
    let ch2 = dev2.create_comp_channel().unwrap();
    let ch = dev.create_comp_channel().unwrap();
    let r = dev.create_cq_with(&with(CqInitAttr::new(4), |a| a.channel = Some(&ch2)));
    assert!(matches!(
        r,
        Err(Error::InvalidArgument {
            what: Invalid::ForeignObject
        })
    ));
    let r = dev.create_cq_with(&with(CqInitAttr::new(4), |a| {
        a.channel = Some(&ch);
        a.comp_vector = 1;
    }));
    assert!(matches!(
        r,
        Err(Error::InvalidArgument {
            what: Invalid::CompVector
        })
    ));
    // A channel serves CHANNEL_CQS CQs; one more is refused by name.
    let mut attr = CqInitAttr::new(2);
    attr.channel = Some(&ch);
    let cqs: Vec<_> = (0..CHANNEL_CQS)
        .map(|_| dev.create_cq_with(&attr).unwrap())
        .collect();
    assert!(matches!(
        dev.create_cq_with(&attr),
        Err(Error::ExceedsLimit {
            limit: Limit::CqCount,
            ..
        })
    ));
    drop(cqs);
    assert!(dev.create_cq_with(&attr).is_ok());

    // CQs without a channel are not limited in number, but at most 128 may be armed at once
    // (with or without `alloc`: half the 256-entry asynchronous EQ, which holds one
    // completion event per armed CQ): arming one more is refused by name, nothing armed.
    let mut plain: Vec<_> = (0..129).map(|_| dev.create_cq(2).unwrap()).collect();
    let armed: Vec<_> = plain.iter_mut().map(|c| c.req_notify(false)).collect();
    assert!(armed[..128].iter().all(Result::is_ok));
    assert!(matches!(
        armed[128],
        Err(Error::ExceedsLimit {
            limit: Limit::CqCount,
            max: 128,
            ..
        })
    ));
}

#[test]
fn armed_cqs_without_a_channel_cannot_overrun_a_small_asynchronous_eq() {
    // The smallest asynchronous EQ, 128 entries (Linux's 0x80 spare EQEs): 64 CQs may be
    // armed; all of them fire, with port events besides, and every event arrives (the model
    // drops an EQE only when the EQ is full).
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, with(Config::default(), |a| a.async_eq_log_size = 7)).unwrap();
    let mut cqs: Vec<_> = (0..65).map(|_| dev.create_cq(2).unwrap()).collect();
    let armed: Vec<_> = cqs.iter_mut().map(|c| c.req_notify(false)).collect();
    assert!(armed[..64].iter().all(Result::is_ok));
    assert!(matches!(
        armed[64],
        Err(Error::ExceedsLimit {
            limit: Limit::CqCount,
            max: 64,
            ..
        })
    ));
    for c in &cqs[..64] {
        fake_cqe(&hal, c.cqn().raw(), false);
    }
    for up in [false, true, false, true] {
        hal.model().set_port(1, up);
    }
    dev.poll_events();
    let events: Vec<_> = std::iter::from_fn(|| dev.next_event()).collect();
    let completions = events
        .iter()
        .filter(|e| matches!(e, AsyncEvent::Completion { .. }))
        .count();
    assert_eq!(completions, 64);
    assert_eq!(events.len(), 68, "64 completion events and 4 port events");
    let eqn = dev.async_eqn().unwrap().raw();
    assert!(hal.model().with(|h| !h.eq(eqn).unwrap().overrun));
    for c in &mut cqs[..64] {
        c.ack_events(1).unwrap();
    }
}

#[test]
fn every_cq_of_a_full_channel_gets_its_event_and_can_be_rearmed() {
    // The channel's EQ holds one event per CQ; arming drains it first, so re-arming before
    // reading loses nothing either.
    let hal = SimHal::synchronous();
    let dev = up(&hal);
    let ch = dev.create_comp_channel().unwrap();
    let mut attr = CqInitAttr::new(4);
    attr.channel = Some(&ch);
    let mut cqs: Vec<_> = (0..CHANNEL_CQS)
        .map(|i| {
            dev.create_cq_with(&with(attr, |a| a.cq_context = i as u64))
                .unwrap()
        })
        .collect();
    for round in 0..3 {
        for cq in cqs.iter_mut() {
            cq.req_notify(false).unwrap();
            fake_cqe(&hal, cq.cqn().raw(), false);
        }
        let mut seen = vec![0u32; CHANNEL_CQS];
        while let Some(e) = ch.get_cq_event() {
            seen[e.cq_context as usize] += 1;
        }
        assert_eq!(seen, vec![1; CHANNEL_CQS], "round {round}");
        let mut wc = [Wc::EMPTY; 4];
        for cq in cqs.iter_mut() {
            assert_eq!(cq.poll(&mut wc), 1);
            cq.ack_events(1).unwrap();
        }
    }
    assert_eq!(ch.stray_events(), 0);
}

#[test]
fn completion_events_without_a_channel_are_never_dropped() {
    // Before: completion events shared the 32-entry asynchronous queue and the oldest was
    // dropped, leaving its CQ disarmed with no notice. 100 CQs firing with nobody reading,
    // and 40 port events on top, must still give 100 completion events.
    let hal = SimHal::synchronous();
    let m = hal.model();
    let dev = up(&hal);
    let mut cqs: Vec<_> = (0..100).map(|_| dev.create_cq(4).unwrap()).collect();
    for cq in cqs.iter_mut() {
        cq.req_notify(false).unwrap();
        fake_cqe(&hal, cq.cqn().raw(), false);
    }
    for i in 0..40 {
        m.set_port(1, i % 2 == 1);
        dev.poll_events();
    }
    let mut got = std::collections::BTreeSet::new();
    let mut ports = 0;
    while let Some(e) = dev.next_event() {
        match e {
            AsyncEvent::Completion { cqn } => assert!(got.insert(cqn), "twice: {cqn}"),
            AsyncEvent::PortActive { port: 1 } | AsyncEvent::PortErr { port: 1 } => ports += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got.len(), 100);
    // The asynchronous queue keeps the newest 32 port events and counts what it dropped.
    assert_eq!(ports, 32);
    assert_eq!(dev.events_dropped(), 8);
    for cq in cqs.iter_mut() {
        cq.ack_events(1).unwrap();
        assert_eq!(cq.poll(&mut [Wc::EMPTY; 2]), 1);
    }
}

#[test]
fn the_model_raises_asynchronous_events_for_their_objects() {
    let hal = SimHal::synchronous();
    let m = hal.model();
    let dev = up(&hal);
    let pd = dev.alloc_pd().unwrap();
    let mut cq = dev.create_cq(2).unwrap();
    let cqn = cq.cqn().raw();
    let drain = || -> Vec<AsyncEvent> {
        dev.poll_events();
        std::iter::from_fn(|| dev.next_event()).collect()
    };

    // Port down and up (PORT_CHANGE subtypes DOWN, ACTIVE: IBV_EVENT_PORT_ERR/ACTIVE).
    m.set_port(1, false);
    m.set_port(1, true);
    assert_eq!(
        drain(),
        [
            AsyncEvent::PortErr { port: 1 },
            AsyncEvent::PortActive { port: 1 }
        ]
    );

    // A CQ overrun (ibv_poll_cq(3): "the CQ will be shut down and an async event
    // IBV_EVENT_CQ_ERR will be sent"; syndrome 1: overrun, Linux device.h).
    let fits = (0..64)
        .take_while(|_| hal.model().with(|h| h.post_cqe(cqn, cqe_bytes(), false)))
        .count();
    assert_eq!(
        fits as u32,
        cq.capacity(),
        "the CQE past a full CQ is refused"
    );
    assert!(drain().contains(&AsyncEvent::CqErr { cqn, syndrome: 1 }));
    let _ = cq.poll(&mut [Wc::EMPTY; 8]);

    // Communication established: the first message at an RC QP still in RTR (IBA 11.6.3;
    // mlx5 COMM_EST, mlx5_ib's IB_EVENT_COMM_EST), once.
    let (scq, rcq) = (dev.create_cq(8).unwrap(), dev.create_cq(8).unwrap());
    let init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(8, 1, 0));
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    let path = AhAttr {
        dlid: 1,
        port_num: 1,
        ..AhAttr::default()
    };
    let access = AccessFlags::LOCAL_WRITE;
    for q in [&mut a, &mut b] {
        q.to_init(1, 0, access, 0).unwrap();
    }
    a.to_rtr(b.qpn().raw(), 0, path, Mtu::Mtu1024).unwrap();
    a.to_rts(0).unwrap();
    b.to_rtr(a.qpn().raw(), 0, path, Mtu::Mtu1024).unwrap();
    let mr = region(&pd, 4096, access);
    let r = [sge(&mr, 1024, 64)];
    let rw = |id| RecvWr {
        wr_id: id,
        sg_list: &r,
    };
    b.post_recv(&[rw(1), rw(2)]).unwrap();
    let s = [sge(&mr, 0, 8)];
    a.post_send(&[send_wr(1, &s, SendOp::Send)]).unwrap();
    a.post_send(&[send_wr(2, &s, SendOp::Send)]).unwrap();
    let qpn = b.qpn().raw();
    assert_eq!(drain(), [AsyncEvent::CommEst { qpn }]);
}

#[test]
fn what_a_subnet_manager_changes_arrives_as_port_events_and_takes_effect() {
    // mlx5 PORT_CHANGE subtypes LID, PKEY, GUID, CLIENT_REREG (Linux 6.12 mlx5_ib
    // `handle_port_change`: IB_EVENT_LID_CHANGE, _PKEY_CHANGE, _GID_CHANGE,
    // _CLIENT_REREGISTER), raised by the model when the SM (the test) changes the port.
    let (ha, hb) = common::two_hcas();
    let (a, b) = (up(&ha), up(&hb));
    let drain = |dev: &Device<&SimHal>| -> Vec<AsyncEvent> {
        dev.poll_events();
        std::iter::from_fn(|| dev.next_event()).collect()
    };
    let _ = (drain(&a), drain(&b));

    // New LIDs: the event, the port reports the LID, and the fabric routes to it.
    assert!(ha.model().with(|h| h.assign_lids(33)));
    assert_eq!(drain(&a), [AsyncEvent::LidChange { port: 1 }]);
    assert_eq!(a.query_port(1).unwrap().lid, 33);
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, mut cb) = (a.create_cq(8).unwrap(), b.create_cq(8).unwrap());
    let mut qa = pa
        .create_qp(&QpInitAttr::new(QpType::Rc, &ca, &ca, cap(8, 1, 0)))
        .unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::new(QpType::Rc, &cb, &cb, cap(8, 1, 0)))
        .unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let path = |dlid| AhAttr {
        dlid,
        port_num: 1,
        ..AhAttr::default()
    };
    qa.to_init(1, 0, access, 0).unwrap();
    qa.to_rtr(qb.qpn().raw(), 0, path(17), Mtu::Mtu1024)
        .unwrap();
    qb.to_init(1, 0, access, 0).unwrap();
    qb.to_rtr(qa.qpn().raw(), 0, path(33), Mtu::Mtu1024)
        .unwrap();
    qb.to_rts(0).unwrap();
    let (ma, mb) = (region(&pa, 4096, access), region(&pb, 4096, access));
    let s = [sge(&mb, 0, 5)];
    mb.buf().write_bytes(0, b"relid").unwrap();
    let wr = SendWr {
        op: SendOp::RdmaWrite {
            remote_addr: ma.addr() + 200,
            rkey: ma.rkey().raw(),
        },
        ..send_wr(1, &s, SendOp::Send)
    };
    qb.post_send(&[wr]).unwrap();
    assert_eq!(poll_one(&mut cb).status, WcStatus::Success);
    let mut got = [0u8; 5];
    ma.buf().read_bytes(200, &mut got).unwrap();
    assert_eq!(&got, b"relid", "the write reached the HCA at its new LID");

    // A P_Key table entry, an alias GUID (GID index 1), a client reregistration.
    assert!(ha.model().with(|h| h.set_pkey(1, 1, 0x8001)));
    assert!(ha.model().with(|h| h.set_alias_guid(1, 1, 0xabcd)));
    assert!(ha.model().with(|h| h.sm_client_reregister(1)));
    let qpn = qa.qpn().raw();
    assert_eq!(
        drain(&a),
        [
            AsyncEvent::CommEst { qpn },
            AsyncEvent::PkeyChange { port: 1 },
            AsyncEvent::GidChange { port: 1 },
            AsyncEvent::ClientReregister { port: 1 }
        ]
    );
    let gid = a.query_gid(1, 1).unwrap();
    assert_eq!(gid[..8], 0xfe80_0000_0000_0000u64.to_be_bytes());
    assert_eq!(gid[8..], 0xabcdu64.to_be_bytes());

    // What the device does not have changes nothing and raises nothing.
    ha.model().with(|h| {
        assert!(!h.assign_lids(0));
        assert!(!h.assign_lids(0xc000), "a multicast LID");
        assert!(!h.set_pkey(2, 0, 0xffff));
        assert!(!h.set_pkey(1, 128, 0xffff));
        assert!(!h.set_alias_guid(1, 0, 1));
        assert!(!h.sm_client_reregister(9));
    });
    assert_eq!(drain(&a), []);
    assert_eq!(drain(&b), [], "the other HCA saw none of it");
}
