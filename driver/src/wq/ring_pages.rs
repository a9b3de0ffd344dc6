//! How a work or completion queue buffer is described to firmware: one IOVA-contiguous
//! allocation in pages as large as the buffer, up to 2 MiB, so most queues take one page
//! address (rdma-core's `mlx5_vfio` gives firmware one contiguous buffer likewise) and the
//! largest a few. A HAL promises alignment only up to 4 KiB: when it refuses a larger one,
//! the pages shrink to what it gives (VFIO's arena gives 2 MiB, the vfio-user client 4 KiB).

use bareverbs_hal::{DmaBuf, DmaError, Hal};

use crate::error::Error;

/// Largest page: a hugepage.
pub(crate) const MAX_PAGE: usize = 2 << 20;

/// The pages of a queue buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RingPages {
    /// Bytes per page (also the allocation's alignment).
    pub page: usize,
    /// log2 of the page size relative to 4 KiB, as `cqc`/`qpc` `log_page_size` want it.
    pub log_page: u8,
    /// Bytes to allocate: the buffer rounded up to whole pages.
    pub bytes: usize,
    /// Page addresses in the command.
    pub count: usize,
}

/// Pages for a buffer of `len` bytes.
pub(crate) fn ring_pages(len: usize) -> RingPages {
    pages_of(len, len.max(4096).next_power_of_two().min(MAX_PAGE))
}

/// A buffer of `len` bytes in pages of `page` bytes (a power of two, at least 4 KiB).
fn pages_of(len: usize, page: usize) -> RingPages {
    let bytes = len.max(1).next_multiple_of(page);
    RingPages {
        page,
        log_page: (page.trailing_zeros() - 12) as u8,
        bytes,
        count: bytes / page,
    }
}

/// Allocates a queue buffer of `len` bytes in the largest pages [`ring_pages`] wants and the
/// HAL can align, halving the page on each `BadAlignment` down to 4 KiB.
///
/// # Errors
/// What the HAL's allocation returns otherwise.
pub(crate) fn alloc_ring<H: Hal>(
    hal: &H,
    len: usize,
) -> Result<(DmaBuf<H::Dma>, RingPages), Error> {
    let mut p = ring_pages(len);
    loop {
        match hal.dma_alloc(p.bytes, p.page) {
            Ok(b) => return Ok((b, p)),
            Err(DmaError::BadAlignment { .. }) if p.page > 4096 => {
                p = pages_of(len, p.page / 2);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_grow_with_the_buffer_up_to_2_mib() {
        let p = |page, log_page, bytes, count| RingPages {
            page,
            log_page,
            bytes,
            count,
        };
        assert_eq!(ring_pages(64), p(4096, 0, 4096, 1));
        assert_eq!(ring_pages(4096), p(4096, 0, 4096, 1));
        assert_eq!(ring_pages(5000), p(8192, 1, 8192, 1));
        assert_eq!(ring_pages(64 << 10), p(64 << 10, 4, 64 << 10, 1));
        // 16 MiB of receive queue and 2 MiB of send queue: nine 2 MiB pages.
        assert_eq!(ring_pages(18 << 20), p(2 << 20, 9, 18 << 20, 9));
        assert_eq!(ring_pages((8 << 20) + 1), p(2 << 20, 9, 10 << 20, 5));
    }
}
