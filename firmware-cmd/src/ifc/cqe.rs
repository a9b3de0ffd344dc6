//! Completion queue entries: the 64-byte CQE and the error CQE, CQE opcodes, error syndromes
//! and the ownership rule (mlx5-reference 04 §6, §7; Linux `struct mlx5_cqe64`,
//! `struct mlx5_err_cqe`).
//!
//! These are C structs of big-endian words, declared here by bit offset (byte offset × 8) with
//! the Linux / rdma-core field names; sub-fields packed into one word are read with the helper
//! functions below, which name the mask they apply.

crate::ifc! {
    /// One 64-byte CQE (`struct mlx5_cqe64`). With 128-byte CQEs it is the second half of each
    /// entry ([`CQE_128_OFFSET`]). Bytes 0x04–0x0b (LRO / SHAMPO union) are not declared.
    pub struct Cqe64 => cqe64: 0x200 bits {
        /// Ethernet offload flags.
        0x000 tls_outer_l3_tunneled: 8,
        /// Striding-RQ WQE id.
        0x010 wqe_id: 16,
        0x060 rss_hash_result: 32,
        0x080 rss_hash_type: 8,
        0x088 ml_path: 8,
        0x0a0 check_sum: 16,
        /// Source LID (IB responder).
        0x0b0 slid: 16,
        /// Responder: bits 23:0 source QPN, 27:24 SL, 29:28 GRH indication
        /// ([`cqe_rqpn`], [`cqe_sl`], [`cqe_grh`]).
        0x0c0 flags_rqpn: 32,
        /// Ethernet L2/L3/L4 checksum-OK bits.
        0x0e0 hds_ip_ext: 8,
        /// Bits 6:4 L4 type, 3:2 L3 type, bit 0 VLAN present.
        0x0e8 l4_l3_hdr_type: 8,
        0x0f0 vlan_info: 16,
        /// Bits 23:0 SRQ number or user index ([`cqe_srqn`]), 31:24 LRO segment count
        /// (rdma-core `srqn_uidx`).
        0x100 srqn: 32,
        /// Immediate data, invalidated rkey, or P_Key index in bits 15:0 (rdma-core name; Linux
        /// union `immediate` / `inval_rkey` / `pkey`).
        0x120 imm_inval_pkey: 32,
        /// Responder: bytes received; requester RDMA READ / atomic: bytes read.
        0x160 byte_cnt: 32,
        /// Completion timestamp (rdma-core `timestamp`; Linux `timestamp_h`, `timestamp_l`).
        0x180 timestamp: 64,
        /// Bits 23:0 QPN ([`cqe_qpn`]); requester: bits 31:24 opcode of the completed WQE
        /// ([`cqe_wqe_opcode`]).
        0x1c0 sop_drop_qpn: 32,
        /// SQ: `wqe_index` of the completed WQE; RQ: index of the consumed receive WQE.
        0x1e0 wqe_counter: 16,
        /// Signature / validity iteration count.
        0x1f0 signature: 8,
        /// Bits 7:4 opcode, 3:2 format, 1 solicited event, 0 owner ([`get_cqe_opcode`] …).
        0x1f8 op_own: 8,
    }
    /// Error CQE (`struct mlx5_err_cqe`, opcode [`CqeOpcode::ReqErr`] or
    /// [`CqeOpcode::RespErr`]).
    pub struct ErrCqe => err_cqe: 0x200 bits {
        0x100 srqn: 32,
        /// Vendor-specific syndrome ([`VENDOR_SYNDROME_ODP_PFAULT`] is the one documented).
        0x1b0 vendor_err_synd: 8,
        /// [`CqeSyndrome`].
        0x1b8 syndrome: 8,
        /// Bits 31:24 opcode of the failed WQE, 23:0 QPN.
        0x1c0 s_wqe_opcode_qpn: 32,
        0x1e0 wqe_counter: 16,
        0x1f0 signature: 8,
        0x1f8 op_own: 8,
    }
}

crate::enum_with_unknown! {
    /// CQE opcode, `op_own` bits 7:4 (`MLX5_CQE_*`, cq.h / mlx5dv.h).
    pub enum CqeOpcode(u8) {
        /// Requester (send-side) completion.
        Req = 0 => "requester",
        /// Responder: RDMA WRITE with immediate.
        RespWrImm = 1 => "responder RDMA write with immediate",
        /// Responder: SEND.
        RespSend = 2 => "responder send",
        /// Responder: SEND with immediate.
        RespSendImm = 3 => "responder send with immediate",
        /// Responder: SEND with invalidate.
        RespSendInv = 4 => "responder send with invalidate",
        /// CQ resize completed.
        ResizeCq = 5 => "resize CQ",
        /// No packet (rdma-core only).
        NoPacket = 6 => "no packet",
        /// Signature error.
        SigErr = 12 => "signature error",
        /// Requester error ([`ErrCqe`] layout).
        ReqErr = 13 => "requester error",
        /// Responder error ([`ErrCqe`] layout).
        RespErr = 14 => "responder error",
        /// Never written by hardware; software marks empty entries with it.
        Invalid = 15 => "invalid",
    }
}

