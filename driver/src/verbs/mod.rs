//! The verbs layer: ibverbs objects and their rules on top of the brought-up device.

pub mod cq;
pub mod mr;
pub mod pd;
pub mod qp_state;
pub mod wc;

pub use cq::Cq;
pub use mr::{AccessFlags, Mr};
pub use pd::{Pd, TransportDomain};
pub use wc::{Wc, WcFlags, WcOpcode, WcStatus};
