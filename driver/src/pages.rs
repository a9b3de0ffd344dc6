//! Pages donated to firmware (mlx5-reference 03 §4). Pages are carved from 2 MiB DMA chunks
//! (one hugepage each under VFIO) and tracked in per-chunk bitmaps; a chunk is freed only when
//! firmware has returned every page of it. Pages firmware never returned are leaked, never
//! reused.

use bareverbs_firmware_cmd::ifc::ADAPTER_PAGE_SIZE;
use bareverbs_hal::{Hal, Iova, SharedDma};
use heapless::Vec;

use crate::error::Error;

/// Pages per chunk.
pub const PAGES_PER_CHUNK: usize = 512;
/// Chunks the table can track: 256 × 2 MiB = 512 MiB of firmware memory.
pub const MAX_CHUNKS: usize = 256;
const WORDS: usize = PAGES_PER_CHUNK / 64;
const CHUNK_BYTES: usize = PAGES_PER_CHUNK * ADAPTER_PAGE_SIZE;

struct Chunk<H: Hal> {
    mem: SharedDma<H::Dma>,
    used: [u64; WORDS],
}

impl<H: Hal> Chunk<H> {
    fn count(&self) -> usize {
        self.used.iter().map(|w| w.count_ones() as usize).sum()
    }

    fn contains(&self, iova: u64) -> Option<usize> {
        let base = self.mem.iova().0;
        (iova >= base
            && iova < base + CHUNK_BYTES as u64
            && (iova - base) % ADAPTER_PAGE_SIZE as u64 == 0)
            .then(|| ((iova - base) / ADAPTER_PAGE_SIZE as u64) as usize)
    }
}

/// The pages the driver has given to firmware.
pub(crate) struct PageManager<H: Hal> {
    chunks: Vec<Chunk<H>, MAX_CHUNKS>,
}

impl<H: Hal> PageManager<H> {
    pub(crate) const fn new() -> Self {
        PageManager { chunks: Vec::new() }
    }

    /// Pages firmware holds.
    pub(crate) fn given(&self) -> usize {
        self.chunks.iter().map(Chunk::count).sum()
    }

    /// Takes a free page (allocating a chunk when needed) and marks it given.
    pub(crate) fn take_free(&mut self, hal: &H) -> Result<Iova, Error> {
        for c in self.chunks.iter_mut() {
            if let Some(w) = c.used.iter().position(|w| *w != u64::MAX) {
                let bit = (!c.used[w]).trailing_zeros() as usize;
                c.used[w] |= 1 << bit;
                let off = ((w * 64 + bit) * ADAPTER_PAGE_SIZE) as u64;
                return Ok(Iova(c.mem.iova().0 + off));
            }
        }
        if self.chunks.is_full() {
            return Err(Error::PageTableFull {
                given: self.given(),
            });
        }
        let mem = hal.dma_alloc(CHUNK_BYTES, ADAPTER_PAGE_SIZE)?.share();
        let mut used = [0u64; WORDS];
        used[0] = 1;
        let iova = mem.iova();
        // Capacity checked above.
        let _ = self.chunks.push(Chunk { mem, used });
        Ok(iova)
    }

    /// Makes sure `n` pages can be taken without allocating: allocates the chunks missing.
    /// All or nothing: on failure the chunks it allocated are freed again, so a request
    /// firmware cannot be given is refused whole (as Linux's `give_pages` allocates every
    /// page before its command).
    pub(crate) fn reserve(&mut self, hal: &H, n: usize) -> Result<(), Error> {
        let had = self.chunks.len();
        while self.chunks.len() * PAGES_PER_CHUNK - self.given() < n {
            if self.chunks.is_full() {
                self.release_empty_from(had);
                return Err(Error::PageTableFull {
                    given: self.given(),
                });
            }
            match hal.dma_alloc(CHUNK_BYTES, ADAPTER_PAGE_SIZE) {
                Ok(mem) => {
                    let mem = mem.share();
                    // Capacity checked above.
                    let _ = self.chunks.push(Chunk {
                        mem,
                        used: [0; WORDS],
                    });
                }
                Err(e) => {
                    self.release_empty_from(had);
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// Frees the chunks at index `from` and after that hold no page.
    fn release_empty_from(&mut self, from: usize) {
        let mut i = from;
        while i < self.chunks.len() {
            if self.chunks[i].count() == 0 {
                drop(self.chunks.swap_remove(i));
            } else {
                i += 1;
            }
        }
    }

    /// Frees every chunk that holds no page (what [`PageManager::reserve`] allocated and a
    /// refused command left unused).
    pub(crate) fn release_empty(&mut self) {
        self.release_empty_from(0);
    }

    /// Marks `iova` returned by firmware; frees its chunk once the chunk is empty.
    pub(crate) fn put_back(&mut self, iova: u64) -> Result<(), Error> {
        let found = self
            .chunks
            .iter()
            .enumerate()
            .find_map(|(i, c)| c.contains(iova).map(|p| (i, p)));
        let Some((i, page)) = found else {
            return Err(Error::UnknownPage { iova });
        };
        let c = &mut self.chunks[i];
        let (w, bit) = (page / 64, page % 64);
        if c.used[w] & (1 << bit) == 0 {
            return Err(Error::UnknownPage { iova });
        }
        c.used[w] &= !(1 << bit);
        if c.count() == 0 {
            drop(self.chunks.swap_remove(i));
        }
        Ok(())
    }

    /// Forgets every page still held by firmware without freeing it.
    pub(crate) fn leak_all(&mut self) {
        while let Some(c) = self.chunks.pop() {
            c.mem.leak();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bareverbs_model::SimHal;

    #[test]
    fn pages_come_from_chunks_and_chunks_are_freed_when_empty() {
        let hal = SimHal::synchronous();
        let mut pm = PageManager::<&SimHal>::new();
        let pages: std::vec::Vec<_> = (0..PAGES_PER_CHUNK + 3)
            .map(|_| pm.take_free(&&hal).unwrap())
            .collect();
        assert_eq!(pm.given(), PAGES_PER_CHUNK + 3);
        assert_eq!(hal.model().memory().allocations(), 2);
        assert!(pages.iter().all(|p| p.is_aligned(4096)));
        let mut sorted: std::vec::Vec<_> = pages.iter().map(|p| p.0).collect();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), pages.len());
        assert_eq!(
            pm.put_back(pages[0].0 + 8),
            Err(Error::UnknownPage {
                iova: pages[0].0 + 8
            })
        );
        for p in &pages[PAGES_PER_CHUNK..] {
            pm.put_back(p.0).unwrap();
        }
        assert_eq!(
            pm.put_back(pages[PAGES_PER_CHUNK].0),
            Err(Error::UnknownPage {
                iova: pages[PAGES_PER_CHUNK].0
            })
        );
        assert_eq!(hal.model().memory().allocations(), 1);
        for p in &pages[..PAGES_PER_CHUNK] {
            pm.put_back(p.0).unwrap();
        }
        assert_eq!(pm.given(), 0);
        assert_eq!(hal.model().memory().allocations(), 0);
    }

    #[test]
    fn allocation_failure_is_an_error() {
        let hal = SimHal::synchronous();
        hal.model().memory().set_limit(Some(4096));
        let mut pm = PageManager::<&SimHal>::new();
        assert!(matches!(pm.take_free(&&hal), Err(Error::Dma(_))));
    }
}
