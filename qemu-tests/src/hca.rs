//! The modelled HCA: BAR0 as the driver sees it — each access sent to the part that owns the
//! register (the initialization segment, `init_segment.rs`; the command doorbell, `cmdq.rs`;
//! the MSI-X table, `msix.rs`; the UAR doorbell pages, the data path) — its firmware state,
//! and the parts it is made of: the object tables (`objects.rs`), the ports, the logs, and the
//! data path (`data_path.rs`), lent those it works on (mlx5-reference 01 §3, 06 §2, 07 §1).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bareverbs_firmware_cmd::ifc::{uar_offset, UAR_PAGE_SIZE};

use crate::caps;
use crate::clock::SimClock;
use crate::cmdq_state::CmdqState;
use crate::config::ModelConfig;
use crate::cq::Cq;
use crate::data_path::{DataPath, DataPathState};
use crate::dma::{AddressSpace, DmaFault};
use crate::eq::Eq;
use crate::init_segment::{InitSegment, CMD_DBELL};
pub use crate::init_segment::{LOG_CMDQ_SIZE, LOG_CMDQ_STRIDE};
use crate::mkey::Mkey;
use crate::msix::Msix;
pub use crate::msix::{IrqSink, MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET};
use crate::objects::Objects;
use crate::port::Port;
use crate::qp::Qp;
use crate::srq::Srq;
use crate::trace::{Logs, ModelEvent};
use crate::work_counters::WorkCounters;

/// Firmware life-cycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcaState {
    /// After reset or DISABLE_HCA: only ENABLE_HCA is accepted.
    Disabled,
    /// After ENABLE_HCA.
    Enabled,
    /// After INIT_HCA.
    Initialized,
}

/// First UAR index handed out: past the initialization segment (pages 0–2) and the MSI-X
/// table and PBA (pages 2–3).
pub const FIRST_UAR: u32 = 8;
/// The device.
pub struct Hca {
    pub(crate) cfg: ModelConfig,
    pub(crate) clock: Arc<SimClock>,
    pub(crate) dma: Arc<dyn AddressSpace>,
    /// BAR0's initialization segment.
    pub(crate) init_seg: InitSegment,
    msix: Msix,
    /// The command queue engine's state.
    pub(crate) cmdq: CmdqState,
    // Firmware objects.
    pub(crate) state: HcaState,
    pub(crate) issi: u16,
    pub(crate) pages: BTreeSet<u64>,
    pub(crate) regular_pages: usize,
    pub(crate) host_endianness: Option<u8>,
    /// The capabilities firmware reports.
    pub(crate) caps: caps::Caps,
    /// The Ethernet NIC (`eth/`), present when the port type is Ethernet.
    pub(crate) eth: Option<crate::eth::Eth>,
    /// The object tables.
    pub(crate) objects: Objects,
    /// P_Key table entries an SM set: (port, index) → P_Key (`subnet.rs`).
    pub(crate) pkeys: BTreeMap<(u8, u16), u16>,
    /// Alias GUIDs an SM assigned: (port, GID index) → GUID (`subnet.rs`).
    pub(crate) alias_guids: BTreeMap<(u8, u16), u64>,
    /// What the data path keeps between doorbells.
    pub(crate) data_path_state: DataPathState,
    /// What the device counted of its work.
    pub(crate) counters: WorkCounters,
    /// The fabric joining this HCA to others, if any.
    pub(crate) fabric: Option<std::sync::Arc<crate::fabric::Fabric>>,
    pub(crate) driver_version: Option<String>,
    pub(crate) ports: Vec<Port>,
    /// The command trace, the event log and the DMA faults.
    pub(crate) logs: Logs,
}

impl Hca {
    /// A device in its power-on state.
    pub(crate) fn new(cfg: ModelConfig, clock: Arc<SimClock>, dma: Arc<dyn AddressSpace>) -> Self {
        let caps = caps::Caps::new(&cfg);
        let ports = (0..cfg.num_ports)
            .map(|i| Port {
                up: true,
                lid: cfg.base_lid + (u16::from(i) << cfg.lmc.min(7)),
                counters: crate::port::PortCounters::default(),
            })
            .collect();
        let mut h = Hca {
            init_seg: InitSegment::new(clock.now_ns()),
            cfg,
            clock,
            dma,
            msix: Msix::new(),
            cmdq: CmdqState::default(),
            state: HcaState::Disabled,
            issi: 0,
            pages: BTreeSet::new(),
            regular_pages: 0,
            host_endianness: None,
            caps,
            eth: None,
            objects: Objects::default(),
            pkeys: BTreeMap::new(),
            alias_guids: BTreeMap::new(),
            data_path_state: DataPathState::default(),
            counters: WorkCounters::default(),
            fabric: None,
            driver_version: None,
            ports,
            logs: Logs::default(),
        };
        h.cmdq.fault_hits = vec![0; h.cfg.faults.commands.len()];
        if h.cfg.port_type_eth {
            let mac = crate::eth::mac_of_guid(h.cfg.node_guid);
            h.eth = Some(crate::eth::Eth::new(
                mac,
                h.cfg.eth_mtu,
                h.cfg.eth_min_inline,
            ));
        }
        h
    }

