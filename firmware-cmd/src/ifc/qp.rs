//! Queue pairs: the QP context `qpc`, the address path `ads`, CREATE/DESTROY/QUERY_QP, the
//! state-transition commands, `opt_param_mask` bits and the `qpc` enumerations
//! (mlx5-reference 05 §1, §2).

crate::ifc! {
    /// Address path (PRM "Address Path"): `qpc.primary_address_path` and
    /// `secondary_address_path`. The OFED-only `plane_index` (bits 0x20–0x27) is left reserved.
    pub struct Ads => ads: 0x160 bits {
        /// Force loopback.
        0x000 fl: 1,
        0x001 free_ar: 1,
        0x010 pkey_index: 16,
        /// A GRH is present (IB).
        0x028 grh: 1,
        /// Source path bits (IB).
        0x029 mlid: 7,
        /// Destination LID (IB).
        0x030 rlid: 16,
        /// Local ACK timeout exponent.
        0x040 ack_timeout: 5,
        /// Source GID index.
        0x048 src_addr_index: 8,
        /// Static rate, 0 = port rate.
        0x054 stat_rate: 4,
        0x058 hop_limit: 8,
        0x064 tclass: 8,
        0x06c flow_label: 20,
        /// Destination GID (IB) or IP address (RoCE).
        0x080 rgid_rip: [u8; 16],
        0x104 f_dscp: 1,
        0x105 f_ecn: 1,
        0x107 f_eth_prio: 1,
        0x108 ecn: 2,
        0x10a dscp: 6,
        /// RoCE v2 UDP source port.
        0x110 udp_sport: 16,
        0x120 dei_cfi: 1,
        0x121 eth_prio: 3,
        /// Service level (IB).
        0x124 sl: 4,
        /// Port number (set on RST2INIT).
        0x128 vhca_port_num: 8,
        /// Destination MAC bits 47:32 (RoCE).
        0x130 rmac_47_32: 16,
        /// Destination MAC bits 31:0 (RoCE).
        0x140 rmac_31_0: 32,
    }

    /// QP context (PRM "QP Context").
    pub struct Qpc => qpc: 0x740 bits {
        /// Current state, read back by QUERY_QP ([`QpcState`]); never written by the driver.
        0x000 state: 4,
        0x004 lag_tx_port_affinity: 4,
        /// Service type, see [`qpc_st`].
        0x008 st: 8,
        0x012 isolate_vl_tc: 1,
        /// Path migration state, see [`qpc_pm_state`].
        0x013 pm_state: 2,
        0x016 req_e2e_credit_mode: 2,
        0x018 offload_type: 4,
        0x01c end_padding_mode: 2,
        0x020 wq_signature: 1,
        0x021 block_lb_mc: 1,
        0x022 atomic_like_write_en: 1,
        0x023 latency_sensitive: 1,
        0x025 drain_sigerr: 1,
        0x027 dp_ordering_force: 1,
        /// Protection domain.
        0x028 pd: 24,
        /// Path MTU, see [`qpc_mtu`].
        0x040 mtu: 3,
        0x043 log_msg_max: 5,
        /// log2 of the number of receive WQEs.
        0x049 log_rq_size: 4,
        /// log2(receive WQE size in bytes) − 4.
        0x04d log_rq_stride: 3,
        /// 1 for a receive-only QP.
        0x050 no_sq: 1,
        /// log2 of the number of 64-byte send WQEBBs.
        0x051 log_sq_size: 4,
        0x056 retry_mode: 2,
        0x058 ts_format: 2,
        /// Allow the reserved lkey.
        0x05b rlky: 1,
        0x05c ulp_stateless_offload_mode: 4,
        0x060 counter_set_id: 8,
        /// UAR page of the blue-flame register the QP rings.
        0x068 uar_page: 24,
        0x088 user_index: 24,
        /// log2 of the work-buffer page size **relative to 4 KiB**.
        0x0a3 log_page_size: 5,
        0x0a8 remote_qpn: 24,
        0x0c0 primary_address_path: Ads,
        0x220 secondary_address_path: Ads,
        0x380 log_ack_req_freq: 4,
        /// log2 of the outstanding RDMA READ / atomic requests as requester.
        0x388 log_sra_max: 3,
        0x38d retry_count: 3,
        0x390 rnr_retry: 3,
        /// Fast-registration enable.
        0x394 fre: 1,
        0x395 cur_rnr_retry: 3,
        0x398 cur_retry_count: 3,
        0x3c8 next_send_psn: 24,
        0x3e3 log_num_dci_stream_channels: 5,
        /// CQ of the send queue.
        0x3e8 cqn_snd: 24,
        0x403 log_num_dci_errored_streams: 5,
        0x408 deth_sqpn: 24,
        0x448 last_acked_psn: 24,
        0x468 ssn: 24,
        /// log2 of the outstanding RDMA READ / atomic requests as responder.
        0x488 log_rra_max: 3,
        /// See [`qpc_atomic_mode`].
        0x48c atomic_mode: 4,
        /// Remote read enable.
        0x490 rre: 1,
        /// Remote write enable.
        0x491 rwe: 1,
        /// Remote atomic enable.
        0x492 rae: 1,
        0x494 page_offset: 6,
        0x49c dp_ordering_1: 1,
        0x49d cd_slave_receive: 1,
        0x49e cd_slave_send: 1,
        0x49f cd_master: 1,
        0x4a3 min_rnr_nak: 5,
        0x4a8 next_rcv_psn: 24,
        0x4c8 xrcd: 24,
        /// CQ of the receive queue.
        0x4e8 cqn_rcv: 24,
        /// Device address of the 8-byte doorbell record (offsets in `wqe::qp_dbr`).
        0x500 dbr_addr: 64,
        0x540 q_key: 32,
        /// See [`qpc_rq_type`].
        0x565 rq_type: 3,
        0x568 srqn_rmpn_xrqn: 24,
        0x588 rmsn: 24,
        0x5a0 hw_sq_wqebb_counter: 16,
        0x5b0 sw_sq_wqebb_counter: 16,
        0x5c0 hw_rq_counter: 32,
        0x5e0 sw_rq_counter: 32,
        0x62f cgs: 1,
        0x630 cs_req: 8,
        0x638 cs_res: 8,
        0x640 dc_access_key: 64,
        0x683 dbr_umem_valid: 1,
    }

    /// CREATE_QP input: `opt_param_mask` 0, context at 0x18, then the page addresses of the
    /// work buffer (RQ first, SQ after it) from byte 0x110.
    pub struct CreateQpIn => create_qp_in: 0x880 bits {
        0x000 opcode: 16,
        0x010 uid: 16,
        0x030 op_mod: 16,
        0x040 qpc_ext: 1,
        0x048 input_qpn: 24,
        0x080 opt_param_mask: 32,
        0x0a0 ece: 32,
        0x0c0 qpc: Qpc,
        0x800 wq_umem_offset: 64,
        0x840 wq_umem_id: 32,
        0x860 wq_umem_valid: 1,
        0x880 pas: [u64],
    }
    /// CREATE_QP output: the 24-bit QP number.
    pub struct CreateQpOut => create_qp_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x48 qpn: 24,
        0x60 ece: 32,
    }
    /// DESTROY_QP input.
    pub struct DestroyQpIn => destroy_qp_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 qpn: 24,
    }
    /// DESTROY_QP output.
    pub struct DestroyQpOut => destroy_qp_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// QUERY_QP input.
    pub struct QueryQpIn => query_qp_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        /// Ask for the QPC extension in the output.
        0x40 qpc_ext: 1,
        0x48 qpn: 24,
    }
    /// QUERY_QP output (464 bytes, `sizeof` of mlx5_ifc's struct).
    pub struct QueryQpOut => query_qp_out: 0xe80 bits {
        0x000 status: 8,
        0x020 syndrome: 32,
        0x080 opt_param_mask: 32,
        0x0a0 ece: 32,
        0x0c0 qpc: Qpc,
        /// mlx5_ifc union `qp_pas_or_qpc_ext_and_pas`: with `qpc_ext` = 0 the page list starts
        /// here (BE64 entries); with `qpc_ext` = 1 a 192-byte QPC extension comes first.
        0x880 qp_pas_or_qpc_ext_and_pas: [u8; 192],
    }
}

