//! Where send WQEs are written: a batch checks the QP once, then checks and writes each
//! request straight into the SQ ring (control, address, data or inline segments; mlx5-reference
//! 05 §3–5) and rings one doorbell at its end — rdma-core's `ibv_wr_start` …
//! `ibv_wr_complete`. [`Qp::post_send`] is a batch over a list of requests.

use core::sync::atomic::Ordering;

use bareverbs_firmware_cmd::ifc::wqe_opcode;
use bareverbs_firmware_cmd::wqe_codec::{self as codec, ctrl, datagram};
use bareverbs_hal::{Hal, Slot};

use crate::error::{Error, Invalid};
use crate::verbs::dv_mkey::{DvMkey, MkeyConf, MkeyLayout, MrInterleaved};
use crate::verbs::mr::AccessFlags;
use crate::verbs::post::{sge_refused_lengths, DcDest, SendFlags, SendOp, SendWr, Sge, UdDest};
use crate::verbs::qp::Qp;
use crate::verbs::qp_state::{QpState, QpType};
use crate::wq::send_queue::{BatchState, SendRing, WQEBB};
use crate::wq::send_wqe::{
    av_words, write_atomic, write_av, write_ctrl, write_data, write_data_list, write_inline,
    write_raddr, write_xrc, AvDest, AvGrh, RADDR_SEG,
};

// The send queue's `fm_ce_se` table is indexed by these bits.
const _: () = assert!(
    SendFlags::FENCE.bits() == crate::wq::send_queue::FLAG_FENCE
        && SendFlags::SIGNALED.bits() == crate::wq::send_queue::FLAG_SIGNALED
        && SendFlags::SOLICITED.bits() == crate::wq::send_queue::FLAG_SOLICITED
);

fn invalid(what: Invalid) -> Error {
    Error::InvalidArgument { what }
}

/// Send requests being written into one QP's send queue; see [`Qp::send_batch`]. With `XRC`,
/// an XRC initiator's ([`Qp::send_batch_xrc`]): every WQE carries the XRC segment; with `DC`,
/// a DC initiator's ([`Qp::send_batch_dc`]): every WQE carries the address vector of its DC
/// target. Both are decided at compile time so other QPs' requests pay nothing for them.
pub struct SendBatch<'b, const XRC: bool = false, const DC: bool = false> {
    /// The send ring, borrowed exclusively from the QP (`&mut Qp`), with its book.
    ring: SendRing<'b>,
    /// The QPN in its place in the control segment's first word.
    qpn_word: u64,
    /// The control segment's `fm_ce_se` byte for each combination of FENCE, SIGNALED and
    /// SOLICITED (and CQ_UPDATE always when every request is signaled), byte `flags & 7` of
    /// the word. A word rather than an array keeps the batch in registers: an array indexed at
    /// run time would pin the whole batch in memory.
    fm_ce_se: u64,
    /// What the QP refuses: a bit per operation class its type (or, for atomics, the device:
    /// [`NO_ATOMICS`]) does not have, and [`UD`] for a UD QP, whose requests (and only those)
    /// name their destination.
    refuse: u8,
    max_inline: usize,
    max_sge: usize,
    /// With `XRC`: the XRC segment's remote SRQ number ([`NO_SRQN`] until set).
    xrc_srqn: u32,
    /// What the QP keeps for batches (DC destination, DCI streams, mlx5 send operations):
    /// borrowed, so a batch costs one pointer for it.
    st: &'b mut BatchState,
    /// The WQEBB index of the request to fence behind a UMR (rdma-core's `fm_cache`), or
    /// [`NO_FENCE`]. The fence is put into that WQE when the batch ends, before the doorbell,
    /// so requests pay nothing for it.
    fence_at: u32,
}

/// What a QP of `qp_type` refuses ([`SendBatch::refuse`]) on a device with or without IB
/// atomics: worked out once, when the QP is created.
pub(crate) fn refusals(qp_type: QpType, ib_atomics: bool) -> u8 {
    match qp_type {
        QpType::Ud => UD | (1 << WRITE) | (1 << READ) | (1 << ATOMIC),
        QpType::Uc => (1 << READ) | (1 << ATOMIC),
        _ if !ib_atomics => (1 << ATOMIC) | NO_ATOMICS,
        _ => 0,
    }
}

/// QPN `qpn` in its place in a control segment's first word ([`SendBatch::qpn_word`]).
pub(crate) fn qpn_word(qpn: u32) -> u64 {
    ctrl::QPN.put(u64::from(qpn))
}

/// The error for a data segment length with bit 31 set ([`sge_refused_lengths`]), out of
/// the way of the data path.
#[cold]
#[inline(never)]
fn sge_length_refused() -> Error {
    invalid(sge_refused_lengths(u32::MAX).unwrap_or(Invalid::SgeLength))
}

/// [`SendBatch::xrc_srqn`] before [`SendBatch::set_xrc_srqn`]: wider than an SRQ number.
const NO_SRQN: u32 = u32::MAX;

// Operation classes: what the QP type must allow and which segments a request needs.
const SEND: u8 = 0;
const WRITE: u8 = 1;
const READ: u8 = 2;
const ATOMIC: u8 = 3;
/// In [`SendBatch::refuse`]: the QP is UD.
const UD: u8 = 1 << 4;
/// In [`SendBatch::refuse`]: atomics are refused because the device has no IB atomics, not
/// because of the QP type.
const NO_ATOMICS: u8 = 1 << 5;

/// One request's operands, as [`SendBatch::emit`] writes them.
struct Req<'a> {
    wr_id: u64,
    flags: SendFlags,
    opcode: u8,
    imm: u32,
    raddr: u64,
    rkey: u32,
    /// Swap (or add) and compare.
    operands: (u64, u64),
    sges: &'a [Sge],
    data: &'a [u8],
    ud: Option<&'a UdDest>,
}

impl<'a> Req<'a> {
    #[inline(always)]
    fn new(wr_id: u64, flags: SendFlags, opcode: u8) -> Self {
        Req {
            wr_id,
            flags,
            opcode,
            imm: 0,
            raddr: 0,
            rkey: 0,
            operands: (0, 0),
            sges: &[],
            data: &[],
            ud: None,
        }
    }

    #[inline(always)]
    fn sges(mut self, sges: &'a [Sge]) -> Self {
        self.sges = sges;
        self
    }
}

impl SendBatch<'_, true> {
    /// Names the XRC SRQ at the target the following requests of this batch are delivered
    /// through (`ibv_wr_set_xrc_srqn`; `wr.xrc_remote_srq_num` of seed 001, rdma-core's
    /// `wr.qp_type.xrc.remote_srqn`): the number stays for every later request of the batch
    /// until set again. Requests are refused until it is set.
    ///
    /// # Errors
    /// [`Invalid::XrcRemoteSrq`] for a number wider than 24 bits.
    pub fn set_xrc_srqn(&mut self, remote_srqn: u32) -> Result<(), Error> {
        if remote_srqn > 0xff_ffff {
            return Err(invalid(Invalid::XrcRemoteSrq));
        }
        self.xrc_srqn = remote_srqn;
        Ok(())
    }
}

