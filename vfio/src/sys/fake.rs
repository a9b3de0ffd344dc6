//! The kernel as the tests see it: every `sys` call is recorded in order (one line each),
//! answered from canned VFIO state that a test can change, and can be made to fail with an
//! errno. Per thread, so tests run in parallel.
//!
//! File descriptors are real (`/dev/null`, or a real eventfd) so that `File` owns and closes
//! them; anonymous memory is real `mmap` memory so the arena's pointers can be written; the
//! device's regions are a byte map behind `pread`/`pwrite`, and a "BAR mapping" is plain
//! anonymous memory. Hugepages come from a counted pool.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::CStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use vfio_bindings::bindings::vfio::{
    vfio_device_info, vfio_irq_info, vfio_region_info, VFIO_TYPE1v2_IOMMU, VFIO_DEVICE_FLAGS_PCI,
    VFIO_DEVICE_FLAGS_RESET, VFIO_GROUP_FLAGS_CONTAINER_SET, VFIO_GROUP_FLAGS_VIABLE,
    VFIO_IOMMU_INFO_CAPS, VFIO_IOMMU_INFO_PGSIZES, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE,
    VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_NORESIZE,
    VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
    VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_MMAP,
    VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE, VFIO_TYPE1_IOMMU,
};

/// The device every fake starts with.
pub(crate) const BDF: &str = "0000:01:00.0";
/// Its IOMMU group.
pub(crate) const GROUP: u32 = 3;
/// Offset of the config region in the device fd (index 7 << 40, as vfio-pci does).
pub(crate) const CFG_OFFSET: u64 = 7 << 40;
/// BAR0 size, as the RIG's stub presents it.
pub(crate) const BAR0_SIZE: u64 = 32 << 20;
/// A hugepage.
pub(crate) const HUGE: usize = 2 << 20;

/// One `VFIO_DEVICE_SET_IRQS` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IrqSet {
    pub(crate) index: u32,
    pub(crate) flags: u32,
    pub(crate) start: u32,
    pub(crate) count: u32,
    pub(crate) fds: Vec<RawFd>,
}

/// The canned kernel.
pub(crate) struct Fake {
    /// Every call so far, one line each, e.g. `VFIO_SET_IOMMU container 3`.
    pub(crate) calls: Vec<String>,
    /// Operation name (the first word of its call line, or `open <path>`, `write <path>`,
    /// `mmap anon huge`) → errno to fail it with.
    pub(crate) fail: HashMap<String, i32>,
    pub(crate) api_version: i32,
    pub(crate) extensions: Vec<u32>,
    pub(crate) group_flags: u32,
    pub(crate) device_info: vfio_device_info,
    pub(crate) regions: HashMap<u32, vfio_region_info>,
    pub(crate) msix: vfio_irq_info,
    pub(crate) pgsizes: u64,
    pub(crate) iova_ranges: Option<Vec<(u64, u64)>>,
    pub(crate) dma_avail: Option<u32>,
    /// Bytes of the device fd by absolute offset (regions are at index << 40); absent = 0.
    pub(crate) mem: BTreeMap<u64, u8>,
    /// Live IOMMU mappings: IOVA → (vaddr, size).
    pub(crate) dma_maps: BTreeMap<u64, (u64, u64)>,
    /// Free 2 MiB hugepages.
    pub(crate) hugepages: usize,
    huge_maps: HashMap<usize, usize>,
    names: HashMap<RawFd, String>,
    attached: bool,
    iommu_set: bool,
    pub(crate) irq_sets: Vec<IrqSet>,
    pub(crate) links: HashMap<PathBuf, PathBuf>,
    pub(crate) files: HashMap<PathBuf, String>,
    pub(crate) dirs: HashMap<PathBuf, Vec<String>>,
    /// Make `drivers_probe` and `driver/unbind` writes act like the kernel (driver_override).
    pub(crate) simulate_probe: bool,
    /// Driver a device gets on reprobe without an override.
    pub(crate) default_driver: String,
    pub(crate) clock_ns: u64,
}

