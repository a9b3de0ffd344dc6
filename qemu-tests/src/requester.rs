//! The requester side of a send WQE: the request built from it (kind, PSNs, payload, the
//! address vector of UD and DC), sent to the responder through this HCA or the fabric
//! (multicast to every member), and the answer turned into the send completion: retries on
//! RNR and sequence-error NAKs, retransmission after no answer, READ and atomic results
//! scattered (or put in the CQE), DCI stream errors.

use bareverbs_firmware_cmd::ifc::{qpc_scatter, wqe_opcode};

use crate::cqe_write::synd;
use crate::data_path::DataPath;
use crate::port::Traffic;
use crate::qp::{Qp, ServiceType};
use crate::request::{packets, psn_add, Kind, Request, Response};
use crate::wqe_parse::*;

/// What the requester keeps of its QP once the request is built. The QP itself is borrowed
/// from the HCA's table while its WQE is read and its request built, and stays there while
/// the request is out (the responder may be this same QP, looped back, and updates it); what
/// the answer and the completion need is copied here.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sender {
    pub(crate) qpn: u32,
    pub(crate) st: ServiceType,
    pub(crate) pd: u32,
    pub(crate) mtu: u8,
    pub(crate) cs_req: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) rnr_tries: u8,
    pub(crate) ack_timeout: u8,
    pub(crate) cqn_snd: u32,
    pub(crate) user_index: u32,
    /// Set by [`DataPath::send_request`] once the request's packets are spent (RC, UC): the PSN the
    /// next request starts at, stored with the WQE's completion.
    pub(crate) next_send_psn: Option<u32>,
}

impl Sender {
    /// The requester's copy of `qp`.
    pub(crate) fn of(qp: &Qp) -> Sender {
        Sender {
            qpn: qp.qpn,
            st: qp.st,
            pd: qp.pd,
            mtu: qp.mtu,
            cs_req: qp.cs_req,
            rnr_retry: qp.rnr_retry,
            rnr_tries: qp.rnr_tries,
            ack_timeout: qp.ack_timeout,
            cqn_snd: qp.cqn_snd,
            user_index: qp.user_index,
            next_send_psn: None,
        }
    }

    /// What its send CQEs carry in `srqn_uidx` (see [`DataPath::cqe_srqn_uidx`]: no SRQ).
    pub(crate) fn cqe_uidx(&self) -> u32 {
        crate::qp::cqe_srqn_uidx_of(self.user_index, None)
    }
}

/// What happened to a send WQE.
pub(crate) enum Outcome {
    /// Completed; `byte_cnt` for READ and atomics.
    Done(u32),
    /// A READ or atomic completed whose result goes in its CQE, not to memory (requester
    /// scatter to CQE).
    DoneInline(Vec<u8>),
    /// Completed with an error syndrome.
    Failed(u8),
    /// Leave it queued (receiver not ready, retries left).
    Wait,
    /// Completed with WR_FLUSH_ERR already (a DCI stream in error): the queue goes on.
    Flushed,
}

/// Why no request was built: the syndrome the WQE completes with, and the DMA fault behind it
/// if any (recorded by the caller, which holds the HCA mutably).
pub(crate) struct Unbuilt {
    pub(crate) syndrome: u8,
    pub(crate) fault: Option<crate::dma::DmaFault>,
}

