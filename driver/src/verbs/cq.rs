//! Completion queues (`ibv_create_cq`, `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_destroy_cq`):
//! the CQE ring and its doorbell record in DMA memory, polled by owner bit (mlx5-reference
//! 04 §5–8; rdma-core `mlx5_poll_cq`, `mlx5_arm_cq`).

use core::sync::atomic::Ordering;

use bareverbs_firmware_cmd::commands::{CreateCq, DestroyCq, ModifyCq};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Cqn, Layout, View};
use bareverbs_hal::{dma_rmb, wmb, BarOffset, Hal, Mmio, RingShape, SharedDma, Slot};

use crate::cmdq::MAX_MESSAGE;
use crate::device::{input, Device};
use crate::error::{Error, Invalid, Limit};
use crate::slot_table::{holds, lock_cached, relock, LastSlot};
use crate::uar::Uar;
use crate::verbs::comp_channel::{cq_count, CompChannel, CHANNEL_CQS};
use crate::verbs::cq_scatter;
use crate::verbs::wc::{Wc, WcFlags, WcOpcode, WcStatus};
use crate::wq::book::{Book, BookView};
use crate::wq::cq_ring::{self, init_entries, set_ci, sw_owned};
use crate::wq::cq_tables::CqEvents;
use crate::wq::cq_tables::{before, Purges};
use crate::wq::ring_pages::{alloc_ring, RingPages, MAX_PAGE};
use crate::wq::srq_ring::SrqBook;

pub use crate::wq::cq_ring::CQE_BYTES;
/// CQs without a channel a device keeps event counts for (inline table; unbounded with
/// `alloc`).
/// Most buffer pages one CREATE_CQ carries (so at most 63 488 CQEs).
const MAX_CQ_PAGES: usize = (MAX_MESSAGE - CreateCqIn::BYTES) / 8;
/// Byte offset of the QPN word (`sop_drop_qpn`; `s_wqe_opcode_qpn` of error CQEs, the same
/// place).
const SOP_DROP_QPN: usize = cqe64::sop_drop_qpn.bit / 8;

/// A completion queue. Destroyed on drop; dropped while a QP (or an XRC SRQ) still completes
/// into it, it is kept, counted in [`Device::orphaned_cqs`] and destroyed when its last user
/// goes (a CQ on a completion channel is leaked instead, with a warning: its channel could go
/// first).
pub struct Cq<'d, H: Hal> {
    dev: &'d Device<H>,
    cqn: Cqn,
    uar: Uar,
    /// Where the `1 << log_size` CQEs are in `buf`, and the doorbell record in `dbr`, checked
    /// once.
    shape: RingShape<CQE_BYTES>,
    dbr_shape: RingShape<8>,
    buf: Option<SharedDma<H::Dma>>,
    dbr: Option<SharedDma<H::Dma>>,
    log_size: u8,
    ci: u32,
    channel: Option<&'d CompChannel<'d, H>>,
    context: u64,
    /// The device's purge epoch this CQ last looked at, and the QPs whose completions it
    /// drops (see `cq_clean.rs`).
    purge_seen: u32,
    purges: Purges,
    /// The QP whose completions the last run of CQEs belonged to, and its book's slot
    /// (rdma-core's `cur_rsc`): a poll looks a QPN up in the device's index only when it
    /// changes. Checked against the slot's book after locking it (the QP may be gone).
    last_book: LastSlot<'d, Book<H>>,
    /// The same for the SRQ whose receives it met last.
    last_srq: LastSlot<'d, SrqBook<H>>,
}

/// What to create (`ibv_create_cq`'s arguments). Non-exhaustive (`ibv_cq_init_attr_ex` has more
/// to come): start from [`CqInitAttr::new`] and set fields.
#[non_exhaustive]
pub struct CqInitAttr<'a, H: Hal> {
    /// Completions it holds at least.
    pub cqe: u32,
    /// The completion channel its events go to; without one they are read with
    /// [`Device::next_event`] as [`AsyncEvent::Completion`](crate::AsyncEvent::Completion).
    pub channel: Option<&'a CompChannel<'a, H>>,
    /// The completion vector: 0, the channel's EQ (each channel has one vector).
    pub comp_vector: u32,
    /// A value of the user's, handed back with each event (`cq_context`).
    pub cq_context: u64,
}

// Not derived: that would ask `H: Clone`; every field is a reference or a value.
impl<H: Hal> Clone for CqInitAttr<'_, H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<H: Hal> Copy for CqInitAttr<'_, H> {}

impl<'a, H: Hal> CqInitAttr<'a, H> {
    /// A CQ of at least `cqe` entries, no channel, vector 0, context 0.
    pub fn new(cqe: u32) -> Self {
        CqInitAttr {
            cqe,
            channel: None,
            comp_vector: 0,
            cq_context: 0,
        }
    }
}

