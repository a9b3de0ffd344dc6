//! Seed 004's send operations (`MLX5DV_QP_EX_WITH_MR_LIST`, `_MR_INTERLEAVED`,
//! `_MKEY_CONFIGURE`): indirect keys made with `Pd::create_mkey`, laid out by UMR work
//! requests the model executes, then used by RDMA and by local scatter/gather, data checked
//! byte by byte through the layout.

use bareverbs::verbs::*;
use bareverbs::Invalid;
use bareverbs::{Config, Device, Error};
use bareverbs_model::SimHal;

mod common;
use common::{all_access, cap, connect_pair, poll_one, region, sge, with};

fn ops(o: DvSendOpsFlags) -> DvQpInitAttr {
    with(DvQpInitAttr::default(), |a| {
        a.comp_mask = DvQpInitAttrMask::SEND_OPS_FLAGS;
        a.send_ops_flags = o;
    })
}

fn indirect(n: u16) -> MkeyInitAttr {
    MkeyInitAttr::new(MkeyInitFlags::INDIRECT, n)
}

/// An RC pair on one HCA: `$a` with send operations `$ops`, `$b` plain; a CQ, a PD.
macro_rules! pair {
    ($ops:expr => $hal:ident, $pd:ident, $cq:ident, $a:ident, $b:ident) => {
        let $hal = SimHal::synchronous();
        let dev = Device::bring_up(&$hal, Config::default()).unwrap();
        let $pd = dev.alloc_pd().unwrap();
        let mut $cq = dev.create_cq(64).unwrap();
        let init = QpInitAttr::new(QpType::Rc, &$cq, &$cq, cap(16, 2, 124));
        let mut $a = $pd
            .create_qp_dv(&init, &ops($ops))
            .unwrap()
            .into_qp()
            .unwrap();
        let mut $b = $pd.create_qp(&init).unwrap();
        connect_pair(&mut $a, &mut $b, all_access(), Mtu::Mtu1024);
    };
}

#[test]
fn a_list_key_spreads_an_rdma_write_over_its_pieces_and_gathers_them_back() {
    pair!(DvSendOpsFlags::MR_LIST => hal, pd, cq, a, b);
    let (m1, m2, m3) = (
        region(&pd, 4096, all_access()),
        region(&pd, 4096, all_access()),
        region(&pd, 4096, all_access()),
    );
    let key = pd.create_mkey(&indirect(3)).unwrap();
    assert_eq!(
        key.max_entries(),
        4,
        "rounded up to 4 as rdma-core's num_desc"
    );
    // Pieces: 100 bytes of m1 at 0, 50 of m2 at 200, 60 of m3 at 10.
    let pieces = [sge(&m1, 0, 100), sge(&m2, 200, 50), sge(&m3, 10, 60)];
    a.send_batch(|bt| bt.mr_list(1, SendFlags::SIGNALED, &key, all_access(), &pieces))
        .unwrap()
        .unwrap();
    let wc = poll_one(&mut cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (1, WcStatus::Success, WcOpcode::Driver1)
    );
    // b writes 210 bytes at the key's offset 0 (its address space starts at 0).
    let src = region(&pd, 4096, all_access());
    let data: Vec<u8> = (0..210u32).map(|i| (i * 7 + 3) as u8).collect();
    src.buf().write_bytes(0, &data).unwrap();
    b.post_send(&[common::send_wr(
        2,
        &[sge(&src, 0, 210)],
        SendOp::RdmaWrite {
            remote_addr: 0,
            rkey: key.rkey(),
        },
    )])
    .unwrap();
    assert_eq!(poll_one(&mut cq).status, WcStatus::Success);
    let read = |m: &Mr<'_, '_, &SimHal>, at: usize, n: usize| {
        let mut v = vec![0u8; n];
        m.buf().read_bytes(at, &mut v).unwrap();
        v
    };
    assert_eq!(read(&m1, 0, 100), &data[..100]);
    assert_eq!(read(&m2, 200, 50), &data[100..150]);
    assert_eq!(read(&m3, 10, 60), &data[150..210]);
    // A write past the key's 210 bytes is refused at the responder.
    b.post_send(&[common::send_wr(
        3,
        &[sge(&src, 0, 8)],
        SendOp::RdmaWrite {
            remote_addr: 205,
            rkey: key.rkey(),
        },
    )])
    .unwrap();
    assert_eq!(poll_one(&mut cq).status, WcStatus::RemAccessErr);
    // Gathered back through the key as a local key: a SEND from a to a receive at b... b is
    // now in ERR; a READ from a's side through the key into `src` checks the other way.
    let (mut a2, mut b2) = (
        pd.create_qp_dv(
            &QpInitAttr::new(QpType::Rc, &cq, &cq, cap(16, 2, 124)),
            &ops(DvSendOpsFlags::MR_LIST),
        )
        .unwrap()
        .into_qp()
        .unwrap(),
        pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq, cap(16, 2, 124)))
            .unwrap(),
    );
    connect_pair(&mut a2, &mut b2, all_access(), Mtu::Mtu1024);
    let dst = region(&pd, 4096, all_access());
    b2.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: &[sge(&dst, 0, 4096)],
    }])
    .unwrap();
    let through = [Sge {
        addr: 90,
        length: 30,
        lkey: key.lkey(),
    }];
    a2.post_send(&[common::send_wr(4, &through, SendOp::Send)])
        .unwrap();
    let (x, y) = (poll_one(&mut cq), poll_one(&mut cq));
    assert!(x.status == WcStatus::Success && y.status == WcStatus::Success);
    assert_eq!(
        read(&dst, 0, 30),
        &data[90..120],
        "gathered across m1 and m2"
    );
}

