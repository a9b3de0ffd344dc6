//! Work completions as ibverbs reports them (`struct ibv_wc`, seed 001), and the translation
//! from mlx5 CQE opcodes and error syndromes (mlx5-reference 04 §6; rdma-core
//! `mlx5_handle_error_cqe`).

use core::fmt;

use bitflags::bitflags;

/// Completion status (`enum ibv_wc_status`; the discriminants are ibverbs' values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u8)]
pub enum WcStatus {
    /// The work request completed.
    Success = 0,
    /// Local length error: a receive buffer too small, or a message over the port limit.
    LocLenErr = 1,
    /// Local QP operation error (e.g. a malformed WQE).
    LocQpOpErr = 2,
    /// Local EE context operation error.
    LocEecOpErr = 3,
    /// Local protection error: a local key or its rights do not allow the access.
    LocProtErr = 4,
    /// The QP went to the error state before this request was processed.
    WrFlushErr = 5,
    /// Memory window bind error.
    MwBindErr = 6,
    /// Unexpected transport response.
    BadRespErr = 7,
    /// Local access error (e.g. a protection error on a received RDMA).
    LocAccessErr = 8,
    /// The responder found the request invalid.
    RemInvReqErr = 9,
    /// The responder refused the access (rkey, rights, bounds).
    RemAccessErr = 10,
    /// The responder could not complete the operation.
    RemOpErr = 11,
    /// Transport retries exhausted.
    RetryExcErr = 12,
    /// RNR NAK retries exhausted.
    RnrRetryExcErr = 13,
    /// Local RDD violation.
    LocRddViolErr = 14,
    /// Remote invalid RD request.
    RemInvRdReqErr = 15,
    /// Remote aborted.
    RemAbortErr = 16,
    /// Invalid EE context number.
    InvEecnErr = 17,
    /// Invalid EE context state.
    InvEecStateErr = 18,
    /// Fatal error.
    FatalErr = 19,
    /// Response timeout.
    RespTimeoutErr = 20,
    /// Any other error.
    GeneralErr = 21,
}

impl WcStatus {
    /// The status of an error CQE with mlx5 `syndrome` (`MLX5_CQE_SYNDROME_*`).
    pub fn from_syndrome(syndrome: u8) -> Self {
        use bareverbs_firmware_cmd::ifc::CqeSyndrome as S;
        match S::from(syndrome) {
            S::LocalLengthErr => WcStatus::LocLenErr,
            S::LocalQpOpErr => WcStatus::LocQpOpErr,
            S::LocalProtErr => WcStatus::LocProtErr,
            S::WrFlushErr => WcStatus::WrFlushErr,
            S::MwBindErr => WcStatus::MwBindErr,
            S::BadRespErr => WcStatus::BadRespErr,
            S::LocalAccessErr => WcStatus::LocAccessErr,
            S::RemoteInvalReqErr => WcStatus::RemInvReqErr,
            S::RemoteAccessErr => WcStatus::RemAccessErr,
            S::RemoteOpErr => WcStatus::RemOpErr,
            S::TransportRetryExcErr => WcStatus::RetryExcErr,
            S::RnrRetryExcErr => WcStatus::RnrRetryExcErr,
            S::RemoteAbortedErr => WcStatus::RemAbortErr,
            S::Unknown(_) => WcStatus::GeneralErr,
        }
    }

    /// The ibverbs name (`ibv_wc_status_str`-style).
    pub fn name(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "operation aborted",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), *self as u8)
    }
}

/// What completed (`enum ibv_wc_opcode`; discriminants are ibverbs' values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u8)]
pub enum WcOpcode {
    /// A SEND (with or without immediate).
    Send = 0,
    /// An RDMA WRITE (with or without immediate).
    RdmaWrite = 1,
    /// An RDMA READ.
    RdmaRead = 2,
    /// An atomic compare-and-swap.
    CompSwap = 3,
    /// An atomic fetch-and-add.
    FetchAdd = 4,
    /// A memory window bind.
    BindMw = 5,
    /// A local invalidate.
    LocalInv = 6,
    /// A driver-specific request: an mlx5 UMR laying out an indirect key (`IBV_WC_DRIVER1`,
    /// what rdma-core reports for `mlx5dv_wr_mr_list` and friends).
    Driver1 = 135,
    /// A receive (SEND at the responder).
    Recv = 128,
    /// A receive consumed by an RDMA WRITE with immediate.
    RecvRdmaWithImm = 129,
}

bitflags! {
    /// Completion flags (`enum ibv_wc_flags`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct WcFlags: u32 {
        /// A GRH is present in the first 40 bytes of the receive buffer (UD).
        const GRH = 1 << 0;
        /// `imm_data` is valid.
        const WITH_IMM = 1 << 1;
        /// IP checksum checked and correct.
        const IP_CSUM_OK = 1 << 2;
        /// `imm_data` holds an invalidated rkey.
        const WITH_INV = 1 << 3;
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for WcFlags {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "WcFlags({=u32:#x})", self.bits())
    }
}

/// One work completion (`struct ibv_wc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Wc {
    /// The `wr_id` of the work request.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed (meaningful for successful completions).
    pub opcode: WcOpcode,
    /// Vendor error syndrome (error completions).
    pub vendor_err: u32,
    /// Bytes received or read.
    pub byte_len: u32,
    /// Immediate data, in host order (ibverbs keeps it in network order).
    pub imm_data: u32,
    /// The local QP number.
    pub qp_num: u32,
    /// The remote QP number (UD receives).
    pub src_qp: u32,
    /// Flags.
    pub wc_flags: WcFlags,
    /// P_Key index (GSI QPs).
    pub pkey_index: u16,
    /// Source LID (receives).
    pub slid: u16,
    /// Service level (receives).
    pub sl: u8,
    /// Destination LID path bits (receives).
    pub dlid_path_bits: u8,
}

impl Wc {
    /// An all-zero successful completion, to fill caller slices with before polling.
    pub const EMPTY: Wc = Wc {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        vendor_err: 0,
        byte_len: 0,
        imm_data: 0,
        qp_num: 0,
        src_qp: 0,
        wc_flags: WcFlags::empty(),
        pkey_index: 0,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
    };
}

impl Default for Wc {
    fn default() -> Self {
        Wc::EMPTY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_have_ibverbs_values_and_syndromes_map_like_rdma_core() {
        assert_eq!(WcStatus::WrFlushErr as u8, 5);
        assert_eq!(WcStatus::RnrRetryExcErr as u8, 13);
        assert_eq!(WcStatus::GeneralErr as u8, 21);
        assert_eq!(WcOpcode::Recv as u8, 128);
        assert_eq!(WcStatus::from_syndrome(0x05), WcStatus::WrFlushErr);
        assert_eq!(WcStatus::from_syndrome(0x13), WcStatus::RemAccessErr);
        assert_eq!(WcStatus::from_syndrome(0x16), WcStatus::RnrRetryExcErr);
        assert_eq!(WcStatus::from_syndrome(0x93), WcStatus::GeneralErr);
        assert_eq!(
            std::format!("{}", WcStatus::WrFlushErr),
            "Work Request Flushed Error (5)"
        );
    }
}
