//! ALLOC_UAR / DEALLOC_UAR and the UAR page layout (mlx5-reference 06 §2).

crate::ifc! {
    /// ALLOC_UAR input.
    pub struct AllocUarIn => alloc_uar_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
    }
    /// ALLOC_UAR output.
    pub struct AllocUarOut => alloc_uar_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x48 uar: 24,
    }
    /// DEALLOC_UAR input.
    pub struct DeallocUarIn => dealloc_uar_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 uar: 24,
    }
    /// DEALLOC_UAR output.
    pub struct DeallocUarOut => dealloc_uar_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
}

/// Size of a UAR page; UAR n is at BAR0 + n × this.
pub const UAR_PAGE_SIZE: usize = 4096;
/// Offsets inside a UAR page.
pub mod uar_offset {
    /// 64-bit CQ arm doorbell (`MLX5_CQ_DOORBELL`).
    pub const CQ_DOORBELL: usize = 0x20;
    /// EQ doorbell: update consumer index and arm (`MLX5_EQ_DOORBEL_OFFSET`).
    pub const EQ_DOORBELL_ARM: usize = 0x40;
    /// EQ doorbell: update consumer index only.
    pub const EQ_DOORBELL_UPDATE: usize = 0x48;
    /// First BlueFlame register (`MLX5_BF_OFFSET`).
    pub const BF: usize = 0x800;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::View;

    #[test]
    fn golden_alloc_uar_out() {
        // uar is the low 24 bits of the dword at byte 8 (06 §2).
        let b = [0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0x00, 0x00, 0x07, 0, 0, 0, 0];
        assert_eq!(
            View::<AllocUarOut>::new_checked(&b)
                .unwrap()
                .get(alloc_uar_out::uar),
            7
        );
    }
}
