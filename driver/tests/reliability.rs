//! The model's transport as a user sees it: PSNs that advance and wrap, RC retransmission on
//! PSN sequence errors and on missing responders (counted against `retry_cnt`, or never timing
//! out with `timeout` 0), RNR retries spaced by the responder's RNR timer, duplicates
//! acknowledged without delivery, UC resynchronising, the SQE
//! state of UC and UD send queues, SQD refused, DLID path bits, and remote invalid requests.

use bareverbs::verbs::QpState;
use bareverbs::verbs::*;
use bareverbs::Invalid;
use bareverbs::{Config, Device, Error};
use bareverbs_hal::Hal;
use bareverbs_model::{Drive, ModelConfig, SimHal};

mod common;
use common::{all_access, cap, poll_one, region, send_wr, sge, with};

const QKEY: u32 = 0x1111;

/// How one QP is brought to RTS.
#[derive(Clone, Copy)]
struct Link {
    peer: u32,
    dlid: u16,
    rq_psn: u32,
    sq_psn: u32,
    retry_cnt: u8,
    timeout: u8,
    max_dest_rd_atomic: u8,
    /// The RNR NAK timer this QP, as a responder, asks requesters to wait.
    min_rnr_timer: u8,
}

impl Default for Link {
    fn default() -> Self {
        Link::to(0)
    }
}

impl Link {
    fn to(peer: u32) -> Self {
        Link {
            peer,
            dlid: 1,
            rq_psn: 0x10,
            sq_psn: 0x10,
            retry_cnt: 7,
            timeout: 14,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
        }
    }
}

fn up<H: Hal>(q: &mut Qp<'_, '_, H>, l: Link) {
    let t = q.qp_type();
    q.to_init(1, 0, all_access(), QKEY).unwrap();
    if t == QpType::Ud {
        q.to_rtr(0, 0, AhAttr::default(), Mtu::Mtu4096).unwrap();
        q.to_rts(l.sq_psn).unwrap();
        return;
    }
    let mut rtr = QpAttr::default();
    rtr.qp_state = QpState::Rtr;
    rtr.dest_qp_num = l.peer;
    rtr.rq_psn = l.rq_psn;
    rtr.ah_attr = AhAttr {
        dlid: l.dlid,
        port_num: 1,
        ..AhAttr::default()
    };
    rtr.path_mtu = Mtu::Mtu1024;
    rtr.max_dest_rd_atomic = l.max_dest_rd_atomic;
    rtr.min_rnr_timer = l.min_rnr_timer;
    let mut mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN;
    if t == QpType::Rc {
        mask |= QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
    }
    q.modify(&rtr, mask).unwrap();
    let mut rts = QpAttr::default();
    rts.qp_state = QpState::Rts;
    rts.sq_psn = l.sq_psn;
    rts.timeout = l.timeout;
    rts.retry_cnt = l.retry_cnt;
    rts.rnr_retry = 7;
    rts.max_rd_atomic = 1;
    let mut mask = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
    if t == QpType::Rc {
        mask |= QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC;
    }
    q.modify(&rts, mask).unwrap();
}

fn recv<'a>(wr_id: u64, sg: &'a [Sge]) -> RecvWr<'a> {
    RecvWr { wr_id, sg_list: sg }
}

/// Every completion waiting, as (wr_id, status).
fn drain<H: Hal>(cq: &mut Cq<'_, H>) -> Vec<(u64, WcStatus)> {
    let mut wc = [Wc::EMPTY; 32];
    let n = cq.poll(&mut wc);
    wc[..n].iter().map(|w| (w.wr_id, w.status)).collect()
}

fn new_qp<'p, 'd, 'h>(
    pd: &'p Pd<'d, &'h SimHal>,
    qp_type: QpType,
    send_cq: &Cq<'d, &'h SimHal>,
    recv_cq: &Cq<'d, &'h SimHal>,
) -> Qp<'p, 'd, &'h SimHal> {
    pd.create_qp(&with(
        QpInitAttr::new(qp_type, send_cq, recv_cq, cap(16, 2, 64)),
        |a| a.sq_sig_all = true,
    ))
    .unwrap()
}

