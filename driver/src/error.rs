//! Driver errors: small `Copy` enums that say what failed and, for firmware commands, carry the
//! opcode, status and syndrome (STYLE.md "Errors").

use core::fmt;

use bareverbs_firmware_cmd::{CmdStatus, DeliveryStatus, Opcode, TooShort};
use bareverbs_hal::{DmaError, MmioError};

/// How a firmware command failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CmdFailure {
    /// Firmware could not take the command (delivery status).
    Delivery(DeliveryStatus),
    /// Firmware executed it and said no (command status and syndrome).
    Status {
        /// Command status.
        status: CmdStatus,
        /// Firmware syndrome.
        syndrome: u32,
    },
}

/// A firmware command that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CmdError {
    /// The command.
    pub opcode: Opcode,
    /// Its opcode modifier.
    pub op_mod: u16,
    /// What went wrong.
    pub failure: CmdFailure,
}

impl fmt::Display for CmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.failure {
            CmdFailure::Delivery(d) => {
                write!(
                    f,
                    "{} (op_mod {:#x}) was not delivered: {}",
                    self.opcode, self.op_mod, d
                )
            }
            CmdFailure::Status { status, syndrome } => write!(
                f,
                "{} (op_mod {:#x}) failed: {}, syndrome {:#010x}",
                self.opcode, self.op_mod, status, syndrome
            ),
        }
    }
}

/// Everything the driver can report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Error {
    /// The `initializing` bit did not clear in time.
    FirmwareNotReady {
        /// How long the driver waited, in milliseconds.
        waited_ms: u64,
    },
    /// The device speaks a command interface revision other than 5.
    UnsupportedCmdInterface {
        /// The revision the device reported.
        revision: u16,
    },
    /// The command queue geometry the device reports is unusable.
    BadCmdQueueGeometry {
        /// log2 of the number of slots.
        log_size: u8,
        /// log2 of the entry stride.
        log_stride: u8,
    },
    /// A firmware command failed.
    Command(CmdError),
    /// A command did not complete in time; the command interface is no longer usable.
    CommandTimeout {
        /// The command.
        opcode: Opcode,
    },
    /// The command interface was left unusable by an earlier timeout.
    CommandInterfaceWedged,
    /// The device reads all ones: removed, dead link or firmware reset.
    DeviceGone,
    /// A DMA allocation failed.
    Dma(DmaError),
    /// A register access fell outside BAR0 (e.g. a UAR index past the BAR).
    Mmio(MmioError),
    /// A message is longer than the mailboxes the driver keeps.
    MessageTooLong {
        /// The command.
        opcode: Opcode,
        /// Bytes needed.
        len: usize,
    },
    /// A buffer was shorter than a firmware layout (a driver bug).
    Layout(TooShort),
    /// Firmware wants more pages than the driver's page table can track.
    PageTableFull {
        /// Pages the driver holds for firmware.
        given: usize,
    },
    /// Firmware returned a page the driver never gave it.
    UnknownPage {
        /// The address firmware returned.
        iova: u64,
    },
    /// Firmware did not give back every page during teardown.
    PagesNotReturned {
        /// Pages still held by firmware (leaked, never reused).
        count: usize,
    },
    /// The device does not support ISSI 0 or 1.
    UnsupportedIssi {
        /// `supported_issi_dw0` as reported.
        supported: u32,
    },
    /// A port number outside 1..=num_ports.
    NoSuchPort {
        /// The port asked for.
        port: u8,
    },
    /// The operation needs the device to be up.
    NotUp,
    /// A verbs argument the device cannot accept; nothing was sent to the device.
    InvalidArgument {
        /// What is wrong.
        what: Invalid,
    },
    /// A request exceeds a device limit; nothing was sent to the device.
    ExceedsLimit {
        /// The limit.
        limit: Limit,
        /// What was asked for.
        requested: u64,
        /// The most the device allows.
        max: u64,
    },
    /// The object is still in use (e.g. a CQ a QP completes into).
    Busy,
    /// A CQ with completion events read but not acknowledged cannot be destroyed
    /// (`ibv_destroy_cq` would wait for them; here it refuses instead of hanging).
    EventsUnacknowledged {
        /// Events read and not acknowledged.
        count: u32,
    },
    /// The queue has no room for the request (back-pressure; poll the CQ and retry).
    QueueFull,
    /// The device had a fatal error ([`AsyncEvent::DeviceFatal`](crate::AsyncEvent)): nothing
    /// more is posted (Linux mlx5_ib: `-EIO` in `MLX5_DEVICE_STATE_INTERNAL_ERROR`). Polling
    /// completes what was posted with [`WcStatus::WrFlushErr`](crate::verbs::WcStatus); then
    /// tear down, reset ([`Hal::function_reset`](bareverbs_hal::Hal)) and bring up again.
    DeviceFatal,
    /// A QP modification that the transition table refuses; nothing was sent to the device.
    ModifyQp(crate::verbs::qp_state::ModifyError),
    /// A mask bit or flag of the mlx5 direct-verbs attributes this device or driver cannot
    /// honour ([`Pd::create_qp_dv`](crate::verbs::Pd::create_qp_dv)); nothing was sent to
    /// the device.
    DvRefused {
        /// What was asked for.
        feature: DvFeature,
        /// Why it cannot be.
        why: DvRefusal,
    },
}

