//! A destroyed or reset QP's completions leave its CQs (rdma-core 56 providers/mlx5
//! `__mlx5_cq_clean`, called from `mlx5_destroy_qp` and from `mlx5_modify_qp` to RESET).
//! Before, they stayed; the model reuses QP numbers, so a new QP polled them as its own:
//! a wrong `wr_id` and its send queue's tail moved.

use bareverbs::verbs::*;
use bareverbs::{Config, Device};
use bareverbs_model::SimHal;

mod common;
use common::{cap, connect_pair, region, send_wr, sge, with_rc_pair, PairAttr, RcPair};

#[test]
fn a_new_qp_with_a_reused_number_sees_only_its_own_completions() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(32).unwrap(), dev.create_cq(32).unwrap());
    let init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap(8, 1, 0));
    let access = AccessFlags::LOCAL_WRITE;
    let mr = region(&pd, 4096, access);
    let s = [sge(&mr, 0, 8)];
    let r = [sge(&mr, 1024, 64)];
    let recv = |wr_id| RecvWr { wr_id, sg_list: &r };

    // A keeper pair whose completions must survive the others' cleaning.
    let (mut k1, mut k2) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect_pair(&mut k1, &mut k2, access, Mtu::Mtu1024);
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect_pair(&mut a, &mut b, access, Mtu::Mtu1024);
    let (old_a, old_b) = (a.qpn().raw(), b.qpn().raw());
    // Completions interleaved: keeper, gone QP, keeper, gone QP, gone QP.
    k2.post_recv(&[recv(500), recv(501)]).unwrap();
    b.post_recv(&[recv(600), recv(601), recv(602)]).unwrap();
    k1.post_send(&[send_wr(50, &s, SendOp::Send)]).unwrap();
    a.post_send(&[send_wr(60, &s, SendOp::Send)]).unwrap();
    k1.post_send(&[send_wr(51, &s, SendOp::Send)]).unwrap();
    a.post_send(&[send_wr(61, &s, SendOp::Send)]).unwrap();
    a.post_send(&[send_wr(62, &s, SendOp::Send)]).unwrap();
    drop((a, b));

    // New QPs take the freed numbers.
    let (mut c, mut d) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    let mut got = [c.qpn().raw(), d.qpn().raw()];
    got.sort_unstable();
    let mut want = [old_a, old_b];
    want.sort_unstable();
    assert_eq!(got, want, "the model reuses QP numbers");
    connect_pair(&mut c, &mut d, access, Mtu::Mtu1024);
    d.post_recv(&[recv(700)]).unwrap();
    c.post_send(&[send_wr(70, &s, SendOp::Send)]).unwrap();

    let mut wc = [Wc::EMPTY; 16];
    let n = scq.poll(&mut wc);
    let sends: Vec<_> = wc[..n].iter().map(|w| (w.wr_id, w.qp_num)).collect();
    let (k1n, cn) = (k1.qpn().raw(), c.qpn().raw());
    assert_eq!(sends, [(50, k1n), (51, k1n), (70, cn)]);
    let n = rcq.poll(&mut wc);
    let recvs: Vec<_> = wc[..n].iter().map(|w| (w.wr_id, w.qp_num)).collect();
    let (k2n, dn) = (k2.qpn().raw(), d.qpn().raw());
    assert_eq!(recvs, [(500, k2n), (501, k2n), (700, dn)]);

    // The new QP's send queue is whole: it takes its full depth again.
    for i in 0..8 {
        d.post_recv(&[recv(800 + i)]).unwrap();
    }
    let burst: Vec<_> = (0..8).map(|i| send_wr(80 + i, &s, SendOp::Send)).collect();
    c.post_send(&burst).unwrap();
    assert_eq!(scq.poll(&mut wc), 8);
    assert!(wc[..8].iter().all(|w| w.status == WcStatus::Success));
}

#[test]
fn moving_a_qp_to_reset_drops_its_completions() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let access = AccessFlags::LOCAL_WRITE;
    let attr = PairAttr {
        send_cqe: 32,
        recv_cqe: 32,
        access,
        ..PairAttr::new(cap(8, 1, 0))
    };
    with_rc_pair(
        &dev,
        attr,
        |RcPair {
             a, b, scq, rcq, mr, ..
         }| {
            let s = [sge(mr, 0, 8)];
            let r = [sge(mr, 1024, 64)];
            b.post_recv(&[RecvWr {
                wr_id: 1,
                sg_list: &r,
            }])
            .unwrap();
            a.post_send(&[send_wr(1, &s, SendOp::Send)]).unwrap();
            let mut reset = QpAttr::default();
            reset.qp_state = QpState::Reset;
            a.modify(&reset, QpAttrMask::STATE).unwrap();
            b.modify(&reset, QpAttrMask::STATE).unwrap();
            let mut wc = [Wc::EMPTY; 4];
            assert_eq!(scq.poll(&mut wc), 0, "a's send completion is gone");
            assert_eq!(rcq.poll(&mut wc), 0, "b's receive completion is gone");
            // Up again: only what comes after.
            connect_pair(a, b, access, Mtu::Mtu1024);
            b.post_recv(&[RecvWr {
                wr_id: 2,
                sg_list: &r,
            }])
            .unwrap();
            a.post_send(&[send_wr(2, &s, SendOp::Send)]).unwrap();
            assert_eq!(scq.poll(&mut wc), 1);
            assert_eq!(wc[0].wr_id, 2);
            assert_eq!(rcq.poll(&mut wc), 1);
            assert_eq!(wc[0].wr_id, 2);
        },
    );
}
