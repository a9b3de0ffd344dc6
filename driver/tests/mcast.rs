//! Multicast through the driver (`ibv_attach_mcast`, `ibv_detach_mcast`; seed 001) against
//! two model HCAs on one fabric: one copy per attached UD QP on every HCA, however often it
//! is attached; detach stops delivery; the sender's own QP gets a copy when attached (mlx5
//! loops multicast back unless `block_lb_mc`); Linux ib_core's checks before any command.

use bareverbs::verbs::*;
use bareverbs::{Config, Device, Error};
use bareverbs::{Invalid, Limit};
use bareverbs_model::SimHal;

mod common;
use common::{cap, region, send_wr, sge, two_hcas};

const QKEY: u32 = 0x1111;
const MLID: u16 = 0xc001;
/// A multicast GID (IBA 4.1.1: prefix 0xff, flags, scope 2: link-local).
const MGID: [u8; 16] = [0xff, 0x12, 0x40, 0x1b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

#[test]
fn datagrams_reach_every_attached_qp_once_on_every_hca() {
    let (h1, h2) = two_hcas();
    let (d1, d2) = (
        Device::bring_up(&h1, Config::default()).unwrap(),
        Device::bring_up(&h2, Config::default()).unwrap(),
    );
    let (p1, p2) = (d1.alloc_pd().unwrap(), d2.alloc_pd().unwrap());
    let (mut c1, mut c2) = (d1.create_cq(64).unwrap(), d2.create_cq(64).unwrap());
    let ud1 = QpInitAttr::new(QpType::Ud, &c1, &c1, cap(8, 1, 0));
    let ud2 = QpInitAttr::new(QpType::Ud, &c2, &c2, cap(8, 1, 0));
    let mut s = p1.create_qp(&ud1).unwrap();
    let mut r1 = p1.create_qp(&ud1).unwrap();
    let mut r2 = p2.create_qp(&ud2).unwrap();
    let mut r3 = p2.create_qp(&ud2).unwrap();
    for q in [&mut s, &mut r1, &mut r2, &mut r3] {
        q.to_init(1, 0, AccessFlags::empty(), QKEY).unwrap();
        q.to_rtr(0, 0, AhAttr::default(), Mtu::Mtu1024).unwrap();
        q.to_rts(0).unwrap();
    }
    let (m1, m2) = (
        region(&p1, 8192, AccessFlags::LOCAL_WRITE),
        region(&p2, 8192, AccessFlags::LOCAL_WRITE),
    );
    // Linux ib_attach_mcast's checks, before any command.
    let bad = |what| Err(Error::InvalidArgument { what });
    let rc = p1
        .create_qp(&QpInitAttr::new(QpType::Rc, &c1, &c1, cap(8, 1, 0)))
        .unwrap();
    let mut rc = rc;
    assert_eq!(rc.attach_mcast(&MGID, MLID), bad(Invalid::MulticastQpType));
    let mut unicast = MGID;
    unicast[0] = 0xfe;
    assert_eq!(r1.attach_mcast(&unicast, MLID), bad(Invalid::MulticastGid));
    assert_eq!(r1.attach_mcast(&MGID, 0x10), bad(Invalid::MulticastLid));
    assert_eq!(r1.attach_mcast(&MGID, 0xffff), bad(Invalid::MulticastLid));
    assert_eq!(r1.detach_mcast(&MGID, MLID), bad(Invalid::NotAttached));

    r1.attach_mcast(&MGID, MLID).unwrap();
    r2.attach_mcast(&MGID, MLID).unwrap();
    r2.attach_mcast(&MGID, MLID).unwrap(); // twice: still one copy
    r3.attach_mcast(&MGID, MLID).unwrap();
    assert_eq!(r2.mcast_groups(), &[MGID]);

    let ah = p1
        .create_ah(AhAttr {
            dlid: MLID,
            port_num: 1,
            is_global: true,
            grh: GlobalRoute {
                dgid: MGID,
                hop_limit: 1,
                ..GlobalRoute::default()
            },
            ..AhAttr::default()
        })
        .unwrap();
    let rbuf = |m: &Mr<'_, '_, &SimHal>, k: u64| [sge(m, 1024 * k, 40 + 64)];
    let post = |q: &mut Qp<'_, '_, &SimHal>, m: &Mr<'_, '_, &SimHal>, k: u64| {
        q.post_recv(&[RecvWr {
            wr_id: k,
            sg_list: &rbuf(m, k),
        }])
        .unwrap();
    };
    post(&mut r1, &m1, 1);
    post(&mut s, &m1, 2);
    post(&mut r2, &m2, 1);
    post(&mut r3, &m2, 2);
    let send = |s: &mut Qp<'_, '_, &SimHal>, byte: u8| {
        m1.buf().fill(4096, 16, byte).unwrap();
        let sg = [sge(&m1, 4096, 16)];
        s.post_send(&[SendWr {
            ud: Some(ah.dest(0xff_ffff, QKEY).unwrap()),
            ..send_wr(9, &sg, SendOp::Send)
        }])
        .unwrap();
    };
    send(&mut s, 0xa1);
    let mut wc = [Wc::EMPTY; 8];
    // HCA 1: the send completion and r1's copy; the sender is not attached: none for it.
    let n = c1.poll(&mut wc);
    let mut got: Vec<_> = wc[..n].iter().map(|w| (w.qp_num, w.opcode)).collect();
    got.sort_by_key(|g| g.0);
    let mut want = vec![
        (s.qpn().raw(), WcOpcode::Send),
        (r1.qpn().raw(), WcOpcode::Recv),
    ];
    want.sort_by_key(|g| g.0);
    assert_eq!(got, want);
    // HCA 2: one copy each for r2 (attached twice) and r3, with the GRH and the sender.
    let n = c2.poll(&mut wc);
    assert_eq!(n, 2);
    for w in &wc[..n] {
        assert_eq!(w.status, WcStatus::Success);
        assert!(w.wc_flags.contains(WcFlags::GRH));
        assert_eq!((w.src_qp, w.slid, w.byte_len), (s.qpn().raw(), 1, 40 + 16));
        let mut b = [0u8; 16];
        m2.buf()
            .read_bytes(1024 * w.wr_id as usize + 40, &mut b)
            .unwrap();
        assert_eq!(b, [0xa1; 16]);
        let mut grh = [0u8; 40];
        m2.buf()
            .read_bytes(1024 * w.wr_id as usize, &mut grh)
            .unwrap();
        assert_eq!(grh[24..40], MGID, "the GRH names the group");
    }

    // r3 leaves; the sender joins: it gets its own datagram back (loopback).
    r3.detach_mcast(&MGID, MLID).unwrap();
    s.attach_mcast(&MGID, MLID).unwrap();
    post(&mut r1, &m1, 3);
    post(&mut r2, &m2, 3);
    post(&mut r3, &m2, 4);
    send(&mut s, 0xb2);
    let n = c1.poll(&mut wc);
    let recvs: Vec<_> = wc[..n]
        .iter()
        .filter(|w| w.opcode == WcOpcode::Recv)
        .map(|w| w.qp_num)
        .collect();
    assert_eq!(recvs.len(), 2);
    assert!(recvs.contains(&s.qpn().raw()) && recvs.contains(&r1.qpn().raw()));
    let n = c2.poll(&mut wc);
    assert_eq!(n, 1, "r3 detached");
    assert_eq!(wc[0].qp_num, r2.qpn().raw());

    // An attached QP is not destroyed; detached, it is.
    let (e, mut r1) = r1.destroy().err().unwrap();
    assert_eq!(
        e,
        Error::InvalidArgument {
            what: Invalid::AttachedToMulticast
        }
    );
    r1.detach_mcast(&MGID, MLID).unwrap();
    assert!(r1.destroy().is_ok());
    // Groups per QP are bounded.
    for k in 0..MAX_QP_MCGS as u8 {
        let mut g = MGID;
        g[15] = 0x10 + k;
        r3.attach_mcast(&g, MLID).unwrap();
    }
    let mut g = MGID;
    g[15] = 0x7f;
    assert!(matches!(
        r3.attach_mcast(&g, MLID),
        Err(Error::ExceedsLimit {
            limit: Limit::MulticastGroups,
            ..
        })
    ));
    // Dropping attached QPs detaches them first.
    drop((s, r2, r3, rc));
}
