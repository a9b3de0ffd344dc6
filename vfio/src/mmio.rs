//! BAR0 through VFIO: the region mmapped and reached with volatile loads and stores
//! ([`RawMmio`]), or, when it cannot be mapped, `pread`/`pwrite` on the device fd at the
//! region's offset. Both give the same big-endian register view (mlx5-reference 01 §2–3).

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bareverbs_hal::mmio::check_access;
use bareverbs_hal::{BarOffset, Mmio, MmioError, RawMmio};
use vfio_bindings::bindings::vfio::{vfio_region_info, VFIO_REGION_INFO_FLAG_MMAP};

use crate::error::VfioError;
use crate::sys;

/// How BAR0 is reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bar0Access {
    /// mmap when VFIO allows it (`VFIO_REGION_INFO_FLAG_MMAP`) and the mapping succeeds,
    /// otherwise `pread`/`pwrite`.
    #[default]
    Auto,
    /// Always `pread`/`pwrite`: one system call per register access, no mapping.
    Pread,
}

enum Access {
    /// The BAR mapped into the process; unmapped in `Drop`.
    Mapped(RawMmio),
    /// Accesses go through the device fd at `offset + register`.
    Syscall {
        device: Arc<File>,
        offset: u64,
        len: usize,
        /// Set after the first failed access has been logged.
        failed: AtomicBool,
    },
}

/// BAR0 of a VFIO device. Registers are big-endian; accesses take and return host order.
///
/// On the `pread` path a failed system call behaves like a PCI master abort, as the plain
/// [`Mmio`] accessors promise: reads return all ones and writes are dropped (the first failure
/// is logged). The driver's health checks then see a lost device.
pub struct VfioMmio {
    access: Access,
}

impl VfioMmio {
    /// BAR0 of `device`, described by `region` (`VFIO_PCI_BAR0_REGION_INDEX`).
    ///
    /// # Errors
    /// [`VfioError::Step`] when the region is too large for this address space.
    pub(crate) fn new(
        device: Arc<File>,
        region: &vfio_region_info,
        want: Bar0Access,
    ) -> Result<Self, VfioError> {
        let len = usize::try_from(region.size).map_err(|_| VfioError::Step {
            step: "BAR0 size",
            source: std::io::ErrorKind::InvalidData.into(),
        })?;
        if want == Bar0Access::Auto && region.flags & VFIO_REGION_INFO_FLAG_MMAP != 0 {
            match sys::mmap_device(&device, len, region.offset) {
                Ok(p) => {
                    // SAFETY: p..p + len is the shared mapping of BAR0 just made; VfioMmio
                    // unmaps it only in Drop, when the RawMmio goes too. mmap returns
                    // page-aligned (so 8-aligned) addresses, and no reference into the range
                    // is ever formed.
                    let raw = unsafe { RawMmio::from_raw(p, len) };
                    return Ok(VfioMmio {
                        access: Access::Mapped(raw),
                    });
                }
                // A sparse BAR (MSI-X table not mappable on old kernels) refuses a whole-BAR
                // mapping; pread/pwrite always works.
                Err(e) => log::warn!("mmap of BAR0 failed ({e}); using pread/pwrite instead"),
            }
        }
        Ok(VfioMmio {
            access: Access::Syscall {
                device,
                offset: region.offset,
                len,
                failed: AtomicBool::new(false),
            },
        })
    }

    /// True when BAR0 is mapped; false when every access is a system call.
    pub fn is_mapped(&self) -> bool {
        matches!(self.access, Access::Mapped(_))
    }
}

fn io_failed(failed: &AtomicBool, what: &str, off: BarOffset, e: &std::io::Error) {
    if !failed.swap(true, Ordering::Relaxed) {
        log::warn!("BAR0 {what} at {off:?} failed ({e}); treating the device as gone");
    }
}

