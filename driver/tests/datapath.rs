//! The data path end to end against the model: QPs of one HCA talk to each other; every test
//! checks what a user sees (completions, statuses, byte counts, buffer contents, QP state).

use bareverbs::verbs::QpState;
use bareverbs::verbs::*;
use std::time::Duration;

use bareverbs::{Config, Device, Error};
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;

mod common;
use common::{cap, poll_one, region, send_wr, sge, with, with_ud_pair, PairAttr, UdPair};

const PSN: u32 = 0x10;

fn to_rts<H: Hal>(q: &mut Qp<'_, '_, H>, peer: u32, rnr_retry: u8) {
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    q.to_init(1, 0, access, 0).unwrap();
    q.to_rtr(
        peer,
        PSN,
        AhAttr {
            dlid: 1,
            port_num: 1,
            ..AhAttr::default()
        },
        Mtu::Mtu1024,
    )
    .unwrap();
    let mut attr = QpAttr::default();
    attr.qp_state = QpState::Rts;
    attr.sq_psn = PSN;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = rnr_retry;
    attr.max_rd_atomic = 1;
    let mask = QpAttrMask::STATE
        | QpAttrMask::SQ_PSN
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    q.modify(&attr, mask).unwrap();
}

fn connect<H: Hal>(a: &mut Qp<'_, '_, H>, b: &mut Qp<'_, '_, H>, rnr_retry: u8) {
    let (an, bn) = (a.qpn().raw(), b.qpn().raw());
    to_rts(a, bn, rnr_retry);
    to_rts(b, an, rnr_retry);
}

#[test]
fn rc_send_write_read_atomics_and_inline() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let init = |t| QpInitAttr::new(t, &scq, &rcq, cap(16, 2, 128));
    let mut a = pd.create_qp(&init(QpType::Rc)).unwrap();
    let mut b = pd.create_qp(&init(QpType::Rc)).unwrap();
    connect(&mut a, &mut b, 7);
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let src = region(&pd, 8192, all);
    let dst = region(&pd, 8192, all);
    src.buf().write_bytes(0, b"hello, verbs! ").unwrap();
    src.buf().write_bytes(4096, b"second sge").unwrap();

    // SEND with two SGEs into a receive with two SGEs, across a page boundary.
    b.post_recv(&[RecvWr {
        wr_id: 0xb1,
        sg_list: &[sge(&dst, 4090, 10), sge(&dst, 5000, 100)],
    }])
    .unwrap();
    let sg = [sge(&src, 0, 14), sge(&src, 4096, 10)];
    a.post_send(&[send_wr(0xa1, &sg, SendOp::Send)]).unwrap();
    let s = poll_one(&mut scq);
    assert_eq!(
        (s.wr_id, s.status, s.opcode, s.qp_num),
        (0xa1, WcStatus::Success, WcOpcode::Send, a.qpn().raw())
    );
    let r = poll_one(&mut rcq);
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len, r.qp_num, r.src_qp),
        (
            0xb1,
            WcStatus::Success,
            WcOpcode::Recv,
            24,
            b.qpn().raw(),
            a.qpn().raw()
        )
    );
    let mut got = [0u8; 24];
    dst.buf().read_bytes(4090, &mut got[..10]).unwrap();
    dst.buf().read_bytes(5000, &mut got[10..]).unwrap();
    assert_eq!(&got, b"hello, verbs! second sge");

    // SEND with immediate, inline.
    b.post_recv(&[RecvWr {
        wr_id: 0xb2,
        sg_list: &[sge(&dst, 0, 256)],
    }])
    .unwrap();
    let inline = [0x5au8; 100];
    a.post_send(&[SendWr {
        wr_id: 0xa2,
        sg_list: &[],
        inline_data: &inline,
        op: SendOp::SendWithImm(0x1234_5678),
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ud: None,
    }])
    .unwrap();
    assert_eq!(poll_one(&mut scq).wr_id, 0xa2);
    let r = poll_one(&mut rcq);
    assert_eq!(
        (r.wr_id, r.byte_len, r.imm_data, r.wc_flags),
        (0xb2, 100, 0x1234_5678, WcFlags::WITH_IMM)
    );
    let mut got = [0u8; 100];
    dst.buf().read_bytes(0, &mut got).unwrap();
    assert_eq!(got, inline);

    // RDMA WRITE: data lands, no receive consumed; with immediate it consumes one.
    a.post_send(&[send_wr(
        0xa3,
        &[sge(&src, 0, 5)],
        SendOp::RdmaWrite {
            remote_addr: dst.addr() + 7000,
            rkey: dst.rkey().raw(),
        },
    )])
    .unwrap();
    assert_eq!(poll_one(&mut scq).opcode, WcOpcode::RdmaWrite);
    let mut got = [0u8; 5];
    dst.buf().read_bytes(7000, &mut got).unwrap();
    assert_eq!(&got, b"hello");
    assert_eq!(rcq.poll(&mut [Wc::EMPTY; 4]), 0);
    b.post_recv(&[RecvWr {
        wr_id: 0xb3,
        sg_list: &[],
    }])
    .unwrap();
    a.post_send(&[send_wr(
        0xa4,
        &[sge(&src, 7, 6)],
        SendOp::RdmaWriteWithImm {
            remote_addr: dst.addr() + 7100,
            rkey: dst.rkey().raw(),
            imm: 99,
        },
    )])
    .unwrap();
    poll_one(&mut scq);
    let r = poll_one(&mut rcq);
    assert_eq!(
        (r.wr_id, r.opcode, r.imm_data, r.byte_len),
        (0xb3, WcOpcode::RecvRdmaWithImm, 99, 6)
    );

    // RDMA READ back what was written.
    a.post_send(&[send_wr(
        0xa5,
        &[sge(&src, 2000, 5)],
        SendOp::RdmaRead {
            remote_addr: dst.addr() + 7000,
            rkey: dst.rkey().raw(),
        },
    )])
    .unwrap();
    let s = poll_one(&mut scq);
    assert_eq!(
        (s.wr_id, s.opcode, s.byte_len),
        (0xa5, WcOpcode::RdmaRead, 5)
    );
    let mut got = [0u8; 5];
    src.buf().read_bytes(2000, &mut got).unwrap();
    assert_eq!(&got, b"hello");

    // Atomics: fetch-and-add, then a compare-and-swap that matches and one that does not. The
    // target and the returned value are in the host's byte order (IB semantics; the driver
    // set the device's atomic requests to host endianness, as Linux does).
    dst.buf().write_bytes(512, &40u64.to_ne_bytes()).unwrap();
    let res = [sge(&src, 3000, 8)];
    let (remote_addr, rkey) = (dst.addr() + 512, dst.rkey().raw());
    // (operation, opcode reported, value returned, value left)
    let steps = [
        (
            SendOp::AtomicFetchAndAdd {
                remote_addr,
                rkey,
                add: 2,
            },
            WcOpcode::FetchAdd,
            40,
            42,
        ),
        (
            SendOp::AtomicCmpAndSwp {
                remote_addr,
                rkey,
                compare: 42,
                swap: 7,
            },
            WcOpcode::CompSwap,
            42,
            7,
        ),
        (
            SendOp::AtomicCmpAndSwp {
                remote_addr,
                rkey,
                compare: 42,
                swap: 9,
            },
            WcOpcode::CompSwap,
            7,
            7,
        ),
    ];
    for (k, (op, opcode, returned, left)) in steps.into_iter().enumerate() {
        a.post_send(&[send_wr(k as u64 + 1, &res, op)]).unwrap();
        assert_eq!(
            (
                poll_one(&mut scq).opcode,
                src.buf().read_ne64(3000),
                dst.buf().read_ne64(512)
            ),
            (opcode, returned, left),
            "step {k}"
        );
    }

    // Unsignaled requests complete silently; the signaled one after them frees their room.
    for round in 0..4 {
        let one = [sge(&src, 0, 1)];
        let mut wrs = [send_wr(
            0,
            &one,
            SendOp::RdmaWrite {
                remote_addr: dst.addr(),
                rkey: dst.rkey().raw(),
            },
        ); 15];
        for w in wrs.iter_mut().take(14) {
            w.flags = SendFlags::empty();
        }
        wrs[14].wr_id = 100 + round;
        a.post_send(&wrs).unwrap();
        let s = poll_one(&mut scq);
        assert_eq!(s.wr_id, 100 + round);
        assert_eq!(scq.poll(&mut [Wc::EMPTY; 4]), 0);
    }
}

