//! QP states, types and the attribute-mask rules of each state transition.
//! Seed 003 (`ibv_modify_qp`) and the Linux kernel's `qp_state_table` / `ib_modify_qp_is_ok()`
//! in `drivers/infiniband/core/verbs.c` (read at torvalds/linux
//! f4d8f354d753ab21379060a5cf5553fa45a698b2, a v5.13/v5.14-era tree).
//!
//! `check_modify` accepts exactly the masks the kernel accepts, before any firmware command
//! is built ([`Qp::modify`](crate::verbs::Qp::modify) calls it; `required` and `optional`
//! read the same table for its tests):
//!
//! ```
//! use bareverbs::verbs::{
//!     AccessFlags, ModifyError, QpAttr, QpAttrMask, QpInitAttr, QpState, QpType,
//! };
//! use bareverbs::{Config, Device, Error};
//! use bareverbs_model::SimHal;
//!
//! let hal = SimHal::synchronous();
//! let dev = Device::bring_up(&hal, Config::default()).unwrap();
//! let (pd, cq) = (dev.alloc_pd().unwrap(), dev.create_cq(4).unwrap());
//! let cap = bareverbs::verbs::QpCap { max_send_wr: 1, max_send_sge: 1, ..Default::default() };
//! let mut qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq, cap)).unwrap();
//! let mut attr = QpAttr::default();
//! attr.qp_state = QpState::Init;
//! attr.port_num = 1;
//! attr.qp_access_flags = AccessFlags::LOCAL_WRITE;
//! let init = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
//! assert_eq!(
//!     qp.modify(&attr, init),
//!     Err(Error::ModifyQp(ModifyError::Missing { attrs: QpAttrMask::ACCESS_FLAGS })),
//! );
//! ```

use core::fmt;

use bitflags::bitflags;

/// QP state (`enum ibv_qp_state`; the discriminants are ibverbs' `IBV_QPS_*` values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u8)]
pub enum QpState {
    /// Newly created or reset: queues empty, nothing processed (`IBV_QPS_RESET`).
    #[default]
    Reset = 0,
    /// Initialized: receives may be posted (`IBV_QPS_INIT`).
    Init = 1,
    /// Ready to receive (`IBV_QPS_RTR`).
    Rtr = 2,
    /// Ready to send (`IBV_QPS_RTS`).
    Rts = 3,
    /// Send queue drained (`IBV_QPS_SQD`).
    Sqd = 4,
    /// Send queue error (`IBV_QPS_SQE`).
    Sqe = 5,
    /// Error: outstanding work requests are flushed (`IBV_QPS_ERR`).
    Err = 6,
}

impl QpState {
    /// Every state, in ibverbs order.
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];

    /// The state with ibverbs value `raw`, if there is one (`IBV_QPS_UNKNOWN` is not a state).
    pub const fn from_raw(raw: u8) -> Option<QpState> {
        if (raw as usize) < Self::ALL.len() {
            Some(Self::ALL[raw as usize])
        } else {
            None
        }
    }

    /// The ibverbs value.
    pub const fn raw(self) -> u8 {
        self as u8
    }

    /// The ibverbs name without the `IBV_QPS_` prefix.
    pub const fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        }
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Transport service type of a QP: the types the kernel's transition table distinguishes.
///
/// Discriminants are the kernel's `IB_QPT_*` values, which are ibverbs' `IBV_QPT_*` values
/// where ibverbs has the type (SMI and GSI are kernel-only special QPs 0 and 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
#[repr(u8)]
pub enum QpType {
    /// Subnet management QP, QP0 (`IB_QPT_SMI`).
    Smi = 0,
    /// General services QP, QP1 (`IB_QPT_GSI`).
    Gsi = 1,
    /// Reliable connected (`IBV_QPT_RC`).
    Rc = 2,
    /// Unreliable connected (`IBV_QPT_UC`).
    Uc = 3,
    /// Unreliable datagram (`IBV_QPT_UD`).
    Ud = 4,
    /// Raw Ethernet packets (`IBV_QPT_RAW_PACKET`).
    RawPacket = 8,
    /// XRC initiator, the sending side (`IBV_QPT_XRC_SEND`, kernel `IB_QPT_XRC_INI`).
    XrcIni = 9,
    /// XRC target, the receiving side (`IBV_QPT_XRC_RECV`, kernel `IB_QPT_XRC_TGT`).
    XrcTgt = 10,
    /// A driver-specific QP (`IBV_QPT_DRIVER`), whose kind the mlx5 direct-verbs attributes
    /// give ([`Pd::create_qp_dv`](crate::verbs::Pd::create_qp_dv)). As a [`Qp`](crate::verbs::Qp)
    /// it is a DC initiator (DCI): RC's operations, each request addressed to a DC target of
    /// its own choosing; a DC target is a [`Dct`](crate::verbs::Dct). The kernel's
    /// transition table has no row for it (mlx5_ib skips `ib_modify_qp_is_ok` for DCIs); the
    /// row here holds what rdma-core's and UCX's DC code pass.
    Driver = 0xff,
}

impl QpType {
    /// Every type the transition table knows.
    pub const ALL: [QpType; 8] = [
        QpType::Smi,
        QpType::Gsi,
        QpType::Rc,
        QpType::Uc,
        QpType::Ud,
        QpType::RawPacket,
        QpType::XrcIni,
        QpType::XrcTgt,
    ];

    /// The type with kernel/ibverbs value `raw`, if this build knows it.
    pub const fn from_raw(raw: u8) -> Option<QpType> {
        match raw {
            0 => Some(QpType::Smi),
            1 => Some(QpType::Gsi),
            2 => Some(QpType::Rc),
            3 => Some(QpType::Uc),
            4 => Some(QpType::Ud),
            8 => Some(QpType::RawPacket),
            9 => Some(QpType::XrcIni),
            10 => Some(QpType::XrcTgt),
            _ => None,
        }
    }

    /// The kernel/ibverbs value.
    pub const fn raw(self) -> u8 {
        self as u8
    }

    /// The kernel name without the `IB_QPT_` prefix.
    pub const fn name(self) -> &'static str {
        match self {
            QpType::Smi => "SMI",
            QpType::Gsi => "GSI",
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
            QpType::RawPacket => "RAW_PACKET",
            QpType::XrcIni => "XRC_INI",
            QpType::XrcTgt => "XRC_TGT",
            QpType::Driver => "DRIVER",
        }
    }
}

impl fmt::Display for QpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

