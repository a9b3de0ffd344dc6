//! A completion ring: the CQE array in DMA memory, the ownership rule, the read barrier, the
//! consumer index told to the device through the doorbell record (mlx5-reference 04 §6–7;
//! Linux `get_sw_cqe` / `mlx5_cq_set_ci`, rdma-core `next_cqe_sw` / `update_cons_index`).
//!
//! [`CqRing`] owns a ring and reads each CQE once into a [`CqeRepr`] (the value the model
//! emits through the same layouts). The Ethernet queues poll through it. The verbs CQ keeps
//! its own loop, tuned per field for `ibv_poll_cq`, but takes its initial entries
//! ([`init_entries`]), its consumer-index write ([`set_ci`]) and, off the hot loop, its entry
//! test ([`sw_owned`]) from here; the test itself is `firmware-cmd`'s `cqe_is_sw_owned`.

use bareverbs_firmware_cmd::cqe_repr::{CqeRepr, CQE_WORDS};
use bareverbs_firmware_cmd::ifc::{cq_dbr, cq_set_ci_word, cqe_is_sw_owned, CQE_INIT_OP_OWN};
use bareverbs_hal::{dma_rmb, dma_wmb, DmaError, DmaMemory, RingShape, SharedDma, Slot};

/// Size of a CQE.
pub const CQE_BYTES: usize = 64;

/// Marks every entry of a new ring as never written: opcode INVALID, owner 0 (mlx5_ib's
/// initial `op_own`), so no stale byte reads as a completion.
pub(crate) fn init_entries(ring: &mut [u8]) {
    for e in ring.chunks_mut(CQE_BYTES) {
        if let Some(last) = e.last_mut() {
            *last = CQE_INIT_OP_OWN;
        }
    }
}

/// The `op_own` of entry `e`, CQE number `ci` of a ring of `1 << log_size` entries, when
/// software owns it: written by the device in the current pass, not an unwritten entry. The
/// read barrier is taken here: the rest of the entry may be read after it.
#[inline(always)]
pub(crate) fn sw_owned(e: Slot<'_, CQE_BYTES>, ci: u32, log_size: u8) -> Option<u8> {
    let op_own = e.read8(CQE_BYTES - 1);
    if !cqe_is_sw_owned(op_own, ci, log_size) {
        return None;
    }
    // ORDERING: the owner bit before the CQE's body.
    dma_rmb();
    Some(op_own)
}

/// The CQE in `e` as a value: its eight words, read once.
#[inline(always)]
pub(crate) fn parse(e: Slot<'_, CQE_BYTES>) -> CqeRepr {
    let words: [u64; CQE_WORDS] = core::array::from_fn(|k| e.read64(8 * k));
    CqeRepr::parse(&words)
}

/// Tells the device that the entries before consumer count `ci` are free.
#[inline(always)]
pub(crate) fn set_ci(dbr: Slot<'_, 8>, ci: u32) {
    // ORDERING: the CQEs are read before the device may reuse them.
    dma_wmb();
    dbr.write32(cq_dbr::SET_CI, cq_set_ci_word(ci));
}

/// A CQE ring polled in order, its consumer count published on [`CqRing::commit`].
pub(crate) struct CqRing<D: DmaMemory> {
    ring: SharedDma<D>,
    dbr: SharedDma<D>,
    /// Where the entries and the record are, checked once.
    shape: RingShape<CQE_BYTES>,
    dbr_shape: RingShape<8>,
    log_size: u8,
    ci: u32,
    /// Entries were taken since the last commit.
    polled: bool,
}

