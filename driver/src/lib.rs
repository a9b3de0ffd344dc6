//! bareverbs: a `no_std`, no-alloc driver for mlx5 (ConnectX) HCAs. It brings the device up
//! itself through the firmware command interface, over any [`Hal`](bareverbs_hal::Hal): Linux
//! VFIO, bare metal, or the in-process model. The `alloc` feature keeps the per-QP tables on
//! the heap instead of inline (lifting their limit of 64 QPs); nothing else allocates.
//!
//! The API: [`Device`] (bring-up, the firmware command interface, events, health) at the
//! crate root with its configuration, errors and diagnostics; the ibverbs objects in
//! [`verbs`]; raw Ethernet queues in [`eth`]. Every module under them is private and each name
//! is re-exported once, at the root, `verbs::` or `eth::`. The `testing` feature adds
//! `bareverbs::testing`: the fixtures (connected QP pairs, Ethernet ends, queue sizes) that
//! the tests and examples share.
//!
//! Where things are: the command queue and mailboxes in `cmdq.rs`, bring-up and teardown in
//! `bringup.rs`, the generic `exec`, page requests and events in `device.rs`, firmware pages
//! in `pages.rs`, the event queue ring in `eq.rs`, health in `health.rs`.
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
mod caps;
mod cmdq;
mod config;
mod device;
mod eq;
mod eq_commands;
mod error;
pub mod eth;
mod health;
mod pages;
mod port;
mod slot_table;
mod table;
#[cfg(feature = "testing")]
pub mod testing;
mod trace;
mod uar;
pub mod verbs;
mod wq;

pub use bareverbs_firmware_cmd as firmware_cmd;
pub use bareverbs_hal as hal;
pub use caps::{Caps, LinkLayer};
pub use cmdq::MAX_MESSAGE;
pub use config::{Config, Timeouts};
pub use device::{AsyncEvent, Device, DeviceInfo, SpecialKeys, EVENT_QUEUE_LEN, MAX_PORTS};
pub use error::{CmdError, CmdFailure, Error, Invalid, Limit, Step, StepError};
pub use health::{FatalSensor, HealthReport, HEALTH_POLL_INTERVAL, MAX_MISSES};
pub use port::{PortInfo, PortState};
pub use trace::{Outcome as TraceOutcome, Trace, TraceRecord, TRACE_LEN};
pub use uar::Uar;