crate::enum_with_unknown! {
    /// Error CQE syndrome (`MLX5_CQE_SYNDROME_*`, cq.h / mlx5dv.h).
    pub enum CqeSyndrome(u8) {
        /// Local length error.
        LocalLengthErr = 0x01 => "local length error",
        /// Local QP operation error.
        LocalQpOpErr = 0x02 => "local QP operation error",
        /// Local protection error.
        LocalProtErr = 0x04 => "local protection error",
        /// Work request flushed (`MLX5_CQE_SYND_FLUSHED_IN_ERROR`).
        WrFlushErr = 0x05 => "work request flushed",
        /// Memory window bind error.
        MwBindErr = 0x06 => "memory window bind error",
        /// Bad response.
        BadRespErr = 0x10 => "bad response",
        /// Local access error.
        LocalAccessErr = 0x11 => "local access error",
        /// Remote invalid request.
        RemoteInvalReqErr = 0x12 => "remote invalid request",
        /// Remote access error.
        RemoteAccessErr = 0x13 => "remote access error",
        /// Remote operation error.
        RemoteOpErr = 0x14 => "remote operation error",
        /// Transport retry counter exceeded.
        TransportRetryExcErr = 0x15 => "transport retry counter exceeded",
        /// RNR retry counter exceeded.
        RnrRetryExcErr = 0x16 => "RNR retry counter exceeded",
        /// Remote aborted.
        RemoteAbortedErr = 0x22 => "remote aborted",
    }
}

/// CQE format, `op_own` bits 3:2 (`MLX5_NO_INLINE_DATA` …, device.h).
pub mod cqe_format {
    /// Data was scattered to memory.
    pub const NO_INLINE_DATA: u8 = 0;
    /// Up to 32 bytes of data are in the CQE.
    pub const INLINE_DATA32_SEG: u8 = 1;
    /// Up to 64 bytes of data are in the (128-byte) CQE.
    pub const INLINE_DATA64_SEG: u8 = 2;
    /// Compressed CQE block.
    pub const COMPRESSED: u8 = 3;
}

/// Ownership bit of `op_own` (`MLX5_CQE_OWNER_MASK`).
pub const CQE_OWNER_MASK: u8 = 1;
/// Solicited-event bit of `op_own`.
pub const CQE_SOLICITED: u8 = 1 << 1;
/// `op_own` the IB driver writes into every CQE before CREATE_CQ (opcode INVALID, owner 0);
/// the Ethernet driver uses 0xF1. Both are compatible with [`cqe_is_sw_owned`].
pub const CQE_INIT_OP_OWN: u8 = 0xf0;
/// Offset of the 64-byte CQE inside a 128-byte CQE entry.
pub const CQE_128_OFFSET: usize = 64;
/// Vendor syndrome of an ODP page fault (rdma-core `MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT`).
pub const VENDOR_SYNDROME_ODP_PFAULT: u8 = 0x93;

/// CQE opcode, `op_own >> 4` (Linux `get_cqe_opcode`).
pub const fn get_cqe_opcode(op_own: u8) -> u8 {
    op_own >> 4
}

/// CQE opcode as a [`CqeOpcode`].
pub fn cqe_opcode(op_own: u8) -> CqeOpcode {
    CqeOpcode::from(get_cqe_opcode(op_own))
}

/// CQE format, `op_own` bits 3:2 (Linux `mlx5_get_cqe_format`), one of [`cqe_format`].
pub const fn get_cqe_format(op_own: u8) -> u8 {
    (op_own >> 2) & 0x3
}

/// Ownership bit, `op_own & 1`.
pub const fn cqe_owner(op_own: u8) -> u8 {
    op_own & CQE_OWNER_MASK
}

/// Whether the completion carried the solicited-event flag.
pub const fn cqe_solicited(op_own: u8) -> bool {
    op_own & CQE_SOLICITED != 0
}

