//! The responder side: a request arriving at one of this HCA's QPs or DCTs, checked (state,
//! PSN, remote access, length, the XRC SRQ, the DC key), executed (SEND into the next receive,
//! of the QP's RQ, its SRQ/RMP or the XRC SRQ; WRITE, READ and atomics through the rkey) and
//! answered, with the responder's completion and its affiliated events.

use bareverbs_firmware_cmd::ifc::{
    event_type, qpc_scatter, wqe_srq_next_seg, CqeOpcode, WqeSrqNextSeg, EQE_DCT_DCTN,
};
use bareverbs_firmware_cmd::layout::{Layout, View};

use crate::cqe_write::{err_cqe, ok_cqe, synd, CqeFields};
use crate::data_path::DataPath;
use crate::dma::AddressSpaceExt;
use crate::eq::qp_srq_event_data;
use crate::mkey::Pieces;
use crate::port::Traffic;
use crate::qp::{Qp, QpState, ServiceType, PSN_MASK};
use crate::request::{packets, psn_add, Kind, Request, Response, MAX_RDMA_LEN};
use crate::sge::SgeList;

/// A receive WQE found for a message.
pub(crate) struct Recv {
    /// What the CQE's `wqe_counter` carries: the RQ's consumer counter, or the SRQ WQE's index.
    pub(crate) counter: u16,
    pub(crate) sges: SgeList,
    /// Taken from SRQ `.0`, whose head then moves to `.1`.
    pub(crate) srq: Option<(u32, u16)>,
}

/// The XRC SRQ an XRC request is delivered through, found by [`DataPath::xrc_target_srq`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct XrcTarget {
    pub(crate) srqn: u32,
    /// `xrc_srqc.pd`: the PD of its WQEs' lkeys and of the request's rkey.
    pub(crate) pd: u32,
    /// `xrc_srqc.cqn`: where its receives complete.
    pub(crate) cqn: u32,
}

/// A receive queue or SRQ the responder could not read (`catas.rs`): the DMA fault, and the
/// QP or SRQ that has the catastrophic error.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Unreadable {
    Qp(u32),
    Srq(u32),
}

/// A message delivered into a receive, made while the QP was borrowed, committed after.
pub(crate) struct Delivery {
    /// The receive taken: the RQ's next (`None`), or SRQ `.0`'s, whose head moves to `.1`.
    srq: Option<(u32, u16)>,
    /// Where its completion goes.
    cqn: u32,
    /// The completion: success, or an error that moves the QP to ERR.
    cqe: [u8; 64],
    failed: bool,
    solicited: bool,
    /// The message went into the CQE (scatter to CQE).
    inline: bool,
}

/// What a request did at its responder QP, worked out while the QP was borrowed from the
/// table (checks, keys, data moved, completions made) and committed by [`DataPath::commit`] once
/// it no longer is, in the order of these fields.
pub(crate) struct Effects {
    qpn: u32,
    resp: Response,
    /// The first packet at a QP in RTR: communication established.
    comm_est: bool,
    /// A receive queue or SRQ that could not be read; `resp` is then RNR, and becomes no
    /// answer when the QP went to ERR for it.
    unreadable: Option<(crate::dma::DmaFault, Unreadable)>,
    delivery: Option<Delivery>,
    /// DC: a request with the wrong access key.
    dct_key_violation: bool,
    /// An RC responder error that moves the QP to ERR and raises this event.
    error_event: Option<u8>,
    /// The PSN the QP expects next, once it accepted the request.
    next_rcv_psn: Option<u32>,
}

impl Effects {
    fn answer(qpn: u32, resp: Response) -> Effects {
        Effects {
            qpn,
            resp,
            comm_est: false,
            unreadable: None,
            delivery: None,
            dct_key_violation: false,
            error_event: None,
            next_rcv_psn: None,
        }
    }
}

