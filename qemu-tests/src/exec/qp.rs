//! CREATE/DESTROY/QUERY_QP and the state-transition commands (mlx5-reference 05 §1–2).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::View;
use bareverbs_firmware_cmd::{CmdStatus, Opcode};

use super::{bad_param, fail, input, output, syndrome, CmdResult};
use crate::hca::Hca;
use crate::qp::{Qp, QpState, ServiceType, PSN_MASK};

/// First QP number handed out (0 and 1 are the special QPs).
pub const FIRST_QPN: u32 = 0x100;

impl Hca {
    pub(super) fn create_qp(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateQpIn>(i)?;
        let mut out = output::<CreateQpOut>(o)?;
        self.require_initialized()?;
        let c = v.sub(create_qp_in::qpc);
        // qp.h MLX5_QP_ST_*: RC, UC, UD, the special QPs 0 and 1 (Linux 6.12 qp.c `to_mlx5_st`
        // for IB_QPT_SMI and the hardware GSI QP) and the UMR QP (MLX5_IB_QPT_REG_UMR).
        let st =
            ServiceType::from_raw(c.get(qpc::st) as u8).ok_or(bad_param(syndrome::OUT_OF_RANGE))?;
        // A DC initiator needs DC (`cmd_hca_cap.dct`, set by SET_HCA_CAP as Linux does) and
        // receives nothing: Linux 6.12 qp.c `get_rx_type` gives it `rq_type` SRQ (a
        // placeholder SRQ, checked below), never an RQ.
        if st == ServiceType::Dci
            && (self.cap(cmd_hca_cap::dct) == 0
                || c.get(qpc::rq_type) != u64::from(qpc_rq_type::SRQ_RQ))
        {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let pd = c.get32(qpc::pd);
        // Measured: mlx5_ib creates its UMR QP with `pd` 0; it never touches a PD's memory.
        let no_pd = st == ServiceType::RegUmr && pd == 0;
        // qpc.rq_type (mlx5_ifc; Linux qp.c `get_rq_type`): a regular RQ in the work buffer, or
        // a zero-length RQ with no space in it, or receives from an SRQ. Cyclic RQs are not
        // modelled.
        let no_rq = match c.get(qpc::rq_type) as u8 {
            qpc_rq_type::NON_ZERO_RQ => false,
            qpc_rq_type::ZERO_LEN_RQ => true,
            // Receives from the SRQ in srqn_rmpn_xrqn (checked below): no RQ in the buffer.
            qpc_rq_type::SRQ_RQ => true,
            _ => return Err(bad_param(syndrome::OUT_OF_RANGE)),
        };
        // XRC QPs receive through the XRC SRQ each request names, never through an RQ of their
        // own: Linux 6.12 qp.c `get_rx_type` gives both the initiator and the target `rq_type`
        // SRQ, with `srqn_rmpn_xrqn` its default SRQ and `xrcd` the domain (the target's from
        // `create_xrc_tgt_qp`, checked below with the SRQ by `qp_rq_srq`). The device must
        // offer XRC (`cmd_hca_cap.xrc`).
        if st == ServiceType::Xrc {
            if self.cap(cmd_hca_cap::xrc) == 0 {
                return Err(bad_param(syndrome::OUT_OF_RANGE));
            }
            if c.get(qpc::rq_type) != u64::from(qpc_rq_type::SRQ_RQ) {
                return Err(bad_param(syndrome::OUT_OF_RANGE));
            }
        }
        let (cqn_snd, cqn_rcv) = (c.get32(qpc::cqn_snd), c.get32(qpc::cqn_rcv));
        let uar = c.get32(qpc::uar_page);
        // The UAR rings the send queue: a QP without one needs none (Linux 6.12 qp.c
        // `create_xrc_tgt_qp` leaves `uar_page` 0).
        let no_sq = c.get(qpc::no_sq) != 0;
        if !(no_pd || self.objects.pds.contains(&pd))
            || !self.objects.cqs.contains_key(&cqn_snd)
            || !self.objects.cqs.contains_key(&cqn_rcv)
            || !(no_sq || self.objects.uars.contains(&uar))
        {
            return Err(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT));
        }
        let rq_srq = self.qp_rq_srq(&c)?;
        let log_sq_size = c.get(qpc::log_sq_size) as u8;
        let log_rq_size = c.get(qpc::log_rq_size) as u8;
        let max_wq = self.cap(cmd_hca_cap::log_max_qp_sz);
        // Pages of 4 KiB up to 4 GiB, as for CQs (log_page_size relative to 4 KiB).
        let log_page = c.get32(qpc::log_page_size);
        if u64::from(log_sq_size) > max_wq || u64::from(log_rq_size) > max_wq || log_page > 20 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let mut qp = Qp {
            qpn: 0,
            st,
            state: QpState::Rst,
            pd,
            cqn_snd,
            cqn_rcv,
            uar,
            log_sq_size,
            log_rq_size,
            rq_wqe_shift: c.get(qpc::log_rq_stride) as u8 + 4,
            no_sq,
            no_rq,
            pas: Default::default(),
            page_size: 4096 << log_page,
            page_offset: crate::page_list::page_offset_bytes(
                4096 << log_page,
                c.get(qpc::page_offset),
            ),
            dbr: c.get(qpc::dbr_addr),
            user_index: c.get32(qpc::user_index),
            port: 1,
            pkey_index: 0,
            qkey: 0,
            rre: false,
            rwe: false,
            rae: false,
            mtu: 0,
            remote_qpn: 0,
            rlid: 0,
            sl: 0,
            next_send_psn: 0,
            next_rcv_psn: 0,
            log_msg_max: 0,
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
        };
        let pages =
            crate::page_list::pages_spanned(qp.buffer_bytes(), qp.page_size, qp.page_offset);
        if v.array_len(create_qp_in::pas) < pages {
            return Err(fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT));
        }
        qp.pas = (0..pages)
            .filter_map(|k| v.array(create_qp_in::pas, k))
            .collect();
        if qp.pas.iter().any(|p| p % qp.page_size != 0) || qp.dbr % 8 != 0 {
            return Err(bad_param(syndrome::BAD_PAGE));
        }
        self.qp_dv_context(&c, &mut qp)?;
        let max = 1u32 << self.cap(cmd_hca_cap::log_max_qp);
        let qpn = (FIRST_QPN..FIRST_QPN + max)
            .find(|n| !self.objects.qps.contains_key(n) && !self.is_eth_queue(*n))
            .ok_or(fail(CmdStatus::NoResources, syndrome::EXHAUSTED))?;
        qp.qpn = qpn;
        for cqn in [cqn_snd, cqn_rcv] {
            if let Some(cq) = self.objects.cqs.get_mut(&cqn) {
                cq.users += 1;
            }
        }
        if qp.page_offset != 0 {
            self.counters.offset_queues += 1;
        }
        self.objects.qps.insert(qpn, qp);
        self.attach_qp_srq(qpn, rq_srq);
        out.set(create_qp_out::qpn, qpn);
        Ok(())
    }

    /// What `qpc` says of DCI streams, scatter to CQE and credits, checked against the
    /// capabilities: the model has 64-byte CQEs only, so only the 32-byte scatter modes.
    fn qp_dv_context(&self, c: &View<'_, Qpc>, qp: &mut Qp) -> CmdResult {
        let streams = (
            c.get(qpc::log_num_dci_stream_channels) as u8,
            c.get(qpc::log_num_dci_errored_streams) as u8,
        );
        if qp.st == ServiceType::Dci {
            if u64::from(streams.0) > self.cap(cmd_hca_cap::log_max_dci_stream_channels)
                || u64::from(streams.1) > self.cap(cmd_hca_cap::log_max_dci_errored_streams)
            {
                return Err(bad_param(syndrome::OUT_OF_RANGE));
            }
            qp.dci = Some(crate::qp::DciStreams {
                log_channels: streams.0,
                log_errored: streams.1,
                errored: Default::default(),
            });
        } else if streams != (0, 0) {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let (req, res) = (c.get(qpc::cs_req) as u8, c.get(qpc::cs_res) as u8);
        let scatter = self.cap(cmd_hca_cap::sctr_data_cqe) != 0;
        let req_ok = req == 0
            || (req == qpc_scatter::REQ_DATA32
                && scatter
                && match qp.st {
                    ServiceType::Rc => true,
                    ServiceType::Dci => self.cap(cmd_hca_cap::dc_req_sctr_data_cqe) != 0,
                    _ => false,
                });
        let res_ok = res == 0
            || (res == qpc_scatter::RES_DATA32
                && scatter
                && matches!(qp.st, ServiceType::Rc | ServiceType::Uc));
        if !req_ok || !res_ok {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        (qp.cs_req, qp.cs_res) = (req, res);
        let credits = c.get(qpc::req_e2e_credit_mode) as u8;
        if credits > 1
            || (credits == 1
                && (qp.st != ServiceType::Rc || self.cap(cmd_hca_cap::qp_packet_based) == 0))
        {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        qp.e2e_credit_mode = credits;
        Ok(())
    }

    /// RTS2RTS with the QPC extension: only a DCI stream's reset (rdma-core
    /// `mlx5dv_dci_stream_id_reset`) is modelled.
    fn reset_dci_stream(&mut self, i: &[u8]) -> CmdResult {
        let v = input::<Rts2RtsQpExtIn>(i)?;
        let qpn = v.get32(rts2rts_qp_ext_in::qpn);
        let opt = v.get(rts2rts_qp_ext_in::opt_param_mask_95_32);
        let stream = v
            .sub(rts2rts_qp_ext_in::qpc_data_ext)
            .get(qpc_ext::dci_stream_channel_id) as u16;
        let q = self
            .objects
            .qps
            .get_mut(&qpn)
            .ok_or(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT))?;
        if q.state != QpState::Rts {
            return Err(fail(CmdStatus::BadQpState, syndrome::WRONG_STATE));
        }
        let Some(d) = q.dci.as_mut() else {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        };
        if opt != qpc_opt_mask_32::DCI_STREAM_CHANNEL_ID
            || u32::from(stream) >= 1u32 << d.log_channels
        {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        d.errored.remove(&stream);
        Ok(())
    }

    pub(super) fn destroy_qp(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroyQpIn>(i)?;
        output::<DestroyQpOut>(o)?;
        self.require_initialized()?;
        let qpn = v.get32(destroy_qp_in::qpn);
        let qp = self
            .objects
            .qps
            .remove(&qpn)
            .ok_or(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT))?;
        self.detach_qp_srq(qpn);
        self.detach_qp_mcgs(qpn);
        for cqn in [qp.cqn_snd, qp.cqn_rcv] {
            if let Some(cq) = self.objects.cqs.get_mut(&cqn) {
                cq.users = cq.users.saturating_sub(1);
            }
        }
        Ok(())
    }

    /// The modify commands: `opcode` names the transition; the current state must match.
    pub(super) fn modify_qp(&mut self, opcode: u16, i: &[u8], o: &mut [u8]) -> CmdResult {
        // 2ERR and 2RST are 16-byte commands; the others carry a QP context.
        if i.len() < 16 {
            return Err(fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT));
        }
        output::<Qp2RstOut>(o)?;
        self.require_initialized()?;
        if Opcode(opcode) == Opcode::RTS2RTS_QP
            && View::<Rts2RtsQpExtIn>::new_checked(i)
                .is_ok_and(|v| v.get(rts2rts_qp_ext_in::qpc_ext) != 0)
        {
            return self.reset_dci_stream(i);
        }
        let qpn = View::<Qp2RstIn>::new_checked(i)
            .map(|v| v.get32(qp_2rst_in::qpn))
            .unwrap_or(0);
        let qp = self
            .objects
            .qps
            .get(&qpn)
            .ok_or(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT))?
            .clone();
        let (from, to): (&[QpState], QpState) = match Opcode(opcode) {
            Opcode::RST2INIT_QP => (&[QpState::Rst], QpState::Init),
            Opcode::INIT2INIT_QP => (&[QpState::Init], QpState::Init),
            Opcode::INIT2RTR_QP => (&[QpState::Init], QpState::Rtr),
            Opcode::RTR2RTS_QP => (&[QpState::Rtr], QpState::Rts),
            Opcode::RTS2RTS_QP => (&[QpState::Rts], QpState::Rts),
            Opcode::SQERR2RTS_QP => (&[QpState::Sqer], QpState::Rts),
            Opcode::SQD_RTS_QP => (&[QpState::Sqd], QpState::Rts),
            Opcode::QP_2ERR => {
                self.qp_to_error(qpn);
                return Ok(());
            }
            _ => {
                // 2RST: back to reset, queues forgotten.
                if let Some(q) = self.objects.qps.get_mut(&qpn) {
                    q.state = QpState::Rst;
                    q.sq_consumed = 0;
                    q.rq_consumed = 0;
                    q.rnr_tries = 0;
                    q.resend_at_ns = 0;
                    q.ack_pending = false;
                    q.retry_tries = 0;
                    q.comm_est = false;
                }
                return Ok(());
            }
        };
        if !from.contains(&qp.state) {
            return Err(fail(CmdStatus::BadQpState, syndrome::WRONG_STATE));
        }
        let v = input::<Rst2InitQpIn>(i)?;
        let c = v.sub(rst2init_qp_in::qpc);
        let path = c.sub(qpc::primary_address_path);
        let opt = v.get32(rst2init_qp_in::opt_param_mask);
        let mut q = qp;
        // PRM: in the later transitions the remote-access enables change only with their
        // opt_param_mask bit (Linux sets them with IB_QP_ACCESS_FLAGS and with
        // IB_QP_MAX_DEST_RD_ATOMIC, clearing rre/rae when that is 0).
        if !matches!(Opcode(opcode), Opcode::RST2INIT_QP | Opcode::INIT2INIT_QP) {
            if opt & qp_optpar::RRE != 0 {
                q.rre = c.get(qpc::rre) != 0;
            }
            if opt & qp_optpar::RWE != 0 {
                q.rwe = c.get(qpc::rwe) != 0;
            }
            if opt & qp_optpar::RAE != 0 {
                q.rae = c.get(qpc::rae) != 0;
            }
        }
        match Opcode(opcode) {
            Opcode::RST2INIT_QP | Opcode::INIT2INIT_QP => {
                let port = path.get(ads::vhca_port_num) as u8;
                if port == 0 || usize::from(port) > self.ports.len() {
                    return Err(bad_param(syndrome::OUT_OF_RANGE));
                }
                // IBA: each port has one QP0 and one QP1 (the subnet management and general services QPs).
                let special = matches!(q.st, ServiceType::Qp0 | ServiceType::Qp1);
                if special
                    && self.objects.qps.values().any(|o| {
                        o.qpn != qpn && o.st == q.st && o.port == port && o.state != QpState::Rst
                    })
                {
                    return Err(bad_param(syndrome::IN_USE));
                }
                q.port = port;
                q.pkey_index = path.get(ads::pkey_index) as u16;
                q.qkey = c.get32(qpc::q_key);
                q.rre = c.get(qpc::rre) != 0;
                q.rwe = c.get(qpc::rwe) != 0;
                q.rae = c.get(qpc::rae) != 0;
            }
            Opcode::INIT2RTR_QP => {
                q.mtu = c.get(qpc::mtu) as u8;
                q.remote_qpn = c.get32(qpc::remote_qpn);
                q.next_rcv_psn = c.get32(qpc::next_rcv_psn) & PSN_MASK;
                q.log_msg_max = c.get(qpc::log_msg_max) as u8;
                q.min_rnr_nak = c.get(qpc::min_rnr_nak) as u8;
                q.rlid = path.get(ads::rlid) as u16;
                q.sl = path.get(ads::sl) as u8;
                // Connected QPs need a path MTU; Linux 6.12 qp.c sets 256 for QP0/QP1 and 4096
                // for the UMR QP itself, and UD takes none.
                if matches!(
                    q.st,
                    ServiceType::Rc | ServiceType::Uc | ServiceType::Xrc | ServiceType::Dci
                ) && q.mtu == 0
                {
                    return Err(bad_param(syndrome::OUT_OF_RANGE));
                }
            }
            Opcode::RTR2RTS_QP => {
                q.next_send_psn = c.get32(qpc::next_send_psn) & PSN_MASK;
                q.retry_count = c.get(qpc::retry_count) as u8;
                q.rnr_retry = c.get(qpc::rnr_retry) as u8;
                q.ack_timeout = path.get(ads::ack_timeout) as u8;
            }
            _ => {}
        }
        q.state = to;
        self.objects.qps.insert(qpn, q);
        Ok(())
    }

    pub(super) fn query_qp(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryQpIn>(i)?;
        let mut out = output::<QueryQpOut>(o)?;
        self.require_initialized()?;
        let qpn = v.get32(query_qp_in::qpn);
        let q = self
            .objects
            .qps
            .get(&qpn)
            .ok_or(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT))?
            .clone();
        let st = q.st.raw();
        let mut c = out.sub(query_qp_out::qpc);
        c.set(qpc::state, q.state.raw())
            .set(qpc::st, st)
            .set(qpc::pd, q.pd)
            .set(qpc::mtu, q.mtu)
            .set(qpc::log_rq_size, q.log_rq_size)
            .set(qpc::log_rq_stride, q.rq_wqe_shift - 4)
            .set(qpc::log_sq_size, q.log_sq_size)
            .set(qpc::no_sq, q.no_sq)
            .set(
                qpc::rq_type,
                if q.no_rq {
                    qpc_rq_type::ZERO_LEN_RQ
                } else {
                    qpc_rq_type::NON_ZERO_RQ
                },
            )
            .set(qpc::remote_qpn, q.remote_qpn)
            .set(qpc::retry_count, q.retry_count)
            .set(qpc::rnr_retry, q.rnr_retry)
            .set(qpc::next_send_psn, q.next_send_psn)
            .set(qpc::cqn_snd, q.cqn_snd)
            .set(qpc::rre, q.rre)
            .set(qpc::rwe, q.rwe)
            .set(qpc::rae, q.rae)
            .set(qpc::min_rnr_nak, q.min_rnr_nak)
            .set(qpc::next_rcv_psn, q.next_rcv_psn)
            .set(qpc::cqn_rcv, q.cqn_rcv)
            .set(qpc::cs_req, q.cs_req)
            .set(qpc::cs_res, q.cs_res)
            .set(qpc::req_e2e_credit_mode, q.e2e_credit_mode)
            .set(qpc::q_key, q.qkey)
            .set(qpc::dbr_addr, q.dbr);
        if let Some((srqn, xrcd)) = self.qp_srq(qpn) {
            c.set(qpc::rq_type, qpc_rq_type::SRQ_RQ)
                .set(qpc::srqn_rmpn_xrqn, srqn)
                .set(qpc::xrcd, xrcd);
        }
        let mut p = c.sub(qpc::primary_address_path);
        p.set(ads::vhca_port_num, q.port)
            .set(ads::pkey_index, q.pkey_index)
            .set(ads::rlid, q.rlid)
            .set(ads::sl, q.sl)
            .set(ads::ack_timeout, q.ack_timeout);
        Ok(())
    }
}
