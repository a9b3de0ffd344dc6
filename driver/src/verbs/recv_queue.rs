//! A QP's own receive queue (rdma-core's `mlx5_wq` for the RQ): its size, its stride and the
//! producer counter. It sits at the start of the QP's work buffer; `post.rs` writes its WQEs.

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
