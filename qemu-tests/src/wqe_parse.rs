//! Where the model reads a WQE: a send WQE fetched from a send queue (basic block by basic
//! block, the ring may wrap inside it) and parsed through the data-path codec
//! (`firmware-cmd` `wqe_codec`) into what the requester needs; a receive WQE's scatter list.

use bareverbs_firmware_cmd::ifc::{
    fm_ce_se, wqe_data_seg, wqe_opcode, WqeAtomicSeg, WqeCtrlSeg, WqeDataSeg, WqeDatagramSeg,
    WqeInlineSeg, WqeRaddrSeg, WqeXrcSeg, INLINE_SEG, SEND_WQEBB_NUM_DS, SEND_WQE_BB,
};
use bareverbs_firmware_cmd::layout::{Layout, View};
use bareverbs_firmware_cmd::wqe_codec::{self as codec, ctrl, datagram, inline, raddr, xrc};

use crate::data_path::DataPath;
use crate::dma::DmaFault;
use crate::qp::{Qp, ServiceType};
use crate::sge::{Sge, SgeList};

/// Why a send WQE could not be taken.
pub(crate) enum WqeFault {
    /// Its basic blocks could not be read: the queue cannot go on (a catastrophic error).
    Fetch(DmaFault),
    /// It was read and does not parse: a local QP operation error, completed as such.
    Malformed,
    /// It is a UMR WQE (on a user QP: `mlx5dv_wr_mr_list` and friends), which `umr.rs`
    /// executes.
    Umr,
}

impl From<DmaFault> for WqeFault {
    fn from(f: DmaFault) -> Self {
        WqeFault::Fetch(f)
    }
}

/// The largest send WQE: `ds` is six bits of 16-byte units, so 63 units in 16 basic blocks.
pub(crate) const MAX_SEND_WQE: usize = 16 * 64;

/// A parsed send WQE; inline data stays in the bytes it was read into.
#[derive(Default)]
pub(crate) struct SendWqe<'a> {
    pub(crate) opcode: u8,
    pub(crate) wqe_index: u16,
    pub(crate) bbs: u16,
    pub(crate) signaled: bool,
    pub(crate) solicited: bool,
    pub(crate) imm: u32,
    pub(crate) raddr: u64,
    pub(crate) rkey: u32,
    pub(crate) swap_add: u64,
    pub(crate) compare: u64,
    pub(crate) ud_dqpn: u32,
    pub(crate) ud_qkey: u32,
    /// Service level from the UD address vector.
    pub(crate) ud_sl: u8,
    /// Destination LID from the UD address vector.
    pub(crate) ud_rlid: u16,
    /// The UD address vector's global route, when its GRH flag is set.
    pub(crate) ud_grh: Option<AvGrh>,
    pub(crate) inline: Option<&'a [u8]>,
    pub(crate) sges: SgeList,
    /// The gather list's bytes, summed as it is parsed.
    pub(crate) sge_bytes: u64,
    /// The XRC segment's `xrc_srqn` (XRC initiator QPs).
    pub(crate) xrc_srqn: Option<u32>,
    /// DCI: the address vector's DC access key (the first 8 bytes of `mlx5_av`, where UD has
    /// its Q_Key) and the control segment's stream (`dci_stream_channel_id`).
    pub(crate) dc_key: u64,
    pub(crate) dci_stream: u16,
    /// The control segment's fence mode (`fm_ce_se` bits 7:5).
    pub(crate) fence_mode: u8,
}

/// The global route of a UD address vector (`mlx5_av` bytes 26–47).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AvGrh {
    pub(crate) tclass: u8,
    pub(crate) hop_limit: u8,
    pub(crate) flow_label: u32,
    pub(crate) sgid_index: u8,
    pub(crate) dgid: [u8; 16],
}

/// The stream a DCI request runs on: the low `log_num_dci_stream_channels` bits of its control
/// segment's `dci_stream_channel_id` (0 on any other QP). Hardware takes any id: perftest
/// (src/perftest_resources.c, built with rdma-core's DCS) posts ids 0, 1, 2, ... through
/// `mlx5dv_wr_set_dc_addr_stream` on a DCI created without streams (its mask
/// `0xffffffff >> (32 - 0)` is all ones on x86), and its DC tests run on ConnectX; so an id
/// past the DCI's streams is not an error. Which channel such an id lands on is not in public
/// sources: the low bits is this model's choice (with one stream, every id is stream 0).
pub(crate) fn dci_channel(qp: &Qp, id: u16) -> u16 {
    qp.dci.as_ref().map_or(0, |d| {
        let channels = 1u32 << d.log_channels.min(16);
        (u32::from(id) & (channels - 1)) as u16
    })
}

