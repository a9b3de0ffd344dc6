//! The one bit codec behind every firmware layout: fields are (absolute MSB-first bit offset,
//! width) pairs inside big-endian dwords, exactly as `MLX5_SET`/`MLX5_GET` in Linux
//! `include/linux/mlx5/device.h` treat the `mlx5_ifc_*_bits` structs (mlx5-reference 00).
//!
//! Layouts are declared with [`ifc!`](macro@crate::ifc), which checks them at compile time. Access
//! goes through [`View`] and [`ViewMut`], whose constructors check the buffer length once, so
//! every field access after that is in bounds by construction.

use core::fmt;
use core::marker::PhantomData;

/// A firmware structure declared with `ifc!`.
pub trait Layout: 'static {
    /// The mlx5_ifc name (without `mlx5_ifc_` and `_bits`).
    const NAME: &'static str;
    /// Size in bits of the fixed part (a flexible array, if any, starts here).
    const BITS: usize;
    /// Size in bytes of the fixed part.
    const BYTES: usize = Self::BITS / 8;
}

/// A buffer too short for the layout laid over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TooShort {
    /// Name of the layout.
    pub layout: &'static str,
    /// Bytes needed.
    pub need: usize,
    /// Bytes available.
    pub got: usize,
}

impl fmt::Display for TooShort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} needs {} bytes, buffer has {}",
            self.layout, self.need, self.got
        )
    }
}

impl core::error::Error for TooShort {}

#[cfg(feature = "defmt")]
impl defmt::Format for TooShort {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(
            f,
            "{=str} needs {=usize} bytes, got {=usize}",
            self.layout,
            self.need,
            self.got
        )
    }
}

/// An integer field of layout `L`: `width` bits (1–32, or 64 dword-aligned) at `bit`.
pub struct Field<L> {
    /// PRM / mlx5_ifc field name.
    pub name: &'static str,
    /// Absolute MSB-first bit offset.
    pub bit: usize,
    /// Width in bits.
    pub width: usize,
    _l: PhantomData<fn() -> L>,
}

/// A nested structure `S` inside layout `L` (e.g. `eqc` inside `create_eq_in`).
pub struct Sub<L, S> {
    /// PRM / mlx5_ifc field name.
    pub name: &'static str,
    /// Absolute bit offset (dword aligned).
    pub bit: usize,
    _l: PhantomData<fn() -> (L, S)>,
}

/// A fixed-size byte string inside layout `L` (e.g. `driver_version[64]`).
pub struct Bytes<L> {
    /// PRM / mlx5_ifc field name.
    pub name: &'static str,
    /// Absolute bit offset (byte aligned).
    pub bit: usize,
    /// Length in bytes.
    pub len: usize,
    _l: PhantomData<fn() -> L>,
}

/// A flexible array of big-endian `elem_bits`-bit entries at the end of layout `L`
/// (e.g. `pas[]`): as many entries as the buffer holds.
pub struct Array<L> {
    /// PRM / mlx5_ifc field name.
    pub name: &'static str,
    /// Absolute bit offset of entry 0 (the end of the fixed part).
    pub bit: usize,
    /// Width of one entry: 32 or 64.
    pub elem_bits: usize,
    _l: PhantomData<fn() -> L>,
}

macro_rules! copy_clone {
    ($($t:ident<$($p:ident),*>),*) => {$(
        impl<$($p),*> Clone for $t<$($p),*> { fn clone(&self) -> Self { *self } }
        impl<$($p),*> Copy for $t<$($p),*> {}
        impl<$($p),*> fmt::Debug for $t<$($p),*> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}@{:#x}", self.name, self.bit)
            }
        }
    )*};
}
copy_clone!(Field<L>, Sub<L, S>, Bytes<L>, Array<L>);

impl<L> Field<L> {
    /// A field named `name`, `width` bits at `bit`.
    pub const fn new(name: &'static str, bit: usize, width: usize) -> Self {
        Field {
            name,
            bit,
            width,
            _l: PhantomData,
        }
    }

    /// The largest value the field holds.
    pub const fn max(&self) -> u64 {
        if self.width >= 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        }
    }
}

