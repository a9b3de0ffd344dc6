//! `mlx5dv_create_qp` (seed 004): a QP created with the mlx5 direct-verbs attributes
//! `mlx5dv_qp_init_attr` — DC initiators and targets, the `MLX5DV_QP_CREATE_*` flags and the
//! `MLX5DV_QP_EX_WITH_*` send operations.
//!
//! Every mask bit and flag is either carried out or refused with [`Error::DvRefused`], which
//! names it and says why: the device lacks the capability, the QP type does not take it, or
//! the driver does not implement what it needs. Nothing is accepted and ignored. The checks
//! follow rdma-core 56 `create_qp` / `create_dct` (providers/mlx5/verbs.c) and Linux 6.12
//! mlx5_ib `process_vendor_flags` / `process_create_flags` (qp.c), in that order.

use bareverbs_firmware_cmd::commands::Rts2RtsQp;
use bareverbs_firmware_cmd::ifc::{
    qpc_ext, qpc_opt_mask_32, qpc_scatter, rts2rts_qp_ext_in, Rts2RtsQpExtIn,
};
use bareverbs_firmware_cmd::{Layout, ViewMut};
use bareverbs_hal::Hal;
use bitflags::bitflags;

pub use crate::error::{DvFeature, DvRefusal};
use crate::error::{Error, Invalid};
use crate::verbs::dct::Dct;
use crate::verbs::pd::Pd;
use crate::verbs::qp::{Qp, QpExtras, QpInitAttr};
use crate::verbs::qp_state::{QpState, QpType};

bitflags! {
    /// Which fields of [`DvQpInitAttr`] are valid (`MLX5DV_QP_INIT_ATTR_MASK_*`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct DvQpInitAttrMask: u64 {
        /// `create_flags` is valid.
        const QP_CREATE_FLAGS = 1 << 0;
        /// `dc_init_attr` is valid: the QP is a DC initiator or target.
        const DC = 1 << 1;
        /// `send_ops_flags` is valid.
        const SEND_OPS_FLAGS = 1 << 2;
        /// `dc_init_attr.dci_streams` is valid (a DCI with streams).
        const DCI_STREAMS = 1 << 3;
    }
}

bitflags! {
    /// `MLX5DV_QP_CREATE_*`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct DvQpCreateFlags: u32 {
        /// Checksum and LRO offloads for tunnelled traffic (raw packet QPs).
        const TUNNEL_OFFLOADS = 1 << 0;
        /// Receive looped-back unicast (raw packet QPs: the TIR's `self_lb_block`).
        const TIR_ALLOW_SELF_LOOPBACK_UC = 1 << 1;
        /// Receive looped-back multicast (raw packet QPs).
        const TIR_ALLOW_SELF_LOOPBACK_MC = 1 << 2;
        /// No scatter to CQE.
        const DISABLE_SCATTER_TO_CQE = 1 << 3;
        /// Requester scatter to CQE even without `sq_sig_all`.
        const ALLOW_SCATTER_TO_CQE = 1 << 4;
        /// Packet-based end-to-end credits (IB spec 9.7.7.2) instead of message-based.
        const PACKET_BASED_CREDIT_MODE = 1 << 5;
        /// Move to SQD on a signature error (signature pipelining).
        const SIG_PIPELINING = 1 << 6;
    }
}

bitflags! {
    /// `MLX5DV_QP_EX_WITH_*`: the mlx5-specific work requests the QP may post.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct DvSendOpsFlags: u64 {
        /// `mlx5dv_wr_mr_interleaved`.
        const MR_INTERLEAVED = 1 << 0;
        /// `mlx5dv_wr_mr_list`.
        const MR_LIST = 1 << 1;
        /// `mlx5dv_wr_mkey_configure` and its setters.
        const MKEY_CONFIGURE = 1 << 2;
    }
}

/// `enum mlx5dv_dc_type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DcType {
    /// `MLX5DV_DCTYPE_DCT`: a DC target.
    #[default]
    Dct,
    /// `MLX5DV_DCTYPE_DCI`: a DC initiator.
    Dci,
}

/// `struct mlx5dv_dci_streams`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DciStreams {
    /// log2 of the streams the DCI runs side by side; requests of one stream run in order.
    pub log_num_concurent: u8,
    /// log2 of the streams that may be in error before the whole DCI goes to ERR.
    pub log_num_errored: u8,
}

