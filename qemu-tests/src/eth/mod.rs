//! The Ethernet NIC (port type Ethernet): the NIC vport, the transport objects (TIS, TIR),
//! the send and receive queues (SQ, RQ), RSS indirection tables (RQT), NIC receive flow
//! tables, and the frames they move. Linux mlx5e is the judge of this part of the model.
//!
//! - `exec/nic_vport.rs`, `exec/tis_tir.rs`, `exec/rqt.rs`, `exec/sq_rq.rs`,
//!   `exec/flow_table.rs`: the commands.
//! - [`packet`]: what the NIC reads from a frame's headers.
//! - [`steering`]: flow table lookup, from the root table to TIRs.
//! - [`rss`]: the Toeplitz hash and the indirection table.
//! - [`tx`]: a send queue's WQEs executed into frames; [`rx`]: a frame written into a receive
//!   queue's buffers and its CQE.

pub(crate) mod packet;
pub(crate) mod rss;
pub(crate) mod rx;
pub(crate) mod steering;
pub(crate) mod tx;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

pub(crate) use steering::Steering;

/// Frames waiting for an HCA whose lock was taken when they arrived (`Fabric::send_frame`).
pub type Inbox = Arc<Mutex<VecDeque<Vec<u8>>>>;

/// The NIC vport context (QUERY/MODIFY_NIC_VPORT_CONTEXT).
#[derive(Clone, Debug)]
pub(crate) struct NicVport {
    /// The port's own MAC address.
    pub permanent_mac: [u8; 6],
    /// Unicast and multicast address lists the driver set.
    pub uc_list: Vec<[u8; 6]>,
    pub mc_list: Vec<[u8; 6]>,
    pub promisc_uc: bool,
    pub promisc_mc: bool,
    pub promisc_all: bool,
    /// Largest frame, L2 header and FCS included (`nic_vport_context.mtu`).
    pub mtu: u16,
    /// How much of each frame a send WQE must inline (`MLX5_INLINE_MODE_*`).
    pub min_inline: u8,
    pub disable_uc_local_lb: bool,
    pub disable_mc_local_lb: bool,
    pub roce_en: bool,
}

/// A transport interface send object.
#[derive(Clone, Debug)]
pub(crate) struct Tis {
    pub prio: u8,
}

/// How a TIR spreads what it receives.
#[derive(Clone, Debug)]
pub(crate) enum TirDispatch {
    /// To one RQ.
    Direct(u32),
    /// Over an RQT by hash.
    Indirect {
        rqt: u32,
        hash_fn: u8,
        key: [u8; 40],
        /// `rx_hash_field_selector_outer`: l3 type (0 IPv4, 1 IPv6), l4 type (0 TCP, 1 UDP),
        /// selected fields.
        l3_ipv6: bool,
        l4_udp: bool,
        fields: u32,
    },
}

/// A transport interface receive object.
#[derive(Clone, Debug)]
pub(crate) struct Tir {
    pub dispatch: TirDispatch,
    /// `self_lb_block` bits: frames this function sent are not received back.
    pub self_lb_block: u8,
}

/// An RQ indirection table.
#[derive(Clone, Debug)]
pub(crate) struct Rqt {
    pub max_size: u16,
    pub rqns: Vec<u32>,
}

/// The ring geometry and doorbell record of an SQ or RQ (`wq`).
#[derive(Clone, Debug)]
pub(crate) struct Ring {
    pub pd: u32,
    pub uar: u32,
    pub dbr: u64,
    pub log_stride: u8,
    pub log_size: u8,
    pub page_size: u64,
    pub page_offset: u64,
    pub pas: Vec<u64>,
}

impl Ring {
    pub fn nent(&self) -> u32 {
        1 << self.log_size
    }

    pub fn bytes(&self) -> u64 {
        u64::from(self.nent()) << self.log_stride
    }

    /// Device address of byte `off` of WQE `n` (counter taken modulo the ring).
    pub fn wqe_iova(&self, n: u32, off: u64) -> u64 {
        let at = ((u64::from(n & (self.nent() - 1))) << self.log_stride) + off;
        crate::page_list::buffer_iova(&self.pas, self.page_size, self.page_offset, at)
    }
}

/// SQ and RQ states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WqState {
    Rst,
    Rdy,
    Err,
}

impl WqState {
    pub fn from_raw(v: u8) -> Option<Self> {
        use bareverbs_firmware_cmd::ifc::wq_state;
        match v {
            wq_state::RST => Some(WqState::Rst),
            wq_state::RDY => Some(WqState::Rdy),
            wq_state::ERR => Some(WqState::Err),
            _ => None,
        }
    }

    pub fn raw(self) -> u8 {
        use bareverbs_firmware_cmd::ifc::wq_state;
        match self {
            WqState::Rst => wq_state::RST,
            WqState::Rdy => wq_state::RDY,
            WqState::Err => wq_state::ERR,
        }
    }
}

