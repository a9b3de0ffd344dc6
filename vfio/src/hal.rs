//! `VfioHal`: one PCI function opened through the legacy VFIO container/group API, as
//! Documentation/driver-api/vfio.rst lays the sequence out, implementing the driver's `Hal`.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bareverbs_hal::{DmaBuf, DmaError, Hal, Instant};
use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_TYPE1v2_IOMMU, VFIO_API_VERSION, VFIO_DEVICE_FLAGS_PCI,
    VFIO_GROUP_FLAGS_VIABLE, VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_TYPE1_IOMMU,
};

use crate::arena::{Arena, DmaStats, Iommu, VfioDma};
use crate::bdf::Bdf;
use crate::error::VfioError;
use crate::iommu::{self, IovaSpace};
use crate::mmio::{Bar0Access, VfioMmio};
use crate::msix::{self, IrqEventFd};
use crate::{clock, sys, sysfs};

/// The VFIO container node.
const CONTAINER: &str = "/dev/vfio/vfio";

/// PCI config space: the command register and the bits this crate sets in it.
const PCI_COMMAND: u64 = 0x04;
const PCI_COMMAND_MEMORY: u16 = 1 << 1;
const PCI_COMMAND_MASTER: u16 = 1 << 2;
/// PCI config space: BAR0, whose bit 0 is set for an I/O-port BAR.
const PCI_BASE_ADDRESS_0: u64 = 0x10;

/// Choices for [`VfioHal::open_with`].
#[derive(Clone, Debug)]
pub struct VfioOptions {
    bar0: Bar0Access,
    hugepages: bool,
}

impl Default for VfioOptions {
    fn default() -> Self {
        VfioOptions {
            bar0: Bar0Access::Auto,
            hugepages: true,
        }
    }
}

impl VfioOptions {
    /// The defaults: BAR0 mmapped when possible, DMA memory from hugepages when reserved.
    pub fn new() -> Self {
        Self::default()
    }

    /// How BAR0 is reached (default [`Bar0Access::Auto`]).
    pub fn bar0_access(mut self, access: Bar0Access) -> Self {
        self.bar0 = access;
        self
    }

    /// Whether DMA memory is tried from 2 MiB hugepages first (default true). Off, it comes
    /// from 4 KiB pages without a warning.
    pub fn hugepages(mut self, on: bool) -> Self {
        self.hugepages = on;
        self
    }
}

/// A PCI function driven from user space through VFIO: BAR0, DMA memory mapped in the
/// function's IOMMU, the monotonic clock, and MSI-X eventfds.
///
/// Dropping it closes the device (vfio-pci then resets it and turns bus mastering off), then
/// unmaps DMA memory once no [`VfioDma`] is left.
pub struct VfioHal {
    // Drop order matters: BAR0 and the device fd go first, so the device is quiesced before
    // the arena (the last holder of the container) unmaps DMA memory.
    bar0: VfioMmio,
    device: Arc<File>,
    arena: Arc<Arena>,
    bdf: Bdf,
    group: u32,
    config: vfio_region_info,
    pci_id: (u16, u16),
    msix_enabled: AtomicU32,
}

/// Opens a `/dev/vfio` node, naming the usual failures.
fn open_node(path: &str, group: Option<u32>) -> Result<File, VfioError> {
    sys::open_rw(Path::new(path)).map_err(|source| {
        let path = path.into();
        match (source.kind(), source.raw_os_error(), group) {
            (io::ErrorKind::NotFound, _, None) => VfioError::VfioMissing { path, source },
            (io::ErrorKind::NotFound, _, Some(_)) => VfioError::GroupNodeMissing { path, source },
            (io::ErrorKind::PermissionDenied, _, _) => VfioError::PermissionDenied { path, source },
            (_, Some(libc::EBUSY), Some(group)) => VfioError::GroupBusy { group, source },
            _ => VfioError::Step {
                step: "open",
                source,
            },
        }
    })
}

fn read_config_at(
    device: &File,
    config: &vfio_region_info,
    offset: u64,
    buf: &mut [u8],
) -> io::Result<()> {
    check_config(config, offset, buf.len())?;
    sys::pread(device, buf, config.offset + offset)
}

