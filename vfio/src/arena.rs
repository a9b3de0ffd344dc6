//! The DMA arena: 2 MiB chunks of hugepage memory (4 KiB pages as a fallback), each mapped
//! once with `VFIO_IOMMU_MAP_DMA` at an IOVA the arena picks, carved into zeroed, aligned
//! allocations with a free list per chunk (STYLE.md "MMIO and DMA"; hal `DmaMemory`).
//!
//! A chunk's CPU address and IOVA are both 2 MiB aligned and an allocation sits at the same
//! offset in both, so any alignment up to 2 MiB holds on both sides. Allocations larger than
//! 2 MiB get a chunk of their own, rounded up to 2 MiB.
//!
//! No IOVA is handed out twice: a freed range is held back, not reused, while its chunk has
//! other live allocations, so a late device write to it faults in the IOMMU instead of
//! landing in someone else's buffer. Once nothing in a chunk lives, the chunk is unmapped;
//! the one kept as a spare is mapped again at a fresh IOVA and its memory reused from there.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bareverbs_hal::{DmaError, DmaMemory, Iova};

use crate::error::{with_sources, VfioError};
use crate::free_list::FreeList;
use crate::iommu::{IovaSpace, CHUNK};
use crate::sys;

/// Allocation granule: sizes and alignments are rounded up to a cache line, so two
/// allocations never share one.
const GRANULE: usize = 64;

/// The container and group fds: the IOMMU context the chunks are mapped in. Kept open until
/// the last chunk is unmapped, even after the device fd is closed.
pub(crate) struct Iommu {
    /// `/dev/vfio/<group>`, only held: closing it detaches the group from the container, and
    /// the last detach tears the IOMMU context down. Closed first, as the kernel documents.
    pub(crate) _group: File,
    /// `/dev/vfio/vfio`, the fd the map and unmap ioctls go to.
    pub(crate) container: File,
}

/// One mapped chunk and the parts of it not handed out.
struct Chunk {
    cpu: NonNull<u8>,
    iova: u64,
    size: usize,
    huge: bool,
    /// The parts of the chunk never handed out at this IOVA.
    free: FreeList,
    /// Allocations handed out and not yet freed.
    live: usize,
    /// Bytes freed and held back (their IOVA is not handed out again).
    held: usize,
}

// SAFETY: a Chunk is a pointer to an anonymous mapping owned by the arena; its bytes are only
// reached through the VfioDma handles carved from it, and its bookkeeping only under the
// arena lock.
unsafe impl Send for Chunk {}

impl Chunk {
    fn new(cpu: NonNull<u8>, iova: u64, size: usize, huge: bool) -> Self {
        Chunk {
            cpu,
            iova,
            size,
            huge,
            free: FreeList::new(size),
            live: 0,
            held: 0,
        }
    }

    fn take(&mut self, len: usize, align: usize) -> Option<usize> {
        let off = self.free.take(len, align)?;
        self.live += 1;
        Some(off)
    }

    /// A range comes back: held, not reused (see the module text).
    fn give(&mut self, len: usize) {
        self.live -= 1;
        self.held += len;
    }

    fn is_unused(&self) -> bool {
        self.live == 0
    }

    fn free_bytes(&self) -> usize {
        self.free.free_bytes()
    }
}

struct State {
    /// Chunks by IOVA.
    chunks: BTreeMap<u64, Chunk>,
    iova: IovaSpace,
    warned_hugepages: bool,
}

/// What the arena holds, for diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DmaStats {
    /// Chunks mapped for DMA.
    pub chunks: usize,
    /// Bytes mapped for DMA.
    pub mapped_bytes: usize,
    /// Of those, bytes backed by 2 MiB hugepages.
    pub hugepage_bytes: usize,
    /// Of those, bytes not handed out.
    pub free_bytes: usize,
    /// Of those, bytes freed but held back until their chunk is mapped again at a new IOVA
    /// (an IOVA is never handed out twice).
    pub held_bytes: usize,
}