impl DataPath<'_> {
    /// Whether DCI `qp`'s request `w` runs on a stream in error (then it is flushed:
    /// WR_FLUSH_ERR, and the send queue goes on).
    pub(crate) fn dci_stream_errored(qp: &Qp, w: &SendWqe<'_>) -> bool {
        qp.dci
            .as_ref()
            .is_some_and(|d| d.errored.contains(&w.dci_stream))
    }

    /// After request `w` of DCI `s` failed with `syndrome`: its stream is in error. While
    /// fewer streams than the DCI tolerates are, only the error completion is written and
    /// the send queue goes on (true); at the limit the DCI goes to ERR as any RC QP (false).
    pub(crate) fn dci_stream_failed(&mut self, s: &Sender, w: &SendWqe<'_>, syndrome: u8) -> bool {
        let Some(d) = self
            .objects
            .qps
            .get_mut(&s.qpn)
            .and_then(|q| q.dci.as_mut())
        else {
            return false;
        };
        d.errored.insert(w.dci_stream);
        if d.errored.len() >= 1usize << d.log_errored {
            return false;
        }
        if let Some(q) = self.objects.qps.get_mut(&s.qpn) {
            q.rnr_tries = 0;
            q.retry_tries = 0;
        }
        self.send_error_cqe(s, w.wqe_index, w.opcode, syndrome);
        true
    }

    /// The ACK timeout of `qpn`'s unanswered request ran out: the request goes again, counting
    /// against `retry_count` (None), or fails once the retries are spent.
    pub(crate) fn ack_timed_out(&mut self, qpn: u32) -> Option<Outcome> {
        let Some(q) = self.objects.qps.get_mut(&qpn) else {
            return Some(Outcome::Wait);
        };
        q.ack_pending = false;
        if q.retry_tries >= u32::from(q.retry_count) {
            return Some(Outcome::Failed(synd::TRANSPORT_RETRY_EXC));
        }
        q.retry_tries = q.retry_tries.saturating_add(1);
        q.transport_retries = q.transport_retries.saturating_add(1);
        None
    }

    /// The request for send WQE `w` of `qp` (borrowed from the table), its message gathered
    /// into `payload` (the HCA's reused buffer, which the request carries). Err: the WQE
    /// completes with that syndrome (the buffer is dropped with it).
    pub(crate) fn build_request(
        &self,
        qp: &Qp,
        w: &SendWqe<'_>,
        mut payload: Vec<u8>,
    ) -> Result<Request, Unbuilt> {
        let fail = |syndrome| Unbuilt {
            syndrome,
            fault: None,
        };
        let imm =
            matches!(w.opcode, wqe_opcode::SEND_IMM | wqe_opcode::RDMA_WRITE_IMM).then_some(w.imm);
        let kind = match (qp.st, w.opcode) {
            // MADs on QP0/QP1 are answered through MAD_IFC; the model sends none itself.
            (ServiceType::Qp0 | ServiceType::Qp1 | ServiceType::RegUmr, _) => {
                return Err(fail(synd::LOCAL_QP_OP))
            }
            (_, wqe_opcode::SEND | wqe_opcode::SEND_IMM) => Kind::Send,
            (
                ServiceType::Rc | ServiceType::Uc | ServiceType::Xrc | ServiceType::Dci,
                wqe_opcode::RDMA_WRITE | wqe_opcode::RDMA_WRITE_IMM,
            ) => Kind::Write,
            (st, wqe_opcode::RDMA_READ) if st.reliable() => Kind::Read,
            (st, wqe_opcode::ATOMIC_CS) if st.reliable() => Kind::Atomic { fetch_add: false },
            (st, wqe_opcode::ATOMIC_FA) if st.reliable() => Kind::Atomic { fetch_add: true },
            _ => return Err(fail(synd::LOCAL_QP_OP)),
        };
        let sge_bytes = w.sge_bytes;
        // ibv_poll_cq(3), IBV_WC_LOC_LEN_ERR: a message longer than the QP may send
        // (`log_msg_max`) fails at the requester.
        let msg_len = match (w.inline, kind) {
            (_, Kind::Atomic { .. }) => 8,
            (Some(d), _) => d.len() as u64,
            (None, _) => sge_bytes,
        };
        if qp.st != ServiceType::Ud && msg_len > 1u64 << qp.log_msg_max.min(63) {
            return Err(fail(synd::LOCAL_LENGTH));
        }
        payload.clear();
        if matches!(kind, Kind::Send | Kind::Write) {
            match w.inline {
                Some(d) => payload.extend_from_slice(d),
                None => self
                    .read_sges(qp.pd, w.sges.as_slice(), &mut payload)
                    .map_err(|(syndrome, fault)| Unbuilt { syndrome, fault })?,
            }
        }
        let (dlid, dst_qpn, sl) = if matches!(qp.st, ServiceType::Ud | ServiceType::Dci) {
            (w.ud_rlid, w.ud_dqpn, w.ud_sl)
        } else {
            (qp.rlid, qp.remote_qpn, qp.sl)
        };
        let slid = self
            .ports
            .get(usize::from(qp.port).wrapping_sub(1))
            .map_or(0, |p| p.lid);
        Ok(Request {
            kind,
            st: qp.st,
            psn: qp.next_send_psn,
            src_qpn: qp.qpn,
            slid,
            dlid,
            sl,
            dst_qpn,
            payload,
            imm,
            solicited: w.solicited,
            raddr: w.raddr,
            rkey: w.rkey,
            len: sge_bytes,
            swap_add: w.swap_add,
            compare: w.compare,
            // The QP's own Q_Key is used when the request's has its top bit set (IB spec).
            qkey: if w.ud_qkey & 0x8000_0000 != 0 {
                qp.qkey
            } else {
                w.ud_qkey
            },
            grh: w
                .ud_grh
                .map(|g| self.grh(qp.port, &g, msg_len, imm.is_some())),
            pkts: if qp.st == ServiceType::Ud {
                1
            } else {
                packets(kind, msg_len, qp.mtu)
            },
            xrc_srqn: w.xrc_srqn,
            dc_key: w.dc_key,
        })
    }

    /// The requester, once `req` is built: routes it and turns the answer into the outcome of
    /// send WQE `w` of `s`.
    pub(crate) fn send_request(
        &mut self,
        s: &mut Sender,
        req: Request,
        w: &SendWqe<'_>,
    ) -> Outcome {
        let kind = req.kind;
        let msg_len = req.msg_len();
        let out = loop {
            let Some(resp) = self.route(req.dlid, &req) else {
                break Outcome::Wait;
            };
            let out = match resp {
                Response::Ack(data) => match kind {
                    Kind::Read | Kind::Atomic { .. } => {
                        let data = match (kind, <[u8; 8]>::try_from(&data[..])) {
                            (Kind::Atomic { .. }, Ok(wire)) => {
                                self.atomic_bytes(u64::from_be_bytes(wire)).to_vec()
                            }
                            _ => data,
                        };
                        // Requester scatter to CQE (`qpc.cs_req`): a result of up to 32 bytes
                        // goes in the CQE (rdma-core 56 cq.c `mlx5_copy_to_send_wqe`). Linux
                        // asks for it only when every request is signaled (or with
                        // MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE); what hardware does for an
                        // unsignaled one is not in public sources: here it goes to memory.
                        if s.cs_req == qpc_scatter::REQ_DATA32 && w.signaled && data.len() <= 32 {
                            Outcome::DoneInline(data)
                        } else {
                            match self.scatter(s.pd, w.sges.as_slice(), 0, &data) {
                                Ok(()) => Outcome::Done(data.len() as u32),
                                Err(s) => Outcome::Failed(s),
                            }
                        }
                    }
                    _ => Outcome::Done(0),
                },
                Response::Dropped => Outcome::Done(0),
                Response::Nak(s) => Outcome::Failed(s),
                // A PSN sequence error NAK: retransmitted at once, counting against
                // `retry_count`.
                Response::NakSeq => {
                    let Some(q) = self.objects.qps.get_mut(&s.qpn) else {
                        break Outcome::Wait;
                    };
                    if q.retry_tries >= u32::from(q.retry_count) {
                        Outcome::Failed(synd::TRANSPORT_RETRY_EXC)
                    } else {
                        q.retry_tries = q.retry_tries.saturating_add(1);
                        q.transport_retries = q.transport_retries.saturating_add(1);
                        continue;
                    }
                }
                // No response: the request waits for the local ACK timeout (never, with
                // `ack_timeout` 0), then goes again or fails (see `ack_timed_out`).
                Response::NoQp => {
                    let at = self
                        .now_ns()
                        .saturating_add(crate::qp::ack_timeout_ns(s.ack_timeout));
                    if let Some(q) = self.objects.qps.get_mut(&s.qpn) {
                        q.resend_at_ns = at;
                        q.ack_pending = true;
                    }
                    Outcome::Wait
                }
                // rnr_retry 7 retries forever; 0–6 that many times (one retry per engine round).
                Response::Rnr(_) if s.rnr_retry != 7 && s.rnr_tries >= s.rnr_retry => {
                    Outcome::Failed(synd::RNR_RETRY_EXC)
                }
                // The request goes again once the responder's RNR timer has run out.
                Response::Rnr(timer) => {
                    let ready = self.now_ns() + crate::qp::rnr_timer_ns(timer);
                    if let Some(q) = self.objects.qps.get_mut(&s.qpn) {
                        q.rnr_tries = q.rnr_tries.saturating_add(1);
                        q.resend_at_ns = ready;
                    }
                    Outcome::Wait
                }
            };
            if matches!(out, Outcome::Done(_) | Outcome::DoneInline(_)) && s.st != ServiceType::Ud {
                // The request's packets are spent: the next one starts after them.
                s.next_send_psn = Some(psn_add(req.psn, packets(kind, msg_len, s.mtu)));
            }
            break out;
        };
        // The payload buffer serves the next request.
        *self.payload_buf = req.payload;
        out
    }

    /// Sends `req` towards `dlid`: this HCA answers for its own LIDs, the fabric finds the
    /// others. `None`: the responder's HCA is busy, try again.
    pub(crate) fn route(&mut self, dlid: u16, req: &Request) -> Option<Response> {
        let resp = self.route_to(dlid, req)?;
        if let Some(f) = self.fabric.as_ref().filter(|f| f.capturing()) {
            f.record(&crate::ib_wire::packets(req, &resp));
        }
        // What left and came back through the requester's port (READ and atomic responses
        // carry data back; acknowledgements are not counted).
        self.count_traffic(req.slid, Traffic::Xmit, req.payload.len() as u64, req.pkts);
        if let Response::Ack(data) = &resp {
            if !data.is_empty() {
                self.count_traffic(req.slid, Traffic::Rcv, data.len() as u64, req.pkts);
            }
        }
        Some(resp)
    }

    pub(crate) fn route_to(&mut self, dlid: u16, req: &Request) -> Option<Response> {
        // IBA 4.1.1: LIDs 0xC000–0xFFFE are multicast (0xFFFF is the permissive LID).
        if (0xc000..0xffff).contains(&dlid) && !req.st.reliable() {
            return self.multicast(req);
        }
        if self.owns_lid(dlid) {
            return Some(self.respond(req));
        }
        let unreachable = if req.st.reliable() {
            Response::NoQp
        } else {
            Response::Dropped
        };
        let Some(dev) = self.fabric.as_ref().and_then(|f| f.find(dlid)) else {
            return Some(unreachable);
        };
        let resp = dev.try_respond(req)?;
        dev.notify();
        Some(resp)
    }

    /// A UD datagram to a multicast LID: one copy to every UD QP attached to the group its
    /// GRH's destination GID names (the MGID; a multicast packet carries a GRH, IBA 8.3), on
    /// this HCA and on every HCA of the fabric, the sender's own QP included when attached
    /// (mlx5 loops multicast back unless the QP blocks it, `qpc.block_lb_mc`, which Linux sets
    /// only for IB_QP_CREATE_BLOCK_MULTICAST_LOOPBACK; IPoIB drops its own looped-back
    /// datagrams for that reason). Every HCA's lock is taken first: if one is busy, nothing
    /// is delivered and the send is retried, so no QP gets a copy twice.
    pub(crate) fn multicast(&mut self, req: &Request) -> Option<Response> {
        let Some(grh) = req.grh else {
            return Some(Response::Dropped);
        };
        let mut mgid = [0u8; 16];
        mgid.copy_from_slice(&grh[24..40]);
        let others = match self.fabric.as_ref() {
            Some(f) => f.members_except(|lid| self.owns_lid(lid)),
            None => Vec::new(),
        };
        let mut locked = Vec::with_capacity(others.len());
        for dev in &others {
            locked.push(dev.try_enter()?);
        }
        let copy = |qpn| Request {
            dst_qpn: qpn,
            ..req.clone()
        };
        for qpn in self.objects.mcg_members(&mgid) {
            self.respond(&copy(qpn));
        }
        for remote in locked.iter_mut() {
            for qpn in remote.mcg_members(&mgid) {
                remote.respond(&copy(qpn));
            }
        }
        drop(locked);
        for dev in &others {
            dev.notify();
        }
        Some(Response::Dropped)
    }

    /// The GRH a UD packet from `port` carries for route `g` (IBA 8.3): IP version 6, the
    /// traffic class and flow label, the payload length (BTH, DETH, immediate data, the message
    /// padded to 4 bytes, ICRC), next header 0x1B (IBA transport), the hop limit, the port's
    /// GID (subnet prefix fe80::/64 and port GUID; the model's ports have that one GID), and the
    /// destination GID.
    pub(crate) fn grh(&self, port: u8, g: &AvGrh, len: u64, imm: bool) -> [u8; 40] {
        let mut h = [0u8; 40];
        let word0 = (6u32 << 28) | (u32::from(g.tclass) << 20) | (g.flow_label & 0xf_ffff);
        h[0..4].copy_from_slice(&word0.to_be_bytes());
        let pay_len = 12 + 8 + if imm { 4 } else { 0 } + len.next_multiple_of(4) + 4;
        h[4..6].copy_from_slice(&(pay_len as u16).to_be_bytes());
        h[6] = 0x1b;
        h[7] = g.hop_limit;
        h[8..16].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes());
        h[16..24].copy_from_slice(&(self.cfg.node_guid + u64::from(port)).to_be_bytes());
        h[24..40].copy_from_slice(&g.dgid);
        h
    }

    /// `v` as an 8-byte atomic operand in memory.
    pub(crate) fn atomic_bytes(&self, v: u64) -> [u8; 8] {
        if self.atomic_little_endian() {
            v.to_le_bytes()
        } else {
            v.to_be_bytes()
        }
    }
}
