//! The receive ring of a shared receive queue (linked-list WQEs; PRM "Shared Receive Queue"):
//! receives posted at the head as rdma-core 56 providers/mlx5/srq.c `mlx5_post_srq_recv`
//! posts them (the 16-byte next segment, data segments, an invalid-lkey entry ending a short
//! list, the WQE counter in the doorbell record's first word), and each WQE relinked at the
//! tail as soon as its completion is polled (rdma-core 56 marks it free and relinks free WQEs
//! only when the list runs out, `set_next_tail`; either way the device follows one list). The
//! `wr_id` of every WQE is kept by index for the poll, in HAL memory the device is never
//! given. Each book sits in a slot of the device's [`SrqBooks`] (`slot_table.rs`): the SRQ
//! posts through its own slot, and the CQ poll finds an SRQ by the number its CQE carries,
//! keeping the slot of the last one it met. The checks a work request owes its verb are the
//! caller's (`verbs/srq_ring.rs`).

use bareverbs_firmware_cmd::ifc::{wqe_srq_next_seg, INVALID_LKEY};
use bareverbs_firmware_cmd::wqe_codec::data;
use bareverbs_hal::{dma_wmb, Hal, SharedDma, Slots};

use crate::slot_table::{Keyed, SlotTable, TableSlot};
use crate::wq::recv_queue::{write_recv_wqe, RECV_UNIT};

/// SRQs a device holds at once with the inline tables (`alloc` feature: the device's limit).
pub(crate) const INLINE_SRQS: usize = 16;

/// The table of SRQ books, by SRQ number.
pub(crate) type SrqBooks<H> = SlotTable<SrqBook<H>, INLINE_SRQS>;

/// One SRQ's place in the device's [`SrqBooks`].
pub(crate) type SrqSlot<H> = TableSlot<SrqBook<H>>;

impl<H: Hal> Keyed for SrqBook<H> {
    fn key(&self) -> u32 {
        self.srqn
    }
}

/// Head, tail and WQE counter of a ring.
struct Ends {
    head: u16,
    tail: u16,
    counter: u16,
}

/// One SRQ's ring and book.
pub(crate) struct SrqBook<H: Hal> {
    /// The SRQ's number.
    srqn: u32,
    ring: SharedDma<H::Dma>,
    dbr: SharedDma<H::Dma>,
    /// `wr_id` of the receive in each WQE, 8 bytes each, in the CPU's byte order.
    ids: SharedDma<H::Dma>,
    log_size: u8,
    /// log2 of the WQE stride in bytes.
    log_stride: u8,
    max_sge: u32,
    ends: spin::Mutex<Ends>,
}

impl<H: Hal> SrqBook<H> {
    /// The book of a ring of `1 << log_size` WQEs of `1 << log_stride` bytes, linked 0 → 1 → …
    /// → last (rdma-core 56 srq.c `mlx5_alloc_srq_buf`: head 0, tail the last WQE, whose next
    /// is set when a freed WQE is linked after it); `ids` holds 8 bytes per WQE.
    pub(crate) fn new(
        srqn: u32,
        [ring, dbr, ids]: [SharedDma<H::Dma>; 3],
        log_size: u8,
        log_stride: u8,
    ) -> Self {
        SrqBook {
            srqn,
            ring,
            dbr,
            ids,
            log_size,
            log_stride,
            max_sge: ((1u32 << log_stride) - 16) / 16,
            ends: spin::Mutex::new(Ends {
                head: 0,
                tail: (1u16 << log_size) - 1,
                counter: 0,
            }),
        }
    }

    /// The ring and doorbell record, handed back.
    pub(crate) fn ring_parts(self) -> (SharedDma<H::Dma>, SharedDma<H::Dma>) {
        (self.ring, self.dbr)
    }

    /// Leaks the ring and doorbell record (the device may still use them).
    pub(crate) fn leak(self) {
        self.ring.leak();
        self.dbr.leak();
    }