/// DMA memory for one VFIO container.
pub(crate) struct Arena {
    iommu: Iommu,
    /// The container's IOVA space.
    domain: bareverbs_hal::DmaDomain,
    hugepages: bool,
    state: Mutex<State>,
}

impl Arena {
    /// An empty arena over `iommu`, placing chunks in `iova`; `hugepages: false` skips the
    /// hugepage attempt.
    pub(crate) fn new(iommu: Iommu, iova: IovaSpace, hugepages: bool) -> Arc<Self> {
        Arc::new(Arena {
            iommu,
            domain: bareverbs_hal::DmaDomain::fresh(),
            hugepages,
            state: Mutex::new(State {
                chunks: BTreeMap::new(),
                iova,
                warned_hugepages: false,
            }),
        })
    }

    /// The container's IOVA space.
    pub(crate) fn domain(&self) -> bareverbs_hal::DmaDomain {
        self.domain
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the CPU address of `len` bytes at device address `iova`, if they lie in
    /// one mapped chunk (the reach the device has through the IOMMU).
    pub(crate) fn with_iova<R>(
        &self,
        iova: u64,
        len: usize,
        f: impl FnOnce(NonNull<u8>) -> R,
    ) -> Result<R, DmaError> {
        let st = self.lock();
        let not_mapped = DmaError::NotMapped { iova, len };
        let (&base, chunk) = st.chunks.range(..=iova).next_back().ok_or(not_mapped)?;
        let off = (iova - base) as usize;
        if off.checked_add(len).is_none_or(|end| end > chunk.size) {
            return Err(not_mapped);
        }
        // SAFETY: off + len <= chunk.size: inside the chunk's mapping, which stays mapped
        // while the lock is held.
        Ok(f(unsafe { chunk.cpu.add(off) }))
    }

    /// Maps one more chunk now, so that configuration problems (no locked memory, IOMMU
    /// refusals) surface as a [`VfioError`] when the device is opened rather than later.
    ///
    /// # Errors
    /// As the mapping steps: [`VfioError::NoMemory`], [`VfioError::IovaExhausted`],
    /// [`VfioError::DmaMapFailed`].
    pub(crate) fn grow(&self) -> Result<(), VfioError> {
        let mut st = self.lock();
        let chunk = self.map_chunk(&mut st, CHUNK)?;
        st.chunks.insert(chunk.iova, chunk);
        Ok(())
    }

    /// `len` zeroed bytes aligned to `align` (a power of two up to 2 MiB) at both addresses.
    ///
    /// # Errors
    /// [`DmaError::BadAlignment`] for another alignment, [`DmaError::NoMemory`] when no chunk
    /// can be mapped (the reason is logged).
    pub(crate) fn alloc(self: &Arc<Self>, len: usize, align: usize) -> Result<VfioDma, DmaError> {
        if !align.is_power_of_two() || align > CHUNK {
            return Err(DmaError::BadAlignment { align });
        }
        let align = align.max(GRANULE);
        let reserved = len
            .max(1)
            .checked_next_multiple_of(GRANULE)
            .ok_or(DmaError::NoMemory { len })?;
        let mut st = self.lock();
        let found = st
            .chunks
            .iter_mut()
            .find_map(|(&base, c)| c.take(reserved, align).map(|off| (base, off)));
        let (base, off) = match found {
            Some(hit) => hit,
            None => {
                let size = reserved
                    .checked_next_multiple_of(CHUNK)
                    .ok_or(DmaError::NoMemory { len })?;
                let mut chunk = self.map_chunk(&mut st, size).map_err(|e| {
                    log::warn!("DMA allocation of {len} bytes failed: {}", with_sources(&e));
                    DmaError::NoMemory { len }
                })?;
                // A fresh chunk is one free block at offset 0, which any align <= CHUNK fits.
                let off = chunk
                    .take(reserved, align)
                    .ok_or(DmaError::NoMemory { len })?;
                let base = chunk.iova;
                st.chunks.insert(base, chunk);
                (base, off)
            }
        };
        let chunk = &st.chunks[&base];
        // SAFETY: off + reserved <= chunk.size (Chunk::take), so the pointer stays inside the
        // chunk's mapping.
        let ptr = unsafe { chunk.cpu.add(off) };
        let iova = Iova(chunk.iova + off as u64);
        drop(st);
        // SAFETY: the range was just taken from the chunk's free list, so no handle reaches it,
        // and it lies inside the chunk's live mapping (len <= reserved).
        unsafe { ptr.write_bytes(0, len) };
        Ok(VfioDma {
            arena: Arc::clone(self),
            ptr,
            len,
            iova,
            chunk: base,
            reserved,
        })
    }

    /// Anonymous memory for a chunk: hugepages if allowed and available, else 4 KiB pages
    /// trimmed to a 2 MiB-aligned range. Returns the pointer and whether it is hugepages.
    fn map_memory(&self, st: &mut State, size: usize) -> Result<(NonNull<u8>, bool), VfioError> {
        if self.hugepages {
            match sys::mmap_anon(size, true) {
                // INVARIANT: hugetlb mappings are aligned to the huge page size; the Hal's
                // alignment promise rests on it, so it is checked rather than trusted.
                Ok(p) if p.as_ptr() as usize % CHUNK == 0 => return Ok((p, true)),
                Ok(p) => {
                    // SAFETY: just mapped and never used or mapped for DMA.
                    let _ = unsafe { sys::munmap(p, size) };
                }
                Err(e) => {
                    if !st.warned_hugepages {
                        st.warned_hugepages = true;
                        log::warn!(
                            "no 2 MiB hugepages for DMA memory ({e}); falling back to 4 KiB \
                             pages. Reserve hugepages with `echo N > /proc/sys/vm/nr_hugepages` \
                             (N pages of 2 MiB; the arena maps 2 MiB at a time)"
                        );
                    }
                }
            }
        }
        let over = size.checked_add(CHUNK).ok_or_else(|| VfioError::NoMemory {
            size,
            source: std::io::ErrorKind::OutOfMemory.into(),
        })?;
        let p =
            sys::mmap_anon(over, false).map_err(|source| VfioError::NoMemory { size, source })?;
        let addr = p.as_ptr() as usize;
        let head = addr.next_multiple_of(CHUNK) - addr;
        let tail = CHUNK - head;
        // SAFETY: head < CHUNK and head + size + tail = over: both pieces lie inside the fresh
        // mapping, outside the aligned range kept, and nothing uses them.
        unsafe {
            if head > 0 {
                let _ = sys::munmap(p, head);
            }
            if tail > 0 {
                let _ = sys::munmap(p.add(head + size), tail);
            }
        }
        // SAFETY: head < CHUNK <= over, inside the mapping.
        Ok((unsafe { p.add(head) }, false))
    }

    /// Maps a chunk of `size` bytes (a multiple of CHUNK) for CPU and device.
    fn map_chunk(&self, st: &mut State, size: usize) -> Result<Chunk, VfioError> {
        let (cpu, huge) = self.map_memory(st, size)?;
        let give_up = || {
            // SAFETY: the mapping was just made, is not mapped for DMA, and no one uses it.
            let _ = unsafe { sys::munmap(cpu, size) };
        };
        let Some(iova) = st.iova.alloc(size as u64) else {
            give_up();
            return Err(VfioError::IovaExhausted { size: size as u64 });
        };
        // SAFETY: cpu..cpu + size is a fresh anonymous mapping owned by the arena; it stays
        // mapped until `release` has unmapped it from the IOMMU (or forever if that fails), and
        // its bytes are only reached through raw pointers.
        let mapped = unsafe { sys::iommu_map_dma(&self.iommu.container, cpu, iova, size as u64) };
        if let Err(source) = mapped {
            give_up();
            return Err(VfioError::DmaMapFailed {
                iova,
                size: size as u64,
                source,
            });
        }
        log::debug!(
            "DMA chunk: {size:#x} bytes of {} pages at IOVA {iova:#x}",
            if huge { "2 MiB" } else { "4 KiB" }
        );
        Ok(Chunk::new(cpu, iova, size, huge))
    }

    /// Unmaps a chunk with no live allocations from the IOMMU, then from the process. If the
    /// IOMMU keeps it, the memory is leaked: the device could still write it.
    fn release(&self, chunk: Chunk) {
        let size = chunk.size as u64;
        match sys::iommu_unmap_dma(&self.iommu.container, chunk.iova, size) {
            Ok(n) if n == size => {
                // SAFETY: the device can no longer reach the chunk (unmapped just now) and no
                // handle points into it (every range is back on the free list).
                if let Err(e) = unsafe { sys::munmap(chunk.cpu, chunk.size) } {
                    log::warn!("munmap of a DMA chunk failed: {e}");
                }
            }
            Ok(n) => log::warn!(
                "unmapping the DMA chunk at IOVA {:#x} removed {n:#x} of {size:#x} bytes; \
                 leaking its memory",
                chunk.iova
            ),
            Err(e) => log::warn!(
                "unmapping the DMA chunk at IOVA {:#x} failed ({e}); leaking its memory so \
                 the device cannot write reused pages",
                chunk.iova
            ),
        }
    }

    /// Gives an allocation back: held until its chunk has no live allocation. Such a chunk
    /// is unmapped; when it is the only unused chunk of CHUNK bytes it is kept as a spare,
    /// mapped again at a fresh IOVA.
    fn free(&self, base: u64, reserved: usize) {
        let mut st = self.lock();
        let Some(chunk) = st.chunks.get_mut(&base) else {
            return;
        };
        chunk.give(reserved);
        if !chunk.is_unused() {
            return;
        }
        let oversize = chunk.size > CHUNK;
        let spares = st
            .chunks
            .values()
            .filter(|c| c.size == CHUNK && c.is_unused())
            .count();
        let Some(chunk) = st.chunks.remove(&base) else {
            return;
        };
        if oversize || spares > 1 {
            self.release(chunk);
        } else if let Some(fresh) = self.remap(&mut st, chunk) {
            st.chunks.insert(fresh.iova, fresh);
        }
    }

    /// Moves an unused chunk to a fresh IOVA: unmapped at the old one, mapped at a new one,
    /// every byte free again. `None` (the memory given back or, if the IOMMU keeps the old
    /// mapping, leaked) when that fails.
    fn remap(&self, st: &mut State, chunk: Chunk) -> Option<Chunk> {
        let size = chunk.size as u64;
        match sys::iommu_unmap_dma(&self.iommu.container, chunk.iova, size) {
            Ok(n) if n == size => {}
            other => {
                log::warn!(
                    "unmapping the DMA chunk at IOVA {:#x} failed ({other:?}); leaking its \
                     memory so the device cannot write reused pages",
                    chunk.iova
                );
                return None;
            }
        }
        let give_back = |chunk: &Chunk| {
            // SAFETY: the device can no longer reach the chunk (unmapped above) and no handle
            // points into it (no live allocation).
            if let Err(e) = unsafe { sys::munmap(chunk.cpu, chunk.size) } {
                log::warn!("munmap of a DMA chunk failed: {e}");
            }
        };
        let Some(iova) = st.iova.alloc(size) else {
            give_back(&chunk);
            return None;
        };
        // SAFETY: the chunk's memory stays mapped in the process until `release` or
        // `give_back` unmaps it after the IOMMU no longer maps it; no handle reaches it now.
        if let Err(e) = unsafe { sys::iommu_map_dma(&self.iommu.container, chunk.cpu, iova, size) }
        {
            log::warn!("mapping a DMA chunk again at IOVA {iova:#x} failed: {e}");
            give_back(&chunk);
            return None;
        }
        Some(Chunk::new(chunk.cpu, iova, chunk.size, chunk.huge))
    }

    /// What the arena holds now.
    pub(crate) fn stats(&self) -> DmaStats {
        let st = self.lock();
        st.chunks.values().fold(DmaStats::default(), |mut s, c| {
            s.chunks += 1;
            s.mapped_bytes += c.size;
            s.hugepage_bytes += if c.huge { c.size } else { 0 };
            s.free_bytes += c.free_bytes();
            s.held_bytes += c.held;
            s
        })
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // Every handle holds the arena, so none is left: every chunk is unused.
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        let chunks = std::mem::take(&mut st.chunks);
        for chunk in chunks.into_values() {
            self.release(chunk);
        }
    }
}

/// One DMA allocation from a [`crate::VfioHal`]: zeroed, aligned at its CPU address and its
/// IOVA, reachable by the device at [`DmaMemory::iova`]. Dropping it gives the range back to
/// the arena; the memory stays mapped (and the IOMMU context open) as long as any allocation
/// lives, even after the `VfioHal` is gone.
pub struct VfioDma {
    arena: Arc<Arena>,
    ptr: NonNull<u8>,
    len: usize,
    iova: Iova,
    chunk: u64,
    reserved: usize,
}

// SAFETY: VfioDma owns its range exclusively; moving it to another thread moves that
// ownership. The arena bookkeeping it touches on drop is behind a Mutex.
unsafe impl Send for VfioDma {}
// SAFETY: &VfioDma only reveals the pointer, length and IOVA; all access to the bytes goes
// through hal's DmaBuf/SharedDma, which require &mut or use volatile accesses.
unsafe impl Sync for VfioDma {}

// SAFETY: ptr..ptr + len was taken from a chunk's free list, so this handle is the only one
// reaching it; it was zeroed in Arena::alloc; the chunk stays mapped while the handle lives
// (the handle holds the arena, and a chunk is only released once every range is back); the
// chunk is mapped for DMA at chunk.iova, so the device reaches the same bytes at
// iova..iova + len; the fields never change.
unsafe impl DmaMemory for VfioDma {
    fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    fn len(&self) -> usize {
        self.len
    }

