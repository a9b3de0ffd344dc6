//! Send rings (rdma-core's `mlx5_wq` for the SQ): a QP's send queue (where its WQEBBs sit in the
//! QP's work buffer, the fence owed after a UMR, what its batches keep between calls); a
//! batch's hold on a ring, [`SendRing`] (the WQEBBs, the book, the producer, the room), through
//! which verbs batches and the Ethernet send queue write their WQEs (`send_wqe.rs` has the
//! segment writers); and [`SqDoorbell`], which hands what was written to the device (doorbell
//! record, then the doorbell or BlueFlame register) for both.

use core::sync::atomic::{AtomicU16, Ordering};

use bareverbs_firmware_cmd::ifc::{fm_ce_se, qp_dbr};
use bareverbs_hal::{
    dma_wmb, wmb, BarOffset, DmaMemory, Mmio, RingShape, SharedDma, Slot, Slots, SlotsMut,
};

use crate::error::Error;

/// The send-flag bits the `fm_ce_se` table is indexed by: `SendFlags::{FENCE, SIGNALED,
/// SOLICITED}` (ibverbs' `IBV_SEND_*` values; `send_batch.rs` checks they agree). Named here so
/// that the queue, which `qp.rs` holds, does not reach back into the work-request types.
pub(crate) const FLAG_FENCE: u32 = 1 << 0;
pub(crate) const FLAG_SIGNALED: u32 = 1 << 1;
pub(crate) const FLAG_SOLICITED: u32 = 1 << 2;

/// Bytes of a send WQE basic block.
pub(crate) const WQEBB: usize = 64;

/// What a QP keeps for its send batches beyond the ring: set once at creation, except the DC
/// destination, which each DC batch starts without.
#[derive(Clone, Debug, Default)]
pub(crate) struct BatchState {
    /// DC: the address vector of the target the next requests go to, as the 8-byte words of
    /// WQE bytes 16–63 (worked out once by `set_dc_addr`), and the stream in its place in the
    /// control segment's second word; `dc_set` false until set in the batch.
    pub(crate) dc_av: [u64; 6],
    pub(crate) dc_stream: u64,
    pub(crate) dc_set: bool,
    /// Streams the DCI has (1 without DCI streams).
    pub(crate) dci_streams: u32,
    /// The mlx5 send operations the QP may post (`DvSendOpsFlags` bits) and its PD's number.
    pub(crate) send_ops: u8,
    pub(crate) pdn: u32,
    /// What the QP refuses (`send_batch::refusals`), for every batch.
    pub(crate) refuse: u8,
    /// The QPN in its place in the control segment's first word.
    pub(crate) qpn_word: u64,
    /// A request with inline data was written in the current batch: with one WQE in the
    /// batch, the BlueFlame candidate (rdma-core's `inl`). Here rather than in the batch's
    /// registers: one store per inline request (reading the WQE back instead cost every batch
    /// of one about 25 instructions).
    pub(crate) inlined: bool,
}

/// The BlueFlame register a send queue rings: two halves used in turn (rdma-core
/// `bf->offset ^= bf->buf_size`).
#[derive(Debug)]
struct BlueFlame {
    /// BAR offset of the register.
    register: usize,
    /// The half the next doorbell uses (0 or `half`).
    offset: usize,
    /// Bytes of a half: the largest WQE a BlueFlame copy carries (0: no BlueFlame register).
    half: usize,
}

/// What publishes a send queue's WQEs: how far they are posted and the BlueFlame register.
/// Apart from the batch state, so that a batch can borrow that while this rings.
#[derive(Debug)]
pub(crate) struct SqDoorbell {
    /// WQEBBs posted (16-bit counter, as the doorbell record holds it).
    cur: u16,
    bf: BlueFlame,
}

/// A QP's send queue.
#[derive(Debug)]
pub(crate) struct SendQueue {
    log_bbs: u8,
    /// The control segment's `fm_ce_se` byte by send flags (see [`fm_ce_se_table`]).
    fm_ce_se: u64,
    pub(crate) doorbell: SqDoorbell,
    /// The next request is fenced behind a UMR (`dv_mkey.rs`).
    pub(crate) fence_next: bool,
    /// What its batches borrow (`send_batch.rs`).
    pub(crate) batch: BatchState,
    /// Where its WQEBBs are in the QP's work buffer, checked once (`None`: no queue).
    pub(crate) shape: Option<RingShape<WQEBB>>,
}

