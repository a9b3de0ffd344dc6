//! Command execution: one handler per command family, each checking lengths, state and
//! parameters the way firmware does, and changing the model's state for real.
//!
//! Syndromes: real firmware returns undocumented 32-bit codes. The model's are its own,
//! fixed per reason (below), so tests and traces can tell the reasons apart.

mod access_reg;
mod caps;
mod cq;
mod dct;
mod eq;
mod eth_port;
mod flow_table;
mod lifecycle;
mod mad;
mod mcg;
mod mkey;
mod nic_vport;
mod pages;
mod pd;
mod qp;
mod query;
mod rmp;
mod sq_rq;
mod srq;
mod tis_tir;
mod uar;
mod xrcd;

pub use mkey::FIRST_MKEY_INDEX;
pub use qp::FIRST_QPN;

use bareverbs_firmware_cmd::layout::{Layout, View, ViewMut};
use bareverbs_firmware_cmd::{CmdStatus, Opcode};

use crate::hca::{Hca, HcaState};

/// The model's syndromes, one per failure reason.
pub mod syndrome {
    /// Unknown or unsupported opcode.
    pub const BAD_OPCODE: u32 = 0x0ade_0001;
    /// Unsupported op_mod.
    pub const BAD_OP_MOD: u32 = 0x0ade_0002;
    /// Input shorter than the command's layout.
    pub const SHORT_INPUT: u32 = 0x0ade_0003;
    /// Output shorter than the command's layout.
    pub const SHORT_OUTPUT: u32 = 0x0ade_0004;
    /// Command needs ENABLE_HCA first.
    pub const NOT_ENABLED: u32 = 0x0ade_0005;
    /// Command needs INIT_HCA first.
    pub const NOT_INITIALIZED: u32 = 0x0ade_0006;
    /// INIT_HCA or a capability command before firmware has its pages.
    pub const MISSING_PAGES: u32 = 0x0ade_0007;
    /// A page address is misaligned, duplicated or unknown.
    pub const BAD_PAGE: u32 = 0x0ade_0008;
    /// An object number does not exist.
    pub const NO_SUCH_OBJECT: u32 = 0x0ade_0009;
    /// A parameter is out of range.
    pub const OUT_OF_RANGE: u32 = 0x0ade_000a;
    /// A read-only capability was changed.
    pub const READ_ONLY_CAP: u32 = 0x0ade_000b;
    /// Already in the requested state.
    pub const WRONG_STATE: u32 = 0x0ade_000c;
    /// Out of objects of this kind.
    pub const EXHAUSTED: u32 = 0x0ade_000d;
    /// Unknown register.
    pub const BAD_REGISTER: u32 = 0x0ade_000e;
    /// A DMA read of a buffer the command names faulted.
    pub const DMA_FAULT: u32 = 0x0ade_000f;
    /// An object is still in use.
    pub const IN_USE: u32 = 0x0ade_0010;
}

/// A command failure: status and syndrome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fail {
    /// Command status.
    pub status: CmdStatus,
    /// Syndrome.
    pub syndrome: u32,
}

pub(crate) type CmdResult = Result<(), Fail>;

pub(crate) const fn fail(status: CmdStatus, syndrome: u32) -> Fail {
    Fail { status, syndrome }
}

pub(crate) fn bad_param(syndrome: u32) -> Fail {
    fail(CmdStatus::BadParameter, syndrome)
}

/// The input viewed as `L`, or BAD_INP_LEN.
pub(crate) fn input<L: Layout>(buf: &[u8]) -> Result<View<'_, L>, Fail> {
    View::new_checked(buf).map_err(|_| fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT))
}

/// The output viewed as `L`, or BAD_OUTP_LEN.
pub(crate) fn output<L: Layout>(buf: &mut [u8]) -> Result<ViewMut<'_, L>, Fail> {
    ViewMut::new_checked(buf).map_err(|_| fail(CmdStatus::BadOutputLength, syndrome::SHORT_OUTPUT))
}

impl Hca {
    /// A current general capability.
    pub(crate) fn cap(
        &self,
        f: bareverbs_firmware_cmd::layout::Field<bareverbs_firmware_cmd::ifc::CmdHcaCap>,
    ) -> u64 {
        crate::caps::cap(&self.caps.cur, f)
    }