/// What made a verbs argument invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Invalid {
    /// REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE (IB spec: ibv_reg_mr fails EINVAL).
    RemoteWriteWithoutLocalWrite,
    /// A zero-length region.
    ZeroLength,
    /// A zero-entry queue.
    ZeroEntries,
    /// A QP type the driver does not create yet.
    UnsupportedQpType,
    /// A transition the device has no command for (to or from SQD).
    UnsupportedTransition,
    /// An object of another device.
    ForeignObject,
    /// DMA memory of another HAL (another IOVA space): its address means other memory to this
    /// device.
    ForeignMemory,
    /// A scatter/gather entry length with bit 31 set: mlx5 reads that bit as "inline data",
    /// and no message is 2 GiB long.
    SgeLength,
    /// Posting to a QP in a state that does not accept it (sends need RTS; receives INIT+).
    QpState,
    /// More scatter/gather entries than the QP was created for.
    TooManySge,
    /// More inline data than the QP was created for.
    InlineTooLarge,
    /// An operation the QP type does not support (e.g. RDMA READ on UC, RDMA on UD).
    OpcodeForQpType,
    /// A UD send without a destination, or a connected-QP send with one.
    Destination,
    /// An atomic operation on a device without IB atomics ([`Caps::ib_atomics`]: 8-byte
    /// compare-and-swap and fetch-and-add answered in host byte order).
    ///
    /// [`Caps::ib_atomics`]: crate::caps::Caps::ib_atomics
    AtomicsUnsupported,
    /// An address vector the device cannot use (SL over 15, LID 0 without GRH, GID index).
    AddressVector,
    /// A PSN wider than 24 bits (`rq_psn`, `sq_psn`).
    Psn,
    /// A destination QP number wider than 24 bits (`dest_qp_num`, a UD destination's).
    DestQpn,
    /// `retry_cnt` over 7 (3 bits).
    RetryCount,
    /// `rnr_retry` over 7 (3 bits; 7 is "retry for ever").
    RnrRetry,
    /// An ACK `timeout` over 31 (5 bits).
    Timeout,
    /// `min_rnr_timer` over 31 (5 bits).
    MinRnrTimer,
    /// A P_Key index past the device's table.
    PkeyIndex,
    /// A port number the device does not have (0, or past `num_ports`).
    Port,
    /// `max_rd_atomic` past the device's `max_qp_init_rd_atom`.
    MaxRdAtomic,
    /// `max_dest_rd_atomic` past the device's `max_qp_rd_atom`.
    MaxDestRdAtomic,
    /// A static rate that is no IB rate (`enum ib_rate`: 0, or 2 to 22 in Linux 6.12).
    StaticRate,
    /// A service level over 15 (4 bits).
    Sl,
    /// A source GID index past the device's table.
    SgidIndex,
    /// Destination LID 0 without a GRH on a path that needs one.
    Dlid,
    /// A UD message longer than one MTU ([`UD_MAX_MESSAGE`](crate::verbs::UD_MAX_MESSAGE)).
    UdMessageTooLong,
    /// A CQ resize to fewer entries than completions waiting to be polled.
    FewerEntriesThanUnpolled,
    /// An alternate path or path migration on a device without automatic path migration
    /// (`cmd_hca_cap.apm` 0).
    NoPathMigration,
    /// A query with an empty attribute mask.
    QueryMask,
    /// A completion flagged with a GRH, and no GRH given (`ibv_init_ah_from_wc`).
    GrhMissing,
    /// A GRH this InfiniBand device cannot answer: not IPv6 with the IBA next header, or to a
    /// multicast GID.
    GrhUnsupported,
    /// A GID the port's GID table does not hold.
    GidNotFound,
    /// Multicast on a QP that is not UD (only UD QPs join multicast groups).
    MulticastQpType,
    /// A multicast group GID without the multicast prefix (first byte 0xff).
    MulticastGid,
    /// A multicast LID outside 0xC000–0xFFFE.
    MulticastLid,
    /// Detaching from a multicast group the QP is not attached to.
    NotAttached,
    /// Destroying a QP still attached to multicast groups (detach first).
    AttachedToMulticast,
    /// A completion vector the CQ cannot use: each completion channel has one (vector 0).
    CompVector,
    /// Acknowledging no events, or more completion events than were read and not yet
    /// acknowledged (`ibv_ack_cq_events`).
    AckCount,
    /// A send request on an XRC initiator QP without the remote XRC SRQ number, or a remote
    /// XRC SRQ number for a QP that is not an XRC initiator.
    XrcRemoteSrq,
    /// A receive posted to a QP that has no receive queue of its own (XRC QPs).
    NoReceiveQueue,
    /// An XRC target QP number the domain has not registered.
    UnknownXrcQp,
    /// A DC target without an SRQ to receive through.
    DctWithoutSrq,
    /// A DCI request without a DC destination ([`SendBatch::set_dc_addr`]), or one on a QP
    /// that is not a DCI.
    ///
    /// [`SendBatch::set_dc_addr`]: crate::verbs::SendBatch::set_dc_addr
    DcDestination,
    /// A DCI stream id past the DCI's streams (stream 0 only without streams).
    DciStream,
    /// Indirect-key flags without `INDIRECT` or with bits `MkeyInitFlags` does not define.
    MkeyFlags,
    /// Access flags outside local write, remote read, remote write and remote atomic.
    AccessFlags,
    /// A UMR work request on a QP created without the send operation
    /// (`MLX5DV_QP_EX_WITH_*`), or with a key of another PD.
    SendOpNotEnabled,
    /// A DCT transition other than RESET → INIT → RTR (Linux `mlx5_ib_modify_dct`), or a
    /// mask that is not exactly what that transition takes.
    DctTransition,
    /// An Ethernet operation on a device whose port is not Ethernet, or that lacks the
    /// Ethernet offloads or NIC flow tables (`eth_net_offloads`, `nic_flow_table`).
    NotEthernet,
    /// A packet longer than its buffer, or than the port's MTU on send; or shorter than an
    /// Ethernet header.
    PacketLength,
    /// A packet handle of another pool, or one not held by the caller.
    ForeignPacket,
    /// A flow rule's destination queue or RSS group of another port.
    ForeignQueue,
    /// An RSS group without queues, or with more than the RQ table holds.
    RssQueues,
}