impl<L, S> Sub<L, S> {
    /// A nested structure named `name` at `bit`.
    pub const fn new(name: &'static str, bit: usize) -> Self {
        Sub {
            name,
            bit,
            _l: PhantomData,
        }
    }
}

impl<L> Bytes<L> {
    /// A byte string named `name`, `len` bytes at `bit`.
    pub const fn new(name: &'static str, bit: usize, len: usize) -> Self {
        Bytes {
            name,
            bit,
            len,
            _l: PhantomData,
        }
    }
}

impl<L> Array<L> {
    /// A flexible array named `name` of `elem_bits`-bit entries from `bit`.
    pub const fn new(name: &'static str, bit: usize, elem_bits: usize) -> Self {
        Array {
            name,
            bit,
            elem_bits,
            _l: PhantomData,
        }
    }
}

#[inline]
fn be32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

/// Reads `width` bits at MSB-first `bit` of `buf` (`MLX5_GET` / `MLX5_GET64`).
///
/// # Panics
/// When the field lies outside `buf`; layouts are checked so that views never do this.
#[inline]
pub fn get_bits(buf: &[u8], bit: usize, width: usize) -> u64 {
    if width == 64 {
        let at = bit / 8;
        (u64::from(be32(buf, at)) << 32) | u64::from(be32(buf, at + 4))
    } else {
        let dw = be32(buf, (bit / 32) * 4);
        let shift = 32 - width - bit % 32;
        (u64::from(dw) >> shift) & ((1u64 << width) - 1)
    }
}

/// Writes the low `width` bits of `val` at MSB-first `bit` of `buf`, keeping every other bit
/// (`MLX5_SET` / `MLX5_SET64`). Bits of `val` above `width` are dropped.
///
/// # Panics
/// When the field lies outside `buf`; layouts are checked so that views never do this.
#[inline]
pub fn set_bits(buf: &mut [u8], bit: usize, width: usize, val: u64) {
    if width == 64 {
        let at = bit / 8;
        buf[at..at + 8].copy_from_slice(&val.to_be_bytes());
    } else {
        let at = (bit / 32) * 4;
        let shift = 32 - width - bit % 32;
        let mask = (((1u64 << width) - 1) << shift) as u32;
        let old = be32(buf, at);
        let new = (old & !mask) | (((val << shift) as u32) & mask);
        buf[at..at + 4].copy_from_slice(&new.to_be_bytes());
    }
}

/// Read-only view of a buffer as layout `L`.
pub struct View<'a, L: Layout> {
    buf: &'a [u8],
    _l: PhantomData<fn() -> L>,
}

impl<L: Layout> Clone for View<'_, L> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<L: Layout> Copy for View<'_, L> {}

impl<'a, L: Layout> View<'a, L> {
    /// Views `buf` as `L`.
    ///
    /// # Errors
    /// [`TooShort`] when `buf` is shorter than `L::BYTES`.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, TooShort> {
        if buf.len() < L::BYTES {
            return Err(TooShort {
                layout: L::NAME,
                need: L::BYTES,
                got: buf.len(),
            });
        }
        Ok(View {
            buf,
            _l: PhantomData,
        })
    }

    /// The whole buffer (fixed part and any tail).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }

    /// The value of an integer field.
    pub fn get(&self, f: Field<L>) -> u64 {
        get_bits(self.buf, f.bit, f.width)
    }

    /// The value of a field of at most 32 bits.
    pub fn get32(&self, f: Field<L>) -> u32 {
        self.get(f) as u32
    }

    /// A nested structure.
    pub fn sub<S: Layout>(&self, s: Sub<L, S>) -> View<'a, S> {
        let at = s.bit / 8;
        View {
            buf: &self.buf[at..at + S::BYTES],
            _l: PhantomData,
        }
    }

    /// A byte string.
    pub fn bytes(&self, b: Bytes<L>) -> &'a [u8] {
        let at = b.bit / 8;
        &self.buf[at..at + b.len]
    }

    /// How many entries of a flexible array the buffer holds.
    pub fn array_len(&self, a: Array<L>) -> usize {
        (self.buf.len() - a.bit / 8) / (a.elem_bits / 8)
    }

    /// Entry `i` of a flexible array, or `None` past the end of the buffer.
    pub fn array(&self, a: Array<L>, i: usize) -> Option<u64> {
        (i < self.array_len(a)).then(|| get_bits(self.buf, a.bit + i * a.elem_bits, a.elem_bits))
    }
}

