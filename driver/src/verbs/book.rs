//! Per-QP bookkeeping that both posting and polling need: the `wr_id` of every outstanding
//! request and how far each queue has completed. It lives in HAL memory (the driver allocates
//! nothing else); the device is never given its address, so values are kept in the CPU's byte
//! order.
//!
//! Each book sits in a slot of the device's [`Books`], behind the slot's own lock. A [`Qp`]
//! keeps a reference to its slot, so a post locks that one slot and looks nothing up; a CQ
//! keeps the slot of the QP whose completions it last met (rdma-core's `cur_rsc`), so a poll
//! looks a QPN up only when the QP changes. The QPN → slot index is locked device-wide only by
//! those lookups and by creating and destroying QPs. A book stays reachable by a CQ polling
//! on another thread while its QP is destroyed: destruction takes the slot's write lock, so it
//! waits for the poll, and the poll finds the slot empty (or another QP's) afterwards.
//!
//! [`Qp`]: crate::verbs::Qp

#[cfg(feature = "alloc")]
extern crate alloc;

use core::sync::atomic::{AtomicU16, Ordering};

use bareverbs_hal::{Hal, SharedDma, Slots};

use crate::table::Table;

/// Most QPs a device holds at once: 64, with the slots inline in `Device`; `None` (the device's
/// own limit) with the `alloc` feature, which keeps them on the heap, in chunks made as needed
/// (up to 2^20 slots, past the QP count of any ConnectX).
pub const MAX_QPS: Option<usize> = Table::<(), INLINE_QPS>::capacity();

/// Entries of the inline book table (the CQ-use table has twice as many).
pub(crate) const INLINE_QPS: usize = 64;

/// One QP's place in the device's [`Books`]: empty, or the book of the QP it was given to.
pub(crate) type BookSlot<H> = spin::RwLock<Option<Book<H>>>;

/// Slots per heap chunk, and chunks, with the `alloc` feature.
#[cfg(feature = "alloc")]
const CHUNK: usize = 256;
#[cfg(feature = "alloc")]
const CHUNKS: usize = 4096;

/// One heap chunk of slots, made when the slots before it are all taken.
#[cfg(feature = "alloc")]
type Chunk<H> = alloc::boxed::Box<[BookSlot<H>]>;

/// Every QP's book: fixed slots, and the index from QP number to slot.
pub(crate) struct Books<H: Hal> {
    /// QPN → slot number.
    index: spin::RwLock<Table<u32, INLINE_QPS>>,
    /// Empty until [`Books::make_slots`]: an empty vector is built in place, where an array
    /// of locks came back through a 9 KB temporary on the bring-up's stack.
    #[cfg(not(feature = "alloc"))]
    slots: heapless::Vec<BookSlot<H>, INLINE_QPS>,
    #[cfg(feature = "alloc")]
    chunks: alloc::boxed::Box<[spin::Once<Chunk<H>>]>,
}

impl<H: Hal> Books<H> {
    /// No slots yet: [`Books::make_slots`] makes them once the device is in its place.
    pub(crate) fn new() -> Self {
        Books {
            index: spin::RwLock::new(Table::new()),
            #[cfg(not(feature = "alloc"))]
            slots: heapless::Vec::new(),
            #[cfg(feature = "alloc")]
            chunks: (0..CHUNKS).map(|_| spin::Once::new()).collect(),
        }
    }

    /// Makes the inline slots, all empty (nothing to make on the heap: its chunks come as
    /// needed).
    pub(crate) fn make_slots(&mut self) {
        #[cfg(not(feature = "alloc"))]
        while self.slots.push(spin::RwLock::new(None)).is_ok() {}
    }

    /// Slots there can be.
    fn capacity(&self) -> usize {
        #[cfg(not(feature = "alloc"))]
        return self.slots.len();
        #[cfg(feature = "alloc")]
        return CHUNK * CHUNKS;
    }

