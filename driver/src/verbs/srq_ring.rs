//! The receive ring of a shared receive queue (linked-list WQEs; PRM "Shared Receive Queue"):
//! receives posted at the head as rdma-core 56 providers/mlx5/srq.c `mlx5_post_srq_recv`
//! posts them (the 16-byte next segment, data segments, an invalid-lkey entry ending a short
//! list, the WQE counter in the doorbell record's first word), and each WQE relinked at the
//! tail as soon as its completion is polled (rdma-core 56 marks it free and relinks free WQEs
//! only when the list runs out, `set_next_tail`; either way the device follows one list). The `wr_id` of every WQE is kept by index for
//! the poll, in HAL memory the device is never given. Each book sits in a slot of the device's
//! [`SrqBooks`] (`slot_table.rs`): the SRQ posts through its own slot, and
//! [`Cq::poll`](crate::verbs::Cq::poll) finds an SRQ by the number its CQE carries, keeping
//! the slot of the last one it met.

use bareverbs_firmware_cmd::ifc::{wqe_srq_next_seg, INVALID_LKEY};
use bareverbs_firmware_cmd::wqe_codec::data;
use bareverbs_hal::{dma_wmb, Hal, SharedDma};
use bitflags::bitflags;

use crate::device::Device;
use crate::error::{Error, Invalid};
use crate::slot_table::{Keyed, SlotTable, TableSlot};
use crate::verbs::post::{sge_refused, PostError, RecvWr};

/// SRQs a device holds at once with the inline tables (`alloc` feature: the device's limit).
pub(crate) const INLINE_SRQS: usize = 16;

/// The table of SRQ books, by SRQ number.
pub(crate) type SrqBooks<H> = SlotTable<SrqBook<H>, INLINE_SRQS>;

/// One SRQ's place in the device's [`SrqBooks`].
pub(crate) type SrqSlot<H> = TableSlot<SrqBook<H>>;

impl<H: Hal> Keyed for SrqBook<H> {
    fn key(&self) -> u32 {
        self.srqn
    }
}

/// SRQ attributes (`struct ibv_srq_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SrqAttr {
    /// Outstanding receives the SRQ holds.
    pub max_wr: u32,
    /// Scatter/gather entries per receive.
    pub max_sge: u32,
    /// The limit: when fewer receives than this remain, the SRQ limit event fires once (0:
    /// not armed).
    pub srq_limit: u32,
}

bitflags! {
    /// Which [`SrqAttr`] fields a modify changes (`enum ibv_srq_attr_mask`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct SrqAttrMask: u32 {
        /// Resize (`IBV_SRQ_MAX_WR`): mlx5 cannot (Linux mlx5_ib `mlx5_ib_modify_srq` refuses
        /// it with EINVAL).
        const MAX_WR = 1 << 0;
        /// Arm the limit (`IBV_SRQ_LIMIT`).
        const LIMIT = 1 << 1;
    }
}

/// `(log2 WQEs, log2 WQE stride)` of an SRQ holding at least `attr.max_wr` receives of up to
/// `attr.max_sge` entries, checked against the device: the WQE is the 16-byte next segment
/// and the data segments, a power of two, and there is one WQE more than asked, as the tail
/// stays linked in (rdma-core 56 srq.c `mlx5_alloc_srq_buf`: `max_wr` is one less than the
/// WQEs).
pub(crate) fn srq_geometry(caps: &crate::caps::Caps, attr: &SrqAttr) -> Result<(u8, u8), Error> {
    if attr.max_wr == 0 {
        return Err(Error::InvalidArgument {
            what: Invalid::ZeroEntries,
        });
    }
    let exceeds = |limit, requested: u32, max: u32| Error::ExceedsLimit {
        limit,
        requested: requested.into(),
        max: max.into(),
    };
    if attr.max_wr > caps.max_srq_wr {
        return Err(exceeds(
            crate::error::Limit::QpWr,
            attr.max_wr,
            caps.max_srq_wr,
        ));
    }
    let max_sge_dev = (caps.max_rq_desc_size / 16).saturating_sub(1);
    if attr.max_sge > max_sge_dev {
        return Err(exceeds(crate::error::Limit::Sge, attr.max_sge, max_sge_dev));
    }
    // Saturating and checked: the device's numbers may be as large as the caller's.
    let Some(stride) = attr
        .max_sge
        .max(1)
        .saturating_add(1)
        .saturating_mul(16)
        .checked_next_power_of_two()
    else {
        return Err(exceeds(crate::error::Limit::Sge, attr.max_sge, max_sge_dev));
    };
    // The driver counts an SRQ's WQEs in 16 bits (as mlx5's WQE counter).
    let most = (1u32 << 15) - 1;
    if attr.max_wr > most {
        return Err(exceeds(crate::error::Limit::QpWr, attr.max_wr, most));
    }
    let log_size = (attr.max_wr + 1).next_power_of_two().trailing_zeros() as u8;
    Ok((log_size, stride.trailing_zeros() as u8))
}

