//! Tables of per-queue state that the data path reaches without a device-wide lock: each entry
//! sits in a slot of its own, behind the slot's own lock, and the object it belongs to (a QP,
//! an SRQ) keeps a reference to its slot, so a post locks that one slot and looks nothing up.
//! A CQ, which meets entries by the number its CQEs carry, keeps the slot of the one it met
//! last (rdma-core's `cur_rsc`) and looks a number up in the index only when it changes. The
//! number → slot index is locked device-wide only by those lookups and by creating and
//! destroying objects.
//!
//! An entry stays reachable by a CQ polling on another thread while its object is destroyed:
//! removal takes the slot's write lock, so it waits for the poll, and the poll finds the slot
//! empty (or another object's) afterwards. Slots are inline without the `alloc` feature and in
//! heap chunks made as needed with it.

#[cfg(feature = "alloc")]
extern crate alloc;

use crate::table::Table;

/// What a slot holds: an entry that knows the number it is filed under.
pub(crate) trait Keyed {
    /// The queue number.
    fn key(&self) -> u32;
}

/// One place in a [`SlotTable`]: empty, or the entry of the object it was given to.
pub(crate) type TableSlot<V> = spin::RwLock<Option<V>>;

/// A slot locked for reading.
pub(crate) type SlotGuard<'a, V> = spin::RwLockReadGuard<'a, Option<V>>;

/// A cache of the slot last used for a number (see [`lock_cached`]).
pub(crate) type LastSlot<'d, V> = Option<(u32, &'d TableSlot<V>)>;

/// Slots per heap chunk, and chunks, with the `alloc` feature: up to 2^20 entries.
#[cfg(feature = "alloc")]
const CHUNK: usize = 256;
#[cfg(feature = "alloc")]
const CHUNKS: usize = 4096;

/// One heap chunk of slots, made when the slots before it are all taken.
#[cfg(feature = "alloc")]
type Chunk<V> = alloc::boxed::Box<[TableSlot<V>]>;

/// Entries in fixed slots (`N` inline, or heap chunks with `alloc`), and the index from number
/// to slot.
pub(crate) struct SlotTable<V, const N: usize> {
    /// Number → slot.
    index: spin::RwLock<Table<u32, N>>,
    /// Empty until [`SlotTable::make_slots`]: an empty vector is built in place, where an
    /// array of locks came back through a 9 KB temporary on the bring-up's stack.
    #[cfg(not(feature = "alloc"))]
    slots: heapless::Vec<TableSlot<V>, N>,
    #[cfg(feature = "alloc")]
    chunks: alloc::boxed::Box<[spin::Once<Chunk<V>>]>,
}

impl<V: Keyed, const N: usize> SlotTable<V, N> {
    /// No slots yet: [`SlotTable::make_slots`] makes them once the device is in its place.
    pub(crate) fn new() -> Self {
        SlotTable {
            index: spin::RwLock::new(Table::new()),
            #[cfg(not(feature = "alloc"))]
            slots: heapless::Vec::new(),
            #[cfg(feature = "alloc")]
            chunks: (0..CHUNKS).map(|_| spin::Once::new()).collect(),
        }
    }

    /// Makes the inline slots, all empty (nothing to make on the heap: its chunks come as
    /// needed).
    pub(crate) fn make_slots(&mut self) {
        #[cfg(not(feature = "alloc"))]
        while self.slots.push(spin::RwLock::new(None)).is_ok() {}
    }

    /// Slots there can be.
    fn capacity(&self) -> usize {
        #[cfg(not(feature = "alloc"))]
        return self.slots.len();
        #[cfg(feature = "alloc")]
        return CHUNK * CHUNKS;
    }

    /// Slot `n`, if made.
    #[inline]
    fn slot(&self, n: usize) -> Option<&TableSlot<V>> {
        #[cfg(not(feature = "alloc"))]
        return self.slots.get(n);
        #[cfg(feature = "alloc")]
        return self.chunks.get(n / CHUNK)?.get()?.get(n % CHUNK);
    }

    /// Slot `n`, its chunk made if it was not.
    fn slot_or_make(&self, n: usize) -> Option<&TableSlot<V>> {
        #[cfg(not(feature = "alloc"))]
        return self.slots.get(n);
        #[cfg(feature = "alloc")]
        return self
            .chunks
            .get(n / CHUNK)?
            .call_once(|| (0..CHUNK).map(|_| spin::RwLock::new(None)).collect())
            .get(n % CHUNK);
    }

