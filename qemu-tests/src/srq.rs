//! Shared receive queues in the model — SRQs, XRC SRQs and RMPs, one number space as in Linux
//! mlx5_ib's single SRQ table — and XRC domains (Linux 6.12 drivers/infiniband/hw/mlx5/
//! srq_cmd.c, srq.c; include/linux/mlx5/mlx5_ifc.h `srqc`, `xrc_srqc`, `rmpc`, `wq`).
//!
//! A receive on a QP whose `rq_type` is SRQ takes the next WQE of its queue
//! (`responder.rs`): the WQEs form a linked list (rdma-core 56 providers/mlx5/srq.c), the
//! device keeps its own head, starting at WQE 0, and follows each WQE's `next_wqe_index`.

use crate::page_list::{buffer_iova, page_offset_bytes};

/// Which command created a shared receive queue (and so which commands query, arm and destroy
/// it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrqKind {
    /// CREATE_SRQ (`srqc`).
    Srq,
    /// CREATE_XRC_SRQ (`xrc_srqc`).
    XrcSrq,
    /// CREATE_RMP (`rmpc`), what mlx5_core uses for basic SRQs once ISSI is 1.
    Rmp,
}

/// One shared receive queue of any kind.
#[derive(Clone, Debug)]
pub struct Srq {
    /// Number, unique across SRQs, XRC SRQs and RMPs.
    pub srqn: u32,
    /// The creating command.
    pub kind: SrqKind,
    /// Working (false after an error).
    pub good: bool,
    /// Protection domain of the WQEs' scatter entries.
    pub pd: u32,
    /// XRC domain (XRC SRQs; an SRQ whose context names one).
    pub xrcd: Option<u32>,
    /// CQ that receives from this queue complete into (XRC SRQs; an SRQ whose context names
    /// one).
    pub cqn: Option<u32>,
    /// `xrc_srqc.user_index`, reported in CQEs of receives from an XRC SRQ.
    pub user_index: u32,
    /// log2 of the number of WQEs.
    pub log_size: u8,
    /// log2 of the WQE stride in bytes.
    pub wqe_shift: u8,
    /// `wq.wq_type` of an RMP (linked list or cyclic); 0, linked list, for the others.
    pub wq_type: u8,
    /// WQE signatures enabled.
    pub wq_signature: bool,
    /// Buffer pages.
    pub pas: Vec<u64>,
    /// Bytes per buffer page (`4096 << log_page_size`).
    pub page_size: u64,
    /// `page_offset` as the context holds it: 64ths of a page.
    pub page_offset: u8,
    /// Device address of WQE 0: `pas[0]` plus `page_offset` 64ths of a page.
    pub start: u64,
    /// Doorbell record address (the driver's WQE counter, one big-endian dword).
    pub dbr: u64,
    /// Limit watermark; not 0: armed (ARM_RQ, ARM_XRC_SRQ, MODIFY_RMP), the limit event fires
    /// once when fewer WQEs than this are left, and disarms it.
    pub lwm: u16,
    /// Index of the WQE the device takes next: 0 at creation, then the `next_wqe_index` of
    /// each WQE taken.
    pub hw_head: u16,
    /// WQEs taken so far (16 bits, wrapping), against the doorbell record's counter.
    pub taken: u16,
    /// QPs whose receives come from this queue.
    pub qp_users: u32,
}

impl Srq {
    /// Number of WQEs.
    pub fn nent(&self) -> u32 {
        1 << self.log_size
    }

    /// Byte offset of WQE 0 in the first page (`page_offset` is in 64ths of a page: Linux 6.12
    /// mlx5_ib.h `__mlx5_umem_find_best_quantized_pgoff` with scale 64, srq_cmd.c
    /// `get_pas_size`).
    pub fn offset_bytes(&self) -> u64 {
        page_offset_bytes(self.page_size, u64::from(self.page_offset))
    }

    /// Device address of WQE `n` (taken modulo the queue size).
    pub fn wqe_iova(&self, n: u32) -> u64 {
        let off = u64::from(n & (self.nent() - 1)) << self.wqe_shift;
        buffer_iova(&self.pas, self.page_size, self.offset_bytes(), off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn srq(page_size: u64, page_offset: u8) -> Srq {
        Srq {
            srqn: 1,
            kind: SrqKind::Rmp,
            good: true,
            pd: 1,
            xrcd: None,
            cqn: None,
            user_index: 0,
            log_size: 6,
            wqe_shift: 6,
            wq_type: 0,
            wq_signature: false,
            pas: vec![0x10_0000, 0x30_0000],
            page_size,
            page_offset,
            start: 0,
            dbr: 0,
            lwm: 0,
            hw_head: 0,
            taken: 0,
            qp_users: 0,
        }
    }

    #[test]
    fn wqe_addresses_start_page_offset_64ths_into_the_first_page() {
        // Linux 6.12 srq_cmd.c get_pas_size: po_quanta = page_size / 64, the queue starts
        // page_offset * po_quanta bytes into pas[0].
        let s = srq(4096, 32);
        assert_eq!(s.offset_bytes(), 2048);
        assert_eq!(s.wqe_iova(0), 0x10_0800);
        assert_eq!(s.wqe_iova(31), 0x10_0800 + 31 * 64);
        // WQE 32 is the first past the first page: the second page's start.
        assert_eq!(s.wqe_iova(32), 0x30_0000);
        assert_eq!(s.wqe_iova(64), 0x10_0800);
        let s = srq(8192, 1);
        assert_eq!(s.wqe_iova(0), 0x10_0000 + 128);
    }
}