#[test]
fn bad_requests_stop_at_their_index_and_nothing_is_sent() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mut cq = dev.create_cq(64).unwrap();
    let init = |t| {
        with(QpInitAttr::new(t, &cq, &cq, cap(16, 2, 128)), |a| {
            a.sq_sig_all = true
        })
    };
    let mut a = pd.create_qp(&init(QpType::Rc)).unwrap();
    let mut b = pd.create_qp(&init(QpType::Rc)).unwrap();
    let mr = region(&pd, 4096, AccessFlags::LOCAL_WRITE);
    let one = [sge(&mr, 0, 8)];
    // Not in RTS yet.
    let e = a.post_send(&[send_wr(1, &one, SendOp::Send)]).unwrap_err();
    assert_eq!(e.index, 0);
    assert!(matches!(e.error, Error::InvalidArgument { .. }));
    // Receives before INIT are refused too.
    assert!(b
        .post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &one
        }])
        .is_err());
    connect(&mut a, &mut b, 0);
    b.post_recv(&[
        RecvWr {
            wr_id: 1,
            sg_list: &one,
        },
        RecvWr {
            wr_id: 2,
            sg_list: &one,
        },
    ])
    .unwrap();
    // The third request has more SGEs than the QP reports: two are posted, index 2 is reported.
    let too_many: Vec<Sge> = (0..=a.cap().max_send_sge)
        .map(|k| sge(&mr, u64::from(k), 1))
        .collect();
    let wrs = [
        send_wr(10, &one, SendOp::Send),
        send_wr(11, &one, SendOp::Send),
        send_wr(12, &too_many, SendOp::Send),
    ];
    let e = a.post_send(&wrs).unwrap_err();
    assert_eq!(e.index, 2);
    let mut wc = [Wc::EMPTY; 8];
    let n = cq.poll(&mut wc);
    let mut ids: Vec<u64> = wc[..n].iter().map(|w| w.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 10, 11]);
    // UD-only and connected-only fields, opcodes the type lacks, oversize inline.
    let big = [0u8; 1024];
    let inl = SendWr {
        wr_id: 0,
        sg_list: &[],
        inline_data: &big,
        op: SendOp::Send,
        flags: SendFlags::INLINE,
        ud: None,
    };
    assert!(matches!(
        a.post_send(&[inl]).unwrap_err().error,
        Error::InvalidArgument { .. }
    ));
    // A full send queue is back-pressure, not an error of the QP.
    let mut posted = 0;
    let e = loop {
        let w = SendWr {
            flags: SendFlags::empty(),
            ..send_wr(
                0,
                &one,
                SendOp::RdmaWrite {
                    remote_addr: mr.addr(),
                    rkey: 0,
                },
            )
        };
        // rkey 0 is never valid, but a failed request would stop the queue: post to b's peer
        // only after filling; here nothing is rung until the queue fills.
        match a.post_send(&[SendWr {
            op: SendOp::Send,
            ..w
        }]) {
            Ok(()) => posted += 1,
            Err(e) => break e,
        }
        assert!(posted < 100);
    };
    assert_eq!(e.error, Error::QueueFull);
}

