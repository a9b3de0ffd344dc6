//! An event queue polled by the driver: the EQE ring in DMA memory, the owner-bit rule and the
//! consumer-index doorbell (mlx5-reference 04 §1, §4; Linux `next_eqe_sw`, `eq_update_ci`).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::Eqn;
use bareverbs_hal::{dma_rmb, BarOffset, Hal, Mmio, SharedDma};

use crate::error::Error;
use crate::uar::Uar;

/// Largest EQ the driver makes: 2^12 EQEs = 256 KiB = 64 pages.
pub(crate) const MAX_LOG_SIZE: u8 = 12;
pub(crate) const MAX_PAGES: usize = (EQE_BYTES << MAX_LOG_SIZE) / 4096;

/// Size of an EQE.
pub const EQE_BYTES: usize = 64;

/// An event queue ring.
pub(crate) struct EventQueue<H: Hal> {
    pub(crate) buf: SharedDma<H::Dma>,
    pub(crate) eqn: Eqn,
    log_size: u8,
    ci: u32,
    uar: Uar,
}

impl<H: Hal> EventQueue<H> {
    /// Allocates and initialises the ring (every owner byte 1, `init_eq_buf`); the EQ is
    /// created by the caller with [`EventQueue::pages`].
    pub(crate) fn alloc(hal: &H, log_size: u8) -> Result<SharedDma<H::Dma>, Error> {
        let len = EQE_BYTES << log_size;
        let mut buf = hal.dma_alloc(len.max(4096), 4096)?;
        for eqe in buf.as_mut_slice().chunks_mut(EQE_BYTES) {
            eqe[EQE_BYTES - 1] = EQE_OWNER_INIT_VAL;
        }
        Ok(buf.share())
    }

    /// Entries in the ring.
    pub(crate) fn entries(&self) -> usize {
        1 << self.log_size
    }

    pub(crate) fn new(buf: SharedDma<H::Dma>, eqn: Eqn, log_size: u8, uar: Uar) -> Self {
        EventQueue {
            buf,
            eqn,
            log_size,
            ci: 0,
            uar,
        }
    }

    /// The next EQE that software owns, copied out, advancing the consumer index.
    pub(crate) fn next(&mut self) -> Option<[u8; EQE_BYTES]> {
        let mask = (1u32 << self.log_size) - 1;
        let off = ((self.ci & mask) as usize) * EQE_BYTES;
        let owner = self.buf.read8(off + EQE_BYTES - 1) & 1;
        // next_eqe_sw: hardware-owned while owner differs from the pass parity.
        if u32::from(owner) != (self.ci >> self.log_size) & 1 {
            return None;
        }
        // ORDERING: the owner bit said the EQE is complete; read its body only after it.
        dma_rmb();
        let mut eqe = [0u8; EQE_BYTES];
        // In bounds: off < ring length by the mask.
        self.buf.read_bytes(off, &mut eqe).ok()?;
        self.ci = self.ci.wrapping_add(1);
        Some(eqe)
    }

    /// Tells firmware how far software has read, arming the EQ when `arm`.
    pub(crate) fn update_ci(&self, hal: &H, arm: bool) {
        let val = (u32::from(self.eqn.raw()) << 24) | (self.ci & 0x00ff_ffff);
        let off = if arm {
            self.uar.eq_doorbell_arm()
        } else {
            self.uar.eq_doorbell_update()
        };
        hal.bar0().write32(BarOffset(off), val);
    }

    /// Entries the queue needs for `events` events plus firmware's spare entries.
    pub(crate) fn log_size_for(events: u32) -> u8 {
        let n = (events + NUM_SPARE_EQE).next_power_of_two();
        n.trailing_zeros() as u8
    }
}
