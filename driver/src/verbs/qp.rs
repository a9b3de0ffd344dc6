//! Queue pairs, control path (`ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`,
//! `ibv_destroy_qp`): sizing from the device limits, the work buffer (RQ then SQ) and doorbell
//! record, and transitions checked against the kernel's table before any command
//! (mlx5-reference 05 §1–2; seed 003).

use bareverbs_firmware_cmd::commands::*;
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, Opcode, Qpn, View, ViewMut};
use bareverbs_hal::{Hal, SharedDma};

use crate::cmdq::MAX_MESSAGE;
use crate::device::input;
use crate::device::Device;
use crate::error::{Error, Invalid, Limit};
use crate::verbs::cq::Cq;
use crate::verbs::mr::AccessFlags;
use crate::verbs::pd::Pd;
use crate::verbs::qp_state::{check_modify, next_state, QpAttrMask, QpState, QpType};
use crate::wq::book::{Book, BookSlot, INLINE_QPS};
use crate::wq::recv_queue::RecvQueue;
use crate::wq::ring_pages::{alloc_ring, RingPages};
use crate::wq::send_queue::{BatchState, SendQueue};

/// Bytes of a send WQE basic block.
const WQEBB: u32 = 64;
/// Bytes of the control segment, and of raddr/atomic/datagram headroom per WQE.
const CTRL: u32 = 16;
const UD_AV: u32 = 48;
const RADDR_ATOMIC: u32 = 32;
/// Bytes of the XRC segment (`mlx5_wqe_xrc_seg`).
const XRC_SEG: u32 = 16;
/// A UMR's control segment and mkey context after the control segment.
const UMR_OVERHEAD: u32 = 48 + 64;

/// Queue sizes (`struct ibv_qp_cap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QpCap {
    /// Outstanding send work requests.
    pub max_send_wr: u32,
    /// Outstanding receive work requests.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive request.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send request.
    pub max_inline_data: u32,
}

/// What to create (`struct ibv_qp_init_attr`). Non-exhaustive (`ibv_qp_init_attr_ex` has more
/// to come): start from [`QpInitAttr::new`] and set fields.
#[non_exhaustive]
pub struct QpInitAttr<'c, 'd, H: Hal> {
    /// Transport.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: &'c Cq<'d, H>,
    /// CQ for receive completions.
    pub recv_cq: &'c Cq<'d, H>,
    /// Requested sizes.
    pub cap: QpCap,
    /// Every send request completes with a CQE, signaled or not.
    pub sq_sig_all: bool,
    /// The SRQ the QP takes its receives from (`srq`): it then has no receive queue of its
    /// own (`max_recv_wr`/`max_recv_sge` are ignored, `post_recv` refused). RC, UC and UD.
    pub srq: Option<&'c crate::verbs::srq::Srq<'c, 'd, H>>,
    /// A value of the user's (`qp_context`), read back with [`Qp::context`].
    pub qp_context: u64,
}

/// Path MTU (`enum ibv_mtu`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u8)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    #[default]
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// Bytes.
    pub fn bytes(self) -> u32 {
        128 << self as u32
    }
}

/// Global route (`struct ibv_global_route`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Flow label.
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// Address vector (`struct ibv_ah_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AhAttr {
    /// Global route, when `is_global`.
    pub grh: GlobalRoute,
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate (0 = port rate).
    pub static_rate: u8,
    /// A GRH is sent.
    pub is_global: bool,
    /// Port.
    pub port_num: u8,
}

/// QP attributes (`struct ibv_qp_attr`), used with a [`QpAttrMask`]. Non-exhaustive (SQD's
/// `en_sqd_async_notify`/`sq_draining` and `rate_limit` are still to come): start from
/// [`QpAttr::default`] and set the fields the mask names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct QpAttr {
    /// Target state (with [`QpAttrMask::STATE`]).
    pub qp_state: QpState,
    /// Assumed current state (with [`QpAttrMask::CUR_STATE`]).
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Q_Key (UD).
    pub qkey: u32,
    /// First receive PSN.
    pub rq_psn: u32,
    /// First send PSN.
    pub sq_psn: u32,
    /// Remote QP number (connected QPs).
    pub dest_qp_num: u32,
    /// Remote access allowed to this QP.
    pub qp_access_flags: AccessFlags,
    /// Queue sizes (reported by query).
    pub cap: QpCap,
    /// Primary path.
    pub ah_attr: AhAttr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Outstanding RDMA reads/atomics as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA reads/atomics as responder.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer (IB encoding).
    pub min_rnr_timer: u8,
    /// Port.
    pub port_num: u8,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// Alternate path (with [`QpAttrMask::ALT_PATH`]; only on a device with automatic path
    /// migration, [`Caps::apm`](crate::caps::Caps::apm)).
    pub alt_ah_attr: AhAttr,
    /// Alternate path's P_Key index.
    pub alt_pkey_index: u16,
    /// Alternate path's port.
    pub alt_port_num: u8,
    /// Alternate path's local ACK timeout exponent.
    pub alt_timeout: u8,
    /// Path migration state (with [`QpAttrMask::PATH_MIG_STATE`]).
    pub path_mig_state: MigState,
}

/// Path migration state (`enum ibv_mig_state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MigState {
    /// The QP uses its (only) path; what QPs are created with.
    #[default]
    Migrated,
    /// An alternate path is loaded and being armed.
    Rearm,
    /// Ready to migrate to the alternate path.
    Armed,
}

impl MigState {
    fn pm_state(self) -> u8 {
        match self {
            MigState::Migrated => qpc_pm_state::MIGRATED,
            MigState::Rearm => qpc_pm_state::REARM,
            MigState::Armed => qpc_pm_state::ARMED,
        }
    }
}

/// What `ibv_query_qp` returns in `ibv_qp_init_attr`: how the QP was created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QpInitInfo {
    /// Transport.
    pub qp_type: QpType,
    /// Queue sizes it got.
    pub cap: QpCap,
    /// Every send request completes with a CQE.
    pub sq_sig_all: bool,
    /// Its send CQ's number.
    pub send_cqn: u32,
    /// Its receive CQ's number.
    pub recv_cqn: u32,
    /// The SRQ it receives from, if any.
    pub srqn: Option<u32>,
    /// The context it was created with.
    pub qp_context: u64,
}

/// A queue pair. Destroyed on drop; outstanding work requests are not processed and produce
/// no completions.
pub struct Qp<'p, 'd, H: Hal> {
    pub(crate) pd: &'p Pd<'d, H>,
    qpn: Qpn,
    qp_type: QpType,
    state: QpState,
    cqns: (u32, u32),
    pub(crate) buf: Option<SharedDma<H::Dma>>,
    pub(crate) dbr: Option<SharedDma<H::Dma>>,
    pub(crate) cap: QpCap,
    /// Its send queue (ring position, doorbell, BlueFlame, batch state) and its own receive
    /// queue.
    pub(crate) sq: SendQueue,
    pub(crate) rq: RecvQueue,
    attr: QpAttr,
    /// An XRC initiator's default SRQ and domain (see `verbs::xrc`), destroyed with it.
    pub(crate) xrc: Option<crate::verbs::xrc::XrcDefaults<H>>,
    /// The SRQ it takes receives from.
    pub(crate) srqn: Option<u32>,
    /// `sq_sig_all` and `qp_context` as created.
    sq_sig_all: bool,
    context: u64,
    /// Multicast groups it is attached to (`verbs/mcast.rs`).
    pub(crate) mcgs: heapless::Vec<[u8; 16], { crate::verbs::mcast::MAX_QP_MCGS }>,
    /// What the mlx5 direct-verbs attributes added (`verbs/dv.rs`).
    pub(crate) dv: QpExtras,
    /// Its book's slot in the device's table (`None` for a view of an XRC target QP held
    /// elsewhere, which posts nothing).
    pub(crate) book: Option<&'d BookSlot<H>>,
}

