//! Firmware structures, one file per command family; all re-exported here.

pub mod access_reg;
pub mod caps;
pub mod cmdq;
pub mod cq;
pub mod cqe;
pub mod eq;
pub mod eqe;
pub mod hca;
pub mod mcg;
pub mod mkey;
pub mod pages;
pub mod pd;
pub mod qp;
pub mod special_contexts;
pub mod uar;
pub mod vport;
pub mod wqe;

pub use access_reg::*;
pub use caps::*;
pub use cmdq::*;
pub use cq::*;
pub use cqe::*;
pub use eq::*;
pub use eqe::*;
pub use hca::*;
pub use mcg::*;
pub use mkey::*;
pub use pages::*;
pub use pd::*;
pub use qp::*;
pub use special_contexts::*;
pub use uar::*;
pub use vport::*;
pub use wqe::*;
