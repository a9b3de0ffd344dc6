//! Where the model executes WQEs: the send doorbell and the send queue run WQE by WQE, with
//! the requester's completions (mlx5-reference 05 §3–6, 04 §6). The steps have files of their
//! own: a WQE is read and parsed in `wqe_parse.rs`, its request built and answered in
//! `requester.rs`, executed at the target in `responder.rs`, its keys checked and its data
//! moved in `key_access.rs`. What follows holds for all of them.
//!
//! What is modelled: RC, UC and UD SEND (with immediate), RC/UC RDMA WRITE (with immediate),
//! RC RDMA READ and 8-byte atomics; lkey/rkey validity, PD and rights; receive-buffer length;
//! UD Q_Key and the 40-byte GRH area; a missing receive (RC: RNR retries exhausted when
//! `rnr_retry` is 0, otherwise the request waits for the next doorbell; UC and UD: dropped).
//! Receives on a QP with `rq_type` SRQ take the WQEs of its SRQ/RMP in linked-list order
//! (rdma-core 56 providers/mlx5/srq.c), with the WQE's index as the CQE's `wqe_counter`, and
//! may raise the SRQ limit event. Every CQE carries `srqn_uidx` as CQE version 1 defines it
//! (`DataPath::cqe_srqn_uidx`).
//!
//! Transport (RC, and UC for sequence numbers only). Messages are whole: no packet is lost,
//! reordered or split, so what follows is about a requester and a responder whose PSNs or
//! states disagree.
//! - PSNs: a request spends `ceil(len / path MTU)` PSNs (at least one; READ counts its
//!   response packets, an atomic one) from the requester's `next_send_psn`, and the responder's
//!   `next_rcv_psn` advances the same way when it accepts it; both are 24 bits and wrap, and
//!   QUERY_QP reports them.
//! - RC responder: PSN as expected, executed and acknowledged; ahead of it (within half the
//!   PSN space), NAK PSN sequence error; behind it, a duplicate: SEND and WRITE acknowledged and
//!   not executed again (the requester completes with success and nothing is delivered), READ
//!   read again, an atomic answered with the target's current value, unchanged.
//! - UC responder: a message whose PSN is not the expected one starts a new message, as a
//!   First/Only packet does after a gap (Linux rxe `check_psn`); it is delivered and the
//!   expected PSN resynchronises to the sender's.
//! - RC retransmission: no response (no such QP, a QP not in RTR/RTS/SQE/SQD or of another
//!   type, a LID nobody owns) or a PSN sequence error NAK makes the requester send again, back
//!   to back (there is no ACK timer): after `retry_count` retries the request completes with
//!   RETRY_EXC_ERR. With `ack_timeout` 0 (infinite) a request without response is sent again
//!   once per engine round for ever: no completion, the QP stays in RTS and can be destroyed.
//!   [`Hca::qp_retries`](crate::Hca::qp_retries) counts the retries.
//! - Remote invalid request (RC): an operation the responder QP does not enable (rwe, rre, rae;
//!   mlx5 clears rre and rae for `max_dest_rd_atomic` 0), an RDMA longer than 2^31 bytes, a
//!   misaligned atomic, a receive too small. Remote access error: the rkey, its rights or
//!   bounds. A message longer than the requester's `log_msg_max` fails locally (LOC_LEN_ERR).
//! - Receive completions carry the DLID path bits (the DLID's low LMC bits) in `ml_path`.
//!
//! An error completion moves an RC QP to ERR and flushes what is outstanding, send and
//! receive. A send error on a UC or UD QP moves it to SQE instead: the other send requests,
//! and any posted later, are flushed, receives go on, and SQERR2RTS_QP resumes sending.

use bareverbs_firmware_cmd::ifc::CqeOpcode;

use crate::cqe_write::{err_cqe, ok_cqe, synd, CqeFields};
use crate::data_path::DataPath;
use crate::dma::AddressSpaceExt;
use crate::qp::{QpState, ServiceType};
use crate::requester::{Outcome, Sender};
use crate::wqe_parse::*;