impl<H: Hal> Device<H> {
    /// Creates a CQ with room for at least `cqe` completions, no channel, context 0
    /// ([`Device::create_cq_with`]).
    ///
    /// # Errors
    /// As [`Device::create_cq_with`].
    pub fn create_cq(&self, cqe: u32) -> Result<Cq<'_, H>, Error> {
        self.create_cq_with(&CqInitAttr::new(cqe))
    }

    /// Creates a CQ (`ibv_create_cq`); the size is rounded up to a power of two. Its
    /// completion events go to `attr.channel`'s EQ, or without one to the device's
    /// asynchronous EQ.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 entries, a channel of another device or a vector
    /// other than 0; [`Error::ExceedsLimit`] past the device's `max_cqe` or with the CQ table
    /// full ([`Limit::CqCount`]); a DMA or command error.
    pub fn create_cq_with<'a>(&'a self, attr: &CqInitAttr<'a, H>) -> Result<Cq<'a, H>, Error> {
        let log_size = self.cq_log_size(attr.cqe)?;
        if attr.comp_vector != 0 {
            return Err(Error::InvalidArgument {
                what: Invalid::CompVector,
            });
        }
        let eqn = match attr.channel {
            Some(ch) if !core::ptr::eq(ch.device(), self) => {
                return Err(Error::InvalidArgument {
                    what: Invalid::ForeignObject,
                })
            }
            Some(ch) if !ch.has_room() => return Err(cq_count(CHANNEL_CQS)),
            Some(ch) => ch.eqn(),
            None => {
                let ctl = self.ctl.lock();
                let max = ctl.armed_cq_limit();
                if ctl.cq_events.len() >= max {
                    return Err(cq_count(max));
                }
                drop(ctl);
                self.async_eqn().ok_or(Error::NotUp)?
            }
        };
        let uar = self.uar().ok_or(Error::NotUp)?;
        let (buf, pages) = self.cq_ring(log_size)?;
        let shape = buf.ring_shape::<CQE_BYTES>(0, 1 << log_size)?;
        let dbr = self.hal.dma_alloc(64, 64)?.share();
        let dbr_shape = dbr.ring_shape::<8>(0, 1)?;
        let RingPages {
            page,
            log_page,
            count: pages,
            ..
        } = pages;
        let ilen = CreateCqIn::BYTES + 8 * pages;
        // Built in DMA memory used as plain memory, not on the stack (8 KiB at most).
        let mut scratch = self.hal.dma_alloc(ilen.max(64), 64)?;
        let i = scratch.as_mut_slice();
        {
            let mut v = input::<CreateCq>(&mut i[..ilen])?;
            v.sub(create_cq_in::cq_context)
                .set(cqc::cqe_sz, cqc_cqe_sz::BYTES_64)
                .set(cqc::log_cq_size, log_size)
                .set(cqc::uar_page, uar.index().raw())
                .set(cqc::c_eqn_or_apu_element, eqn.raw())
                .set(cqc::log_page_size, log_page)
                .set(cqc::dbr_addr, dbr.iova().0);
            for k in 0..pages {
                v.set_array(create_cq_in::pas, k, buf.iova().0 + (k * page) as u64)?;
            }
        }
        let mut o = [0u8; CreateCqOut::BYTES];
        let [buf, dbr] =
            self.exec_handing_over::<CreateCq, 2>(&mut i[..ilen], &mut o, [buf, dbr])?;
        let cqn = Cqn(View::<CreateCqOut>::new_checked(&o)?.get32(create_cq_out::cqn));
        let cq = Cq {
            dev: self,
            cqn,
            uar,
            shape,
            dbr_shape,
            buf: Some(buf),
            dbr: Some(dbr),
            log_size,
            ci: 0,
            channel: attr.channel,
            context: attr.cq_context,
            // A CQ made after a fatal error starts on the flushing path.
            purge_seen: self
                .purge_epoch
                .load(Ordering::Acquire)
                .wrapping_sub(u32::from(self.is_fatal())),
            purges: Purges::new(),
            last_book: None,
            last_srq: None,
        };
        // A CQ without a channel gets its event counts when first armed.
        let registered = match attr.channel {
            Some(ch) => ch.add_cq(cqn.raw(), attr.cq_context),
            None => Ok(()),
        };
        // Another thread took the channel's last room after the check above: the CQ goes
        // again.
        registered.map(|()| cq)
    }

    /// log2 of the ring size for a CQ of at least `cqe` entries (one more than asked, as
    /// a full ring is indistinguishable from an empty one to firmware's overrun check).
    fn cq_log_size(&self, cqe: u32) -> Result<u8, Error> {
        if cqe == 0 {
            return Err(Error::InvalidArgument {
                what: Invalid::ZeroEntries,
            });
        }
        let max = self
            .info
            .caps
            .max_cqe
            .min((MAX_CQ_PAGES * MAX_PAGE / CQE_BYTES) as u32 - 1);
        if cqe > max {
            return Err(Error::ExceedsLimit {
                limit: Limit::CqEntries,
                requested: cqe.into(),
                max: max.into(),
            });
        }
        Ok((cqe + 1).next_power_of_two().max(2).trailing_zeros() as u8)
    }

    /// A CQE ring of `1 << log_size` entries (at least a page), every entry empty, and its
    /// pages.
    ///
    /// # Errors
    /// [`Error::ExceedsLimit`] when the pages the HAL could align are more than one command
    /// carries; a DMA error.
    fn cq_ring(&self, log_size: u8) -> Result<(SharedDma<H::Dma>, RingPages), Error> {
        let len = (CQE_BYTES << log_size).max(4096);
        let (mut ring, pages) = alloc_ring(&self.hal, len)?;
        if pages.count > MAX_CQ_PAGES {
            return Err(Error::ExceedsLimit {
                limit: Limit::CqEntries,
                requested: 1 << log_size,
                max: (MAX_CQ_PAGES * pages.page / CQE_BYTES - 1) as u64,
            });
        }
        init_entries(ring.as_mut_slice());
        Ok((ring.share(), pages))
    }
}

