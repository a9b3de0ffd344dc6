//! Shared receive queues (`ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`,
//! `ibv_post_srq_recv`, `ibv_destroy_srq`): an RMP as Linux 6.12 mlx5_ib makes an SRQ at ISSI
//! 1 (srq_cmd.c `create_rmp_cmd`, `arm_rmp_cmd`, `query_rmp_cmd`, `destroy_rmp_cmd`), its
//! linked-list ring posted as rdma-core 56 providers/mlx5/srq.c posts it (`srq_ring.rs`).

use bareverbs_firmware_cmd::commands::{CreateRmp, DestroyRmp, ModifyRmp, QueryRmp};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, View};
use bareverbs_hal::Hal;

use crate::cmdq::MAX_MESSAGE;
use crate::device::{input, Control, Device};
use crate::error::{Error, Limit};
use crate::verbs::pd::Pd;
use crate::verbs::post::{PostError, RecvWr};
use crate::verbs::srq_ring::{
    limit_to_arm, srq_geometry, SrqAttr, SrqAttrMask, SrqBook, SrqSlot, INLINE_SRQS,
};
use crate::verbs::xrc::{alloc_xrcdn, dealloc_xrcdn};

/// Bytes of a page of the ring (`log_wq_pg_sz` 0: 4 KiB).
const PAGE: usize = 4096;

/// What to create (`struct ibv_srq_init_attr`). Non-exhaustive (`ibv_srq_init_attr_ex` has more
/// to come): start from [`SrqInitAttr::new`] and set fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct SrqInitAttr {
    /// Sizes asked for (`max_wr`, `max_sge`) and the limit to arm at once (`srq_limit`; 0:
    /// not armed).
    pub attr: SrqAttr,
    /// A value of the user's (`srq_context`).
    pub srq_context: u64,
}

impl SrqInitAttr {
    /// An SRQ of `attr`'s sizes and limit, context 0.
    pub fn new(attr: SrqAttr) -> Self {
        SrqInitAttr {
            attr,
            srq_context: 0,
        }
    }
}

/// A shared receive queue. QPs created with it (`QpInitAttr::srq`) take their receives from
/// it; it cannot be destroyed while one exists. Destroyed on drop.
pub struct Srq<'p, 'd, H: Hal> {
    pd: &'p Pd<'d, H>,
    srqn: u32,
    /// The XRC domain the QPs on it name (mlx5 QPs with `rq_type` SRQ name a domain; Linux
    /// uses a device-wide one, `xrcdn0`; this driver keeps no device-wide objects).
    xrcdn: u32,
    attr: SrqAttr,
    context: u64,
    live: bool,
    /// Its book's slot in the device's table.
    book: &'d SrqSlot<H>,
}

impl<'d, H: Hal> Pd<'d, H> {
    /// Creates an SRQ (`ibv_create_srq`) holding at least `init.attr.max_wr` receives of up to
    /// `init.attr.max_sge` entries; the sizes it got are in [`Srq::attr`]. A non-zero
    /// `srq_limit` is armed at once (as mlx5_ib passes `srq_limit` as the RMP's `lwm`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 receives; [`Error::ExceedsLimit`] past the device's
    /// SRQ sizes, a limit past `max_wr`, or the driver's SRQ table full; a DMA or command
    /// error.
    pub fn create_srq(&self, init: &SrqInitAttr) -> Result<Srq<'_, 'd, H>, Error> {
        let dev = self.dev;
        let a = init.attr;
        let (log_size, log_stride) = srq_geometry(&dev.info().caps, &a)?;
        let exceeds = |limit, requested: u32, max: u32| Error::ExceedsLimit {
            limit,
            requested: requested.into(),
            max: max.into(),
        };
        if a.srq_limit > a.max_wr {
            return Err(exceeds(Limit::QpWr, a.srq_limit, a.max_wr));
        }
        if !dev.srq_books.has_room(1) {
            return Err(exceeds(
                Limit::SrqCount,
                INLINE_SRQS as u32 + 1,
                INLINE_SRQS as u32,
            ));
        }
        let xrcdn = alloc_xrcdn(dev)?;
        match self.create_rmp(log_size, log_stride, a.srq_limit) {
            Ok((srqn, book)) => Ok(Srq {
                pd: self,
                srqn,
                book,
                xrcdn,
                attr: SrqAttr {
                    max_wr: (1u32 << log_size) - 1,
                    max_sge: ((1u32 << log_stride) - 16) / 16,
                    srq_limit: a.srq_limit,
                },
                context: init.srq_context,
                live: true,
            }),
            Err(e) => {
                let _ = dealloc_xrcdn(dev, xrcdn);
                Err(e)
            }
        }
    }

