//! bareverbs-vfio: the Linux VFIO backend of bareverbs. One PCI function opened through the
//! legacy container/group API, BAR0 mmapped (or reached with `pread`/`pwrite`), DMA memory
//! from 2 MiB hugepages mapped with `VFIO_IOMMU_MAP_DMA`, MSI-X eventfds, and a helper to bind
//! the function to vfio-pci (Documentation/driver-api/vfio.rst; DESIGN.md §2, `vfio/`).
//!
//! ```no_run
//! use bareverbs_hal::{BarOffset, Hal, Mmio};
//! use bareverbs_vfio::VfioHal;
//!
//! let hal = VfioHal::open("0000:01:00.0")?;
//! let fw_rev = hal.bar0().read32(BarOffset(0));
//! println!("firmware {}.{}", fw_rev & 0xffff, fw_rev >> 16);
//! # Ok::<(), bareverbs_vfio::VfioError>(())
//! ```
//!
//! What the machine needs, and what each [`VfioError`] says when it is missing:
//! - the IOMMU on (`intel_iommu=on` / `amd_iommu=on`; in QEMU `-device
//!   intel-iommu,caching-mode=on`). Linux without `CONFIG_VFIO_NOIOMMU` offers no other way;
//! - the function bound to vfio-pci: `bareverbs-vfio-bind bind 0000:01:00.0`;
//! - rights on `/dev/vfio/<group>` and enough locked memory (`ulimit -l`) for the DMA arena;
//! - 2 MiB hugepages, preferably: `echo 64 > /proc/sys/vm/nr_hugepages`. Without them DMA
//!   memory comes from 4 KiB pages, with a warning in the log.
//!
//! All system calls go through one private `sys` module, replaced by a recording fake in unit
//! tests.

mod arena;
mod bdf;
pub mod bind;
mod clock;
mod dma_copy;
mod error;
mod free_list;
mod hal;
mod iommu;
mod mmio;
mod msix;
mod sys;
mod sysfs;
mod vfio_user_hal;

pub use arena::{DmaStats, VfioDma};
pub use bdf::Bdf;
pub use error::{GroupMember, VfioError};
pub use hal::{VfioHal, VfioOptions};
pub use mmio::{Bar0Access, VfioMmio};
pub use msix::IrqEventFd;
pub use vfio_user_hal::{VfioUserDma, VfioUserHal, VfioUserMmio};
