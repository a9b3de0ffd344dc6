//! Host memory for the in-process model: DMA allocations handed to the driver by `SimHal`,
//! each mapped at an IOVA the arena assigns, with unmapped guard gaps between them.
//!
//! IOVAs start above 4 GiB so that every 64-bit address field is exercised, and are never
//! reused, so a stale address faults instead of reaching new memory.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bareverbs_hal::{DmaDomain, DmaError, DmaMemory, Iova};

use crate::dma::{AddressSpace, DmaFault, DmaKind};

/// First IOVA handed out.
pub const IOVA_BASE: u64 = 0x1_0000_0000;
/// Unmapped gap after every allocation.
pub const GUARD_BYTES: u64 = 0x1000;

#[derive(Clone, Copy)]
struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Region is an exclusively owned heap allocation; it is only touched under the
// arena lock (device side) or through the SimDma handle that owns it (driver side).
unsafe impl Send for Region {}

struct Arena {
    regions: BTreeMap<u64, Region>,
    next_iova: u64,
    bytes: usize,
    limit: Option<usize>,
    fail_after: Option<usize>,
    max_align: Option<usize>,
    /// IOVA ranges (start, length) the device can no longer reach.
    revoked: Vec<(u64, u64)>,
    /// The regions the device reached last (IOVA and region; an empty slot has length 0),
    /// tried before the map: a WQE's accesses go to a few regions (ring, doorbell record,
    /// buffers) over and over.
    recent: [(u64, Region); RECENT],
    /// Which `recent` slot the next miss fills.
    recent_next: usize,
}

/// Regions remembered by [`Arena::recent`].
const RECENT: usize = 4;

/// A `recent` slot that holds no region: no IOVA is inside it.
const NO_REGION: (u64, Region) = (
    0,
    Region {
        ptr: NonNull::dangling(),
        len: 0,
    },
);

impl Default for Arena {
    fn default() -> Self {
        Arena {
            regions: BTreeMap::new(),
            next_iova: 0,
            bytes: 0,
            limit: None,
            fail_after: None,
            max_align: None,
            revoked: Vec::new(),
            recent: [NO_REGION; RECENT],
            recent_next: 0,
        }
    }
}

impl Arena {
    /// The region holding `iova`: (its IOVA, pointer, length).
    #[inline]
    fn find(&mut self, iova: u64) -> Option<(u64, NonNull<u8>, usize)> {
        for &(base, r) in &self.recent {
            // One comparison: below `base` wraps to a huge offset.
            if iova.wrapping_sub(base) < r.len as u64 {
                return Some((base, r.ptr, r.len));
            }
        }
        let (&base, &r) = self.regions.range(..=iova).next_back()?;
        let hit = (base, r.ptr, r.len);
        self.recent[self.recent_next] = (base, r);
        self.recent_next = (self.recent_next + 1) % RECENT;
        Some(hit)
    }
}

/// The arena of DMA memory shared by the driver (through [`SimDma`]) and the model (through
/// its crate-private `AddressSpace`).
///
/// Only the model's device side reaches memory by IOVA: writing through the arena from
/// outside, into memory the driver may hold as `&mut [u8]`, is not a safe public API.
///
/// ```compile_fail,E0603
/// use bareverbs_model::dma::AddressSpace;
/// ```
#[derive(Clone)]
pub struct HostMemory {
    arena: Arc<Mutex<Arena>>,
    /// Its IOVA space: another arena hands out the same IOVAs for other memory.
    domain: DmaDomain,
}

impl Default for HostMemory {
    fn default() -> Self {
        Self::new()
    }
}

impl HostMemory {
    /// An empty arena with no limit.
    pub fn new() -> Self {
        HostMemory {
            arena: Arc::new(Mutex::new(Arena {
                next_iova: IOVA_BASE,
                ..Arena::default()
            })),
            domain: DmaDomain::fresh(),
        }
    }

    /// The IOVA space of this arena's allocations.
    pub fn domain(&self) -> DmaDomain {
        self.domain
    }