/// The limit an `ibv_modify_srq` arms, if any, after the checks every mlx5 SRQ shares:
/// [`SrqAttrMask::MAX_WR`] refused (mlx5 cannot resize an SRQ: Linux mlx5_ib
/// `mlx5_ib_modify_srq` returns EINVAL), a limit past `max_wr` refused.
pub(crate) fn limit_to_arm(
    attr: &SrqAttr,
    mask: SrqAttrMask,
    max_wr: u32,
) -> Result<Option<u32>, Error> {
    if mask.contains(SrqAttrMask::MAX_WR) {
        return Err(Error::InvalidArgument {
            what: Invalid::UnsupportedTransition,
        });
    }
    if !mask.contains(SrqAttrMask::LIMIT) {
        return Ok(None);
    }
    if attr.srq_limit > max_wr {
        return Err(Error::ExceedsLimit {
            limit: crate::error::Limit::QpWr,
            requested: attr.srq_limit.into(),
            max: max_wr.into(),
        });
    }
    Ok(Some(attr.srq_limit))
}

/// Head, tail and WQE counter of a ring.
struct Ends {
    head: u16,
    tail: u16,
    counter: u16,
}

/// One SRQ's ring and book.
pub(crate) struct SrqBook<H: Hal> {
    /// The SRQ's number.
    srqn: u32,
    ring: SharedDma<H::Dma>,
    dbr: SharedDma<H::Dma>,
    /// `wr_id` of the receive in each WQE, 8 bytes each, in the CPU's byte order.
    ids: SharedDma<H::Dma>,
    log_size: u8,
    /// log2 of the WQE stride in bytes.
    log_stride: u8,
    max_sge: u32,
    ends: spin::Mutex<Ends>,
}

impl<H: Hal> SrqBook<H> {
    /// The book of a ring of `1 << log_size` WQEs of `1 << log_stride` bytes, linked 0 → 1 → …
    /// → last (rdma-core 56 srq.c `mlx5_alloc_srq_buf`: head 0, tail the last WQE, whose next
    /// is set when a freed WQE is linked after it); `ids` holds 8 bytes per WQE.
    pub(crate) fn new(
        srqn: u32,
        [ring, dbr, ids]: [SharedDma<H::Dma>; 3],
        log_size: u8,
        log_stride: u8,
    ) -> Self {
        SrqBook {
            srqn,
            ring,
            dbr,
            ids,
            log_size,
            log_stride,
            max_sge: ((1u32 << log_stride) - 16) / 16,
            ends: spin::Mutex::new(Ends {
                head: 0,
                tail: (1u16 << log_size) - 1,
                counter: 0,
            }),
        }
    }

    /// The ring and doorbell record, handed back.
    pub(crate) fn ring_parts(self) -> (SharedDma<H::Dma>, SharedDma<H::Dma>) {
        (self.ring, self.dbr)
    }

    /// Leaks the ring and doorbell record (the device may still use them).
    pub(crate) fn leak(self) {
        self.ring.leak();
        self.dbr.leak();
    }

    /// The scatter list of the WQE at `index` (scatter to CQE, `cq_scatter.rs`).
    pub(crate) fn wqe_sges<const N: usize>(
        &self,
        index: u16,
        sges: &mut heapless::Vec<(u64, u32), N>,
    ) {
        let base = usize::from(index & self.mask()) << self.log_stride;
        // After the 16-byte next segment.
        for k in 1..(1usize << self.log_stride) / 16 {
            let mut seg = [0u8; 16];
            if self.ring.read_bytes(base + 16 * k, &mut seg).is_err() {
                return;
            }
            let (Some(w0), Some(addr)) = (
                bareverbs_firmware_cmd::wqe_codec::load(&seg, data::LKEY.byte()),
                bareverbs_firmware_cmd::wqe_codec::load(&seg, data::ADDR.byte()),
            ) else {
                return;
            };
            let (lkey, len) = (data::LKEY.get(w0) as u32, data::BYTE_COUNT.get(w0) as u32);
            if lkey == INVALID_LKEY || sges.push((addr, len)).is_err() {
                return;
            }
        }
    }

