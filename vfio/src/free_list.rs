//! A first-fit free list of `(offset, len)` blocks over one region: what the DMA arenas carve
//! allocations from.

/// Free blocks of a region of `size` bytes, sorted by offset, never adjacent (merged on free).
#[derive(Debug)]
pub(crate) struct FreeList {
    #[cfg_attr(not(test), allow(dead_code))]
    size: usize,
    free: Vec<(usize, usize)>,
}

impl FreeList {
    /// A region of `size` bytes, all free.
    pub(crate) fn new(size: usize) -> Self {
        FreeList {
            size,
            free: vec![(0, size)],
        }
    }

    /// Takes `len` bytes at an offset that is a multiple of `align` (first fit).
    // INVARIANT: the returned range lies inside the region and in no other taken range.
    pub(crate) fn take(&mut self, len: usize, align: usize) -> Option<usize> {
        let (i, start) = self.free.iter().enumerate().find_map(|(i, &(off, n))| {
            let start = off.checked_next_multiple_of(align)?;
            let end = start.checked_add(len)?;
            (end <= off + n).then_some((i, start))
        })?;
        let (off, n) = self.free[i];
        let before = (start > off).then_some((off, start - off));
        let after = (start + len < off + n).then_some((start + len, off + n - start - len));
        match (before, after) {
            (Some(b), Some(a)) => {
                self.free[i] = b;
                self.free.insert(i + 1, a);
            }
            (Some(x), None) | (None, Some(x)) => self.free[i] = x,
            (None, None) => {
                self.free.remove(i);
            }
        }
        Some(start)
    }

    /// Gives back a range returned by [`FreeList::take`], merging it with its neighbours.
    pub(crate) fn give(&mut self, off: usize, len: usize) {
        let i = self.free.partition_point(|&(o, _)| o < off);
        debug_assert!(i == 0 || self.free[i - 1].0 + self.free[i - 1].1 <= off);
        debug_assert!(i == self.free.len() || off + len <= self.free[i].0);
        self.free.insert(i, (off, len));
        if i + 1 < self.free.len() && off + len == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == off {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }

    /// True when nothing is handed out.
    #[cfg(test)]
    fn is_unused(&self) -> bool {
        self.free == [(0, self.size)]
    }

    /// Bytes not handed out.
    pub(crate) fn free_bytes(&self) -> usize {
        self.free.iter().map(|&(_, n)| n).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_list_merges_neighbours() {
        let mut c = FreeList::new(4096);
        let a = c.take(1024, 64).unwrap();
        let b = c.take(1024, 64).unwrap();
        let d = c.take(1024, 2048).unwrap();
        assert_eq!((a, b, d), (0, 1024, 2048));
        c.give(b, 1024);
        c.give(a, 1024);
        assert_eq!(c.free, [(0, 2048), (3072, 1024)]);
        assert_eq!(c.free_bytes(), 3072);
        c.give(d, 1024);
        assert!(c.is_unused());
        assert_eq!(c.take(8192, 64), None);
    }
}