/// Two QPs of type `qp_type` brought up towards each other: `la` for the first, `lb` for the
/// second, each completed with the other's QP number.
fn pair<'p, 'd, 'h>(
    pd: &'p Pd<'d, &'h SimHal>,
    qp_type: QpType,
    cqs: (&Cq<'d, &'h SimHal>, &Cq<'d, &'h SimHal>),
    la: Link,
    lb: Link,
) -> (Qp<'p, 'd, &'h SimHal>, Qp<'p, 'd, &'h SimHal>) {
    let mut a = new_qp(pd, qp_type, cqs.0, cqs.1);
    let mut b = new_qp(pd, qp_type, cqs.0, cqs.1);
    let (an, bn) = (a.qpn().raw(), b.qpn().raw());
    up(&mut a, Link { peer: bn, ..la });
    up(&mut b, Link { peer: an, ..lb });
    (a, b)
}

fn retries(hal: &SimHal, q: u32) -> u64 {
    hal.model().with(|h| h.qp_retries(q)).unwrap()
}

/// The local ACK timeout of `Link::default()` (`timeout` 14): 4.096 µs << 14.
const ACK_TIMEOUT: std::time::Duration = std::time::Duration::from_nanos(4096 << 14);

/// Lets ACK timeouts run out one at a time until `cq` has completions; returns them and how
/// many timeouts that took.
fn after_timeouts<H: Hal>(hal: &SimHal, cq: &mut Cq<'_, H>) -> (Vec<(u64, WcStatus)>, u32) {
    for n in 0..64 {
        let got = drain(cq);
        if !got.is_empty() {
            return (got, n);
        }
        hal.delay(ACK_TIMEOUT + std::time::Duration::from_micros(1));
    }
    panic!("no completion after 64 ACK timeouts");
}

#[test]
fn psns_advance_by_packets_per_mtu_and_wrap_at_24_bits() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let mut a = new_qp(&pd, QpType::Rc, &scq, &rcq);
    let mut b = new_qp(&pd, QpType::Rc, &scq, &rcq);
    let (an, bn) = (a.qpn().raw(), b.qpn().raw());
    let start = 0xff_fffe;
    // a -> b starts near the top of the PSN space; b -> a elsewhere, and it must not move.
    up(
        &mut a,
        Link {
            sq_psn: start,
            rq_psn: 0x500,
            ..Link::to(bn)
        },
    );
    up(
        &mut b,
        Link {
            sq_psn: 0x500,
            rq_psn: start,
            ..Link::to(an)
        },
    );
    let m = region(&pd, 8192, all_access());
    // SEND of 3000 bytes at MTU 1024: three packets, across the wrap.
    b.post_recv(&[recv(1, &[sge(&m, 4096, 4096)])]).unwrap();
    a.post_send(&[send_wr(1, &[sge(&m, 0, 3000)], SendOp::Send)])
        .unwrap();
    assert_eq!(drain(&mut scq), [(1, WcStatus::Success)]);
    assert_eq!(poll_one(&mut rcq).byte_len, 3000);
    assert_eq!(a.query().unwrap().sq_psn, 1);
    assert_eq!(b.query().unwrap().rq_psn, 1);
    // WRITE of one byte (1), READ of 2048 bytes (2 response packets), fetch-and-add (1),
    // a zero-length SEND (1).
    let remote = m.rkey().raw();
    b.post_recv(&[recv(2, &[])]).unwrap();
    a.post_send(&[
        send_wr(
            2,
            &[sge(&m, 0, 1)],
            SendOp::RdmaWrite {
                remote_addr: m.addr() + 6000,
                rkey: remote,
            },
        ),
        send_wr(
            3,
            &[sge(&m, 0, 2048)],
            SendOp::RdmaRead {
                remote_addr: m.addr() + 4096,
                rkey: remote,
            },
        ),
        send_wr(
            4,
            &[sge(&m, 2048, 8)],
            SendOp::AtomicFetchAndAdd {
                remote_addr: m.addr() + 7000,
                rkey: remote,
                add: 1,
            },
        ),
        send_wr(5, &[], SendOp::Send),
    ])
    .unwrap();
    assert!(drain(&mut scq).iter().all(|c| c.1 == WcStatus::Success));
    assert_eq!(poll_one(&mut rcq).wr_id, 2);
    let (qa, qb) = (a.query().unwrap(), b.query().unwrap());
    assert_eq!((qa.sq_psn, qb.rq_psn), (6, 6));
    // The other direction carried nothing.
    assert_eq!((qa.rq_psn, qb.sq_psn), (0x500, 0x500));
}

