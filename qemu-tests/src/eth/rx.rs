//! Receiving a frame: the MTU and runt checks, steering to TIRs, RSS to an RQ, the frame
//! written into the RQ's next WQE (VLAN stripped unless the RQ disables it) and its CQE:
//! byte count, WQE counter, flow tag, the RSS hash, the L3/L4 types, the checksum of
//! everything after the L2 header, and the L3/L4-checksum-good flags.

use bareverbs_firmware_cmd::cqe_repr::CqeRepr;
use bareverbs_firmware_cmd::ifc::CqeOpcode;

use super::packet::{self, ethertype, ip_proto, Headers};
use super::{steering, TirDispatch, WqState};
use crate::data_path::DataPath;
use crate::dma::AddressSpaceExt;

/// `cqe.hds_ip_ext` flags (`CQE_L2_OK` … `CQE_L4_OK`).
const CQE_L2_OK: u8 = 1 << 0;
const CQE_L3_OK: u8 = 1 << 1;
const CQE_L4_OK: u8 = 1 << 2;

/// What the TIR adds to the CQE.
#[derive(Clone, Copy, Debug, Default)]
struct RxMeta {
    hash: u32,
    hash_type: u8,
    flow_tag: u32,
}

impl DataPath<'_> {
    /// Frames other HCAs left while this one was busy.
    pub(crate) fn drain_eth_inbox(&mut self) {
        let Some(inbox) = self.eth.as_ref().map(|e| e.inbox.clone()) else {
            return;
        };
        loop {
            let frame = inbox.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
            let Some(frame) = frame else { break };
            self.eth_receive(&frame, false);
        }
    }

    /// A frame arrives at the port (`from_self`: looped back from this function's own SQ).
    pub(crate) fn eth_receive(&mut self, frame: &[u8], from_self: bool) {
        if self.halted() || !self.eth_oper_up() {
            return;
        }
        let Some(eth) = self.eth.as_mut() else { return };
        let h = match Headers::parse(frame) {
            Some(h) if frame.len() <= usize::from(eth.vport.mtu) => h,
            _ => {
                eth.counters.rx_bad += 1;
                log::debug!(
                    "model: a frame of {} bytes dropped (runt or over the MTU)",
                    frame.len()
                );
                return;
            }
        };
        let verdict = eth.steering.lookup(&steering::match_param(&h), frame.len());
        if verdict.tirs.is_empty() {
            eth.counters.rx_steering_drops += 1;
            eth.work.rx_dropped += 1;
            return;
        }
        let mut targets = Vec::with_capacity(verdict.tirs.len());
        for (tirn, flow_tag) in verdict.tirs {
            let Some(tir) = eth.tirs.get(&tirn) else {
                eth.counters.rx_steering_drops += 1;
                eth.work.rx_dropped += 1;
                continue;
            };
            use bareverbs_firmware_cmd::ifc::self_lb_block as lb;
            let blocked = if h.multicast() {
                lb::MULTICAST
            } else {
                lb::UNICAST
            };
            if from_self && tir.self_lb_block & blocked != 0 {
                continue;
            }
            let mut meta = RxMeta {
                flow_tag,
                ..RxMeta::default()
            };
            let rqn = match &tir.dispatch {
                TirDispatch::Direct(rqn) => Some(*rqn),
                TirDispatch::Indirect {
                    rqt,
                    hash_fn,
                    key,
                    l3_ipv6,
                    l4_udp,
                    fields,
                } => eth.rqts.get(rqt).and_then(|t| {
                    let got = super::rss::hash(&h, *hash_fn, key, *l3_ipv6, *l4_udp, *fields);
                    if let Some((v, ty)) = got {
                        meta.hash = v;
                        eth.work.rss_hashed += 1;
                        meta.hash_type = ty;
                    }
                    let n = t.rqns.len().max(1);
                    t.rqns.get(meta.hash as usize % n).copied()
                }),
            };
            match rqn {
                Some(rqn) => targets.push((rqn, meta)),
                None => {
                    eth.counters.rx_steering_drops += 1;
                    eth.work.rx_dropped += 1;
                }
            }
        }
        for (rqn, meta) in targets {
            self.deliver_to_rq(rqn, frame, &h, meta);
        }
    }

    /// Writes `frame` into RQ `rqn`'s next WQE and completes it.
    fn deliver_to_rq(&mut self, rqn: u32, frame: &[u8], h: &Headers, meta: RxMeta) {
        let Some(rq) = self.eth.as_ref().and_then(|e| e.rqs.get(&rqn)).cloned() else {
            return;
        };
        if rq.state != WqState::Rdy {
            return;
        }
        let posted = match self.dma.read_be32(rq.ring.dbr) {
            Ok(v) => v as u16,
            Err(f) => {
                self.record_fault(f);
                return;
            }
        };
        if posted == rq.consumed {
            if let Some(e) = self.eth.as_mut() {
                e.counters.rx_out_of_buffer += 1;
                e.work.rx_dropped += 1;
                *e.q_counters.entry(rq.counter_set).or_default() += 1;
            }
            return;
        }
        let index = rq.consumed;
        let stride = 1usize << rq.ring.log_stride;
        let mut raw = vec![0u8; stride];
        if let Err(f) = self
            .dma
            .read(rq.ring.wqe_iova(u32::from(index), 0), &mut raw)
        {
            self.record_fault(f);
            return;
        }
        if let Some(r) = self.eth.as_mut().and_then(|e| e.rqs.get_mut(&rqn)) {
            r.consumed = r.consumed.wrapping_add(1);
        }
        // VLAN stripping: the first C-tag leaves the frame for the CQE.
        let mut vlan = None;
        let stripped;
        let data: &[u8] = match h.vlan {
            Some((ethertype::VLAN, tci)) if !rq.vsd => {
                vlan = Some(tci);
                let mut f = frame[..12].to_vec();
                f.extend_from_slice(&frame[16..]);
                stripped = f;
                &stripped
            }
            _ => frame,
        };
        let sges = Self::recv_sges(&raw);
        let result = self.scatter(rq.ring.pd, &sges, 0, data);
        if let Err(syndrome) = result {
            log::debug!("model: RQ {rqn:#x} WQE {index}: error CQE syndrome {syndrome:#x}");
            let cqe = crate::cqe_write::err_cqe(CqeOpcode::RespErr, 0, rqn, index, syndrome, 0);
            if let Some(r) = self.eth.as_mut().and_then(|e| e.rqs.get_mut(&rqn)) {
                r.state = WqState::Err;
            }
            self.post_cqe(rq.cqn, cqe, false);
            return;
        }
        let cqe = {
            let l3_type = match h.ip.as_ref().map(|ip| ip.version) {
                Some(6) => 1u8,
                Some(4) => 2,
                _ => 0,
            };
            let l4_type = match h.l4.map(|l4| l4.proto) {
                Some(ip_proto::UDP) => 2u8,
                Some(ip_proto::TCP) => {
                    // TCP_NO_ACK, ACK_NO_DATA or ACK_AND_DATA (`CQE_L4_HDR_TYPE_*`).
                    let l4 = h.l4.unwrap_or_default();
                    let ip_end = h.ip.as_ref().map_or(0, |ip| ip.end);
                    let doff = frame.get(l4.off + 12).map_or(5, |b| usize::from(b >> 4));
                    let payload = ip_end.saturating_sub(l4.off + doff * 4);
                    match (l4.tcp_flags & 0x10 != 0, payload) {
                        (false, _) => 1,
                        (true, 0) => 3,
                        (true, _) => 4,
                    }
                }
                _ => 0,
            };
            let mut flags = CQE_L2_OK;
            if l3_type != 0 && packet::l3_ok(frame, h) {
                flags |= CQE_L3_OK;
                if l4_type != 0 && packet::l4_ok(frame, h) {
                    flags |= CQE_L4_OK;
                }
            }
            // The ones' complement sum of the IP packet, from its header to its total length:
            // not the VLAN tags before it nor the padding after it (Linux en_rx.c
            // `mlx5e_skb_csum_fixup` adds those), what Linux takes as CHECKSUM_COMPLETE.
            let shift = if vlan.is_some() { 4 } else { 0 };
            let sum = h.ip.as_ref().map_or(0, |ip| {
                let span = data.get(h.l3 - shift..ip.end - shift).unwrap_or(&[]);
                packet::fold(packet::ones_sum(span, 0))
            });
            CqeRepr {
                opcode: CqeOpcode::RespSend.into(),
                rss_hash_result: meta.hash,
                rss_hash_type: meta.hash_type,
                check_sum: sum,
                hds_ip_ext: flags,
                l4_l3_hdr_type: (l4_type << 4) | (l3_type << 2) | u8::from(vlan.is_some()),
                vlan_info: vlan.unwrap_or(0),
                byte_cnt: data.len() as u32,
                sop_drop_qpn: meta.flow_tag & 0xff_ffff,
                wqe_counter: index,
                srqn: rq.user_index & 0xff_ffff,
                timestamp: self.now_ns(),
                ..CqeRepr::default()
            }
            .emit(0, &[])
        };
        if let Some(e) = self.eth.as_mut() {
            e.work.frames_received += 1;
            e.counters
                .count_rx(frame, h.vlan.map_or(0, |(_, tci)| usize::from(tci >> 13)));
        }
        self.post_cqe(rq.cqn, cqe, false);
    }
}
