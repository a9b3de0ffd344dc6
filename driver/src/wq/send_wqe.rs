//! Where a send WQE's segments are written into a send ring (mlx5-reference 05 §3–5; PRM
//! "Send WQE Format"; rdma-core `wqe.h`, `set_*_seg`): the control segment, the XRC segment,
//! the address vector, the remote-address and atomic segments, data segments, inline data,
//! and the Ethernet segment. Each takes plain values (addresses, keys, lengths, counters,
//! prepared words) and stores the big-endian words the codec (`firmware-cmd` `wqe_codec`)
//! places by the `ifc!` layouts. What a request means, which segments it needs and what it
//! may carry are the caller's (`verbs/send_batch.rs`, `eth/txq.rs`).
//!
//! All of them are `#[inline(always)]`: the caller's constants fold into the stores, so a
//! segment costs what a hand-written store would.

use bareverbs_firmware_cmd::ifc::{
    av_grh_gid_fl, wqe_eth_seg, WqeCtrlSeg, WqeEthSeg, EXTENDED_UD_AV, INLINE_SEG,
};
use bareverbs_firmware_cmd::wqe_codec::{self as codec, atomic, ctrl, data, datagram, eth};
use bareverbs_firmware_cmd::wqe_codec::{inline, raddr, xrc};
use bareverbs_firmware_cmd::Layout;
use bareverbs_hal::{Slot, Slots, SlotsMut};

use crate::wq::send_queue::WQEBB;

/// Bytes of the control segment: the segments after it start here.
pub(crate) const CTRL_SEG: usize = WqeCtrlSeg::BYTES;
/// Bytes of the remote-address segment: an atomic segment follows it.
pub(crate) const RADDR_SEG: usize = bareverbs_firmware_cmd::ifc::WqeRaddrSeg::BYTES;
/// Where the Ethernet segment starts: after the control segment.
pub(crate) const ETH_SEG: usize = CTRL_SEG;

/// The control segment in `s0`, the WQE's first WQEBB: `word0` (index, opcode, QPN, DS
/// count: [`ctrl::word0`] with the QPN) and `word1` (stream, `fm_ce_se`, immediate).
#[inline(always)]
pub(crate) fn write_ctrl(s0: Slot<'_, WQEBB>, word0: u64, word1: u64) {
    s0.write64(ctrl::OPCODE.byte(), word0);
    s0.write64(ctrl::IMM.byte(), word1);
}

/// The XRC segment (`xrc_srqn`, 12 reserved bytes) right after the control segment (rdma-core
/// 56 qp.c `_mlx5_post_send`, IBV_QPT_XRC_SEND).
#[inline(always)]
pub(crate) fn write_xrc(s0: Slot<'_, WQEBB>, srqn: u32) {
    s0.write64(
        CTRL_SEG + xrc::XRC_SRQN.byte(),
        xrc::XRC_SRQN.put(u64::from(srqn)),
    );
    s0.write64(CTRL_SEG + 8, 0);
}

/// The 48-byte address vector right after the control segment (UD's datagram segment, a
/// DCI's address vector), as the six words [`av_words`] makes.
#[inline(always)]
pub(crate) fn write_av(s0: Slot<'_, WQEBB>, words: &[u64; 6]) {
    for (k, w) in words.iter().enumerate() {
        s0.write64(CTRL_SEG + 8 * k, *w);
    }
}

/// A destination's global route, as an address vector carries it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AvGrh {
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub sgid_index: u8,
    pub flow_label: u32,
    pub dgid: [u8; 16],
}

/// A destination as an address vector carries it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AvDest {
    pub sl: u8,
    pub src_path_bits: u8,
    pub dlid: u16,
    pub grh: Option<AvGrh>,
}