#[test]
fn errors_flush_outstanding_requests() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let mut init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(16, 2, 128));
    init.sq_sig_all = true;
    let [mut a, mut b, mut c, mut d, mut e, mut f] = [(); 6].map(|()| pd.create_qp(&init).unwrap());
    connect(&mut a, &mut b, 0);
    connect(&mut c, &mut d, 0);
    connect(&mut e, &mut f, 0);
    let mr = region(
        &pd,
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    );
    let one = [sge(&mr, 0, 8)];

    // No receive posted and rnr_retry 0: RNR retries exceeded, the QP goes to ERR and the
    // requests behind it are flushed.
    let wrs = [
        send_wr(1, &one, SendOp::Send),
        send_wr(2, &one, SendOp::Send),
        send_wr(3, &one, SendOp::Send),
    ];
    a.post_send(&wrs).unwrap();
    let mut wc = [Wc::EMPTY; 8];
    let n = scq.poll(&mut wc);
    let got: Vec<(u64, WcStatus)> = wc[..n].iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::RnrRetryExcErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(a.query().unwrap().qp_state, QpState::Err);

    // Remote access error: writing a region that only allows remote read.
    c.post_send(&[send_wr(
        7,
        &one,
        SendOp::RdmaWrite {
            remote_addr: mr.addr(),
            rkey: mr.rkey().raw(),
        },
    )])
    .unwrap();
    let s = poll_one(&mut scq);
    assert_eq!(
        (s.wr_id, s.status, s.opcode),
        (7, WcStatus::RemAccessErr, WcOpcode::RdmaWrite)
    );

    // Receives outstanding when the QP is moved to ERR come back flushed, with their ids.
    d.post_recv(&[
        RecvWr {
            wr_id: 21,
            sg_list: &one,
        },
        RecvWr {
            wr_id: 22,
            sg_list: &one,
        },
    ])
    .unwrap();
    d.modify(
        &with(QpAttr::default(), |a| a.qp_state = QpState::Err),
        QpAttrMask::STATE,
    )
    .unwrap();
    let n = rcq.poll(&mut wc);
    let got: Vec<(u64, WcStatus)> = wc[..n].iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        [(21, WcStatus::WrFlushErr), (22, WcStatus::WrFlushErr)]
    );

    // A receive too small for the message: local length error at the responder, remote
    // invalid request at the requester.
    f.post_recv(&[RecvWr {
        wr_id: 31,
        sg_list: &[sge(&mr, 0, 4)],
    }])
    .unwrap();
    e.post_send(&[send_wr(30, &one, SendOp::Send)]).unwrap();
    assert_eq!(poll_one(&mut rcq).status, WcStatus::LocLenErr);
    assert_eq!(poll_one(&mut scq).status, WcStatus::RemInvReqErr);
}

#[test]
fn ud_checks_the_qkey_and_leaves_room_for_the_grh() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let attr = PairAttr {
        sq_sig_all: true,
        access: AccessFlags::LOCAL_WRITE,
        qkey: 0x1111,
        ..PairAttr::new(cap(16, 2, 128))
    };
    with_ud_pair(
        &dev,
        attr,
        |UdPair {
             a,
             b,
             scq,
             rcq,
             mr,
             pd,
             ..
         }| {
            mr.buf().write_bytes(2048, b"datagram").unwrap();
            b.post_recv(&[RecvWr {
                wr_id: 5,
                sg_list: &[sge(mr, 0, 40 + 64)],
            }])
            .unwrap();
            let dest = |qkey| {
                Some(common::ud_dest(
                    pd,
                    AhAttr {
                        dlid: 1,
                        sl: 2,
                        port_num: 1,
                        ..AhAttr::default()
                    },
                    b.qpn().raw(),
                    qkey,
                ))
            };
            let sg = [sge(mr, 2048, 8)];
            // Wrong Q_Key: dropped at the receiver, success at the sender.
            a.post_send(&[SendWr {
                ud: dest(0x2222),
                ..send_wr(4, &sg, SendOp::Send)
            }])
            .unwrap();
            assert_eq!(poll_one(scq).status, WcStatus::Success);
            assert_eq!(rcq.poll(&mut [Wc::EMPTY; 2]), 0);
            a.post_send(&[SendWr {
                ud: dest(0x1111),
                ..send_wr(6, &sg, SendOp::Send)
            }])
            .unwrap();
            poll_one(scq);
            let r = poll_one(rcq);
            assert_eq!(
                (r.wr_id, r.byte_len, r.src_qp, r.sl),
                (5, 48, a.qpn().raw(), 2)
            );
            let mut got = [0u8; 8];
            mr.buf().read_bytes(40, &mut got).unwrap();
            assert_eq!(&got, b"datagram");
            // RDMA on UD is refused before posting.
            let e = a
                .post_send(&[SendWr {
                    ud: dest(0x1111),
                    ..send_wr(
                        0,
                        &sg,
                        SendOp::RdmaWrite {
                            remote_addr: 0,
                            rkey: 0,
                        },
                    )
                }])
                .unwrap_err();
            assert!(matches!(e.error, Error::InvalidArgument { .. }));
        },
    );
}

