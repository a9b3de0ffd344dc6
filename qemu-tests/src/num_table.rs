//! The model's objects by number (QPs and DCTs, CQs, memory keys by index): a table indexed by
//! the number, as rdma-core's provider finds its QPs (`mlx5_find_qp`: two index steps), so the
//! data path reaches an object with one bounds check and one load instead of a B-tree walk.
//!
//! The model hands out the lowest free number of each kind, so the table stays as long as the
//! highest number in use. Numbers are 24 bits; a larger one (from a command's field) is never
//! present and cannot be inserted. Iteration is in number order, as a `BTreeMap`'s.

/// Numbers this table can hold: 24 bits (QPN, CQN, mkey index).
const NUM_LIMIT: u32 = 1 << 24;

/// Objects of one kind by number.
#[derive(Clone, Debug)]
pub(crate) struct NumTable<V> {
    /// Slot `n` holds object `n`; boxed, so an empty slot costs a pointer.
    slots: Vec<Option<Box<V>>>,
    len: usize,
}

impl<V> Default for NumTable<V> {
    fn default() -> Self {
        NumTable {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<V> NumTable<V> {
    /// The object numbered `n`.
    #[inline]
    pub(crate) fn get(&self, n: &u32) -> Option<&V> {
        self.slots.get(*n as usize)?.as_deref()
    }

    /// The object numbered `n`, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, n: &u32) -> Option<&mut V> {
        self.slots.get_mut(*n as usize)?.as_deref_mut()
    }

    /// Whether an object is numbered `n`.
    pub(crate) fn contains_key(&self, n: &u32) -> bool {
        self.get(n).is_some()
    }

    /// Puts `v` in as number `n`; returns the object it replaced.
    ///
    /// # Panics
    /// When `n` is 2^24 or more: the model's numbers are allocated below it, so this is a
    /// bug in the model, not an input.
    pub(crate) fn insert(&mut self, n: u32, v: V) -> Option<V> {
        assert!(n < NUM_LIMIT, "object number {n:#x} past 24 bits");
        let i = n as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        let old = self.slots[i].replace(Box::new(v));
        if old.is_none() {
            self.len += 1;
        }
        old.map(|b| *b)
    }

    /// Takes object `n` out.
    pub(crate) fn remove(&mut self, n: &u32) -> Option<V> {
        let old = self.slots.get_mut(*n as usize)?.take()?;
        self.len -= 1;
        // Keep the table as long as the highest number in use.
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
        Some(*old)
    }

    /// Objects held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Forgets every object.
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.len = 0;
    }

    /// The objects with their numbers, in number order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &V)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(n, v)| Some((n as u32, v.as_deref()?)))
    }

    /// The objects, in number order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().filter_map(|v| v.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_by_number_in_order_with_gaps_and_out_of_range_numbers() {
        let mut t = NumTable::default();
        assert_eq!(t.insert(0x102, "b"), None);
        assert_eq!(t.insert(0x100, "a"), None);
        assert_eq!(t.insert(0x100, "A"), Some("a"));
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(&0x100), Some(&"A"));
        assert_eq!(t.get(&0x101), None);
        assert!(!t.contains_key(&0xffff_ffff));
        assert_eq!(t.get_mut(&(1 << 24)), None);
        *t.get_mut(&0x102).unwrap() = "B";
        assert_eq!(t.iter().collect::<Vec<_>>(), [(0x100, &"A"), (0x102, &"B")]);
        assert_eq!(t.values().collect::<Vec<_>>(), [&"A", &"B"]);
        assert_eq!(t.remove(&0x101), None);
        assert_eq!(t.remove(&0x102), Some("B"));
        assert_eq!(t.remove(&0x102), None);
        assert_eq!(t.len(), 1);
        // The table shrinks back to its highest number in use.
        assert_eq!(t.slots.len(), 0x101);
        t.clear();
        assert_eq!((t.len(), t.values().count()), (0, 0));
    }
}
