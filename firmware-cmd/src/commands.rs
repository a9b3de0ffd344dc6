//! The opcode table: every opcode with its PRM name, and for the commands this crate encodes,
//! the input and output layouts, so one generic `exec` serves them all
//! (mlx5-reference 02 §10; mlx5_ifc `MLX5_CMD_OP_*`).

use core::fmt;

use crate::ifc::*;
use crate::layout::Layout;

/// A firmware command opcode.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Opcode(pub u16);

/// A command with its opcode and layouts.
pub trait Command {
    /// The opcode.
    const OPCODE: Opcode;
    /// Input layout (fixed part; a flexible array may follow).
    type In: Layout;
    /// Output layout (fixed part; a flexible array may follow).
    type Out: Layout;
}

/// A command that only reads device state (a QUERY_*): running it cannot change, destroy or
/// create an object, hand memory to the device or change what the device reads from memory.
/// [`Command`]s without it can break a driver's bookkeeping when sent behind its back.
pub trait ReadOnly: Command {}

macro_rules! read_only {
    ($($ty:ident),* $(,)?) => {
        $( impl ReadOnly for $ty {} )*
    };
}

read_only!(
    QueryHcaCap,
    QueryAdapter,
    QueryPages,
    QueryIssi,
    QuerySpecialContexts,
    QueryVportState,
    QueryHcaVportContext,
    QueryHcaVportGid,
    QueryEq,
    QueryCq,
    QueryQp,
    QueryMkey,
    QuerySrq,
    QueryXrcSrq,
    QueryDct,
    QueryRmp,
    QueryNicVportContext,
);

macro_rules! commands {
    (
        typed { $( $name:ident = $code:literal, $ty:ident : $in:ident => $out:ident; )* }
        named { $( $oname:ident = $ocode:literal; )* }
    ) => {
        impl Opcode {
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                pub const $name: Opcode = Opcode($code);
            )*
            $(
                #[doc = concat!("`", stringify!($oname), "`")]
                pub const $oname: Opcode = Opcode($ocode);
            )*

            /// The PRM name of the opcode, if known.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( $code => Some(stringify!($name)), )*
                    $( $ocode => Some(stringify!($oname)), )*
                    _ => None,
                }
            }
        }

        $(
            #[doc = concat!("The `", stringify!($name), "` command.")]
            #[derive(Clone, Copy, Debug)]
            pub struct $ty;
            impl Command for $ty {
                const OPCODE: Opcode = Opcode($code);
                type In = $in;
                type Out = $out;
            }
        )*

        #[cfg(test)]
        const ALL: &[u16] = &[$( $code, )* $( $ocode, )*];
    };
}

