//! The CQEs the model writes for the data path (requester, responder, error and flush
//! completions), emitted as a `CqeRepr` (`firmware-cmd` `cqe_repr.rs`): the value the
//! driver's completion ring parses them into, placed by the `Cqe64` and `ErrCqe` layouts.

use bareverbs_firmware_cmd::cqe_repr::CqeRepr;
use bareverbs_firmware_cmd::ifc::{cqe_format, CqeOpcode};

/// The CQE error syndromes the model writes: short names for the values of
/// [`CqeSyndrome`](bareverbs_firmware_cmd::ifc::CqeSyndrome), the one table.
pub(crate) mod synd {
    use bareverbs_firmware_cmd::ifc::CqeSyndrome as S;
    pub const LOCAL_LENGTH: u8 = S::LocalLengthErr.raw();
    pub const LOCAL_QP_OP: u8 = S::LocalQpOpErr.raw();
    pub const LOCAL_PROT: u8 = S::LocalProtErr.raw();
    pub const REMOTE_INVAL_REQ: u8 = S::RemoteInvalReqErr.raw();
    pub const REMOTE_ACCESS: u8 = S::RemoteAccessErr.raw();
    pub const TRANSPORT_RETRY_EXC: u8 = S::TransportRetryExcErr.raw();
    pub const RNR_RETRY_EXC: u8 = S::RnrRetryExcErr.raw();
    pub const WR_FLUSH: u8 = S::WrFlushErr.raw();
}

/// What a successful completion carries besides its opcode.
#[derive(Clone, Copy, Default)]
pub(crate) struct CqeFields<'a> {
    /// `sop_drop_qpn`: the QPN, and for a requester the WQE opcode in bits 31:24.
    pub sop_drop_qpn: u32,
    /// The WQE counter: a send WQE's index, or the receive's.
    pub wqe_counter: u16,
    /// `srqn_uidx` (see `DataPath::cqe_srqn_uidx`).
    pub srqn_uidx: u32,
    pub byte_cnt: u32,
    /// Immediate data or the P_Key index (responder).
    pub imm_inval_pkey: u32,
    /// DLID path bits, source LID, GRH/SL/source QPN (responder; not with inline data, whose
    /// bytes take their place).
    pub ml_path: u8,
    pub slid: u16,
    pub flags_rqpn: u32,
    /// Solicited event (responder).
    pub solicited: bool,
    /// Up to 32 bytes of data in the CQE itself (scatter to CQE).
    pub inline: Option<&'a [u8]>,
}

/// A completion of `opcode` with `f`'s fields.
pub(crate) fn ok_cqe(opcode: CqeOpcode, f: &CqeFields<'_>) -> [u8; 64] {
    let mut c = CqeRepr {
        opcode: opcode.into(),
        solicited: f.solicited,
        imm_inval_pkey: f.imm_inval_pkey,
        byte_cnt: f.byte_cnt,
        srqn: f.srqn_uidx & 0xff_ffff,
        sop_drop_qpn: f.sop_drop_qpn,
        wqe_counter: f.wqe_counter,
        ..CqeRepr::default()
    };
    match f.inline {
        Some(_) => c.format = cqe_format::INLINE_DATA32_SEG,
        None => {
            c.ml_path = f.ml_path;
            c.slid = f.slid;
            c.flags_rqpn = f.flags_rqpn;
        }
    }
    c.emit(0, f.inline.unwrap_or(&[]))
}

/// An error completion (`opcode` [`CqeOpcode::ReqErr`] or [`CqeOpcode::RespErr`]) of the WQE
/// `wqe_counter` (requester: of send opcode `wqe_opcode`) of queue `qpn` (a QP, or an
/// Ethernet SQ or RQ).
pub(crate) fn err_cqe(
    opcode: CqeOpcode,
    wqe_opcode: u8,
    qpn: u32,
    wqe_counter: u16,
    syndrome: u8,
    srqn_uidx: u32,
) -> [u8; 64] {
    CqeRepr {
        opcode: opcode.into(),
        syndrome,
        sop_drop_qpn: (u32::from(wqe_opcode) << 24) | (qpn & 0xff_ffff),
        wqe_counter,
        srqn: srqn_uidx & 0xff_ffff,
        ..CqeRepr::default()
    }
    .emit(0, &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use bareverbs_firmware_cmd::wqe_codec::{self as codec, cqe};

    /// The bytes land where the driver's codec reads them (`wqe_codec::cqe`), and where
    /// rdma-core's `struct mlx5_cqe64` has them.
    #[test]
    fn completions_put_each_field_where_the_poller_reads_it() {
        let c = ok_cqe(
            CqeOpcode::RespSendImm,
            &CqeFields {
                sop_drop_qpn: 0x12_3456,
                wqe_counter: 0x0102,
                srqn_uidx: 0x77,
                byte_cnt: 4096,
                imm_inval_pkey: 0xdead_beef,
                ml_path: 3,
                slid: 0x11,
                flags_rqpn: 0x0300_0009,
                solicited: true,
                inline: None,
            },
        );
        let w = |at: usize| codec::load(&c, at).unwrap();
        assert_eq!(cqe::BYTE_CNT.get(w(cqe::BYTE_CNT.byte())), 4096);
        assert_eq!(cqe::SLID.get(w(cqe::SLID.byte())), 0x11);
        assert_eq!(cqe::WQE_COUNTER.get(w(56)), 0x0102);
        assert_eq!(&c[0x38..0x3c], &[0, 0x12, 0x34, 0x56]);
        assert_eq!(&c[0x24..0x28], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(
            c[0x3f], 0x32,
            "opcode 3, no inline data, solicited, owner 0"
        );
        let c = ok_cqe(
            CqeOpcode::Req,
            &CqeFields {
                inline: Some(&[9; 8]),
                slid: 0xffff,
                ..CqeFields::default()
            },
        );
        assert_eq!(
            &c[..10],
            &[9, 9, 9, 9, 9, 9, 9, 9, 0, 0],
            "data, not the SLID"
        );
        assert_eq!(c[0x3f], 0x04);
        let e = err_cqe(CqeOpcode::ReqErr, 0x08, 0x100, 7, 0x15, 0);
        assert_eq!(&e[0x37..0x40], &[0x15, 0x08, 0, 0x01, 0, 0, 7, 0, 0xd0]);
    }
}
