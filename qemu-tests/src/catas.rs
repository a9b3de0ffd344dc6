//! Catastrophic errors of a work queue or an SRQ: the affiliated asynchronous errors a QP or
//! an SRQ raises when it can no longer be served (IBA 11.6.3.1, "Local Work Queue
//! Catastrophic Error"; mlx5 event types WQ_CATAS_ERROR and SRQ_CATAS_ERROR, which Linux 6.12
//! mlx5_ib reports as IB_EVENT_QP_FATAL and IB_EVENT_SRQ_ERR).
//!
//! When the model raises them (IBA names the conditions, the model picks these instances):
//! - a QP whose completion cannot be written because its CQ is in error (overrun): IBA says
//!   the error is generated when a queue of that CQ next tries to use it;
//! - a QP whose doorbell record or WQEs cannot be read (a DMA fault on the fetch);
//! - an SRQ (or RMP, XRC SRQ) whose doorbell record or WQEs cannot be read. The SRQ stops
//!   giving WQEs and every QP receiving from it goes to ERR (each then reports its last WQE,
//!   as any QP on an SRQ entering ERR does). XRC target QPs name their XRC SRQ per request,
//!   not at creation: they stay as they are.

use bareverbs_firmware_cmd::ifc::event_type;

use crate::data_path::DataPath;
use crate::eq::qp_srq_event_data;
use crate::qp::QpState;

impl DataPath<'_> {
    /// QP `qpn` cannot go on: it moves to ERR (what is posted is flushed where its CQ still
    /// takes completions) and WQ_CATAS_ERROR names it. Once per stay out of ERR; a QP in RESET
    /// (or gone) raises nothing.
    pub(crate) fn qp_fatal(&mut self, qpn: u32) {
        let Some(qp) = self.objects.qps.get(&qpn) else {
            return;
        };
        if matches!(qp.state, QpState::Err | QpState::Rst) {
            return;
        }
        log::warn!("model: QP {qpn:#x} catastrophic error");
        // `qp_to_error` sets ERR before it flushes, so a flush completion that a shut-down
        // CQ refuses does not come back here.
        self.post_event(event_type::WQ_CATAS_ERROR, 0, qp_srq_event_data(0, qpn));
        self.qp_to_error(qpn);
    }

    /// SRQ `srqn` cannot be read: it stops giving WQEs, SRQ_CATAS_ERROR names it, and the QPs
    /// receiving from it go to ERR. Once, until the SRQ is made ready again.
    pub(crate) fn srq_fatal(&mut self, srqn: u32) {
        let Some(s) = self.objects.srqs.get_mut(&srqn) else {
            return;
        };
        if !s.good {
            return;
        }
        s.good = false;
        log::warn!("model: SRQ {srqn:#x} catastrophic error");
        self.post_event(event_type::SRQ_CATAS_ERROR, 0, qp_srq_event_data(0, srqn));
        let users: Vec<u32> = self
            .objects
            .qp_srqs
            .iter()
            .filter(|(_, &(s, _))| s == srqn)
            .map(|(&q, _)| q)
            .collect();
        for qpn in users {
            self.qp_to_error(qpn);
        }
    }
}