    /// Slot `n`, if made.
    #[inline]
    fn slot(&self, n: usize) -> Option<&BookSlot<H>> {
        #[cfg(not(feature = "alloc"))]
        return self.slots.get(n);
        #[cfg(feature = "alloc")]
        return self.chunks.get(n / CHUNK)?.get()?.get(n % CHUNK);
    }

    /// Slot `n`, its chunk made if it was not.
    fn slot_or_make(&self, n: usize) -> Option<&BookSlot<H>> {
        #[cfg(not(feature = "alloc"))]
        return self.slots.get(n);
        #[cfg(feature = "alloc")]
        return self
            .chunks
            .get(n / CHUNK)?
            .call_once(|| (0..CHUNK).map(|_| spin::RwLock::new(None)).collect())
            .get(n % CHUNK);
    }

    /// Room for `more` books besides those held.
    pub(crate) fn has_room(&self, more: usize) -> bool {
        self.index.read().len() + more <= self.capacity()
    }

    /// Gives `book` (of QP `qpn`) a slot; the book comes back when every slot is taken.
    pub(crate) fn insert(&self, qpn: u32, book: Book<H>) -> Result<&BookSlot<H>, Book<H>> {
        let mut index = self.index.write();
        if index.len() >= self.capacity() || index.contains_key(&qpn) {
            return Err(book);
        }
        // Entered first, so the table's own limit is met before anything is placed; no slot
        // is this number, and the lock is held until the real one replaces it.
        if index.insert(qpn, u32::MAX).is_err() {
            return Err(book);
        }
        // Fewer books than slots, so one is empty. Only a poll holding a stale slot number
        // (its QP destroyed since) read-locks an empty slot, and only for one run of CQEs, so
        // a slot whose lock is busy is passed over and the scan starts again.
        loop {
            for n in 0..self.capacity() {
                let Some(slot) = self.slot_or_make(n) else {
                    break;
                };
                if let Some(mut s) = slot.try_write() {
                    if s.is_none() {
                        *s = Some(book);
                        if let Some(e) = index.get_mut(&qpn) {
                            *e = n as u32;
                        }
                        return Ok(slot);
                    }
                }
            }
            core::hint::spin_loop();
        }
    }

    /// Takes QP `qpn`'s book out, waiting for any post or poll using it.
    pub(crate) fn remove(&self, qpn: u32) -> Option<Book<H>> {
        let n = self.index.write().remove(&qpn)?;
        self.slot(n as usize)?.write().take()
    }

    /// The slot of QP `qpn`'s book.
    pub(crate) fn find(&self, qpn: u32) -> Option<&BookSlot<H>> {
        let n = *self.index.read().get(&qpn)?;
        self.slot(n as usize)
    }

    /// Runs `f` on every book, each under its slot's read lock.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Book<H>)) {
        for n in 0..self.capacity() {
            let Some(slot) = self.slot(n) else { break };
            if let Some(b) = slot.read().as_ref() {
                f(b);
            }
        }
    }
}

/// A QP's book locked for reading, as a guard over its slot.
pub(crate) type BookGuard<'a, H> = spin::RwLockReadGuard<'a, Option<Book<H>>>;

/// The slot `last` names for QP `qpn`, locked, or, when `last` names another QP, QP `qpn`'s
/// slot through the index (and `last` remembers it). A cached slot may have been emptied or
/// given to another QP since: the caller checks with [`holds`] and, if the book is not `qpn`'s,
/// asks [`relock_book`] (what that returns always holds `qpn`'s book). `None` for a QPN
/// without a book. (The check is left to the caller: inside this function it cost the poll's
/// loop four instructions a CQE in registers.)
#[inline(always)]
pub(crate) fn lock_book<'d, H: Hal>(
    books: &'d Books<H>,
    last: &mut Option<(u32, &'d BookSlot<H>)>,
    qpn: u32,
) -> Option<BookGuard<'d, H>> {
    match *last {
        Some((q, slot)) if q == qpn => Some(slot.read()),
        _ => relock_book(books, last, qpn),
    }
}