/// Mutable view of a buffer as layout `L`.
pub struct ViewMut<'a, L: Layout> {
    buf: &'a mut [u8],
    _l: PhantomData<fn() -> L>,
}

impl<'a, L: Layout> ViewMut<'a, L> {
    /// Views `buf` as `L`, keeping its contents.
    ///
    /// # Errors
    /// [`TooShort`] when `buf` is shorter than `L::BYTES`.
    pub fn new_checked(buf: &'a mut [u8]) -> Result<Self, TooShort> {
        if buf.len() < L::BYTES {
            return Err(TooShort {
                layout: L::NAME,
                need: L::BYTES,
                got: buf.len(),
            });
        }
        Ok(ViewMut {
            buf,
            _l: PhantomData,
        })
    }

    /// Views `buf` as `L` after zeroing all of it, so reserved bits are clear.
    ///
    /// # Errors
    /// [`TooShort`] when `buf` is shorter than `L::BYTES`.
    pub fn zeroed(buf: &'a mut [u8]) -> Result<Self, TooShort> {
        let v = Self::new_checked(buf)?;
        v.buf.fill(0);
        Ok(v)
    }

    /// A read-only view of the same bytes.
    pub fn as_view(&self) -> View<'_, L> {
        View {
            buf: self.buf,
            _l: PhantomData,
        }
    }

    /// The whole buffer.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.buf
    }

    /// The value of an integer field.
    pub fn get(&self, f: Field<L>) -> u64 {
        get_bits(self.buf, f.bit, f.width)
    }

    /// Sets an integer field; bits of `val` above the field width are dropped.
    pub fn set(&mut self, f: Field<L>, val: impl Into<u64>) -> &mut Self {
        set_bits(self.buf, f.bit, f.width, val.into());
        self
    }

    /// A nested structure, for writing.
    pub fn sub<S: Layout>(&mut self, s: Sub<L, S>) -> ViewMut<'_, S> {
        let at = s.bit / 8;
        ViewMut {
            buf: &mut self.buf[at..at + S::BYTES],
            _l: PhantomData,
        }
    }

    /// A byte string, for writing.
    pub fn bytes_mut(&mut self, b: Bytes<L>) -> &mut [u8] {
        let at = b.bit / 8;
        &mut self.buf[at..at + b.len]
    }

    /// How many entries of a flexible array the buffer holds.
    pub fn array_len(&self, a: Array<L>) -> usize {
        self.as_view().array_len(a)
    }

    /// Sets entry `i` of a flexible array.
    ///
    /// # Errors
    /// [`TooShort`] when the buffer does not reach entry `i`.
    pub fn set_array(&mut self, a: Array<L>, i: usize, val: u64) -> Result<&mut Self, TooShort> {
        let need = a.bit / 8 + (i + 1) * (a.elem_bits / 8);
        if need > self.buf.len() {
            return Err(TooShort {
                layout: L::NAME,
                need,
                got: self.buf.len(),
            });
        }
        set_bits(self.buf, a.bit + i * a.elem_bits, a.elem_bits, val);
        Ok(self)
    }
}

/// Kind tags used by the compile-time layout check.
#[doc(hidden)]
pub mod kind {
    pub const BITS: u8 = 0;
    pub const BYTES: u8 = 1;
    pub const SUB: u8 = 2;
    pub const ARRAY: u8 = 3;
}