    fn next_at(&self, index: u16) -> usize {
        (usize::from(index) << self.log_stride) + wqe_srq_next_seg::next_wqe_index.bit / 8
    }

    fn mask(&self) -> u16 {
        ((1u32 << self.log_size) - 1) as u16
    }

    /// Posts `wrs` (`ibv_post_srq_recv`): one doorbell record update for all of them. SGEs
    /// with a length with bit 31 set are refused.
    pub(crate) fn post(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let Ok(ids) = self.ids.slots::<8>(0, 1 << self.log_size) else {
            return Err(PostError {
                index: 0,
                error: Error::NotUp,
            });
        };
        let mut e = self.ends.lock();
        let start = e.counter;
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            let at = |error| PostError { index, error };
            if wr.sg_list.len() as u32 > self.max_sge {
                result = Err(at(Error::InvalidArgument {
                    what: Invalid::TooManySge,
                }));
                break;
            }
            let refused = wr.sg_list.iter().find_map(sge_refused);
            if let Some(what) = refused {
                result = Err(at(Error::InvalidArgument { what }));
                break;
            }
            // The tail WQE stays linked in: the list is full when the head reaches it.
            if e.head == e.tail {
                result = Err(at(Error::QueueFull));
                break;
            }
            let idx = e.head;
            let base = usize::from(idx) << self.log_stride;
            let next = self.ring.read16(self.next_at(idx)) & self.mask();
            for (k, s) in wr.sg_list.iter().enumerate() {
                let o = base + 16 * (k + 1);
                self.ring.write64(o, data::word0(s.length, s.lkey.raw()));
                self.ring.write64(o + data::ADDR.byte(), s.addr);
            }
            if (wr.sg_list.len() as u32) < self.max_sge {
                let o = base + 16 * (wr.sg_list.len() + 1);
                self.ring.write64(o, data::word0(0, INVALID_LKEY));
                self.ring.write64(o + data::ADDR.byte(), 0);
            }
            ids.slot(usize::from(idx)).write_ne64(0, wr.wr_id);
            e.head = next;
            e.counter = e.counter.wrapping_add(1);
        }
        if e.counter != start {
            // ORDERING: the WQEs before the doorbell record that publishes them.
            dma_wmb();
            self.dbr.write32(0, u32::from(e.counter));
        }
        result
    }

    /// The `wr_id` of the receive in WQE `index`, whose completion was just polled; the WQE
    /// goes back to the free list at the tail (rdma-core `mlx5_free_srq_wqe`).
    pub(crate) fn complete(&self, index: u16) -> u64 {
        let index = index & self.mask();
        let id = self.ids.read_ne64(usize::from(index) * 8);
        let mut e = self.ends.lock();
        self.ring.write16(self.next_at(e.tail), index);
        e.tail = index;
        id
    }
}

/// `ibv_post_srq_recv` on SRQ `srqn` of `dev`: refused once the device is in its error state
/// (mlx5_ib: `-EIO`), else posted through the SRQ's book.
pub(crate) fn post_srq_recv<H: Hal>(
    dev: &Device<H>,
    slot: &SrqSlot<H>,
    wrs: &[RecvWr<'_>],
) -> Result<(), PostError> {
    let refused = |error| Err(PostError { index: 0, error });
    if dev.is_fatal() {
        return refused(Error::DeviceFatal);
    }
    match slot.read().as_ref() {
        Some(b) => b.post(wrs),
        None => refused(Error::NotUp),
    }
}

#[cfg(test)]
mod geometry_tests {
    use super::*;
    use crate::caps::Caps;

    #[test]
    fn srq_sizes_never_overflow_whatever_the_device_or_the_caller_says() {
        let numbers = [
            0,
            1,
            15,
            16,
            1 << 15,
            1 << 16,
            1 << 31,
            u32::MAX - 1,
            u32::MAX,
        ];
        for &dev in &numbers {
            let caps = Caps {
                max_srq_wr: dev,
                max_rq_desc_size: dev,
                ..Caps::default()
            };
            for &max_wr in &numbers {
                for &max_sge in &numbers {
                    let attr = SrqAttr {
                        max_wr,
                        max_sge,
                        srq_limit: 0,
                    };
                    if let Ok((log_size, log_stride)) = srq_geometry(&caps, &attr) {
                        assert!(log_size <= 15 && (1u32 << log_size) > max_wr);
                        assert!(1u64 << log_stride >= 16 * (1 + u64::from(max_sge.max(1))));
                    }
                }
            }
        }
    }
}
