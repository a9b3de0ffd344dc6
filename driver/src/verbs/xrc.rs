//! XRC, the extended reliable connected transport: XRC domains (ALLOC/DEALLOC_XRCD,
//! `ibv_open_xrcd`), the XRC SRQs of a domain (CREATE/DESTROY/QUERY/ARM_XRC_SRQ), the default
//! SRQ and domain every mlx5 XRC QP's context names, and the target QPs a domain owns (Linux
//! 6.12 mlx5_ib `main.c` `mlx5_ib_alloc_xrcd`, `qp.c` `create_xrc_tgt_qp`, `srq_cmd.c`
//! `create_xrc_srq_cmd`; rdma-core 56 `providers/mlx5`; seed 001 `ibv_*_xrc_rcv_qp`).

use bareverbs_firmware_cmd::commands::{
    AllocXrcd, ArmXrcSrq, CreateXrcSrq, DeallocXrcd, DestroyXrcSrq, QueryXrcSrq,
};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, Qpn, View};
use bareverbs_hal::{Hal, SharedDma, Slot};

use crate::device::{input, Device};
use crate::error::{Error, Invalid, Limit};
use crate::slot_table::{lock_current, LastSlot};
use crate::verbs::cq::Cq;
use crate::verbs::pd::Pd;
use crate::verbs::post::{PostError, RecvWr};
use crate::verbs::qp::{xrc_tgt_from_parts, Qp, QpAttr, QpCap};
use crate::verbs::qp_state::{QpAttrMask, QpState, QpType};
use crate::verbs::srq_ring::{SrqAttr, SrqAttrMask, SrqBook, SrqSlot};
use crate::verbs::wc::Wc;

/// Target QPs one domain shares through [`Xrcd::create_xrc_rcv_qp`] at once.
pub const MAX_SHARED_XRC_QPS: usize = 16;

/// A shared target QP: number, users, what the last modify or query left, and its mark of
/// life (see `qp::xrc_tgt_from_parts`).
struct SharedTgt<H: Hal> {
    qpn: Qpn,
    users: u32,
    state: QpState,
    attr: QpAttr,
    mark: Option<SharedDma<H::Dma>>,
}

/// What a shared target QP was created with (`struct ibv_qp_init_attr` as
/// `ibv_query_xrc_rcv_qp` returns it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct XrcRcvQpInitAttr {
    /// Always [`QpType::XrcTgt`] (`IBV_QPT_XRC_RECV`, the legacy API's `IBV_QPT_XRC`).
    pub qp_type: QpType,
    /// Its queue sizes: none (a target has no queues).
    pub cap: QpCap,
    /// Whether every send request is signaled: no sends, so `false`.
    pub sq_sig_all: bool,
    /// The domain's number (`xrc_domain`).
    pub xrcdn: u32,
}

/// Bytes of the page an XRC SRQ's ring is allocated in (`log_page_size` 0: 4 KiB).
const SRQ_PAGE: usize = 4096;

/// `xrc_srqc.user_index` for CQE version 0 completions: the CQE's `srqn` field then carries
/// the XRC SRQ's number (Linux 6.12 mlx5_ib `MLX5_IB_DEFAULT_UIDX`, as for kernel users).
pub(crate) const CQE_V0_UIDX: u32 = 0xff_ffff;

/// An XRC SRQ as created: its number and the memory handed to the device.
pub(crate) struct SrqMem<H: Hal> {
    pub(crate) srqn: u32,
    pub(crate) ring: SharedDma<H::Dma>,
    pub(crate) dbr: SharedDma<H::Dma>,
}

