//! The tables a device keeps per CQ, beside its ring: the completions of gone QPs a CQ must
//! drop at its next poll (`verbs/cq_clean.rs` fills them), the memory of CQs dropped while a
//! QP still completes into them (`verbs/cq_orphan.rs`), and each CQ's completion-event counts
//! (`verbs/comp_channel.rs`). Plain values only: the objects above give them meaning.

use bareverbs_hal::{DmaMemory, SharedDma};

use crate::error::{Error, Invalid};

/// Entries of the inline per-CQ tables: two CQs per QP of the inline book table.
pub(crate) const CQ_TABLE: usize = 2 * crate::wq::book::INLINE_QPS;

/// QPs whose completions one CQ can be asked to drop before it is next polled.
pub(crate) const PURGES: usize = 8;

/// (QPN, CQE count before which its CQEs go) pairs waiting for one CQ.
pub(crate) type Purges = heapless::Vec<(u32, u32), PURGES>;

/// True when CQE number `index` (a consumer count) comes before `until` (24-bit counts).
#[inline]
pub(crate) fn before(index: u32, until: u32) -> bool {
    let d = until.wrapping_sub(index) & 0x00ff_ffff;
    d != 0 && d < 0x0080_0000
}

/// Adds `(qpn, until)` to `list`, merging with an entry of the same QPN; false when full.
pub(crate) fn add(list: &mut Purges, qpn: u32, until: u32) -> bool {
    if let Some(e) = list.iter_mut().find(|e| e.0 == qpn) {
        if before(e.1, until) {
            e.1 = until;
        }
        return true;
    }
    list.push((qpn, until)).is_ok()
}

/// The memory of a CQ that was dropped while in use.
pub(crate) struct Orphan<D: DmaMemory> {
    buf: SharedDma<D>,
    dbr: SharedDma<D>,
}

impl<D: DmaMemory> Orphan<D> {
    pub(crate) fn new(buf: SharedDma<D>, dbr: SharedDma<D>) -> Self {
        Orphan { buf, dbr }
    }

    /// Gives the memory up without freeing it (the device may still write it).
    pub(crate) fn leak(self) {
        self.buf.leak();
        self.dbr.leak();
    }
}

/// Completion events of one CQ, between the EQ and the user.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CqEvents {
    /// Events the EQ delivered and the user has not read yet.
    pub pending: u32,
    /// Events read and not yet acknowledged.
    pub unacked: u32,
    /// The arm sequence number: one more per event read (rdma-core `mlx5_cq_event`).
    pub arm_sn: u32,
    /// The CQ's user context.
    pub context: u64,
}

impl CqEvents {
    /// Takes one pending event: it is now read, unacknowledged, and the next arm uses the
    /// next sequence number.
    pub(crate) fn take(&mut self) -> bool {
        if self.pending == 0 {
            return false;
        }
        self.pending -= 1;
        self.unacked = self.unacked.saturating_add(1);
        self.arm_sn = self.arm_sn.wrapping_add(1);
        true
    }

    /// Acknowledges `n` read events (`ibv_ack_cq_events`).
    pub(crate) fn ack(&mut self, n: u32) -> Result<(), Error> {
        if n == 0 || n > self.unacked {
            return Err(Error::InvalidArgument {
                what: Invalid::AckCount,
            });
        }
        self.unacked -= n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_compare_across_the_24_bit_wrap() {
        assert!(before(5, 6));
        assert!(!before(6, 6));
        assert!(!before(7, 6));
        assert!(before(0xff_fffe, 2));
        assert!(!before(2, 0xff_fffe));
        // The consumer count is 32 bits, the producer's 24.
        assert!(before(0x0100_0003, 4));
        let mut l = Purges::new();
        assert!(add(&mut l, 9, 10));
        assert!(add(&mut l, 9, 12));
        assert!(add(&mut l, 9, 11));
        assert_eq!(l.as_slice(), &[(9, 12)]);
    }
}
