//! A QP leaving service: moved to ERR (RC and the rest) or SQE (UC, UD), its outstanding work
//! completed with WR_FLUSH_ERR as mlx5 hardware does, and receives posted to a QP already in
//! ERR flushed as the device finds them (mlx5-reference 05 §2, §6).

use bareverbs_firmware_cmd::ifc::{event_type, CqeOpcode};

use crate::cqe_write::{err_cqe, synd};
use crate::data_path::DataPath;
use crate::dma::AddressSpaceExt;
use crate::qp::{Qp, QpState};

impl DataPath<'_> {
    /// Moves QP `qpn` to ERR and completes every outstanding WQE, send and receive, with a
    /// WR_FLUSH_ERR completion (what mlx5 hardware does when a QP enters the error state).
    pub fn qp_to_error(&mut self, qpn: u32) {
        let Some(qp) = self.objects.qps.get_mut(&qpn) else {
            return;
        };
        let was_err = qp.state == QpState::Err;
        qp.state = QpState::Err;
        self.flush_rq(qpn);
        self.flush_sq(qpn);
        // A QP that receives through an SRQ has no receive WQEs of its own to flush: those
        // posted to the SRQ stay there for its other QPs. It announces instead that it will
        // take no more (IBA 11.6.3.1 "Last WQE Reached"; Linux 6.12 mlx5_ib qp.c
        // `mlx5_ib_qp_event` maps MLX5_EVENT_TYPE_SRQ_LAST_WQE to
        // IB_EVENT_QP_LAST_WQE_REACHED; mlx5_core finds the QP from `qp_srq_n` and type 0, QP).
        if !was_err && self.objects.qp_srq(qpn).is_some() {
            self.post_event(
                event_type::SRQ_LAST_WQE,
                0,
                crate::eq::qp_srq_event_data(0, qpn),
            );
        }
    }

    /// Moves UC/UD QP `qpn` to SQE: every outstanding send WQE completes with WR_FLUSH_ERR,
    /// the receive queue keeps working, and SQERR2RTS_QP resumes the send queue. The IB
    /// "send queue error" state exists for unreliable transports only: Linux's
    /// `qp_state_table` (drivers/infiniband/core/verbs.c) has SQE → RTS for UC, UD and the
    /// special QPs and none for RC, and mlx5_ib's `optab` maps SQER → RTS to SQERR2RTS_QP.
    pub fn qp_to_sqe(&mut self, qpn: u32) {
        let Some(qp) = self.objects.qps.get_mut(&qpn) else {
            return;
        };
        qp.state = QpState::Sqer;
        self.flush_sq(qpn);
    }

    /// The doorbell record's (receive, send) counters, or `None` after recording the fault.
    fn dbr_heads(&mut self, qp: &Qp) -> Option<(u16, u16)> {
        match (self.dma.read_be32(qp.dbr), self.dma.read_be32(qp.dbr + 4)) {
            (Ok(r), Ok(s)) => Some((r as u16, s as u16)),
            (Err(f), _) | (_, Err(f)) => {
                self.record_fault(f);
                None
            }
        }
    }

    /// Flushes receives posted to QPs already in ERR since the last look: the device reads
    /// their doorbell records from time to time (IBA 10.3.1: in the Error state posted work
    /// completes in error; Linux 6.12 mlx5_ib `mlx5_ib_drain_rq` posts a receive to a QP in
    /// ERR and waits for its flush completion).
    pub(crate) fn flush_err_rqs(&mut self) {
        let err: Vec<u32> = self
            .objects
            .qps
            .iter()
            .filter(|(_, q)| q.state == QpState::Err && !q.no_rq)
            .map(|(n, _)| n)
            .collect();
        for qpn in err {
            self.flush_rq(qpn);
        }
    }

    /// Completes every posted receive of `qpn` with WR_FLUSH_ERR. A QP without an RQ of its
    /// own (zero-length, or receiving through an SRQ) has none.
    fn flush_rq(&mut self, qpn: u32) {
        let Some(qp) = self.objects.qps.get(&qpn).cloned().filter(|q| !q.no_rq) else {
            return;
        };
        let Some((rq_head, _)) = self.dbr_heads(&qp) else {
            return;
        };
        let mut rq = qp.rq_consumed;
        while rq != rq_head {
            self.flush_cqe(&qp, rq);
            rq = rq.wrapping_add(1);
        }
        if let Some(q) = self.objects.qps.get_mut(&qpn) {
            q.rq_consumed = rq;
        }
    }

    /// Completes every posted send WQE of `qpn` with WR_FLUSH_ERR.
    pub(crate) fn flush_sq(&mut self, qpn: u32) {
        let Some(qp) = self.objects.qps.get(&qpn).cloned() else {
            return;
        };
        let Some((_, sq_head)) = self.dbr_heads(&qp) else {
            return;
        };
        let mut sq = qp.sq_consumed;
        let mask = (1u16 << qp.log_sq_size).wrapping_sub(1);
        while !qp.no_sq && sq != sq_head {
            // Each WQE's control segment says how many 16-byte units it spans.
            let at = qp.buf_iova(qp.sq_offset() + u64::from(sq & mask) * 64);
            let (op, ds) = match (self.dma.read_be32(at), self.dma.read_be32(at + 4)) {
                (Ok(a), Ok(b)) => ((a & 0xff) as u8, (b & 0x3f) as u16),
                _ => break,
            };
            let uidx = self.cqe_srqn_uidx(&qp, None);
            let cqe = err_cqe(CqeOpcode::ReqErr, op, qpn, sq, synd::WR_FLUSH, uidx);
            self.post_cqe(qp.cqn_snd, cqe, false);
            sq = sq.wrapping_add(ds.div_ceil(4).max(1));
        }
        if let Some(q) = self.objects.qps.get_mut(&qpn) {
            q.sq_consumed = sq;
        }
    }

    fn flush_cqe(&mut self, qp: &Qp, counter: u16) {
        let uidx = self.cqe_srqn_uidx(qp, None);
        let cqe = err_cqe(CqeOpcode::RespErr, 0, qp.qpn, counter, synd::WR_FLUSH, uidx);
        self.post_cqe(qp.cqn_rcv, cqe, false);
    }
}