crate::ifc! {
    /// The QPC extension (`qpc_ext`): what modify commands carry after the QPC when their
    /// `qpc_ext` bit is set.
    pub struct QpcExt => qpc_ext: 0x600 bits {
        0x002 mmo: 1,
        /// A DCI stream (RTS2RTS with [`qpc_opt_mask_32::DCI_STREAM_CHANNEL_ID`]: the stream
        /// taken out of error, rdma-core `mlx5dv_dci_stream_id_reset`).
        0x010 dci_stream_channel_id: 16,
    }
    /// RTS2RTS_QP with the QPC extension (rdma-core 56 mlx5_ifc.h `rts2rts_qp_in` with
    /// `qpc_ext` 1, 464 bytes).
    pub struct Rts2RtsQpExtIn => rts2rts_qp_ext_in: 0xe80 bits {
        0x000 opcode: 16,
        0x010 uid: 16,
        0x030 op_mod: 16,
        0x040 qpc_ext: 1,
        0x048 qpn: 24,
        0x080 opt_param_mask: 32,
        0x0c0 qpc: Qpc,
        /// Optional parameters of the extension (see [`qpc_opt_mask_32`]).
        0x840 opt_param_mask_95_32: 64,
        0x880 qpc_data_ext: QpcExt,
    }
}

