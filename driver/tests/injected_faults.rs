//! What the driver does when the bus or the device loses something (faults the model
//! injects): a lost send doorbell delays the work to the next doorbell, which carries the
//! count in the doorbell record, so nothing is lost; a lost completion hides one request's
//! `wr_id` for good (hardware never drops a CQE; this shows the driver survives it), and the
//! queue's space still comes back with the next completion.

use bareverbs::verbs::*;
use bareverbs::{Config, Device};
use bareverbs_model::SimHal;

mod common;
use common::{connect_pair, poll_one, region};

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
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, rcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
    let init = QpInitAttr::new(QpType::Rc, &scq, &rcq, common::cap_with(depth, 1, 16));
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    connect_pair(&mut a, &mut b, access, Mtu::Mtu1024);
    let mr = region(&hal, &pd, 4096, access);
    f(&hal, &mut scq, &mut a, &mr);
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