fn write_config_at(
    device: &File,
    config: &vfio_region_info,
    offset: u64,
    buf: &[u8],
) -> io::Result<()> {
    check_config(config, offset, buf.len())?;
    sys::pwrite(device, buf, config.offset + offset)
}

fn check_config(config: &vfio_region_info, offset: u64, len: usize) -> io::Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= config.size => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "config access of {len} bytes at {offset:#x} is outside the {:#x}-byte config space",
                config.size
            ),
        )),
    }
}

impl VfioHal {
    /// Opens the PCI function `bdf` ("0000:01:00.0") with the default [`VfioOptions`].
    ///
    /// # Errors
    /// See [`VfioHal::open_with`].
    pub fn open(bdf: &str) -> Result<Self, VfioError> {
        Self::open_with(bdf, &VfioOptions::default())
    }

    /// Opens the PCI function `bdf`: checks sysfs (device, IOMMU group, vfio-pci), sets up the
    /// container and group, gets the device, maps BAR0, turns on memory decoding and bus
    /// mastering, and maps a first chunk of DMA memory.
    ///
    /// # Errors
    /// A [`VfioError`] naming the failed step and what to do: the device is missing, has no
    /// IOMMU group, is not bound to vfio-pci, VFIO is not loaded, access is denied, the group
    /// is busy or not viable, BAR0 is not a memory BAR, DMA memory cannot be mapped…
    pub fn open_with(bdf: &str, options: &VfioOptions) -> Result<Self, VfioError> {
        let bdf: Bdf = bdf.parse()?;
        sysfs::check_exists(bdf)?;
        let group =
            sysfs::iommu_group(bdf).map_err(|source| VfioError::NoIommuGroup { bdf, source })?;
        match sysfs::driver(bdf)? {
            Some(d) if sysfs::is_vfio_pci(&d) => {}
            driver => return Err(VfioError::NotBoundToVfioPci { bdf, driver }),
        }

        let container = open_node(CONTAINER, None)?;
        let version =
            sys::get_api_version(&container).map_err(VfioError::step("VFIO_GET_API_VERSION"))?;
        if version != VFIO_API_VERSION as i32 {
            return Err(VfioError::ApiVersion { found: version });
        }
        let check = |ext| {
            sys::check_extension(&container, ext).map_err(VfioError::step("VFIO_CHECK_EXTENSION"))
        };
        let iommu_type = if check(VFIO_TYPE1v2_IOMMU)? {
            VFIO_TYPE1v2_IOMMU
        } else if check(VFIO_TYPE1_IOMMU)? {
            VFIO_TYPE1_IOMMU
        } else {
            return Err(VfioError::NoType1Iommu);
        };

        let group_file = open_node(&format!("/dev/vfio/{group}"), Some(group))?;
        let status =
            sys::group_get_status(&group_file).map_err(VfioError::step("VFIO_GROUP_GET_STATUS"))?;
        if status & VFIO_GROUP_FLAGS_VIABLE == 0 {
            return Err(VfioError::GroupNotViable {
                group,
                others: sysfs::group_blockers(group, bdf),
            });
        }
        sys::group_set_container(&group_file, &container)
            .map_err(VfioError::step("VFIO_GROUP_SET_CONTAINER"))?;
        sys::set_iommu(&container, iommu_type).map_err(VfioError::step("VFIO_SET_IOMMU"))?;
        let info = iommu::query(&container).map_err(VfioError::step("VFIO_IOMMU_GET_INFO"))?;
        log::debug!(
            "{bdf}: IOMMU type {iommu_type}, page sizes {:#x}, IOVA ranges {:x?}, {:?} DMA mappings available",
            info.pgsizes,
            info.iova_ranges,
            info.dma_avail
        );

        let name = CString::new(bdf.to_string()).map_err(|_| VfioError::BadBdf {
            input: bdf.to_string(),
        })?;
        let device = Arc::new(
            sys::group_get_device_fd(&group_file, &name)
                .map_err(VfioError::step("VFIO_GROUP_GET_DEVICE_FD"))?,
        );
        let dev_info =
            sys::device_get_info(&device).map_err(VfioError::step("VFIO_DEVICE_GET_INFO"))?;
        if dev_info.flags & VFIO_DEVICE_FLAGS_PCI == 0
            || dev_info.num_regions <= VFIO_PCI_CONFIG_REGION_INDEX
        {
            return Err(VfioError::NotPciDevice {
                bdf,
                flags: dev_info.flags,
                regions: dev_info.num_regions,
            });
        }
        let region = |index| {
            sys::device_get_region_info(&device, index)
                .map_err(VfioError::step("VFIO_DEVICE_GET_REGION_INFO"))
        };
        let bar = region(VFIO_PCI_BAR0_REGION_INDEX)?;
        let config = region(VFIO_PCI_CONFIG_REGION_INDEX)?;

        let mut id = [0u8; 4];
        read_config_at(&device, &config, 0, &mut id)
            .map_err(VfioError::step("config space read"))?;
        let pci_id = (
            u16::from_le_bytes([id[0], id[1]]),
            u16::from_le_bytes([id[2], id[3]]),
        );
        let mut reg = [0u8; 4];
        read_config_at(&device, &config, PCI_BASE_ADDRESS_0, &mut reg)
            .map_err(VfioError::step("config space read"))?;
        let bar_reg = u32::from_le_bytes(reg);
        if bar.size == 0 || bar_reg & 1 != 0 {
            return Err(VfioError::Bar0NotMemory {
                bdf,
                bar: bar_reg,
                size: bar.size,
            });
        }
        let bar0 = VfioMmio::new(Arc::clone(&device), &bar, options.bar0)?;
        enable_device(&device, &config)?;
        log::debug!(
            "{bdf}: {:04x}:{:04x}, BAR0 {:#x} bytes {}",
            pci_id.0,
            pci_id.1,
            bar.size,
            if bar0.is_mapped() {
                "mapped"
            } else {
                "via pread/pwrite"
            }
        );

        let arena = Arena::new(
            Iommu {
                container,
                _group: group_file,
            },
            IovaSpace::new(info.iova_ranges.as_deref()),
            options.hugepages,
        );
        arena.grow()?;

        Ok(VfioHal {
            bar0,
            device,
            arena,
            bdf,
            group,
            config,
            pci_id,
            msix_enabled: AtomicU32::new(0),
        })
    }

