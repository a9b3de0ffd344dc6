//! BAR0 register access: big-endian 32/64-bit registers behind a trait, and the raw-pointer
//! volatile implementation used by VFIO and bare-metal backends (mlx5-reference 01 §2–3).
//!
//! Every mlx5 register is big-endian. The accessors take and return host-order values and do
//! the byte swap themselves, so a caller never sees a raw device word.

use core::fmt;
use core::ptr::NonNull;

use crate::addr::BarOffset;

/// Why a register access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum MmioError {
    /// The access does not fit inside the mapped BAR.
    OutOfBounds {
        /// First byte of the access.
        offset: usize,
        /// Width of the access in bytes.
        width: usize,
        /// Mapped length of the BAR.
        len: usize,
    },
    /// The offset is not a multiple of the access width.
    Misaligned {
        /// First byte of the access.
        offset: usize,
        /// Width of the access in bytes.
        width: usize,
    },
}

impl fmt::Display for MmioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MmioError::OutOfBounds { offset, width, len } => write!(
                f,
                "{width}-byte register access at {offset:#x} is outside the {len:#x}-byte BAR"
            ),
            MmioError::Misaligned { offset, width } => {
                write!(
                    f,
                    "{width}-byte register access at {offset:#x} is misaligned"
                )
            }
        }
    }
}

impl core::error::Error for MmioError {}

/// Checks that a `width`-byte access at `offset` fits a BAR of `len` bytes and is aligned.
///
/// # Errors
/// [`MmioError::OutOfBounds`] or [`MmioError::Misaligned`].
pub const fn check_access(offset: usize, width: usize, len: usize) -> Result<(), MmioError> {
    if offset % width != 0 {
        return Err(MmioError::Misaligned { offset, width });
    }
    match offset.checked_add(width) {
        Some(end) if end <= len => Ok(()),
        _ => Err(MmioError::OutOfBounds { offset, width, len }),
    }
}

/// Checks a run of `words` 8-byte stores from `offset` against a BAR of `len` bytes: 8-byte
/// aligned, and the whole run inside.
///
/// # Errors
/// [`MmioError::Misaligned`] or [`MmioError::OutOfBounds`].
pub const fn check_block(offset: usize, words: usize, len: usize) -> Result<(), MmioError> {
    if offset % 8 != 0 {
        return Err(MmioError::Misaligned { offset, width: 8 });
    }
    let width = words.saturating_mul(8);
    match offset.checked_add(width) {
        Some(end) if end <= len => Ok(()),
        _ => Err(MmioError::OutOfBounds { offset, width, len }),
    }
}

/// A mapped BAR whose registers are big-endian.
///
/// The plain accessors are for offsets the caller has already validated (constants of the
/// initialization segment, UAR offsets checked when the UAR was allocated). Out of bounds they
/// behave like a PCI master abort: a read returns all ones and a write is dropped, which the
/// driver's health checks treat as a lost device. Use the `try_` forms to get the error.
pub trait Mmio {
    /// Mapped length in bytes.
    fn len(&self) -> usize;

    /// True when nothing is mapped.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the big-endian 32-bit register at `off`, in host order.
    ///
    /// # Errors
    /// When the access is out of bounds or misaligned.
    fn try_read32(&self, off: BarOffset) -> Result<u32, MmioError>;

    /// Writes `val` (host order) as a big-endian 32-bit register at `off`.
    ///
    /// # Errors
    /// When the access is out of bounds or misaligned.
    fn try_write32(&self, off: BarOffset, val: u32) -> Result<(), MmioError>;

    /// Writes `val` (host order) as one big-endian 64-bit store at `off`: the byte at `off` is
    /// bits 63:56. Doorbells rely on this being a single store.
    ///
    /// # Errors
    /// When the access is out of bounds or misaligned.
    fn try_write64(&self, off: BarOffset, val: u64) -> Result<(), MmioError>;

    /// Writes `words` (host order, one big-endian 64-bit store each) at `off`, `off + 8`, …,
    /// in order: a BlueFlame copy of a WQE, whose first word rings the doorbell. The default
    /// is one [`Mmio::try_write64`] per word; a mapped BAR checks the bounds once.
    ///
    /// # Errors
    /// When any store would be out of bounds or misaligned (checked before the first).
    fn try_write64_block(&self, off: BarOffset, words: &[u64]) -> Result<(), MmioError> {
        check_block(off.0, words.len(), self.len())?;
        for (i, w) in words.iter().enumerate() {
            self.try_write64(BarOffset(off.0 + 8 * i), *w)?;
        }
        Ok(())
    }