    /// Joins this HCA to `fabric` (its ports keep their LIDs).
    pub fn set_fabric(&mut self, fabric: std::sync::Arc<crate::fabric::Fabric>) {
        self.fabric = Some(fabric);
    }

    /// Sets the callback that raises MSI-X vectors.
    pub fn set_irq_sink(&mut self, sink: IrqSink) {
        self.msix.set_sink(Some(sink));
    }

    /// Function-level reset: every firmware object and page is forgotten, as after a PCI reset.
    pub fn reset(&mut self) {
        let cfg = self.cfg.clone();
        let irq = self.msix.take_sink();
        let trace = std::mem::take(&mut self.logs.trace);
        let fabric = self.fabric.take();
        let mut eth = self.eth.take();
        *self = Hca::new(cfg, self.clock.clone(), self.dma.clone());
        // The fabric keeps delivering to the same inbox; the work counters stay.
        if let Some(e) = eth.as_mut() {
            e.reset(&self.cfg);
        }
        if eth.is_some() {
            self.eth = eth;
        }
        self.msix.set_sink(irq);
        self.logs.trace = trace;
        self.fabric = fabric;
    }

    /// The faults still armed (counts not yet met go down as they strike).
    pub fn faults(&self) -> &crate::config::Faults {
        &self.cfg.faults
    }

    /// Life-cycle state.
    pub fn state(&self) -> HcaState {
        self.state
    }

    /// Event queue `eqn`, if it exists.
    pub fn eq(&self, eqn: u8) -> Option<&Eq> {
        self.objects.eqs.get(&eqn)
    }

    /// UMR work requests executed so far: (done, refused with an error completion).
    pub fn umr_counts(&self) -> (u64, u64) {
        self.counters.umrs
    }

    /// 8-byte WQE words received through BlueFlame registers past each doorbell word (a
    /// BlueFlame post of a one-WQEBB WQE brings 7).
    pub fn blueflame_words(&self) -> u64 {
        self.counters.blueflame_words
    }

    /// CQEs written with the message (or READ/atomic result) inside them: scatter to CQE.
    pub fn scattered_to_cqe(&self) -> u64 {
        self.counters.scattered_to_cqe
    }

    /// Send WQEs executed with the initiator small fence (what rdma-core puts on the request
    /// after a UMR).
    pub fn small_fenced(&self) -> u64 {
        self.counters.small_fenced
    }

    /// How many QPs, CQs and SRQs were created with a non-zero `page_offset` (their buffer
    /// starting inside its first page).
    pub fn offset_queues(&self) -> u64 {
        self.counters.offset_queues
    }

    /// CQEs and EQEs held back by injected faults now (`late.rs`).
    pub fn late_entries(&self) -> usize {
        self.data_path_state.late.len()
    }

    /// The Ethernet objects that exist (None on an InfiniBand port).
    pub fn eth_objects(&self) -> Option<crate::eth::EthObjects> {
        self.eth.as_ref().map(crate::eth::Eth::objects)
    }

    /// What the Ethernet NIC did (None on an InfiniBand port).
    pub fn eth_work(&self) -> Option<crate::eth::EthWork> {
        self.eth.as_ref().map(|e| e.work)
    }

    /// Whether the Ethernet port passes traffic: the link up and the port administratively up.
    pub(crate) fn eth_oper_up(&self) -> bool {
        self.ports.first().is_some_and(|p| p.up) && self.eth.as_ref().is_some_and(|e| e.admin_up)
    }

    /// Pages firmware holds.
    pub fn pages_held(&self) -> usize {
        self.pages.len()
    }

    /// Completion queue `cqn`, if it exists.
    pub fn cq(&self, cqn: u32) -> Option<&Cq> {
        self.objects.cqs.get(&cqn)
    }

    /// Memory key with index `index`, if it exists.
    pub fn mkey(&self, index: u32) -> Option<&Mkey> {
        self.objects.mkeys.get(&index)
    }