impl<H: Hal> SrqMem<H> {
    /// CREATE_XRC_SRQ of `1 << log_size` WQEs of `16 << log_stride16` bytes in domain `xrcdn`,
    /// completing on `cqn`, its WQEs' keys in PD `pdn`, laid out as Linux 6.12 srq_cmd.c
    /// `create_xrc_srq_cmd` sends it (one page list, `page_offset` 0, the doorbell record's
    /// address split in `db_record_addr_h`/`_l`). The ring's WQEs are linked 0 → 1 → … → last
    /// (rdma-core 56 srq.c `mlx5_alloc_srq_buf`, `set_srq_buf_ll`).
    pub(crate) fn create(
        dev: &Device<H>,
        (pdn, xrcdn, cqn): (u32, u32, u32),
        log_size: u8,
        log_stride16: u8,
    ) -> Result<Self, Error> {
        let bytes = (1usize << log_size) << (log_stride16 + 4);
        let len = bytes.div_ceil(SRQ_PAGE) * SRQ_PAGE;
        let pages = len / SRQ_PAGE;
        let ring = dev.hal.dma_alloc(len, SRQ_PAGE)?.share();
        ring.fill(0, len, 0)?;
        let stride = 16usize << log_stride16;
        let n = 1usize << log_size;
        for k in 1..n {
            // wqe_srq_next_seg.next_wqe_index: bytes 2–3 of each WQE.
            ring.try_write16(
                (k - 1) * stride + wqe_srq_next_seg::next_wqe_index.bit / 8,
                k as u16,
            )?;
        }
        let dbr = dev.hal.dma_alloc(64, 64)?.share();
        dbr.fill(0, 64, 0)?;
        let mut i = [0u8; crate::cmdq::MAX_MESSAGE];
        let ilen = CreateXrcSrqIn::BYTES + 8 * pages;
        // One command carries the page list (4 KiB pages).
        if ilen > i.len() {
            return Err(Error::ExceedsLimit {
                limit: Limit::QpBufferBytes,
                requested: len as u64,
                max: ((i.len() - CreateXrcSrqIn::BYTES) / 8 * SRQ_PAGE) as u64,
            });
        }
        {
            let d = dbr.iova().0;
            let mut v = input::<CreateXrcSrq>(&mut i[..ilen])?;
            v.sub(create_xrc_srq_in::xrc_srq_context_entry)
                .set(xrc_srqc::log_xrc_srq_size, log_size)
                .set(xrc_srqc::log_rq_stride, log_stride16)
                .set(xrc_srqc::xrcd, xrcdn)
                .set(xrc_srqc::cqn, cqn)
                .set(xrc_srqc::log_page_size, 0u8)
                .set(xrc_srqc::user_index, CQE_V0_UIDX)
                .set(xrc_srqc::pd, pdn)
                .set(xrc_srqc::db_record_addr_h, d >> 32)
                .set(xrc_srqc::db_record_addr_l, (d & 0xffff_ffff) >> 2);
            for k in 0..pages {
                v.set_array(
                    create_xrc_srq_in::pas,
                    k,
                    ring.iova().0 + (k * SRQ_PAGE) as u64,
                )?;
            }
        }
        let mut o = [0u8; CreateXrcSrqOut::BYTES];
        let [ring, dbr] =
            dev.exec_handing_over::<CreateXrcSrq, 2>(&mut i[..ilen], &mut o, [ring, dbr])?;
        let srqn = View::<CreateXrcSrqOut>::new_checked(&o)?.get32(create_xrc_srq_out::xrc_srqn);
        Ok(SrqMem { srqn, ring, dbr })
    }

    /// DESTROY_XRC_SRQ.
    pub(crate) fn destroy_cmd(&self, dev: &Device<H>) -> Result<(), Error> {
        let mut i = [0u8; DestroyXrcSrqIn::BYTES];
        input::<DestroyXrcSrq>(&mut i)?.set(destroy_xrc_srq_in::xrc_srqn, self.srqn);
        let mut o = [0u8; DestroyXrcSrqOut::BYTES];
        dev.exec::<DestroyXrcSrq>(&mut i, &mut o)
    }

    /// Destroys the SRQ, leaking its memory when the device may still use it.
    pub(crate) fn release(self, dev: &Device<H>) {
        if let Err(e) = self.destroy_cmd(dev) {
            warn!("DESTROY_XRC_SRQ {}: {}; leaking its memory", self.srqn, e);
            self.leak();
        }
    }

    /// Leaks the memory (the device may still write it).
    pub(crate) fn leak(self) {
        self.ring.leak();
        self.dbr.leak();
    }
}

pub(crate) fn alloc_xrcdn<H: Hal>(dev: &Device<H>) -> Result<u32, Error> {
    let mut i = [0u8; AllocXrcdIn::BYTES];
    input::<AllocXrcd>(&mut i)?;
    let mut o = [0u8; AllocXrcdOut::BYTES];
    dev.exec::<AllocXrcd>(&mut i, &mut o)?;
    Ok(View::<AllocXrcdOut>::new_checked(&o)?.get32(alloc_xrcd_out::xrcd))
}

pub(crate) fn dealloc_xrcdn<H: Hal>(dev: &Device<H>, xrcdn: u32) -> Result<(), Error> {
    let mut i = [0u8; DeallocXrcdIn::BYTES];
    input::<DeallocXrcd>(&mut i)?.set(dealloc_xrcd_in::xrcd, xrcdn);
    let mut o = [0u8; DeallocXrcdOut::BYTES];
    dev.exec::<DeallocXrcd>(&mut i, &mut o)
}

