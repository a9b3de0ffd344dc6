//! Posting work (`ibv_post_send`, `ibv_post_recv`): the work-request types, the receive WQEs,
//! and the send list handed to a [`SendBatch`](crate::verbs::send_batch::SendBatch); one
//! doorbell record update (and for sends one doorbell) per call, in Linux's order (WQE →
//! `dma_wmb` → doorbell record → `wmb` → 64-bit UAR write; mlx5-reference 05 §3–6).

use core::sync::atomic::Ordering;

use bareverbs_hal::Hal;
use bitflags::bitflags;

use crate::error::{Error, Invalid};
use crate::verbs::mr::Lkey;
use crate::verbs::qp::{AhAttr, Qp};
use crate::verbs::qp_state::{QpState, QpType};
use crate::wq::recv_queue::{publish_recv, write_recv_wqe};

/// One scatter/gather entry (`struct ibv_sge`): `addr` is a registered region's address
/// (its IOVA, [`Mr::addr`](crate::verbs::Mr::addr)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Sge {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the region.
    pub lkey: Lkey,
}

/// Why the device must not see `s`, if it must not: a length with bit 31 set (bit 31 of an
/// mlx5 segment's byte count is the inline flag, `MLX5_INLINE_SEG`, so the device would not
/// read it as a length). Special keys cannot get here: only [`Mr::lkey`](crate::verbs::Mr::lkey)
/// makes an [`Lkey`].
#[inline(always)]
pub(crate) fn sge_refused(s: &Sge) -> Option<Invalid> {
    sge_refused_lengths(s.length)
}

/// [`sge_refused`] for the OR of several entries' lengths.
#[inline(always)]
pub(crate) fn sge_refused_lengths(lengths: u32) -> Option<Invalid> {
    ((lengths as i32) < 0).then_some(Invalid::SgeLength)
}

bitflags! {
    /// Send flags (`enum ibv_send_flags`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA READs and atomics to complete first.
        const FENCE = 1 << 0;
        /// Generate a completion (always, with `sq_sig_all`).
        const SIGNALED = 1 << 1;
        /// Raise the remote solicited event.
        const SOLICITED = 1 << 2;
        /// Carry the data in the WQE (from `inline_data`).
        const INLINE = 1 << 3;
    }
}

/// What a send request does (`enum ibv_wr_opcode` with its operands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SendOp {
    /// SEND.
    Send,
    /// SEND with immediate data (host order).
    SendWithImm(u32),
    /// RDMA WRITE to `remote_addr` with `rkey`.
    RdmaWrite {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA WRITE with immediate data, consuming a remote receive.
    RdmaWriteWithImm {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ into the scatter list.
    RdmaRead {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// 8-byte compare-and-swap; the old value lands in the scatter list.
    AtomicCmpAndSwp {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Compared value.
        compare: u64,
        /// Swapped-in value.
        swap: u64,
    },
    /// 8-byte fetch-and-add; the old value lands in the scatter list.
    AtomicFetchAndAdd {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Added value.
        add: u64,
    },
}

/// A UD destination (`wr.ud`): only [`Ah::dest`](crate::verbs::Ah::dest) makes one, so its
/// address vector passed `create_ah`'s checks and its QP number fits 24 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct UdDest {
    /// Address vector.
    pub(crate) ah: AhAttr,
    /// Remote QP number.
    pub(crate) remote_qpn: u32,
    /// Remote Q_Key (top bit set: use the QP's own).
    pub(crate) remote_qkey: u32,
}

impl UdDest {
    /// The address vector.
    pub fn ah(&self) -> AhAttr {
        self.ah
    }

    /// The remote QP number.
    pub fn remote_qpn(&self) -> u32 {
        self.remote_qpn
    }

    /// The remote Q_Key.
    pub fn remote_qkey(&self) -> u32 {
        self.remote_qkey
    }
}

/// A DC target as a DC initiator's requests address it (`mlx5dv_wr_set_dc_addr`): its
/// address vector, its DCT number and its access key. Only [`Ah::dc_dest`] makes one, so its
/// address vector passed `create_ah`'s checks and its number fits 24 bits.
///
/// [`Ah::dc_dest`]: crate::verbs::Ah::dc_dest
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DcDest {
    pub(crate) ah: AhAttr,
    pub(crate) dctn: u32,
    pub(crate) dc_key: u64,
}

impl DcDest {
    /// The address vector.
    pub fn ah(&self) -> AhAttr {
        self.ah
    }

    /// The target's DCT number.
    pub fn dctn(&self) -> u32 {
        self.dctn
    }

    /// The access key the requests carry.
    pub fn dc_key(&self) -> u64 {
        self.dc_key
    }
}

/// The longest UD message: one packet of the largest IB MTU, 4096 bytes (UD messages are
/// single packets, IBA 9.8.3; mlx5_ib gives UD QPs the 4 KiB MTU).
pub const UD_MAX_MESSAGE: usize = 4096;

/// A send work request (`struct ibv_send_wr`).
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Gather list (ignored with [`SendFlags::INLINE`]).
    pub sg_list: &'a [Sge],
    /// Data carried in the WQE with [`SendFlags::INLINE`].
    pub inline_data: &'a [u8],
    /// Operation.
    pub op: SendOp,
    /// Flags.
    pub flags: SendFlags,
    /// Destination (UD only).
    pub ud: Option<UdDest>,
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Scatter list.
    pub sg_list: &'a [Sge],
}

