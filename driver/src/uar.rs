//! A UAR page: the 4 KiB doorbell page at BAR0 + index × 4 KiB (mlx5-reference 06 §2).

use bareverbs_firmware_cmd::ifc::{uar_offset, UAR_PAGE_SIZE};
use bareverbs_firmware_cmd::UarIndex;
use bareverbs_hal::mmio::check_access;

use crate::error::Error;

/// A UAR the device allocated, checked to lie inside BAR0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uar {
    index: UarIndex,
}

impl Uar {
    /// Checks that UAR `index` fits in a BAR of `bar_len` bytes.
    pub(crate) fn new(index: UarIndex, bar_len: usize) -> Result<Self, Error> {
        let base = (index.raw() as usize).saturating_mul(UAR_PAGE_SIZE);
        check_access(base, UAR_PAGE_SIZE, bar_len)?;
        Ok(Uar { index })
    }

    /// The UAR index.
    pub fn index(&self) -> UarIndex {
        self.index
    }

    fn base(&self) -> usize {
        self.index.raw() as usize * UAR_PAGE_SIZE
    }

    /// BAR0 offset of the first BlueFlame register (the send doorbell).
    pub(crate) fn bf_register(&self) -> usize {
        self.base() + uar_offset::BF
    }

    /// BAR0 offset of the 64-bit CQ arm doorbell.
    pub(crate) fn cq_doorbell(&self) -> usize {
        self.base() + uar_offset::CQ_DOORBELL
    }

    /// BAR0 offset of the EQ doorbell that also arms.
    pub(crate) fn eq_doorbell_arm(&self) -> usize {
        self.base() + uar_offset::EQ_DOORBELL_ARM
    }

    /// BAR0 offset of the EQ doorbell that only updates the consumer index.
    pub(crate) fn eq_doorbell_update(&self) -> usize {
        self.base() + uar_offset::EQ_DOORBELL_UPDATE
    }
}
