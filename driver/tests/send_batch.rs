//! The batch API (`ibv_wr_*`) end to end against the model: every method moves the data a
//! user expects, completions come back in order with their ids, and a refused request inside
//! a batch leaves no trace while the others are posted under one doorbell.

use bareverbs::verbs::QpState;
use bareverbs::verbs::*;
use bareverbs::{Config, Device, Error};
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;

mod common;
use common::{cap, connect_pair, region, with_rc_pair, PairAttr, RcPair};

/// A send queue of 8 (batches fill it), a receive queue of 16.
const CAP: QpCap = QpCap {
    max_send_wr: 8,
    ..cap(16, 2, 100)
};

fn connect<'p, 'd, H: Hal>(a: &mut Qp<'p, 'd, H>, b: &mut Qp<'p, 'd, H>) {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    connect_pair(a, b, access, Mtu::Mtu1024);
}

#[test]
fn every_batch_method_moves_data_and_completes_in_order() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let init = QpInitAttr::new(QpType::Rc, &scq, &rcq, CAP);
    let mut a = pd.create_qp(&init).unwrap();
    let mut b = pd.create_qp(&init).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = region(&pd, 16384, access);
    let sge = |off: u64, len: u32| Sge {
        addr: mr.addr() + off,
        length: len,
        lkey: mr.lkey(),
    };

    // Outside RTS the batch is refused before the closure runs.
    let mut ran = false;
    assert_eq!(
        a.send_batch(|_| ran = true),
        Err(Error::InvalidArgument {
            what: bareverbs::Invalid::QpState
        })
    );
    assert!(!ran);
    connect(&mut a, &mut b);
    assert_eq!(a.state(), QpState::Rts);

    mr.buf().write_bytes(0, b"gathered ").unwrap();
    mr.buf().write_bytes(100, b"and sent").unwrap();
    mr.buf().write_bytes(200, b"written remotely").unwrap();
    mr.buf().write_bytes(300, b"read back").unwrap();
    b.post_recv(&[
        RecvWr {
            wr_id: 0xb1,
            sg_list: &[sge(8192, 128)],
        },
        RecvWr {
            wr_id: 0xb2,
            sg_list: &[sge(8192 + 128, 128)],
        },
    ])
    .unwrap();
    let inline: Vec<u8> = (0..77u8).collect();
    let too_long = vec![0u8; a.cap().max_inline_data as usize + 1];
    let results = a
        .send_batch(|q| {
            [
                q.send(1, SendFlags::SIGNALED, &[sge(0, 9), sge(100, 8)]),
                q.send_inline(2, SendFlags::SIGNALED, &inline),
                // Refused: longer than max_inline_data. Nothing of it reaches the ring.
                q.send_inline(99, SendFlags::SIGNALED, &too_long),
                q.rdma_write(
                    3,
                    SendFlags::SIGNALED,
                    mr.addr() + 12288,
                    mr.rkey().raw(),
                    &[sge(200, 16)],
                ),
                q.rdma_write_inline(
                    4,
                    SendFlags::SIGNALED,
                    mr.addr() + 12400,
                    mr.rkey().raw(),
                    b"inline write",
                ),
                q.rdma_read(
                    5,
                    SendFlags::SIGNALED,
                    mr.addr() + 300,
                    mr.rkey().raw(),
                    &[sge(12800, 9)],
                ),
            ]
        })
        .unwrap();
    assert_eq!(
        results.iter().filter(|r| r.is_err()).count(),
        1,
        "{results:?}"
    );
    assert_eq!(
        results[2],
        Err(Error::InvalidArgument {
            what: bareverbs::Invalid::InlineTooLarge
        })
    );

    let mut wc = [Wc::EMPTY; 8];
    let n = scq.poll(&mut wc);
    let got: Vec<_> = wc[..n]
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode))
        .collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::Send),
            (3, WcStatus::Success, WcOpcode::RdmaWrite),
            (4, WcStatus::Success, WcOpcode::RdmaWrite),
            (5, WcStatus::Success, WcOpcode::RdmaRead),
        ]
    );
    assert_eq!(wc[4].byte_len, 9);
    let n = rcq.poll(&mut wc);
    let got: Vec<_> = wc[..n].iter().map(|w| (w.wr_id, w.byte_len)).collect();
    assert_eq!(got, [(0xb1, 17), (0xb2, 77)]);

    let read = |off: usize, len: usize| {
        let mut v = vec![0u8; len];
        mr.buf().read_bytes(off, &mut v).unwrap();
        v
    };
    assert_eq!(read(8192, 17), b"gathered and sent");
    assert_eq!(read(8192 + 128, 77), inline);
    assert_eq!(read(12288, 16), b"written remotely");
    assert_eq!(read(12400, 12), b"inline write");
    assert_eq!(read(12800, 9), b"read back");
}