    /// The PCI address.
    pub fn bdf(&self) -> Bdf {
        self.bdf
    }

    /// The IOMMU group number (`/dev/vfio/<group>`).
    pub fn iommu_group(&self) -> u32 {
        self.group
    }

    /// Vendor and device ID from config space (0x15b3, 0x1017 for a ConnectX-5).
    pub fn pci_id(&self) -> (u16, u16) {
        self.pci_id
    }

    /// Reads `buf.len()` bytes of PCI config space at `offset` (little-endian, as PCI is).
    ///
    /// # Errors
    /// When the range is outside config space or the `pread` fails.
    pub fn read_config(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        read_config_at(&self.device, &self.config, offset, buf)
    }

    /// Writes `buf` to PCI config space at `offset`. vfio-pci virtualizes parts of it (BARs,
    /// MSI/MSI-X capabilities) and drops writes it does not allow.
    ///
    /// # Errors
    /// When the range is outside config space or the `pwrite` fails.
    pub fn write_config(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        write_config_at(&self.device, &self.config, offset, buf)
    }

    /// What the DMA arena holds.
    pub fn dma_stats(&self) -> DmaStats {
        self.arena.stats()
    }

    /// The number of MSI-X vectors the device offers (0 when it has no MSI-X).
    ///
    /// # Errors
    /// [`VfioError::Step`] when `VFIO_DEVICE_GET_IRQ_INFO` fails.
    pub fn msix_vectors(&self) -> Result<u32, VfioError> {
        msix::vectors(&self.device)
    }

    /// Enables MSI-X vectors `0..n`, each signalling the eventfd at the same index of the
    /// result. MSI-X that is already on is turned off first (VFIO cannot always resize it).
    ///
    /// # Errors
    /// [`VfioError::MsixUnavailable`] when `n` is 0 or more than the device offers;
    /// [`VfioError::Step`] when an eventfd or `VFIO_DEVICE_SET_IRQS` fails.
    pub fn enable_msix(&self, n: u32) -> Result<Vec<IrqEventFd>, VfioError> {
        if self.msix_enabled.load(Ordering::Acquire) != 0 {
            self.disable_msix()?;
        }
        let fds = msix::enable(&self.device, n)?;
        self.msix_enabled.store(n, Ordering::Release);
        Ok(fds)
    }

