//! Answering a datagram through an AH made from its completion (`ibv_init_ah_from_wc`,
//! `ibv_create_ah_from_wc`, seed 001; libibverbs 56 verbs.c for InfiniBand: DLID from the
//! SLID, SL, path bits, and with a GRH the GRH reversed, the source GID index found in the
//! port's table), between two model HCAs, with and without a GRH; and `ibv_query_gid`.

use bareverbs::verbs::*;
use bareverbs::{Config, Device, Error};
use bareverbs::{Invalid, Limit};

mod common;
use common::{cap, poll_one, region, send_wr, sge, two_hcas};

const QKEY: u32 = 0x1111;

#[test]
fn a_reply_through_the_ah_from_a_completion_reaches_the_sender() {
    let (h1, h2) = two_hcas();
    let (d1, d2) = (
        Device::bring_up(&h1, Config::default()).unwrap(),
        Device::bring_up(&h2, Config::default()).unwrap(),
    );
    // ibv_query_gid: entry 0 is the port's GID (subnet prefix fe80::/64, port GUID).
    let gid1 = d1.query_gid(1, 0).unwrap();
    let gid2 = d2.query_gid(1, 0).unwrap();
    assert_eq!(gid1[..8], 0xfe80_0000_0000_0000u64.to_be_bytes());
    assert_eq!(gid1[8..], d1.query_port(1).unwrap().port_guid.to_be_bytes());
    assert_eq!(d1.query_gid(1, 1).unwrap(), [0u8; 16], "empty entry");
    let len = d1.info().caps.gid_table_len;
    assert!(matches!(
        d1.query_gid(1, len),
        Err(Error::ExceedsLimit {
            limit: Limit::GidIndex,
            ..
        })
    ));
    assert_eq!(d1.query_gid(2, 0), Err(Error::NoSuchPort { port: 2 }));

    let (p1, p2) = (d1.alloc_pd().unwrap(), d2.alloc_pd().unwrap());
    let (mut cq1, mut cq2) = (d1.create_cq(16).unwrap(), d2.create_cq(16).unwrap());
    let mut a = p1
        .create_qp(&QpInitAttr::new(QpType::Ud, &cq1, &cq1, cap(4, 1, 0)))
        .unwrap();
    let mut b = p2
        .create_qp(&QpInitAttr::new(QpType::Ud, &cq2, &cq2, cap(4, 1, 0)))
        .unwrap();
    for q in [&mut a, &mut b] {
        q.to_init(1, 0, AccessFlags::empty(), QKEY).unwrap();
        q.to_rtr(0, 0, AhAttr::default(), Mtu::Mtu1024).unwrap();
        q.to_rts(0).unwrap();
    }
    let (m1, m2) = (
        region(&p1, 4096, AccessFlags::LOCAL_WRITE),
        region(&p2, 4096, AccessFlags::LOCAL_WRITE),
    );
    for global in [false, true] {
        // a → b, with a GRH or not.
        let to_b = AhAttr {
            dlid: 17,
            sl: 3,
            port_num: 1,
            is_global: global,
            grh: GlobalRoute {
                dgid: gid2,
                flow_label: 0x12345,
                hop_limit: 9,
                traffic_class: 0x20,
                sgid_index: 0,
            },
            ..AhAttr::default()
        };
        let ah = p1.create_ah(to_b).unwrap();
        b.post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &[sge(&m2, 0, 40 + 64)],
        }])
        .unwrap();
        m1.buf().write_bytes(2048, b"question").unwrap();
        let s = [sge(&m1, 2048, 8)];
        a.post_send(&[SendWr {
            ud: Some(ah.dest(b.qpn().raw(), QKEY).unwrap()),
            ..send_wr(1, &s, SendOp::Send)
        }])
        .unwrap();
        assert_eq!(poll_one(&mut cq1).status, WcStatus::Success);
        let wc = poll_one(&mut cq2);
        assert_eq!(wc.wc_flags.contains(WcFlags::GRH), global);
        let mut grh = [0u8; 40];
        m2.buf().read_bytes(0, &mut grh).unwrap();

        let attr = d2.init_ah_from_wc(1, &wc, Some(&grh)).unwrap();
        assert_eq!((attr.dlid, attr.sl, attr.port_num), (1, 3, 1));
        assert_eq!(attr.is_global, global);
        if global {
            // The GRH reversed: back to a's GID, from b's GID (index 0), the flow label,
            // hop limit and traffic class the request carried.
            assert_eq!(
                attr.grh,
                GlobalRoute {
                    dgid: gid1,
                    flow_label: 0x12345,
                    hop_limit: 9,
                    traffic_class: 0x20,
                    sgid_index: 0,
                }
            );
        }
        // The reply through it reaches a.
        let back = p2.create_ah_from_wc(&wc, Some(&grh), 1).unwrap();
        a.post_recv(&[RecvWr {
            wr_id: 2,
            sg_list: &[sge(&m1, 0, 40 + 64)],
        }])
        .unwrap();
        m2.buf().write_bytes(2048, b"answer!!").unwrap();
        let s = [sge(&m2, 2048, 8)];
        b.post_send(&[SendWr {
            ud: Some(back.dest(wc.src_qp, QKEY).unwrap()),
            ..send_wr(2, &s, SendOp::Send)
        }])
        .unwrap();
        assert_eq!(poll_one(&mut cq2).status, WcStatus::Success);
        let r = poll_one(&mut cq1);
        assert_eq!((r.wr_id, r.src_qp), (2, b.qpn().raw()));
        assert_eq!(r.wc_flags.contains(WcFlags::GRH), global);
        let mut got = [0u8; 8];
        m1.buf().read_bytes(40, &mut got).unwrap();
        assert_eq!(&got, b"answer!!");

        if global {
            let bad = |what| Err::<AhAttr, _>(Error::InvalidArgument { what });
            assert_eq!(d2.init_ah_from_wc(1, &wc, None), bad(Invalid::GrhMissing));
            let mut other = grh;
            other[39] ^= 1; // a destination GID b's port does not have
            assert_eq!(
                d2.init_ah_from_wc(1, &wc, Some(&other)),
                bad(Invalid::GidNotFound)
            );
            let mut mcast = grh;
            mcast[24] = 0xff;
            assert_eq!(
                d2.init_ah_from_wc(1, &wc, Some(&mcast)),
                bad(Invalid::GrhUnsupported)
            );
            let mut v4 = grh;
            v4[0] = 0x45;
            assert_eq!(
                d2.init_ah_from_wc(1, &wc, Some(&v4)),
                bad(Invalid::GrhUnsupported)
            );
            assert_eq!(
                d2.init_ah_from_wc(2, &wc, Some(&grh)),
                Err(Error::NoSuchPort { port: 2 })
            );
        }
    }
}
