//! bareverbs: a `no_std`, no-alloc driver for mlx5 (ConnectX) HCAs. It brings the device up
//! itself through the firmware command interface, over any [`Hal`](bareverbs_hal::Hal): Linux
//! VFIO, bare metal, or the in-process model. The `alloc` feature keeps the per-QP tables on
//! the heap instead of inline (lifting their limit of 64 QPs); nothing else allocates.
//!
//! Where things are: the command queue and mailboxes in [`cmdq`], bring-up and teardown in
//! `bringup.rs`, the generic `exec`, page requests and events in [`device`], firmware pages in
//! `pages.rs`, the event queue ring in `eq.rs`, health in [`health`].
//!
//! ```
//! use bareverbs::{Config, Device};
//! use bareverbs_model::SimHal;
//!
//! let hal = SimHal::synchronous();
//! let dev = Device::bring_up(&hal, Config::default()).unwrap();
//! assert_eq!(dev.info().caps.num_ports, 1);
//! dev.teardown().unwrap();
//! assert_eq!(hal.model().pages_held(), 0);
//! ```
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

#[macro_use]
mod fmt;

mod bringup;
pub mod caps;
pub mod cmdq;
pub mod config;
pub mod device;
mod eq;
mod eq_commands;
pub mod error;
pub mod eth;
pub mod health;
mod pages;
pub mod port;
mod slot_table;
mod table;
#[cfg(feature = "testing")]
pub mod testing;
pub mod trace;
pub mod uar;
pub mod verbs;
mod wq;

pub use bareverbs_firmware_cmd as firmware_cmd;
pub use bareverbs_hal as hal;
pub use caps::{Caps, LinkLayer};
pub use config::{Config, Timeouts};
pub use device::{AsyncEvent, Device, DeviceInfo, SpecialKeys};
pub use error::{CmdError, CmdFailure, Error, Step, StepError};
pub use health::{FatalSensor, HealthReport};
pub use port::{PortInfo, PortState};
pub use trace::{Trace, TraceRecord};
