//! Rings of fixed-size slots inside a [`SharedDma`] — work queues, completion queues and the
//! driver's per-queue books: the ring is bounds-checked once when the view is made, then every
//! slot index is masked into it, so the data path loads and stores with no check left
//! (offsets inside a slot are constants the compiler verifies against the slot size).

use core::marker::PhantomData;
use core::ptr::NonNull;

use crate::dma::{DmaError, DmaMemory, SharedDma, Word};

/// A view of `count` slots of `SIZE` bytes, `count` a power of two, inside a [`SharedDma`].
/// Accesses are single atomic loads and stores and multi-byte values big-endian, as with
/// [`SharedDma`].
#[derive(Clone, Copy)]
pub struct Slots<'a, const SIZE: usize> {
    base: NonNull<u8>,
    mask: usize,
    _dma: PhantomData<&'a ()>,
}

impl<M: DmaMemory> SharedDma<M> {
    /// A view of `count` slots of `SIZE` bytes starting at byte `off`.
    ///
    /// # Errors
    /// [`DmaError::OutOfBounds`] when the slots do not fit in the region,
    /// [`DmaError::BadAlignment`] when `count` is not a power of two, `SIZE` is not a multiple
    /// of 8 or the first slot is not 8-byte aligned.
    pub fn slots<const SIZE: usize>(
        &self,
        off: usize,
        count: usize,
    ) -> Result<Slots<'_, SIZE>, DmaError> {
        let bytes = count.checked_mul(SIZE).ok_or(DmaError::OutOfBounds {
            offset: off,
            len: usize::MAX,
            region: self.len(),
        })?;
        let base = self.span_ptr(off, bytes)?;
        if !count.is_power_of_two() || SIZE == 0 || SIZE % 8 != 0 || base.as_ptr() as usize % 8 != 0
        {
            return Err(DmaError::BadAlignment { align: SIZE });
        }
        Ok(Slots {
            base,
            mask: count - 1,
            _dma: PhantomData,
        })
    }

    /// [`SharedDma::slots`] of a region borrowed exclusively: the view may also copy with plain
    /// stores ([`SlotsMut::copy_in`]).
    ///
    /// # Errors
    /// As [`SharedDma::slots`].
    pub fn slots_mut<const SIZE: usize>(
        &mut self,
        off: usize,
        count: usize,
    ) -> Result<SlotsMut<'_, SIZE>, DmaError> {
        Ok(SlotsMut {
            slots: self.slots(off, count)?,
        })
    }
}

/// Where a ring of `count` slots of `SIZE` bytes lies in one [`SharedDma`], checked once
/// ([`SharedDma::ring_shape`]). A view of it ([`SharedDma::slots_of`]) is then made with no
/// check but that the region is still one at the address and of the length it was checked
/// against — what makes the bounds and alignment hold — so a queue that keeps its rings'
/// shapes pays two comparisons per call for its views, not the whole check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingShape<const SIZE: usize> {
    /// Address and length of the region it was checked against.
    region: usize,
    len: usize,
    /// Byte offset of the first slot, and `count - 1`.
    off: usize,
    mask: usize,
}

impl<const SIZE: usize> RingShape<SIZE> {
    /// Number of slots.
    pub fn count(&self) -> usize {
        self.mask + 1
    }

    /// Byte offset of the first slot in its region.
    pub fn offset(&self) -> usize {
        self.off
    }
}

impl<M: DmaMemory> SharedDma<M> {
    /// The shape of `count` slots of `SIZE` bytes from byte `off`, checked as
    /// [`SharedDma::slots`] checks a view.
    ///
    /// # Errors
    /// As [`SharedDma::slots`].
    pub fn ring_shape<const SIZE: usize>(
        &self,
        off: usize,
        count: usize,
    ) -> Result<RingShape<SIZE>, DmaError> {
        self.slots::<SIZE>(off, count)?;
        Ok(RingShape {
            region: self.region_ptr().as_ptr() as usize,
            len: self.len(),
            off,
            mask: count - 1,
        })
    }