    /// Queue pair `qpn`, if it exists.
    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.objects.qps.get(&qpn)
    }

    /// QP `qpn`'s `req_e2e_credit_mode` (1: packet-based credits).
    pub fn qp_e2e_credit_mode(&self, qpn: u32) -> Option<u8> {
        self.objects.qps.get(&qpn).map(|q| q.e2e_credit_mode)
    }

    /// Transport retries QP `qpn` has made: retransmissions after no response or after a PSN
    /// sequence error NAK, over the QP's life.
    pub fn qp_retries(&self, qpn: u32) -> Option<u64> {
        self.objects.qps.get(&qpn).map(|q| q.transport_retries)
    }

    /// A shared receive queue of any kind.
    pub fn srq(&self, srqn: u32) -> Option<&Srq> {
        self.objects.srq(srqn)
    }

    /// Whether `xrcd` is an allocated XRC domain.
    pub fn xrcd_exists(&self, xrcd: u32) -> bool {
        self.objects.xrcds.contains(&xrcd)
    }

    /// The shared receive queue (and XRC domain) a QP receives from, if it has one.
    pub fn qp_srq(&self, qpn: u32) -> Option<(u32, u32)> {
        self.objects.qp_srq(qpn)
    }

    /// Number of live PDs, memory keys and CQs.
    pub fn object_counts(&self) -> (usize, usize, usize) {
        (
            self.objects.pds.len(),
            self.objects.mkeys.len(),
            self.objects.cqs.len(),
        )
    }

    /// log2 of the size of CQ `cqn` as firmware holds it.
    pub fn cq_log_size(&self, cqn: u32) -> Option<u8> {
        self.objects.cqs.get(&cqn).map(|c| c.log_size)
    }

    /// The parts of the device the data path works on, lent for one doorbell or one engine
    /// round (`data_path.rs`).
    pub(crate) fn data_path(&mut self) -> DataPath<'_> {
        let halted = self.halted();
        let state = &mut self.data_path_state;
        DataPath {
            cfg: &mut self.cfg,
            clock: &self.clock,
            dma: &*self.dma,
            objects: &mut self.objects,
            ports: &mut self.ports,
            eth: &mut self.eth,
            fabric: &self.fabric,
            late: &mut state.late,
            logs: &mut self.logs,
            msix: &mut self.msix,
            counters: &mut self.counters,
            caps: &self.caps,
            host_endianness: self.host_endianness,
            halted,
            stalled_sqs: &mut state.stalled_sqs,
            payload_buf: &mut state.payload_buf,
            wqe_buf: &mut state.wqe_buf,
        }
    }

    /// Writes `cqe` (64 bytes, `op_own` opcode in bits 7:4 of byte 63 already set) into CQ
    /// `cqn` with the owner bit of its pass, then raises a completion event if the CQ is armed
    /// for it. Returns false when the CQ is missing or full or the device is halted.
    pub fn post_cqe(&mut self, cqn: u32, cqe: [u8; 64], solicited: bool) -> bool {
        self.data_path().post_cqe(cqn, cqe, solicited)
    }

    /// Executes the QP's posted send WQEs in order, up to the doorbell record's counter.
    pub fn run_sq(&mut self, qpn: u32) {
        self.data_path().run_sq(qpn);
    }

    /// Moves QP `qpn` to ERR and completes every outstanding WQE, send and receive, with a
    /// WR_FLUSH_ERR completion (what mlx5 hardware does when a QP enters the error state).
    pub fn qp_to_error(&mut self, qpn: u32) {
        self.data_path().qp_to_error(qpn);
    }

    /// Moves UC/UD QP `qpn` to SQE: every outstanding send WQE completes with WR_FLUSH_ERR,
    /// the receive queue keeps working, and SQERR2RTS_QP resumes the send queue (see
    /// `qp_flush.rs`).
    pub fn qp_to_sqe(&mut self, qpn: u32) {
        self.data_path().qp_to_sqe(qpn);
    }

    /// Delivers an event to the first EQ subscribed to its type; dropped if none is.
    pub(crate) fn post_event(&mut self, ty: u8, sub_type: u8, data: [u8; 28]) -> bool {
        self.data_path().post_event(ty, sub_type, data)
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    pub(crate) fn record_fault(&mut self, f: DmaFault) {
        self.logs.dma_fault(f);
    }

    /// Applies runtime fault switches that affect registers.
    pub(crate) fn sync_faults(&mut self) {
        self.init_seg.sync_faults(&self.cfg.faults, &self.clock);
    }

    /// Firmware asked for a reset with a syndrome: the device executes no more work and
    /// writes no more completions until it is reset (`InitSegment::halted`).
    pub(crate) fn halted(&self) -> bool {
        self.init_seg.halted()
    }

    /// A 32-bit BAR0 read, in host order.
    pub fn mmio_read32(&mut self, off: usize) -> u32 {
        use bareverbs_firmware_cmd::init_seg::cmd_dbell;
        if self.cfg.faults.removed {
            return u32::MAX;
        }
        match off {
            CMD_DBELL => cmd_dbell::command_doorbell_vector.set(
                0,
                self.cmdq.pending.iter().fold(0, |m, p| m | 1 << p.slot) | self.cmdq.stalled,
            ),
            o if self.msix.covers(o) => self.msix.read32(o),
            o => self.init_seg.read32(o, &self.cfg, &self.clock),
        }
    }

    /// A 32-bit BAR0 write (value in host order).
    pub fn mmio_write32(&mut self, off: usize, val: u32) {
        if self.cfg.faults.removed {
            return;
        }
        self.logs.events.push(ModelEvent::MmioWrite {
            offset: off,
            value: val.into(),
            width: 4,
        });
        match off {
            CMD_DBELL => self.ring(val),
            o if self.msix.covers(o) => self.msix.write32(o, val),
            o if o >= FIRST_UAR as usize * UAR_PAGE_SIZE => {
                let uar = (o / UAR_PAGE_SIZE) as u32;
                match o % UAR_PAGE_SIZE {
                    uar_offset::EQ_DOORBELL_ARM => self.data_path().eq_doorbell(uar, val, true),
                    uar_offset::EQ_DOORBELL_UPDATE => self.data_path().eq_doorbell(uar, val, false),
                    _ => {}
                }
            }
            o => self.init_seg.write32(o, val),
        }
    }

    /// A BAR0 read of any size and alignment, as bytes in bus order (what a PCI read
    /// returns): registers are big-endian dwords.
    pub fn mmio_read_bytes(&mut self, off: usize, dst: &mut [u8]) {
        let mut done = 0;
        while done < dst.len() {
            let at = off + done;
            let dw = at & !3;
            let bytes = self.mmio_read32(dw).to_be_bytes();
            let start = at - dw;
            let n = (4 - start).min(dst.len() - done);
            dst[done..done + n].copy_from_slice(&bytes[start..start + n]);
            done += n;
        }
    }

    /// A BAR0 write of any size and alignment, bytes in bus order. Aligned 4- and 8-byte
    /// writes are single register writes; anything else is merged into the dwords it touches.
    pub fn mmio_write_bytes(&mut self, off: usize, src: &[u8]) {
        match src.len() {
            8 if off % 8 == 0 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(src);
                self.mmio_write64(off, u64::from_be_bytes(b));
            }
            // A run of 8-byte stores in one message (a BlueFlame copy from the vfio-user
            // client): each store as it would have come alone, in order.
            n if n > 8 && n % 8 == 0 && off % 8 == 0 => {
                for (i, c) in src.chunks_exact(8).enumerate() {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(c);
                    self.mmio_write64(off + 8 * i, u64::from_be_bytes(b));
                }
            }
            4 if off % 4 == 0 => {
                let mut b = [0u8; 4];
                b.copy_from_slice(src);
                self.mmio_write32(off, u32::from_be_bytes(b));
            }
            _ => {
                let mut done = 0;
                while done < src.len() {
                    let at = off + done;
                    let dw = at & !3;
                    let mut bytes = self.mmio_read32(dw).to_be_bytes();
                    let start = at - dw;
                    let n = (4 - start).min(src.len() - done);
                    bytes[start..start + n].copy_from_slice(&src[done..done + n]);
                    self.mmio_write32(dw, u32::from_be_bytes(bytes));
                    done += n;
                }
            }
        }
    }

    /// A 64-bit BAR0 write (value in host order, big-endian on the bus).
    pub fn mmio_write64(&mut self, off: usize, val: u64) {
        if self.cfg.faults.removed {
            return;
        }
        if off >= FIRST_UAR as usize * UAR_PAGE_SIZE {
            let uar = (off / UAR_PAGE_SIZE) as u32;
            let o = off % UAR_PAGE_SIZE;
            let log = self.cap(bareverbs_firmware_cmd::ifc::cmd_hca_cap::log_bf_reg_size);
            let half = (1usize << log.min(16)) / 2;
            let bf_data = o > uar_offset::BF && half != 0 && (o - uar_offset::BF) % half != 0;
            // Register writes are recorded; a BlueFlame copy's WQE words are not (they would
            // multiply the record by the WQE's size).
            if !bf_data {
                self.logs.events.push(ModelEvent::MmioWrite {
                    offset: off,
                    value: val,
                    width: 8,
                });
            }
            match o {
                uar_offset::CQ_DOORBELL => self.data_path().cq_doorbell(uar, val),
                // A BlueFlame register is two halves of `bf_reg_size / 2` bytes, used in turn
                // (rdma-core `bf->offset ^= bf->buf_size`): the first 8 bytes of a half ring
                // the send doorbell; the rest carry the WQE a BlueFlame post copies whole
                // (rdma-core `mlx5_bf_copy`), which the model takes from memory instead,
                // where the driver wrote it too.
                _ if bf_data => self.counters.blueflame_words += 1,
                o if o >= uar_offset::BF => self.data_path().sq_doorbell(uar, val),
                _ => {}
            }
            return;
        }
        self.mmio_write32(off, (val >> 32) as u32);
        self.mmio_write32(off + 4, val as u32);
    }
}
