//! A list that keeps its first few items inline and moves to the heap only past them: what
//! the model's data path collects per WQE (gather entries, translated address pieces) is
//! almost always one or two items, and allocating for them cost more than executing the WQE.

/// Up to `N` items inline; the whole list moves to a `Vec` when a push passes `N`.
#[derive(Clone, Debug)]
pub(crate) struct SmallList<T: Copy + Default, const N: usize> {
    inline: [T; N],
    /// Items in the list: up to `N` they are in `inline`, past it all are in `spilled`.
    len: usize,
    /// Every item, once there were more than `N` (empty until then).
    spilled: Vec<T>,
}

impl<T: Copy + Default, const N: usize> Default for SmallList<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default, const N: usize> SmallList<T, N> {
    /// An empty list (no allocation).
    pub(crate) fn new() -> Self {
        SmallList {
            inline: [T::default(); N],
            len: 0,
            spilled: Vec::new(),
        }
    }

    /// Appends `v`.
    #[inline]
    pub(crate) fn push(&mut self, v: T) {
        if self.len < N {
            self.inline[self.len] = v;
        } else {
            if self.len == N {
                self.spilled.extend_from_slice(&self.inline);
            }
            self.spilled.push(v);
        }
        self.len += 1;
    }

    /// Empties the list, keeping what it allocated.
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.spilled.clear();
    }

    /// The items, in order.
    pub(crate) fn as_slice(&self) -> &[T] {
        if self.len <= N {
            &self.inline[..self.len]
        } else {
            &self.spilled
        }
    }

    /// The last item, to extend in place.
    pub(crate) fn last_mut(&mut self) -> Option<&mut T> {
        if self.len <= N {
            self.inline[..self.len].last_mut()
        } else {
            self.spilled.last_mut()
        }
    }
}

impl<T: Copy + Default + PartialEq, const N: usize> PartialEq for SmallList<T, N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: Copy + Default, const N: usize> std::ops::Deref for SmallList<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<'a, T: Copy + Default, const N: usize> IntoIterator for &'a SmallList<T, N> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_stay_in_order_across_the_move_to_the_heap() {
        let mut l = SmallList::<u32, 2>::new();
        assert!(l.as_slice().is_empty());
        l.push(1);
        l.push(2);
        assert_eq!(l.as_slice(), &[1, 2]);
        l.push(3);
        l.push(4);
        assert_eq!(l.as_slice(), &[1, 2, 3, 4]);
        *l.last_mut().unwrap() += 10;
        assert_eq!(l.as_slice(), &[1, 2, 3, 14]);
        assert_eq!(l.first(), Some(&1));
        assert_eq!(l.iter().sum::<u32>(), 20);
        l.clear();
        assert!(l.as_slice().is_empty());
        l.push(5);
        assert_eq!(l.as_slice(), &[5]);
        l.push(6);
        l.push(7);
        assert_eq!(l.as_slice(), &[5, 6, 7]);
    }
}