/// The default SRQ and domain an XRC initiator's context names. mlx5 creates every XRC QP
/// with `rq_type` SRQ, naming an SRQ and a domain (Linux 6.12 qp.c `get_rx_type`, and for
/// IB_QPT_XRC_INI the device-wide `xrcdn1` and `s0` of `mlx5_ib_dev_res_init`); the
/// initiator never receives through them. This driver keeps no device-wide objects: each
/// initiator gets its own domain and a one-WQE XRC SRQ in it (on the initiator's PD and send
/// CQ), destroyed with the QP.
pub(crate) struct XrcDefaults<H: Hal> {
    pub(crate) xrcdn: u32,
    pub(crate) srq: Option<SrqMem<H>>,
}

impl<H: Hal> XrcDefaults<H> {
    /// ALLOC_XRCD and a one-WQE XRC SRQ in it, completing on `cqn`, keys of PD `pdn`.
    pub(crate) fn create(dev: &Device<H>, pdn: u32, cqn: u32) -> Result<Self, Error> {
        let xrcdn = alloc_xrcdn(dev)?;
        match SrqMem::create(dev, (pdn, xrcdn, cqn), 0, 1) {
            Ok(srq) => Ok(XrcDefaults {
                xrcdn,
                srq: Some(srq),
            }),
            Err(e) => {
                if let Err(e) = dealloc_xrcdn(dev, xrcdn) {
                    warn!("DEALLOC_XRCD {}: {}", xrcdn, e);
                }
                Err(e)
            }
        }
    }

    /// The default SRQ's number.
    pub(crate) fn srqn(&self) -> u32 {
        self.srq.as_ref().map_or(0, |s| s.srqn)
    }

    /// Destroys the SRQ and the domain (after the QP naming them is gone).
    pub(crate) fn release(mut self, dev: &Device<H>) {
        if let Some(s) = self.srq.take() {
            s.release(dev);
        }
        if let Err(e) = dealloc_xrcdn(dev, self.xrcdn) {
            warn!("DEALLOC_XRCD {}: {}", self.xrcdn, e);
        }
    }

    /// Leaks the SRQ's memory (when the QP naming it could not be destroyed).
    pub(crate) fn leak(mut self) {
        if let Some(s) = self.srq.take() {
            s.leak();
        }
    }
}

/// Releases an initiator's defaults unless taken (every early return of QP creation).
pub(crate) struct DefaultsGuard<'a, H: Hal> {
    pub(crate) dev: &'a Device<H>,
    pub(crate) defaults: Option<XrcDefaults<H>>,
}

impl<H: Hal> DefaultsGuard<'_, H> {
    /// Leaks the defaults' memory: the QP naming them could not be destroyed.
    pub(crate) fn leak(&mut self) {
        if let Some(d) = self.defaults.take() {
            d.leak();
        }
    }
}

impl<H: Hal> Drop for DefaultsGuard<'_, H> {
    fn drop(&mut self) {
        if let Some(d) = self.defaults.take() {
            d.release(self.dev);
        }
    }
}

/// An XRC domain (`ibv_open_xrcd`, `struct ibv_xrcd`): XRC SRQs and XRC target QPs belong to
/// it, and a request reaches only the XRC SRQs of its target QP's domain. Deallocated on
/// drop; its SRQs and target QPs borrow it, so it cannot go while they exist.
///
/// Besides the domain, it holds what mlx5 target QPs name without using (Linux 6.12 qp.c
/// `create_xrc_tgt_qp`: the device's PD `p0`, CQ `c0` and default SRQ `s0`): a PD, a
/// one-entry CQ and a one-WQE XRC SRQ of the domain.
///
/// A domain outlives its target QPs (and XRC SRQs): destroying it while one exists does not
/// compile.
///
/// ```compile_fail,E0505
/// use bareverbs::{Config, Device};
/// let hal = bareverbs_model::SimHal::synchronous();
/// let dev = Device::bring_up(&hal, Config::default()).unwrap();
/// let xrcd = dev.alloc_xrcd().unwrap();
/// let tgt = xrcd.create_tgt_qp().unwrap();
/// let _ = xrcd.destroy();
/// drop(tgt);
/// ```
pub struct Xrcd<'d, H: Hal> {
    pub(crate) dev: &'d Device<H>,
    xrcdn: u32,
    /// The target QPs' PD and CQ (`p0`, `c0`).
    pub(crate) pd: Pd<'d, H>,
    pub(crate) cq: Cq<'d, H>,
    /// The target QPs' default SRQ (`s0`); `None` once destroyed.
    s0: Option<SrqMem<H>>,
    /// Target QPs shared by number (seed 001 `ibv_create_xrc_rcv_qp` … `ibv_unreg_xrc_rcv_qp`).
    shared: spin::Mutex<[Option<SharedTgt<H>>; MAX_SHARED_XRC_QPS]>,
}