/// The owner bit hardware writes into CQE number `index` of a CQ of `1 << log_cq_size`
/// entries: it flips on every pass over the ring.
pub const fn cqe_owner_for(index: u32, log_cq_size: u8) -> u8 {
    ((index >> log_cq_size) & 1) as u8
}

/// Whether the CQE at consumer index `ci` belongs to software (Linux / rdma-core
/// `get_sw_cqe`): opcode not INVALID and owner bit equal to the pass parity of `ci`.
pub const fn cqe_is_sw_owned(op_own: u8, ci: u32, log_cq_size: u8) -> bool {
    get_cqe_opcode(op_own) != 15 && cqe_owner(op_own) == cqe_owner_for(ci, log_cq_size)
}

/// An `op_own` byte with `opcode` and `owner`, format 0, no solicited flag.
pub const fn make_op_own(opcode: u8, owner: u8) -> u8 {
    (opcode << 4) | (owner & CQE_OWNER_MASK)
}

/// QPN from `sop_drop_qpn` (or `err_cqe.s_wqe_opcode_qpn`): bits 23:0.
pub const fn cqe_qpn(sop_drop_qpn: u32) -> u32 {
    sop_drop_qpn & 0xff_ffff
}

/// Send opcode (`MLX5_OPCODE_*`) of the completed / failed WQE: bits 31:24 of
/// `sop_drop_qpn` in a requester CQE, of `s_wqe_opcode_qpn` in an error CQE.
pub const fn cqe_wqe_opcode(sop_drop_qpn: u32) -> u8 {
    (sop_drop_qpn >> 24) as u8
}

/// SRQ number or user index from `srqn`: bits 23:0.
pub const fn cqe_srqn(srqn: u32) -> u32 {
    srqn & 0xff_ffff
}

/// Source QPN of a UD responder completion: `flags_rqpn` bits 23:0.
pub const fn cqe_rqpn(flags_rqpn: u32) -> u32 {
    flags_rqpn & 0xff_ffff
}

/// Service level of a responder completion: `flags_rqpn` bits 27:24.
pub const fn cqe_sl(flags_rqpn: u32) -> u8 {
    ((flags_rqpn >> 24) & 0xf) as u8
}