/// A post that stopped at a bad request (`bad_wr`): requests before `index` were posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PostError {
    /// Index of the first request not posted.
    pub index: usize,
    /// Why.
    pub error: Error,
}

impl core::fmt::Display for PostError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "work request {}: {}", self.index, self.error)
    }
}

impl core::error::Error for PostError {}

fn invalid(what: Invalid) -> Error {
    Error::InvalidArgument { what }
}

impl<H: Hal> Qp<'_, '_, H> {
    /// Posts send requests (`ibv_post_send`): each is checked, then built in the ring; one
    /// doorbell rings for all those posted. A [`send_batch`](Qp::send_batch) over `wrs`.
    ///
    /// # Errors
    /// [`PostError`] with the index of the first request refused (state, opcode for the QP
    /// type or the device, SGE count, inline size, [`Error::QueueFull`]); those before it are
    /// posted.
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        if wrs.is_empty() {
            return Ok(());
        }
        let r = self.send_batch(|b| {
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

    /// Posts receive requests (`ibv_post_recv`). For UD the first 40 bytes of each buffer
    /// receive the GRH area.
    ///
    /// # Errors
    /// [`PostError`] with the index of the first request refused (state, SGE count,
    /// [`Error::QueueFull`]); those before it are posted.
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let at = |index: usize| move |error: Error| PostError { index, error };
        if wrs.is_empty() {
            return Ok(());
        }
        if self.state() == QpState::Reset {
            return Err(at(0)(invalid(Invalid::QpState)));
        }
        // XRC QPs receive through the XRC SRQ each request names (see `verbs::xrc`).
        // A QP on an SRQ receives through it (`Srq::post_recv`).
        if matches!(self.qp_type(), QpType::XrcIni | QpType::XrcTgt) || self.srqn.is_some() {
            return Err(at(0)(invalid(Invalid::NoReceiveQueue)));
        }
        let dev = self.device();
        if dev.is_fatal() {
            return Err(at(0)(Error::DeviceFatal));
        }
        let slot = self.book.map(|s| s.read());
        let entry = slot.as_ref().and_then(|g| g.as_ref());
        let (Some(entry), Some(book), Some(ring), Some(dbr)) = (
            entry,
            entry.and_then(|b| b.view()),
            self.buf.as_ref(),
            self.dbr.as_ref(),
        ) else {
            return Err(at(0)(Error::NotUp));
        };
        let size = 1u16 << self.rq.log_size();
        let units_log = self.rq.shift() - 4;
        let Some(rq) = self.rq.shape.as_ref().and_then(|s| ring.slots_of(s)) else {
            return Err(at(0)(Error::NotUp));
        };
        let ids = book.rq;
        let max_sge = self.cap().max_recv_sge as usize;
        let stride_units = 1usize << units_log;
        let mut tail = book.rq_tail.load(Ordering::Acquire);
        let mut head = self.rq.head();
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            if wr.sg_list.len() > max_sge {
                result = Err(at(index)(invalid(Invalid::TooManySge)));
                break;
            }
            if let Some(what) = wr.sg_list.iter().find_map(sge_refused) {
                result = Err(at(index)(invalid(what)));
                break;
            }
            if head.wrapping_sub(tail) >= size {
                tail = book.rq_tail.load(Ordering::Acquire);
                if head.wrapping_sub(tail) >= size {
                    result = Err(at(index)(Error::QueueFull));
                    break;
                }
            }
            write_recv_wqe(
                &rq,
                usize::from(head) << units_log,
                stride_units,
                wr.sg_list.iter().map(|s| (s.addr, s.length, s.lkey.raw())),
            );
            ids.slot(usize::from(head)).write_ne64(0, wr.wr_id);
            head = head.wrapping_add(1);
        }
        if head != self.rq.head() {
            publish_recv(dbr, head);
            self.rq.advance(head);
            // What a software flush completes up to, should the device fail.
            entry.rq_head.store(head, Ordering::Release);
        }
        result
    }
}
