//! [`BareHal`]: the `Hal` of one PCI function on bare metal.

use core::ptr::NonNull;
use core::time::Duration;

use super::arena::{Arena, ArenaDma};
use super::tsc::Tsc;
use crate::{DmaBuf, DmaDomain, DmaError, Hal, Instant, Iova, RawMmio};

/// BAR0 at its physical address, DMA memory from an [`Arena`], time from the [`Tsc`].
#[derive(Debug)]
pub struct BareHal<'a> {
    bar0: RawMmio,
    arena: &'a Arena,
    tsc: Tsc,
}

impl<'a> BareHal<'a> {
    /// The `Hal` of the function whose BAR0 is `bar0_len` bytes at `bar0_addr`, with memory
    /// from `arena` and time from `tsc`. Functions sharing an arena share its domain: without
    /// an IOMMU every device sees physical memory.
    ///
    /// # Safety
    /// `bar0_addr..bar0_addr + bar0_len` is the function's BAR0, identity-mapped uncached,
    /// memory decoding and bus mastering on, used by nothing else while the `BareHal` lives.
    pub unsafe fn new(arena: &'a Arena, tsc: Tsc, bar0_addr: u64, bar0_len: usize) -> Self {
        let base = NonNull::new(bar0_addr as usize as *mut u8).unwrap_or(NonNull::dangling());
        // SAFETY: the caller's promise.
        let bar0 = unsafe { RawMmio::from_raw(base, bar0_len) };
        BareHal { bar0, arena, tsc }
    }
}

// SAFETY: BAR0 is the function's (`new`); arena runs are aligned at their CPU address, which is
// their device address, zeroed, and carry the arena's domain, which is this HAL's; the TSC of the one CPU the driver
// runs on does not go back.
unsafe impl<'a> Hal for BareHal<'a> {
    type Mmio = RawMmio;
    type Dma = ArenaDma<'a>;

    fn bar0(&self) -> &RawMmio {
        &self.bar0
    }

    fn dma_alloc(&self, len: usize, align: usize) -> Result<DmaBuf<ArenaDma<'a>>, DmaError> {
        self.arena.alloc(len, align)
    }

    fn dma_domain(&self) -> DmaDomain {
        self.arena.domain()
    }

    fn now(&self) -> Instant {
        Instant(self.tsc.now_ns())
    }

    fn delay(&self, d: Duration) {
        self.tsc
            .delay_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    fn dma_by_iova(&self) -> bool {
        true
    }

    fn dma_read(&self, iova: Iova, dst: &mut [u8]) -> Result<(), DmaError> {
        self.arena.read(iova, dst)
    }

    fn dma_write(&self, iova: Iova, src: &[u8]) -> Result<(), DmaError> {
        self.arena.write(iova, src)
    }
}