/// What [`Pd::create_qp_dv`](crate::verbs::Pd::create_qp_dv) adds to a QP's context: all
/// zero for [`Pd::create_qp`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct QpExtras {
    /// DCI streams: log2 of the concurrent and of the errored streams (`None`: one stream).
    pub(crate) dci_streams: Option<(u8, u8)>,
    /// `qpc.cs_req` and `qpc.cs_res`: requester and responder scatter to CQE.
    pub(crate) cs_req: u8,
    pub(crate) cs_res: u8,
    /// `qpc.req_e2e_credit_mode`: packet-based credits.
    pub(crate) packet_credits: bool,
    /// The mlx5 send operations the QP may post (`DvSendOpsFlags` bits).
    pub(crate) send_ops: u8,
}

// Not derived: that would ask `H: Clone`; every field is a reference or a value.
impl<H: Hal> Clone for QpInitAttr<'_, '_, H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<H: Hal> Copy for QpInitAttr<'_, '_, H> {}

impl<'c, 'd, H: Hal> QpInitAttr<'c, 'd, H> {
    /// The attributes of a QP of `qp_type` completing into `send_cq` and `recv_cq`, sized by
    /// `cap`, signalling only the requests that ask for it; the other fields take their
    /// defaults and are set by assignment (`let mut a = QpInitAttr::new(..);
    /// a.sq_sig_all = true;`).
    pub fn new(
        qp_type: QpType,
        send_cq: &'c Cq<'d, H>,
        recv_cq: &'c Cq<'d, H>,
        cap: QpCap,
    ) -> Self {
        QpInitAttr {
            qp_type,
            send_cq,
            recv_cq,
            cap,
            sq_sig_all: false,
            srq: None,
            qp_context: 0,
        }
    }
}

/// log2 of the power of two at least `n` (32 past the largest u32 power of two).
fn log2_ceil(n: u32) -> u8 {
    n.max(1)
        .checked_next_power_of_two()
        .map_or(32, |p| p.trailing_zeros() as u8)
}

fn st(t: QpType) -> Result<u8, Error> {
    match t {
        QpType::Rc => Ok(qpc_st::RC),
        QpType::Uc => Ok(qpc_st::UC),
        QpType::Ud => Ok(qpc_st::UD),
        QpType::XrcIni | QpType::XrcTgt => Ok(qpc_st::XRC),
        QpType::Driver => Ok(qpc_st::DCI),
        _ => Err(Error::InvalidArgument {
            what: Invalid::UnsupportedQpType,
        }),
    }
}

fn limit(limit: Limit, requested: u32, max: u32) -> Result<(), Error> {
    if requested > max {
        return Err(Error::ExceedsLimit {
            limit,
            requested: requested.into(),
            max: max.into(),
        });
    }
    Ok(())
}

/// log2 of the most WQEBBs (or receive WQEs) one queue holds: the driver's counters are 16
/// bits wide, as mlx5's WQE counter.
const MAX_LOG_WQ: u8 = 15;

/// A QP's queue sizes, from what was asked and the device's limits.
#[derive(Debug, PartialEq, Eq)]
struct Geometry {
    /// Bytes of a send WQE's data part (SGEs or inline data with its header).
    data: u32,
    bbs_per_wr: u32,
    log_sq_bbs: u8,
    rq_shift: u8,
    log_rq: u8,
}

/// The queue sizes of a QP of `qp_type` asking for `c` (receive sizes already 0 when it has
/// no receive queue), checked against `caps`. The device's numbers are checked as little as
/// the caller's: nothing here can overflow, whatever either holds.
///
/// With `umr`, a send WQE also has room for a UMR's control segment and mkey context (rdma-core
/// 56 `_sq_overhead` with `MLX5DV_QP_EX_WITH_MR_*`); its entries count against
/// `max_inline_data`, as rdma-core counts them.
fn geometry(
    caps: &crate::caps::Caps,
    qp_type: QpType,
    c: &QpCap,
    umr: bool,
) -> Result<Geometry, Error> {
    limit(
        Limit::QpWr,
        c.max_send_wr.max(c.max_recv_wr),
        caps.max_qp_wr,
    )?;
    limit(
        Limit::Sge,
        c.max_send_sge.max(c.max_recv_sge),
        // (Saturating: the device's numbers are checked as little as the caller's.)
        (caps.max_sq_desc_size / 16).saturating_sub(4),
    )?;
    // Send WQE: control, then address segments, then data segments or inline data.
    let headroom = match qp_type {
        QpType::Ud => UD_AV,
        // The XRC segment before RC's (Linux 6.12 qp.c `sq_overhead`, IB_QPT_XRC_INI).
        QpType::XrcIni => RADDR_ATOMIC + XRC_SEG,
        // A DCI's requests carry the address vector and RC's segments (rdma-core 56
        // `_sq_overhead`, IBV_QPT_DRIVER).
        QpType::Driver => UD_AV + RADDR_ATOMIC,
        _ => RADDR_ATOMIC,
    };
    let headroom = if umr {
        headroom.max(UMR_OVERHEAD)
    } else {
        headroom
    };
    // Bounded first: `4 + max_inline_data` overflowed for a value near u32::MAX (and in
    // release builds wrapped to a tiny inline limit the QP then claimed to have).
    limit(Limit::InlineData, c.max_inline_data, caps.max_sq_desc_size)?;
    let data = c.max_send_sge.saturating_mul(16).max(
        c.max_inline_data
            .saturating_add(4)
            .div_ceil(16)
            .saturating_mul(16),
    );
    let wqe = data.saturating_add(CTRL + headroom);
    limit(Limit::InlineData, wqe, caps.max_sq_desc_size)?;
    let bbs_per_wr = wqe.div_ceil(WQEBB);
    let log_sq_bbs = log2_ceil(c.max_send_wr.max(1).saturating_mul(bbs_per_wr));
    let rq_wqe = 1u32 << log2_ceil(c.max_recv_sge.max(1).saturating_mul(16)).min(31);
    limit(Limit::Sge, rq_wqe, caps.max_rq_desc_size)?;
    let rq_shift = rq_wqe.trailing_zeros() as u8;
    let log_rq = log2_ceil(c.max_recv_wr.max(1));
    // The driver counts WQEs in 16 bits (as mlx5's WQE counter): at most 2^15 a queue,
    // whatever the device claims.
    limit(
        Limit::QpWr,
        1u32.checked_shl(u32::from(log_sq_bbs.max(log_rq)))
            .unwrap_or(u32::MAX),
        caps.max_qp_wr.min(1 << MAX_LOG_WQ),
    )?;
    Ok(Geometry {
        data,
        bbs_per_wr,
        log_sq_bbs,
        rq_shift,
        log_rq,
    })
}