impl DataPath<'_> {
    /// Send doorbell (BlueFlame register): the low dword carries `qpn << 8 | ds`.
    pub(crate) fn sq_doorbell(&mut self, uar: u32, val: u64) {
        if self.cfg.faults.lose_doorbells > 0 {
            self.cfg.faults.lose_doorbells -= 1;
            log::warn!("model: send doorbell {val:#x} lost (injected)");
            return;
        }
        let qpn = (val as u32) >> 8;
        if self.halted() {
            log::warn!("model: send doorbell of QP {qpn:#x} ignored: the device is halted");
            return;
        }
        let Some(qp) = self.objects.qps.get(&qpn) else {
            self.eth_sq_doorbell(uar, qpn);
            return;
        };
        if qp.uar != uar {
            log::warn!(
                "model: QP {qpn:#x} rung through UAR {uar}, expected {}",
                qp.uar
            );
            return;
        }
        self.run_sq(qpn);
    }

    /// Executes the QP's posted send WQEs in order, up to the doorbell record's counter.
    pub fn run_sq(&mut self, qpn: u32) {
        // The WQE bytes are read into a buffer the HCA keeps (taken here, so the parsed WQE can
        // borrow it while the HCA executes it); a nested run of another queue makes its own.
        let mut buf = std::mem::take(&mut *self.wqe_buf);
        buf.resize(MAX_SEND_WQE, 0);
        self.run_sq_with(qpn, &mut buf);
        *self.wqe_buf = buf;
    }

    fn run_sq_with(&mut self, qpn: u32, buf: &mut [u8]) {
        // The doorbell record's producer counter as last read: read again only once the queue
        // has caught up with it (the driver only moves it forward).
        let mut posted: Option<u16> = None;
        loop {
            // The QP is borrowed from the table while its WQE is read and its request built;
            // what the rest needs is copied (`Sender`) before the request goes out.
            let Some(qp) = self.objects.qps.get(&qpn) else {
                return;
            };
            if matches!(qp.state, QpState::Sqer | QpState::Err) && !qp.no_sq {
                // Send requests posted while the send queue is in error are flushed, and so
                // are those posted to a QP in ERR (IBA: the Error state flushes what is posted; umr.c
                // `mlx5r_umr_recover` waits for exactly that flush).
                self.flush_sq(qpn);
                return;
            }
            if !matches!(qp.state, QpState::Rts | QpState::Sqd) || qp.no_sq {
                return;
            }
            let head = match posted {
                Some(h) if h != qp.sq_consumed => h,
                _ => match self.dma.read_be32(qp.dbr + 4) {
                    Ok(v) => *posted.insert(v as u16),
                    Err(f) => {
                        self.record_fault(f);
                        self.qp_fatal(qpn);
                        return;
                    }
                },
            };
            if qp.sq_consumed == head {
                return;
            }
            if qp.resend_at_ns > self.now_ns() {
                // Waiting out an RNR NAK's timer or an ACK timeout.
                self.stalled_sqs.insert(qpn);
                return;
            }
            if qp.st == ServiceType::RegUmr {
                if self.step_umr(qpn) {
                    continue;
                }
                return;
            }
            let consumed = qp.sq_consumed;
            let mut w = SendWqe::default();
            match self.read_send_wqe(qp, buf, &mut w) {
                Ok(()) => {}
                Err(WqeFault::Umr) => {
                    if self.step_umr(qpn) {
                        continue;
                    }
                    return;
                }
                Err(WqeFault::Fetch(f)) => {
                    self.record_fault(f);
                    self.qp_fatal(qpn);
                    return;
                }
                Err(WqeFault::Malformed) => {
                    log::debug!("model: QP {qpn:#x}: send WQE {consumed} does not parse");
                    let s = Sender::of(qp);
                    self.complete_send_error(&s, consumed, 0, synd::LOCAL_QP_OP);
                    return;
                }
            };
            let mut s = Sender::of(qp);
            let outcome = if Self::dci_stream_errored(qp, &w) {
                self.send_error_cqe(&s, w.wqe_index, w.opcode, synd::WR_FLUSH);
                Outcome::Flushed
            } else if qp.ack_pending {
                // The ACK timeout of an unanswered request ran out: the request goes again
                // (this WQE, read again from the top) or fails.
                match self.ack_timed_out(qpn) {
                    Some(o) => o,
                    None => continue,
                }
            } else {
                // The model runs a send queue in order, so fences change nothing; the
                // initiator small fence (mode 1, what rdma-core puts after a UMR) is counted
                // for tests.
                if w.fence_mode == 1 {
                    self.counters.small_fenced += 1;
                }
                let payload = std::mem::take(&mut *self.payload_buf);
                match self.build_request(qp, &w, payload) {
                    Ok(req) => self.send_request(&mut s, req, &w),
                    Err(u) => {
                        if let Some(f) = u.fault {
                            self.record_fault(f);
                        }
                        Outcome::Failed(u.syndrome)
                    }
                }
            };
            match outcome {
                Outcome::Wait => {
                    self.stalled_sqs.insert(qpn);
                    return;
                }
                Outcome::Flushed => {
                    if let Some(q) = self.objects.qps.get_mut(&qpn) {
                        q.sq_consumed = q.sq_consumed.wrapping_add(w.bbs);
                    }
                }
                Outcome::Done(_) | Outcome::DoneInline(_) => {
                    if let Some(q) = self.objects.qps.get_mut(&qpn) {
                        q.sq_consumed = q.sq_consumed.wrapping_add(w.bbs);
                        q.rnr_tries = 0;
                        q.retry_tries = 0;
                        if let Some(psn) = s.next_send_psn {
                            q.next_send_psn = psn;
                        }
                    }
                    if w.signaled {
                        let (byte_cnt, inline) = match &outcome {
                            Outcome::DoneInline(data) => {
                                self.counters.scattered_to_cqe += 1;
                                (data.len() as u32, Some(&data[..]))
                            }
                            Outcome::Done(bytes) => (*bytes, None),
                            _ => (0, None),
                        };
                        let c = ok_cqe(
                            CqeOpcode::Req,
                            &CqeFields {
                                sop_drop_qpn: (u32::from(w.opcode) << 24) | qpn,
                                wqe_counter: w.wqe_index,
                                srqn_uidx: s.cqe_uidx(),
                                byte_cnt,
                                inline,
                                ..CqeFields::default()
                            },
                        );
                        self.post_cqe(s.cqn_snd, c, false);
                    }
                }
                Outcome::Failed(e) => {
                    if let Some(q) = self.objects.qps.get_mut(&qpn) {
                        q.sq_consumed = q.sq_consumed.wrapping_add(w.bbs);
                    }
                    if self.dci_stream_failed(&s, &w, e) {
                        continue;
                    }
                    self.complete_send_error(&s, w.wqe_index, w.opcode, e);
                    return;
                }
            }
        }
    }

    /// The error completion of send WQE `wqe_index` (`opcode`) of `s`, and what it does to
    /// the QP.
    pub(crate) fn complete_send_error(
        &mut self,
        s: &Sender,
        wqe_index: u16,
        opcode: u8,
        syndrome: u8,
    ) {
        self.send_error_cqe(s, wqe_index, opcode, syndrome);
        // A send error stops only the send queue of an unreliable QP (SQE); RC goes to ERR.
        // The UMR QP goes to ERR too: Linux 6.12 umr.c `mlx5r_umr_recover` expects only
        // WR_FLUSH_ERR after a failed UMR and resets the QP.
        match s.st {
            ServiceType::Uc | ServiceType::Ud | ServiceType::Qp0 | ServiceType::Qp1 => {
                self.qp_to_sqe(s.qpn)
            }
            ServiceType::Rc
            | ServiceType::Xrc
            | ServiceType::RegUmr
            | ServiceType::Dci
            | ServiceType::Dct => self.qp_to_error(s.qpn),
        }
    }

    /// The requester error CQE of WQE `wqe_index` (`opcode`) of `s`.
    pub(crate) fn send_error_cqe(&mut self, s: &Sender, wqe_index: u16, opcode: u8, syndrome: u8) {
        log::debug!(
            "model: QP {:#x} ({:?}) WQE {wqe_index} opcode {opcode:#x}: error CQE syndrome {syndrome:#x}",
            s.qpn,
            s.st
        );
        let c = err_cqe(
            CqeOpcode::ReqErr,
            opcode,
            s.qpn,
            wqe_index,
            syndrome,
            s.cqe_uidx(),
        );
        self.post_cqe(s.cqn_snd, c, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::Qp;
    use crate::request::*;
    use crate::SimHal;
    use bareverbs_firmware_cmd::ifc::wqe_opcode;

    fn rc_qp(qpn: u32, next_rcv_psn: u32) -> Qp {
        Qp {
            qpn,
            st: ServiceType::Rc,
            state: QpState::Rts,
            pd: 0,
            cqn_snd: 0,
            cqn_rcv: 0,
            uar: 0,
            log_sq_size: 0,
            log_rq_size: 0,
            rq_wqe_shift: 4,
            no_sq: true,
            no_rq: false,
            pas: Default::default(),
            page_size: 4096,
            page_offset: 0,
            dbr: 0,
            user_index: 0,
            port: 1,
            pkey_index: 0,
            qkey: 0,
            rre: true,
            rwe: true,
            rae: true,
            mtu: 3,
            remote_qpn: 0,
            rlid: 1,
            sl: 0,
            next_send_psn: 0,
            next_rcv_psn,
            log_msg_max: 31,
            retry_count: 0,
            rnr_retry: 0,
            min_rnr_nak: 0,
            ack_timeout: 0,
            sq_consumed: 0,
            rq_consumed: 0,
            rnr_tries: 0,
            resend_at_ns: 0,
            ack_pending: false,
            retry_tries: 0,
            transport_retries: 0,
            comm_est: false,
            dct: None,
            dci: None,
            cs_req: 0,
            cs_res: 0,
            e2e_credit_mode: 0,
        }
    }

    fn request(kind: Kind, psn: u32, len: u64) -> Request {
        Request {
            kind,
            st: ServiceType::Rc,
            psn,
            src_qpn: 0x200,
            slid: 1,
            dlid: 1,
            sl: 0,
            dst_qpn: 0x100,
            payload: vec![0; if kind == Kind::Write { len as usize } else { 0 }],
            imm: None,
            solicited: false,
            raddr: 0x1000,
            // No such key: a request that gets as far as its rkey is refused with an access
            // error, so an ACK proves it was not executed.
            rkey: 0x4242,
            len,
            swap_add: 0,
            compare: 0,
            qkey: 0,
            grh: None,
            pkts: 1,
            xrc_srqn: None,
            dc_key: 0,
        }
    }

    #[test]
    fn a_dci_request_runs_on_the_low_bits_of_its_stream_id() {
        let mut qp = rc_qp(0x100, 0);
        qp.st = ServiceType::Dci;
        // Not a DCI: no streams.
        assert_eq!(dci_channel(&rc_qp(0x100, 0), 7), 0);
        // A DCI created without streams (as perftest's, which still names ids 0, 1, 2, ...).
        qp.dci = Some(crate::qp::DciStreams::default());
        assert_eq!(dci_channel(&qp, 0), 0);
        assert_eq!(dci_channel(&qp, 1), 0);
        assert_eq!(dci_channel(&qp, 0xffff), 0);
        // Four streams.
        qp.dci = Some(crate::qp::DciStreams {
            log_channels: 2,
            ..Default::default()
        });
        assert_eq!(dci_channel(&qp, 3), 3);
        assert_eq!(dci_channel(&qp, 6), 2);
        // As parsed from a WQE: control segment bytes 9..11 (rdma-core mlx5dv.h
        // `mlx5_wqe_ctrl_seg.dci_stream_channel_id`).
        let mut raw = vec![0u8; 128];
        raw[3] = wqe_opcode::RDMA_WRITE;
        raw[7] = 6; // control, address vector (3 x 16 bytes), remote address, data
        raw[9..11].copy_from_slice(&5u16.to_be_bytes());
        let w = DataPath::parse_send_wqe(&qp, &raw, 2);
        assert_eq!(w.map(|w| w.dci_stream), Some(1));
        // A `ds` that leaves no room for the remote address segment: malformed, no panic.
        raw[7] = 4;
        assert!(DataPath::parse_send_wqe(&qp, &raw, 2).is_none());
    }

    #[test]
    fn the_responder_checks_the_psn_then_the_rdma_length() {
        let hal = SimHal::synchronous();
        hal.model().with(|h| {
            let expected = 0xff_fffe;
            h.objects.qps.insert(0x100, rc_qp(0x100, expected));
            let epsn = |h: &crate::Hca| h.qp(0x100).map(|q| q.next_rcv_psn);
            // An RDMA READ longer than 2^31 bytes: remote invalid request, nothing accepted.
            let r = h
                .data_path()
                .respond(&request(Kind::Read, expected, MAX_RDMA_LEN + 1));
            assert!(matches!(r, Response::Nak(synd::REMOTE_INVAL_REQ)));
            assert_eq!(epsn(h), Some(expected));
            // The responder went to ERR (IBA 9.9.3.1 class C); back to RTS for what follows.
            let rearm = |h: &mut crate::Hca| {
                let q = h.objects.qps.get_mut(&0x100).unwrap();
                assert_eq!(q.state, QpState::Err);
                q.state = QpState::Rts;
            };
            rearm(h);
            // Ahead (across the wrap), up to half the PSN space: sequence error NAK.
            for psn in [0, psn_add(expected, (1 << 23) - 1)] {
                let r = h.data_path().respond(&request(Kind::Write, psn, 4));
                assert!(matches!(r, Response::NakSeq), "psn {psn:#x}");
            }
            // Behind, down to half the PSN space: a duplicate WRITE, acknowledged unexecuted.
            for psn in [expected - 1, psn_add(expected, 1 << 23)] {
                let r = h.data_path().respond(&request(Kind::Write, psn, 4));
                assert!(
                    matches!(r, Response::Ack(ref d) if d.is_empty()),
                    "psn {psn:#x}"
                );
            }
            assert_eq!(epsn(h), Some(expected));
            // The expected PSN is executed (here: refused for its rkey) and does not advance.
            let r = h.data_path().respond(&request(Kind::Write, expected, 4));
            assert!(matches!(r, Response::Nak(synd::REMOTE_ACCESS)));
            assert_eq!(epsn(h), Some(expected));
            rearm(h);
            // A QP without remote read: remote invalid request, not an access error.
            if let Some(q) = h.objects.qps.get_mut(&0x100) {
                q.rre = false;
            }
            let r = h.data_path().respond(&request(Kind::Read, expected, 8));
            assert!(matches!(r, Response::Nak(synd::REMOTE_INVAL_REQ)));
        });
    }
}