    fn iova(&self) -> Iova {
        self.iova
    }

    fn domain(&self) -> bareverbs_hal::DmaDomain {
        self.arena.domain
    }
}

impl Drop for VfioDma {
    fn drop(&mut self) {
        self.arena.free(self.chunk, self.reserved);
    }
}

impl fmt::Debug for VfioDma {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VfioDma")
            .field("iova", &self.iova)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iommu::{IovaRange, IOVA_BASE};
    use crate::sys::fake;
    use bareverbs_hal::DmaBuf;

    fn arena(hugepages: bool) -> Arc<Arena> {
        fake::reset();
        let iommu = Iommu {
            container: fake::file("container"),
            _group: fake::file("group"),
        };
        let ranges = [
            IovaRange {
                start: 0,
                end: 0xfedf_ffff,
            },
            IovaRange {
                start: 0xfef0_0000,
                end: 0x7f_ffff_ffff,
            },
        ];
        Arena::new(iommu, IovaSpace::new(Some(&ranges)), hugepages)
    }

    fn calls_starting(prefix: &str) -> Vec<String> {
        fake::calls()
            .into_iter()
            .filter(|c| c.starts_with(prefix))
            .collect()
    }

    #[test]
    fn allocations_are_aligned_disjoint_and_consistent_between_cpu_and_iova() {
        let a = arena(true);
        let mut live: Vec<VfioDma> = Vec::new();
        let shapes = [
            (4096, 4096),
            (100, 1),
            (16384, 4096),
            (64, 64),
            (2 << 20, 2 << 20),
            (8192, 8192),
            (1, 1 << 20),
            (3000, 128),
            (4096, 4096),
        ];
        for (len, align) in shapes {
            let d = a.alloc(len, align).unwrap();
            assert_eq!(d.len(), len);
            assert_eq!(d.as_ptr().as_ptr() as usize % align, 0, "cpu align {align}");
            assert!(d.iova().is_aligned(align as u64), "iova align {align}");
            assert!(d.iova().0 >= IOVA_BASE);
            live.push(d);
        }
        for (i, x) in live.iter().enumerate() {
            // Same offset inside its chunk on both sides.
            let cpu_off = x.as_ptr().as_ptr() as usize % CHUNK;
            assert_eq!(cpu_off as u64, x.iova().0 % CHUNK as u64);
            for y in &live[i + 1..] {
                let (xs, xe) = (x.iova().0, x.iova().0 + x.len() as u64);
                let (ys, ye) = (y.iova().0, y.iova().0 + y.len() as u64);
                assert!(xe <= ys || ye <= xs, "{x:?} overlaps {y:?}");
                let (xp, yp) = (x.as_ptr().as_ptr() as usize, y.as_ptr().as_ptr() as usize);
                assert!(xp + x.len() <= yp || yp + y.len() <= xp);
            }
        }
        // Every IOVA handed out is inside a live IOMMU mapping whose vaddr matches.
        fake::with(|f| {
            for d in &live {
                let (&at, &(va, size)) = f.dma_maps.range(..=d.iova().0).next_back().unwrap();
                assert!(d.iova().0 + d.len() as u64 <= at + size);
                assert_eq!(va + (d.iova().0 - at), d.as_ptr().as_ptr() as u64);
            }
        });
    }