impl<'d, H: Hal> Pd<'d, H> {
    /// Creates a QP (`ibv_create_qp`); the sizes it got are in [`Qp::cap`], at least those
    /// asked for.
    ///
    /// # Errors
    /// [`Error::ExceedsLimit`] for sizes past the device's, [`Error::InvalidArgument`] for an
    /// unsupported type or CQs of another device, a DMA or command error.
    pub fn create_qp(&self, attr: &QpInitAttr<'_, 'd, H>) -> Result<Qp<'_, 'd, H>, Error> {
        // A driver QP's kind comes from the direct-verbs attributes: `create_qp_dv`.
        if attr.qp_type == QpType::Driver {
            return Err(Error::InvalidArgument {
                what: Invalid::UnsupportedQpType,
            });
        }
        self.create_qp_with(attr, QpExtras::default())
    }

    /// [`create_qp`](Self::create_qp) with the context additions `dv`; a [`QpType::Driver`]
    /// QP is a DC initiator.
    pub(crate) fn create_qp_with(
        &self,
        attr: &QpInitAttr<'_, 'd, H>,
        dv: QpExtras,
    ) -> Result<Qp<'_, 'd, H>, Error> {
        let dev = self.dev;
        if !core::ptr::eq(attr.send_cq.device(), dev) || !core::ptr::eq(attr.recv_cq.device(), dev)
        {
            return Err(Error::InvalidArgument {
                what: Invalid::ForeignObject,
            });
        }
        let caps = dev.info().caps;
        let st = st(attr.qp_type)?;
        // An XRC target belongs to its domain: `Xrcd::create_tgt_qp`. An XRC initiator and a
        // DCI receive nothing: both get the placeholder SRQ (Linux 6.12 qp.c `get_rx_type`
        // gives both MLX5_SRQ_RQ).
        let ini = matches!(attr.qp_type, QpType::XrcIni | QpType::Driver);
        if attr.qp_type == QpType::XrcTgt {
            return Err(Error::InvalidArgument {
                what: Invalid::UnsupportedQpType,
            });
        }
        if let Some(srq) = attr.srq {
            if !core::ptr::eq(srq.device(), dev) {
                return Err(Error::InvalidArgument {
                    what: Invalid::ForeignObject,
                });
            }
            if ini {
                return Err(Error::InvalidArgument {
                    what: Invalid::UnsupportedQpType,
                });
            }
        }
        // An XRC initiator has no receive queue (Linux 6.12 qp.c: no RQ for IB_QPT_XRC_INI),
        // nor has a QP on an SRQ.
        let no_rq = ini || attr.srq.is_some();
        let c = if no_rq {
            QpCap {
                max_recv_wr: 0,
                max_recv_sge: 0,
                ..attr.cap
            }
        } else {
            attr.cap
        };
        let Geometry {
            data,
            bbs_per_wr,
            log_sq_bbs,
            rq_shift,
            log_rq,
        } = geometry(&caps, attr.qp_type, &c, dv.send_ops != 0)?;
        let rq_bytes = if no_rq {
            0
        } else {
            (1usize << log_rq) << rq_shift
        };
        let (buf, pages) = alloc_ring(&dev.hal, rq_bytes + ((WQEBB as usize) << log_sq_bbs))?;
        let RingPages {
            page,
            log_page,
            bytes,
            count: pages,
        } = pages;
        // A command carries 992 page addresses: past the device's sizes with 2 MiB pages, but
        // not with the 4 KiB pages of a HAL that aligns no further.
        if CreateQpIn::BYTES + 8 * pages > MAX_MESSAGE {
            return Err(Error::ExceedsLimit {
                limit: Limit::QpBufferBytes,
                requested: bytes as u64,
                max: ((MAX_MESSAGE - CreateQpIn::BYTES) / 8 * page) as u64,
            });
        }
        let buf = buf.share();
        // Where the queues are in the buffer, checked once for every post.
        let sq_shape =
            buf.ring_shape::<{ crate::wq::send_queue::WQEBB }>(rq_bytes, 1 << log_sq_bbs)?;
        let rq_shape = if no_rq {
            None
        } else {
            Some(buf.ring_shape::<16>(0, (1 << log_rq) << (rq_shift - 4))?)
        };
        let dbr = dev.hal.dma_alloc(64, 64)?.share();
        let book_mem = dev
            .hal
            .dma_alloc(Book::<H>::bytes(log_sq_bbs, log_rq), 64)?
            .share();
        // Refused before any command when the table is full; `register` decides for good.
        if !dev.books.has_room(1) {
            return Err(qp_count_exceeded());
        }
        let uar = dev.uar().ok_or(Error::NotUp)?;
        let scqn = attr.send_cq.cqn().raw();
        // An XRC initiator receives nothing: its receive CQ is its send CQ.
        let rcqn = if ini { scqn } else { attr.recv_cq.cqn().raw() };
        // Its QPN comes with CREATE_QP.
        let mut book = Book::new(0, book_mem, log_sq_bbs, log_rq, [scqn, rcqn])?;
        let mut xrc = crate::verbs::xrc::DefaultsGuard {
            dev,
            defaults: if ini {
                Some(crate::verbs::xrc::XrcDefaults::create(
                    dev,
                    self.pdn().raw(),
                    scqn,
                )?)
            } else {
                None
            },
        };
        let ilen = CreateQpIn::BYTES + 8 * pages;
        // Built in DMA memory used as plain memory, not on the stack (8 KiB at most).
        let mut scratch = dev.hal.dma_alloc(ilen.max(64), 64)?;
        let i = scratch.as_mut_slice();
        {
            let mut v = input::<CreateQp>(&mut i[..ilen])?;
            v.sub(create_qp_in::qpc)
                .set(qpc::st, st)
                .set(qpc::pm_state, qpc_pm_state::MIGRATED)
                .set(qpc::pd, self.pdn().raw())
                .set(qpc::log_rq_size, log_rq)
                .set(qpc::log_rq_stride, rq_shift - 4)
                .set(qpc::log_sq_size, log_sq_bbs)
                .set(qpc::log_page_size, log_page)
                .set(qpc::uar_page, uar.index().raw())
                .set(qpc::cqn_snd, scqn)
                .set(qpc::cqn_rcv, rcqn)
                .set(qpc::dbr_addr, dbr.iova().0);
            if let Some(srq) = attr.srq {
                // Receives from the SRQ (Linux 6.12 qp.c `create_qp_common`: `rq_type` SRQ, the
                // SRQ's number, a domain); user index 0xffffff so that CQEs carry the SRQ
                // number (CQE version 0 for this QP) and the poll finds the SRQ's wr_id.
                v.sub(create_qp_in::qpc)
                    .set(qpc::rq_type, qpc_rq_type::SRQ_RQ)
                    .set(qpc::log_rq_size, 0u8)
                    .set(qpc::log_rq_stride, 0u8)
                    .set(qpc::srqn_rmpn_xrqn, srq.srqn())
                    .set(qpc::xrcd, srq.xrcdn())
                    .set(qpc::user_index, crate::verbs::xrc::CQE_V0_UIDX);
            }
            {
                let mut c = v.sub(create_qp_in::qpc);
                c.set(qpc::cs_req, dv.cs_req)
                    .set(qpc::cs_res, dv.cs_res)
                    .set(qpc::req_e2e_credit_mode, u8::from(dv.packet_credits));
                if let Some((concurrent, errored)) = dv.dci_streams {
                    c.set(qpc::log_num_dci_stream_channels, concurrent)
                        .set(qpc::log_num_dci_errored_streams, errored);
                }
            }
            if let Some(d) = &xrc.defaults {
                v.sub(create_qp_in::qpc)
                    .set(qpc::rq_type, qpc_rq_type::SRQ_RQ)
                    .set(qpc::log_rq_size, 0u8)
                    .set(qpc::log_rq_stride, 0u8)
                    .set(qpc::srqn_rmpn_xrqn, d.srqn())
                    .set(qpc::xrcd, d.xrcdn);
            }
            for k in 0..pages {
                v.set_array(create_qp_in::pas, k, buf.iova().0 + (k * page) as u64)?;
            }
        }
        let mut o = [0u8; CreateQpOut::BYTES];
        let [buf, dbr] =
            dev.exec_handing_over::<CreateQp, 2>(&mut i[..ilen], &mut o, [buf, dbr])?;
        let qpn = Qpn(View::<CreateQpOut>::new_checked(&o)?.get32(create_qp_out::qpn));
        book.qpn = qpn.raw();
        if dv.cs_req != 0 || dv.cs_res != 0 {
            book.ring = Some(crate::wq::book::WqRing {
                iova: buf.iova().0,
                sq_base: rq_bytes as u64,
                log_sq: log_sq_bbs,
                log_rq,
                rq_shift,
                dci: attr.qp_type == QpType::Driver,
            });
        }
        let slot = match register(dev, book, [scqn, rcqn]) {
            Ok(slot) => slot,
            Err(e) => {
                // Another thread filled the table after the check above: the QP goes again.
                if !destroy_unregistered(dev, qpn, [buf, dbr]) {
                    xrc.leak();
                }
                return Err(e);
            }
        };
        let cap = QpCap {
            max_send_wr: (1u32 << log_sq_bbs) / bbs_per_wr,
            max_recv_wr: if no_rq { 0 } else { 1 << log_rq },
            max_send_sge: c.max_send_sge.max(data / 16),
            max_recv_sge: if no_rq { 0 } else { (1u32 << rq_shift) / 16 },
            max_inline_data: data - 4,
        };
        Ok(Qp {
            pd: self,
            qpn,
            qp_type: attr.qp_type,
            state: QpState::Reset,
            cqns: (scqn, rcqn),
            buf: Some(buf),
            dbr: Some(dbr),
            cap,
            sq: SendQueue::new(
                Some(sq_shape),
                log_sq_bbs,
                attr.sq_sig_all,
                uar.bf_register(),
                1usize << caps.log_bf_reg_size,
                BatchState {
                    dci_streams: dv.dci_streams.map_or(1, |(c, _)| 1 << c),
                    send_ops: dv.send_ops,
                    pdn: self.pdn().raw(),
                    refuse: crate::verbs::send_batch::refusals(attr.qp_type, caps.ib_atomics),
                    qpn_word: crate::verbs::send_batch::qpn_word(qpn.raw()),
                    ..Default::default()
                },
            ),
            rq: RecvQueue::new(log_rq, rq_shift, rq_shape),
            attr: QpAttr {
                cap,
                ..QpAttr::default()
            },
            xrc: xrc.defaults.take(),
            srqn: attr.srq.map(|s| {
                s.add_user();
                s.srqn()
            }),
            sq_sig_all: attr.sq_sig_all,
            context: attr.qp_context,
            mcgs: heapless::Vec::new(),
            dv,
            book: Some(slot),
        })
    }
}