impl DataPath<'_> {
    /// Reads the WQE at `qp`'s send queue head into `buf` (basic block by basic block: the
    /// ring may wrap inside it) and parses it.
    /// Reads the WQE at `qp`'s send queue head into `buf` (basic block by basic block: the
    /// ring may wrap inside it) and parses it into `w` (a blank [`SendWqe::default`]: filled in
    /// place, as a returned WQE was copied three times on its way, about 90 instructions).
    pub(crate) fn read_send_wqe<'a>(
        &self,
        qp: &Qp,
        buf: &'a mut [u8],
        w: &mut SendWqe<'a>,
    ) -> Result<(), WqeFault> {
        let mask = (1u16 << qp.log_sq_size) - 1;
        let bb = |i: u16| qp.buf_iova(qp.sq_offset() + u64::from(i & mask) * SEND_WQE_BB as u64);
        self.dma.read(bb(qp.sq_consumed), &mut buf[..SEND_WQE_BB])?;
        // The control segment's opcode and size, through the codec as the parse below.
        let w0 = codec::load(buf, ctrl::OPCODE.byte()).ok_or(WqeFault::Malformed)?;
        if ctrl::OPCODE.get(w0) as u8 == wqe_opcode::UMR {
            return Err(WqeFault::Umr);
        }
        let ds = ctrl::DS.get(w0) as u16;
        if ds == 0 {
            return Err(WqeFault::Malformed);
        }
        let bbs = ds.div_ceil(SEND_WQEBB_NUM_DS as u16);
        for k in 1..bbs {
            let at = usize::from(k) * SEND_WQE_BB;
            self.dma.read(
                bb(qp.sq_consumed.wrapping_add(k)),
                &mut buf[at..at + SEND_WQE_BB],
            )?;
        }
        let raw: &'a [u8] = buf
            .get(..usize::from(bbs) * SEND_WQE_BB)
            .ok_or(WqeFault::Malformed)?;
        Self::parse_send_wqe_into(qp, raw, bbs, w).ok_or(WqeFault::Malformed)
    }

    /// The send WQE in `raw` (`bbs` basic blocks, read from `qp`'s send queue), or `None` when
    /// its segments do not parse.
    #[cfg(test)]
    pub(crate) fn parse_send_wqe<'a>(qp: &Qp, raw: &'a [u8], bbs: u16) -> Option<SendWqe<'a>> {
        let mut w = SendWqe::default();
        Self::parse_send_wqe_into(qp, raw, bbs, &mut w)?;
        Some(w)
    }

    /// Parses the send WQE in `raw` (`bbs` basic blocks, read from `qp`'s send queue) into a
    /// blank `w`; `None` when its segments do not parse.
    pub(crate) fn parse_send_wqe_into<'a>(
        qp: &Qp,
        raw: &'a [u8],
        bbs: u16,
        w: &mut SendWqe<'a>,
    ) -> Option<()> {
        // Every field through the data-path codec (`wqe_codec`), which places it by the
        // segment layouts; a segment cut off by the WQE's own size (`ds`) does not parse.
        let w0 = codec::load(raw, ctrl::OPCODE.byte())?;
        let ds = ctrl::DS.get(w0) as usize;
        let raw = raw.get(..ds * 16)?;
        let word = |at: usize| codec::load(raw, at);
        let w1 = word(ctrl::IMM.byte())?;
        let opcode = ctrl::OPCODE.get(w0) as u8;
        let flags = ctrl::FM_CE_SE.get(w1) as u8;
        w.opcode = opcode;
        w.wqe_index = ctrl::WQE_INDEX.get(w0) as u16;
        w.bbs = bbs;
        w.signaled = flags & fm_ce_se::CQ_UPDATE != 0;
        w.solicited = flags & fm_ce_se::SOLICITED != 0;
        w.imm = ctrl::IMM.get(w1) as u32;
        w.dci_stream = dci_channel(qp, ctrl::STREAM.get(w1) as u16);
        w.fence_mode = flags >> 5;
        let mut off = WqeCtrlSeg::BYTES;
        // An XRC initiator's WQEs carry the XRC segment right after the control segment
        // (rdma-core 56 providers/mlx5/qp.c `_mlx5_post_send`, IBV_QPT_XRC_SEND; Linux 6.12
        // qp.c `sq_overhead` counts it for IB_QPT_XRC_INI); then come RC's segments.
        if qp.st == ServiceType::Xrc {
            let x = word(off + xrc::XRC_SRQN.byte())?;
            w.xrc_srqn = Some(xrc::XRC_SRQN.get(x) as u32 & 0xff_ffff);
            off += WqeXrcSeg::BYTES;
        }
        if matches!(qp.st, ServiceType::Ud | ServiceType::Dci) {
            if raw.len() < off + WqeDatagramSeg::BYTES {
                return None;
            }
            // A DCI's address vector holds the DC access key where UD's holds the Q_Key
            // (rdma-core 56 mlx5dv.h `struct mlx5_wqe_av`: `key.dc_key`), and the target DCT's
            // number in `dqp_dct` (qp.c `mlx5_send_wr_set_dc_addr`).
            let key = word(off + datagram::QKEY.byte())?;
            let dest = word(off + datagram::RLID.byte())?;
            let grh = word(off + datagram::GRH_GID_FL.byte())?;
            w.dc_key = key;
            w.ud_qkey = datagram::QKEY.get(key) as u32;
            w.ud_dqpn = datagram::DQP_DCT.get(dest) as u32 & 0x00ff_ffff;
            w.ud_sl = datagram::STAT_RATE_SL.get(dest) as u8 & 0xf;
            w.ud_rlid = datagram::RLID.get(dest) as u16;
            // grh_gid_fl: bit 30 says a GRH follows; source GID index 27:20, flow label 19:0.
            let gid_fl = datagram::GRH_GID_FL.get(grh) as u32;
            if gid_fl & (1 << 30) != 0 {
                let at = off + datagram::RGID_BYTE;
                let dgid: [u8; 16] = raw.get(at..at + 16)?.try_into().ok()?;
                w.ud_grh = Some(AvGrh {
                    tclass: datagram::TCLASS.get(grh) as u8,
                    hop_limit: datagram::HOP_LIMIT.get(grh) as u8,
                    flow_label: gid_fl & 0xf_ffff,
                    sgid_index: (gid_fl >> 20) as u8,
                    dgid,
                });
            }
            off += WqeDatagramSeg::BYTES;
        }
        if qp.st != ServiceType::Ud
            && matches!(
                opcode,
                wqe_opcode::RDMA_WRITE
                    | wqe_opcode::RDMA_WRITE_IMM
                    | wqe_opcode::RDMA_READ
                    | wqe_opcode::ATOMIC_CS
                    | wqe_opcode::ATOMIC_FA
            )
        {
            let r = word(off + raddr::RKEY.byte())?;
            w.raddr = raddr::RADDR.get(word(off + raddr::RADDR.byte())?);
            w.rkey = raddr::RKEY.get(r) as u32;
            off += WqeRaddrSeg::BYTES;
            if matches!(opcode, wqe_opcode::ATOMIC_CS | wqe_opcode::ATOMIC_FA) {
                w.swap_add = word(off + codec::atomic::SWAP_ADD.byte())?;
                w.compare = word(off + codec::atomic::COMPARE.byte())?;
                off += WqeAtomicSeg::BYTES;
            }
        }
        // Inline data or data segments: the inline header's top bit tells them apart.
        if let Some(h) = word(off + inline::BYTE_COUNT.byte()) {
            let hdr = inline::BYTE_COUNT.get(h) as u32;
            if hdr & INLINE_SEG != 0 {
                let n = (hdr & !INLINE_SEG) as usize;
                let at = off + WqeInlineSeg::BYTES;
                w.inline = Some(raw.get(at..at + n)?);
                return Some(());
            }
        }
        while let (Some(w0), Some(addr)) = (
            word(off + codec::data::LKEY.byte()),
            word(off + codec::data::ADDR.byte()),
        ) {
            let lkey = codec::data::LKEY.get(w0) as u32;
            let len = codec::data::BYTE_COUNT.get(w0) as u32;
            if lkey == bareverbs_firmware_cmd::ifc::INVALID_LKEY && len == 0 {
                break;
            }
            w.sges.push(Sge { lkey, addr, len });
            w.sge_bytes += u64::from(len);
            off += WqeDataSeg::BYTES;
        }
        Some(())
    }

    /// The scatter list of a receive WQE: data segments up to the first with
    /// [`INVALID_LKEY`](bareverbs_firmware_cmd::ifc::INVALID_LKEY) or the end of the WQE.
    pub(crate) fn recv_sges(raw: &[u8]) -> SgeList {
        let mut sges = SgeList::new();
        for seg in raw.chunks_exact(16) {
            let Ok(d) = View::<WqeDataSeg>::new_checked(seg) else {
                break;
            };
            let lkey = d.get32(wqe_data_seg::lkey);
            if lkey == bareverbs_firmware_cmd::ifc::INVALID_LKEY {
                break;
            }
            sges.push(Sge {
                lkey,
                addr: d.get(wqe_data_seg::addr),
                len: d.get32(wqe_data_seg::byte_count),
            });
        }
        sges
    }
}
