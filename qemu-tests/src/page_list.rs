//! Buffers given to firmware as a page list: `log_page_size`, `page_offset` and `pas[]`, as
//! the QP, CQ, EQ and SRQ contexts carry them.
//!
//! PRM / Linux 6.12 `drivers/infiniband/hw/mlx5/mlx5_ib.h` (`__mlx5_umem_find_best_quantized_pgoff`):
//! "QP/CQ/WQ/etc type commands take a page offset that satisfies
//! `page_offset_quantized * (page_size / scale) = page_offset`", with `scale` 64 for the QP
//! (`qp.c` `create_user_qp`), CQ (`cq.c` `create_cq_user`) and WQ contexts. The buffer then
//! starts `page_offset` bytes into its first page: `mlx5_ib` sets a non-zero offset whenever a
//! user buffer sits inside a larger page (rdma-core's buffers are page-aligned only to the
//! CPU's 4 KiB pages, while the umem may be described with larger ones).

/// The number of quanta a page is divided into for `page_offset`.
pub const PAGE_OFFSET_QUANTA: u64 = 64;

/// The byte offset of a buffer in its first page, from a context's quantized `page_offset`
/// and its page size.
pub fn page_offset_bytes(page_size: u64, quantized: u64) -> u64 {
    quantized * (page_size / PAGE_OFFSET_QUANTA)
}

/// How many pages a buffer of `bytes` bytes starting `offset` bytes into its first page spans.
pub fn pages_spanned(bytes: u64, page_size: u64, offset: u64) -> usize {
    (offset + bytes).div_ceil(page_size) as usize
}

/// The device address of byte `off` of a buffer described by `pas` (pages of `page_size`
/// bytes) starting `page_offset` bytes into its first page.
pub fn buffer_iova(pas: &[u64], page_size: u64, page_offset: u64, off: u64) -> u64 {
    let at = off + page_offset;
    pas[(at / page_size) as usize] + at % page_size
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantized_offsets_scale_with_the_page() {
        // mlx5_ib.h: page_offset_quantized * (page_size / 64) = page_offset.
        assert_eq!(page_offset_bytes(4096, 0), 0);
        assert_eq!(page_offset_bytes(4096, 1), 64);
        assert_eq!(page_offset_bytes(4096, 63), 4032);
        assert_eq!(page_offset_bytes(2 << 20, 16), 512 << 10);
    }

    #[test]
    fn a_buffer_inside_a_page_starts_at_its_offset_and_crosses_pages() {
        let pas = [0x10_0000, 0x20_0000];
        // Offset 24 of 64 quanta in 4 KiB pages: 1536 bytes in.
        let off = page_offset_bytes(4096, 24);
        assert_eq!(buffer_iova(&pas, 4096, off, 0), 0x10_0600);
        assert_eq!(buffer_iova(&pas, 4096, off, 4096 - 1536), 0x20_0000);
        assert_eq!(pages_spanned(4096, 4096, off), 2);
        assert_eq!(pages_spanned(4096, 4096, 0), 1);
        assert_eq!(pages_spanned(2560, 4096, off), 1);
    }
}
