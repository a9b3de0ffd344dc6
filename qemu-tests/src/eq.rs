//! Event queues in the model: what firmware keeps of an EQ (its buffer, subscribed event
//! types, producer and consumer indexes, arm state), where each EQE goes, and the data of
//! QP/SRQ events (mlx5-reference 04 §2–4). The ring at work, EQEs written and the doorbells,
//! is `eq_ring.rs`.

use bareverbs_firmware_cmd::ifc::{eqe_qp_srq, EqeQpSrq, EQE_OWNER_INIT_VAL};
use bareverbs_firmware_cmd::layout::ViewMut;

/// Size of an EQE.
pub const EQE_BYTES: u64 = 64;

/// One event queue.
#[derive(Clone, Debug)]
pub struct Eq {
    /// EQ number.
    pub eqn: u8,
    /// log2 of the number of entries.
    pub log_size: u8,
    /// UAR whose doorbells drive this EQ.
    pub uar: u32,
    /// MSI-X vector.
    pub intr: u16,
    /// Buffer page addresses.
    pub pas: Vec<u64>,
    /// Buffer page size in bytes.
    pub page_size: u64,
    /// Where the EQE buffer starts in its first page, in bytes (`eqc.page_offset`, see
    /// [`crate::page_list`]).
    pub page_offset: u64,
    /// Subscribed event types (bit n of word k = type 64k + n).
    pub mask: [u64; 4],
    /// EQEs written so far.
    pub producer: u32,
    /// Consumer index last written by the driver (24 bits).
    pub consumer: u32,
    /// An interrupt fires on the next EQE.
    pub armed: bool,
    /// An EQE was dropped because the queue was full.
    pub overrun: bool,
}

impl Eq {
    /// Number of EQEs.
    pub(crate) fn nent(&self) -> u32 {
        1 << self.log_size
    }

    pub(crate) fn subscribed(&self, ty: u8) -> bool {
        self.mask[usize::from(ty / 64)] & (1 << (ty % 64)) != 0
    }

    /// Device address of EQE `index` (taken modulo the queue size).
    pub(crate) fn eqe_iova(&self, index: u32) -> u64 {
        let off = u64::from(index & (self.nent() - 1)) * EQE_BYTES;
        crate::page_list::buffer_iova(&self.pas, self.page_size, self.page_offset, off)
    }

    /// EQEs written that the driver has not consumed (by its last doorbell).
    pub(crate) fn unconsumed(&self) -> u32 {
        (self.producer.wrapping_sub(self.consumer)) & 0x00ff_ffff
    }
}

/// The data of a QP/SRQ asynchronous event EQE (`eqe_qp_srq`): resource type and number.
pub(crate) fn qp_srq_event_data(ty: u8, n: u32) -> [u8; 28] {
    let mut d = [0u8; 28];
    if let Ok(mut v) = ViewMut::<EqeQpSrq>::new_checked(&mut d[..]) {
        v.set(eqe_qp_srq::r#type, ty).set(eqe_qp_srq::qp_srq_n, n);
    }
    d
}

/// Owner value software writes into a fresh EQ buffer.
pub const OWNER_INIT: u8 = EQE_OWNER_INIT_VAL;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_srq_event_data_carries_type_and_number() {
        // Linux device.h `struct mlx5_eqe_qp_srq`: __be32 reserved1[5], u8 type, reserved2[3],
        // __be32 qp_srq_n (srq_cmd.c `srq_event_notifier` masks it with 0xffffff).
        let d = qp_srq_event_data(1, 0x12_3456);
        let mut want = [0u8; 28];
        want[20] = 1;
        want[25..28].copy_from_slice(&[0x12, 0x34, 0x56]);
        assert_eq!(d, want);
    }
}