impl<H: Hal> Device<H> {
    /// Allocates an XRC domain (`ibv_open_xrcd`; ALLOC_XRCD), with the PD, CQ and default SRQ
    /// its target QPs name (see [`Xrcd`]).
    ///
    /// # Errors
    /// A command error (a device without XRC refuses ALLOC_XRCD), a DMA error.
    pub fn alloc_xrcd(&self) -> Result<Xrcd<'_, H>, Error> {
        let pd = self.alloc_pd()?;
        let cq = self.create_cq(1)?;
        let xrcdn = alloc_xrcdn(self)?;
        let s0 = match SrqMem::create(self, (pd.pdn().raw(), xrcdn, cq.cqn().raw()), 0, 1) {
            Ok(s) => s,
            Err(e) => {
                if let Err(e) = dealloc_xrcdn(self, xrcdn) {
                    warn!("DEALLOC_XRCD {}: {}", xrcdn, e);
                }
                return Err(e);
            }
        };
        Ok(Xrcd {
            dev: self,
            xrcdn,
            pd,
            cq,
            s0: Some(s0),
            shared: spin::Mutex::new([const { None }; MAX_SHARED_XRC_QPS]),
        })
    }
}

impl<'d, H: Hal> Xrcd<'d, H> {
    /// The domain number.
    pub fn xrcdn(&self) -> u32 {
        self.xrcdn
    }

    /// The device.
    pub fn device(&self) -> &'d Device<H> {
        self.dev
    }

    /// The default SRQ's number (`s0`), named by the domain's target QPs.
    pub(crate) fn s0(&self) -> u32 {
        self.s0.as_ref().map_or(0, |s| s.srqn)
    }

    fn destroy_inner(&mut self) -> Result<(), Error> {
        // Shared target QPs still registered go first (they name the domain and `s0`).
        let mut shared = self.shared.lock();
        for slot in shared.iter_mut() {
            if let Some(t) = slot.take() {
                let q = xrc_tgt_from_parts(
                    &self.pd,
                    t.qpn,
                    self.cq.cqn().raw(),
                    (t.state, t.attr),
                    t.mark,
                );
                if let Err((e, q)) = q.destroy() {
                    let (state, attr, mark) = q.into_xrc_parts();
                    *slot = Some(SharedTgt {
                        state,
                        attr,
                        mark,
                        ..t
                    });
                    return Err(e);
                }
            }
        }
        drop(shared);
        if let Some(s) = &self.s0 {
            s.destroy_cmd(self.dev)?;
        }
        self.s0.take();
        dealloc_xrcdn(self.dev, self.xrcdn)
    }

    /// Deallocates the domain (`ibv_close_xrcd`): its default SRQ, then DEALLOC_XRCD. Refused
    /// while a shared target QP is registered (the legacy `ibv_close_xrc_domain` fails with
    /// EBUSY then); dropping the domain destroys them instead.
    ///
    /// # Errors
    /// [`Error::Busy`] while shared target QPs are registered; a command error (firmware
    /// refuses DEALLOC_XRCD while an SRQ or QP names the domain). The domain is handed back.
    #[allow(clippy::result_large_err)]
    pub fn destroy(mut self) -> Result<(), (Error, Self)> {
        if self.shared.lock().iter().any(Option::is_some) {
            return Err((Error::Busy, self));
        }
        match self.destroy_inner() {
            Ok(()) => {
                self.xrcdn = u32::MAX;
                Ok(())
            }
            Err(e) => Err((e, self)),
        }
    }

    /// Creates an XRC target QP of this domain (`ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`
    /// and `xrcd`; Linux 6.12 qp.c `create_xrc_tgt_qp`): no send or receive queue, no CQ of
    /// its own; requests arriving on it are delivered into the XRC SRQ each names, and
    /// complete on that SRQ's CQ with this QP's number.
    ///
    /// # Errors
    /// A command error; [`Error::ExceedsLimit`] when the device's QP table is full.
    pub fn create_tgt_qp(&self) -> Result<Qp<'_, 'd, H>, Error> {
        crate::verbs::qp::create_xrc_tgt(&self.pd, self.xrcdn, self.s0(), &self.cq)
    }
}