    /// Room for `more` entries besides those held.
    pub(crate) fn has_room(&self, more: usize) -> bool {
        self.index.read().len() + more <= self.capacity()
    }

    /// Gives `entry` a slot; the entry comes back when every slot is taken or its number has
    /// one already.
    pub(crate) fn insert(&self, entry: V) -> Result<&TableSlot<V>, V> {
        let key = entry.key();
        let mut index = self.index.write();
        if index.len() >= self.capacity() || index.contains_key(&key) {
            return Err(entry);
        }
        // Entered first, so the index's own limit is met before anything is placed; no slot
        // is this number, and the lock is held until the real one replaces it.
        if index.insert(key, u32::MAX).is_err() {
            return Err(entry);
        }
        // Fewer entries than slots, so one is empty. Only a poll holding a stale slot (its
        // object destroyed since) read-locks an empty slot, and only for one run of CQEs, so a
        // slot whose lock is busy is passed over and the scan starts again.
        loop {
            for n in 0..self.capacity() {
                let Some(slot) = self.slot_or_make(n) else {
                    break;
                };
                if let Some(mut s) = slot.try_write() {
                    if s.is_none() {
                        *s = Some(entry);
                        if let Some(e) = index.get_mut(&key) {
                            *e = n as u32;
                        }
                        return Ok(slot);
                    }
                }
            }
            core::hint::spin_loop();
        }
    }

    /// Takes the entry of number `key` out, waiting for any post or poll using it.
    pub(crate) fn remove(&self, key: u32) -> Option<V> {
        let n = self.index.write().remove(&key)?;
        self.slot(n as usize)?.write().take()
    }

    /// The slot of number `key`'s entry.
    pub(crate) fn find(&self, key: u32) -> Option<&TableSlot<V>> {
        let n = *self.index.read().get(&key)?;
        self.slot(n as usize)
    }

    /// Runs `f` on every entry, each under its slot's read lock.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&V)) {
        for n in 0..self.capacity() {
            let Some(slot) = self.slot(n) else { break };
            if let Some(v) = slot.read().as_ref() {
                f(v);
            }
        }
    }
}

/// The slot `last` names for number `key`, locked, or, when `last` names another number, that
/// number's slot through the index (and `last` remembers it). A cached slot may have been
/// emptied or given to another object since: the caller checks with [`holds`] and, if the
/// entry is not `key`'s, asks [`relock`] (what that returns always holds `key`'s entry).
/// `None` for a number without an entry. (The check is left to the caller: inside this
/// function it cost the poll's loop four instructions a CQE in registers.)
#[inline(always)]
pub(crate) fn lock_cached<'d, V: Keyed, const N: usize>(
    table: &'d SlotTable<V, N>,
    last: &mut LastSlot<'d, V>,
    key: u32,
) -> Option<SlotGuard<'d, V>> {
    match *last {
        Some((k, slot)) if k == key => Some(slot.read()),
        _ => relock(table, last, key),
    }
}

/// Whether `guard` holds number `key`'s entry.
#[inline(always)]
pub(crate) fn holds<V: Keyed>(guard: &SlotGuard<'_, V>, key: u32) -> bool {
    guard.as_ref().is_some_and(|v| v.key() == key)
}

/// Number `key`'s slot, locked, holding `key`'s entry: [`lock_cached`], then [`relock`] when
/// the cached slot changed hands. `None` for a number without an entry. Off the poll's loop
/// (which writes the same steps out, see [`lock_cached`]).
pub(crate) fn lock_current<'d, V: Keyed, const N: usize>(
    table: &'d SlotTable<V, N>,
    last: &mut LastSlot<'d, V>,
    key: u32,
) -> Option<SlotGuard<'d, V>> {
    let g = lock_cached(table, last, key)?;
    if holds(&g, key) {
        return Some(g);
    }
    drop(g);
    relock(table, last, key)
}

