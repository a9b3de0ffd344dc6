//! bareverbs-model: a behavioural model of a ConnectX-5-class mlx5 HCA, faithful enough for
//! the Linux `mlx5_core` driver, and [`SimHal`], which runs the bareverbs driver against it in
//! process.
//!
//! Where things are: the device and its BAR0 in [`hca`] (the initialization segment in
//! `init_segment.rs`, the MSI-X table in `msix.rs`), the command queue engine in [`cmdq`],
//! command handlers in `exec/`, the object tables in `objects.rs`, the data path (requester,
//! responder, WQE execution, CQ and EQ rings) over `data_path.rs`, event queues in [`eq`],
//! capabilities in [`caps`], the DMA address space in [`dma`] and [`memory`], the platform
//! glue in [`sim_hal`].

pub mod caps;
mod catas;
pub mod clock;
pub mod cmdq;
mod cmdq_state;
pub mod config;
pub mod cq;
mod cq_ring;
mod cqe_write;
mod data_path;
pub mod dma;
pub mod engine;
pub mod eq;
mod eq_ring;
mod eth;
pub mod exec;
pub mod fabric;
pub mod guest_memory;
pub mod hca;
mod ib_wire;
mod init_segment;
mod key_access;
mod late;
pub mod memory;
pub mod mkey;
mod msix;
mod num_table;
mod objects;
pub mod page_list;
pub mod pcap;
pub mod pci;
pub mod pma;
mod port;
pub mod qp;
mod qp_flush;
mod request;
mod requester;
mod responder;
pub mod rng;
mod sge;
pub mod sim_hal;
pub mod sma;
mod small_list;
pub mod srq;
pub mod subnet;
mod tap;
pub mod trace;
pub mod umr;
pub mod vfio_user;
pub mod vfio_user_gate;
mod work_counters;
pub mod wqe_exec;
mod wqe_parse;

pub use config::{CommandFault, FaultAction, Faults, ModelConfig};
pub use dma::DmaFault;
pub use eth::{EthObjects, EthWork};
pub use fabric::Fabric;
pub use hca::{Hca, HcaState};
pub use memory::{HostMemory, SimDma};
pub use pci::PciConfig;
pub use sim_hal::{Drive, Model, SimHal, SimMmio};
pub use trace::{ModelEvent, TraceEntry};