#[test]
fn rc_and_ud_between_two_hcas_on_a_fabric() {
    use bareverbs_model::{Drive, Fabric, ModelConfig};
    for drive in [Drive::Synchronous, Drive::Background] {
        let fabric = Fabric::new();
        let cfg = |lid, guid| ModelConfig {
            base_lid: lid,
            node_guid: guid,
            ..ModelConfig::default()
        };
        let (h1, h2) = (
            SimHal::on_fabric(cfg(1, 0x10), drive, &fabric),
            SimHal::on_fabric(cfg(17, 0x20), drive, &fabric),
        );
        let (d1, d2) = (
            Device::bring_up(&h1, Config::default()).unwrap(),
            Device::bring_up(&h2, Config::default()).unwrap(),
        );
        assert_eq!(d2.ports()[0].lid, 17);
        let (p1, p2) = (d1.alloc_pd().unwrap(), d2.alloc_pd().unwrap());
        let (mut c1, mut c2) = (d1.create_cq(64).unwrap(), d2.create_cq(64).unwrap());
        let mut a = p1
            .create_qp(&with(
                QpInitAttr::new(QpType::Rc, &c1, &c1, cap(16, 2, 128)),
                |a| a.sq_sig_all = true,
            ))
            .unwrap();
        let mut b = p2
            .create_qp(&with(
                QpInitAttr::new(QpType::Rc, &c2, &c2, cap(16, 2, 128)),
                |a| a.sq_sig_all = true,
            ))
            .unwrap();
        let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let m1 = p1
            .reg_mr(h1.dma_alloc(4096, 4096).unwrap().share(), all)
            .map_err(|(e, _)| e)
            .unwrap();
        let m2 = p2
            .reg_mr(h2.dma_alloc(4096, 4096).unwrap().share(), all)
            .map_err(|(e, _)| e)
            .unwrap();
        let (an, bn) = (a.qpn().raw(), b.qpn().raw());
        for (q, peer, dlid) in [(&mut a, bn, 17), (&mut b, an, 1)] {
            q.to_init(1, 0, all, 0).unwrap();
            q.to_rtr(
                peer,
                PSN,
                AhAttr {
                    dlid,
                    port_num: 1,
                    ..AhAttr::default()
                },
                Mtu::Mtu1024,
            )
            .unwrap();
            q.to_rts(PSN).unwrap();
        }
        m1.buf().write_bytes(0, b"across the fabric").unwrap();
        b.post_recv(&[RecvWr {
            wr_id: 2,
            sg_list: &[sge(&m2, 0, 64)],
        }])
        .unwrap();
        a.post_send(&[send_wr(1, &[sge(&m1, 0, 17)], SendOp::Send)])
            .unwrap();
        let wait = |cq: &mut Cq<'_, &SimHal>| {
            let mut wc = [Wc::EMPTY; 1];
            for _ in 0..2_000_000 {
                if cq.poll(&mut wc) == 1 {
                    return wc[0];
                }
                std::thread::yield_now();
            }
            panic!("no completion ({drive:?})");
        };
        let s = wait(&mut c1);
        assert_eq!((s.wr_id, s.status), (1, WcStatus::Success));
        let r = wait(&mut c2);
        assert_eq!(
            (r.wr_id, r.byte_len, r.src_qp, r.slid),
            (2, 17, a.qpn().raw(), 1)
        );
        let mut got = [0u8; 17];
        m2.buf().read_bytes(0, &mut got).unwrap();
        assert_eq!(&got, b"across the fabric");
        // RDMA READ of the other HCA's memory.
        m2.buf().write_bytes(100, b"remote").unwrap();
        a.post_send(&[send_wr(
            3,
            &[sge(&m1, 200, 6)],
            SendOp::RdmaRead {
                remote_addr: m2.addr() + 100,
                rkey: m2.rkey().raw(),
            },
        )])
        .unwrap();
        assert_eq!(wait(&mut c1).byte_len, 6);
        let mut got = [0u8; 6];
        m1.buf().read_bytes(200, &mut got).unwrap();
        assert_eq!(&got, b"remote");
        // The ports' counters (what the performance management agent reports through
        // MAD_IFC): the SEND's 17 bytes and the READ request went out of HCA 1, the READ
        // response's 6 bytes came back; HCA 2 saw the mirror image.
        let counters = |h: &SimHal| h.model().with(|m| m.port_counters(1)).unwrap();
        let (k1, k2) = (counters(&h1), counters(&h2));
        assert_eq!(
            (k1.xmit_bytes, k1.xmit_packets, k1.rcv_bytes, k1.rcv_packets),
            (17, 2, 6, 1),
            "{drive:?}"
        );
        assert_eq!(
            (k2.xmit_bytes, k2.xmit_packets, k2.rcv_bytes, k2.rcv_packets),
            (6, 1, 17, 2),
            "{drive:?}"
        );
        // A LID nobody owns: transport retries exceeded.
        let mut x = p1
            .create_qp(&with(
                QpInitAttr::new(QpType::Rc, &c1, &c1, cap(16, 2, 128)),
                |a| a.sq_sig_all = true,
            ))
            .unwrap();
        x.to_init(1, 0, all, 0).unwrap();
        x.to_rtr(
            b.qpn().raw(),
            PSN,
            AhAttr {
                dlid: 99,
                port_num: 1,
                ..AhAttr::default()
            },
            Mtu::Mtu1024,
        )
        .unwrap();
        x.to_rts(PSN).unwrap();
        x.post_send(&[send_wr(4, &[sge(&m1, 0, 1)], SendOp::Send)])
            .unwrap();
        // Eight ACK timeouts of 4.096 µs << 14 (the first send and seven retries).
        let mut wc = [Wc::EMPTY; 1];
        let mut waited = 0;
        while c1.poll(&mut wc) == 0 {
            assert!(waited < 20, "no completion ({drive:?})");
            h1.delay(Duration::from_micros(67_200));
            waited += 1;
        }
        assert_eq!(wc[0].status, WcStatus::RetryExcErr);
    }
}

#[test]
fn rnr_waits_then_delivers_and_bad_keys_and_destroy_with_work_outstanding() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let mut init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(16, 2, 128));
    init.sq_sig_all = true;
    let [mut a, mut b, mut c, mut d] = [(); 4].map(|()| pd.create_qp(&init).unwrap());
    connect(&mut a, &mut b, 7);
    connect(&mut c, &mut d, 3);
    let mr = region(&pd, 4096, AccessFlags::LOCAL_WRITE);
    let one = [sge(&mr, 0, 8)];

    // rnr_retry 7: the SEND waits for a receive, then goes again once the responder's RNR
    // timer has run out (min_rnr_timer 12, 0.64 ms, as `to_rtr` sets it) and completes.
    a.post_send(&[send_wr(1, &one, SendOp::Send)]).unwrap();
    assert_eq!(scq.poll(&mut [Wc::EMPTY; 2]), 0);
    b.post_recv(&[RecvWr {
        wr_id: 2,
        sg_list: &one,
    }])
    .unwrap();
    hal.delay(Duration::from_micros(600));
    assert_eq!(
        scq.poll(&mut [Wc::EMPTY; 2]),
        0,
        "still inside the RNR timer"
    );
    hal.delay(Duration::from_micros(50));
    assert_eq!(poll_one(&mut scq).wr_id, 1);
    assert_eq!(poll_one(&mut rcq).wr_id, 2);

    // rnr_retry 3: three retries, one RNR timer apart; the third is NAKed too and the
    // request completes with RNR retries exceeded.
    c.post_send(&[send_wr(3, &one, SendOp::Send)]).unwrap();
    for _ in 0..2 {
        hal.delay(Duration::from_micros(650));
        assert_eq!(scq.poll(&mut [Wc::EMPTY; 2]), 0);
    }
    hal.delay(Duration::from_micros(650));
    assert_eq!(poll_one(&mut scq).status, WcStatus::RnrRetryExcErr);

    // A local key that does not exist: local protection error.
    b.post_recv(&[RecvWr {
        wr_id: 4,
        sg_list: &one,
    }])
    .unwrap();
    let bad = [Sge {
        lkey: common::stale_lkey(&pd),
        ..one[0]
    }];
    a.post_send(&[send_wr(5, &bad, SendOp::Send)]).unwrap();
    assert_eq!(poll_one(&mut scq).status, WcStatus::LocProtErr);

    // Destroying a QP with receives outstanding produces no completions.
    d.post_recv(&[
        RecvWr {
            wr_id: 9,
            sg_list: &one,
        },
        RecvWr {
            wr_id: 10,
            sg_list: &one,
        },
    ])
    .unwrap();
    let before = rcq.poll(&mut [Wc::EMPTY; 8]);
    d.destroy().map_err(|(e, _)| e).unwrap();
    assert_eq!(
        rcq.poll(&mut [Wc::EMPTY; 8]),
        0,
        "({before} were pending before)"
    );

    // Address handles check their attributes.
    assert!(pd
        .create_ah(AhAttr {
            dlid: 1,
            port_num: 3,
            ..AhAttr::default()
        })
        .is_err());
    assert!(pd
        .create_ah(AhAttr {
            dlid: 0,
            port_num: 1,
            ..AhAttr::default()
        })
        .is_err());
    let ah = pd
        .create_ah(AhAttr {
            dlid: 1,
            sl: 4,
            port_num: 1,
            ..AhAttr::default()
        })
        .unwrap();
    assert_eq!(ah.dest(7, 8).unwrap().ah().sl, 4);
}

