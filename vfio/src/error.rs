//! Why opening a device, binding it or mapping DMA memory failed, each with the `io::Error` of
//! the failed step and a message that says what to do about it.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::bdf::Bdf;

/// Another device in the same IOMMU group, bound to a driver that is not vfio-pci.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMember {
    /// Its PCI address, as sysfs names it.
    pub bdf: String,
    /// The driver it is bound to.
    pub driver: String,
}

impl fmt::Display for GroupMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.bdf, self.driver)
    }
}

fn members(list: &[GroupMember]) -> String {
    if list.is_empty() {
        return "none found in sysfs".into();
    }
    list.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn driver_name(driver: &Option<String>) -> &str {
    driver.as_deref().unwrap_or("no driver")
}

/// Everything that can go wrong in this crate. The message says what to do; the source, when
/// there is one, is the `io::Error` of the system call that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VfioError {
    /// A vfio-user server could not be reached or answered wrongly.
    #[error("vfio-user server at {}: {what} failed: is the server running (mlx5-vfio-user --socket PATH)?", .path.display())]
    VfioUser {
        /// The socket.
        path: PathBuf,
        /// The step.
        what: &'static str,
        /// What the vfio-user client reported.
        #[source]
        source: vfio_user::Error,
    },

    /// Guest-memory setup for a vfio-user device failed (memfd, size or mmap).
    #[error("cannot create {bytes} bytes of shared DMA memory for the vfio-user device: {source}")]
    VfioUserMemory {
        /// Bytes asked for.
        bytes: usize,
        /// The failed call.
        #[source]
        source: io::Error,
    },

    /// The string is not a PCI address.
    #[error("`{input}` is not a PCI address: write it as sysfs does, e.g. 0000:01:00.0 (see `lspci -D`)")]
    BadBdf {
        /// What was given.
        input: String,
    },

    /// No such PCI device in sysfs.
    #[error(
        "PCI device {bdf} not found in /sys/bus/pci/devices: check the address with `lspci -D`"
    )]
    DeviceNotFound {
        /// The device asked for.
        bdf: Bdf,
        /// The failed sysfs lookup.
        #[source]
        source: io::Error,
    },

    /// The device has no IOMMU group, so VFIO cannot isolate it.
    #[error(
        "PCI device {bdf} has no IOMMU group: enable the IOMMU (kernel command line \
         intel_iommu=on or amd_iommu=on, and VT-d/AMD-Vi in the firmware; under QEMU add \
         -device intel-iommu,caching-mode=on)"
    )]
    NoIommuGroup {
        /// The device.
        bdf: Bdf,
        /// The failed `iommu_group` lookup.
        #[source]
        source: io::Error,
    },

    /// The device is bound to another driver (or none).
    #[error("PCI device {bdf} is bound to {}, not vfio-pci: bind it: bareverbs-vfio-bind bind {bdf}", driver_name(.driver))]
    NotBoundToVfioPci {
        /// The device.
        bdf: Bdf,
        /// The driver it is bound to, if any.
        driver: Option<String>,
    },

    /// The VFIO container node does not exist: the VFIO modules are not loaded.
    #[error("{} is missing: load VFIO with `modprobe vfio-pci`", .path.display())]
    VfioMissing {
        /// The missing node.
        path: PathBuf,
        /// The failed `open`.
        #[source]
        source: io::Error,
    },

    /// The group node does not exist although the device is bound to vfio-pci.
    #[error(
        "{} is missing although the device is bound to vfio-pci: mount devtmpfs on /dev, or \
         check `dmesg` for vfio errors",
        .path.display()
    )]
    GroupNodeMissing {
        /// The missing node.
        path: PathBuf,
        /// The failed `open`.
        #[source]
        source: io::Error,
    },

    /// A node or file could not be opened or written for lack of rights.
    #[error(
        "permission denied on {}: run as root, or give your user the VFIO group node \
         (`chown $USER /dev/vfio/<group>`) and enough locked memory (`ulimit -l`)",
        .path.display()
    )]
    PermissionDenied {
        /// The node or file.
        path: PathBuf,
        /// The failed call.
        #[source]
        source: io::Error,
    },

    /// Another process holds the IOMMU group.
    #[error("IOMMU group {group} is in use by another process (QEMU, DPDK, another bareverbs?): stop it first")]
    GroupBusy {
        /// The group.
        group: u32,
        /// The failed `open`.
        #[source]
        source: io::Error,
    },

    /// The kernel speaks another VFIO API version.
    #[error("the kernel's VFIO API version is {found}, this crate speaks version 0")]
    ApiVersion {
        /// What `VFIO_GET_API_VERSION` returned.
        found: i32,
    },

    /// The container supports neither Type1 IOMMU flavour.
    #[error(
        "the VFIO container offers neither the Type1v2 nor the Type1 IOMMU: load it with \
         `modprobe vfio_iommu_type1` (noiommu mode is not supported)"
    )]
    NoType1Iommu,

    /// Other devices of the group are bound to host drivers.
    #[error(
        "IOMMU group {group} is not viable: every device in it must be bound to vfio-pci or \
         to no driver; bind or unbind these: {}",
        members(.others)
    )]
    GroupNotViable {
        /// The group.
        group: u32,
        /// Its other devices that are bound to a host driver.
        others: Vec<GroupMember>,
    },

    /// VFIO does not present the device as a PCI device with a config region.
    #[error(
        "{bdf} is not presented by VFIO as a PCI device (flags {flags:#x}, {regions} regions)"
    )]
    NotPciDevice {
        /// The device.
        bdf: Bdf,
        /// `vfio_device_info.flags`.
        flags: u32,
        /// `vfio_device_info.num_regions`.
        regions: u32,
    },

    /// BAR0 is missing or an I/O-port BAR.
    #[error("BAR0 of {bdf} is not a memory BAR (register {bar:#010x}, size {size:#x}): is this an mlx5 device?")]
    Bar0NotMemory {
        /// The device.
        bdf: Bdf,
        /// The BAR0 register read from config space.
        bar: u32,
        /// The region size VFIO reports.
        size: u64,
    },

    /// `VFIO_IOMMU_MAP_DMA` refused a chunk of DMA memory.
    #[error(
        "mapping {size:#x} bytes of DMA memory at IOVA {iova:#x} failed: raise the \
         locked-memory limit (`ulimit -l unlimited`, or LimitMEMLOCK= for a service); \
         `dmesg` tells whether the IOMMU refused the address"
    )]
    DmaMapFailed {
        /// The IOVA asked for.
        iova: u64,
        /// The chunk size.
        size: u64,
        /// The failed ioctl.
        #[source]
        source: io::Error,
    },

    /// No memory for a DMA chunk, not even 4 KiB pages.
    #[error(
        "no memory for a {size:#x}-byte DMA chunk: free memory, and reserve 2 MiB hugepages \
         with `echo N > /proc/sys/vm/nr_hugepages`"
    )]
    NoMemory {
        /// The chunk size.
        size: usize,
        /// The failed `mmap`.
        #[source]
        source: io::Error,
    },

    /// The IOMMU's usable IOVA ranges are used up.
    #[error("no IOVA range left for a {size:#x}-byte DMA chunk: free DMA memory")]
    IovaExhausted {
        /// The chunk size.
        size: u64,
    },

    /// The device cannot give the MSI-X vectors asked for.
    #[error("{requested} MSI-X vectors asked for, the device offers {available} with eventfd signalling")]
    MsixUnavailable {
        /// Vectors asked for.
        requested: u32,
        /// Vectors VFIO reports.
        available: u32,
    },

    /// Binding to vfio-pci did not take.
    #[error(
        "{bdf} did not bind to vfio-pci (now bound to {}): check `dmesg`; the IOMMU must be \
         on and `modprobe vfio-pci` loaded",
        driver_name(.driver)
    )]
    BindFailed {
        /// The device.
        bdf: Bdf,
        /// The driver it ended up with.
        driver: Option<String>,
    },

    /// A sysfs file could not be read or written.
    #[error("sysfs {}: unexpected failure", .path.display())]
    Sysfs {
        /// The file.
        path: PathBuf,
        /// The failed call.
        #[source]
        source: io::Error,
    },

    /// Another VFIO step failed.
    #[error("VFIO step {step} failed: `dmesg` usually says why")]
    Step {
        /// The ioctl or system call, e.g. `VFIO_GROUP_SET_CONTAINER`.
        step: &'static str,
        /// Its error.
        #[source]
        source: io::Error,
    },
}

impl VfioError {
    /// A closure for `map_err` that wraps an `io::Error` as a failed `step`.
    pub(crate) fn step(step: &'static str) -> impl FnOnce(io::Error) -> VfioError {
        move |source| VfioError::Step { step, source }
    }

    /// Wraps a failed sysfs access, singling out missing rights.
    pub(crate) fn sysfs(path: impl Into<PathBuf>, source: io::Error) -> VfioError {
        let path = path.into();
        if source.kind() == io::ErrorKind::PermissionDenied {
            VfioError::PermissionDenied { path, source }
        } else {
            VfioError::Sysfs { path, source }
        }
    }
}

/// `e` and every error below it, joined with ": ", for log lines.
pub(crate) fn with_sources(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}