/// A device limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Limit {
    /// Entries of a CQ (`max_cqe`).
    CqEntries,
    /// Pages of one memory region's translation table.
    MrPages,
    /// Work requests of a queue (`max_qp_wr`).
    QpWr,
    /// Scatter/gather entries of a work request.
    Sge,
    /// Inline data bytes (or WQE size) of a send request.
    InlineData,
    /// QPs with posted work at once.
    QpCount,
    /// CQs of a device (or of one completion channel) at once, without the `alloc` feature.
    CqCount,
    /// Entries of a port's GID table.
    GidIndex,
    /// Multicast groups one QP is attached to.
    MulticastGroups,
    /// SRQs the driver's table holds at once (16 with the inline tables).
    SrqCount,
    /// XRC target QPs registered in one XRC domain ([`MAX_SHARED_XRC_QPS`]).
    ///
    /// [`MAX_SHARED_XRC_QPS`]: crate::verbs::MAX_SHARED_XRC_QPS
    SharedXrcQps,
    /// Entries of an indirect memory key (`log_max_klm_list_size`).
    MkeyEntries,
    /// Bytes of a QP's work buffer: what one CREATE_QP can describe in the pages the HAL could
    /// align (992 pages; 2 MiB each on VFIO, 4 KiB with a HAL that aligns no further).
    QpBufferBytes,
    /// Flow rules of a port's steering table ([`eth::MAX_FLOW_RULES`]).
    ///
    /// [`eth::MAX_FLOW_RULES`]: crate::eth::MAX_FLOW_RULES
    FlowRules,
    /// Buffers of a packet pool, or entries of an Ethernet queue.
    PacketBuffers,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::FirmwareNotReady { waited_ms } => {
                write!(f, "firmware still initializing after {waited_ms} ms")
            }
            Error::UnsupportedCmdInterface { revision } => {
                write!(f, "command interface revision {revision}, driver speaks 5")
            }
            Error::BadCmdQueueGeometry {
                log_size,
                log_stride,
            } => write!(
                f,
                "unusable command queue geometry: log size {log_size}, log stride {log_stride}"
            ),
            Error::Command(e) => e.fmt(f),
            Error::CommandTimeout { opcode } => write!(f, "{opcode} did not complete in time"),
            Error::CommandInterfaceWedged => {
                f.write_str("command interface unusable after an earlier timeout")
            }
            Error::DeviceGone => f.write_str("device reads all ones (removed or reset)"),
            Error::Dma(e) => write!(f, "DMA memory: {e}"),
            Error::Mmio(e) => write!(f, "register access: {e}"),
            Error::MessageTooLong { opcode, len } => {
                write!(f, "{opcode}: {len}-byte message exceeds the mailboxes")
            }
            Error::Layout(e) => write!(f, "internal buffer too short: {e}"),
            Error::PageTableFull { given } => {
                write!(
                    f,
                    "firmware wants more pages than the table holds ({given} given)"
                )
            }
            Error::UnknownPage { iova } => {
                write!(f, "firmware returned page {iova:#x} it was never given")
            }
            Error::PagesNotReturned { count } => {
                write!(f, "firmware kept {count} pages after teardown (leaked)")
            }
            Error::UnsupportedIssi { supported } => {
                write!(f, "device supports neither ISSI 0 nor 1 ({supported:#x})")
            }
            Error::NoSuchPort { port } => write!(f, "no port {port}"),
            Error::NotUp => f.write_str("device is not up"),
            Error::InvalidArgument { what } => write!(f, "invalid argument: {what:?}"),
            Error::ExceedsLimit {
                limit,
                requested,
                max,
            } => {
                write!(
                    f,
                    "{limit:?}: {requested} requested, the device allows {max}"
                )
            }
            Error::Busy => f.write_str("object still in use"),
            Error::EventsUnacknowledged { count } => {
                write!(f, "{count} completion events read but not acknowledged")
            }
            Error::QueueFull => f.write_str("work queue full"),
            Error::DeviceFatal => f.write_str("device in its error state after a fatal error"),
            Error::ModifyQp(e) => e.fmt(f),
            Error::DvRefused { feature, why } => write!(f, "mlx5dv {feature:?}: {why}"),
        }
    }
}