impl Fake {
    fn new() -> Self {
        let region = |index, size, offset, flags| vfio_region_info {
            argsz: 32,
            flags,
            index,
            cap_offset: 0,
            size,
            offset,
        };
        let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
        let mut f = Fake {
            calls: Vec::new(),
            fail: HashMap::new(),
            api_version: 0,
            extensions: vec![VFIO_TYPE1_IOMMU, VFIO_TYPE1v2_IOMMU],
            group_flags: VFIO_GROUP_FLAGS_VIABLE,
            device_info: vfio_device_info {
                argsz: 24,
                flags: VFIO_DEVICE_FLAGS_PCI | VFIO_DEVICE_FLAGS_RESET,
                num_regions: VFIO_PCI_NUM_REGIONS,
                num_irqs: VFIO_PCI_NUM_IRQS,
                cap_offset: 0,
                pad: 0,
            },
            regions: HashMap::from([
                (
                    VFIO_PCI_BAR0_REGION_INDEX,
                    region(0, BAR0_SIZE, 0, rw | VFIO_REGION_INFO_FLAG_MMAP),
                ),
                (
                    VFIO_PCI_CONFIG_REGION_INDEX,
                    region(VFIO_PCI_CONFIG_REGION_INDEX, 4096, CFG_OFFSET, rw),
                ),
            ]),
            msix: vfio_irq_info {
                argsz: 16,
                flags: VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE,
                index: VFIO_PCI_MSIX_IRQ_INDEX,
                count: 64,
            },
            pgsizes: 0x4020_1000,
            iova_ranges: Some(vec![(0, 0xfedf_ffff), (0xfef0_0000, 0x7f_ffff_ffff)]),
            dma_avail: Some(65535),
            mem: BTreeMap::new(),
            dma_maps: BTreeMap::new(),
            hugepages: 16,
            huge_maps: HashMap::new(),
            names: HashMap::new(),
            attached: false,
            iommu_set: false,
            irq_sets: Vec::new(),
            links: HashMap::new(),
            files: HashMap::new(),
            dirs: HashMap::new(),
            simulate_probe: true,
            default_driver: "mlx5_core".into(),
            clock_ns: 1_000_000_000,
        };
        // Config space, little-endian: 15b3:1017, command 0x0400 (INTx disabled), BAR0 a
        // 64-bit prefetchable memory BAR.
        f.poke(CFG_OFFSET, &[0xb3, 0x15, 0x17, 0x10, 0x00, 0x04]);
        f.poke(CFG_OFFSET + 0x10, &0x0000_000cu32.to_le_bytes());
        f.add_device(BDF, Some(GROUP), Some("vfio-pci"));
        f.dirs
            .insert("/sys/bus/pci/drivers/vfio-pci".into(), vec![]);
        f
    }

    /// Stores `bytes` at absolute offset `at` of the device fd.
    pub(crate) fn poke(&mut self, at: u64, bytes: &[u8]) {
        for (i, b) in bytes.iter().enumerate() {
            self.mem.insert(at + i as u64, *b);
        }
    }

    /// Reads `n` bytes at absolute offset `at` of the device fd.
    pub(crate) fn peek(&self, at: u64, n: usize) -> Vec<u8> {
        (0..n as u64)
            .map(|i| self.mem.get(&(at + i)).copied().unwrap_or(0))
            .collect()
    }

