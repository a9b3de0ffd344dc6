//! Posting work (`ibv_post_send`, `ibv_post_recv`): WQEs built in place in the ring, one
//! doorbell record update and one doorbell per call, in Linux's order (WQE → `dma_wmb` →
//! doorbell record → `wmb` → 64-bit UAR write; mlx5-reference 05 §3–6, DESIGN.md §3.2).

use bareverbs_firmware_cmd::ifc::{fm_ce_se, qp_dbr, wqe_opcode, INLINE_SEG, INVALID_LKEY};
use bareverbs_firmware_cmd::Lkey;
use bareverbs_hal::{dma_wmb, wmb, BarOffset, Hal, Mmio};
use bitflags::bitflags;

use crate::error::{Error, Invalid};
use crate::verbs::qp::{AhAttr, Qp};
use crate::verbs::qp_state::{QpState, QpType};

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

/// A UD destination (`wr.ud`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct UdDest {
    /// Address vector.
    pub ah: AhAttr,
    /// Remote QP number.
    pub remote_qpn: u32,
    /// Remote Q_Key (top bit set: use the QP's own).
    pub remote_qkey: u32,
}

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

/// Builds a WQE in the SQ ring starting at WQEBB `bb`, wrapping at the end: 16-byte units are
/// gathered a WQEBB at a time and stored with one bounds check per WQEBB.
struct WqeWriter<'r, H: Hal> {
    ring: &'r bareverbs_hal::SharedDma<H::Dma>,
    base: usize,
    mask: u16,
    bb: u16,
    block: [u64; 8],
    n: usize,
}

impl<'r, H: Hal> WqeWriter<'r, H> {
    fn new(ring: &'r bareverbs_hal::SharedDma<H::Dma>, base: usize, mask: u16, bb: u16) -> Self {
        WqeWriter {
            ring,
            base,
            mask,
            bb,
            block: [0; 8],
            n: 0,
        }
    }

    /// Appends one 16-byte unit given as two big-endian 64-bit words.
    #[inline(always)]
    fn words(&mut self, hi: u64, lo: u64) {
        self.block[self.n] = hi;
        self.block[self.n + 1] = lo;
        self.n += 2;
        if self.n == self.block.len() {
            self.flush();
        }
    }

    /// Appends one 16-byte unit.
    #[inline(always)]
    fn unit(&mut self, b: &[u8; 16]) {
        let mut hi = [0u8; 8];
        let mut lo = [0u8; 8];
        hi.copy_from_slice(&b[..8]);
        lo.copy_from_slice(&b[8..]);
        self.words(u64::from_be_bytes(hi), u64::from_be_bytes(lo));
    }

    /// Stores the units gathered for the current WQEBB (a partial one at the end of a WQE).
    #[inline(always)]
    fn flush(&mut self) {
        if self.n > 0 {
            let at = self.base + usize::from(self.bb & self.mask) * 64;
            // In bounds: `at` is a masked WQEBB of the SQ, which lies inside the ring.
            let _ = self.ring.write_be64s(at, &self.block[..self.n]);
            self.bb = self.bb.wrapping_add(1);
            self.n = 0;
        }
    }
}

/// A data segment as the two words [`WqeWriter::words`] takes.
#[inline(always)]
fn data_seg_words(len: u32, lkey: u32, addr: u64) -> (u64, u64) {
    ((u64::from(len) << 32) | u64::from(lkey), addr)
}

impl<H: Hal> Qp<'_, '_, H> {
    fn check_send(&self, wr: &SendWr<'_>) -> Result<(), Error> {
        if !matches!(self.state(), QpState::Rts | QpState::Sqd) {
            return Err(invalid(Invalid::QpState));
        }
        let ty = self.qp_type();
        let rdma = !matches!(wr.op, SendOp::Send | SendOp::SendWithImm(_));
        let read_or_atomic = matches!(
            wr.op,
            SendOp::RdmaRead { .. }
                | SendOp::AtomicCmpAndSwp { .. }
                | SendOp::AtomicFetchAndAdd { .. }
        );
        if (ty == QpType::Ud && rdma) || (ty == QpType::Uc && read_or_atomic) {
            return Err(invalid(Invalid::OpcodeForQpType));
        }
        if (ty == QpType::Ud) != wr.ud.is_some() {
            return Err(invalid(Invalid::Destination));
        }
        let cap = self.cap();
        if wr.flags.contains(SendFlags::INLINE) {
            if read_or_atomic {
                return Err(invalid(Invalid::OpcodeForQpType));
            }
            if wr.inline_data.len() > cap.max_inline_data as usize {
                return Err(invalid(Invalid::InlineTooLarge));
            }
        } else if wr.sg_list.len() > cap.max_send_sge as usize {
            return Err(invalid(Invalid::TooManySge));
        }
        if matches!(
            wr.op,
            SendOp::AtomicCmpAndSwp { .. } | SendOp::AtomicFetchAndAdd { .. }
        ) && (wr.sg_list.len() != 1 || wr.sg_list[0].length < 8)
        {
            return Err(invalid(Invalid::TooManySge));
        }
        Ok(())
    }