impl SendQueue {
    /// A queue of `1 << log_bbs` WQEBBs at `shape` in the work buffer, signalling every
    /// request when `sig_all`, ringing the BlueFlame register at `bf_register` of
    /// `bf_reg_size` bytes.
    pub(crate) fn new(
        shape: Option<RingShape<WQEBB>>,
        log_bbs: u8,
        sig_all: bool,
        bf_register: usize,
        bf_reg_size: usize,
        batch: BatchState,
    ) -> Self {
        SendQueue {
            log_bbs,
            fm_ce_se: fm_ce_se_table(sig_all),
            doorbell: SqDoorbell::new(bf_register, bf_reg_size),
            fence_next: false,
            batch,
            shape,
        }
    }

    /// The send queue of a QP that has none (an XRC target).
    pub(crate) fn none() -> Self {
        Self::new(None, 0, false, 0, 0, BatchState::default())
    }

    /// Its WQEBBs.
    #[inline(always)]
    pub(crate) fn size(&self) -> u16 {
        1 << self.log_bbs
    }

    /// WQEBBs posted so far.
    #[inline(always)]
    pub(crate) fn cur(&self) -> u16 {
        self.doorbell.cur()
    }

    /// The `fm_ce_se` table.
    #[inline(always)]
    pub(crate) fn fm_ce_se(&self) -> u64 {
        self.fm_ce_se
    }

    /// Nothing posted (the QP went to RESET).
    pub(crate) fn reset(&mut self) {
        self.doorbell.reset();
    }
}

impl SqDoorbell {
    /// The doorbell of a queue with nothing posted, ringing the BlueFlame register at BAR
    /// offset `register` of `reg_size` bytes (0: the device has none; only the first 8 bytes
    /// of each doorbell are written).
    pub(crate) fn new(register: usize, reg_size: usize) -> Self {
        SqDoorbell {
            cur: 0,
            bf: BlueFlame {
                register,
                offset: 0,
                half: reg_size / 2,
            },
        }
    }

    /// Nothing published (the queue went back to reset).
    pub(crate) fn reset(&mut self) {
        self.cur = 0;
    }

    /// WQEBBs published: the producer the next batch starts at.
    #[inline(always)]
    pub(crate) fn cur(&self) -> u16 {
        self.cur
    }

    /// Hands the WQEBBs up to `cur` (written in `ring` since the last call) to the device: the
    /// doorbell record, then the doorbell — the whole WQE into the BlueFlame register when the
    /// batch was one WQE with inline data (`lone_inline`) that fits half of it, as rdma-core 56
    /// qp.c `post_send_db` does (`nreq == 1`, `inl || prefer_bf`, `mlx5_bf_copy`), otherwise
    /// its first 8 bytes, `last_ctrl` (the last WQE's control segment).
    #[inline(always)]
    pub(crate) fn publish<D: DmaMemory>(
        &mut self,
        bar: &impl Mmio,
        dbr: &SharedDma<D>,
        ring: &Slots<'_, WQEBB>,
        cur: u16,
        last_ctrl: u64,
        lone_inline: bool,
    ) {
        // ORDERING: every WQE is in memory before the doorbell record says it exists.
        dma_wmb();
        dbr.write32(qp_dbr::SND, u32::from(cur));
        // ORDERING: the doorbell record before the doorbell (mlx5 post_send / Linux
        // mlx5e_notify_hw).
        wmb();
        let at = self.bf.register + self.bf.offset;
        let bbs = usize::from(cur.wrapping_sub(self.cur));
        if lone_inline && bbs * WQEBB <= self.bf.half {
            // A WQEBB at a time, each read whole from the ring first (no zeroed buffer).
            for k in 0..bbs {
                let s = ring.slot(usize::from(self.cur) + k);
                let words: [u64; WQEBB / 8] = core::array::from_fn(|w| s.read64(8 * w));
                if bar
                    .try_write64_block(BarOffset(at + k * WQEBB), &words)
                    .is_err()
                {
                    bar.write64(BarOffset(at), last_ctrl);
                    break;
                }
            }
        } else {
            bar.write64(BarOffset(at), last_ctrl);
        }
        self.bf.offset ^= self.bf.half;
        self.cur = cur;
    }
}