impl<'d, H: Hal> Xrcd<'d, H> {
    /// Runs `f` on shared target QP `qpn`'s slot, the table locked.
    fn with_shared<R>(
        &self,
        qpn: Qpn,
        f: impl FnOnce(&mut Option<SharedTgt<H>>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let mut shared = self.shared.lock();
        let slot = shared
            .iter_mut()
            .find(|s| s.as_ref().is_some_and(|t| t.qpn == qpn))
            .ok_or(Error::InvalidArgument {
                what: Invalid::UnknownXrcQp,
            })?;
        f(slot)
    }

    /// Runs `f` on shared target QP `qpn` seen as a [`Qp`], keeping what it leaves.
    fn with_shared_qp<R>(
        &self,
        qpn: Qpn,
        f: impl FnOnce(&mut Qp<'_, 'd, H>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let cqn = self.cq.cqn().raw();
        self.with_shared(qpn, |slot| {
            let Some(t) = slot.as_mut() else {
                return Err(Error::InvalidArgument {
                    what: Invalid::UnknownXrcQp,
                });
            };
            // A view without the mark: dropping it destroys nothing.
            let mut q = xrc_tgt_from_parts(&self.pd, qpn, cqn, (t.state, t.attr), None);
            let r = f(&mut q);
            let (state, attr, _) = q.into_xrc_parts();
            (t.state, t.attr) = (state, attr);
            r
        })
    }

    /// Creates an XRC target QP of this domain shared by number, registered once for the
    /// caller (`ibv_create_xrc_rcv_qp`; modern libibverbs `ibv_create_qp_ex` with
    /// `IBV_QPT_XRC_RECV`). Others register it again with [`Xrcd::reg_xrc_rcv_qp`]; it is
    /// destroyed when the last registration goes ([`Xrcd::unreg_xrc_rcv_qp`]) or with the
    /// domain.
    ///
    /// # Errors
    /// [`Error::ExceedsLimit`] ([`Limit::SharedXrcQps`]) when the domain already shares
    /// [`MAX_SHARED_XRC_QPS`]; as [`Xrcd::create_tgt_qp`].
    pub fn create_xrc_rcv_qp(&self) -> Result<Qpn, Error> {
        let mut shared = self.shared.lock();
        let Some(slot) = shared.iter_mut().find(|s| s.is_none()) else {
            return Err(Error::ExceedsLimit {
                limit: Limit::SharedXrcQps,
                requested: MAX_SHARED_XRC_QPS as u64 + 1,
                max: MAX_SHARED_XRC_QPS as u64,
            });
        };
        let q = self.create_tgt_qp()?;
        let qpn = q.qpn();
        let (state, attr, mark) = q.into_xrc_parts();
        *slot = Some(SharedTgt {
            qpn,
            users: 1,
            state,
            attr,
            mark,
        });
        Ok(qpn)
    }

    /// Registers one more user of shared target QP `qpn` (`ibv_reg_xrc_rcv_qp`; modern
    /// libibverbs `ibv_open_qp`).
    ///
    /// # Errors
    /// [`Invalid::UnknownXrcQp`] for a number the domain does not share.
    pub fn reg_xrc_rcv_qp(&self, qpn: Qpn) -> Result<(), Error> {
        self.with_shared(qpn, |slot| {
            if let Some(t) = slot.as_mut() {
                t.users = t.users.saturating_add(1);
            }
            Ok(())
        })
    }

    /// Drops one user of shared target QP `qpn` (`ibv_unreg_xrc_rcv_qp`); the last one
    /// destroys the QP (DESTROY_QP).
    ///
    /// # Errors
    /// [`Invalid::UnknownXrcQp`] for a number the domain does not share; a command error when
    /// the QP cannot be destroyed (it stays registered once).
    pub fn unreg_xrc_rcv_qp(&self, qpn: Qpn) -> Result<(), Error> {
        let cqn = self.cq.cqn().raw();
        self.with_shared(qpn, |slot| {
            let Some(t) = slot.as_mut() else {
                return Ok(());
            };
            if t.users > 1 {
                t.users -= 1;
                return Ok(());
            }
            let Some(t) = slot.take() else {
                return Ok(());
            };
            let q = xrc_tgt_from_parts(&self.pd, qpn, cqn, (t.state, t.attr), t.mark);
            q.destroy().map_err(|(e, q)| {
                let (state, attr, mark) = q.into_xrc_parts();
                *slot = Some(SharedTgt {
                    qpn,
                    users: 1,
                    state,
                    attr,
                    mark,
                });
                e
            })
        })
    }

    /// Users registered on shared target QP `qpn`.
    ///
    /// # Errors
    /// [`Invalid::UnknownXrcQp`] for a number the domain does not share.
    pub fn xrc_rcv_qp_users(&self, qpn: Qpn) -> Result<u32, Error> {
        self.with_shared(qpn, |slot| Ok(slot.as_ref().map_or(0, |t| t.users)))
    }

    /// Modifies shared target QP `qpn` (`ibv_modify_xrc_rcv_qp`), with the rules of
    /// [`Qp::modify`] for [`QpType::XrcTgt`].
    ///
    /// # Errors
    /// [`Invalid::UnknownXrcQp`] for a number the domain does not share; as [`Qp::modify`].
    pub fn modify_xrc_rcv_qp(
        &self,
        qpn: Qpn,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), Error> {
        self.with_shared_qp(qpn, |q| q.modify(attr, mask))
    }

    /// Reads shared target QP `qpn`'s attributes and those it was created with
    /// (`ibv_query_xrc_rcv_qp`). Every attribute the device reports is returned (the seed's
    /// `attr_mask` is a minimum: "some RDMA devices may return extra attributes").
    ///
    /// # Errors
    /// [`Invalid::UnknownXrcQp`] for a number the domain does not share; a command error.
    pub fn query_xrc_rcv_qp(&self, qpn: Qpn) -> Result<(QpAttr, XrcRcvQpInitAttr), Error> {
        let attr = self.with_shared_qp(qpn, |q| q.query())?;
        Ok((
            attr,
            XrcRcvQpInitAttr {
                qp_type: QpType::XrcTgt,
                cap: QpCap::default(),
                sq_sig_all: false,
                xrcdn: self.xrcdn,
            },
        ))
    }
}

impl<H: Hal> Drop for Xrcd<'_, H> {
    fn drop(&mut self) {
        if self.xrcdn == u32::MAX {
            return;
        }
        if let Err(e) = self.destroy_inner() {
            warn!("DEALLOC_XRCD {}: {}", self.xrcdn, e);
            if let Some(s) = self.s0.take() {
                s.leak();
            }
        }
    }
}

/// The `wr_id` of a receive taken from an SRQ: a responder CQE whose `srqn` field names an SRQ
/// of the device (CQE version 0 for XRC SRQs created with user index 0xffffff: Linux 6.12
/// mlx5_ib cq.c `handle_responder` reads `cqe->srqn` for XRC) gets the `wr_id` of the SRQ's
/// WQE at `wqe_counter`, and the WQE is freed.
#[inline(always)]
pub(crate) fn srq_wr_id<'d, H: Hal>(
    dev: &'d Device<H>,
    last: &mut LastSlot<'d, SrqBook<H>>,
    cqe: Slot<'_, 64>,
    op_own: u8,
    wc: &mut Wc,
) {
    if matches!(
        CqeOpcode::from(get_cqe_opcode(op_own)),
        CqeOpcode::Req | CqeOpcode::ReqErr
    ) {
        return;
    }
    srq_wr_id_cold(dev, last, cqe, wc);
}