impl DataPath<'_> {
    /// The receive WQE `rqp` takes next, if one is posted: the head of its RQ, or of the
    /// SRQ/RMP it receives from, or for an XRC request of the XRC SRQ `xrc` it names. Err: the
    /// queue cannot be read.
    pub(crate) fn next_recv(
        &self,
        rqp: &Qp,
        xrc: Option<XrcTarget>,
    ) -> Result<Option<Recv>, (crate::dma::DmaFault, Unreadable)> {
        if let Some(x) = xrc {
            return self.next_srq_recv(x.srqn);
        }
        if let Some((srqn, _)) = self.objects.qp_srq(rqp.qpn) {
            return self.next_srq_recv(srqn);
        }
        // A zero-length RQ never receives.
        if rqp.no_rq {
            return Ok(None);
        }
        let idx = rqp.rq_consumed & ((1u16 << rqp.log_rq_size) - 1);
        let stride = 1u64 << rqp.rq_wqe_shift;
        let fetched = self.dma.read_be32(rqp.dbr).and_then(|head| {
            if rqp.rq_consumed == head as u16 {
                return Ok(None);
            }
            self.dma
                .read_vec(rqp.buf_iova(u64::from(idx) * stride), stride as usize)
                .map(Some)
        });
        let raw = fetched.map_err(|f| (f, Unreadable::Qp(rqp.qpn)))?;
        Ok(raw.map(|raw| Recv {
            counter: rqp.rq_consumed,
            sges: Self::recv_sges(&raw),
            srq: None,
        }))
    }

    /// The WQE SRQ/RMP `srqn` gives next, if one is posted: the one at the device's head while
    /// fewer WQEs were taken than the doorbell record's counter says were posted (rdma-core 56
    /// srq.c `mlx5_post_srq_recv`: `*srq->db = htobe32(srq->counter)`, the number posted).
    /// The WQE starts with `mlx5_wqe_srq_next_seg`, whose `next_wqe_index` is the next head;
    /// its data segments follow.
    pub(crate) fn next_srq_recv(
        &self,
        srqn: u32,
    ) -> Result<Option<Recv>, (crate::dma::DmaFault, Unreadable)> {
        let Some(srq) = self.objects.srq(srqn).filter(|s| s.good) else {
            return Ok(None);
        };
        let (dbr, head, taken) = (srq.dbr, srq.hw_head, srq.taken);
        let at = srq.wqe_iova(u32::from(head));
        let stride = 1usize << srq.wqe_shift;
        let fetched = self.dma.read_be32(dbr).and_then(|posted| {
            if posted as u16 == taken {
                return Ok(None);
            }
            self.dma.read_vec(at, stride).map(Some)
        });
        let Some(raw) = fetched.map_err(|f| (f, Unreadable::Srq(srqn)))? else {
            return Ok(None);
        };
        let Some(next) = View::<WqeSrqNextSeg>::new_checked(&raw)
            .ok()
            .map(|v| v.get(wqe_srq_next_seg::next_wqe_index) as u16)
        else {
            return Ok(None);
        };
        Ok(Some(Recv {
            counter: head,
            sges: Self::recv_sges(&raw[WqeSrqNextSeg::BYTES..]),
            srq: Some((srqn, next)),
        }))
    }

    /// Takes a receive from QP `qpn`'s queue (`srq` None) or from SRQ `srq.0`; an SRQ
    /// whose armed limit is now above the WQEs left raises the limit event and disarms.
    fn take_recv(&mut self, qpn: u32, srq: Option<(u32, u16)>) {
        let Some((srqn, next)) = srq else {
            if let Some(q) = self.objects.qps.get_mut(&qpn) {
                q.rq_consumed = q.rq_consumed.wrapping_add(1);
            }
            return;
        };
        let Some(s) = self.objects.srqs.get_mut(&srqn) else {
            return;
        };
        s.hw_head = next;
        s.taken = s.taken.wrapping_add(1);
        let (dbr, taken, lwm) = (s.dbr, s.taken, s.lwm);
        if lwm == 0 {
            return;
        }
        let Ok(posted) = self.dma.read_be32(dbr) else {
            return;
        };
        let left = (posted as u16).wrapping_sub(taken);
        if left < lwm {
            if let Some(s) = self.objects.srqs.get_mut(&srqn) {
                s.lwm = 0;
            }
            self.post_event(event_type::SRQ_RQ_LIMIT, 0, qp_srq_event_data(0, srqn));
        }
    }

    /// The XRC SRQ `srqn` named by a request to XRC target QP `r`, if it is an XRC SRQ of the
    /// QP's XRC domain (`qpc.xrcd`, Linux 6.12 qp.c `create_xrc_tgt_qp`; `xrc_srqc.xrcd`).
    pub(crate) fn xrc_target_srq(&self, r: &Qp, srqn: u32) -> Option<XrcTarget> {
        let (_, xrcd) = self.objects.qp_srq(r.qpn)?;
        let s = self.objects.srq(srqn)?;
        if s.kind != crate::srq::SrqKind::XrcSrq || s.xrcd != Some(xrcd) {
            return None;
        }
        Some(XrcTarget {
            srqn,
            pd: s.pd,
            cqn: s.cqn?,
        })
    }

    /// What a CQE of `qp` carries in `srqn_uidx` (`mlx5_cqe64.srqn`) for a WQE taken from
    /// `srqn` (receives through an SRQ) or from the QP's own queues. CQE version 1 (the model
    /// reports `cmd_hca_cap.cqe_version` 1): the QP's `user_index`, or for a receive from an
    /// XRC SRQ that SRQ's; rdma-core 56 cq.c `get_cur_rsc` looks the QP up by it
    /// (`mlx5_find_uidx`) for every CQE when the context's `cqe_version` is 1. A QP created
    /// with user index [`CQE_V0_UIDX`](crate::qp::CQE_V0_UIDX) gets version 0 CQEs: the SRQ
    /// number for receives through an SRQ, otherwise 0 (cq.c `get_cur_rsc`: `srqn_uidx`
    /// non-zero means an SRQ; Linux mlx5_ib cq.c `handle_responder` reads `cqe->srqn` for XRC;
    /// the rule itself is `qp::cqe_srqn_uidx_of`).
    pub(crate) fn cqe_srqn_uidx(&self, qp: &Qp, srqn: Option<u32>) -> u32 {
        let srq = srqn.and_then(|n| self.objects.srq(n));
        let uidx = match srq {
            Some(s) if s.kind == crate::srq::SrqKind::XrcSrq => s.user_index,
            _ => qp.user_index,
        };
        crate::qp::cqe_srqn_uidx_of(uidx, srqn)
    }

    /// Delivers `req`'s message into receive `recv` of `rqp` (found by [`Self::next_recv`]):
    /// its data scattered and its responder completion made, for its CQ. An XRC request
    /// (`xrc`) scatters with its XRC SRQ's PD and completes on that SRQ's CQ (`xrc_srqc.pd`,
    /// `xrc_srqc.cqn`; the target QP's own CQs are mlx5_ib's placeholders).
    pub(crate) fn deliver(
        &self,
        rqp: &Qp,
        req: &Request,
        rdma_imm: bool,
        xrc: Option<XrcTarget>,
        recv: Recv,
    ) -> Delivery {
        let (pd, cqn) = xrc.map_or((rqp.pd, rqp.cqn_rcv), |x| (x.pd, x.cqn));
        let Recv { counter, sges, srq } = recv;
        let ud = req.st == ServiceType::Ud;
        let skip = if ud { 40 } else { 0 };
        // A UD message with a GRH fills the 40-byte area first; without one the area keeps
        // what it held.
        let grh = match (ud, &req.grh) {
            (true, Some(h)) => self.scatter(pd, &sges, 0, h),
            _ => Ok(()),
        };
        // Scatter to CQE (`qpc.cs_res`, Linux sets it for RC and UC): a SEND of up to 32
        // bytes lands in the first 32 bytes of the CQE, where rdma-core 56 cq.c
        // `handle_responder` copies it from (`MLX5_INLINE_SCATTER_32`); the receive buffers
        // are left to the driver. The CQE fields in those bytes (path bits, SLID, source QP)
        // are then the data's.
        let inline =
            !rdma_imm && !ud && rqp.cs_res == qpc_scatter::RES_DATA32 && req.payload.len() <= 32;
        let r = if rdma_imm || inline {
            Ok(())
        } else {
            grh.and_then(|()| self.scatter(pd, &sges, skip, &req.payload))
        };
        let uidx = self.cqe_srqn_uidx(rqp, srq.map(|(n, _)| n));
        if let Err(s) = r {
            return Delivery {
                srq,
                cqn,
                cqe: err_cqe(CqeOpcode::RespErr, 0, rqp.qpn, counter, s, uidx),
                failed: true,
                solicited: false,
                inline: false,
            };
        }
        // flags_rqpn: bits 29:28 say a GRH arrived (1: IB GRH), 27:24 the SL, 23:0 the QPN.
        let g = if ud && req.grh.is_some() {
            1u32 << 28
        } else {
            0
        };
        let op = match (rdma_imm, req.imm.is_some()) {
            (true, _) => CqeOpcode::RespWrImm,
            (false, true) => CqeOpcode::RespSendImm,
            (false, false) => CqeOpcode::RespSend,
        };
        let cqe = ok_cqe(
            op,
            &CqeFields {
                sop_drop_qpn: rqp.qpn,
                wqe_counter: counter,
                srqn_uidx: uidx,
                byte_cnt: (req.payload.len() + skip as usize) as u32,
                imm_inval_pkey: req.imm.unwrap_or(u32::from(rqp.pkey_index)),
                // ml_path: the DLID's path bits, the low LMC bits (rdma-core: ml_path & 0x7f).
                ml_path: self.path_bits(req.dlid),
                slid: req.slid,
                flags_rqpn: g | (u32::from(req.sl & 0xf) << 24) | req.src_qpn,
                solicited: req.solicited,
                inline: inline.then_some(&req.payload[..]),
            },
        );
        Delivery {
            srq,
            cqn,
            cqe,
            failed: false,
            solicited: req.solicited,
            inline,
        }
    }

    /// The responder: answers a request addressed to one of this HCA's QPs.
    ///
    /// RC checks the request's PSN against the one expected (IB spec 9.7.5.1, as Linux rxe
    /// `check_psn`): equal, the request is executed and the expected PSN advances by its
    /// packets; ahead (within half the PSN space), NAK "PSN sequence error"; behind, a
    /// duplicate: SEND and WRITE are acknowledged without executing again, READ is read again,
    /// an atomic returns the target's current value without changing it (hardware replays the
    /// saved original result; the model keeps none). UC has no ACKs: a message whose PSN is
    /// not the expected one starts a new message (rxe `check_psn`: a First or Only packet
    /// resynchronises) and the expected PSN follows it.
    pub(crate) fn respond(&mut self, req: &Request) -> Response {
        self.count_traffic(req.dlid, Traffic::Rcv, req.payload.len() as u64, req.pkts);
        let resp = self.respond_at_port(req);
        if let Response::Ack(data) = &resp {
            if !data.is_empty() {
                self.count_traffic(req.dlid, Traffic::Xmit, data.len() as u64, req.pkts);
            }
        }
        resp
    }

    /// The request at its QP: worked out with the QP borrowed from the table, then committed.
    pub(crate) fn respond_at_port(&mut self, req: &Request) -> Response {
        let rc = req.st.reliable();
        let Some(r) = self.objects.qps.get(&req.dst_qpn).filter(|r| {
            // A QP in SQE (UC, UD) still receives.
            matches!(
                r.state,
                QpState::Rtr | QpState::Rts | QpState::Sqer | QpState::Sqd
            ) && (r.st == req.st || (req.st == ServiceType::Dci && r.st == ServiceType::Dct))
        }) else {
            return if rc {
                Response::NoQp
            } else {
                Response::Dropped
            };
        };
        let effects = self.respond_at(r, req);
        self.commit(effects, rc)
    }

    /// What `req` does at QP `r`, borrowed: see [`Effects`].
    fn respond_at(&self, r: &Qp, req: &Request) -> Effects {
        let rc = req.st.reliable();
        if req.st == ServiceType::Dci {
            return self.respond_at_dct(r, req);
        }
        if req.st == ServiceType::Ud {
            let mut e = Effects::answer(r.qpn, Response::Dropped);
            if r.qkey == req.qkey {
                match self.next_recv(r, None) {
                    Ok(Some(recv)) => e.delivery = Some(self.deliver(r, req, false, None, recv)),
                    Ok(None) => {}
                    Err(u) => e.unreadable = Some(u),
                }
            }
            return e;
        }
        // The first packet at a connected QP still in RTR: communication established
        // (IBA 11.6.3 affiliated event; mlx5 MLX5_EVENT_TYPE_COMM_EST, which Linux mlx5_ib
        // `mlx5_ib_qp_event` reports as IB_EVENT_COMM_EST), once per stay in RTR.
        let comm_est = r.state == QpState::Rtr && !r.comm_est;
        let npkts = packets(req.kind, req.msg_len(), r.mtu);
        let ahead = req.psn.wrapping_sub(r.next_rcv_psn) & PSN_MASK;
        let duplicate = rc && ahead >= 1 << 23;
        let mut e = if rc && ahead != 0 && !duplicate {
            Effects::answer(r.qpn, Response::NakSeq)
        } else {
            self.execute_request(r, req, duplicate)
        };
        e.comm_est = comm_est;
        if matches!(e.resp, Response::NakSeq) {
            return e;
        }
        // An RC responder that NAKs a remote access error or an invalid request goes to ERR
        // and reports it on the QP (IBA 9.9.3.1, responder class C errors; Linux rxe
        // `do_class_ac_error`; mlx5 WQ_ACCESS_ERROR / WQ_INVAL_REQ_ERROR, which Linux mlx5_ib
        // reports as IB_EVENT_QP_ACCESS_ERR / IB_EVENT_QP_REQ_ERR).
        if rc && !duplicate {
            e.error_event = match e.resp {
                Response::Nak(synd::REMOTE_ACCESS) => Some(event_type::WQ_ACCESS_ERROR),
                Response::Nak(synd::REMOTE_INVAL_REQ) => Some(event_type::WQ_INVAL_REQ_ERROR),
                _ => None,
            };
        }
        // UC: whatever became of the message, the next one is expected after it.
        let accepted = !rc || (matches!(e.resp, Response::Ack(_)) && !duplicate);
        if accepted {
            e.next_rcv_psn = Some(psn_add(req.psn, npkts));
        }
        e
    }

    /// Makes the state changes of `e` (a request at one of this HCA's QPs, `rc`: reliable)
    /// and gives its answer.
    fn commit(&mut self, e: Effects, rc: bool) -> Response {
        let qpn = e.qpn;
        if e.comm_est {
            if let Some(q) = self.objects.qps.get_mut(&qpn) {
                q.comm_est = true;
            }
            self.post_event(event_type::COMM_EST, 0, qp_srq_event_data(0, qpn));
        }
        let mut resp = e.resp;
        if let Some((f, what)) = e.unreadable {
            self.record_fault(f);
            match what {
                Unreadable::Qp(n) => self.qp_fatal(n),
                Unreadable::Srq(n) => self.srq_fatal(n),
            }
            // The queue's catastrophic error may have moved the QP to ERR: a QP in ERR
            // answers nothing.
            if self
                .objects
                .qps
                .get(&qpn)
                .is_some_and(|q| q.state == QpState::Err)
            {
                resp = if rc {
                    Response::NoQp
                } else {
                    Response::Dropped
                };
            }
        }
        if let Some(d) = e.delivery {
            self.take_recv(qpn, d.srq);
            if d.inline {
                self.counters.scattered_to_cqe += 1;
            }
            self.post_cqe(d.cqn, d.cqe, d.solicited);
            if d.failed {
                self.qp_to_error(qpn);
            }
        }
        if e.dct_key_violation {
            let mut raise = false;
            if let Some(d) = self.objects.qps.get_mut(&qpn).and_then(|q| q.dct.as_mut()) {
                d.key_violations = d.key_violations.wrapping_add(1);
                raise = std::mem::take(&mut d.armed);
            }
            if raise {
                let mut data = [0u8; 28];
                data[EQE_DCT_DCTN..EQE_DCT_DCTN + 4].copy_from_slice(&qpn.to_be_bytes());
                self.post_event(event_type::DCT_KEY_VIOLATION, 0, data);
            }
        }
        if let Some(ty) = e.error_event {
            self.qp_to_error(qpn);
            self.post_event(ty, 0, qp_srq_event_data(0, qpn));
        }
        if let Some(psn) = e.next_rcv_psn {
            if let Some(q) = self.objects.qps.get_mut(&qpn) {
                q.next_rcv_psn = psn;
            }
        }
        resp
    }

    /// A DC request at DCT `r`: executed as an RC responder would, through the DCT's SRQ, CQ,
    /// PD and remote-access enables, once its access key matches. A wrong key is dropped
    /// without an answer, so the requester retries until `retry_count` runs out
    /// (IBV_WC_RETRY_EXC_ERR); the DCT counts it (`dc_access_key_violation_count`) and, when
    /// armed (ARM_DCT_FOR_KEY_VIOLATION), raises DCT_KEY_VIOLATION once. Public sources do not
    /// say what hardware answers a wrong key with; dropping it is what keeps the key secret
    /// from a prober. A DCT serves many initiators, so neither a bad request nor a PSN it has
    /// not seen moves it to ERR: each DC message stands alone here.
    fn respond_at_dct(&self, r: &Qp, req: &Request) -> Effects {
        let Some(d) = r.dct.as_ref() else {
            return Effects::answer(r.qpn, Response::NoQp);
        };
        if d.access_key != req.dc_key {
            let mut e = Effects::answer(r.qpn, Response::NoQp);
            e.dct_key_violation = true;
            return e;
        }
        self.execute_request(r, req, false)
    }

    /// Executes `req` at responder QP `r` (`duplicate`: an RC request seen before).
    fn execute_request(&self, r: &Qp, req: &Request, duplicate: bool) -> Effects {
        let rc = req.st.reliable();
        let dropped = |nak: Response| if rc { nak } else { Response::Dropped };
        let answer = |resp| Effects::answer(r.qpn, resp);
        if duplicate && matches!(req.kind, Kind::Send | Kind::Write) {
            return answer(Response::Ack(Vec::new()));
        }
        // XRC: the request names its XRC SRQ, which must be one of the target QP's domain; it
        // gives the receive WQEs, the CQ and the PD that every key of the request is checked
        // against (IBA Annex A14: the XRC domain is what lets a target deliver into an SRQ).
        let xrc = match req.xrc_srqn {
            Some(n) => match self.xrc_target_srq(r, n) {
                Some(x) => Some(x),
                None => return answer(Response::Nak(synd::REMOTE_ACCESS)),
            },
            None => None,
        };
        let pd = xrc.map_or(r.pd, |x| x.pd);
        // ibv_poll_cq(3), IBV_WC_REM_INV_REQ_ERR: an operation the receive queue does not
        // support (the QP's remote-access enables; with mlx5 a QP with max_dest_rd_atomic 0
        // has rre and rae clear, as Linux mlx5_ib `to_mlx5_access_flags` sets them), or an RDMA
        // longer than 2^31 bytes.
        let enabled = match req.kind {
            Kind::Send => true,
            Kind::Write => r.rwe,
            Kind::Read => r.rre,
            Kind::Atomic { .. } => r.rae,
        };
        let too_long = matches!(req.kind, Kind::Write | Kind::Read) && req.msg_len() > MAX_RDMA_LEN;
        if !enabled || too_long {
            return answer(dropped(Response::Nak(synd::REMOTE_INVAL_REQ)));
        }
        let needs_recv = matches!(req.kind, Kind::Send)
            || (matches!(req.kind, Kind::Write) && req.imm.is_some());
        let recv = if needs_recv {
            match self.next_recv(r, xrc) {
                Ok(Some(recv)) => Some(recv),
                Ok(None) => return answer(dropped(Response::Rnr(r.min_rnr_nak))),
                // The queue cannot be read: the commit records it, and answers nothing if
                // the QP went to ERR for it.
                Err(u) => {
                    let mut e = answer(dropped(Response::Rnr(r.min_rnr_nak)));
                    e.unreadable = Some(u);
                    return e;
                }
            }
        } else {
            None
        };
        match (req.kind, recv) {
            (Kind::Send, Some(recv)) => {
                let d = self.deliver(r, req, false, xrc, recv);
                let mut e = answer(if d.failed {
                    dropped(Response::Nak(synd::REMOTE_INVAL_REQ))
                } else {
                    Response::Ack(Vec::new())
                });
                e.delivery = Some(d);
                e
            }
            (Kind::Write, recv) => {
                let mut dest = Pieces::new();
                let len = req.payload.len() as u64;
                let checked =
                    self.key_range(req.rkey, pd, req.raddr, len, |k| k.remote_write, &mut dest);
                if checked.is_err() {
                    return answer(dropped(Response::Nak(synd::REMOTE_ACCESS)));
                }
                let mut at = 0;
                for &(a, n) in &dest {
                    let _ = self.dma.write(a, &req.payload[at..at + n as usize]);
                    at += n as usize;
                }
                let mut e = answer(Response::Ack(Vec::new()));
                e.delivery = recv.map(|recv| self.deliver(r, req, true, xrc, recv));
                e
            }
            (Kind::Read, _) => {
                let mut src = Pieces::new();
                let read = |k: &crate::mkey::Rights| k.remote_read;
                if self
                    .key_range(req.rkey, pd, req.raddr, req.len, read, &mut src)
                    .is_err()
                {
                    return answer(Response::Nak(synd::REMOTE_ACCESS));
                }
                let mut data = Vec::new();
                for &(a, n) in &src {
                    data.extend(self.dma.read_vec(a, n as usize).unwrap_or_default());
                }
                answer(Response::Ack(data))
            }
            (Kind::Atomic { fetch_add }, _) => {
                if req.raddr % 8 != 0 {
                    return answer(Response::Nak(synd::REMOTE_INVAL_REQ));
                }
                let mut t = Pieces::new();
                if self
                    .key_range(req.rkey, pd, req.raddr, 8, |k| k.atomic, &mut t)
                    .is_err()
                {
                    return answer(Response::Nak(synd::REMOTE_ACCESS));
                }
                let Some(&(target, _)) = t.first() else {
                    return answer(Response::Nak(synd::REMOTE_ACCESS));
                };
                let old = self.atomic_load(target);
                let new = if duplicate {
                    old
                } else if fetch_add {
                    old.wrapping_add(req.swap_add)
                } else if old == req.compare {
                    req.swap_add
                } else {
                    old
                };
                if !duplicate {
                    let _ = self.dma.write(target, &self.atomic_bytes(new));
                }
                // On the wire the original value is big-endian, as every IB field.
                answer(Response::Ack(old.to_be_bytes().to_vec()))
            }
            // A SEND always found its receive above.
            (Kind::Send, None) => answer(dropped(Response::Rnr(r.min_rnr_nak))),
        }
    }

    /// Whether 8-byte atomic operands sit in memory little-endian, at the responder, and the
    /// original value is written back so, at the requester: in the host's order once the
    /// driver set `atomic_req_8b_endianness_mode` to host endianness (Linux does whenever it
    /// is supported, and otherwise reports no IB atomics), big-endian before. The host's order
    /// is what the HOST_ENDIANNESS register says, little-endian if it was never written.
    pub(crate) fn atomic_little_endian(&self) -> bool {
        use bareverbs_firmware_cmd::ifc::{atomic, atomic_caps, HOST_ENDIANNESS_BIG};
        let f = atomic_caps::atomic_req_8b_endianness_mode;
        let mode = bareverbs_firmware_cmd::layout::get_bits(&self.caps.atomic_cur, f.bit, f.width);
        mode == u64::from(atomic::REQ_MODE_HOST_ENDIANNESS)
            && self.host_endianness != Some(HOST_ENDIANNESS_BIG)
    }

    /// The 8-byte atomic operand at `target`.
    pub(crate) fn atomic_load(&self, target: u64) -> u64 {
        let b: [u8; 8] = self
            .dma
            .read_vec(target, 8)
            .ok()
            .and_then(|v| v.try_into().ok())
            .unwrap_or([0; 8]);
        if self.atomic_little_endian() {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        }
    }

    /// The path bits of `dlid` at this HCA: its low LMC bits.
    pub(crate) fn path_bits(&self, dlid: u16) -> u8 {
        (dlid & ((1u16 << self.cfg.lmc.min(7)) - 1)) as u8
    }
}