/// The address vector (`struct mlx5_wqe_av`) to `d` as the six 8-byte words of WQE bytes
/// 16–63: `key` in its first word (UD: the Q_Key and 4 reserved bytes; DC: the access key),
/// `qpn` in `dqp_dct` with the extended-AV flag, the SL, path bits and LID; the RoCE MAC word
/// zero; the traffic class, hop limit, GRH flag, SGID index and flow label; the DGID.
#[inline]
pub(crate) fn av_words(d: &AvDest, key: u64, qpn: u32) -> [u64; 6] {
    let dest = datagram::DQP_DCT.put(u64::from(EXTENDED_UD_AV | qpn))
        | datagram::STAT_RATE_SL.put(u64::from(d.sl & 0xf))
        | datagram::FL_MLID.put(u64::from(d.src_path_bits & 0x7f))
        | datagram::RLID.put(u64::from(d.dlid));
    let (mut grh, mut gid) = (0u64, [0u8; 16]);
    if let Some(g) = d.grh {
        grh = datagram::TCLASS.put(u64::from(g.traffic_class))
            | datagram::HOP_LIMIT.put(u64::from(g.hop_limit))
            | datagram::GRH_GID_FL.put(u64::from(av_grh_gid_fl(true, g.sgid_index, g.flow_label)));
        gid = g.dgid;
    }
    let (hi, lo) = gid.split_at(8);
    let mut w = [0u64; 6];
    w[datagram::QKEY.byte() / 8] = key;
    w[datagram::RLID.byte() / 8] = dest;
    w[datagram::GRH_GID_FL.byte() / 8] = grh;
    w[datagram::RGID_BYTE / 8] = u64::from_be_bytes(hi.try_into().unwrap_or([0; 8]));
    w[datagram::RGID_BYTE / 8 + 1] = u64::from_be_bytes(lo.try_into().unwrap_or([0; 8]));
    w
}

/// The remote-address segment at byte `at` of `seg`.
#[inline(always)]
pub(crate) fn write_raddr(seg: Slot<'_, WQEBB>, at: usize, addr: u64, rkey: u32) {
    seg.write64(at + raddr::RADDR.byte(), raddr::RADDR.put(addr));
    seg.write64(at + raddr::RKEY.byte(), raddr::RKEY.put(u64::from(rkey)));
}

/// The atomic segment at byte `at` of `seg`: the swap (or add) operand and the compare
/// operand.
#[inline(always)]
pub(crate) fn write_atomic(seg: Slot<'_, WQEBB>, at: usize, swap_add: u64, compare: u64) {
    seg.write64(at + atomic::SWAP_ADD.byte(), swap_add);
    seg.write64(at + atomic::COMPARE.byte(), compare);
}

/// A data segment at byte `at` of `slot` (16-byte aligned, so in one WQEBB).
#[inline(always)]
pub(crate) fn write_data(slot: Slot<'_, WQEBB>, at: usize, addr: u64, length: u32, lkey: u32) {
    slot.write64(at + data::BYTE_COUNT.byte(), data::word0(length, lkey));
    slot.write64(at + data::ADDR.byte(), addr);
}

/// Data segments from byte `at` of WQEBB `cur` on, continuing into the next WQEBBs and
/// wrapping at the ring's end; `segs` yields each segment's first word
/// ([`data::word0`]) and address.
#[inline(always)]
pub(crate) fn write_data_list(
    sq: &Slots<'_, WQEBB>,
    cur: usize,
    at: usize,
    segs: impl ExactSizeIterator<Item = (u64, u64)>,
) {
    sq.write_be_units(cur + at / WQEBB, at % WQEBB, segs);
}