impl core::error::Error for Error {}

impl From<crate::verbs::qp_state::ModifyError> for Error {
    fn from(e: crate::verbs::qp_state::ModifyError) -> Self {
        Error::ModifyQp(e)
    }
}

impl From<DmaError> for Error {
    fn from(e: DmaError) -> Self {
        Error::Dma(e)
    }
}

impl From<TooShort> for Error {
    fn from(e: TooShort) -> Self {
        Error::Layout(e)
    }
}

impl From<MmioError> for Error {
    fn from(e: MmioError) -> Self {
        Error::Mmio(e)
    }
}

/// A step of bring-up or teardown, in the order they run (mlx5-reference 03 §1–2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Step {
    /// Waiting for `initializing` to clear before touching the command interface.
    WaitFirmware,
    /// Checking the revision and programming the command queue.
    CommandInterface,
    /// Waiting for `initializing` to clear after programming the queue.
    WaitFirmwareInit,
    /// ENABLE_HCA.
    EnableHca,
    /// QUERY_ISSI / SET_ISSI.
    Issi,
    /// QUERY_PAGES(boot) + MANAGE_PAGES.
    BootPages,
    /// ACCESS_REG(HOST_ENDIANNESS).
    HostEndianness,
    /// QUERY_HCA_CAP + SET_HCA_CAP.
    SetCaps,
    /// QUERY_PAGES(init) + MANAGE_PAGES.
    InitPages,
    /// INIT_HCA.
    InitHca,
    /// SET_DRIVER_VERSION.
    DriverVersion,
    /// QUERY_HCA_CAP (current) and QUERY_ADAPTER after INIT_HCA.
    QueryCaps,
    /// ALLOC_UAR.
    AllocUar,
    /// CREATE_EQ for asynchronous and page-request events.
    CreateEq,
    /// QUERY_SPECIAL_CONTEXTS.
    SpecialContexts,
    /// Port and vport state queries.
    PortState,
    /// DESTROY_EQ.
    DestroyEq,
    /// DEALLOC_UAR.
    DeallocUar,
    /// TEARDOWN_HCA.
    TeardownHca,
    /// MANAGE_PAGES(TAKE) until firmware holds nothing.
    ReclaimPages,
    /// DISABLE_HCA.
    DisableHca,
}