/// Whether `guard` holds QP `qpn`'s book.
#[inline(always)]
pub(crate) fn holds<H: Hal>(guard: &BookGuard<'_, H>, qpn: u32) -> bool {
    guard.as_ref().is_some_and(|b| b.qpn == qpn)
}

/// QP `qpn`'s book through the index, locked (and `last` remembers its slot): out of the
/// poll's loop.
#[cold]
#[inline(never)]
pub(crate) fn relock_book<'d, H: Hal>(
    books: &'d Books<H>,
    last: &mut Option<(u32, &'d BookSlot<H>)>,
    qpn: u32,
) -> Option<BookGuard<'d, H>> {
    let slot = books.find(qpn)?;
    *last = Some((qpn, slot));
    let g = slot.read();
    // Between the index and the lock, the QP may have gone.
    holds(&g, qpn).then_some(g)
}

/// One QP's book.
pub struct Book<H: Hal> {
    /// The QP's number.
    pub(crate) qpn: u32,
    /// Per send WQEBB index i: the request's `wr_id` (u64) at 16·i and the WQEBB counter after
    /// the request (u16) at 16·i + 8; then per receive index j: the request's `wr_id` at
    /// 16·`sq_count` + 8·j.
    pub(crate) mem: SharedDma<H::Dma>,
    /// log2 of the send WQEBBs and of the receive entries.
    pub(crate) log_sq: u8,
    pub(crate) log_rq: u8,
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
    pub(crate) ring: Option<crate::verbs::cq_scatter::WqRing>,
}

