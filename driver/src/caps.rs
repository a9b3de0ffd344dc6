//! What the device can do, decoded from its general capabilities (mlx5-reference 03 §6.1).
//! Limits come from here; the driver hard-codes none of them.

use bareverbs_firmware_cmd::ifc::{atomic, atomic_caps, cmd_hca_cap as c, AtomicCaps, CmdHcaCap};
use bareverbs_firmware_cmd::View;

/// Link layer of the ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LinkLayer {
    /// InfiniBand.
    InfiniBand,
    /// Ethernet (RoCE).
    Ethernet,
    /// A value this build does not know.
    Unknown(u8),
}

/// Device limits and features, in the units ibverbs reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Caps {
    /// Maximum QPs.
    pub max_qp: u32,
    /// Maximum work requests per queue.
    pub max_qp_wr: u32,
    /// Maximum CQs.
    pub max_cq: u32,
    /// Maximum entries per CQ.
    pub max_cqe: u32,
    /// Maximum memory keys.
    pub max_mr: u32,
    /// Largest registrable region, log2 bytes.
    pub log_max_mr_size: u8,
    /// Maximum protection domains.
    pub max_pd: u32,
    /// Maximum SRQs.
    pub max_srq: u32,
    /// Maximum work requests per SRQ.
    pub max_srq_wr: u32,
    /// Maximum EQs.
    pub max_eq: u32,
    /// Maximum entries per EQ, log2.
    pub log_max_eq_size: u8,
    /// Largest message, bytes.
    pub max_msg_size: u64,
    /// Outstanding RDMA reads/atomics a QP can answer.
    pub max_qp_rd_atom: u32,
    /// Outstanding RDMA reads/atomics a QP can initiate.
    pub max_qp_init_rd_atom: u32,
    /// Multicast groups.
    pub max_mcast_grp: u32,
    /// QPs per multicast group.
    pub max_mcast_qp_attach: u32,
    /// Largest send WQE, bytes.
    pub max_sq_desc_size: u32,
    /// Largest receive WQE, bytes.
    pub max_rq_desc_size: u32,
    /// Ports.
    pub num_ports: u8,
    /// Link layer (`port_type`).
    pub port_type: u8,
    /// P_Key table entries.
    pub pkey_table_len: u32,
    /// GID table entries.
    pub gid_table_len: u32,
    /// RC, UC, UD, XRC transports.
    pub rc: bool,
    /// Unreliable connected.
    pub uc: bool,
    /// Unreliable datagram.
    pub ud: bool,
    /// eXtended reliable connected.
    pub xrc: bool,
    /// The device has an atomic capability group (`atomic`).
    pub atomic: bool,
    /// 8-byte compare-and-swap and fetch-and-add with IB semantics: operands and the returned
    /// value in the host's byte order (`atomic_req_8b_endianness_mode` set to host endianness
    /// at bring-up). mlx5_ib reports `IB_ATOMIC_HCA` exactly then, `IB_ATOMIC_NONE` otherwise;
    /// without it, atomic requests are refused.
    pub ib_atomics: bool,
    /// CQs can be resized.
    pub cq_resize: bool,
    /// Static rates the device supports (`cmd_hca_cap.stat_rate_support`, a bit per
    /// `stat_rate` value).
    pub stat_rate_support: u16,
    /// Automatic path migration: alternate paths and `path_mig_state` (`cmd_hca_cap.apm`;
    /// Linux mlx5_ib's IB_DEVICE_AUTO_PATH_MIG).
    pub apm: bool,
    /// BlueFlame registers.
    pub bf: bool,
    /// log2 of a BlueFlame register size.
    pub log_bf_reg_size: u8,
    /// CQE format version.
    pub cqe_version: u8,
    /// Device clock, kHz.
    pub device_frequency_khz: u32,
    /// Fast teardown supported.
    pub fast_teardown: bool,
    /// SET_DRIVER_VERSION supported.
    pub driver_version: bool,
    /// DC transport: DC initiators and targets (`dct`).
    pub dc: bool,
    /// Small messages may land in the CQE (`sctr_data_cqe`); a DCI's requester data too
    /// (`dc_req_sctr_data_cqe`).
    pub scatter_to_cqe: bool,
    /// DCI requester data may land in a 64-byte CQE.
    pub dc_req_scatter_to_cqe: bool,
    /// Packet-based end-to-end credits for RC (`qp_packet_based`).
    pub qp_packet_based: bool,
    /// log2 of the most concurrent streams a DCI may have (`log_max_dci_stream_channels`; 0:
    /// no DCI streams).
    pub log_max_dci_stream_channels: u8,
    /// log2 of the most errored streams a DCI tolerates (`log_max_dci_errored_streams`).
    pub log_max_dci_errored_streams: u8,
    /// UMR may make indirect (KLM) keys (`umr_indirect_mkey_disabled` clear).
    pub umr_indirect_mkey: bool,
    /// log2 of the most entries of an indirect key (`log_max_klm_list_size`).
    pub log_max_klm_list_size: u8,
}