    /// Adds a PCI device to sysfs: its node, IOMMU group (and the group's device list), and
    /// driver link.
    pub(crate) fn add_device(&mut self, bdf: &str, group: Option<u32>, driver: Option<&str>) {
        let dev = PathBuf::from(format!("/sys/bus/pci/devices/{bdf}"));
        self.links.insert(
            dev.clone(),
            format!("../../../devices/pci0000:00/0000:00:01.0/{bdf}").into(),
        );
        self.files.insert(dev.join("vendor"), "0x15b3\n".into());
        self.files.insert(dev.join("device"), "0x1017\n".into());
        self.files
            .insert(dev.join("driver_override"), "(null)\n".into());
        if let Some(g) = group {
            self.links.insert(
                dev.join("iommu_group"),
                format!("../../../../kernel/iommu_groups/{g}").into(),
            );
            self.dirs
                .entry(format!("/sys/kernel/iommu_groups/{g}/devices").into())
                .or_default()
                .push(bdf.into());
        }
        self.set_driver(bdf, driver);
    }

    /// Points a device's `driver` link at `driver`, or removes it.
    pub(crate) fn set_driver(&mut self, bdf: &str, driver: Option<&str>) {
        let link = PathBuf::from(format!("/sys/bus/pci/devices/{bdf}/driver"));
        match driver {
            Some(d) => {
                self.links
                    .insert(link, format!("../../../../bus/pci/drivers/{d}").into());
            }
            None => {
                self.links.remove(&link);
            }
        }
    }

    fn check(&self, op: &str) -> io::Result<()> {
        match self.fail.get(op) {
            Some(&errno) => Err(io::Error::from_raw_os_error(errno)),
            None => Ok(()),
        }
    }

    /// Records `line` and fails it if its operation (`op`) was set to fail.
    fn call(&mut self, op: &str, line: String) -> io::Result<()> {
        self.calls.push(line);
        self.check(op)
    }

    fn name(&self, f: &File) -> String {
        self.names
            .get(&f.as_raw_fd())
            .cloned()
            .unwrap_or_else(|| format!("fd{}", f.as_raw_fd()))
    }

    fn new_file(&mut self, name: &str) -> File {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .unwrap_or_else(|e| panic!("fake: cannot open /dev/null: {e}"));
        self.names.insert(f.as_raw_fd(), name.to_owned());
        f
    }

    /// The info struct and capability chain the kernel would return (Linux
    /// `vfio_iommu_type1_get_info`: dma_avail, then IOVA ranges; 8-byte aligned entries).
    fn iommu_info(&self) -> Vec<u8> {
        let mut b = vec![0u8; 24];
        let mut flags = VFIO_IOMMU_INFO_PGSIZES;
        b[8..16].copy_from_slice(&self.pgsizes.to_ne_bytes());
        let mut caps: Vec<Vec<u8>> = Vec::new();
        if let Some(avail) = self.dma_avail {
            let mut c = vec![0u8; 16];
            c[0..2].copy_from_slice(&(VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL as u16).to_ne_bytes());
            c[2..4].copy_from_slice(&1u16.to_ne_bytes());
            c[8..12].copy_from_slice(&avail.to_ne_bytes());
            caps.push(c);
        }
        if let Some(ranges) = &self.iova_ranges {
            let mut c = vec![0u8; 16 + 16 * ranges.len()];
            c[0..2].copy_from_slice(&(VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE as u16).to_ne_bytes());
            c[2..4].copy_from_slice(&1u16.to_ne_bytes());
            c[8..12].copy_from_slice(&(ranges.len() as u32).to_ne_bytes());
            for (i, (s, e)) in ranges.iter().enumerate() {
                c[16 + 16 * i..24 + 16 * i].copy_from_slice(&s.to_ne_bytes());
                c[24 + 16 * i..32 + 16 * i].copy_from_slice(&e.to_ne_bytes());
            }
            caps.push(c);
        }
        if !caps.is_empty() {
            flags |= VFIO_IOMMU_INFO_CAPS;
            b[16..20].copy_from_slice(&24u32.to_ne_bytes());
            let n = caps.len();
            for (i, mut c) in caps.into_iter().enumerate() {
                let next = if i + 1 < n { b.len() + c.len() } else { 0 };
                c[4..8].copy_from_slice(&(next as u32).to_ne_bytes());
                b.extend_from_slice(&c);
            }
        }
        let total = b.len() as u32;
        b[0..4].copy_from_slice(&total.to_ne_bytes());
        b[4..8].copy_from_slice(&flags.to_ne_bytes());
        b
    }
}