/// Creates an XRC target QP of domain `xrcdn` as Linux 6.12 qp.c `create_xrc_tgt_qp` does:
/// `st` XRC, `rq_type` SRQ naming the domain's default SRQ `s0`, `no_sq`, no UAR, no pages, no
/// doorbell record, both CQs the domain's placeholder `cq`, PD `pd` the domain's.
pub(crate) fn create_xrc_tgt<'p, 'd, H: Hal>(
    pd: &'p Pd<'d, H>,
    xrcdn: u32,
    s0: u32,
    cq: &Cq<'d, H>,
) -> Result<Qp<'p, 'd, H>, Error> {
    let dev = pd.dev;
    // Never handed to the device: the QP's mark of life (see `Drop`).
    let mark = dev.hal.dma_alloc(64, 64)?.share();
    let book_mem = dev.hal.dma_alloc(Book::<H>::bytes(0, 0), 64)?.share();
    if !dev.books.has_room(1) {
        return Err(qp_count_exceeded());
    }
    let cqn = cq.cqn().raw();
    let mut i = [0u8; CreateQpIn::BYTES];
    input::<CreateQp>(&mut i)?
        .sub(create_qp_in::qpc)
        .set(qpc::st, qpc_st::XRC)
        .set(qpc::pm_state, qpc_pm_state::MIGRATED)
        .set(qpc::pd, pd.pdn().raw())
        .set(qpc::no_sq, 1u8)
        .set(qpc::rq_type, qpc_rq_type::SRQ_RQ)
        .set(qpc::cqn_snd, cqn)
        .set(qpc::cqn_rcv, cqn)
        .set(qpc::srqn_rmpn_xrqn, s0)
        .set(qpc::xrcd, xrcdn);
    let mut book = Book::new(0, book_mem, 0, 0, [cqn, cqn])?;
    let mut o = [0u8; CreateQpOut::BYTES];
    dev.exec::<CreateQp>(&mut i, &mut o)?;
    let qpn = Qpn(View::<CreateQpOut>::new_checked(&o)?.get32(create_qp_out::qpn));
    book.qpn = qpn.raw();
    let slot = match register(dev, book, [cqn, cqn]) {
        Ok(slot) => slot,
        Err(e) => {
            let spare = dev.hal.dma_alloc(64, 64)?.share();
            destroy_unregistered(dev, qpn, [mark, spare]);
            return Err(e);
        }
    };
    let mut qp = xrc_tgt_from_parts(
        pd,
        qpn,
        cqn,
        (QpState::Reset, QpAttr::default()),
        Some(mark),
    );
    qp.book = Some(slot);
    Ok(qp)
}

/// An XRC target QP of `pd` completing (nothing) on `cqn`, in `state` with `attr`, as a
/// [`Qp`]. Without `mark` it destroys nothing when dropped: a view of a QP held elsewhere (a
/// domain's shared target QPs) for one modify or query; [`Qp::into_xrc_parts`] gives the
/// parts back.
pub(crate) fn xrc_tgt_from_parts<'p, 'd, H: Hal>(
    pd: &'p Pd<'d, H>,
    qpn: Qpn,
    cqn: u32,
    (state, attr): (QpState, QpAttr),
    mark: Option<SharedDma<H::Dma>>,
) -> Qp<'p, 'd, H> {
    Qp {
        pd,
        qpn,
        qp_type: QpType::XrcTgt,
        state,
        cqns: (cqn, cqn),
        buf: mark,
        dbr: None,
        cap: QpCap::default(),
        sq: SendQueue::none(),
        rq: RecvQueue::new(0, 4, None),
        attr,
        xrc: None,
        srqn: None,
        sq_sig_all: false,
        context: 0,
        mcgs: heapless::Vec::new(),
        dv: QpExtras::default(),
        book: None,
    }
}