    /// Disables MSI-X; the eventfds stop being signalled.
    ///
    /// # Errors
    /// [`VfioError::Step`] when `VFIO_DEVICE_SET_IRQS` fails.
    pub fn disable_msix(&self) -> Result<(), VfioError> {
        msix::disable(&self.device)?;
        self.msix_enabled.store(0, Ordering::Release);
        Ok(())
    }
}

/// Sets memory decoding and bus mastering in the command register (read-modify-write).
fn enable_device(device: &File, config: &vfio_region_info) -> Result<(), VfioError> {
    let mut b = [0u8; 2];
    read_config_at(device, config, PCI_COMMAND, &mut b)
        .map_err(VfioError::step("config space read"))?;
    let cmd = u16::from_le_bytes(b);
    let want = cmd | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER;
    if want != cmd {
        write_config_at(device, config, PCI_COMMAND, &want.to_le_bytes())
            .map_err(VfioError::step("config space write"))?;
    }
    Ok(())
}

// SAFETY: bar0 is the device's BAR0, mapped (or reached through the device fd) for the life
// of self and unmapped only in Drop; dma_alloc returns VfioDma, whose DmaMemory contract is
// argued in arena.rs, aligned to `align` (<= 2 MiB) at both its CPU address and its IOVA
// because chunks are 2 MiB aligned on both sides and an allocation sits at the same offset in
// each, and zeroed in Arena::alloc; now() reads CLOCK_MONOTONIC, which never goes backwards.
unsafe impl Hal for VfioHal {
    type Mmio = VfioMmio;
    type Dma = VfioDma;

    fn bar0(&self) -> &VfioMmio {
        &self.bar0
    }

    /// `align` may be any power of two up to 2 MiB; `len` any size (more than 2 MiB gets a
    /// chunk of its own).
    fn dma_alloc(&self, len: usize, align: usize) -> Result<DmaBuf<VfioDma>, DmaError> {
        self.arena.alloc(len, align).map(DmaBuf::new)
    }

    fn dma_domain(&self) -> bareverbs_hal::DmaDomain {
        self.arena.domain()
    }

    fn now(&self) -> Instant {
        clock::now()
    }

    fn delay(&self, d: Duration) {
        clock::delay(d)
    }

    /// DMA memory is the arena's: reached by device address through its chunks.
    fn dma_by_iova(&self) -> bool {
        true
    }

    fn dma_read(&self, iova: bareverbs_hal::Iova, dst: &mut [u8]) -> Result<(), DmaError> {
        // SAFETY: the range lies in a mapped chunk (checked by `with_iova`), DMA memory that
        // is only accessed atomically while shared.
        self.arena.with_iova(iova.0, dst.len(), |p| unsafe {
            crate::dma_copy::read(p, dst)
        })
    }

    fn dma_write(&self, iova: bareverbs_hal::Iova, src: &[u8]) -> Result<(), DmaError> {
        // SAFETY: as in `dma_read`.
        self.arena.with_iova(iova.0, src.len(), |p| unsafe {
            crate::dma_copy::write(p, src)
        })
    }

    /// `VFIO_DEVICE_RESET`.
    fn function_reset(&self) -> Result<(), bareverbs_hal::ResetError> {
        sys::device_reset(&self.device)
            .map_err(|e| bareverbs_hal::ResetError::Failed(e.raw_os_error().unwrap_or(0)))
    }
}