/// Compile-time check run by `ifc!` on every layout: fields ascend without overlap, fit the
/// struct, do not straddle a dword (64-bit fields must be dword aligned), byte strings are
/// byte aligned, nested structs are dword aligned, and a flexible array comes last, exactly at
/// the end of the fixed part.
#[doc(hidden)]
pub const fn check_layout(fields: &[(usize, usize, u8)], bits: usize) {
    assert!(
        bits % 32 == 0,
        "ifc layout: size is not a whole number of dwords"
    );
    let mut end = 0;
    let mut i = 0;
    while i < fields.len() {
        let (bit, width, k) = fields[i];
        assert!(
            bit >= end,
            "ifc layout: field out of order or overlapping the previous one"
        );
        if k == kind::ARRAY {
            assert!(
                i + 1 == fields.len(),
                "ifc layout: flexible array is not the last field"
            );
            assert!(
                bit == bits,
                "ifc layout: flexible array does not start at the end"
            );
            assert!(
                width == 32 || width == 64,
                "ifc layout: array entries must be 32 or 64 bits"
            );
        } else {
            assert!(width > 0, "ifc layout: zero-width field");
            assert!(
                bit + width <= bits,
                "ifc layout: field runs past the end of the struct"
            );
        }
        if k == kind::BITS {
            if width == 64 {
                assert!(
                    bit % 32 == 0,
                    "ifc layout: 64-bit field is not dword aligned"
                );
            } else {
                assert!(
                    width <= 32,
                    "ifc layout: field wider than 32 bits but not 64"
                );
                assert!(
                    bit / 32 == (bit + width - 1) / 32,
                    "ifc layout: field straddles a dword"
                );
            }
        } else if k == kind::BYTES {
            assert!(
                bit % 8 == 0 && width % 8 == 0,
                "ifc layout: byte string not byte aligned"
            );
        } else if k == kind::SUB {
            assert!(bit % 32 == 0, "ifc layout: nested struct not dword aligned");
        }
        end = bit + width;
        i += 1;
    }
}

/// Round-trip test generated by `ifc!` for every field: on a junk-filled buffer, writing all
/// ones, zero and a pattern reads back exactly, and no bit outside the field changes.
#[doc(hidden)]
pub fn test_round_trip<L: Layout>(name: &str, bit: usize, width: usize, k: u8) {
    const MAX: usize = 8192;
    assert!(
        L::BYTES + 16 <= MAX,
        "{}: layout too large for the test buffer",
        L::NAME
    );
    let len = L::BYTES + 16;
    let mut junk = [0u8; MAX];
    for (i, b) in junk.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37).wrapping_add(11);
    }
    let (bit, width) = match k {
        kind::ARRAY => (bit, width * 2),
        _ => (bit, width),
    };
    let mut buf = junk;
    match k {
        kind::BITS => {
            let max = if width == 64 {
                u64::MAX
            } else {
                (1u64 << width) - 1
            };
            for v in [max, 0, 0x5a5a_5a5a_5a5a_5a5a & max, 1] {
                set_bits(&mut buf[..len], bit, width, v);
                assert_eq!(get_bits(&buf[..len], bit, width), v, "{}.{name}", L::NAME);
            }
        }
        kind::BYTES => {
            for b in &mut buf[bit / 8..(bit + width) / 8] {
                *b = 0xc3;
            }
        }
        kind::ARRAY => {
            let w = width / 2;
            let max = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
            set_bits(&mut buf[..len], bit + w, w, max);
            assert_eq!(
                get_bits(&buf[..len], bit + w, w),
                max,
                "{}.{name}[1]",
                L::NAME
            );
        }
        _ => return,
    }
    let (lo, hi) = match k {
        kind::ARRAY => (bit + width / 2, bit + width),
        _ => (bit, bit + width),
    };
    for i in 0..len * 8 {
        if i >= lo && i < hi {
            continue;
        }
        let (byte, mask) = (i / 8, 0x80u8 >> (i % 8));
        assert_eq!(
            buf[byte] & mask,
            junk[byte] & mask,
            "{}.{name}: bit {i:#x} outside the field changed",
            L::NAME
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_linux_example_qpc_log_rq_stride() {
        // mlx5-reference 00: qpc.log_rq_stride, bit 0x4d, width 3 -> dword 2 bits [18:16].
        let mut buf = [0u8; 16];
        set_bits(&mut buf, 0x4d, 3, 5);
        assert_eq!(buf[8..12], [0x00, 0x05, 0x00, 0x00]);
        assert_eq!(get_bits(&buf, 0x4d, 3), 5);
        set_bits(&mut buf, 0x40, 64, 0x0102_0304_0506_0708);
        assert_eq!(buf[8..16], [1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn set_drops_bits_above_the_width() {
        let mut buf = [0u8; 4];
        set_bits(&mut buf, 4, 4, 0x1f);
        assert_eq!(buf, [0x0f, 0, 0, 0]);
    }
}