    fn lock(&self) -> MutexGuard<'_, Arena> {
        self.arena.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Limits the bytes that may be allocated at once (`None`: no limit).
    pub fn set_limit(&self, limit: Option<usize>) {
        self.lock().limit = limit;
    }

    /// Refuses alignments past `align` with `BadAlignment`, as a backend that keeps only the
    /// HAL's promise of 4 KiB would (`None`: up to 2 MiB, as VFIO hugepages give).
    pub fn set_max_align(&self, align: Option<usize>) {
        self.lock().max_align = align;
    }

    /// Makes every allocation after the next `n` fail (`None`: never).
    pub fn fail_after(&self, n: Option<usize>) {
        self.lock().fail_after = n;
    }

    /// Makes the device's reads and writes of `len` bytes at `iova` fault from now on, as an
    /// IOMMU mapping taken away under a live queue would (the CPU side keeps its memory).
    pub fn revoke(&self, iova: u64, len: u64) {
        self.lock().revoked.push((iova, len));
    }

    /// Bytes currently allocated.
    pub fn allocated_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Number of live allocations.
    pub fn allocations(&self) -> usize {
        self.lock().regions.len()
    }

    /// Allocates `len` zeroed bytes aligned to `align` at both the CPU and the IOVA.
    ///
    /// # Errors
    /// [`DmaError::NoMemory`] over the limit, [`DmaError::BadAlignment`] for a bad alignment.
    pub fn alloc(&self, len: usize, align: usize) -> Result<SimDma, DmaError> {
        let mut a = self.lock();
        if !align.is_power_of_two() || align > a.max_align.unwrap_or(1 << 21) {
            return Err(DmaError::BadAlignment { align });
        }
        if let Some(n) = a.fail_after.as_mut() {
            if *n == 0 {
                return Err(DmaError::NoMemory { len });
            }
            *n -= 1;
        }
        if a.limit.is_some_and(|l| a.bytes + len > l) || len == 0 {
            return Err(DmaError::NoMemory { len });
        }
        let layout =
            Layout::from_size_align(len, align.max(64)).map_err(|_| DmaError::NoMemory { len })?;
        // SAFETY: layout has non-zero size (len > 0 checked above).
        let ptr =
            NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(DmaError::NoMemory { len })?;
        let step = (align as u64).max(0x1000);
        let iova = a.next_iova.div_ceil(step) * step;
        a.next_iova = iova + (len as u64).div_ceil(0x1000) * 0x1000 + GUARD_BYTES;
        a.bytes += len;
        a.regions.insert(iova, Region { ptr, len });
        Ok(SimDma {
            mem: self.clone(),
            ptr,
            len,
            align: layout.align(),
            iova: Iova(iova),
        })
    }

    fn free(&self, iova: u64) {
        let mut a = self.lock();
        if let Some(r) = a.regions.remove(&iova) {
            a.bytes -= r.len;
        }
        for slot in a.recent.iter_mut() {
            if slot.0 == iova {
                *slot = NO_REGION;
            }
        }
    }

    fn with_region<R>(
        &self,
        iova: u64,
        len: usize,
        kind: DmaKind,
        f: impl FnOnce(*mut u8) -> R,
    ) -> Result<R, DmaFault> {
        let fault = DmaFault { iova, len, kind };
        let mut a = self.lock();
        let end = iova.saturating_add(len as u64);
        if a.revoked
            .iter()
            .any(|&(s, n)| iova < s.saturating_add(n) && s < end)
        {
            return Err(fault);
        }
        let (base, ptr, rlen) = a.find(iova).ok_or(fault)?;
        let off = (iova - base) as usize;
        if off.checked_add(len).is_none_or(|end| end > rlen) {
            return Err(fault);
        }
        // SAFETY: off + len <= rlen (checked); the region stays allocated while the arena
        // lock is held, because SimDma::drop removes it (and forgets it in `recent`) under the
        // same lock before freeing.
        Ok(f(unsafe { ptr.as_ptr().add(off) }))
    }
}

