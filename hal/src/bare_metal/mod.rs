//! Bare metal on x86-64, no operating system: what a unikernel needs to run the driver.
//! Port I/O devices (a 16550 serial port, the PIT, QEMU's `isa-debug-exit`), the TSC as a
//! clock, the ACPI MCFG table, PCIe configuration space through ECAM, DMA memory from a
//! static arena whose physical address is the device address, and [`BareHal`], the `Hal`
//! over all of it. `examples/unikernel` is built on it.
//!
//! The platform promises are made once, by the `unsafe` constructors: the image owns the
//! machine, memory is identity-mapped (virtual address = physical address), there is no
//! IOMMU, one CPU runs the driver.

mod acpi;
mod arena;
mod bare_hal;
mod pci;
mod port;
mod serial;
mod static_cell;
mod tsc;

pub use acpi::find_ecam;
pub use arena::{Arena, ArenaDma, ARENA_ALIGN, ARENA_MAX_PAGES};
pub use bare_hal::BareHal;
pub use pci::{find_functions, Ecam, Function, PciError, VENDOR_MELLANOX};
pub use port::debug_exit;
pub use serial::Serial;
pub use static_cell::StaticCell;
pub use tsc::Tsc;