thread_local! {
    static FAKE: RefCell<Fake> = RefCell::new(Fake::new());
}

/// Runs `f` on this thread's fake kernel.
pub(crate) fn with<R>(f: impl FnOnce(&mut Fake) -> R) -> R {
    FAKE.with(|c| f(&mut c.borrow_mut()))
}

/// Starts this thread over with a healthy device ([`BDF`] in [`GROUP`], bound to vfio-pci).
pub(crate) fn reset() {
    with(|f| *f = Fake::new());
}

/// The calls so far.
pub(crate) fn calls() -> Vec<String> {
    with(|f| f.calls.clone())
}

/// Forgets the calls so far.
pub(crate) fn clear_calls() {
    with(|f| f.calls.clear());
}

/// Makes operation `op` fail with `errno` from now on.
pub(crate) fn fail(op: &str, errno: i32) {
    with(|f| f.fail.insert(op.to_owned(), errno));
}

/// A file standing for a VFIO fd named `name` in the call log.
pub(crate) fn file(name: &str) -> File {
    with(|f| {
        let file = f.new_file(name);
        if name == "container" {
            f.attached = true;
            f.iommu_set = true;
        }
        file
    })
}

fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

pub(crate) fn open_rw(path: &Path) -> io::Result<File> {
    with(|f| {
        let p = path.display().to_string();
        f.call(&format!("open {p}"), format!("open {p}"))?;
        let name = match p.as_str() {
            "/dev/vfio/vfio" => "container".to_owned(),
            _ if p.starts_with("/dev/vfio/") => "group".to_owned(),
            _ => p,
        };
        Ok(f.new_file(&name))
    })
}

pub(crate) fn get_api_version(container: &File) -> io::Result<i32> {
    with(|f| {
        let line = format!("VFIO_GET_API_VERSION {}", f.name(container));
        f.call("VFIO_GET_API_VERSION", line)?;
        Ok(f.api_version)
    })
}

pub(crate) fn check_extension(container: &File, ext: u32) -> io::Result<bool> {
    with(|f| {
        let line = format!("VFIO_CHECK_EXTENSION {} {ext}", f.name(container));
        f.call("VFIO_CHECK_EXTENSION", line)?;
        Ok(f.extensions.contains(&ext))
    })
}

pub(crate) fn set_iommu(container: &File, iommu: u32) -> io::Result<()> {
    with(|f| {
        let line = format!("VFIO_SET_IOMMU {} {iommu}", f.name(container));
        f.call("VFIO_SET_IOMMU", line)?;
        // Linux: no group attached yet, or a type it does not offer → EINVAL.
        if !f.attached || !f.extensions.contains(&iommu) {
            return Err(errno(libc::EINVAL));
        }
        f.iommu_set = true;
        Ok(())
    })
}

pub(crate) fn iommu_get_info(container: &File, argsz: u32) -> io::Result<Vec<u8>> {
    with(|f| {
        let line = format!("VFIO_IOMMU_GET_INFO {} argsz={argsz}", f.name(container));
        f.call("VFIO_IOMMU_GET_INFO", line)?;
        if !f.iommu_set {
            return Err(errno(libc::EINVAL));
        }
        let full = f.iommu_info();
        let mut out = vec![0u8; (argsz as usize).max(24)];
        if out.len() < full.len() {
            // Too small: the header says how much it needs, no capabilities are copied.
            out[..24].copy_from_slice(&full[..24]);
            out[16..20].copy_from_slice(&0u32.to_ne_bytes());
        } else {
            out[..full.len()].copy_from_slice(&full);
            out[0..4].copy_from_slice(&argsz.to_ne_bytes());
        }
        Ok(out)
    })
}