/// `opt_param_mask_95_32` bits (`MLX5_QPC_OPT_MASK_32_*`).
pub mod qpc_opt_mask_32 {
    /// `qpc_ext.dci_stream_channel_id`.
    pub const DCI_STREAM_CHANNEL_ID: u64 = 1 << 0;
}

/// `qpc.cs_req` and `qpc.cs_res`: scatter to CQE (Linux `MLX5_REQ_SCAT_*`, `MLX5_RES_SCAT_*`).
pub mod qpc_scatter {
    /// Responder: received messages up to 32 bytes land in a 64-byte CQE.
    pub const RES_DATA32: u8 = 0x1;
    /// Responder: up to 64 bytes, in a 128-byte CQE.
    pub const RES_DATA64: u8 = 0x2;
    /// Requester: RDMA READ and atomic results up to 32 bytes land in a 64-byte CQE.
    pub const REQ_DATA32: u8 = 0x11;
    /// Requester: up to 64 bytes, in a 128-byte CQE.
    pub const REQ_DATA64: u8 = 0x22;
}

/// Declares the input and output of state-transition commands that carry a QPC. All share one
/// shape (05 §2); each keeps its own mlx5_ifc name.
macro_rules! modify_qp {
    (
        with_ece { $( $opname:literal: $in:ident => $in_mod:ident, $out:ident => $out_mod:ident; )* }
        without_ece { $( $nopname:literal: $nin:ident => $nin_mod:ident, $nout:ident => $nout_mod:ident; )* }
    ) => {
        $(
            crate::ifc! {
                #[doc = concat!($opname, " input: the QPN, optional-parameter mask ([`qp_optpar`]) and context.")]
                pub struct $in => $in_mod: 0x880 bits {
                    0x000 opcode: 16,
                    0x010 uid: 16,
                    0x030 op_mod: 16,
                    0x048 qpn: 24,
                    0x080 opt_param_mask: 32,
                    0x0a0 ece: 32,
                    0x0c0 qpc: Qpc,
                }
                #[doc = concat!($opname, " output.")]
                pub struct $out => $out_mod: 0x80 bits {
                    0x00 status: 8,
                    0x20 syndrome: 32,
                    0x60 ece: 32,
                }
            }
        )*
        $(
            crate::ifc! {
                #[doc = concat!($nopname, " input: the QPN, optional-parameter mask ([`qp_optpar`]) and context (no `ece`).")]
                pub struct $nin => $nin_mod: 0x880 bits {
                    0x000 opcode: 16,
                    0x010 uid: 16,
                    0x030 op_mod: 16,
                    0x048 qpn: 24,
                    0x080 opt_param_mask: 32,
                    0x0c0 qpc: Qpc,
                }
                #[doc = concat!($nopname, " output.")]
                pub struct $nout => $nout_mod: 0x80 bits {
                    0x00 status: 8,
                    0x20 syndrome: 32,
                }
            }
        )*
    };
}

