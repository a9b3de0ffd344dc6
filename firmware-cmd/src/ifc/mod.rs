//! Firmware structures, one file per command family; all re-exported here.

pub mod access_reg;
pub mod caps;
pub mod cmdq;
pub mod eq;
pub mod eqe;
pub mod hca;
pub mod pages;
pub mod special_contexts;
pub mod uar;
pub mod vport;

pub use access_reg::*;
pub use caps::*;
pub use cmdq::*;
pub use eq::*;
pub use eqe::*;
pub use hca::*;
pub use pages::*;
pub use special_contexts::*;
pub use uar::*;
pub use vport::*;