impl AddressSpace for HostMemory {
    // The driver reaches the same memory with atomic loads and stores (`SharedDma`), from
    // other threads when the model runs on its engine thread: the device side is atomic too
    // (byte-wide; a volatile access racing with an atomic one is a data race, which Miri
    // caught). Each access is ordered as a device orders its DMA: a read completes before what
    // follows it (acquire), a write comes after everything before it (release), so an owner
    // byte written after an entry's body publishes that body to a driver that acquires it.
    fn read(&self, iova: u64, dst: &mut [u8]) -> Result<(), DmaFault> {
        self.with_region(iova, dst.len(), DmaKind::Read, |p| {
            // Bytes up to an 8-byte boundary, then whole words, then the tail: the accesses
            // stay atomic (hal's `SharedDma` does the same on the driver's side) at an eighth
            // of the operations.
            let head = p.align_offset(8).min(dst.len());
            let tail_at = head + (dst.len() - head) / 8 * 8;
            let (lead, rest) = dst.split_at_mut(head);
            // SAFETY: in bounds of the region (with_region), which is only ever accessed
            // atomically while shared (the driver's `SharedDma` accessors, these).
            unsafe { load_small(p, lead) };
            // SAFETY: head <= len, inside the region.
            let words = unsafe { p.add(head) }.cast::<u64>();
            let mut chunks = rest.chunks_exact_mut(8);
            for (w, d) in (&mut chunks).enumerate() {
                // SAFETY: words + w is 8-aligned (head reached alignment) and its 8 bytes lie
                // within the access (head + 8 * (w + 1) <= len).
                let v = unsafe { AtomicU64::from_ptr(words.add(w)) }.load(Ordering::Relaxed);
                d.copy_from_slice(&v.to_ne_bytes());
            }
            // SAFETY: tail_at + the remainder's length = len.
            unsafe { load_small(p.add(tail_at), chunks.into_remainder()) };
            fence(Ordering::Acquire);
        })
    }

    // As `read`, appending: no zeroed bytes to overwrite first.
    fn read_append(&self, iova: u64, len: usize, out: &mut Vec<u8>) -> Result<(), DmaFault> {
        out.reserve(len);
        let at = out.len();
        self.with_region(iova, len, DmaKind::Read, |p| {
            let spare = &mut out.spare_capacity_mut()[..len];
            let head = p.align_offset(8).min(len);
            let (lead, rest) = spare.split_at_mut(head);
            let mut b = [0u8; 8];
            // SAFETY: as in `read`; head < 8.
            unsafe { load_small(p, &mut b[..head]) };
            for (d, v) in lead.iter_mut().zip(b) {
                d.write(v);
            }
            // SAFETY: as in `read`.
            let wp = unsafe { p.add(head) }.cast::<u64>();
            let mut chunks = rest.chunks_exact_mut(8);
            for (w, d) in (&mut chunks).enumerate() {
                // SAFETY: as in `read`.
                let v = unsafe { AtomicU64::from_ptr(wp.add(w)) }.load(Ordering::Relaxed);
                for (d, b) in d.iter_mut().zip(v.to_ne_bytes()) {
                    d.write(b);
                }
            }
            let tail = chunks.into_remainder();
            let tail_at = len - tail.len();
            // SAFETY: as in `read`; the tail is shorter than 8.
            unsafe { load_small(p.add(tail_at), &mut b[..tail.len()]) };
            for (d, v) in tail.iter_mut().zip(b) {
                d.write(v);
            }
            fence(Ordering::Acquire);
            // SAFETY: the `len` bytes after `at` were all written above, within the capacity
            // reserved.
            unsafe { out.set_len(at + len) };
        })
    }