fn pow2(log: u64) -> u32 {
    if log >= 32 {
        u32::MAX
    } else {
        1 << log
    }
}

impl Caps {
    /// Decodes the general capabilities.
    pub(crate) fn from_cap(v: &View<'_, CmdHcaCap>) -> Self {
        let g = |f| v.get(f);
        Caps {
            max_qp: pow2(g(c::log_max_qp)),
            max_qp_wr: pow2(g(c::log_max_qp_sz)),
            max_cq: pow2(g(c::log_max_cq)),
            max_cqe: pow2(g(c::log_max_cq_sz)).saturating_sub(1),
            max_mr: pow2(g(c::log_max_mkey)),
            log_max_mr_size: g(c::log_max_mrw_sz) as u8,
            max_pd: pow2(g(c::log_max_pd)),
            max_srq: pow2(g(c::log_max_srq)),
            max_srq_wr: pow2(g(c::log_max_srq_sz)).saturating_sub(1),
            max_eq: pow2(g(c::log_max_eq)),
            log_max_eq_size: g(c::log_max_eq_sz) as u8,
            max_msg_size: 1u64 << g(c::log_max_msg).min(63),
            max_qp_rd_atom: pow2(g(c::log_max_ra_res_qp)),
            max_qp_init_rd_atom: pow2(g(c::log_max_ra_req_qp)),
            max_mcast_grp: pow2(g(c::log_max_mcg)),
            max_mcast_qp_attach: g(c::max_qp_mcg) as u32,
            max_sq_desc_size: g(c::max_wqe_sz_sq) as u32,
            max_rq_desc_size: g(c::max_wqe_sz_rq) as u32,
            num_ports: g(c::num_ports) as u8,
            port_type: g(c::port_type) as u8,
            // Encodings: pkey 0 = 128 … 5 = 4K; gid 0 = 8 … 4 = 128 (mlx5_ifc).
            pkey_table_len: 128 << g(c::pkey_table_size).min(5),
            gid_table_len: 8 << g(c::gid_table_size).min(4),
            rc: g(c::rc) != 0,
            uc: g(c::uc) != 0,
            ud: g(c::ud) != 0,
            xrc: g(c::xrc) != 0,
            atomic: g(c::atomic) != 0,
            // Known after the atomic group is read (`with_atomic_caps`).
            ib_atomics: false,
            cq_resize: g(c::cq_resize) != 0,
            apm: g(c::apm) != 0,
            stat_rate_support: g(c::stat_rate_support) as u16,
            bf: g(c::bf) != 0,
            log_bf_reg_size: g(c::log_bf_reg_size) as u8,
            cqe_version: g(c::cqe_version) as u8,
            device_frequency_khz: g(c::device_frequency_khz) as u32,
            fast_teardown: g(c::fast_teardown) != 0,
            driver_version: g(c::driver_version) != 0,
            dc: g(c::dct) != 0,
            scatter_to_cqe: g(c::sctr_data_cqe) != 0,
            dc_req_scatter_to_cqe: g(c::dc_req_sctr_data_cqe) != 0,
            qp_packet_based: g(c::qp_packet_based) != 0,
            log_max_dci_stream_channels: g(c::log_max_dci_stream_channels) as u8,
            log_max_dci_errored_streams: g(c::log_max_dci_errored_streams) as u8,
            umr_indirect_mkey: g(c::umr_indirect_mkey_disabled) == 0,
            log_max_klm_list_size: g(c::log_max_klm_list_size) as u8,
        }
    }

    /// Adds what the atomic capabilities (group 3, current) allow: IB atomics need both
    /// 8-byte operations on QPs and host-endian requests (mlx5_ib `get_atomic_caps`).
    pub(crate) fn with_atomic_caps(mut self, v: &View<'_, AtomicCaps>) -> Self {
        let both = atomic::OPS_CMP_SWAP | atomic::OPS_FETCH_ADD;
        let ops = v.get(atomic_caps::atomic_operations) as u16;
        let size = v.get(atomic_caps::atomic_size_qp) as u16;
        let mode = v.get(atomic_caps::atomic_req_8b_endianness_mode) as u8;
        self.ib_atomics = self.atomic
            && ops & both == both
            && size & atomic::SIZE_QP_8_BYTES != 0
            && mode == atomic::REQ_MODE_HOST_ENDIANNESS;
        self
    }

    /// The ports' link layer.
    pub fn link_layer(&self) -> LinkLayer {
        match self.port_type {
            0 => LinkLayer::InfiniBand,
            1 => LinkLayer::Ethernet,
            n => LinkLayer::Unknown(n),
        }
    }
}
