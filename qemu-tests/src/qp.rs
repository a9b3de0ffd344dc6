//! Queue pairs in the model: their state machine, the attributes each transition sets, and the
//! send and receive queues as firmware tracks them (mlx5-reference 05 §1–2, §6).

/// PSNs are 24 bits wide and wrap.
pub const PSN_MASK: u32 = 0x00ff_ffff;

/// QP service types the model executes (`qpc.st`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// Extended reliable connected (`MLX5_QP_ST_XRC`): RC's transport, with each request
    /// naming the XRC SRQ it is delivered to. Linux 6.12 mlx5_ib qp.c creates both ends with
    /// it: the initiator (`IB_QPT_XRC_INI`) with a send queue, the target
    /// (`create_xrc_tgt_qp`) with `no_sq` and the XRC domain in `qpc.xrcd`.
    Xrc,
    /// The subnet management QP of a port (`MLX5_QP_ST_QP0`): a datagram QP whose MADs
    /// Linux answers through MAD_IFC, so the model does not send on it.
    Qp0,
    /// The general services QP of a port (`MLX5_QP_ST_QP1`), likewise datagram.
    Qp1,
    /// The kernel's memory-registration QP (`MLX5_QP_ST_REG_UMR`): executes UMR WQEs only.
    RegUmr,
    /// DC initiator (`MLX5_QP_ST_DCI`): RC's operations, each request addressed on its own
    /// (an address vector, the target DCT's number and its access key in the WQE's datagram
    /// segment).
    Dci,
    /// DC target: not a QP to the device (CREATE_DCT, `exec/dct.rs`), kept among the QPs
    /// because requests are addressed to its number and it answers as an RC responder
    /// receiving through its SRQ.
    Dct,
}

impl ServiceType {
    /// The `qpc.st` encoding (qp.h `MLX5_QP_ST_*`).
    pub fn raw(self) -> u8 {
        use bareverbs_firmware_cmd::ifc::qpc_st;
        match self {
            ServiceType::Rc => qpc_st::RC,
            ServiceType::Uc => qpc_st::UC,
            ServiceType::Ud => qpc_st::UD,
            ServiceType::Xrc => qpc_st::XRC,
            ServiceType::Qp0 => qpc_st::QP0,
            ServiceType::Qp1 => qpc_st::QP1,
            ServiceType::RegUmr => qpc_st::REG_UMR,
            ServiceType::Dci => qpc_st::DCI,
            ServiceType::Dct => qpc_st::DCT,
        }
    }

    /// The service type of `qpc.st` value `st`, if CREATE_QP may make it (a DCT comes from
    /// CREATE_DCT only).
    pub fn from_raw(st: u8) -> Option<Self> {
        [
            ServiceType::Rc,
            ServiceType::Uc,
            ServiceType::Ud,
            ServiceType::Xrc,
            ServiceType::Qp0,
            ServiceType::Qp1,
            ServiceType::RegUmr,
            ServiceType::Dci,
        ]
        .into_iter()
        .find(|t| t.raw() == st)
    }

    /// Reliable: acknowledged, retransmitted, errors move the QP to ERR (RC, XRC and DC).
    pub fn reliable(self) -> bool {
        matches!(
            self,
            ServiceType::Rc | ServiceType::Xrc | ServiceType::Dci | ServiceType::Dct
        )
    }
}

/// A QP's state: the `qpc.state` codes, one type with the driver and the layouts
/// ([`QpcState`](bareverbs_firmware_cmd::ifc::QpcState)). The model uses RST, INIT, RTR, RTS,
/// SQER, SQD and ERR.
pub use bareverbs_firmware_cmd::ifc::QpcState as QpState;