    /// Posts send requests (`ibv_post_send`): each is checked, then built in the ring; one
    /// doorbell rings for all those posted.
    ///
    /// # Errors
    /// [`PostError`] with the index of the first request refused (state, opcode for the QP
    /// type, SGE count, inline size, [`Error::QueueFull`]); those before it are posted.
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let dev = self.device();
        let books = dev.books.read();
        let Some(book) = books.get(&self.qpn().raw()) else {
            return Err(PostError {
                index: 0,
                error: Error::NotUp,
            });
        };
        let (Some(ring), Some(dbr)) = (self.buf.as_ref(), self.dbr.as_ref()) else {
            return Err(PostError {
                index: 0,
                error: Error::NotUp,
            });
        };
        let sq_base = (1usize << self.log_rq) << self.rq_shift;
        let sq_size = 1u16 << self.log_sq_bbs;
        let qpn = self.qpn().raw();
        let mut posted = 0;
        let mut last_ctrl = 0u64;
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            if let Err(error) = self.check_send(wr) {
                result = Err(PostError { index, error });
                break;
            }
            // Size of this WQE in 16-byte units.
            let addr_units = match (self.qp_type(), wr.op) {
                (QpType::Ud, _) => 3,
                (_, SendOp::AtomicCmpAndSwp { .. } | SendOp::AtomicFetchAndAdd { .. }) => 2,
                (_, SendOp::Send | SendOp::SendWithImm(_)) => 0,
                _ => 1,
            };
            let data_units = if wr.flags.contains(SendFlags::INLINE) {
                (4 + wr.inline_data.len()).div_ceil(16)
            } else {
                wr.sg_list.len()
            };
            let ds = 1 + addr_units + data_units;
            let bbs = ds.div_ceil(4) as u16;
            let tail = book.sq_tail.load(core::sync::atomic::Ordering::Acquire);
            if self.sq_cur.wrapping_sub(tail).wrapping_add(bbs) > sq_size {
                result = Err(PostError {
                    index,
                    error: Error::QueueFull,
                });
                break;
            }
            let (opcode, imm) = match wr.op {
                SendOp::Send => (wqe_opcode::SEND, 0),
                SendOp::SendWithImm(i) => (wqe_opcode::SEND_IMM, i),
                SendOp::RdmaWrite { .. } => (wqe_opcode::RDMA_WRITE, 0),
                SendOp::RdmaWriteWithImm { imm, .. } => (wqe_opcode::RDMA_WRITE_IMM, imm),
                SendOp::RdmaRead { .. } => (wqe_opcode::RDMA_READ, 0),
                SendOp::AtomicCmpAndSwp { .. } => (wqe_opcode::ATOMIC_CS, 0),
                SendOp::AtomicFetchAndAdd { .. } => (wqe_opcode::ATOMIC_FA, 0),
            };
            let mut flags = 0u8;
            if wr.flags.contains(SendFlags::SIGNALED) || self.sq_sig_all {
                flags |= fm_ce_se::CQ_UPDATE;
            }
            if wr.flags.contains(SendFlags::SOLICITED) {
                flags |= fm_ce_se::SOLICITED;
            }
            if wr.flags.contains(SendFlags::FENCE) {
                flags |= fm_ce_se::FENCE_MODE_SMALL_AND_FENCE;
            }
            let mut w = WqeWriter::<H>::new(ring, sq_base, sq_size - 1, self.sq_cur);
            let word0 = (u32::from(self.sq_cur) << 8) | u32::from(opcode);
            let word1 = (qpn << 8) | ds as u32;
            // Control segment: opmod/index/opcode, QPN/DS; signature, fm_ce_se, immediate.
            w.words(
                (u64::from(word0) << 32) | u64::from(word1),
                (u64::from(flags) << 32) | u64::from(imm),
            );
            if let Some(ud) = wr.ud {
                let mut av = [0u8; 48];
                av[..4].copy_from_slice(&ud.remote_qkey.to_be_bytes());
                av[8..12].copy_from_slice(&(0x8000_0000 | ud.remote_qpn).to_be_bytes());
                av[12] = ud.ah.sl & 0xf;
                av[13] = ud.ah.src_path_bits & 0x7f;
                av[14..16].copy_from_slice(&ud.ah.dlid.to_be_bytes());
                if ud.ah.is_global {
                    let g = ud.ah.grh;
                    av[26] = g.traffic_class;
                    av[27] = g.hop_limit;
                    let gid_fl =
                        (1u32 << 30) | (u32::from(g.sgid_index) << 20) | (g.flow_label & 0xf_ffff);
                    av[28..32].copy_from_slice(&gid_fl.to_be_bytes());
                    av[32..48].copy_from_slice(&g.dgid);
                }
                for u in av.chunks_exact(16) {
                    let mut b = [0u8; 16];
                    b.copy_from_slice(u);
                    w.unit(&b);
                }
            }
            match wr.op {
                SendOp::RdmaWrite { remote_addr, rkey }
                | SendOp::RdmaWriteWithImm {
                    remote_addr, rkey, ..
                }
                | SendOp::RdmaRead { remote_addr, rkey }
                | SendOp::AtomicCmpAndSwp {
                    remote_addr, rkey, ..
                }
                | SendOp::AtomicFetchAndAdd {
                    remote_addr, rkey, ..
                } => {
                    w.words(remote_addr, u64::from(rkey) << 32);
                }
                _ => {}
            }
            match wr.op {
                SendOp::AtomicCmpAndSwp { compare, swap, .. } => {
                    w.words(swap, compare);
                }
                SendOp::AtomicFetchAndAdd { add, .. } => {
                    w.words(add, 0);
                }
                _ => {}
            }
            if wr.flags.contains(SendFlags::INLINE) {
                // The 4-byte inline header shares its unit with the first 12 bytes of data.
                let data = wr.inline_data;
                let mut bytes = [0u8; 16];
                bytes[..4].copy_from_slice(&(INLINE_SEG | data.len() as u32).to_be_bytes());
                let first = data.len().min(12);
                bytes[4..4 + first].copy_from_slice(&data[..first]);
                w.unit(&bytes);
                for chunk in data[first..].chunks(16) {
                    let mut b = [0u8; 16];
                    b[..chunk.len()].copy_from_slice(chunk);
                    w.unit(&b);
                }
            } else {
                for s in wr.sg_list {
                    let (hi, lo) = data_seg_words(s.length, s.lkey.raw(), s.addr);
                    w.words(hi, lo);
                }
            }
            w.flush();
            book.put_send(self.sq_cur, wr.wr_id, self.sq_cur.wrapping_add(bbs));
            self.sq_cur = self.sq_cur.wrapping_add(bbs);
            last_ctrl = (u64::from(word0) << 32) | u64::from(word1);
            posted += 1;
        }
        if posted > 0 {
            // ORDERING: every WQE is in memory before the doorbell record says it exists.
            dma_wmb();
            dbr.write32(qp_dbr::SND, u32::from(self.sq_cur));
            // ORDERING: the doorbell record before the doorbell (mlx5 post_send / Linux
            // mlx5e_notify_hw).
            wmb();
            if let Some(uar) = dev.uar() {
                let off = uar.bf_register() + self.bf_offset;
                dev.hal.bar0().write64(BarOffset(off), last_ctrl);
                self.bf_offset ^= self.bf_half;
            }
        }
        result
    }

    /// Posts receive requests (`ibv_post_recv`). For UD the first 40 bytes of each buffer
    /// receive the GRH area.
    ///
    /// # Errors
    /// [`PostError`] with the index of the first request refused (state, SGE count,
    /// [`Error::QueueFull`]); those before it are posted.
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let dev = self.device();
        let books = dev.books.read();
        let Some(book) = books.get(&self.qpn().raw()) else {
            return Err(PostError {
                index: 0,
                error: Error::NotUp,
            });
        };
        let (Some(ring), Some(dbr)) = (self.buf.as_ref(), self.dbr.as_ref()) else {
            return Err(PostError {
                index: 0,
                error: Error::NotUp,
            });
        };
        let size = 1u16 << self.log_rq;
        let stride = 1usize << self.rq_shift;
        let mut posted = 0;
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            if self.state() == QpState::Reset {
                result = Err(PostError {
                    index,
                    error: invalid(Invalid::QpState),
                });
                break;
            }
            if wr.sg_list.len() > self.cap().max_recv_sge as usize {
                result = Err(PostError {
                    index,
                    error: invalid(Invalid::TooManySge),
                });
                break;
            }
            let tail = book.rq_tail.load(core::sync::atomic::Ordering::Acquire);
            if self.rq_head.wrapping_sub(tail) >= size {
                result = Err(PostError {
                    index,
                    error: Error::QueueFull,
                });
                break;
            }
            let at = usize::from(self.rq_head & (size - 1)) * stride;
            // In bounds: `at` is a masked slot of the RQ and the SGEs (plus the terminating
            // entry when there is room) fit in its stride (checked against max_recv_sge).
            let seg = |k: usize, (hi, lo): (u64, u64)| {
                ring.write64(at + k * 16, hi);
                ring.write64(at + k * 16 + 8, lo);
            };
            for (k, s) in wr.sg_list.iter().enumerate() {
                seg(k, data_seg_words(s.length, s.lkey.raw(), s.addr));
            }
            if wr.sg_list.len() * 16 < stride {
                seg(wr.sg_list.len(), data_seg_words(0, INVALID_LKEY, 0));
            }
            book.put_recv(self.rq_head, wr.wr_id);
            self.rq_head = self.rq_head.wrapping_add(1);
            posted += 1;
        }
        if posted > 0 {
            // ORDERING: the receive WQEs before the doorbell record that publishes them.
            dma_wmb();
            dbr.write32(qp_dbr::RCV, u32::from(self.rq_head));
        }
        result
    }
}