#[test]
fn a_psn_ahead_of_the_responder_retries_retry_cnt_times_then_fails_and_flushes() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let m = region(&pd, 8192, all_access());
    for retry_cnt in [0u8, 3, 7] {
        let (mut a, mut b) = pair(
            &pd,
            QpType::Rc,
            (&scq, &rcq),
            Link {
                sq_psn: 100,
                retry_cnt,
                ..Link::default()
            },
            Link {
                rq_psn: 50,
                ..Link::default()
            },
        );
        let an = a.qpn().raw();
        b.post_recv(&[recv(9, &[sge(&m, 0, 64)])]).unwrap();
        let sg = [sge(&m, 100, 8)];
        a.post_send(&[send_wr(1, &sg, SendOp::Send), send_wr(2, &sg, SendOp::Send)])
            .unwrap();
        assert_eq!(
            drain(&mut scq),
            [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)],
            "retry_cnt {retry_cnt}"
        );
        assert_eq!(retries(&hal, an), u64::from(retry_cnt));
        assert_eq!(a.query().unwrap().qp_state, QpState::Err);
        // Nothing reached b: its receive waits, its expected PSN did not move.
        assert!(drain(&mut rcq).is_empty());
        let qb = b.query().unwrap();
        assert_eq!((qb.qp_state, qb.rq_psn), (QpState::Rts, 50));
    }
}

#[test]
fn a_psn_behind_the_responder_is_acknowledged_but_not_delivered() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let (mut a, mut b) = pair(
        &pd,
        QpType::Rc,
        (&scq, &rcq),
        Link {
            sq_psn: 40,
            ..Link::default()
        },
        Link {
            rq_psn: 50,
            ..Link::default()
        },
    );
    let an = a.qpn().raw();
    let (src, dst) = (
        region(&pd, 8192, all_access()),
        region(&pd, 8192, all_access()),
    );
    src.buf().write_bytes(0, b"payload!").unwrap();
    dst.buf().write_bytes(512, b"remote--").unwrap();
    b.post_recv(&[recv(20, &[sge(&dst, 0, 64)])]).unwrap();
    let sg = [sge(&src, 0, 8)];
    // PSN 40: a WRITE the responder takes for a duplicate: acknowledged, not executed.
    a.post_send(&[send_wr(
        1,
        &sg,
        SendOp::RdmaWrite {
            remote_addr: dst.addr() + 256,
            rkey: dst.rkey().raw(),
        },
    )])
    .unwrap();
    assert_eq!(drain(&mut scq), [(1, WcStatus::Success)]);
    let mut got = [0u8; 8];
    dst.buf().read_bytes(256, &mut got).unwrap();
    assert_eq!(got, [0; 8], "a duplicate WRITE wrote");
    // PSN 41: a duplicate READ is executed again.
    a.post_send(&[send_wr(
        2,
        &[sge(&src, 1024, 8)],
        SendOp::RdmaRead {
            remote_addr: dst.addr() + 512,
            rkey: dst.rkey().raw(),
        },
    )])
    .unwrap();
    assert_eq!(drain(&mut scq), [(2, WcStatus::Success)]);
    src.buf().read_bytes(1024, &mut got).unwrap();
    assert_eq!(&got, b"remote--");
    // PSNs 42..=49: SENDs that complete at the sender and never arrive.
    let sends: Vec<_> = (3..11).map(|id| send_wr(id, &sg, SendOp::Send)).collect();
    a.post_send(&sends).unwrap();
    assert_eq!(drain(&mut scq).len(), 8);
    assert!(drain(&mut rcq).is_empty(), "a duplicate SEND was delivered");
    assert_eq!(b.query().unwrap().rq_psn, 50);
    // PSN 50 is the first the responder expects: delivered.
    a.post_send(&[send_wr(11, &sg, SendOp::Send)]).unwrap();
    assert_eq!(drain(&mut scq), [(11, WcStatus::Success)]);
    let r = poll_one(&mut rcq);
    assert_eq!((r.wr_id, r.status, r.byte_len), (20, WcStatus::Success, 8));
    dst.buf().read_bytes(0, &mut got).unwrap();
    assert_eq!(&got, b"payload!");
    assert_eq!(
        (a.query().unwrap().sq_psn, b.query().unwrap().rq_psn),
        (51, 51)
    );
    assert_eq!(retries(&hal, an), 0);
}