modify_qp! {
    with_ece {
        "RST2INIT_QP": Rst2InitQpIn => rst2init_qp_in, Rst2InitQpOut => rst2init_qp_out;
        "INIT2INIT_QP": Init2InitQpIn => init2init_qp_in, Init2InitQpOut => init2init_qp_out;
        "INIT2RTR_QP": Init2RtrQpIn => init2rtr_qp_in, Init2RtrQpOut => init2rtr_qp_out;
        "RTR2RTS_QP": Rtr2RtsQpIn => rtr2rts_qp_in, Rtr2RtsQpOut => rtr2rts_qp_out;
        "RTS2RTS_QP": Rts2RtsQpIn => rts2rts_qp_in, Rts2RtsQpOut => rts2rts_qp_out;
    }
    without_ece {
        "SQERR2RTS_QP": Sqerr2RtsQpIn => sqerr2rts_qp_in, Sqerr2RtsQpOut => sqerr2rts_qp_out;
        "SQD_RTS_QP": Sqd2RtsQpIn => sqd2rts_qp_in, Sqd2RtsQpOut => sqd2rts_qp_out;
    }
}

crate::ifc! {
    /// QP_2ERR input: move the QP to the error state.
    pub struct Qp2ErrIn => qp_2err_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 qpn: 24,
    }
    /// QP_2ERR output.
    pub struct Qp2ErrOut => qp_2err_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// QP_2RST input: move the QP back to reset.
    pub struct Qp2RstIn => qp_2rst_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 qpn: 24,
    }
    /// QP_2RST output.
    pub struct Qp2RstOut => qp_2rst_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
}

crate::enum_with_unknown! {
    /// `qpc.state` as QUERY_QP returns it.
    ///
    /// Sources disagree on 5 and 7 (05 §1.4): mlx5_ifc says `MLX5_QPC_STATE_SQD = 0x7` and has
    /// no 5; qp.h says `MLX5_QP_STATE_SQD = 5`, `MLX5_QP_STATE_SQ_DRAINING = 7`. This follows
    /// qp.h because the code that actually decodes the field agrees with it: mlx5_ib
    /// `query_qp_attr` reports `sq_draining` when the state is 7, and rdma-core
    /// `mlx5_qp_query_sqd` (behind `mlx5dv_qp_cancel_posted_send_wrs`) requires 5, which its own
    /// mlx5_ifc copy names `MLX5_QPC_STATE_SQDRAINED`; no driver in the OFED tree uses
    /// `MLX5_QPC_STATE_SQD`.
    /// Both 5 and 7 are the IB state SQD ([`QpcState::is_sqd`], as mlx5_ib `to_ib_qp_state`).
    pub enum QpcState(u8) {
        /// Reset.
        Rst = 0x0 => "RST",
        /// Initialized.
        Init = 0x1 => "INIT",
        /// Ready to receive.
        Rtr = 0x2 => "RTR",
        /// Ready to send.
        Rts = 0x3 => "RTS",
        /// Send queue error.
        Sqer = 0x4 => "SQER",
        /// Send queue drained.
        Sqd = 0x5 => "SQD",
        /// Error.
        Err = 0x6 => "ERR",
        /// Send queue draining (on the way to SQD).
        SqDraining = 0x7 => "SQ_DRAINING",
        /// Suspended.
        Suspended = 0x9 => "SUSPENDED",
    }
}

impl QpcState {
    /// Whether the state is the IB SQD state (drained or still draining).
    pub fn is_sqd(self) -> bool {
        matches!(self, QpcState::Sqd | QpcState::SqDraining)
    }
}

