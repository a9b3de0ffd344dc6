//! The work queue context `wq`, shared by RMPs (and by RQs, SQs and XRQs): type, page list
//! geometry, PD, doorbell record (mlx5_ifc `wq`; Linux 6.12 include/linux/mlx5/mlx5_ifc.h).

crate::ifc! {
    /// Work queue context (PRM "WQ"). The page list (`wq.pas`) follows the enclosing command's
    /// fixed part; each command declares it as its own flexible array.
    pub struct Wq => wq: 0x600 bits {
        /// See [`wq_type`](mod@wq_type).
        0x000 wq_type: 4,
        0x004 wq_signature: 1,
        0x005 end_padding_mode: 2,
        0x007 cd_slave: 1,
        0x020 hds_skip_first_sge: 1,
        0x021 log2_hds_buf_size: 3,
        /// Offset of the queue in its first page, in 64ths of a page (5 bits: 0–31).
        0x02b page_offset: 5,
        /// Limit watermark: the limit event fires when fewer WQEs than this remain.
        0x030 lwm: 16,
        0x048 pd: 24,
        0x068 uar_page: 24,
        /// Doorbell record address.
        0x080 dbr_addr: 64,
        0x0c0 hw_counter: 32,
        0x0e0 sw_counter: 32,
        /// log2 of the WQE stride in bytes.
        0x10c log_wq_stride: 4,
        /// log2 of the page size relative to 4 KiB.
        0x113 log_wq_pg_sz: 5,
        /// log2 of the number of WQEs.
        0x11b log_wq_sz: 5,
        0x120 dbr_umem_valid: 1,
        0x121 wq_umem_valid: 1,
        0x123 log_hairpin_num_packets: 5,
        0x12b log_hairpin_data_sz: 5,
        0x134 log_wqe_num_of_strides: 4,
        0x138 two_byte_shift_en: 1,
        0x13d log_wqe_stride_size: 3,
        0x140 dbr_umem_id: 32,
        0x160 wq_umem_id: 32,
        0x180 wq_umem_offset: 64,
        0x1c0 headers_mkey: 32,
    }
}

/// `wq.wq_type` values (`MLX5_WQ_WQ_TYPE_*`).
pub mod wq_type {
    /// WQEs linked by their next-WQE index (what SRQs and RMPs use).
    pub const LINKED_LIST: u8 = 0x0;
    /// A ring.
    pub const CYCLIC: u8 = 0x1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, ViewMut};

    #[test]
    fn golden_wq() {
        // mlx5_ifc `wq`: page_offset DW1 [20:16], lwm DW1 [15:0], pd DW2 [23:0], dbr_addr at
        // byte 0x10, log_wq_stride DW8 [19:16], log_wq_pg_sz [12:8], log_wq_sz [4:0]; 0xc0 bytes.
        let mut b = [0x5au8; 0xc0];
        ViewMut::<Wq>::zeroed(&mut b)
            .unwrap()
            .set(wq::wq_type, wq_type::CYCLIC)
            .set(wq::page_offset, 0x1fu8)
            .set(wq::lwm, 0x1234u16)
            .set(wq::pd, 0xab_cdefu32)
            .set(wq::dbr_addr, 0x1_2345_6788u64)
            .set(wq::log_wq_stride, 5u8)
            .set(wq::log_wq_pg_sz, 3u8)
            .set(wq::log_wq_sz, 7u8);
        let mut want = [0u8; 0xc0];
        want[0] = 0x10;
        want[4..8].copy_from_slice(&[0x00, 0x1f, 0x12, 0x34]);
        want[8..12].copy_from_slice(&[0, 0xab, 0xcd, 0xef]);
        want[0x10..0x18].copy_from_slice(&[0, 0, 0, 1, 0x23, 0x45, 0x67, 0x88]);
        want[0x20..0x24].copy_from_slice(&[0x00, 0x05, 0x03, 0x07]);
        assert_eq!(b, want);
        assert_eq!(Wq::BYTES, 0xc0);
    }
}