#[test]
fn uc_takes_a_message_with_an_unexpected_psn_and_resynchronises() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let m = region(&pd, 8192, all_access());
    // The sender ahead of the receiver, then behind it.
    for (sq_psn, rq_psn) in [(1000, 7), (5, 500)] {
        let (mut a, mut b) = pair(
            &pd,
            QpType::Uc,
            (&scq, &rcq),
            Link {
                sq_psn,
                ..Link::default()
            },
            Link {
                rq_psn,
                ..Link::default()
            },
        );
        b.post_recv(&[recv(1, &[sge(&m, 0, 4096)]), recv(2, &[sge(&m, 0, 4096)])])
            .unwrap();
        a.post_send(&[send_wr(1, &[sge(&m, 4096, 2500)], SendOp::Send)])
            .unwrap();
        assert_eq!(drain(&mut scq), [(1, WcStatus::Success)]);
        assert_eq!(poll_one(&mut rcq).byte_len, 2500);
        // Three packets at MTU 1024; the receiver now expects what follows them.
        assert_eq!(b.query().unwrap().rq_psn, sq_psn + 3);
        assert_eq!(a.query().unwrap().sq_psn, sq_psn + 3);
        a.post_send(&[send_wr(2, &[sge(&m, 4096, 10)], SendOp::Send)])
            .unwrap();
        assert_eq!(drain(&mut scq), [(2, WcStatus::Success)]);
        assert_eq!(poll_one(&mut rcq).wr_id, 2);
        assert_eq!(b.query().unwrap().rq_psn, sq_psn + 4);
    }
}

#[test]
fn no_responder_retries_retry_cnt_times_then_retry_exceeded() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let m = region(&pd, 8192, all_access());
    let sg = [sge(&m, 0, 8)];
    // A peer left in INIT, a UC peer (wrong type), a QP number nobody has, a LID nobody owns.
    let mut init_peer = new_qp(&pd, QpType::Rc, &scq, &rcq);
    init_peer.to_init(1, 0, all_access(), 0).unwrap();
    let uc_peer = new_qp(&pd, QpType::Uc, &scq, &rcq);
    let cases = [
        (Link::to(init_peer.qpn().raw()), 2u8),
        (Link::to(uc_peer.qpn().raw()), 4),
        (Link::to(0xf_fff0), 5),
        (
            Link {
                dlid: 99,
                ..Link::to(init_peer.qpn().raw())
            },
            1,
        ),
    ];
    for (link, retry_cnt) in cases {
        let mut a = new_qp(&pd, QpType::Rc, &scq, &rcq);
        up(&mut a, Link { retry_cnt, ..link });
        a.post_send(&[send_wr(1, &sg, SendOp::Send), send_wr(2, &sg, SendOp::Send)])
            .unwrap();
        // The first send and each retry wait out one ACK timeout.
        assert_eq!(
            after_timeouts(&hal, &mut scq),
            (
                vec![(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)],
                u32::from(retry_cnt) + 1
            )
        );
        assert_eq!(retries(&hal, a.qpn().raw()), u64::from(retry_cnt));
        assert_eq!(a.query().unwrap().qp_state, QpState::Err);
    }
}