bitflags! {
    /// Which attributes of a modify call are set (`enum ibv_qp_attr_mask`; every bit has its
    /// `IBV_QP_*` value from rdma-core `libibverbs/verbs.h`).
    ///
    /// `Display` prints the set names joined by ` | ` (`PATH_MTU | DEST_QPN`), unknown bits in
    /// hex, and `(none)` for the empty mask.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct QpAttrMask: u32 {
        /// `qp_state`: requests a transition to that state.
        const STATE = 1 << 0;
        /// `cur_qp_state`: the state the caller believes the QP is in.
        const CUR_STATE = 1 << 1;
        /// `en_sqd_async_notify`: raise an event when the send queue has drained.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `qp_access_flags`: remote read/write/atomic enables.
        const ACCESS_FLAGS = 1 << 3;
        /// `pkey_index`.
        const PKEY_INDEX = 1 << 4;
        /// `port_num`.
        const PORT = 1 << 5;
        /// `qkey` (datagram QPs).
        const QKEY = 1 << 6;
        /// `ah_attr`: the primary path (connected QPs).
        const AV = 1 << 7;
        /// `path_mtu`.
        const PATH_MTU = 1 << 8;
        /// `timeout`: local ACK timeout.
        const TIMEOUT = 1 << 9;
        /// `retry_cnt`.
        const RETRY_CNT = 1 << 10;
        /// `rnr_retry`.
        const RNR_RETRY = 1 << 11;
        /// `rq_psn`.
        const RQ_PSN = 1 << 12;
        /// `max_rd_atomic`: outstanding RDMA reads/atomics as initiator.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `alt_ah_attr` and the other alternate-path fields.
        const ALT_PATH = 1 << 14;
        /// `min_rnr_timer`.
        const MIN_RNR_TIMER = 1 << 15;
        /// `sq_psn`.
        const SQ_PSN = 1 << 16;
        /// `max_dest_rd_atomic`: outstanding RDMA reads/atomics as responder.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `path_mig_state`.
        const PATH_MIG_STATE = 1 << 18;
        /// `cap`: queue sizes.
        const CAP = 1 << 19;
        /// `dest_qp_num`.
        const DEST_QPN = 1 << 20;
        /// `rate_limit` (raw packet QPs; bits 21–24 were never exposed by libibverbs).
        const RATE_LIMIT = 1 << 25;
    }
}

impl fmt::Display for QpAttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(none)");
        }
        let mut sep = "";
        for (name, _) in self.iter_names() {
            write!(f, "{sep}{name}")?;
            sep = " | ";
        }
        let unknown = self.bits() & !Self::all().bits();
        if unknown != 0 {
            write!(f, "{sep}{unknown:#x}")?;
        }
        Ok(())
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for QpAttrMask {
    fn format(&self, f: defmt::Formatter) {
        if self.is_empty() {
            defmt::write!(f, "(none)");
            return;
        }
        let mut first = true;
        for (name, _) in self.iter_names() {
            if !first {
                defmt::write!(f, " | ");
            }
            defmt::write!(f, "{=str}", name);
            first = false;
        }
        let unknown = self.bits() & !Self::all().bits();
        if unknown != 0 {
            if !first {
                defmt::write!(f, " | ");
            }
            defmt::write!(f, "{=u32:#x}", unknown);
        }
    }
}

/// Why a modify-QP request does not pass the kernel's rules. Each variant names everything
/// wrong of its kind, so one look at the error fixes the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ModifyError {
    /// No such transition for any QP type (e.g. INIT → RTS, RESET → ERR, or modifying a QP
    /// that stays in RTR or SQE).
    InvalidTransition {
        /// The current state.
        from: QpState,
        /// The requested state.
        to: QpState,
    },
    /// Required attributes are absent: all of them. Includes `STATE` when a transition was
    /// requested without it.
    Missing {
        /// The absent attributes.
        attrs: QpAttrMask,
    },
    /// Attributes the transition does not accept for this QP type: all of them (bits with no
    /// ibverbs meaning included).
    NotAllowed {
        /// The attributes to leave out.
        attrs: QpAttrMask,
    },
}

impl fmt::Display for ModifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ModifyError::InvalidTransition { from, to } if from == to => write!(
                f,
                "a QP in {from} cannot be modified without moving it to another state"
            ),
            ModifyError::InvalidTransition { from, to } => {
                write!(f, "{from} -> {to} is not a valid QP state transition")
            }
            ModifyError::Missing { attrs } => {
                write!(f, "missing required QP attributes: {attrs}")
            }
            ModifyError::NotAllowed { attrs } => {
                write!(f, "QP attributes not accepted by this transition: {attrs}")
            }
        }
    }
}

impl core::error::Error for ModifyError {}

/// The state a modify call leads to, as the kernel computes it: `qp_state` if the mask has
/// `STATE`, otherwise the current state (`attr_mask & IB_QP_STATE ? attr->qp_state : cur`).
pub(crate) const fn next_state(cur: QpState, mask: QpAttrMask, qp_state: QpState) -> QpState {
    if mask.contains(QpAttrMask::STATE) {
        qp_state
    } else {
        cur
    }
}

/// Checks a modify-QP request against the kernel's transition table before any command is
/// built, exactly as `ib_modify_qp_is_ok()` does.
///
/// `next` is the state the QP is to be in afterwards: `next == cur` modifies attributes in
/// place (allowed in RESET, INIT, RTS, SQD and ERR only); `next != cur` is a transition and
/// needs `STATE` in `mask`. For a raw `(attr, mask)` call, pass
/// `next_state(cur, mask, attr.qp_state)`.
///
/// # Errors
///
/// In this order: [`ModifyError::InvalidTransition`] if the table has no `cur → next` entry;
/// [`ModifyError::Missing`] with every required attribute absent from `mask`;
/// [`ModifyError::NotAllowed`] with every bit of `mask` outside required | optional.
/// `CUR_STATE` is accepted only where the table lists it (from RTR, RTS, SQD, SQE).
pub(crate) fn check_modify(
    qp_type: QpType,
    cur: QpState,
    next: QpState,
    mask: QpAttrMask,
) -> Result<(), ModifyError> {
    let Some(attrs) = rule(qp_type, cur, next) else {
        return Err(ModifyError::InvalidTransition {
            from: cur,
            to: next,
        });
    };
    let missing = attrs.required.difference(mask);
    if !missing.is_empty() {
        return Err(ModifyError::Missing { attrs: missing });
    }
    let extra = mask.difference(attrs.required.union(attrs.optional));
    if !extra.is_empty() {
        return Err(ModifyError::NotAllowed { attrs: extra });
    }
    Ok(())
}

/// The attributes `cur → next` requires for `qp_type`, `STATE` included when `next != cur`;
/// `None` if the transition is invalid.
#[cfg(test)]
const fn required(qp_type: QpType, cur: QpState, next: QpState) -> Option<QpAttrMask> {
    match rule(qp_type, cur, next) {
        Some(a) => Some(a.required),
        None => None,
    }
}

/// The attributes `cur → next` also accepts for `qp_type` (`STATE` included when
/// `next == cur`); `None` if the transition is invalid. Every accepted mask lies between
/// `required` and `required | optional`.
#[cfg(test)]
const fn optional(qp_type: QpType, cur: QpState, next: QpState) -> Option<QpAttrMask> {
    match rule(qp_type, cur, next) {
        Some(a) => Some(a.optional),
        None => None,
    }
}

/// Required and accepted-but-optional attributes of one transition for one QP type, with the
/// kernel's implicit rules for `STATE` applied.
#[derive(Clone, Copy)]
struct Rule {
    required: QpAttrMask,
    optional: QpAttrMask,
}

