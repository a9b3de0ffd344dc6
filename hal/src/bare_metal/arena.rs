//! DMA memory from one static arena on a machine without an IOMMU: the physical address of a
//! byte is its device address. Handed out in 4 KiB pages (a bitmap under a spin lock), so a
//! 64-byte doorbell record takes a page; zeroed again when it comes back.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, Ordering};

use spin::Mutex;

use crate::{DmaBuf, DmaDomain, DmaError, DmaMemory, Iova};

const PAGE: usize = 4096;
/// The arena's alignment: the largest alignment it can give (a 2 MiB page).
pub const ARENA_ALIGN: usize = 2 << 20;
/// Pages an arena can have (64 MiB).
pub const ARENA_MAX_PAGES: usize = 16384;
const WORDS: usize = ARENA_MAX_PAGES / 64;

/// The arena: a region and its page bitmap.
pub struct Arena {
    base: usize,
    pages: usize,
    used: Mutex<[u64; WORDS]>,
    /// The one device-address space of the arena's memory (no IOMMU: every device sees it).
    domain: DmaDomain,
}

fn is_used(used: &[u64; WORDS], p: usize) -> bool {
    used[p / 64] & (1 << (p % 64)) != 0
}

fn mark(used: &mut [u64; WORDS], first: usize, n: usize, on: bool) {
    for p in first..first + n {
        if on {
            used[p / 64] |= 1 << (p % 64);
        } else {
            used[p / 64] &= !(1 << (p % 64));
        }
    }
}

impl Arena {
    /// The arena over `len` bytes at `base`.
    ///
    /// # Errors
    /// [`DmaError::BadAlignment`] when `base` is not [`ARENA_ALIGN`]-aligned,
    /// [`DmaError::NoMemory`] when `len` is not whole pages or is more than
    /// [`ARENA_MAX_PAGES`].
    ///
    /// # Safety
    /// `base..base + len` is zeroed memory that lives for as long as the arena and what it
    /// hands out, that nothing else uses, and that devices reach at the same addresses
    /// (identity map, no IOMMU).
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> Result<Self, DmaError> {
        let at = base.as_ptr() as usize;
        if at % ARENA_ALIGN != 0 {
            return Err(DmaError::BadAlignment { align: ARENA_ALIGN });
        }
        if len % PAGE != 0 || len / PAGE > ARENA_MAX_PAGES {
            return Err(DmaError::NoMemory { len });
        }
        Ok(Arena {
            base: at,
            pages: len / PAGE,
            used: Mutex::new([0; WORDS]),
            domain: DmaDomain::fresh(),
        })
    }

    /// The arena's device-address space: every allocation carries it, and every `BareHal`
    /// over the arena reports it (without an IOMMU all devices see physical memory).
    pub fn domain(&self) -> DmaDomain {
        self.domain
    }

    /// `len` zeroed bytes aligned to `align` (up to [`ARENA_ALIGN`]).
    ///
    /// # Errors
    /// [`DmaError::BadAlignment`] for an alignment that is not a power of two or is above
    /// [`ARENA_ALIGN`]; [`DmaError::NoMemory`] when no run of free pages is long enough.
    pub fn alloc(&self, len: usize, align: usize) -> Result<DmaBuf<ArenaDma<'_>>, DmaError> {
        if !align.is_power_of_two() || align > ARENA_ALIGN {
            return Err(DmaError::BadAlignment { align });
        }
        let pages = len.max(1).div_ceil(PAGE);
        let step = (align / PAGE).max(1);
        let mut used = self.used.lock();
        let mut first = 0;
        while first + pages <= self.pages {
            match (first..first + pages).rev().find(|&p| is_used(&used, p)) {
                None => {
                    mark(&mut used, first, pages, true);
                    // Page indices fit in u32: at most ARENA_MAX_PAGES.
                    return Ok(DmaBuf::new(ArenaDma {
                        arena: self,
                        first: first as u32,
                        pages: pages as u32,
                        len,
                    }));
                }
                Some(busy) => first = (busy + 1).div_ceil(step) * step,
            }
        }
        Err(DmaError::NoMemory { len })
    }

    /// Pages handed out and not yet back.
    pub fn pages_in_use(&self) -> usize {
        self.used
            .lock()
            .iter()
            .map(|w| w.count_ones() as usize)
            .sum()
    }

    /// The arena offset of `iova..iova + len` when all of it lies in pages handed out.
    fn allocated(&self, iova: u64, len: usize) -> Option<usize> {
        let off = usize::try_from(iova).ok()?.checked_sub(self.base)?;
        let end = off.checked_add(len)?;
        if end > self.pages * PAGE {
            return None;
        }
        let used = self.used.lock();
        (off / PAGE..end.div_ceil(PAGE))
            .all(|p| is_used(&used, p))
            .then_some(off)
    }

    /// Reads device memory at `iova` into `dst` (atomic byte loads, as every access to memory
    /// the device may write).
    ///
    /// # Errors
    /// [`DmaError::NotMapped`] outside the pages handed out.
    pub fn read(&self, iova: Iova, dst: &mut [u8]) -> Result<(), DmaError> {
        let off = self
            .allocated(iova.0, dst.len())
            .ok_or(DmaError::NotMapped {
                iova: iova.0,
                len: dst.len(),
            })?;
        for (i, b) in dst.iter_mut().enumerate() {
            // SAFETY: inside a run handed out (checked above), memory `new`'s caller gave us;
            // shared bytes are only ever accessed atomically.
            *b = unsafe { AtomicU8::from_ptr((self.base + off + i) as *mut u8) }
                .load(Ordering::Acquire);
        }
        Ok(())
    }

    /// Writes `src` at device address `iova`, as the device would.
    ///
    /// # Errors
    /// [`DmaError::NotMapped`] outside the pages handed out.
    pub fn write(&self, iova: Iova, src: &[u8]) -> Result<(), DmaError> {
        let off = self
            .allocated(iova.0, src.len())
            .ok_or(DmaError::NotMapped {
                iova: iova.0,
                len: src.len(),
            })?;
        for (i, b) in src.iter().enumerate() {
            // SAFETY: as in `read`.
            unsafe { AtomicU8::from_ptr((self.base + off + i) as *mut u8) }
                .store(*b, Ordering::Release);
        }
        Ok(())
    }
}