/// The inline segment (4-byte header, then the bytes) from byte `at` of the WQE at WQEBB
/// `cur` on, wrapping at the ring's end. Bytes after the data up to the segment's 16-byte end
/// keep what they held: the device reads the header's byte count (rdma-core leaves them
/// too).
#[inline(always)]
pub(crate) fn write_inline(sq: &SlotsMut<'_, WQEBB>, cur: usize, at: usize, bytes: &[u8]) {
    let cur = cur + at / WQEBB;
    let at = at % WQEBB;
    // The header shares its word with the first four bytes (little-endian arithmetic on the
    // word's bytes: the header's big-endian bytes first, then the data; the layout puts the
    // header in the word's first four bytes, checked at compile time below).
    const _: () = assert!(inline::BYTE_COUNT.byte() == 0 && inline::BYTE_COUNT.put(1) == 1 << 32);
    let hdr = u64::from(u32::from_le_bytes(
        (INLINE_SEG | bytes.len() as u32).to_be_bytes(),
    ));
    let s0 = sq.slot(cur);
    if let Some((head, rest)) = bytes.split_first_chunk::<4>() {
        s0.write_bytes8(
            at,
            (hdr | u64::from(u32::from_le_bytes(*head)) << 32).to_le_bytes(),
        );
        let pos = at + 8;
        // Send-queue slots past the last doorbell: the device reads them only after the
        // caller's barrier and doorbell.
        sq.copy_in(cur + pos / WQEBB, pos % WQEBB, rest);
    } else {
        let head = bytes
            .iter()
            .enumerate()
            .fold(0, |v, (i, &x)| v | (u64::from(x) << (8 * i)));
        s0.write_bytes8(at, (hdr | head << 32).to_le_bytes());
    }
}

/// The Ethernet segment's words as [`write_eth_one_bb`] and [`write_eth`] store them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EthSeg {
    /// Checksum offload flags (`eth_cs_flags`).
    pub cs_flags: u8,
    /// Bytes 12–15: the inline header size and its first two bytes, or the VLAN insert type
    /// and the TCI ([`eth::INLINE_HDR_SZ`], [`eth::INLINE_HDR_START`]).
    pub hdr_word: u64,
}

/// A whole Ethernet send WQE of one WQEBB (rdma-core/DPDK's common case): control segment,
/// Ethernet segment with the first `inline` bytes of `head` (at most 18: the first two in the
/// segment, the other sixteen after it, zero past `inline`; `head` holds at least 18 bytes,
/// those past `inline` are not read into the WQE), the data segment (`data`: first word and
/// address, or zeros for none) — eight word stores.
#[inline(always)]
pub(crate) fn write_eth_one_bb(
    bb: Slot<'_, WQEBB>,
    ctrl_word0: u64,
    fm_ce_se: u8,
    seg: EthSeg,
    head: &[u8],
    inline: usize,
    data: (u64, u64),
) {
    bb.write64(ctrl::OPCODE.byte(), ctrl_word0);
    bb.write64(
        ctrl::FM_CE_SE.byte(),
        ctrl::FM_CE_SE.put(u64::from(fm_ce_se)),
    );
    bb.write64(
        ETH_SEG + eth::CS_FLAGS.byte(),
        eth::CS_FLAGS.put(u64::from(seg.cs_flags)),
    );
    bb.write64(ETH_SEG + eth::INLINE_HDR_SZ.byte(), seg.hdr_word);
    let at = ETH_SEG + WqeEthSeg::BYTES;
    if inline <= 2 {
        // Nothing inlined past the segment: the data segment follows it, then zeros.
        bb.write64(at, data.0);
        bb.write64(at + 8, data.1);
        bb.write64(at + 16, 0);
        bb.write64(at + 24, 0);
    } else {
        // Header bytes 2–9 and 10–17 as big-endian words, the bytes past `inline` zeroed.
        let word = |from: usize| {
            let mut b = [0u8; 8];
            if let Some(s) = head.get(from..from + 8) {
                b.copy_from_slice(s);
            }
            let keep = inline.saturating_sub(from).min(8);
            let w = u64::from_be_bytes(b);
            if keep == 8 {
                w
            } else {
                w & !(u64::MAX >> (8 * keep))
            }
        };
        bb.write64(at, word(2));
        bb.write64(at + 8, word(10));
        bb.write64(at + 16, data.0);
        bb.write64(at + 24, data.1);
    }
}