#[test]
fn resize_cq_keeps_unpolled_completions_in_order() {
    let hal = SimHal::synchronous();
    let m = hal.model();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(4).unwrap(), dev.create_cq(4).unwrap());
    assert_eq!(scq.capacity(), 8);
    let mut init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(16, 2, 128));
    init.sq_sig_all = true;
    let mut a = pd.create_qp(&init).unwrap();
    let mut b = pd.create_qp(&init).unwrap();
    connect(&mut a, &mut b, 7);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr = region(&pd, 8192, access);
    let sg = [sge(&mr, 0, 64)];
    let write = SendOp::RdmaWrite {
        remote_addr: mr.addr() + 4096,
        rkey: mr.rkey().raw(),
    };
    let next = std::cell::Cell::new(0u64);
    let post = |a: &mut Qp<'_, '_, &SimHal>, n: u64| {
        let first = next.get();
        let wrs: Vec<_> = (first..first + n)
            .map(|id| send_wr(id, &sg, write))
            .collect();
        a.post_send(&wrs).unwrap();
        next.set(first + n);
    };
    let poll_ids = |cq: &mut Cq<'_, &SimHal>, n: usize| -> Vec<u64> {
        let mut wc = vec![Wc::EMPTY; n];
        let got = cq.poll(&mut wc);
        assert!(wc[..got].iter().all(|w| w.status == WcStatus::Success));
        wc[..got].iter().map(|w| w.wr_id).collect()
    };

    // Seven completions wait (the ring is nearly full); two are polled; grow to 100.
    post(&mut a, 7);
    assert_eq!(poll_ids(&mut scq, 2), [0, 1]);
    // Asking for fewer entries than wait is refused and changes nothing.
    let before = m.trace().len();
    assert!(matches!(
        scq.resize(3),
        Err(Error::InvalidArgument {
            what: bareverbs::Invalid::FewerEntriesThanUnpolled
        })
    ));
    assert_eq!(m.trace().len(), before, "no command for a refused resize");
    scq.resize(100).unwrap();
    assert_eq!(scq.capacity(), 128);
    assert_eq!(m.with(|h| h.cq_log_size(scq.cqn().raw())), Some(7));
    // The five that waited come first, then new ones land in the new ring.
    post(&mut a, 10);
    assert_eq!(poll_ids(&mut scq, 20), (2..17).collect::<Vec<_>>());
    // Many passes over the new ring keep the owner bit right.
    for _ in 0..30 {
        post(&mut a, 10);
        assert_eq!(poll_ids(&mut scq, 10).len(), 10);
    }
    // Shrink with completions waiting that fit, and again when empty.
    post(&mut a, 3);
    scq.resize(6).unwrap();
    assert_eq!(scq.capacity(), 8);
    post(&mut a, 2);
    assert_eq!(
        poll_ids(&mut scq, 10),
        (next.get() - 5..next.get()).collect::<Vec<_>>()
    );
    scq.resize(6).unwrap(); // the same size: nothing to do
    assert!(matches!(
        scq.resize(0),
        Err(Error::InvalidArgument {
            what: bareverbs::Invalid::ZeroEntries
        })
    ));
    assert!(matches!(
        scq.resize(u32::MAX),
        Err(Error::ExceedsLimit { .. })
    ));
    post(&mut a, 7);
    assert_eq!(
        poll_ids(&mut scq, 7),
        (next.get() - 7..next.get()).collect::<Vec<_>>()
    );
    assert!(m.dma_faults().is_empty());
    let _ = &mut rcq;
}

#[test]
fn completions_of_qps_sharing_a_cq_keep_their_order_and_wr_ids() {
    // Three RC pairs: the senders share one send CQ, the receivers one receive CQ. Requests go
    // round-robin first (consecutive CQEs alternate QPs), then in runs from one QP.
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let mut init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(16, 2, 128));
    init.sq_sig_all = true;
    let mut tx: Vec<_> = (0..3).map(|_| pd.create_qp(&init).unwrap()).collect();
    let mut rx: Vec<_> = (0..3).map(|_| pd.create_qp(&init).unwrap()).collect();
    for (a, b) in tx.iter_mut().zip(rx.iter_mut()) {
        connect(a, b, 7);
    }
    let mr = region(&pd, 4096, AccessFlags::LOCAL_WRITE);
    let order: Vec<usize> = [0, 1, 2, 0, 1, 2, 0, 0, 0, 2, 2, 1].to_vec();
    let mut sent = Vec::new();
    let mut received = Vec::new();
    for (i, &k) in order.iter().enumerate() {
        let id = 0x100 * k as u64 + i as u64;
        let rsg = [sge(&mr, 64 * i as u64, 64)];
        rx[k]
            .post_recv(&[RecvWr {
                wr_id: id | 0x8000,
                sg_list: &rsg,
            }])
            .unwrap();
        let sg = [sge(&mr, 2048, 16)];
        tx[k].post_send(&[send_wr(id, &sg, SendOp::Send)]).unwrap();
        sent.push((tx[k].qpn().raw(), id));
        received.push((rx[k].qpn().raw(), id | 0x8000));
    }
    // Polled in slices of varying length, runs and QP changes fall anywhere in a slice.
    for (cq, want) in [(&mut scq, &sent), (&mut rcq, &received)] {
        let mut got = Vec::new();
        for len in [1, 2, 5, 3, 8].iter().cycle() {
            let mut wc = vec![Wc::EMPTY; *len];
            let n = cq.poll(&mut wc);
            for w in &wc[..n] {
                assert_eq!(w.status, WcStatus::Success);
                got.push((w.qp_num, w.wr_id));
            }
            if n == 0 {
                break;
            }
        }
        assert_eq!(&got, want);
    }
    // Every queue is free again: each takes as many requests as it holds.
    for (a, b) in tx.iter_mut().zip(rx.iter_mut()) {
        let sg = [sge(&mr, 0, 8)];
        let rsg = [sge(&mr, 1024, 8)];
        let rwrs = vec![
            RecvWr {
                wr_id: 1,
                sg_list: &rsg
            };
            b.cap().max_recv_wr as usize
        ];
        b.post_recv(&rwrs).unwrap();
        let wrs = vec![send_wr(2, &sg, SendOp::Send); a.cap().max_send_wr as usize];
        a.post_send(&wrs).unwrap();
    }
}