pub(crate) fn qp_count_exceeded() -> Error {
    let max = INLINE_QPS as u64;
    Error::ExceedsLimit {
        limit: Limit::QpCount,
        requested: max + 1,
        max,
    }
}

/// Takes a destroyed QP's book and its uses of its CQs out of the tables.
pub(crate) fn unregister<H: Hal>(dev: &Device<H>, qpn: u32, cqns: [u32; 2]) {
    dev.books.remove(qpn);
    let mut ctl = dev.ctl.lock();
    for cqn in cqns {
        match ctl.cq_users.get_mut(&cqn) {
            Some(n) if *n > 1 => *n -= 1,
            // The last use goes, and so does its entry: the table holds CQs in use only.
            Some(_) => {
                ctl.cq_users.remove(&cqn);
            }
            None => {}
        }
    }
}

/// Enters a created QP's book (under the QPN it holds) and its uses of its CQs, all or
/// nothing; the book's slot.
pub(crate) fn register<H: Hal>(
    dev: &Device<H>,
    book: Book<H>,
    cqns: [u32; 2],
) -> Result<&BookSlot<H>, Error> {
    let qpn = book.qpn;
    let Ok(slot) = dev.books.insert(book) else {
        return Err(qp_count_exceeded());
    };
    let mut ctl = dev.ctl.lock();
    let distinct = if cqns[0] == cqns[1] {
        &cqns[..1]
    } else {
        &cqns[..]
    };
    let missing = distinct
        .iter()
        .filter(|c| !ctl.cq_users.contains_key(c))
        .count();
    if !ctl.cq_users.has_room(missing) {
        drop(ctl);
        dev.books.remove(qpn);
        return Err(qp_count_exceeded());
    }
    // One use per queue (two when both use one CQ); room was checked above.
    for cqn in cqns {
        let n = ctl.cq_users.get(&cqn).copied().unwrap_or(0);
        let _ = ctl.cq_users.insert(cqn, n + 1);
    }
    Ok(slot)
}

/// DESTROY_QP for a QP that never made it into the tables; its rings are leaked if the
/// command fails (the device may still use them). Whether it was destroyed.
fn destroy_unregistered<H: Hal>(dev: &Device<H>, qpn: Qpn, rings: [SharedDma<H::Dma>; 2]) -> bool {
    let mut i = [0u8; DestroyQpIn::BYTES];
    let mut o = [0u8; DestroyQpOut::BYTES];
    let done = input::<DestroyQp>(&mut i)
        .map(|mut v| {
            v.set(destroy_qp_in::qpn, qpn.raw());
        })
        .and_then(|()| dev.exec::<DestroyQp>(&mut i, &mut o));
    if let Err(e) = done {
        warn!("DESTROY_QP {}: {}; leaking its memory", qpn, e);
        for r in rings {
            r.leak();
        }
        return false;
    }
    true
}

/// An address path (`ads`) from an address vector, port, P_Key index and ACK timeout (Linux
/// 6.12 qp.c `mlx5_set_path`, for the primary and the alternate path alike).
/// An address path (`ads`) from `ah`, as Linux `mlx5_set_path`; the static rate in the
/// device's encoding for the rates `stat_rate_support` lists (`ib_rate_to_mlx5`; checked
/// before, so a rate that is no IB rate never gets here).
fn set_path(
    mut p: ViewMut<'_, Ads>,
    ah: &AhAttr,
    (port, pkey_index, timeout): (u8, u16, u8),
    stat_rate_support: u16,
) {
    let rate =
        crate::verbs::qp_attr_check::mlx5_stat_rate(ah.static_rate, stat_rate_support).unwrap_or(0);
    p.set(ads::vhca_port_num, port)
        .set(ads::pkey_index, pkey_index)
        .set(ads::rlid, ah.dlid)
        .set(ads::sl, ah.sl)
        .set(ads::mlid, ah.src_path_bits)
        .set(ads::ack_timeout, timeout)
        .set(ads::stat_rate, rate)
        .set(ads::grh, ah.is_global);
    if ah.is_global {
        let g = ah.grh;
        p.set(ads::src_addr_index, g.sgid_index)
            .set(ads::hop_limit, g.hop_limit)
            .set(ads::tclass, g.traffic_class)
            .set(ads::flow_label, g.flow_label);
        p.bytes_mut(ads::rgid_rip).copy_from_slice(&g.dgid);
    }
}

/// `log2` of a count of outstanding RDMA reads/atomics, as the QP context wants it.
fn log_ra(n: u8) -> u8 {
    if n <= 1 {
        0
    } else {
        (u32::from(n) - 1).ilog2() as u8 + 1
    }
}

