//! Per-QP bookkeeping that both posting and polling need: the `wr_id` of every outstanding
//! request and how far each queue has completed. It lives in HAL memory (the driver allocates
//! nothing else); the device is never given its address, so values are kept in the CPU's byte
//! order.
//!
//! Posting and polling take the table's read lock once per call; creating and destroying QPs
//! take the write lock. Commands never touch it, so a slow command cannot stall the data path.

use core::hash::Hasher;
use core::sync::atomic::{AtomicU16, Ordering};

use bareverbs_hal::{Hal, SharedDma, Slots};
use hash32::BuildHasherDefault;

/// Most QPs with posted work at once.
pub const MAX_QPS: usize = 64;

/// The table of books, by QP number.
pub type Books<H> = heapless::IndexMap<u32, Book<H>, BuildHasherDefault<QpnHasher>, MAX_QPS>;

/// Hashes a QP number to itself. QPNs are distinct 24-bit numbers, mostly consecutive, so
/// their low bits already spread over the table; FNV's byte loop cost 30-odd instructions on
/// every post and poll.
#[derive(Default)]
pub struct QpnHasher(u64);

impl Hasher for QpnHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n);
    }
}

/// One QP's book.
pub struct Book<H: Hal> {
    /// Per send WQEBB index: the request's `wr_id` (u64) at 16·i and the WQEBB counter after
    /// the request (u16) at 16·i + 8.
    pub(crate) sq: SharedDma<H::Dma>,
    /// Per receive index: the request's `wr_id`.
    pub(crate) rq: SharedDma<H::Dma>,
    /// Send WQEBBs (entries of `sq`), a power of two.
    pub(crate) sq_count: usize,
    /// Receive entries of `rq`, a power of two.
    pub(crate) rq_count: usize,
    /// WQEBB counter up to which send requests have completed.
    pub(crate) sq_tail: AtomicU16,
    /// Receive requests completed.
    pub(crate) rq_tail: AtomicU16,
}

impl<H: Hal> Book<H> {
    /// Views for one post or poll call: the bounds are checked here, once, not per entry.
    /// `None` only if the book's memory is shorter than its counts (never, as created).
    #[inline]
    pub(crate) fn view(&self) -> Option<BookView<'_>> {
        Some(BookView {
            sq: self.sq.slots(0, self.sq_count).ok()?,
            rq: self.rq.slots(0, self.rq_count).ok()?,
            sq_tail: &self.sq_tail,
            rq_tail: &self.rq_tail,
        })
    }
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
        self.sq_tail.store(e.read_ne16(8), Ordering::Release);
        e.read_ne64(0)
    }

    /// The `wr_id` of the receive at `index`, marking it complete.
    #[inline(always)]
    pub(crate) fn complete_recv(&self, index: u16) -> u64 {
        self.rq_tail.store(index.wrapping_add(1), Ordering::Release);
        self.rq.slot(usize::from(index)).read_ne64(0)
    }
}
