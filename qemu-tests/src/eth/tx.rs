//! Transmitting: an SQ's posted WQEs (control segment, Ethernet segment with its inline
//! headers, data or inline-data segments) become frames. The NIC checks the inline headers
//! against the SQ's minimum inline mode, fills the checksums the WQE asks for, cuts LSO
//! sends into MSS-sized TCP segments, pads runts to 60 bytes, counts, loops a frame back to
//! its own function when allowed and puts it on the fabric.

use bareverbs_firmware_cmd::ifc::{
    eth_cs_flags, wqe_ctrl_seg as ctrl, wqe_data_seg, wqe_eth_seg as es, wqe_opcode, CqeOpcode,
    WqeCtrlSeg, WqeDataSeg, WqeEthSeg, ETH_WQE_INSERT_VLAN, INLINE_SEG, INLINE_SEG_BYTE_COUNT_MASK,
};
use bareverbs_firmware_cmd::layout::{Layout, View};
use bareverbs_firmware_cmd::wqe_codec::{self as codec, eth};

use super::packet::{self, ip_proto, Headers};
use super::WqState;
use crate::cqe_write::synd;
use crate::data_path::DataPath;
use crate::dma::AddressSpaceExt;
use crate::sge::Sge;

/// Bytes of a send WQE basic block.
const WQEBB: usize = 64;
/// The shortest frame on the wire, FCS excluded.
const ETH_ZLEN: usize = 60;

/// A send WQE that cannot be executed.
struct Refused(u8);

/// `MLX5_INLINE_MODE_*`: how much of the headers each send WQE inlines.
mod inline_mode {
    pub const L2: u8 = 1;
    pub const IP: u8 = 2;
    pub const TCP_UDP: u8 = 3;
}

