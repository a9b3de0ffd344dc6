//! A receive ring (rdma-core's `mlx5_wq` for the RQ; PRM "Receive WQE Format"): a QP's own
//! receive queue, its size, its stride and the producer counter (it sits at the start of the
//! QP's work buffer), and where every cyclic receive WQE is written and published — a QP's
//! `post_recv` (`verbs/post.rs`) and an Ethernet RQ's refills (`eth/rxq.rs`) both write through
//! [`write_recv_wqe`] and [`publish_recv`].

use bareverbs_firmware_cmd::ifc::{qp_dbr, INVALID_LKEY};
use bareverbs_firmware_cmd::wqe_codec::data;
use bareverbs_hal::{dma_wmb, DmaMemory, SharedDma, Slots};

/// Bytes of a data segment, the unit a receive WQE is counted in.
pub(crate) const RECV_UNIT: usize = 16;

/// Writes the receive WQE that starts at unit `first` of `rq`, `stride` units long: one data
/// segment per `(address, length, lkey)` of `sges` (at most `stride`; the caller checks), and
/// after a shorter list an entry of the invalid lkey that ends it (PRM; rdma-core
/// `mlx5_post_recv`).
#[inline(always)]
pub(crate) fn write_recv_wqe(
    rq: &Slots<'_, RECV_UNIT>,
    first: usize,
    stride: usize,
    sges: impl Iterator<Item = (u64, u32, u32)>,
) {
    let mut n = 0;
    for (addr, length, lkey) in sges.take(stride) {
        let u = rq.slot(first + n);
        u.write64(data::LKEY.byte(), data::word0(length, lkey));
        u.write64(data::ADDR.byte(), addr);
        n += 1;
    }
    if n < stride {
        let u = rq.slot(first + n);
        u.write64(data::LKEY.byte(), data::word0(0, INVALID_LKEY));
        u.write64(data::ADDR.byte(), 0);
    }
}

/// Publishes the receives written up to `head` in the doorbell record `dbr`.
#[inline(always)]
pub(crate) fn publish_recv<D: DmaMemory>(dbr: &SharedDma<D>, head: u16) {
    // ORDERING: the receive WQEs before the doorbell record that publishes them.
    dma_wmb();
    dbr.write32(qp_dbr::RCV, u32::from(head));
}

/// A QP's receive queue.
#[derive(Debug)]
pub(crate) struct RecvQueue {
    log_size: u8,
    /// log2 of a receive WQE's bytes.
    shift: u8,
    /// Receives posted.
    head: u16,
    /// Where its WQEs are in the QP's work buffer, in 16-byte units, checked once (`None`: no
    /// queue of its own).
    pub(crate) shape: Option<bareverbs_hal::RingShape<16>>,
}

impl RecvQueue {
    /// `1 << log_size` receives of `1 << shift` bytes at `shape` in the work buffer (`None`:
    /// the QP has no receive queue of its own).
    pub(crate) fn new(
        log_size: u8,
        shift: u8,
        shape: Option<bareverbs_hal::RingShape<16>>,
    ) -> Self {
        RecvQueue {
            log_size,
            shift,
            head: 0,
            shape,
        }
    }

    /// log2 of its receives.
    pub(crate) fn log_size(&self) -> u8 {
        self.log_size
    }

    /// log2 of a receive WQE's bytes.
    pub(crate) fn shift(&self) -> u8 {
        self.shift
    }

    /// Receives posted so far.
    pub(crate) fn head(&self) -> u16 {
        self.head
    }

    /// Receives posted up to `head`.
    pub(crate) fn advance(&mut self, head: u16) {
        self.head = head;
    }

    /// Nothing posted (the QP went to RESET).
    pub(crate) fn reset(&mut self) {
        self.head = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bareverbs_firmware_cmd::ifc::{wqe_data_seg, WqeDataSeg};
    use bareverbs_firmware_cmd::View;
    use bareverbs_hal::Hal;
    use bareverbs_model::SimHal;

    #[test]
    fn a_short_list_ends_with_the_invalid_lkey_and_a_full_one_fills_its_stride() {
        let hal = SimHal::synchronous();
        let mut m = hal.dma_alloc(4 * 4 * RECV_UNIT, 64).unwrap();
        m.as_mut_slice().fill(0xa5);
        let m = m.share();
        let rq = m.slots::<RECV_UNIT>(0, 16).unwrap();
        let sges = [(0x1000u64, 64u32, 7u32), (0x2000, 128, 8), (0x3000, 256, 9)];
        // WQE 1 (units 4-7): two entries and the terminator; unit 7 is left as it was.
        write_recv_wqe(&rq, 4, 4, sges[..2].iter().copied());
        // WQE 3 (units 12-15): the list longer than the stride is cut at it.
        write_recv_wqe(&rq, 12, 2, sges.iter().copied());
        let mut b = [0u8; 16 * RECV_UNIT];
        m.read_bytes(0, &mut b).unwrap();
        let seg = |u: usize| View::<WqeDataSeg>::new_checked(&b[u * 16..u * 16 + 16]).unwrap();
        for (u, (addr, len, lkey)) in [(4, sges[0]), (5, sges[1]), (12, sges[0]), (13, sges[1])] {
            assert_eq!(seg(u).get(wqe_data_seg::addr), addr);
            assert_eq!(seg(u).get32(wqe_data_seg::byte_count), len);
            assert_eq!(seg(u).get32(wqe_data_seg::lkey), lkey);
        }
        assert_eq!(seg(6).get32(wqe_data_seg::lkey), INVALID_LKEY);
        assert_eq!(seg(6).get32(wqe_data_seg::byte_count), 0);
        assert!(
            b[7 * 16..8 * 16].iter().all(|&x| x == 0xa5),
            "past the terminator"
        );
        assert!(b[14 * 16..].iter().all(|&x| x == 0xa5), "past the stride");
        // The doorbell record takes the producer count.
        let dbr = hal.dma_alloc(64, 64).unwrap().share();
        publish_recv(&dbr, 0x1234);
        assert_eq!(dbr.read32(qp_dbr::RCV), 0x1234);
    }
}