/// [`srq_wr_id`] of a receive completion: through the slot of the SRQ the CQ met last when it
/// is this one (`slot_table.rs`).
fn srq_wr_id_cold<'d, H: Hal>(
    dev: &'d Device<H>,
    last: &mut LastSlot<'d, SrqBook<H>>,
    cqe: Slot<'_, 64>,
    wc: &mut Wc,
) {
    let srqn = cqe_srqn(cqe.read32(cqe64::srqn.bit / 8));
    if srqn == 0 {
        return;
    }
    let g = lock_current(&dev.srq_books, last, srqn);
    if let Some(b) = g.as_ref().and_then(|g| g.as_ref()) {
        wc.wr_id = b.complete(cqe.read16(cqe64::wqe_counter.bit / 8));
    }
}

fn srq_table_full() -> Error {
    let max = crate::verbs::srq_ring::INLINE_SRQS as u64;
    Error::ExceedsLimit {
        limit: Limit::SrqCount,
        requested: max + 1,
        max,
    }
}

/// An XRC SRQ (`ibv_create_srq_ex` with `IBV_SRQT_XRC`): receives of its domain's target QPs
/// for requests naming its number land here and complete on its CQ. Destroyed on drop.
pub struct XrcSrq<'x, 'd, H: Hal> {
    xrcd: &'x Xrcd<'d, H>,
    srqn: u32,
    /// Its book's slot in the device's table.
    book: &'d SrqSlot<H>,
    /// Its CQ, counted as in use (a CQ in use cannot be destroyed).
    cqn: u32,
    attr: SrqAttr,
    live: bool,
}