/// `ibv_wc_opcode` of a requester completion by the WQE opcode in the CQE: one load instead
/// of a jump through a table of branches.
static REQ_OPCODES: [WcOpcode; 256] = {
    let mut t = [WcOpcode::Send; 256];
    t[wqe_opcode::RDMA_WRITE as usize] = WcOpcode::RdmaWrite;
    t[wqe_opcode::RDMA_WRITE_IMM as usize] = WcOpcode::RdmaWrite;
    t[wqe_opcode::RDMA_READ as usize] = WcOpcode::RdmaRead;
    t[wqe_opcode::ATOMIC_CS as usize] = WcOpcode::CompSwap;
    t[wqe_opcode::ATOMIC_FA as usize] = WcOpcode::FetchAdd;
    t[wqe_opcode::UMR as usize] = WcOpcode::Driver1;
    t
};

/// The `wr_id` of the request a completion ends (0 for a QP without a book), marking the
/// queue complete up to it.
#[inline(always)]
fn complete(book: Option<&BookView<'_>>, is_send: bool, counter: u16) -> u64 {
    match book {
        Some(b) if is_send => b.complete_send(counter),
        Some(b) => b.complete_recv(counter),
        None => 0,
    }
}

/// [`Cq::decode`] of a CQE that carries its data (scatter to CQE), out of the poll loop: the
/// data goes to the WQE's buffers first (before the WQE is handed back to the poster), then
/// the completion is decoded, the fields the data overwrote cleared and a failed copy reported
/// as its status.
#[cold]
#[inline(never)]
fn decode_scattered<'d, H: Hal>(
    dev: &'d Device<H>,
    last_srq: &mut LastSlot<'d, SrqBook<H>>,
    book: Option<&Book<H>>,
    cqe: Slot<'_, CQE_BYTES>,
    op_own: u8,
    wc: &mut Wc,
) {
    let sop = cqe.read32(SOP_DROP_QPN);
    let r = cq_scatter::scatter(dev, book.and_then(|b| b.ring), cqe, op_own);
    // The run's book view is made again here, so the loop need not keep it in memory.
    let view = book.and_then(|b| b.view());
    Cq::<H>::decode(cqe, op_own, sop, view.as_ref(), wc);
    crate::verbs::xrc::srq_wr_id(dev, last_srq, cqe, op_own, wc);
    cq_scatter::clear_overwritten(wc);
    if let Err(status) = r {
        wc.status = status;
    }
}

/// `ibv_wc_opcode` of a requester completion from the WQE opcode in the CQE.
#[inline(always)]
fn req_opcode(wqe_opcode: u8) -> WcOpcode {
    REQ_OPCODES[usize::from(wqe_opcode)]
}