const fn rule(qp_type: QpType, cur: QpState, next: QpState) -> Option<Rule> {
    let Some(per_type) = TABLE[cur as usize][next as usize] else {
        return None;
    };
    let a = per_type.get(qp_type);
    // The kernel always lets STATE through (`mask & ~(req | opt | IB_QP_STATE)`); it is what
    // asks for a transition, so it is required exactly when the state changes.
    Some(if (cur as u8) == (next as u8) {
        Rule {
            required: a.req,
            optional: a.opt.union(QpAttrMask::STATE),
        }
    } else {
        Rule {
            required: a.req.union(QpAttrMask::STATE),
            optional: a.opt,
        }
    })
}

/// `req_param` and `opt_param` of one table entry for one QP type.
#[derive(Clone, Copy)]
struct Attrs {
    req: QpAttrMask,
    opt: QpAttrMask,
}

const NONE: Attrs = Attrs {
    req: QpAttrMask::empty(),
    opt: QpAttrMask::empty(),
};

/// Only required attributes.
const fn req(m: QpAttrMask) -> Attrs {
    Attrs {
        req: m,
        opt: QpAttrMask::empty(),
    }
}

/// Only optional attributes.
const fn opt(m: QpAttrMask) -> Attrs {
    Attrs {
        req: QpAttrMask::empty(),
        opt: m,
    }
}

/// Required and optional attributes.
const fn both(req: QpAttrMask, opt: QpAttrMask) -> Attrs {
    Attrs { req, opt }
}

/// One valid transition: the attributes per QP type (a type the kernel leaves out gets none).
#[derive(Clone, Copy)]
struct PerType {
    smi: Attrs,
    gsi: Attrs,
    rc: Attrs,
    uc: Attrs,
    ud: Attrs,
    raw_packet: Attrs,
    xrc_ini: Attrs,
    xrc_tgt: Attrs,
    dci: Attrs,
}

impl PerType {
    /// Valid, with no attributes for any type (`{ .valid = 1 }`).
    const BARE: PerType = PerType {
        smi: NONE,
        gsi: NONE,
        rc: NONE,
        uc: NONE,
        ud: NONE,
        raw_packet: NONE,
        xrc_ini: NONE,
        xrc_tgt: NONE,
        dci: NONE,
    };

    const fn get(&self, t: QpType) -> Attrs {
        match t {
            QpType::Smi => self.smi,
            QpType::Gsi => self.gsi,
            QpType::Rc => self.rc,
            QpType::Uc => self.uc,
            QpType::Ud => self.ud,
            QpType::RawPacket => self.raw_packet,
            QpType::XrcIni => self.xrc_ini,
            QpType::XrcTgt => self.xrc_tgt,
            QpType::Driver => self.dci,
        }
    }
}

// Short names for the table only.
const CUR: QpAttrMask = QpAttrMask::CUR_STATE;
const SQD_NOTIFY: QpAttrMask = QpAttrMask::EN_SQD_ASYNC_NOTIFY;
const ACCESS: QpAttrMask = QpAttrMask::ACCESS_FLAGS;
const PKEY: QpAttrMask = QpAttrMask::PKEY_INDEX;
const PORT: QpAttrMask = QpAttrMask::PORT;
const QKEY: QpAttrMask = QpAttrMask::QKEY;
const AV: QpAttrMask = QpAttrMask::AV;
const MTU: QpAttrMask = QpAttrMask::PATH_MTU;
const TIMEOUT: QpAttrMask = QpAttrMask::TIMEOUT;
const RETRY: QpAttrMask = QpAttrMask::RETRY_CNT;
const RNR_RETRY: QpAttrMask = QpAttrMask::RNR_RETRY;
const RQ_PSN: QpAttrMask = QpAttrMask::RQ_PSN;
const RD_ATOMIC: QpAttrMask = QpAttrMask::MAX_QP_RD_ATOMIC;
const ALT: QpAttrMask = QpAttrMask::ALT_PATH;
const RNR_TIMER: QpAttrMask = QpAttrMask::MIN_RNR_TIMER;
const SQ_PSN: QpAttrMask = QpAttrMask::SQ_PSN;
const DEST_RD_ATOMIC: QpAttrMask = QpAttrMask::MAX_DEST_RD_ATOMIC;
const MIG: QpAttrMask = QpAttrMask::PATH_MIG_STATE;
const DEST_QPN: QpAttrMask = QpAttrMask::DEST_QPN;
const RATE: QpAttrMask = QpAttrMask::RATE_LIMIT;

/// `a | b | …` in const context.
macro_rules! m {
    ($($f:ident)|+) => { QpAttrMask::empty()$(.union($f))+ };
}