    /// The view of a ring `shape` describes; `None` unless this region is at the address and
    /// of the length the shape was checked against.
    #[inline(always)]
    pub fn slots_of<const SIZE: usize>(&self, shape: &RingShape<SIZE>) -> Option<Slots<'_, SIZE>> {
        let region = self.region_ptr();
        if region.as_ptr() as usize != shape.region || self.len() != shape.len {
            return None;
        }
        // SAFETY: `ring_shape` checked that `off + count * SIZE` fits in a region of this
        // length and that `region + off` is 8-byte aligned, for a region at this address.
        let base = unsafe { region.add(shape.off) };
        Some(Slots {
            base,
            mask: shape.mask,
            _dma: PhantomData,
        })
    }

    /// [`SharedDma::slots_of`] of a region borrowed exclusively, as [`SharedDma::slots_mut`].
    #[inline(always)]
    pub fn slots_mut_of<const SIZE: usize>(
        &mut self,
        shape: &RingShape<SIZE>,
    ) -> Option<SlotsMut<'_, SIZE>> {
        Some(SlotsMut {
            slots: self.slots_of(shape)?,
        })
    }
}

impl<'a, const SIZE: usize> Slots<'a, SIZE> {
    /// Number of slots.
    pub fn count(&self) -> usize {
        self.mask + 1
    }

    /// Slot `i` modulo the ring size.
    #[inline(always)]
    pub fn slot(&self, i: usize) -> Slot<'a, SIZE> {
        // SAFETY: (i & mask) < count, so the slot lies inside the span checked by `slots`.
        let p = unsafe { self.base.add((i & self.mask) * SIZE) };
        Slot {
            p,
            _dma: PhantomData,
        }
    }
}

/// A [`Slots`] view of a region borrowed exclusively (`&mut SharedDma`): besides everything a
/// shared view does, it may copy with plain stores ([`SlotsMut::copy_in`]), since no other
/// thread can reach the region while it lives.
pub struct SlotsMut<'a, const SIZE: usize> {
    slots: Slots<'a, SIZE>,
}

impl<'a, const SIZE: usize> core::ops::Deref for SlotsMut<'a, SIZE> {
    type Target = Slots<'a, SIZE>;

    fn deref(&self) -> &Slots<'a, SIZE> {
        &self.slots
    }
}

impl<const SIZE: usize> SlotsMut<'_, SIZE> {
    /// Copies `src` from byte `off` of slot `i` on, into the following slots, wrapping at the
    /// end of the ring — rdma-core's `memcpy` of inline data, which it likewise splits at the
    /// end of the queue.
    ///
    /// The stores are plain, not atomic, so they move up to 16 bytes each (overlapping ones
    /// for the last bytes). Bytes past `src` are left as they were. They are sound because the
    /// view borrows its region exclusively (`SharedDma::slots_mut`): no other thread can reach
    /// these bytes meanwhile. The device sees them once the caller's write barrier and
    /// doorbell publish them — so this is for rings the device reads only when told (a send
    /// queue past its last doorbell), never for one it writes.
    ///
    /// # Panics
    /// When `off` is not inside the slot or `src` is longer than the ring.
    #[inline(always)]
    pub fn copy_in(&self, i: usize, off: usize, src: &[u8]) {
        let (base, mask) = (self.slots.base, self.slots.mask);
        let ring = (mask + 1) * SIZE;
        assert!(off < SIZE && src.len() <= ring);
        let start = (i & mask) * SIZE + off;
        let room = ring - start;
        // SAFETY: start + src.len() <= ring in the first branch; in the second, the first part
        // ends at the ring's end and the rest, src.len() - room <= start bytes (src fits in
        // the ring), starts at its beginning: all inside the span checked by `slots`. `src`
        // is a shared borrow of other memory, so no span overlaps it. No other thread
        // reaches the bytes meanwhile (the region is borrowed exclusively), so plain stores
        // race with nothing.
        unsafe {
            if src.len() <= room {
                copy_chunks(base.as_ptr().add(start), src);
            } else {
                let (first, rest) = src.split_at(room);
                copy_chunks(base.as_ptr().add(start), first);
                copy_chunks(base.as_ptr(), rest);
            }
        }
    }
}

