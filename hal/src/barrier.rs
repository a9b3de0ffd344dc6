//! Memory barriers with the meaning Linux gives them (`dma_wmb`, `wmb`, `dma_rmb`, `rmb`), used
//! in the orders mlx5-reference 02 §6 and 04 §4 describe.

use core::sync::atomic::{compiler_fence, Ordering};

/// Orders CPU writes to DMA memory before later CPU writes to DMA memory (e.g. a WQE before
/// its doorbell record). On x86 stores are already ordered, so this only stops the compiler.
#[inline(always)]
pub fn dma_wmb() {
    // Under Miri a real fence: x86's ordering of stores is not Rust's memory model, and the
    // model device on another thread is checked against the model's rules.
    #[cfg(all(any(target_arch = "x86_64", target_arch = "x86"), not(miri)))]
    compiler_fence(Ordering::Release);
    #[cfg(any(not(any(target_arch = "x86_64", target_arch = "x86")), miri))]
    core::sync::atomic::fence(Ordering::Release);
}

/// Orders every earlier write (DMA memory included) before a later MMIO write, such as a
/// doorbell. x86: `sfence`, which also drains write-combining buffers.
#[inline(always)]
pub fn wmb() {
    // x86-64: `sfence` alone, as Linux's `wmb()`; the compiler fence keeps the compiler from
    // moving memory accesses across it (an atomic fence here compiled to a locked `or` on the
    // stack, a full barrier of tens of cycles on every doorbell). Elsewhere, and under Miri
    // (which runs no assembly and checks the ordering by it), an atomic fence.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        // SAFETY: `sfence` has no operands and only orders stores; SSE is baseline on x86_64.
        unsafe { core::arch::asm!("sfence", options(nostack, preserves_flags)) };
        compiler_fence(Ordering::SeqCst);
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    core::sync::atomic::fence(Ordering::SeqCst);
}

/// Orders a read of a DMA ownership bit before reads of the rest of the entry it guards.
#[inline(always)]
pub fn dma_rmb() {
    // Under Miri a real fence, as in `dma_wmb`.
    #[cfg(all(any(target_arch = "x86_64", target_arch = "x86"), not(miri)))]
    compiler_fence(Ordering::Acquire);
    #[cfg(any(not(any(target_arch = "x86_64", target_arch = "x86")), miri))]
    core::sync::atomic::fence(Ordering::Acquire);
}

/// Orders an MMIO read before later reads. x86: `lfence`.
#[inline(always)]
pub fn rmb() {
    // As `wmb`: `lfence` alone on x86-64 (Linux's `rmb()`), an atomic fence elsewhere.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        // SAFETY: `lfence` has no operands and only orders loads.
        unsafe { core::arch::asm!("lfence", options(nostack, preserves_flags)) };
        compiler_fence(Ordering::SeqCst);
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    core::sync::atomic::fence(Ordering::SeqCst);
}