/// GRH indication of a responder completion: `flags_rqpn` bits 29:28 (non-zero = GRH present).
pub const fn cqe_grh(flags_rqpn: u32) -> u8 {
    ((flags_rqpn >> 28) & 0x3) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, View, ViewMut};

    #[test]
    fn golden_requester_cqe() {
        // 04 §6: byte_cnt 0x2c, sop_drop_qpn 0x38 (31:24 WQE opcode, 23:0 QPN),
        // wqe_counter 0x3c, op_own 0x3f (opcode REQ = 0, owner 0).
        let mut b = [0u8; 64];
        b[0x2c..0x30].copy_from_slice(&[0, 0, 0x10, 0]);
        b[0x38..0x3c].copy_from_slice(&[0x0a, 0x00, 0x12, 0x34]);
        b[0x3c..0x3e].copy_from_slice(&[0x00, 0x05]);
        b[0x3f] = 0x00;
        let c = View::<Cqe64>::new_checked(&b).unwrap();
        let op_own = c.get(cqe64::op_own) as u8;
        assert_eq!(cqe_opcode(op_own), CqeOpcode::Req);
        assert_eq!(get_cqe_format(op_own), cqe_format::NO_INLINE_DATA);
        let sdq = c.get32(cqe64::sop_drop_qpn);
        assert_eq!(cqe_wqe_opcode(sdq), 0x0a); // MLX5_OPCODE_SEND
        assert_eq!(cqe_qpn(sdq), 0x1234);
        assert_eq!(c.get(cqe64::wqe_counter), 5);
        assert_eq!(c.get(cqe64::byte_cnt), 0x1000);

        // 04 §7: valid on the first pass (ci < 256 with log 8 expects owner 0), not on the
        // second (expects 1); an INVALID opcode is never valid.
        assert!(cqe_is_sw_owned(op_own, 5, 8));
        assert!(!cqe_is_sw_owned(op_own, 256 + 5, 8));
        assert!(!cqe_is_sw_owned(CQE_INIT_OP_OWN, 0, 8));
        assert!(!cqe_is_sw_owned(0xf1, 256, 8));
        assert_eq!(cqe_owner_for(256 + 5, 8), 1);
    }

    #[test]
    fn golden_responder_cqe() {
        // 04 §6: flags_rqpn 0x18 (29:28 GRH, 27:24 SL, 23:0 source QPN), slid 0x16,
        // srqn 0x20, immediate 0x24, byte_cnt 0x2c, op_own 0x3f = RESP_SEND_IMM (3) | owner 1 | SE.
        let mut b = [0u8; 64];
        b[0x16..0x18].copy_from_slice(&[0x00, 0x07]);
        b[0x18..0x1c].copy_from_slice(&[0x25, 0x00, 0x00, 0x99]);
        b[0x20..0x24].copy_from_slice(&[0x03, 0x00, 0x00, 0x11]);
        b[0x24..0x28].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        b[0x2c..0x30].copy_from_slice(&[0, 0, 1, 0]);
        b[0x38..0x3c].copy_from_slice(&[0x00, 0x00, 0x12, 0x34]);
        b[0x3c..0x3e].copy_from_slice(&[0x01, 0x02]);
        b[0x3f] = 0x33;
        let c = View::<Cqe64>::new_checked(&b).unwrap();
        let op_own = c.get(cqe64::op_own) as u8;
        assert_eq!(cqe_opcode(op_own), CqeOpcode::RespSendImm);
        assert_eq!(cqe_owner(op_own), 1);
        assert!(cqe_solicited(op_own));
        let fr = c.get32(cqe64::flags_rqpn);
        assert_eq!((cqe_grh(fr), cqe_sl(fr), cqe_rqpn(fr)), (2, 5, 0x99));
        assert_eq!(c.get(cqe64::slid), 7);
        assert_eq!(cqe_srqn(c.get32(cqe64::srqn)), 0x11);
        assert_eq!(c.get(cqe64::imm_inval_pkey), 0xdead_beef);
        assert_eq!(c.get(cqe64::byte_cnt), 0x100);
        assert_eq!(cqe_qpn(c.get32(cqe64::sop_drop_qpn)), 0x1234);
        assert_eq!(c.get(cqe64::wqe_counter), 0x102);
    }

    #[test]
    fn golden_error_cqe() {
        // 04 §6.2: vendor_err_synd 0x36, syndrome 0x37, s_wqe_opcode_qpn 0x38,
        // wqe_counter 0x3c, op_own 0x3f = REQ_ERR (13) | owner 1.
        let mut b = [0u8; 64];
        b[0x36] = 0xf9;
        b[0x37] = 0x05;
        b[0x38..0x3c].copy_from_slice(&[0x08, 0x00, 0x12, 0x34]);
        b[0x3c..0x3e].copy_from_slice(&[0x00, 0x2a]);
        b[0x3f] = 0xd1;
        let e = View::<ErrCqe>::new_checked(&b).unwrap();
        assert_eq!(cqe_opcode(e.get(err_cqe::op_own) as u8), CqeOpcode::ReqErr);
        assert_eq!(
            CqeSyndrome::from(e.get(err_cqe::syndrome) as u8),
            CqeSyndrome::WrFlushErr
        );
        assert_eq!(e.get(err_cqe::vendor_err_synd), 0xf9);
        let sq = e.get32(err_cqe::s_wqe_opcode_qpn);
        assert_eq!(cqe_wqe_opcode(sq), 0x08); // MLX5_OPCODE_RDMA_WRITE
        assert_eq!(cqe_qpn(sq), 0x1234);
        assert_eq!(e.get(err_cqe::wqe_counter), 0x2a);
        assert_eq!(
            std::format!("{}", CqeSyndrome::from(0x13)),
            "remote access error (0x13)"
        );
        assert_eq!(CqeSyndrome::from(0x7f), CqeSyndrome::Unknown(0x7f));
        assert_eq!(CqeOpcode::from(15), CqeOpcode::Invalid);
    }

    #[test]
    fn encode_matches_the_c_struct_offsets() {
        // The model side: writing through the layout lands on the device.h byte offsets.
        let mut b = [0x77u8; 64];
        ViewMut::<Cqe64>::zeroed(&mut b)
            .unwrap()
            .set(cqe64::timestamp, 0x0102_0304_0506_0708u64)
            .set(cqe64::sop_drop_qpn, 0x0a00_0042u32)
            .set(cqe64::wqe_counter, 0xbeefu16)
            .set(cqe64::op_own, make_op_own(CqeOpcode::Req.into(), 1));
        let mut want = [0u8; 64];
        want[0x30..0x38].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        want[0x38..0x3c].copy_from_slice(&[0x0a, 0, 0, 0x42]);
        want[0x3c..0x40].copy_from_slice(&[0xbe, 0xef, 0x00, 0x01]);
        assert_eq!(b, want);
        assert_eq!(Cqe64::BYTES, 64);
        assert_eq!(ErrCqe::BYTES, 64);
    }
}