    /// The scatter list of the WQE at `index` (scatter to CQE, `cq_scatter.rs`).
    pub(crate) fn wqe_sges<const N: usize>(
        &self,
        index: u16,
        sges: &mut heapless::Vec<(u64, u32), N>,
    ) {
        let base = usize::from(index & self.mask()) << self.log_stride;
        // After the 16-byte next segment.
        for k in 1..(1usize << self.log_stride) / 16 {
            let mut seg = [0u8; 16];
            if self.ring.read_bytes(base + 16 * k, &mut seg).is_err() {
                return;
            }
            let (Some(w0), Some(addr)) = (
                bareverbs_firmware_cmd::wqe_codec::load(&seg, data::LKEY.byte()),
                bareverbs_firmware_cmd::wqe_codec::load(&seg, data::ADDR.byte()),
            ) else {
                return;
            };
            let (lkey, len) = (data::LKEY.get(w0) as u32, data::BYTE_COUNT.get(w0) as u32);
            if lkey == INVALID_LKEY || sges.push((addr, len)).is_err() {
                return;
            }
        }
    }

    fn next_at(&self, index: u16) -> usize {
        (usize::from(index) << self.log_stride) + wqe_srq_next_seg::next_wqe_index.bit / 8
    }

    fn mask(&self) -> u16 {
        ((1u32 << self.log_size) - 1) as u16
    }

    /// Most scatter entries a WQE of this ring holds.
    pub(crate) fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// Starts posting: the ring is held until the [`SrqPost`] is dropped, which publishes what
    /// was pushed with one doorbell record update. `None` when the book's memory is too short
    /// for its ring (never, for a book made by [`SrqBook::new`] from the sizes it was given).
    pub(crate) fn begin(&self) -> Option<SrqPost<'_, H>> {
        let ids = self.ids.slots::<8>(0, 1 << self.log_size).ok()?;
        // The ring in data-segment units (the next segment is the first of each WQE).
        let units = self
            .ring
            .slots::<RECV_UNIT>(0, 1 << (self.log_size + self.log_stride - 4))
            .ok()?;
        let ends = self.ends.lock();
        let start = ends.counter;
        Some(SrqPost {
            book: self,
            ends,
            ids,
            units,
            start,
        })
    }

    /// The `wr_id` of the receive in WQE `index`, whose completion was just polled; the WQE
    /// goes back to the free list at the tail (rdma-core `mlx5_free_srq_wqe`).
    pub(crate) fn complete(&self, index: u16) -> u64 {
        let index = index & self.mask();
        let id = self.ids.read_ne64(usize::from(index) * 8);
        let mut e = self.ends.lock();
        self.ring.write16(self.next_at(e.tail), index);
        e.tail = index;
        id
    }
}

/// Receives being posted to one SRQ ring (rdma-core 56 srq.c `mlx5_post_srq_recv`), holding
/// the ring; dropping it publishes them.
pub(crate) struct SrqPost<'a, H: Hal> {
    book: &'a SrqBook<H>,
    ends: spin::MutexGuard<'a, Ends>,
    ids: Slots<'a, 8>,
    units: Slots<'a, RECV_UNIT>,
    start: u16,
}

/// The SRQ ring has no free WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RingFull;

impl<H: Hal> SrqPost<'_, H> {
    /// Writes one receive at the head: its `wr_id` and scatter list of `(address, length,
    /// lkey)` entries, which the caller has checked (at most [`SrqBook::max_sge`] of them; a
    /// longer list is cut there). A list shorter than the WQE ends with an invalid-lkey entry.
    ///
    /// # Errors
    /// [`RingFull`] when the head has reached the tail (the tail WQE stays linked in).
    pub(crate) fn push(
        &mut self,
        wr_id: u64,
        sges: impl Iterator<Item = (u64, u32, u32)>,
    ) -> Result<(), RingFull> {
        let b = self.book;
        if self.ends.head == self.ends.tail {
            return Err(RingFull);
        }
        let idx = self.ends.head;
        let next = b.ring.read16(b.next_at(idx)) & b.mask();
        // The data segments after the WQE's next segment: a cyclic receive WQE's layout.
        let first = (usize::from(idx) << (b.log_stride - 4)) + 1;
        write_recv_wqe(&self.units, first, b.max_sge as usize, sges);
        self.ids.slot(usize::from(idx)).write_ne64(0, wr_id);
        self.ends.head = next;
        self.ends.counter = self.ends.counter.wrapping_add(1);
        Ok(())
    }
}