#[test]
fn ack_timeout_zero_never_times_out_and_the_qp_can_still_be_destroyed() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let m = region(&pd, 8192, all_access());
    let sg = [sge(&m, 0, 8)];
    let mut a = new_qp(&pd, QpType::Rc, &scq, &rcq);
    up(
        &mut a,
        Link {
            timeout: 0,
            retry_cnt: 1,
            ..Link::to(0xf_fff0)
        },
    );
    let an = a.qpn().raw();
    a.post_send(&[send_wr(1, &sg, SendOp::Send), send_wr(2, &sg, SendOp::Send)])
        .unwrap();
    // Far longer than retry_cnt + 1 timeouts of any other setting: no retransmission ever
    // (timeout 0 is infinite), no completion, and the QP stays in RTS.
    for _ in 0..200 {
        hal.delay(std::time::Duration::from_secs(1));
        assert!(
            drain(&mut scq).is_empty(),
            "a request with timeout 0 completed"
        );
    }
    assert_eq!(retries(&hal, an), 0);
    assert_eq!(a.query().unwrap().qp_state, QpState::Rts);
    a.destroy().map_err(|(e, _)| e).unwrap();
    for _ in 0..10 {
        hal.relax();
    }
    assert!(drain(&mut scq).is_empty());
    // The device goes on working for everyone else.
    let (mut b, mut c) = pair(
        &pd,
        QpType::Rc,
        (&scq, &rcq),
        Link::default(),
        Link::default(),
    );
    c.post_recv(&[recv(7, &[sge(&m, 64, 8)])]).unwrap();
    b.post_send(&[send_wr(3, &sg, SendOp::Send)]).unwrap();
    assert_eq!(drain(&mut scq), [(3, WcStatus::Success)]);
    assert_eq!(poll_one(&mut rcq).wr_id, 7);
}

/// A UC or UD send error: the send queue goes to SQE, receives go on, SQE -> RTS resumes.
fn send_error_moves_an_unreliable_qp_to_sqe(t: QpType) {
    let hal = SimHal::synchronous();
    let m = hal.model();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let (mut a, mut b) = pair(&pd, t, (&scq, &rcq), Link::default(), Link::default());
    let (an, bn) = (a.qpn().raw(), b.qpn().raw());
    let mr = region(&pd, 8192, all_access());
    let dest = |qpn| {
        (t == QpType::Ud).then_some(common::ud_dest(
            &pd,
            AhAttr {
                dlid: 1,
                port_num: 1,
                ..AhAttr::default()
            },
            qpn,
            QKEY,
        ))
    };
    let to = |wr_id, sg, qpn| SendWr {
        ud: dest(qpn),
        ..send_wr(wr_id, sg, SendOp::Send)
    };
    let grh = if t == QpType::Ud { 40 } else { 0 };
    mr.buf().write_bytes(0, b"to a").unwrap();
    let good = [sge(&mr, 0, 4)];
    let bad = [Sge {
        lkey: common::stale_lkey(&pd),
        ..good[0]
    }];
    // A local protection error, and two requests behind it.
    a.post_send(&[to(1, &bad, bn), to(2, &good, bn), to(3, &good, bn)])
        .unwrap();
    assert_eq!(
        drain(&mut scq),
        [
            (1, WcStatus::LocProtErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr)
        ],
        "{t:?}"
    );
    // Posted before the user learns of it: flushed too.
    a.post_send(&[to(4, &good, bn)]).unwrap();
    assert_eq!(drain(&mut scq), [(4, WcStatus::WrFlushErr)]);
    assert_eq!(a.query().unwrap().qp_state, QpState::Sqe);
    assert_eq!(a.state(), QpState::Sqe);
    // The receive queue still works.
    a.post_recv(&[recv(10, &[sge(&mr, 1024, 512)])]).unwrap();
    b.post_send(&[to(11, &good, an)]).unwrap();
    assert_eq!(drain(&mut scq), [(11, WcStatus::Success)]);
    let r = poll_one(&mut rcq);
    assert_eq!(
        (r.wr_id, r.status, r.qp_num, r.byte_len),
        (10, WcStatus::Success, an, 4 + grh)
    );
    // SQE -> RTS with the state the query left: SQERR2RTS_QP, and sending works again.
    a.modify(
        &with(QpAttr::default(), |a| a.qp_state = QpState::Rts),
        QpAttrMask::STATE,
    )
    .unwrap();
    assert_eq!(m.trace().last().map(|e| e.opcode.0), Some(0x506));
    assert_eq!(a.query().unwrap().qp_state, QpState::Rts);
    b.post_recv(&[recv(20, &[sge(&mr, 2048, 512)])]).unwrap();
    a.post_send(&[to(21, &good, bn)]).unwrap();
    assert_eq!(drain(&mut scq), [(21, WcStatus::Success)]);
    assert_eq!(poll_one(&mut rcq).wr_id, 20);
    let mut got = [0u8; 4];
    mr.buf().read_bytes(2048 + grh as usize, &mut got).unwrap();
    assert_eq!(&got, b"to a");
}