commands! {
    typed {
        QUERY_HCA_CAP = 0x100, QueryHcaCap: QueryHcaCapIn => QueryHcaCapOut;
        QUERY_ADAPTER = 0x101, QueryAdapter: QueryAdapterIn => QueryAdapterOut;
        INIT_HCA = 0x102, InitHca: InitHcaIn => InitHcaOut;
        TEARDOWN_HCA = 0x103, TeardownHca: TeardownHcaIn => TeardownHcaOut;
        ENABLE_HCA = 0x104, EnableHca: EnableHcaIn => EnableHcaOut;
        DISABLE_HCA = 0x105, DisableHca: DisableHcaIn => DisableHcaOut;
        QUERY_PAGES = 0x107, QueryPages: QueryPagesIn => QueryPagesOut;
        MANAGE_PAGES = 0x108, ManagePages: ManagePagesIn => ManagePagesOut;
        SET_HCA_CAP = 0x109, SetHcaCap: SetHcaCapIn => SetHcaCapOut;
        QUERY_ISSI = 0x10a, QueryIssi: QueryIssiIn => QueryIssiOut;
        SET_ISSI = 0x10b, SetIssi: SetIssiIn => SetIssiOut;
        SET_DRIVER_VERSION = 0x10d, SetDriverVersion: SetDriverVersionIn => SetDriverVersionOut;
        CREATE_MKEY = 0x200, CreateMkey: CreateMkeyIn => CreateMkeyOut;
        QUERY_MKEY = 0x201, QueryMkey: QueryMkeyIn => QueryMkeyOut;
        DESTROY_MKEY = 0x202, DestroyMkey: DestroyMkeyIn => DestroyMkeyOut;
        QUERY_SPECIAL_CONTEXTS = 0x203, QuerySpecialContexts: QuerySpecialContextsIn => QuerySpecialContextsOut;
        CREATE_EQ = 0x301, CreateEq: CreateEqIn => CreateEqOut;
        DESTROY_EQ = 0x302, DestroyEq: DestroyEqIn => DestroyEqOut;
        QUERY_EQ = 0x303, QueryEq: QueryEqIn => QueryEqOut;
        CREATE_CQ = 0x400, CreateCq: CreateCqIn => CreateCqOut;
        DESTROY_CQ = 0x401, DestroyCq: DestroyCqIn => DestroyCqOut;
        QUERY_CQ = 0x402, QueryCq: QueryCqIn => QueryCqOut;
        MODIFY_CQ = 0x403, ModifyCq: ModifyCqIn => ModifyCqOut;
        CREATE_QP = 0x500, CreateQp: CreateQpIn => CreateQpOut;
        DESTROY_QP = 0x501, DestroyQp: DestroyQpIn => DestroyQpOut;
        RST2INIT_QP = 0x502, Rst2InitQp: Rst2InitQpIn => Rst2InitQpOut;
        INIT2RTR_QP = 0x503, Init2RtrQp: Init2RtrQpIn => Init2RtrQpOut;
        RTR2RTS_QP = 0x504, Rtr2RtsQp: Rtr2RtsQpIn => Rtr2RtsQpOut;
        RTS2RTS_QP = 0x505, Rts2RtsQp: Rts2RtsQpIn => Rts2RtsQpOut;
        SQERR2RTS_QP = 0x506, Sqerr2RtsQp: Sqerr2RtsQpIn => Sqerr2RtsQpOut;
        QP_2ERR = 0x507, Qp2Err: Qp2ErrIn => Qp2ErrOut;
        QP_2RST = 0x50a, Qp2Rst: Qp2RstIn => Qp2RstOut;
        QUERY_QP = 0x50b, QueryQp: QueryQpIn => QueryQpOut;
        SQD_RTS_QP = 0x50c, SqdRtsQp: Sqd2RtsQpIn => Sqd2RtsQpOut;
        MAD_IFC = 0x50d, MadIfc: MadIfcIn => MadIfcOut;
        INIT2INIT_QP = 0x50e, Init2InitQp: Init2InitQpIn => Init2InitQpOut;
        CREATE_SRQ = 0x700, CreateSrq: CreateSrqIn => CreateSrqOut;
        DESTROY_SRQ = 0x701, DestroySrq: DestroySrqIn => DestroySrqOut;
        QUERY_SRQ = 0x702, QuerySrq: QuerySrqIn => QuerySrqOut;
        ARM_RQ = 0x703, ArmRq: ArmRqIn => ArmRqOut;
        CREATE_XRC_SRQ = 0x705, CreateXrcSrq: CreateXrcSrqIn => CreateXrcSrqOut;
        DESTROY_XRC_SRQ = 0x706, DestroyXrcSrq: DestroyXrcSrqIn => DestroyXrcSrqOut;
        QUERY_XRC_SRQ = 0x707, QueryXrcSrq: QueryXrcSrqIn => QueryXrcSrqOut;
        ARM_XRC_SRQ = 0x708, ArmXrcSrq: ArmXrcSrqIn => ArmXrcSrqOut;
        CREATE_DCT = 0x710, CreateDct: CreateDctIn => CreateDctOut;
        DESTROY_DCT = 0x711, DestroyDct: DestroyDctIn => DestroyDctOut;
        DRAIN_DCT = 0x712, DrainDct: DrainDctIn => DrainDctOut;
        QUERY_DCT = 0x713, QueryDct: QueryDctIn => QueryDctOut;
        ARM_DCT_FOR_KEY_VIOLATION = 0x714, ArmDctForKeyViolation: ArmDctIn => ArmDctOut;
        QUERY_VPORT_STATE = 0x750, QueryVportState: QueryVportStateIn => QueryVportStateOut;
        QUERY_HCA_VPORT_CONTEXT = 0x762, QueryHcaVportContext: QueryHcaVportContextIn => QueryHcaVportContextOut;
        QUERY_HCA_VPORT_GID = 0x764, QueryHcaVportGid: QueryHcaVportGidIn => QueryHcaVportGidOut;
        ALLOC_PD = 0x800, AllocPd: AllocPdIn => AllocPdOut;
        DEALLOC_PD = 0x801, DeallocPd: DeallocPdIn => DeallocPdOut;
        ALLOC_UAR = 0x802, AllocUar: AllocUarIn => AllocUarOut;
        DEALLOC_UAR = 0x803, DeallocUar: DeallocUarIn => DeallocUarOut;
        ACCESS_REG = 0x805, AccessReg: AccessRegisterIn => AccessRegisterOut;
        ATTACH_TO_MCG = 0x806, AttachToMcg: AttachToMcgIn => AttachToMcgOut;
        DETACH_FROM_MCG = 0x807, DetachFromMcg: DetachFromMcgIn => DetachFromMcgOut;
        ALLOC_TRANSPORT_DOMAIN = 0x816, AllocTransportDomain: AllocTransportDomainIn => AllocTransportDomainOut;
        DEALLOC_TRANSPORT_DOMAIN = 0x817, DeallocTransportDomain: DeallocTransportDomainIn => DeallocTransportDomainOut;
        ALLOC_XRCD = 0x80e, AllocXrcd: AllocXrcdIn => AllocXrcdOut;
        DEALLOC_XRCD = 0x80f, DeallocXrcd: DeallocXrcdIn => DeallocXrcdOut;
        CREATE_RMP = 0x90c, CreateRmp: CreateRmpIn => CreateRmpOut;
        MODIFY_RMP = 0x90d, ModifyRmp: ModifyRmpIn => ModifyRmpOut;
        DESTROY_RMP = 0x90e, DestroyRmp: DestroyRmpIn => DestroyRmpOut;
        QUERY_RMP = 0x90f, QueryRmp: QueryRmpIn => QueryRmpOut;
        QUERY_NIC_VPORT_CONTEXT = 0x754, QueryNicVportContext: QueryNicVportContextIn => QueryNicVportContextOut;
        MODIFY_NIC_VPORT_CONTEXT = 0x755, ModifyNicVportContext: ModifyNicVportContextIn => ModifyNicVportContextOut;
        QUERY_VPORT_COUNTER = 0x770, QueryVportCounter: QueryVportCounterIn => QueryVportCounterOut;
        ALLOC_Q_COUNTER = 0x771, AllocQCounter: AllocQCounterIn => AllocQCounterOut;
        DEALLOC_Q_COUNTER = 0x772, DeallocQCounter: DeallocQCounterIn => DeallocQCounterOut;
        QUERY_Q_COUNTER = 0x773, QueryQCounter: QueryQCounterIn => QueryQCounterOut;
        CREATE_TIR = 0x900, CreateTir: CreateTirIn => CreateTirOut;
        MODIFY_TIR = 0x901, ModifyTir: ModifyTirIn => ModifyTirOut;
        DESTROY_TIR = 0x902, DestroyTir: DestroyTirIn => DestroyTirOut;
        CREATE_SQ = 0x904, CreateSq: CreateSqIn => CreateSqOut;
        MODIFY_SQ = 0x905, ModifySq: ModifySqIn => ModifySqOut;
        DESTROY_SQ = 0x906, DestroySq: DestroySqIn => DestroySqOut;
        CREATE_RQ = 0x908, CreateRq: CreateRqIn => CreateRqOut;
        MODIFY_RQ = 0x909, ModifyRq: ModifyRqIn => ModifyRqOut;
        DESTROY_RQ = 0x90a, DestroyRq: DestroyRqIn => DestroyRqOut;
        CREATE_TIS = 0x912, CreateTis: CreateTisIn => CreateTisOut;
        MODIFY_TIS = 0x913, ModifyTis: ModifyTisIn => ModifyTisOut;
        DESTROY_TIS = 0x914, DestroyTis: DestroyTisIn => DestroyTisOut;
        CREATE_RQT = 0x916, CreateRqt: CreateRqtIn => CreateRqtOut;
        MODIFY_RQT = 0x917, ModifyRqt: ModifyRqtIn => ModifyRqtOut;
        DESTROY_RQT = 0x918, DestroyRqt: DestroyRqtIn => DestroyRqtOut;
        SET_FLOW_TABLE_ROOT = 0x92f, SetFlowTableRoot: SetFlowTableRootIn => SetFlowTableRootOut;
        CREATE_FLOW_TABLE = 0x930, CreateFlowTable: CreateFlowTableIn => CreateFlowTableOut;
        DESTROY_FLOW_TABLE = 0x931, DestroyFlowTable: DestroyFlowTableIn => DestroyFlowTableOut;
        CREATE_FLOW_GROUP = 0x933, CreateFlowGroup: CreateFlowGroupIn => CreateFlowGroupOut;
        DESTROY_FLOW_GROUP = 0x934, DestroyFlowGroup: DestroyFlowGroupIn => DestroyFlowGroupOut;
        SET_FLOW_TABLE_ENTRY = 0x936, SetFlowTableEntry: SetFteIn => SetFteOut;
        DELETE_FLOW_TABLE_ENTRY = 0x938, DeleteFlowTableEntry: DeleteFteIn => DeleteFteOut;
        ALLOC_FLOW_COUNTER = 0x939, AllocFlowCounter: AllocFlowCounterIn => AllocFlowCounterOut;
        DEALLOC_FLOW_COUNTER = 0x93a, DeallocFlowCounter: DeallocFlowCounterIn => DeallocFlowCounterOut;
        QUERY_FLOW_COUNTER = 0x93b, QueryFlowCounter: QueryFlowCounterIn => QueryFlowCounterOut;
        MODIFY_FLOW_TABLE = 0x93c, ModifyFlowTable: ModifyFlowTableIn => ModifyFlowTableOut;
    }
    named {
        PAGE_FAULT_RESUME = 0x204;
        ALLOC_MEMIC = 0x205;
        GEN_EQE = 0x304;
        CREATE_PSV = 0x600;
        DESTROY_PSV = 0x601;
        MODIFY_VPORT_STATE = 0x751;
        QUERY_ESW_VPORT_CONTEXT = 0x752;
        QUERY_ROCE_ADDRESS = 0x760;
        SET_ROCE_ADDRESS = 0x761;
        MODIFY_HCA_VPORT_CONTEXT = 0x763;
        QUERY_HCA_VPORT_PKEY = 0x765;
        QUERY_VNIC_ENV = 0x76f;
        CONFIG_INT_MODERATION = 0x804;
        QUERY_MAD_DEMUX = 0x80b;
        SET_MAD_DEMUX = 0x80c;
        NOP = 0x80d;
        QUERY_CONG_STATUS = 0x822;
        QUERY_TIR = 0x903;
        QUERY_SQ = 0x907;
        QUERY_RQ = 0x90b;
        QUERY_TIS = 0x915;
        QUERY_RQT = 0x919;
        QUERY_FLOW_TABLE = 0x932;
        QUERY_FLOW_GROUP = 0x935;
        QUERY_FLOW_TABLE_ENTRY = 0x937;
        CREATE_GENERAL_OBJECT = 0xa00;
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({:#x})", self.0),
            None => write!(f, "Opcode({:#x})", self.0),
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.pad(n),
            None => write!(f, "opcode {:#x}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_are_unique_and_named() {
        for (i, a) in ALL.iter().enumerate() {
            assert!(!ALL[i + 1..].contains(a), "opcode {a:#x} listed twice");
            assert!(Opcode(*a).name().is_some());
        }
        assert_eq!(Opcode::MANAGE_PAGES.name(), Some("MANAGE_PAGES"));
        assert_eq!(std::format!("{:?}", Opcode(0x104)), "ENABLE_HCA(0x104)");
        assert_eq!(std::format!("{}", Opcode(0xfff)), "opcode 0xfff");
        assert_eq!(<ManagePages as Command>::OPCODE, Opcode(0x108));
    }

    #[test]
    fn verbs_commands_pair_opcodes_with_their_layouts() {
        fn sizes<C: Command>() -> (u16, usize, usize) {
            (C::OPCODE.0, C::In::BYTES, C::Out::BYTES)
        }
        // Opcodes: mlx5-reference 02 §10; sizes: 04 §5, 05 §1–2, 06 §1, §3, §4, §6.
        assert_eq!(sizes::<CreateMkey>(), (0x200, 272, 16));
        assert_eq!(sizes::<QueryMkey>(), (0x201, 16, 304));
        assert_eq!(sizes::<DestroyMkey>(), (0x202, 16, 16));
        assert_eq!(sizes::<CreateCq>(), (0x400, 272, 16));
        assert_eq!(sizes::<DestroyCq>(), (0x401, 16, 16));
        assert_eq!(sizes::<QueryCq>(), (0x402, 16, 272));
        assert_eq!(sizes::<ModifyCq>(), (0x403, 272, 16));
        assert_eq!(sizes::<CreateQp>(), (0x500, 272, 16));
        assert_eq!(sizes::<DestroyQp>(), (0x501, 16, 16));
        assert_eq!(sizes::<Rst2InitQp>(), (0x502, 272, 16));
        assert_eq!(sizes::<Init2RtrQp>(), (0x503, 272, 16));
        assert_eq!(sizes::<Rtr2RtsQp>(), (0x504, 272, 16));
        assert_eq!(sizes::<Rts2RtsQp>(), (0x505, 272, 16));
        assert_eq!(sizes::<Sqerr2RtsQp>(), (0x506, 272, 16));
        assert_eq!(sizes::<Qp2Err>(), (0x507, 16, 16));
        assert_eq!(sizes::<Qp2Rst>(), (0x50a, 16, 16));
        assert_eq!(sizes::<QueryQp>(), (0x50b, 16, 464));
        assert_eq!(sizes::<SqdRtsQp>(), (0x50c, 272, 16));
        assert_eq!(sizes::<Init2InitQp>(), (0x50e, 272, 16));
        assert_eq!(sizes::<AllocPd>(), (0x800, 16, 16));
        assert_eq!(sizes::<DeallocPd>(), (0x801, 16, 16));
        assert_eq!(sizes::<AttachToMcg>(), (0x806, 32, 16));
        assert_eq!(sizes::<DetachFromMcg>(), (0x807, 32, 16));
        assert_eq!(sizes::<AllocTransportDomain>(), (0x816, 16, 16));
        assert_eq!(sizes::<DeallocTransportDomain>(), (0x817, 16, 16));
        assert_eq!(Opcode::SQD_RTS_QP.name(), Some("SQD_RTS_QP"));
        // mlx5_ifc mad_ifc_in / mad_ifc_out: 16-byte header and a 256-byte MAD each way.
        assert_eq!(sizes::<MadIfc>(), (0x50d, 272, 272));
        // Linux 6.12 mlx5_ifc.h MLX5_CMD_OP_*: SRQ 0x700–0x703, XRC SRQ 0x705–0x708,
        // ALLOC/DEALLOC_XRCD 0x80e/0x80f, RMP 0x90c–0x90f.
        assert_eq!(sizes::<CreateSrq>(), (0x700, 272, 16));
        assert_eq!(sizes::<DestroySrq>(), (0x701, 16, 16));
        assert_eq!(sizes::<QuerySrq>(), (0x702, 16, 272));
        assert_eq!(sizes::<ArmRq>(), (0x703, 16, 16));
        assert_eq!(sizes::<CreateXrcSrq>(), (0x705, 272, 16));
        assert_eq!(sizes::<DestroyXrcSrq>(), (0x706, 16, 16));
        assert_eq!(sizes::<QueryXrcSrq>(), (0x707, 16, 272));
        assert_eq!(sizes::<ArmXrcSrq>(), (0x708, 16, 16));
        assert_eq!(sizes::<AllocXrcd>(), (0x80e, 16, 16));
        assert_eq!(sizes::<DeallocXrcd>(), (0x80f, 16, 16));
        assert_eq!(sizes::<CreateRmp>(), (0x90c, 272, 16));
        assert_eq!(sizes::<ModifyRmp>(), (0x90d, 272, 16));
        assert_eq!(sizes::<DestroyRmp>(), (0x90e, 16, 16));
        assert_eq!(sizes::<QueryRmp>(), (0x90f, 16, 272));
    }
}