    #[test]
    fn a_freed_iova_is_never_handed_out_again() {
        let a = arena(true);
        // Two allocations in one chunk; the first is freed while the second lives.
        let keep = a.alloc(4096, 4096).unwrap();
        let mut buf = DmaBuf::new(a.alloc(4096, 4096).unwrap());
        buf.as_mut_slice().fill(0xa5);
        let freed_ptr = buf.as_slice().as_ptr() as usize;
        let freed = buf.share();
        let freed_iova = freed.iova();
        drop(freed);
        assert_eq!(a.stats().held_bytes, 4096, "held back, not free");
        // A new allocation does not get the freed range, so a late device write to it
        // faults in the IOMMU instead of landing in the new buffer.
        let next = a.alloc(4096, 4096).unwrap();
        assert_ne!(next.iova(), freed_iova);
        assert_ne!(next.as_ptr().as_ptr() as usize, freed_ptr);
        drop(next);
        assert_eq!(calls_starting("VFIO_IOMMU_UNMAP_DMA").len(), 0);
        // Nothing left alive in the chunk: it moves to a fresh IOVA (the only spare), and its
        // memory, zeroed, serves again there.
        let old_iova = keep.iova();
        drop(keep);
        assert_eq!(
            calls_starting("VFIO_IOMMU_UNMAP_DMA"),
            ["VFIO_IOMMU_UNMAP_DMA container iova=0x40000000 size=0x200000"]
        );
        let again = DmaBuf::new(a.alloc(4096, 4096).unwrap());
        assert!(
            again.as_slice().iter().all(|&b| b == 0),
            "reused memory not zeroed"
        );
        assert_eq!(again.as_slice().as_ptr() as usize, freed_ptr - 4096);
        let again = again.share();
        let iova = again.iova();
        assert_eq!(
            iova,
            Iova(0x4020_0000),
            "the next IOVA up, not {old_iova:?}"
        );
        assert_eq!(
            calls_starting("VFIO_IOMMU_MAP_DMA"),
            [
                "VFIO_IOMMU_MAP_DMA container iova=0x40000000 size=0x200000",
                "VFIO_IOMMU_MAP_DMA container iova=0x40200000 size=0x200000",
            ]
        );
        assert_eq!(a.stats().held_bytes, 0);
        assert_eq!(
            fake::with(|f| f.hugepages),
            15,
            "one hugepage, mapped twice"
        );
    }