impl DataPath<'_> {
    /// Send doorbell on an Ethernet SQ: returns false when `sqn` is not one.
    pub(crate) fn eth_sq_doorbell(&mut self, uar: u32, sqn: u32) -> bool {
        let Some(sq) = self.eth.as_ref().and_then(|e| e.sqs.get(&sqn)) else {
            return false;
        };
        if sq.ring.uar != uar {
            log::warn!(
                "model: SQ {sqn:#x} rung through UAR {uar}, expected {}",
                sq.ring.uar
            );
            return true;
        }
        self.run_eth_sq(sqn);
        true
    }

    /// Executes the SQ's posted WQEs up to its doorbell record's counter.
    pub(crate) fn run_eth_sq(&mut self, sqn: u32) {
        loop {
            let Some(sq) = self.eth.as_ref().and_then(|e| e.sqs.get(&sqn)).cloned() else {
                return;
            };
            if sq.state != WqState::Rdy {
                return;
            }
            let head = match self.dma.read_be32(sq.ring.dbr + 4) {
                Ok(v) => v as u16,
                Err(f) => {
                    self.record_fault(f);
                    return;
                }
            };
            if sq.consumed == head {
                return;
            }
            let index = sq.consumed;
            let mut first = [0u8; WQEBB];
            if let Err(f) = self
                .dma
                .read(sq.ring.wqe_iova(u32::from(index), 0), &mut first)
            {
                self.record_fault(f);
                self.eth_sq_error(sqn, index, 0, synd::LOCAL_QP_OP);
                return;
            }
            let c = View::<WqeCtrlSeg>::new_checked(&first[..16])
                .unwrap_or_else(|_| unreachable!("16 bytes hold a control segment"));
            let ds = c.get(ctrl::ds) as usize;
            let opcode = c.get(ctrl::opcode) as u8;
            let ce = (c.get(ctrl::fm_ce_se) as u8 >> 2) & 3;
            let bbs = (ds * 16).div_ceil(WQEBB).max(1);
            let mut raw = first.to_vec();
            for k in 1..bbs {
                let mut bb = [0u8; WQEBB];
                let at = sq.ring.wqe_iova(u32::from(index) + k as u32, 0);
                if let Err(f) = self.dma.read(at, &mut bb) {
                    self.record_fault(f);
                    self.eth_sq_error(sqn, index, opcode, synd::LOCAL_QP_OP);
                    return;
                }
                raw.extend_from_slice(&bb);
            }
            raw.truncate(ds * 16);
            let result = if c.get(ctrl::qpn) as u32 != sqn || ds == 0 {
                Err(Refused(synd::LOCAL_QP_OP))
            } else {
                match opcode {
                    wqe_opcode::NOP => Ok(()),
                    wqe_opcode::SEND | wqe_opcode::LSO if sq.tis.is_some() => {
                        self.eth_send(&sq, &raw, opcode)
                    }
                    _ => Err(Refused(synd::LOCAL_QP_OP)),
                }
            };
            if let Some(s) = self.eth.as_mut().and_then(|e| e.sqs.get_mut(&sqn)) {
                s.consumed = s.consumed.wrapping_add(bbs as u16);
            }
            match result {
                Ok(()) if ce >= 2 => {
                    let cqe = super::req_cqe(opcode, sqn, index, sq.user_index);
                    self.post_cqe(sq.cqn, cqe, false);
                }
                Ok(()) => {}
                Err(Refused(syndrome)) => {
                    self.eth_sq_error(sqn, index, opcode, syndrome);
                    return;
                }
            }
        }
    }

    /// The SQ moves to error and reports the WQE with an error CQE.
    fn eth_sq_error(&mut self, sqn: u32, index: u16, opcode: u8, syndrome: u8) {
        let Some(sq) = self.eth.as_mut().and_then(|e| e.sqs.get_mut(&sqn)) else {
            return;
        };
        sq.state = WqState::Err;
        let cqn = sq.cqn;
        log::debug!("model: SQ {sqn:#x} WQE {index}: error CQE syndrome {syndrome:#x}");
        let cqe = crate::cqe_write::err_cqe(CqeOpcode::ReqErr, opcode, sqn, index, syndrome, 0);
        self.post_cqe(cqn, cqe, false);
    }

    /// Builds the frame (or, for LSO, the segments) of one send WQE and transmits it.
    fn eth_send(&mut self, sq: &super::Sq, raw: &[u8], opcode: u8) -> Result<(), Refused> {
        // The Ethernet segment follows the control segment.
        let seg_at = WqeCtrlSeg::BYTES;
        let e = raw
            .get(seg_at..seg_at + WqeEthSeg::BYTES)
            .and_then(|b| View::<WqeEthSeg>::new_checked(b).ok())
            .ok_or(Refused(synd::LOCAL_QP_OP))?;
        let hdr = e.get(es::inline_hdr_sz) as u16;
        let hdr_word = codec::load(raw, seg_at + eth::INLINE_HDR_START.byte())
            .ok_or(Refused(synd::LOCAL_QP_OP))?;
        // VLAN insertion replaces the inline header (the `insert` union): the TCI sits where
        // the inline bytes would start.
        let vlan =
            (hdr & ETH_WQE_INSERT_VLAN != 0).then(|| eth::INLINE_HDR_START.get(hdr_word) as u16);
        let inline = if vlan.is_some() { 0 } else { usize::from(hdr) };
        let cs = e.get(es::cs_flags) as u8;
        let mss = e.get(es::mss) as usize;
        // Inline headers start in the Ethernet segment's last two bytes.
        let start = seg_at + es::inline_hdr_start.bit / 8;
        let seg_end = seg_at + WqeEthSeg::BYTES;
        let after_inline = seg_end + inline.saturating_sub(seg_end - start).div_ceil(16) * 16;
        let mut frame = raw
            .get(start..start + inline)
            .ok_or(Refused(synd::LOCAL_QP_OP))?
            .to_vec();
        let mut sges = Vec::new();
        let mut at = after_inline;
        while at + 16 <= raw.len() {
            let seg = &raw[at..at + 16];
            let bc = codec::load(seg, codec::inline::BYTE_COUNT.byte())
                .map_or(0, |w| codec::inline::BYTE_COUNT.get(w) as u32);
            if bc & INLINE_SEG != 0 {
                if !sges.is_empty() {
                    self.gather_into(sq.ring.pd, &mut sges, &mut frame)?;
                }
                let n = (bc & INLINE_SEG_BYTE_COUNT_MASK) as usize;
                let data = raw
                    .get(at + 4..at + 4 + n)
                    .ok_or(Refused(synd::LOCAL_QP_OP))?;
                frame.extend_from_slice(data);
                at += (4 + n).div_ceil(16) * 16;
                continue;
            }
            let d = View::<WqeDataSeg>::new_checked(seg)
                .unwrap_or_else(|_| unreachable!("16 bytes hold a data segment"));
            sges.push(Sge {
                lkey: d.get32(wqe_data_seg::lkey),
                addr: d.get(wqe_data_seg::addr),
                len: d.get32(wqe_data_seg::byte_count),
            });
            at += 16;
        }
        self.gather_into(sq.ring.pd, &mut sges, &mut frame)?;
        if let Some(tci) = vlan {
            if frame.len() < 14 {
                return Err(Refused(synd::LOCAL_LENGTH));
            }
            let tag = [0x81, 0x00, (tci >> 8) as u8, tci as u8];
            frame.splice(12..12, tag);
        }
        let h = Headers::parse(&frame).ok_or(Refused(synd::LOCAL_LENGTH))?;
        if inline < required_inline(&h, sq.min_inline) {
            log::debug!(
                "model: SQ WQE inlines {inline} header bytes, the SQ's mode {} needs more",
                sq.min_inline
            );
            return Err(Refused(synd::LOCAL_QP_OP));
        }
        if opcode == wqe_opcode::LSO && mss > 0 {
            let segs = lso_segments(&frame, &h, inline, mss).ok_or(Refused(synd::LOCAL_LENGTH))?;
            if let Some(e) = self.eth.as_mut() {
                e.work.lso_sends += 1;
                e.work.lso_segments += segs.len() as u64;
            }
            for seg in segs {
                self.eth_transmit(seg);
            }
            return Ok(());
        }
        if cs & (eth_cs_flags::L3_CSUM | eth_cs_flags::L4_CSUM) != 0 {
            if let Some(e) = self.eth.as_mut() {
                e.work.csum_offloads += 1;
            }
        }
        if cs & eth_cs_flags::L3_CSUM != 0 {
            packet::fill_l3_csum(&mut frame, &h);
        }
        if cs & eth_cs_flags::L4_CSUM != 0 {
            packet::fill_l4_csum(&mut frame, &h);
        }
        self.eth_transmit(frame);
        Ok(())
    }

    fn gather_into(
        &mut self,
        pd: u32,
        sges: &mut Vec<Sge>,
        frame: &mut Vec<u8>,
    ) -> Result<(), Refused> {
        self.gather_sges(pd, sges, frame).map_err(Refused)?;
        sges.clear();
        Ok(())
    }

    /// Puts a frame on the wire: padded, counted, looped back when the vport allows, and
    /// handed to the fabric.
    pub(crate) fn eth_transmit(&mut self, mut frame: Vec<u8>) {
        if frame.len() < ETH_ZLEN {
            frame.resize(ETH_ZLEN, 0);
        }
        // A port that is down sends nothing; the WQE still completes.
        if !self.eth_oper_up() {
            return;
        }
        let Some(eth) = self.eth.as_mut() else { return };
        let prio = match frame.get(12..16) {
            Some([0x81, 0x00, pcp, _]) => usize::from(pcp >> 5),
            _ => 0,
        };
        eth.counters.count_tx(&frame, prio);
        eth.work.frames_sent += 1;
        let multicast = frame[0] & 1 != 0;
        let to_self = frame[..6] == eth.vport.permanent_mac;
        let loopback = if multicast {
            !eth.vport.disable_mc_local_lb
        } else {
            to_self && !eth.vport.disable_uc_local_lb
        };
        if loopback {
            eth.counters.local_loopback.add(frame.len());
        }
        let inbox = eth.inbox.clone();
        if let Some(f) = self.fabric.clone() {
            f.send_frame(&inbox, &frame);
        }
        if loopback {
            self.eth_receive(&frame, true);
        }
    }
}

