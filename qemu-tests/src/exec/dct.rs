//! CREATE/DESTROY/DRAIN/QUERY_DCT and ARM_DCT_FOR_KEY_VIOLATION (Linux 6.12 mlx5_ifc.h
//! `dctc`; drivers/infiniband/hw/mlx5/qpc.c).
//!
//! A DCT answers DC requests from the moment CREATE_DCT returns (Linux creates it only when
//! the verbs object goes to RTR). It is kept with the QPs: requests name its number as they
//! would a QP's, and the responder (`responder.rs`) treats it as an RC responder receiving
//! through its SRQ. DRAIN_DCT stops it answering and raises DCT_DRAINED, which Linux waits
//! for before DESTROY_DCT (`mlx5_core_destroy_dct`).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, input, output, syndrome, CmdResult, Fail};
use crate::hca::Hca;
use crate::qp::{DctState, Qp, QpState, ServiceType};

impl Hca {
    /// The DCT numbered `dctn`.
    fn dct_of(&self, dctn: u32) -> Result<&Qp, Fail> {
        self.objects
            .qps
            .get(&dctn)
            .filter(|q| q.st == ServiceType::Dct)
            .ok_or(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT))
    }

    pub(super) fn create_dct(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<CreateDctIn>(i)?;
        let mut out = output::<CreateDctOut>(o)?;
        self.require_initialized()?;
        if self.cap(cmd_hca_cap::dct) == 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let c = v.sub(create_dct_in::dct_context_entry);
        let (pd, cqn, srqn) = (
            c.get32(dctc::pd),
            c.get32(dctc::cqn),
            c.get32(dctc::srqn_xrqn),
        );
        let srq = self.srq(srqn).map(|s| s.xrcd.unwrap_or(0));
        let Some(xrcd) = srq else {
            return Err(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT));
        };
        if !self.objects.pds.contains(&pd) || !self.objects.cqs.contains_key(&cqn) {
            return Err(fail(CmdStatus::BadResource, syndrome::NO_SUCH_OBJECT));
        }
        // The model has 64-byte CQEs only: scattering to a CQE needs 128-byte ones for a DCT.
        let port = c.get(dctc::port) as u8;
        let mtu = c.get(dctc::mtu) as u8;
        if c.get(dctc::cs_res) != u64::from(dctc_cs_res::DISABLE)
            || usize::from(port).wrapping_sub(1) >= self.ports.len()
            || !(1..=5).contains(&mtu)
        {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let max = 1u32 << self.cap(cmd_hca_cap::log_max_qp);
        let first = super::FIRST_QPN;
        let dctn = (first..first + max)
            .find(|n| !self.objects.qps.contains_key(n))
            .ok_or(fail(CmdStatus::NoResources, syndrome::EXHAUSTED))?;
        let qp = Qp {
            qpn: dctn,
            st: ServiceType::Dct,
            state: QpState::Rtr,
            pd,
            cqn_snd: cqn,
            cqn_rcv: cqn,
            uar: 0,
            log_sq_size: 0,
            log_rq_size: 0,
            rq_wqe_shift: 4,
            no_sq: true,
            no_rq: true,
            pas: Default::default(),
            page_size: 4096,
            page_offset: 0,
            dbr: 0,
            user_index: c.get32(dctc::user_index),
            port,
            pkey_index: c.get(dctc::pkey_index) as u16,
            qkey: 0,
            rre: c.get(dctc::rre) != 0,
            rwe: c.get(dctc::rwe) != 0,
            rae: c.get(dctc::rae) != 0,
            mtu,
            remote_qpn: 0,
            rlid: 0,
            sl: 0,
            next_send_psn: 0,
            next_rcv_psn: 0,
            log_msg_max: 31,
            retry_count: 0,
            rnr_retry: 0,
            min_rnr_nak: c.get(dctc::min_rnr_nak) as u8,
            ack_timeout: 0,
            sq_consumed: 0,
            rq_consumed: 0,
            rnr_tries: 0,
            resend_at_ns: 0,
            ack_pending: false,
            retry_tries: 0,
            transport_retries: 0,
            comm_est: true,
            dct: Some(DctState {
                access_key: c.get(dctc::dc_access_key),
                state: dctc_state::ACTIVE,
                key_violations: 0,
                armed: false,
            }),
            dci: None,
            cs_req: 0,
            cs_res: 0,
            e2e_credit_mode: 0,
        };
        if let Some(cq) = self.objects.cqs.get_mut(&cqn) {
            cq.users += 2;
        }
        self.objects.qps.insert(dctn, qp);
        self.attach_qp_srq(dctn, Some((srqn, xrcd)));
        out.set(create_dct_out::dctn, dctn);
        Ok(())
    }

    pub(super) fn drain_dct(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DrainDctIn>(i)?;
        output::<DrainDctOut>(o)?;
        self.require_initialized()?;
        let dctn = v.get32(drain_dct_in::dctn);
        self.dct_of(dctn)?;
        if let Some(q) = self.objects.qps.get_mut(&dctn) {
            // A drained DCT answers nothing (the responder finds it in no receiving state).
            q.state = QpState::Rst;
            if let Some(d) = q.dct.as_mut() {
                d.state = dctc_state::DRAINED;
            }
        }
        // The model has no requests in flight: the DCT is drained at once.
        let mut data = [0u8; 28];
        data[EQE_DCT_DCTN..EQE_DCT_DCTN + 4].copy_from_slice(&dctn.to_be_bytes());
        self.post_event(event_type::DCT_DRAINED, 0, data);
        Ok(())
    }

    pub(super) fn destroy_dct(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DestroyDctIn>(i)?;
        output::<DestroyDctOut>(o)?;
        self.require_initialized()?;
        let dctn = v.get32(destroy_dct_in::dctn);
        let cqn = self.dct_of(dctn)?.cqn_rcv;
        self.objects.qps.remove(&dctn);
        self.detach_qp_srq(dctn);
        if let Some(cq) = self.objects.cqs.get_mut(&cqn) {
            cq.users = cq.users.saturating_sub(2);
        }
        Ok(())
    }

    pub(super) fn query_dct(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<QueryDctIn>(i)?;
        let mut out = output::<QueryDctOut>(o)?;
        self.require_initialized()?;
        let q = self.dct_of(v.get32(query_dct_in::dctn))?.clone();
        let d = q.dct.clone().unwrap_or_default();
        let srqn = self.qp_srq(q.qpn).map_or(0, |(s, _)| s);
        out.sub(query_dct_out::dct_context_entry)
            .set(dctc::state, d.state)
            .set(dctc::user_index, q.user_index)
            .set(dctc::cqn, q.cqn_rcv)
            .set(dctc::rre, q.rre)
            .set(dctc::rwe, q.rwe)
            .set(dctc::rae, q.rae)
            .set(dctc::min_rnr_nak, q.min_rnr_nak)
            .set(dctc::srqn_xrqn, srqn)
            .set(dctc::pd, q.pd)
            .set(dctc::dc_access_key, d.access_key)
            .set(dctc::mtu, q.mtu)
            .set(dctc::port, q.port)
            .set(dctc::pkey_index, q.pkey_index)
            .set(dctc::dc_access_key_violation_count, d.key_violations);
        Ok(())
    }

    pub(super) fn arm_dct(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<ArmDctIn>(i)?;
        output::<ArmDctOut>(o)?;
        self.require_initialized()?;
        let dctn = v.get32(arm_dct_in::dct_number);
        self.dct_of(dctn)?;
        if let Some(d) = self.objects.qps.get_mut(&dctn).and_then(|q| q.dct.as_mut()) {
            d.armed = true;
        }
        Ok(())
    }
}