    fn write(&self, iova: u64, src: &[u8]) -> Result<(), DmaFault> {
        self.with_region(iova, src.len(), DmaKind::Write, |p| {
            fence(Ordering::Release);
            let head = p.align_offset(8).min(src.len());
            let (lead, rest) = src.split_at(head);
            // SAFETY: as in `read`.
            unsafe { store_small(p, lead) };
            // SAFETY: as in `read`.
            let words = unsafe { p.add(head) }.cast::<u64>();
            let mut chunks = rest.chunks_exact(8);
            for (w, c) in (&mut chunks).enumerate() {
                let v = u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]));
                // SAFETY: as in `read`.
                unsafe { AtomicU64::from_ptr(words.add(w)) }.store(v, Ordering::Relaxed);
            }
            let tail_at = head + (src.len() - head) / 8 * 8;
            // SAFETY: as in `read`.
            unsafe { store_small(p.add(tail_at), chunks.remainder()) };
        })
    }
}

/// Loads the `dst.len()` bytes at `p` (fewer than 8: the ends of an access around its whole
/// words) with atomics of the sizes a driver uses there: the largest naturally aligned 4-, 2-
/// or 1-byte accesses that fit. A doorbell record's 4-byte counter, which the driver stores as
/// one `u32`, is read as one `u32`: atomics of different sizes on the same bytes, unordered
/// with each other, are a data race in Rust's memory model (Miri reported one between the
/// driver's consumer index store and this side's byte loads).
///
/// # Safety
/// `p..p + dst.len()` is inside a live region, which is only ever accessed atomically.
unsafe fn load_small(p: *mut u8, dst: &mut [u8]) {
    let mut i = 0;
    while i < dst.len() {
        // SAFETY: p + i .. p + i + n lies within the access (n <= what is left), aligned to n.
        unsafe {
            let q = p.add(i);
            let left = dst.len() - i;
            if left >= 4 && q as usize % 4 == 0 {
                let v = AtomicU32::from_ptr(q.cast()).load(Ordering::Relaxed);
                dst[i..i + 4].copy_from_slice(&v.to_ne_bytes());
                i += 4;
            } else if left >= 2 && q as usize % 2 == 0 {
                let v = AtomicU16::from_ptr(q.cast()).load(Ordering::Relaxed);
                dst[i..i + 2].copy_from_slice(&v.to_ne_bytes());
                i += 2;
            } else {
                dst[i] = AtomicU8::from_ptr(q).load(Ordering::Relaxed);
                i += 1;
            }
        }
    }
}

/// Stores `src` (fewer than 8 bytes) at `p` as [`load_small`] loads.
///
/// # Safety
/// As [`load_small`].
unsafe fn store_small(p: *mut u8, src: &[u8]) {
    let mut i = 0;
    while i < src.len() {
        // SAFETY: as in `load_small`.
        unsafe {
            let q = p.add(i);
            let left = src.len() - i;
            if left >= 4 && q as usize % 4 == 0 {
                let v = u32::from_ne_bytes([src[i], src[i + 1], src[i + 2], src[i + 3]]);
                AtomicU32::from_ptr(q.cast()).store(v, Ordering::Relaxed);
                i += 4;
            } else if left >= 2 && q as usize % 2 == 0 {
                let v = u16::from_ne_bytes([src[i], src[i + 1]]);
                AtomicU16::from_ptr(q.cast()).store(v, Ordering::Relaxed);
                i += 2;
            } else {
                AtomicU8::from_ptr(q).store(src[i], Ordering::Relaxed);
                i += 1;
            }
        }
    }
}

/// One DMA allocation handed to the driver; dropping it unmaps and frees it.
pub struct SimDma {
    mem: HostMemory,
    ptr: NonNull<u8>,
    len: usize,
    align: usize,
    iova: Iova,
}

// SAFETY: SimDma owns its allocation; the model reaches it only through the arena lock.
unsafe impl Send for SimDma {}
// SAFETY: &SimDma only exposes the pointer; all access to the bytes goes through hal's
// volatile accessors or through the arena lock.
unsafe impl Sync for SimDma {}