impl<H: Hal> Book<H> {
    /// The book of a new QP: nothing posted.
    pub(crate) fn new(
        qpn: u32,
        mem: SharedDma<H::Dma>,
        log_sq: u8,
        log_rq: u8,
        cqns: [u32; 2],
    ) -> Self {
        Book {
            qpn,
            mem,
            log_sq,
            log_rq,
            sq_tail: AtomicU16::new(0),
            rq_tail: AtomicU16::new(0),
            sq_head: AtomicU16::new(0),
            rq_head: AtomicU16::new(0),
            cqns,
            ring: None,
        }
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
            self.mem.slots(0, 1 << self.log_sq).ok()?,
            &self.sq_tail,
            &self.sq_head,
        ))
    }

    /// Views for one post or poll call: the bounds are checked here, once, not per entry.
    /// `None` only if the book's memory is shorter than its sizes (never, as created).
    #[inline]
    pub(crate) fn view(&self) -> Option<BookView<'_>> {
        let sq_count = 1usize << self.log_sq;
        Some(BookView {
            sq: self.mem.slots(0, sq_count).ok()?,
            rq: self.mem.slots(16 * sq_count, 1 << self.log_rq).ok()?,
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

#[cfg(test)]
mod tests {
    use bareverbs_model::SimHal;

    use super::*;

    fn book(hal: &SimHal, qpn: u32) -> Book<SimHal> {
        let mem = hal
            .dma_alloc(Book::<SimHal>::bytes(0, 0), 64)
            .unwrap()
            .share();
        Book::new(qpn, mem, 0, 0, [1, 1])
    }

    /// More books than one heap chunk holds.
    #[cfg(feature = "alloc")]
    const CHUNK_TEST: usize = CHUNK + 44;
    #[cfg(not(feature = "alloc"))]
    const CHUNK_TEST: usize = 0;

    fn books() -> Books<SimHal> {
        let mut b = Books::new();
        b.make_slots();
        b
    }

    fn qpn_in(slot: &BookSlot<SimHal>) -> Option<u32> {
        slot.read().as_ref().map(|b| b.qpn)
    }

    #[test]
    fn slots_are_given_found_and_taken_back() {
        let hal = SimHal::synchronous();
        let books = books();
        let a = books.insert(0x10, book(&hal, 0x10)).ok().unwrap();
        let b = books.insert(0x11, book(&hal, 0x11)).ok().unwrap();
        assert!(!core::ptr::eq(a, b));
        assert!(core::ptr::eq(books.find(0x10).unwrap(), a));
        assert_eq!(qpn_in(b), Some(0x11));
        // One book per QPN.
        assert!(books.insert(0x10, book(&hal, 0x10)).is_err());
        assert_eq!(books.remove(0x10).map(|b| b.qpn), Some(0x10));
        assert!(books.find(0x10).is_none() && qpn_in(a).is_none());
        assert!(books.remove(0x10).is_none());
        // The emptied slot is the first free one: the next QP gets it.
        let c = books.insert(0x12, book(&hal, 0x12)).ok().unwrap();
        assert!(core::ptr::eq(a, c));
        let mut seen = [0u32; 2];
        let mut k = 0;
        books.for_each(|b| {
            seen[k] = b.qpn;
            k += 1;
        });
        assert_eq!(seen, [0x12, 0x11]);
    }

    #[test]
    fn a_full_table_hands_the_book_back() {
        let hal = SimHal::synchronous();
        let books = books();
        if MAX_QPS.is_none() {
            // On the heap: past the first chunk, each book in a slot of its own.
            for q in 0..CHUNK_TEST as u32 {
                assert!(books.insert(q, book(&hal, q)).is_ok());
            }
            for q in 0..CHUNK_TEST as u32 {
                assert_eq!(books.find(q).and_then(qpn_in), Some(q));
            }
            return;
        }
        for q in 0..INLINE_QPS as u32 {
            assert!(books.has_room(1));
            assert!(books.insert(q, book(&hal, q)).is_ok());
        }
        assert!(!books.has_room(1));
        assert_eq!(
            books.insert(999, book(&hal, 999)).err().map(|b| b.qpn),
            Some(999)
        );
        books.remove(7);
        assert!(books.insert(999, book(&hal, 999)).is_ok());
        assert_eq!(books.find(999).and_then(qpn_in), Some(999));
    }

    /// What a poll does for each run of CQEs (`Cq::poll_run`): the cached slot, checked.
    fn run_book<'d>(
        books: &'d Books<SimHal>,
        last: &mut Option<(u32, &'d BookSlot<SimHal>)>,
        qpn: u32,
    ) -> Option<u32> {
        let mut g = lock_book(books, last, qpn);
        if g.as_ref().is_some_and(|g| !holds(g, qpn)) {
            drop(g);
            g = relock_book(books, last, qpn);
        }
        g.as_ref().and_then(|g| g.as_ref()).map(|b| b.qpn)
    }

    #[test]
    fn a_cached_slot_is_used_only_while_it_holds_the_qps_book() {
        let hal = SimHal::synchronous();
        let books = books();
        let mut last = None;
        let a = books.insert(5, book(&hal, 5)).ok().unwrap();
        assert_eq!(run_book(&books, &mut last, 5), Some(5));
        assert!(matches!(last, Some((5, s)) if core::ptr::eq(s, a)));
        // QP 5 goes; QP 7 takes its slot, and a new QP 5 another one. The cache still names
        // the old slot for QPN 5, which now holds QP 7's book: the check sees it and the
        // index is asked again.
        books.remove(5);
        let b = books.insert(7, book(&hal, 7)).ok().unwrap();
        assert!(core::ptr::eq(a, b));
        let c = books.insert(5, book(&hal, 5)).ok().unwrap();
        assert!(!holds(&lock_book(&books, &mut last, 5).unwrap(), 5));
        assert_eq!(run_book(&books, &mut last, 5), Some(5));
        assert!(matches!(last, Some((5, s)) if core::ptr::eq(s, c)));
        // A QPN with no book: nothing.
        books.remove(5);
        assert_eq!(run_book(&books, &mut last, 5), None);
        assert_eq!(run_book(&books, &mut last, 9), None);
        assert_eq!(run_book(&books, &mut last, 7), Some(7));
        assert!(matches!(last, Some((7, s)) if core::ptr::eq(s, b)));
    }
}
