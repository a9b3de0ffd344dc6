//! The verbs layer: ibverbs objects and their rules on top of the brought-up device.

pub mod qp_state;
pub mod wc;

pub use wc::{Wc, WcFlags, WcOpcode, WcStatus};