#[test]
fn ud_send_error_moves_the_qp_to_sqe_and_back() {
    send_error_moves_an_unreliable_qp_to_sqe(QpType::Ud);
}

#[test]
fn uc_send_error_moves_the_qp_to_sqe_and_back() {
    send_error_moves_an_unreliable_qp_to_sqe(QpType::Uc);
}

#[test]
fn rc_send_error_still_moves_the_qp_to_err() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    // The peer must exist: a send error, not a missing responder.
    let (mut a, _b) = pair(
        &pd,
        QpType::Rc,
        (&scq, &rcq),
        Link::default(),
        Link::default(),
    );
    let mr = region(&pd, 8192, all_access());
    let good = [sge(&mr, 0, 4)];
    let bad = [Sge {
        lkey: common::stale_lkey(&pd),
        ..good[0]
    }];
    a.post_recv(&[recv(10, &good)]).unwrap();
    a.post_send(&[
        send_wr(1, &bad, SendOp::Send),
        send_wr(2, &good, SendOp::Send),
    ])
    .unwrap();
    assert_eq!(
        drain(&mut scq),
        [(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]
    );
    // The whole QP is in error: its receive is flushed, and there is no way back to RTS.
    assert_eq!(drain(&mut rcq), [(10, WcStatus::WrFlushErr)]);
    assert_eq!(a.query().unwrap().qp_state, QpState::Err);
    let e = a
        .modify(
            &with(QpAttr::default(), |a| {
                a.qp_state = QpState::Rts;
                a.cur_qp_state = QpState::Sqe;
            }),
            QpAttrMask::STATE | QpAttrMask::CUR_STATE,
        )
        .unwrap_err();
    assert!(matches!(e, Error::ModifyQp(_)), "{e:?}");
}

