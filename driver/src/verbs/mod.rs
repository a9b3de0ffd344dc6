//! The verbs layer: ibverbs objects and their rules on top of the brought-up device.

pub mod ah;
pub(crate) mod book;
pub mod cq;
pub mod mr;
pub mod pd;
pub mod post;
pub mod qp;
pub mod qp_state;
mod ring_pages;
pub mod send_batch;
pub mod wc;

pub use ah::Ah;
pub use book::MAX_QPS;
pub use cq::Cq;
pub use mr::{AccessFlags, Mr};
pub use pd::{Pd, TransportDomain};
pub use post::{PostError, RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest};
pub use qp::{AhAttr, GlobalRoute, Mtu, Qp, QpAttr, QpCap, QpInitAttr};
pub use qp_state::{QpAttrMask, QpState, QpType};
pub use send_batch::SendBatch;
pub use wc::{Wc, WcFlags, WcOpcode, WcStatus};