    pub(crate) fn require_enabled(&self) -> CmdResult {
        match self.state {
            HcaState::Disabled => Err(fail(CmdStatus::BadSystemState, syndrome::NOT_ENABLED)),
            _ => Ok(()),
        }
    }

    pub(crate) fn require_initialized(&self) -> CmdResult {
        match self.state {
            HcaState::Initialized => Ok(()),
            _ => Err(fail(CmdStatus::BadSystemState, syndrome::NOT_INITIALIZED)),
        }
    }

    /// Executes one command: `input` is the whole input message, `out` the zeroed output
    /// buffer of `outlen` bytes. On error the caller writes the status and syndrome.
    pub(crate) fn exec(
        &mut self,
        opcode: u16,
        op_mod: u16,
        input: &[u8],
        out: &mut [u8],
    ) -> CmdResult {
        match Opcode(opcode) {
            Opcode::ENABLE_HCA => self.enable_hca(input, out),
            Opcode::DISABLE_HCA => self.disable_hca(input, out),
            Opcode::QUERY_ISSI => self.query_issi(input, out),
            Opcode::SET_ISSI => self.set_issi(input, out),
            Opcode::INIT_HCA => self.init_hca(input, out),
            Opcode::TEARDOWN_HCA => self.teardown_hca(input, out),
            Opcode::QUERY_ADAPTER => self.query_adapter(input, out),
            Opcode::SET_DRIVER_VERSION => self.set_driver_version(input, out),
            Opcode::QUERY_PAGES => self.query_pages(op_mod, input, out),
            Opcode::MANAGE_PAGES => self.manage_pages(op_mod, input, out),
            Opcode::QUERY_HCA_CAP => self.query_hca_cap(op_mod, input, out),
            Opcode::SET_HCA_CAP => self.set_hca_cap(op_mod, input, out),
            Opcode::ACCESS_REG => self.access_reg(op_mod, input, out),
            Opcode::ALLOC_UAR => self.alloc_uar(input, out),
            Opcode::DEALLOC_UAR => self.dealloc_uar(input, out),
            Opcode::CREATE_EQ => self.create_eq(input, out),
            Opcode::DESTROY_EQ => self.destroy_eq(input, out),
            Opcode::QUERY_EQ => self.query_eq(input, out),
            Opcode::QUERY_SPECIAL_CONTEXTS => self.query_special_contexts(input, out),
            Opcode::QUERY_VPORT_STATE => self.query_vport_state(op_mod, input, out),
            Opcode::QUERY_HCA_VPORT_CONTEXT => self.query_hca_vport_context(input, out),
            Opcode::QUERY_HCA_VPORT_GID => self.query_hca_vport_gid(input, out),
            Opcode::ATTACH_TO_MCG => self.attach_to_mcg(input, out),
            Opcode::DETACH_FROM_MCG => self.detach_from_mcg(input, out),
            Opcode::ALLOC_PD => self.alloc_pd(input, out),
            Opcode::DEALLOC_PD => self.dealloc_pd(input, out),
            Opcode::ALLOC_TRANSPORT_DOMAIN => self.alloc_transport_domain(input, out),
            Opcode::DEALLOC_TRANSPORT_DOMAIN => self.dealloc_transport_domain(input, out),
            Opcode::CREATE_MKEY => self.create_mkey(input, out),
            Opcode::DESTROY_MKEY => self.destroy_mkey(input, out),
            Opcode::QUERY_MKEY => self.query_mkey(input, out),
            Opcode::CREATE_CQ => self.create_cq(input, out),
            Opcode::DESTROY_CQ => self.destroy_cq(input, out),
            Opcode::QUERY_CQ => self.query_cq(input, out),
            Opcode::MODIFY_CQ => self.modify_cq(op_mod, input, out),
            Opcode::CREATE_QP => self.create_qp(input, out),
            Opcode::DESTROY_QP => self.destroy_qp(input, out),
            Opcode::QUERY_QP => self.query_qp(input, out),
            Opcode::MAD_IFC => self.mad_ifc(op_mod, input, out),
            Opcode::RST2INIT_QP
            | Opcode::INIT2INIT_QP
            | Opcode::INIT2RTR_QP
            | Opcode::RTR2RTS_QP
            | Opcode::RTS2RTS_QP
            | Opcode::SQERR2RTS_QP
            | Opcode::SQD_RTS_QP
            | Opcode::QP_2ERR
            | Opcode::QP_2RST => self.modify_qp(opcode, input, out),
            Opcode::ALLOC_XRCD => self.alloc_xrcd(input, out),
            Opcode::DEALLOC_XRCD => self.dealloc_xrcd(input, out),
            Opcode::CREATE_SRQ => self.create_srq(input, out),
            Opcode::CREATE_DCT => self.create_dct(input, out),
            Opcode::DESTROY_DCT => self.destroy_dct(input, out),
            Opcode::DRAIN_DCT => self.drain_dct(input, out),
            Opcode::QUERY_DCT => self.query_dct(input, out),
            Opcode::ARM_DCT_FOR_KEY_VIOLATION => self.arm_dct(input, out),
            Opcode::DESTROY_SRQ => self.destroy_srq(input, out),
            Opcode::QUERY_SRQ => self.query_srq(input, out),
            Opcode::ARM_RQ => self.arm_rq(op_mod, input, out),
            Opcode::CREATE_XRC_SRQ => self.create_xrc_srq(input, out),
            Opcode::DESTROY_XRC_SRQ => self.destroy_xrc_srq(input, out),
            Opcode::QUERY_XRC_SRQ => self.query_xrc_srq(input, out),
            Opcode::ARM_XRC_SRQ => self.arm_xrc_srq(op_mod, input, out),
            Opcode::CREATE_RMP => self.create_rmp(input, out),
            Opcode::DESTROY_RMP => self.destroy_rmp(input, out),
            Opcode::QUERY_RMP => self.query_rmp(input, out),
            Opcode::MODIFY_RMP => self.modify_rmp(input, out),
            Opcode::QUERY_NIC_VPORT_CONTEXT => self.query_nic_vport_context(input, out),
            Opcode::MODIFY_NIC_VPORT_CONTEXT => self.modify_nic_vport_context(input, out),
            Opcode::ALLOC_Q_COUNTER => self.alloc_q_counter(input, out),
            Opcode::QUERY_VPORT_COUNTER => self.query_vport_counter(input, out),
            Opcode::DEALLOC_Q_COUNTER => self.dealloc_q_counter(input, out),
            Opcode::QUERY_Q_COUNTER => self.query_q_counter(input, out),
            Opcode::CREATE_TIS => self.create_tis(input, out),
            Opcode::MODIFY_TIS => self.modify_tis(input, out),
            Opcode::DESTROY_TIS => self.destroy_tis(input, out),
            Opcode::CREATE_TIR => self.create_tir(input, out),
            Opcode::MODIFY_TIR => self.modify_tir(input, out),
            Opcode::DESTROY_TIR => self.destroy_tir(input, out),
            Opcode::CREATE_RQT => self.create_rqt(input, out),
            Opcode::MODIFY_RQT => self.modify_rqt(input, out),
            Opcode::DESTROY_RQT => self.destroy_rqt(input, out),
            Opcode::CREATE_SQ => self.create_sq(input, out),
            Opcode::MODIFY_SQ => self.modify_sq(input, out),
            Opcode::DESTROY_SQ => self.destroy_sq(input, out),
            Opcode::CREATE_RQ => self.create_rq(input, out),
            Opcode::MODIFY_RQ => self.modify_rq(input, out),
            Opcode::DESTROY_RQ => self.destroy_rq(input, out),
            Opcode::CREATE_FLOW_TABLE => self.create_flow_table(input, out),
            Opcode::MODIFY_FLOW_TABLE => self.modify_flow_table(input, out),
            Opcode::DESTROY_FLOW_TABLE => self.destroy_flow_table(input, out),
            Opcode::SET_FLOW_TABLE_ROOT => self.set_flow_table_root(input, out),
            Opcode::CREATE_FLOW_GROUP => self.create_flow_group(input, out),
            Opcode::DESTROY_FLOW_GROUP => self.destroy_flow_group(input, out),
            Opcode::SET_FLOW_TABLE_ENTRY => self.set_flow_table_entry(op_mod, input, out),
            Opcode::DELETE_FLOW_TABLE_ENTRY => self.delete_flow_table_entry(input, out),
            Opcode::ALLOC_FLOW_COUNTER => self.alloc_flow_counter(input, out),
            Opcode::DEALLOC_FLOW_COUNTER => self.dealloc_flow_counter(input, out),
            Opcode::QUERY_FLOW_COUNTER => self.query_flow_counter(input, out),
            _ => Err(fail(CmdStatus::BadOperation, syndrome::BAD_OPCODE)),
        }
    }
}