/// `struct mlx5dv_dc_init_attr` (the C union's two members are both fields here; `dc_type`
/// says which one counts).
///
/// Non-exhaustive (the C struct grew `dci_streams` once): start from
/// [`DcInitAttr::default`] and set fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct DcInitAttr {
    /// Target or initiator.
    pub dc_type: DcType,
    /// A DCT's access key: requests must carry it.
    pub dct_access_key: u64,
    /// A DCI's streams, with [`DvQpInitAttrMask::DCI_STREAMS`].
    pub dci_streams: DciStreams,
}

/// `struct mlx5dv_qp_init_attr`. Non-exhaustive (it grows with `comp_mask`): start from
/// [`DvQpInitAttr::default`] and set the fields the mask names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DvQpInitAttr {
    /// Which of the other fields are valid.
    pub comp_mask: DvQpInitAttrMask,
    /// With [`DvQpInitAttrMask::QP_CREATE_FLAGS`].
    pub create_flags: DvQpCreateFlags,
    /// With [`DvQpInitAttrMask::DC`].
    pub dc_init_attr: DcInitAttr,
    /// With [`DvQpInitAttrMask::SEND_OPS_FLAGS`].
    pub send_ops_flags: DvSendOpsFlags,
}

/// What [`Pd::create_qp_dv`] made.
// Held by value: without allocation a QP cannot be boxed.
#[allow(clippy::large_enum_variant)]
pub enum DvQp<'p, 'd, H: Hal> {
    /// A QP: RC, UC, UD, XRC, or a DC initiator ([`QpType::Driver`]).
    Qp(Qp<'p, 'd, H>),
    /// A DC target.
    Dct(Dct<'p, 'd, H>),
}

impl<'p, 'd, H: Hal> DvQp<'p, 'd, H> {
    /// The QP, if it is one.
    pub fn into_qp(self) -> Option<Qp<'p, 'd, H>> {
        match self {
            DvQp::Qp(q) => Some(q),
            DvQp::Dct(_) => None,
        }
    }

    /// The DC target, if it is one.
    pub fn into_dct(self) -> Option<Dct<'p, 'd, H>> {
        match self {
            DvQp::Dct(d) => Some(d),
            DvQp::Qp(_) => None,
        }
    }
}

fn refused(feature: DvFeature, why: DvRefusal) -> Error {
    Error::DvRefused { feature, why }
}

/// The one create flag each bit is, for [`DvFeature`].
const CREATE_FLAG_FEATURES: [(DvQpCreateFlags, DvFeature); 7] = [
    (DvQpCreateFlags::TUNNEL_OFFLOADS, DvFeature::TunnelOffloads),
    (
        DvQpCreateFlags::TIR_ALLOW_SELF_LOOPBACK_UC,
        DvFeature::TirAllowSelfLoopbackUc,
    ),
    (
        DvQpCreateFlags::TIR_ALLOW_SELF_LOOPBACK_MC,
        DvFeature::TirAllowSelfLoopbackMc,
    ),
    (
        DvQpCreateFlags::DISABLE_SCATTER_TO_CQE,
        DvFeature::DisableScatterToCqe,
    ),
    (
        DvQpCreateFlags::ALLOW_SCATTER_TO_CQE,
        DvFeature::AllowScatterToCqe,
    ),
    (
        DvQpCreateFlags::PACKET_BASED_CREDIT_MODE,
        DvFeature::PacketBasedCreditMode,
    ),
    (DvQpCreateFlags::SIG_PIPELINING, DvFeature::SigPipelining),
];