impl<D: DmaMemory> CqRing<D> {
    /// A ring of `1 << log_size` entries in `ring` (made with [`init_entries`]) and its
    /// doorbell record `dbr`, nothing consumed.
    ///
    /// # Errors
    /// [`DmaError`] when `ring` is too short for the entries or `dbr` for the record; the
    /// memory is handed back with it.
    pub(crate) fn new(
        ring: SharedDma<D>,
        dbr: SharedDma<D>,
        log_size: u8,
    ) -> Result<Self, (DmaError, [SharedDma<D>; 2])> {
        let shapes = ring
            .ring_shape::<CQE_BYTES>(0, 1 << log_size)
            .and_then(|s| Ok((s, dbr.ring_shape::<8>(0, 1)?)));
        match shapes {
            Ok((shape, dbr_shape)) => Ok(CqRing {
                ring,
                dbr,
                shape,
                dbr_shape,
                log_size,
                ci: 0,
                polled: false,
            }),
            Err(e) => Err((e, [ring, dbr])),
        }
    }

    /// The next completion, if the device has written it.
    #[inline]
    pub(crate) fn next(&mut self) -> Option<CqeRepr> {
        let ring = self.ring.slots_of(&self.shape)?;
        let e = ring.slot(self.ci as usize);
        sw_owned(e, self.ci, self.log_size)?;
        let c = parse(e);
        self.ci = self.ci.wrapping_add(1);
        self.polled = true;
        Some(c)
    }

    /// Tells the device the entries taken since the last call are free.
    #[inline]
    pub(crate) fn commit(&mut self) {
        if self.polled {
            if let Some(d) = self.dbr.slots_of(&self.dbr_shape) {
                set_ci(d.slot(0), self.ci);
            }
            self.polled = false;
        }
    }

    /// The ring's memory, handed back (to free, or to leak when the device may still write
    /// it).
    pub(crate) fn into_memory(self) -> [SharedDma<D>; 2] {
        [self.ring, self.dbr]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bareverbs_firmware_cmd::ifc::{cqe_owner_for, CqeOpcode, CqeSyndrome};
    use bareverbs_hal::Hal;
    use bareverbs_model::SimHal;

    /// Writes `c` into entry `i` of a ring of `1 << log` entries as the device would in the
    /// pass of consumer count `count`.
    fn put(ring: &SharedDma<<SimHal as Hal>::Dma>, c: &CqeRepr, count: u32, log: u8) {
        let bytes = c.emit(cqe_owner_for(count, log), &[]);
        let at = (count as usize & ((1 << log) - 1)) * CQE_BYTES;
        ring.write_bytes(at, &bytes).unwrap();
    }

    #[test]
    fn completions_come_out_in_order_once_each_and_the_consumer_count_is_published() {
        let hal = SimHal::synchronous();
        let log = 2u8;
        let mut mem = hal.dma_alloc(CQE_BYTES << log, 64).unwrap();
        init_entries(mem.as_mut_slice());
        let dbr = hal.dma_alloc(64, 64).unwrap().share();
        let Ok(mut ring) = CqRing::new(mem.share(), dbr, log) else {
            panic!("the ring and record fit");
        };
        assert_eq!(ring.next(), None, "a new ring holds nothing");
        // Six completions: the ring wraps once, and the second pass's owner bit flips.
        for k in 0..6u32 {
            let c = CqeRepr {
                opcode: CqeOpcode::Req.raw(),
                wqe_counter: k as u16,
                sop_drop_qpn: 0x42,
                ..CqeRepr::default()
            };
            put(&ring.ring, &c, k, log);
            assert_eq!(ring.next(), Some(c));
            assert_eq!(ring.next(), None, "an entry is taken once");
            ring.commit();
            assert_eq!(ring.dbr.read32(0) & 0x00ff_ffff, k + 1);
        }
        // An error completion parses as one.
        let e = CqeRepr {
            opcode: CqeOpcode::ReqErr.raw(),
            syndrome: CqeSyndrome::LocalLengthErr.raw(),
            ..CqeRepr::default()
        };
        put(&ring.ring, &e, 6, log);
        assert_eq!(ring.next().map(|c| c.syndrome), Some(e.syndrome));
    }
}