/// # Safety
/// As the real `iommu_map_dma`.
pub(crate) unsafe fn iommu_map_dma(
    container: &File,
    vaddr: NonNull<u8>,
    iova: u64,
    size: u64,
) -> io::Result<()> {
    with(|f| {
        let line = format!(
            "VFIO_IOMMU_MAP_DMA {} iova={iova:#x} size={size:#x}",
            f.name(container)
        );
        f.call("VFIO_IOMMU_MAP_DMA", line)?;
        let va = vaddr.as_ptr() as u64;
        if !f.iommu_set || size == 0 || (iova | size | va) & 0xfff != 0 {
            return Err(errno(libc::EINVAL));
        }
        let overlaps = f
            .dma_maps
            .range(..iova + size)
            .next_back()
            .is_some_and(|(&at, &(_, len))| at + len > iova);
        if overlaps {
            return Err(errno(libc::EEXIST));
        }
        f.dma_maps.insert(iova, (va, size));
        Ok(())
    })
}

pub(crate) fn iommu_unmap_dma(container: &File, iova: u64, size: u64) -> io::Result<u64> {
    with(|f| {
        let line = format!(
            "VFIO_IOMMU_UNMAP_DMA {} iova={iova:#x} size={size:#x}",
            f.name(container)
        );
        f.call("VFIO_IOMMU_UNMAP_DMA", line)?;
        match f.dma_maps.get(&iova) {
            Some(&(_, len)) if len == size => {
                f.dma_maps.remove(&iova);
                Ok(size)
            }
            _ => Ok(0),
        }
    })
}

pub(crate) fn group_get_status(group: &File) -> io::Result<u32> {
    with(|f| {
        let line = format!("VFIO_GROUP_GET_STATUS {}", f.name(group));
        f.call("VFIO_GROUP_GET_STATUS", line)?;
        Ok(f.group_flags
            | if f.attached {
                VFIO_GROUP_FLAGS_CONTAINER_SET
            } else {
                0
            })
    })
}

pub(crate) fn group_set_container(group: &File, container: &File) -> io::Result<()> {
    with(|f| {
        let line = format!(
            "VFIO_GROUP_SET_CONTAINER {} {}",
            f.name(group),
            f.name(container)
        );
        f.call("VFIO_GROUP_SET_CONTAINER", line)?;
        if f.group_flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
            return Err(errno(libc::EPERM));
        }
        f.attached = true;
        Ok(())
    })
}

pub(crate) fn group_get_device_fd(group: &File, name: &CStr) -> io::Result<File> {
    with(|f| {
        let line = format!(
            "VFIO_GROUP_GET_DEVICE_FD {} {}",
            f.name(group),
            name.to_string_lossy()
        );
        f.call("VFIO_GROUP_GET_DEVICE_FD", line)?;
        // Linux refuses devices until the container has an IOMMU.
        if !f.iommu_set {
            return Err(errno(libc::EINVAL));
        }
        Ok(f.new_file("device"))
    })
}

pub(crate) fn device_reset(device: &File) -> io::Result<()> {
    with(|f| {
        let line = format!("VFIO_DEVICE_RESET {}", f.name(device));
        f.call("VFIO_DEVICE_RESET", line)
    })
}

pub(crate) fn device_get_info(device: &File) -> io::Result<vfio_device_info> {
    with(|f| {
        let line = format!("VFIO_DEVICE_GET_INFO {}", f.name(device));
        f.call("VFIO_DEVICE_GET_INFO", line)?;
        Ok(f.device_info)
    })
}

pub(crate) fn device_get_region_info(device: &File, index: u32) -> io::Result<vfio_region_info> {
    with(|f| {
        let line = format!("VFIO_DEVICE_GET_REGION_INFO {} {index}", f.name(device));
        f.call("VFIO_DEVICE_GET_REGION_INFO", line)?;
        f.regions
            .get(&index)
            .copied()
            .ok_or_else(|| errno(libc::EINVAL))
    })
}