/// One QP.
#[derive(Clone, Debug)]
pub struct Qp {
    /// QP number.
    pub qpn: u32,
    /// Service type.
    pub st: ServiceType,
    /// State.
    pub state: QpState,
    /// Protection domain.
    pub pd: u32,
    /// Send CQ.
    pub cqn_snd: u32,
    /// Receive CQ.
    pub cqn_rcv: u32,
    /// UAR whose BlueFlame registers ring the SQ.
    pub uar: u32,
    /// log2 of the SQ size in 64-byte WQEBBs.
    pub log_sq_size: u8,
    /// log2 of the number of RQ WQEs.
    pub log_rq_size: u8,
    /// log2 of the RQ WQE size in bytes.
    pub rq_wqe_shift: u8,
    /// No send queue.
    pub no_sq: bool,
    /// No receive queue (`qpc.rq_type` zero-length RQ): the buffer holds the SQ alone.
    pub no_rq: bool,
    /// Buffer pages (RQ first, then SQ); shared, so that a copy of the QP (one per executed
    /// WQE) copies no page list.
    pub pas: std::sync::Arc<[u64]>,
    /// Bytes per buffer page (`4096 << log_page_size`).
    pub page_size: u64,
    /// Where the work buffer starts in its first page, in bytes (`qpc.page_offset`, see
    /// [`crate::page_list`]).
    pub page_offset: u64,
    /// Doorbell record address.
    pub dbr: u64,
    /// `qpc.user_index`, what CQEs of this QP carry in `srqn_uidx` (CQE version 1);
    /// [`CQE_V0_UIDX`] asks for version 0 CQEs, which carry the SRQ number there instead.
    pub user_index: u32,
    /// Port (1-based).
    pub port: u8,
    /// P_Key index.
    pub pkey_index: u16,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Remote read, write and atomic enabled (responder).
    pub rre: bool,
    /// Remote write enabled.
    pub rwe: bool,
    /// Remote atomics enabled.
    pub rae: bool,
    /// Path MTU (IB enum: 1 = 256 … 5 = 4096).
    pub mtu: u8,
    /// Remote QP number (connected QPs).
    pub remote_qpn: u32,
    /// Destination LID.
    pub rlid: u16,
    /// Service level.
    pub sl: u8,
    /// Next PSN to send (24 bits; advanced by each request's packets, RC and UC).
    pub next_send_psn: u32,
    /// Next PSN expected (24 bits; advanced by each request accepted, RC and UC).
    pub next_rcv_psn: u32,
    /// log2 of the largest message the QP sends (`qpc.log_msg_max`).
    pub log_msg_max: u8,
    /// Transport retries.
    pub retry_count: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer.
    pub min_rnr_nak: u8,
    /// ACK timeout exponent.
    pub ack_timeout: u8,
    /// WQEBBs of the SQ firmware has consumed.
    pub sq_consumed: u16,
    /// RQ WQEs firmware has consumed.
    pub rq_consumed: u16,
    /// RNR NAKs received for the request at the head of the SQ.
    pub rnr_tries: u8,
    /// The model time (ns) before which the request at the head of the SQ is not sent again:
    /// after an RNR NAK, the responder's `min_rnr_nak` timer; after no response, the local ACK
    /// timeout (`u64::MAX` when `ack_timeout` 0 makes it infinite).
    pub resend_at_ns: u64,
    /// The head request went unanswered and waits for its ACK timeout: when it runs out, the
    /// request is retransmitted or, with its retries spent, fails.
    pub ack_pending: bool,
    /// Transport retries spent on the request at the head of the SQ (no response, or a PSN
    /// sequence error NAK).
    pub retry_tries: u32,
    /// Transport retries over the QP's life (what [`Hca::qp_retries`](crate::Hca::qp_retries) reports).
    pub transport_retries: u64,
    /// COMM_EST was raised for this stay in RTR.
    pub comm_est: bool,
    /// A DCT's own state (`exec/dct.rs`); `None` for every other QP.
    pub dct: Option<DctState>,
    /// A DCI's streams (`None` for every other QP).
    pub dci: Option<DciStreams>,
    /// Requester scatter to CQE: `qpc.cs_req` (`MLX5_REQ_SCAT_DATA32_CQE`, or 0).
    pub cs_req: u8,
    /// Responder scatter to CQE: `qpc.cs_res` (`MLX5_RES_SCAT_DATA32_CQE`, or 0).
    pub cs_res: u8,
    /// `qpc.req_e2e_credit_mode` (1: packet-based credits). Kept and reported; the model
    /// models no credits.
    pub e2e_credit_mode: u8,
}