/// An Ethernet send WQE of `bbs` WQEBBs at WQEBB `cur` (it may wrap), built in `scratch`
/// first: control segment, Ethernet segment with `inline` header bytes (the first two in the
/// segment, the rest after it, padded to 16 bytes), then the data segment when `data` has
/// bytes (its first word non-zero).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn write_eth(
    ring: &Slots<'_, WQEBB>,
    cur: usize,
    bbs: usize,
    scratch: &mut [u8],
    ctrl_word0: u64,
    fm_ce_se: u8,
    seg: EthSeg,
    inline: &[u8],
    data: Option<(u64, u64)>,
) {
    let wqe = &mut scratch[..bbs * WQEBB];
    wqe.fill(0);
    codec::store(wqe, ctrl::OPCODE.byte(), ctrl_word0);
    codec::store(
        wqe,
        ctrl::FM_CE_SE.byte(),
        ctrl::FM_CE_SE.put(u64::from(fm_ce_se)),
    );
    codec::store(
        wqe,
        ETH_SEG + eth::CS_FLAGS.byte(),
        eth::CS_FLAGS.put(u64::from(seg.cs_flags)),
    );
    codec::store(wqe, ETH_SEG + eth::INLINE_HDR_SZ.byte(), seg.hdr_word);
    let hdr = ETH_SEG + wqe_eth_seg::inline_hdr_start.bit / 8;
    wqe[hdr..hdr + inline.len()].copy_from_slice(inline);
    if let Some((word0, addr)) = data {
        let units = if inline.len() > 2 {
            (inline.len() - 2).div_ceil(16)
        } else {
            0
        };
        let at = ETH_SEG + WqeEthSeg::BYTES + 16 * units;
        codec::store(wqe, at + data::BYTE_COUNT.byte(), word0);
        codec::store(wqe, at + data::ADDR.byte(), addr);
    }
    // Word stores into the ring, one WQEBB at a time.
    for k in 0..bbs {
        let bb = ring.slot(cur + k);
        for (w, chunk) in wqe[k * WQEBB..(k + 1) * WQEBB].chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            bb.write64(8 * w, u64::from_be_bytes(b));
        }
    }
}

#[cfg(test)]
mod tests {
    //! Golden bytes against plain memory (no device): each writer's words land where the
    //! `ifc!` layouts put the fields, junk-prefilled bytes prove the rest is written.
    use super::*;
    use bareverbs_firmware_cmd::ifc::{
        eth_cs_flags, wqe_ctrl_seg, wqe_data_seg, wqe_datagram_seg, wqe_opcode, wqe_raddr_seg,
        WqeDataSeg, WqeDatagramSeg, WqeRaddrSeg,
    };
    use bareverbs_firmware_cmd::View;
    use bareverbs_hal::{Hal, SharedDma};
    use bareverbs_model::SimHal;

    type Dma = <SimHal as Hal>::Dma;

    fn ring(hal: &SimHal, bbs: usize) -> SharedDma<Dma> {
        let mut m = hal.dma_alloc(bbs * WQEBB, 64).unwrap();
        m.as_mut_slice().fill(0xa5);
        m.share()
    }

    fn bytes(r: &SharedDma<Dma>, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        r.read_bytes(0, &mut b).unwrap();
        b
    }