    /// [`Mmio::try_read32`], reading all ones when the access is refused.
    fn read32(&self, off: BarOffset) -> u32 {
        self.try_read32(off).unwrap_or(u32::MAX)
    }

    /// [`Mmio::try_write32`], dropping a refused write.
    fn write32(&self, off: BarOffset, val: u32) {
        let _ = self.try_write32(off, val);
    }

    /// [`Mmio::try_write64`], dropping a refused write.
    fn write64(&self, off: BarOffset, val: u64) {
        let _ = self.try_write64(off, val);
    }
}

/// A BAR mapped into the address space: a raw pointer and a length, accessed only with
/// volatile loads and stores (never through a reference).
#[derive(Debug)]
pub struct RawMmio {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: RawMmio is a pointer to device registers; volatile accesses from any thread are what
// the device sees anyway, and no Rust reference to the memory is ever created.
unsafe impl Send for RawMmio {}
// SAFETY: as for Send; every access is a single volatile load or store.
unsafe impl Sync for RawMmio {}

impl RawMmio {
    /// Wraps a mapping of `len` bytes at `base`.
    ///
    /// # Safety
    /// `base..base + len` must be a live mapping of device memory (or memory standing in for
    /// it) that stays mapped for the life of the returned value, and `base` must be 8-byte
    /// aligned. Nothing may hold a Rust reference into that range.
    pub unsafe fn from_raw(base: NonNull<u8>, len: usize) -> Self {
        RawMmio { base, len }
    }

    /// The base pointer of the mapping.
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.base
    }
}

impl Mmio for RawMmio {
    fn len(&self) -> usize {
        self.len
    }

    fn try_read32(&self, off: BarOffset) -> Result<u32, MmioError> {
        check_access(off.0, 4, self.len)?;
        // SAFETY: in bounds and 4-byte aligned (checked above, base is 8-aligned); the mapping
        // is live for the life of self (from_raw contract).
        let raw = unsafe { self.base.as_ptr().add(off.0).cast::<u32>().read_volatile() };
        Ok(u32::from_be(raw))
    }

    fn try_write32(&self, off: BarOffset, val: u32) -> Result<(), MmioError> {
        check_access(off.0, 4, self.len)?;
        // SAFETY: as in try_read32.
        unsafe {
            self.base
                .as_ptr()
                .add(off.0)
                .cast::<u32>()
                .write_volatile(val.to_be())
        };
        Ok(())
    }

    fn try_write64(&self, off: BarOffset, val: u64) -> Result<(), MmioError> {
        check_access(off.0, 8, self.len)?;
        // SAFETY: in bounds and 8-byte aligned (checked above); the mapping is live.
        unsafe {
            self.base
                .as_ptr()
                .add(off.0)
                .cast::<u64>()
                .write_volatile(val.to_be())
        };
        Ok(())
    }

    fn try_write64_block(&self, off: BarOffset, words: &[u64]) -> Result<(), MmioError> {
        check_block(off.0, words.len(), self.len)?;
        // SAFETY: off..off + 8 * len is in bounds and 8-byte aligned (checked above); the
        // mapping is live. One volatile store per word, in order.
        let p = unsafe { self.base.as_ptr().add(off.0) }.cast::<u64>();
        for (i, w) in words.iter().enumerate() {
            // SAFETY: word i lies inside the range checked above.
            unsafe { p.add(i).write_volatile(w.to_be()) };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(align(8))]
    struct Page([u8; 64]);

    #[test]
    fn raw_mmio_is_big_endian_and_bounds_checked() {
        let mut page = Page([0; 64]);
        let base = NonNull::new(page.0.as_mut_ptr()).unwrap();
        // SAFETY: `page` outlives `bar` and is only touched through it until the end.
        let bar = unsafe { RawMmio::from_raw(base, 64) };
        bar.write32(BarOffset(4), 0x0102_0304);
        bar.write64(BarOffset(8), 0x1122_3344_5566_7788);
        assert_eq!(bar.read32(BarOffset(4)), 0x0102_0304);
        assert_eq!(
            bar.try_read32(BarOffset(62)),
            Err(MmioError::Misaligned {
                offset: 62,
                width: 4
            })
        );
        assert_eq!(
            bar.try_write64(BarOffset(64), 0),
            Err(MmioError::OutOfBounds {
                offset: 64,
                width: 8,
                len: 64
            })
        );
        assert_eq!(bar.read32(BarOffset(64)), u32::MAX);
        let _ = bar;
        assert_eq!(
            &page.0[4..16],
            &[1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]
        );
    }
}