/// A DCI's streams (`qpc.log_num_dci_stream_channels`, `log_num_dci_errored_streams`; both 0
/// for a DCI created without streams, which then has one stream and goes to ERR at its first
/// error). rdma-core's mlx5dv_dci_stream_id_reset(3): an error in a stream flushes only that
/// stream's requests, which run in order; the others go on; the DCI moves to ERR once the
/// streams in error reach `2^log_errored`; RTS2RTS with the QPC extension's
/// `dci_stream_channel_id` takes a stream out of error.
#[derive(Clone, Debug, Default)]
pub struct DciStreams {
    /// log2 of the streams.
    pub log_channels: u8,
    /// log2 of the streams that may be in error at once, short of ERR.
    pub log_errored: u8,
    /// The streams in error.
    pub errored: std::collections::BTreeSet<u16>,
}

/// What a DC target has beyond an RC responder's context.
#[derive(Clone, Debug, Default)]
pub struct DctState {
    /// The key requests must carry (`dctc.dc_access_key`).
    pub access_key: u64,
    /// `dctc.state`: active, draining, drained.
    pub state: u8,
    /// Requests dropped for a wrong key (`dctc.dc_access_key_violation_count`).
    pub key_violations: u32,
    /// ARM_DCT_FOR_KEY_VIOLATION ran: the next violation raises DCT_KEY_VIOLATION, once.
    pub armed: bool,
}

impl Qp {
    /// Offset of the SQ in the work buffer.
    pub fn sq_offset(&self) -> u64 {
        if self.no_rq {
            return 0;
        }
        (1u64 << self.log_rq_size) << self.rq_wqe_shift
    }

    /// Bytes of the work buffer.
    pub fn buffer_bytes(&self) -> u64 {
        self.sq_offset()
            + if self.no_sq {
                0
            } else {
                64u64 << self.log_sq_size
            }
    }

    /// Device address of byte `off` of the work buffer.
    pub fn buf_iova(&self, off: u64) -> u64 {
        crate::page_list::buffer_iova(&self.pas, self.page_size, self.page_offset, off)
    }
}

/// `qpc.user_index` asking for version 0 CQEs (Linux 6.12 mlx5_ib qp.c: "0xffffff means we
/// ask to work with cqe version 0", the `MLX5_IB_DEFAULT_UIDX` of kernel QPs).
pub const CQE_V0_UIDX: u32 = 0xff_ffff;

/// What a CQE carries in `srqn_uidx` for a queue of user index `uidx` and a WQE taken from SRQ
/// `srqn` (if one): the user index (CQE version 1), or for [`CQE_V0_UIDX`] a version 0 CQE's
/// SRQ number (0 without an SRQ).
pub(crate) fn cqe_srqn_uidx_of(uidx: u32, srqn: Option<u32>) -> u32 {
    if uidx == CQE_V0_UIDX {
        srqn.unwrap_or(0)
    } else {
        uidx
    }
}

/// The local ACK timeout of exponent `t` in nanoseconds: 4.096 µs × 2^t (IBA 9.7.6.1.3);
/// 0 means infinite.
pub fn ack_timeout_ns(t: u8) -> u64 {
    if t == 0 {
        u64::MAX
    } else {
        4096u64 << t.min(31)
    }
}

/// The RNR NAK timer of encoding `t` (`min_rnr_nak`, IBA table 45, Linux `ib_rnr_timeout`),
/// in nanoseconds: 0 is 655.36 ms, 1–31 run from 0.01 ms to 491.52 ms.
pub fn rnr_timer_ns(t: u8) -> u64 {
    // In units of 10 µs.
    const UNITS: [u64; 32] = [
        65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
        1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
    ];
    UNITS[usize::from(t & 31)] * 10_000
}
