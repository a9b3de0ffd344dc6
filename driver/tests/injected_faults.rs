//! What the driver does when the bus or the device loses something (faults the model
//! injects): a lost send doorbell delays the work to the next doorbell, which carries the
//! count in the doorbell record, so nothing is lost; a lost completion hides one request's
//! `wr_id` for good (hardware never drops a CQE; this shows the driver survives it), and the
//! queue's space still comes back with the next completion. A late CQE is simply found by a
//! later poll, in order; a lost completion event is recovered by arming again (mlx5 fires at
//! once when completions wait), a late one arrives late; a forced CQ overrun is a CQ error and
//! a fatal QP, a forced EQ overrun loses that one event and no later one.

use bareverbs::verbs::*;
use bareverbs::{AsyncEvent, Config, Device};
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;
use std::time::Duration;

mod common;
use common::{cap, poll_one, with_rc_pair, PairAttr};

/// A signaled zero-length RDMA WRITE to `at` in `mr`.
fn write(id: u64, mr: &Mr<'_, '_, &SimHal>, at: u64) -> SendWr<'static> {
    SendWr {
        wr_id: id,
        sg_list: &[],
        inline_data: &[],
        op: SendOp::RdmaWrite {
            remote_addr: mr.addr() + at,
            rkey: mr.rkey().raw(),
        },
        flags: SendFlags::SIGNALED,
        ud: None,
    }
}