    #[test]
    fn control_remote_address_atomic_and_data_segments_land_on_their_fields() {
        let hal = SimHal::synchronous();
        let r = ring(&hal, 1);
        let s = r.slots::<WQEBB>(0, 1).unwrap();
        let w0 = ctrl::word0(0x1234, wqe_opcode::ATOMIC_CS, 4) | ctrl::QPN.put(0xabcdef);
        write_ctrl(s.slot(0), w0, ctrl::word1(0, 0x08, 0xfeed_beef));
        write_raddr(s.slot(0), CTRL_SEG, 0x1122_3344_5566_7788, 0x99aa_bbcc);
        write_atomic(s.slot(0), CTRL_SEG + RADDR_SEG, 7, 9);
        write_data(s.slot(0), 48, 0xdead_0000_beef, 8, 0x4242);
        let b = bytes(&r, WQEBB);
        // Against the C structs (rdma-core mlx5dv.h): `mlx5_wqe_ctrl_seg` (opmod, index 1-2,
        // opcode 3, QPN 4-6, DS 7, signature 8, stream 9-10, fm_ce_se 11, imm 12-15),
        // `mlx5_wqe_raddr_seg` (raddr, rkey, reserved), `mlx5_wqe_atomic_seg`,
        // `mlx5_wqe_data_seg` (byte_count, lkey, addr).
        let want: [u8; 64] = [
            0x00,
            0x12,
            0x34,
            wqe_opcode::ATOMIC_CS,
            0xab,
            0xcd,
            0xef,
            0x04, //
            0x00,
            0x00,
            0x00,
            0x08,
            0xfe,
            0xed,
            0xbe,
            0xef, //
            0x11,
            0x22,
            0x33,
            0x44,
            0x55,
            0x66,
            0x77,
            0x88, //
            0x99,
            0xaa,
            0xbb,
            0xcc,
            0x00,
            0x00,
            0x00,
            0x00, //
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            7,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            9, //
            0x00,
            0x00,
            0x00,
            0x08,
            0x00,
            0x00,
            0x42,
            0x42, //
            0x00,
            0x00,
            0xde,
            0xad,
            0x00,
            0x00,
            0xbe,
            0xef, //
        ];
        assert_eq!(b, want);
        let c = View::<WqeCtrlSeg>::new_checked(&b[..16]).unwrap();
        assert_eq!(c.get32(wqe_ctrl_seg::wqe_index), 0x1234);
        assert_eq!(
            c.get32(wqe_ctrl_seg::opcode),
            u32::from(wqe_opcode::ATOMIC_CS)
        );
        assert_eq!(c.get32(wqe_ctrl_seg::qpn), 0xabcdef);
        assert_eq!(c.get32(wqe_ctrl_seg::ds), 4);
        assert_eq!(c.get32(wqe_ctrl_seg::fm_ce_se), 0x08);
        assert_eq!(c.get32(wqe_ctrl_seg::imm), 0xfeed_beef);
        let ra = View::<WqeRaddrSeg>::new_checked(&b[16..32]).unwrap();
        assert_eq!(ra.get(wqe_raddr_seg::raddr), 0x1122_3344_5566_7788);
        assert_eq!(ra.get32(wqe_raddr_seg::rkey), 0x99aa_bbcc);
        assert_eq!(b[28..32], [0; 4], "the raddr segment's reserved word");
        assert_eq!(b[32..48], [0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 9]);
        let d = View::<WqeDataSeg>::new_checked(&b[48..64]).unwrap();
        assert_eq!(d.get32(wqe_data_seg::byte_count), 8);
        assert_eq!(d.get32(wqe_data_seg::lkey), 0x4242);
        assert_eq!(d.get(wqe_data_seg::addr), 0xdead_0000_beef);
    }

    #[test]
    fn an_address_vector_carries_the_destination_and_its_global_route() {
        let d = AvDest {
            sl: 0x13,
            src_path_bits: 0xff,
            dlid: 0xbeef,
            grh: Some(AvGrh {
                traffic_class: 0x20,
                hop_limit: 64,
                sgid_index: 3,
                flow_label: 0xabcde,
                dgid: core::array::from_fn(|i| i as u8 + 1),
            }),
        };
        let w = av_words(&d, datagram::QKEY.put(0x1111_2222), 0x00ab_cdef);
        let mut b = [0u8; WqeDatagramSeg::BYTES];
        for (k, x) in w.iter().enumerate() {
            b[8 * k..8 * k + 8].copy_from_slice(&x.to_be_bytes());
        }
        let v = View::<WqeDatagramSeg>::new_checked(&b[..]).unwrap();
        assert_eq!(v.get32(wqe_datagram_seg::qkey), 0x1111_2222);
        assert_eq!(
            v.get32(wqe_datagram_seg::dqp_dct),
            EXTENDED_UD_AV | 0x00ab_cdef
        );
        assert_eq!(
            v.get32(wqe_datagram_seg::stat_rate_sl),
            0x3,
            "the SL's 4 bits"
        );
        assert_eq!(v.get32(wqe_datagram_seg::fl_mlid), 0x7f, "7 path bits");
        assert_eq!(v.get32(wqe_datagram_seg::rlid), 0xbeef);
        assert_eq!(v.get32(wqe_datagram_seg::tclass), 0x20);
        assert_eq!(v.get32(wqe_datagram_seg::hop_limit), 64);
        assert_eq!(
            v.get32(wqe_datagram_seg::grh_gid_fl),
            av_grh_gid_fl(true, 3, 0xabcde)
        );
        assert_eq!(b[32..48], d.grh.unwrap().dgid);
        let local = av_words(&AvDest { grh: None, ..d }, 0, 1);
        assert_eq!((local[3], local[4], local[5]), (0, 0, 0), "no GRH: zeros");
    }