impl<'d, H: Hal> Xrcd<'d, H> {
    /// Creates an XRC SRQ of this domain (`ibv_create_srq_ex`, `IBV_SRQT_XRC` with `xrcd`,
    /// `cq` and `pd`; CREATE_XRC_SRQ as Linux 6.12 srq_cmd.c `create_xrc_srq_cmd` sends it at
    /// ISSI 1): holding at least `attr.max_wr` receives of up to `attr.max_sge` entries, keys
    /// of `pd`, completions on `cq`. The sizes it got are in [`XrcSrq::attr`]; `srq_limit` is
    /// ignored (ibv_create_srq(3): "irrelevant for ibv_create_srq"; arm it with
    /// [`XrcSrq::modify`]).
    ///
    /// # Errors
    /// [`Error::ExceedsLimit`] past the device's SRQ sizes or when the driver's SRQ table is
    /// full; [`Error::InvalidArgument`] for 0 entries, a PD or CQ of another device; a DMA or
    /// command error.
    pub fn create_xrc_srq<'x>(
        &'x self,
        pd: &'x Pd<'d, H>,
        cq: &Cq<'d, H>,
        attr: SrqAttr,
    ) -> Result<XrcSrq<'x, 'd, H>, Error> {
        let dev = self.dev;
        if !core::ptr::eq(pd.dev, dev) || !core::ptr::eq(cq.device(), dev) {
            return Err(Error::InvalidArgument {
                what: Invalid::ForeignObject,
            });
        }
        let (log_size, log_stride) = crate::verbs::srq_ring::srq_geometry(&dev.info().caps, &attr)?;
        if !dev.srq_books.has_room(1) {
            return Err(srq_table_full());
        }
        let cqn = cq.cqn().raw();
        cq_use(dev, cqn)?;
        let r = self.create_xrc_srq_on(pd, cqn, (log_size, log_stride));
        if r.is_err() {
            cq_unuse(dev, cqn);
        }
        r.map(|(srqn, attr, book)| XrcSrq {
            xrcd: self,
            srqn,
            book,
            cqn,
            attr,
            live: true,
        })
    }

    fn create_xrc_srq_on(
        &self,
        pd: &Pd<'d, H>,
        cqn: u32,
        (log_size, log_stride): (u8, u8),
    ) -> Result<(u32, SrqAttr, &'d SrqSlot<H>), Error> {
        let dev = self.dev;
        let ids = dev.hal.dma_alloc(8 << log_size, 64)?.share();
        let mem = SrqMem::create(
            dev,
            (pd.pdn().raw(), self.xrcdn, cqn),
            log_size,
            log_stride - 4,
        )?;
        let srqn = mem.srqn;
        let book = SrqBook::new(srqn, [mem.ring, mem.dbr, ids], log_size, log_stride);
        let slot = match dev.srq_books.insert(book) {
            Ok(slot) => slot,
            Err(book) => {
                // Another thread filled the table after the check above: the SRQ goes again.
                let (ring, dbr) = book.ring_parts();
                SrqMem { srqn, ring, dbr }.release(dev);
                return Err(srq_table_full());
            }
        };
        Ok((
            srqn,
            SrqAttr {
                max_wr: (1u32 << log_size) - 1,
                max_sge: ((1u32 << log_stride) - 16) / 16,
                srq_limit: 0,
            },
            slot,
        ))
    }
}

/// Counts one more use of CQ `cqn` (see `Cq::destroy`).
fn cq_use<H: Hal>(dev: &Device<H>, cqn: u32) -> Result<(), Error> {
    let mut ctl = dev.ctl.lock();
    let n = ctl.cq_users.get(&cqn).copied().unwrap_or(0);
    ctl.cq_users
        .insert(cqn, n + 1)
        .map_err(|_| srq_table_full())
}

/// Counts one use of CQ `cqn` less (destroying it if it was dropped while in use).
fn cq_unuse<H: Hal>(dev: &Device<H>, cqn: u32) {
    let mut ctl = dev.ctl.lock();
    match ctl.cq_users.get_mut(&cqn) {
        Some(n) if *n > 1 => *n -= 1,
        Some(_) => {
            ctl.cq_users.remove(&cqn);
        }
        None => {}
    }
    drop(ctl);
    dev.reap_orphan_cqs(&[cqn]);
}

impl<H: Hal> XrcSrq<'_, '_, H> {
    /// The SRQ number senders name (`ibv_get_srq_num`; `xrc_remote_srq_num`).
    pub fn srq_num(&self) -> u32 {
        self.srqn
    }

    /// The sizes it got (at least those asked for) and the limit last set or read.
    pub fn attr(&self) -> SrqAttr {
        self.attr
    }