// SAFETY: ptr..ptr+len is a live zeroed allocation owned by this handle alone; the model sees
// the same bytes at iova..iova+len until drop; the values never change.
unsafe impl DmaMemory for SimDma {
    fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn iova(&self) -> Iova {
        self.iova
    }

    fn domain(&self) -> DmaDomain {
        self.mem.domain
    }
}

impl Drop for SimDma {
    fn drop(&mut self) {
        // Unmap first (under the arena lock), so the model can never touch freed memory.
        self.mem.free(self.iova.0);
        // SAFETY: allocated in HostMemory::alloc with this size and alignment.
        unsafe {
            dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.len, self.align),
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bareverbs_hal::DmaBuf;

    #[test]
    fn word_copies_keep_every_byte_at_any_alignment_and_appends_leave_a_fault_clean() {
        let mem = HostMemory::new();
        let a = mem.alloc(4096, 4096).unwrap();
        let base = a.iova().0;
        for start in [0u64, 1, 5, 8, 13, 4000] {
            for len in [0usize, 1, 7, 8, 9, 31, 64, 96] {
                let src: Vec<u8> = (0..len)
                    .map(|i| (i as u8).wrapping_mul(17) ^ 0xa5)
                    .collect();
                mem.write(base + start, &src).unwrap();
                let mut back = vec![0u8; len];
                mem.read(base + start, &mut back).unwrap();
                assert_eq!(back, src, "at {start}, {len} bytes");
                let mut out = vec![7u8; 3];
                mem.read_append(base + start, len, &mut out).unwrap();
                assert_eq!(&out[..3], &[7; 3]);
                assert_eq!(&out[3..], &src[..], "appended at {start}, {len} bytes");
            }
        }
        // An append that faults leaves the vector as it was.
        let mut out = vec![1u8, 2];
        assert!(mem.read_append(base + 4090, 16, &mut out).is_err());
        assert_eq!(out, [1, 2]);
    }

    #[test]
    fn device_and_driver_see_the_same_bytes_and_gaps_fault() {
        let mem = HostMemory::new();
        let a = DmaBuf::new(mem.alloc(100, 4096).unwrap()).share();
        let b = mem.alloc(8192, 4096).unwrap();
        assert!(a.iova().0 >= IOVA_BASE && a.iova().is_aligned(4096));
        assert!(b.iova().0 >= a.iova().0 + 0x1000 + GUARD_BYTES);
        a.write32(4, 0xdead_beef);
        let mut got = [0u8; 4];
        mem.read(a.iova().0 + 4, &mut got).unwrap();
        assert_eq!(got, [0xde, 0xad, 0xbe, 0xef]);
        mem.write(a.iova().0 + 96, &[1, 2, 3, 4]).unwrap();
        assert_eq!(a.read32(96), 0x0102_0304);
        // Past the end of the allocation, in the gap, and below the arena: faults.
        assert!(mem.read(a.iova().0 + 98, &mut got).is_err());
        assert!(mem.read(a.iova().0 + 0x1000, &mut got).is_err());
        assert!(mem.write(0x1000, &[0]).is_err());
        let iova = a.iova().0;
        drop(a);
        assert_eq!(
            mem.read(iova, &mut got),
            Err(DmaFault {
                iova,
                len: 4,
                kind: DmaKind::Read
            })
        );
        assert_eq!(mem.allocations(), 1);
    }

    #[test]
    fn limits_and_injected_failures() {
        let mem = HostMemory::new();
        mem.set_limit(Some(8192));
        let _a = mem.alloc(4096, 4096).unwrap();
        assert!(matches!(
            mem.alloc(8192, 4096),
            Err(DmaError::NoMemory { .. })
        ));
        mem.set_limit(None);
        mem.fail_after(Some(1));
        assert!(mem.alloc(64, 64).is_ok());
        assert!(mem.alloc(64, 64).is_err());
        assert!(matches!(
            mem.alloc(64, 3),
            Err(DmaError::BadAlignment { align: 3 })
        ));
    }
}
