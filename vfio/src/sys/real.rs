//! The real system calls behind `sys` (Documentation/driver-api/vfio.rst for the ioctl
//! sequence; include/uapi/linux/vfio.h for each argument).
//!
//! Each ioctl takes the bindings' struct with `argsz` set to the size this crate knows; the
//! kernel fills at most `argsz` bytes and says in `argsz` when it has more to give.

use std::ffi::CStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use vfio_bindings::bindings::vfio::{
    vfio_device_info, vfio_group_status, vfio_iommu_type1_dma_map, vfio_iommu_type1_dma_unmap,
    vfio_iommu_type1_info, vfio_irq_info, vfio_irq_set, vfio_region_info, VFIO_DMA_MAP_FLAG_READ,
    VFIO_DMA_MAP_FLAG_WRITE,
};

use super::{
    VFIO_CHECK_EXTENSION, VFIO_DEVICE_GET_INFO, VFIO_DEVICE_GET_IRQ_INFO,
    VFIO_DEVICE_GET_REGION_INFO, VFIO_DEVICE_SET_IRQS, VFIO_GET_API_VERSION,
    VFIO_GROUP_GET_DEVICE_FD, VFIO_GROUP_GET_STATUS, VFIO_GROUP_SET_CONTAINER, VFIO_IOMMU_GET_INFO,
    VFIO_IOMMU_MAP_DMA, VFIO_IOMMU_UNMAP_DMA, VFIO_SET_IOMMU,
};

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `size_of::<T>()` as the `u32` an `argsz` field wants.
const fn argsz<T>() -> u32 {
    size_of::<T>() as u32
}

/// `ioctl(fd, req, arg)` with a pointer argument.
///
/// # Safety
/// `arg` must point to what `req` reads and writes, valid for the size the kernel will use
/// (the `argsz` inside it for VFIO structs).
unsafe fn ioctl_ptr<T>(fd: &File, req: u32, arg: *mut T) -> io::Result<libc::c_int> {
    // SAFETY: the caller vouches for `arg`; `fd` is an open file for the duration of the call.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg) })
}

/// The ioctls whose argument is an integer, not a pointer: only these go through
/// [`ioctl_val`], so no request number that would make the kernel read or write user memory
/// can reach it.
#[derive(Clone, Copy)]
enum ValIoctl {
    /// `VFIO_CHECK_EXTENSION`: the argument is an extension (IOMMU type) number.
    CheckExtension,
    /// `VFIO_SET_IOMMU`: the argument is an IOMMU type number.
    SetIommu,
}

/// `ioctl(fd, req, val)` for one of the integer-argument requests.
fn ioctl_val(fd: &File, req: ValIoctl, val: libc::c_ulong) -> io::Result<libc::c_int> {
    let req = match req {
        ValIoctl::CheckExtension => VFIO_CHECK_EXTENSION,
        ValIoctl::SetIommu => VFIO_SET_IOMMU,
    };
    // SAFETY: both requests take an integer, not a pointer (include/uapi/linux/vfio.h), so
    // the kernel touches no user memory whatever `val` is.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), req as _, val) })
}

/// Opens a device node read-write (close-on-exec, as std always does).
pub(crate) fn open_rw(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).open(path)
}

/// `VFIO_GET_API_VERSION` on the container.
pub(crate) fn get_api_version(container: &File) -> io::Result<i32> {
    // SAFETY: VFIO_GET_API_VERSION takes no argument.
    cvt(unsafe { libc::ioctl(container.as_raw_fd(), VFIO_GET_API_VERSION as _) })
}

/// `VFIO_CHECK_EXTENSION`: true when the container supports IOMMU type `ext`.
pub(crate) fn check_extension(container: &File, ext: u32) -> io::Result<bool> {
    Ok(ioctl_val(container, ValIoctl::CheckExtension, ext.into())? > 0)
}

/// `VFIO_SET_IOMMU`: selects the IOMMU driver of the container.
pub(crate) fn set_iommu(container: &File, iommu: u32) -> io::Result<()> {
    ioctl_val(container, ValIoctl::SetIommu, iommu.into()).map(drop)
}