/// `qpc.st` service types (`MLX5_QPC_ST_*`, qp.h `MLX5_QP_ST_*`).
pub mod qpc_st {
    /// Reliable connected.
    pub const RC: u8 = 0x0;
    /// Unreliable connected.
    pub const UC: u8 = 0x1;
    /// Unreliable datagram.
    pub const UD: u8 = 0x2;
    /// Extended reliable connected.
    pub const XRC: u8 = 0x3;
    /// MLX (qp.h only).
    pub const MLX: u8 = 0x4;
    /// DC initiator.
    pub const DCI: u8 = 0x5;
    /// DC target (qp.h only).
    pub const DCT: u8 = 0x6;
    /// Special QP 0 (SMI).
    pub const QP0: u8 = 0x7;
    /// Special QP 1 (GSI).
    pub const QP1: u8 = 0x8;
    /// Raw datagram / raw Ethertype (qp.h `MLX5_QP_ST_RAW_ETHERTYPE`).
    pub const RAW_DATAGRAM: u8 = 0x9;
    /// Raw IPv6 (qp.h only).
    pub const RAW_IPV6: u8 = 0xa;
    /// Sniffer (qp.h only).
    pub const SNIFFER: u8 = 0xb;
    /// UMR registration QP.
    pub const REG_UMR: u8 = 0xc;
    /// PTP 1588 (qp.h only).
    pub const PTP_1588: u8 = 0xd;
    /// Synchronous UMR (qp.h only).
    pub const SYNC_UMR: u8 = 0xe;
}

/// `qpc.pm_state` path-migration states (`MLX5_QPC_PM_STATE_*`).
pub mod qpc_pm_state {
    /// Armed.
    pub const ARMED: u8 = 0x0;
    /// Re-arm.
    pub const REARM: u8 = 0x1;
    /// Reserved.
    pub const RESERVED: u8 = 0x2;
    /// Migrated: what Linux sets on create.
    pub const MIGRATED: u8 = 0x3;
}

/// `qpc.mtu` values (`MLX5_QPC_MTU_*`).
pub mod qpc_mtu {
    /// 256 bytes.
    pub const MTU_256: u8 = 0x1;
    /// 512 bytes.
    pub const MTU_512: u8 = 0x2;
    /// 1024 bytes.
    pub const MTU_1K: u8 = 0x3;
    /// 2048 bytes.
    pub const MTU_2K: u8 = 0x4;
    /// 4096 bytes.
    pub const MTU_4K: u8 = 0x5;
    /// Raw Ethernet QP.
    pub const RAW_ETHERNET_QP: u8 = 0x7;
}

/// `qpc.atomic_mode` values (`MLX5_QPC_ATOMIC_MODE_*`).
pub mod qpc_atomic_mode {
    /// As the IB spec defines.
    pub const IB_SPEC: u8 = 0x1;
    /// Only 8-byte atomics.
    pub const ONLY_8B: u8 = 0x2;
    /// Up to 8 bytes.
    pub const UP_TO_8B: u8 = 0x3;
    /// Up to 16 bytes.
    pub const UP_TO_16B: u8 = 0x4;
    /// Up to 32 bytes.
    pub const UP_TO_32B: u8 = 0x5;
    /// Up to 64 bytes.
    pub const UP_TO_64B: u8 = 0x6;
    /// Up to 128 bytes.
    pub const UP_TO_128B: u8 = 0x7;
    /// Up to 256 bytes.
    pub const UP_TO_256B: u8 = 0x8;
}

/// `qpc.rq_type` values (qp.h).
pub mod qpc_rq_type {
    /// Regular receive queue (`MLX5_NON_ZERO_RQ`).
    pub const NON_ZERO_RQ: u8 = 0x0;
    /// Receives from an SRQ (`MLX5_SRQ_RQ`).
    pub const SRQ_RQ: u8 = 0x1;
    /// `MLX5_CRQ_RQ`.
    pub const CRQ_RQ: u8 = 0x2;
    /// No receive queue (`MLX5_ZERO_LEN_RQ`).
    pub const ZERO_LEN_RQ: u8 = 0x3;
}

