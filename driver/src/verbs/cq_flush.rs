//! Completions made in software after a fatal device error (Linux mlx5_ib
//! `mlx5_ib_poll_sw_comp`, reset-flow support for kernel consumers): once the device is in its
//! error state it writes no more CQEs, so a poll hands back every request still outstanding on
//! the CQ's queues with [`WcStatus::WrFlushErr`] — each exactly once — and never reads the
//! ring again. As in mlx5_ib: send queues first, then receive queues; every send request gets
//! its completion, signaled or not; requests the device had completed but the CQ had not
//! polled yet are flushed too (the ring is no longer trusted); receives posted to an SRQ stay
//! with the SRQ (IBA: an SRQ's requests are not bound to a QP until consumed).

use core::sync::atomic::{AtomicU16, Ordering};

use bareverbs_hal::Hal;

use crate::verbs::wc::{Wc, WcStatus};
use crate::wq::book::Books;

/// `vendor_err` of a software flush: the flush syndrome (mlx5_ib
/// `MLX5_CQE_SYNDROME_WR_FLUSH_ERR`).
const FLUSH_SYNDROME: u32 = 0x05;

/// Fills `wc` with flushed completions of the requests outstanding on the queues that complete
/// into CQ `cqn`; returns how many.
pub(crate) fn poll_flushed<H: Hal>(books: &Books<H>, cqn: u32, wc: &mut [Wc]) -> usize {
    let mut n = 0;
    books.for_each(|b| {
        let Some(v) = b.view().filter(|_| b.cqns[0] == cqn) else {
            return;
        };
        // The book holds each send request's `wr_id` at its first WQEBB and the counter
        // after it.
        let entry = |at: u16| {
            let e = v.sq.slot(usize::from(at));
            (e.read_ne64(0), e.read_ne16(8))
        };
        n += flush(b.qpn, &b.sq_tail, &b.sq_head, entry, &mut wc[n..]);
    });
    books.for_each(|b| {
        let Some(v) = b.view().filter(|_| b.cqns[1] == cqn) else {
            return;
        };
        let entry = |at: u16| (v.rq.slot(usize::from(at)).read_ne64(0), at.wrapping_add(1));
        n += flush(b.qpn, &b.rq_tail, &b.rq_head, entry, &mut wc[n..]);
    });
    n
}

/// A flushed completion of QP `qpn`'s request `wr_id`.
fn flushed(qpn: u32, wr_id: u64) -> Wc {
    Wc {
        wr_id,
        status: WcStatus::WrFlushErr,
        vendor_err: FLUSH_SYNDROME,
        qp_num: qpn,
        ..Wc::EMPTY
    }
}

/// The requests of one queue from `tail` to `head`, one completion each; `entry(at)` is the
/// `wr_id` of the request at `at` and where the next one starts.
fn flush(
    qpn: u32,
    tail: &AtomicU16,
    head: &AtomicU16,
    entry: impl Fn(u16) -> (u64, u16),
    wc: &mut [Wc],
) -> usize {
    let end = head.load(Ordering::Acquire);
    let mut at = tail.load(Ordering::Acquire);
    let mut n = 0;
    while at != end && n < wc.len() {
        let (wr_id, next) = entry(at);
        // A request takes 1..=(end - at) entries; anything else is not a request this driver
        // wrote: the rest is given up rather than walked.
        let step = next.wrapping_sub(at);
        let next = if step == 0 || step > end.wrapping_sub(at) {
            end
        } else {
            next
        };
        wc[n] = flushed(qpn, wr_id);
        n += 1;
        // The `wr_id` is read before the space is handed back (as `BookView::complete_send`).
        tail.store(next, Ordering::Release);
        at = next;
    }
    n
}