impl SendBatch<'_, false, true> {
    /// Addresses the following requests of this batch to DC target `dest` on stream 0
    /// (`mlx5dv_wr_set_dc_addr`); it stays for every later request until set again. Requests
    /// are refused until it is set.
    #[inline]
    pub fn set_dc_addr(&mut self, dest: &DcDest) {
        self.st.dc_av = av_words(&av_dest(&dest.ah), dest.dc_key, dest.dctn);
        self.st.dc_stream = 0;
        self.st.dc_set = true;
    }

    /// [`set_dc_addr`](Self::set_dc_addr) on DCI stream `stream_id`
    /// (`mlx5dv_wr_set_dc_addr_stream`): requests of one stream run in order, and an error
    /// in one stream leaves the others running.
    ///
    /// # Errors
    /// [`Invalid::DciStream`] for a stream past the DCI's (`1 << log_num_concurent`; only
    /// stream 0 without DCI streams).
    #[inline]
    pub fn set_dc_addr_stream(&mut self, dest: &DcDest, stream_id: u16) -> Result<(), Error> {
        if u32::from(stream_id) >= self.st.dci_streams {
            return Err(invalid(Invalid::DciStream));
        }
        self.st.dc_av = av_words(&av_dest(&dest.ah), dest.dc_key, dest.dctn);
        // Bytes 9–10 of the control segment (rdma-core 56 mlx5dv.h `dci_stream_channel_id`).
        self.st.dc_stream = ctrl::STREAM.put(u64::from(stream_id));
        self.st.dc_set = true;
        Ok(())
    }
}

