//! Tables keyed by a queue number (QPN, CQN) that the driver keeps per device: inline and
//! fixed in capacity by default, on the heap and bounded only by the device with the `alloc`
//! feature (a B-tree).

#[cfg(not(feature = "alloc"))]
use core::hash::Hasher;

#[cfg(feature = "alloc")]
extern crate alloc;

/// Hashes a queue number to itself (the inline table's hasher). Queue numbers are distinct 24-bit numbers, mostly
/// consecutive, so their low bits already spread over the table; FNV's byte loop cost 30-odd
/// instructions on every post and poll.
#[cfg(not(feature = "alloc"))]
#[derive(Default)]
pub(crate) struct QpnHasher(u64);

#[cfg(not(feature = "alloc"))]
impl Hasher for QpnHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n);
    }
}

/// A map from queue number to `V` holding at most `N` entries (without `alloc`) or as many as
/// memory allows (with it).
pub(crate) struct Table<V, const N: usize> {
    #[cfg(not(feature = "alloc"))]
    map: heapless::IndexMap<u32, V, hash32::BuildHasherDefault<QpnHasher>, N>,
    #[cfg(feature = "alloc")]
    map: alloc::collections::BTreeMap<u32, V>,
}

impl<V, const N: usize> Table<V, N> {
    pub(crate) fn new() -> Self {
        Table {
            #[cfg(not(feature = "alloc"))]
            map: heapless::IndexMap::new(),
            #[cfg(feature = "alloc")]
            map: alloc::collections::BTreeMap::new(),
        }
    }

    /// Most entries: `N`, or unbounded with `alloc`.
    pub(crate) const fn capacity() -> Option<usize> {
        if cfg!(feature = "alloc") {
            None
        } else {
            Some(N)
        }
    }

    /// Room for `more` entries besides those held.
    pub(crate) fn has_room(&self, more: usize) -> bool {
        Self::capacity().is_none_or(|c| self.map.len() + more <= c)
    }

    #[inline]
    pub(crate) fn get(&self, k: &u32) -> Option<&V> {
        self.map.get(k)
    }

    pub(crate) fn get_mut(&mut self, k: &u32) -> Option<&mut V> {
        self.map.get_mut(k)
    }

    pub(crate) fn contains_key(&self, k: &u32) -> bool {
        self.map.contains_key(k)
    }

    /// Inserts or replaces; the value comes back when the table is full.
    pub(crate) fn insert(&mut self, k: u32, v: V) -> Result<(), V> {
        #[cfg(not(feature = "alloc"))]
        return self.map.insert(k, v).map(|_| ()).map_err(|(_, v)| v);
        #[cfg(feature = "alloc")]
        {
            self.map.insert(k, v);
            Ok(())
        }
    }

    pub(crate) fn remove(&mut self, k: &u32) -> Option<V> {
        self.map.remove(k)
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Takes one value out (any), or `None` when the table is empty. Draining a table with
    /// it copies no table: a table can be tens of KiB, and `no_std` stacks are small.
    pub(crate) fn pop(&mut self) -> Option<V> {
        let k = *self.map.keys().next()?;
        self.map.remove(&k)
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&u32, &mut V)> {
        self.map.iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_and_go_and_a_full_table_hands_the_value_back() {
        let mut t: Table<u64, 4> = Table::new();
        for k in 0..4u32 {
            assert!(t.has_room(1));
            t.insert(0x100 + k, u64::from(k)).unwrap();
        }
        assert_eq!(t.get(&0x102), Some(&2));
        t.insert(0x102, 7).unwrap();
        assert_eq!(t.get(&0x102), Some(&7));
        if Table::<u64, 4>::capacity().is_some() {
            assert!(!t.has_room(1));
            assert_eq!(t.insert(0x200, 9), Err(9));
        }
        *t.get_mut(&0x100).unwrap() += 1;
        assert_eq!(t.remove(&0x100), Some(1));
        assert!(!t.contains_key(&0x100));
        assert!(t.has_room(1));
        t.insert(0x200, 9).unwrap();
        assert_eq!(t.get(&0x200), Some(&9));
    }
}