pub(crate) fn device_get_irq_info(device: &File, index: u32) -> io::Result<vfio_irq_info> {
    with(|f| {
        let line = format!("VFIO_DEVICE_GET_IRQ_INFO {} {index}", f.name(device));
        f.call("VFIO_DEVICE_GET_IRQ_INFO", line)?;
        if index == VFIO_PCI_MSIX_IRQ_INDEX {
            Ok(f.msix)
        } else {
            Ok(vfio_irq_info {
                argsz: 16,
                index,
                ..Default::default()
            })
        }
    })
}

pub(crate) fn device_set_irqs(
    device: &File,
    index: u32,
    flags: u32,
    start: u32,
    count: u32,
    fds: &[RawFd],
) -> io::Result<()> {
    with(|f| {
        let line = format!(
            "VFIO_DEVICE_SET_IRQS {} index={index} flags={flags:#x} start={start} count={count}",
            f.name(device)
        );
        f.call("VFIO_DEVICE_SET_IRQS", line)?;
        f.irq_sets.push(IrqSet {
            index,
            flags,
            start,
            count,
            fds: fds.to_vec(),
        });
        Ok(())
    })
}

pub(crate) fn pread(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    with(|f| {
        let line = format!("pread {} {offset:#x} {}", f.name(file), buf.len());
        f.call("pread", line)?;
        buf.copy_from_slice(&f.peek(offset, buf.len()));
        Ok(())
    })
}

pub(crate) fn pwrite(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    with(|f| {
        let line = format!("pwrite {} {offset:#x} {:02x?}", f.name(file), buf);
        f.call("pwrite", line)?;
        f.poke(offset, buf);
        Ok(())
    })
}

/// Real anonymous memory for the fake's "mappings".
fn real_anon(len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a new private anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| errno(libc::EFAULT))
}

pub(crate) fn mmap_device(device: &File, len: usize, offset: u64) -> io::Result<NonNull<u8>> {
    with(|f| {
        let line = format!("mmap {} {offset:#x} {len:#x}", f.name(device));
        f.call("mmap device", line)
    })?;
    real_anon(len)
}

pub(crate) fn mmap_anon(len: usize, huge: bool) -> io::Result<NonNull<u8>> {
    if !huge {
        with(|f| f.call("mmap anon", format!("mmap anon {len:#x}")))?;
        return real_anon(len);
    }
    with(|f| {
        f.call("mmap anon huge", format!("mmap anon {len:#x} huge"))?;
        let pages = len / HUGE;
        if len % HUGE != 0 || pages > f.hugepages {
            return Err(errno(libc::ENOMEM));
        }
        // Like hugetlbfs: 2 MiB aligned. Over-map and trim to get there.
        let p = real_anon(len + HUGE)?;
        let addr = p.as_ptr() as usize;
        let head = addr.next_multiple_of(HUGE) - addr;
        // SAFETY: the parts of the fresh mapping outside the aligned range; nothing uses them.
        unsafe {
            if head > 0 {
                libc::munmap(p.as_ptr().cast(), head);
            }
            if head < HUGE {
                libc::munmap(p.as_ptr().add(head + len).cast(), HUGE - head);
            }
        }
        f.hugepages -= pages;
        f.huge_maps.insert(addr + head, len);
        // SAFETY: head < HUGE, inside the mapping.
        Ok(unsafe { p.add(head) })
    })
}