/// `VFIO_IOMMU_GET_INFO` with a buffer of `argsz` bytes; returns those bytes (the
/// `vfio_iommu_type1_info` header, then the capability chain if it fitted).
pub(crate) fn iommu_get_info(container: &File, argsz: u32) -> io::Result<Vec<u8>> {
    let len = (argsz as usize).max(size_of::<vfio_iommu_type1_info>());
    // u64 words: the struct and the capabilities after it are 8-byte aligned.
    let mut buf = vec![0u64; len.div_ceil(8)];
    let head = vfio_iommu_type1_info {
        argsz: len as u32,
        ..Default::default()
    };
    // SAFETY: `buf` is 8-aligned and at least size_of::<vfio_iommu_type1_info>() bytes long.
    unsafe { buf.as_mut_ptr().cast::<vfio_iommu_type1_info>().write(head) };
    // SAFETY: the kernel writes at most `argsz` = `len` bytes, and `buf` holds `len` bytes.
    unsafe { ioctl_ptr(container, VFIO_IOMMU_GET_INFO, buf.as_mut_ptr()) }?;
    Ok(buf.iter().flat_map(|w| w.to_ne_bytes()).take(len).collect())
}

/// `VFIO_IOMMU_MAP_DMA`: the device may read and write `vaddr..vaddr + size` at
/// `iova..iova + size`. The kernel pins the pages until they are unmapped.
///
/// # Safety
/// `vaddr..vaddr + size` must be anonymous memory this process owns and keeps mapped until
/// [`iommu_unmap_dma`] has removed the range, and nothing may hold a Rust reference to bytes
/// the device can write.
pub(crate) unsafe fn iommu_map_dma(
    container: &File,
    vaddr: NonNull<u8>,
    iova: u64,
    size: u64,
) -> io::Result<()> {
    let mut map = vfio_iommu_type1_dma_map {
        argsz: argsz::<vfio_iommu_type1_dma_map>(),
        flags: VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
        vaddr: vaddr.as_ptr() as u64,
        iova,
        size,
    };
    // SAFETY: `map` is a complete vfio_iommu_type1_dma_map; the memory it names is the
    // caller's to give (this function's contract).
    unsafe { ioctl_ptr(container, VFIO_IOMMU_MAP_DMA, &mut map) }.map(drop)
}

/// `VFIO_IOMMU_UNMAP_DMA` of `iova..iova + size`; returns the bytes the kernel unmapped.
pub(crate) fn iommu_unmap_dma(container: &File, iova: u64, size: u64) -> io::Result<u64> {
    let mut unmap = vfio_iommu_type1_dma_unmap {
        argsz: argsz::<vfio_iommu_type1_dma_unmap>(),
        flags: 0,
        iova,
        size,
        ..Default::default()
    };
    // SAFETY: `unmap` is a complete vfio_iommu_type1_dma_unmap without a dirty bitmap; the
    // kernel writes back `size` only.
    unsafe { ioctl_ptr(container, VFIO_IOMMU_UNMAP_DMA, &mut unmap) }?;
    Ok(unmap.size)
}

/// `VFIO_GROUP_GET_STATUS`: the group's `VFIO_GROUP_FLAGS_*`.
pub(crate) fn group_get_status(group: &File) -> io::Result<u32> {
    let mut status = vfio_group_status {
        argsz: argsz::<vfio_group_status>(),
        flags: 0,
    };
    // SAFETY: `status` is a vfio_group_status of the size given in argsz.
    unsafe { ioctl_ptr(group, VFIO_GROUP_GET_STATUS, &mut status) }?;
    Ok(status.flags)
}

/// `VFIO_GROUP_SET_CONTAINER`: attaches the group to the container.
pub(crate) fn group_set_container(group: &File, container: &File) -> io::Result<()> {
    let mut fd: i32 = container.as_raw_fd();
    // SAFETY: the argument is a pointer to an int holding the container fd.
    unsafe { ioctl_ptr(group, VFIO_GROUP_SET_CONTAINER, &mut fd) }.map(drop)
}