/// `opt_param_mask` bits (qp.h `enum mlx5_qp_optpar`). Set only for *optional* parameters of
/// a transition; mandatory ones are simply filled in the QPC.
pub mod qp_optpar {
    /// Alternate address path.
    pub const ALT_ADDR_PATH: u32 = 1 << 0;
    /// `rre`.
    pub const RRE: u32 = 1 << 1;
    /// `rae`.
    pub const RAE: u32 = 1 << 2;
    /// `rwe`.
    pub const RWE: u32 = 1 << 3;
    /// `primary_address_path.pkey_index`.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// `q_key`.
    pub const Q_KEY: u32 = 1 << 5;
    /// `min_rnr_nak`.
    pub const RNR_TIMEOUT: u32 = 1 << 6;
    /// Primary address path.
    pub const PRIMARY_ADDR_PATH: u32 = 1 << 7;
    /// `log_sra_max`.
    pub const SRA_MAX: u32 = 1 << 8;
    /// `log_rra_max`.
    pub const RRA_MAX: u32 = 1 << 9;
    /// `pm_state`.
    pub const PM_STATE: u32 = 1 << 10;
    /// `retry_count`.
    pub const RETRY_COUNT: u32 = 1 << 12;
    /// `rnr_retry`.
    pub const RNR_RETRY: u32 = 1 << 13;
    /// `primary_address_path.ack_timeout`.
    pub const ACK_TIMEOUT: u32 = 1 << 14;
    /// `lag_tx_port_affinity`.
    pub const LAG_TX_AFF: u32 = 1 << 15;
    /// Primary port.
    pub const PRI_PORT: u32 = 1 << 16;
    /// `primary_address_path.dscp`.
    pub const PRIMARY_ADDR_PATH_DSCP: u32 = 1 << 17;
    /// `srqn_rmpn_xrqn`.
    pub const RMPN_XRQN: u32 = 1 << 18;
    /// `cqn_rcv`.
    pub const CQN_RCV: u32 = 1 << 19;
    /// DC handshake.
    pub const DC_HS: u32 = 1 << 20;
    /// DC key.
    pub const DC_KEY: u32 = 1 << 21;
    /// `offload_type`.
    pub const OFFLOAD_TYPE: u32 = 1 << 24;
    /// `counter_set_id`.
    pub const COUNTER_SET_ID: u32 = 1 << 25;
}