#[test]
fn a_region_past_a_thousand_4k_pages_takes_one_or_two_translation_pages() {
    // 24 MiB: 6144 pages of 4 KiB, past the 992 entries one CREATE_MKEY carries; translated
    // with the smallest frame that holds it, as Linux mlx5_ib does.
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, rcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
    let mut init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(16, 2, 128));
    init.sq_sig_all = true;
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect(&mut a, &mut b, 7);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let len = 24usize << 20;
    let big = region(&pd, len, access);
    let small = region(&pd, 4096, access);
    let t = hal
        .model()
        .with(|h| h.mkey(big.lkey().raw() >> 8).map(|k| k.translation.clone()))
        .unwrap();
    match t {
        bareverbs_model::mkey::Translation::Mtt { log_page, pages } => {
            assert!(log_page >= 25 && pages.len() <= 2, "{log_page} {pages:?}");
        }
        other => panic!("{other:?}"),
    }
    // WRITE into the first and the last bytes, READ them back elsewhere.
    small.buf().write_bytes(0, b"first!last!!").unwrap();
    let ends = [(0u64, 0u64), (6, len as u64 - 6)];
    for (k, &(src, dst)) in ends.iter().enumerate() {
        let sg = [sge(&small, src, 6)];
        let op = SendOp::RdmaWrite {
            remote_addr: big.addr() + dst,
            rkey: big.rkey().raw(),
        };
        a.post_send(&[send_wr(k as u64, &sg, op)]).unwrap();
        assert_eq!(poll_one(&mut scq).status, WcStatus::Success);
    }
    let mut got = [0u8; 6];
    big.buf().read_bytes(len - 6, &mut got).unwrap();
    assert_eq!(&got, b"last!!");
    let sg = [sge(&small, 100, 6)];
    let op = SendOp::RdmaRead {
        remote_addr: big.addr(),
        rkey: big.rkey().raw(),
    };
    a.post_send(&[send_wr(9, &sg, op)]).unwrap();
    assert_eq!(poll_one(&mut scq).status, WcStatus::Success);
    small.buf().read_bytes(100, &mut got).unwrap();
    assert_eq!(&got, b"first!");
    // One byte past the end is refused by the key's bounds.
    let sg = [sge(&small, 0, 2)];
    let op = SendOp::RdmaWrite {
        remote_addr: big.addr() + len as u64 - 1,
        rkey: big.rkey().raw(),
    };
    a.post_send(&[send_wr(10, &sg, op)]).unwrap();
    assert_eq!(poll_one(&mut scq).status, WcStatus::RemAccessErr);
}

#[test]
fn cqs_past_a_thousand_4k_pages_take_2_mib_pages_and_resize_across_sizes() {
    // 100 000 entries round to 131 072: an 8 MiB ring, four 2 MiB pages (in 4 KiB pages it
    // would take 2048 addresses, more than one command carries). Small rings are one page.
    let hal = SimHal::synchronous();
    let m = hal.model();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mut scq = dev.create_cq(100_000).unwrap();
    let rcq = dev.create_cq(8).unwrap();
    assert_eq!(scq.capacity(), 131_072);
    let pages = |cq: &Cq<'_, &SimHal>| {
        m.with(|h| h.cq(cq.cqn().raw()).map(|c| (c.page_size, c.pas.len())))
            .unwrap()
    };
    assert_eq!(pages(&scq), (2 << 20, 4));
    assert_eq!(pages(&rcq), (4096, 1));
    let mut init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(16, 2, 128));
    init.sq_sig_all = true;
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect(&mut a, &mut b, 7);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr = region(&pd, 8192, access);
    let sg = [sge(&mr, 0, 64)];
    let write = SendOp::RdmaWrite {
        remote_addr: mr.addr() + 4096,
        rkey: mr.rkey().raw(),
    };
    let mut next = 0u64;
    let mut round = |a: &mut Qp<'_, '_, &SimHal>, cq: &mut Cq<'_, &SimHal>| {
        let wrs: Vec<_> = (next..next + 4).map(|id| send_wr(id, &sg, write)).collect();
        a.post_send(&wrs).unwrap();
        let mut wc = [Wc::EMPTY; 8];
        assert_eq!(cq.poll(&mut wc), 4);
        let ids: Vec<u64> = wc[..4].iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, (next..next + 4).collect::<Vec<_>>());
        assert!(wc[..4].iter().all(|w| w.status == WcStatus::Success));
        next += 4;
    };
    round(&mut a, &mut scq);
    // Down to one 64 KiB page, up to 32 MiB (sixteen 2 MiB pages), completions flowing each
    // time.
    scq.resize(1000).unwrap();
    assert_eq!(pages(&scq), (64 << 10, 1));
    round(&mut a, &mut scq);
    scq.resize(500_000).unwrap();
    assert_eq!((scq.capacity(), pages(&scq)), (524_288, (2 << 20, 16)));
    round(&mut a, &mut scq);
}