    /// CREATE_RMP of a linked-list ring and its book in the device's SRQ table.
    fn create_rmp(
        &self,
        log_size: u8,
        log_stride: u8,
        lwm: u32,
    ) -> Result<(u32, &'d SrqSlot<H>), Error> {
        let dev = self.dev;
        let bytes = (1usize << log_size) << log_stride;
        let len = bytes.div_ceil(PAGE) * PAGE;
        let pages = len / PAGE;
        if CreateRmpIn::BYTES + 8 * pages > MAX_MESSAGE {
            return Err(Error::ExceedsLimit {
                limit: Limit::QpBufferBytes,
                requested: len as u64,
                max: ((MAX_MESSAGE - CreateRmpIn::BYTES) / 8 * PAGE) as u64,
            });
        }
        let ring = dev.hal.dma_alloc(len, PAGE)?.share();
        ring.fill(0, len, 0)?;
        let stride = 1usize << log_stride;
        for k in 1..1usize << log_size {
            ring.try_write16(
                (k - 1) * stride + wqe_srq_next_seg::next_wqe_index.bit / 8,
                k as u16,
            )?;
        }
        let dbr = dev.hal.dma_alloc(64, 64)?.share();
        dbr.fill(0, 64, 0)?;
        let ids = dev.hal.dma_alloc(8 << log_size, 64)?.share();
        let ilen = CreateRmpIn::BYTES + 8 * pages;
        // Built in DMA memory used as plain memory, not on the stack (8 KiB at most).
        let mut scratch = dev.hal.dma_alloc(ilen.max(64), 64)?;
        let i = scratch.as_mut_slice();
        {
            let mut v = input::<CreateRmp>(&mut i[..ilen])?;
            let mut c = v.sub(create_rmp_in::ctx);
            c.set(rmpc::state, rmpc_state::RDY);
            c.sub(rmpc::wq)
                .set(wq::wq_type, wq_type::LINKED_LIST)
                .set(wq::lwm, lwm)
                .set(wq::pd, self.pdn().raw())
                .set(wq::dbr_addr, dbr.iova().0)
                .set(wq::log_wq_stride, log_stride)
                .set(wq::log_wq_pg_sz, 0u8)
                .set(wq::log_wq_sz, log_size);
            for k in 0..pages {
                v.set_array(create_rmp_in::pas, k, ring.iova().0 + (k * PAGE) as u64)?;
            }
        }
        let mut o = [0u8; CreateRmpOut::BYTES];
        let [ring, dbr] =
            dev.exec_handing_over::<CreateRmp, 2>(&mut i[..ilen], &mut o, [ring, dbr])?;
        let srqn = View::<CreateRmpOut>::new_checked(&o)?.get32(create_rmp_out::rmpn);
        let book = SrqBook::new(srqn, [ring, dbr, ids], log_size, log_stride);
        let slot = match dev.srq_books.insert(book) {
            Ok(slot) => slot,
            Err(book) => {
                // Another thread filled the table after the check: the RMP goes again.
                match destroy_rmp(dev, srqn) {
                    Ok(()) => drop(book),
                    Err(_) => book.leak(),
                }
                return Err(Error::ExceedsLimit {
                    limit: Limit::SrqCount,
                    requested: INLINE_SRQS as u64 + 1,
                    max: INLINE_SRQS as u64,
                });
            }
        };
        Ok((srqn, slot))
    }
}

fn destroy_rmp<H: Hal>(dev: &Device<H>, rmpn: u32) -> Result<(), Error> {
    let mut i = [0u8; DestroyRmpIn::BYTES];
    input::<DestroyRmp>(&mut i)?.set(destroy_rmp_in::rmpn, rmpn);
    let mut o = [0u8; DestroyRmpOut::BYTES];
    dev.exec::<DestroyRmp>(&mut i, &mut o)
}

impl<H: Hal> Srq<'_, '_, H> {
    /// The SRQ number.
    pub fn srqn(&self) -> u32 {
        self.srqn
    }

    /// The XRC domain its QPs name.
    pub(crate) fn xrcdn(&self) -> u32 {
        self.xrcdn
    }

    /// The device.
    pub(crate) fn device(&self) -> &Device<H> {
        self.pd.dev
    }

    /// The sizes it got (at least those asked for) and the limit last set or read.
    pub fn attr(&self) -> SrqAttr {
        self.attr
    }

    /// The context it was created with (`srq_context`).
    pub fn context(&self) -> u64 {
        self.context
    }

    /// QPs that take their receives from it.
    pub fn qp_users(&self) -> u32 {
        let ctl = self.pd.dev.ctl.lock();
        ctl.srq_users.get(&self.srqn).copied().unwrap_or(0)
    }

    /// One more QP takes receives from it (the QP was created).
    pub(crate) fn add_user(&self) {
        let mut ctl = self.pd.dev.ctl.lock();
        let n = ctl.srq_users.get(&self.srqn).copied().unwrap_or(0);
        // One entry per live SRQ: the table holds as many as the SRQ table.
        let _ = ctl.srq_users.insert(self.srqn, n + 1);
    }