impl<const XRC: bool, const DC: bool> SendBatch<'_, XRC, DC> {
    /// Checks `wr` against the QP and writes it into the ring (`ibv_post_send` for one
    /// request). Nothing is written for a refused request.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an opcode the QP type does not have, a missing or
    /// superfluous UD destination, inline data past `max_inline_data` or with READ/atomics,
    /// more SGEs than `max_send_sge`, an atomic without one 8-byte SGE or on a device without
    /// IB atomics ([`Invalid::AtomicsUnsupported`]); [`Error::QueueFull`] when the send queue
    /// has no room.
    #[inline(always)]
    pub fn post(&mut self, wr: &SendWr<'_>) -> Result<(), Error> {
        let inline = wr.flags.contains(SendFlags::INLINE);
        let base = |opcode| Req {
            wr_id: wr.wr_id,
            flags: wr.flags,
            opcode,
            imm: 0,
            raddr: 0,
            rkey: 0,
            operands: (0, 0),
            sges: wr.sg_list,
            data: wr.inline_data,
            ud: wr.ud.as_ref(),
        };
        // Each operation goes straight to its writer, decided once here.
        match wr.op {
            SendOp::Send | SendOp::SendWithImm(_) => {
                let r = match wr.op {
                    SendOp::SendWithImm(imm) => Req {
                        imm,
                        ..base(wqe_opcode::SEND_IMM)
                    },
                    _ => base(wqe_opcode::SEND),
                };
                if inline {
                    self.emit::<SEND, true>(&r)
                } else {
                    self.emit::<SEND, false>(&r)
                }
            }
            SendOp::RdmaWrite { remote_addr, rkey }
            | SendOp::RdmaWriteWithImm {
                remote_addr, rkey, ..
            } => {
                let r = match wr.op {
                    SendOp::RdmaWriteWithImm { imm, .. } => Req {
                        imm,
                        raddr: remote_addr,
                        rkey,
                        ..base(wqe_opcode::RDMA_WRITE_IMM)
                    },
                    _ => Req {
                        raddr: remote_addr,
                        rkey,
                        ..base(wqe_opcode::RDMA_WRITE)
                    },
                };
                if inline {
                    self.emit::<WRITE, true>(&r)
                } else {
                    self.emit::<WRITE, false>(&r)
                }
            }
            // READ and atomics carry no inline data.
            _ if inline => Err(invalid(Invalid::OpcodeForQpType)),
            SendOp::RdmaRead { remote_addr, rkey } => self.emit::<READ, false>(&Req {
                raddr: remote_addr,
                rkey,
                ..base(wqe_opcode::RDMA_READ)
            }),
            SendOp::AtomicCmpAndSwp {
                remote_addr,
                rkey,
                compare,
                swap,
            } => self.emit::<ATOMIC, false>(&Req {
                raddr: remote_addr,
                rkey,
                operands: (swap, compare),
                ..base(wqe_opcode::ATOMIC_CS)
            }),
            SendOp::AtomicFetchAndAdd {
                remote_addr,
                rkey,
                add,
            } => self.emit::<ATOMIC, false>(&Req {
                raddr: remote_addr,
                rkey,
                operands: (add, 0),
                ..base(wqe_opcode::ATOMIC_FA)
            }),
        }
    }

    /// SEND of the gather list `sges` (`ibv_wr_send` + `ibv_wr_set_sge_list`) on an RC or UC
    /// QP. [`SendFlags::INLINE`] is ignored.
    ///
    /// # Errors
    /// As [`post`](Self::post).
    #[inline]
    pub fn send(&mut self, wr_id: u64, flags: SendFlags, sges: &[Sge]) -> Result<(), Error> {
        self.emit::<SEND, false>(&Req::new(wr_id, flags, wqe_opcode::SEND).sges(sges))
    }

    /// SEND of `data` carried in the WQE (`ibv_wr_send` + `ibv_wr_set_inline_data`) on an RC
    /// or UC QP. [`SendFlags::INLINE`] is implied.
    ///
    /// # Errors
    /// As [`post`](Self::post).
    #[inline]
    pub fn send_inline(&mut self, wr_id: u64, flags: SendFlags, data: &[u8]) -> Result<(), Error> {
        let mut r = Req::new(wr_id, flags, wqe_opcode::SEND);
        r.data = data;
        self.emit::<SEND, true>(&r)
    }

    /// RDMA WRITE of the gather list `sges` to `remote_addr` (`ibv_wr_rdma_write`).
    /// [`SendFlags::INLINE`] is ignored.
    ///
    /// # Errors
    /// As [`post`](Self::post).
    #[inline]
    pub fn rdma_write(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
        sges: &[Sge],
    ) -> Result<(), Error> {
        let mut r = Req::new(wr_id, flags, wqe_opcode::RDMA_WRITE).sges(sges);
        (r.raddr, r.rkey) = (remote_addr, rkey);
        self.emit::<WRITE, false>(&r)
    }

    /// RDMA WRITE of `data` carried in the WQE (`ibv_wr_rdma_write` +
    /// `ibv_wr_set_inline_data`).
    ///
    /// # Errors
    /// As [`post`](Self::post).
    #[inline]
    pub fn rdma_write_inline(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
        data: &[u8],
    ) -> Result<(), Error> {
        let mut r = Req::new(wr_id, flags, wqe_opcode::RDMA_WRITE);
        (r.raddr, r.rkey, r.data) = (remote_addr, rkey, data);
        self.emit::<WRITE, true>(&r)
    }

    /// RDMA READ from `remote_addr` into the scatter list `sges` (`ibv_wr_rdma_read`).
    ///
    /// # Errors
    /// As [`post`](Self::post).
    #[inline]
    pub fn rdma_read(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
        sges: &[Sge],
    ) -> Result<(), Error> {
        let mut r = Req::new(wr_id, flags, wqe_opcode::RDMA_READ).sges(sges);
        (r.raddr, r.rkey) = (remote_addr, rkey);
        self.emit::<READ, false>(&r)
    }

    /// Checks a request of class `CLASS` and writes its WQE: control segment, then datagram or
    /// remote-address (and atomic) segment, then inline data or data segments.
    #[inline(always)]
    fn emit<const CLASS: u8, const INLINE: bool>(&mut self, r: &Req<'_>) -> Result<(), Error> {
        // One test when the class is allowed and the destination matches the QP type.
        let expect = if r.ud.is_some() { UD } else { 0 };
        if (self.refuse & ((1 << CLASS) | UD)) != expect {
            return Err(invalid(if self.refuse & (1 << CLASS) == 0 {
                Invalid::Destination
            } else if CLASS == ATOMIC && self.refuse & NO_ATOMICS != 0 {
                Invalid::AtomicsUnsupported
            } else {
                Invalid::OpcodeForQpType
            }));
        }
        let data_units = if INLINE {
            if r.data.len() > self.max_inline {
                return Err(invalid(Invalid::InlineTooLarge));
            }
            // `(4 + len).div_ceil(16)`, without div_ceil's remainder test.
            (r.data.len() + 19) >> 4
        } else {
            if r.sges.len() > self.max_sge {
                return Err(invalid(Invalid::TooManySge));
            }
            r.sges.len()
        };
        // A UD message is one packet (IBA 9.8.3): at most one MTU. The device would complete
        // a longer one without an error on some paths; it is refused here.
        if r.ud.is_some() {
            let len = if INLINE {
                r.data.len() as u64
            } else {
                r.sges.iter().map(|s| u64::from(s.length)).sum()
            };
            if len > crate::verbs::post::UD_MAX_MESSAGE as u64 {
                return Err(invalid(Invalid::UdMessageTooLong));
            }
        }
        if CLASS == ATOMIC && (r.sges.len() != 1 || r.sges[0].length < 8) {
            return Err(invalid(Invalid::TooManySge));
        }
        if XRC && self.xrc_srqn == NO_SRQN {
            return Err(invalid(Invalid::XrcRemoteSrq));
        }
        if DC && !self.st.dc_set {
            return Err(invalid(Invalid::DcDestination));
        }
        // 16-byte units after the control segment: datagram or XRC segment, then raddr, then
        // atomic. A DCI's address vector comes before RC's segments.
        let x = if XRC {
            16
        } else if DC {
            48
        } else {
            0
        };
        let addr_units = x / 16
            + match (r.ud, CLASS) {
                (Some(_), _) => 3,
                (None, SEND) => 0,
                (None, ATOMIC) => 2,
                (None, _) => 1,
            };
        let ds = 1 + addr_units + data_units;
        // WQEBBs of 4 units (`(ds + 3) / 4`; div_ceil costs a remainder test here).
        let bbs = ((ds + 3) >> 2) as u16;
        self.ring.reserve(bbs)?;

        let cur = self.ring.cur();
        let s0 = self.ring.slot(0);
        let fm_ce_se = (self.fm_ce_se >> ((r.flags.bits() & 7) * 8)) as u8;
        let ctrl = ctrl::word0(cur, r.opcode, ds as u8) | self.qpn_word;
        // A DCI's stream sits in bytes 9–10 of the control segment.
        let stream = if DC { self.st.dc_stream } else { 0 };
        write_ctrl(
            s0,
            ctrl,
            stream | ctrl::FM_CE_SE.put(u64::from(fm_ce_se)) | ctrl::IMM.put(u64::from(r.imm)),
        );
        if XRC {
            write_xrc(s0, self.xrc_srqn);
        }
        if DC {
            write_av(s0, &self.st.dc_av);
        }
        if let Some(ud) = r.ud {
            write_datagram(s0, ud);
        } else if CLASS != SEND {
            // After a DCI's address vector the first WQEBB is full: RC's segments open the
            // second.
            let (seg, at) = if DC {
                (self.ring.slot(1), 0)
            } else {
                (s0, 16 + x)
            };
            write_raddr(seg, at, r.raddr, r.rkey);
            if CLASS == ATOMIC {
                write_atomic(seg, at + RADDR_SEG, r.operands.0, r.operands.1);
            }
        }
        let data = 16 * (1 + addr_units);
        if INLINE {
            write_inline(self.ring.slots(), usize::from(cur), data, r.data);
            self.st.inlined = true;
        } else {
            // A refusal here leaves only unposted slots behind: nothing is published before
            // the ring's producer moves.
            self.write_sges(cur, data, r.sges)?;
        }
        self.ring.commit(r.wr_id, bbs, ctrl);
        Ok(())
    }

    /// Data segments from byte `at` of the WQE at WQEBB `cur` on, or the refusal of a length
    /// the device would misread ([`sge_refused_lengths`]) before anything is written.
    #[inline(always)]
    fn write_sges(&self, cur: u16, at: usize, sges: &[Sge]) -> Result<(), Error> {
        // One SGE right after the other segments of the first WQEBB: the common case.
        if let ([s], true) = (sges, at + 16 <= WQEBB) {
            if (s.length as i32) < 0 {
                return Err(sge_length_refused());
            }
            write_data_seg(self.ring.slots().slot(usize::from(cur)), at, s);
            return Ok(());
        }
        // A DCI's one SGE, in the second WQEBB (after the address vector); `at` is a multiple
        // of 16, so the segment sits in one WQEBB.
        if let ([s], true) = (sges, DC) {
            if (s.length as i32) < 0 {
                return Err(sge_length_refused());
            }
            write_data_seg(
                self.ring.slots().slot(usize::from(cur) + at / WQEBB),
                at % WQEBB,
                s,
            );
            return Ok(());
        }
        if sges.iter().fold(0, |l, s| l | s.length) as i32 >= 0 {
            write_data_list(
                self.ring.slots(),
                usize::from(cur),
                at,
                sges.iter()
                    .map(|s| (codec::data::word0(s.length, s.lkey.raw()), s.addr)),
            );
            return Ok(());
        }
        Err(sge_length_refused())
    }
}

/// The 48-byte datagram segment (address vector) right after the control segment in `s0`,
/// the WQE's first WQEBB. A free function of the slot alone: a call that took the batch would
/// pin the batch in memory.
fn write_datagram(s0: Slot<'_, WQEBB>, ud: &UdDest) {
    let key = datagram::QKEY.put(u64::from(ud.remote_qkey));
    write_av(s0, &av_words(&av_dest(&ud.ah), key, ud.remote_qpn));
}

/// The address-vector fields of `ah`.
#[inline(always)]
pub(crate) fn av_dest(ah: &crate::verbs::qp::AhAttr) -> AvDest {
    AvDest {
        sl: ah.sl,
        src_path_bits: ah.src_path_bits,
        dlid: ah.dlid,
        grh: ah.is_global.then_some(AvGrh {
            traffic_class: ah.grh.traffic_class,
            hop_limit: ah.grh.hop_limit,
            sgid_index: ah.grh.sgid_index,
            flow_label: ah.grh.flow_label,
            dgid: ah.grh.dgid,
        }),
    }
}

/// A data segment for `s` at byte `at` of slot `slot` (16-byte aligned, so in one WQEBB).
#[inline(always)]
fn write_data_seg(slot: Slot<'_, WQEBB>, at: usize, s: &Sge) {
    write_data(slot, at, s.addr, s.length, s.lkey.raw());
}