impl<H: Hal> Drop for SrqPost<'_, H> {
    fn drop(&mut self) {
        if self.ends.counter != self.start {
            // ORDERING: the WQEs before the doorbell record that publishes them.
            dma_wmb();
            self.book.dbr.write32(0, u32::from(self.ends.counter));
        }
    }
}

#[cfg(test)]
mod tests {
    //! Golden bytes against plain memory: a receive lands in the head WQE after its next
    //! segment, a short list ends with the invalid lkey, the doorbell record counts what was
    //! published, and the ring refuses a receive when the head reaches the tail.
    use super::*;
    use bareverbs_firmware_cmd::ifc::{wqe_data_seg, WqeDataSeg};
    use bareverbs_firmware_cmd::View;
    use bareverbs_model::SimHal;

    #[test]
    fn receives_fill_the_linked_wqes_until_the_head_meets_the_tail() {
        let hal = SimHal::synchronous();
        // Four WQEs of 64 bytes: the next segment and three data segments each.
        let (log_size, log_stride) = (2u8, 6u8);
        let mut ring = hal.dma_alloc(4 << log_stride, 64).unwrap();
        ring.as_mut_slice().fill(0xa5);
        let ring = ring.share();
        // Linked 0 -> 1 -> 2 -> 3, as an SRQ's creation links them.
        for k in 0..4u16 {
            let at = (usize::from(k) << log_stride) + wqe_srq_next_seg::next_wqe_index.bit / 8;
            ring.write16(at, (k + 1) & 3);
        }
        let dbr = hal.dma_alloc(64, 64).unwrap().share();
        let ids = hal.dma_alloc(8 * 4, 64).unwrap().share();
        let book = SrqBook::<&SimHal>::new(7, [ring, dbr, ids], log_size, log_stride);
        assert_eq!(book.max_sge(), 3);
        {
            let mut post = book.begin().unwrap();
            post.push(11, [(0x1000, 64, 5), (0x2000, 32, 6)].into_iter())
                .unwrap();
            post.push(12, core::iter::once((0x3000, 16, 7))).unwrap();
            post.push(13, core::iter::empty()).unwrap();
            // The tail WQE stays linked in: three receives fill a ring of four.
            assert_eq!(post.push(14, core::iter::empty()), Err(RingFull));
        }
        assert_eq!(book.dbr.read32(0), 3, "one record update for the three");
        let mut b = [0u8; 4 * 64];
        book.ring.read_bytes(0, &mut b).unwrap();
        let seg = |wqe: usize, k: usize| {
            let at = wqe * 64 + 16 * (k + 1);
            View::<WqeDataSeg>::new_checked(&b[at..at + 16]).unwrap()
        };
        let fields = |wqe, k| {
            let s = seg(wqe, k);
            (
                s.get(wqe_data_seg::addr),
                s.get32(wqe_data_seg::byte_count),
                s.get32(wqe_data_seg::lkey),
            )
        };
        assert_eq!(fields(0, 0), (0x1000, 64, 5));
        assert_eq!(fields(0, 1), (0x2000, 32, 6));
        assert_eq!(fields(0, 2), (0, 0, INVALID_LKEY));
        assert_eq!(fields(1, 0), (0x3000, 16, 7));
        assert_eq!(fields(1, 1), (0, 0, INVALID_LKEY));
        assert!(
            b[64 + 48..128].iter().all(|&x| x == 0xa5),
            "past the terminator"
        );
        assert_eq!(fields(2, 0), (0, 0, INVALID_LKEY), "an empty list");
        assert!(
            b[3 * 64 + 16..].iter().all(|&x| x == 0xa5),
            "the tail is untouched"
        );
        // Completing WQE 1 links it after the tail and hands back its wr_id.
        assert_eq!(book.complete(1), 12);
    }
}