    #[test]
    fn chunks_are_mapped_and_unmapped_through_the_iommu() {
        let a = arena(true);
        let x = a.alloc(2 << 20, 4096).unwrap();
        let y = a.alloc(2 << 20, 4096).unwrap();
        assert_eq!(
            calls_starting("VFIO_IOMMU_MAP_DMA"),
            [
                "VFIO_IOMMU_MAP_DMA container iova=0x40000000 size=0x200000",
                "VFIO_IOMMU_MAP_DMA container iova=0x40200000 size=0x200000",
            ]
        );
        assert_eq!(fake::with(|f| f.hugepages), 14);
        // The first unused chunk is kept for reuse, at a fresh IOVA; the second is given back.
        drop(x);
        assert_eq!(
            calls_starting("VFIO_IOMMU_UNMAP_DMA"),
            ["VFIO_IOMMU_UNMAP_DMA container iova=0x40000000 size=0x200000"]
        );
        assert_eq!(
            calls_starting("VFIO_IOMMU_MAP_DMA").last().unwrap(),
            "VFIO_IOMMU_MAP_DMA container iova=0x40400000 size=0x200000"
        );
        drop(y);
        assert_eq!(
            calls_starting("VFIO_IOMMU_UNMAP_DMA").last().unwrap(),
            "VFIO_IOMMU_UNMAP_DMA container iova=0x40200000 size=0x200000"
        );
        assert_eq!(fake::with(|f| f.hugepages), 15);
        assert_eq!(a.stats().chunks, 1);
        // A large allocation has its own chunk, unmapped as soon as it is free; IOVAs are not
        // reused.
        let big = a.alloc(5 << 20, 4096).unwrap();
        assert_eq!(big.iova(), Iova(0x4060_0000));
        assert_eq!(fake::with(|f| f.hugepages), 12);
        drop(big);
        assert_eq!(
            calls_starting("VFIO_IOMMU_UNMAP_DMA").last().unwrap(),
            "VFIO_IOMMU_UNMAP_DMA container iova=0x40600000 size=0x600000"
        );
        // Dropping the arena unmaps the rest.
        drop(a);
        assert!(fake::with(|f| f.dma_maps.is_empty()));
        assert_eq!(fake::with(|f| f.hugepages), 16);
    }