/// The kernel's `qp_state_table[cur][next]`: `None` where `.valid` is 0.
const TABLE: [[Option<PerType>; 7]; 7] = {
    use QpState::*;
    let mut t: [[Option<PerType>; 7]; 7] = [[None; 7]; 7];

    // Every state may go to RESET; every state but RESET may go to ERR.
    let mut s = 0;
    while s < 7 {
        t[s][Reset as usize] = Some(PerType::BARE);
        if s != Reset as usize {
            t[s][Err as usize] = Some(PerType::BARE);
        }
        s += 1;
    }

    t[Reset as usize][Init as usize] = Some(PerType {
        smi: req(m!(PKEY | QKEY)),
        gsi: req(m!(PKEY | QKEY)),
        rc: req(m!(PKEY | PORT | ACCESS)),
        uc: req(m!(PKEY | PORT | ACCESS)),
        ud: req(m!(PKEY | PORT | QKEY)),
        raw_packet: req(PORT),
        xrc_ini: req(m!(PKEY | PORT | ACCESS)),
        xrc_tgt: req(m!(PKEY | PORT | ACCESS)),
        dci: req(m!(PKEY | PORT)),
    });

    t[Init as usize][Init as usize] = Some(PerType {
        smi: opt(m!(PKEY | QKEY)),
        gsi: opt(m!(PKEY | QKEY)),
        rc: opt(m!(PKEY | PORT | ACCESS)),
        uc: opt(m!(PKEY | PORT | ACCESS)),
        ud: opt(m!(PKEY | PORT | QKEY)),
        raw_packet: NONE,
        xrc_ini: opt(m!(PKEY | PORT | ACCESS)),
        xrc_tgt: opt(m!(PKEY | PORT | ACCESS)),
        dci: opt(m!(PKEY | PORT)),
    });

    t[Init as usize][Rtr as usize] = Some(PerType {
        smi: opt(m!(PKEY | QKEY)),
        gsi: opt(m!(PKEY | QKEY)),
        rc: both(
            m!(AV | MTU | DEST_QPN | RQ_PSN | DEST_RD_ATOMIC | RNR_TIMER),
            m!(ALT | ACCESS | PKEY),
        ),
        uc: both(m!(AV | MTU | DEST_QPN | RQ_PSN), m!(ALT | ACCESS | PKEY)),
        ud: opt(m!(PKEY | QKEY)),
        raw_packet: NONE,
        xrc_ini: both(m!(AV | MTU | DEST_QPN | RQ_PSN), m!(ALT | ACCESS | PKEY)),
        xrc_tgt: both(
            m!(AV | MTU | DEST_QPN | RQ_PSN | DEST_RD_ATOMIC | RNR_TIMER),
            m!(ALT | ACCESS | PKEY),
        ),
        dci: both(MTU, m!(AV | PKEY)),
    });

    t[Rtr as usize][Rts as usize] = Some(PerType {
        smi: both(SQ_PSN, m!(CUR | QKEY)),
        gsi: both(SQ_PSN, m!(CUR | QKEY)),
        rc: both(
            m!(TIMEOUT | RETRY | RNR_RETRY | SQ_PSN | RD_ATOMIC),
            m!(CUR | ALT | ACCESS | RNR_TIMER | MIG),
        ),
        uc: both(SQ_PSN, m!(CUR | ALT | ACCESS | MIG)),
        ud: both(SQ_PSN, m!(CUR | QKEY)),
        raw_packet: opt(RATE),
        xrc_ini: both(
            m!(TIMEOUT | RETRY | RNR_RETRY | SQ_PSN | RD_ATOMIC),
            m!(CUR | ALT | ACCESS | MIG),
        ),
        xrc_tgt: both(
            m!(TIMEOUT | SQ_PSN),
            m!(CUR | ALT | ACCESS | RNR_TIMER | MIG),
        ),
        dci: both(m!(TIMEOUT | RETRY | RNR_RETRY | SQ_PSN | RD_ATOMIC), CUR),
    });

    t[Rts as usize][Rts as usize] = Some(PerType {
        smi: opt(m!(CUR | QKEY)),
        gsi: opt(m!(CUR | QKEY)),
        rc: opt(m!(CUR | ACCESS | ALT | MIG | RNR_TIMER)),
        uc: opt(m!(CUR | ACCESS | ALT | MIG)),
        ud: opt(m!(CUR | QKEY)),
        raw_packet: opt(RATE),
        xrc_ini: opt(m!(CUR | ACCESS | ALT | MIG)),
        xrc_tgt: opt(m!(CUR | ACCESS | ALT | MIG | RNR_TIMER)),
        dci: opt(CUR),
    });

    t[Rts as usize][Sqd as usize] = Some(PerType {
        smi: opt(SQD_NOTIFY),
        gsi: opt(SQD_NOTIFY),
        rc: opt(SQD_NOTIFY),
        uc: opt(SQD_NOTIFY),
        ud: opt(SQD_NOTIFY),
        raw_packet: NONE,
        xrc_ini: opt(SQD_NOTIFY),
        xrc_tgt: opt(SQD_NOTIFY),
        dci: opt(SQD_NOTIFY),
    });

    t[Sqd as usize][Rts as usize] = Some(PerType {
        smi: opt(m!(CUR | QKEY)),
        gsi: opt(m!(CUR | QKEY)),
        rc: opt(m!(CUR | ALT | ACCESS | RNR_TIMER | MIG)),
        uc: opt(m!(CUR | ALT | ACCESS | MIG)),
        ud: opt(m!(CUR | QKEY)),
        raw_packet: NONE,
        xrc_ini: opt(m!(CUR | ALT | ACCESS | MIG)),
        xrc_tgt: opt(m!(CUR | ALT | ACCESS | RNR_TIMER | MIG)),
        dci: opt(CUR),
    });

    t[Sqd as usize][Sqd as usize] = Some(PerType {
        smi: opt(m!(PKEY | QKEY)),
        gsi: opt(m!(PKEY | QKEY)),
        rc: opt(m!(PORT
            | AV
            | TIMEOUT
            | RETRY
            | RNR_RETRY
            | RD_ATOMIC
            | DEST_RD_ATOMIC
            | ALT
            | ACCESS
            | PKEY
            | RNR_TIMER
            | MIG)),
        uc: opt(m!(AV | ALT | ACCESS | PKEY | MIG)),
        ud: opt(m!(PKEY | QKEY)),
        raw_packet: NONE,
        xrc_ini: opt(m!(PORT
            | AV
            | TIMEOUT
            | RETRY
            | RNR_RETRY
            | RD_ATOMIC
            | ALT
            | ACCESS
            | PKEY
            | MIG)),
        xrc_tgt: opt(m!(PORT
            | AV
            | TIMEOUT
            | DEST_RD_ATOMIC
            | ALT
            | ACCESS
            | PKEY
            | RNR_TIMER
            | MIG)),
        dci: opt(m!(PKEY | TIMEOUT | RETRY | RNR_RETRY | RD_ATOMIC)),
    });

    t[Sqe as usize][Rts as usize] = Some(PerType {
        smi: opt(m!(CUR | QKEY)),
        gsi: opt(m!(CUR | QKEY)),
        uc: opt(m!(CUR | ACCESS)),
        ud: opt(m!(CUR | QKEY)),
        ..PerType::BARE
    });

    // RESET -> RESET and ERR -> ERR are valid with no attributes (set above); RTR -> RTR and
    // SQE -> SQE are not: a QP in those states can only leave them.
    t
};

#[cfg(test)]
mod tests {
    use super::*;
    use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
    use QpType::*;

    // ibverbs values, written out from rdma-core libibverbs/verbs.h (`enum ibv_qp_attr_mask`).
    const B_STATE: u32 = 1 << 0;
    const B_CUR_STATE: u32 = 1 << 1;
    const B_EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
    const B_ACCESS_FLAGS: u32 = 1 << 3;
    const B_PKEY_INDEX: u32 = 1 << 4;
    const B_PORT: u32 = 1 << 5;
    const B_QKEY: u32 = 1 << 6;
    const B_AV: u32 = 1 << 7;
    const B_PATH_MTU: u32 = 1 << 8;
    const B_TIMEOUT: u32 = 1 << 9;
    const B_RETRY_CNT: u32 = 1 << 10;
    const B_RNR_RETRY: u32 = 1 << 11;
    const B_RQ_PSN: u32 = 1 << 12;
    const B_MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    const B_ALT_PATH: u32 = 1 << 14;
    const B_MIN_RNR_TIMER: u32 = 1 << 15;
    const B_SQ_PSN: u32 = 1 << 16;
    const B_MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    const B_PATH_MIG_STATE: u32 = 1 << 18;
    const B_CAP: u32 = 1 << 19;
    const B_DEST_QPN: u32 = 1 << 20;
    const B_RATE_LIMIT: u32 = 1 << 25;

    #[test]
    fn attr_mask_bits_are_the_ibverbs_values() {
        let expected: &[(&str, u32)] = &[
            ("STATE", B_STATE),
            ("CUR_STATE", B_CUR_STATE),
            ("EN_SQD_ASYNC_NOTIFY", B_EN_SQD_ASYNC_NOTIFY),
            ("ACCESS_FLAGS", B_ACCESS_FLAGS),
            ("PKEY_INDEX", B_PKEY_INDEX),
            ("PORT", B_PORT),
            ("QKEY", B_QKEY),
            ("AV", B_AV),
            ("PATH_MTU", B_PATH_MTU),
            ("TIMEOUT", B_TIMEOUT),
            ("RETRY_CNT", B_RETRY_CNT),
            ("RNR_RETRY", B_RNR_RETRY),
            ("RQ_PSN", B_RQ_PSN),
            ("MAX_QP_RD_ATOMIC", B_MAX_QP_RD_ATOMIC),
            ("ALT_PATH", B_ALT_PATH),
            ("MIN_RNR_TIMER", B_MIN_RNR_TIMER),
            ("SQ_PSN", B_SQ_PSN),
            ("MAX_DEST_RD_ATOMIC", B_MAX_DEST_RD_ATOMIC),
            ("PATH_MIG_STATE", B_PATH_MIG_STATE),
            ("CAP", B_CAP),
            ("DEST_QPN", B_DEST_QPN),
            ("RATE_LIMIT", B_RATE_LIMIT),
        ];
        let names: Vec<(&str, u32)> = QpAttrMask::all()
            .iter_names()
            .map(|(n, f)| (n, f.bits()))
            .collect();
        assert_eq!(names, expected);
    }