impl Mmio for VfioMmio {
    fn len(&self) -> usize {
        match &self.access {
            Access::Mapped(raw) => raw.len(),
            Access::Syscall { len, .. } => *len,
        }
    }

    fn try_read32(&self, off: BarOffset) -> Result<u32, MmioError> {
        match &self.access {
            Access::Mapped(raw) => raw.try_read32(off),
            Access::Syscall {
                device,
                offset,
                len,
                failed,
            } => {
                check_access(off.0, 4, *len)?;
                let mut b = [0u8; 4];
                match sys::pread(device, &mut b, offset + off.0 as u64) {
                    Ok(()) => Ok(u32::from_be_bytes(b)),
                    Err(e) => {
                        io_failed(failed, "read", off, &e);
                        Ok(u32::MAX)
                    }
                }
            }
        }
    }

    fn try_write32(&self, off: BarOffset, val: u32) -> Result<(), MmioError> {
        match &self.access {
            Access::Mapped(raw) => raw.try_write32(off, val),
            Access::Syscall {
                device,
                offset,
                len,
                failed,
            } => {
                check_access(off.0, 4, *len)?;
                if let Err(e) = sys::pwrite(device, &val.to_be_bytes(), offset + off.0 as u64) {
                    io_failed(failed, "write", off, &e);
                }
                Ok(())
            }
        }
    }

    /// On the `pread` path this is one 8-byte `pwrite`, which vfio-pci turns into one 64-bit
    /// store where the kernel has `iowrite64` (Linux 6.12 does; older kernels split it into
    /// two 32-bit stores, first the low address).
    fn try_write64(&self, off: BarOffset, val: u64) -> Result<(), MmioError> {
        match &self.access {
            Access::Mapped(raw) => raw.try_write64(off, val),
            Access::Syscall {
                device,
                offset,
                len,
                failed,
            } => {
                check_access(off.0, 8, *len)?;
                if let Err(e) = sys::pwrite(device, &val.to_be_bytes(), offset + off.0 as u64) {
                    io_failed(failed, "write", off, &e);
                }
                Ok(())
            }
        }
    }

    fn try_write64_block(&self, off: BarOffset, words: &[u64]) -> Result<(), MmioError> {
        match &self.access {
            Access::Mapped(raw) => raw.try_write64_block(off, words),
            Access::Syscall { len, .. } => {
                bareverbs_hal::check_block(off.0, words.len(), *len)?;
                for (i, w) in words.iter().enumerate() {
                    self.try_write64(BarOffset(off.0 + 8 * i), *w)?;
                }
                Ok(())
            }
        }
    }
}

impl Drop for VfioMmio {
    fn drop(&mut self) {
        if let Access::Mapped(raw) = &self.access {
            // SAFETY: the mapping made in `new`; the RawMmio pointing into it is dropped with
            // self and never used again.
            if let Err(e) = unsafe { sys::munmap(raw.as_ptr(), raw.len()) } {
                log::warn!("munmap of BAR0 failed: {e}");
            }
        }
    }
}