#[test]
fn sqd_is_refused_before_any_command() {
    let hal = SimHal::synchronous();
    let m = hal.model();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let mut a = new_qp(&pd, QpType::Rc, &cq, &cq);
    let an = a.qpn().raw();
    up(&mut a, Link::to(an));
    let unsupported = Error::InvalidArgument {
        what: Invalid::UnsupportedTransition,
    };
    let before = m.trace().len();
    // RTS -> SQD: valid for the kernel's table, impossible on mlx5.
    let mut to_sqd = QpAttr::default();
    to_sqd.qp_state = QpState::Sqd;
    assert_eq!(a.modify(&to_sqd, QpAttrMask::STATE), Err(unsupported));
    // SQD -> RTS and SQD -> SQD, claiming SQD as the current state.
    let from_sqd = |next| {
        with(QpAttr::default(), |a| {
            a.qp_state = next;
            a.cur_qp_state = QpState::Sqd;
        })
    };
    let mask = QpAttrMask::STATE | QpAttrMask::CUR_STATE;
    assert_eq!(a.modify(&from_sqd(QpState::Rts), mask), Err(unsupported));
    assert_eq!(
        a.modify(
            &from_sqd(QpState::Sqd),
            QpAttrMask::STATE | QpAttrMask::CUR_STATE
        ),
        Err(Error::ModifyQp(bareverbs::verbs::ModifyError::NotAllowed {
            attrs: QpAttrMask::CUR_STATE
        }))
    );
    assert_eq!(
        m.trace().len(),
        before,
        "a refused transition sent a command"
    );
    assert_eq!(a.state(), QpState::Rts);
    assert_eq!(a.query().unwrap().qp_state, QpState::Rts);
}

#[test]
fn receive_completions_carry_the_dlid_path_bits() {
    let cfg = ModelConfig {
        base_lid: 8,
        lmc: 2,
        num_ports: 2,
        ..ModelConfig::default()
    };
    let hal = SimHal::new(cfg, Drive::Synchronous);
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let ports = dev.ports();
    assert_eq!((ports[0].lid, ports[0].lmc), (8, 2));
    assert_eq!(ports[1].lid, 12);
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let m = region(&pd, 8192, all_access());
    let sg = [sge(&m, 0, 8)];
    // UD: the address handle picks the path bits.
    let mut a = new_qp(&pd, QpType::Ud, &scq, &rcq);
    let mut b = new_qp(&pd, QpType::Ud, &scq, &rcq);
    up(&mut a, Link::to(0));
    up(&mut b, Link::to(0));
    for dlid in [8u16, 9, 11] {
        b.post_recv(&[recv(u64::from(dlid), &[sge(&m, 1024, 128)])])
            .unwrap();
        a.post_send(&[SendWr {
            ud: Some(common::ud_dest(
                &pd,
                AhAttr {
                    dlid,
                    port_num: 1,
                    ..AhAttr::default()
                },
                b.qpn().raw(),
                QKEY,
            )),
            ..send_wr(1, &sg, SendOp::Send)
        }])
        .unwrap();
        assert_eq!(drain(&mut scq), [(1, WcStatus::Success)]);
        let r = poll_one(&mut rcq);
        assert_eq!(
            (r.wr_id, r.dlid_path_bits),
            (u64::from(dlid), (dlid - 8) as u8)
        );
    }
    // RC: the QP's path sets them.
    let (mut c, mut d) = pair(
        &pd,
        QpType::Rc,
        (&scq, &rcq),
        Link {
            dlid: 10,
            ..Link::default()
        },
        Link {
            dlid: 8,
            ..Link::default()
        },
    );
    let dn = d.qpn().raw();
    d.post_recv(&[recv(5, &[sge(&m, 1024, 128)])]).unwrap();
    c.post_send(&[send_wr(6, &sg, SendOp::Send)]).unwrap();
    assert_eq!(drain(&mut scq), [(6, WcStatus::Success)]);
    assert_eq!(poll_one(&mut rcq).dlid_path_bits, 2);
    // A LID past the port's range is nobody's.
    let mut e = new_qp(&pd, QpType::Rc, &scq, &rcq);
    up(
        &mut e,
        Link {
            dlid: 16,
            retry_cnt: 0,
            ..Link::to(dn)
        },
    );
    e.post_send(&[send_wr(7, &sg, SendOp::Send)]).unwrap();
    assert_eq!(
        after_timeouts(&hal, &mut scq),
        (vec![(7, WcStatus::RetryExcErr)], 1)
    );
}