impl<'d, H: Hal> Qp<'_, 'd, H> {
    /// The QP number.
    pub fn qpn(&self) -> Qpn {
        self.qpn
    }

    /// Takes the QP apart without destroying it: its state, attributes and mark of life (see
    /// [`xrc_tgt_from_parts`]).
    pub(crate) fn into_xrc_parts(mut self) -> (QpState, QpAttr, Option<SharedDma<H::Dma>>) {
        (self.state, self.attr, self.buf.take())
    }

    /// The transport.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// The state as the driver last set it or [`Qp::query`] last read it.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The device.
    pub(crate) fn device(&self) -> &'d crate::device::Device<H> {
        self.pd.dev
    }

    /// The sizes the QP got (at least those asked for).
    pub fn cap(&self) -> QpCap {
        self.cap
    }

    /// Modifies the QP (`ibv_modify_qp`): `mask` says which fields of `attr` apply. The
    /// transition and the attribute set are checked against the kernel's table first; nothing
    /// is sent when they are wrong.
    ///
    /// The current state is [`CUR_STATE`](QpAttrMask::CUR_STATE)'s `cur_qp_state` when given,
    /// else the state last set or seen by [`Qp::query`]. A UC or UD QP whose send queue failed
    /// is in SQE; query it (or pass `cur_qp_state`) and modify it to RTS to resume sending.
    ///
    /// SQD cannot be reached: mlx5 firmware has no command that drains a send queue into SQD
    /// (Linux mlx5_ib's `optab` has no RTS → SQD and no SQD → RTS entry and refuses them with
    /// `-EINVAL`), so RTS → SQD and SQD → anything but RESET or ERR are refused after the
    /// table check, with nothing sent.
    ///
    /// # Errors
    /// [`Error::ModifyQp`] naming the missing or refused attributes;
    /// [`Invalid::UnsupportedTransition`] for a transition mlx5 has no command for; a command
    /// error.
    pub fn modify(&mut self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Error> {
        let cur = if mask.contains(QpAttrMask::CUR_STATE) {
            attr.cur_qp_state
        } else {
            self.state
        };
        let next = next_state(cur, mask, attr.qp_state);
        check_modify(self.qp_type, cur, next, mask)?;
        let connected = matches!(
            self.qp_type,
            QpType::Rc | QpType::Uc | QpType::XrcIni | QpType::XrcTgt
        );
        crate::verbs::qp_attr_check::check_attr(attr, mask, &self.pd.dev.info().caps, connected)?;
        // An alternate path, or a path migration state other than the one QPs are created
        // with, needs automatic path migration (`cmd_hca_cap.apm`); without it they are
        // refused, never sent as an all-zero path.
        let wants_apm = mask.contains(QpAttrMask::ALT_PATH)
            || (mask.contains(QpAttrMask::PATH_MIG_STATE)
                && attr.path_mig_state != MigState::Migrated);
        if wants_apm && !self.pd.dev.info().caps.apm {
            return Err(Error::InvalidArgument {
                what: Invalid::NoPathMigration,
            });
        }
        let opcode = match (cur, next) {
            (_, QpState::Reset) => Opcode::QP_2RST,
            (_, QpState::Err) => Opcode::QP_2ERR,
            (QpState::Reset, QpState::Init) => Opcode::RST2INIT_QP,
            (QpState::Init, QpState::Init) => Opcode::INIT2INIT_QP,
            (QpState::Init, QpState::Rtr) => Opcode::INIT2RTR_QP,
            (QpState::Rtr, QpState::Rts) => Opcode::RTR2RTS_QP,
            (QpState::Rts, QpState::Rts) => Opcode::RTS2RTS_QP,
            (QpState::Sqe, QpState::Rts) => Opcode::SQERR2RTS_QP,
            // RTS -> SQD, SQD -> RTS and SQD -> SQD: no mlx5 command (see above).
            _ => {
                return Err(Error::InvalidArgument {
                    what: Invalid::UnsupportedTransition,
                })
            }
        };
        let dev = self.pd.dev;
        let mut merged = self.attr;
        apply(&mut merged, attr, mask);
        if matches!(opcode, Opcode::QP_2RST | Opcode::QP_2ERR) {
            let mut i = [0u8; Qp2RstIn::BYTES];
            {
                let mut v = ViewMut::<Qp2RstIn>::zeroed(&mut i)?;
                v.set(qp_2rst_in::qpn, self.qpn.raw());
            }
            let mut o = [0u8; Qp2RstOut::BYTES];
            if opcode == Opcode::QP_2RST {
                dev.exec::<Qp2Rst>(&mut i, &mut o)?;
            } else {
                dev.exec::<Qp2Err>(&mut i, &mut o)?;
            }
        } else {
            let mut i = [0u8; Rst2InitQpIn::BYTES];
            let mut opt = 0u32;
            {
                let mut v = ViewMut::<Rst2InitQpIn>::zeroed(&mut i)?;
                v.set(rst2init_qp_in::qpn, self.qpn.raw());
                let mut c = v.sub(rst2init_qp_in::qpc);
                let a = &merged;
                // As Linux mlx5_ib `to_mlx5_access_flags`: without responder resources
                // (max_dest_rd_atomic 0) only remote writes are enabled; the responder then
                // answers RDMA READ and atomics with a NAK invalid request.
                let resources = a.max_dest_rd_atomic > 0;
                c.set(
                    qpc::rre,
                    resources && a.qp_access_flags.contains(AccessFlags::REMOTE_READ),
                )
                .set(
                    qpc::rwe,
                    a.qp_access_flags.contains(AccessFlags::REMOTE_WRITE),
                )
                .set(
                    qpc::rae,
                    resources && a.qp_access_flags.contains(AccessFlags::REMOTE_ATOMIC),
                )
                .set(qpc::q_key, a.qkey)
                .set(qpc::pm_state, qpc_pm_state::MIGRATED);
                match opcode {
                    Opcode::INIT2RTR_QP => {
                        c.set(
                            qpc::mtu,
                            if self.qp_type == QpType::Ud {
                                qpc_mtu::MTU_4K
                            } else {
                                a.path_mtu as u8
                            },
                        )
                        .set(qpc::log_msg_max, dev.info().caps.max_msg_size.ilog2())
                        .set(qpc::remote_qpn, a.dest_qp_num)
                        .set(qpc::next_rcv_psn, a.rq_psn)
                        .set(qpc::min_rnr_nak, a.min_rnr_timer)
                        .set(qpc::log_rra_max, log_ra(a.max_dest_rd_atomic));
                    }
                    Opcode::RTR2RTS_QP => {
                        c.set(qpc::next_send_psn, a.sq_psn)
                            .set(qpc::retry_count, a.retry_cnt)
                            .set(qpc::rnr_retry, a.rnr_retry)
                            .set(qpc::log_sra_max, log_ra(a.max_rd_atomic))
                            .set(qpc::log_ack_req_freq, 8u8);
                    }
                    _ => {}
                }
                let rates = dev.info().caps.stat_rate_support;
                set_path(
                    c.sub(qpc::primary_address_path),
                    &a.ah_attr,
                    (a.port_num, a.pkey_index, a.timeout),
                    rates,
                );
                if mask.contains(QpAttrMask::ALT_PATH) {
                    set_path(
                        c.sub(qpc::secondary_address_path),
                        &a.alt_ah_attr,
                        (a.alt_port_num, a.alt_pkey_index, a.alt_timeout),
                        rates,
                    );
                }
                if mask.contains(QpAttrMask::PATH_MIG_STATE) {
                    c.set(qpc::pm_state, a.path_mig_state.pm_state());
                }
                // PRM: optional parameters take effect only with their opt_param_mask bit.
                for (m, bits) in [
                    (
                        QpAttrMask::ACCESS_FLAGS,
                        qp_optpar::RRE | qp_optpar::RWE | qp_optpar::RAE,
                    ),
                    // Linux `ib_mask_to_mlx5_opt`: the enables follow max_dest_rd_atomic.
                    (
                        QpAttrMask::MAX_DEST_RD_ATOMIC,
                        qp_optpar::RRE | qp_optpar::RWE | qp_optpar::RAE,
                    ),
                    (QpAttrMask::PKEY_INDEX, qp_optpar::PKEY_INDEX),
                    (QpAttrMask::QKEY, qp_optpar::Q_KEY),
                    (QpAttrMask::MIN_RNR_TIMER, qp_optpar::RNR_TIMEOUT),
                    (QpAttrMask::ALT_PATH, qp_optpar::ALT_ADDR_PATH),
                    (QpAttrMask::PATH_MIG_STATE, qp_optpar::PM_STATE),
                ] {
                    if mask.contains(m) {
                        opt |= bits;
                    }
                }
                v.set(rst2init_qp_in::opt_param_mask, opt);
            }
            // All context transitions share one layout; each goes out as its own command.
            let mut o = [0u8; Rst2InitQpOut::BYTES];
            match opcode {
                Opcode::RST2INIT_QP => dev.exec::<Rst2InitQp>(&mut i, &mut o)?,
                Opcode::INIT2INIT_QP => dev.exec::<Init2InitQp>(&mut i, &mut o)?,
                Opcode::INIT2RTR_QP => dev.exec::<Init2RtrQp>(&mut i, &mut o)?,
                Opcode::RTR2RTS_QP => dev.exec::<Rtr2RtsQp>(&mut i, &mut o)?,
                Opcode::RTS2RTS_QP => dev.exec::<Rts2RtsQp>(&mut i, &mut o)?,
                Opcode::SQERR2RTS_QP => dev.exec::<Sqerr2RtsQp>(&mut i, &mut o)?,
                _ => {
                    return Err(Error::InvalidArgument {
                        what: Invalid::UnsupportedTransition,
                    })
                }
            }
        }
        self.attr = merged;
        self.state = next;
        if next == QpState::Reset {
            // Its completions leave its CQs (rdma-core mlx5_modify_qp → __mlx5_cq_clean).
            dev.purge_qp_completions(self.qpn.raw(), [self.cqns.0, self.cqns.1]);
            // Queues are empty again: counters and the book start over.
            self.sq.reset();
            self.rq.reset();
            let slot = self.book.or_else(|| dev.books.find(self.qpn.raw()));
            if let Some(b) = slot.map(|s| s.read()).as_ref().and_then(|g| g.as_ref()) {
                b.reset();
            }
            if let Some(d) = &self.dbr {
                d.write32(bareverbs_firmware_cmd::ifc::qp_dbr::RCV, 0);
                d.write32(bareverbs_firmware_cmd::ifc::qp_dbr::SND, 0);
            }
        }
        Ok(())
    }

    /// Reads the QP's state and attributes from the device (`ibv_query_qp`). The state read
    /// becomes the QP's current state (as mlx5_ib's query does), so a QP the device moved to
    /// SQE or ERR can be modified from there.
    ///
    /// # Errors
    /// A command error.
    pub fn query(&mut self) -> Result<QpAttr, Error> {
        let mut i = [0u8; QueryQpIn::BYTES];
        input::<QueryQp>(&mut i)?.set(query_qp_in::qpn, self.qpn.raw());
        let mut o = [0u8; QueryQpOut::BYTES];
        self.pd.dev.exec::<QueryQp>(&mut i, &mut o)?;
        let v = View::<QueryQpOut>::new_checked(&o)?;
        let c = v.sub(query_qp_out::qpc);
        let p = c.sub(qpc::primary_address_path);
        let mut a = self.attr;
        a.qp_state = match QpcState::from(c.get(qpc::state) as u8) {
            QpcState::Rst => QpState::Reset,
            QpcState::Init => QpState::Init,
            QpcState::Rtr => QpState::Rtr,
            QpcState::Rts => QpState::Rts,
            QpcState::Sqer => QpState::Sqe,
            QpcState::Sqd | QpcState::SqDraining => QpState::Sqd,
            _ => QpState::Err,
        };
        a.cur_qp_state = a.qp_state;
        a.qkey = c.get32(qpc::q_key);
        a.rq_psn = c.get32(qpc::next_rcv_psn);
        a.sq_psn = c.get32(qpc::next_send_psn);
        a.dest_qp_num = c.get32(qpc::remote_qpn);
        a.min_rnr_timer = c.get(qpc::min_rnr_nak) as u8;
        a.retry_cnt = c.get(qpc::retry_count) as u8;
        a.rnr_retry = c.get(qpc::rnr_retry) as u8;
        a.port_num = p.get(ads::vhca_port_num) as u8;
        a.pkey_index = p.get(ads::pkey_index) as u16;
        a.ah_attr.dlid = p.get(ads::rlid) as u16;
        a.ah_attr.sl = p.get(ads::sl) as u8;
        a.timeout = p.get(ads::ack_timeout) as u8;
        let mut acc = AccessFlags::empty();
        acc.set(AccessFlags::REMOTE_READ, c.get(qpc::rre) != 0);
        acc.set(AccessFlags::REMOTE_WRITE, c.get(qpc::rwe) != 0);
        acc.set(AccessFlags::REMOTE_ATOMIC, c.get(qpc::rae) != 0);
        a.qp_access_flags = acc;
        a.cap = self.cap;
        self.state = a.qp_state;
        Ok(a)
    }

    /// The context the QP was created with (`qp_context`).
    pub fn context(&self) -> u64 {
        self.context
    }

    /// `ibv_query_qp`: the QP's attributes read from the device, and how it was created.
    /// `mask` names the attributes wanted; as the seed allows ("some devices may return
    /// extra attributes"), every attribute [`Qp::query`] reads is returned, valid or not for
    /// the state (the alternate path and `path_mig_state` too, as last set).
    ///
    /// # Errors
    /// [`Invalid::QueryMask`] for an empty mask (nothing asked for), a command error.
    pub fn query_qp(&mut self, mask: QpAttrMask) -> Result<(QpAttr, QpInitInfo), Error> {
        if mask.is_empty() {
            return Err(Error::InvalidArgument {
                what: Invalid::QueryMask,
            });
        }
        let a = self.query()?;
        let info = QpInitInfo {
            qp_type: self.qp_type,
            cap: self.cap,
            sq_sig_all: self.sq_sig_all,
            send_cqn: self.cqns.0,
            recv_cqn: self.cqns.1,
            srqn: self.srqn,
            qp_context: self.context,
        };
        Ok((a, info))
    }

    /// RESET → INIT with the attributes the QP type requires.
    ///
    /// # Errors
    /// As [`Qp::modify`].
    pub fn to_init(
        &mut self,
        port: u8,
        pkey_index: u16,
        access: AccessFlags,
        qkey: u32,
    ) -> Result<(), Error> {
        let a = QpAttr {
            qp_state: QpState::Init,
            port_num: port,
            pkey_index,
            qp_access_flags: access,
            qkey,
            ..QpAttr::default()
        };
        let mut mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
        mask |= match self.qp_type {
            QpType::Ud => QpAttrMask::QKEY,
            // A DCI takes no access flags (it only sends).
            QpType::Driver => QpAttrMask::empty(),
            _ => QpAttrMask::ACCESS_FLAGS,
        };
        self.modify(&a, mask)
    }

    /// INIT → RTR towards `dest_qpn` at `ah` (connected QPs), or to receive (UD).
    ///
    /// # Errors
    /// As [`Qp::modify`].
    pub fn to_rtr(
        &mut self,
        dest_qpn: u32,
        rq_psn: u32,
        ah: AhAttr,
        mtu: Mtu,
    ) -> Result<(), Error> {
        let a = QpAttr {
            qp_state: QpState::Rtr,
            dest_qp_num: dest_qpn,
            rq_psn,
            ah_attr: ah,
            path_mtu: mtu,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..QpAttr::default()
        };
        let mask = match self.qp_type {
            QpType::Ud => QpAttrMask::STATE,
            // A DCI: the path's port and SL and the MTU; each request names its target.
            QpType::Driver => QpAttrMask::STATE | QpAttrMask::AV | QpAttrMask::PATH_MTU,
            QpType::Uc | QpType::XrcIni => {
                QpAttrMask::STATE
                    | QpAttrMask::AV
                    | QpAttrMask::PATH_MTU
                    | QpAttrMask::DEST_QPN
                    | QpAttrMask::RQ_PSN
            }
            _ => {
                QpAttrMask::STATE
                    | QpAttrMask::AV
                    | QpAttrMask::PATH_MTU
                    | QpAttrMask::DEST_QPN
                    | QpAttrMask::RQ_PSN
                    | QpAttrMask::MAX_DEST_RD_ATOMIC
                    | QpAttrMask::MIN_RNR_TIMER
            }
        };
        self.modify(&a, mask)
    }

    /// RTR → RTS with `sq_psn` (and IB defaults for timeouts and retries on RC).
    ///
    /// # Errors
    /// As [`Qp::modify`].
    pub fn to_rts(&mut self, sq_psn: u32) -> Result<(), Error> {
        let a = QpAttr {
            qp_state: QpState::Rts,
            sq_psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..QpAttr::default()
        };
        let mask = match self.qp_type {
            QpType::XrcTgt => QpAttrMask::STATE | QpAttrMask::SQ_PSN | QpAttrMask::TIMEOUT,
            QpType::Rc | QpType::XrcIni | QpType::Driver => {
                QpAttrMask::STATE
                    | QpAttrMask::SQ_PSN
                    | QpAttrMask::TIMEOUT
                    | QpAttrMask::RETRY_CNT
                    | QpAttrMask::RNR_RETRY
                    | QpAttrMask::MAX_QP_RD_ATOMIC
            }
            _ => QpAttrMask::STATE | QpAttrMask::SQ_PSN,
        };
        self.modify(&a, mask)
    }

    fn destroy_inner(&mut self) -> Result<(), Error> {
        let dev = self.pd.dev;
        let mut i = [0u8; DestroyQpIn::BYTES];
        input::<DestroyQp>(&mut i)?.set(destroy_qp_in::qpn, self.qpn.raw());
        let mut o = [0u8; DestroyQpOut::BYTES];
        dev.exec::<DestroyQp>(&mut i, &mut o)?;
        // Its completions still in the CQs are marked to go before its book does: a poll that
        // then finds no book for one of them finds the purge too (and leaves it for the next
        // poll to drop) instead of handing it out without its `wr_id`.
        dev.purge_qp_completions(self.qpn.raw(), [self.cqns.0, self.cqns.1]);
        unregister(dev, self.qpn.raw(), [self.cqns.0, self.cqns.1]);
        let mut ctl = dev.ctl.lock();
        if let Some(srqn) = self.srqn.take() {
            crate::verbs::srq::remove_user(&mut ctl, srqn);
        }
        drop(ctl);
        dev.reap_orphan_cqs(&[self.cqns.0, self.cqns.1]);
        if let Some(x) = self.xrc.take() {
            x.release(dev);
        }
        Ok(())
    }

    /// Destroys the QP (`ibv_destroy_qp`).
    ///
    /// # Errors
    /// [`Invalid::AttachedToMulticast`] while the QP is attached to a multicast group
    /// (detach first); a command error; the QP is returned.
    // The QP is handed back so the caller can retry; without allocation it cannot be boxed.
    #[allow(clippy::result_large_err)]
    pub fn destroy(mut self) -> Result<(), (Error, Self)> {
        if !self.mcgs.is_empty() {
            return Err((
                Error::InvalidArgument {
                    what: Invalid::AttachedToMulticast,
                },
                self,
            ));
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

/// Copies the fields `mask` selects from `from` into `to`.
fn apply(to: &mut QpAttr, from: &QpAttr, mask: QpAttrMask) {
    let m = |f| mask.contains(f);
    if m(QpAttrMask::STATE) {
        to.qp_state = from.qp_state;
    }
    if m(QpAttrMask::PATH_MTU) {
        to.path_mtu = from.path_mtu;
    }
    if m(QpAttrMask::QKEY) {
        to.qkey = from.qkey;
    }
    if m(QpAttrMask::RQ_PSN) {
        to.rq_psn = from.rq_psn;
    }
    if m(QpAttrMask::SQ_PSN) {
        to.sq_psn = from.sq_psn;
    }
    if m(QpAttrMask::DEST_QPN) {
        to.dest_qp_num = from.dest_qp_num;
    }
    if m(QpAttrMask::ACCESS_FLAGS) {
        to.qp_access_flags = from.qp_access_flags;
    }
    if m(QpAttrMask::AV) {
        to.ah_attr = from.ah_attr;
    }
    if m(QpAttrMask::PKEY_INDEX) {
        to.pkey_index = from.pkey_index;
    }
    if m(QpAttrMask::MAX_QP_RD_ATOMIC) {
        to.max_rd_atomic = from.max_rd_atomic;
    }
    if m(QpAttrMask::MAX_DEST_RD_ATOMIC) {
        to.max_dest_rd_atomic = from.max_dest_rd_atomic;
    }
    if m(QpAttrMask::MIN_RNR_TIMER) {
        to.min_rnr_timer = from.min_rnr_timer;
    }
    if m(QpAttrMask::PORT) {
        to.port_num = from.port_num;
    }
    if m(QpAttrMask::TIMEOUT) {
        to.timeout = from.timeout;
    }
    if m(QpAttrMask::RETRY_CNT) {
        to.retry_cnt = from.retry_cnt;
    }
    if m(QpAttrMask::RNR_RETRY) {
        to.rnr_retry = from.rnr_retry;
    }
}

impl<H: Hal> Drop for Qp<'_, '_, H> {
    fn drop(&mut self) {
        if self.buf.is_none() {
            return;
        }
        self.detach_all();
        if let Err(e) = self.destroy_inner() {
            warn!("DESTROY_QP {}: {}; leaking its memory", self.qpn, e);
            if let Some(b) = self.buf.take() {
                b.leak();
            }
            if let Some(b) = self.dbr.take() {
                b.leak();
            }
            if let Some(x) = self.xrc.take() {
                x.leak();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::Caps;

    // The package's own tests build it with `testing` (its dev-dependency on itself).
    use crate::testing::cap;

    #[test]
    fn queue_sizes_never_overflow_whatever_the_device_or_the_caller_says() {
        let numbers = [
            0,
            1,
            15,
            16,
            63,
            64,
            1 << 15,
            1 << 16,
            1 << 31,
            u32::MAX - 1,
            u32::MAX,
        ];
        let mut ok = 0;
        for &dev in &numbers {
            let caps = Caps {
                max_qp_wr: dev,
                max_sq_desc_size: dev,
                max_rq_desc_size: dev,
                ..Caps::default()
            };
            for &n in &numbers {
                for t in [QpType::Rc, QpType::Ud, QpType::XrcIni] {
                    for c in [cap(n, 1, 0), cap(1, n, 0), cap(1, 1, n), cap(n, n, n)] {
                        if let Ok(g) = geometry(&caps, t, &c, false) {
                            ok += 1;
                            // What it gave fits the driver's 16-bit counters and the device.
                            assert!(g.log_sq_bbs <= MAX_LOG_WQ && g.log_rq <= MAX_LOG_WQ);
                            assert!(1u32 << g.log_sq_bbs >= c.max_send_wr.max(1));
                            assert!(g.data + CTRL <= caps.max_sq_desc_size);
                        }
                    }
                }
            }
        }
        assert!(ok > 0);
        // A device that claims every size: still at most 2^15 WQEBBs a queue.
        let huge = Caps {
            max_qp_wr: u32::MAX,
            max_sq_desc_size: u32::MAX,
            max_rq_desc_size: u32::MAX,
            ..Caps::default()
        };
        assert!(matches!(
            geometry(&huge, QpType::Rc, &cap(1 << 16, 1, 0), false),
            Err(Error::ExceedsLimit {
                limit: Limit::QpWr,
                ..
            })
        ));
    }
}