/// A bring-up or teardown step that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StepError {
    /// The step.
    pub step: Step,
    /// Why.
    pub error: Error,
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.step, self.error)
    }
}

impl core::error::Error for StepError {}

/// Tags an error with the step it happened in.
pub(crate) trait AtStep<T> {
    fn at(self, step: Step) -> Result<T, StepError>;
}

impl<T, E: Into<Error>> AtStep<T> for Result<T, E> {
    fn at(self, step: Step) -> Result<T, StepError> {
        self.map_err(|e| StepError {
            step,
            error: e.into(),
        })
    }
}

/// A mask bit or flag of [`DvQpInitAttr`](crate::verbs::DvQpInitAttr), as [`Error::DvRefused`]
/// names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum DvFeature {
    /// `comp_mask` bits seed 004 does not define.
    UnknownCompMask(u64),
    /// `create_flags` bits seed 004 does not define.
    UnknownCreateFlags(u32),
    /// `send_ops_flags` bits seed 004 does not define.
    UnknownSendOps(u64),
    /// `MLX5DV_QP_CREATE_TUNNEL_OFFLOADS`.
    TunnelOffloads,
    /// `MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC`.
    TirAllowSelfLoopbackUc,
    /// `MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_MC`.
    TirAllowSelfLoopbackMc,
    /// `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`.
    DisableScatterToCqe,
    /// `MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE`.
    AllowScatterToCqe,
    /// `MLX5DV_QP_CREATE_PACKET_BASED_CREDIT_MODE`.
    PacketBasedCreditMode,
    /// `MLX5DV_QP_CREATE_SIG_PIPELINING`.
    SigPipelining,
    /// `MLX5DV_QP_INIT_ATTR_MASK_DC` (DC transport).
    Dc,
    /// `MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS`.
    DciStreams,
    /// `MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS`.
    SendOpsFlags,
    /// `MLX5DV_QP_EX_WITH_MR_INTERLEAVED`.
    MrInterleaved,
    /// `MLX5DV_QP_EX_WITH_MR_LIST`.
    MrList,
    /// `MLX5DV_QP_EX_WITH_MKEY_CONFIGURE`.
    MkeyConfigure,
}

/// Why a [`DvFeature`] was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum DvRefusal {
    /// Not a bit seed 004 defines.
    Unknown,
    /// The device does not report the capability named (a `cmd_hca_cap` field).
    NoDeviceCap {
        /// The capability field.
        cap: &'static str,
    },
    /// The QP's type does not take it; `needs` names the type(s) that do.
    QpType {
        /// The type asked for.
        qp_type: crate::verbs::qp_state::QpType,
        /// What takes it.
        needs: &'static str,
    },
    /// Not with the other feature named (the two contradict each other, or the second rules
    /// the first out).
    Conflicts {
        /// The other one.
        with: DvFeature,
    },
    /// Past the device's limit (both log2).
    ExceedsCap {
        /// Asked for.
        requested: u8,
        /// The most the device reports.
        max: u8,
    },
    /// It needs what this driver does not implement, named.
    NotInDriver {
        /// The missing piece.
        needs: &'static str,
    },
}

impl core::fmt::Display for DvRefusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            DvRefusal::Unknown => f.write_str("not defined by mlx5dv_create_qp"),
            DvRefusal::NoDeviceCap { cap } => write!(f, "the device does not report {cap}"),
            DvRefusal::QpType { qp_type, needs } => {
                write!(f, "not for a {qp_type} QP (only {needs})")
            }
            DvRefusal::Conflicts { with } => write!(f, "conflicts with {with:?}"),
            DvRefusal::ExceedsCap { requested, max } => {
                write!(f, "log2 {requested} past the device's {max}")
            }
            DvRefusal::NotInDriver { needs } => write!(f, "needs {needs}, not in this driver"),
        }
    }
}