#[test]
fn read_and_atomics_without_responder_resources_are_remote_invalid_requests() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let m = region(&pd, 8192, all_access());
    m.buf().write_bytes(512, b"readable").unwrap();
    let (raddr, rkey) = (m.addr() + 512, m.rkey().raw());
    let read = SendOp::RdmaRead {
        remote_addr: raddr,
        rkey,
    };
    let fetch_add = SendOp::AtomicFetchAndAdd {
        remote_addr: raddr,
        rkey,
        add: 1,
    };
    let write = SendOp::RdmaWrite {
        remote_addr: raddr,
        rkey,
    };
    let sg = [sge(&m, 0, 8)];
    for (op, resources) in [(read, 0u8), (fetch_add, 0), (read, 1)] {
        let (mut a, mut b) = pair(
            &pd,
            QpType::Rc,
            (&scq, &rcq),
            Link::default(),
            Link {
                max_dest_rd_atomic: resources,
                ..Link::default()
            },
        );
        // The responder reports only remote write enabled, as mlx5_ib does.
        let expect = if resources == 0 {
            AccessFlags::REMOTE_WRITE
        } else {
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC
        };
        assert_eq!(b.query().unwrap().qp_access_flags, expect);
        // WRITE needs no responder resources.
        a.post_send(&[send_wr(1, &[sge(&m, 512, 8)], write)])
            .unwrap();
        assert_eq!(drain(&mut scq), [(1, WcStatus::Success)]);
        a.post_send(&[send_wr(2, &sg, op), send_wr(3, &sg, SendOp::Send)])
            .unwrap();
        let got = drain(&mut scq);
        if resources == 0 {
            assert_eq!(
                got,
                [(2, WcStatus::RemInvReqErr), (3, WcStatus::WrFlushErr)]
            );
            assert_eq!(a.query().unwrap().qp_state, QpState::Err);
        } else {
            assert_eq!(got[0], (2, WcStatus::Success));
        }
    }
}

#[test]
fn a_message_over_the_qps_limit_fails_locally() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let max = dev.info().caps.max_msg_size;
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let (mut a, mut b) = pair(
        &pd,
        QpType::Rc,
        (&scq, &rcq),
        Link::default(),
        Link::default(),
    );
    let m = region(&pd, 8192, all_access());
    let len = u32::try_from(max + 1).unwrap();
    a.post_send(&[send_wr(
        1,
        &[sge(&m, 0, len)],
        SendOp::RdmaRead {
            remote_addr: m.addr(),
            rkey: m.rkey().raw(),
        },
    )])
    .unwrap();
    assert_eq!(drain(&mut scq), [(1, WcStatus::LocLenErr)]);
    assert_eq!(b.query().unwrap().rq_psn, 0x10, "it went on the wire");
}

#[test]
fn rnr_retries_wait_out_the_responders_rnr_timer() {
    // A SEND that finds no receive is NAKed with the responder's min_rnr_timer and goes again
    // only once it has run out (IBA table 45: 1 is 0.01 ms, 14 is 1.28 ms, 20 is 10.24 ms),
    // however early the receive is posted.
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
    let m = region(&pd, 8192, all_access());
    let one = [sge(&m, 0, 8)];
    for (timer, us) in [(1u8, 10u64), (14, 1280), (20, 10240)] {
        let responder = Link {
            min_rnr_timer: timer,
            ..Link::default()
        };
        let (mut a, mut b) = pair(&pd, QpType::Rc, (&scq, &rcq), Link::default(), responder);
        a.post_send(&[send_wr(1, &one, SendOp::Send)]).unwrap();
        b.post_recv(&[recv(2, &one)]).unwrap();
        hal.delay(std::time::Duration::from_micros(us - 5));
        assert!(
            drain(&mut scq).is_empty(),
            "timer {timer}: sent again too early"
        );
        hal.delay(std::time::Duration::from_micros(10));
        assert_eq!(drain(&mut scq), [(1, WcStatus::Success)], "timer {timer}");
        assert_eq!(poll_one(&mut rcq).wr_id, 2);
    }
}