/// `qpc.log_ack_req_freq` Linux uses (`MLX5_IB_ACK_REQ_FREQ`).
pub const IB_ACK_REQ_FREQ: u8 = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, View, ViewMut};

    #[test]
    fn golden_create_qp() {
        // 05 §1 / §1.1: qpc at 0x18. qpc DW0: st [23:16], pm_state [12:11]; DW1 pd [23:0];
        // DW2 log_rq_size [22:19], log_rq_stride [18:16], log_sq_size [14:11], rlky [4];
        // DW3 uar_page; DW28 fre [11]; DW31 cqn_snd; DW39 cqn_rcv; dbr_addr qpc 0xa0;
        // pas[] at 0x110.
        let mut b = [0x4eu8; 0x118];
        let mut v = ViewMut::<CreateQpIn>::zeroed(&mut b).unwrap();
        v.set(create_qp_in::opcode, 0x500u16);
        v.sub(create_qp_in::qpc)
            .set(qpc::st, qpc_st::UD)
            .set(qpc::pm_state, qpc_pm_state::MIGRATED)
            .set(qpc::pd, 0x12u32)
            .set(qpc::log_rq_size, 5u8)
            .set(qpc::log_rq_stride, 2u8)
            .set(qpc::log_sq_size, 6u8)
            .set(qpc::rlky, 1u8)
            .set(qpc::uar_page, 0x123u32)
            .set(qpc::fre, 1u8)
            .set(qpc::cqn_snd, 0x401u32)
            .set(qpc::cqn_rcv, 0x402u32)
            .set(qpc::dbr_addr, 0x1_0000_2040u64);
        v.set_array(create_qp_in::pas, 0, 0x3_0000_0000).unwrap();
        let mut want = [0u8; 0x118];
        want[0..2].copy_from_slice(&[0x05, 0x00]);
        want[0x18..0x1c].copy_from_slice(&[0x00, 0x02, 0x18, 0x00]);
        want[0x1c..0x20].copy_from_slice(&[0x00, 0x00, 0x00, 0x12]);
        want[0x20..0x24].copy_from_slice(&[0x00, 0x2a, 0x30, 0x10]);
        want[0x24..0x28].copy_from_slice(&[0x00, 0x00, 0x01, 0x23]);
        want[0x88..0x8c].copy_from_slice(&[0x00, 0x00, 0x08, 0x00]);
        want[0x94..0x98].copy_from_slice(&[0x00, 0x00, 0x04, 0x01]);
        want[0xb4..0xb8].copy_from_slice(&[0x00, 0x00, 0x04, 0x02]);
        want[0xb8..0xc0].copy_from_slice(&[0, 0, 0, 1, 0, 0, 0x20, 0x40]);
        want[0x110..0x118].copy_from_slice(&[0, 0, 0, 3, 0, 0, 0, 0]);
        assert_eq!(b, want);

        // create_qp_out.qpn at byte 0x09 [23:0].
        let out = [0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0x00, 0x12, 0x34, 0, 0, 0, 0];
        let o = View::<CreateQpOut>::new_checked(&out).unwrap();
        assert_eq!(o.get(create_qp_out::qpn), 0x1234);
    }

    #[test]
    fn golden_init2rtr_roce() {
        // 05 §2: qpn at 0x09, opt_param_mask at 0x10, qpc at 0x18. qpc DW2 mtu [31:29],
        // log_msg_max [28:24]; DW5 remote_qpn; primary_address_path (05 §1.2) at qpc 0x18 =
        // byte 0x30: grh ads DW1 [23]; src_addr_index DW2 [23:16], hop_limit [7:0]; tclass DW3
        // [27:20]; rgid_rip ads 0x10; udp_sport DW8 [15:0]; vhca_port_num DW9 [23:16],
        // rmac_47_32 [15:0]; rmac_31_0 DW10. qpc DW36 log_rra_max [23:21], rre [15], rwe [14];
        // DW37 min_rnr_nak [28:24], next_rcv_psn [23:0].
        let mut b = [0x81u8; 0x110];
        let mut v = ViewMut::<Init2RtrQpIn>::zeroed(&mut b).unwrap();
        v.set(init2rtr_qp_in::opcode, 0x503u16)
            .set(init2rtr_qp_in::qpn, 0x1234u32)
            .set(
                init2rtr_qp_in::opt_param_mask,
                qp_optpar::RRE | qp_optpar::RWE,
            );
        let mut c = v.sub(init2rtr_qp_in::qpc);
        c.set(qpc::mtu, qpc_mtu::MTU_4K)
            .set(qpc::log_msg_max, 30u8)
            .set(qpc::remote_qpn, 0x5678u32)
            .set(qpc::log_rra_max, 2u8)
            .set(qpc::rre, 1u8)
            .set(qpc::rwe, 1u8)
            .set(qpc::min_rnr_nak, 12u8)
            .set(qpc::next_rcv_psn, 0xab_cdefu32);
        let mut p = c.sub(qpc::primary_address_path);
        p.set(ads::grh, 1u8)
            .set(ads::src_addr_index, 3u8)
            .set(ads::hop_limit, 64u8)
            .set(ads::tclass, 0x10u8)
            .set(ads::udp_sport, 0xc000u16)
            .set(ads::vhca_port_num, 1u8)
            .set(ads::rmac_47_32, 0x0c42u16)
            .set(ads::rmac_31_0, 0xa1b2_c3d4u32);
        p.bytes_mut(ads::rgid_rip)
            .copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]);

        let mut want = [0u8; 0x110];
        want[0..2].copy_from_slice(&[0x05, 0x03]);
        want[0x08..0x0c].copy_from_slice(&[0, 0, 0x12, 0x34]);
        want[0x10..0x14].copy_from_slice(&[0, 0, 0, 0x0a]);
        want[0x20..0x24].copy_from_slice(&[0xbe, 0, 0, 0]);
        want[0x2c..0x30].copy_from_slice(&[0, 0, 0x56, 0x78]);
        want[0x34..0x38].copy_from_slice(&[0, 0x80, 0, 0]);
        want[0x38..0x3c].copy_from_slice(&[0, 3, 0, 0x40]);
        want[0x3c..0x40].copy_from_slice(&[0x01, 0, 0, 0]);
        want[0x40..0x50].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]);
        want[0x50..0x54].copy_from_slice(&[0, 0, 0xc0, 0]);
        want[0x54..0x58].copy_from_slice(&[0, 1, 0x0c, 0x42]);
        want[0x58..0x5c].copy_from_slice(&[0xa1, 0xb2, 0xc3, 0xd4]);
        want[0xa8..0xac].copy_from_slice(&[0, 0x40, 0xc0, 0]);
        want[0xac..0xb0].copy_from_slice(&[0x0c, 0xab, 0xcd, 0xef]);
        assert_eq!(b, want);
    }

    #[test]
    fn golden_2rst_and_query_qp() {
        // 05 §2: QP_2RST = 0x50a, 16 bytes, qpn at 0x09.
        let mut b = [0x19u8; 16];
        ViewMut::<Qp2RstIn>::zeroed(&mut b)
            .unwrap()
            .set(qp_2rst_in::opcode, 0x50au16)
            .set(qp_2rst_in::qpn, 0xab_cdefu32);
        assert_eq!(
            b,
            [5, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0xab, 0xcd, 0xef, 0, 0, 0, 0]
        );

        // QUERY_QP in: qpc_ext bit 31 of byte 8, qpn [23:0].
        let mut b = [0x19u8; 16];
        ViewMut::<QueryQpIn>::zeroed(&mut b)
            .unwrap()
            .set(query_qp_in::opcode, 0x50bu16)
            .set(query_qp_in::qpc_ext, 1u8)
            .set(query_qp_in::qpn, 0x42u32);
        assert_eq!(b, [5, 0x0b, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 0x42, 0, 0, 0, 0]);

        // QUERY_QP out: qpc at 0x18, state = qpc DW0 [31:28]; hw_sq_wqebb_counter qpc 0xb4.
        let mut out = [0u8; 464];
        out[0x18] = 0x30;
        out[0x18 + 0xb4..0x18 + 0xb6].copy_from_slice(&[0x01, 0x23]);
        let o = View::<QueryQpOut>::new_checked(&out).unwrap();
        let q = o.sub(query_qp_out::qpc);
        assert_eq!(QpcState::from(q.get(qpc::state) as u8), QpcState::Rts);
        assert_eq!(q.get(qpc::hw_sq_wqebb_counter), 0x123);

        // 05 §1.4: 5 = SQD and 7 = SQ draining (qp.h); both are IB SQD.
        assert_eq!(QpcState::from(5), QpcState::Sqd);
        assert_eq!(QpcState::from(7), QpcState::SqDraining);
        assert!(QpcState::Sqd.is_sqd() && QpcState::SqDraining.is_sqd());
        assert!(!QpcState::Err.is_sqd());
        assert_eq!(QpcState::from(8), QpcState::Unknown(8));
    }

    #[test]
    fn sizes_match_mlx5_ifc() {
        // 05 §1, §2: create / modify inputs 272 bytes, outputs and short inputs 16; qpc 232,
        // ads 44; query_qp_out 464 (OFED / current mlx5_ifc).
        assert_eq!(Ads::BYTES, 44);
        assert_eq!(Qpc::BYTES, 232);
        for bytes in [
            CreateQpIn::BYTES,
            Rst2InitQpIn::BYTES,
            Init2InitQpIn::BYTES,
            Init2RtrQpIn::BYTES,
            Rtr2RtsQpIn::BYTES,
            Rts2RtsQpIn::BYTES,
            Sqerr2RtsQpIn::BYTES,
            Sqd2RtsQpIn::BYTES,
        ] {
            assert_eq!(bytes, 272);
        }
        for bytes in [
            CreateQpOut::BYTES,
            DestroyQpIn::BYTES,
            DestroyQpOut::BYTES,
            Rst2InitQpOut::BYTES,
            Init2InitQpOut::BYTES,
            Init2RtrQpOut::BYTES,
            Rtr2RtsQpOut::BYTES,
            Rts2RtsQpOut::BYTES,
            Sqerr2RtsQpOut::BYTES,
            Sqd2RtsQpOut::BYTES,
            Qp2ErrIn::BYTES,
            Qp2ErrOut::BYTES,
            Qp2RstIn::BYTES,
            Qp2RstOut::BYTES,
            QueryQpIn::BYTES,
        ] {
            assert_eq!(bytes, 16);
        }
        assert_eq!(QueryQpOut::BYTES, 464);
    }
}
