//! The data path: what the device does between a doorbell and a completion — send queues
//! run, requests answered, keys checked, data moved, CQEs and EQEs written, interrupts raised
//! — over the parts of the device it uses: the object tables, the address space, the ports,
//! the Ethernet NIC, the fabric, the logs and the MSI-X table. The command interface, BAR0's
//! registers and firmware's pages are not among them.
//!
//! [`Hca::data_path`](crate::Hca) lends those parts for one doorbell or one engine round; the
//! requester (`requester.rs`), the responder (`responder.rs`), the WQE executor
//! (`wqe_exec.rs`, `wqe_parse.rs`, `umr.rs`, `key_access.rs`), the CQ and EQ rings
//! (`cq_ring.rs`, `eq_ring.rs`), the flushes and catastrophic errors (`qp_flush.rs`,
//! `catas.rs`), late entries (`late.rs`) and Ethernet (`eth/rx.rs`, `eth/tx.rs`) are methods
//! of [`DataPath`].

use std::collections::BTreeSet;
use std::sync::Arc;

use bareverbs_firmware_cmd::ifc::CmdHcaCap;
use bareverbs_firmware_cmd::layout::Field;

use crate::caps::Caps;
use crate::clock::SimClock;
use crate::config::ModelConfig;
use crate::dma::{AddressSpace, DmaFault};
use crate::eth::Eth;
use crate::fabric::Fabric;
use crate::late::{Held, LateQueue};
use crate::msix::Msix;
use crate::objects::Objects;
use crate::port::{Port, Traffic};
use crate::trace::{Logs, ModelEvent};
use crate::work_counters::WorkCounters;

/// What the data path keeps between doorbells: send queues waiting to run again, entries held
/// back, and the buffers a send WQE is read and its message gathered into.
#[derive(Default)]
pub(crate) struct DataPathState {
    /// Send queues waiting to be run again (receiver not ready, or its HCA busy).
    pub(crate) stalled_sqs: BTreeSet<u32>,
    /// The message buffer a send request is gathered into, kept between requests so the
    /// data path does not allocate per WQE.
    pub(crate) payload_buf: Vec<u8>,
    /// The bytes of the send WQE being executed (`wqe_exec.rs`, `wqe_parse.rs`), kept for the
    /// same reason.
    pub(crate) wqe_buf: Vec<u8>,
    /// CQEs and EQEs held back by injected faults (`late.rs`).
    pub(crate) late: LateQueue,
}

/// The parts of one device the data path works on, borrowed from it.
pub(crate) struct DataPath<'a> {
    /// The model's configuration; the data path takes the faults it injects (lost, late and
    /// overrun CQEs and EQEs, lost doorbells).
    pub(crate) cfg: &'a mut ModelConfig,
    pub(crate) clock: &'a SimClock,
    /// Host memory as the device reaches it.
    pub(crate) dma: &'a dyn AddressSpace,
    pub(crate) objects: &'a mut Objects,
    pub(crate) ports: &'a mut [Port],
    /// The Ethernet NIC, when the port type is Ethernet.
    pub(crate) eth: &'a mut Option<Eth>,
    /// The fabric joining this HCA to others, if any.
    pub(crate) fabric: &'a Option<Arc<Fabric>>,
    /// CQEs and EQEs held back by injected faults.
    pub(crate) late: &'a mut LateQueue,
    pub(crate) logs: &'a mut Logs,
    pub(crate) msix: &'a mut Msix,
    pub(crate) counters: &'a mut WorkCounters,
    /// The capabilities firmware reports.
    pub(crate) caps: &'a Caps,
    /// What the driver wrote into the HOST_ENDIANNESS register.
    pub(crate) host_endianness: Option<u8>,
    /// The device has stopped (see [`DataPath::halted`]).
    pub(crate) halted: bool,
    /// Send queues waiting to be run again (receiver not ready, or its HCA busy).
    pub(crate) stalled_sqs: &'a mut BTreeSet<u32>,
    /// The message buffer a send request is gathered into, kept between requests so the
    /// data path does not allocate per WQE.
    pub(crate) payload_buf: &'a mut Vec<u8>,
    /// The bytes of the send WQE being executed (`wqe_exec.rs`, `wqe_parse.rs`), kept for the
    /// same reason.
    pub(crate) wqe_buf: &'a mut Vec<u8>,
}

impl DataPath<'_> {
    /// The work of one engine round: CQEs and EQEs held back that are now due, send queues
    /// that waited, receives posted to QPs in ERR, frames that arrived while the HCA was busy.
    pub(crate) fn round(&mut self) {
        self.release_late();
        // Send queues that waited on a receiver or a busy HCA get another go.
        for qpn in std::mem::take(&mut *self.stalled_sqs) {
            self.run_sq(qpn);
        }
        self.flush_err_rqs();
        self.drain_eth_inbox();
    }

    /// Writes the CQEs and EQEs held back by injected faults (`late.rs`) that are due, in the
    /// order they were produced.
    pub(crate) fn release_late(&mut self) {
        let now = self.now_ns();
        while let Some(h) = self.late.pop_due(now) {
            match h {
                Held::Cqe {
                    cqn,
                    cqe,
                    solicited,
                    ..
                } => {
                    self.write_cqe(cqn, cqe, solicited);
                }
                Held::Eqe {
                    eqn,
                    ty,
                    sub_type,
                    data,
                    ..
                } => {
                    self.write_eqe(eqn, ty, sub_type, data);
                }
            }
        }
    }

    /// The model's time.
    pub(crate) fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Firmware asked for a reset with a syndrome: the device executes no more work and writes
    /// no more completions until it is reset (`Hca::halted`).
    pub(crate) fn halted(&self) -> bool {
        self.halted
    }

    /// A current general capability.
    pub(crate) fn cap(&self, f: Field<CmdHcaCap>) -> u64 {
        crate::caps::cap(&self.caps.cur, f)
    }

    /// Records a DMA fault.
    pub(crate) fn record_fault(&mut self, f: DmaFault) {
        self.logs.dma_fault(f);
    }

    /// Raises MSI-X vector `vector`, and records it.
    pub(crate) fn raise_irq(&mut self, vector: u16) {
        self.logs.events.push(ModelEvent::Interrupt(vector));
        self.msix.raise(vector);
    }

    /// Whether `lid` is one of this HCA's ports (any of its `2^lmc` LIDs).
    pub(crate) fn owns_lid(&self, lid: u16) -> bool {
        let path = (1u16 << self.cfg.lmc.min(7)) - 1;
        self.ports.iter().any(|p| p.lid == lid & !path)
    }

    /// Counts `bytes` of payload in `pkts` packets through the port that answers for `lid`
    /// (nothing when no port does).
    pub(crate) fn count_traffic(&mut self, lid: u16, dir: Traffic, bytes: u64, pkts: u32) {
        let path = (1u16 << self.cfg.lmc.min(7)) - 1;
        let Some(p) = self.ports.iter_mut().find(|p| p.lid == lid & !path) else {
            return;
        };
        p.counters.count(dir, bytes, pkts);
    }

    /// Whether the Ethernet port passes traffic: the link up and the port administratively up.
    pub(crate) fn eth_oper_up(&self) -> bool {
        self.ports.first().is_some_and(|p| p.up) && self.eth.as_ref().is_some_and(|e| e.admin_up)
    }
}