/// # Safety
/// As the real `munmap`.
pub(crate) unsafe fn munmap(ptr: NonNull<u8>, len: usize) -> io::Result<()> {
    with(|f| -> io::Result<()> {
        f.call("munmap", format!("munmap {len:#x}"))?;
        if let Some(l) = f.huge_maps.remove(&(ptr.as_ptr() as usize)) {
            f.hugepages += l / HUGE;
        }
        Ok(())
    })?;
    // SAFETY: the caller gives the range up.
    if unsafe { libc::munmap(ptr.as_ptr().cast(), len) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn eventfd() -> io::Result<File> {
    with(|f| f.call("eventfd", "eventfd".into()))?;
    // SAFETY: eventfd takes no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd that nothing else owns.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    with(|f| f.names.insert(file.as_raw_fd(), "eventfd".into()));
    Ok(file)
}

pub(crate) fn eventfd_read(fd: &File) -> io::Result<Option<u64>> {
    let mut b = [0u8; 8];
    match (&*fd).read(&mut b) {
        Ok(8) => Ok(Some(u64::from_ne_bytes(b))),
        Ok(_) => Err(io::ErrorKind::UnexpectedEof.into()),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// A virtual clock that moves 100 ns per reading, so spin loops end.
pub(crate) fn monotonic_ns() -> u64 {
    with(|f| {
        f.clock_ns += 100;
        f.clock_ns
    })
}

pub(crate) fn sleep_until_ns(deadline: u64) {
    with(|f| {
        let from = f.clock_ns;
        f.calls
            .push(format!("sleep {}", deadline.saturating_sub(from)));
        f.clock_ns = f.clock_ns.max(deadline);
    });
}

fn not_found() -> io::Error {
    io::ErrorKind::NotFound.into()
}

pub(crate) fn read_link(path: &Path) -> io::Result<PathBuf> {
    with(|f| {
        let p = path.display().to_string();
        f.call(&format!("readlink {p}"), format!("readlink {p}"))?;
        f.links.get(path).cloned().ok_or_else(not_found)
    })
}

pub(crate) fn read_to_string(path: &Path) -> io::Result<String> {
    with(|f| {
        let p = path.display().to_string();
        f.call(&format!("read {p}"), format!("read {p}"))?;
        f.files.get(path).cloned().ok_or_else(not_found)
    })
}

pub(crate) fn write_file(path: &Path, data: &[u8]) -> io::Result<()> {
    with(|f| {
        let p = path.display().to_string();
        let text = String::from_utf8_lossy(data).into_owned();
        f.call(&format!("write {p}"), format!("write {p} {text:?}"))?;
        if !f.simulate_probe {
            return Ok(());
        }
        if let Some(dev) = p.strip_suffix("/driver/unbind") {
            let link = PathBuf::from(format!("{dev}/driver"));
            if f.links.remove(&link).is_none() {
                return Err(not_found());
            }
        } else if p.ends_with("/driver_override") {
            let v = text.trim();
            let v = if v.is_empty() { "(null)" } else { v };
            f.files.insert(path.to_owned(), format!("{v}\n"));
        } else if p == "/sys/bus/pci/drivers_probe" {
            let bdf = text.trim().to_owned();
            let dev = PathBuf::from(format!("/sys/bus/pci/devices/{bdf}"));
            if !f.links.contains_key(&dev) {
                return Err(errno(libc::ENODEV));
            }
            if !f.links.contains_key(&dev.join("driver")) {
                let over = f
                    .files
                    .get(&dev.join("driver_override"))
                    .map(|s| s.trim().to_owned())
                    .unwrap_or_default();
                let d = if over == "(null)" || over.is_empty() {
                    f.default_driver.clone()
                } else {
                    over
                };
                f.set_driver(&bdf, Some(&d));
            }
        }
        Ok(())
    })
}

pub(crate) fn read_dir_names(path: &Path) -> io::Result<Vec<String>> {
    with(|f| {
        let p = path.display().to_string();
        f.call(&format!("readdir {p}"), format!("readdir {p}"))?;
        f.dirs.get(path).cloned().ok_or_else(not_found)
    })
}

pub(crate) fn path_exists(path: &Path) -> io::Result<bool> {
    Ok(with(|f| {
        f.calls.push(format!("exists {}", path.display()));
        f.links.contains_key(path) || f.files.contains_key(path) || f.dirs.contains_key(path)
    }))
}
