//! The bare-metal `Hal`: BAR0 at its physical address (identity-mapped), DMA memory from one
//! static 2 MiB-aligned arena whose physical address is the device address (no IOMMU), time
//! from the calibrated TSC. The driver sees one more `Hal`; nothing in it knows the platform.

use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, Ordering};
use core::time::Duration;

use bareverbs_hal::{DmaBuf, DmaDomain, DmaError, DmaMemory, Hal, Instant, Iova, RawMmio};
use spin::Mutex;

use crate::clock;

/// Bytes of the DMA arena (in `.bss`): rings, command pages and firmware pages of both HCAs.
pub const ARENA_BYTES: usize = 32 << 20;
const PAGE: usize = 4096;
const PAGES: usize = ARENA_BYTES / PAGE;

#[repr(C, align(2097152))]
struct Arena(UnsafeCell<[u8; ARENA_BYTES]>);

// SAFETY: the bytes are handed out in disjoint page runs under `USED`'s lock; each run is
// reached only through the `BareDma` that owns it (and by the devices).
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena(UnsafeCell::new([0; ARENA_BYTES]));
/// One bit per arena page: in use.
static USED: Mutex<[u64; PAGES / 64]> = Mutex::new([0; PAGES / 64]);

fn arena_base() -> usize {
    ARENA.0.get() as usize
}

fn page_used(used: &[u64; PAGES / 64], p: usize) -> bool {
    used[p / 64] & (1 << (p % 64)) != 0
}

fn set_pages(used: &mut [u64; PAGES / 64], first: usize, n: usize, on: bool) {
    for p in first..first + n {
        if on {
            used[p / 64] |= 1 << (p % 64);
        } else {
            used[p / 64] &= !(1 << (p % 64));
        }
    }
}

/// Pages in use in the arena (every page back after both teardowns is the image's check).
pub fn pages_in_use() -> usize {
    USED.lock().iter().map(|w| w.count_ones() as usize).sum()
}

/// A run of arena pages; dropping it zeroes them and gives them back.
#[derive(Debug)]
pub struct BareDma {
    first: usize,
    pages: usize,
    len: usize,
    domain: DmaDomain,
}

// SAFETY: the run `first..first + pages` is this value's alone (marked in `USED` until drop),
// zeroed when handed out (the arena starts zeroed, and every run is zeroed when it comes back),
// and its physical address, identity-mapped, is the device address.
unsafe impl DmaMemory for BareDma {
    fn as_ptr(&self) -> NonNull<u8> {
        NonNull::new((arena_base() + self.first * PAGE) as *mut u8).unwrap_or(NonNull::dangling())
    }

    fn len(&self) -> usize {
        self.len
    }

    fn iova(&self) -> Iova {
        Iova((arena_base() + self.first * PAGE) as u64)
    }

    fn domain(&self) -> DmaDomain {
        self.domain
    }
}

impl Drop for BareDma {
    fn drop(&mut self) {
        let p = self.as_ptr().as_ptr();
        // SAFETY: the run is ours until `set_pages` below; the device no longer uses it (the
        // driver drops DMA memory only after the object that used it is destroyed).
        unsafe { core::ptr::write_bytes(p, 0, self.pages * PAGE) };
        set_pages(&mut USED.lock(), self.first, self.pages, false);
    }
}

/// The bare-metal `Hal` of one PCI function.
pub struct BareHal {
    bar0: RawMmio,
    domain: DmaDomain,
}

impl BareHal {
    /// The `Hal` of the PCI function whose BAR0 is at `bar0_addr` (`bar0_len` bytes, below
    /// 4 GiB), enabled (memory decoding, bus mastering) by the caller. Every function shares
    /// `domain`: without an IOMMU all devices see physical memory.
    ///
    /// # Safety
    /// `bar0_addr..bar0_addr + bar0_len` must be the function's BAR0, mapped uncached, and used by
    /// nothing else while the `BareHal` lives.
    pub unsafe fn new(bar0_addr: u64, bar0_len: usize, domain: DmaDomain) -> Self {
        let base = NonNull::new(bar0_addr as usize as *mut u8).unwrap_or(NonNull::dangling());
        // SAFETY: the caller's promise.
        let bar0 = unsafe { RawMmio::from_raw(base, bar0_len) };
        BareHal { bar0, domain }
    }

    /// Whether `iova..iova + len` lies in arena pages handed out (for `dma_read`/`dma_write`).
    fn allocated(iova: u64, len: usize) -> Option<usize> {
        let off = usize::try_from(iova).ok()?.checked_sub(arena_base())?;
        let end = off.checked_add(len)?;
        if end > ARENA_BYTES {
            return None;
        }
        let used = USED.lock();
        (off / PAGE..end.div_ceil(PAGE))
            .all(|p| page_used(&used, p))
            .then_some(off)
    }
}

// SAFETY: BAR0 is the function's (the `new` contract); arena runs are aligned at both their
// CPU and device address (the same address), zeroed, and carry this HAL's domain; the TSC
// of the one CPU the image runs on does not go back.
unsafe impl Hal for BareHal {
    type Mmio = RawMmio;
    type Dma = BareDma;

    fn bar0(&self) -> &RawMmio {
        &self.bar0
    }

    fn dma_alloc(&self, len: usize, align: usize) -> Result<DmaBuf<BareDma>, DmaError> {
        // Page runs: alignment up to the arena's own 2 MiB.
        if !align.is_power_of_two() || align > 2 << 20 {
            return Err(DmaError::BadAlignment { align });
        }
        let pages = len.max(1).div_ceil(PAGE);
        let step = (align / PAGE).max(1);
        let mut used = USED.lock();
        let mut first = 0;
        while first + pages <= PAGES {
            match (first..first + pages).find(|&p| page_used(&used, p)) {
                None => {
                    set_pages(&mut used, first, pages, true);
                    return Ok(DmaBuf::new(BareDma {
                        first,
                        pages,
                        len,
                        domain: self.domain,
                    }));
                }
                Some(busy) => first = (busy + 1).div_ceil(step) * step,
            }
        }
        Err(DmaError::NoMemory { len })
    }

    fn dma_domain(&self) -> DmaDomain {
        self.domain
    }

    fn now(&self) -> Instant {
        Instant(clock::now_ns())
    }

    fn delay(&self, d: Duration) {
        clock::delay_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    fn dma_by_iova(&self) -> bool {
        true
    }

    fn dma_read(&self, iova: Iova, dst: &mut [u8]) -> Result<(), DmaError> {
        let off = Self::allocated(iova.0, dst.len()).ok_or(DmaError::NotMapped {
            iova: iova.0,
            len: dst.len(),
        })?;
        for (i, b) in dst.iter_mut().enumerate() {
            // SAFETY: inside an allocated run of the arena (checked above); atomic byte loads,
            // as every access to memory the device may write.
            *b = unsafe { AtomicU8::from_ptr((arena_base() + off + i) as *mut u8) }
                .load(Ordering::Acquire);
        }
        Ok(())
    }

    fn dma_write(&self, iova: Iova, src: &[u8]) -> Result<(), DmaError> {
        let off = Self::allocated(iova.0, src.len()).ok_or(DmaError::NotMapped {
            iova: iova.0,
            len: src.len(),
        })?;
        for (i, b) in src.iter().enumerate() {
            // SAFETY: as `dma_read`.
            unsafe { AtomicU8::from_ptr((arena_base() + off + i) as *mut u8) }
                .store(*b, Ordering::Release);
        }
        Ok(())
    }
}
