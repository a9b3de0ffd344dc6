//! The verbs layer: ibverbs objects and their rules on top of the brought-up device.
//!
//! Two RC QPs of one (model) HCA, connected to each other; an RDMA WRITE through the batch API
//! (`ibv_wr_*`), then a polled completion:
//!
//! ```
//! use bareverbs::verbs::*;
//! use bareverbs::{Config, Device};
//! use bareverbs_hal::Hal;
//! use bareverbs_model::SimHal;
//!
//! let hal = SimHal::synchronous();
//! let dev = Device::bring_up(&hal, Config::default()).unwrap();
//! let pd = dev.alloc_pd().unwrap();
//! let (mut scq, rcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
//! let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1,
//!                   max_inline_data: 64 };
//! let init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap);
//! let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
//! let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
//! let path = AhAttr { dlid: 1, port_num: 1, ..AhAttr::default() }; // port 1's LID
//! let (an, bn) = (a.qpn().raw(), b.qpn().raw());
//! for (q, peer) in [(&mut a, bn), (&mut b, an)] {
//!     q.to_init(1, 0, access, 0).unwrap();
//!     q.to_rtr(peer, 0, path, Mtu::Mtu4096).unwrap();
//!     q.to_rts(0).unwrap();
//! }
//! let mr = pd
//!     .reg_mr(hal.dma_alloc(8192, 4096).unwrap().share(), access)
//!     .map_err(|(e, _)| e)
//!     .unwrap();
//! mr.buf().write_bytes(0, b"hello").unwrap();
//! let src = [Sge { addr: mr.addr(), length: 5, lkey: mr.lkey() }];
//! a.send_batch(|batch| {
//!     batch.rdma_write(7, SendFlags::SIGNALED, mr.addr() + 4096, mr.rkey().raw(), &src)
//! })
//! .unwrap()
//! .unwrap();
//! let mut wc = [Wc::EMPTY; 4];
//! assert_eq!(scq.poll(&mut wc), 1);
//! assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::Success));
//! let mut got = [0u8; 5];
//! mr.buf().read_bytes(4096, &mut got).unwrap();
//! assert_eq!(&got, b"hello");
//! ```

mod ah;
mod comp_channel;
mod cq;
mod cq_clean;
mod cq_flush;
mod cq_orphan;
mod cq_scatter;
mod dct;
mod dv;
mod dv_mkey;
mod mcast;
pub(crate) mod mr;
pub(crate) mod pd;
mod post;
mod qp;
mod qp_attr_check;
pub(crate) mod qp_state;
mod send_batch;
mod srq;
mod srq_ring;
mod wc;
mod xrc;

pub use crate::wq::book::MAX_QPS;
pub use ah::Ah;
pub use comp_channel::{CompChannel, CqEvent, CHANNEL_CQS};
pub use cq::{Cq, CqInitAttr};
pub use dct::{Dct, DctStatus, DCT_DRAIN_TIMEOUT};
pub use dv::{
    DcInitAttr, DcType, DciStreams, DvFeature, DvQp, DvQpCreateFlags, DvQpInitAttr,
    DvQpInitAttrMask, DvRefusal, DvSendOpsFlags,
};
pub use dv_mkey::{DvMkey, MkeyConf, MkeyInitAttr, MkeyInitFlags, MkeyLayout, MrInterleaved};
pub use mcast::MAX_QP_MCGS;
pub use mr::{AccessFlags, Lkey, Mr, RegMrError, MAX_MR_PAGES};
pub use pd::{Pd, TransportDomain};
pub use post::{DcDest, PostError, RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest, UD_MAX_MESSAGE};
pub use qp::{AhAttr, GlobalRoute, MigState, Mtu, Qp, QpAttr, QpCap, QpInitAttr, QpInitInfo};
pub use qp_state::{ModifyError, QpAttrMask, QpState, QpType};
pub use send_batch::SendBatch;
pub use srq::{Srq, SrqInitAttr};
pub use srq_ring::{SrqAttr, SrqAttrMask};
pub use wc::{Wc, WcFlags, WcOpcode, WcStatus};
pub use xrc::{XrcRcvQpInitAttr, XrcSrq, Xrcd, MAX_SHARED_XRC_QPS};