/// BlueFlame (rdma-core `post_send_db`): a batch of one WQE with inline data that fits half
/// the BlueFlame register is written into it whole after its doorbell word; a batch of two, a
/// WQE without inline data, or one too large ring the doorbell word alone. The data arrives
/// either way.
#[test]
fn a_lone_inline_wqe_goes_through_blueflame_and_others_ring_the_doorbell_alone() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let attr = PairAttr {
        region_len: 16384,
        ..PairAttr::new(cap(8, 16, 200))
    };
    with_rc_pair(&dev, attr, |p| {
        let words = || hal.model().with(|h| h.blueflame_words());
        let before = words();
        let recv = |p: &mut RcPair<'_, '_, &SimHal>, at: u64| {
            let sg = [p.sge(at, 256)];
            p.b.post_recv(&[RecvWr {
                wr_id: at,
                sg_list: &sg,
            }])
            .unwrap();
        };
        // 8 bytes inline: control and inline segments in one WQEBB, 7 words after the doorbell.
        recv(p, 8192);
        p.a.send_batch(|q| q.send_inline(1, SendFlags::SIGNALED, &[0x11; 8]))
            .unwrap()
            .unwrap();
        assert_eq!(common::poll_one(&mut p.scq).status, WcStatus::Success);
        assert_eq!(common::poll_one(&mut p.rcq).byte_len, 8);
        assert_eq!(words() - before, 7);
        // 100 bytes inline: two WQEBBs, 15 words.
        recv(p, 8192 + 256);
        let data = [0x22u8; 100];
        p.a.send_batch(|q| q.send_inline(2, SendFlags::SIGNALED, &data))
            .unwrap()
            .unwrap();
        assert_eq!(common::poll_one(&mut p.scq).status, WcStatus::Success);
        assert_eq!(common::poll_one(&mut p.rcq).byte_len, 100);
        assert_eq!(words() - before, 7 + 15);
        // A WRITE from a data segment (no inline data): the doorbell word only.
        p.mr.buf().fill(0, 64, 0x33).unwrap();
        let (raddr, rkey) = p.remote(12288);
        let src = [p.sge(0, 64)];
        p.a.send_batch(|q| q.rdma_write(3, SendFlags::SIGNALED, raddr, rkey, &src))
            .unwrap()
            .unwrap();
        assert_eq!(common::poll_one(&mut p.scq).status, WcStatus::Success);
        // Two inline WQEs in one batch: the doorbell word only.
        recv(p, 8192 + 512);
        recv(p, 8192 + 768);
        p.a.send_batch(|q| {
            q.send_inline(4, SendFlags::empty(), &data).unwrap();
            q.send_inline(5, SendFlags::SIGNALED, &data).unwrap();
        })
        .unwrap();
        assert_eq!(common::poll_one(&mut p.scq).wr_id, 5);
        // 200 bytes inline: 14 units in four WQEBBs, 256 bytes, half the register; 220 would
        // not fit and is not tried (the QP's inline limit is 200).
        recv(p, 8192 + 1024);
        let big = [0x44u8; 200];
        p.a.send_batch(|q| q.send_inline(6, SendFlags::SIGNALED, &big))
            .unwrap()
            .unwrap();
        assert_eq!(common::poll_one(&mut p.scq).status, WcStatus::Success);
        assert_eq!(words() - before, 7 + 15 + 31);
        let mut got = [0u8; 64];
        p.mr.buf().read_bytes(12288, &mut got).unwrap();
        assert_eq!(got, [0x33; 64]);
        let mut got = [0u8; 100];
        p.mr.buf().read_bytes(8192 + 256, &mut got).unwrap();
        assert_eq!(got, data);
        let mut got = [0u8; 200];
        p.mr.buf().read_bytes(8192 + 1024, &mut got).unwrap();
        assert_eq!(got, big);
    });
}

/// A batch locks its own QP's book and nothing else of the device's: inside it, other QPs are
/// created, used and destroyed, and CQs polled (with one device-wide book lock, creating a QP
/// there waited forever). Run on a thread so that a regression fails instead of hanging.
#[test]
fn a_batch_leaves_other_qps_free_to_come_and_go() {
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let hal = SimHal::synchronous();
        let dev = Device::bring_up(&hal, Config::default()).unwrap();
        let attr = PairAttr {
            region_len: 8192,
            ..PairAttr::new(cap(8, 8, 64))
        };
        with_rc_pair(&dev, attr, |p| {
            p.mr.buf().fill(0, 64, 0x5a).unwrap();
            let (raddr, rkey) = p.remote(4096);
            let sg = [p.sge(0, 64)];
            let (pd, scq, rcq) = (p.pd, &p.scq, &p.rcq);
            let made =
                p.a.send_batch(|q| {
                    q.rdma_write(7, SendFlags::SIGNALED, raddr, rkey, &sg)
                        .unwrap();
                    let init = QpInitAttr::new(QpType::Rc, scq, rcq, cap(4, 4, 0));
                    let (c, d) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
                    let qpns = (c.qpn(), d.qpn());
                    drop(c);
                    drop(d);
                    qpns
                })
                .unwrap();
            assert_ne!(made.0, made.1);
            let wc = common::poll_one(&mut p.scq);
            assert_eq!((wc.wr_id, wc.status), (7, WcStatus::Success));
            let mut got = [0u8; 64];
            p.mr.buf().read_bytes(4096, &mut got).unwrap();
            assert_eq!(got, [0x5a; 64]);
            // The slots the two QPs had are free again: two more fit.
            let init = QpInitAttr::new(QpType::Rc, &p.scq, &p.rcq, cap(4, 4, 0));
            let _e = p.pd.create_qp(&init).unwrap();
            let _f = p.pd.create_qp(&init).unwrap();
        });
        let _ = done.send(());
    });
    wait.recv_timeout(std::time::Duration::from_secs(120))
        .expect("the batch and the QPs made inside it finished");
}
