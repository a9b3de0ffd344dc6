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
    pub tis: u32,
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

/// Counters of the vport and of each queue counter set.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    /// Frames steering dropped or found no rule for.
    pub rx_steering_drops: u64,
    /// Frames that found their RQ without a posted WQE (`out_of_buffer`).
    pub rx_out_of_buffer: u64,
    /// Frames dropped as malformed or larger than the MTU.
    pub rx_bad: u64,
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
    /// Frames that arrived while the HCA was busy.
    pub inbox: Inbox,
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
            inbox: Arc::new(Mutex::new(VecDeque::new())),
            next_object: 0,
        }
    }

    /// A fresh 24-bit number for a TIS, TIR, RQT, flow table, group or counter (never 0).
    pub(crate) fn next_object(&mut self) -> u32 {
        self.next_object = (self.next_object % 0x00ff_fffe) + 1;
        self.next_object
    }
}

/// The MAC address a model HCA reports: locally administered, from its node GUID.
pub fn mac_of_guid(guid: u64) -> [u8; 6] {
    let b = guid.to_be_bytes();
    [0x02, b[2], b[3], b[5], b[6], b[7]]
}