#[test]
fn an_interleaved_key_takes_each_piece_in_turn_with_its_stride() {
    pair!(DvSendOpsFlags::MR_INTERLEAVED | DvSendOpsFlags::MKEY_CONFIGURE => hal, pd, cq, a, b);
    let (m1, m2) = (
        region(&pd, 4096, all_access()),
        region(&pd, 4096, all_access()),
    );
    let key = pd.create_mkey(&indirect(2)).unwrap();
    let entries = [
        MrInterleaved {
            addr: m1.addr(),
            bytes_count: 4,
            bytes_skip: 4,
            lkey: m1.lkey(),
        },
        MrInterleaved {
            addr: m2.addr() + 100,
            bytes_count: 2,
            bytes_skip: 14,
            lkey: m2.lkey(),
        },
    ];
    a.send_batch(|bt| bt.mr_interleaved(1, SendFlags::SIGNALED, &key, all_access(), 3, &entries))
        .unwrap()
        .unwrap();
    assert_eq!(poll_one(&mut cq).status, WcStatus::Success);
    let src = region(&pd, 4096, all_access());
    let data: Vec<u8> = (1..=18u8).collect();
    src.buf().write_bytes(0, &data).unwrap();
    b.post_send(&[common::send_wr(
        2,
        &[sge(&src, 0, 18)],
        SendOp::RdmaWrite {
            remote_addr: 0,
            rkey: key.rkey(),
        },
    )])
    .unwrap();
    assert_eq!(poll_one(&mut cq).status, WcStatus::Success);
    // Round r: m1 bytes 8r..8r+4, then m2 bytes 100+16r..100+16r+2.
    for r in 0..3usize {
        let mut x = [0u8; 4];
        m1.buf().read_bytes(8 * r, &mut x).unwrap();
        assert_eq!(x, data[6 * r..6 * r + 4], "round {r}, m1");
        let mut y = [0u8; 2];
        m2.buf().read_bytes(100 + 16 * r, &mut y).unwrap();
        assert_eq!(y, data[6 * r + 4..6 * r + 6], "round {r}, m2");
    }
    assert_eq!(m1.buf().read8(4), 0, "the skipped bytes were not written");
    // mkey_configure with access only: the layout stays, remote writes are taken away.
    a.send_batch(|bt| {
        bt.mkey_configure(
            3,
            SendFlags::SIGNALED,
            &key,
            &with(MkeyConf::new(MkeyLayout::Unchanged), |a| {
                a.access = Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
            }),
        )
    })
    .unwrap()
    .unwrap();
    assert_eq!(poll_one(&mut cq).status, WcStatus::Success);
    b.post_send(&[common::send_wr(
        4,
        &[sge(&src, 100, 6)],
        SendOp::RdmaRead {
            remote_addr: 0,
            rkey: key.rkey(),
        },
    )])
    .unwrap();
    assert_eq!(poll_one(&mut cq).status, WcStatus::Success);
    let mut back = [0u8; 6];
    src.buf().read_bytes(100, &mut back).unwrap();
    assert_eq!(back, data[..6], "read back through the same layout");
    b.post_send(&[common::send_wr(
        5,
        &[sge(&src, 0, 4)],
        SendOp::RdmaWrite {
            remote_addr: 0,
            rkey: key.rkey(),
        },
    )])
    .unwrap();
    assert_eq!(poll_one(&mut cq).status, WcStatus::RemAccessErr);
}