/// Copies `src` to `dst` in 16-byte moves: 32 bytes per step while more than 64 are left,
/// then the last up to 64 in four (or two) moves that may overlap, instead of a byte loop; 8-
/// and 4-byte moves likewise for shorter runs. Inline data of up to 64 bytes takes no loop.
///
/// # Safety
/// `dst..dst + src.len()` is valid for writes and does not overlap `src`.
#[inline(always)]
unsafe fn copy_chunks(dst: *mut u8, src: &[u8]) {
    #[inline(always)]
    unsafe fn mv<const N: usize>(dst: *mut u8, src: *const u8, at: usize) {
        // SAFETY: the caller's, for N bytes from `at` at each pointer.
        unsafe { core::ptr::copy_nonoverlapping(src.add(at), dst.add(at), N) }
    }
    let (mut d, mut s, mut n) = (dst, src.as_ptr(), src.len());
    // SAFETY: every move lies inside the `n` bytes left at `s` and `d`, which stay inside
    // `src` and `dst`.
    unsafe {
        while n > 64 {
            mv::<16>(d, s, 0);
            mv::<16>(d, s, 16);
            (d, s, n) = (d.add(32), s.add(32), n - 32);
        }
        if n > 32 {
            mv::<16>(d, s, 0);
            mv::<16>(d, s, 16);
            mv::<16>(d, s, n - 32);
            mv::<16>(d, s, n - 16);
        } else if n >= 16 {
            mv::<16>(d, s, 0);
            mv::<16>(d, s, n - 16);
        } else if n >= 8 {
            mv::<8>(d, s, 0);
            mv::<8>(d, s, n - 8);
        } else if n >= 4 {
            mv::<4>(d, s, 0);
            mv::<4>(d, s, n - 4);
        } else {
            for k in 0..n {
                d.add(k).write(*s.add(k));
            }
        }
    }
}

impl<'a, const SIZE: usize> Slots<'a, SIZE> {
    /// Stores 16-byte units, each as two big-endian `u64`s, from byte `off` of slot `i` on,
    /// into the following slots, wrapping at the end of the ring.
    ///
    /// # Panics
    /// When `off` is not a multiple of 16 inside the slot, `SIZE` is not a multiple of 16, or
    /// the units are more than the ring holds.
    #[inline(always)]
    pub fn write_be_units<I>(&self, i: usize, off: usize, units: I)
    where
        I: ExactSizeIterator<Item = (u64, u64)>,
    {
        let ring = (self.mask + 1) * SIZE;
        assert!(SIZE % 16 == 0 && off % 16 == 0 && off < SIZE && units.len() * 16 <= ring);
        let mut p = (i & self.mask) * SIZE + off;
        for (hi, lo) in units {
            // SAFETY: p + 16 <= ring bytes: p is a multiple of 16 below `ring` (it restarts at
            // 0 when it reaches the end) and the ring is a multiple of 16; aligned because
            // slots are; atomic, as every access to shared DMA memory.
            unsafe {
                let w = self.base.as_ptr().add(p);
                u64::store(w, hi.to_be());
                u64::store(w.add(8), lo.to_be());
            }
            p += 16;
            if p == ring {
                p = 0;
            }
        }
    }
}

/// Whether `len` bytes at `off` lie inside `size` bytes. Written so that nothing can
/// overflow: `off + len <= size` wraps for an `off` near `usize::MAX` when overflow checks
/// are off (release builds) and would let the access land before the slot.
#[inline(always)]
const fn fits(off: usize, len: usize, size: usize) -> bool {
    len <= size && off <= size - len
}