#[test]
fn a_qp_buffer_past_a_thousand_4k_pages_takes_2_mib_pages() {
    // 32 768 receives of 16 SGEs (256 bytes each, 8 MiB) and 16 384 send WQEBBs (1 MiB): nine
    // MiB in 2 MiB pages, where 4 KiB pages would take 2304 addresses, more than one command
    // carries. Receives past the first page land where they should.
    let hal = SimHal::synchronous();
    let m = hal.model();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(9000).unwrap(), dev.create_cq(9000).unwrap());
    let big = QpCap {
        max_send_wr: 16_384,
        max_recv_wr: 32_768,
        max_send_sge: 1,
        max_recv_sge: 16,
        max_inline_data: 0,
    };
    let init = |cap| {
        with(QpInitAttr::new(QpType::Rc, &scq, &rcq, cap), |a| {
            a.sq_sig_all = true
        })
    };
    let sender = QpCap {
        max_send_wr: 128,
        ..cap(16, 2, 128)
    };
    let mut a = pd.create_qp(&init(sender)).unwrap();
    let mut b = pd.create_qp(&init(big)).unwrap();
    connect(&mut a, &mut b, 7);
    let (page_size, pages) = m
        .with(|h| h.qp(b.qpn().raw()).map(|q| (q.page_size, q.pas.len())))
        .unwrap();
    assert_eq!((page_size, pages), (2 << 20, 5));
    let access = AccessFlags::LOCAL_WRITE;
    let mr = region(&pd, 1 << 20, access);
    // 8200 receives reach 2 MiB + 2 KiB into the receive queue: past its first page.
    let n = 8200u64;
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let sgs: Vec<[Sge; 1]> = chunk.iter().map(|&i| [sge(&mr, 8 * i, 8)]).collect();
        let wrs: Vec<RecvWr<'_>> = chunk
            .iter()
            .zip(&sgs)
            .map(|(&i, sg)| RecvWr {
                wr_id: i,
                sg_list: sg,
            })
            .collect();
        b.post_recv(&wrs).unwrap();
    }
    mr.buf().write_bytes(0x10_0000 - 8, b"tail msg").unwrap();
    let src = [sge(&mr, 0x10_0000 - 8, 8)];
    let mut wc = vec![Wc::EMPTY; 200];
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let wrs: Vec<_> = chunk
            .iter()
            .map(|&i| send_wr(i, &src, SendOp::Send))
            .collect();
        a.post_send(&wrs).unwrap();
        let mut got = 0;
        while got < chunk.len() {
            let k = scq.poll(&mut wc);
            assert!(k > 0 && wc[..k].iter().all(|w| w.status == WcStatus::Success));
            got += k;
        }
        let mut got = 0;
        while got < chunk.len() {
            let k = rcq.poll(&mut wc[..chunk.len() - got]);
            assert!(k > 0);
            for (j, w) in wc[..k].iter().enumerate() {
                assert_eq!((w.status, w.byte_len), (WcStatus::Success, 8));
                assert_eq!(w.wr_id, chunk[got + j]);
            }
            got += k;
        }
    }
    // Every receive buffer holds the message, the last ones (in the queue's second page) too.
    let mut got = [0u8; 8];
    for i in [0, n / 2, n - 1] {
        mr.buf().read_bytes(8 * i as usize, &mut got).unwrap();
        assert_eq!(&got, b"tail msg", "receive {i}");
    }
}

#[test]
fn a_device_without_host_endian_atomics_refuses_atomics_before_the_ring() {
    // A device that can answer atomics only big-endian: the driver leaves the mode alone (as
    // Linux does, which then reports IB_ATOMIC_NONE) and refuses atomic requests.
    let cfg = bareverbs_model::ModelConfig {
        atomic_host_endianness: false,
        ..bareverbs_model::ModelConfig::default()
    };
    let hal = SimHal::new(cfg, bareverbs_model::Drive::Synchronous);
    let m = hal.model();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    assert!(dev.info().caps.atomic && !dev.info().caps.ib_atomics);
    let sets = m
        .trace()
        .iter()
        .filter(|t| t.opcode == bareverbs::firmware_cmd::Opcode::SET_HCA_CAP)
        .count();
    assert_eq!(sets, 1, "only the general SET_HCA_CAP");
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, rcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
    let mut init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(16, 2, 128));
    init.sq_sig_all = true;
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect(&mut a, &mut b, 7);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
    let mr = region(&pd, 4096, access);
    let res = [sge(&mr, 0, 8)];
    let write = SendOp::RdmaWrite {
        remote_addr: mr.addr() + 64,
        rkey: mr.rkey().raw(),
    };
    let fa = SendOp::AtomicFetchAndAdd {
        remote_addr: mr.addr() + 512,
        rkey: mr.rkey().raw(),
        add: 1,
    };
    let e = a
        .post_send(&[send_wr(1, &res, write), send_wr(2, &res, fa)])
        .unwrap_err();
    assert_eq!(
        (e.index, e.error),
        (
            1,
            Error::InvalidArgument {
                what: bareverbs::Invalid::AtomicsUnsupported
            }
        )
    );
    // The WRITE before it went out; the atomic left no trace.
    assert_eq!(poll_one(&mut scq).wr_id, 1);
    let mut wc = [Wc::EMPTY; 2];
    assert_eq!(scq.poll(&mut wc), 0);
    assert_eq!(mr.buf().read64(512), 0);
}