/// Runs `f` with an RC QP connected to another on one model HCA, its send CQ, and a region
/// both may write; send queues `depth` deep.
fn with_pair(
    depth: u32,
    f: impl FnOnce(&SimHal, &mut Cq<'_, &SimHal>, &mut Qp<'_, '_, &SimHal>, &Mr<'_, '_, &SimHal>),
) {
    with_pair_on(depth, |_, hal, scq, a, mr| f(hal, scq, a, mr));
}

/// [`with_pair`], with the device too.
fn with_pair_on(
    depth: u32,
    f: impl FnOnce(
        &Device<&SimHal>,
        &SimHal,
        &mut Cq<'_, &SimHal>,
        &mut Qp<'_, '_, &SimHal>,
        &Mr<'_, '_, &SimHal>,
    ),
) {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let attr = PairAttr {
        send_cqe: 16,
        recv_cqe: 16,
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        ..PairAttr::new(cap(depth, 1, 16))
    };
    with_rc_pair(&dev, attr, |p| f(&dev, &hal, &mut p.scq, &mut p.a, &p.mr));
}

#[test]
fn a_lost_doorbell_delays_the_work_to_the_next_one() {
    with_pair(8, |hal, scq, a, mr| {
        let data = |id: u64| id.to_le_bytes();
        hal.model().set_faults(|f| f.lose_doorbells = 1);
        for id in [1u64, 2] {
            let bytes = data(id);
            let wr = SendWr {
                inline_data: &bytes,
                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                ..write(id, mr, 8 * id)
            };
            a.post_send(&[wr]).unwrap();
            if id == 1 {
                assert_eq!(scq.poll(&mut [Wc::EMPTY; 4]), 0, "its doorbell was lost");
            }
        }
        // The second doorbell's record counts both requests: both run, in order.
        let mut wc = [Wc::EMPTY; 4];
        assert_eq!(scq.poll(&mut wc), 2);
        assert_eq!((wc[0].wr_id, wc[1].wr_id), (1, 2));
        for id in [1u64, 2] {
            let mut got = [0u8; 8];
            mr.buf().read_bytes(8 * id as usize, &mut got).unwrap();
            assert_eq!(got, data(id));
        }
    });
}

#[test]
fn a_lost_completion_hides_one_wr_id_and_the_queue_keeps_going() {
    with_pair(4, |hal, scq, a, mr| {
        hal.model().set_faults(|f| f.lose_cqes = 1);
        a.post_send(&[write(1, mr, 64)]).unwrap();
        assert_eq!(scq.poll(&mut [Wc::EMPTY; 4]), 0, "its completion was lost");
        // Many more requests than the queue holds: each completes once, in order, so the space
        // of the lost one came back with the next completion.
        for id in 2..40u64 {
            a.post_send(&[write(id, mr, 64)]).unwrap();
            assert_eq!(poll_one(scq).wr_id, id);
        }
    });
}

const LATE: Duration = Duration::from_millis(1);

/// The events waiting now.
fn events(dev: &Device<&SimHal>) -> Vec<AsyncEvent> {
    dev.poll_events();
    std::iter::from_fn(|| dev.next_event()).collect()
}

#[test]
fn a_late_completion_is_found_by_a_later_poll_with_the_ones_behind_it_in_order() {
    with_pair(8, |hal, scq, a, mr| {
        hal.model().set_faults(|f| {
            f.late_cqes = 1;
            f.late_by = LATE;
        });
        a.post_send(&[write(1, mr, 64), write(2, mr, 72)]).unwrap();
        // The first CQE is late and the second waits behind it (a CQ is written in order).
        assert_eq!(scq.poll(&mut [Wc::EMPTY; 4]), 0);
        assert_eq!(hal.model().with(|h| h.late_entries()), 2);
        hal.delay(LATE);
        let mut wc = [Wc::EMPTY; 4];
        assert_eq!(scq.poll(&mut wc), 2);
        assert_eq!((wc[0].wr_id, wc[1].wr_id), (1, 2));
        assert!(wc[..2].iter().all(|w| w.status == WcStatus::Success));
    });
}

#[test]
fn a_lost_completion_event_is_recovered_by_arming_again_and_a_late_one_arrives_late() {
    with_pair_on(8, |dev, hal, scq, a, mr| {
        let cqn = scq.cqn().raw();
        let fired = [AsyncEvent::Completion { cqn }];
        // Lost: the completion is there, its event never comes.
        hal.model().set_faults(|f| f.lose_eqes = 1);
        scq.req_notify(false).unwrap();
        a.post_send(&[write(1, mr, 64)]).unwrap();
        assert_eq!(events(dev), []);
        // Arming again with a completion waiting fires at once: an application that waits
        // with a timeout and re-arms loses nothing.
        scq.req_notify(false).unwrap();
        assert_eq!(events(dev), fired);
        scq.ack_events(1).unwrap();
        assert_eq!(poll_one(scq).wr_id, 1);
        // Late: the event comes when the device writes it, the completion is polled as ever.
        hal.model().set_faults(|f| {
            f.late_eqes = 1;
            f.late_by = LATE;
        });
        scq.req_notify(false).unwrap();
        a.post_send(&[write(2, mr, 64)]).unwrap();
        assert_eq!(events(dev), []);
        hal.delay(LATE);
        assert_eq!(events(dev), fired);
        scq.ack_events(1).unwrap();
        assert_eq!(poll_one(scq).wr_id, 2);
    });
}

#[test]
fn a_forced_cq_overrun_is_a_cq_error_and_a_fatal_qp() {
    with_pair_on(8, |dev, hal, scq, a, mr| {
        a.post_send(&[write(1, mr, 64)]).unwrap();
        assert_eq!(poll_one(scq).wr_id, 1);
        hal.model().set_faults(|f| f.overrun_cq = true);
        a.post_send(&[write(2, mr, 64)]).unwrap();
        let (cqn, qpn) = (scq.cqn().raw(), a.qpn().raw());
        assert_eq!(
            events(dev),
            [
                AsyncEvent::CqErr { cqn, syndrome: 1 },
                AsyncEvent::QpFatal { qpn }
            ]
        );
        assert_eq!(
            scq.poll(&mut [Wc::EMPTY; 4]),
            0,
            "the CQ takes nothing more"
        );
        let (attr, _) = a.query_qp(QpAttrMask::STATE).unwrap();
        assert_eq!(attr.qp_state, QpState::Err);
    });
}

#[test]
fn a_forced_eq_overrun_loses_that_event_and_no_later_one() {
    with_pair_on(8, |dev, hal, scq, a, mr| {
        let cqn = scq.cqn().raw();
        let eqn = dev.async_eqn().unwrap().raw();
        hal.model().set_faults(|f| f.overrun_eq = true);
        scq.req_notify(false).unwrap();
        a.post_send(&[write(1, mr, 64)]).unwrap();
        assert_eq!(events(dev), []);
        assert!(hal.model().with(|h| h.eq(eqn).unwrap().overrun));
        assert_eq!(poll_one(scq).wr_id, 1);
        scq.req_notify(false).unwrap();
        a.post_send(&[write(2, mr, 64)]).unwrap();
        assert_eq!(events(dev), [AsyncEvent::Completion { cqn }]);
        scq.ack_events(1).unwrap();
        assert_eq!(poll_one(scq).wr_id, 2);
    });
}
