//! The only place that talks to the kernel: VFIO ioctls, `mmap`, `pread`/`pwrite`, eventfds,
//! the monotonic clock and sysfs (include/uapi/linux/vfio.h; rust-vmm `vfio-ioctls` pattern).
//!
//! Real under `cfg(not(test))`; under `cfg(test)` the same functions come from `fake`, which
//! records every call and answers from canned state, so the logic above is tested without
//! `/dev/vfio`. Both halves have the same signatures; the rest of the crate cannot tell them
//! apart.

use vfio_bindings::bindings::vfio::{VFIO_BASE, VFIO_TYPE};

/// `_IOC_NONE` in place: the direction field is 3 bits at bit 29 on powerpc, mips and sparc
/// (where "none" is 1), and 2 bits worth 0 elsewhere (include/uapi/asm-generic/ioctl.h).
const IOC_NONE: u32 = if cfg!(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
)) {
    1 << 29
} else {
    0
};

/// `_IO(VFIO_TYPE, VFIO_BASE + nr)`: every VFIO ioctl carries its argument size in `argsz`
/// rather than in the request number.
const fn vfio_io(nr: u32) -> u32 {
    IOC_NONE | ((VFIO_TYPE as u32) << 8) | (VFIO_BASE + nr)
}

/// Container: API version, must equal `VFIO_API_VERSION`.
pub(crate) const VFIO_GET_API_VERSION: u32 = vfio_io(0);
/// Container: is an IOMMU driver type supported (> 0)?
pub(crate) const VFIO_CHECK_EXTENSION: u32 = vfio_io(1);
/// Container: select the IOMMU driver (after a group is attached).
pub(crate) const VFIO_SET_IOMMU: u32 = vfio_io(2);
/// Group: `vfio_group_status`.
pub(crate) const VFIO_GROUP_GET_STATUS: u32 = vfio_io(3);
/// Group: attach to a container (argument: pointer to the container fd).
pub(crate) const VFIO_GROUP_SET_CONTAINER: u32 = vfio_io(4);
/// Group: a device fd by name (argument: NUL-terminated device name).
pub(crate) const VFIO_GROUP_GET_DEVICE_FD: u32 = vfio_io(6);
/// Device: `vfio_device_info`.
pub(crate) const VFIO_DEVICE_GET_INFO: u32 = vfio_io(7);
/// Device: `vfio_region_info` for one region index.
pub(crate) const VFIO_DEVICE_GET_REGION_INFO: u32 = vfio_io(8);
/// Device: `vfio_irq_info` for one interrupt index.
pub(crate) const VFIO_DEVICE_GET_IRQ_INFO: u32 = vfio_io(9);
/// Device: `vfio_irq_set` (with trailing data).
pub(crate) const VFIO_DEVICE_SET_IRQS: u32 = vfio_io(10);
/// Device: reset the function (no argument).
#[cfg_attr(test, allow(dead_code))]
pub(crate) const VFIO_DEVICE_RESET: u32 = vfio_io(11);
/// Type1 container: `vfio_iommu_type1_info` (+ capability chain).
pub(crate) const VFIO_IOMMU_GET_INFO: u32 = vfio_io(12);
/// Type1 container: `vfio_iommu_type1_dma_map`.
pub(crate) const VFIO_IOMMU_MAP_DMA: u32 = vfio_io(13);
/// Type1 container: `vfio_iommu_type1_dma_unmap`.
pub(crate) const VFIO_IOMMU_UNMAP_DMA: u32 = vfio_io(14);

#[cfg(not(test))]
mod real;
#[cfg(not(test))]
pub(crate) use real::*;

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
pub(crate) use fake::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn ioctl_numbers_match_linux() {
        // _IO(';', 100 + n), as the RIG's guest program used them.
        assert_eq!(VFIO_GET_API_VERSION, 0x3b64);
        assert_eq!(VFIO_CHECK_EXTENSION, 0x3b65);
        assert_eq!(VFIO_SET_IOMMU, 0x3b66);
        assert_eq!(VFIO_GROUP_GET_STATUS, 0x3b67);
        assert_eq!(VFIO_GROUP_SET_CONTAINER, 0x3b68);
        assert_eq!(VFIO_GROUP_GET_DEVICE_FD, 0x3b6a);
        assert_eq!(VFIO_DEVICE_GET_INFO, 0x3b6b);
        assert_eq!(VFIO_DEVICE_GET_REGION_INFO, 0x3b6c);
        assert_eq!(VFIO_DEVICE_GET_IRQ_INFO, 0x3b6d);
        assert_eq!(VFIO_DEVICE_SET_IRQS, 0x3b6e);
        assert_eq!(VFIO_IOMMU_GET_INFO, 0x3b70);
        assert_eq!(VFIO_IOMMU_MAP_DMA, 0x3b71);
        assert_eq!(VFIO_IOMMU_UNMAP_DMA, 0x3b72);
    }
}