impl<H: Hal> Cq<'_, H> {
    /// The CQ number.
    pub fn cqn(&self) -> Cqn {
        self.cqn
    }

    /// The device.
    pub(crate) fn device(&self) -> &Device<H> {
        self.dev
    }

    /// Number of entries.
    pub fn capacity(&self) -> u32 {
        1 << self.log_size
    }

    fn ring(&self) -> &SharedDma<H::Dma> {
        match &self.buf {
            Some(b) => b,
            None => unreachable!("a live Cq holds its ring"),
        }
    }

    fn dbr(&self) -> &SharedDma<H::Dma> {
        match &self.dbr {
            Some(b) => b,
            None => unreachable!("a live Cq holds its doorbell record"),
        }
    }

    /// Decodes `cqe` (already known to be software-owned, its QPN word `sop` already read) into
    /// `wc`, taking the `wr_id` from `book` (the CQE's QP's) and marking its queue complete up
    /// to the request. Successful completions read only the dwords their opcode uses, straight
    /// from the ring; error CQEs are copied out whole.
    #[inline(always)]
    pub(crate) fn decode(
        cqe: Slot<'_, CQE_BYTES>,
        op_own: u8,
        sop: u32,
        book: Option<&BookView<'_>>,
        wc: &mut Wc,
    ) {
        // Byte offsets of the fields read here, from the layouts.
        const WQE_COUNTER: usize = cqe64::wqe_counter.bit / 8;
        const BYTE_CNT: usize = cqe64::byte_cnt.bit / 8;
        const IMM: usize = cqe64::imm_inval_pkey.bit / 8;
        const FLAGS_RQPN: usize = cqe64::flags_rqpn.bit / 8;
        const SLID: usize = cqe64::slid.bit / 8;
        const ML_PATH: usize = cqe64::ml_path.bit / 8;
        *wc = Wc::EMPTY;
        let opcode = CqeOpcode::from(get_cqe_opcode(op_own));
        let counter = cqe.read16(WQE_COUNTER);
        // A successful send, the most frequent, decided before the other kinds.
        if opcode == CqeOpcode::Req {
            wc.qp_num = cqe_qpn(sop);
            wc.opcode = req_opcode(cqe_wqe_opcode(sop));
            if matches!(
                wc.opcode,
                WcOpcode::RdmaRead | WcOpcode::CompSwap | WcOpcode::FetchAdd
            ) {
                wc.byte_len = cqe.read32(BYTE_CNT);
            }
            if let Some(b) = book {
                wc.wr_id = b.complete_send(counter);
            }
            return;
        }
        let is_send = opcode == CqeOpcode::ReqErr;
        if matches!(opcode, CqeOpcode::ReqErr | CqeOpcode::RespErr) {
            // Error CQEs are read whole, through the CQE value the model emits them with.
            let e = cq_ring::parse(cqe);
            let sqn = e.sop_drop_qpn;
            wc.status = WcStatus::from_syndrome(e.syndrome);
            wc.vendor_err = u32::from(e.vendor_err_synd);
            wc.qp_num = sqn & 0x00ff_ffff;
            wc.opcode = if is_send {
                req_opcode((sqn >> 24) as u8)
            } else {
                WcOpcode::Recv
            };
            wc.wr_id = complete(book, is_send, counter);
            return;
        }
        wc.qp_num = cqe_qpn(sop);
        wc.byte_len = cqe.read32(BYTE_CNT);
        let imm = cqe.read32(IMM);
        let flags = cqe.read32(FLAGS_RQPN);
        wc.src_qp = cqe_rqpn(flags);
        wc.sl = cqe_sl(flags);
        wc.slid = cqe.read16(SLID);
        // rdma-core mlx5_parse_cqe: the low 7 bits are the DLID path bits.
        wc.dlid_path_bits = cqe.read8(ML_PATH) & 0x7f;
        if cqe_grh(flags) != 0 {
            wc.wc_flags |= WcFlags::GRH;
        }
        wc.pkey_index = imm as u16;
        wc.opcode = WcOpcode::Recv;
        match opcode {
            CqeOpcode::RespWrImm => {
                wc.opcode = WcOpcode::RecvRdmaWithImm;
                wc.wc_flags |= WcFlags::WITH_IMM;
                wc.imm_data = imm;
            }
            CqeOpcode::RespSendImm => {
                wc.wc_flags |= WcFlags::WITH_IMM;
                wc.imm_data = imm;
            }
            CqeOpcode::RespSendInv => {
                wc.wc_flags |= WcFlags::WITH_INV;
                wc.imm_data = imm;
            }
            _ => {}
        }
        wc.wr_id = complete(book, false, counter);
    }

    /// Polls up to `wc.len()` completions into `wc` (`ibv_poll_cq`); returns how many. Error
    /// completions are returned as entries with an error status, not as `Err`.
    ///
    /// Work-request ids come from the QP's book; a completion for a QP this driver does not
    /// know carries `wr_id` 0.
    pub fn poll(&mut self, wc: &mut [Wc]) -> usize {
        // Completions of a destroyed or reset QP are dropped first: each run of CQEs checks
        // the purge epoch once its book is locked (`purge_seen` is kept off the epoch while
        // purges are pending) and stops short when it moved; then the purging path runs.
        let n = self.poll_run(wc);
        if n == 0 && self.purge_seen != self.dev.purge_epoch.load(Ordering::Acquire) {
            return self.poll_purging(wc);
        }
        n
    }

    /// Polls while completions of gone QPs may be in the ring: each is dropped, the others
    /// are returned in order.
    #[cold]
    fn poll_purging(&mut self, wc: &mut [Wc]) -> usize {
        let epoch = self.dev.purge_epoch.load(Ordering::Acquire);
        if self.dev.is_fatal() {
            // The device writes no more CQEs: what is outstanding completes in software, and
            // every later poll comes back here.
            self.purge_seen = epoch.wrapping_sub(1);
            return crate::verbs::cq_flush::poll_flushed(&self.dev.books, self.cqn.raw(), wc);
        }
        // Every purge entered up to `epoch` is taken now, so runs may go on under it.
        self.purge_seen = epoch;
        self.dev.take_purges(self.cqn.raw(), &mut self.purges);
        let n = self.poll_skipping(wc);
        // Purges the consumer index has not passed yet bring the next poll back here.
        if !self.purges.is_empty() {
            self.purge_seen = epoch.wrapping_sub(1);
        }
        n
    }

    fn poll_skipping(&mut self, wc: &mut [Wc]) -> usize {
        let mut n = 0;
        loop {
            self.skip_purged();
            if self.purges.is_empty() {
                return n + self.poll_run(&mut wc[n..]);
            }
            if n == wc.len() {
                return n;
            }
            match self.poll_run(&mut wc[n..n + 1]) {
                0 => return n,
                got => n += got,
            }
        }
    }

    /// Consumes the completions at the head of the ring that belong to purged QPs, and
    /// forgets purges the consumer index has passed.
    fn skip_purged(&mut self) {
        let start = self.ci;
        while let Some(e) = self
            .buf
            .as_ref()
            .and_then(|b| b.slots_of(&self.shape))
            .map(|ring| ring.slot(self.ci as usize))
            .filter(|&e| sw_owned(e, self.ci, self.log_size).is_some())
        {
            let qpn = cqe_qpn(e.read32(SOP_DROP_QPN));
            let ci = self.ci;
            if !self
                .purges
                .iter()
                .any(|&(q, until)| q == qpn && before(ci, until))
            {
                break;
            }
            self.ci = self.ci.wrapping_add(1);
        }
        let ci = self.ci;
        self.purges.retain(|&(_, until)| before(ci, until));
        if self.ci != start {
            if let Some(d) = self.dbr.as_ref().and_then(|d| d.slots_of(&self.dbr_shape)) {
                set_ci(d.slot(0), ci);
            }
        }
    }

    /// The polling loop proper.
    #[inline(always)]
    fn poll_run(&mut self, wc: &mut [Wc]) -> usize {
        let Some(ring) = self.buf.as_ref().and_then(|b| b.slots_of(&self.shape)) else {
            return 0;
        };
        // Nothing new, the common case of a busy-polling loop: one look at the next entry's
        // owner byte, before any book is locked.
        if !cqe_is_sw_owned(
            ring.slot(self.ci as usize).read8(CQE_BYTES - 1),
            self.ci,
            self.log_size,
        ) {
            return 0;
        }
        // ORDERING: the owner byte before the first entry's QPN, read next (free on x86; a
        // fence where loads may pass loads, and what makes it ordered under Miri).
        dma_rmb();
        // The consumer index lives in a register for the call.
        let start = self.ci;
        let mut ci = start;
        let log_size = self.log_size;
        let mut n = 0;
        // Completions come in runs from one QP: its book is locked once per run, and the
        // run's loop keeps the book's view in registers.
        'runs: while n < wc.len() {
            let first = ring.slot(ci as usize);
            let qpn = cqe_qpn(first.read32(SOP_DROP_QPN));
            let mut guard = lock_cached(&self.dev.books, &mut self.last_book, qpn);
            if guard.as_ref().is_some_and(|g| !holds(g, qpn)) {
                // The cached slot is no longer this QP's.
                drop(guard);
                guard = relock(&self.dev.books, &mut self.last_book, qpn);
            }
            let entry = guard.as_ref().and_then(|g| g.as_ref());
            // A QP gone since this poll began (its purge is entered before its book leaves,
            // `Qp::destroy`, and its number may already be another QP's): its completions are
            // for the next poll to drop, not for this run to hand out with a book that is not
            // theirs. Checked after the book is locked, which orders it after the purge.
            if self.purge_seen != self.dev.purge_epoch.load(Ordering::Acquire) {
                break 'runs;
            }
            let book = entry.and_then(|b| b.view());
            while n < wc.len() {
                let cqe = ring.slot(ci as usize);
                let op_own = cqe.read8(CQE_BYTES - 1);
                if !cqe_is_sw_owned(op_own, ci, log_size) {
                    break 'runs;
                }
                // ORDERING: the owner bit said the CQE is complete; read its body only after
                // it.
                dma_rmb();
                if CqeOpcode::from(get_cqe_opcode(op_own)) == CqeOpcode::ResizeCq {
                    ci = ci.wrapping_add(1);
                    continue;
                }
                // The QPN sits at the same place in every kind of CQE.
                let sop = cqe.read32(SOP_DROP_QPN);
                if cqe_qpn(sop) != qpn {
                    continue 'runs;
                }
                ci = ci.wrapping_add(1);
                if op_own & cq_scatter::FORMAT_MASK == 0 {
                    Self::decode(cqe, op_own, sop, book.as_ref(), &mut wc[n]);
                    crate::verbs::xrc::srq_wr_id(
                        self.dev,
                        &mut self.last_srq,
                        cqe,
                        op_own,
                        &mut wc[n],
                    );
                } else {
                    decode_scattered(self.dev, &mut self.last_srq, entry, cqe, op_own, &mut wc[n]);
                }
                n += 1;
            }
        }
        self.ci = ci;
        if ci != start {
            if let Some(d) = self.dbr.as_ref().and_then(|d| d.slots_of(&self.dbr_shape)) {
                set_ci(d.slot(0), ci);
            }
        }
        n
    }

    /// Completions written and not yet polled.
    fn unpolled(&self) -> u32 {
        let mask = (1u32 << self.log_size) - 1;
        let mut n = 0;
        while n <= mask {
            let i = self.ci.wrapping_add(n);
            let op_own = self
                .ring()
                .read8(((i & mask) as usize) * CQE_BYTES + CQE_BYTES - 1);
            if !cqe_is_sw_owned(op_own, i, self.log_size) {
                break;
            }
            n += 1;
        }
        n
    }

    /// Resizes the CQ to at least `cqe` entries (`ibv_resize_cq`), keeping every completion
    /// not yet polled, in order. The size is rounded as for [`Device::create_cq`]; asking for
    /// the current size does nothing.
    ///
    /// Firmware switches rings at a RESIZE_CQ entry it writes into the old ring; the entries
    /// before it move to the new ring one index further on, and the consumer index steps over
    /// the marker (Linux `mlx5_ib_resize_cq` / `copy_resize_cqes`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 entries or fewer than those waiting to be polled,
    /// [`Error::ExceedsLimit`] past `max_cqe`, a DMA or command error. On error the CQ is
    /// unchanged.
    pub fn resize(&mut self, cqe: u32) -> Result<(), Error> {
        let dev = self.dev;
        let log_size = dev.cq_log_size(cqe)?;
        if log_size == self.log_size {
            return Ok(());
        }
        if self.unpolled() > cqe {
            return Err(Error::InvalidArgument {
                what: Invalid::FewerEntriesThanUnpolled,
            });
        }
        let (new, pages) = dev.cq_ring(log_size)?;
        let shape = new.ring_shape::<CQE_BYTES>(0, 1 << log_size)?;
        let RingPages {
            page,
            log_page,
            count: pages,
            ..
        } = pages;
        let ilen = ModifyCqIn::BYTES + 8 * pages;
        // Built in DMA memory used as plain memory, not on the stack (8 KiB at most).
        let mut scratch = self.dev.hal.dma_alloc(ilen.max(64), 64)?;
        let i = scratch.as_mut_slice();
        {
            let mut v = input::<ModifyCq>(&mut i[..ilen])?;
            v.set(modify_cq_in::op_mod, modify_cq_op_mod::RESIZE)
                .set(modify_cq_in::cqn, self.cqn.raw())
                .set(
                    modify_cq_in::modify_field_select_resize_field_select,
                    resize_field_select::LOG_CQ_SIZE
                        | resize_field_select::PAGE_OFFSET
                        | resize_field_select::LOG_PAGE_SIZE,
                );
            v.sub(modify_cq_in::cq_context)
                .set(cqc::log_cq_size, log_size)
                .set(cqc::log_page_size, log_page)
                .set(cqc::page_offset, 0u8);
            for k in 0..pages {
                v.set_array(modify_cq_in::pas, k, new.iova().0 + (k * page) as u64)?;
            }
        }
        let mut o = [0u8; ModifyCqOut::BYTES];
        let [new] = dev.exec_handing_over::<ModifyCq, 1>(&mut i[..ilen], &mut o, [new])?;
        // Move what waits in the old ring, up to firmware's marker, one index on.
        let (old_mask, new_mask) = ((1u32 << self.log_size) - 1, (1u32 << log_size) - 1);
        let old = self.ring();
        let mut at = self.ci;
        let mut cqe_bytes = [0u8; CQE_BYTES];
        // At most one pass over the old ring, whatever firmware wrote.
        for _ in 0..=old_mask {
            let src = ((at & old_mask) as usize) * CQE_BYTES;
            let op_own = old.read8(src + CQE_BYTES - 1);
            if !cqe_is_sw_owned(op_own, at, self.log_size) {
                // No marker: firmware did not switch as it said. Keep what was copied and
                // carry on in the new ring, as Linux does.
                break;
            }
            // ORDERING: the owner bit before the body.
            dma_rmb();
            if CqeOpcode::from(get_cqe_opcode(op_own)) == CqeOpcode::ResizeCq {
                break;
            }
            let _ = old.read_bytes(src, &mut cqe_bytes);
            let to = at.wrapping_add(1);
            cqe_bytes[CQE_BYTES - 1] = (op_own & !CQE_OWNER_MASK) | cqe_owner_for(to, log_size);
            let _ = new.write_bytes(((to & new_mask) as usize) * CQE_BYTES, &cqe_bytes);
            at = to;
        }
        self.ci = self.ci.wrapping_add(1);
        self.buf = Some(new);
        self.shape = shape;
        self.log_size = log_size;
        // The moved entries are in place before the consumer index says so (`set_ci`'s
        // barrier).
        if let Some(d) = self.dbr.as_ref().and_then(|d| d.slots_of(&self.dbr_shape)) {
            set_ci(d.slot(0), self.ci);
        }
        Ok(())
    }

    /// The context the CQ was created with (`cq_context`).
    pub fn context(&self) -> u64 {
        self.context
    }

    /// Runs `f` on this CQ's event counts, in its channel or the device.
    fn with_events<R>(&self, f: impl FnOnce(&mut CqEvents) -> R) -> Option<R> {
        let cqn = self.cqn.raw();
        match self.channel {
            Some(ch) => ch.state.lock().cqs.get_mut(&cqn).map(f),
            None => self.dev.ctl.lock().cq_events.get_mut(&cqn).map(f),
        }
    }

    /// Arms the CQ (`ibv_req_notify_cq`): the next completion (or the next solicited one when
    /// `solicited_only`) raises one event on its channel
    /// ([`CompChannel::get_cq_event`]), or without a channel
    /// [`AsyncEvent::Completion`](crate::AsyncEvent::Completion). As mlx5 hardware does (the
    /// arm carries the consumer index), arming for any completion while completions the
    /// user has not polled are already in the CQ raises the event at once — the seed's text
    /// says no event then; we follow the device. Events already delivered are read from the
    /// EQ first, so the EQ never holds two of one CQ.
    ///
    /// # Errors
    /// [`Error::ExceedsLimit`] ([`Limit::CqCount`]) when the CQ has no channel and the
    /// device's table of CQs armed without a channel is full (128 without `alloc`); nothing
    /// is armed then.
    pub fn req_notify(&mut self, solicited_only: bool) -> Result<(), Error> {
        let cmd = if solicited_only {
            cq_arm_cmd::REQ_NOT_SOL
        } else {
            cq_arm_cmd::REQ_NOT
        };
        match self.channel {
            Some(ch) => ch.state.lock().drain(&self.dev.hal),
            None => {
                self.dev.poll_events();
                let mut ctl = self.dev.ctl.lock();
                if !ctl.cq_events.contains_key(&self.cqn.raw()) {
                    let max = ctl.armed_cq_limit();
                    if ctl.cq_events.len() >= max {
                        return Err(cq_count(max));
                    }
                    let fresh = CqEvents {
                        context: self.context,
                        ..CqEvents::default()
                    };
                    ctl.cq_events
                        .insert(self.cqn.raw(), fresh)
                        .map_err(|_| cq_count(max))?;
                }
            }
        }
        let sn = self.with_events(|e| e.arm_sn).unwrap_or(0) & 3;
        self.dbr()
            .write32(cq_dbr::ARM, cq_arm_word(sn, cmd, self.ci));
        // ORDERING: the arm word in the doorbell record before the doorbell (mlx5_arm_cq).
        wmb();
        self.dev.hal.bar0().write64(
            BarOffset(self.uar.cq_doorbell()),
            cq_arm_doorbell(sn, cmd, self.ci, self.cqn.raw()),
        );
        Ok(())
    }

    /// Acknowledges `n` completion events read for this CQ (`ibv_ack_cq_events`).
    ///
    /// # Errors
    /// [`Invalid::AckCount`] for 0 or more than were read and not yet acknowledged.
    pub fn ack_events(&mut self, n: u32) -> Result<(), Error> {
        self.with_events(|e| e.ack(n))
            .unwrap_or(Err(Error::InvalidArgument {
                what: Invalid::AckCount,
            }))
    }

    /// Completion events read and not yet acknowledged.
    pub fn unacked_events(&self) -> u32 {
        self.with_events(|e| e.unacked).unwrap_or(0)
    }

    fn forget_events(&self) {
        let cqn = self.cqn.raw();
        self.dev.ctl.lock().cq_purges.remove(&cqn);
        match self.channel {
            Some(ch) => {
                ch.state.lock().cqs.remove(&cqn);
            }
            None => {
                self.dev.ctl.lock().cq_events.remove(&cqn);
            }
        }
    }

    fn destroy_inner(&mut self) -> Result<(), Error> {
        self.destroy_cmd()?;
        self.forget_events();
        Ok(())
    }

    fn destroy_cmd(&mut self) -> Result<(), Error> {
        if self
            .dev
            .ctl
            .lock()
            .cq_users
            .get(&self.cqn.raw())
            .is_some_and(|n| *n > 0)
        {
            return Err(Error::Busy);
        }
        let mut i = [0u8; DestroyCqIn::BYTES];
        input::<DestroyCq>(&mut i)?.set(destroy_cq_in::cqn, self.cqn.raw());
        let mut o = [0u8; DestroyCqOut::BYTES];
        self.dev.exec::<DestroyCq>(&mut i, &mut o)
    }

    /// Destroys the CQ (`ibv_destroy_cq`).
    ///
    /// # Errors
    /// [`Error::Busy`] while a QP completes into it (dropping it then keeps it until the QP
    /// goes), [`Error::EventsUnacknowledged`] while
    /// events read for it are not acknowledged (ibverbs would wait for them forever), or a
    /// command error; the CQ is returned.
    // The CQ is handed back so the caller can retry; without allocation it cannot be boxed.
    #[allow(clippy::result_large_err)]
    pub fn destroy(mut self) -> Result<(), (Error, Self)> {
        let count = self.unacked_events();
        if count > 0 {
            return Err((Error::EventsUnacknowledged { count }, self));
        }
        match self.destroy_inner() {
            Ok(()) => {
                self.buf.take();
                self.dbr.take();
                Ok(())
            }
            Err(e) => Err((e, self)),
        }
    }
}

