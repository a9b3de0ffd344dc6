//! Shared receive queues, the verbs half: their attributes (`struct ibv_srq_attr`), the
//! geometry an SRQ of those attributes takes, the limit an `ibv_modify_srq` arms, and
//! `ibv_post_srq_recv`'s checks on each work request before it goes into the ring
//! (`wq/srq_ring.rs`).

use bareverbs_hal::Hal;
use bitflags::bitflags;

use crate::device::Device;
use crate::error::{Error, Invalid};
use crate::verbs::post::{sge_refused, PostError, RecvWr};
pub(crate) use crate::wq::srq_ring::{SrqBook, SrqSlot, INLINE_SRQS};

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
    let book = slot.read();
    let Some(b) = book.as_ref() else {
        return refused(Error::NotUp);
    };
    let max_sge = b.max_sge();
    // Dropped on every return: what was pushed before a refused request is published.
    let Some(mut ring) = b.begin() else {
        return refused(Error::NotUp);
    };
    for (index, wr) in wrs.iter().enumerate() {
        let at = |error| Err(PostError { index, error });
        if wr.sg_list.len() as u32 > max_sge {
            return at(Error::InvalidArgument {
                what: Invalid::TooManySge,
            });
        }
        if let Some(what) = wr.sg_list.iter().find_map(sge_refused) {
            return at(Error::InvalidArgument { what });
        }
        let sges = wr.sg_list.iter().map(|s| (s.addr, s.length, s.lkey.raw()));
        if ring.push(wr.wr_id, sges).is_err() {
            return at(Error::QueueFull);
        }
    }
    Ok(())
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
