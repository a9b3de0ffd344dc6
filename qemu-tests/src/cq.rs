//! Completion queues in the model: what firmware keeps of a CQ (its buffer, doorbell record,
//! producer index and arm state) and where each CQE goes (mlx5-reference 04 §5). The ring at
//! work, CQEs written and the arm doorbell, is `cq_ring.rs`.

/// Size of a CQE the model writes.
pub const CQE_BYTES: u64 = 64;

/// How a CQ is armed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Not armed.
    No,
    /// The next CQE raises a completion event.
    Any,
    /// The next solicited CQE raises a completion event.
    Solicited,
}

/// One completion queue.
#[derive(Clone, Debug)]
pub struct Cq {
    /// CQ number.
    pub cqn: u32,
    /// log2 of the number of CQEs.
    pub log_size: u8,
    /// UAR whose doorbell arms it.
    pub uar: u32,
    /// EQ for completion events.
    pub eqn: u8,
    /// Buffer pages.
    pub pas: Vec<u64>,
    /// Buffer page size.
    pub page_size: u64,
    /// Where the CQE buffer starts in its first page, in bytes (`cqc.page_offset`, see
    /// [`crate::page_list`]).
    pub page_offset: u64,
    /// Doorbell record address.
    pub dbr: u64,
    /// CQEs written so far.
    pub producer: u32,
    /// Arm state.
    pub arm: Arm,
    /// Overrun ignore.
    pub oi: bool,
    /// A CQE was dropped because the queue was full: the CQ is in error and takes no more
    /// completions until it is destroyed.
    pub overrun: bool,
    /// QPs and XRC SRQs that complete into this CQ.
    pub users: u32,
}

impl Cq {
    /// Number of CQEs.
    pub(crate) fn nent(&self) -> u32 {
        1 << self.log_size
    }

    /// Device address of CQE `index` (taken modulo the queue size).
    pub(crate) fn cqe_iova(&self, index: u32) -> u64 {
        let off = u64::from(index & (self.nent() - 1)) * CQE_BYTES;
        crate::page_list::buffer_iova(&self.pas, self.page_size, self.page_offset, off)
    }
}