#[test]
fn a_hal_that_aligns_only_4k_gets_queues_in_4k_pages_and_typed_limits_past_them() {
    // The HAL contract promises 4 KiB alignment; a backend that gives no more (the vfio-user
    // client) gets rings in 4 KiB pages, up to the 992 a command carries, and a typed error
    // past that with nothing leaked.
    let hal = SimHal::synchronous();
    let m = hal.model();
    m.memory().set_max_align(Some(4096));
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let before = m.memory().allocated_bytes();
    match dev.create_cq(100_000) {
        Err(Error::ExceedsLimit {
            limit: bareverbs::Limit::CqEntries,
            max,
            ..
        }) => assert_eq!(max, 992 * 4096 / 64 - 1),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a CQ of 131 072 entries in 4 KiB pages"),
    }
    assert_eq!(m.memory().allocated_bytes(), before, "nothing leaked");
    let (mut scq, mut rcq) = (dev.create_cq(1000).unwrap(), dev.create_cq(1000).unwrap());
    let pages = |cq: &Cq<'_, &SimHal>| {
        m.with(|h| h.cq(cq.cqn().raw()).map(|c| (c.page_size, c.pas.len())))
            .unwrap()
    };
    assert_eq!(pages(&scq), (4096, 16));
    let init = |cap| {
        with(QpInitAttr::new(QpType::Rc, &scq, &rcq, cap), |a| {
            a.sq_sig_all = true
        })
    };
    let big = QpCap {
        max_send_wr: 16_384,
        max_recv_wr: 32_768,
        max_send_sge: 1,
        max_recv_sge: 16,
        max_inline_data: 0,
    };
    let before = m.memory().allocated_bytes();
    match pd.create_qp(&init(big)) {
        Err(Error::ExceedsLimit {
            limit: bareverbs::Limit::QpBufferBytes,
            requested,
            max,
        }) => {
            // What one command's page list holds in 4 KiB pages, short of the 9 MiB asked.
            assert!(
                max % 4096 == 0 && max / 4096 <= 992 && max / 4096 > 900,
                "{max}"
            );
            assert!(requested > max);
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a 9 MiB QP buffer in 4 KiB pages"),
    }
    assert_eq!(m.memory().allocated_bytes(), before, "nothing leaked");
    // A QP of 1 MiB: 256 pages of 4 KiB, and traffic through it.
    let mid = QpCap {
        max_send_wr: 4096,
        max_recv_wr: 4096,
        ..cap(16, 2, 128)
    };
    let (mut a, mut b) = (
        pd.create_qp(&init(mid)).unwrap(),
        pd.create_qp(&init(mid)).unwrap(),
    );
    connect(&mut a, &mut b, 7);
    let qp_pages = m
        .with(|h| h.qp(b.qpn().raw()).map(|q| (q.page_size, q.pas.len())))
        .unwrap();
    assert_eq!(qp_pages.0, 4096);
    assert!(qp_pages.1 > 200, "{qp_pages:?}");
    let mr = region(&pd, 4096, AccessFlags::LOCAL_WRITE);
    mr.buf().write_bytes(0, b"small pages").unwrap();
    b.post_recv(&[RecvWr {
        wr_id: 2,
        sg_list: &[sge(&mr, 1024, 64)],
    }])
    .unwrap();
    a.post_send(&[send_wr(1, &[sge(&mr, 0, 11)], SendOp::Send)])
        .unwrap();
    assert_eq!(poll_one(&mut scq).wr_id, 1);
    assert_eq!(poll_one(&mut rcq).byte_len, 11);
    let mut got = [0u8; 11];
    mr.buf().read_bytes(1024, &mut got).unwrap();
    assert_eq!(&got, b"small pages");
}

/// An RC QP connected to itself: each request's responder is its own requester, so the model
/// executes the request against the QP it is running the send queue of (the requester's
/// state — the next PSN to send — and the responder's — the next PSN expected, the receive
/// queue — change on the one QP). SEND, WRITE with immediate and READ of several packets go
/// through; both PSNs advance by every packet, and another round still finds them agreeing.
#[test]
fn a_qp_connected_to_itself_is_its_own_responder() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let mut q = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(16, 2, 128)))
        .unwrap();
    let own = q.qpn().raw();
    to_rts(&mut q, own, 7);
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = region(&pd, 32768, all);
    let pattern: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
    mr.buf().write_bytes(0, &pattern).unwrap();
    // At MTU 1024: the SEND takes 3 packets, the WRITE 3, the READ's response 3.
    let mut psns = 0;
    for round in 0..2u64 {
        q.post_recv(&[
            RecvWr {
                wr_id: 0x100 + round,
                sg_list: &[sge(&mr, 4096, 3000)],
            },
            RecvWr {
                wr_id: 0x200 + round,
                sg_list: &[],
            },
        ])
        .unwrap();
        let send = [sge(&mr, 0, 3000)];
        let (raddr, rkey) = (mr.addr() + 8192, mr.rkey().raw());
        let read_into = [sge(&mr, 12288, 3000)];
        q.post_send(&[
            send_wr(0x1 + round, &send, SendOp::Send),
            send_wr(
                0x2 + round,
                &send,
                SendOp::RdmaWriteWithImm {
                    remote_addr: raddr,
                    rkey,
                    imm: 0xfeed,
                },
            ),
            send_wr(
                0x3 + round,
                &read_into,
                SendOp::RdmaRead {
                    remote_addr: raddr,
                    rkey,
                },
            ),
        ])
        .unwrap();
        psns += 9;
        let sent: Vec<_> = (0..3).map(|_| poll_one(&mut scq)).collect();
        assert!(sent
            .iter()
            .all(|w| w.status == WcStatus::Success && w.qp_num == own));
        assert_eq!(
            sent.iter().map(|w| (w.wr_id, w.opcode)).collect::<Vec<_>>(),
            [
                (0x1 + round, WcOpcode::Send),
                (0x2 + round, WcOpcode::RdmaWrite),
                (0x3 + round, WcOpcode::RdmaRead),
            ]
        );
        let got = poll_one(&mut rcq);
        assert_eq!(
            (got.wr_id, got.opcode, got.byte_len, got.src_qp),
            (0x100 + round, WcOpcode::Recv, 3000, own)
        );
        let imm = poll_one(&mut rcq);
        assert_eq!(
            (imm.wr_id, imm.opcode, imm.imm_data),
            (0x200 + round, WcOpcode::RecvRdmaWithImm, 0xfeed)
        );
        for at in [4096, 8192, 12288] {
            let mut back = vec![0u8; 3000];
            mr.buf().read_bytes(at, &mut back).unwrap();
            assert_eq!(back, pattern, "round {round}, bytes at {at}");
        }
        let attr = q.query().unwrap();
        assert_eq!(attr.qp_state, QpState::Rts);
        assert_eq!((attr.sq_psn, attr.rq_psn), (PSN + psns, PSN + psns));
    }
}

/// A CQ that has not yet wrapped holds entries the device never wrote (opcode INVALID, owner
/// 0, what the first pass's owner bit also reads as): they are not completions. Shrinking it
/// counts only the three that wait, and they come out of the smaller ring in order.
#[test]
fn a_cq_that_never_wrapped_shrinks_around_the_completions_that_wait() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let attr = PairAttr {
        send_cqe: 255,
        region_len: 8192,
        ..PairAttr::new(cap(8, 1, 0))
    };
    common::with_rc_pair(&dev, attr, |p| {
        let sg = [p.sge(0, 64)];
        let (raddr, rkey) = p.remote(4096);
        let write = SendOp::RdmaWrite {
            remote_addr: raddr,
            rkey,
        };
        let wrs: Vec<_> = (0..3).map(|id| send_wr(id, &sg, write)).collect();
        p.a.post_send(&wrs).unwrap();
        assert_eq!(p.scq.capacity(), 256);
        p.scq.resize(4).unwrap();
        assert_eq!(p.scq.capacity(), 8);
        let mut wc = [Wc::EMPTY; 8];
        let n = p.scq.poll(&mut wc);
        let ids: Vec<u64> = wc[..n].iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, [0, 1, 2]);
    });
}