impl<H: Hal> Drop for Cq<'_, H> {
    fn drop(&mut self) {
        if self.buf.is_none() {
            return;
        }
        let in_use = self.channel.is_none()
            && (self.dev.ctl.lock().cq_users)
                .get(&self.cqn.raw())
                .is_some_and(|n| *n > 0);
        if in_use {
            if let (Some(buf), Some(dbr)) = (self.buf.take(), self.dbr.take()) {
                self.forget_events();
                let orphan = crate::wq::cq_tables::Orphan::new(buf, dbr);
                let cqn = self.cqn.raw();
                if let Err(o) = self.dev.ctl.lock().cq_orphans.insert(cqn, orphan) {
                    warn!(
                        "CQ {} dropped while in use, no room to keep it: leaking it",
                        cqn
                    );
                    o.leak();
                } else {
                    warn!(
                        "CQ {} dropped while in use: destroyed when its last QP goes",
                        cqn
                    );
                }
                return;
            }
        }
        if let Err(e) = self.destroy_inner() {
            warn!("DESTROY_CQ {}: {}; leaking its memory", self.cqn, e);
            if let Some(b) = self.buf.take() {
                b.leak();
            }
            if let Some(b) = self.dbr.take() {
                b.leak();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bareverbs_firmware_cmd::ifc::{make_op_own, CqeOpcode};
    use bareverbs_hal::Hal;
    use core::sync::atomic::{AtomicU16, Ordering};

    use bareverbs_model::SimHal;

    use super::*;

    #[test]
    fn a_receive_cqe_decodes_into_every_wc_field() {
        let hal = SimHal::synchronous();
        let ring = hal.dma_alloc(CQE_BYTES, 64).unwrap().share();
        let mut c = [0u8; CQE_BYTES];
        {
            let mut v = bareverbs_firmware_cmd::ViewMut::<Cqe64>::zeroed(&mut c).unwrap();
            // ml_path bit 7 is not a path bit.
            v.set(cqe64::ml_path, 0x85u8)
                .set(cqe64::slid, 0x0bcdu16)
                .set(cqe64::flags_rqpn, (5u32 << 24) | (1 << 28) | 0x42)
                .set(cqe64::imm_inval_pkey, 0xabcd_0007u32)
                .set(cqe64::byte_cnt, 300u32)
                .set(cqe64::sop_drop_qpn, 0x77u32)
                .set(cqe64::wqe_counter, 9u16)
                .set(cqe64::op_own, make_op_own(CqeOpcode::RespSendImm.into(), 0));
        }
        ring.write_bytes(0, &c).unwrap();
        let slots = ring.slots::<CQE_BYTES>(0, 1).unwrap();
        // A book of 16 receives whose entry 9 holds the request, and one send entry.
        let (sq_book, rq_book) = (
            hal.dma_alloc(16, 64).unwrap().share(),
            hal.dma_alloc(16 * 8, 64).unwrap().share(),
        );
        let rq = rq_book.slots::<8>(0, 16).unwrap();
        rq.slot(9).write_ne64(0, 0xfeed_f00d);
        let (sq_tail, rq_tail) = (AtomicU16::new(0), AtomicU16::new(0));
        let book = BookView {
            sq: sq_book.slots(0, 1).unwrap(),
            rq,
            sq_tail: &sq_tail,
            rq_tail: &rq_tail,
        };
        let mut wc = Wc::EMPTY;
        let sop = slots.slot(0).read32(SOP_DROP_QPN);
        Cq::<SimHal>::decode(slots.slot(0), c[0x3f], sop, Some(&book), &mut wc);
        // The receive at WQE counter 9: its wr_id, and the receive queue complete past it.
        assert_eq!(wc.wr_id, 0xfeed_f00d);
        assert_eq!(rq_tail.load(Ordering::Relaxed), 10);
        assert_eq!(sq_tail.load(Ordering::Relaxed), 0);
        assert_eq!(wc.dlid_path_bits, 0x05);
        assert_eq!(wc.byte_len, 300);
        assert_eq!(wc.qp_num, 0x77);
        assert_eq!(wc.src_qp, 0x42);
        assert_eq!(wc.sl, 5);
        assert_eq!(wc.slid, 0x0bcd);
        assert_eq!(wc.imm_data, 0xabcd_0007);
        assert_eq!(wc.opcode, WcOpcode::Recv);
        assert_eq!(wc.wc_flags, WcFlags::WITH_IMM | WcFlags::GRH);
    }
}