#[test]
fn umr_requests_are_refused_by_name_before_anything_is_written() {
    pair!(DvSendOpsFlags::MR_LIST => hal, pd, cq, a, b);
    let m = region(&pd, 4096, all_access());
    let key = pd.create_mkey(&indirect(4)).unwrap();
    let s = [sge(&m, 0, 8)];
    let e = |what| Err(Error::InvalidArgument { what });
    a.send_batch(|bt| {
        let entries = [MrInterleaved {
            addr: m.addr(),
            bytes_count: 1,
            bytes_skip: 0,
            lkey: m.lkey(),
        }];
        assert_eq!(
            bt.mr_interleaved(1, SendFlags::empty(), &key, all_access(), 1, &entries),
            e(Invalid::SendOpNotEnabled),
            "only MR_LIST on this QP"
        );
        let conf = MkeyConf::new(MkeyLayout::Unchanged);
        assert_eq!(
            bt.mkey_configure(1, SendFlags::empty(), &key, &conf),
            e(Invalid::SendOpNotEnabled)
        );
        assert_eq!(
            bt.mr_list(1, SendFlags::empty(), &key, all_access(), &[]),
            e(Invalid::ZeroEntries)
        );
        let five = [s[0]; 5];
        assert_eq!(
            bt.mr_list(1, SendFlags::empty(), &key, all_access(), &five),
            e(Invalid::TooManySge),
            "four entries"
        );
        assert_eq!(
            bt.mr_list(
                1,
                SendFlags::empty(),
                &key,
                AccessFlags::from_bits_retain(1 << 9),
                &s
            ),
            e(Invalid::AccessFlags)
        );
    })
    .unwrap();
    // A QP without send operations has none of them.
    b.send_batch(|bt| {
        assert_eq!(
            bt.mr_list(1, SendFlags::empty(), &key, all_access(), &s),
            e(Invalid::SendOpNotEnabled)
        );
    })
    .unwrap();
    // Nothing was posted: no completion.
    let mut none = [Wc::EMPTY; 1];
    assert_eq!(cq.poll(&mut none), 0);
    // create_mkey's refusals.
    assert_eq!(
        pd.create_mkey(&MkeyInitAttr::new(MkeyInitFlags::empty(), 1))
            .err(),
        Some(Error::InvalidArgument {
            what: Invalid::MkeyFlags
        })
    );
    assert_eq!(
        pd.create_mkey(&indirect(0)).err(),
        Some(Error::InvalidArgument {
            what: Invalid::ZeroEntries
        })
    );
    for f in [
        MkeyInitFlags::BLOCK_SIGNATURE,
        MkeyInitFlags::CRYPTO,
        MkeyInitFlags::UPDATE_TAG,
        MkeyInitFlags::REMOTE_INVALIDATE,
    ] {
        assert!(matches!(
            pd.create_mkey(&MkeyInitAttr::new(MkeyInitFlags::INDIRECT | f, 1)),
            Err(Error::DvRefused {
                why: DvRefusal::NotInDriver { .. },
                ..
            })
        ));
    }
    // u16::MAX rounds past 16 bits: a limit error, not an overflow.
    assert!(matches!(
        pd.create_mkey(&indirect(u16::MAX)),
        Err(Error::ExceedsLimit {
            limit: bareverbs::Limit::MkeyEntries,
            ..
        })
    ));
    // Send operations need RC (rdma-core `mlx5_qp_fill_wr_pfns`).
    let uc = pd.create_qp_dv(
        &QpInitAttr::new(QpType::Uc, &cq, &cq, cap(16, 2, 124)),
        &ops(DvSendOpsFlags::MR_LIST),
    );
    assert!(matches!(
        uc,
        Err(Error::DvRefused {
            feature: DvFeature::MrList,
            why: DvRefusal::QpType { .. }
        })
    ));
}