    #[test]
    fn state_and_type_values_are_the_ibverbs_values() {
        // enum ibv_qp_state: RESET, INIT, RTR, RTS, SQD, SQE, ERR, UNKNOWN.
        for (raw, s) in [Reset, Init, Rtr, Rts, Sqd, Sqe, QpState::Err]
            .into_iter()
            .enumerate()
        {
            assert_eq!(s.raw() as usize, raw);
            assert_eq!(QpState::from_raw(raw as u8), Some(s));
        }
        assert_eq!(QpState::from_raw(7), None); // IBV_QPS_UNKNOWN
        assert_eq!(Sqd.to_string(), "SQD");

        // enum ibv_qp_type: RC = 2, UC, UD, RAW_PACKET = 8, XRC_SEND = 9, XRC_RECV;
        // enum ib_qp_type: SMI = 0, GSI = 1.
        let types = [
            (0, Smi),
            (1, Gsi),
            (2, Rc),
            (3, Uc),
            (4, Ud),
            (8, RawPacket),
            (9, XrcIni),
            (10, XrcTgt),
        ];
        for (raw, t) in types {
            assert_eq!(t.raw(), raw);
            assert_eq!(QpType::from_raw(raw), Some(t));
        }
        assert_eq!(QpType::from_raw(5), None);
        assert_eq!(QpType::from_raw(0xff), None); // IBV_QPT_DRIVER bypasses the table
        assert_eq!(XrcTgt.to_string(), "XRC_TGT");
    }

