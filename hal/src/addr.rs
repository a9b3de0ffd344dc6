//! Typed addresses: what the device sees (`Iova`) and where a register sits in BAR0 (`BarOffset`).

use core::fmt;

/// An I/O virtual address: the address the device uses for a DMA buffer (bus address when no
/// IOMMU translates).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Iova(pub u64);

impl Iova {
    /// The address `bytes` further on, or `None` on overflow.
    pub const fn checked_add(self, bytes: u64) -> Option<Iova> {
        match self.0.checked_add(bytes) {
            Some(v) => Some(Iova(v)),
            None => None,
        }
    }

    /// True when the address is a multiple of `align` (a power of two).
    pub const fn is_aligned(self, align: u64) -> bool {
        self.0 & (align - 1) == 0
    }
}

impl fmt::Debug for Iova {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Iova({:#x})", self.0)
    }
}

impl fmt::Display for Iova {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// An IOVA space: the device address space one HAL's allocations live in (one IOMMU
/// container, one model's memory, one physical address space). An IOVA means something only
/// with its domain: two HALs can hand out the same IOVA for different memory, so an address
/// from one must never reach the device of the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DmaDomain(u64);

impl DmaDomain {
    /// A domain no earlier call returned (for each new IOVA space a backend creates).
    pub fn fresh() -> Self {
        static NEXT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(1);
        DmaDomain(NEXT.fetch_add(1, core::sync::atomic::Ordering::Relaxed))
    }

    /// Its number, for logs.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The domain of this crate's test memory (no `fresh` call returns 0).
    #[cfg(test)]
    pub(crate) const TEST: DmaDomain = DmaDomain(0);
}

/// A byte offset into BAR0.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BarOffset(pub usize);

impl BarOffset {
    /// The offset `bytes` further on.
    pub const fn add(self, bytes: usize) -> BarOffset {
        BarOffset(self.0 + bytes)
    }
}

impl fmt::Debug for BarOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BarOffset({:#x})", self.0)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Iova {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "Iova({=u64:#x})", self.0)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for BarOffset {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "BarOffset({=usize:#x})", self.0)
    }
}