/// An Ethernet send queue.
#[derive(Clone, Debug)]
pub(crate) struct Sq {
    pub state: WqState,
    pub cqn: u32,
    /// The TIS it transmits through; none for an SQ that sends no frames.
    pub tis: Option<u32>,
    pub user_index: u32,
    /// `sqc.min_wqe_inline_mode`.
    pub min_inline: u8,
    pub ring: Ring,
    /// WQE counter of the next WQE to execute.
    pub consumed: u16,
}

/// An Ethernet receive queue.
#[derive(Clone, Debug)]
pub(crate) struct Rq {
    pub state: WqState,
    pub cqn: u32,
    pub user_index: u32,
    /// VLAN stripping disabled (`rqc.vsd`).
    pub vsd: bool,
    pub scatter_fcs: bool,
    pub counter_set: u8,
    pub ring: Ring,
    /// WQE counter of the next WQE to fill.
    pub consumed: u16,
}

/// Packets and octets.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Traffic {
    pub packets: u64,
    pub octets: u64,
}

impl Traffic {
    pub fn add(&mut self, len: usize) {
        self.packets += 1;
        self.octets += len as u64;
    }
}

/// How a frame is addressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cast {
    Unicast = 0,
    Multicast = 1,
    Broadcast = 2,
}

impl Cast {
    pub fn of(dmac: &[u8]) -> Cast {
        if dmac.iter().take(6).all(|&b| b == 0xff) {
            Cast::Broadcast
        } else if dmac.first().is_some_and(|b| b & 1 != 0) {
            Cast::Multicast
        } else {
            Cast::Unicast
        }
    }
}

/// The vport's counters (QUERY_VPORT_COUNTER, PPCNT).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    /// Sent and received frames by [`Cast`].
    pub tx: [Traffic; 3],
    pub rx: [Traffic; 3],
    /// Frames looped back to this function.
    pub local_loopback: Traffic,
    /// Frames steering dropped or found no rule for.
    pub rx_steering_drops: u64,
    /// Frames that found their RQ without a posted WQE (`out_of_buffer`).
    pub rx_out_of_buffer: u64,
    /// Frames dropped as runts or larger than the MTU.
    pub rx_bad: u64,
    /// Received frames by RFC 2819 size bucket (FCS counted): 64, 65–127, 128–255,
    /// 256–511, 512–1023, 1024–1518, 1519–2047, 2048–4095, 4096–8191, 8192–10239.
    pub rx_sizes: [u64; 10],
    /// Per priority (the VLAN PCP, 0 untagged): (received, sent).
    pub prio: [(Traffic, Traffic); 8],
}

impl Counters {
    /// Counts a received frame of `len` bytes (FCS excluded) on priority `prio`.
    pub fn count_rx(&mut self, frame: &[u8], prio: usize) {
        let len = frame.len();
        self.rx[Cast::of(frame) as usize].add(len);
        self.prio[prio & 7].0.add(len);
        let wire = len + 4;
        let bucket = [64, 127, 255, 511, 1023, 1518, 2047, 4095, 8191, 10239]
            .iter()
            .position(|&top| wire <= top);
        if let Some(b) = bucket {
            self.rx_sizes[b] += 1;
        }
    }

    /// Counts a sent frame.
    pub fn count_tx(&mut self, frame: &[u8], prio: usize) {
        self.tx[Cast::of(frame) as usize].add(frame.len());
        self.prio[prio & 7].1.add(frame.len());
    }
}

/// What the Ethernet NIC did over the HCA's life (resets included), for the trace's WORK line.
#[derive(Clone, Copy, Debug, Default)]
pub struct EthWork {
    /// Frames put on the wire.
    pub frames_sent: u64,
    /// Frames written into an RQ.
    pub frames_received: u64,
    /// LSO send WQEs.
    pub lso_sends: u64,
    /// The segments LSO sends were cut into.
    pub lso_segments: u64,
    /// Send WQEs that asked for an IPv4 or L4 checksum.
    pub csum_offloads: u64,
    /// Frames a TIR hashed to pick their RQ.
    pub rss_hashed: u64,
    /// Frames no steering rule delivered, or that found no receive WQE.
    pub rx_dropped: u64,
}