/// `fm_ce_se` of the request after a UMR: fenced behind it
/// (`MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`, rdma-core's `fm_cache`) unless the request asked for
/// a fence of its own, which wins (rdma-core `_common_wqe_init`).
#[cold]
fn fence_after_umr(fm_ce_se: u8) -> u8 {
    if fm_ce_se & FENCE_MODE_MASK == 0 {
        fm_ce_se | INITIATOR_SMALL_FENCE
    } else {
        fm_ce_se
    }
}

/// [`SendBatch::fence_at`] when nothing waits for a fence.
const NO_FENCE: u32 = u32::MAX;

/// Fences the request whose first WQEBB is `s` behind the UMR before it (its control
/// segment's `fm_ce_se` byte).
#[cold]
#[inline(never)]
fn fence_wqe(s: Slot<'_, WQEBB>) {
    const AT: usize = bareverbs_firmware_cmd::ifc::wqe_ctrl_seg::fm_ce_se.bit / 8;
    s.write8(AT, fence_after_umr(s.read8(AT)));
}

/// The fence-mode bits of `fm_ce_se` (7:5) and rdma-core's `MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`.
const FENCE_MODE_MASK: u8 = 0xe0;
const INITIATOR_SMALL_FENCE: u8 = 1 << 5;

impl<const XRC: bool, const DC: bool> SendBatch<'_, XRC, DC> {
    /// Lays out indirect key `mkey` as the list `sges`, one piece after the other, with
    /// rights `access`, and enables it (`mlx5dv_wr_mr_list`). The QP must have been created
    /// with [`DvSendOpsFlags::MR_LIST`](crate::verbs::DvSendOpsFlags::MR_LIST).
    ///
    /// # Errors
    /// As [`mkey_configure`](Self::mkey_configure).
    pub fn mr_list<H: Hal>(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        mkey: &DvMkey<'_, '_, H>,
        access: AccessFlags,
        sges: &[Sge],
    ) -> Result<(), Error> {
        self.umr(
            crate::verbs::DvSendOpsFlags::MR_LIST,
            wr_id,
            flags,
            mkey,
            &MkeyConf {
                access: Some(access),
                layout: MkeyLayout::List(sges),
            },
        )
    }

    /// Lays out indirect key `mkey` as `repeat_count` rounds over `entries` (each round
    /// takes every entry's `bytes_count` bytes in turn, then moves it on by `bytes_count +
    /// bytes_skip`), with rights `access`, and enables it (`mlx5dv_wr_mr_interleaved`). The QP
    /// must have been created with
    /// [`DvSendOpsFlags::MR_INTERLEAVED`](crate::verbs::DvSendOpsFlags::MR_INTERLEAVED).
    ///
    /// # Errors
    /// As [`mkey_configure`](Self::mkey_configure).
    pub fn mr_interleaved<H: Hal>(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        mkey: &DvMkey<'_, '_, H>,
        access: AccessFlags,
        repeat_count: u32,
        entries: &[MrInterleaved],
    ) -> Result<(), Error> {
        self.umr(
            crate::verbs::DvSendOpsFlags::MR_INTERLEAVED,
            wr_id,
            flags,
            mkey,
            &MkeyConf {
                access: Some(access),
                layout: MkeyLayout::Interleaved {
                    repeat_count,
                    entries,
                },
            },
        )
    }

    /// Configures indirect key `mkey` as `conf` says and enables it
    /// (`mlx5dv_wr_mkey_configure` followed by the access and layout setters). The QP must
    /// have been created with
    /// [`DvSendOpsFlags::MKEY_CONFIGURE`](crate::verbs::DvSendOpsFlags::MKEY_CONFIGURE).
    ///
    /// A layout has at most the key's [`DvMkey::max_entries`] entries and what the QP's
    /// `max_inline_data` holds at 16 bytes each (an interleaved layout one fewer: its header
    /// takes one), as rdma-core bounds it. The next request of the QP is fenced behind this
    /// one.
    ///
    /// # Errors
    /// [`Invalid::SendOpNotEnabled`] on a QP without the operation, [`Invalid::ForeignObject`]
    /// for a key of another PD, [`Invalid::TooManySge`] past the bound above,
    /// [`Invalid::ZeroEntries`] for an empty layout, [`Invalid::AccessFlags`],
    /// [`Invalid::SgeLength`] for a length the entry cannot hold; [`Error::QueueFull`].
    pub fn mkey_configure<H: Hal>(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        mkey: &DvMkey<'_, '_, H>,
        conf: &MkeyConf<'_>,
    ) -> Result<(), Error> {
        self.umr(
            crate::verbs::DvSendOpsFlags::MKEY_CONFIGURE,
            wr_id,
            flags,
            mkey,
            conf,
        )
    }

    #[cold]
    fn umr<H: Hal>(
        &mut self,
        op: crate::verbs::DvSendOpsFlags,
        wr_id: u64,
        flags: SendFlags,
        mkey: &DvMkey<'_, '_, H>,
        conf: &MkeyConf<'_>,
    ) -> Result<(), Error> {
        if self.st.send_ops & op.bits() as u8 == 0 {
            return Err(invalid(Invalid::SendOpNotEnabled));
        }
        if mkey.pdn() != self.st.pdn {
            return Err(invalid(Invalid::ForeignObject));
        }
        let room = (self.max_inline + 4) / 16;
        let max = room.min(usize::from(mkey.max_entries()));
        let mut w = crate::verbs::dv_mkey::build(mkey.rkey(), conf, max)?;
        let bbs = w.units.div_ceil(4) as u16;
        self.ring.reserve(bbs)?;
        let cur = self.ring.cur();
        let mut fm_ce_se = (self.fm_ce_se >> ((flags.bits() & 7) * 8)) as u8;
        if self.fence_at == u32::from(cur) {
            fm_ce_se = fence_after_umr(fm_ce_se);
        }
        let ctrl = ctrl::word0(cur, wqe_opcode::UMR, w.units as u8) | self.qpn_word;
        codec::store(&mut w.bytes, ctrl::OPCODE.byte(), ctrl);
        let word1 = codec::load(&w.bytes, ctrl::IMM.byte()).unwrap_or(0);
        let word1 = word1 & !ctrl::FM_CE_SE.put(0xff) | ctrl::FM_CE_SE.put(u64::from(fm_ce_se));
        codec::store(&mut w.bytes, ctrl::IMM.byte(), word1);
        // Send-queue slots past the last doorbell: the device reads them only after this
        // batch's barrier and doorbell.
        self.ring
            .slots()
            .copy_in(usize::from(cur), 0, &w.bytes[..w.units * 16]);
        self.ring.commit(wr_id, bbs, ctrl);
        self.fence_at = u32::from(self.ring.cur());
        Ok(())
    }
}