/// One batch's hold on a send ring (rdma-core's `ibv_wr_start` … `ibv_wr_complete` over
/// `mlx5_wq`): the WQEBBs, exclusively borrowed; the book where each request's `wr_id` and the
/// WQEBB counter after it are kept (`book.rs`); the counter the device has completed up to;
/// the producer, what is known to be free, and the last control word written. Writers put a
/// WQE's segments at [`SendRing::slot`] (`send_wqe.rs`), then [`SendRing::commit`] it; the
/// batch's end publishes everything committed ([`SqDoorbell::publish`]).
pub(crate) struct SendRing<'b> {
    sq: SlotsMut<'b, WQEBB>,
    /// Per WQEBB: the request's `wr_id` at 0 and the WQEBB counter after it at 8.
    book: Slots<'b, 16>,
    /// WQEBB counter up to which the device has completed requests.
    tail: &'b AtomicU16,
    /// WQEBBs written (the doorbell record's counter once published).
    cur: u16,
    /// WQEBBs known to be free; refreshed from `tail` when a request needs more.
    room: u16,
    size: u16,
    /// First 8 bytes of the last control segment (the doorbell's value); 0 while nothing is
    /// written (a control word holds the QPN and a DS count of at least 1).
    last_ctrl: u64,
}

impl<'b> SendRing<'b> {
    /// A hold on `sq` (of `size` WQEBBs) and its `book`, the producer at `cur`.
    #[inline(always)]
    pub(crate) fn new(
        sq: SlotsMut<'b, WQEBB>,
        book: Slots<'b, 16>,
        tail: &'b AtomicU16,
        cur: u16,
        size: u16,
    ) -> Self {
        SendRing {
            sq,
            book,
            tail,
            cur,
            room: 0,
            size,
            last_ctrl: 0,
        }
    }

    /// Makes sure `bbs` WQEBBs are free.
    ///
    /// # Errors
    /// [`Error::QueueFull`] when the device has not completed enough.
    #[inline(always)]
    pub(crate) fn reserve(&mut self, bbs: u16) -> Result<(), Error> {
        if bbs > self.room {
            let tail = self.tail.load(Ordering::Acquire);
            self.room = self.size.saturating_sub(self.cur.wrapping_sub(tail));
            if bbs > self.room {
                return Err(Error::QueueFull);
            }
        }
        Ok(())
    }

    /// The producer: the WQEBB the next WQE starts at.
    #[inline(always)]
    pub(crate) fn cur(&self) -> u16 {
        self.cur
    }

    /// WQEBBs known to be free (exact after a [`SendRing::reserve`] that had to look at the
    /// completed counter, and while nothing completes in between).
    #[inline(always)]
    pub(crate) fn room(&self) -> u16 {
        self.room
    }

    /// WQEBB `k` of the WQE being written (the index wraps at the ring's end).
    #[inline(always)]
    pub(crate) fn slot(&self, k: u16) -> Slot<'_, WQEBB> {
        self.sq.slot(usize::from(self.cur.wrapping_add(k)))
    }

    /// The ring's WQEBBs, for writers that run across several (data lists, inline data).
    #[inline(always)]
    pub(crate) fn slots(&self) -> &SlotsMut<'b, WQEBB> {
        &self.sq
    }

    /// The WQE of `bbs` WQEBBs at the producer, whose control segment starts with `ctrl`, is
    /// written: its `wr_id` goes into the book and the producer moves past it.
    #[inline(always)]
    pub(crate) fn commit(&mut self, wr_id: u64, bbs: u16, ctrl: u64) {
        let next = self.cur.wrapping_add(bbs);
        let b = self.book.slot(usize::from(self.cur));
        b.write_ne64(0, wr_id);
        b.write_ne16(8, next);
        self.cur = next;
        self.room -= bbs;
        self.last_ctrl = ctrl;
    }

    /// The first 8 bytes of the last control segment committed (0: none).
    #[cfg(test)]
    pub(crate) fn last_ctrl(&self) -> u64 {
        self.last_ctrl
    }

    /// The ring's WQEBBs, the producer and the last control word, for the batch's end.
    #[inline(always)]
    pub(crate) fn into_parts(self) -> (SlotsMut<'b, WQEBB>, u16, u64) {
        (self.sq, self.cur, self.last_ctrl)
    }
}

/// `fm_ce_se` by the low three send-flag bits, byte `flags & 7` of the little-endian word.
pub(crate) fn fm_ce_se_table(sig_all: bool) -> u64 {
    let mut t = [0u8; 8];
    for (bits, e) in t.iter_mut().enumerate() {
        let f = bits as u32;
        if f & FLAG_FENCE != 0 {
            *e |= fm_ce_se::FENCE_MODE_SMALL_AND_FENCE;
        }
        if f & FLAG_SIGNALED != 0 || sig_all {
            *e |= fm_ce_se::CQ_UPDATE;
        }
        if f & FLAG_SOLICITED != 0 {
            *e |= fm_ce_se::SOLICITED;
        }
    }
    u64::from_le_bytes(t)
}
