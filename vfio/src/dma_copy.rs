//! Byte copies into and out of DMA memory by CPU address, for [`Hal::dma_read`] and
//! [`Hal::dma_write`](bareverbs_hal::Hal::dma_write): atomic bytes, as every access to memory
//! the device shares (hal `SharedDma`), ordered as a device orders its DMA (a read completes
//! before what follows it, a write comes after what precedes it).
//!
//! [`Hal::dma_read`]: bareverbs_hal::Hal::dma_read

use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU8, Ordering};

/// Copies `dst.len()` bytes from `src`.
///
/// # Safety
/// `src..src + dst.len()` is mapped DMA memory, only ever accessed atomically while shared.
pub(crate) unsafe fn read(src: NonNull<u8>, dst: &mut [u8]) {
    for (i, d) in dst.iter_mut().enumerate() {
        // SAFETY: in bounds and atomic (the caller's promise).
        *d = unsafe { AtomicU8::from_ptr(src.as_ptr().add(i)) }.load(Ordering::Relaxed);
    }
    fence(Ordering::Acquire);
}

/// Copies `src` to `dst`.
///
/// # Safety
/// `dst..dst + src.len()` is mapped DMA memory, only ever accessed atomically while shared.
pub(crate) unsafe fn write(dst: NonNull<u8>, src: &[u8]) {
    fence(Ordering::Release);
    for (i, s) in src.iter().enumerate() {
        // SAFETY: in bounds and atomic (the caller's promise).
        unsafe { AtomicU8::from_ptr(dst.as_ptr().add(i)) }.store(*s, Ordering::Relaxed);
    }
}