    /// The kernel's `qp_state_table`, written out independently as literal data from
    /// torvalds/linux `drivers/infiniband/core/verbs.c` (`qp_state_table`, used by
    /// `ib_modify_qp_is_ok()`), commit f4d8f354d753ab21379060a5cf5553fa45a698b2.
    /// One row per valid (cur, next); per type `(req_param, opt_param)`; a type not listed
    /// has both 0. Transitions not listed are invalid.
    type Row = (QpState, QpState, &'static [(QpType, u32, u32)]);
    const KERNEL_TABLE: &[Row] = &[
        (Reset, Reset, &[]),
        (
            Reset,
            Init,
            &[
                (Ud, B_PKEY_INDEX | B_PORT | B_QKEY, 0),
                (RawPacket, B_PORT, 0),
                (Uc, B_PKEY_INDEX | B_PORT | B_ACCESS_FLAGS, 0),
                (Rc, B_PKEY_INDEX | B_PORT | B_ACCESS_FLAGS, 0),
                (XrcIni, B_PKEY_INDEX | B_PORT | B_ACCESS_FLAGS, 0),
                (XrcTgt, B_PKEY_INDEX | B_PORT | B_ACCESS_FLAGS, 0),
                (Smi, B_PKEY_INDEX | B_QKEY, 0),
                (Gsi, B_PKEY_INDEX | B_QKEY, 0),
            ],
        ),
        (Init, Reset, &[]),
        (Init, QpState::Err, &[]),
        (
            Init,
            Init,
            &[
                (Ud, 0, B_PKEY_INDEX | B_PORT | B_QKEY),
                (Uc, 0, B_PKEY_INDEX | B_PORT | B_ACCESS_FLAGS),
                (Rc, 0, B_PKEY_INDEX | B_PORT | B_ACCESS_FLAGS),
                (XrcIni, 0, B_PKEY_INDEX | B_PORT | B_ACCESS_FLAGS),
                (XrcTgt, 0, B_PKEY_INDEX | B_PORT | B_ACCESS_FLAGS),
                (Smi, 0, B_PKEY_INDEX | B_QKEY),
                (Gsi, 0, B_PKEY_INDEX | B_QKEY),
            ],
        ),
        (
            Init,
            Rtr,
            &[
                (
                    Uc,
                    B_AV | B_PATH_MTU | B_DEST_QPN | B_RQ_PSN,
                    B_ALT_PATH | B_ACCESS_FLAGS | B_PKEY_INDEX,
                ),
                (
                    Rc,
                    B_AV | B_PATH_MTU
                        | B_DEST_QPN
                        | B_RQ_PSN
                        | B_MAX_DEST_RD_ATOMIC
                        | B_MIN_RNR_TIMER,
                    B_ALT_PATH | B_ACCESS_FLAGS | B_PKEY_INDEX,
                ),
                (
                    XrcIni,
                    B_AV | B_PATH_MTU | B_DEST_QPN | B_RQ_PSN,
                    B_ALT_PATH | B_ACCESS_FLAGS | B_PKEY_INDEX,
                ),
                (
                    XrcTgt,
                    B_AV | B_PATH_MTU
                        | B_DEST_QPN
                        | B_RQ_PSN
                        | B_MAX_DEST_RD_ATOMIC
                        | B_MIN_RNR_TIMER,
                    B_ALT_PATH | B_ACCESS_FLAGS | B_PKEY_INDEX,
                ),
                (Ud, 0, B_PKEY_INDEX | B_QKEY),
                (Smi, 0, B_PKEY_INDEX | B_QKEY),
                (Gsi, 0, B_PKEY_INDEX | B_QKEY),
            ],
        ),
        (Rtr, Reset, &[]),
        (Rtr, QpState::Err, &[]),
        (
            Rtr,
            Rts,
            &[
                (Ud, B_SQ_PSN, B_CUR_STATE | B_QKEY),
                (
                    Uc,
                    B_SQ_PSN,
                    B_CUR_STATE | B_ALT_PATH | B_ACCESS_FLAGS | B_PATH_MIG_STATE,
                ),
                (
                    Rc,
                    B_TIMEOUT | B_RETRY_CNT | B_RNR_RETRY | B_SQ_PSN | B_MAX_QP_RD_ATOMIC,
                    B_CUR_STATE | B_ALT_PATH | B_ACCESS_FLAGS | B_MIN_RNR_TIMER | B_PATH_MIG_STATE,
                ),
                (
                    XrcIni,
                    B_TIMEOUT | B_RETRY_CNT | B_RNR_RETRY | B_SQ_PSN | B_MAX_QP_RD_ATOMIC,
                    B_CUR_STATE | B_ALT_PATH | B_ACCESS_FLAGS | B_PATH_MIG_STATE,
                ),
                (
                    XrcTgt,
                    B_TIMEOUT | B_SQ_PSN,
                    B_CUR_STATE | B_ALT_PATH | B_ACCESS_FLAGS | B_MIN_RNR_TIMER | B_PATH_MIG_STATE,
                ),
                (Smi, B_SQ_PSN, B_CUR_STATE | B_QKEY),
                (Gsi, B_SQ_PSN, B_CUR_STATE | B_QKEY),
                (RawPacket, 0, B_RATE_LIMIT),
            ],
        ),
        (Rts, Reset, &[]),
        (Rts, QpState::Err, &[]),
        (
            Rts,
            Rts,
            &[
                (Ud, 0, B_CUR_STATE | B_QKEY),
                (
                    Uc,
                    0,
                    B_CUR_STATE | B_ACCESS_FLAGS | B_ALT_PATH | B_PATH_MIG_STATE,
                ),
                (
                    Rc,
                    0,
                    B_CUR_STATE | B_ACCESS_FLAGS | B_ALT_PATH | B_PATH_MIG_STATE | B_MIN_RNR_TIMER,
                ),
                (
                    XrcIni,
                    0,
                    B_CUR_STATE | B_ACCESS_FLAGS | B_ALT_PATH | B_PATH_MIG_STATE,
                ),
                (
                    XrcTgt,
                    0,
                    B_CUR_STATE | B_ACCESS_FLAGS | B_ALT_PATH | B_PATH_MIG_STATE | B_MIN_RNR_TIMER,
                ),
                (Smi, 0, B_CUR_STATE | B_QKEY),
                (Gsi, 0, B_CUR_STATE | B_QKEY),
                (RawPacket, 0, B_RATE_LIMIT),
            ],
        ),
        (
            Rts,
            Sqd,
            &[
                (Ud, 0, B_EN_SQD_ASYNC_NOTIFY),
                (Uc, 0, B_EN_SQD_ASYNC_NOTIFY),
                (Rc, 0, B_EN_SQD_ASYNC_NOTIFY),
                (XrcIni, 0, B_EN_SQD_ASYNC_NOTIFY),
                (XrcTgt, 0, B_EN_SQD_ASYNC_NOTIFY),
                (Smi, 0, B_EN_SQD_ASYNC_NOTIFY),
                (Gsi, 0, B_EN_SQD_ASYNC_NOTIFY),
            ],
        ),
        (Sqd, Reset, &[]),
        (Sqd, QpState::Err, &[]),
        (
            Sqd,
            Rts,
            &[
                (Ud, 0, B_CUR_STATE | B_QKEY),
                (
                    Uc,
                    0,
                    B_CUR_STATE | B_ALT_PATH | B_ACCESS_FLAGS | B_PATH_MIG_STATE,
                ),
                (
                    Rc,
                    0,
                    B_CUR_STATE | B_ALT_PATH | B_ACCESS_FLAGS | B_MIN_RNR_TIMER | B_PATH_MIG_STATE,
                ),
                (
                    XrcIni,
                    0,
                    B_CUR_STATE | B_ALT_PATH | B_ACCESS_FLAGS | B_PATH_MIG_STATE,
                ),
                (
                    XrcTgt,
                    0,
                    B_CUR_STATE | B_ALT_PATH | B_ACCESS_FLAGS | B_MIN_RNR_TIMER | B_PATH_MIG_STATE,
                ),
                (Smi, 0, B_CUR_STATE | B_QKEY),
                (Gsi, 0, B_CUR_STATE | B_QKEY),
            ],
        ),
        (
            Sqd,
            Sqd,
            &[
                (Ud, 0, B_PKEY_INDEX | B_QKEY),
                (
                    Uc,
                    0,
                    B_AV | B_ALT_PATH | B_ACCESS_FLAGS | B_PKEY_INDEX | B_PATH_MIG_STATE,
                ),
                (
                    Rc,
                    0,
                    B_PORT
                        | B_AV
                        | B_TIMEOUT
                        | B_RETRY_CNT
                        | B_RNR_RETRY
                        | B_MAX_QP_RD_ATOMIC
                        | B_MAX_DEST_RD_ATOMIC
                        | B_ALT_PATH
                        | B_ACCESS_FLAGS
                        | B_PKEY_INDEX
                        | B_MIN_RNR_TIMER
                        | B_PATH_MIG_STATE,
                ),
                (
                    XrcIni,
                    0,
                    B_PORT
                        | B_AV
                        | B_TIMEOUT
                        | B_RETRY_CNT
                        | B_RNR_RETRY
                        | B_MAX_QP_RD_ATOMIC
                        | B_ALT_PATH
                        | B_ACCESS_FLAGS
                        | B_PKEY_INDEX
                        | B_PATH_MIG_STATE,
                ),
                (
                    XrcTgt,
                    0,
                    B_PORT
                        | B_AV
                        | B_TIMEOUT
                        | B_MAX_DEST_RD_ATOMIC
                        | B_ALT_PATH
                        | B_ACCESS_FLAGS
                        | B_PKEY_INDEX
                        | B_MIN_RNR_TIMER
                        | B_PATH_MIG_STATE,
                ),
                (Smi, 0, B_PKEY_INDEX | B_QKEY),
                (Gsi, 0, B_PKEY_INDEX | B_QKEY),
            ],
        ),
        (Sqe, Reset, &[]),
        (Sqe, QpState::Err, &[]),
        (
            Sqe,
            Rts,
            &[
                (Ud, 0, B_CUR_STATE | B_QKEY),
                (Uc, 0, B_CUR_STATE | B_ACCESS_FLAGS),
                (Smi, 0, B_CUR_STATE | B_QKEY),
                (Gsi, 0, B_CUR_STATE | B_QKEY),
            ],
        ),
        (QpState::Err, Reset, &[]),
        (QpState::Err, QpState::Err, &[]),
    ];

    /// `(req_param, opt_param)` from [`KERNEL_TABLE`], or `None` if `.valid` is 0.
    fn kernel_entry(t: QpType, cur: QpState, next: QpState) -> Option<(u32, u32)> {
        let (_, _, types) = KERNEL_TABLE
            .iter()
            .find(|(c, n, _)| *c == cur && *n == next)?;
        Some(
            types
                .iter()
                .find(|(ty, _, _)| *ty == t)
                .map_or((0, 0), |&(_, r, o)| (r, o)),
        )
    }

    /// `ib_modify_qp_is_ok()` re-stated over [`KERNEL_TABLE`]; `mask` carries STATE iff the
    /// caller asks for `next`, as `ib_uverbs`/drivers derive `next` from it.
    fn kernel_is_ok(t: QpType, cur: QpState, next: QpState, mask: u32) -> bool {
        if mask & B_CUR_STATE != 0 && !matches!(cur, Rtr | Rts | Sqd | Sqe) {
            return false;
        }
        let Some((req, opt)) = kernel_entry(t, cur, next) else {
            return false;
        };
        if mask & req != req {
            return false;
        }
        mask & !(req | opt | B_STATE) == 0
    }

    fn mask(bits: u32) -> QpAttrMask {
        QpAttrMask::from_bits_retain(bits)
    }

    fn single_bits(bits: u32) -> impl Iterator<Item = u32> {
        (0..32).map(|i| 1u32 << i).filter(move |b| bits & b != 0)
    }

    #[test]
    fn kernel_table_rows_are_unique() {
        for (i, (c, n, types)) in KERNEL_TABLE.iter().enumerate() {
            for (c2, n2, _) in &KERNEL_TABLE[i + 1..] {
                assert!(!(c == c2 && n == n2), "{c} -> {n} listed twice");
            }
            for (j, (t, ..)) in types.iter().enumerate() {
                assert!(
                    types[j + 1..].iter().all(|(t2, ..)| t2 != t),
                    "{c}->{n} {t}"
                );
            }
        }
        assert_eq!(KERNEL_TABLE.len(), 22);
    }

    /// Every (type, from, to) and, for each, the masks around the boundary: exactly the
    /// required set, everything accepted, each required bit removed, each other bit of the
    /// 32 added, and a few combinations. Exact error variants and attributes are asserted,
    /// and every verdict is cross-checked with the restated kernel predicate.
    #[test]
    fn matches_the_kernel_table_for_every_transition_and_type() {
        let mut checked = 0usize;
        for t in QpType::ALL {
            for cur in QpState::ALL {
                for next in QpState::ALL {
                    let Some((req, opt)) = kernel_entry(t, cur, next) else {
                        assert_eq!(required(t, cur, next), None, "{t} {cur}->{next}");
                        assert_eq!(optional(t, cur, next), None, "{t} {cur}->{next}");
                        for m in [0, B_STATE, all_known_bits(), u32::MAX] {
                            assert_eq!(
                                check_modify(t, cur, next, mask(m)),
                                Err(ModifyError::InvalidTransition {
                                    from: cur,
                                    to: next
                                }),
                                "{t} {cur}->{next} {m:#x}"
                            );
                            assert!(!kernel_is_ok(t, cur, next, m | B_STATE));
                            checked += 1;
                        }
                        continue;
                    };
                    let state = if cur == next { 0 } else { B_STATE };
                    let need = req | state;
                    let accepted = req | opt | B_STATE;
                    assert_eq!(
                        required(t, cur, next),
                        Some(mask(need)),
                        "{t} {cur}->{next}"
                    );
                    assert_eq!(
                        optional(t, cur, next),
                        Some(mask(accepted & !need)),
                        "{t} {cur}->{next}"
                    );

                    let mut cases: Vec<(u32, Result<(), ModifyError>)> =
                        vec![(need, Ok(())), (accepted, Ok(())), (need | B_STATE, Ok(()))];
                    // The empty mask.
                    cases.push((
                        0,
                        if need == 0 {
                            Ok(())
                        } else {
                            Err(ModifyError::Missing { attrs: mask(need) })
                        },
                    ));
                    // Each required bit left out, alone and with all the optional ones.
                    for b in single_bits(need) {
                        let missing = Err(ModifyError::Missing { attrs: mask(b) });
                        cases.push((need & !b, missing));
                        cases.push((accepted & !b, missing));
                    }
                    // Each bit the transition does not take, added to a valid mask.
                    for b in single_bits(!accepted) {
                        let extra = Err(ModifyError::NotAllowed { attrs: mask(b) });
                        cases.push((need | b, extra));
                        cases.push((accepted | b, extra));
                    }
                    // Everything set: all the foreign bits, named together.
                    cases.push((
                        u32::MAX,
                        Err(ModifyError::NotAllowed {
                            attrs: mask(!accepted),
                        }),
                    ));
                    // Missing wins over NotAllowed, as in the kernel's order of checks.
                    if need != 0 {
                        cases.push((
                            !need & !accepted,
                            Err(ModifyError::Missing { attrs: mask(need) }),
                        ));
                    }

                    for (m, expected) in cases {
                        let got = check_modify(t, cur, next, mask(m));
                        assert_eq!(got, expected, "{t} {cur}->{next} mask {}", mask(m));
                        // The kernel sees next == cur when STATE is absent; a mask without
                        // STATE for a real transition is our Missing{STATE}, not its verdict.
                        if cur == next || m & B_STATE != 0 {
                            assert_eq!(
                                got.is_ok(),
                                kernel_is_ok(t, cur, next, m),
                                "{t} {cur}->{next} mask {}",
                                mask(m)
                            );
                        }
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 10_000, "only {checked} cases");
    }

    fn all_known_bits() -> u32 {
        QpAttrMask::all().bits()
    }

    #[test]
    fn cur_state_only_from_rtr_rts_sqd_sqe() {
        // ib_modify_qp_is_ok() rejects CUR_STATE from other states before the table; the
        // table never lists it there, so check_modify rejects it the same way.
        for t in QpType::ALL {
            for cur in QpState::ALL {
                for next in QpState::ALL {
                    if let Some(o) = optional(t, cur, next) {
                        if o.contains(QpAttrMask::CUR_STATE) {
                            assert!(matches!(cur, Rtr | Rts | Sqd | Sqe), "{t} {cur}->{next}");
                        }
                    }
                }
            }
        }
        let init_rtr = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::QKEY;
        assert_eq!(
            check_modify(Ud, Init, Rtr, init_rtr | QpAttrMask::CUR_STATE),
            Err(ModifyError::NotAllowed {
                attrs: QpAttrMask::CUR_STATE
            })
        );
        assert_eq!(
            check_modify(
                Ud,
                Rtr,
                Rts,
                QpAttrMask::STATE | QpAttrMask::SQ_PSN | QpAttrMask::CUR_STATE
            ),
            Ok(())
        );
        // Valid from RTS, but only where the entry lists it: not RTS -> ERR.
        assert_eq!(
            check_modify(
                Rc,
                Rts,
                QpState::Err,
                QpAttrMask::STATE | QpAttrMask::CUR_STATE
            ),
            Err(ModifyError::NotAllowed {
                attrs: QpAttrMask::CUR_STATE
            })
        );
    }

    /// Seed 003's walk-through, as the kernel table has it.
    #[test]
    fn seed_003_bring_up() {
        use QpAttrMask as A;

        let rc_init = A::STATE | A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS;
        assert_eq!(required(Rc, Reset, Init), Some(rc_init));
        assert_eq!(optional(Rc, Reset, Init), Some(A::empty()));
        assert_eq!(check_modify(Rc, Reset, Init, rc_init), Ok(()));
        // UD takes a Q_Key instead of access flags.
        let ud_init = A::STATE | A::PKEY_INDEX | A::PORT | A::QKEY;
        assert_eq!(required(Ud, Reset, Init), Some(ud_init));
        assert_eq!(check_modify(Ud, Reset, Init, ud_init), Ok(()));
        assert_eq!(
            check_modify(Ud, Reset, Init, rc_init),
            Err(ModifyError::Missing { attrs: A::QKEY })
        );
        assert_eq!(
            check_modify(Ud, Reset, Init, ud_init | A::ACCESS_FLAGS),
            Err(ModifyError::NotAllowed {
                attrs: A::ACCESS_FLAGS
            })
        );

        let rc_rtr = A::STATE
            | A::AV
            | A::PATH_MTU
            | A::DEST_QPN
            | A::RQ_PSN
            | A::MAX_DEST_RD_ATOMIC
            | A::MIN_RNR_TIMER;
        assert_eq!(required(Rc, Init, Rtr), Some(rc_rtr));
        assert_eq!(
            optional(Rc, Init, Rtr),
            Some(A::ALT_PATH | A::ACCESS_FLAGS | A::PKEY_INDEX)
        );
        assert_eq!(
            check_modify(Rc, Init, Rtr, rc_rtr - A::PATH_MTU),
            Err(ModifyError::Missing { attrs: A::PATH_MTU })
        );
        // UC: the connected attributes without the RDMA-read/RNR ones.
        assert_eq!(
            required(Uc, Init, Rtr),
            Some(A::STATE | A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN)
        );
        // UD needs nothing but the state; it may refresh its P_Key index and Q_Key.
        assert_eq!(required(Ud, Init, Rtr), Some(A::STATE));
        assert_eq!(optional(Ud, Init, Rtr), Some(A::PKEY_INDEX | A::QKEY));

        let rc_rts =
            A::STATE | A::SQ_PSN | A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::MAX_QP_RD_ATOMIC;
        assert_eq!(required(Rc, Rtr, Rts), Some(rc_rts));
        assert_eq!(
            optional(Rc, Rtr, Rts),
            Some(
                A::CUR_STATE | A::ALT_PATH | A::ACCESS_FLAGS | A::MIN_RNR_TIMER | A::PATH_MIG_STATE
            )
        );
        assert_eq!(check_modify(Rc, Rtr, Rts, rc_rts), Ok(()));
        assert_eq!(
            check_modify(Rc, Rtr, Rts, A::STATE | A::SQ_PSN),
            Err(ModifyError::Missing {
                attrs: A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::MAX_QP_RD_ATOMIC
            })
        );
        assert_eq!(required(Uc, Rtr, Rts), Some(A::STATE | A::SQ_PSN));
        assert_eq!(required(Ud, Rtr, Rts), Some(A::STATE | A::SQ_PSN));

        // Transitions must come in order.
        assert_eq!(
            check_modify(Rc, Init, Rts, rc_rts),
            Err(ModifyError::InvalidTransition {
                from: Init,
                to: Rts
            })
        );
        assert_eq!(
            check_modify(Rc, Reset, Rtr, rc_rtr),
            Err(ModifyError::InvalidTransition {
                from: Reset,
                to: Rtr
            })
        );
    }

    #[test]
    fn reset_and_error_take_only_the_state() {
        // Staying in RESET or ERR is a (valid) modify without a transition: STATE optional.
        let state_unless_stays = |cur: QpState, next: QpState| {
            if cur == next {
                QpAttrMask::empty()
            } else {
                QpAttrMask::STATE
            }
        };
        for t in QpType::ALL {
            for cur in QpState::ALL {
                assert_eq!(
                    required(t, cur, Reset),
                    Some(state_unless_stays(cur, Reset)),
                    "{t} {cur}"
                );
                assert_eq!(
                    optional(t, cur, Reset),
                    Some(QpAttrMask::STATE - state_unless_stays(cur, Reset)),
                    "{t} {cur}"
                );
                assert_eq!(check_modify(t, cur, Reset, QpAttrMask::STATE), Ok(()));
                assert_eq!(
                    check_modify(t, cur, Reset, QpAttrMask::STATE | QpAttrMask::PORT),
                    Err(ModifyError::NotAllowed {
                        attrs: QpAttrMask::PORT
                    })
                );
                if cur == Reset {
                    // Not in the kernel's table (older kernels and seed-style lists allow it).
                    assert_eq!(
                        check_modify(t, Reset, QpState::Err, QpAttrMask::STATE),
                        Err(ModifyError::InvalidTransition {
                            from: Reset,
                            to: QpState::Err
                        })
                    );
                } else {
                    assert_eq!(
                        required(t, cur, QpState::Err),
                        Some(state_unless_stays(cur, QpState::Err)),
                        "{t} {cur}"
                    );
                    assert_eq!(
                        check_modify(t, cur, QpState::Err, QpAttrMask::STATE),
                        Ok(())
                    );
                }
            }
        }
    }

    #[test]
    fn modifying_without_a_transition() {
        use QpAttrMask as A;
        // STATE is what asks for a transition; without it the QP stays where it is.
        assert_eq!(next_state(Rts, A::ACCESS_FLAGS, Reset), Rts);
        assert_eq!(next_state(Rts, A::STATE, Sqd), Sqd);
        assert_eq!(check_modify(Rc, Rts, Rts, A::ACCESS_FLAGS), Ok(()));
        assert_eq!(
            check_modify(Rc, Rts, Rts, A::STATE | A::ACCESS_FLAGS),
            Ok(())
        );
        assert_eq!(check_modify(Rc, Rts, Rts, A::empty()), Ok(()));
        assert_eq!(
            check_modify(Rc, Rts, Rts, A::TIMEOUT),
            Err(ModifyError::NotAllowed { attrs: A::TIMEOUT })
        );
        // A transition asked for without STATE.
        assert_eq!(
            check_modify(Rc, Rtr, Rts, A::SQ_PSN),
            Err(ModifyError::Missing {
                attrs: A::STATE | A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::MAX_QP_RD_ATOMIC
            })
        );
        // RTR and SQE cannot be modified in place.
        for s in [Rtr, Sqe] {
            assert_eq!(
                check_modify(Rc, s, s, A::empty()),
                Err(ModifyError::InvalidTransition { from: s, to: s })
            );
        }
        // Raw packet QPs may change their rate limit in RTS.
        assert_eq!(check_modify(RawPacket, Rts, Rts, A::RATE_LIMIT), Ok(()));
        assert_eq!(
            check_modify(Rc, Rts, Rts, A::RATE_LIMIT),
            Err(ModifyError::NotAllowed {
                attrs: A::RATE_LIMIT
            })
        );
    }

    #[test]
    fn display_names_the_attributes() {
        use QpAttrMask as A;
        for (name, flag) in A::all().iter_names() {
            assert_eq!(flag.to_string(), name);
            let missing = ModifyError::Missing { attrs: flag }.to_string();
            assert!(missing.contains(name), "{missing}");
            let extra = ModifyError::NotAllowed { attrs: flag }.to_string();
            assert!(extra.contains(name), "{extra}");
        }
        assert_eq!(
            ModifyError::Missing {
                attrs: A::PATH_MTU | A::DEST_QPN
            }
            .to_string(),
            "missing required QP attributes: PATH_MTU | DEST_QPN"
        );
        assert_eq!(
            ModifyError::NotAllowed {
                attrs: A::SQ_PSN | A::from_bits_retain(1 << 21)
            }
            .to_string(),
            "QP attributes not accepted by this transition: SQ_PSN | 0x200000"
        );
        assert_eq!(
            ModifyError::InvalidTransition {
                from: Init,
                to: Rts
            }
            .to_string(),
            "INIT -> RTS is not a valid QP state transition"
        );
        assert_eq!(
            ModifyError::InvalidTransition { from: Rtr, to: Rtr }.to_string(),
            "a QP in RTR cannot be modified without moving it to another state"
        );
        assert_eq!(A::empty().to_string(), "(none)");

        // And what a caller sees from a real check.
        let e = check_modify(Rc, Init, Rtr, A::STATE | A::AV | A::DEST_QPN | A::RQ_PSN)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "missing required QP attributes: PATH_MTU | MIN_RNR_TIMER | MAX_DEST_RD_ATOMIC"
        );
    }
}
