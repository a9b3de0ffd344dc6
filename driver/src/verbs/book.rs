//! Per-QP bookkeeping that both posting and polling need: the `wr_id` of every outstanding
//! request and how far each queue has completed. It lives in HAL memory (the driver allocates
//! nothing else); the device is never given its address, so values are kept in the CPU's byte
//! order.
//!
//! Posting and polling take the table's read lock once per call; creating and destroying QPs
//! take the write lock. Commands never touch it, so a slow command cannot stall the data path.

use core::sync::atomic::{AtomicU16, Ordering};

use bareverbs_hal::{Hal, SharedDma};

/// Most QPs with posted work at once.
pub const MAX_QPS: usize = 64;

/// The table of books, by QP number.
pub type Books<H> = heapless::FnvIndexMap<u32, Book<H>, MAX_QPS>;

/// One QP's book.
pub struct Book<H: Hal> {
    /// Per send WQEBB index: the request's `wr_id` (u64) at 16·i and the WQEBB counter after
    /// the request (u16) at 16·i + 8.
    pub(crate) sq: SharedDma<H::Dma>,
    /// Per receive index: the request's `wr_id`.
    pub(crate) rq: SharedDma<H::Dma>,
    pub(crate) sq_mask: u16,
    pub(crate) rq_mask: u16,
    /// WQEBB counter up to which send requests have completed.
    pub(crate) sq_tail: AtomicU16,
    /// Receive requests completed.
    pub(crate) rq_tail: AtomicU16,
}

impl<H: Hal> Book<H> {
    /// The `wr_id` of the send request at WQEBB `index`, marking everything up to it complete.
    #[inline]
    pub(crate) fn complete_send(&self, index: u16) -> u64 {
        let at = usize::from(index & self.sq_mask) * 16;
        self.sq_tail
            .store(self.sq.read_ne16(at + 8), Ordering::Release);
        self.sq.read_ne64(at)
    }

    /// The `wr_id` of the receive at `index`, marking it complete.
    #[inline]
    pub(crate) fn complete_recv(&self, index: u16) -> u64 {
        self.rq_tail.store(index.wrapping_add(1), Ordering::Release);
        self.rq.read_ne64(usize::from(index & self.rq_mask) * 8)
    }
}
