//! Per-QP bookkeeping that both posting and polling need: the `wr_id` of every outstanding
//! request and how far each queue has completed. It lives in HAL memory (the driver allocates
//! nothing else); the device is never given its address, so values are kept in the CPU's byte
//! order.
//!
//! Each book sits in a slot of the device's [`Books`] (`slot_table.rs`): a [`Qp`] keeps a
//! reference to its slot, so a post locks that one slot and looks nothing up; a CQ keeps the
//! slot of the QP whose completions it met last, so a poll looks a QPN up only when the QP
//! changes.
//!
//! [`Qp`]: crate::verbs::Qp

use core::sync::atomic::{AtomicU16, Ordering};

use bareverbs_hal::{DmaError, Hal, RingShape, SharedDma, Slots};

use crate::slot_table::{Keyed, SlotTable, TableSlot};
use crate::table::Table;

/// Most QPs a device holds at once: 64, with the slots inline in `Device`; `None` (the device's
/// own limit) with the `alloc` feature, which keeps them on the heap, in chunks made as needed
/// (up to 2^20 slots, past the QP count of any ConnectX).
pub const MAX_QPS: Option<usize> = Table::<(), INLINE_QPS>::capacity();

/// Entries of the inline book table (the CQ-use table has twice as many).
pub(crate) const INLINE_QPS: usize = 64;

/// Every QP's book, by QP number.
pub(crate) type Books<H> = SlotTable<Book<H>, INLINE_QPS>;

/// One QP's place in the device's [`Books`].
pub(crate) type BookSlot<H> = TableSlot<Book<H>>;

impl<H: Hal> Keyed for Book<H> {
    fn key(&self) -> u32 {
        self.qpn
    }
}

/// One QP's book.
pub struct Book<H: Hal> {
    /// The QP's number.
    pub(crate) qpn: u32,
    /// Per send WQEBB index i: the request's `wr_id` (u64) at 16·i and the WQEBB counter after
    /// the request (u16) at 16·i + 8; then per receive index j: the request's `wr_id` at
    /// 16·`sq_count` + 8·j.
    pub(crate) mem: SharedDma<H::Dma>,
    /// Where the send and the receive entries are in `mem`, checked once.
    sq_shape: RingShape<16>,
    rq_shape: RingShape<8>,
    /// WQEBB counter up to which send requests have completed.
    pub(crate) sq_tail: AtomicU16,
    /// Receive requests completed.
    pub(crate) rq_tail: AtomicU16,
    /// WQEBB counter of the last send doorbell and receive requests published: what a
    /// software flush completes up to (`cq_flush.rs`).
    pub(crate) sq_head: AtomicU16,
    pub(crate) rq_head: AtomicU16,
    /// The CQs the send and the receive queue complete into.
    pub(crate) cqns: [u32; 2],
    /// Where the QP's work queues are, on QPs that scatter to CQEs (`cq_scatter.rs`).
    pub(crate) ring: Option<WqRing>,
}

impl<H: Hal> Book<H> {
    /// The book of a new QP: nothing posted.
    ///
    /// # Errors
    /// [`DmaError`] when `mem` is shorter than [`Book::bytes`] of the sizes.
    pub(crate) fn new(
        qpn: u32,
        mem: SharedDma<H::Dma>,
        log_sq: u8,
        log_rq: u8,
        cqns: [u32; 2],
    ) -> Result<Self, DmaError> {
        let sq_count = 1usize << log_sq;
        Ok(Book {
            qpn,
            sq_shape: mem.ring_shape(0, sq_count)?,
            rq_shape: mem.ring_shape(16 * sq_count, 1 << log_rq)?,
            mem,
            sq_tail: AtomicU16::new(0),
            rq_tail: AtomicU16::new(0),
            sq_head: AtomicU16::new(0),
            rq_head: AtomicU16::new(0),
            cqns,
            ring: None,
        })
    }

    /// Everything posted is forgotten (the QP went to RESET).
    pub(crate) fn reset(&self) {
        for c in [&self.sq_tail, &self.rq_tail, &self.sq_head, &self.rq_head] {
            c.store(0, Ordering::Release);
        }
    }

    /// Bytes of the book of a QP with `1 << log_sq` send WQEBBs and `1 << log_rq` receives.
    pub(crate) fn bytes(log_sq: u8, log_rq: u8) -> usize {
        (16 << log_sq) + (8 << log_rq)
    }

    /// The send half of the book, for one send batch (bounds checked here, once): the
    /// entries, the tail and the head.
    #[inline]
    pub(crate) fn send_view(&self) -> Option<(Slots<'_, 16>, &AtomicU16, &AtomicU16)> {
        Some((
            self.mem.slots_of(&self.sq_shape)?,
            &self.sq_tail,
            &self.sq_head,
        ))
    }

    /// Views for one post or poll call, from the shapes checked when the book was made (never
    /// `None`: the book keeps the memory they were checked against).
    #[inline]
    pub(crate) fn view(&self) -> Option<BookView<'_>> {
        Some(BookView {
            sq: self.mem.slots_of(&self.sq_shape)?,
            rq: self.mem.slots_of(&self.rq_shape)?,
            sq_tail: &self.sq_tail,
            rq_tail: &self.rq_tail,
        })
    }
}

/// Where a QP's work queues are, for reading a WQE back (set only on QPs that scatter to
/// CQEs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct WqRing {
    /// Device address of the work buffer (receive queue first, then send queue).
    pub(crate) iova: u64,
    /// Byte offset of the send queue.
    pub(crate) sq_base: u64,
    /// log2 of the send queue's WQEBBs, of the receive WQEs and of their stride.
    pub(crate) log_sq: u8,
    pub(crate) log_rq: u8,
    pub(crate) rq_shift: u8,
    /// A DCI: its send WQEs carry a 48-byte address vector after the control segment.
    pub(crate) dci: bool,
}

/// A [`Book`] seen through ring views (indices masked, values in the CPU's byte order).
#[derive(Clone, Copy)]
pub(crate) struct BookView<'a> {
    pub(crate) sq: Slots<'a, 16>,
    pub(crate) rq: Slots<'a, 8>,
    pub(crate) sq_tail: &'a AtomicU16,
    pub(crate) rq_tail: &'a AtomicU16,
}

impl BookView<'_> {
    /// The `wr_id` of the send request at WQEBB `index`, marking everything up to it complete.
    #[inline(always)]
    pub(crate) fn complete_send(&self, index: u16) -> u64 {
        let e = self.sq.slot(usize::from(index));
        // The `wr_id` is read before the tail moves: once it has, a poster on another thread
        // may reuse the entry (the other order handed back a later request's `wr_id`).
        let wr_id = e.read_ne64(0);
        self.sq_tail.store(e.read_ne16(8), Ordering::Release);
        wr_id
    }

    /// The `wr_id` of the receive at `index`, marking it complete.
    #[inline(always)]
    pub(crate) fn complete_recv(&self, index: u16) -> u64 {
        // As in `complete_send`: the entry is read before it is given back.
        let wr_id = self.rq.slot(usize::from(index)).read_ne64(0);
        self.rq_tail.store(index.wrapping_add(1), Ordering::Release);
        wr_id
    }
}