/// Checks `dv` for a QP of `attr`'s type on a device with `caps`, and works out what it adds
/// to the QP's context. Nothing is sent to the device.
///
/// Scatter to CQE is on by default, as the seed says and rdma-core does: a QP asks the device
/// to put received SENDs of up to 32 bytes (RC, UC) and READ and atomic results of up to 32
/// bytes (RC and DCI requesters, when every request is signaled or with
/// [`DvQpCreateFlags::ALLOW_SCATTER_TO_CQE`]) inside the CQE, which the poll then copies
/// (`cq_scatter.rs`); `dma_by_iova` says whether the HAL lets the poll do so. A DCT never
/// does: mlx5 scatters to a DCT's CQEs only when they are 128 bytes (Linux `create_dct`),
/// and this driver's CQEs are 64.
pub(crate) fn plan(
    caps: &crate::caps::Caps,
    dma_by_iova: bool,
    qp_type: QpType,
    has_srq: bool,
    sq_sig_all: bool,
    dv: &DvQpInitAttr,
) -> Result<QpExtras, Error> {
    let unknown = dv.comp_mask.bits() & !DvQpInitAttrMask::all().bits();
    if unknown != 0 {
        return Err(refused(
            DvFeature::UnknownCompMask(unknown),
            DvRefusal::Unknown,
        ));
    }
    let mask = dv.comp_mask;
    let dc = mask.contains(DvQpInitAttrMask::DC);
    // rdma-core: "DC QP must be of type IBV_QPT_DRIVER"; a driver QP must say its kind.
    if dc != (qp_type == QpType::Driver) {
        return Err(if dc {
            refused(
                DvFeature::Dc,
                DvRefusal::QpType {
                    qp_type,
                    needs: "DRIVER",
                },
            )
        } else {
            Error::InvalidArgument {
                what: Invalid::UnsupportedQpType,
            }
        });
    }
    let dct = dc && dv.dc_init_attr.dc_type == DcType::Dct;
    let dci = dc && !dct;
    if dc && !caps.dc {
        return Err(refused(
            DvFeature::Dc,
            DvRefusal::NoDeviceCap { cap: "dct" },
        ));
    }
    let mut x = QpExtras::default();
    let flags = if mask.contains(DvQpInitAttrMask::QP_CREATE_FLAGS) {
        dv.create_flags
    } else {
        DvQpCreateFlags::empty()
    };
    let unknown = flags.bits() & !DvQpCreateFlags::all().bits();
    if unknown != 0 {
        return Err(refused(
            DvFeature::UnknownCreateFlags(unknown),
            DvRefusal::Unknown,
        ));
    }
    for (flag, feature) in CREATE_FLAG_FEATURES {
        if !flags.contains(flag) {
            continue;
        }
        let why = match flag {
            // Linux 6.12 `process_vendor_flags` takes these for IB_QPT_RAW_PACKET only; this
            // driver has no raw packet QPs.
            DvQpCreateFlags::TUNNEL_OFFLOADS
            | DvQpCreateFlags::TIR_ALLOW_SELF_LOOPBACK_UC
            | DvQpCreateFlags::TIR_ALLOW_SELF_LOOPBACK_MC => Some(DvRefusal::QpType {
                qp_type,
                needs: "RAW_PACKET, which this driver does not create",
            }),
            // rdma-core: "Wrong usage of creation flags".
            DvQpCreateFlags::DISABLE_SCATTER_TO_CQE
                if flags.contains(DvQpCreateFlags::ALLOW_SCATTER_TO_CQE) =>
            {
                Some(DvRefusal::Conflicts {
                    with: DvFeature::AllowScatterToCqe,
                })
            }
            DvQpCreateFlags::DISABLE_SCATTER_TO_CQE => None,
            DvQpCreateFlags::ALLOW_SCATTER_TO_CQE if !caps.scatter_to_cqe => {
                Some(DvRefusal::NoDeviceCap {
                    cap: "sctr_data_cqe",
                })
            }
            DvQpCreateFlags::ALLOW_SCATTER_TO_CQE if !dma_by_iova => Some(DvRefusal::NotInDriver {
                needs: "a HAL that reaches DMA memory by device address (Hal::dma_by_iova)",
            }),
            DvQpCreateFlags::ALLOW_SCATTER_TO_CQE if dci && !caps.dc_req_scatter_to_cqe => {
                Some(DvRefusal::NoDeviceCap {
                    cap: "dc_req_sctr_data_cqe",
                })
            }
            // The requester side scatters for RC and DCI only (Linux
            // `configure_requester_scat_cqe`); a DCT takes no requester flag.
            DvQpCreateFlags::ALLOW_SCATTER_TO_CQE if !(qp_type == QpType::Rc || dci) => {
                Some(DvRefusal::QpType {
                    qp_type,
                    needs: "RC or a DCI",
                })
            }
            DvQpCreateFlags::ALLOW_SCATTER_TO_CQE => None,
            DvQpCreateFlags::PACKET_BASED_CREDIT_MODE if qp_type != QpType::Rc => {
                Some(DvRefusal::QpType {
                    qp_type,
                    needs: "RC",
                })
            }
            DvQpCreateFlags::PACKET_BASED_CREDIT_MODE if !caps.qp_packet_based => {
                Some(DvRefusal::NoDeviceCap {
                    cap: "qp_packet_based",
                })
            }
            DvQpCreateFlags::PACKET_BASED_CREDIT_MODE => {
                x.packet_credits = true;
                None
            }
            // rdma-core: EOPNOTSUPP without SQD→RTS; signature errors come from signature
            // offload (`mlx5dv_wr_set_mkey_sig_block`), which this driver does not have.
            _ => Some(DvRefusal::NotInDriver {
                needs: "signature offload",
            }),
        };
        if let Some(why) = why {
            return Err(refused(feature, why));
        }
    }
    if mask.contains(DvQpInitAttrMask::DCI_STREAMS) {
        if !dci {
            return Err(refused(
                DvFeature::DciStreams,
                DvRefusal::QpType {
                    qp_type,
                    needs: "a DCI",
                },
            ));
        }
        let s = dv.dc_init_attr.dci_streams;
        if caps.log_max_dci_stream_channels == 0 {
            return Err(refused(
                DvFeature::DciStreams,
                DvRefusal::NoDeviceCap {
                    cap: "log_max_dci_stream_channels",
                },
            ));
        }
        for (requested, max) in [
            (s.log_num_concurent, caps.log_max_dci_stream_channels),
            (s.log_num_errored, caps.log_max_dci_errored_streams),
        ] {
            if requested > max {
                return Err(refused(
                    DvFeature::DciStreams,
                    DvRefusal::ExceedsCap { requested, max },
                ));
            }
        }
        x.dci_streams = Some((s.log_num_concurent, s.log_num_errored));
    }
    if mask.contains(DvQpInitAttrMask::SEND_OPS_FLAGS) {
        // rdma-core: send operations on a DCT are EINVAL.
        if dct {
            return Err(refused(
                DvFeature::SendOpsFlags,
                DvRefusal::QpType {
                    qp_type,
                    needs: "QPs that send",
                },
            ));
        }
        let ops = dv.send_ops_flags;
        let unknown = ops.bits() & !DvSendOpsFlags::all().bits();
        if unknown != 0 {
            return Err(refused(
                DvFeature::UnknownSendOps(unknown),
                DvRefusal::Unknown,
            ));
        }
        // They lay out indirect keys with UMR work requests (`dv_mkey.rs`).
        for (op, feature) in [
            (DvSendOpsFlags::MR_INTERLEAVED, DvFeature::MrInterleaved),
            (DvSendOpsFlags::MR_LIST, DvFeature::MrList),
            (DvSendOpsFlags::MKEY_CONFIGURE, DvFeature::MkeyConfigure),
        ] {
            if !ops.contains(op) {
                continue;
            }
            if !caps.umr_indirect_mkey {
                return Err(refused(
                    feature,
                    DvRefusal::NoDeviceCap {
                        cap: "umr_indirect_mkey_disabled clear",
                    },
                ));
            }
            // rdma-core 56 `mlx5_qp_fill_wr_pfns` takes them on RC QPs only (EOPNOTSUPP for
            // UC, XRC, UD, raw packet and DCI).
            if qp_type != QpType::Rc {
                return Err(refused(
                    feature,
                    DvRefusal::QpType {
                        qp_type,
                        needs: "RC",
                    },
                ));
            }
        }
        x.send_ops = ops.bits() as u8;
    }
    if dct {
        // A DCT receives through its SRQ (Linux 6.12 `create_dct` needs `attr->srq`).
        if !has_srq {
            return Err(Error::InvalidArgument {
                what: Invalid::DctWithoutSrq,
            });
        }
    } else if dci && has_srq {
        // A DCI receives nothing.
        return Err(Error::InvalidArgument {
            what: Invalid::NoReceiveQueue,
        });
    }
    let scatter = caps.scatter_to_cqe
        && dma_by_iova
        && !flags.contains(DvQpCreateFlags::DISABLE_SCATTER_TO_CQE);
    if scatter {
        if matches!(qp_type, QpType::Rc | QpType::Uc) {
            x.cs_res = qpc_scatter::RES_DATA32;
        }
        let requester = qp_type == QpType::Rc || (dci && caps.dc_req_scatter_to_cqe);
        if requester && (sq_sig_all || flags.contains(DvQpCreateFlags::ALLOW_SCATTER_TO_CQE)) {
            x.cs_req = qpc_scatter::REQ_DATA32;
        }
    }
    Ok(x)
}

