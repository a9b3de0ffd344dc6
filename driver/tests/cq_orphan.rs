//! A CQ dropped while QPs still complete into it: kept (the device may write it), reported,
//! and destroyed with its memory freed when its last QP goes. ibverbs refuses
//! `ibv_destroy_cq` with EBUSY in that case (seed 001 `ibv_destroy_cq`: "fails if any queue
//! pair is still associated with this CQ"); a Rust drop cannot be refused.

use bareverbs::verbs::*;
use bareverbs::{Config, Device};
use bareverbs_model::SimHal;

mod common;
use common::{cap, connect_pair, region, send_wr, sge};

#[test]
fn a_cq_dropped_in_use_lives_until_its_last_qp_goes() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let live = || hal.model().memory().allocations();
    let pd = dev.alloc_pd().unwrap();
    let before = live();
    let shared = dev.create_cq(8).unwrap();
    let own = dev.create_cq(8).unwrap();
    let cqn = shared.cqn().raw();
    let init = QpInitAttr::new(QpType::Rc, &shared, &own, cap(8, 1, 0));
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect_pair(&mut a, &mut b, AccessFlags::LOCAL_WRITE, Mtu::Mtu1024);

    // Refused by name when asked; kept, not leaked, when dropped.
    let (e, shared) = shared.destroy().unwrap_err();
    assert!(matches!(e, bareverbs::Error::Busy));
    drop(shared);
    assert_eq!(dev.orphaned_cqs(), 1);
    assert!(
        hal.model().with(|h| h.cq(cqn).is_some()),
        "still on the device"
    );

    // The QPs still work; their send completions land in the kept CQ.
    let mr = region(&pd, 4096, AccessFlags::LOCAL_WRITE);
    let s = [sge(&mr, 0, 8)];
    let r = [sge(&mr, 1024, 64)];
    b.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: &r,
    }])
    .unwrap();
    a.post_send(&[send_wr(1, &s, SendOp::Send)]).unwrap();
    assert!(hal.model().with(|h| h.cq(cqn).unwrap().producer) >= 1);

    // One user left: still kept. The last one gone: destroyed and its memory freed.
    a.destroy().map_err(|(e, _)| e).unwrap();
    assert_eq!(dev.orphaned_cqs(), 1);
    assert!(hal.model().with(|h| h.cq(cqn).is_some()));
    b.destroy().map_err(|(e, _)| e).unwrap();
    assert_eq!(dev.orphaned_cqs(), 0);
    assert!(hal.model().with(|h| h.cq(cqn).is_none()), "destroyed");
    drop(own);
    drop(mr);
    assert_eq!(live(), before, "every buffer of the CQ freed");
    drop(pd);
    dev.teardown().unwrap();
    assert_eq!(hal.model().pages_held(), 0);
}