impl<H: Hal> Qp<'_, '_, H> {
    /// Runs `f` with a batch of send requests for this QP (rdma-core's `ibv_wr_start` …
    /// `ibv_wr_complete`): the QP is checked once, each [`SendBatch::post`] checks and writes
    /// one request, and when `f` returns one doorbell publishes everything written. Requests
    /// refused inside the batch leave no trace; the others are posted.
    ///
    /// `f` runs with this QP's book read-locked (the batch writes it), and nothing else of the
    /// device's: posting, polling, creating and destroying other QPs are all fine inside it.
    /// Nothing is written to the device if `f` panics.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the QP is not in RTS or SQD; [`Error::NotUp`] for a QP
    /// whose device is gone. `f` is not run then.
    #[inline]
    pub fn send_batch<R>(&mut self, f: impl FnOnce(&mut SendBatch<'_>) -> R) -> Result<R, Error> {
        match self.qp_type() {
            // Its requests name their XRC SRQ: `send_batch_xrc`.
            QpType::XrcIni => Err(invalid(Invalid::XrcRemoteSrq)),
            // No send queue.
            QpType::XrcTgt => Err(invalid(Invalid::OpcodeForQpType)),
            // Its requests name their DC target: `send_batch_dc`.
            QpType::Driver => Err(invalid(Invalid::DcDestination)),
            _ => self.batch(f),
        }
    }

    /// [`send_batch`](Qp::send_batch) for an XRC initiator: every request carries the XRC
    /// segment naming the SRQ [`SendBatch::set_xrc_srqn`] set.
    ///
    /// # Errors
    /// [`Invalid::XrcRemoteSrq`] on a QP that is not an XRC initiator; as
    /// [`send_batch`](Qp::send_batch).
    pub fn send_batch_xrc<R>(
        &mut self,
        f: impl FnOnce(&mut SendBatch<'_, true>) -> R,
    ) -> Result<R, Error> {
        if self.qp_type() != QpType::XrcIni {
            return Err(invalid(Invalid::XrcRemoteSrq));
        }
        self.batch(f)
    }

    /// [`send_batch`](Qp::send_batch) for a DC initiator (rdma-core's `ibv_wr_start` on a
    /// DCI): every request goes to the DC target [`SendBatch::set_dc_addr`] (or
    /// [`SendBatch::set_dc_addr_stream`]) last named, and carries its address vector.
    ///
    /// # Errors
    /// [`Invalid::DcDestination`] on a QP that is not a DCI; as
    /// [`send_batch`](Qp::send_batch).
    pub fn send_batch_dc<R>(
        &mut self,
        f: impl FnOnce(&mut SendBatch<'_, false, true>) -> R,
    ) -> Result<R, Error> {
        if self.qp_type() != QpType::Driver {
            return Err(invalid(Invalid::DcDestination));
        }
        self.batch(f)
    }

    #[inline(always)]
    fn batch<R, const XRC: bool, const DC: bool>(
        &mut self,
        f: impl FnOnce(&mut SendBatch<'_, XRC, DC>) -> R,
    ) -> Result<R, Error> {
        if !matches!(self.state(), QpState::Rts | QpState::Sqd) {
            return Err(invalid(Invalid::QpState));
        }
        let dev = self.device();
        if dev.fatal.load(Ordering::Relaxed) {
            return Err(Error::DeviceFatal);
        }
        let slot = self.book.map(|s| s.read());
        let cap = self.cap();
        let refuse = self.sq.batch.refuse;
        let (Some((book_sq, sq_tail, sq_head)), Some(ring), Some(dbr)) = (
            slot.as_ref()
                .and_then(|g| g.as_ref())
                .and_then(|b| b.send_view()),
            self.buf.as_mut(),
            self.dbr.as_ref(),
        ) else {
            return Err(Error::NotUp);
        };
        let size = self.sq.size();
        // The receive queue, if the QP has one of its own, comes first. Borrowed mutably:
        // `&mut Qp` makes the batch the ring's only writer (inline data is copied with plain
        // stores).
        let Some(shape) = self.sq.shape else {
            return Err(Error::NotUp);
        };
        // Checked again here rather than made from the shape (`slots_mut_of`): that saved 8
        // instructions a batch but cost the batch's loop about 5 a request in spilled
        // registers (64-byte inline SENDs, callgrind).
        let sq = ring.slots_mut::<WQEBB>(shape.offset(), shape.count())?;
        if DC {
            // Each DC batch names its destination before its first request.
            self.sq.batch.dc_set = false;
        }
        self.sq.batch.inlined = false;
        let (cur, fm_ce_se) = (self.sq.cur(), self.sq.fm_ce_se());
        let start = cur;
        let fence_at = if self.sq.fence_next {
            u32::from(cur)
        } else {
            NO_FENCE
        };
        let mut b = SendBatch {
            ring: SendRing::new(sq, book_sq, sq_tail, cur, size),
            qpn_word: self.sq.batch.qpn_word,
            fm_ce_se,
            refuse,
            max_inline: cap.max_inline_data as usize,
            max_sge: cap.max_send_sge as usize,
            xrc_srqn: NO_SRQN,
            st: &mut self.sq.batch,
            fence_at,
        };
        let r = f(&mut b);
        let SendBatch {
            ring, fence_at, st, ..
        } = b;
        let (ring, cur, last_ctrl) = ring.into_parts();
        let inlined = st.inlined;
        // The request written after a UMR is fenced behind it, before the doorbell; with the
        // UMR last, the fence is owed to the QP's next request.
        if fence_at != NO_FENCE {
            self.sq.fence_next = fence_at == u32::from(cur);
            if !self.sq.fence_next {
                fence_wqe(ring.slot(fence_at as usize));
            }
        }
        if last_ctrl != 0 {
            // One WQE in the batch (its index is where the batch began), with inline data:
            // the BlueFlame candidate.
            let lone = inlined && ctrl::WQE_INDEX.get(last_ctrl) as u16 == start;
            self.sq
                .doorbell
                .publish(dev.hal.bar0(), dbr, &ring, cur, last_ctrl, lone);
            // What a software flush completes up to, should the device fail.
            sq_head.store(cur, Ordering::Release);
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use crate::verbs::mr::Lkey;
    use bareverbs_firmware_cmd::ifc::{
        fm_ce_se, wqe_ctrl_seg, wqe_datagram_seg, WqeCtrlSeg, WqeDatagramSeg, INLINE_SEG,
    };
    use bareverbs_firmware_cmd::View;
    use bareverbs_hal::Slots;
    use bareverbs_hal::{Hal, SharedDma};
    use bareverbs_model::SimHal;
    use core::sync::atomic::AtomicU16;

    use super::*;
    use crate::verbs::qp::{AhAttr, GlobalRoute};
    use crate::wq::send_queue::fm_ce_se_table;

    type Dma = <SimHal as Hal>::Dma;

    /// A 4-WQEBB send queue and its book, outside any device.
    fn rings(hal: &SimHal) -> (SharedDma<Dma>, SharedDma<Dma>) {
        (
            hal.dma_alloc(4 * 64, 64).unwrap().share(),
            hal.dma_alloc(4 * 16, 64).unwrap().share(),
        )
    }

    fn batch<'b>(
        sq: &'b mut SharedDma<Dma>,
        book: &'b SharedDma<Dma>,
        tail: &'b AtomicU16,
        st: &'b mut BatchState,
        qp_type: QpType,
        cur: u16,
    ) -> SendBatch<'b> {
        SendBatch {
            ring: SendRing::new(
                sq.slots_mut(0, 4).unwrap(),
                book.slots(0, 4).unwrap(),
                tail,
                cur,
                4,
            ),
            qpn_word: ctrl::QPN.put(0x1234),
            fm_ce_se: fm_ce_se_table(false),
            refuse: if qp_type == QpType::Ud { UD | 0xe } else { 0 },
            max_inline: 200,
            max_sge: 8,
            xrc_srqn: NO_SRQN,
            st,
            fence_at: NO_FENCE,
        }
    }

    /// An XRC initiator's batch over the same rings.
    fn batch_xrc<'b>(
        sq: &'b mut SharedDma<Dma>,
        book: &'b SharedDma<Dma>,
        tail: &'b AtomicU16,
        st: &'b mut BatchState,
    ) -> SendBatch<'b, true> {
        retyped(batch(sq, book, tail, st, QpType::Rc, 0), 1)
    }

    /// A DCI's batch with four streams over the same rings.
    fn batch_dc<'b>(
        sq: &'b mut SharedDma<Dma>,
        book: &'b SharedDma<Dma>,
        tail: &'b AtomicU16,
        st: &'b mut BatchState,
    ) -> SendBatch<'b, false, true> {
        retyped(batch(sq, book, tail, st, QpType::Rc, 0), 4)
    }