impl<'d, H: Hal> Pd<'d, H> {
    /// Creates a QP with the mlx5 direct-verbs attributes `dv` (`mlx5dv_create_qp`). With
    /// [`DvQpInitAttrMask::DC`], `attr.qp_type` must be [`QpType::Driver`] and
    /// `dv.dc_init_attr.dc_type` says what to make: a DC initiator (a [`Qp`]; its requests
    /// are posted with [`Qp::send_batch_dc`]) or a DC target ([`Dct`]: `attr.recv_cq` takes
    /// its completions, `attr.srq` its receives; `attr.send_cq` and the sizes are not used).
    /// Without it, `attr` is what [`Pd::create_qp`] takes, with the create flags added.
    ///
    /// # Errors
    /// [`Error::DvRefused`] naming the first mask bit or flag that cannot be honoured and
    /// why; then what [`Pd::create_qp`] returns. Nothing is sent to the device for a refusal.
    pub fn create_qp_dv(
        &self,
        attr: &QpInitAttr<'_, 'd, H>,
        dv: &DvQpInitAttr,
    ) -> Result<DvQp<'_, 'd, H>, Error> {
        let caps = self.dev.info().caps;
        let x = plan(
            &caps,
            self.dev.hal.dma_by_iova(),
            attr.qp_type,
            attr.srq.is_some(),
            attr.sq_sig_all,
            dv,
        )?;
        if dv.comp_mask.contains(DvQpInitAttrMask::DC) && dv.dc_init_attr.dc_type == DcType::Dct {
            return Ok(DvQp::Dct(crate::verbs::dct::create(
                self,
                attr,
                dv.dc_init_attr.dct_access_key,
            )?));
        }
        Ok(DvQp::Qp(self.create_qp_with(attr, x)?))
    }
}