/// One slot of a [`Slots`] ring. Offsets are checked against `SIZE` with assertions that
/// constant offsets turn into nothing.
#[derive(Clone, Copy)]
pub struct Slot<'a, const SIZE: usize> {
    p: NonNull<u8>,
    _dma: PhantomData<&'a ()>,
}

macro_rules! slot_accessors {
    ($($read:ident $write:ident: $t:ty;)*) => {$(
        #[doc = concat!("Reads the big-endian `", stringify!($t), "` at `off` (one atomic load).")]
        ///
        /// # Panics
        /// When `off` is misaligned for the type or the value does not fit in the slot.
        #[inline(always)]
        pub fn $read(&self, off: usize) -> $t {
            assert!(off % size_of::<$t>() == 0 && fits(off, size_of::<$t>(), SIZE));
            // SAFETY: inside the slot (asserted) and aligned (slots are 8-byte aligned);
            // atomic, so the device or another thread may access the word meanwhile.
            <$t>::from_be(unsafe { <$t as Word>::load(self.p.as_ptr().add(off)) })
        }

        #[doc = concat!("Writes `v` as a big-endian `", stringify!($t), "` at `off` (one atomic store).")]
        ///
        /// # Panics
        /// When `off` is misaligned for the type or the value does not fit in the slot.
        #[inline(always)]
        pub fn $write(&self, off: usize, v: $t) {
            assert!(off % size_of::<$t>() == 0 && fits(off, size_of::<$t>(), SIZE));
            // SAFETY: as in the read accessor.
            unsafe { <$t as Word>::store(self.p.as_ptr().add(off), v.to_be()) }
        }
    )*};
}

