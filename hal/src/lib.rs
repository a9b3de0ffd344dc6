//! bareverbs platform layer: the [`Hal`] trait a backend implements (VFIO, the in-process
//! model, bare metal), BAR0 register access, DMA memory, barriers and a clock.
//!
//! This is the only `no_std` crate of the project with `unsafe`: everything that touches a raw
//! pointer lives here, behind safe types whose contracts say what they rely on. That includes
//! [`bare_metal`] (x86-64): the platform a unikernel runs the driver on.
#![no_std]

#[macro_use]
mod fmt;

pub mod addr;
#[cfg(target_arch = "x86_64")]
pub mod bare_metal;
pub mod barrier;
pub mod clock;
pub mod dma;
pub mod mmio;
pub mod raw_commands;
pub mod ring;

use core::time::Duration;

pub use addr::{BarOffset, DmaDomain, Iova};
pub use barrier::{dma_rmb, dma_wmb, rmb, wmb};
pub use clock::{Deadline, Instant};
pub use dma::{DmaBuf, DmaError, DmaMemory, SharedDma};
pub use mmio::{check_access, check_block, Mmio, MmioError, RawMmio};
pub use raw_commands::RawCommands;
pub use ring::{RingShape, Slot, Slots, SlotsMut};

/// What the driver needs from the platform: BAR0, DMA memory and time.
///
/// The driver is generic over `H: Hal` (associated types, no `dyn`).
///
/// # Safety
/// An implementation promises that:
/// - [`Hal::bar0`] reaches the device's BAR0 (or a faithful stand-in) for the life of `self`;
/// - memory from [`Hal::dma_alloc`] satisfies the [`DmaMemory`] contract, is aligned to the
///   requested alignment both at its CPU address and at its IOVA, and is zeroed;
/// - every allocation's [`DmaMemory::domain`] is [`Hal::dma_domain`], and no other backend
///   whose device could see different memory at the same IOVAs reports that domain (use
///   [`DmaDomain::fresh`] for each IOVA space);
/// - [`Hal::now`] never goes backwards.
pub unsafe trait Hal {
    /// BAR0 accessor.
    type Mmio: Mmio;
    /// DMA allocation handle; dropping it frees the memory.
    type Dma: DmaMemory;

    /// BAR0 of the device.
    fn bar0(&self) -> &Self::Mmio;

    /// Allocates `len` zeroed bytes of DMA memory aligned to `align` (a power of two, at most
    /// 4096 unless the backend says otherwise) at both its CPU and device address.
    ///
    /// # Errors
    /// [`DmaError::NoMemory`] when the backend is out of memory, [`DmaError::BadAlignment`]
    /// for an alignment it cannot give.
    fn dma_alloc(&self, len: usize, align: usize) -> Result<DmaBuf<Self::Dma>, DmaError>;

    /// The IOVA space of this backend's device and allocations: every [`Hal::dma_alloc`]
    /// buffer carries it ([`DmaMemory::domain`]), and an address from another domain must not
    /// be given to this device.
    fn dma_domain(&self) -> DmaDomain;

    /// The current time on a monotonic clock.
    fn now(&self) -> Instant;

    /// Waits at least `d` (spinning, sleeping, or advancing a virtual clock).
    fn delay(&self, d: Duration);

    /// Called on every iteration of a busy-wait loop: a spin hint on hardware, a chance for a
    /// simulated device to make progress in a model.
    fn relax(&self) {
        core::hint::spin_loop();
    }

    /// Whether [`Hal::dma_read`] and [`Hal::dma_write`] reach this backend's memory by device
    /// address. Without it the driver never asks the device to leave data to software to
    /// place (mlx5's scatter to CQE).
    fn dma_by_iova(&self) -> bool {
        false
    }

    /// Reads `dst.len()` bytes at device address `iova` of memory [`Hal::dma_alloc`] handed
    /// out and the backend still maps, as the device would read it.
    ///
    /// # Errors
    /// [`DmaError::NotMapped`] outside that memory, or on a backend without
    /// [`Hal::dma_by_iova`] (the default).
    fn dma_read(&self, iova: Iova, dst: &mut [u8]) -> Result<(), DmaError> {
        Err(DmaError::NotMapped {
            iova: iova.0,
            len: dst.len(),
        })
    }

    /// Writes `src` at device address `iova` of memory [`Hal::dma_alloc`] handed out and the
    /// backend still maps, as the device would by DMA (atomic stores, as every access to
    /// DMA memory). mlx5 leaves one such write to software: a small message the device puts
    /// in a completion ("scatter to CQE") is copied to its receive buffers by the driver,
    /// as rdma-core copies it with `memcpy` where the device address is the process's.
    ///
    /// # Errors
    /// [`DmaError::NotMapped`] outside that memory, or on a backend without
    /// [`Hal::dma_by_iova`] (the default).
    fn dma_write(&self, iova: Iova, src: &[u8]) -> Result<(), DmaError> {
        Err(DmaError::NotMapped {
            iova: iova.0,
            len: src.len(),
        })
    }

    /// Resets the function (a PCI function-level reset or the platform's equivalent): the
    /// device forgets every object and page and stops all DMA, so a new bring-up can follow
    /// a device whose command interface stopped answering. Memory the driver leaked then
    /// stays leaked (it is never freed while the device might have written it).
    ///
    /// # Errors
    /// [`ResetError::Unsupported`] where the platform cannot reset the function (the
    /// default), [`ResetError::Failed`] when the reset did not complete.
    fn function_reset(&self) -> Result<(), ResetError> {
        Err(ResetError::Unsupported)
    }
}

/// Why [`Hal::function_reset`] did not reset the function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ResetError {
    /// The platform has no way to reset the function.
    Unsupported,
    /// The reset was attempted and failed (an OS error number where there is one).
    Failed(i32),
}

// SAFETY: forwards every method to `T`, which upholds the contract.
unsafe impl<T: Hal> Hal for &T {
    type Mmio = T::Mmio;
    type Dma = T::Dma;

    fn bar0(&self) -> &Self::Mmio {
        (**self).bar0()
    }

    fn dma_alloc(&self, len: usize, align: usize) -> Result<DmaBuf<Self::Dma>, DmaError> {
        (**self).dma_alloc(len, align)
    }

    fn dma_domain(&self) -> DmaDomain {
        (**self).dma_domain()
    }

    fn now(&self) -> Instant {
        (**self).now()
    }

    fn delay(&self, d: Duration) {
        (**self).delay(d)
    }

    fn relax(&self) {
        (**self).relax()
    }

    fn function_reset(&self) -> Result<(), ResetError> {
        (**self).function_reset()
    }

    fn dma_by_iova(&self) -> bool {
        (**self).dma_by_iova()
    }

    fn dma_read(&self, iova: Iova, dst: &mut [u8]) -> Result<(), DmaError> {
        (**self).dma_read(iova, dst)
    }

    fn dma_write(&self, iova: Iova, src: &[u8]) -> Result<(), DmaError> {
        (**self).dma_write(iova, src)
    }
}