impl<H: Hal> Qp<'_, '_, H> {
    /// Takes DCI stream `stream_id` out of error (`mlx5dv_dci_stream_id_reset`): after an
    /// error completion on a DCI still in RTS, that stream's later requests were flushed;
    /// once they are, this lets the stream run again. RTS2RTS with the QPC extension's
    /// `dci_stream_channel_id`, as rdma-core sends it.
    ///
    /// # Errors
    /// [`Invalid::DcDestination`] on a QP that is not a DCI; [`Error::DvRefused`] for a DCI
    /// created without streams; [`Invalid::QpState`] outside RTS; [`Invalid::DciStream`] for
    /// a stream past the DCI's; a command error.
    pub fn dci_stream_id_reset(&mut self, stream_id: u16) -> Result<(), Error> {
        if self.qp_type() != QpType::Driver {
            return Err(Error::InvalidArgument {
                what: Invalid::DcDestination,
            });
        }
        let Some((log_channels, _)) = self.dv.dci_streams else {
            return Err(refused(
                DvFeature::DciStreams,
                DvRefusal::NotInDriver {
                    needs: "a DCI created with MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS",
                },
            ));
        };
        if self.state() != QpState::Rts {
            return Err(Error::InvalidArgument {
                what: Invalid::QpState,
            });
        }
        if u32::from(stream_id) >= 1u32 << log_channels {
            return Err(Error::InvalidArgument {
                what: Invalid::DciStream,
            });
        }
        let mut i = [0u8; Rts2RtsQpExtIn::BYTES];
        {
            let mut v = ViewMut::<Rts2RtsQpExtIn>::zeroed(&mut i)?;
            v.set(rts2rts_qp_ext_in::qpc_ext, 1u8)
                .set(rts2rts_qp_ext_in::qpn, self.qpn().raw())
                .set(
                    rts2rts_qp_ext_in::opt_param_mask_95_32,
                    qpc_opt_mask_32::DCI_STREAM_CHANNEL_ID,
                );
            v.sub(rts2rts_qp_ext_in::qpc_data_ext)
                .set(qpc_ext::dci_stream_channel_id, stream_id);
        }
        let mut o = [0u8; 16];
        self.device().exec::<Rts2RtsQp>(&mut i, &mut o)
    }
}