impl std::fmt::Debug for VfioMmio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioMmio")
            .field("len", &self.len())
            .field("mapped", &self.is_mapped())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fake;
    use vfio_bindings::bindings::vfio::VFIO_PCI_BAR0_REGION_INDEX;

    fn bar0(want: Bar0Access) -> VfioMmio {
        let region = fake::with(|f| f.regions[&VFIO_PCI_BAR0_REGION_INDEX]);
        VfioMmio::new(Arc::new(fake::file("device")), &region, want).unwrap()
    }

    #[test]
    fn pread_path_is_big_endian_like_raw_mmio() {
        fake::reset();
        let bar = bar0(Bar0Access::Pread);
        assert!(!bar.is_mapped());
        assert_eq!(bar.len(), fake::BAR0_SIZE as usize);
        // fw_rev as the RIG's stub serves it: bytes 00 23 00 10 → 0x00230010.
        fake::with(|f| f.poke(0, &[0x00, 0x23, 0x00, 0x10]));
        assert_eq!(bar.read32(BarOffset(0)), 0x0023_0010);
        bar.write32(BarOffset(0x14), 0x1259_4000);
        bar.write64(BarOffset(0x800), 0x1122_3344_5566_7788);
        fake::with(|f| {
            assert_eq!(f.peek(0x14, 4), [0x12, 0x59, 0x40, 0x00]);
            assert_eq!(
                f.peek(0x800, 8),
                [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]
            );
        });
        // One system call per access, of the access's width.
        assert_eq!(
            fake::calls(),
            [
                "pread device 0x0 4",
                "pwrite device 0x14 [12, 59, 40, 00]",
                "pwrite device 0x800 [11, 22, 33, 44, 55, 66, 77, 88]",
            ]
        );
    }

    #[test]
    fn both_paths_agree() {
        fake::reset();
        let mapped = bar0(Bar0Access::Auto);
        assert!(mapped.is_mapped());
        let syscall = bar0(Bar0Access::Pread);
        for bar in [&mapped, &syscall] {
            bar.write32(BarOffset(0x18), 0x0000_0001);
            bar.write64(BarOffset(0x1040), 0x0100_0000_0000_0002);
            assert_eq!(bar.read32(BarOffset(0x18)), 1);
            assert_eq!(bar.read32(BarOffset(0x1040)), 0x0100_0000);
            assert_eq!(bar.read32(BarOffset(0x1044)), 2);
        }
        // Same bytes in the mapping as on the pread side.
        let raw = match &mapped.access {
            Access::Mapped(raw) => raw.as_ptr(),
            Access::Syscall { .. } => unreachable!(),
        };
        let mut got = [0u8; 8];
        for (i, g) in got.iter_mut().enumerate() {
            // SAFETY: 0x1040..0x1048 is inside the 32 MiB fake mapping, alive while `mapped` is.
            *g = unsafe { raw.as_ptr().add(0x1040 + i).read_volatile() };
        }
        assert_eq!(got.to_vec(), fake::with(|f| f.peek(0x1040, 8)));
        drop(mapped);
        assert!(fake::calls().contains(&"munmap 0x2000000".to_owned()));
    }

    #[test]
    fn refused_accesses_make_no_system_call_and_failures_read_all_ones() {
        fake::reset();
        let bar = bar0(Bar0Access::Pread);
        let len = fake::BAR0_SIZE as usize;
        assert_eq!(
            bar.try_read32(BarOffset(len)),
            Err(MmioError::OutOfBounds {
                offset: len,
                width: 4,
                len
            })
        );
        assert_eq!(
            bar.try_write64(BarOffset(4), 0),
            Err(MmioError::Misaligned {
                offset: 4,
                width: 8
            })
        );
        assert!(fake::calls().is_empty());
        fake::fail("pread", libc::EIO);
        fake::fail("pwrite", libc::EIO);
        assert_eq!(bar.try_read32(BarOffset(0)), Ok(u32::MAX));
        assert_eq!(bar.try_write32(BarOffset(0), 1), Ok(()));
    }

    #[test]
    fn unmappable_or_failing_mmap_falls_back_to_pread() {
        fake::reset();
        fake::with(|f| {
            let r = f.regions.get_mut(&VFIO_PCI_BAR0_REGION_INDEX).unwrap();
            r.flags &= !VFIO_REGION_INFO_FLAG_MMAP;
        });
        assert!(!bar0(Bar0Access::Auto).is_mapped());
        assert!(!fake::calls().iter().any(|c| c.starts_with("mmap")));
        fake::reset();
        fake::fail("mmap device", libc::EINVAL);
        let bar = bar0(Bar0Access::Auto);
        assert!(!bar.is_mapped());
        assert_eq!(fake::calls(), ["mmap device 0x0 0x2000000"]);
    }
}