/// Number `key`'s entry through the index, locked (and `last` remembers its slot): out of the
/// poll's loop.
#[cold]
#[inline(never)]
pub(crate) fn relock<'d, V: Keyed, const N: usize>(
    table: &'d SlotTable<V, N>,
    last: &mut LastSlot<'d, V>,
    key: u32,
) -> Option<SlotGuard<'d, V>> {
    let slot = table.find(key)?;
    *last = Some((key, slot));
    let g = slot.read();
    // Between the index and the lock, the object may have gone.
    holds(&g, key).then_some(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct E(u32);

    impl Keyed for E {
        fn key(&self) -> u32 {
            self.0
        }
    }

    type T = SlotTable<E, 4>;

    fn table() -> T {
        let mut t = T::new();
        t.make_slots();
        t
    }

    fn key_in(slot: &TableSlot<E>) -> Option<u32> {
        slot.read().as_ref().map(|e| e.0)
    }

    #[test]
    fn slots_are_given_found_and_taken_back() {
        let t = table();
        let a = t.insert(E(0x10)).ok().unwrap();
        let b = t.insert(E(0x11)).ok().unwrap();
        assert!(!core::ptr::eq(a, b));
        assert!(core::ptr::eq(t.find(0x10).unwrap(), a));
        assert_eq!(key_in(b), Some(0x11));
        // One entry per number.
        assert_eq!(t.insert(E(0x10)).err(), Some(E(0x10)));
        assert_eq!(t.remove(0x10), Some(E(0x10)));
        assert!(t.find(0x10).is_none() && key_in(a).is_none());
        assert!(t.remove(0x10).is_none());
        // The emptied slot is the first free one: the next entry gets it.
        let c = t.insert(E(0x12)).ok().unwrap();
        assert!(core::ptr::eq(a, c));
        let mut seen = [0u32; 2];
        let mut k = 0;
        t.for_each(|e| {
            seen[k] = e.0;
            k += 1;
        });
        assert_eq!(seen, [0x12, 0x11]);
    }

    #[test]
    fn a_full_table_hands_the_entry_back() {
        let t = table();
        // Without `alloc`: four inline slots. With it: past the first heap chunk.
        let n: u32 = if cfg!(feature = "alloc") { 300 } else { 4 };
        for q in 0..n {
            assert!(t.has_room(1));
            assert!(t.insert(E(q)).is_ok());
        }
        for q in 0..n {
            assert_eq!(t.find(q).and_then(key_in), Some(q));
        }
        if cfg!(feature = "alloc") {
            return;
        }
        assert!(!t.has_room(1));
        assert_eq!(t.insert(E(999)).err(), Some(E(999)));
        t.remove(2);
        assert!(t.insert(E(999)).is_ok());
        assert_eq!(t.find(999).and_then(key_in), Some(999));
    }

    #[test]
    fn a_table_without_its_slots_takes_nothing() {
        let t = T::new();
        assert!(!t.has_room(1) || cfg!(feature = "alloc"));
        if !cfg!(feature = "alloc") {
            assert_eq!(t.insert(E(1)).err(), Some(E(1)));
        }
    }

    /// What a poll does for each run of CQEs (`Cq::poll_run` writes the same steps out): the
    /// cached slot, checked.
    fn run_entry<'d>(t: &'d T, last: &mut LastSlot<'d, E>, key: u32) -> Option<u32> {
        let g = lock_current(t, last, key);
        g.as_ref().and_then(|g| g.as_ref()).map(|e| e.0)
    }

    #[test]
    fn a_cached_slot_is_used_only_while_it_holds_the_entry() {
        let t = table();
        let mut last = None;
        let a = t.insert(E(5)).ok().unwrap();
        assert_eq!(run_entry(&t, &mut last, 5), Some(5));
        assert!(matches!(last, Some((5, s)) if core::ptr::eq(s, a)));
        // 5 goes; 7 takes its slot, and a new 5 another one. The cache still names the old
        // slot for 5, which now holds 7: the check sees it and the index is asked again.
        t.remove(5);
        let b = t.insert(E(7)).ok().unwrap();
        assert!(core::ptr::eq(a, b));
        let c = t.insert(E(5)).ok().unwrap();
        assert!(!holds(&lock_cached(&t, &mut last, 5).unwrap(), 5));
        assert_eq!(run_entry(&t, &mut last, 5), Some(5));
        assert!(matches!(last, Some((5, s)) if core::ptr::eq(s, c)));
        // A number without an entry: nothing.
        t.remove(5);
        assert_eq!(run_entry(&t, &mut last, 5), None);
        assert_eq!(run_entry(&t, &mut last, 9), None);
        assert_eq!(run_entry(&t, &mut last, 7), Some(7));
        assert!(matches!(last, Some((7, s)) if core::ptr::eq(s, b)));
    }
}