/// A run of arena pages; dropping it zeroes them and gives them back.
#[derive(Debug)]
pub struct ArenaDma<'a> {
    arena: &'a Arena,
    first: u32,
    pages: u32,
    len: usize,
}

impl core::fmt::Debug for Arena {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Arena({:#x}, {} pages)", self.base, self.pages)
    }
}

impl ArenaDma<'_> {
    fn addr(&self) -> usize {
        self.arena.base + self.first as usize * PAGE
    }
}

// SAFETY: the run is this value's alone (marked in the bitmap until drop) and zeroed when
// handed out (the arena starts zeroed; runs are zeroed when they come back); its address,
// identity-mapped with no IOMMU, is the device address (`Arena::new`'s contract).
unsafe impl DmaMemory for ArenaDma<'_> {
    fn as_ptr(&self) -> NonNull<u8> {
        NonNull::new(self.addr() as *mut u8).unwrap_or(NonNull::dangling())
    }

    fn len(&self) -> usize {
        self.len
    }

    fn iova(&self) -> Iova {
        Iova(self.addr() as u64)
    }

    fn domain(&self) -> DmaDomain {
        self.arena.domain
    }
}

impl Drop for ArenaDma<'_> {
    fn drop(&mut self) {
        let (first, pages) = (self.first as usize, self.pages as usize);
        // SAFETY: the run is ours until it is unmarked below; the driver drops DMA memory only
        // after the device stopped using it.
        unsafe { core::ptr::write_bytes(self.addr() as *mut u8, 0, pages * PAGE) };
        mark(&mut self.arena.used.lock(), first, pages, false);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::alloc::{alloc_zeroed, dealloc, Layout};

    #[test]
    fn runs_are_aligned_disjoint_zeroed_and_come_back() {
        let layout = Layout::from_size_align(64 * PAGE, ARENA_ALIGN).unwrap();
        // SAFETY: a non-zero size.
        let base = NonNull::new(unsafe { alloc_zeroed(layout) }).unwrap();
        // SAFETY: zeroed, ours until `dealloc` below, after the arena and its runs.
        let arena = unsafe { Arena::new(base, 64 * PAGE) }.unwrap();
        let a = arena.alloc(100, 64).unwrap().share();
        let b = arena.alloc(3 * PAGE, 8 * PAGE).unwrap().share();
        assert_eq!(a.domain(), arena.domain());
        assert_eq!(arena.pages_in_use(), 4);
        assert_eq!(b.iova().0 % (8 * PAGE) as u64, 0);
        assert_ne!(a.iova(), b.iova());
        a.write_bytes(0, &[7; 100]).unwrap();
        let mut back = [0u8; 4];
        arena.read(Iova(a.iova().0 + 96), &mut back).unwrap();
        assert_eq!(back, [7; 4]);
        // Beyond what was handed out: refused.
        assert!(arena
            .read(Iova(a.iova().0 + PAGE as u64), &mut back)
            .is_err());
        drop(a);
        assert_eq!(arena.pages_in_use(), 3);
        // The page came back zeroed and is handed out again.
        let c = arena.alloc(PAGE, PAGE).unwrap();
        assert!(c.as_slice().iter().all(|&x| x == 0));
        assert!(arena.alloc(64 * PAGE, PAGE).is_err());
        assert!(arena.alloc(PAGE, 3).is_err());
        drop((b, c));
        assert_eq!(arena.pages_in_use(), 0);
        // SAFETY: everything handed out is back; nothing uses the region any more.
        unsafe { dealloc(base.as_ptr(), layout) };
        let odd = NonNull::new((ARENA_ALIGN + PAGE) as *mut u8).unwrap();
        // SAFETY: refused before any use (misaligned).
        assert!(unsafe { Arena::new(odd, PAGE) }.is_err());
    }
}