    #[test]
    fn without_hugepages_4k_pages_are_aligned_to_2mib() {
        let a = arena(true);
        fake::with(|f| f.hugepages = 0);
        let d = a.alloc(4096, 2 << 20).unwrap();
        assert_eq!(d.as_ptr().as_ptr() as usize % CHUNK, 0);
        assert!(calls_starting("mmap anon").contains(&"mmap anon 0x200000 huge".to_owned()));
        assert!(calls_starting("mmap anon").contains(&"mmap anon 0x400000".to_owned()));
        assert_eq!(
            a.stats(),
            DmaStats {
                chunks: 1,
                mapped_bytes: CHUNK,
                hugepage_bytes: 0,
                free_bytes: CHUNK - 4096,
                held_bytes: 0,
            }
        );
        // Hugepages off by option: no attempt at all.
        let b = arena(false);
        let _d = b.alloc(64, 64).unwrap();
        assert!(!fake::calls().iter().any(|c| c.ends_with("huge")));
    }

    #[test]
    fn bad_alignment_and_failed_maps_are_errors_without_leaks() {
        let a = arena(true);
        assert_eq!(
            a.alloc(64, 3).unwrap_err(),
            DmaError::BadAlignment { align: 3 }
        );
        assert_eq!(
            a.alloc(64, 4 << 20).unwrap_err(),
            DmaError::BadAlignment { align: 4 << 20 }
        );
        fake::fail("VFIO_IOMMU_MAP_DMA", libc::ENOMEM);
        assert_eq!(
            a.alloc(4096, 4096).unwrap_err(),
            DmaError::NoMemory { len: 4096 }
        );
        // The hugepage was given back.
        assert_eq!(fake::with(|f| f.hugepages), 16);
        assert_eq!(a.stats().chunks, 0);
        let e = a.grow().unwrap_err();
        assert!(
            matches!(
                e,
                VfioError::DmaMapFailed {
                    iova: 0x4020_0000,
                    size: 0x20_0000,
                    ..
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn a_handle_outlives_the_arena_owner() {
        let a = arena(true);
        let d = a.alloc(4096, 4096).unwrap();
        drop(a);
        // Still mapped: the handle keeps the arena alive.
        assert_eq!(fake::with(|f| f.dma_maps.len()), 1);
        drop(d);
        assert!(fake::with(|f| f.dma_maps.is_empty()));
    }
}