#[test]
fn a_key_of_another_pd_is_refused() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let (pd, other) = (dev.alloc_pd().unwrap(), dev.alloc_pd().unwrap());
    let cq = dev.create_cq(8).unwrap();
    let mut a = pd
        .create_qp_dv(
            &QpInitAttr::new(QpType::Rc, &cq, &cq, cap(16, 2, 124)),
            &ops(DvSendOpsFlags::MR_LIST),
        )
        .unwrap()
        .into_qp()
        .unwrap();
    let mut b = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq, cap(16, 2, 124)))
        .unwrap();
    connect_pair(&mut a, &mut b, all_access(), Mtu::Mtu1024);
    let key = other.create_mkey(&indirect(1)).unwrap();
    let m = region(&pd, 4096, all_access());
    a.send_batch(|bt| {
        assert_eq!(
            bt.mr_list(1, SendFlags::empty(), &key, all_access(), &[sge(&m, 0, 8)]),
            Err(Error::InvalidArgument {
                what: Invalid::ForeignObject
            })
        );
    })
    .unwrap();
}

#[test]
fn the_request_after_a_umr_is_fenced_in_its_batch_or_the_next() {
    pair!(DvSendOpsFlags::MR_LIST => hal, pd, cq, a, b);
    let m = region(&pd, 4096, all_access());
    let key = pd.create_mkey(&indirect(1)).unwrap();
    let fenced = || hal.model().with(|h| h.small_fenced());
    let write = |id| {
        common::send_wr(
            id,
            &[],
            SendOp::RdmaWrite {
                remote_addr: m.addr(),
                rkey: m.rkey().raw(),
            },
        )
    };
    let s = [sge(&m, 0, 64)];
    // In one batch: the UMR, then a WRITE (fenced), then another (not).
    a.send_batch(|bt| {
        bt.mr_list(1, SendFlags::SIGNALED, &key, all_access(), &s)
            .unwrap();
        bt.post(&write(2)).unwrap();
        bt.post(&write(3)).unwrap();
    })
    .unwrap();
    for _ in 0..3 {
        assert_eq!(poll_one(&mut cq).status, WcStatus::Success);
    }
    assert_eq!(fenced(), 1);
    // The UMR last in its batch: the next batch's first request is fenced.
    a.send_batch(|bt| bt.mr_list(4, SendFlags::SIGNALED, &key, all_access(), &s))
        .unwrap()
        .unwrap();
    a.post_send(&[write(5), write(6)]).unwrap();
    for _ in 0..3 {
        assert_eq!(poll_one(&mut cq).status, WcStatus::Success);
    }
    assert_eq!(fenced(), 2);
    // A request with its own fence keeps it.
    a.send_batch(|bt| {
        bt.mr_list(7, SendFlags::SIGNALED, &key, all_access(), &s)
            .unwrap();
        bt.post(&SendWr {
            flags: SendFlags::SIGNALED | SendFlags::FENCE,
            ..write(8)
        })
        .unwrap();
    })
    .unwrap();
    for _ in 0..2 {
        assert_eq!(poll_one(&mut cq).status, WcStatus::Success);
    }
    assert_eq!(fenced(), 2);
    let _ = &b;
}

#[test]
fn a_list_longer_than_a_umr_wqe_holds_is_refused_not_written_past_it() {
    // The largest inline room a 1024-byte send WQE leaves (892 bytes: 56 entries by
    // rdma-core's count) is more than a UMR WQE's 6-bit size can carry after its 128-byte
    // head: 52 entries, padded to 64-byte units, make the most that fit in 63 units.
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let init = QpInitAttr::new(QpType::Rc, &cq, &cq, cap(4, 2, 892));
    let mut a = pd
        .create_qp_dv(&init, &ops(DvSendOpsFlags::MR_LIST))
        .unwrap()
        .into_qp()
        .unwrap();
    let mut b = pd.create_qp(&init).unwrap();
    connect_pair(&mut a, &mut b, all_access(), Mtu::Mtu1024);
    let m = region(&pd, 4096, all_access());
    let key = pd.create_mkey(&indirect(56)).unwrap();
    let one = sge(&m, 0, 8);
    a.send_batch(|bt| {
        for n in [53, 55, 56] {
            assert_eq!(
                bt.mr_list(1, SendFlags::empty(), &key, all_access(), &vec![one; n]),
                Err(Error::InvalidArgument {
                    what: Invalid::TooManySge
                }),
                "{n} entries"
            );
        }
        bt.mr_list(1, SendFlags::empty(), &key, all_access(), &[one; 52])
    })
    .unwrap()
    .unwrap();
}