impl std::fmt::Debug for VfioHal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioHal")
            .field("bdf", &self.bdf)
            .field("group", &self.group)
            .field("bar0", &self.bar0)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fake::{self, BDF, CFG_OFFSET};
    use bareverbs_hal::{BarOffset, Mmio};
    use std::os::fd::AsRawFd;

    fn open() -> Result<VfioHal, VfioError> {
        VfioHal::open(BDF)
    }

    /// The calls that reach VFIO (not sysfs lookups).
    fn vfio_calls() -> Vec<String> {
        fake::calls()
            .into_iter()
            .filter(|c| {
                !["readlink", "read ", "readdir", "exists"]
                    .iter()
                    .any(|p| c.starts_with(p))
            })
            .collect()
    }

    #[test]
    fn a_function_reset_is_vfio_device_reset_on_the_device_fd() {
        fake::reset();
        let hal = open().unwrap();
        bareverbs_hal::Hal::function_reset(&hal).unwrap();
        assert!(
            vfio_calls()
                .last()
                .unwrap()
                .starts_with("VFIO_DEVICE_RESET "),
            "{:?}",
            vfio_calls().last()
        );
    }

    #[test]
    fn open_follows_the_kernel_documented_sequence() {
        fake::reset();
        let hal = open().unwrap();
        assert_eq!(
            fake::calls()[..3],
            [
                "readlink /sys/bus/pci/devices/0000:01:00.0",
                "readlink /sys/bus/pci/devices/0000:01:00.0/iommu_group",
                "readlink /sys/bus/pci/devices/0000:01:00.0/driver",
            ]
        );
        assert_eq!(
            vfio_calls(),
            [
                "open /dev/vfio/vfio",
                "VFIO_GET_API_VERSION container",
                "VFIO_CHECK_EXTENSION container 3",
                "open /dev/vfio/3",
                "VFIO_GROUP_GET_STATUS group",
                "VFIO_GROUP_SET_CONTAINER group container",
                "VFIO_SET_IOMMU container 3",
                "VFIO_IOMMU_GET_INFO container argsz=24",
                "VFIO_IOMMU_GET_INFO container argsz=88",
                "VFIO_GROUP_GET_DEVICE_FD group 0000:01:00.0",
                "VFIO_DEVICE_GET_INFO device",
                "VFIO_DEVICE_GET_REGION_INFO device 0",
                "VFIO_DEVICE_GET_REGION_INFO device 7",
                "pread device 0x70000000000 4",
                "pread device 0x70000000010 4",
                "mmap device 0x0 0x2000000",
                "pread device 0x70000000004 2",
                "pwrite device 0x70000000004 [06, 04]",
                "mmap anon 0x200000 huge",
                "VFIO_IOMMU_MAP_DMA container iova=0x40000000 size=0x200000",
            ]
        );
        assert_eq!(hal.pci_id(), (0x15b3, 0x1017));
        assert_eq!(hal.iommu_group(), 3);
        assert_eq!(hal.bdf().to_string(), BDF);
        assert!(hal.bar0().is_mapped());
        // Memory decoding and bus mastering on, INTx-disable (bit 10) kept.
        assert_eq!(fake::with(|f| f.peek(CFG_OFFSET + 4, 2)), [0x06, 0x04]);
    }

    #[test]
    fn the_hal_serves_bar0_dma_and_time() {
        fake::reset();
        let hal =
            VfioHal::open_with(BDF, &VfioOptions::new().bar0_access(Bar0Access::Pread)).unwrap();
        fake::with(|f| f.poke(0x1fc, &[0x80, 0, 0, 0]));
        assert_eq!(hal.bar0().read32(BarOffset(0x1fc)), 0x8000_0000);
        // The chunk mapped at open serves the driver's shapes without another map.
        let page = hal.dma_alloc(4096, 4096).unwrap().share();
        let mailbox = hal.dma_alloc(16384, 4096).unwrap().share();
        assert_eq!(page.iova().0, 0x4000_0000);
        assert_eq!(mailbox.iova().0, 0x4000_1000);
        let maps = fake::calls()
            .iter()
            .filter(|c| c.starts_with("VFIO_IOMMU_MAP_DMA"))
            .count();
        assert_eq!(maps, 1);
        assert_eq!(hal.dma_stats().free_bytes, (2 << 20) - 4096 - 16384);
        let t = hal.now();
        hal.delay(Duration::from_millis(1));
        assert!(hal.now().since(t) >= Duration::from_millis(1));
        // DMA memory outlives the HAL, and is unmapped when the last handle goes.
        drop(hal);
        assert_eq!(fake::with(|f| f.dma_maps.len()), 1);
        drop(page);
        drop(mailbox);
        assert!(fake::with(|f| f.dma_maps.is_empty()));
    }

    #[test]
    fn handles_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<VfioHal>();
        send_sync::<VfioDma>();
        send_sync::<IrqEventFd>();
    }

    #[test]
    fn type1_is_used_when_type1v2_is_missing() {
        fake::reset();
        fake::with(|f| f.extensions = vec![VFIO_TYPE1_IOMMU]);
        open().unwrap();
        let calls = vfio_calls();
        assert!(calls.contains(&"VFIO_CHECK_EXTENSION container 1".to_owned()));
        assert!(calls.contains(&"VFIO_SET_IOMMU container 1".to_owned()));
    }

    #[test]
    fn sysfs_problems_are_named() {
        fake::reset();
        assert!(matches!(
            VfioHal::open("0000:02:00.0"),
            Err(VfioError::DeviceNotFound { .. })
        ));
        assert!(matches!(
            VfioHal::open("nonsense"),
            Err(VfioError::BadBdf { .. })
        ));

        fake::reset();
        fake::with(|f| {
            f.links
                .remove(Path::new("/sys/bus/pci/devices/0000:01:00.0/iommu_group"));
        });
        let e = open().unwrap_err();
        assert!(matches!(e, VfioError::NoIommuGroup { .. }), "{e:?}");
        assert!(e.to_string().contains("intel_iommu=on"), "{e}");

        fake::reset();
        fake::with(|f| f.set_driver(BDF, Some("mlx5_core")));
        let e = open().unwrap_err();
        match &e {
            VfioError::NotBoundToVfioPci { driver, .. } => {
                assert_eq!(driver.as_deref(), Some("mlx5_core"))
            }
            other => panic!("{other:?}"),
        }
        assert!(
            e.to_string()
                .contains("bareverbs-vfio-bind bind 0000:01:00.0"),
            "{e}"
        );
        // Nothing was opened.
        assert!(vfio_calls().is_empty());

        fake::reset();
        fake::with(|f| f.set_driver(BDF, Some("mlx5_vfio_pci")));
        open().unwrap();
    }

    #[test]
    fn vfio_node_problems_are_named() {
        type Check = fn(&VfioError) -> bool;
        let cases: [(&str, i32, Check); 5] = [
            ("open /dev/vfio/vfio", libc::ENOENT, |e| {
                matches!(e, VfioError::VfioMissing { .. })
                    && e.to_string().contains("modprobe vfio-pci")
            }),
            ("open /dev/vfio/vfio", libc::EACCES, |e| {
                matches!(e, VfioError::PermissionDenied { .. })
            }),
            ("open /dev/vfio/3", libc::EPERM, |e| {
                matches!(e, VfioError::PermissionDenied { .. })
            }),
            ("open /dev/vfio/3", libc::EBUSY, |e| {
                matches!(e, VfioError::GroupBusy { group: 3, .. })
            }),
            ("open /dev/vfio/3", libc::ENOENT, |e| {
                matches!(e, VfioError::GroupNodeMissing { .. })
            }),
        ];
        for (op, errno, ok) in cases {
            fake::reset();
            fake::fail(op, errno);
            let e = open().unwrap_err();
            assert!(ok(&e), "{op} errno {errno}: {e:?}");
            // The io::Error of the step is kept as the source.
            let source = std::error::Error::source(&e).unwrap();
            let io = source.downcast_ref::<io::Error>().unwrap();
            assert_eq!(io.raw_os_error(), Some(errno));
        }
    }

    #[test]
    fn container_and_group_refusals_are_named() {
        fake::reset();
        fake::with(|f| f.api_version = 1);
        assert!(matches!(open(), Err(VfioError::ApiVersion { found: 1 })));

        fake::reset();
        fake::with(|f| f.extensions.clear());
        assert!(matches!(open(), Err(VfioError::NoType1Iommu)));

        fake::reset();
        fake::with(|f| {
            f.group_flags = 0;
            f.add_device("0000:01:00.1", Some(3), Some("mlx5_core"));
            f.add_device("0000:00:01.0", Some(3), None);
        });
        let e = open().unwrap_err();
        match &e {
            VfioError::GroupNotViable { group: 3, others } => {
                assert_eq!(others.len(), 1);
                assert_eq!(others[0].to_string(), "0000:01:00.1 (mlx5_core)");
            }
            other => panic!("{other:?}"),
        }
        assert!(e.to_string().contains("0000:01:00.1 (mlx5_core)"), "{e}");

        fake::reset();
        fake::fail("VFIO_GROUP_SET_CONTAINER", libc::EBUSY);
        assert!(matches!(
            open(),
            Err(VfioError::Step {
                step: "VFIO_GROUP_SET_CONTAINER",
                ..
            })
        ));

        fake::reset();
        fake::fail("VFIO_GROUP_GET_DEVICE_FD", libc::EBUSY);
        assert!(matches!(
            open(),
            Err(VfioError::Step {
                step: "VFIO_GROUP_GET_DEVICE_FD",
                ..
            })
        ));
    }

    #[test]
    fn device_problems_are_named() {
        fake::reset();
        fake::with(|f| f.poke(CFG_OFFSET + 0x10, &0x0000_e001u32.to_le_bytes()));
        assert!(matches!(
            open(),
            Err(VfioError::Bar0NotMemory { bar: 0xe001, .. })
        ));

        fake::reset();
        fake::with(|f| f.device_info.flags = 0);
        assert!(matches!(open(), Err(VfioError::NotPciDevice { .. })));

        fake::reset();
        fake::fail("VFIO_IOMMU_MAP_DMA", libc::ENOMEM);
        let e = open().unwrap_err();
        assert!(
            matches!(
                e,
                VfioError::DmaMapFailed {
                    iova: 0x4000_0000,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("ulimit -l"), "{e}");

        fake::reset();
        fake::with(|f| f.hugepages = 0);
        fake::fail("mmap anon", libc::ENOMEM);
        let e = open().unwrap_err();
        assert!(matches!(e, VfioError::NoMemory { .. }), "{e:?}");
        assert!(e.to_string().contains("nr_hugepages"), "{e}");
    }

    #[test]
    fn msix_vectors_signal_eventfds() {
        fake::reset();
        let hal = open().unwrap();
        assert_eq!(hal.msix_vectors().unwrap(), 64);
        let fds = hal.enable_msix(3).unwrap();
        let set = fake::with(|f| f.irq_sets.last().cloned().unwrap());
        assert_eq!(set.index, 2);
        assert_eq!(set.flags, 0x24); // DATA_EVENTFD | ACTION_TRIGGER
        assert_eq!((set.start, set.count), (0, 3));
        let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        assert_eq!(set.fds, raw);
        // The kernel signals an eventfd by adding to its counter.
        assert_eq!(fds[1].try_read().unwrap(), None);
        // SAFETY: writes 8 bytes from a live local to an eventfd this test owns.
        let n = unsafe { libc::write(fds[1].as_raw_fd(), (&2u64 as *const u64).cast(), 8) };
        assert_eq!(n, 8);
        assert_eq!(fds[1].try_read().unwrap(), Some(2));
        // Enabling again turns MSI-X off first.
        let _more = hal.enable_msix(4).unwrap();
        let sets = fake::with(|f| f.irq_sets.clone());
        assert_eq!(sets.len(), 3);
        assert_eq!((sets[1].flags, sets[1].count), (0x21, 0)); // DATA_NONE | ACTION_TRIGGER
        assert_eq!(sets[2].count, 4);
        assert!(matches!(
            hal.enable_msix(65),
            Err(VfioError::MsixUnavailable {
                requested: 65,
                available: 64
            })
        ));
        hal.disable_msix().unwrap();
    }

    #[test]
    fn config_space_accessors_are_bounded() {
        fake::reset();
        let hal = open().unwrap();
        let mut id = [0u8; 2];
        hal.read_config(0, &mut id).unwrap();
        assert_eq!(id, [0xb3, 0x15]);
        let e = hal.read_config(4095, &mut id).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        hal.write_config(0x3c, &[0x0b]).unwrap();
        assert_eq!(fake::with(|f| f.peek(CFG_OFFSET + 0x3c, 1)), [0x0b]);
    }

    #[test]
    fn a_device_already_enabled_gets_no_command_write() {
        fake::reset();
        fake::with(|f| f.poke(CFG_OFFSET + 4, &[0x06, 0x00]));
        let _hal = open().unwrap();
        assert!(!fake::calls().iter().any(|c| c.starts_with("pwrite")));
    }
}