impl<const SIZE: usize> Slot<'_, SIZE> {
    slot_accessors! {
        read8 write8: u8;
        read16 write16: u16;
        read32 write32: u32;
        read64 write64: u64;
    }

    /// Reads the `u16` in the CPU's byte order at `off` (volatile); see
    /// [`write_ne16`](Self::write_ne16).
    ///
    /// # Panics
    /// When `off` is not a multiple of 2 inside the slot.
    #[inline(always)]
    pub fn read_ne16(&self, off: usize) -> u16 {
        self.read16(off).to_be()
    }

    /// Reads the `u64` in the CPU's byte order at `off` (volatile); see
    /// [`write_ne16`](Self::write_ne16).
    ///
    /// # Panics
    /// When `off` is not a multiple of 8 inside the slot.
    #[inline(always)]
    pub fn read_ne64(&self, off: usize) -> u64 {
        self.read64(off).to_be()
    }

    /// Writes `v` in the CPU's byte order at `off` (volatile): for memory the device never
    /// reads, such as the driver's books (read back with
    /// [`SharedDma::read_ne16`](crate::dma::SharedDma::read_ne16)).
    ///
    /// # Panics
    /// When `off` is not a multiple of 2 inside the slot.
    #[inline(always)]
    pub fn write_ne16(&self, off: usize, v: u16) {
        self.write16(off, v.to_be());
    }

    /// Writes `v` in the CPU's byte order at `off` (volatile); see
    /// [`write_ne16`](Self::write_ne16).
    ///
    /// # Panics
    /// When `off` is not a multiple of 8 inside the slot.
    #[inline(always)]
    pub fn write_ne64(&self, off: usize, v: u64) {
        self.write64(off, v.to_be());
    }

    /// Writes 8 bytes in order at `off` (one atomic store).
    ///
    /// # Panics
    /// When `off` is not a multiple of 8 inside the slot.
    #[inline(always)]
    pub fn write_bytes8(&self, off: usize, bytes: [u8; 8]) {
        assert!(off % 8 == 0 && fits(off, 8, SIZE));
        // SAFETY: inside the slot and aligned (asserted; slots are 8-byte aligned); atomic.
        unsafe { u64::store(self.p.as_ptr().add(off), u64::from_ne_bytes(bytes)) }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;
    use crate::dma::tests::Heap as HeapMem;
    use crate::dma::DmaBuf;

    fn shared(len: usize) -> SharedDma<HeapMem> {
        DmaBuf::new(HeapMem::new(len)).share()
    }

    fn bytes(d: &SharedDma<HeapMem>) -> Vec<u8> {
        let mut v = std::vec![0u8; d.len()];
        d.read_bytes(0, &mut v).unwrap();
        v
    }

    #[test]
    fn a_shape_makes_views_of_its_own_region_only() {
        let d = shared(256);
        assert!(d.ring_shape::<64>(0, 8).is_err());
        assert!(d.ring_shape::<16>(8, 3).is_err());
        let shape = d.ring_shape::<16>(64, 8).unwrap();
        assert_eq!(shape.count(), 8);
        let v = d.slots_of(&shape).unwrap();
        v.slot(9).write64(0, 0x0102_0304_0506_0708);
        assert_eq!(d.read64(64 + 16), 0x0102_0304_0506_0708);
        assert_eq!(
            d.slots::<16>(64, 8).unwrap().slot(1).read64(0),
            0x0102_0304_0506_0708
        );
        // Another region of the same length, or a longer one: refused.
        assert!(shared(256).slots_of(&shape).is_none());
        assert!(shared(4096).slots_of(&shape).is_none());
        let mut e = shared(256);
        assert!(e.slots_mut_of(&shape).is_none());
        let mut d = d;
        assert!(d.slots_mut_of(&shape).is_some());
    }

    #[test]
    fn views_are_refused_when_they_do_not_fit_or_are_not_a_power_of_two() {
        let d = shared(256);
        assert!(d.slots::<64>(0, 4).is_ok());
        assert!(matches!(
            d.slots::<64>(64, 4),
            Err(DmaError::OutOfBounds { .. })
        ));
        assert!(matches!(
            d.slots::<64>(0, 3),
            Err(DmaError::BadAlignment { .. })
        ));
        assert!(matches!(
            d.slots::<16>(4, 2),
            Err(DmaError::BadAlignment { .. })
        ));
        assert!(matches!(
            d.slots::<64>(0, usize::MAX / 2),
            Err(DmaError::OutOfBounds { .. })
        ));
    }

    // An offset near usize::MAX once passed the `off + 8 <= SIZE` check by wrapping (release
    // builds) and wrote the 8 bytes before the slot; with overflow checks it panicked in the
    // addition, not in the bounds check. Either way the check itself must refuse it.
    #[test]
    #[should_panic(expected = "assertion failed")]
    fn an_offset_near_usize_max_is_refused_by_the_bounds_check() {
        let d = shared(128);
        let s = d.slots::<64>(64, 1).unwrap();
        s.slot(0).write64(usize::MAX - 7, 0x1122_3344_5566_7788);
    }

    #[test]
    #[should_panic(expected = "assertion failed")]
    fn a_read_near_usize_max_is_refused_by_the_bounds_check() {
        let d = shared(128);
        let s = d.slots::<64>(64, 1).unwrap();
        let _ = s.slot(0).read32(usize::MAX - 3);
    }

    #[test]
    #[should_panic(expected = "assertion failed")]
    fn eight_bytes_near_usize_max_are_refused_by_the_bounds_check() {
        let d = shared(128);
        let s = d.slots::<64>(64, 1).unwrap();
        s.slot(0).write_bytes8(usize::MAX - 7, [0; 8]);
    }

    #[test]
    fn the_bounds_check_cannot_overflow() {
        assert!(fits(56, 8, 64));
        assert!(!fits(57, 8, 64));
        assert!(!fits(usize::MAX - 7, 8, 64));
        assert!(!fits(0, 8, 4), "a value larger than the slot");
        assert!(fits(0, 0, 0));
    }

    #[test]
    fn slot_indices_wrap_and_values_are_big_endian() {
        let d = shared(192);
        let s = d.slots::<64>(64, 2).unwrap();
        s.slot(3).write64(8, 0x0102_0304_0506_0708);
        s.slot(0).write32(60, 0xa0b0_c0d0);
        s.slot(2).write16(0, 0x1122);
        s.slot(1).write8(63, 0x77);
        let b = bytes(&d);
        assert_eq!(&b[136..144], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[124..128], &[0xa0, 0xb0, 0xc0, 0xd0]);
        assert_eq!(&b[64..66], &[0x11, 0x22]);
        assert_eq!(b[191], 0x77);
        assert_eq!(s.slot(1).read64(8), 0x0102_0304_0506_0708);
        assert_eq!(s.slot(2).read32(60), 0xa0b0_c0d0);
        assert_eq!(s.slot(0).read16(0), 0x1122);
        assert_eq!(s.slot(3).read8(63), 0x77);
        assert!(b[..64].iter().all(|&x| x == 0));
    }

    #[test]
    fn native_endian_values_keep_the_cpu_byte_order() {
        let d = shared(64);
        let s = d.slots::<16>(0, 4).unwrap();
        s.slot(5).write_ne64(0, 0x0102_0304_0506_0708);
        s.slot(2).write_ne16(8, 0x1122);
        let b = bytes(&d);
        assert_eq!(&b[16..24], &0x0102_0304_0506_0708u64.to_ne_bytes());
        assert_eq!(&b[40..42], &0x1122u16.to_ne_bytes());
        assert_eq!(d.read_ne64(16), 0x0102_0304_0506_0708);
        assert_eq!(d.read_ne16(40), 0x1122);
        assert_eq!(s.slot(1).read_ne64(0), 0x0102_0304_0506_0708);
        assert_eq!(s.slot(6).read_ne16(8), 0x1122);
    }

    #[test]
    fn copies_continue_into_the_next_slots_wrap_at_the_end_and_touch_nothing_else() {
        // Every length a 128-byte ring holds, from every 8-byte offset of every slot: the
        // bytes land at (start + k) mod 128 and every other byte keeps its marker.
        let src: Vec<u8> = (1..=128u8).collect();
        for len in 0..=128 {
            for start in (0..128).step_by(8) {
                let mut d = shared(128);
                d.slots_mut::<8>(0, 16).unwrap().copy_in(0, 0, &[0xee; 128]);
                d.slots_mut::<32>(0, 4)
                    .unwrap()
                    .copy_in(start / 32 + 4, start % 32, &src[..len]);
                let b = bytes(&d);
                for (k, &x) in b.iter().enumerate() {
                    let rel = (k + 128 - start) % 128;
                    let want = if rel < len { src[rel] } else { 0xee };
                    assert_eq!(x, want, "len {len} start {start} byte {k}");
                }
            }
        }
    }

    #[test]
    fn units_are_big_endian_pairs_and_wrap() {
        let d = shared(64);
        let s = d.slots::<32>(0, 2).unwrap();
        s.write_be_units(1, 16, [(1u64, 2u64), (3, 4)].into_iter());
        assert_eq!(s.slot(1).read64(16), 1);
        assert_eq!(s.slot(1).read64(24), 2);
        assert_eq!(s.slot(0).read64(0), 3);
        assert_eq!(s.slot(0).read64(8), 4);
        assert_eq!(s.slot(0).read64(16), 0);
    }

    #[test]
    #[should_panic]
    fn more_bytes_than_the_ring_holds_panic() {
        let mut d = shared(64);
        let s = d.slots_mut::<32>(0, 2).unwrap();
        s.copy_in(0, 0, &[0u8; 65]);
    }
}