/// `VFIO_GROUP_GET_DEVICE_FD`: a new fd for the device called `name` in the group.
pub(crate) fn group_get_device_fd(group: &File, name: &CStr) -> io::Result<File> {
    // SAFETY: the argument is a NUL-terminated string the kernel only reads.
    let fd = unsafe { ioctl_ptr(group, VFIO_GROUP_GET_DEVICE_FD, name.as_ptr().cast_mut()) }?;
    // SAFETY: on success the ioctl returns a new fd that nothing else owns.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// `VFIO_DEVICE_RESET`: the kernel resets the function (FLR or the device's other method).
pub(crate) fn device_reset(device: &File) -> io::Result<()> {
    // SAFETY: VFIO_DEVICE_RESET takes no argument, so the kernel touches no user memory.
    cvt(unsafe { libc::ioctl(device.as_raw_fd(), super::VFIO_DEVICE_RESET as _) }).map(drop)
}

/// `VFIO_DEVICE_GET_INFO`.
pub(crate) fn device_get_info(device: &File) -> io::Result<vfio_device_info> {
    let mut info = vfio_device_info {
        argsz: argsz::<vfio_device_info>(),
        ..Default::default()
    };
    // SAFETY: `info` is a vfio_device_info of the size given in argsz; the kernel asks for
    // more through argsz instead of writing past it.
    unsafe { ioctl_ptr(device, VFIO_DEVICE_GET_INFO, &mut info) }?;
    Ok(info)
}

/// `VFIO_DEVICE_GET_REGION_INFO` for region `index` (capabilities are not fetched).
pub(crate) fn device_get_region_info(device: &File, index: u32) -> io::Result<vfio_region_info> {
    let mut info = vfio_region_info {
        argsz: argsz::<vfio_region_info>(),
        index,
        ..Default::default()
    };
    // SAFETY: as in device_get_info.
    unsafe { ioctl_ptr(device, VFIO_DEVICE_GET_REGION_INFO, &mut info) }?;
    Ok(info)
}

/// `VFIO_DEVICE_GET_IRQ_INFO` for interrupt `index`.
pub(crate) fn device_get_irq_info(device: &File, index: u32) -> io::Result<vfio_irq_info> {
    let mut info = vfio_irq_info {
        argsz: argsz::<vfio_irq_info>(),
        index,
        ..Default::default()
    };
    // SAFETY: as in device_get_info.
    unsafe { ioctl_ptr(device, VFIO_DEVICE_GET_IRQ_INFO, &mut info) }?;
    Ok(info)
}

/// `VFIO_DEVICE_SET_IRQS` for `count` vectors of interrupt `index` from `start`, with `fds`
/// as the `__s32` data array (empty unless `flags` has `VFIO_IRQ_SET_DATA_EVENTFD`).
pub(crate) fn device_set_irqs(
    device: &File,
    index: u32,
    flags: u32,
    start: u32,
    count: u32,
    fds: &[RawFd],
) -> io::Result<()> {
    let head = size_of::<vfio_irq_set>();
    let data = offset_of!(vfio_irq_set, data) / 4;
    let len = head + 4 * fds.len();
    // u32 words: vfio_irq_set is 4-aligned, and its data are 32-bit fds.
    let mut buf = vec![0u32; len.div_ceil(4)];
    let set = vfio_irq_set {
        argsz: len as u32,
        flags,
        index,
        start,
        count,
        ..Default::default()
    };
    // SAFETY: `buf` is 4-aligned and at least size_of::<vfio_irq_set>() bytes long.
    unsafe { buf.as_mut_ptr().cast::<vfio_irq_set>().write(set) };
    for (slot, fd) in buf[data..].iter_mut().zip(fds) {
        *slot = *fd as u32;
    }
    // SAFETY: `buf` holds the header and `fds.len()` fds, `argsz` bytes in all; the kernel
    // only reads it.
    unsafe { ioctl_ptr(device, VFIO_DEVICE_SET_IRQS, buf.as_mut_ptr()) }.map(drop)
}

/// Reads exactly `buf.len()` bytes at `offset` of a device fd (one `pread` when the kernel
/// serves it whole, which VFIO does for aligned 1/2/4/8-byte accesses).
pub(crate) fn pread(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    file.read_exact_at(buf, offset)
}

/// Writes all of `buf` at `offset` of a device fd.
pub(crate) fn pwrite(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    file.write_all_at(buf, offset)
}

/// Maps `len` bytes of a device region at `offset` of the device fd, shared, read-write.
pub(crate) fn mmap_device(device: &File, len: usize, offset: u64) -> io::Result<NonNull<u8>> {
    let offset =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    // SAFETY: a new shared mapping chosen by the kernel (no fixed address), so no existing
    // memory is affected; the result is checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            device.as_raw_fd(),
            offset,
        )
    };
    mapped(p)
}