/// Ethernet state of one HCA.
pub(crate) struct Eth {
    /// Ethernet offload capabilities (group 1).
    pub caps: Vec<u8>,
    /// NIC flow table capabilities (group 7).
    pub ft_caps: Vec<u8>,
    pub vport: NicVport,
    pub tises: BTreeMap<u32, Tis>,
    pub tirs: BTreeMap<u32, Tir>,
    pub rqts: BTreeMap<u32, Rqt>,
    pub sqs: BTreeMap<u32, Sq>,
    pub rqs: BTreeMap<u32, Rq>,
    pub steering: Steering,
    /// Queue counter sets (ALLOC_Q_COUNTER): id → out-of-buffer drops.
    pub q_counters: BTreeMap<u8, u64>,
    pub counters: Counters,
    /// When the counters were last cleared (PPCNT), in ms of model time.
    pub counters_cleared_ms: u64,
    /// PAOS administrative status (firmware starts with the port up).
    pub admin_up: bool,
    /// PMTU: the port's MTU, L2 header included.
    pub port_mtu: u16,
    /// Frames that arrived while the HCA was busy.
    pub inbox: Inbox,
    /// Kept across resets.
    pub work: EthWork,
    next_object: u32,
}

impl Eth {
    pub(crate) fn new(mac: [u8; 6], mtu: u16, min_inline: u8) -> Self {
        Eth {
            caps: crate::caps::eth_caps(),
            ft_caps: crate::caps::flow_table_caps(),
            vport: NicVport {
                permanent_mac: mac,
                uc_list: Vec::new(),
                mc_list: Vec::new(),
                promisc_uc: false,
                promisc_mc: false,
                promisc_all: false,
                mtu,
                min_inline,
                disable_uc_local_lb: false,
                disable_mc_local_lb: false,
                roce_en: false,
            },
            tises: BTreeMap::new(),
            tirs: BTreeMap::new(),
            rqts: BTreeMap::new(),
            sqs: BTreeMap::new(),
            rqs: BTreeMap::new(),
            steering: Steering::default(),
            q_counters: BTreeMap::new(),
            counters: Counters::default(),
            admin_up: true,
            counters_cleared_ms: 0,
            port_mtu: mtu,
            inbox: Arc::new(Mutex::new(VecDeque::new())),
            work: EthWork::default(),
            next_object: 0,
        }
    }

    /// Back to the power-on state (TEARDOWN_HCA, reset): every object gone; the inbox and
    /// the work counters stay.
    pub(crate) fn reset(&mut self, cfg: &crate::config::ModelConfig) {
        let mut fresh = Eth::new(mac_of_guid(cfg.node_guid), cfg.eth_mtu, cfg.eth_min_inline);
        fresh.inbox = self.inbox.clone();
        fresh
            .inbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        fresh.work = self.work;
        *self = fresh;
    }

    /// A fresh 24-bit number for a TIS, TIR, RQT, flow table, group or counter (never 0).
    pub(crate) fn next_object(&mut self) -> u32 {
        self.next_object = (self.next_object % 0x00ff_fffe) + 1;
        self.next_object
    }
}

/// A requester CQE for WQE `index` (counter) of SQ `sqn` (`CqeRepr`, as the driver reads
/// it).
pub(crate) fn req_cqe(wqe_opcode: u8, sqn: u32, index: u16, user_index: u32) -> [u8; 64] {
    use bareverbs_firmware_cmd::cqe_repr::CqeRepr;
    use bareverbs_firmware_cmd::ifc::CqeOpcode;
    CqeRepr {
        opcode: CqeOpcode::Req.into(),
        srqn: user_index & 0xff_ffff,
        sop_drop_qpn: (u32::from(wqe_opcode) << 24) | sqn,
        wqe_counter: index,
        ..CqeRepr::default()
    }
    .emit(0, &[])
}

/// The MAC address a model HCA reports: locally administered, from its node GUID.
pub fn mac_of_guid(guid: u64) -> [u8; 6] {
    let b = guid.to_be_bytes();
    [0x02, b[2], b[3], b[5], b[6], b[7]]
}

/// How many Ethernet objects exist (tests check that a driver released them all).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EthObjects {
    /// TISes.
    pub tises: usize,
    /// TIRs.
    pub tirs: usize,
    /// RQ tables.
    pub rqts: usize,
    /// Send queues.
    pub sqs: usize,
    /// Receive queues.
    pub rqs: usize,
    /// NIC receive flow tables.
    pub flow_tables: usize,
    /// Flow groups, all tables.
    pub flow_groups: usize,
    /// Flow table entries, all tables.
    pub flow_entries: usize,
    /// Flow counters.
    pub flow_counters: usize,
    /// Whether a root table is set.
    pub root: bool,
}

impl Eth {
    /// The Ethernet objects that exist.
    pub(crate) fn objects(&self) -> EthObjects {
        let t = &self.steering.tables;
        EthObjects {
            tises: self.tises.len(),
            tirs: self.tirs.len(),
            rqts: self.rqts.len(),
            sqs: self.sqs.len(),
            rqs: self.rqs.len(),
            flow_tables: t.len(),
            flow_groups: t.values().map(|t| t.groups.len()).sum(),
            flow_entries: t.values().map(|t| t.ftes.len()).sum(),
            flow_counters: self.steering.counters.len(),
            root: self.steering.root.is_some(),
        }
    }
}
