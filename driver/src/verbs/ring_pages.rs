//! How a work or completion queue buffer is described to firmware: one IOVA-contiguous
//! allocation in pages as large as the buffer, up to 2 MiB (what every HAL can align an
//! allocation to), so most queues take one page address (rdma-core's `mlx5_vfio` gives
//! firmware one contiguous buffer likewise) and the largest a few, never more than a command
//! carries.

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
    let page = len.max(4096).next_power_of_two().min(MAX_PAGE);
    let bytes = len.max(1).next_multiple_of(page);
    RingPages {
        page,
        log_page: (page.trailing_zeros() - 12) as u8,
        bytes,
        count: bytes / page,
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