    /// Posts receives (`ibv_post_srq_recv`).
    ///
    /// # Errors
    /// [`PostError`] with the index of the first request refused (SGE count,
    /// [`Error::QueueFull`]); those before it are posted.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        crate::verbs::srq_ring::post_srq_recv(self.xrcd.dev, self.book, wrs)
    }

    /// Modifies the SRQ (`ibv_modify_srq`): [`SrqAttrMask::LIMIT`] arms the limit event with
    /// `attr.srq_limit` (ARM_XRC_SRQ); it fires once when fewer receives remain.
    ///
    /// # Errors
    /// [`Invalid::UnsupportedTransition`] for [`SrqAttrMask::MAX_WR`] (mlx5 cannot resize an
    /// SRQ: Linux mlx5_ib `mlx5_ib_modify_srq` returns EINVAL); [`Error::ExceedsLimit`] for a
    /// limit past `max_wr`; a command error.
    pub fn modify(&mut self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<(), Error> {
        if let Some(lwm) = crate::verbs::srq_ring::limit_to_arm(attr, mask, self.attr.max_wr)? {
            let mut i = [0u8; ArmXrcSrqIn::BYTES];
            input::<ArmXrcSrq>(&mut i)?
                .set(arm_xrc_srq_in::op_mod, arm_xrc_srq_op_mod::XRC_SRQ)
                .set(arm_xrc_srq_in::xrc_srqn, self.srqn)
                .set(arm_xrc_srq_in::lwm, lwm);
            let mut o = [0u8; ArmXrcSrqOut::BYTES];
            self.xrcd.dev.exec::<ArmXrcSrq>(&mut i, &mut o)?;
            self.attr.srq_limit = lwm;
        }
        Ok(())
    }

    /// Reads the SRQ's attributes from the device (`ibv_query_srq`, QUERY_XRC_SRQ): `max_wr`
    /// and `max_sge` from its context, `srq_limit` the armed limit (0 once the event fired).
    ///
    /// # Errors
    /// A command error.
    pub fn query(&mut self) -> Result<SrqAttr, Error> {
        let mut i = [0u8; QueryXrcSrqIn::BYTES];
        input::<QueryXrcSrq>(&mut i)?.set(query_xrc_srq_in::xrc_srqn, self.srqn);
        let mut o = [0u8; QueryXrcSrqOut::BYTES + 8];
        self.xrcd.dev.exec::<QueryXrcSrq>(&mut i, &mut o)?;
        let v = View::<QueryXrcSrqOut>::new_checked(&o)?;
        let c = v.sub(query_xrc_srq_out::xrc_srq_context_entry);
        let stride = 16u32 << c.get(xrc_srqc::log_rq_stride);
        let a = SrqAttr {
            max_wr: (1u32 << c.get(xrc_srqc::log_xrc_srq_size)) - 1,
            max_sge: (stride - 16) / 16,
            srq_limit: c.get32(xrc_srqc::lwm),
        };
        self.attr = a;
        Ok(a)
    }

    fn destroy_inner(&mut self) -> Result<(), Error> {
        let dev = self.xrcd.dev;
        let mut i = [0u8; DestroyXrcSrqIn::BYTES];
        input::<DestroyXrcSrq>(&mut i)?.set(destroy_xrc_srq_in::xrc_srqn, self.srqn);
        let mut o = [0u8; DestroyXrcSrqOut::BYTES];
        let r = dev.exec::<DestroyXrcSrq>(&mut i, &mut o);
        let book = dev.srq_books.remove(self.srqn);
        if r.is_err() {
            // The device may still write the ring: never freed.
            if let Some(b) = book {
                b.leak();
            }
        } else {
            cq_unuse(dev, self.cqn);
        }
        self.live = false;
        r
    }

    /// Destroys the SRQ (`ibv_destroy_srq`).
    ///
    /// # Errors
    /// A command error; the SRQ's memory is then leaked, never freed, and the SRQ unusable.
    pub fn destroy(mut self) -> Result<(), Error> {
        self.destroy_inner()
    }
}

impl<H: Hal> Drop for XrcSrq<'_, '_, H> {
    fn drop(&mut self) {
        if self.live {
            if let Err(e) = self.destroy_inner() {
                warn!("DESTROY_XRC_SRQ {}: {}; leaking its memory", self.srqn, e);
            }
        }
    }
}

impl<H: Hal> Qp<'_, '_, H> {
    /// Posts send requests on an XRC initiator, each delivered through the XRC SRQ
    /// `xrc_remote_srq_num` at the target (`ibv_post_send` with `wr.xrc_remote_srq_num`, or
    /// `qp_type.xrc.remote_srqn`): a [`send_batch_xrc`](Qp::send_batch_xrc) with
    /// [`SendBatch::set_xrc_srqn`](crate::verbs::SendBatch::set_xrc_srqn).
    ///
    /// # Errors
    /// As [`Qp::post_send`]; [`Invalid::XrcRemoteSrq`] (index 0) on a QP that is not an XRC
    /// initiator.
    pub fn post_send_xrc(
        &mut self,
        xrc_remote_srq_num: u32,
        wrs: &[crate::verbs::SendWr<'_>],
    ) -> Result<(), PostError> {
        let r = self.send_batch_xrc(|b| {
            b.set_xrc_srqn(xrc_remote_srq_num)
                .map_err(|error| PostError { index: 0, error })?;
            for (index, wr) in wrs.iter().enumerate() {
                b.post(wr).map_err(|error| PostError { index, error })?;
            }
            Ok(())
        });
        match r {
            Ok(r) => r,
            Err(error) => Err(PostError { index: 0, error }),
        }
    }
}
