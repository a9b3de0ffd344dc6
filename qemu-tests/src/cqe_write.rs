//! The CQEs the model writes for the data path (requester, responder, error and flush
//! completions), built field by field through the `Cqe64` and `ErrCqe` layouts that the
//! driver's poll reads through too (`firmware-cmd` `ifc::cqe`, `wqe_codec::cqe`).

use bareverbs_firmware_cmd::ifc::{
    cqe64, cqe_format, err_cqe, make_op_own, Cqe64, CqeOpcode, ErrCqe, CQE_SOLICITED,
};
use bareverbs_firmware_cmd::ViewMut;

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
    let mut c = [0u8; 64];
    let mut format = cqe_format::NO_INLINE_DATA;
    if let Some(d) = f.inline {
        let n = d.len().min(32);
        c[..n].copy_from_slice(&d[..n]);
        format = cqe_format::INLINE_DATA32_SEG;
    }
    if let Ok(mut v) = ViewMut::<Cqe64>::new_checked(&mut c[..]) {
        if f.inline.is_none() {
            v.set(cqe64::ml_path, f.ml_path)
                .set(cqe64::slid, f.slid)
                .set(cqe64::flags_rqpn, f.flags_rqpn);
        }
        let solicited = if f.solicited { CQE_SOLICITED } else { 0 };
        v.set(cqe64::imm_inval_pkey, f.imm_inval_pkey)
            .set(cqe64::byte_cnt, f.byte_cnt)
            .set(cqe64::srqn, f.srqn_uidx & 0xff_ffff)
            .set(cqe64::sop_drop_qpn, f.sop_drop_qpn)
            .set(cqe64::wqe_counter, f.wqe_counter)
            .set(
                cqe64::op_own,
                make_op_own(opcode.into(), 0) | (format << 2) | solicited,
            );
    }
    c
}

/// An error completion (`opcode` [`CqeOpcode::ReqErr`] or [`CqeOpcode::RespErr`]) of the WQE
/// `wqe_counter` (requester: of send opcode `wqe_opcode`) of QP `qpn`.
pub(crate) fn err_cqe(
    opcode: CqeOpcode,
    wqe_opcode: u8,
    qpn: u32,
    wqe_counter: u16,
    syndrome: u8,
    srqn_uidx: u32,
) -> [u8; 64] {
    let mut c = [0u8; 64];
    if let Ok(mut v) = ViewMut::<ErrCqe>::new_checked(&mut c[..]) {
        v.set(err_cqe::syndrome, syndrome)
            .set(
                err_cqe::s_wqe_opcode_qpn,
                (u32::from(wqe_opcode) << 24) | (qpn & 0xff_ffff),
            )
            .set(err_cqe::wqe_counter, wqe_counter)
            .set(err_cqe::srqn, srqn_uidx & 0xff_ffff)
            .set(err_cqe::op_own, make_op_own(opcode.into(), 0));
    }
    c
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