    /// Posts receives (`ibv_post_srq_recv`); they are taken by any QP on the SRQ, in the
    /// order posted.
    ///
    /// # Errors
    /// [`PostError`] with the index of the first request refused (more SGEs than
    /// [`SrqAttr::max_sge`], [`Invalid::SgeLength`](crate::error::Invalid::SgeLength),
    /// [`Error::QueueFull`]); those before it are posted, none after.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        crate::verbs::srq_ring::post_srq_recv(self.pd.dev, self.book, wrs)
    }

    /// Modifies the SRQ (`ibv_modify_srq`): [`SrqAttrMask::LIMIT`] arms the limit event with
    /// `attr.srq_limit` (MODIFY_RMP of `lwm`); it fires once
    /// ([`AsyncEvent::SrqLimitReached`](crate::AsyncEvent::SrqLimitReached)) when fewer
    /// receives than the limit remain, and the limit is then 0 (disarmed).
    ///
    /// # Errors
    /// [`Invalid::UnsupportedTransition`](crate::error::Invalid::UnsupportedTransition) for [`SrqAttrMask::MAX_WR`] (mlx5 cannot resize an
    /// SRQ: Linux mlx5_ib `mlx5_ib_modify_srq` returns EINVAL); [`Error::ExceedsLimit`] for a
    /// limit past `max_wr`; a command error.
    pub fn modify(&mut self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<(), Error> {
        if let Some(lwm) = limit_to_arm(attr, mask, self.attr.max_wr)? {
            let mut i = [0u8; ModifyRmpIn::BYTES];
            {
                let mut v = input::<ModifyRmp>(&mut i)?;
                v.set(modify_rmp_in::rmp_state, rmpc_state::RDY)
                    .set(modify_rmp_in::rmpn, self.srqn);
                v.sub(modify_rmp_in::bitmask).set(rmp_bitmask::lwm, 1u8);
                let mut c = v.sub(modify_rmp_in::ctx);
                c.set(rmpc::state, rmpc_state::RDY);
                c.sub(rmpc::wq).set(wq::lwm, lwm);
            }
            let mut o = [0u8; ModifyRmpOut::BYTES];
            self.pd.dev.exec::<ModifyRmp>(&mut i, &mut o)?;
            self.attr.srq_limit = lwm;
        }
        Ok(())
    }

    /// Reads the SRQ's attributes from the device (`ibv_query_srq`, QUERY_RMP): `srq_limit`
    /// is the armed limit, 0 once the limit event fired (seed: "not or no longer armed").
    ///
    /// # Errors
    /// A command error.
    pub fn query(&mut self) -> Result<SrqAttr, Error> {
        let mut i = [0u8; QueryRmpIn::BYTES];
        input::<QueryRmp>(&mut i)?.set(query_rmp_in::rmpn, self.srqn);
        let mut o = [0u8; QueryRmpOut::BYTES];
        self.pd.dev.exec::<QueryRmp>(&mut i, &mut o)?;
        let v = View::<QueryRmpOut>::new_checked(&o)?;
        let w = v.sub(query_rmp_out::rmp_context).sub(rmpc::wq);
        let stride = 1u32 << w.get(wq::log_wq_stride);
        let a = SrqAttr {
            max_wr: (1u32 << w.get(wq::log_wq_sz)) - 1,
            max_sge: (stride - 16) / 16,
            srq_limit: w.get32(wq::lwm),
        };
        self.attr = a;
        Ok(a)
    }

    fn destroy_inner(&mut self) -> Result<(), Error> {
        let dev = self.pd.dev;
        let r = destroy_rmp(dev, self.srqn);
        let book = dev.srq_books.remove(self.srqn);
        match r {
            Ok(()) => {
                let _ = dealloc_xrcdn(dev, self.xrcdn);
            }
            // The device may still write the ring: never freed.
            Err(_) => {
                if let Some(b) = book {
                    b.leak();
                }
            }
        }
        self.live = false;
        r
    }

    /// Destroys the SRQ (`ibv_destroy_srq`).
    ///
    /// # Errors
    /// [`Error::Busy`] while a QP takes receives from it (the SRQ is returned); a command
    /// error (the SRQ's memory is then leaked, never freed).
    pub fn destroy(mut self) -> Result<(), (Error, Self)> {
        if self.qp_users() > 0 {
            return Err((Error::Busy, self));
        }
        self.destroy_inner().map_err(|e| (e, self))
    }
}

impl<H: Hal> Drop for Srq<'_, '_, H> {
    fn drop(&mut self) {
        if self.live {
            if let Err(e) = self.destroy_inner() {
                warn!("DESTROY_RMP {}: {}; leaking its memory", self.srqn, e);
            }
        }
    }
}

/// One QP fewer takes receives from SRQ `srqn`.
pub(crate) fn remove_user<H: Hal>(ctl: &mut Control<H>, srqn: u32) {
    match ctl.srq_users.get_mut(&srqn) {
        Some(n) if *n > 1 => *n -= 1,
        Some(_) => {
            ctl.srq_users.remove(&srqn);
        }
        None => {}
    }
}
