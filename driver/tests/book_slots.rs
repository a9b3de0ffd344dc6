//! QP books in slots of their own (`slot_table.rs`): a CQ caches the slot of the QP it met
//! last, and slots are given to new QPs as old ones go. Here QPs are created, used and
//! destroyed over and over on one thread while another polls their CQ: every completion must
//! carry the `wr_id` its own QP posted, whatever slot the QP got and whatever the poller had
//! cached, and destroying a QP must not wait forever on a poll.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bareverbs::verbs::*;
use bareverbs::{Config, Device};
use bareverbs_model::SimHal;

mod common;
use common::{all_access, cap, connect_pair, region};

/// `wr_id` of request `k` of round `round`'s QP numbered `qpn`: the poller checks it against
/// the completion's QP.
fn wr_id(qpn: u32, round: u64, k: u64) -> u64 {
    (u64::from(qpn) << 32) | (round << 8) | k
}

#[test]
fn qps_come_and_go_while_another_thread_polls_their_cq() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let scq = Mutex::new(dev.create_cq(256).unwrap());
    let rcq = dev.create_cq(256).unwrap();
    let mr = region(&pd, 8192, all_access());
    let done = AtomicBool::new(false);
    // The last wr_id the poller saw.
    let latest = AtomicU64::new(0);
    let deadline = Instant::now() + Duration::from_secs(120);
    let rounds = 200;
    let seen = std::thread::scope(|s| {
        let poller = s.spawn(|| {
            let mut seen = 0u64;
            // Completions of one QP come in order, and QPs one after another: each wr_id is
            // above the last (a completion of a gone QP handed out with its successor's book,
            // same QPN, would repeat one).
            let mut last = 0u64;
            let mut wc = [Wc::EMPTY; 8];
            while !done.load(Ordering::Acquire) {
                assert!(Instant::now() < deadline, "poller stalled");
                let n = scq.lock().unwrap().poll(&mut wc);
                for w in &wc[..n] {
                    assert_eq!(w.status, WcStatus::Success, "{w:?}");
                    assert_eq!(w.wr_id >> 32, u64::from(w.qp_num), "{w:?}");
                    assert!(
                        w.wr_id & 0xffff_ffff > last & 0xffff_ffff || seen == 0,
                        "{w:?}"
                    );
                    last = w.wr_id;
                    latest.store(w.wr_id, Ordering::Release);
                    seen += 1;
                }
            }
            seen
        });
        let cap = cap(8, 1, 0);
        for round in 0..rounds {
            let (mut a, mut b) = {
                let scq = scq.lock().unwrap();
                let init = QpInitAttr::new(QpType::Rc, &*scq, &rcq, cap);
                (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap())
            };
            connect_pair(&mut a, &mut b, all_access(), Mtu::Mtu1024);
            let sg = [common::sge(&mr, 0, 64)];
            let qpn = a.qpn().raw();
            for k in 0..4 {
                let r = a.send_batch(|q| {
                    q.rdma_write(
                        wr_id(qpn, round, k),
                        SendFlags::SIGNALED,
                        mr.addr() + 4096,
                        mr.rkey().raw(),
                        &sg,
                    )
                });
                r.unwrap().unwrap();
            }
            // Every other round the QPs go while their completions may still wait in the
            // CQ (they are purged); the others wait for the poller first.
            if round % 2 == 1 {
                while latest.load(Ordering::Acquire) != wr_id(qpn, round, 3) {
                    assert!(Instant::now() < deadline, "completions never polled");
                    std::thread::yield_now();
                }
            }
            drop((a, b));
        }
        done.store(true, Ordering::Release);
        poller.join().unwrap()
    });
    // Completions of QPs destroyed before they were polled are dropped with them; those of
    // the rounds that waited were all seen, each with its own QP's wr_id (checked above).
    assert!(seen >= rounds / 2 * 4 && seen <= rounds * 4, "{seen}");
    drop(mr);
    drop(scq);
    drop(rcq);
    drop(pd);
    assert_eq!(hal.model().with(|h| h.object_counts()), (0, 0, 0));
}