/// Header bytes a WQE must inline for the frame `h` under `mode`.
fn required_inline(h: &Headers, mode: u8) -> usize {
    let l2 = h.l3;
    match mode {
        inline_mode::L2 => l2,
        inline_mode::IP => h.ip.as_ref().map_or(l2, |ip| l2 + ip.len),
        inline_mode::TCP_UDP => match (&h.ip, h.l4) {
            (Some(_), Some(l4)) => l4.off + if l4.proto == ip_proto::TCP { 20 } else { 8 },
            (Some(ip), None) => l2 + ip.len,
            _ => l2,
        },
        _ => 0,
    }
}

/// Cuts a TCP send into segments of `mss` payload bytes behind copies of its `hdr_len` header
/// bytes: IP total length and ID, TCP sequence number and flags (FIN and PSH only on the last,
/// CWR only on the first) and both checksums redone per segment.
fn lso_segments(frame: &[u8], h: &Headers, hdr_len: usize, mss: usize) -> Option<Vec<Vec<u8>>> {
    let ip = h.ip.as_ref()?;
    let l4 = h.l4.filter(|l4| l4.proto == ip_proto::TCP)?;
    if hdr_len < l4.off + 20 || hdr_len > frame.len() {
        return None;
    }
    let payload = &frame[hdr_len..];
    let seq0 = u32::from_be_bytes(frame.get(l4.off + 4..l4.off + 8)?.try_into().ok()?);
    let id0 = u16::from_be_bytes([frame[h.l3 + 4], frame[h.l3 + 5]]);
    let chunks: Vec<&[u8]> = if payload.is_empty() {
        vec![&[][..]]
    } else {
        payload.chunks(mss).collect()
    };
    let n = chunks.len();
    let mut out = Vec::with_capacity(n);
    for (k, chunk) in chunks.into_iter().enumerate() {
        let mut seg = frame[..hdr_len].to_vec();
        seg.extend_from_slice(chunk);
        let l3_len = seg.len() - h.l3;
        if ip.version == 4 {
            seg[h.l3 + 2..h.l3 + 4].copy_from_slice(&(l3_len as u16).to_be_bytes());
            seg[h.l3 + 4..h.l3 + 6].copy_from_slice(&id0.wrapping_add(k as u16).to_be_bytes());
        } else {
            seg[h.l3 + 4..h.l3 + 6].copy_from_slice(&((l3_len - 40) as u16).to_be_bytes());
        }
        let seq = seq0.wrapping_add((k * mss) as u32);
        seg[l4.off + 4..l4.off + 8].copy_from_slice(&seq.to_be_bytes());
        let flags = &mut seg[l4.off + 13];
        if k + 1 < n {
            *flags &= !0x09; // FIN, PSH
        }
        if k > 0 {
            *flags &= !0x80; // CWR
        }
        let sh = Headers::parse(&seg)?;
        packet::fill_l3_csum(&mut seg, &sh);
        packet::fill_l4_csum(&mut seg, &sh);
        out.push(seg);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP/IPv4 frame carrying `payload`, sequence 1000, flags PSH|ACK|FIN.
    fn tcp4(payload: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0];
        let total = 20 + 20 + payload.len();
        f.extend_from_slice(&[
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            9,
            0x40,
            0,
            64,
            6,
        ]);
        f.extend_from_slice(&[0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&[0x30, 0x39, 0, 80, 0, 0, 0x03, 0xe8, 0, 0, 0, 0, 0x50, 0x19]);
        f.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn lso_cuts_mss_segments_with_right_headers() {
        let payload: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        let f = tcp4(&payload);
        let h = Headers::parse(&f).unwrap();
        let segs = lso_segments(&f, &h, 54, 1000).unwrap();
        assert_eq!(segs.len(), 3);
        let mut joined = Vec::new();
        for (k, s) in segs.iter().enumerate() {
            let sh = Headers::parse(s).unwrap();
            assert!(
                packet::l3_ok(s, &sh) && packet::l4_ok(s, &sh),
                "segment {k}"
            );
            let seq = u32::from_be_bytes(s[38..42].try_into().unwrap());
            assert_eq!(seq, 1000 + 1000 * k as u32);
            let id = u16::from_be_bytes([s[18], s[19]]);
            assert_eq!(id, 9 + k as u16);
            let fin_psh = s[47] & 0x09;
            assert_eq!(fin_psh, if k == 2 { 0x09 } else { 0 });
            joined.extend_from_slice(&s[54..]);
        }
        assert_eq!(joined, payload);
        assert_eq!(segs[2].len(), 54 + 500);
    }

    #[test]
    fn the_inline_mode_sets_how_many_header_bytes_a_wqe_carries() {
        let f = crate::eth::packet::tests::udp4(b"x", Some(3));
        let h = Headers::parse(&f).unwrap();
        assert_eq!(required_inline(&h, 0), 0);
        assert_eq!(required_inline(&h, inline_mode::L2), 18);
        assert_eq!(required_inline(&h, inline_mode::IP), 38);
        assert_eq!(required_inline(&h, inline_mode::TCP_UDP), 46);
    }
}