    /// The same Ethernet WQE through both writers: the one-WQEBB fast path and the general
    /// one that builds in scratch memory.
    #[test]
    fn both_ethernet_writers_lay_out_the_same_wqe_and_zero_what_is_not_inlined() {
        let hal = SimHal::synchronous();
        let head: [u8; 160] = core::array::from_fn(|i| 0x40 + i as u8);
        for inline in [0usize, 2, 3, 9, 10, 14, 17, 18] {
            let seg = EthSeg {
                cs_flags: eth_cs_flags::L3_CSUM | eth_cs_flags::L4_CSUM,
                hdr_word: eth::INLINE_HDR_SZ.put(inline as u64)
                    | eth::INLINE_HDR_START.put(u64::from(u16::from_be_bytes([head[0], head[1]]))),
            };
            let w0 = ctrl::word0(5, wqe_opcode::SEND, 3) | ctrl::QPN.put(0x77);
            let data = (data::word0(100, 0x1234), 0xaaaa_0000);
            let fast = ring(&hal, 1);
            let s = fast.slots::<WQEBB>(0, 1).unwrap();
            write_eth_one_bb(s.slot(0), w0, 0x08, seg, &head, inline, data);
            let general = ring(&hal, 1);
            let g = general.slots::<WQEBB>(0, 1).unwrap();
            let mut scratch = [0u8; 3 * WQEBB];
            write_eth(
                &g,
                0,
                1,
                &mut scratch,
                w0,
                0x08,
                seg,
                &head[..inline],
                Some(data),
            );
            let (a, b) = (bytes(&fast, WQEBB), bytes(&general, WQEBB));
            assert_eq!(a, b, "inline {inline}");
            // Ethernet segment: checksum flags, inline size, the first two header bytes.
            // mlx5dv.h `mlx5_wqe_eth_seg` after the 16-byte control segment: cs_flags at 4,
            // inline_hdr_sz at 12-13, inline_hdr_start at 14-15.
            assert_eq!(a[20], 0xc0);
            assert_eq!(a[28..30], (inline as u16).to_be_bytes());
            let e = View::<WqeEthSeg>::new_checked(&a[16..32]).unwrap();
            assert_eq!(e.get32(wqe_eth_seg::cs_flags), 0xc0);
            assert_eq!(e.get32(wqe_eth_seg::inline_hdr_sz), inline as u32);
            assert_eq!(a[30..32], head[..2]);
            // The rest of the inline header, zero past it, then the data segment.
            let rest = inline.saturating_sub(2);
            let data_at = if inline > 2 { 48 } else { 32 };
            if inline > 2 {
                assert_eq!(a[32..32 + rest], head[2..inline]);
                assert!(a[32 + rest..48].iter().all(|&x| x == 0), "inline {inline}");
            }
            let d = View::<WqeDataSeg>::new_checked(&a[data_at..data_at + 16]).unwrap();
            assert_eq!(d.get32(wqe_data_seg::byte_count), 100);
            assert_eq!(d.get32(wqe_data_seg::lkey), 0x1234);
            assert_eq!(d.get(wqe_data_seg::addr), 0xaaaa_0000);
            assert!(a[data_at + 16..].iter().all(|&x| x == 0));
        }
    }
}