/// Maps `len` bytes of fresh zeroed anonymous memory, faulted in, and kept out of children
/// after `fork` (pinned DMA pages must never become copy-on-write). `huge`: 2 MiB hugetlb
/// pages (the kernel then aligns the mapping to 2 MiB), failing with `ENOMEM` when none are
/// reserved.
pub(crate) fn mmap_anon(len: usize, huge: bool) -> io::Result<NonNull<u8>> {
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
    if huge {
        flags |= libc::MAP_HUGETLB | libc::MAP_HUGE_2MB;
    }
    // SAFETY: a new private anonymous mapping chosen by the kernel; no existing memory is
    // affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    let p = mapped(p)?;
    // SAFETY: advice on the mapping just created; it changes no contents. Failing is harmless
    // (only a later fork would be affected), so the result is ignored.
    let _ = unsafe { libc::madvise(p.as_ptr().cast(), len, libc::MADV_DONTFORK) };
    Ok(p)
}

fn mapped(p: *mut libc::c_void) -> io::Result<NonNull<u8>> {
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))
}

/// Unmaps `ptr..ptr + len`.
///
/// # Safety
/// The range must be (part of) a mapping made by [`mmap_anon`] or [`mmap_device`] that nothing
/// uses any more, and no longer mapped for DMA.
pub(crate) unsafe fn munmap(ptr: NonNull<u8>, len: usize) -> io::Result<()> {
    // SAFETY: the caller gives up the range (this function's contract).
    cvt(unsafe { libc::munmap(ptr.as_ptr().cast(), len) }).map(drop)
}

/// A new eventfd with counter 0, non-blocking and close-on-exec.
pub(crate) fn eventfd() -> io::Result<File> {
    // SAFETY: eventfd takes no pointers.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: a new fd that nothing else owns.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Reads and resets an eventfd's counter; `None` when it is zero.
pub(crate) fn eventfd_read(fd: &File) -> io::Result<Option<u64>> {
    let mut b = [0u8; 8];
    match (&*fd).read(&mut b) {
        Ok(8) => Ok(Some(u64::from_ne_bytes(b))),
        Ok(_) => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Sleeps until `CLOCK_MONOTONIC` reads at least `deadline` nanoseconds (restarted after
/// signals).
pub(crate) fn sleep_until_ns(deadline: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: `ts` is a valid timespec; no remainder is asked for with TIMER_ABSTIME.
        let r = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        if r != libc::EINTR {
            return;
        }
    }
}

/// The target of a symbolic link.
pub(crate) fn read_link(path: &Path) -> io::Result<PathBuf> {
    std::fs::read_link(path)
}

/// A small text file, such as a sysfs attribute.
pub(crate) fn read_to_string(path: &Path) -> io::Result<String> {
    std::fs::read_to_string(path)
}

/// Writes `data` to an existing file (a sysfs attribute) in one `write`.
pub(crate) fn write_file(path: &Path, data: &[u8]) -> io::Result<()> {
    OpenOptions::new().write(true).open(path)?.write_all(data)
}

/// The names in a directory.
pub(crate) fn read_dir_names(path: &Path) -> io::Result<Vec<String>> {
    std::fs::read_dir(path)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect()
}

/// True when `path` exists (without following a final symbolic link).
pub(crate) fn path_exists(path: &Path) -> io::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}