    /// `b` as a batch of another kind (XRC, DC) with `dci_streams` streams.
    fn retyped<const XRC: bool, const DC: bool>(
        b: SendBatch<'_>,
        dci_streams: u32,
    ) -> SendBatch<'_, XRC, DC> {
        SendBatch {
            ring: b.ring,
            qpn_word: b.qpn_word,
            fm_ce_se: b.fm_ce_se,
            refuse: b.refuse,
            max_inline: b.max_inline,
            max_sge: b.max_sge,
            xrc_srqn: NO_SRQN,
            st: {
                b.st.dci_streams = dci_streams;
                b.st
            },
            fence_at: NO_FENCE,
        }
    }

    /// Posts one SEND or WRITE, inline or from `sge`, into `b`.
    fn post_one<const XRC: bool, const DC: bool>(
        b: &mut SendBatch<'_, XRC, DC>,
        inline: bool,
        write: bool,
        data: &[u8],
        sge: Sge,
    ) {
        let f = SendFlags::empty();
        match (inline, write) {
            (true, false) => b.send_inline(1, f, data).unwrap(),
            (true, true) => b.rdma_write_inline(1, f, 0x2000, 5, data).unwrap(),
            (false, false) => b.send(1, f, &[sge]).unwrap(),
            (false, true) => b.rdma_write(1, f, 0x2000, 5, &[sge]).unwrap(),
        }
    }

    /// A request with inline data marks its batch as the BlueFlame candidate, behind every
    /// kind of segment before the data (RC, RC WRITE, UD's vector, XRC's segment, DC's vector
    /// and remote address); data segments do not.
    #[test]
    fn a_lone_wqe_is_seen_as_inline_behind_any_segments_before_its_data() {
        let hal = SimHal::synchronous();
        let tail = AtomicU16::new(0);
        let data = [7u8; 12];
        let sge = Sge {
            addr: 0x1000,
            length: 8,
            lkey: Lkey::from_raw(0x77),
        };
        for (inline, write) in [(true, false), (true, true), (false, false), (false, true)] {
            let mut st = BatchState::default();
            let (mut sq, book) = rings(&hal);
            let mut b = batch(&mut sq, &book, &tail, &mut st, QpType::Rc, 0);
            post_one(&mut b, inline, write, &data, sge);
            assert_eq!(b.st.inlined, inline);

            let mut st = BatchState::default();
            let (mut sq, book) = rings(&hal);
            let mut b = batch_xrc(&mut sq, &book, &tail, &mut st);
            b.set_xrc_srqn(0x42).unwrap();
            post_one(&mut b, inline, false, &data, sge);
            assert_eq!(b.st.inlined, inline);

            let mut st = BatchState::default();
            let (mut sq, book) = rings(&hal);
            let mut b = batch_dc(&mut sq, &book, &tail, &mut st);
            let dest = DcDest {
                ah: AhAttr {
                    dlid: 0x11,
                    port_num: 1,
                    ..AhAttr::default()
                },
                dctn: 0x99,
                dc_key: 1,
            };
            b.set_dc_addr(&dest);
            post_one(&mut b, inline, write, &data, sge);
            assert_eq!(b.st.inlined, inline);
        }
        let ud = UdDest {
            ah: AhAttr {
                dlid: 2,
                port_num: 1,
                ..AhAttr::default()
            },
            remote_qpn: 0x55,
            remote_qkey: 0x1111,
        };
        for inline in [true, false] {
            let mut st = BatchState::default();
            let (mut sq, book) = rings(&hal);
            let mut b = batch(&mut sq, &book, &tail, &mut st, QpType::Ud, 0);
            let one = [sge];
            let wr = SendWr {
                wr_id: 1,
                sg_list: if inline { &[] } else { &one },
                inline_data: if inline { &data } else { &[] },
                op: SendOp::Send,
                flags: if inline {
                    SendFlags::INLINE
                } else {
                    SendFlags::empty()
                },
                ud: Some(ud),
            };
            b.post(&wr).unwrap();
            assert_eq!(b.st.inlined, inline);
        }
    }

    #[test]
    fn the_request_after_a_umr_is_fenced_unless_it_asks_for_its_own_fence() {
        let plain = fm_ce_se::CQ_UPDATE;
        assert_eq!(fence_after_umr(plain), plain | INITIATOR_SMALL_FENCE);
        let own = fm_ce_se::FENCE_MODE_SMALL_AND_FENCE | fm_ce_se::CQ_UPDATE;
        assert_eq!(fence_after_umr(own), own);
    }

    #[test]
    fn a_dci_wqe_holds_the_stream_the_av_with_the_dc_key_then_rc_segments() {
        let hal = SimHal::synchronous();
        let (mut sq, book) = rings(&hal);
        let tail = AtomicU16::new(0);
        let dest = DcDest {
            ah: AhAttr {
                dlid: 0x11,
                sl: 3,
                port_num: 1,
                ..AhAttr::default()
            },
            dctn: 0xab_cdef,
            dc_key: 0x0102_0304_0506_0708,
        };
        let mut st = BatchState::default();
        let mut b = batch_dc(&mut sq, &book, &tail, &mut st);
        b.set_dc_addr_stream(&dest, 3).unwrap();
        let sge = Sge {
            addr: 0x1000,
            length: 8,
            lkey: Lkey::from_raw(0x77),
        };
        b.rdma_write(9, SendFlags::SIGNALED, 0xdead_0000, 0x4242, &[sge])
            .unwrap();
        // Control, 48-byte AV (one WQEBB), raddr, one data segment: 6 units, 2 WQEBBs.
        assert_eq!(b.ring.cur(), 2);
        let ring = ring_bytes(b.ring.slots());
        let ctrl = View::<WqeCtrlSeg>::new_checked(&ring[..16]).unwrap();
        assert_eq!(ctrl.get(wqe_ctrl_seg::ds), 6);
        assert_eq!(ctrl.get(wqe_ctrl_seg::dci_stream_channel_id), 3);
        assert_eq!(
            ctrl.get(wqe_ctrl_seg::opcode),
            u64::from(wqe_opcode::RDMA_WRITE)
        );
        assert_eq!(&ring[16..24], &0x0102_0304_0506_0708u64.to_be_bytes());
        let av = View::<WqeDatagramSeg>::new_checked(&ring[16..64]).unwrap();
        assert_eq!(av.get(wqe_datagram_seg::dqp_dct), 0x80ab_cdef);
        assert_eq!(&ring[64..72], &0xdead_0000u64.to_be_bytes());
        assert_eq!(&ring[72..76], &0x4242u32.to_be_bytes());
        assert_eq!(&ring[80..84], &8u32.to_be_bytes());
        assert_eq!(&ring[88..96], &0x1000u64.to_be_bytes());
    }

    /// The 4-slot ring's bytes, read through the batch's own view of it.
    fn ring_bytes(sq: &Slots<'_, WQEBB>) -> [u8; 256] {
        let mut b = [0u8; 256];
        for (k, x) in b.iter_mut().enumerate() {
            *x = sq.slot(k / 64).read8(k % 64);
        }
        b
    }

    /// Every byte of the 4-slot ring set to `v`, through the batch's own view.
    fn fill(sq: &Slots<'_, WQEBB>, v: u8) {
        for k in 0..256 {
            sq.slot(k / 64).write8(k % 64, v);
        }
    }

    fn wr<'a>(op: SendOp, flags: SendFlags) -> SendWr<'a> {
        SendWr {
            wr_id: 7,
            sg_list: &[],
            inline_data: &[],
            op,
            flags,
            ud: None,
        }
    }

    #[test]
    fn an_xrc_request_carries_the_xrc_segment_before_the_remote_address() {
        use bareverbs_firmware_cmd::ifc::{
            wqe_data_seg, wqe_raddr_seg, wqe_xrc_seg, WqeDataSeg, WqeRaddrSeg, WqeXrcSeg,
        };
        let hal = SimHal::synchronous();
        let (mut sq, book) = rings(&hal);
        let tail = AtomicU16::new(0);
        let mut st = BatchState::default();
        let mut b = batch_xrc(&mut sq, &book, &tail, &mut st);
        fill(b.ring.slots(), 0xee);
        let sg = [Sge {
            addr: 0x1_0000_2000,
            length: 300,
            lkey: Lkey::from_raw(0x55),
        }];
        let mut w = wr(
            SendOp::RdmaWrite {
                remote_addr: 0x7_0000_0040,
                rkey: 0x99,
            },
            SendFlags::SIGNALED,
        );
        w.sg_list = &sg;
        // No remote SRQ number yet: refused, nothing written.
        assert_eq!(b.post(&w), Err(invalid(Invalid::XrcRemoteSrq)));
        assert_eq!(ring_bytes(b.ring.slots()), [0xee; 256]);
        assert_eq!(b.set_xrc_srqn(1 << 24), Err(invalid(Invalid::XrcRemoteSrq)));
        b.set_xrc_srqn(0xab_cdef).unwrap();
        b.post(&w).unwrap();
        let bytes = ring_bytes(b.ring.slots());
        let ctrl = View::<WqeCtrlSeg>::new_checked(&bytes[..16]).unwrap();
        // rdma-core 56 qp.c `_mlx5_post_send` (IBV_QPT_XRC_SEND): control, XRC segment,
        // remote address, data: 4 units.
        assert_eq!(ctrl.get(wqe_ctrl_seg::ds), 4);
        let x = View::<WqeXrcSeg>::new_checked(&bytes[16..32]).unwrap();
        assert_eq!(x.get(wqe_xrc_seg::xrc_srqn), 0xab_cdef);
        assert_eq!(&bytes[20..32], &[0u8; 12], "reserved bytes cleared");
        let r = View::<WqeRaddrSeg>::new_checked(&bytes[32..48]).unwrap();
        assert_eq!(r.get(wqe_raddr_seg::raddr), 0x7_0000_0040);
        assert_eq!(r.get(wqe_raddr_seg::rkey), 0x99);
        let d = View::<WqeDataSeg>::new_checked(&bytes[48..64]).unwrap();
        assert_eq!(d.get(wqe_data_seg::byte_count), 300);
        assert_eq!(d.get(wqe_data_seg::addr), 0x1_0000_2000);
        // A SEND: control, XRC segment, data.
        b.send(8, SendFlags::SIGNALED, &sg).unwrap();
        let bytes = ring_bytes(b.ring.slots());
        let ctrl = View::<WqeCtrlSeg>::new_checked(&bytes[64..80]).unwrap();
        assert_eq!(ctrl.get(wqe_ctrl_seg::ds), 3);
        let x = View::<WqeXrcSeg>::new_checked(&bytes[80..96]).unwrap();
        assert_eq!(x.get(wqe_xrc_seg::xrc_srqn), 0xab_cdef);
        let d = View::<WqeDataSeg>::new_checked(&bytes[96..112]).unwrap();
        assert_eq!(d.get(wqe_data_seg::byte_count), 300);
    }

    #[test]
    fn a_ud_request_carries_the_address_vector_with_its_grh() {
        let hal = SimHal::synchronous();
        let (mut sq, book) = rings(&hal);
        let tail = AtomicU16::new(0);
        let mut st = BatchState::default();
        let mut b = batch(&mut sq, &book, &tail, &mut st, QpType::Ud, 0);
        let ud = UdDest {
            ah: AhAttr {
                dlid: 0xbeef,
                sl: 0x1b,
                src_path_bits: 0x85,
                is_global: true,
                grh: GlobalRoute {
                    dgid: core::array::from_fn(|i| 0xa0 + i as u8),
                    flow_label: 0x1_2345,
                    sgid_index: 3,
                    hop_limit: 64,
                    traffic_class: 0x2c,
                },
                ..AhAttr::default()
            },
            remote_qpn: 0xab_cdef,
            remote_qkey: 0x1111_2222,
        };
        let sg = [Sge {
            addr: 0x1_0000_2000,
            length: 300,
            lkey: Lkey::from_raw(0x55),
        }];
        let mut w = wr(SendOp::SendWithImm(0xfeed), SendFlags::SIGNALED);
        w.sg_list = &sg;
        w.ud = Some(ud);
        b.post(&w).unwrap();
        let bytes = ring_bytes(b.ring.slots());
        let ctrl = View::<WqeCtrlSeg>::new_checked(&bytes[..16]).unwrap();
        assert_eq!(
            ctrl.get(wqe_ctrl_seg::opcode),
            u64::from(wqe_opcode::SEND_IMM)
        );
        assert_eq!(ctrl.get(wqe_ctrl_seg::qpn), 0x1234);
        assert_eq!(ctrl.get(wqe_ctrl_seg::wqe_index), 0);
        // Control, 48-byte vector, one data segment: 5 units in 2 WQEBBs.
        assert_eq!(ctrl.get(wqe_ctrl_seg::ds), 5);
        assert_eq!(
            ctrl.get(wqe_ctrl_seg::fm_ce_se),
            u64::from(fm_ce_se::CQ_UPDATE)
        );
        assert_eq!(ctrl.get(wqe_ctrl_seg::imm), 0xfeed);
        let av = View::<WqeDatagramSeg>::new_checked(&bytes[16..64]).unwrap();
        assert_eq!(av.get(wqe_datagram_seg::qkey), 0x1111_2222);
        assert_eq!(av.get(wqe_datagram_seg::dqp_dct), 0x80ab_cdef);
        assert_eq!(av.get(wqe_datagram_seg::stat_rate_sl), 0xb);
        assert_eq!(av.get(wqe_datagram_seg::fl_mlid), 0x05);
        assert_eq!(av.get(wqe_datagram_seg::rlid), 0xbeef);
        assert_eq!(av.get(wqe_datagram_seg::tclass), 0x2c);
        assert_eq!(av.get(wqe_datagram_seg::hop_limit), 64);
        assert_eq!(
            av.get(wqe_datagram_seg::grh_gid_fl),
            (1 << 30) | (3 << 20) | 0x1_2345
        );
        assert_eq!(
            av.bytes(wqe_datagram_seg::rgid),
            &core::array::from_fn::<u8, 16, _>(|i| 0xa0 + i as u8)
        );
        assert_eq!(&bytes[64..68], &300u32.to_be_bytes());
        assert_eq!(&bytes[68..72], &0x55u32.to_be_bytes());
        assert_eq!(&bytes[72..80], &0x1_0000_2000u64.to_be_bytes());
        assert_eq!(b.ring.cur(), 2);
        // The doorbell will carry the control segment's first 8 bytes.
        assert_eq!(&b.ring.last_ctrl().to_be_bytes(), &bytes[..8]);
    }

    #[test]
    fn inline_data_of_every_length_lands_after_its_header_even_across_the_ring_end() {
        let hal = SimHal::synchronous();
        let (mut sq, book) = rings(&hal);
        let tail = AtomicU16::new(3);
        let data: [u8; 200] = core::array::from_fn(|i| i as u8 ^ 0x5a);
        for len in 0..=200usize {
            // Start in the last WQEBB so that every WQE longer than one wraps.
            let mut st = BatchState::default();
            let mut b = batch(&mut sq, &book, &tail, &mut st, QpType::Rc, 3);
            fill(b.ring.slots(), 0xee);
            b.send_inline(9, SendFlags::empty(), &data[..len]).unwrap();
            let raw = ring_bytes(b.ring.slots());
            // Unroll the ring from WQEBB 3.
            let wqe: [u8; 256] = core::array::from_fn(|i| raw[(192 + i) % 256]);
            let ds = usize::from(wqe[7] & 0x3f);
            assert_eq!(ds, 1 + (4 + len).div_ceil(16), "len {len}");
            assert_eq!(
                &wqe[16..20],
                &(INLINE_SEG | len as u32).to_be_bytes(),
                "len {len}"
            );
            assert_eq!(&wqe[20..20 + len], &data[..len], "len {len}");
            // Nothing written past the data (the header's word is whole).
            assert!(
                wqe[20 + len.max(4)..].iter().all(|&x| x == 0xee),
                "len {len}"
            );
        }
        let mut st = BatchState::default();
        let mut b = batch(&mut sq, &book, &tail, &mut st, QpType::Rc, 3);
        assert_eq!(
            b.send_inline(1, SendFlags::empty(), &[0; 201]),
            Err(invalid(Invalid::InlineTooLarge))
        );
    }

    #[test]
    fn data_segments_continue_into_the_next_wqebbs_and_wrap() {
        let hal = SimHal::synchronous();
        let (mut sq, book) = rings(&hal);
        let tail = AtomicU16::new(3);
        let sg: [Sge; 8] = core::array::from_fn(|k| Sge {
            addr: 0x1000 * k as u64 + 1,
            length: 10 + k as u32,
            lkey: Lkey::from_raw(0x100 + k as u32),
        });
        let mut st = BatchState::default();
        let mut b = batch(&mut sq, &book, &tail, &mut st, QpType::Rc, 3);
        b.rdma_write(5, SendFlags::SIGNALED, 0xdead_0000, 0x77, &sg)
            .unwrap();
        let raw = ring_bytes(b.ring.slots());
        let wqe: [u8; 256] = core::array::from_fn(|i| raw[(192 + i) % 256]);
        assert_eq!(usize::from(wqe[7] & 0x3f), 10);
        assert_eq!(&wqe[16..24], &0xdead_0000u64.to_be_bytes());
        assert_eq!(&wqe[24..28], &0x77u32.to_be_bytes());
        for (k, s) in sg.iter().enumerate() {
            let at = 32 + 16 * k;
            assert_eq!(&wqe[at..at + 4], &s.length.to_be_bytes());
            assert_eq!(&wqe[at + 4..at + 8], &s.lkey.raw().to_be_bytes());
            assert_eq!(&wqe[at + 8..at + 16], &s.addr.to_be_bytes());
        }
        // The book remembers the request at its first WQEBB and where it ends.
        assert_eq!(book.read_ne64(3 * 16), 5);
        assert_eq!(book.read_ne16(3 * 16 + 8), 6);
        // One WQEBB is left until the device completes something.
        assert_eq!(b.send(6, SendFlags::empty(), &sg), Err(Error::QueueFull));
        tail.store(6, Ordering::Release);
        b.send(6, SendFlags::empty(), &sg).unwrap();
        assert_eq!(b.ring.cur(), 9);
    }

    #[test]
    fn refused_requests_write_nothing() {
        let hal = SimHal::synchronous();
        let (mut sq, book) = rings(&hal);
        let tail = AtomicU16::new(0);
        let mut st = BatchState::default();
        let mut b = batch(&mut sq, &book, &tail, &mut st, QpType::Ud, 0);
        let read = wr(
            SendOp::RdmaRead {
                remote_addr: 0,
                rkey: 0,
            },
            SendFlags::empty(),
        );
        assert_eq!(b.post(&read), Err(invalid(Invalid::OpcodeForQpType)));
        // UD without a destination.
        assert_eq!(
            b.post(&wr(SendOp::Send, SendFlags::empty())),
            Err(invalid(Invalid::Destination))
        );
        assert!(ring_bytes(b.ring.slots()).iter().all(|&x| x == 0));
        assert_eq!(b.ring.last_ctrl(), 0);
        let mut st = BatchState::default();
        let mut rc = batch(&mut sq, &book, &tail, &mut st, QpType::Rc, 0);
        let mut inline_read = read;
        inline_read.flags = SendFlags::INLINE;
        assert_eq!(
            rc.post(&inline_read),
            Err(invalid(Invalid::OpcodeForQpType))
        );
        let fa = wr(
            SendOp::AtomicFetchAndAdd {
                remote_addr: 0,
                rkey: 0,
                add: 1,
            },
            SendFlags::empty(),
        );
        assert_eq!(rc.post(&fa), Err(invalid(Invalid::TooManySge)));
        assert!(ring_bytes(rc.ring.slots()).iter().all(|&x| x == 0));
        assert_eq!((rc.ring.last_ctrl(), rc.ring.cur()), (0, 0));
    }

    #[test]
    fn flags_map_to_fm_ce_se() {
        let t = fm_ce_se_table(false).to_le_bytes();
        assert_eq!(t[0], 0);
        assert_eq!(t[SendFlags::FENCE.bits() as usize], 0x80);
        assert_eq!(t[SendFlags::SIGNALED.bits() as usize], 0x08);
        assert_eq!(t[SendFlags::SOLICITED.bits() as usize], 0x02);
        assert_eq!(t[7], 0x8a);
        assert!(fm_ce_se_table(true)
            .to_le_bytes()
            .iter()
            .all(|&e| e & 0x08 != 0));
    }
}
